//! A hash value: its fields, and the expiry times of the fields that have one (Redis 7.4's
//! hash-field expiration).
//!
//! Every change goes through the methods here, so a field's TTL can never outlive the field:
//! `insert` and `remove` drop it, `insert_keep_ttl` (HINCRBY, HINCRBYFLOAT, HSETEX KEEPTTL)
//! keeps it.
//!
//! A small hash is packed, as Redis keeps it in a listpack: its fields and values one after
//! another in one buffer, each with its length, in the order they were added (up to
//! `PACKED_FIELDS_MAX` fields of at most `PACKED_BYTES_MAX` bytes, Redis's
//! `hash-max-listpack-entries` and `-value`). Past either it becomes a map for good, as Redis
//! never turns a hash table back into a listpack.

use super::scanmap::ScanMap;
use super::Str;
use std::collections::{BTreeSet, HashMap};

/// The most fields a packed hash holds (Redis's `hash-max-listpack-entries`).
pub const PACKED_FIELDS_MAX: usize = 128;
/// The longest field or value a packed hash holds (Redis's `hash-max-listpack-value`).
pub const PACKED_BYTES_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq)]
enum Fields {
    /// Each field as `len field len value`, the lengths as one byte (both are at most 64).
    Packed(Vec<u8>),
    Map(ScanMap<Str>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hash {
    fields: Fields,
    len: usize,
    /// The bytes of the fields, and of the values, together.
    field_bytes: usize,
    value_bytes: usize,
    /// Only hashes that ever had a field TTL pay for this.
    ttls: Option<Box<FieldTtls>>,
}

impl Default for Hash {
    fn default() -> Hash {
        Hash {
            fields: Fields::Packed(Vec::new()),
            len: 0,
            field_bytes: 0,
            value_bytes: 0,
            ttls: None,
        }
    }
}

/// The packed entries of `buf`: (field, value, where the entry starts, where it ends).
fn packed(buf: &[u8]) -> impl Iterator<Item = (&[u8], &[u8], usize, usize)> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let start = at;
        let flen = *buf.get(at)? as usize;
        let field = buf.get(at + 1..at + 1 + flen)?;
        at += 1 + flen;
        let vlen = *buf.get(at)? as usize;
        let value = buf.get(at + 1..at + 1 + vlen)?;
        at += 1 + vlen;
        Some((field, value, start, at))
    })
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

impl Hash {
    pub fn new() -> Hash {
        Hash::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The heap bytes the hash holds besides itself: its packed buffer or its map, and the
    /// field expiry indexes of one that has them (a map slot and a tree entry a field, each
    /// with the field's name).
    pub fn heap_bytes(&self) -> usize {
        use crate::alloc::chunk;
        let fields = match &self.fields {
            Fields::Packed(b) => chunk(b.capacity()),
            Fields::Map(m) => m.heap_bytes(Str::heap_bytes),
        };
        let ttls = self.ttls.as_ref().map_or(0, |t| {
            chunk(std::mem::size_of::<FieldTtls>())
                + t.by_field
                    .keys()
                    .map(|f| 2 * chunk(f.len()) + 48 + 40)
                    .sum::<usize>()
        });
        fields + ttls
    }

    /// Whether the hash is packed (OBJECT ENCODING's `listpack`).
    pub fn is_packed(&self) -> bool {
        matches!(self.fields, Fields::Packed(_))
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match &self.fields {
            Fields::Packed(b) => packed(b).find(|(f, ..)| *f == field).map(|(_, v, ..)| v),
            Fields::Map(m) => m.get(field).map(|v| &**v),
        }
    }

    pub fn contains_key(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Every field with its value: in the order they were added while packed, in hash order
    /// once a map.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match &self.fields {
            Fields::Packed(b) => Box::new(packed(b).map(|(f, v, ..)| (f, v))),
            Fields::Map(m) => Box::new(m.iter().map(|(f, v)| (f, &**v))),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|(f, _)| f)
    }

