//! JSON documents (the RedisJSON data type): the value tree, its parser and printer, and
//! JSONPath selection down to concrete locations that commands read or change.
//!
//! Objects keep their members in insertion order and remove a member by moving the last one
//! into its place, as RedisJSON's object type does, so key order after JSON.DEL matches it.
//! Integers and floats stay distinct (`3` and `3.0` are different values, as in RedisJSON).

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::cmp::Ordering;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer above `i64::MAX` (JSON allows it; it still prints and types as an integer).
    UInt(u64),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

/// One step of a concrete location: an object member or an array position.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    Key(String),
    Idx(usize),
}

pub use crate::config::JSON_DEPTH_MAX as MAX_DEPTH;

/// RedisJSON's error for a value or a resulting document nested past [`MAX_DEPTH`].
pub const RECURSION_LIMIT: &str = "ERR recursion limit exceeded";

impl Json {
    /// Parses one JSON text; the error is serde_json's own wording.
    pub fn parse(text: &str) -> Result<Json, String> {
        let mut de = serde_json::Deserializer::from_str(text);
        let v = de.deserialize_any(JsonVisitor).map_err(|e| e.to_string())?;
        de.end().map_err(|e| e.to_string())?;
        if v.depth() > MAX_DEPTH {
            return Err("recursion limit exceeded".into());
        }
        Ok(v)
    }

    /// Levels of arrays and objects: 0 for a scalar, 1 for `[]`.
    pub fn depth(&self) -> usize {
        match self {
            Json::Arr(a) => 1 + a.iter().map(Json::depth).max().unwrap_or(0),
            Json::Obj(o) => 1 + o.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// The name JSON.TYPE answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Int(_) | Json::UInt(_) => "integer",
            Json::Float(_) => "number",
            Json::Str(_) => "string",
            Json::Arr(_) => "array",
            Json::Obj(_) => "object",
        }
    }

