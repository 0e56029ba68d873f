//! The pure state machine: the keyspace, its values and their expiry.
//!
//! Nothing here reads the clock, draws a random number or does I/O. Time arrives as an argument
//! (the record's timestamp on replay, the executor's clock live), so applying the same log
//! always yields the same state.

pub mod acl;
pub mod databases;
pub mod hash;
pub mod json;
pub mod key;
pub mod list;
pub mod ranked;
pub mod scanmap;
pub mod stream;
pub mod string;
pub mod table;
pub mod zset;

use scanmap::ScanMap;
pub use string::Str;
use table::Keyspace;

impl From<std::collections::VecDeque<Vec<u8>>> for Box<list::List> {
    fn from(items: std::collections::VecDeque<Vec<u8>>) -> Box<list::List> {
        Box::new(list::List::from(items))
    }
}
use std::collections::BTreeSet;

/// A stored value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Str),
    Hash(Box<hash::Hash>),
    List(Box<list::List>),
    Set(Box<ScanMap<()>>),
    ZSet(Box<zset::ZSet>),
    Stream(Box<stream::Stream>),
    /// A JSON document (JSON.* commands).
    Json(Box<json::Json>),
}

impl Value {
    /// The bytes the value holds: its strings, members, fields and values, each element with
    /// `ELEMENT_OVERHEAD_BYTES` more (so a million empty list items are not free), 8 a score,
    /// 16 a stream ID, a stream's consumer groups (`Stream::groups_bytes`), and a JSON
    /// document's estimate (`Json::mem_bytes`). What the value-size
    /// and data-size limits count, and `INFO memory`'s dataset. Kept by each type as it
    /// changes, so this is O(1), but for a JSON document, which is walked.
    pub fn data_bytes(&self) -> usize {
        const E: usize = ELEMENT_OVERHEAD_BYTES;
        match self {
            Value::Str(s) => s.len(),
            Value::Hash(h) => h.data_bytes() + 2 * E * h.len(),
            Value::List(l) => l.data_bytes() + E * l.len(),
            Value::Set(s) => s.key_bytes() + E * s.len(),
            Value::ZSet(z) => z.data_bytes() + E * z.len(),
            Value::Stream(s) => s.data_bytes() + s.groups_bytes(),
            Value::Json(j) => j.mem_bytes(),
        }
    }

    /// The name TYPE answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
            // Upstash answers "json" (Redis with the RedisJSON module says "ReJSON-RL").
            Value::Json(_) => "json",
        }
    }
}

/// Whether reads leave keys' last access as it was: while a forked snapshot child runs, as
/// Redis does, since a read that wrote it would copy the page the child shares (measured: a
/// steady GET and SET load on 1,000,000 keys during a BGSAVE took the server and its child to
/// 1.77x the server's memory). The last access is not logged, so nothing else depends on it.
static ACCESS_TIMES_PAUSED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Pauses (or resumes) the noting of keys' last access (see `ACCESS_TIMES_PAUSED`).
pub fn pause_access_times(paused: bool) {
    ACCESS_TIMES_PAUSED.store(paused, std::sync::atomic::Ordering::Relaxed);
}

/// A key's value with its expiry and last access: 32 bytes, so that with its key (24) it
/// fills one 56-byte node, a 64-byte chunk of the allocator's (see `table::Keyspace`).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub value: Value,
    /// Absolute expiry, Unix milliseconds; 0 for none.
    expire: u64,
    /// Last time a command touched the key, Unix seconds (for OBJECT IDLETIME, whose answer
    /// is in seconds). Not logged: reads update it.
    access_s: u32,
    /// The key's and value's bytes as last counted into the database's total
    /// (`Db::refresh`); `u32::MAX` for more, the count then kept in `Db::huge`.
    bytes: u32,
}

impl Entry {
    /// An entry of `value`, expiring at `expire_at_ms`, last touched at `access_ms`.
    pub fn new(value: Value, expire_at_ms: Option<u64>, access_ms: u64) -> Entry {
        let mut e = Entry {
            value,
            expire: 0,
            access_s: 0,
            bytes: 0,
        };
        e.set_expire_at_ms(expire_at_ms);
        e.set_access_ms(access_ms);
        e
    }

    /// Absolute expiry, Unix milliseconds.
    pub fn expire_at_ms(&self) -> Option<u64> {
        (self.expire != 0).then_some(self.expire)
    }

    fn set_expire_at_ms(&mut self, at: Option<u64>) {
        // An expiry at 0 is kept as 1: long past either way, and 0 means none.
        self.expire = at.map_or(0, |t| t.max(1));
    }

