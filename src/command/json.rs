//! JSON.* commands (RedisJSON 2.x over RESP2), on the documents of `state::json`.
//!
//! A path starting with `$` is JSONPath: the reply covers every match (an array, with nil
//! where a match has the wrong kind). Any other path is RedisJSON's legacy syntax: the reply
//! is one value, and a path that matches nothing of the right kind is an error. Every JSON
//! command is deterministic, so it is logged as sent.

use super::args::{is, tri};
use super::ctx::Ctx;
use crate::reply::{errors, Reply};
use crate::state::json::{self, Format, Json, Path};
use crate::state::Value;

const WRONG_KEY: &str = "WRONGTYPE Existing key has wrong Redis type";
const NO_KEY: &str = "ERR could not perform this operation on a key that doesn't exist";

fn doc<'a>(ctx: &'a Ctx, key: &[u8]) -> Result<Option<&'a Json>, Reply> {
    match ctx.db.get(key, ctx.now_ms) {
        None => Ok(None),
        Some(e) => match &e.value {
            Value::Json(j) => Ok(Some(j)),
            _ => Err(Reply::err(WRONG_KEY)),
        },
    }
}

fn doc_mut<'a>(ctx: &'a mut Ctx, key: &[u8]) -> Result<Option<&'a mut Json>, Reply> {
    match ctx.db.get_mut(key, ctx.now_ms) {
        None => Ok(None),
        Some(e) => match &mut e.value {
            Value::Json(j) => Ok(Some(j)),
            _ => Err(Reply::err(WRONG_KEY)),
        },
    }
}

/// The document at `key` for a command that needs one.
fn existing_mut<'a>(ctx: &'a mut Ctx, key: &[u8]) -> Result<&'a mut Json, Reply> {
    doc_mut(ctx, key)?.ok_or_else(|| Reply::err(NO_KEY))
}

fn utf8(a: &[u8]) -> Result<&str, Reply> {
    std::str::from_utf8(a).map_err(|_| Reply::err("ERR the argument is not valid UTF-8"))
}

fn path_arg(a: &[u8]) -> Result<Path, Reply> {
    Path::compile(utf8(a)?).map_err(Reply::Error)
}

fn json_arg(a: &[u8]) -> Result<Json, Reply> {
    Json::parse(utf8(a)?).map_err(|e| Reply::err(format!("ERR {e}")))
}

/// Refuses a change that would put a value `depth` levels deep at a location of the
/// document `d` that `path` selects, `below` levels under it, past the nesting limit:
/// the limit holds for the document a change leaves, not only for the value it parses.
fn depth_fits(d: &Json, path: &Path, below: usize, depth: usize) -> Result<(), Reply> {
    if path
        .select(d)
        .iter()
        .any(|at| at.len() + below + depth > json::MAX_DEPTH)
    {
        return Err(Reply::err(json::RECURSION_LIMIT));
    }
    Ok(())
}

/// [`depth_fits`] for the document at `key`, if there is one.
fn key_depth_fits(
    ctx: &Ctx,
    key: &[u8],
    path: &Path,
    below: usize,
    items: &[Json],
) -> Result<(), Reply> {
    let depth = items.iter().map(Json::depth).max().unwrap_or(0);
    match doc(ctx, key)? {
        Some(d) => depth_fits(d, path, below, depth),
        None => Ok(()),
    }
}

fn no_path(p: &Path) -> Reply {
    Reply::err(format!("ERR Path '{}' does not exist", p.normalized))
}

fn no_path_or(p: &Path, what: &str) -> Reply {
    Reply::err(format!(
        "ERR Path '{}' does not exist or {what}",
        p.normalized
    ))
}

fn expected(what: &str, found: &Json) -> Reply {
    Reply::err(format!(
        "WRONGTYPE wrong type of path value - expected {what} but found {}",
        found.type_name()
    ))
}

fn root() -> Path {
    // "." always compiles.
    Path::compile(".").unwrap_or_else(|_| unreachable!())
}

/// The optional path argument at `at`: the legacy root `.` when absent.
fn opt_path(a: &[Vec<u8>], at: usize) -> Result<Path, Reply> {
    a.get(at).map_or_else(|| Ok(root()), |p| path_arg(p))
}

/// What a read command works on: its path (argument 2, `.` when absent) and the document. A
/// missing key answers nil for a legacy path and `missing` (of the path) for JSONPath.
fn read_doc<'a>(
    ctx: &'a Ctx,
    a: &[Vec<u8>],
    missing: fn(&Path) -> Reply,
) -> Result<(Path, &'a Json), Reply> {
    let path = opt_path(a, 2)?;
    match doc(ctx, &a[1])? {
        Some(d) => Ok((path, d)),
        None if path.legacy => Err(Reply::Nil),
        None => Err(missing(&path)),
    }
}

fn text_reply(j: &Json) -> Reply {
    Reply::bulk(j.to_text())
}

fn opt_int(v: Option<usize>) -> Reply {
    v.map_or(Reply::Nil, |n| Reply::Int(n as i64))
}

