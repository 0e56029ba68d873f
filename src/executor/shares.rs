//! How much of the single executor scratch databases may take. Anyone who can reach
//! `POST /start` makes one, and every job of every database runs on the one executor, so a
//! scratch database's requests (its scripts, and its slow commands: a SORT of a large list, a
//! SUNIONSTORE of large sets) are held to a share of the executor's time: each scratch
//! database to `SCRATCH_SHARE_PERCENT` of a window of `SCRATCH_WINDOW_MS`, and all of them
//! together to `SCRATCH_ALL_SHARE_PERCENT`. A database past its share cools down: its
//! requests are refused for `SCRIPT_COOLING_MS`, doubled for each time in a row, up to
//! `SCRIPT_COOLING_MAX_MS`. When all of them together pass theirs, every scratch request is
//! refused for the rest of the window's length, so that together they keep to their share
//! however many there are, and the one whose request tipped it cools down as above. One job can still hold the executor for as long as it runs (a
//! script for its database's time limit); what this bounds is how often.
//!
//! Named and default databases are not held to a share: their owners were chosen by the
//! operator, and their scripts hold the executor for their time limit, as in Redis.

use crate::config::{SCRATCH_ALL_SHARE_PERCENT, SCRATCH_SHARE_PERCENT, SCRATCH_WINDOW_MS};
use crate::cooling::Coolings;
use crate::state::databases::DbId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Time used since `since`.
#[derive(Debug, Clone, Copy)]
struct Window {
    since: Instant,
    used: Duration,
}

impl Window {
    fn new(now: Instant) -> Window {
        Window {
            since: now,
            used: Duration::ZERO,
        }
    }

    /// Adds `ran` at `now`, starting a new window when the last one ended; whether the window
    /// now holds more than `percent` of its length.
    fn add(&mut self, now: Instant, ran: Duration, percent: u32) -> bool {
        let length = Duration::from_millis(SCRATCH_WINDOW_MS);
        if now.duration_since(self.since) > length {
            *self = Window::new(now);
        }
        self.used += ran;
        let over = self.used > length * percent / 100;
        if over {
            *self = Window::new(now);
        }
        over
    }
}

/// The scratch databases' use of the executor.
#[derive(Debug, Default)]
pub struct Shares {
    each: HashMap<DbId, Window>,
    all: Option<Window>,
    /// Each database's cooling, and whether it was all of them together that passed their
    /// share, this one last.
    cooling: Coolings<DbId, bool>,
    /// Every scratch request is refused until then: all of them together passed their share.
    all_until: Option<Instant>,
}

impl Shares {
    /// The refusal of a request of scratch database `db` while it cools down, or None.
    pub fn refusal(&self, db: DbId) -> Option<String> {
        if let Some(left) = self
            .all_until
            .and_then(|t| t.checked_duration_since(Instant::now()))
        {
            if !self.cooling.contains(db) || self.own_left(db) < left {
                return Some(format!(
                    "ERR scratch databases' requests are refused for {} ms more: the scratch \
                     databases together used more than {SCRATCH_ALL_SHARE_PERCENT}% of the server \
                     over the last {SCRATCH_WINDOW_MS} ms",
                    left.as_millis().max(1)
                ));
            }
        }
        let (c, left) = self.cooling.left(db)?;
        let why = if c.why {
            format!(
                "the scratch databases together used more than {SCRATCH_ALL_SHARE_PERCENT}% of \
                 the server over the last {SCRATCH_WINDOW_MS} ms, and this one's request was the \
                 last of it"
            )
        } else {
            format!(
                "its requests used more than {SCRATCH_SHARE_PERCENT}% of the server over the last \
                 {SCRATCH_WINDOW_MS} ms"
            )
        };
        Some(format!(
            "ERR this scratch database's requests are refused for {} ms more: {why} ({} time{} \
             in a row)",
            left.as_millis().max(1),
            c.hits,
            if c.hits == 1 { "" } else { "s" }
        ))
    }

    /// How long `db`'s own cooling lasts still.
    fn own_left(&self, db: DbId) -> Duration {
        self.cooling.left(db).map(|(_, l)| l).unwrap_or_default()
    }

    /// A request of scratch database `db` held the executor for `ran`: counted, and the
    /// database cools down when it (or all of them) went past the share.
    pub fn ran(&mut self, db: DbId, ran: Duration) {
        let now = Instant::now();
        let own = self.each.entry(db).or_insert_with(|| Window::new(now)).add(
            now,
            ran,
            SCRATCH_SHARE_PERCENT,
        );
        let all = self.all.get_or_insert_with(|| Window::new(now)).add(
            now,
            ran,
            SCRATCH_ALL_SHARE_PERCENT,
        );
        if all {
            let rest = Duration::from_millis(SCRATCH_WINDOW_MS)
                * (100 - SCRATCH_ALL_SHARE_PERCENT.min(100))
                / 100;
            self.all_until = Some(now + rest);
        }
        if own || all {
            self.cooling.cool(db, now, all && !own);
        }
        if self.each.len() > 4096 {
            let length = Duration::from_millis(SCRATCH_WINDOW_MS);
            self.each
                .retain(|_, w| now.duration_since(w.since) <= length);
        }
    }

    /// Forgets a deleted database.
    pub fn forget(&mut self, db: DbId) {
        self.each.remove(&db);
        self.cooling.forget(db);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch database that keeps the executor past its share is refused, and one that
    /// stays within it is not; all of them together are held to theirs.
    #[test]
    fn a_database_past_its_share_cools_down() {
        let mut s = Shares::default();
        let window = Duration::from_millis(SCRATCH_WINDOW_MS);
        s.ran(1, window * SCRATCH_SHARE_PERCENT / 100 / 2);
        assert!(s.refusal(1).is_none());
        s.ran(1, window * SCRATCH_SHARE_PERCENT / 100);
        let r = s.refusal(1).expect("cooling");
        assert!(
            r.contains("refused for") && r.contains("1 time in a row"),
            "{r}"
        );
        assert!(s.refusal(2).is_none());
        // Many databases, each within its own share, past the share of all together.
        let mut s = Shares::default();
        let each = window * (SCRATCH_SHARE_PERCENT - 1) / 100;
        let mut refused = Vec::new();
        for db in 10..20 {
            s.ran(db, each);
            if s.refusal(db).is_some() {
                refused.push(db);
            }
        }
        assert!(!refused.is_empty(), "no database cooled down");
        let r = s.refusal(refused[0]).unwrap_or_default();
        assert!(r.contains("together"), "{r}");
        // Then every scratch database is refused for the rest of the window, one that ran
        // nothing included.
        let r = s.refusal(99).unwrap_or_default();
        assert!(
            r.starts_with("ERR scratch databases' requests are refused"),
            "{r}"
        );
    }
}
