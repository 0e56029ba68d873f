//! The keyspace's table: one slot per key, in the order of the keys' stable hashes.
//!
//! A slot is the key's 64-bit hash and one pointer to a node that holds the key and its entry
//! together (16 bytes a slot, one allocation a key). The table is an open-addressed array with
//! linear probing and no wrap-around, whose home positions grow with the hash (`home` scales
//! the hash to the table's size). Every key sits at or after its home, and the slots hold the
//! keys in hash order: an insert shifts the run after its place one slot on, a removal shifts
//! the displaced keys after it one slot back. So the table is its own SCAN order: a cursor is
//! the hash to resume from, as with `ScanMap`, and every key present for a whole iteration is
//! returned however the table grows or shrinks meanwhile. There is no second index, and keys
//! without a TTL pay for nothing but their slot and node.
//!
//! The table may hold up to 7/8 of its home positions; it grows by half again, and shrinks
//! when a quarter is used. It needs no `unsafe`: a slot is an `Option<(u64, Box<Node>)>`, which
//! the compiler lays out in 16 bytes.

use super::scanmap::{stable_hash, Key};

/// A key and its value, in one allocation.
#[derive(Debug, Clone, PartialEq)]
struct Node<V> {
    key: Key,
    value: V,
}

type Slot<V> = Option<(u64, Box<Node<V>>)>;

/// Slots past the last home position, for the keys displaced from the last homes; a table
/// whose keys would run past them grows.
const SLACK: usize = 64;
/// The smallest table with any home position.
const MIN_HOMES: usize = 16;

#[derive(Debug, Clone)]
pub struct Keyspace<V> {
    slots: Vec<Slot<V>>,
    /// Home positions (the slots before the slack).
    homes: usize,
    len: usize,
}

impl<V> Default for Keyspace<V> {
    fn default() -> Self {
        Keyspace {
            slots: Vec::new(),
            homes: 0,
            len: 0,
        }
    }
}

