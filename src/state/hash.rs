//! A hash value: its fields, and the expiry times of the fields that have one (Redis 7.4's
//! hash-field expiration).
//!
//! Reads go through `Deref` to the field map. Every change goes through the methods here, so a
//! field's TTL can never outlive the field: `insert` and `remove` drop it, `insert_keep_ttl`
//! (HINCRBY, HINCRBYFLOAT, HSETEX KEEPTTL) keeps it.

use super::scanmap::ScanMap;
use std::collections::{BTreeSet, HashMap};
use std::ops::Deref;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hash {
    fields: ScanMap<Vec<u8>>,
    /// The bytes of the values together (the fields' are the map's key bytes).
    value_bytes: usize,
    /// Only hashes that ever had a field TTL pay for this.
    ttls: Option<Box<FieldTtls>>,
}

#[derive(Debug, Clone, Default)]
struct FieldTtls {
    /// Field to its expiry, Unix milliseconds.
    by_field: HashMap<Vec<u8>, u64>,
    /// The same, ordered by time: the earliest first.
    by_time: BTreeSet<(u64, Vec<u8>)>,
    /// The time of this hash's entry in the database's field-expiry index, if it has one
    /// (see `Db::index_field_ttls`). Not part of the value.
    indexed_at: Option<u64>,
}

impl PartialEq for FieldTtls {
    fn eq(&self, other: &Self) -> bool {
        self.by_field == other.by_field
    }
}

impl Deref for Hash {
    type Target = ScanMap<Vec<u8>>;
    fn deref(&self) -> &ScanMap<Vec<u8>> {
        &self.fields
    }
}

impl Hash {
    pub fn new() -> Hash {
        Hash::default()
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Sets a field and drops its TTL (HSET, HMSET, HSETNX). Returns the previous value.
    pub fn insert(&mut self, field: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
        self.clear_ttl(field);
        self.insert_keep_ttl(field, value)
    }

    /// Sets a field and keeps its TTL (HINCRBY, HINCRBYFLOAT, HSETEX KEEPTTL).
    pub fn insert_keep_ttl(&mut self, field: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
        self.value_bytes += value.len();
        let old = self.fields.insert(field, value);
        self.value_bytes -= old.as_ref().map_or(0, Vec::len);
        old
    }

    pub fn remove(&mut self, field: &[u8]) -> Option<Vec<u8>> {
        self.clear_ttl(field);
        let old = self.fields.remove(field);
        self.value_bytes -= old.as_ref().map_or(0, Vec::len);
        old
    }

    /// The bytes of the fields and values together.
    pub fn data_bytes(&self) -> usize {
        self.fields.key_bytes() + self.value_bytes
    }

    /// The field's expiry, Unix milliseconds.
    pub fn ttl(&self, field: &[u8]) -> Option<u64> {
        self.ttls.as_ref()?.by_field.get(field).copied()
    }

    /// Gives an existing field an expiry (replacing any other).
    pub fn set_ttl(&mut self, field: &[u8], at_ms: u64) {
        if !self.fields.contains_key(field) {
            return;
        }
        let t = self.ttls.get_or_insert_with(Box::default);
        if let Some(old) = t.by_field.insert(field.to_vec(), at_ms) {
            t.by_time.remove(&(old, field.to_vec()));
        }
        t.by_time.insert((at_ms, field.to_vec()));
    }

    /// Drops the field's expiry. Returns whether it had one.
    pub fn clear_ttl(&mut self, field: &[u8]) -> bool {
        let Some(t) = self.ttls.as_mut() else {
            return false;
        };
        match t.by_field.remove(field) {
            Some(old) => {
                t.by_time.remove(&(old, field.to_vec()));
                true
            }
            None => false,
        }
    }

    /// Whether any field has an expiry.
    pub fn has_ttls(&self) -> bool {
        self.ttls.as_ref().is_some_and(|t| !t.by_field.is_empty())
    }

    /// How many fields have an expiry.
    pub fn ttl_count(&self) -> usize {
        self.ttls.as_ref().map_or(0, |t| t.by_field.len())
    }

    /// The earliest field expiry.
    pub fn min_ttl(&self) -> Option<u64> {
        self.ttls.as_ref()?.by_time.first().map(|(at, _)| *at)
    }

    /// Fields whose time is at or before `now_ms`, earliest first, at most `max`.
    pub fn expired_fields(&self, now_ms: u64, max: usize) -> Vec<Vec<u8>> {
        let Some(t) = self.ttls.as_ref() else {
            return Vec::new();
        };
        t.by_time
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .take(max)
            .map(|(_, f)| f.clone())
            .collect()
    }

    pub(super) fn indexed_at(&self) -> Option<u64> {
        self.ttls.as_ref()?.indexed_at
    }

    pub(super) fn set_indexed_at(&mut self, at: Option<u64>) {
        if let Some(t) = self.ttls.as_mut() {
            t.indexed_at = at;
        }
    }
}
