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

/// A double as Redis 7.0 replies with it: `%.17g`, and `inf`/`-inf`.
pub fn fmt_g17(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{x:.16e}"); // d.dddddddddddddddde<exp>, correctly rounded to 17 digits
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    if (-4..17).contains(&exp) {
        let mut out = String::new();
        if exp >= 0 {
            let (int, frac) = digits.split_at((exp + 1) as usize);
            out.push_str(int);
            out.push('.');
            out.push_str(frac);
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(&digits);
        }
        let out = out.trim_end_matches('0').trim_end_matches('.');
        format!("{sign}{out}")
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = rest.trim_end_matches('0');
        let m = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        format!(
            "{sign}{m}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    }
}

/// A double as Redis's `string2d` accepts it (ZADD scores, weights, increments): the whole
/// string, no leading space, no NaN, no overflow.
pub fn parse_double(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v = strtod_full(s)?;
    if v.is_nan() {
        return None;
    }
    Some(v)
}

/// `strtod` over the whole string (decimal, `inf`/`infinity`, hex integers); None if anything
/// is left over or the value overflows or underflows to zero from a non-zero text.
pub fn strtod_full(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if lower.len() - body.len() > 1 {
        return None;
    }
    let neg = lower.starts_with('-');
    if body == "inf" || body == "infinity" {
        return Some(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if body.starts_with("nan") {
        return Some(f64::NAN);
    }
    if let Some(hex) = body.strip_prefix("0x") {
        let v = u64::from_str_radix(hex, 16).ok()? as f64;
        return Some(if neg { -v } else { v });
    }
    if !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let v: f64 = lower.parse().ok()?;
    if v.is_infinite() {
        return None; // ERANGE
    }
    if v == 0.0
        && body
            .split('e')
            .next()
            .is_some_and(|m| m.bytes().any(|c| (b'1'..=b'9').contains(&c)))
    {
        return None; // underflow to zero: ERANGE
    }
    Some(v)
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

#[cfg(test)]
mod double_tests {
    use super::fmt_g17;

    #[test]
    fn g17_matches_printf() {
        assert_eq!(fmt_g17(1.1), "1.1000000000000001");
        assert_eq!(fmt_g17(1.5), "1.5");
        assert_eq!(fmt_g17(100.0), "100");
        assert_eq!(fmt_g17(-0.0), "-0");
        assert_eq!(fmt_g17(1e17), "1e+17");
        assert_eq!(fmt_g17(1.5e-5), "1.5e-05"); // each expectation checked against glibc printf
        assert_eq!(fmt_g17(0.0001), "0.0001");
        assert_eq!(fmt_g17(123456789012345678.0), "1.2345678901234568e+17");
        assert_eq!(fmt_g17(f64::INFINITY), "inf");
    }
}