/// The values a path selects, in document order.
fn values<'a>(d: &'a Json, p: &Path) -> Vec<&'a Json> {
    p.select(d).iter().filter_map(|s| d.get(s)).collect()
}

/// Runs `op` on every location `path` selects in the document at `key`, in an order where no
/// change moves a location still to come. Answers each match's result in match order (None:
/// the match has the wrong kind) and the position of the last one processed.
fn each_match<T>(
    ctx: &mut Ctx,
    key: &[u8],
    path: &Path,
    op: impl FnMut(&mut Json) -> Result<Option<T>, Reply>,
) -> Result<(Vec<Option<T>>, Option<usize>), Reply> {
    each_match_growing(ctx, key, path, 0, op)
}

/// The bytes one JSON command may add to a document, at most: a value copied into every match
/// of a wildcard path (`JSON.SET k $..a <value>` on a document of a thousand `a`s) multiplies,
/// and would otherwise take the machine's memory in a few small requests.
fn growth_fits(matches: usize, per_match: usize) -> Result<(), Reply> {
    let added = matches.saturating_mul(per_match);
    if added > crate::config::JSON_CHANGE_BYTES_MAX {
        return Err(Reply::Error(format!(
            "ERR this change would add {added} bytes to the document ({matches} matches), more than one command may add ({})",
            crate::config::JSON_CHANGE_BYTES_MAX
        )));
    }
    Ok(())
}

