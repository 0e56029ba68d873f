//! The open RESP connections: what CLIENT LIST and CLIENT INFO show, and how CLIENT KILL
//! and CLIENT UNBLOCK reach another connection. A connection sees only those of its own
//! database: one tenant never sees another's clients.

use crate::state::databases::DbId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a connection shows of itself.
#[derive(Debug, Clone, Default)]
pub struct Shown {
    pub db: Option<DbId>,
    pub name: String,
    pub user: String,
    pub lib_name: String,
    pub lib_ver: String,
    pub resp: u8,
    pub subscriptions: usize,
    pub patterns: usize,
    pub shard_subscriptions: usize,
    /// Commands queued in MULTI, or -1 outside it.
    pub multi: i64,
    pub last_command: String,
    pub blocked: bool,
    pub monitor: bool,
}

/// One connection, as the others reach it.
pub struct Client {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub created: Instant,
    pub shown: Mutex<Shown>,
    pub last_active: Mutex<Instant>,
    /// Set by CLIENT KILL (or a revoked credential): the connection closes.
    pub killed: AtomicBool,
    pub kill: tokio::sync::Notify,
}

impl Client {
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.notify_one();
    }

    /// Its CLIENT LIST line (without the newline), in Redis 7's field order.
    pub fn line(&self, now: Instant) -> String {
        let s = self.shown.lock().map(|s| s.clone()).unwrap_or_default();
        let idle = self
            .last_active
            .lock()
            .map(|t| now.saturating_duration_since(*t).as_secs())
            .unwrap_or(0);
        let mut flags = String::new();
        if s.blocked {
            flags.push('b');
        }
        if s.monitor {
            flags.push('O');
        }
        if s.subscriptions + s.patterns + s.shard_subscriptions > 0 {
            flags.push('P');
        }
        if s.multi >= 0 {
            flags.push('x');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        format!(
            "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags={} db=0 sub={} psub={} ssub={} multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            s.name,
            now.saturating_duration_since(self.created).as_secs(),
            idle,
            flags,
            s.subscriptions,
            s.patterns,
            s.shard_subscriptions,
            s.multi,
            if s.last_command.is_empty() { "NULL" } else { &s.last_command },
            s.user,
            s.resp,
            s.lib_name,
            s.lib_ver,
        )
    }

    pub fn db(&self) -> Option<DbId> {
        self.shown.lock().ok().and_then(|s| s.db)
    }
}

#[derive(Default)]
pub struct Clients {
    open: Mutex<BTreeMap<u64, Arc<Client>>>,
}

impl Clients {
    pub fn add(&self, c: Arc<Client>) {
        if let Ok(mut m) = self.open.lock() {
            m.insert(c.id, c);
        }
    }

    pub fn remove(&self, id: u64) {
        if let Ok(mut m) = self.open.lock() {
            m.remove(&id);
        }
    }

    /// The connections of database `db`, in id order.
    pub fn of(&self, db: DbId) -> Vec<Arc<Client>> {
        self.open
            .lock()
            .map(|m| m.values().filter(|c| c.db() == Some(db)).cloned().collect())
            .unwrap_or_default()
    }

    pub fn count(&self) -> usize {
        self.open.lock().map(|m| m.len()).unwrap_or(0)
    }
}
