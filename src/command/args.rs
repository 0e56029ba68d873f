//! Argument parsing with Redis's exact rules (which strings are integers, which are floats) and
//! the number formats Redis prints.

use crate::reply::{errors, Reply};

/// Redis's `string2ll`: optional `-`, no `+`, no leading zeros, no spaces, no overflow.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else if v > i64::MAX as u64 {
        None
    } else {
        Some(v as i64)
    }
}

/// An integer argument, or Redis's "not an integer" error.
pub fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    parse_i64(b).ok_or_else(|| Reply::err(errors::NOT_INTEGER))
}

/// A float as Redis's `string2ld`/`strtold` accept it: no spaces, no NaN; `inf` allowed.
pub fn parse_f64(b: &[u8]) -> Option<f64> {
    if b.is_empty() || b.len() > 5000 {
        return None;
    }
    let s = std::str::from_utf8(b).ok()?;
    if s.starts_with(|c: char| c.is_whitespace()) || s.ends_with(|c: char| c.is_whitespace()) {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if unsigned.starts_with("nan") {
        return None;
    }
    if let Some(hexdigits) = unsigned.strip_prefix("0x") {
        let neg = lower.starts_with('-');
        let v = u64::from_str_radix(hexdigits, 16).ok()? as f64;
        return Some(if neg { -v } else { v });
    }
    let v: f64 = lower.parse().ok()?;
    if v.is_nan() {
        return None;
    }
    Some(v)
}

/// Formats like Redis's `ld2string(..., LD_STR_HUMAN)`: `%.17f` with trailing zeros trimmed.
/// Redis computes in `long double`; tidepool in `f64`, which prints the same for every value
/// whose sum is exact in binary (see README, "Known differences").
pub fn fmt_human(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let mut s = format!("{x:.17}");
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".into();
    }
    s
}

/// Case-insensitive comparison of an argument with an ASCII keyword.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Redis's glob matcher (`stringmatchlen`): `*`, `?`, `[...]` with `^` and ranges, `\\`
/// escapes. Iterative, backtracking only to the last `*`, so it is O(len(pattern) *
/// len(string)) where the recursive form is exponential on patterns like `*a*a*a*b`.
pub fn glob_match(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None; // (pattern index after '*', string index)
    while i < s.len() {
        let step = if p < pattern.len() {
            glob_token(pattern, p, s[i], nocase)
        } else {
            None
        };
        match step {
            Some(Token::Star) => {
                star = Some((p + 1, i));
                p += 1;
            }
            Some(Token::Matched(next)) => {
                p = next;
                i += 1;
            }
            Some(Token::Failed) | None => match star {
                Some((sp, si)) => {
                    p = sp;
                    i = si + 1;
                    star = Some((sp, si + 1));
                }
                None => return false,
            },
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

enum Token {
    Star,
    /// The token at the pattern index matched the character; the next token starts here.
    Matched(usize),
    Failed,
}

/// Matches one pattern token at `p` against the character `c`.
fn glob_token(pat: &[u8], p: usize, c: u8, nocase: bool) -> Option<Token> {
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    Some(match pat[p] {
        b'*' => Token::Star,
        b'?' => Token::Matched(p + 1),
        b'\\' if p + 1 < pat.len() => {
            if eq(pat[p + 1], c) {
                Token::Matched(p + 2)
            } else {
                Token::Failed
            }
        }
        b'[' => {
            let mut q = p + 1;
            let not = pat.get(q) == Some(&b'^');
            if not {
                q += 1;
            }
            let mut matched = false;
            loop {
                if q >= pat.len() {
                    // Unterminated class: Redis treats the end of the pattern as its end.
                    q = pat.len() - 1;
                    break;
                }
                if pat[q] == b'\\' && q + 1 < pat.len() {
                    q += 1;
                    if eq(pat[q], c) {
                        matched = true;
                    }
                } else if pat[q] == b']' {
                    break;
                } else if q + 2 < pat.len() && pat[q + 1] == b'-' {
                    let (mut lo, mut hi, mut ch) = (pat[q], pat[q + 2], c);
                    if lo > hi {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                    if nocase {
                        lo = lo.to_ascii_lowercase();
                        hi = hi.to_ascii_lowercase();
                        ch = ch.to_ascii_lowercase();
                    }
                    q += 2;
                    if ch >= lo && ch <= hi {
                        matched = true;
                    }
                } else if eq(pat[q], c) {
                    matched = true;
                }
                q += 1;
            }
            if matched != not {
                Token::Matched(q + 1)
            } else {
                Token::Failed
            }
        }
        other => {
            if eq(other, c) {
                Token::Matched(p + 1)
            } else {
                Token::Failed
            }
        }
    })
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

/// Options shared by SCAN, HSCAN (and later SSCAN, ZSCAN): MATCH, COUNT, TYPE.
pub struct ScanOpts {
    pub cursor: u64,
    pub pattern: Option<Vec<u8>>,
    pub count: usize,
    pub type_name: Option<Vec<u8>>,
    pub novalues: bool,
}

/// Parses `cursor [MATCH p] [COUNT n] [TYPE t]` starting at `args[at]` (the cursor).
pub fn scan_opts(args: &[Vec<u8>], at: usize, allow_type: bool) -> Result<ScanOpts, Reply> {
    let cursor = parse_cursor(&args[at]).ok_or_else(|| Reply::err(errors::INVALID_CURSOR))?;
    let mut o = ScanOpts {
        cursor,
        pattern: None,
        count: 10,
        type_name: None,
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
        } else if allow_type && is(&args[i], "type") && more >= 1 {
            o.type_name = Some(args[i + 1].clone());
            i += 2;
        } else if !allow_type && is(&args[i], "novalues") {
            o.novalues = true;
            i += 1;
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
    }
    Ok(o)
}

impl ScanOpts {
    pub fn matches(&self, item: &[u8]) -> bool {
        match &self.pattern {
            None => true,
            Some(p) => p.as_slice() == b"*" || glob_match(p, item, false),
        }
    }
}

#[cfg(test)]
mod glob_tests {
    use super::glob_match;

    #[test]
    fn glob_cases() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes(), false);
        assert!(m("*", "") && m("*", "abc") && m("a*c", "abbbc") && m("a?c", "abc"));
        assert!(!m("a?c", "ac") && !m("a*d", "abc"));
        assert!(m("h[ae]llo", "hello") && m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(
            m("h[a-b]llo", "hbllo")
                && m("h[b-a]llo", "hallo")
                && m("\\*x", "*x")
                && !m("\\*x", "ax")
        );
        assert!(
            !m("k[", "k[") && m("k[ab", "ka"),
            "an unterminated class ends at the pattern end"
        );
        // Linear time on the pattern that makes the recursive form exponential.
        let long = "a".repeat(5000);
        assert!(!glob_match(
            b"*a*a*a*a*a*a*a*a*a*a*b",
            long.as_bytes(),
            false
        ));
    }
}
