//! What the executor keeps for RESP connections: the keys each one WATCHes, and the
//! connections blocked in BLPOP and the other blocking commands. Both are woken by the same
//! thing: a record that writes a key (`touched`, called for every key-value record, whichever
//! door or script or expiry it came from), so a REST write breaks a RESP WATCH and wakes a
//! RESP BLPOP.

use super::Access;
use crate::reply::Reply;
use crate::state::databases::DbId;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A connection's WATCH.
#[derive(Default)]
struct Watching {
    /// The keys, each with whether it had expired when it was watched.
    keys: Vec<(DbId, Vec<u8>, bool)>,
    /// A watched key was written since.
    broken: bool,
}

/// A connection waiting in a blocking command.
pub struct Blocked {
    pub db: DbId,
    /// The command, as it is tried again (XREAD's `$` replaced by the IDs when it blocked).
    pub args: Vec<Vec<u8>>,
    pub access: Access,
    pub client: Arc<str>,
    /// The keys it waits on.
    keys: Vec<Vec<u8>>,
    /// What it answers if its time runs out (the command's nil).
    pub timeout_reply: Reply,
    pub reply: tokio::sync::oneshot::Sender<super::Answer>,
}

#[derive(Default)]
pub struct Sessions {
    watchers: HashMap<(DbId, Vec<u8>), Vec<u64>>,
    watching: HashMap<u64, Watching>,
    waiting: HashMap<(DbId, Vec<u8>), VecDeque<u64>>,
    blocked: HashMap<u64, Blocked>,
    /// Keys written that blocked connections wait on, in the order they were written.
    ready: Vec<(DbId, Vec<u8>)>,
}

impl Sessions {
    /// Nothing is watched and nobody waits: a record costs no look here.
    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty() && self.waiting.is_empty()
    }

    pub fn blocked_count(&self) -> usize {
        self.blocked.len()
    }

    /// WATCH: adds keys to connection `conn`'s watch; `expired[i]` says whether `keys[i]` was
    /// absent or expired now.
    pub fn watch(&mut self, conn: u64, db: DbId, keys: Vec<(Vec<u8>, bool)>) {
        let w = self.watching.entry(conn).or_default();
        for (key, expired) in keys {
            if w.keys.iter().any(|(d, k, _)| *d == db && *k == key) {
                continue;
            }
            let list = self.watchers.entry((db, key.clone())).or_default();
            list.push(conn);
            w.keys.push((db, key, expired));
        }
    }

    /// UNWATCH (and EXEC, DISCARD, a closed connection): forgets the connection's watch.
    pub fn unwatch(&mut self, conn: u64) {
        let Some(w) = self.watching.remove(&conn) else {
            return;
        };
        for (db, key, _) in w.keys {
            if let Some(list) = self.watchers.get_mut(&(db, key.clone())) {
                list.retain(|c| *c != conn);
                if list.is_empty() {
                    self.watchers.remove(&(db, key));
                }
            }
        }
    }

    /// Whether connection `conn`'s transaction must fail: a watched key was written, or has
    /// expired since it was watched (`expired_now` says whether a key is absent or expired
    /// now). Forgets the watch.
    pub fn take_watch(&mut self, conn: u64, expired_now: impl Fn(DbId, &[u8]) -> bool) -> bool {
        let broken = match self.watching.get(&conn) {
            None => false,
            Some(w) => {
                w.broken
                    || w.keys
                        .iter()
                        .any(|(db, key, was)| !*was && expired_now(*db, key))
            }
        };
        self.unwatch(conn);
        broken
    }

    /// A record wrote `key` of `db`.
    pub fn touch(&mut self, db: DbId, key: &[u8]) {
        // The lookup wants an owned key; most records touch nothing watched, so look first.
        if self.watchers.is_empty() && self.waiting.is_empty() {
            return;
        }
        let k = (db, key.to_vec());
        if let Some(list) = self.watchers.get(&k) {
            for c in list {
                if let Some(w) = self.watching.get_mut(c) {
                    w.broken = true;
                }
            }
        }
        if self.waiting.contains_key(&k) && !self.ready.contains(&k) {
            self.ready.push(k);
        }
    }

    /// A record emptied database `db` (FLUSHALL, FLUSHDB): the watches on its keys that
    /// existed when they were watched break (one created since broke its watch already), as
    /// in Redis 7.0, where a flush touches only the keys it removes.
    pub fn touch_all(&mut self, db: DbId) {
        for w in self.watching.values_mut() {
            if w.keys.iter().any(|(d, _, absent)| *d == db && !*absent) {
                w.broken = true;
            }
        }
    }

    /// Registers connection `conn` as blocked on `keys`.
    pub fn block(&mut self, conn: u64, keys: Vec<Vec<u8>>, b: BlockedParts) {
        for k in &keys {
            self.waiting
                .entry((b.db, k.clone()))
                .or_default()
                .push_back(conn);
        }
        self.blocked.insert(
            conn,
            Blocked {
                db: b.db,
                args: b.args,
                access: b.access,
                client: b.client,
                keys,
                timeout_reply: b.timeout_reply,
                reply: b.reply,
            },
        );
    }

    /// Takes connection `conn` out of waiting (its time ran out, it was unblocked, or it was
    /// served).
    pub fn unblock(&mut self, conn: u64) -> Option<Blocked> {
        let b = self.blocked.remove(&conn)?;
        for k in &b.keys {
            let at = (b.db, k.clone());
            if let Some(q) = self.waiting.get_mut(&at) {
                q.retain(|c| *c != conn);
                if q.is_empty() {
                    self.waiting.remove(&at);
                }
            }
        }
        Some(b)
    }

    /// The next written key that someone waits on, with the connections waiting on it in the
    /// order they came.
    pub fn next_ready(&mut self) -> Option<(DbId, Vec<u64>)> {
        while !self.ready.is_empty() {
            let k = self.ready.remove(0);
            if let Some(q) = self.waiting.get(&k) {
                return Some((k.0, q.iter().copied().collect()));
            }
        }
        None
    }

    /// The connections blocked in database `db`.
    pub fn blocked_in(&self, db: DbId) -> Vec<u64> {
        self.blocked
            .iter()
            .filter(|(_, b)| b.db == db)
            .map(|(c, _)| *c)
            .collect()
    }
}

