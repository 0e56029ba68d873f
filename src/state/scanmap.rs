//! A map from byte strings to values, ordered by a stable 64-bit hash of the key.
//!
//! Ordering by hash gives SCAN what Redis's reverse-binary cursor gives it: the cursor is the
//! hash to resume from, so every element present for the whole iteration is returned, and the
//! cursor stays valid while the map changes. The map is a `table::SortedTable` whose slots hold
//! the members themselves: a lookup is one probe near the key's home position.

use super::key::Key;
use super::table::SortedTable;

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
        let old = self.table.upsert(
            key,
            value,
            |m, value| std::mem::replace(&mut m.1, value),
            |value| Member(Key::new(key), value),
        );
        if old.is_none() {
            self.key_bytes += key.len();
        }
        old
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

    /// The heap bytes the map holds: its slots, its members longer than a slot holds, and
    /// what `value` says each value holds besides itself.
    pub fn heap_bytes(&self, value: impl Fn(&V) -> usize) -> usize {
        self.table.heap_bytes()
            + self
                .table
                .iter()
                .map(|m| m.0.heap_bytes() + value(&m.1))
                .sum::<usize>()
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
