//! Five-field cron with an optional `CRON_TZ=<IANA zone> ` prefix (UTC otherwise).
//!
//! Parsing and next-time search come from the `croner` crate (standard Vixie semantics: when
//! both day-of-month and day-of-week are restricted, either may match); zones from `chrono-tz`.

use chrono::{TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};

/// A checked schedule expression.
pub struct CronSpec {
    cron: croner::Cron,
    tz: chrono_tz::Tz,
}

impl CronSpec {
    pub fn parse(text: &str) -> Result<CronSpec, String> {
        let t = text.trim();
        let (tz, expr) = match t.strip_prefix("CRON_TZ=") {
            Some(rest) => {
                let (zone, expr) = rest
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("invalid cron '{t}': nothing after CRON_TZ"))?;
                let tz: chrono_tz::Tz = zone
                    .parse()
                    .map_err(|_| format!("invalid cron '{t}': unknown time zone '{zone}'"))?;
                (tz, expr.trim())
            }
            None => (chrono_tz::UTC, t),
        };
        if expr.split_whitespace().count() != 5 {
            return Err(format!(
                "invalid cron '{t}': use five fields (minute hour day-of-month month day-of-week)"
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| format!("invalid cron '{t}': {e}"))?;
        Ok(CronSpec { cron, tz })
    }

    /// The first firing strictly after `after_ms` (Unix ms), if there is one.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        let start = Utc
            .timestamp_millis_opt(after_ms as i64)
            .single()?
            .with_timezone(&self.tz);
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        u64::try_from(next.timestamp_millis()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ten_minutes() {
        let c = CronSpec::parse("*/10 * * * * ").expect("parses");
        // 2026-01-01T00:03:00Z -> 00:10.
        let t0 = 1_767_225_780_000;
        assert_eq!(c.next_after(t0), Some(1_767_226_200_000));
    }

    #[test]
    fn time_zone_prefix() {
        let c = CronSpec::parse("CRON_TZ=America/New_York 0 9 * * *").expect("parses");
        // 2026-01-01T00:00Z -> 09:00 New York = 14:00Z.
        assert_eq!(
            c.next_after(1_767_225_600_000),
            Some(1_767_225_600_000 + 14 * 3_600_000)
        );
    }

    #[test]
    fn refusals() {
        assert!(CronSpec::parse("* * * *").is_err());
        assert!(CronSpec::parse("0 * * * * *").is_err());
        assert!(CronSpec::parse("61 * * * *").is_err());
        assert!(CronSpec::parse("CRON_TZ=Nowhere/Else * * * * *").is_err());
    }
}