/// A blocked command's parts, as the executor hands them over.
pub struct BlockedParts {
    pub db: DbId,
    pub args: Vec<Vec<u8>>,
    pub access: Access,
    pub client: Arc<str>,
    pub timeout_reply: Reply,
    pub reply: tokio::sync::oneshot::Sender<super::Answer>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_breaks_the_watches_on_its_key_and_no_others() {
        let mut s = Sessions::default();
        s.watch(1, 0, vec![(b"a".to_vec(), false)]);
        s.watch(2, 0, vec![(b"b".to_vec(), false)]);
        s.watch(3, 1, vec![(b"a".to_vec(), false)]);
        s.touch(0, b"a");
        assert!(s.take_watch(1, |_, _| false));
        assert!(!s.take_watch(2, |_, _| false));
        assert!(!s.take_watch(3, |_, _| false));
        assert!(s.is_empty());
    }

    #[test]
    fn a_key_that_expires_after_the_watch_breaks_it() {
        let mut s = Sessions::default();
        s.watch(1, 0, vec![(b"a".to_vec(), false), (b"gone".to_vec(), true)]);
        assert!(!s.take_watch(1, |_, k| k == b"gone"));
        s.watch(1, 0, vec![(b"a".to_vec(), false)]);
        assert!(s.take_watch(1, |_, k| k == b"a"));
    }

    #[test]
    fn waiters_are_served_in_the_order_they_came() {
        let mut s = Sessions::default();
        for conn in [5, 3, 9] {
            let (reply, _) = tokio::sync::oneshot::channel();
            s.block(
                conn,
                vec![b"l".to_vec()],
                BlockedParts {
                    db: 0,
                    args: vec![],
                    access: Access::Full,
                    client: Arc::from("c"),
                    timeout_reply: Reply::NilArray,
                    reply,
                },
            );
        }
        s.touch(0, b"other");
        assert!(s.next_ready().is_none());
        s.touch(0, b"l");
        s.touch(0, b"l");
        assert_eq!(s.next_ready(), Some((0, vec![5, 3, 9])));
        assert!(s.next_ready().is_none());
        assert!(s.unblock(3).is_some());
        s.touch(0, b"l");
        assert_eq!(s.next_ready(), Some((0, vec![5, 9])));
        s.unblock(5);
        s.unblock(9);
        assert!(s.is_empty());
    }
}
