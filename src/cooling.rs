//! Cooling down: a database that went past a limit (a script past its time limit, a scratch
//! database past its share of the executor) has its requests refused for `SCRIPT_COOLING_MS`,
//! doubled for each time in a row, up to `SCRIPT_COOLING_MAX_MS`. A time more than
//! `SCRIPT_COOLING_FORGET_MS` after the last no longer counts as in a row.

use crate::config::{SCRIPT_COOLING_FORGET_MS, SCRIPT_COOLING_MAX_MS, SCRIPT_COOLING_MS};
use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// One database's cooling: how many times in a row, until when, and why (`W`).
#[derive(Debug, Clone, Copy)]
pub struct Cooling<W> {
    pub hits: u32,
    last: Instant,
    pub until: Instant,
    pub why: W,
}

/// The coolings of databases (keyed by `K`).
#[derive(Debug)]
pub struct Coolings<K, W> {
    map: HashMap<K, Cooling<W>>,
}

impl<K, W> Default for Coolings<K, W> {
    fn default() -> Self {
        Coolings {
            map: HashMap::new(),
        }
    }
}

/// The length of the `hits`th cooling in a row.
fn length(hits: u32) -> Duration {
    Duration::from_millis(
        SCRIPT_COOLING_MS
            .saturating_mul(1u64 << hits.saturating_sub(1).min(20))
            .min(SCRIPT_COOLING_MAX_MS),
    )
}

impl<K: Hash + Eq + Copy, W> Coolings<K, W> {
    /// `db` went past its limit at `now`, because of `why`: it cools down, longer when the last
    /// time was recent.
    pub fn cool(&mut self, db: K, now: Instant, why: W) {
        let forget = Duration::from_millis(SCRIPT_COOLING_FORGET_MS);
        let hits = match self.map.get(&db) {
            Some(c) if now.duration_since(c.last) < forget => c.hits.saturating_add(1),
            _ => 1,
        };
        self.map.insert(
            db,
            Cooling {
                hits,
                last: now,
                until: now + length(hits),
                why,
            },
        );
        // Forget databases whose cooling has long ended, so the map stays small.
        if self.map.len() > 1024 {
            self.map.retain(|_, c| now.duration_since(c.last) < forget);
        }
    }

    /// `db`'s cooling and how long it lasts still, while it does.
    pub fn left(&self, db: K) -> Option<(&Cooling<W>, Duration)> {
        let c = self.map.get(&db)?;
        let left = c.until.checked_duration_since(Instant::now())?;
        Some((c, left))
    }

    /// Whether `db` has cooled down within the time that counts as in a row.
    pub fn contains(&self, db: K) -> bool {
        self.map.contains_key(&db)
    }

    /// Forgets `db` (a deleted database).
    pub fn forget(&mut self, db: K) {
        self.map.remove(&db);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each time in a row doubles the cooling, up to the maximum; a time long after starts over.
    #[test]
    fn coolings_double_in_a_row_and_start_over_later() {
        let mut c: Coolings<u32, ()> = Coolings::default();
        let t0 = Instant::now();
        c.cool(1, t0, ());
        let (first, _) = c.left(1).expect("cooling");
        assert_eq!(first.hits, 1);
        assert_eq!(first.until - t0, Duration::from_millis(SCRIPT_COOLING_MS));
        c.cool(1, t0, ());
        let (second, _) = c.left(1).expect("cooling");
        assert_eq!(second.hits, 2);
        assert_eq!(
            second.until - t0,
            Duration::from_millis((2 * SCRIPT_COOLING_MS).min(SCRIPT_COOLING_MAX_MS))
        );
        for _ in 0..40 {
            c.cool(1, t0, ());
        }
        let (many, _) = c.left(1).expect("cooling");
        assert_eq!(
            many.until - t0,
            Duration::from_millis(SCRIPT_COOLING_MAX_MS)
        );
        let later = t0 + Duration::from_millis(SCRIPT_COOLING_FORGET_MS + 1);
        c.cool(1, later, ());
        assert_eq!(c.map[&1].hits, 1);
        c.forget(1);
        assert!(!c.contains(1));
    }
}
