//! Envelopes: `{"result": ...}` and `{"error": "..."}`, base64 at every depth, U+FFFD for
//! invalid UTF-8 otherwise, and the RESP2 format.

use crate::reply::Reply;
use base64::Engine;

/// How strings in a result are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// UTF-8, invalid bytes replaced with U+FFFD.
    Plain,
    /// Standard base64 with padding; a top-level `OK` stays plain.
    Base64,
}

/// Appends a JSON string literal for `s` (invalid UTF-8 becomes U+FFFD).
pub fn json_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    let text = String::from_utf8_lossy(s);
    for &c in text.as_bytes() {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            _ => out.push(c),
        }
    }
    out.push(b'"');
}

fn b64_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    let start = out.len();
    out.resize(start + base64::encoded_len(s.len(), true).unwrap_or(0), 0);
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(s, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + n);
    out.push(b'"');
}

fn string(out: &mut Vec<u8>, s: &[u8], enc: Encoding) {
    match enc {
        Encoding::Plain => json_str(out, s),
        Encoding::Base64 => b64_str(out, s),
    }
}

/// Writes a reply as a JSON value. `top` marks the top-level result, where a base64-mode `OK`
/// stays plain.
pub fn json_value(out: &mut Vec<u8>, r: &Reply, enc: Encoding, top: bool) {
    match r {
        Reply::Status(s) if top && s == "OK" => out.extend_from_slice(b"\"OK\""),
        Reply::Status(s) => string(out, s.as_bytes(), enc),
        Reply::Bulk(b) => string(out, b, enc),
        Reply::Nil | Reply::NilArray => out.extend_from_slice(b"null"),
        Reply::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        // An error nested in an array (rare) is flattened to its text, as RESP2 clients do.
        Reply::Error(e) => string(out, e.as_bytes(), enc),
        Reply::Array(items) => {
            out.push(b'[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_value(out, it, enc, false);
            }
            out.push(b']');
        }
        // REST answers as the hosted service's RESP2 connection reads it.
        Reply::Typed(t) => json_value(out, &t.1, enc, top),
    }
}

/// `{"result": ...}` or, for an error reply, `{"error": "..."}` (never encoded).
pub fn envelope(out: &mut Vec<u8>, r: &Reply, enc: Encoding) {
    match r {
        Reply::Error(e) => error_envelope(out, e),
        _ => {
            out.extend_from_slice(b"{\"result\":");
            json_value(out, r, enc, true);
            out.push(b'}');
        }
    }
}

pub fn error_envelope(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(b"{\"error\":");
    json_str(out, text.as_bytes());
    out.push(b'}');
}

/// A JSON array of envelopes (pipeline and transaction).
pub fn envelopes(replies: &[Reply], enc: Encoding) -> Vec<u8> {
    let mut out = Vec::with_capacity(replies.len() * 24 + 2);
    out.push(b'[');
    for (i, r) in replies.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        envelope(&mut out, r, enc);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(r: &Reply, enc: Encoding) -> String {
        let mut v = Vec::new();
        envelope(&mut v, r, enc);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn base64_at_every_depth_but_top_level_ok() {
        let r = Reply::Array(vec![
            Reply::bulk(&b"f1"[..]),
            Reply::Status("OK".into()),
            Reply::Int(7),
            Reply::Nil,
        ]);
        assert_eq!(
            env(&r, Encoding::Base64),
            r#"{"result":["ZjE=","T0s=",7,null]}"#
        );
        assert_eq!(env(&Reply::ok(), Encoding::Base64), r#"{"result":"OK"}"#);
        assert_eq!(
            env(&Reply::err("ERR x"), Encoding::Base64),
            r#"{"error":"ERR x"}"#
        );
    }

    #[test]
    fn invalid_utf8_becomes_replacement_char() {
        assert_eq!(
            env(&Reply::bulk(vec![b'a', 0xff, b'"']), Encoding::Plain),
            "{\"result\":\"a\u{fffd}\\\"\"}"
        );
    }
}