/// As [`each_match`], for a change that adds `per_match` bytes at each match (checked with
/// [`growth_fits`] before anything changes).
fn each_match_growing<T>(
    ctx: &mut Ctx,
    key: &[u8],
    path: &Path,
    per_match: usize,
    mut op: impl FnMut(&mut Json) -> Result<Option<T>, Reply>,
) -> Result<(Vec<Option<T>>, Option<usize>), Reply> {
    let d = existing_mut(ctx, key)?;
    let found = path.select(d);
    growth_fits(found.len(), per_match)?;
    let mut order: Vec<usize> = (0..found.len()).collect();
    order.sort_by(|&a, &b| json::mutation_order(&found[a], &found[b]));
    let mut out: Vec<Option<T>> = (0..found.len()).map(|_| None).collect();
    let mut last = None;
    let mut failed = None;
    for i in order {
        let Some(v) = d.get_mut(&found[i]) else {
            continue;
        };
        match op(v) {
            Ok(Some(r)) => {
                out[i] = Some(r);
                last = Some(i);
            }
            Ok(None) => {}
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if last.is_some() {
        ctx.dirty = true;
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((out, last)),
    }
}

/// The reply of a command that changes matches: an array for JSONPath, the last result (or
/// the "does not exist or ..." error) for a legacy path.
fn per_match_reply(
    path: &Path,
    results: (Vec<Option<Reply>>, Option<usize>),
    or_what: &str,
) -> Reply {
    let (mut out, last) = results;
    if path.legacy {
        return match last {
            Some(i) => out[i].take().unwrap_or(Reply::Nil),
            None => no_path_or(path, or_what),
        };
    }
    Reply::Array(out.into_iter().map(|r| r.unwrap_or(Reply::Nil)).collect())
}

// ---------------------------------------------------------------------------------------------

/// JSON.SET key path value [NX | XX]
pub fn set(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let path = tri!(path_arg(&a[2]));
    let mut nx = false;
    let mut xx = false;
    for o in &a[4..] {
        if o.eq_ignore_ascii_case(b"nx") && !nx && !xx {
            nx = true;
        } else if o.eq_ignore_ascii_case(b"xx") && !nx && !xx {
            xx = true;
        } else {
            return Reply::err(errors::SYNTAX);
        }
    }
    let value = tri!(json_arg(&a[3]));
    let key = &a[1];
    let now = ctx.now_ms;
    let replaying = ctx.replaying;
    let Some(d) = tri!(doc_mut(ctx, key)) else {
        if xx {
            return Reply::Nil;
        }
        if !path.is_root() {
            return Reply::err("ERR new objects must be created at the root");
        }
        ctx.db.insert(key, Value::Json(Box::new(value)), None, now);
        ctx.dirty = true;
        return Reply::ok();
    };
    if path.is_root() {
        if nx {
            return Reply::Nil;
        }
        *d = value;
        ctx.dirty = true;
        return Reply::ok();
    }
    let all = set_in(d, &path, value, nx, xx, replaying);
    match all {
        Err(e) => e,
        Ok((changed, all, nested)) => {
            if nested {
                let logged = whole_document(key, d);
                ctx.log_as(logged);
            }
            if changed {
                ctx.dirty = true;
            }
            if all {
                Reply::ok()
            } else {
                Reply::Nil
            }
        }
    }
}

/// JSON.SET (and MERGE) under a parent that does not exist.
const MISSING_PARENT: &str = "ERR missing key at non-terminal path level";

/// What a SET or MERGE with matches inside one another (`$..a` on `{"a":{"a":1}}`) does
/// depends on the order it changes them in. Live, tidepool follows the hosted service's match
/// order and logs the whole document that resulted (`JSON.SET key $ doc`), so the log never
/// holds such a change in the path form; one found there was written before, when changes
/// went parents first, and replays so.
fn matches_in_order(d: &Json, path: &Path, replaying: bool) -> (Vec<Vec<json::Step>>, bool) {
    let found = path.select(d);
    if !json::has_nesting(&found) {
        return (found, false);
    }
    if replaying {
        (path.select_parents_first(d), true)
    } else {
        (found, true)
    }
}

/// The logged form of a key's JSON document as it is now: the whole of it, set at the root.
fn whole_document(key: &[u8], d: &Json) -> Vec<Vec<u8>> {
    vec![
        b"JSON.SET".to_vec(),
        key.to_vec(),
        b"$".to_vec(),
        d.to_text().into_bytes(),
    ]
}

/// Sets `value` at every match of a non-root `path`, or adds it as a new member when nothing
/// matches. Answers (anything changed, everything planned was done, the matches nested).
fn set_in(
    d: &mut Json,
    path: &Path,
    value: Json,
    nx: bool,
    xx: bool,
    replaying: bool,
) -> Result<(bool, bool, bool), Reply> {
    let (found, nested) = if nx {
        (Vec::new(), false)
    } else {
        matches_in_order(d, path, replaying)
    };
    growth_fits(found.len(), value.mem_bytes())?;
    let depth = value.depth();
    if found.iter().any(|at| at.len() + depth > json::MAX_DEPTH) {
        return Err(Reply::err(json::RECURSION_LIMIT));
    }
    if !found.is_empty() {
        for p in &found {
            if let Some(v) = d.get_mut(p) {
                *v = value.clone();
            }
        }
        return Ok((true, true, nested));
    }
    if xx {
        return Ok((false, false, false));
    }
    let (parents, name) = match path.creation_sites(d) {
        Ok(x) => x,
        // NX on an array position that exists: nothing to do.
        Err(_) if nx && !path.select(d).is_empty() => return Ok((false, false, false)),
        Err(e) => return Err(Reply::Error(e)),
    };
    // A parent that does not exist is an error, as the hosted service answers (the SDK suite's
    // `test_set_nonexisting_path`); RedisJSON 2 answers nil, RedisJSON 1 failed with this text.
    if parents.is_empty() {
        return Err(Reply::err(MISSING_PARENT));
    }
    if parents
        .iter()
        .any(|at| at.len() + 1 + depth > json::MAX_DEPTH)
    {
        return Err(Reply::err(json::RECURSION_LIMIT));
    }
    let mut added = 0;
    for p in &parents {
        if let Some(Json::Obj(members)) = d.get_mut(p) {
            if members.iter().all(|(k, _)| *k != name) {
                members.push((name.clone(), value.clone()));
                added += 1;
            }
        }
    }
    Ok((added > 0, added > 0 && added == parents.len(), false))
}

/// JSON.GET key [INDENT s] [NEWLINE s] [SPACE s] [NOESCAPE] [path ...]
pub fn get(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let mut fmt = Format::default();
    let mut paths: Vec<&[u8]> = Vec::new();
    let mut i = 2;
    while i < a.len() {
        let arg = &a[i];
        let slot = if arg.eq_ignore_ascii_case(b"indent") {
            Some(&mut fmt.indent)
        } else if arg.eq_ignore_ascii_case(b"newline") {
            Some(&mut fmt.newline)
        } else if arg.eq_ignore_ascii_case(b"space") {
            Some(&mut fmt.space)
        } else {
            None
        };
        if let Some(slot) = slot {
            let Some(v) = a.get(i + 1) else {
                return Reply::err(errors::wrong_arity("json.get"));
            };
            *slot = String::from_utf8_lossy(v).into_owned();
            i += 2;
            continue;
        }
        if arg.eq_ignore_ascii_case(b"format") {
            return Reply::err("ERR FORMAT argument is not supported on RESP2");
        }
        if !arg.eq_ignore_ascii_case(b"noescape") {
            paths.push(arg);
        }
        i += 1;
    }
    let Some(d) = tri!(doc(ctx, &a[1])) else {
        // RedisJSON reads the key before it looks at the paths.
        return Reply::Nil;
    };
    if paths.len() <= 1 {
        let path = match paths.first() {
            Some(p) => tri!(path_arg(p)),
            None => root(),
        };
        let vals = values(d, &path);
        if path.legacy {
            return match vals.first() {
                Some(v) => Reply::bulk(v.to_text_with(&fmt)),
                None => no_path(&path),
            };
        }
        return Reply::bulk(json::list_text(&vals, &fmt));
    }
    // Several paths: an object keyed by each path as given (a path that does not compile is
    // left out, as RedisJSON leaves it out).
    let compiled: Vec<Path> = paths
        .iter()
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter_map(|p| Path::compile(p).ok())
        .collect();
    let all_legacy = compiled.iter().all(|p| p.legacy);
    let mut members: Vec<(String, Json)> = Vec::new();
    for p in &compiled {
        let vals = values(d, p);
        let v = if all_legacy {
            match vals.first() {
                Some(v) => (*v).clone(),
                None => return Reply::err(format!("ERR Path '{}' does not exist", p.original)),
            }
        } else {
            Json::Arr(vals.into_iter().cloned().collect())
        };
        Json::set_member(&mut members, &p.original, v);
    }
    Reply::bulk(Json::Obj(members).to_text_with(&fmt))
}

/// JSON.MGET key [key ...] path
pub fn mget(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let path = tri!(path_arg(&a[a.len() - 1]));
    let out = a[1..a.len() - 1]
        .iter()
        .map(|k| match doc(ctx, k) {
            Ok(Some(d)) => {
                let vals = values(d, &path);
                if path.legacy {
                    vals.first().map_or(Reply::Nil, |v| text_reply(v))
                } else {
                    Reply::bulk(json::list_text(&vals, &Format::default()))
                }
            }
            _ => Reply::Nil,
        })
        .collect();
    Reply::Array(out)
}

/// JSON.MSET key path value [key path value ...]: every triplet is checked before any is
/// applied.
pub fn mset(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if !(a.len() - 1).is_multiple_of(3) {
        return Reply::err(errors::wrong_arity("json.mset"));
    }
    let mut triplets = Vec::new();
    for t in a[1..].chunks(3) {
        let path = tri!(path_arg(&t[1]));
        let exists = tri!(doc(ctx, &t[0])).is_some()
            || triplets
                .iter()
                .any(|(k, _, _): &(&Vec<u8>, Path, Json)| **k == t[0]);
        if !exists && !path.is_root() {
            return Reply::err("ERR new objects must be created at the root");
        }
        let value = tri!(json_arg(&t[2]));
        tri!(key_depth_fits(
            ctx,
            &t[0],
            &path,
            0,
            std::slice::from_ref(&value)
        ));
        triplets.push((&t[0], path, value));
    }
    let now = ctx.now_ms;
    let replaying = ctx.replaying;
    let mut all = true;
    let mut nested = false;
    let keys: Vec<Vec<u8>> = triplets.iter().map(|(k, _, _)| k.to_vec()).collect();
    // Atomic, as RedisJSON's MSET: every triplet applies to a copy of its document first, and
    // a triplet that fails (a path under a missing parent) leaves every key as it was.
    let mut docs: Vec<(&Vec<u8>, Option<Json>)> = Vec::new();
    for (key, path, value) in triplets {
        let at = match docs.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let current = tri!(doc(ctx, key)).cloned();
                docs.push((key, current));
                docs.len() - 1
            }
        };
        let slot = &mut docs[at].1;
        match slot {
            Some(d) if !path.is_root() => {
                let (_, done, n) = tri!(set_in(d, &path, value, false, false, replaying));
                all &= done;
                nested |= n;
            }
            _ => *slot = Some(value),
        }
    }
    for (key, d) in docs {
        let Some(d) = d else { continue };
        ctx.dirty = true;
        match doc_mut(ctx, key) {
            Ok(Some(old)) => *old = d,
            _ => ctx.db.insert(key, Value::Json(Box::new(d)), None, now),
        }
    }
    // Matches inside one another: every document this MSET set is logged whole (see
    // `matches_in_order`).
    if nested {
        let mut seen: Vec<&Vec<u8>> = Vec::new();
        for k in &keys {
            if seen.contains(&k) {
                continue;
            }
            seen.push(k);
            if let Ok(Some(d)) = doc(ctx, k) {
                let logged = whole_document(k, d);
                ctx.log_as(logged);
            }
        }
    }
    if all {
        Reply::ok()
    } else {
        Reply::Nil
    }
}

