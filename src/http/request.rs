//! Turning a request into command arguments: path segments, raw bodies, query pairs, and JSON
//! arrays whose numbers keep their exact text.

use hyper::HeaderMap;
use serde_json::value::RawValue;

/// Percent-decodes one path segment or query component into bytes. With `plus_space`, `+` is a
/// space (form encoding, used for query strings).
pub fn percent_decode(s: &str, plus_space: bool) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Query pairs as arguments, in order, without `_token`. `K=V` gives `K`, `V`; a bare `K`
/// gives `K`.
pub fn query_args(query: Option<&str>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let Some(q) = query else { return out };
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = match pair.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (pair, None),
        };
        if k == "_token" {
            continue;
        }
        out.push(percent_decode(k, true));
        if let Some(v) = v {
            out.push(percent_decode(v, true));
        }
    }
    out
}

/// The token a request presents: an `Authorization: Bearer <token>` header (both services), or
/// else the query parameter `param` (`_token` for the key-value API, `qstash_token` for the
/// delivery API).
/// Borrowed from the header when it is there (no allocation on the request path).
pub fn presented_token<'a>(
    headers: &'a HeaderMap,
    query: Option<&str>,
    param: &str,
) -> Option<std::borrow::Cow<'a, str>> {
    let bearer = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| std::borrow::Cow::Borrowed(token.trim()))
        });
    bearer.or_else(|| {
        query?.split('&').find_map(|p| {
            let (k, v) = p.split_once('=')?;
            (k == param).then(|| {
                std::borrow::Cow::Owned(
                    String::from_utf8_lossy(&percent_decode(v, true)).into_owned(),
                )
            })
        })
    })
}

/// One JSON element as a command argument: strings as their UTF-8 bytes, numbers as their exact
/// text, `true`/`false`/`null` as those words. Arrays and objects are refused.
fn json_arg(v: &RawValue) -> Result<Vec<u8>, String> {
    let text = v.get();
    match text.as_bytes().first() {
        // A string without escapes is its text between the quotes: reading the body checked it
        // (UTF-8, closed, no control characters), so it need not be parsed a second time.
        Some(b'"') if !text.contains('\\') && text.len() >= 2 => {
            Ok(text.as_bytes()[1..text.len() - 1].to_vec())
        }
        Some(b'"') => serde_json::from_str::<String>(text).map(String::into_bytes).map_err(|e| format!("ERR invalid JSON string argument: {e}")),
        Some(b'[') | Some(b'{') => Err("ERR command arguments must be strings, numbers, booleans or null, not arrays or objects".into()),
        Some(_) => Ok(text.as_bytes().to_vec()),
        None => Err("ERR empty JSON argument".into()),
    }
}

/// Reads one command, `["CMD", arg, ...]`, turning each element into its argument as it is
/// read. An element that is no argument, or an empty command, is not a JSON error: the first
/// such refusal of the body is kept in `refused` and reading goes on, so that a JSON error
/// anywhere in the body is still the one reported, as when the whole body was read first.
struct Command<'r> {
    refused: &'r mut Option<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Command<'_> {
    type Value = Vec<Vec<u8>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Command<'_> {
    type Value = Vec<Vec<u8>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        // The words serde's own sequence gives, which the error texts have always had.
        f.write_str("a sequence")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut args = Vec::with_capacity(4);
        while let Some(v) = seq.next_element::<&'de RawValue>()? {
            match json_arg(v) {
                Ok(a) => args.push(a),
                Err(e) => {
                    self.refused.get_or_insert(e);
                }
            }
        }
        if args.is_empty() {
            self.refused.get_or_insert_with(|| {
                "ERR empty command: the JSON array needs the command name first".into()
            });
        }
        Ok(args)
    }
}

/// Reads `[command, ...]` with `Command`.
struct Commands<'r> {
    refused: &'r mut Option<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Commands<'_> {
    type Value = Vec<Vec<Vec<u8>>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Commands<'_> {
    type Value = Vec<Vec<Vec<u8>>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut cmds = Vec::new();
        while let Some(c) = seq.next_element_seed(Command {
            refused: &mut *self.refused,
        })? {
            cmds.push(c);
        }
        Ok(cmds)
    }
}

