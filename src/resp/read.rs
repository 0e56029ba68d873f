//! Redis's request grammar: what a RESP client sends, read incrementally from a
//! connection's buffer.
//!
//! A request is a multibulk (`*<n>\r\n` then n times `$<len>\r\n<bytes>\r\n`) or an inline
//! line, as redis-cli sends a typed command (`SET a "b c"\n`), exactly as Redis's
//! `processMultibulkBuffer` and `processInlineBuffer` read them: the same limits (a line of at
//! most `RESP_LINE_BYTES_MAX`, a bulk of at most `RESP_BULK_BYTES_MAX`, fewer arguments and
//! shorter ones before AUTH), the same number syntax (no sign, no leading zero), and the same
//! error texts, after which the connection is closed. Unlike a general RESP decoder it reads no
//! nested frames, so there is nothing to recurse into; it keeps its place between reads, so a
//! request that trickles in is read once; and it never reserves what a header merely claims
//! (`RESP_RESERVE_BYTES_MAX` at most, the rest as the bytes arrive).

use crate::config::{
    RESP_ARGS_MAX, RESP_BULK_BYTES_MAX, RESP_LINE_BYTES_MAX, RESP_RESERVE_BYTES_MAX,
    RESP_UNAUTHENTICATED_ARGS_MAX, RESP_UNAUTHENTICATED_BULK_BYTES_MAX,
};

/// A request the connection must be closed for, with Redis's text (the reply is
/// `-ERR Protocol error: <text>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl ProtocolError {
    fn new(text: impl Into<String>) -> ProtocolError {
        ProtocolError(text.into())
    }

    /// The error reply's text, as Redis writes it (a request past the database's size limit
    /// has the hosted service's text).
    pub fn reply_text(&self) -> String {
        if self.0 == TOO_LARGE {
            return format!("ERR {TOO_LARGE}");
        }
        format!("ERR Protocol error: {}", self.0)
    }
}

/// A request past `Reader::request_bytes_max` (the hosted service's words).
const TOO_LARGE: &str = "max request size exceeded";

/// What one step of reading gives: the bytes it used, and a whole request when one ended.
type Step = Result<(usize, Option<Vec<Vec<u8>>>), ProtocolError>;

/// Where the reader is within a multibulk request.
#[derive(Debug, Default)]
struct Multibulk {
    /// Arguments still to come.
    left: usize,
    args: Vec<Vec<u8>>,
    /// The length of the bulk string being read, once its `$` line is read.
    bulk: Option<usize>,
    /// The bytes of its arguments so far.
    bytes: usize,
}

/// One connection's request reader.
#[derive(Debug)]
pub struct Reader {
    multibulk: Option<Multibulk>,
    /// Whether the connection has authenticated (the larger limits apply).
    pub authenticated: bool,
    /// The largest request, its arguments' bytes together (the database's request size
    /// limit, as over REST); a larger one closes the connection with the hosted text.
    pub request_bytes_max: usize,
}

impl Default for Reader {
    fn default() -> Reader {
        Reader {
            multibulk: None,
            authenticated: false,
            request_bytes_max: usize::MAX,
        }
    }
}

/// The end of the line that starts at `from` (the index of its `\r`), if it has one.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .iter()
        .position(|&b| b == b'\r')
        .map(|i| from + i)
}

/// A `*<n>` or `$<len>` line at the start of `buf`: where its `\r` is and the text after
/// the type byte, once the line and its `\n` are whole; `too_big` when it runs past
/// `RESP_LINE_BYTES_MAX` without ending.
fn header<'a>(
    buf: &'a [u8],
    too_big: &'static str,
) -> Result<Option<(usize, &'a [u8])>, ProtocolError> {
    let Some(end) = line_end(buf, 1) else {
        if buf.len() > RESP_LINE_BYTES_MAX {
            return Err(ProtocolError::new(too_big));
        }
        return Ok(None);
    };
    if end > RESP_LINE_BYTES_MAX {
        return Err(ProtocolError::new(too_big));
    }
    if buf.len() < end + 2 {
        return Ok(None);
    }
    Ok(buf.get(1..end).map(|text| (end, text)))
}