    /// HSCAN: a packed hash answers whole (cursor 0), as a listpack does in Redis; a map
    /// scans from `cursor` (see `ScanMap::scan`).
    pub fn scan(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &[u8])) -> u64 {
        match &self.fields {
            Fields::Packed(b) => {
                for (f, v, ..) in packed(b) {
                    visit(f, v);
                }
                0
            }
            Fields::Map(m) => m.scan(cursor, count, |f, v| visit(f, v)),
        }
    }

    /// A field picked by `r` (see `ScanMap::random`; a packed hash's `r`th, wrapping).
    pub fn random(&self, r: u64) -> Option<(&[u8], &[u8])> {
        match &self.fields {
            Fields::Packed(b) => {
                let n = self.len.max(1);
                packed(b)
                    .nth((r % n as u64) as usize)
                    .map(|(f, v, ..)| (f, v))
            }
            Fields::Map(m) => m.random(r).map(|(f, v)| (f, &**v)),
        }
    }

    /// Room for `bytes` more of packed fields and values with their lengths, in one go (a
    /// packed hash otherwise grows exactly, a field at a time).
    pub fn reserve(&mut self, bytes: usize) {
        if let Fields::Packed(b) = &mut self.fields {
            if self.len < PACKED_FIELDS_MAX
                && bytes <= PACKED_FIELDS_MAX * 2 * (PACKED_BYTES_MAX + 1)
            {
                b.reserve_exact(bytes);
            }
        }
    }

    /// Turns a packed hash into a map (for good).
    fn unpack(&mut self) {
        if let Fields::Packed(b) = &self.fields {
            let mut m = ScanMap::new();
            for (f, v, ..) in packed(b) {
                m.insert(f, Str::from(v));
            }
            self.fields = Fields::Map(m);
        }
    }

    /// Sets a field and drops its TTL (HSET, HMSET, HSETNX). Returns the previous value.
    pub fn insert(&mut self, field: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
        self.clear_ttl(field);
        self.insert_keep_ttl(field, value)
    }

    /// Sets a field and keeps its TTL (HINCRBY, HINCRBYFLOAT, HSETEX KEEPTTL).
    pub fn insert_keep_ttl(&mut self, field: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
        if field.len() > PACKED_BYTES_MAX || value.len() > PACKED_BYTES_MAX {
            self.unpack();
        }
        let old = match &mut self.fields {
            Fields::Packed(b) => {
                let found = packed(b)
                    .find(|(f, ..)| *f == field)
                    .map(|(_, v, s, e)| (v.to_vec(), s, e));
                match found {
                    Some((old, start, end)) => {
                        let at = start + 1 + field.len();
                        let mut entry = Vec::with_capacity(1 + value.len());
                        entry.push(value.len() as u8);
                        entry.extend_from_slice(&value);
                        b.splice(at..end, entry);
                        Some(old)
                    }
                    None if self.len >= PACKED_FIELDS_MAX => None,
                    None => {
                        b.reserve_exact(2 + field.len() + value.len());
                        b.push(field.len() as u8);
                        b.extend_from_slice(field);
                        b.push(value.len() as u8);
                        b.extend_from_slice(&value);
                        self.len += 1;
                        self.field_bytes += field.len();
                        self.value_bytes += value.len();
                        return None;
                    }
                }
            }
            Fields::Map(_) => None,
        };
        if let Some(old) = old {
            self.value_bytes = self.value_bytes + value.len() - old.len();
            return Some(old);
        }
        // A new field past the packed size, or a map.
        self.unpack();
        let Fields::Map(m) = &mut self.fields else {
            return None;
        };
        let len = value.len();
        match m.insert(field, Str::from(value)) {
            Some(old) => {
                self.value_bytes = self.value_bytes + len - old.len();
                Some(old.into_vec())
            }
            None => {
                self.len += 1;
                self.field_bytes += field.len();
                self.value_bytes += len;
                None
            }
        }
    }

    pub fn remove(&mut self, field: &[u8]) -> Option<Vec<u8>> {
        self.clear_ttl(field);
        let old = match &mut self.fields {
            Fields::Packed(b) => {
                let (old, start, end) = packed(b)
                    .find(|(f, ..)| *f == field)
                    .map(|(_, v, s, e)| (v.to_vec(), s, e))?;
                b.drain(start..end);
                b.shrink_to_fit();
                old
            }
            Fields::Map(m) => m.remove(field)?.into_vec(),
        };
        self.len -= 1;
        self.field_bytes -= field.len();
        self.value_bytes -= old.len();
        Some(old)
    }

    /// The bytes of the fields and values together.
    pub fn data_bytes(&self) -> usize {
        self.field_bytes + self.value_bytes
    }

    /// The field's expiry, Unix milliseconds.
    pub fn ttl(&self, field: &[u8]) -> Option<u64> {
        self.ttls.as_ref()?.by_field.get(field).copied()
    }

    /// Gives an existing field an expiry (replacing any other).
    pub fn set_ttl(&mut self, field: &[u8], at_ms: u64) {
        if !self.contains_key(field) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A small hash stays packed, in the order its fields came, through replacing and
    /// removing; a 129th field or a value over 64 bytes turns it into a map for good, with
    /// the same fields and byte counts.
    #[test]
    fn a_small_hash_is_packed_until_redis_would_unpack_it() {
        let mut h = Hash::new();
        for i in 0..128 {
            assert_eq!(
                h.insert(format!("f{i}").as_bytes(), format!("v{i}").into_bytes()),
                None
            );
        }
        assert!(h.is_packed());
        assert_eq!(h.insert(b"f5", b"changed".to_vec()), Some(b"v5".to_vec()));
        assert_eq!(h.get(b"f5"), Some(&b"changed"[..]));
        assert_eq!(h.remove(b"f7"), Some(b"v7".to_vec()));
        assert_eq!(h.remove(b"f7"), None);
        assert_eq!(h.len(), 127);
        let order: Vec<Vec<u8>> = h.keys().take(8).map(<[u8]>::to_vec).collect();
        let want: Vec<Vec<u8>> = [0, 1, 2, 3, 4, 5, 6, 8]
            .iter()
            .map(|i| format!("f{i}").into_bytes())
            .collect();
        assert_eq!(order, want);
        let bytes = |h: &Hash| h.iter().map(|(f, v)| f.len() + v.len()).sum::<usize>();
        assert_eq!(h.data_bytes(), bytes(&h));
        assert_eq!(h.insert(b"f7", b"back".to_vec()), None);
        assert!(h.is_packed());
        h.insert(b"f128", b"one more".to_vec());
        assert!(!h.is_packed());
        assert_eq!(h.len(), 129);
        assert_eq!(h.get(b"f5"), Some(&b"changed"[..]));
        assert_eq!(h.data_bytes(), bytes(&h));
        h.remove(b"f128");
        assert!(!h.is_packed(), "a map stays a map");
        let mut small = Hash::new();
        small.insert(b"a", b"1".to_vec());
        small.insert(b"b", vec![b'x'; 65]);
        assert!(!small.is_packed());
        assert_eq!(small.get(b"a"), Some(&b"1"[..]));
        let mut long_field = Hash::new();
        long_field.insert(&[b'f'; 65], b"1".to_vec());
        assert!(!long_field.is_packed());
    }
}
