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
        Some(b'"') => serde_json::from_str::<String>(text).map(String::into_bytes).map_err(|e| format!("ERR invalid JSON string argument: {e}")),
        Some(b'[') | Some(b'{') => Err("ERR command arguments must be strings, numbers, booleans or null, not arrays or objects".into()),
        Some(_) => Ok(text.as_bytes().to_vec()),
        None => Err("ERR empty JSON argument".into()),
    }
}

fn json_command(items: &[&RawValue]) -> Result<Vec<Vec<u8>>, String> {
    if items.is_empty() {
        return Err("ERR empty command: the JSON array needs the command name first".into());
    }
    items.iter().map(|v| json_arg(v)).collect()
}

/// A body `["CMD", arg, ...]`.
pub fn parse_single(body: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let text = std::str::from_utf8(body)
        .map_err(|_| "ERR the request body is not valid UTF-8 JSON".to_string())?;
    let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
        format!("ERR the request body must be a JSON array of command and arguments: {e}")
    })?;
    json_command(&items)
}

/// A body `[["CMD", arg, ...], ...]` (pipeline and transaction).
pub fn parse_batch(body: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let text = std::str::from_utf8(body)
        .map_err(|_| "ERR the request body is not valid UTF-8 JSON".to_string())?;
    let items: Vec<Vec<&RawValue>> = serde_json::from_str(text).map_err(|e| {
        format!("ERR the request body must be a JSON array of commands, each an array: {e}")
    })?;
    items.iter().map(|c| json_command(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