    /// The last access, Unix milliseconds (to the second).
    pub fn access_ms(&self) -> u64 {
        u64::from(self.access_s) * 1000
    }

    pub fn set_access_ms(&mut self, ms: u64) {
        self.access_s = u32::try_from(ms / 1000).unwrap_or(u32::MAX);
    }
}

/// What each element of a collection counts beyond its bytes (a length, as a listpack keeps).
pub const ELEMENT_OVERHEAD_BYTES: usize = 1;
/// What each key counts beyond its name and value (its entry).
pub const KEY_OVERHEAD_BYTES: usize = 16;

/// An entry's byte count as last counted (see `Entry::bytes`).
fn counted(huge: &std::collections::HashMap<Box<[u8]>, u64>, key: &[u8], e: &Entry) -> u64 {
    if e.bytes == u32::MAX {
        huge.get(key).copied().unwrap_or(u64::from(u32::MAX))
    } else {
        u64::from(e.bytes)
    }
}

/// Keeps `bytes` as `e`'s count (in `huge` when it does not fit the entry's).
fn count(
    huge: &mut std::collections::HashMap<Box<[u8]>, u64>,
    key: &[u8],
    e: &mut Entry,
    bytes: u64,
) {
    match u32::try_from(bytes) {
        Ok(b) if b < u32::MAX => {
            if e.bytes == u32::MAX {
                huge.remove(key);
            }
            e.bytes = b;
        }
        _ => {
            e.bytes = u32::MAX;
            huge.insert(key.into(), bytes);
        }
    }
}

/// What a key costs against the data-size limits: its name, its value's bytes, and the
/// entry's overhead.
fn entry_bytes(key: &[u8], value: &Value) -> u64 {
    (KEY_OVERHEAD_BYTES + key.len() + value.data_bytes()) as u64
}

/// One database. Expired keys are invisible from the moment their time passes (a rule that
/// depends only on the timestamp a command runs at) and are removed physically either by the
/// next write that touches them or by a logged expiry record.
#[derive(Debug, Default)]
pub struct Db {
    keys: Keyspace<Entry>,
    /// The byte counts of the entries that hold 4 GiB or more (whose own count says
    /// `u32::MAX`).
    huge: std::collections::HashMap<Box<[u8]>, u64>,
    /// (expiry, key) for every key with a TTL, to find expired keys without a full scan.
    expires: BTreeSet<(u64, Box<[u8]>)>,
    /// (time, key) for hashes with field TTLs: each such hash has an entry at or before its
    /// earliest field expiry. Entries may be stale (the hash changed or went); whoever pops
    /// one checks the hash. Derived from the values, never logged.
    field_expiry: BTreeSet<(u64, Box<[u8]>)>,
    /// ACL users (FLUSHALL leaves them, as in Redis).
    pub acl: acl::Acl,
    /// Lua function libraries (FUNCTION LOAD), name to code; FLUSHALL leaves them, as in Redis.
    functions: std::collections::BTreeMap<String, Vec<u8>>,
    /// Bumped on every change to `functions`, so the executor knows to load them again.
    functions_version: u64,
    /// The bytes of every key and value (each entry's `bytes`), kept by `insert`, `remove`,
    /// `clear` and `refresh`: the database's data size, for its limit and `INFO memory`.
    data_bytes: u64,
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

    /// The bytes of every key and value together (see [`Value::data_bytes`]).
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Counts the bytes of `key`'s value again after a change in place, into the total.
    /// Cheap (see [`Value::data_bytes`]), and right whenever it is called: a change that was
    /// not followed by one is counted at the key's next.
    pub fn refresh(&mut self, key: &[u8]) {
        if let Some(e) = self.keys.get_mut(key) {
            let now = entry_bytes(key, &e.value);
            let before = counted(&self.huge, key, e);
            self.data_bytes = self.data_bytes.saturating_sub(before) + now;
            count(&mut self.huge, key, e, now);
        }
    }

    /// The bytes of `key`'s value now, counted again (0 when absent, expired or not).
    pub fn value_bytes_of(&self, key: &[u8]) -> u64 {
        self.keys
            .get(key)
            .map_or(0, |e| e.value.data_bytes() as u64)
    }

    /// The bytes `key` holds now, counted again (0 when absent, expired or not).
    pub fn bytes_of(&self, key: &[u8]) -> u64 {
        self.keys.get(key).map_or(0, |e| entry_bytes(key, &e.value))
    }

