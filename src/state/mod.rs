//! The pure state machine: the keyspace, its values and their expiry.
//!
//! Nothing here reads the clock, draws a random number or does I/O. Time arrives as an argument
//! (the record's timestamp on replay, the executor's clock live), so applying the same log
//! always yields the same state.

pub mod acl;
pub mod scanmap;
pub mod stream;
pub mod zset;

use scanmap::ScanMap;
use std::collections::{BTreeSet, VecDeque};

/// A stored value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Vec<u8>),
    Hash(ScanMap<Vec<u8>>),
    List(VecDeque<Vec<u8>>),
    Set(ScanMap<()>),
    ZSet(zset::ZSet),
    Stream(Box<stream::Stream>),
}

impl Value {
    /// The name TYPE answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }
}

/// A key's value with its expiry and last access.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub value: Value,
    /// Absolute expiry, Unix milliseconds.
    pub expire_at_ms: Option<u64>,
    /// Last time a command touched the key (for OBJECT IDLETIME). Not logged: reads update it.
    pub access_ms: u64,
}

/// One database. Expired keys are invisible from the moment their time passes (a rule that
/// depends only on the timestamp a command runs at) and are removed physically either by the
/// next write that touches them or by a logged expiry record.
#[derive(Debug, Default)]
pub struct Db {
    keys: ScanMap<Entry>,
    /// (expiry, key) for every key with a TTL, to find expired keys without a full scan.
    expires: BTreeSet<(u64, Box<[u8]>)>,
    /// ACL users (FLUSHALL leaves them, as in Redis).
    pub acl: acl::Acl,
}

impl Db {
    pub fn new() -> Db {
        Db::default()
    }

    /// Number of keys, including keys whose time has passed but that were not removed yet
    /// (as Redis's DBSIZE).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn expires_count(&self) -> usize {
        self.expires.len()
    }

    pub fn is_expired(entry: &Entry, now_ms: u64) -> bool {
        matches!(entry.expire_at_ms, Some(t) if t <= now_ms)
    }

    /// The live entry for `key`, or None when absent or expired.
    pub fn get(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        self.keys.get(key).filter(|e| !Self::is_expired(e, now_ms))
    }

    /// Mutable access to a live entry. An expired entry found here is removed first, so a write
    /// that touches it sees the key as absent.
    pub fn get_mut(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let expired = match self.keys.get(key) {
            None => return None,
            Some(e) => Self::is_expired(e, now_ms),
        };
        if expired {
            self.remove(key);
            return None;
        }
        self.keys.get_mut(key)
    }

    /// Notes a read or write of `key` at `now_ms`.
    pub fn touch(&mut self, key: &[u8], now_ms: u64) {
        if let Some(e) = self.keys.get_mut(key) {
            e.access_ms = now_ms;
        }
    }

    /// Stores `value` under `key`, replacing any previous value, with the given expiry.
    pub fn insert(&mut self, key: &[u8], value: Value, expire_at_ms: Option<u64>, now_ms: u64) {
        let entry = Entry {
            value,
            expire_at_ms,
            access_ms: now_ms,
        };
        if let Some(old) = self.keys.insert(key, entry) {
            if let Some(t) = old.expire_at_ms {
                self.expires.remove(&(t, key.into()));
            }
        }
        if let Some(t) = expire_at_ms {
            self.expires.insert((t, key.into()));
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let old = self.keys.remove(key)?;
        if let Some(t) = old.expire_at_ms {
            self.expires.remove(&(t, key.into()));
        }
        Some(old)
    }

    /// Changes the expiry of an existing key. Returns false when the key does not exist.
    pub fn set_expire(&mut self, key: &[u8], expire_at_ms: Option<u64>) -> bool {
        let Some(e) = self.keys.get_mut(key) else {
            return false;
        };
        let old = std::mem::replace(&mut e.expire_at_ms, expire_at_ms);
        if let Some(t) = old {
            self.expires.remove(&(t, key.into()));
        }
        if let Some(t) = expire_at_ms {
            self.expires.insert((t, key.into()));
        }
        true
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.expires.clear();
    }

    /// Up to `max` keys whose expiry is at or before `now_ms`, earliest first.
    pub fn expired_keys(&self, now_ms: u64, max: usize) -> Vec<Vec<u8>> {
        self.expires
            .iter()
            .take_while(|(t, _)| *t <= now_ms)
            .take(max)
            .map(|(_, k)| k.to_vec())
            .collect()
    }

    /// All entries, including expired ones (callers filter).
    pub fn raw(&self) -> &ScanMap<Entry> {
        &self.keys
    }
}
