//! Numbers as Redis reads and prints them: which strings are integers and floats (`string2ll`,
//! `strtold` rules) and the `%.17g` format. A leaf: the command layer, the RDB codec and the
//! state all use it.

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

#[cfg(test)]
mod tests {
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
