//! A map from byte strings to values, ordered by a stable 64-bit hash of the key.
//!
//! Ordering by hash gives SCAN what Redis's reverse-binary cursor gives it: the cursor is the
//! hash to resume from, so every element present for the whole iteration is returned, and the
//! cursor stays valid while the map changes. Lookups are one B-tree descent on a `u64` plus a
//! comparison of the (almost always single) key in the bucket.

use std::collections::BTreeMap;

/// FNV-1a with a final avalanche; stable across runs and platforms. Never 0, so that cursor 0
/// can mean both "start" and "done", as in Redis.
pub fn stable_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h.max(1)
}

type Bucket<V> = Vec<(Box<[u8]>, V)>;

#[derive(Debug, Clone, PartialEq)]
pub struct ScanMap<V> {
    tree: BTreeMap<u64, Bucket<V>>,
    len: usize,
    /// The bytes of the keys together (a value's size, for the limits).
    key_bytes: usize,
}

impl<V> Default for ScanMap<V> {
    fn default() -> Self {
        ScanMap {
            tree: BTreeMap::new(),
            len: 0,
            key_bytes: 0,
        }
    }
}

impl<V> ScanMap<V> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes of the keys together.
    pub fn key_bytes(&self) -> usize {
        self.key_bytes
    }
    pub fn clear(&mut self) {
        self.tree.clear();
        self.len = 0;
        self.key_bytes = 0;
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        let bucket = self.tree.get(&stable_hash(key))?;
        bucket.iter().find(|(k, _)| &**k == key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let bucket = self.tree.get_mut(&stable_hash(key))?;
        bucket.iter_mut().find(|(k, _)| &**k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        let bucket = self.tree.entry(stable_hash(key)).or_default();
        if let Some((_, v)) = bucket.iter_mut().find(|(k, _)| &**k == key) {
            return Some(std::mem::replace(v, value));
        }
        bucket.push((key.into(), value));
        self.len += 1;
        self.key_bytes += key.len();
        None
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let h = stable_hash(key);
        let bucket = self.tree.get_mut(&h)?;
        let pos = bucket.iter().position(|(k, _)| &**k == key)?;
        let (_, v) = bucket.swap_remove(pos);
        if bucket.is_empty() {
            self.tree.remove(&h);
        }
        self.len -= 1;
        self.key_bytes -= key.len();
        Some(v)
    }

    /// The value for `key`, inserting `make()` first when absent.
    pub fn get_or_insert_with(&mut self, key: &[u8], make: impl FnOnce() -> V) -> &mut V {
        let bucket = self.tree.entry(stable_hash(key)).or_default();
        let pos = match bucket.iter().position(|(k, _)| &**k == key) {
            Some(p) => p,
            None => {
                bucket.push((key.into(), make()));
                self.len += 1;
                self.key_bytes += key.len();
                bucket.len() - 1
            }
        };
        &mut bucket[pos].1
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.tree
            .values()
            .flat_map(|b| b.iter().map(|(k, v)| (&**k, v)))
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|(k, _)| k)
    }

    /// Visits buckets from `cursor` on until at least `count` elements were visited, and returns
    /// the cursor to continue from (0 when the end was reached).
    pub fn scan(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &V)) -> u64 {
        let mut seen = 0usize;
        let mut range = self.tree.range(cursor..);
        for (_, bucket) in range.by_ref() {
            for (k, v) in bucket {
                visit(k, v);
            }
            seen += bucket.len();
            if seen >= count {
                break;
            }
        }
        range.next().map(|(h, _)| *h).unwrap_or(0)
    }

    /// The element at or after a random point of the hash space (wrapping), for RANDOMKEY and
    /// friends. Not uniform over elements when hashes cluster, which is fine for its users.
    pub fn random(&self, r: u64) -> Option<(&[u8], &V)> {
        let bucket = self
            .tree
            .range(r..)
            .next()
            .or_else(|| self.tree.iter().next())?
            .1;
        let (k, v) = bucket.get((r as usize) % bucket.len())?;
        Some((k, v))
    }
}

/// A key as the keyspace (`keyspace::Keyspace`) keeps it: up to 22 bytes in place, in the
/// key's node (most keys: one allocation a key), longer ones on the heap.
#[derive(Clone)]
pub(super) enum Key {
    Inline([u8; 22], u8),
    Heap(Box<[u8]>),
}

impl Key {
    pub(super) fn new(k: &[u8]) -> Key {
        if k.len() <= 22 {
            let mut b = [0u8; 22];
            b[..k.len()].copy_from_slice(k);
            Key::Inline(b, k.len() as u8)
        } else {
            Key::Heap(k.into())
        }
    }
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Key::Inline(b, n) => &b[..*n as usize],
            Key::Heap(b) => b,
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.bytes() == other.bytes()
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}