/// A request length as Redis's `string2ll` reads it: digits only, no sign (`-` excepted,
/// which the callers treat), no leading zero, within i64.
fn number(text: &[u8]) -> Option<i64> {
    let (neg, digits) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || (digits[0] == b'0' && (digits.len() > 1 || neg)) {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

impl Reader {
    pub fn new() -> Reader {
        Reader::default()
    }

    /// The next request in `buf`, whose bytes are then removed from it; None when it is not
    /// whole yet (read more and call again). An empty request (an empty line, `*0`, `*-1`)
    /// is skipped, as Redis skips it.
    pub fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, ProtocolError> {
        let mut at = 0;
        let r = self.next_at(buf, &mut at);
        buf.drain(..at);
        r
    }

    /// The next request in `buf` from `*at`, which then moves past it: the caller removes
    /// what was read once, after many requests, so a pipeline of many small requests costs
    /// no copy per request.
    pub fn next_at(
        &mut self,
        buf: &[u8],
        at: &mut usize,
    ) -> Result<Option<Vec<Vec<u8>>>, ProtocolError> {
        loop {
            let rest = buf.get(*at..).unwrap_or_default();
            let (consumed, request) = self.step(rest)?;
            *at += consumed;
            match request {
                Some(r) if r.is_empty() => continue,
                Some(r) => return Ok(Some(r)),
                None if consumed > 0 && *at < buf.len() => continue,
                None => return Ok(None),
            }
        }
    }

    /// Whether a request has begun and not ended (its first bytes are read).
    pub fn in_request(&self) -> bool {
        self.multibulk.is_some()
    }

    /// The request begun and not ended, as the bytes of RESP that were read for it (its
    /// count, the arguments whole, the `$` line of the one being read, whose bytes are still
    /// in the caller's buffer); the reader then holds nothing. For a connection that moves
    /// to another node mid-request (`conn`'s move to the leader).
    pub fn take_partial(&mut self) -> Vec<u8> {
        let Some(m) = self.multibulk.take() else {
            return Vec::new();
        };
        let mut out = format!("*{}\r\n", m.args.len() + m.left).into_bytes();
        for a in &m.args {
            put_bulk(&mut out, a);
        }
        if let Some(len) = m.bulk {
            out.extend_from_slice(format!("${len}\r\n").as_bytes());
        }
        out
    }

    /// Reads what it can from the start of `buf`: the bytes it used, and a whole request when
    /// one ended.
    fn step(&mut self, buf: &[u8]) -> Step {
        if self.multibulk.is_none() {
            match buf.first() {
                None => return Ok((0, None)),
                Some(b'*') => return self.multibulk_header(buf),
                Some(_) => return inline(buf, self.request_bytes_max),
            }
        }
        self.bulk(buf)
    }

    fn multibulk_header(&mut self, buf: &[u8]) -> Step {
        let Some((end, text)) = header(buf, "too big mbulk count string")? else {
            return Ok((0, None));
        };
        let n = match number(text) {
            Some(n) if n <= RESP_ARGS_MAX as i64 => n,
            _ => return Err(ProtocolError::new("invalid multibulk length")),
        };
        if n <= 0 {
            return Ok((end + 2, Some(Vec::new())));
        }
        let n = n as usize;
        if !self.authenticated && n > RESP_UNAUTHENTICATED_ARGS_MAX {
            return Err(ProtocolError::new("unauthenticated multibulk length"));
        }
        let reserve = n.min(RESP_RESERVE_BYTES_MAX / std::mem::size_of::<Vec<u8>>());
        // A kept vector (`spare`) when one is there; it makes room for `reserve` itself.
        let mut args = crate::spare::args();
        args.reserve(reserve);
        self.multibulk = Some(Multibulk {
            left: n,
            args,
            bulk: None,
            bytes: 0,
        });
        Ok((end + 2, None))
    }

    /// Reads the next bulk string of the multibulk being read (its `$` line, or its bytes).
    fn bulk(&mut self, buf: &[u8]) -> Step {
        let authenticated = self.authenticated;
        let request_bytes_max = self.request_bytes_max;
        let Some(m) = self.multibulk.as_mut() else {
            return Ok((0, None));
        };
        let Some(len) = m.bulk else {
            let Some(&first) = buf.first() else {
                return Ok((0, None));
            };
            if first != b'$' {
                return Err(ProtocolError(format!(
                    "expected '$', got '{}'",
                    char::from(first)
                )));
            }
            let Some((end, text)) = header(buf, "too big bulk count string")? else {
                return Ok((0, None));
            };
            let len = match number(text) {
                Some(n) if n >= 0 && n as u64 <= RESP_BULK_BYTES_MAX as u64 => n as usize,
                _ => return Err(ProtocolError::new("invalid bulk length")),
            };
            if !authenticated && len > RESP_UNAUTHENTICATED_BULK_BYTES_MAX {
                return Err(ProtocolError::new("unauthenticated bulk length"));
            }
            m.bytes = m.bytes.saturating_add(len);
            if m.bytes > request_bytes_max {
                return Err(ProtocolError::new(TOO_LARGE));
            }
            m.bulk = Some(len);
            return Ok((end + 2, None));
        };
        // The bytes and their CRLF (which Redis does not check, and neither does this).
        if buf.len() < len + 2 {
            return Ok((0, None));
        }
        // Allocated only now that its bytes are all here.
        m.args.push(crate::spare::bytes(&buf[..len]));
        m.bulk = None;
        m.left -= 1;
        if m.left > 0 {
            return Ok((len + 2, None));
        }
        let args = std::mem::take(&mut m.args);
        self.multibulk = None;
        Ok((len + 2, Some(args)))
    }
}

fn put_bulk(out: &mut Vec<u8>, a: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// A request as the multibulk a client sends (an inline one too: the same arguments).
pub fn encode_request(out: &mut Vec<u8>, args: &[Vec<u8>]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        put_bulk(out, a);
    }
}

/// An inline request: one line, split into arguments as Redis's `sdssplitargs` splits it.
fn inline(buf: &[u8], request_bytes_max: usize) -> Step {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > RESP_LINE_BYTES_MAX {
            return Err(ProtocolError::new("too big inline request"));
        }
        return Ok((0, None));
    };
    if nl > RESP_LINE_BYTES_MAX {
        return Err(ProtocolError::new("too big inline request"));
    }
    if nl > request_bytes_max {
        return Err(ProtocolError::new(TOO_LARGE));
    }
    let mut line = &buf[..nl];
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    match split_args(line) {
        Some(args) => Ok((nl + 1, Some(args))),
        None => Err(ProtocolError::new("unbalanced quotes in request")),
    }
}

fn hex(d: u8) -> Option<u8> {
    char::from(d).to_digit(16).map(|v| v as u8)
}

/// Redis's `sdssplitargs`: arguments separated by spaces, each plain, "double quoted" (with
/// `\n`, `\r`, `\t`, `\b`, `\a`, `\xHH` and `\<c>` escapes) or 'single quoted' (with `\'`); a
/// closing quote must end the argument. None for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let space = |b: u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c);
    loop {
        while line.get(i).is_some_and(|&b| space(b)) {
            i += 1;
        }
        if i >= line.len() {
            return Some(out);
        }
        let mut arg = Vec::new();
        let (mut dq, mut sq) = (false, false);
        loop {
            let c = line.get(i).copied();
            if dq {
                match c {
                    None => return None,
                    Some(b'\\')
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).and_then(|&d| hex(d)).is_some()
                            && line.get(i + 3).and_then(|&d| hex(d)).is_some() =>
                    {
                        let hi = line.get(i + 2).and_then(|&d| hex(d))?;
                        let lo = line.get(i + 3).and_then(|&d| hex(d))?;
                        arg.push(hi * 16 + lo);
                        i += 3;
                    }
                    Some(b'\\') if line.get(i + 1).is_some() => {
                        i += 1;
                        arg.push(match line.get(i).copied()? {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        // The closing quote must be followed by a space or the end.
                        if line.get(i + 1).is_some_and(|&b| !space(b)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => arg.push(other),
                }
            } else if sq {
                match c {
                    None => return None,
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        arg.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|&b| !space(b)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => arg.push(other),
                }
            } else {
                match c {
                    None => break,
                    Some(b) if space(b) => break,
                    Some(b'"') => dq = true,
                    Some(b'\'') => sq = true,
                    Some(other) => arg.push(other),
                }
            }
            i += 1;
        }
        out.push(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(r: &mut Reader, bytes: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut buf = bytes.to_vec();
        let mut out = Vec::new();
        while let Some(req) = r.next(&mut buf)? {
            out.push(req);
        }
        Ok(out)
    }

    fn args(a: &[&str]) -> Vec<Vec<u8>> {
        a.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn authed() -> Reader {
        Reader {
            authenticated: true,
            ..Reader::default()
        }
    }

    /// A request cut anywhere, its read part re-encoded by `take_partial` and followed by
    /// the bytes not yet read, reads back whole on a fresh reader: what a connection moving
    /// to the leader mid-request hands over loses and adds nothing.
    #[test]
    fn a_request_cut_anywhere_moves_whole() {
        let mut wire = Vec::new();
        encode_request(&mut wire, &args(&["SET", "key", "a\r\nb", ""]));
        encode_request(&mut wire, &args(&["BLPOP", "l", "0"]));
        for cut in 0..=wire.len() {
            let mut r = authed();
            let mut at = 0;
            let mut got = Vec::new();
            while let Some(req) = r.next_at(&wire[..cut], &mut at).expect("reads") {
                got.push(req);
            }
            let mut moved = r.take_partial();
            assert!(!r.in_request());
            moved.extend_from_slice(&wire[at..]);
            got.extend(read_all(&mut authed(), &moved).expect("reads back"));
            assert_eq!(
                got,
                vec![
                    args(&["SET", "key", "a\r\nb", ""]),
                    args(&["BLPOP", "l", "0"])
                ],
                "cut at {cut}"
            );
        }
    }

    /// Pipelined multibulk and inline requests read in order, whole or a byte at a time,
    /// with empty requests skipped.
    #[test]
    fn requests_read_whole_or_a_byte_at_a_time() {
        let wire = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$0\r\n\r\nPING\r\n*0\r\n*-1\r\n\r\nSET k \"a b\"\n*1\r\n$4\r\nPING\r\n";
        let want = vec![
            args(&["SET", "a", ""]),
            args(&["PING"]),
            args(&["SET", "k", "a b"]),
            args(&["PING"]),
        ];
        assert_eq!(read_all(&mut authed(), wire), Ok(want.clone()));
        let mut r = authed();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        for &b in wire.iter() {
            buf.push(b);
            while let Some(req) = r.next(&mut buf).expect("valid") {
                got.push(req);
            }
        }
        assert_eq!(got, want);
        assert!(buf.is_empty());
    }

    /// Redis's texts for every malformed header, and its number syntax.
    #[test]
    fn malformed_requests_get_redis_protocol_errors() {
        for (wire, text) in [
            (&b"*abc\r\n"[..], "invalid multibulk length"),
            (b"*+1\r\n", "invalid multibulk length"),
            (b"*01\r\n", "invalid multibulk length"),
            (b"*-0\r\n", "invalid multibulk length"),
            (b"*2147483648\r\n", "invalid multibulk length"),
            (b"*99999999999999999999\r\n", "invalid multibulk length"),
            (b"*1\r\n:1\r\n", "expected '$', got ':'"),
            (b"*1\r\n*1\r\n", "expected '$', got '*'"),
            (b"*1\r\n$abc\r\n", "invalid bulk length"),
            (b"*1\r\n$+3\r\nabc\r\n", "invalid bulk length"),
            (b"*1\r\n$03\r\nabc\r\n", "invalid bulk length"),
            (b"*1\r\n$-1\r\n", "invalid bulk length"),
            (b"*1\r\n$-2\r\n", "invalid bulk length"),
            (b"*1\r\n$-0\r\n", "invalid bulk length"),
            (b"*1\r\n$ 3\r\n", "invalid bulk length"),
            (b"*1\r\n$3 \r\n", "invalid bulk length"),
            (b"*1\r\n$\r\n", "invalid bulk length"),
            (b"*1\r\n$536870913\r\n", "invalid bulk length"),
            (b"SET \"a\"b\r\n", "unbalanced quotes in request"),
            (b"SET \"a\r\n", "unbalanced quotes in request"),
            (b"SET 'a\r\n", "unbalanced quotes in request"),
        ] {
            assert_eq!(
                read_all(&mut authed(), wire),
                Err(ProtocolError(text.into())),
                "{}",
                String::from_utf8_lossy(wire)
            );
        }
        assert_eq!(
            ProtocolError("invalid bulk length".into()).reply_text(),
            "ERR Protocol error: invalid bulk length"
        );
    }

    /// Lines without an end are refused past 64 KB; a header's length is not allocated before
    /// its bytes come; a deep nesting of arrays is refused at its second byte.
    #[test]
    fn claims_and_endless_lines_cost_nothing() {
        let mut long = vec![b'a'; RESP_LINE_BYTES_MAX + 1];
        assert_eq!(
            read_all(&mut authed(), &long),
            Err(ProtocolError("too big inline request".into()))
        );
        long[0] = b'*';
        assert_eq!(
            read_all(&mut authed(), &long),
            Err(ProtocolError("too big mbulk count string".into()))
        );
        let mut bulk = b"*1\r\n$".to_vec();
        bulk.extend(vec![b'1'; RESP_LINE_BYTES_MAX + 1]);
        assert_eq!(
            read_all(&mut authed(), &bulk),
            Err(ProtocolError("too big bulk count string".into()))
        );
        // 512 MB and 2^31-1 arguments claimed, a few bytes sent: incomplete, little reserved.
        let mut r = authed();
        let mut buf = b"*2147483647\r\n$536870912\r\nabc".to_vec();
        assert_eq!(r.next(&mut buf), Ok(None));
        let m = r.multibulk.as_ref().expect("in a multibulk");
        assert!(m.args.capacity() * std::mem::size_of::<Vec<u8>>() <= RESP_RESERVE_BYTES_MAX);
        assert_eq!(m.bulk, Some(536_870_912));
        assert_eq!(buf, b"abc");
        let nested = b"*1\r\n".repeat(100_000);
        assert_eq!(
            read_all(&mut authed(), &nested),
            Err(ProtocolError("expected '$', got '*'".into()))
        );
    }

    /// Before AUTH, a request of more than 10 arguments or an argument over 16 KB is refused.
    /// The database's request size limit holds over RESP as over REST, before the bytes
    /// arrive.
    #[test]
    fn a_request_past_the_size_limit_is_refused_with_the_hosted_text() {
        let mut r = authed();
        r.request_bytes_max = 10;
        assert_eq!(
            read_all(&mut r, b"*2\r\n$3\r\nGET\r\n$8\r\n").map_err(|e| e.reply_text()),
            Err("ERR max request size exceeded".to_string())
        );
        let mut r = authed();
        r.request_bytes_max = 10;
        assert!(read_all(&mut r, b"*2\r\n$3\r\nGET\r\n$7\r\nabcdefg\r\n").is_ok());
        assert!(read_all(&mut r, b"GET abcdefghijk\r\n").is_err());
    }

    #[test]
    fn unauthenticated_limits() {
        let many = format!("*11\r\n{}", "$1\r\na\r\n".repeat(11));
        assert_eq!(
            read_all(&mut Reader::new(), many.as_bytes()),
            Err(ProtocolError("unauthenticated multibulk length".into()))
        );
        assert_eq!(
            read_all(&mut authed(), many.as_bytes()).map(|v| v.len()),
            Ok(1)
        );
        let big = format!("*1\r\n${}\r\n", 16 * 1024 + 1);
        assert_eq!(
            read_all(&mut Reader::new(), big.as_bytes()),
            Err(ProtocolError("unauthenticated bulk length".into()))
        );
    }

    /// Inline arguments split as `sdssplitargs` splits them.
    #[test]
    fn inline_arguments_split_as_redis_splits_them() {
        for (line, want) in [
            (&b"set a b"[..], vec![&b"set"[..], b"a", b"b"]),
            (b"  set   a\tb  ", vec![b"set", b"a", b"b"]),
            (b"set \"a b\" 'c d'", vec![b"set", b"a b", b"c d"]),
            (
                b"set \"\\x41\\n\\\"\" 'it\\'s'",
                vec![b"set", b"A\n\"", b"it's"],
            ),
            (b"set \"\\xZZ\"", vec![b"set", b"xZZ"]),
            (b"set \"\"", vec![b"set", b""]),
            (b"a\"b\"", vec![b"ab"]),
        ] {
            let got = split_args(line).expect("balanced");
            let want: Vec<Vec<u8>> = want.iter().map(|a| a.to_vec()).collect();
            assert_eq!(got, want, "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(split_args(b""), Some(Vec::new()));
        assert_eq!(split_args(b"\"a\"b"), None);
        assert_eq!(split_args(b"a\"b\"c"), None);
    }

    /// Any bytes at all: an error or requests, never a panic, and never more requests than
    /// the bytes could hold.
    #[test]
    fn any_input_reads_without_panic() {
        let mut rng = crate::rng::Rng::new(28);
        let pieces: [&[u8]; 12] = [
            b"*",
            b"$",
            b"\r\n",
            b"\n",
            b"1",
            b"0",
            b"-",
            b"2147483648",
            b"\"",
            b"'",
            b"\\x4",
            b"a ",
        ];
        for _ in 0..20_000 {
            let mut wire = Vec::new();
            for _ in 0..rng.below(24) {
                wire.extend_from_slice(pieces[rng.below(pieces.len())]);
            }
            let mut r = if rng.below(2) == 0 {
                authed()
            } else {
                Reader::new()
            };
            if let Ok(reqs) = read_all(&mut r, &wire) {
                assert!(reqs.len() <= wire.len());
            }
        }
    }
}
