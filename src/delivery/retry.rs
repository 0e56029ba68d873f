//! When the next attempt happens: the default backoff, `Upstash-Retry-Delay` expressions, and
//! the destination's own `Retry-After` / rate-limit reset headers.

use crate::config::{DELIVERY_RETRY_WAIT_MS_MAX, RETRY_DELAY_EXPRESSION_DEPTH_MAX};
use chrono::DateTime;

/// The default backoff before retry `n` (1 for the first retry): `min(86400, e^(2.5 n))`
/// seconds, with `unit_ms` milliseconds per second (1000 in production; tests shrink it).
pub fn default_backoff_ms(n: u32, unit_ms: u64) -> u64 {
    let secs = (2.5 * n as f64)
        .exp()
        .min((DELIVERY_RETRY_WAIT_MS_MAX / 1000) as f64);
    (secs * unit_ms as f64) as u64
}

/// Checks an `Upstash-Retry-Delay` expression without running it for real.
pub fn check_expression(expr: &str) -> Result<(), String> {
    eval(expr, 0).map(|_| ())
}

/// Evaluates an `Upstash-Retry-Delay` expression with `retried` set; the result is in ms.
pub fn eval(expr: &str, retried: u32) -> Result<f64, String> {
    let mut p = Parser {
        s: expr.as_bytes(),
        i: 0,
        retried: retried as f64,
        depth: 0,
    };
    let v = p.sum()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!(
            "invalid retry delay expression '{expr}': unexpected text at {}",
            p.i
        ));
    }
    if !v.is_finite() {
        return Err(format!(
            "invalid retry delay expression '{expr}': not a finite number"
        ));
    }
    Ok(v)
}

/// The delay in ms an expression gives for a retry, clamped to what makes sense.
pub fn expression_delay_ms(expr: &str, retried: u32) -> Option<u64> {
    eval(expr, retried)
        .ok()
        .map(|v| v.clamp(0.0, DELIVERY_RETRY_WAIT_MS_MAX as f64 * 365.0) as u64)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    retried: f64,
    /// Nesting of parentheses, signs and calls now open: bounded, so that a crafted header
    /// cannot overflow the stack of this recursive parser.
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn err(&self, what: &str) -> String {
        format!(
            "invalid retry delay expression '{}': {what}",
            String::from_utf8_lossy(self.s)
        )
    }
    /// Runs `f` one nesting level deeper, or refuses past the bound.
    fn nested(&mut self, f: fn(&mut Self) -> Result<f64, String>) -> Result<f64, String> {
        if self.depth >= RETRY_DELAY_EXPRESSION_DEPTH_MAX {
            return Err(self.err(&format!(
                "nested deeper than {RETRY_DELAY_EXPRESSION_DEPTH_MAX} levels"
            )));
        }
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }
    fn sum(&mut self) -> Result<f64, String> {
        let mut v = self.product()?;
        loop {
            if self.eat(b'+') {
                v += self.product()?;
            } else if self.eat(b'-') {
                v -= self.product()?;
            } else {
                return Ok(v);
            }
        }
    }
    fn product(&mut self) -> Result<f64, String> {
        let mut v = self.unary()?;
        loop {
            if self.eat(b'*') {
                v *= self.unary()?;
            } else if self.eat(b'/') {
                v /= self.unary()?;
            } else if self.eat(b'%') {
                v %= self.unary()?;
            } else {
                return Ok(v);
            }
        }
    }
    fn unary(&mut self) -> Result<f64, String> {
        if self.eat(b'-') {
            return Ok(-self.nested(Self::unary)?);
        }
        if self.eat(b'+') {
            return self.nested(Self::unary);
        }
        self.atom()
    }
    fn atom(&mut self) -> Result<f64, String> {
        self.ws();
        if self.eat(b'(') {
            let v = self.nested(Self::sum)?;
            if !self.eat(b')') {
                return Err(self.err("missing ')'"));
            }
            return Ok(v);
        }
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'.') {
            self.i += 1;
        }
        if self.i > start {
            return std::str::from_utf8(&self.s[start..self.i])
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| self.err("bad number"));
        }
        while self.i < self.s.len() && self.s[self.i].is_ascii_alphabetic() {
            self.i += 1;
        }
        let name = String::from_utf8_lossy(&self.s[start..self.i]).to_ascii_lowercase();
        if name.is_empty() {
            return Err(self.err("expected a number, 'retried' or a function"));
        }
        if name == "retried" {
            return Ok(self.retried);
        }
        if !self.eat(b'(') {
            return Err(self.err(&format!("unknown name '{name}'")));
        }
        let mut args = vec![self.nested(Self::sum)?];
        while self.eat(b',') {
            args.push(self.nested(Self::sum)?);
        }
        if !self.eat(b')') {
            return Err(self.err("missing ')'"));
        }
        let one = |f: fn(f64) -> f64| -> Result<f64, String> {
            match args.as_slice() {
                [a] => Ok(f(*a)),
                _ => Err(self.err(&format!("{name} takes one argument"))),
            }
        };
        match name.as_str() {
            "exp" => one(f64::exp),
            "sqrt" => one(f64::sqrt),
            "abs" => one(f64::abs),
            "floor" => one(f64::floor),
            "ceil" => one(f64::ceil),
            "round" => one(f64::round),
            "pow" => match args.as_slice() {
                [a, b] => Ok(a.powf(*b)),
                _ => Err(self.err("pow takes two arguments")),
            },
            "min" if !args.is_empty() => Ok(args.iter().copied().fold(f64::INFINITY, f64::min)),
            "max" if !args.is_empty() => Ok(args.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            _ => Err(self.err(&format!("unknown function '{name}'"))),
        }
    }
}

