//! Argument parsing with Redis's exact rules and error texts: integer and count arguments,
//! keywords, cursors, SCAN options, and the `tri!` early return that every family uses.

use crate::glob::glob_match;
use crate::num::parse_i64;
use crate::reply::{errors, Reply};

/// `tri!(expr)`: the value of an `Ok`, or return the `Err` (a reply) from the command.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}
pub(crate) use tri;

/// Redis's start/end arithmetic for a range of bytes or bits (GETRANGE, BITCOUNT, BITPOS):
/// negative indexes count from the end, both ends are clamped into `0..len`, and the inclusive
/// range is None when empty. (LRANGE's differs: an end before the start is empty there, not
/// clamped to the first element; see `lists::range`.)
pub fn clamp_range(len: i64, start: i64, end: i64) -> Option<(i64, i64)> {
    let s = if start < 0 { start + len } else { start }.max(0);
    let e = if end < 0 { end + len } else { end }.max(0).min(len - 1);
    (s <= e).then_some((s, e))
}

/// An integer argument, or Redis's "not an integer" error.
pub fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    parse_i64(b).ok_or_else(|| Reply::err(errors::NOT_INTEGER))
}

/// A float as Redis's `string2ld`/`strtold` accept it: no spaces, no NaN; `inf` allowed.
/// The count of HRANDFIELD, SRANDMEMBER and ZRANDMEMBER, read as Redis reads it
/// (`getRangeLongFromObjectOrReply` between -LONG_MAX and LONG_MAX, with its error text).
pub fn random_count_arg(b: &[u8]) -> Result<i64, Reply> {
    match int_arg(b)? {
        i64::MIN => Err(Reply::err(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        )),
        c => Ok(c),
    }
}

/// Case-insensitive comparison of an argument with an ASCII keyword.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// A cursor as `strtoul` reads it: optional sign (a negative value wraps), decimal digits,
/// no overflow.
pub fn parse_cursor(b: &[u8]) -> Option<u64> {
    let (neg, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Which of the scan commands an option list belongs to: each takes its own options.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scanning {
    /// SCAN: TYPE, and the hosted service's WITHTYPE (each key followed by its type).
    Keys,
    /// HSCAN: NOVALUES (Redis 7.4).
    Hash,
    /// SSCAN and ZSCAN: MATCH and COUNT only.
    Members,
}

/// Options of SCAN, HSCAN, SSCAN and ZSCAN: MATCH, COUNT, and each one's own.
pub struct ScanOpts {
    pub cursor: u64,
    pub pattern: Option<Vec<u8>>,
    pub count: usize,
    pub type_name: Option<Vec<u8>>,
    pub with_type: bool,
    pub novalues: bool,
}

/// Parses `cursor [MATCH p] [COUNT n] [...]` starting at `args[at]` (the cursor).
pub fn scan_opts(args: &[Vec<u8>], at: usize, what: Scanning) -> Result<ScanOpts, Reply> {
    let cursor = parse_cursor(&args[at]).ok_or_else(|| Reply::err(errors::INVALID_CURSOR))?;
    let mut o = ScanOpts {
        cursor,
        pattern: None,
        count: 10,
        type_name: None,
        with_type: false,
        novalues: false,
    };
    let mut i = at + 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        if is(&args[i], "count") && more >= 1 {
            let n = int_arg(&args[i + 1])?;
            if n < 1 {
                return Err(Reply::err(errors::SYNTAX));
            }
            o.count = n as usize;
            i += 2;
        } else if is(&args[i], "match") && more >= 1 {
            o.pattern = Some(args[i + 1].clone());
            i += 2;
        } else if what == Scanning::Keys && is(&args[i], "type") && more >= 1 {
            o.type_name = Some(args[i + 1].clone());
            i += 2;
        } else if what == Scanning::Keys && is(&args[i], "withtype") {
            o.with_type = true;
            i += 1;
        } else if what == Scanning::Hash && is(&args[i], "novalues") {
            o.novalues = true;
            i += 1;
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
    }
    Ok(o)
}

impl ScanOpts {
    /// How many elements this call visits in a collection of `len` (HSCAN, SSCAN, ZSCAN).
    /// Redis answers a scan of a small collection (one in its compact encoding) whole, in one
    /// call, with cursor 0. COUNT is a hint, so this never breaks a caller that loops.
    pub fn budget(&self, len: usize) -> usize {
        if self.cursor == 0 && len <= crate::config::SCAN_WHOLE_ENTRIES_MAX {
            usize::MAX
        } else {
            self.count
        }
    }

    pub fn matches(&self, item: &[u8]) -> bool {
        match &self.pattern {
            None => true,
            Some(p) => p.as_slice() == b"*" || glob_match(p, item, false),
        }
    }
}
