//! A list value: its items, and the bytes they hold, kept as the list changes so that a
//! value's size is known without walking it (the value-size and data-size limits read it on
//! every write).
//!
//! Reads go through `Deref` to the items. Every change goes through the methods here. An item
//! is a `Str`: up to 14 bytes in place (16 bytes an item, no allocation of its own).

use super::Str;
use std::collections::VecDeque;
use std::ops::Deref;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct List {
    items: VecDeque<Str>,
    /// The bytes of the items together.
    bytes: usize,
}

impl Deref for List {
    type Target = VecDeque<Str>;
    fn deref(&self) -> &VecDeque<Str> {
        &self.items
    }
}

impl From<VecDeque<Vec<u8>>> for List {
    fn from(items: VecDeque<Vec<u8>>) -> List {
        let bytes = items.iter().map(Vec::len).sum();
        let items = items.into_iter().map(Str::from).collect();
        List { items, bytes }
    }
}

impl FromIterator<Vec<u8>> for List {
    fn from_iter<I: IntoIterator<Item = Vec<u8>>>(iter: I) -> List {
        List::from(iter.into_iter().collect::<VecDeque<_>>())
    }
}

impl<'a> IntoIterator for &'a List {
    type Item = &'a Str;
    type IntoIter = std::collections::vec_deque::Iter<'a, Str>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl List {
    pub fn new() -> List {
        List::default()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The bytes of the items together.
    pub fn data_bytes(&self) -> usize {
        self.bytes
    }

    /// Room for `n` more items: exactly when several come at once (a list grows by doubling
    /// otherwise), so that a list built in one push holds no slack.
    pub fn reserve(&mut self, n: usize) {
        if n > 1 {
            self.items.reserve_exact(n);
        }
    }

    pub fn push_front(&mut self, v: Vec<u8>) {
        self.bytes += v.len();
        self.items.push_front(Str::from(v));
    }

    pub fn push_back(&mut self, v: Vec<u8>) {
        self.bytes += v.len();
        self.items.push_back(Str::from(v));
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let v = self.items.pop_front()?;
        self.bytes -= v.len();
        Some(v.into_vec())
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let v = self.items.pop_back()?;
        self.bytes -= v.len();
        Some(v.into_vec())
    }

    /// Replaces the item at `i` (which must exist); returns the old one.
    pub fn set(&mut self, i: usize, v: Vec<u8>) -> Option<Vec<u8>> {
        let slot = self.items.get_mut(i)?;
        self.bytes = self.bytes - slot.len() + v.len();
        Some(std::mem::replace(slot, Str::from(v)).into_vec())
    }

    pub fn insert(&mut self, i: usize, v: Vec<u8>) {
        self.bytes += v.len();
        self.items.insert(i, Str::from(v));
    }

    pub fn remove(&mut self, i: usize) -> Option<Vec<u8>> {
        let v = self.items.remove(i)?;
        self.bytes -= v.len();
        Some(v.into_vec())
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.bytes = 0;
    }

    /// Keeps the first `n` items.
    pub fn truncate(&mut self, n: usize) {
        while self.items.len() > n {
            self.pop_back();
        }
    }

    /// Drops the first `n` items.
    pub fn drop_front(&mut self, n: usize) {
        let n = n.min(self.items.len());
        for v in self.items.drain(..n) {
            self.bytes -= v.len();
        }
    }

    pub fn into_items(self) -> VecDeque<Vec<u8>> {
        self.items.into_iter().map(Str::into_vec).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_count_follows_every_change() {
        let mut l: List = [b"ab".to_vec(), b"c".to_vec()].into_iter().collect();
        assert_eq!(l.data_bytes(), 3);
        l.push_front(b"xyz".to_vec());
        l.push_back(b"".to_vec());
        l.insert(1, b"12".to_vec());
        assert_eq!(l.data_bytes(), 8);
        l.set(0, b"x".to_vec());
        assert_eq!(l.data_bytes(), 6);
        l.remove(1);
        l.pop_back();
        assert_eq!(l.data_bytes(), 4);
        l.truncate(1);
        assert_eq!(l.data_bytes(), 1);
        l.push_back(b"tail".to_vec());
        l.drop_front(1);
        assert_eq!((l.len(), l.data_bytes()), (1, 4));
        l.clear();
        assert_eq!(l.data_bytes(), 0);
        let sum: usize = l.iter().map(|v| v.len()).sum();
        assert_eq!(sum, l.data_bytes());
    }
}
