//! A map from byte strings to values, ordered by a stable 64-bit hash of the key.
//!
//! Ordering by hash gives SCAN what Redis's reverse-binary cursor gives it: the cursor is the
//! hash to resume from, so every element present for the whole iteration is returned, and the
//! cursor stays valid while the map changes. The map is a `table::SortedTable` whose slots hold
//! the members themselves: a lookup is one probe near the key's home position.

use super::table::SortedTable;

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

/// A member of a collection and its value, kept in the table's slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Member<V>(Key, V);

impl<V> super::table::Element for Member<V> {
    fn key(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// A map from byte strings to values, in the order of their stable hashes (see `table`):
/// a set's members, a hash's fields, a sorted set's scores.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanMap<V> {
    table: SortedTable<Member<V>>,
    /// The bytes of the keys together (a value's size, for the limits).
    key_bytes: usize,
}

impl<V> Default for ScanMap<V> {
    fn default() -> Self {
        ScanMap {
            table: SortedTable::default(),
            key_bytes: 0,
        }
    }
}

impl<V> ScanMap<V> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        self.table.len()
    }
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
    /// The bytes of the keys together.
    pub fn key_bytes(&self) -> usize {
        self.key_bytes
    }
    pub fn clear(&mut self) {
        self.table.clear();
        self.key_bytes = 0;
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.table.get(key).map(|m| &m.1)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        self.table.get_mut(key).map(|m| &mut m.1)
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.table.get(key).is_some()
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        if let Some(m) = self.table.get_mut(key) {
            return Some(std::mem::replace(&mut m.1, value));
        }
        self.table.insert(key, Member(Key::new(key), value));
        self.key_bytes += key.len();
        None
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let m = self.table.remove(key)?;
        self.key_bytes -= key.len();
        Some(m.1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.table.iter().map(|m| (m.0.bytes(), &m.1))
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.table.iter().map(|m| m.0.bytes())
    }

    /// Visits elements from `cursor` on until at least `count` were visited, and returns the
    /// cursor to continue from (0 when the end was reached).
    pub fn scan(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &V)) -> u64 {
        self.table.scan(cursor, count, |m| visit(m.0.bytes(), &m.1))
    }

    #[cfg(test)]
    pub(crate) fn longest_run(&self) -> usize {
        self.table.longest_run()
    }

    /// The element at or after a random point of the hash space (wrapping), for the random
    /// picks of collections.
    pub fn random(&self, r: u64) -> Option<(&[u8], &V)> {
        self.table.random(r).map(|m| (m.0.bytes(), &m.1))
    }
}

/// A key as the tables keep it (`table::Keyspace`, `ScanMap`): up to 22 bytes in place, in the
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

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// By bytes, as Redis orders members of equal score.
impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}