/// JSON.MERGE key path value: RFC 7396 merge into every match (a new member when the path's
/// last name is missing).
pub fn merge(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 4 {
        return Reply::err(errors::SYNTAX);
    }
    let path = tri!(path_arg(&a[2]));
    let patch = tri!(json_arg(&a[3]));
    let key = &a[1];
    let now = ctx.now_ms;
    let ctx_replaying = ctx.replaying;
    let Some(d) = tri!(doc_mut(ctx, key)) else {
        if !path.is_root() {
            return Reply::err("ERR new objects must be created at the root");
        }
        let mut fresh = Json::Null;
        fresh.merge(&patch);
        ctx.db.insert(key, Value::Json(Box::new(fresh)), None, now);
        ctx.dirty = true;
        return Reply::ok();
    };
    if path.is_root() {
        d.merge(&patch);
        ctx.dirty = true;
        return Reply::ok();
    }
    tri!(depth_fits(d, &path, 0, patch.depth()));
    let (found, nested) = matches_in_order(d, &path, ctx_replaying);
    tri!(growth_fits(found.len(), patch.mem_bytes()));
    if found.is_empty() {
        if patch == Json::Null {
            return Reply::ok();
        }
        return match set_in(d, &path, patch, false, false, ctx_replaying) {
            Err(e) => e,
            Ok((changed, _, _)) => {
                ctx.dirty |= changed;
                if changed {
                    Reply::ok()
                } else {
                    Reply::Nil
                }
            }
        };
    }
    if patch == Json::Null {
        for p in json::deletion_targets(found) {
            d.delete(&p);
        }
    } else {
        for p in &found {
            if let Some(v) = d.get_mut(p) {
                v.merge(&patch);
            }
        }
    }
    if nested {
        let logged = whole_document(key, d);
        ctx.log_as(logged);
    }
    ctx.dirty = true;
    Reply::ok()
}