impl<V: PartialEq> PartialEq for Keyspace<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<V> Keyspace<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        *self = Keyspace::default();
    }

    /// The first position a key of hash `h` may take.
    fn home(&self, h: u64) -> usize {
        ((h as u128 * self.homes as u128) >> 64) as usize
    }

    /// Where `key` (of hash `h`) is.
    fn find(&self, key: &[u8], h: u64) -> Option<usize> {
        if self.homes == 0 {
            return None;
        }
        let mut i = self.home(h);
        while let Some(Some((sh, node))) = self.slots.get(i) {
            if *sh > h {
                return None;
            }
            if *sh == h && node.key.bytes() == key {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        let i = self.find(key, stable_hash(key))?;
        self.slots[i].as_ref().map(|(_, n)| &n.value)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let i = self.find(key, stable_hash(key))?;
        self.slots[i].as_mut().map(|(_, n)| &mut n.value)
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.find(key, stable_hash(key)).is_some()
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        let h = stable_hash(key);
        if let Some(i) = self.find(key, h) {
            return self.slots[i]
                .as_mut()
                .map(|(_, n)| std::mem::replace(&mut n.value, value));
        }
        let mut node = Box::new(Node {
            key: Key::new(key),
            value,
        });
        if (self.len + 1) * 8 > self.homes * 7 {
            self.resize(self.grown());
        }
        loop {
            match self.place(h, node) {
                Ok(()) => break,
                Err(back) => {
                    node = back;
                    self.resize(self.grown());
                }
            }
        }
        self.len += 1;
        None
    }

    /// The size a growing table takes.
    fn grown(&self) -> usize {
        (self.homes + self.homes / 2).max(MIN_HOMES)
    }

    /// Puts a new key's node at its place in hash order, shifting the run after it one slot
    /// on; gives it back when the run reaches the table's end.
    fn place(&mut self, h: u64, node: Box<Node<V>>) -> Result<(), Box<Node<V>>> {
        let mut i = self.home(h);
        while let Some(Some((sh, _))) = self.slots.get(i) {
            if *sh > h {
                break;
            }
            i += 1;
        }
        let mut e = i;
        while let Some(Some(_)) = self.slots.get(e) {
            e += 1;
        }
        if e >= self.slots.len() {
            return Err(node);
        }
        self.slots[i..=e].rotate_right(1);
        self.slots[i] = Some((h, node));
        Ok(())
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let i = self.find(key, stable_hash(key))?;
        let (_, node) = self.slots[i].take()?;
        // The keys after it that sit past their home move one slot back.
        let mut e = i + 1;
        while let Some(Some((sh, _))) = self.slots.get(e) {
            if self.home(*sh) >= e {
                break;
            }
            e += 1;
        }
        self.slots[i..e].rotate_left(1);
        self.len -= 1;
        if self.len * 4 < self.homes && self.homes > MIN_HOMES {
            self.resize((self.homes / 2).max(MIN_HOMES));
        }
        Some(node.value)
    }

    /// Builds the table again with `homes` home positions (more when the keys need them).
    fn resize(&mut self, homes: usize) {
        let old = std::mem::take(&mut self.slots);
        let mut homes = homes.max(MIN_HOMES).max(self.len + self.len / 7 + 1);
        loop {
            let mut slots: Vec<Slot<V>> = Vec::new();
            slots.resize_with(homes + SLACK, || None);
            self.homes = homes;
            // The keys arrive in hash order: each goes to its home or just after the last.
            let mut next = 0usize;
            let mut fits = true;
            for (h, _) in old.iter().flatten() {
                let at = self.home(*h).max(next);
                if at >= slots.len() {
                    fits = false;
                    break;
                }
                next = at + 1;
            }
            if !fits {
                homes += homes / 8 + SLACK;
                continue;
            }
            let mut next = 0usize;
            for (h, node) in old.into_iter().flatten() {
                let at = self.home(h).max(next);
                slots[at] = Some((h, node));
                next = at + 1;
            }
            self.slots = slots;
            return;
        }
    }

    /// Every key with its value, in hash order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.slots
            .iter()
            .flatten()
            .map(|(_, n)| (n.key.bytes(), &n.value))
    }

    /// Every value, to change in place, with its key.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut V)> {
        self.slots
            .iter_mut()
            .flatten()
            .map(|(_, n)| (n.key.bytes(), &mut n.value))
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|(k, _)| k)
    }

    /// The first position whose key's hash is `cursor` or more.
    fn first_from(&self, cursor: u64) -> usize {
        if self.homes == 0 {
            return self.slots.len();
        }
        let mut i = self.home(cursor);
        while let Some(slot) = self.slots.get(i) {
            match slot {
                Some((h, _)) if *h >= cursor => return i,
                _ => i += 1,
            }
        }
        self.slots.len()
    }

    /// The keys of hash `cursor` or more, in hash order, as (hash, key, value).
    fn from(&self, cursor: u64) -> impl Iterator<Item = (u64, &[u8], &V)> {
        self.slots[self.first_from(cursor).min(self.slots.len())..]
            .iter()
            .flatten()
            .map(|(h, n)| (*h, n.key.bytes(), &n.value))
    }

    /// Visits keys from `cursor` (a hash) in hash order until `count` were visited, at the end
    /// of a hash's keys (a cursor cannot point inside them); the next cursor, 0 at the end.
    pub fn scan(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &V)) -> u64 {
        self.scan_until(cursor, usize::MAX, count, |k, v| {
            visit(k, v);
            false
        })
    }

    /// A scan that stops once `visit` has accepted `want` keys or `examine` keys have been
    /// visited, whichever comes first (at the end of a hash's keys). The next cursor, 0 at
    /// the end.
    pub fn scan_until(
        &self,
        cursor: u64,
        want: usize,
        examine: usize,
        mut visit: impl FnMut(&[u8], &V) -> bool,
    ) -> u64 {
        let (mut seen, mut taken) = (0usize, 0usize);
        let mut last: Option<u64> = None;
        for (h, k, v) in self.from(cursor) {
            if last.is_some_and(|l| l != h) && (taken >= want || seen >= examine) {
                return h;
            }
            last = Some(h);
            taken += usize::from(visit(k, v));
            seen += 1;
        }
        0
    }

    /// A key picked by `r`: the first whose hash is `r` or more (the first of all past the
    /// last), and among keys of one hash the `r`th.
    pub fn random(&self, r: u64) -> Option<(&[u8], &V)> {
        let first = self
            .from(r)
            .next()
            .or_else(|| self.from(0).next())
            .map(|(h, _, _)| h)?;
        let group: Vec<(&[u8], &V)> = self
            .from(first)
            .take_while(|(h, _, _)| *h == first)
            .map(|(_, k, v)| (k, v))
            .collect();
        group.get((r as usize) % group.len().max(1)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::super::scanmap::ScanMap;
    use super::*;

    /// The keyspace answers, iterates, scans and picks exactly as `ScanMap`, the plain
    /// B-tree of hashes it replaced, through growth, shrinking and removals.
    #[test]
    fn the_keyspace_behaves_as_the_plain_map() {
        let mut a: ScanMap<u32> = ScanMap::new();
        let mut b: Keyspace<u32> = Keyspace::new();
        let mut x = 88172645463325252u64;
        for round in 0..3 {
            for i in 0..20_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = format!("k{}", x % (3_000 + 2_000 * round));
                // Early on mostly inserts, later mostly removals: the table grows and shrinks.
                if x % 10 < 3 + 3 * round {
                    assert_eq!(a.remove(k.as_bytes()), b.remove(k.as_bytes()), "{k}");
                } else {
                    assert_eq!(a.insert(k.as_bytes(), i), b.insert(k.as_bytes(), i), "{k}");
                }
                assert_eq!(a.len(), b.len());
                if i % 997 == 0 {
                    assert!(a.iter().eq(b.iter()));
                }
            }
            assert!(a.iter().eq(b.iter()));
            for k in a.keys() {
                assert_eq!(a.get(k), b.get(k));
            }
            assert_eq!(b.get(b"absent"), None);
            let (mut ca, mut cb) = (0, 0);
            loop {
                let (mut va, mut vb) = (Vec::new(), Vec::new());
                ca = a.scan(ca, 10, |k, v| va.push((k.to_vec(), *v)));
                cb = b.scan(cb, 10, |k, v| vb.push((k.to_vec(), *v)));
                assert_eq!((ca, &va), (cb, &vb));
                if ca == 0 {
                    break;
                }
            }
            for r in [0, 1, u64::MAX / 3, u64::MAX] {
                assert_eq!(a.random(r), b.random(r));
            }
        }
        // Emptied, it shrinks back and stays usable.
        let keys: Vec<Vec<u8>> = b.keys().map(<[u8]>::to_vec).collect();
        for k in &keys {
            assert!(b.remove(k).is_some());
        }
        assert!(b.is_empty());
        assert!(b.homes <= 2 * MIN_HOMES);
        assert_eq!(b.insert(b"again", 1), None);
        assert_eq!(b.get(b"again"), Some(&1));
    }

    /// Keys whose 64-bit hashes collide each keep their place, and a scan never stops
    /// between them.
    #[test]
    fn colliding_hashes_are_kept_together() {
        let mut t: Keyspace<u32> = Keyspace::new();
        for i in 0..100 {
            t.insert(format!("k{i}").as_bytes(), i);
        }
        // Three nodes of one hash, placed by hand after the one key of that hash.
        let h = stable_hash(b"k7");
        for (j, name) in [&b"x1"[..], b"x2", b"x3"].iter().enumerate() {
            let node = Box::new(Node {
                key: Key::new(name),
                value: 1_000 + j as u32,
            });
            assert!(t.place(h, node).is_ok());
            t.len += 1;
        }
        for (j, name) in [&b"x1"[..], b"x2", b"x3"].iter().enumerate() {
            assert_eq!(t.find(name, h).map(|i| t.slots[i].is_some()), Some(true));
            assert_eq!(
                t.slots[t.find(name, h).unwrap_or(0)]
                    .as_ref()
                    .map(|(_, n)| n.value),
                Some(1_000 + j as u32)
            );
        }
        let mut cursor = 0;
        loop {
            let mut got = Vec::new();
            cursor = t.scan(cursor, 1, |k, _| got.push(k.to_vec()));
            if got.iter().any(|k| k == b"k7") {
                assert_eq!(got.len(), 4, "{got:?}");
            }
            if cursor == 0 {
                break;
            }
        }
    }

    #[test]
    fn a_slot_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Slot<super::super::Entry>>(), 16);
    }
}