/// `text` read whole by `seed`, as `serde_json::from_str` reads a type: nothing but white
/// space may follow it.
fn read_json<'de, S: serde::de::DeserializeSeed<'de>>(
    text: &'de str,
    seed: S,
) -> Result<S::Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// The usual command body read by hand: arrays of strings without escapes, numbers, `true`,
/// `false` and `null`. None for anything else (an escape, a nested value, an empty command, a
/// JSON error), which `read_json` then reads, with its answers and its error texts; where this
/// reads a body, it gives what `read_json` would. A pipeline of 100 SETs read by serde took
/// about a fifth of the server's instructions for it.
struct Scan<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn new(text: &'a str) -> Scan<'a> {
        Scan {
            b: text.as_bytes(),
            at: 0,
        }
    }

    /// The next byte after JSON white space, not taken.
    fn peek(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.at) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(c);
            }
            self.at += 1;
        }
        None
    }

    /// Takes `c` (after white space) if it is next.
    fn eat(&mut self, c: u8) -> bool {
        let next = self.peek() == Some(c);
        self.at += usize::from(next);
        next
    }

    fn digits(&mut self) -> usize {
        let from = self.at;
        while self.b.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        self.at - from
    }

    /// One argument, as `json_arg` gives it.
    fn arg(&mut self) -> Option<Vec<u8>> {
        if self.peek()? == b'"' {
            return self.string();
        }
        // What follows a word or a number is read as the command's next `,` or `]`, so `nullx`
        // and `01` are not read here.
        let start = self.at;
        (self.word() || self.number()).then(|| crate::spare::bytes(&self.b[start..self.at]))
    }

    /// A string without escapes or control characters, as its bytes.
    fn string(&mut self) -> Option<Vec<u8>> {
        let start = self.at + 1;
        let len = self.b.get(start..)?.iter().position(|&c| c == b'"')?;
        let s = &self.b[start..start + len];
        if s.iter().any(|&c| c == b'\\' || c < 0x20) {
            return None;
        }
        self.at = start + len + 1;
        Some(crate::spare::bytes(s))
    }

    fn word(&mut self) -> bool {
        let rest = &self.b[self.at..];
        for w in [&b"true"[..], b"false", b"null"] {
            if rest.starts_with(w) {
                self.at += w.len();
                return true;
            }
        }
        false
    }

    /// JSON's number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> bool {
        if self.b.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.b.get(self.at) {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return false,
        }
        if self.b.get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return false;
            }
        }
        if matches!(self.b.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.b.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return false;
            }
        }
        true
    }

    /// `[arg, ...]`, at least one argument.
    fn command(&mut self) -> Option<Vec<Vec<u8>>> {
        if !self.eat(b'[') {
            return None;
        }
        let mut args = crate::spare::args();
        loop {
            args.push(self.arg()?);
            if self.eat(b']') {
                return Some(args);
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// Nothing but white space is left.
    fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }
}

/// `["CMD", arg, ...]` read by `Scan`.
fn scan_single(text: &str) -> Option<Vec<Vec<u8>>> {
    let mut s = Scan::new(text);
    let cmd = s.command()?;
    s.at_end().then_some(cmd)
}

/// `[["CMD", arg, ...], ...]` read by `Scan`.
fn scan_batch(text: &str) -> Option<Vec<Vec<Vec<u8>>>> {
    let mut s = Scan::new(text);
    if !s.eat(b'[') {
        return None;
    }
    let mut cmds = Vec::new();
    if !s.eat(b']') {
        loop {
            cmds.push(s.command()?);
            if s.eat(b']') {
                break;
            }
            if !s.eat(b',') {
                return None;
            }
        }
    }
    s.at_end().then_some(cmds)
}

/// A body `["CMD", arg, ...]`.
pub fn parse_single(body: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    parse_body(
        body,
        scan_single,
        |text, refused| read_json(text, Command { refused }),
        "a JSON array of command and arguments",
    )
}

/// A body `[["CMD", arg, ...], ...]` (pipeline and transaction).
pub fn parse_batch(body: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    parse_body(
        body,
        scan_batch,
        |text, refused| read_json(text, Commands { refused }),
        "a JSON array of commands, each an array",
    )
}

/// A command body read by `scan` when it reads it, otherwise by `read` (serde), whose first
/// refusal is answered once the whole body was read, so that a JSON error later in it is the
/// one reported; `shape` says what the body must be, in a JSON error's text.
fn parse_body<T>(
    body: &[u8],
    scan: impl FnOnce(&str) -> Option<T>,
    read: impl FnOnce(&str, &mut Option<String>) -> Result<T, serde_json::Error>,
    shape: &str,
) -> Result<T, String> {
    let text = std::str::from_utf8(body)
        .map_err(|_| "ERR the request body is not valid UTF-8 JSON".to_string())?;
    if let Some(read_by_hand) = scan(text) {
        return Ok(read_by_hand);
    }
    let mut refused = None;
    let read = read(text, &mut refused)
        .map_err(|e| format!("ERR the request body must be {shape}: {e}"))?;
    match refused {
        Some(why) => Err(why),
        None => Ok(read),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-pass reading the one-pass one replaced: the whole body as raw JSON values first,
    /// then each value parsed again. Kept as the reference the one-pass reading must equal.
    fn two_pass_arg(v: &RawValue) -> Result<Vec<u8>, String> {
        let text = v.get();
        match text.as_bytes().first() {
            Some(b'"') => serde_json::from_str::<String>(text).map(String::into_bytes).map_err(|e| format!("ERR invalid JSON string argument: {e}")),
            Some(b'[') | Some(b'{') => Err("ERR command arguments must be strings, numbers, booleans or null, not arrays or objects".into()),
            Some(_) => Ok(text.as_bytes().to_vec()),
            None => Err("ERR empty JSON argument".into()),
        }
    }

    fn two_pass_command(items: &[&RawValue]) -> Result<Vec<Vec<u8>>, String> {
        if items.is_empty() {
            return Err("ERR empty command: the JSON array needs the command name first".into());
        }
        items.iter().map(|v| two_pass_arg(v)).collect()
    }

    fn two_pass_single(body: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let text = std::str::from_utf8(body)
            .map_err(|_| "ERR the request body is not valid UTF-8 JSON".to_string())?;
        let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
            format!("ERR the request body must be a JSON array of command and arguments: {e}")
        })?;
        two_pass_command(&items)
    }

    fn two_pass_batch(body: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
        let text = std::str::from_utf8(body)
            .map_err(|_| "ERR the request body is not valid UTF-8 JSON".to_string())?;
        let items: Vec<Vec<&RawValue>> = serde_json::from_str(text).map_err(|e| {
            format!("ERR the request body must be a JSON array of commands, each an array: {e}")
        })?;
        items.iter().map(|c| two_pass_command(c)).collect()
    }

    /// A JSON element, mostly an argument, sometimes one that is refused or malformed.
    fn element(r: &mut crate::rng::Rng, out: &mut String) {
        const PIECES: [&str; 22] = [
            "a",
            "SET",
            "k",
            "\\\"",
            "\\\\",
            "\\n",
            "\\u00e9",
            "\\ud83d\\ude00",
            "\\ud800",
            "\\x",
            "é",
            "\u{1}",
            " ",
            "/",
            "\\/",
            "\\u12",
            "ü日",
            "\\t",
            "\\b",
            "0",
            "\\",
            "\"",
        ];
        match r.below(12) {
            0..=5 => {
                out.push('"');
                for _ in 0..r.below(4) {
                    out.push_str(PIECES[r.below(PIECES.len())]);
                }
                if r.below(20) > 0 {
                    out.push('"');
                }
            }
            6 => {
                const NUMBERS: [&str; 18] = [
                    "12",
                    "-0.5",
                    "1e+21",
                    "99.50",
                    "12345678901234567890",
                    "01",
                    "-",
                    "1.",
                    "1e",
                    "1E+5",
                    "-0",
                    "0.0e-0",
                    ".5",
                    "+1",
                    "0x1",
                    "1.5E3",
                    "-01",
                    "7",
                ];
                out.push_str(NUMBERS[r.below(NUMBERS.len())])
            }
            7 => {
                const WORDS: [&str; 8] = [
                    "true", "false", "null", "nul", "tru", "nullx", "True", "false7",
                ];
                out.push_str(WORDS[r.below(WORDS.len())])
            }
            8 => out.push_str(["[]", "[\"a\"]", "{}", "{\"a\":1}"][r.below(4)]),
            9 => out.push_str([" ", "\n", "", "\t", "\r", "\u{b}", "\u{a0}", "\r\n "][r.below(8)]),
            10 => out.push_str([",", "]", "[", ":"][r.below(4)]),
            _ => out.push_str("\"GET\""),
        }
    }

    fn command(r: &mut crate::rng::Rng, out: &mut String) {
        out.push('[');
        for i in 0..r.below(5) {
            if i > 0 {
                out.push(',');
            }
            element(r, out);
        }
        if r.below(25) > 0 {
            out.push(']');
        }
    }

    /// Guards the one-pass reading of command bodies (pipelines, transactions and single
    /// commands): over random bodies, valid and not, it gives the same commands and the same
    /// error text as reading the whole body first and then each value again.
    #[test]
    fn reading_in_one_pass_answers_as_reading_twice() {
        let mut r = crate::rng::Rng::new(27);
        let (mut errors, mut scanned) = (0, 0);
        for _ in 0..20_000 {
            let open = if r.below(30) == 0 {
                [" [", "{", ""][r.below(3)]
            } else {
                "["
            };
            let mut batch = String::from(open);
            for i in 0..r.below(4) {
                if i > 0 {
                    batch.push(',');
                }
                if r.below(15) == 0 {
                    element(&mut r, &mut batch);
                } else {
                    command(&mut r, &mut batch);
                }
            }
            if r.below(25) > 0 {
                batch.push(']');
            }
            if r.below(30) == 0 {
                batch.push_str([" ", "x", "]", "\n"][r.below(4)]);
            }
            let got = parse_batch(batch.as_bytes());
            errors += usize::from(got.is_err());
            scanned += usize::from(scan_batch(&batch).is_some());
            assert_eq!(got, two_pass_batch(batch.as_bytes()), "batch {batch:?}");
            let mut single = String::new();
            command(&mut r, &mut single);
            assert_eq!(
                parse_single(single.as_bytes()),
                two_pass_single(single.as_bytes()),
                "single {single:?}"
            );
        }
        // Both kinds of body were tried, and many were read by hand.
        assert!((2_000..18_000).contains(&errors), "{errors} errors");
        assert!(scanned > 2_000, "{scanned} read by hand");
        // The bodies the clients send most are read by hand.
        let pipeline: Vec<String> = (0..100)
            .map(|i| format!(r#"["SET","p{i}","value-{i}"]"#))
            .collect();
        let pipeline = format!("[{}]", pipeline.join(","));
        assert_eq!(
            scan_batch(&pipeline).map(|c| c.len()),
            Some(100),
            "{pipeline}"
        );
        for single in [
            r#"["SET","k","v"]"#,
            r#" [ "INCRBY" , "n" , -12 ] "#,
            r#"["GET","k"]"#,
        ] {
            assert!(scan_single(single).is_some(), "{single}");
        }
        for bad in [&b"[[\"a\xff\"]]"[..], b"\xff", b""] {
            assert_eq!(parse_batch(bad), two_pass_batch(bad));
            assert_eq!(parse_single(bad), two_pass_single(bad));
        }
    }

    #[test]
    fn numbers_keep_their_text() {
        let c = parse_single(br#"["SET","k",12345678901234567890,"EX",1e+21,true,null,99.50]"#)
            .unwrap();
        let s: Vec<String> = c
            .iter()
            .map(|a| String::from_utf8(a.clone()).unwrap())
            .collect();
        assert_eq!(
            s,
            [
                "SET",
                "k",
                "12345678901234567890",
                "EX",
                "1e+21",
                "true",
                "null",
                "99.50"
            ]
        );
    }

    #[test]
    fn nested_arrays_are_refused() {
        assert!(parse_single(br#"["SET",["a"]]"#).is_err());
        assert!(parse_single(b"[]").is_err());
        assert!(parse_batch(br#"[["GET","a"],"x"]"#).is_err());
    }

    #[test]
    fn percent_and_query() {
        assert_eq!(percent_decode("a%2Fb%20c%zz%", false), b"a/b c%zz%");
        let q = query_args(Some("EX=100&_token=abc&NX&v=a+b"));
        assert_eq!(
            q,
            vec![
                b"EX".to_vec(),
                b"100".to_vec(),
                b"NX".to_vec(),
                b"v".to_vec(),
                b"a b".to_vec()
            ]
        );
        assert_eq!(
            presented_token(&HeaderMap::new(), Some("x=1&_token=t%2B1"), "_token"),
            Some("t+1".into())
        );
    }
}