/// JSON.DEL / JSON.FORGET key [path]
pub fn del(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 3 {
        return Reply::err(errors::wrong_arity(
            &String::from_utf8_lossy(&a[0]).to_lowercase(),
        ));
    }
    let path = tri!(opt_path(a, 2));
    let key = &a[1];
    let Some(d) = tri!(doc_mut(ctx, key)) else {
        return Reply::Int(0);
    };
    if path.is_root() {
        ctx.db.remove(key);
        ctx.dirty = true;
        return Reply::Int(1);
    }
    let found = path.select(d);
    let n = json::deleted_in_match_order(&found);
    for p in json::deletion_targets(found) {
        d.delete(&p);
    }
    if n > 0 {
        ctx.dirty = true;
    }
    Reply::Int(n as i64)
}

/// JSON.TYPE key [path]
pub fn type_(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (path, d) = tri!(read_doc(ctx, a, |_| Reply::Nil));
    let vals = values(d, &path);
    if path.legacy {
        return vals
            .first()
            .map_or(Reply::Nil, |v| Reply::bulk(v.type_name()));
    }
    Reply::Array(vals.iter().map(|v| Reply::bulk(v.type_name())).collect())
}

/// `JSON.DEBUG MEMORY key [path]`: tidepool's estimate of the bytes each value the path
/// selects takes (as MEMORY USAGE estimates a key); 0 for a missing key. `JSON.DEBUG HELP`.
pub fn debug(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if is(&a[1], "help") && a.len() == 2 {
        return Reply::Array(vec![
            Reply::bulk("MEMORY <key> [path] - reports memory usage"),
            Reply::bulk("HELP                - this message"),
        ]);
    }
    if !is(&a[1], "memory") || !(3..=4).contains(&a.len()) {
        return Reply::err("ERR unknown subcommand - try `JSON.DEBUG HELP`");
    }
    // The rest reads as `JSON.<cmd> key [path]`.
    let shifted: Vec<Vec<u8>> = std::iter::once(a[0].clone())
        .chain(a[2..].iter().cloned())
        .collect();
    let (path, d) = match read_doc(ctx, &shifted, |_| Reply::Array(vec![])) {
        Ok(x) => x,
        Err(Reply::Nil) => return Reply::Int(0),
        Err(e) => return e,
    };
    let vals = values(d, &path);
    if path.legacy {
        return Reply::Int(vals.first().map_or(0, |v| v.mem_bytes()) as i64);
    }
    Reply::Array(
        vals.iter()
            .map(|v| Reply::Int(v.mem_bytes() as i64))
            .collect(),
    )
}

#[derive(Clone, Copy)]
pub enum NumOp {
    Incr,
    Mult,
}

/// JSON.NUMINCRBY / JSON.NUMMULTBY key path number
pub fn num_op(ctx: &mut Ctx, a: &[Vec<u8>], op: NumOp) -> Reply {
    let path = tri!(path_arg(&a[2]));
    let by = tri!(json_arg(&a[3]));
    if !by.is_number() {
        return Reply::err("ERR the number argument is not a JSON number");
    }
    let results = tri!(each_match(ctx, &a[1], &path, |v| {
        if !v.is_number() {
            return Ok(None);
        }
        let out = match (&*v, &by, op) {
            (Json::Int(x), Json::Int(y), NumOp::Incr) => x.checked_add(*y).map(Json::Int),
            (Json::Int(x), Json::Int(y), NumOp::Mult) => x.checked_mul(*y).map(Json::Int),
            _ => None,
        };
        let out = match out {
            Some(n) => n,
            None => {
                let (x, y) = (v.as_f64().unwrap_or(0.0), by.as_f64().unwrap_or(0.0));
                let r = match op {
                    NumOp::Incr => x + y,
                    NumOp::Mult => x * y,
                };
                if !r.is_finite() {
                    return Err(Reply::err("ERR result is not a number"));
                }
                Json::Float(r)
            }
        };
        *v = out.clone();
        Ok(Some(out))
    }));
    let (out, last) = results;
    if path.legacy {
        return match last.and_then(|i| out[i].as_ref()) {
            Some(v) => text_reply(v),
            None => no_path_or(&path, "does not contains a number"),
        };
    }
    Reply::bulk(Json::Arr(out.into_iter().map(|r| r.unwrap_or(Json::Null)).collect()).to_text())
}

/// JSON.TOGGLE key path
pub fn toggle(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let path = tri!(path_arg(&a[2]));
    let results = tri!(each_match(ctx, &a[1], &path, |v| match v {
        Json::Bool(b) => {
            *b = !*b;
            Ok(Some(*b))
        }
        _ => Ok(None),
    }));
    let (out, last) = results;
    if path.legacy {
        return match last.and_then(|i| out[i]) {
            Some(b) => Reply::bulk(if b { "true" } else { "false" }),
            None => no_path_or(&path, "not a bool"),
        };
    }
    Reply::Array(
        out.into_iter()
            .map(|b| b.map_or(Reply::Nil, |b| Reply::Int(b as i64)))
            .collect(),
    )
}