    pub fn is_number(&self) -> bool {
        matches!(self, Json::Int(_) | Json::UInt(_) | Json::Float(_))
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Int(i) => Some(*i as f64),
            Json::UInt(u) => Some(*u as f64),
            Json::Float(f) => Some(*f),
            _ => None,
        }
    }

    pub fn member(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(o) => o.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key` in an object: replaced in place when present, appended otherwise.
    pub fn set_member(members: &mut Vec<(String, Json)>, key: &str, value: Json) {
        match members.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => members.push((key.to_string(), value)),
        }
    }

    /// Removes `key` from an object the way RedisJSON does: the last member takes its place.
    pub fn remove_member(members: &mut Vec<(String, Json)>, key: &str) -> bool {
        match members.iter().position(|(k, _)| k == key) {
            Some(i) => {
                members.swap_remove(i);
                true
            }
            None => false,
        }
    }

    pub fn get(&self, path: &[Step]) -> Option<&Json> {
        let mut cur = self;
        for s in path {
            cur = match (cur, s) {
                (Json::Obj(o), Step::Key(k)) => o.iter().find(|(n, _)| n == k).map(|(_, v)| v)?,
                (Json::Arr(a), Step::Idx(i)) => a.get(*i)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    pub fn get_mut(&mut self, path: &[Step]) -> Option<&mut Json> {
        let mut cur = self;
        for s in path {
            cur = match (cur, s) {
                (Json::Obj(o), Step::Key(k)) => {
                    o.iter_mut().find(|(n, _)| n == k).map(|(_, v)| v)?
                }
                (Json::Arr(a), Step::Idx(i)) => a.get_mut(*i)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Removes the value at `path` (not the root); false when it is not there.
    pub fn delete(&mut self, path: &[Step]) -> bool {
        let Some((last, parent)) = path.split_last() else {
            return false;
        };
        match (self.get_mut(parent), last) {
            (Some(Json::Obj(o)), Step::Key(k)) => Json::remove_member(o, k),
            (Some(Json::Arr(a)), Step::Idx(i)) if *i < a.len() => {
                a.remove(*i);
                true
            }
            _ => false,
        }
    }

    /// Compact JSON text, as RedisJSON prints it (serde_json's escaping and number forms).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, &Format::default(), 0);
        out
    }

    pub fn to_text_with(&self, f: &Format) -> String {
        let mut out = String::new();
        self.write(&mut out, f, 0);
        out
    }

    fn write(&self, out: &mut String, f: &Format, level: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => out.push_str(&i.to_string()),
            Json::UInt(u) => out.push_str(&u.to_string()),
            Json::Float(x) => out.push_str(&float_text(*x)),
            Json::Str(s) => write_str(out, s),
            Json::Arr(a) => write_array(out, a.iter(), f, level),
            Json::Obj(o) => {
                out.push('{');
                for (i, (k, v)) in o.iter().enumerate() {
                    f.item_start(out, i == 0, level + 1);
                    write_str(out, k);
                    out.push(':');
                    out.push_str(&f.space);
                    v.write(out, f, level + 1);
                }
                f.close(out, !o.is_empty(), level);
                out.push('}');
            }
        }
    }

    /// RFC 7396 merge of `patch` into `self` (a null member in the patch removes that member).
    pub fn merge(&mut self, patch: &Json) {
        let Json::Obj(pm) = patch else {
            *self = patch.clone();
            return;
        };
        if !matches!(self, Json::Obj(_)) {
            *self = Json::Obj(Vec::new());
        }
        if let Json::Obj(members) = self {
            for (k, pv) in pm {
                if *pv == Json::Null {
                    Json::remove_member(members, k);
                } else if let Some((_, cur)) = members.iter_mut().find(|(n, _)| n == k) {
                    cur.merge(pv);
                } else {
                    let mut fresh = Json::Null;
                    fresh.merge(pv);
                    members.push((k.clone(), fresh));
                }
            }
        }
    }

    /// A rough size in bytes, for MEMORY USAGE.
    pub fn mem_bytes(&self) -> usize {
        match self {
            Json::Str(s) => 16 + s.len(),
            Json::Arr(a) => 16 + a.iter().map(Json::mem_bytes).sum::<usize>(),
            Json::Obj(o) => {
                16 + o
                    .iter()
                    .map(|(k, v)| 16 + k.len() + v.mem_bytes())
                    .sum::<usize>()
            }
            _ => 8,
        }
    }
}

/// The JSON text of an array holding `items`, printed from the document without copying
/// them (what a JSONPath reply is).
pub fn list_text(items: &[&Json], f: &Format) -> String {
    let mut out = String::new();
    write_array(&mut out, items.iter().copied(), f, 0);
    out
}

fn write_array<'a>(
    out: &mut String,
    items: impl ExactSizeIterator<Item = &'a Json>,
    f: &Format,
    level: usize,
) {
    out.push('[');
    let any = items.len() > 0;
    for (i, v) in items.enumerate() {
        f.item_start(out, i == 0, level + 1);
        v.write(out, f, level + 1);
    }
    f.close(out, any, level);
    out.push(']');
}

/// A float as RedisJSON prints it (serde_json with `ryu`): the shortest digits that read back
/// to the same value, `.0` on whole numbers below 1e16, and an exponent without `+` outside
/// 1e-5..1e16 (`5.960464477539062e16`, `1e-7`).
pub fn float_text(x: f64) -> String {
    if !x.is_finite() {
        return "null".into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "d.ddde<exp>".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i64 = exp.parse().unwrap_or(0);
    let len = digits.len() as i64;
    // The value is 0.digits * 10^kk.
    let kk = exp + 1;
    let k = kk - len;
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    if 0 <= k && kk <= 16 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', k as usize));
        out.push_str(".0");
    } else if 0 < kk && kk <= 16 {
        out.push_str(&digits[..kk as usize]);
        out.push('.');
        out.push_str(&digits[kk as usize..]);
    } else if -5 < kk && kk <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-kk) as usize));
        out.push_str(&digits);
    } else if len == 1 {
        out.push_str(&format!("{digits}e{}", kk - 1));
    } else {
        out.push_str(&format!("{}.{}e{}", &digits[..1], &digits[1..], kk - 1));
    }
    out
}

fn write_str(out: &mut String, s: &str) {
    match serde_json::to_string(s) {
        Ok(t) => out.push_str(&t),
        Err(_) => out.push_str("\"\""),
    }
}

/// JSON.GET's INDENT, NEWLINE and SPACE strings, used verbatim.
#[derive(Debug, Default, Clone)]
pub struct Format {
    pub indent: String,
    pub newline: String,
    pub space: String,
}

impl Format {
    fn item_start(&self, out: &mut String, first: bool, level: usize) {
        if !first {
            out.push(',');
        }
        out.push_str(&self.newline);
        for _ in 0..level {
            out.push_str(&self.indent);
        }
    }

    fn close(&self, out: &mut String, had_items: bool, level: usize) {
        if had_items {
            out.push_str(&self.newline);
            for _ in 0..level {
                out.push_str(&self.indent);
            }
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Json, E> {
        Ok(Json::Int(i))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Json, E> {
        Ok(i64::try_from(u).map(Json::Int).unwrap_or(Json::UInt(u)))
    }
    fn visit_f64<E>(self, x: f64) -> Result<Json, E> {
        Ok(Json::Float(x))
    }
    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::Str(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::Str(s))
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element_seed(JsonSeed)? {
            v.push(x);
        }
        Ok(Json::Arr(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(JsonSeed)?;
            Json::set_member(&mut members, &k, v);
        }
        Ok(Json::Obj(members))
    }
}

struct JsonSeed;

impl<'de> de::DeserializeSeed<'de> for JsonSeed {
    type Value = Json;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

// ---------------------------------------------------------------------------------------------
// JSONPath

/// A compiled path. `legacy` is RedisJSON's older dot syntax (`.a.b`, `a[0]`, `.`): commands
/// answer with one value for it instead of an array of every match.
#[derive(Debug, Clone)]
pub struct Path {
    pub legacy: bool,
    /// The text as given (JSON.GET with several paths keys its answer by it).
    pub original: String,
    /// The `$` form, used in error texts.
    pub normalized: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone)]
struct Segment {
    descend: bool,
    sel: Selector,
}

#[derive(Debug, Clone)]
enum Selector {
    Name(String),
    Index(i64),
    Wild,
    Union(Vec<Selector>),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    Filter(Box<Expr>),
}

#[derive(Debug, Clone)]
enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Exists(Operand),
    Cmp(Operand, CmpOp, Operand),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone)]
enum Operand {
    /// `@...` (relative to the candidate) or `$...` (from the document root).
    Path {
        root: bool,
        segments: Vec<Segment>,
    },
    Lit(Json),
}

impl Path {
    /// Compiles `text`; the error is the text of the reply.
    pub fn compile(text: &str) -> Result<Path, String> {
        let legacy = !text.starts_with('$');
        let normalized = if !legacy {
            text.to_string()
        } else if text == "." || text.is_empty() {
            "$".to_string()
        } else if text.starts_with('.') || text.starts_with('[') {
            format!("${text}")
        } else {
            format!("$.{text}")
        };
        let chars: Vec<char> = normalized.chars().collect();
        let mut p = Parser {
            s: &chars,
            i: 1,
            depth: 0,
        };
        let segments = p.segments(false).map_err(|why| {
            format!(
                "ERR JSON Path error: path error: {why} at position {} in '{text}'",
                p.i
            )
        })?;
        if p.i != chars.len() {
            return Err(format!(
                "ERR JSON Path error: path error: unexpected '{}' at position {} in '{text}'",
                chars[p.i], p.i
            ));
        }
        Ok(Path {
            legacy,
            original: text.to_string(),
            normalized,
            segments,
        })
    }

    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// Only plain names and indexes: a path JSON.SET can create a member at.
    fn is_static(&self) -> bool {
        self.segments
            .iter()
            .all(|s| !s.descend && matches!(s.sel, Selector::Name(_) | Selector::Index(_)))
    }

    /// Every location the path selects in `doc`, in the hosted service's match order (see
    /// `descendants`).
    pub fn select(&self, doc: &Json) -> Vec<Vec<Step>> {
        select_from(doc, doc, Vec::new(), &self.segments)
    }

    /// The same locations in the order tidepool selected them before it followed the hosted
    /// service's (recursive descent parents first): a log written before replays with it
    /// where the order changes the result (one match inside another, for SET and MERGE).
    pub fn select_parents_first(&self, doc: &Json) -> Vec<Vec<Step>> {
        select_in_order(doc, doc, Vec::new(), &self.segments, true)
    }

    /// Where JSON.SET would add a member when nothing matches: the parents (existing objects
    /// the path's prefix selects) and the new member's name.
    pub fn creation_sites(&self, doc: &Json) -> Result<(Vec<Vec<Step>>, String), String> {
        if !self.is_static() {
            return Err("ERR Err wrong static path".into());
        }
        let Some((last, parent)) = self.segments.split_last() else {
            return Err("ERR Err path must end with object key to set".into());
        };
        match &last.sel {
            Selector::Name(n) => Ok((select_from(doc, doc, Vec::new(), parent), n.clone())),
            _ => Err("ERR array index out of range".into()),
        }
    }
}

fn select_from(root: &Json, doc: &Json, base: Vec<Step>, segs: &[Segment]) -> Vec<Vec<Step>> {
    select_in_order(root, doc, base, segs, false)
}

fn select_in_order(
    root: &Json,
    doc: &Json,
    base: Vec<Step>,
    segs: &[Segment],
    parents_first: bool,
) -> Vec<Vec<Step>> {
    let mut cur = vec![base];
    for seg in segs {
        let mut next = Vec::new();
        for p in cur {
            let Some(node) = doc.get(&p) else { continue };
            if seg.descend {
                let mut all = Vec::new();
                descendants(node, p, &mut all, parents_first);
                for d in all {
                    if let Some(n) = doc.get(&d) {
                        apply(root, n, &d, &seg.sel, &mut next);
                    }
                }
            } else {
                apply(root, node, &p, &seg.sel, &mut next);
            }
        }
        cur = next;
    }
    cur
}

/// `node` and everything below it, in the hosted service's order: every node after all the
/// nodes inside it (post-order), members and elements in document order. So `$..b` on
/// `{"b":3,"nested":{"b":null}}` answers `[null,3]`: what a member's value holds comes before
/// the match at the member's own level (the SDKs' test suites assert this order; RedisJSON
/// lists parents first). Depth is bounded by the document's own (`MAX_DEPTH`).
fn descendants(node: &Json, at: Vec<Step>, out: &mut Vec<Vec<Step>>, parents_first: bool) {
    if parents_first {
        out.push(at.clone());
    }
    match node {
        Json::Arr(a) => {
            for (i, v) in a.iter().enumerate() {
                let mut p = at.clone();
                p.push(Step::Idx(i));
                descendants(v, p, out, parents_first);
            }
        }
        Json::Obj(o) => {
            for (k, v) in o {
                let mut p = at.clone();
                p.push(Step::Key(k.clone()));
                descendants(v, p, out, parents_first);
            }
        }
        _ => {}
    }
    if !parents_first {
        out.push(at);
    }
}

fn child(at: &[Step], s: Step) -> Vec<Step> {
    let mut p = at.to_vec();
    p.push(s);
    p
}

fn apply(root: &Json, node: &Json, at: &[Step], sel: &Selector, out: &mut Vec<Vec<Step>>) {
    match sel {
        Selector::Name(n) => {
            if node.member(n).is_some() {
                out.push(child(at, Step::Key(n.clone())));
            }
        }
        Selector::Index(i) => {
            if let Json::Arr(a) = node {
                let len = a.len() as i64;
                let i = if *i < 0 { len + i } else { *i };
                if (0..len).contains(&i) {
                    out.push(child(at, Step::Idx(i as usize)));
                }
            }
        }
        Selector::Wild => match node {
            Json::Arr(a) => out.extend((0..a.len()).map(|i| child(at, Step::Idx(i)))),
            Json::Obj(o) => out.extend(o.iter().map(|(k, _)| child(at, Step::Key(k.clone())))),
            _ => {}
        },
        Selector::Union(items) => {
            for s in items {
                apply(root, node, at, s, out);
            }
        }
        Selector::Slice(start, end, step) => {
            if let Json::Arr(a) = node {
                let len = a.len() as i64;
                let step = step.unwrap_or(1);
                if step <= 0 {
                    return;
                }
                let norm = |x: i64| if x < 0 { (len + x).max(0) } else { x.min(len) };
                let (s, e) = (norm(start.unwrap_or(0)), norm(end.unwrap_or(len)));
                let mut i = s;
                while i < e {
                    out.push(child(at, Step::Idx(i as usize)));
                    i += step;
                }
            }
        }
        Selector::Filter(expr) => match node {
            Json::Arr(a) => {
                for (i, v) in a.iter().enumerate() {
                    if eval(root, v, expr) {
                        out.push(child(at, Step::Idx(i)));
                    }
                }
            }
            Json::Obj(o) => {
                for (k, v) in o {
                    if eval(root, v, expr) {
                        out.push(child(at, Step::Key(k.clone())));
                    }
                }
            }
            _ => {}
        },
    }
}

fn operand_values<'a>(root: &'a Json, cur: &'a Json, o: &'a Operand) -> Vec<&'a Json> {
    match o {
        Operand::Lit(v) => vec![v],
        Operand::Path {
            root: from_root,
            segments,
        } => {
            let base = if *from_root { root } else { cur };
            select_from(root, base, Vec::new(), segments)
                .into_iter()
                .filter_map(|p| base.get(&p))
                .collect()
        }
    }
}

fn eval(root: &Json, cur: &Json, e: &Expr) -> bool {
    match e {
        Expr::Or(a, b) => eval(root, cur, a) || eval(root, cur, b),
        Expr::And(a, b) => eval(root, cur, a) && eval(root, cur, b),
        Expr::Not(a) => !eval(root, cur, a),
        Expr::Exists(o) => !operand_values(root, cur, o).is_empty(),
        Expr::Cmp(l, op, r) => {
            let (ls, rs) = (operand_values(root, cur, l), operand_values(root, cur, r));
            ls.iter().any(|a| rs.iter().any(|b| compare(a, *op, b)))
        }
    }
}

fn compare(a: &Json, op: CmpOp, b: &Json) -> bool {
    let ord = match (a, b) {
        (Json::Str(x), Json::Str(y)) => Some(x.cmp(y)),
        (Json::Bool(x), Json::Bool(y)) => Some(x.cmp(y)),
        (Json::Null, Json::Null) => Some(Ordering::Equal),
        _ if a.is_number() && b.is_number() => match (a, b) {
            (Json::Int(x), Json::Int(y)) => Some(x.cmp(y)),
            _ => a
                .as_f64()
                .zip(b.as_f64())
                .and_then(|(x, y)| x.partial_cmp(&y)),
        },
        _ => None,
    };
    match (ord, op) {
        (None, CmpOp::Ne) => true,
        (None, _) => false,
        (Some(o), CmpOp::Eq) => o == Ordering::Equal,
        (Some(o), CmpOp::Ne) => o != Ordering::Equal,
        (Some(o), CmpOp::Lt) => o == Ordering::Less,
        (Some(o), CmpOp::Le) => o != Ordering::Greater,
        (Some(o), CmpOp::Gt) => o == Ordering::Greater,
        (Some(o), CmpOp::Ge) => o != Ordering::Less,
    }
}

struct Parser<'a> {
    s: &'a [char],
    i: usize,
    /// Nesting of brackets and filter terms, bounded so no path can exhaust the stack.
    depth: usize,
}

/// How deep brackets, filters and `!`/parentheses may nest in one path.
use crate::config::JSON_PATH_NESTING_MAX as MAX_PATH_NESTING;

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    fn peek_at(&self, k: usize) -> Option<char> {
        self.s.get(self.i + k).copied()
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.i += 1;
        }
    }

    /// Segments until the end, or (inside a filter) until a character that ends an operand.
    fn segments(&mut self, in_filter: bool) -> Result<Vec<Segment>, String> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Ok(out),
                Some('.') => {
                    self.i += 1;
                    let descend = self.eat('.');
                    let sel = match self.peek() {
                        Some('*') => {
                            self.i += 1;
                            Selector::Wild
                        }
                        Some('[') => {
                            self.i += 1;
                            self.bracket()?
                        }
                        _ => Selector::Name(self.name()?),
                    };
                    out.push(Segment { descend, sel });
                }
                Some('[') => {
                    self.i += 1;
                    out.push(Segment {
                        descend: false,
                        sel: self.bracket()?,
                    });
                }
                Some(_) if in_filter => return Ok(out),
                Some(c) => return Err(format!("unexpected '{c}'")),
            }
        }
    }

    fn name(&mut self) -> Result<String, String> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c == '.'
                || c == '['
                || c == ']'
                || c == '('
                || c == ')'
                || c == ','
                || c == '\''
                || c == '"'
                || c == '*'
                || c.is_whitespace()
                || "=!<>&|".contains(c)
            {
                break;
            }
            self.i += 1;
        }
        if self.i == start {
            return Err("expected a member name".into());
        }
        Ok(self.s[start..self.i].iter().collect())
    }

    /// After `[`: a quoted name, a number, a slice, `*`, a union of those, or `?(filter)`;
    /// consumes the closing `]`.
    /// Runs `f` one nesting level deeper, refusing paths that nest past the limit.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        if self.depth >= MAX_PATH_NESTING {
            return Err("the path nests too deeply".into());
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn bracket(&mut self) -> Result<Selector, String> {
        self.nested(Self::bracket_inner)
    }

    fn bracket_inner(&mut self) -> Result<Selector, String> {
        self.ws();
        let sel = if self.eat('*') {
            Selector::Wild
        } else if self.eat('?') {
            self.ws();
            if !self.eat('(') {
                return Err("expected '(' after '?'".into());
            }
            let e = self.or_expr()?;
            self.ws();
            if !self.eat(')') {
                return Err("expected ')' to close the filter".into());
            }
            Selector::Filter(Box::new(e))
        } else {
            let mut items = vec![self.bracket_item()?];
            loop {
                self.ws();
                if !self.eat(',') {
                    break;
                }
                self.ws();
                items.push(self.bracket_item()?);
            }
            if items.len() == 1 {
                items.remove(0)
            } else {
                if items.iter().any(|s| matches!(s, Selector::Slice(..))) {
                    return Err("a slice cannot be part of a union".into());
                }
                Selector::Union(items)
            }
        };
        self.ws();
        if !self.eat(']') {
            return Err("expected ']'".into());
        }
        Ok(sel)
    }

    fn bracket_item(&mut self) -> Result<Selector, String> {
        match self.peek() {
            Some('\'') | Some('"') => Ok(Selector::Name(self.quoted()?)),
            _ => {
                let start = self.int_opt()?;
                self.ws();
                if !self.eat(':') {
                    return start.map(Selector::Index).ok_or("expected an index".into());
                }
                self.ws();
                let end = self.int_opt()?;
                self.ws();
                let step = if self.eat(':') {
                    self.ws();
                    self.int_opt()?
                } else {
                    None
                };
                Ok(Selector::Slice(start, end, step))
            }
        }
    }

    fn int_opt(&mut self) -> Result<Option<i64>, String> {
        let start = self.i;
        if self.peek() == Some('-') {
            self.i += 1;
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let t: String = self.s[start..self.i].iter().collect();
        if t.is_empty() {
            return Ok(None);
        }
        t.parse().map(Some).map_err(|_| format!("bad index '{t}'"))
    }

    fn quoted(&mut self) -> Result<String, String> {
        let q = self.peek().ok_or("expected a quote")?;
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated string".into()),
                Some(c) if c == q => {
                    self.i += 1;
                    return Ok(out);
                }
                Some('\\') => {
                    self.i += 1;
                    let c = self.peek().ok_or("unterminated string")?;
                    self.i += 1;
                    out.push(match c {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                }
                Some(c) => {
                    self.i += 1;
                    out.push(c);
                }
            }
        }
    }

    fn or_expr(&mut self) -> Result<Expr, String> {
        let mut l = self.and_expr()?;
        loop {
            self.ws();
            if self.peek() == Some('|') && self.peek_at(1) == Some('|') {
                self.i += 2;
                let r = self.and_expr()?;
                l = Expr::Or(Box::new(l), Box::new(r));
            } else {
                return Ok(l);
            }
        }
    }

    fn and_expr(&mut self) -> Result<Expr, String> {
        let mut l = self.unary()?;
        loop {
            self.ws();
            if self.peek() == Some('&') && self.peek_at(1) == Some('&') {
                self.i += 2;
                let r = self.unary()?;
                l = Expr::And(Box::new(l), Box::new(r));
            } else {
                return Ok(l);
            }
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.nested(Self::unary_inner)
    }

    fn unary_inner(&mut self) -> Result<Expr, String> {
        self.ws();
        if self.peek() == Some('!') && self.peek_at(1) != Some('=') {
            self.i += 1;
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat('(') {
            let e = self.or_expr()?;
            self.ws();
            if !self.eat(')') {
                return Err("expected ')'".into());
            }
            return Ok(e);
        }
        let l = self.operand()?;
        self.ws();
        let op = match (self.peek(), self.peek_at(1)) {
            (Some('='), Some('=')) => Some((CmpOp::Eq, 2)),
            (Some('!'), Some('=')) => Some((CmpOp::Ne, 2)),
            (Some('<'), Some('=')) => Some((CmpOp::Le, 2)),
            (Some('>'), Some('=')) => Some((CmpOp::Ge, 2)),
            (Some('<'), _) => Some((CmpOp::Lt, 1)),
            (Some('>'), _) => Some((CmpOp::Gt, 1)),
            (Some('='), Some('~')) => {
                return Err("regular expressions (=~) are not supported".into())
            }
            _ => None,
        };
        match op {
            None => match l {
                Operand::Path { .. } => Ok(Expr::Exists(l)),
                Operand::Lit(_) => Err("a filter needs a comparison or a path".into()),
            },
            Some((op, n)) => {
                self.i += n;
                self.ws();
                let r = self.operand()?;
                Ok(Expr::Cmp(l, op, r))
            }
        }
    }

    fn operand(&mut self) -> Result<Operand, String> {
        self.ws();
        match self.peek() {
            Some('@') | Some('$') => {
                let root = self.peek() == Some('$');
                self.i += 1;
                Ok(Operand::Path {
                    root,
                    segments: self.segments(true)?,
                })
            }
            Some('\'') | Some('"') => Ok(Operand::Lit(Json::Str(self.quoted()?))),
            Some(_) => {
                let start = self.i;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                {
                    self.i += 1;
                }
                let t: String = self.s[start..self.i].iter().collect();
                Json::parse(&t)
                    .ok()
                    .filter(|v| !matches!(v, Json::Arr(_) | Json::Obj(_) | Json::Str(_)))
                    .map(Operand::Lit)
                    .ok_or(format!("bad literal '{t}'"))
            }
            None => Err("unexpected end of the filter".into()),
        }
    }
}

/// The order in which to change several locations so that no change moves a later one:
/// deeper first, and higher array positions before lower ones.
pub fn mutation_order(a: &[Step], b: &[Step]) -> Ordering {
    for (x, y) in a.iter().zip(b.iter()) {
        let o = match (x, y) {
            (Step::Key(p), Step::Key(q)) => p.cmp(q),
            (Step::Key(_), Step::Idx(_)) => Ordering::Less,
            (Step::Idx(_), Step::Key(_)) => Ordering::Greater,
            (Step::Idx(i), Step::Idx(j)) => j.cmp(i),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    b.len().cmp(&a.len())
}

/// Whether one of `found` lies inside another (then the order the changes are applied in
/// changes the result of a SET or MERGE).
pub fn has_nesting(found: &[Vec<Step>]) -> bool {
    let all: std::collections::HashSet<&[Step]> = found.iter().map(Vec::as_slice).collect();
    found
        .iter()
        .any(|p| (0..p.len()).any(|l| all.contains(&p[..l])))
}

/// How many of `found` (in match order) a deletion removes when it deletes them one by one in
/// that order: a match is counted unless it repeats one before it or lies inside one deleted
/// before it. The match order lists what lies inside a match first, so `$..a` on
/// `{"a":{"a":1}}` deletes the inner `a` and then the outer one: 2.
pub fn deleted_in_match_order(found: &[Vec<Step>]) -> usize {
    // A location's prefixes number at most MAX_DEPTH + 1, so this is linear in the matches.
    let mut gone: std::collections::HashSet<&[Step]> = std::collections::HashSet::new();
    let mut n = 0;
    for p in found {
        if (0..=p.len()).any(|l| gone.contains(&p[..l])) {
            continue;
        }
        gone.insert(p.as_slice());
        n += 1;
    }
    n
}

/// The locations to delete: in mutation order, without those inside another one.
pub fn deletion_targets(mut paths: Vec<Vec<Step>>) -> Vec<Vec<Step>> {
    paths.sort_by(|a, b| mutation_order(a, b));
    paths.dedup();
    let all = paths.clone();
    paths.retain(|p| !all.iter().any(|q| q.len() < p.len() && p.starts_with(q)));
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(t: &str) -> Json {
        Json::parse(t).expect("test JSON")
    }

    fn sel(d: &Json, p: &str) -> String {
        let path = Path::compile(p).expect("test path");
        let vals: Vec<Json> = path
            .select(d)
            .iter()
            .filter_map(|s| d.get(s).cloned())
            .collect();
        Json::Arr(vals).to_text()
    }

    #[test]
    fn parse_print_keeps_order_and_number_kinds() {
        let d = doc(r#"{"b":1,"a":[1.0,2,"x",null,true,1e3,18446744073709551615]}"#);
        assert_eq!(
            d.to_text(),
            r#"{"b":1,"a":[1.0,2,"x",null,true,1000.0,18446744073709551615]}"#
        );
        assert!(Json::parse("{").is_err());
        assert!(Json::parse("1 2").is_err());
    }

    #[test]
    fn paths_select_in_the_hosted_order() {
        let d = doc(r#"{"a":"b","b":[{"a":2},{"a":5.0},{"a":"c"}]}"#);
        // The hosted order: what a member's value holds before the member itself.
        assert_eq!(sel(&d, "$..a"), r#"[2,5.0,"c","b"]"#);
        let nested = doc(r#"{"a":{"a":1},"x":[{"a":[{"a":2}]}]}"#);
        assert_eq!(sel(&nested, "$..a"), r#"[1,2,[{"a":2}],{"a":1}]"#);
        assert_eq!(sel(&d, "$.b[-1].a"), r#"["c"]"#);
        assert_eq!(sel(&d, "$.b[0:2].a"), r#"[2,5.0]"#);
        assert_eq!(sel(&d, "$.b[*].a"), r#"[2,5.0,"c"]"#);
        assert_eq!(sel(&d, "$.b[?(@.a>3)].a"), r#"[5.0]"#);
        assert_eq!(sel(&d, "$.b[?(@.a=='c' || @.a==2)].a"), r#"[2,"c"]"#);
        assert_eq!(sel(&d, "$['a','b'][0].a"), r#"[2]"#);
        assert_eq!(sel(&d, ".b[1]"), r#"[{"a":5.0}]"#);
        assert_eq!(
            sel(&d, "$"),
            r#"[{"a":"b","b":[{"a":2},{"a":5.0},{"a":"c"}]}]"#
        );
        assert!(Path::compile("$.[").is_err());
        assert!(Path::compile("$.a[?(@.x =~ 'y')]").is_err());
        let deep = format!("$[?({}@.a)]", "!".repeat(100_000));
        assert!(Path::compile(&deep).is_err());
        let deep = format!("$[?({}@.a{})]", "(".repeat(100_000), ")".repeat(100_000));
        assert!(Path::compile(&deep).is_err());
        let deep = format!("$.a{}", "[?(@".repeat(100_000));
        assert!(Path::compile(&deep).is_err());
    }

    #[test]
    fn delete_moves_the_last_member_into_the_gap() {
        let mut d = doc(r#"{"a":{"a":2,"b":3},"b":["a","b"],"nested":{"b":[true,"a","b"]}}"#);
        let targets = deletion_targets(Path::compile("$..a").expect("path").select(&d));
        assert_eq!(targets.len(), 1);
        for t in targets {
            d.delete(&t);
        }
        assert_eq!(
            d.to_text(),
            r#"{"nested":{"b":[true,"a","b"]},"b":["a","b"]}"#
        );
    }

    #[test]
    fn floats_print_as_ryu_does() {
        for (x, t) in [
            (5.960464477539062e16, "5.960464477539062e16"),
            (1e16, "1e16"),
            (1e15, "1000000000000000.0"),
            (1e-7, "1e-7"),
            (0.00001, "0.00001"),
            (-19.5, "-19.5"),
            (10.0, "10.0"),
            (0.1, "0.1"),
            (123.456, "123.456"),
            (1.5e300, "1.5e300"),
            (-2.5e-10, "-2.5e-10"),
        ] {
            assert_eq!(float_text(x), t);
        }
    }

    #[test]
    fn formatted_output() {
        let d = doc(r#"{"a":[4.2,4.2],"e":[]}"#);
        let f = Format {
            indent: "\t".into(),
            newline: "\n".into(),
            space: " ".into(),
        };
        assert_eq!(
            d.to_text_with(&f),
            "{\n\t\"a\": [\n\t\t4.2,\n\t\t4.2\n\t],\n\t\"e\": []\n}"
        );
    }

    #[test]
    fn merge_patch() {
        let mut d = doc(r#"{"a":1,"b":{"c":2,"d":3}}"#);
        d.merge(&doc(r#"{"a":null,"b":{"c":5},"e":[1]}"#));
        assert_eq!(d.to_text(), r#"{"b":{"c":5,"d":3},"e":[1]}"#);
    }
}
