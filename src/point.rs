//! A position in the log: a record's sequence number, or a time. `tidepool serve --at` and the
//! log tool's `--from`, `--to` take one. A leaf.

/// Numbers from here on are times in Unix milliseconds (1973-03-03), not sequence numbers.
pub const TIME_MS_FROM: u64 = 100_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    Seq(u64),
    TimeMs(u64),
}

impl Point {
    /// A sequence number, Unix milliseconds (any number from [`TIME_MS_FROM`] on), or an
    /// RFC 3339 time.
    pub fn parse(text: &str) -> Result<Point, String> {
        if let Ok(n) = text.parse::<u64>() {
            return Ok(if n >= TIME_MS_FROM {
                Point::TimeMs(n)
            } else {
                Point::Seq(n)
            });
        }
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
            .map(Point::TimeMs)
            .ok_or_else(|| {
                format!(
                    "'{text}' is neither a sequence number, nor Unix milliseconds, nor an RFC 3339 time"
                )
            })
    }

    /// Whether a record at `seq` and `ts` lies at or before this point.
    pub fn at_or_before(&self, seq: u64, ts: u64) -> bool {
        match *self {
            Point::Seq(s) => seq <= s,
            Point::TimeMs(t) => ts <= t,
        }
    }

    /// Whether a record at `seq` and `ts` lies at or after this point.
    pub fn at_or_after(&self, seq: u64, ts: u64) -> bool {
        match *self {
            Point::Seq(s) => seq >= s,
            Point::TimeMs(t) => ts >= t,
        }
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::Seq(s) => write!(f, "record #{s}"),
            Point::TimeMs(t) => write!(f, "{}", rfc3339(*t)),
        }
    }
}

/// A record's time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(ts: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ts as i64)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ts.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse() {
        assert_eq!(Point::parse("42"), Ok(Point::Seq(42)));
        assert_eq!(
            Point::parse("1795554904472"),
            Ok(Point::TimeMs(1_795_554_904_472))
        );
        assert_eq!(
            Point::parse("2026-11-24T14:05:00Z"),
            Ok(Point::TimeMs(1_795_529_100_000))
        );
        assert!(Point::parse("yesterday").is_err());
        assert!(Point::parse("-1").is_err());
        assert!(Point::Seq(3).at_or_before(3, 0) && !Point::Seq(3).at_or_before(4, 0));
        assert!(Point::TimeMs(10).at_or_after(3, 10) && !Point::TimeMs(10).at_or_after(3, 9));
    }
}