/// JSON.STRAPPEND key [path] string
pub fn strappend(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 4 {
        return Reply::err(errors::wrong_arity("json.strappend"));
    }
    let (path, suffix) = if a.len() == 4 {
        (tri!(path_arg(&a[2])), &a[3])
    } else {
        (root(), &a[2])
    };
    let suffix = match tri!(json_arg(suffix)) {
        Json::Str(s) => s,
        other => return expected("string", &other),
    };
    let results = each_match_growing(ctx, &a[1], &path, suffix.len(), |v| match v {
        Json::Str(s) => {
            s.push_str(&suffix);
            Ok(Some(Reply::Int(s.len() as i64)))
        }
        _ => Ok(None),
    });
    per_match_reply(&path, tri!(results), "not a string")
}

/// JSON.STRLEN key [path]
pub fn strlen(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (path, d) = tri!(read_doc(ctx, a, |_| Reply::err(NO_KEY)));
    let vals = values(d, &path);
    if path.legacy {
        return match vals.first() {
            Some(Json::Str(s)) => Reply::Int(s.len() as i64),
            Some(other) => expected("string", other),
            None => no_path(&path),
        };
    }
    Reply::Array(
        vals.iter()
            .map(|v| match v {
                Json::Str(s) => Reply::Int(s.len() as i64),
                _ => Reply::Nil,
            })
            .collect(),
    )
}

fn json_args(a: &[Vec<u8>]) -> Result<Vec<Json>, Reply> {
    a.iter().map(|x| json_arg(x)).collect()
}

/// JSON.ARRAPPEND key path value [value ...]
pub fn arrappend(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() < 4 {
        return Reply::err(errors::wrong_arity("json.arrappend"));
    }
    let path = tri!(path_arg(&a[2]));
    let items = tri!(json_args(&a[3..]));
    tri!(key_depth_fits(ctx, &a[1], &path, 1, &items));
    let per_match = items.iter().map(Json::mem_bytes).sum();
    let results = each_match_growing(ctx, &a[1], &path, per_match, |v| match v {
        Json::Arr(arr) => {
            arr.extend(items.iter().cloned());
            Ok(Some(Reply::Int(arr.len() as i64)))
        }
        _ => Ok(None),
    });
    per_match_reply(&path, tri!(results), "not an array")
}

/// JSON.ARRINSERT key path index value [value ...]
pub fn arrinsert(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let path = tri!(path_arg(&a[2]));
    let index = tri!(super::args::int_arg(&a[3]));
    let items = tri!(json_args(&a[4..]));
    tri!(key_depth_fits(ctx, &a[1], &path, 1, &items));
    let per_match = items.iter().map(Json::mem_bytes).sum();
    let results = each_match_growing(ctx, &a[1], &path, per_match, |v| match v {
        Json::Arr(arr) => {
            let len = arr.len() as i64;
            let at = if index < 0 { len + index } else { index };
            if !(0..=len).contains(&at) {
                return Err(Reply::err("ERR index out of bounds"));
            }
            let at = at as usize;
            arr.splice(at..at, items.iter().cloned());
            Ok(Some(Reply::Int(arr.len() as i64)))
        }
        _ => Ok(None),
    });
    per_match_reply(&path, tri!(results), "not an array")
}

/// JSON.ARRPOP key [path [index]]
pub fn arrpop(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 4 {
        return Reply::err(errors::wrong_arity("json.arrpop"));
    }
    let (path, index) = match a.get(2) {
        None => (root(), i64::MAX),
        Some(p) => (
            tri!(path_arg(p)),
            // RedisJSON takes an index it cannot read as the default, -1.
            a.get(3)
                .and_then(|i| crate::num::parse_i64(i))
                .unwrap_or(-1),
        ),
    };
    let results = each_match(ctx, &a[1], &path, |v| match v {
        Json::Arr(arr) if arr.is_empty() => Ok(Some(Reply::Nil)),
        Json::Arr(arr) => {
            let len = arr.len() as i64;
            let at = if index < 0 {
                (len + index).max(0)
            } else {
                index.min(len - 1)
            };
            Ok(Some(text_reply(&arr.remove(at as usize))))
        }
        _ => Ok(None),
    });
    per_match_reply(&path, tri!(results), "not an array")
}

/// JSON.ARRTRIM key path start stop
pub fn arrtrim(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let path = tri!(path_arg(&a[2]));
    let start = tri!(super::args::int_arg(&a[3]));
    let stop = tri!(super::args::int_arg(&a[4]));
    let results = each_match(ctx, &a[1], &path, |v| match v {
        Json::Arr(arr) => {
            let len = arr.len() as i64;
            let norm = |x: i64| {
                if x < 0 {
                    (len + x).max(0)
                } else {
                    x.min(len - 1)
                }
            };
            let stop = norm(stop);
            let start = if start < 0 || start < len {
                norm(start)
            } else {
                stop + 1
            };
            if len == 0 || start > stop {
                arr.clear();
            } else {
                arr.truncate(stop as usize + 1);
                arr.drain(..start as usize);
            }
            Ok(Some(Reply::Int(arr.len() as i64)))
        }
        _ => Ok(None),
    });
    per_match_reply(&path, tri!(results), "not an array")
}