/// The delay a destination asked for with `Retry-After`, `X-RateLimit-Reset`,
/// `X-RateLimit-Reset-Requests` or `X-RateLimit-Reset-Tokens`: seconds, an RFC 1123 date, or a
/// Go duration (`6m5s`). `None` when absent, unreadable, or beyond a day.
pub fn asked_delay_ms(headers: &[(String, String)], now_ms: u64) -> Option<u64> {
    const NAMES: [&str; 4] = [
        "retry-after",
        "x-ratelimit-reset",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
    ];
    for want in NAMES {
        let Some((_, v)) = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(want)) else {
            continue;
        };
        let v = v.trim();
        let ms = if let Ok(secs) = v.parse::<f64>() {
            (secs >= 0.0).then_some((secs * 1000.0) as u64)
        } else if let Ok(t) = DateTime::parse_from_rfc2822(v) {
            Some((t.timestamp_millis().max(0) as u64).saturating_sub(now_ms))
        } else {
            go_duration_ms(v)
        };
        if let Some(ms) = ms {
            return (ms <= DELIVERY_RETRY_WAIT_MS_MAX).then_some(ms);
        }
    }
    None
}

fn go_duration_ms(v: &str) -> Option<u64> {
    let mut total = 0f64;
    let mut rest = v;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        let num: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-6,
            "us" | "µs" => 1e-3,
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return None,
        };
        total += num * scale;
        rest = &rest[u..];
    }
    Some(total as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_matches_the_reference_table() {
        assert_eq!(default_backoff_ms(1, 1000) / 1000, 12);
        assert_eq!(default_backoff_ms(2, 1000) / 1000, 148);
        assert_eq!(default_backoff_ms(3, 1000) / 1000, 1808);
        assert_eq!(default_backoff_ms(4, 1000) / 1000, 22026);
        assert_eq!(default_backoff_ms(9, 1000) / 1000, 86400);
    }

    #[test]
    fn expressions() {
        assert_eq!(eval("1000", 3), Ok(1000.0));
        assert_eq!(eval("1000 * (1 + retried)", 2), Ok(3000.0));
        assert_eq!(eval("pow(2, retried) * 1000", 3), Ok(8000.0));
        assert_eq!(eval("max(1000, pow(2, retried) * 100)", 1), Ok(1000.0));
        assert_eq!(eval("min(5, 3, 4) + floor(2.7) - abs(-1)", 0), Ok(4.0));
        assert!(eval("1000 *", 0).is_err());
        assert!(eval("foo(1)", 0).is_err());
        assert!(eval("retried)", 0).is_err());
    }

    /// Guards issue 14's crash: 20,000 signs or 50,000 parentheses overflowed the stack.
    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        for expr in [
            "-".repeat(20_000) + "1",
            "(".repeat(50_000) + "1" + &")".repeat(50_000),
            "abs(".repeat(10_000) + "1" + &")".repeat(10_000),
            "+-".repeat(10 * RETRY_DELAY_EXPRESSION_DEPTH_MAX) + "1",
        ] {
            let e = eval(&expr, 0).unwrap_err();
            assert!(e.contains("nested deeper than"), "{e}");
        }
        let ok = "(".repeat(RETRY_DELAY_EXPRESSION_DEPTH_MAX - 1)
            + "1"
            + &")".repeat(RETRY_DELAY_EXPRESSION_DEPTH_MAX - 1);
        assert_eq!(eval(&ok, 0), Ok(1.0));
    }

    #[test]
    fn retry_after_forms() {
        let h = |v: &str| vec![("Retry-After".to_string(), v.to_string())];
        assert_eq!(asked_delay_ms(&h("5"), 0), Some(5000));
        assert_eq!(asked_delay_ms(&h("0"), 0), Some(0));
        assert_eq!(asked_delay_ms(&h("6m5s"), 0), Some(365_000));
        assert_eq!(asked_delay_ms(&h("200000"), 0), None);
        let date = "Thu, 01 Jan 1970 00:00:10 GMT";
        assert_eq!(asked_delay_ms(&h(date), 4000), Some(6000));
        assert_eq!(asked_delay_ms(&[], 0), None);
    }
}
