//! A command's reply, in the RESP2 shapes the REST clients expect.

pub mod resp3;

/// A RESP2 reply. Doubles are bulk strings (RESP2 has no double type), maps are flat arrays.
/// Serializable, for a cluster follower that forwards a request to its leader.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    /// `+OK`, `+PONG`, TYPE's `+string`: most a constant text, made without an allocation.
    Status(std::borrow::Cow<'static, str>),
    /// A bulk string.
    Bulk(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The nil bulk string `$-1`.
    Nil,
    /// The nil array `*-1`.
    NilArray,
    Int(i64),
    Array(Vec<Reply>),
    /// An error reply; the text starts with the error class word (`ERR`, `WRONGTYPE`, ...).
    Error(String),
    /// A reply that carries a RESP3 type of its own over its RESP2 form: a Lua script's
    /// `{double=..}`, `{map=..}`, `{set=..}`, `{big_number=..}` or `{verbatim_string=..}`. A
    /// RESP3 connection sees the type; RESP2, JSON and every other reader see the RESP2 form.
    Typed(Box<(Resp3, Reply)>),
}

/// The RESP3 type of a [`Reply::Typed`]; the RESP2 form beside it is an array (a map's
/// pairs flat) or a bulk string (the number's or the text's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Resp3 {
    Map,
    Set,
    Double,
    BigNumber,
    /// A verbatim string, with its three-letter format (`txt`, `mkd`).
    Verbatim([u8; 3]),
    /// A boolean; its RESP2 form is `:1` or `:0`.
    Bool,
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Status(std::borrow::Cow::Borrowed("OK"))
    }
    pub fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }
    pub fn bulk(b: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(b.into())
    }
    pub fn opt_bulk(b: Option<&[u8]>) -> Reply {
        match b {
            Some(b) => Reply::Bulk(b.to_vec()),
            None => Reply::Nil,
        }
    }
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
    pub fn bulks<I, B>(items: I) -> Reply
    where
        I: IntoIterator<Item = B>,
        B: Into<Vec<u8>>,
    {
        Reply::Array(items.into_iter().map(|b| Reply::Bulk(b.into())).collect())
    }

    /// About how many bytes this reply takes once encoded (its strings, plus a few bytes of
    /// framing per element): what the reply size limit counts.
    pub fn wire_bytes(&self) -> usize {
        match self {
            Reply::Status(s) => s.len() + 8,
            Reply::Error(s) => s.len() + 8,
            Reply::Bulk(b) => b.len() + 8,
            Reply::Nil | Reply::NilArray | Reply::Int(_) => 8,
            Reply::Array(items) => items.iter().map(Reply::wire_bytes).sum::<usize>() + 8,
            Reply::Typed(t) => t.1.wire_bytes(),
        }
    }

    /// Writes the RESP2 encoding, as a TCP client would receive it.
    pub fn write_resp2(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Status(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(s) => line(out, b'-', s.as_bytes()),
            Reply::Int(i) => {
                out.push(b':');
                out.extend_from_slice(i.to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Bulk(b) => {
                out.push(b'$');
                out.extend_from_slice(b.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                out.push(b'*');
                out.extend_from_slice(items.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for i in items {
                    i.write_resp2(out);
                }
            }
            Reply::Typed(t) => t.1.write_resp2(out),
        }
    }
}

/// A one-line reply (`+status`, `-error`, a RESP3 big number): a CR or LF in its text is
/// written as a space, as Redis writes it, so that no text can end the line early and
/// inject a reply of its own.
pub fn line(out: &mut Vec<u8>, kind: u8, text: &[u8]) {
    out.push(kind);
    if text.iter().any(|b| *b == b'\r' || *b == b'\n') {
        out.extend(
            text.iter()
                .map(|b| if matches!(b, b'\r' | b'\n') { b' ' } else { *b }),
        );
    } else {
        out.extend_from_slice(text);
    }
    out.extend_from_slice(b"\r\n");
}

/// Redis's standard error texts, in one place so that every command says them the same way.
pub mod errors {
    pub const SYNTAX: &str = "ERR syntax error";
    /// The hosted service's texts for its plan limits (`--max-requests-per-day`,
    /// `--max-value-bytes`).
    pub const DAILY_LIMIT: &str = "ERR max daily request limit exceeded";
    pub const RECORD_SIZE: &str = "ERR max single record size exceeded";
    /// A write that would take a database past its data-size limit (the hosted text).
    pub const DB_CAPACITY: &str = "ERR DB capacity quota exceeded";
    /// A write while the server's memory is past `--max-memory` (Redis's text, `noeviction`).
    pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
    pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
    pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
    pub const NOT_FLOAT: &str = "ERR value is not a valid float";
    pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
    pub const NAN_OR_INF: &str = "ERR increment would produce NaN or Infinity";
    pub const NO_SUCH_KEY: &str = "ERR no such key";
    pub const INVALID_CURSOR: &str = "ERR invalid cursor";
    pub const STRING_TOO_LONG: &str =
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
    pub const OFFSET_OUT_OF_RANGE: &str = "ERR offset is out of range";
    pub const HASH_NOT_INTEGER: &str = "ERR hash value is not an integer";
    pub const HASH_NOT_FLOAT: &str = "ERR hash value is not a float";

    pub fn wrong_arity(name: &str) -> String {
        format!(
            "ERR wrong number of arguments for '{}' command",
            name.to_ascii_lowercase()
        )
    }
    /// How the reason for refusing everything ends when the node restarts itself to rebuild
    /// its state (a cluster node deposed with records the cluster replaced): it refuses only
    /// until then.
    pub const REBUILDING: &str = "this node rebuilds itself from the cluster";
    /// A write refused because the log failed (`why`); the same text from every door, without
    /// the `ERR` class word (the delivery API's JSON error takes it so).
    /// After a failed write or sync of the log, reads are refused as well as writes until a
    /// restart: the write that failed changed the state in memory, which the disk may not
    /// hold, and no reader may see it (the recovery table in `log-format.md`).
    pub fn log_failed_text(why: &str) -> String {
        if why.ends_with(REBUILDING) {
            return format!("{why}: it refuses reads and writes until it has restarted");
        }
        format!("the write-ahead log failed ({why}); reads and writes are refused until the server is restarted")
    }
    pub fn log_failed(why: &str) -> String {
        format!("ERR {}", log_failed_text(why))
    }
    /// A reply past [`crate::config::REPLY_BYTES_MAX`].
    pub fn reply_too_large() -> String {
        format!(
            "ERR the reply would exceed {} bytes (the reply size limit): ask for less at once, for example with GETRANGE, SCAN or fewer keys per request",
            crate::config::REPLY_BYTES_MAX
        )
    }
    pub fn invalid_expire(name: &str) -> String {
        format!(
            "ERR invalid expire time in '{}' command",
            name.to_ascii_lowercase()
        )
    }
}