/// JSON.ARRINDEX key path value [start [stop]]
pub fn arrindex(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 6 {
        return Reply::err(errors::wrong_arity("json.arrindex"));
    }
    let path = tri!(path_arg(&a[2]));
    let needle = tri!(json_arg(&a[3]));
    let start = match a.get(4) {
        Some(s) => tri!(super::args::int_arg(s)),
        None => 0,
    };
    let stop = match a.get(5) {
        Some(s) => tri!(super::args::int_arg(s)),
        None => 0,
    };
    let Some(d) = tri!(doc(ctx, &a[1])) else {
        return no_path(&path);
    };
    let find = |v: &Json| -> Option<i64> {
        let Json::Arr(arr) = v else { return None };
        let len = arr.len() as i64;
        if len == 0 {
            return Some(-1);
        }
        let s = if start < 0 {
            (len + start).max(0)
        } else {
            start.min(len - 1)
        };
        let e = match stop {
            0 => len,
            e if e < 0 => (len + e).max(0),
            e => e.min(len),
        };
        Some(
            (s..e)
                .find(|&i| arr.get(i as usize) == Some(&needle))
                .unwrap_or(-1),
        )
    };
    let vals = values(d, &path);
    if path.legacy {
        return match vals.first() {
            None => no_path(&path),
            Some(v) => match find(v) {
                Some(i) => Reply::Int(i),
                None => expected("array", v),
            },
        };
    }
    Reply::Array(
        vals.iter()
            .map(|v| find(v).map_or(Reply::Nil, Reply::Int))
            .collect(),
    )
}

/// JSON.ARRLEN key [path]
pub fn arrlen(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (path, d) = tri!(read_doc(ctx, a, |_| Reply::err(NO_KEY)));
    let lens: Vec<Option<usize>> = values(d, &path)
        .iter()
        .map(|v| match v {
            Json::Arr(arr) => Some(arr.len()),
            _ => None,
        })
        .collect();
    if path.legacy {
        return match lens.first() {
            None => no_path(&path),
            Some(None) => no_path_or(&path, "not an array"),
            Some(Some(n)) => Reply::Int(*n as i64),
        };
    }
    Reply::Array(lens.into_iter().map(opt_int).collect())
}

/// JSON.OBJKEYS key [path]
pub fn objkeys(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (path, d) = tri!(read_doc(ctx, a, |_| Reply::err(NO_KEY)));
    let keys = |v: &Json| match v {
        Json::Obj(o) => Reply::Array(o.iter().map(|(k, _)| Reply::bulk(k.as_bytes())).collect()),
        _ => Reply::Nil,
    };
    let vals = values(d, &path);
    if path.legacy {
        return match vals.first() {
            None => Reply::Nil,
            Some(v @ Json::Obj(_)) => keys(v),
            Some(_) => no_path_or(&path, "not an object"),
        };
    }
    Reply::Array(vals.iter().map(|v| keys(v)).collect())
}

/// JSON.OBJLEN key [path]
pub fn objlen(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (path, d) = tri!(read_doc(ctx, a, |p| no_path_or(p, "not an object")));
    let vals = values(d, &path);
    if path.legacy {
        return match vals.first() {
            None => Reply::Nil,
            Some(Json::Obj(o)) => Reply::Int(o.len() as i64),
            Some(other) => expected("object", other),
        };
    }
    Reply::Array(
        vals.iter()
            .map(|v| match v {
                Json::Obj(o) => Reply::Int(o.len() as i64),
                _ => Reply::Nil,
            })
            .collect(),
    )
}

/// JSON.CLEAR key [path]: empties arrays and objects and sets numbers to 0; answers how many
/// values changed.
pub fn clear(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 3 {
        return Reply::err(errors::wrong_arity("json.clear"));
    }
    let path = tri!(opt_path(a, 2));
    let results = tri!(each_match(ctx, &a[1], &path, |v| {
        let changed = match v {
            Json::Arr(x) if !x.is_empty() => {
                x.clear();
                true
            }
            Json::Obj(x) if !x.is_empty() => {
                x.clear();
                true
            }
            Json::Int(n) if *n != 0 => {
                *v = Json::Int(0);
                true
            }
            Json::UInt(_) => {
                *v = Json::Int(0);
                true
            }
            Json::Float(f) if *f != 0.0 => {
                *v = Json::Int(0);
                true
            }
            _ => false,
        };
        Ok(changed.then_some(()))
    }));
    Reply::Int(results.0.iter().filter(|r| r.is_some()).count() as i64)
}