    /// Counts every key again (after a replay, which changes values in place without
    /// `refresh`).
    pub fn recount(&mut self) {
        let mut total = 0;
        self.huge.clear();
        for (k, e) in self.keys.iter_mut() {
            let b = entry_bytes(k, &e.value);
            count(&mut self.huge, k, e, b);
            total += b;
        }
        self.data_bytes = total;
    }

    pub fn expires_count(&self) -> usize {
        self.expires.len()
    }

    pub fn is_expired(entry: &Entry, now_ms: u64) -> bool {
        entry.expire != 0 && entry.expire <= now_ms
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

    /// Notes a read or write of `key` at `now_ms`: only when the second changed, and not while
    /// a forked snapshot runs (see `pause_access_times`), so that a read writes no memory it
    /// need not.
    pub fn touch(&mut self, key: &[u8], now_ms: u64) {
        if ACCESS_TIMES_PAUSED.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if let Some(e) = self.keys.get_mut(key) {
            if e.access_ms() != now_ms / 1000 * 1000 {
                e.set_access_ms(now_ms);
            }
        }
    }

    /// Stores `value` under `key`, replacing any previous value, with the given expiry.
    pub fn insert(&mut self, key: &[u8], mut value: Value, expire_at_ms: Option<u64>, now_ms: u64) {
        // A hash that arrives with field TTLs (RENAME, COPY) needs an index entry of its own.
        let field_ttls = match &mut value {
            Value::Hash(h) if h.has_ttls() => {
                h.set_indexed_at(None);
                true
            }
            _ => false,
        };
        let bytes = entry_bytes(key, &value);
        let mut entry = Entry::new(value, expire_at_ms, now_ms);
        entry.bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        if let Some(old) = self.keys.insert(key, entry) {
            let before = counted(&self.huge, key, &old);
            self.data_bytes = self.data_bytes.saturating_sub(before);
            if let Some(t) = old.expire_at_ms() {
                self.expires.remove(&(t, key.into()));
            }
        }
        if bytes >= u64::from(u32::MAX) {
            self.huge.insert(key.into(), bytes);
        } else if !self.huge.is_empty() {
            self.huge.remove(key);
        }
        self.data_bytes += bytes;
        if let Some(t) = expire_at_ms {
            self.expires.insert((t, key.into()));
        }
        if field_ttls {
            self.index_field_ttls(key);
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let old = self.keys.remove(key)?;
        let bytes = counted(&self.huge, key, &old);
        if old.bytes == u32::MAX {
            self.huge.remove(key);
        }
        self.data_bytes = self.data_bytes.saturating_sub(bytes);
        if let Some(t) = old.expire_at_ms() {
            self.expires.remove(&(t, key.into()));
        }
        Some(old)
    }

    /// Changes the expiry of an existing key. Returns false when the key does not exist.
    pub fn set_expire(&mut self, key: &[u8], expire_at_ms: Option<u64>) -> bool {
        let Some(e) = self.keys.get_mut(key) else {
            return false;
        };
        let old = e.expire_at_ms();
        e.set_expire_at_ms(expire_at_ms);
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
        self.huge.clear();
        self.expires.clear();
        self.field_expiry.clear();
        self.data_bytes = 0;
    }

    pub fn functions(&self) -> &std::collections::BTreeMap<String, Vec<u8>> {
        &self.functions
    }

    pub fn functions_version(&self) -> u64 {
        self.functions_version
    }

    pub fn set_function_library(&mut self, name: &str, code: Vec<u8>) {
        self.functions.insert(name.to_string(), code);
        self.functions_version += 1;
    }

    pub fn delete_function_library(&mut self, name: &str) -> bool {
        let found = self.functions.remove(name).is_some();
        self.functions_version += 1;
        found
    }

    pub fn flush_function_libraries(&mut self) {
        self.functions.clear();
        self.functions_version += 1;
    }

    /// Whether any hash may have field TTLs (a quick test before looking for expired fields).
    pub fn has_field_ttls(&self) -> bool {
        !self.field_expiry.is_empty()
    }

    /// Makes sure the hash at `key`, after its field TTLs changed, has an index entry at or
    /// before its earliest field expiry.
    pub fn index_field_ttls(&mut self, key: &[u8]) {
        let Some(Entry {
            value: Value::Hash(h),
            ..
        }) = self.keys.get_mut(key)
        else {
            return;
        };
        let Some(min) = h.min_ttl() else {
            return;
        };
        if h.indexed_at().is_none_or(|at| min < at) {
            h.set_indexed_at(Some(min));
            self.field_expiry.insert((min, key.into()));
        }
    }

    /// Fields of the live hash at `key` whose time has passed (all of them).
    pub fn expired_fields_of(&self, key: &[u8], now_ms: u64) -> Vec<Vec<u8>> {
        match self.get(key, now_ms) {
            Some(Entry {
                value: Value::Hash(h),
                ..
            }) if h.has_ttls() => h.expired_fields(now_ms, usize::MAX),
            _ => Vec::new(),
        }
    }

    /// Takes index entries due at `now_ms` and answers, per hash, its fields whose time has
    /// passed: at most `max` fields in all. The caller removes them with `remove_fields`,
    /// which indexes the hash again.
    pub fn due_field_expiries(&mut self, now_ms: u64, max: usize) -> Vec<(Vec<u8>, Vec<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut budget = max;
        while budget > 0 {
            let Some((at, key)) = self.field_expiry.first().cloned() else {
                break;
            };
            if at > now_ms {
                break;
            }
            self.field_expiry.remove(&(at, key.clone()));
            let Some(Entry {
                value: Value::Hash(h),
                expire,
                ..
            }) = self.keys.get_mut(&key)
            else {
                continue;
            };
            if h.indexed_at() != Some(at) || (*expire != 0 && *expire <= now_ms) {
                // Stale, or the whole key is expiring anyway.
                continue;
            }
            h.set_indexed_at(None);
            let fields = h.expired_fields(now_ms, budget);
            if fields.is_empty() {
                self.index_field_ttls(&key);
                continue;
            }
            budget -= fields.len();
            out.push((key.to_vec(), fields));
        }
        out
    }

    /// Removes fields of the hash at `key` (their time passed), the key too when none are
    /// left, and indexes what remains.
    pub fn remove_fields(&mut self, key: &[u8], fields: &[Vec<u8>]) {
        let empty = match self.keys.get_mut(key) {
            Some(Entry {
                value: Value::Hash(h),
                ..
            }) => {
                for f in fields {
                    h.remove(f);
                }
                h.is_empty()
            }
            _ => return,
        };
        if empty {
            self.remove(key);
        } else {
            self.refresh(key);
            self.index_field_ttls(key);
        }
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

    /// Brings the first slot a lookup of `key` reads into the cache, without waiting.
    pub fn prefetch_slot(&self, key: &[u8]) {
        self.keys.prefetch_slot(key);
    }

    /// Brings `key`'s node into the cache, without waiting; its slot should be there already
    /// (`prefetch_slot` a while before), or this waits for it.
    pub fn prefetch_node(&self, key: &[u8]) {
        self.keys.prefetch_node(key);
    }

    /// All entries, including expired ones (callers filter).
    pub fn raw(&self) -> &Keyspace<Entry> {
        &self.keys
    }

    /// Room for `n` keys in all, before a snapshot's load (`Keyspace::reserve`).
    pub fn reserve_keys(&mut self, n: usize) {
        self.keys.reserve(n);
    }
    /// Back to the keys' own size after it (`Keyspace::fit`).
    pub fn fit_keys(&mut self) {
        self.keys.fit();
    }

    /// Where two databases differ in what the log determines: keys with their values and
    /// expiry, ACL users, function libraries. Not the last access of a key (reads set it, and
    /// reads are not logged). Derived indexes are compared through
    /// what they index; the field-expiry index may hold stale entries by design and is
    /// compared by what it finds due. `None` when they are the same.
    pub fn difference(&self, other: &Db) -> Option<String> {
        if self.keys.len() != other.keys.len() {
            return Some(format!(
                "{} keys against {}",
                self.keys.len(),
                other.keys.len()
            ));
        }
        for (k, e) in self.keys.iter() {
            match other.keys.get(k) {
                None => return Some(format!("key {:?} is missing", String::from_utf8_lossy(k))),
                Some(o) if o.value != e.value || o.expire != e.expire => {
                    return Some(format!(
                        "key {:?} differs:\n{e:?}\n{o:?}",
                        String::from_utf8_lossy(k)
                    ))
                }
                Some(_) => {}
            }
        }
        if self.expires != other.expires {
            return Some("the expiry index differs".into());
        }
        if !self.acl.same_state(&other.acl) {
            return Some(format!(
                "ACL users differ:\n{:?}\n{:?}",
                self.acl.users, other.acl.users
            ));
        }
        if self.functions != other.functions {
            return Some("function libraries differ".into());
        }
        let due = |d: &Db| {
            d.keys
                .iter()
                .filter_map(|(k, e)| match &e.value {
                    Value::Hash(h) => h.min_ttl().map(|t| (t, k.to_vec())),
                    _ => None,
                })
                .collect::<BTreeSet<_>>()
        };
        if due(self) != due(other) {
            return Some("hash field expiries differ".into());
        }
        None
    }
}