fn resp_form(v: &Json) -> Reply {
    match v {
        Json::Null => Reply::Nil,
        Json::Bool(b) => Reply::Status(if *b { "true" } else { "false" }.into()),
        Json::Int(i) => Reply::Int(*i),
        Json::UInt(u) => Reply::bulk(u.to_string()),
        Json::Float(f) => Reply::bulk(json::float_text(*f)),
        Json::Str(s) => Reply::bulk(s.as_bytes()),
        Json::Arr(a) => {
            let mut out = vec![Reply::Status("[".into())];
            out.extend(a.iter().map(resp_form));
            Reply::Array(out)
        }
        Json::Obj(o) => {
            let mut out = vec![Reply::Status("{".into())];
            for (k, v) in o {
                out.push(Reply::bulk(k.as_bytes()));
                out.push(resp_form(v));
            }
            Reply::Array(out)
        }
    }
}

/// JSON.RESP key [path]
pub fn resp(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (path, d) = tri!(read_doc(ctx, a, |_| Reply::Nil));
    let vals = values(d, &path);
    if path.legacy {
        return vals
            .first()
            .map_or_else(|| no_path(&path), |v| resp_form(v));
    }
    Reply::Array(vals.iter().map(|v| resp_form(v)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Db;

    fn run(db: &mut Db, f: fn(&mut Ctx, &[Vec<u8>]) -> Reply, args: &[&str]) -> Reply {
        let mut rng = crate::rng::Rng::new(1);
        let (mut server, mut logged) = (crate::command::ctx::Replay, Vec::new());
        let perm = crate::command::Perm::Full;
        let mut ctx = Ctx::new(
            db,
            1_000,
            &mut rng,
            &perm,
            "",
            &mut server,
            None,
            &mut logged,
        );
        let a: Vec<Vec<u8>> = args.iter().map(|s| s.as_bytes().to_vec()).collect();
        f(&mut ctx, &a)
    }

    fn bulk(s: &str) -> Reply {
        Reply::bulk(s.as_bytes())
    }

    #[test]
    fn set_get_and_legacy_paths() {
        let mut db = Db::new();
        let doc = r#"{"a":"b","b":[{"a":2},{"a":5.0},{"a":"c"}]}"#;
        assert_eq!(run(&mut db, set, &["json.set", "k", "$", doc]), Reply::ok());
        assert_eq!(run(&mut db, get, &["json.get", "k"]), bulk(doc));
        assert_eq!(
            run(&mut db, get, &["json.get", "k", "$..a"]),
            bulk(r#"[2,5.0,"c","b"]"#)
        );
        assert_eq!(run(&mut db, get, &["json.get", "k", ".b[0].a"]), bulk("2"));
        assert_eq!(
            run(&mut db, get, &["json.get", "k", ".nope"]),
            Reply::err("ERR Path '$.nope' does not exist")
        );
        assert_eq!(
            run(&mut db, set, &["json.set", "n", "$.a", "1"]),
            Reply::err("ERR new objects must be created at the root")
        );
        assert_eq!(
            run(&mut db, set, &["json.set", "k", "$.new", "[1]", "NX"]),
            Reply::ok()
        );
        assert_eq!(
            run(&mut db, set, &["json.set", "k", "$.new", "[2]", "NX"]),
            Reply::Nil
        );
        assert_eq!(
            run(&mut db, set, &["json.set", "k", "$.zz", "1", "XX"]),
            Reply::Nil
        );
        assert_eq!(
            run(&mut db, num_incr, &["json.numincrby", "k", "$..a", "2"]),
            bulk("[4,7.0,null,null]")
        );
        assert_eq!(
            run(&mut db, num_incr, &["json.numincrby", "k", ".b[0].a", "3"]),
            bulk("7")
        );
    }

    fn num_incr(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
        num_op(ctx, a, NumOp::Incr)
    }

    #[test]
    fn arrays_in_the_hosted_match_order() {
        let mut db = Db::new();
        let doc =
            r#"{"a":["foo"], "nested1": {"a": ["hello", null, "world"]}, "nested2": {"a": 31}}"#;
        run(&mut db, set, &["json.set", "d", "$", doc]);
        assert_eq!(
            run(&mut db, arrpop, &["json.arrpop", "d", "$..a", "1"]),
            Reply::Array(vec![bulk("null"), Reply::Nil, bulk("\"foo\"")])
        );
        run(&mut db, set, &["json.set", "d", "$", doc]);
        assert_eq!(
            run(&mut db, arrtrim, &["json.arrtrim", "d", "$..a", "1", "-1"]),
            Reply::Array(vec![Reply::Int(2), Reply::Nil, Reply::Int(0)])
        );
        run(&mut db, set, &["json.set", "d", "$", doc]);
        assert_eq!(
            run(
                &mut db,
                arrinsert,
                &["json.arrinsert", "d", "..a", "1", "\"bar\"", "\"racuda\""]
            ),
            Reply::Int(5)
        );
        assert_eq!(
            run(
                &mut db,
                arrappend,
                &["json.arrappend", "d", ".nested2.a", "1"]
            ),
            Reply::err("ERR Path '$.nested2.a' does not exist or not an array")
        );
        assert_eq!(
            run(&mut db, arrappend, &["json.arrappend", "missing", "$", "1"]),
            Reply::err(NO_KEY)
        );
    }
}
