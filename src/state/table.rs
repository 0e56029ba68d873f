//! The hash tables of the state: the keyspace's (`Keyspace`) and every collection's whose
//! members are looked up by name (`ScanMap`: sets, hashes, sorted sets' scores).
//!
//! Both are one `SortedTable`: an open-addressed array of slots, each an element's 64-bit
//! stable hash and the element, with linear probing and no wrap-around, whose home positions
//! grow with the hash (`home` scales the hash to the table's size). Every element sits at or
//! after its home, and the slots hold the elements in hash order: an insert shifts the run after
//! its place one slot on, a removal shifts the displaced elements after it one slot back. So the
//! table is its own SCAN order: a cursor is the hash to resume from, and every element present
//! for a whole iteration is returned however the table grows or shrinks meanwhile, as Redis's
//! reverse-binary cursor promises. There is no second index.
//!
//! A table orders its elements not by the stable hash itself but by the hash times an odd
//! multiplier of its own, drawn when the table is made (`multiplier`): a bijection, so cursors
//! work as before, but one no request can predict. Without it, elements that arrive in the
//! table's own order (a snapshot loaded in key order, a set built from another set's members,
//! or members chosen by their public hash) all fall in the few homes of a prefix of the hash
//! space, and every insert walks the whole run: a quadratic stall of the one executor. With
//! it, another table's order, or the hash's, is scattered here. The order of a table is its
//! own and no part of the state: contents compare without it, and snapshots write their
//! elements in stable-hash order.
//!
//! The table may hold up to 7/8 of its home positions; it grows by a quarter again (by half
//! while tiny), and shrinks when a quarter is used. The keyspace keeps a pointer to a node holding the key and its entry in
//! each slot (16 bytes a slot, one allocation a key); a collection keeps its members in the
//! slots themselves (a member up to 22 bytes costs no allocation of its own). No `unsafe`: a
//! slot is an `Option<(u64, T)>`, which the compiler lays out without a tag.

use super::key::{stable_hash, Key};
use crate::config::WALK_PREFETCH_SLOTS_AHEAD;

/// What a table holds in a slot: something with a key.
pub trait Element {
    fn key(&self) -> &[u8];
    /// Brings what the element points to into the cache (`SortedTable::prefetch_element`).
    fn prefetch(&self) {}
}

type Slot<T> = Option<(u64, T)>;

/// Slots past the last home position, for the elements displaced from the last homes: a
/// table whose elements would run past them grows.
fn slack(homes: usize) -> usize {
    (homes / 8 + 4).min(1024)
}

/// The smallest table with any home position.
const MIN_HOMES: usize = 4;

#[derive(Debug, Clone)]
pub struct SortedTable<T> {
    /// Each element with its place in the order (its stable hash times `mul`).
    slots: Vec<Slot<T>>,
    /// Home positions (the slots before the slack).
    homes: usize,
    len: usize,
    /// This table's odd multiplier (see the module doc).
    mul: u64,
}

impl<T> Default for SortedTable<T> {
    fn default() -> Self {
        SortedTable {
            slots: Vec::new(),
            homes: 0,
            len: 0,
            mul: multiplier(),
        }
    }
}

/// A fresh odd multiplier: the process's random seed mixed with a count of tables made
/// (splitmix64), so no two tables share one and no client can know one.
fn multiplier() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static SEED: OnceLock<u64> = OnceLock::new();
    static MADE: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x7469_6465_706f_6f6c);
        h.finish()
    });
    let mut z = seed.wrapping_add(
        MADE.fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

impl<T: Element> SortedTable<T> {
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
        *self = SortedTable::default();
    }

    /// The place in this table's order of an element of stable hash `h` (never 0: `h` is
    /// not, and an odd multiplier is a bijection).
    fn order_of(&self, h: u64) -> u64 {
        h.wrapping_mul(self.mul)
    }

    /// The first position an element of hash `h` may take.
    fn home(&self, h: u64) -> usize {
        ((h as u128 * self.homes as u128) >> 64) as usize
    }

    /// Where the element of `key` (of hash `h`) is.
    fn find(&self, key: &[u8], h: u64) -> Option<usize> {
        if self.homes == 0 {
            return None;
        }
        let mut i = self.home(h);
        while let Some(Some((sh, e))) = self.slots.get(i) {
            if *sh > h {
                return None;
            }
            if *sh == h && e.key() == key {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Brings the first slot a lookup of `key` reads into the cache, without waiting for it.
    pub fn prefetch_home(&self, key: &[u8]) {
        if self.homes > 0 {
            let home = self.home(self.order_of(stable_hash(key)));
            crate::sys::prefetch(self.slots.as_ptr().wrapping_add(home));
        }
    }

    /// Brings what the element of `key`'s hash points to into the cache, without waiting for
    /// it: the slots are read up to it (after `prefetch_home`, they are there), the key is not
    /// compared (that would wait for the element).
    pub fn prefetch_element(&self, key: &[u8]) {
        if self.homes == 0 {
            return;
        }
        let h = self.order_of(stable_hash(key));
        let mut i = self.home(h);
        while let Some(Some((sh, e))) = self.slots.get(i) {
            if *sh >= h {
                if *sh == h {
                    e.prefetch();
                }
                return;
            }
            i += 1;
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<&T> {
        let i = self.find(key, self.order_of(stable_hash(key)))?;
        self.slots[i].as_ref().map(|(_, e)| e)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut T> {
        let i = self.find(key, self.order_of(stable_hash(key)))?;
        self.slots[i].as_mut().map(|(_, e)| e)
    }

    /// Inserts `element` (whose key is `key`), or replaces the one of that key; the previous.
    pub fn insert(&mut self, key: &[u8], element: T) -> Option<T> {
        self.upsert(key, element, std::mem::replace, |e| e)
    }

    /// Insert-or-replace with one probe: when `key` is there, `hit` changes its element in
    /// place with `arg` and its answer is returned; otherwise `miss` makes the new element
    /// (whose key is `key`) from `arg`.
    pub fn upsert<A, R>(
        &mut self,
        key: &[u8],
        arg: A,
        hit: impl FnOnce(&mut T, A) -> R,
        miss: impl FnOnce(A) -> T,
    ) -> Option<R> {
        let h = self.order_of(stable_hash(key));
        if let Some(i) = self.find(key, h) {
            return self.slots[i].as_mut().map(|(_, e)| hit(e, arg));
        }
        self.add(h, miss(arg));
        None
    }

    /// Adds a new element of hash `h`; its position.
    fn add(&mut self, h: u64, mut element: T) -> usize {
        if (self.len + 1) * 8 > self.homes * 7 {
            self.resize(self.grown());
        }
        loop {
            match self.place(h, element) {
                Ok(i) => {
                    self.len += 1;
                    return i;
                }
                Err(back) => {
                    element = back;
                    self.resize(self.grown());
                }
            }
        }
    }

    /// Makes room for `n` elements in all, so that adding them does not grow the table on the
    /// way: a snapshot's load knows how many keys come (growing a quarter at a time, a million
    /// keys rebuilt the table twenty times and faulted in every array on the way).
    pub fn reserve(&mut self, n: usize) {
        if n.saturating_mul(8) > self.homes.saturating_mul(7) {
            self.resize(n + n / 7 + 1);
        }
    }

    /// Gives back what a `reserve` took beyond the elements added: the table takes the size it
    /// would have grown to by itself, unless it is within a quarter of that already.
    pub fn fit(&mut self) {
        let want = (self.len + self.len / 7 + 1).max(MIN_HOMES);
        if self.homes > want + want / 4 {
            self.resize(want);
        }
    }

    /// The size a growing table takes: half again while tiny, a quarter again from 64 homes,
    /// so that a table just grown is not mostly empty (rebuilding is linear either way; a
    /// quarter means rebuilding about twice as often as half).
    fn grown(&self) -> usize {
        let more = if self.homes >= 64 {
            self.homes / 4
        } else {
            self.homes / 2
        };
        (self.homes + more).max(MIN_HOMES)
    }

    /// Puts a new element at its place in hash order, shifting the run after it one slot on;
    /// gives it back when the run reaches the table's end.
    fn place(&mut self, h: u64, element: T) -> Result<usize, T> {
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
            return Err(element);
        }
        self.slots[i..=e].rotate_right(1);
        self.slots[i] = Some((h, element));
        Ok(i)
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<T> {
        let i = self.find(key, self.order_of(stable_hash(key)))?;
        let (_, element) = self.slots[i].take()?;
        // The elements after it that sit past their home move one slot back.
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
            self.resize(self.homes / 2);
        }
        Some(element)
    }

    /// Builds the table again with `homes` home positions (more when the elements need them).
    fn resize(&mut self, homes: usize) {
        let old = std::mem::take(&mut self.slots);
        let mut homes = homes.max(MIN_HOMES).max(self.len + self.len / 7 + 1);
        loop {
            self.homes = homes;
            let size = homes + slack(homes);
            // The elements come in hash order: each goes to its home or just after the last.
            let mut next = 0usize;
            let fits = old.iter().flatten().all(|(h, _)| {
                let at = self.home(*h).max(next);
                next = at + 1;
                at < size
            });
            if !fits {
                homes += homes / 8 + 4;
                continue;
            }
            let mut slots: Vec<Slot<T>> = Vec::with_capacity(size);
            for (h, element) in old.into_iter().flatten() {
                let at = self.home(h).max(slots.len());
                slots.resize_with(at, || None);
                slots.push(Some((h, element)));
            }
            slots.resize_with(size, || None);
            self.slots = slots;
            return;
        }
    }

    /// The heap bytes of the slots (not of what the elements point to).
    pub fn heap_bytes(&self) -> usize {
        crate::alloc::chunk(self.slots.capacity() * std::mem::size_of::<Slot<T>>())
    }

    /// Every element, in hash order. What an element points to is fetched
    /// `WALK_PREFETCH_SLOTS_AHEAD` slots before its turn: a keyspace's nodes lie in no order
    /// the slots know, and a walk that waited for each (the count of every key's bytes after a
    /// restart) waited for a miss a key.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let slots = &self.slots;
        slots.iter().enumerate().filter_map(move |(i, s)| {
            if let Some(Some((_, ahead))) = slots.get(i + WALK_PREFETCH_SLOTS_AHEAD) {
                ahead.prefetch();
            }
            s.as_ref().map(|(_, e)| e)
        })
    }

    /// Every element, to change in place (its key must stay); fetched ahead as `iter` does.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let mut rest = self.slots.as_mut_slice();
        std::iter::from_fn(move || loop {
            let (first, after) = std::mem::take(&mut rest).split_first_mut()?;
            if let Some(Some((_, ahead))) = after.get(WALK_PREFETCH_SLOTS_AHEAD - 1) {
                ahead.prefetch();
            }
            rest = after;
            if let Some((_, e)) = first {
                return Some(e);
            }
        })
    }

    /// The first position whose element's hash is `cursor` or more.
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

    /// The elements of hash `cursor` or more, in hash order, with their hashes.
    fn from(&self, cursor: u64) -> impl Iterator<Item = (u64, &T)> {
        self.slots[self.first_from(cursor).min(self.slots.len())..]
            .iter()
            .flatten()
            .map(|(h, e)| (*h, e))
    }

    /// Visits elements from `cursor` (a hash) in hash order until `count` were visited, at the
    /// end of a hash's elements (a cursor cannot point inside them); the next cursor, 0 at the
    /// end.
    pub fn scan(&self, cursor: u64, count: usize, mut visit: impl FnMut(&T)) -> u64 {
        self.scan_until(cursor, usize::MAX, count, |e| {
            visit(e);
            false
        })
    }

    /// A scan that stops once `visit` has accepted `want` elements or `examine` elements have
    /// been visited, whichever comes first (at the end of a hash's elements). The next
    /// cursor, 0 at the end.
    pub fn scan_until(
        &self,
        cursor: u64,
        want: usize,
        examine: usize,
        mut visit: impl FnMut(&T) -> bool,
    ) -> u64 {
        let (mut seen, mut taken) = (0usize, 0usize);
        let mut last: Option<u64> = None;
        for (h, e) in self.from(cursor) {
            if last.is_some_and(|l| l != h) && (taken >= want || seen >= examine) {
                return h;
            }
            last = Some(h);
            taken += usize::from(visit(e));
            seen += 1;
        }
        0
    }

    /// An element picked by `r`: the first whose hash is `r` or more (the first of all past
    /// the last), and among elements of one hash the `r`th. Not uniform when hashes cluster,
    /// which is fine for RANDOMKEY and the random picks of collections.
    pub fn random(&self, r: u64) -> Option<&T> {
        let first = self
            .from(r)
            .next()
            .or_else(|| self.from(0).next())
            .map(|(h, _)| h)?;
        let group: Vec<&T> = self
            .from(first)
            .take_while(|(h, _)| *h == first)
            .map(|(_, e)| e)
            .collect();
        group.get((r as usize) % group.len().max(1)).copied()
    }
}

/// The same elements, whatever the two tables' orders.
#[cfg(test)]
impl<T: Element> SortedTable<T> {
    /// The longest run of filled slots (what an insert may have to walk).
    pub(crate) fn longest_run(&self) -> usize {
        let (mut best, mut run) = (0, 0);
        for s in &self.slots {
            run = if s.is_some() { run + 1 } else { 0 };
            best = best.max(run);
        }
        best
    }
}

impl<T: Element + PartialEq> PartialEq for SortedTable<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|e| other.get(e.key()) == Some(e))
    }
}

/// A key and its entry, in one allocation: what a keyspace slot points to.
#[derive(Debug, Clone, PartialEq)]
pub struct Node<V> {
    key: Key,
    pub value: V,
}

impl<V> Element for Box<Node<V>> {
    fn key(&self) -> &[u8] {
        self.key.bytes()
    }
    fn prefetch(&self) {
        crate::sys::prefetch(&**self as *const Node<V>);
    }
}

/// The keyspace: keys to their entries, in hash order.
#[derive(Debug, Clone)]
pub struct Keyspace<V> {
    table: SortedTable<Box<Node<V>>>,
}

impl<V> Default for Keyspace<V> {
    fn default() -> Self {
        Keyspace {
            table: SortedTable::default(),
        }
    }
}

impl<V: PartialEq> PartialEq for Keyspace<V> {
    fn eq(&self, other: &Self) -> bool {
        self.table == other.table
    }
}

impl<V> Keyspace<V> {
    pub fn new() -> Self {
        Self::default()
    }
    /// Room for `n` keys in all (`SortedTable::reserve`).
    pub fn reserve(&mut self, n: usize) {
        self.table.reserve(n);
    }
    /// What a `reserve` took beyond the keys given back (`SortedTable::fit`).
    pub fn fit(&mut self) {
        self.table.fit();
    }
    pub fn len(&self) -> usize {
        self.table.len()
    }
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
    pub fn clear(&mut self) {
        self.table.clear();
    }
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.table.get(key).map(|n| &n.value)
    }
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        self.table.get_mut(key).map(|n| &mut n.value)
    }
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.table.get(key).is_some()
    }
    /// Brings the first slot a lookup of `key` reads into the cache without waiting for it
    /// (`SortedTable::prefetch_home`); replay, a request's pipeline and a snapshot's load call it
    /// a few keys ahead of the key's turn.
    pub fn prefetch_slot(&self, key: &[u8]) {
        self.table.prefetch_home(key);
    }
    /// `SortedTable::prefetch_element` of one key.
    pub fn prefetch_node(&self, key: &[u8]) {
        self.table.prefetch_element(key);
    }
    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        self.table.upsert(
            key,
            value,
            |n, value| std::mem::replace(&mut n.value, value),
            |value| {
                Box::new(Node {
                    key: Key::new(key),
                    value,
                })
            },
        )
    }
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        self.table.remove(key).map(|n| n.value)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.table.iter().map(|n| (n.key.bytes(), &n.value))
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut V)> {
        self.table.iter_mut().map(|n| (n.key.bytes(), &mut n.value))
    }
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.table.iter().map(|n| n.key.bytes())
    }
    pub fn scan(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &V)) -> u64 {
        self.table
            .scan(cursor, count, |n| visit(n.key.bytes(), &n.value))
    }
    pub fn scan_until(
        &self,
        cursor: u64,
        want: usize,
        examine: usize,
        mut visit: impl FnMut(&[u8], &V) -> bool,
    ) -> u64 {
        self.table
            .scan_until(cursor, want, examine, |n| visit(n.key.bytes(), &n.value))
    }
    pub fn random(&self, r: u64) -> Option<(&[u8], &V)> {
        self.table.random(r).map(|n| (n.key.bytes(), &n.value))
    }
    /// The heap bytes one key costs besides its value's own: its share of the slots, its node,
    /// and its name when longer than a node holds.
    pub fn key_heap_bytes(&self, key: &[u8]) -> usize {
        let share = self.table.heap_bytes() / self.table.len().max(1);
        let long = if key.len() > 22 {
            crate::alloc::chunk(key.len())
        } else {
            0
        };
        share + crate::alloc::chunk(std::mem::size_of::<Node<V>>()) + long
    }
}

#[cfg(test)]
mod tests {
    use super::super::key::stable_hash;
    use super::super::scanmap::ScanMap;
    use super::*;
    use std::collections::BTreeMap;

    /// What the tables replaced, kept as the model they are held to: a B-tree from each hash
    /// to the keys of that hash, in insertion order.
    #[derive(Default)]
    struct Model {
        tree: BTreeMap<u64, Vec<(Vec<u8>, u32)>>,
    }

    impl Model {
        fn insert(&mut self, k: &[u8], v: u32) -> Option<u32> {
            let b = self.tree.entry(stable_hash(k)).or_default();
            if let Some((_, old)) = b.iter_mut().find(|(x, _)| x == k) {
                return Some(std::mem::replace(old, v));
            }
            b.push((k.to_vec(), v));
            None
        }
        fn remove(&mut self, k: &[u8]) -> Option<u32> {
            let h = stable_hash(k);
            let b = self.tree.get_mut(&h)?;
            let at = b.iter().position(|(x, _)| x == k)?;
            let (_, v) = b.remove(at);
            if b.is_empty() {
                self.tree.remove(&h);
            }
            Some(v)
        }
        fn len(&self) -> usize {
            self.tree.values().map(Vec::len).sum()
        }
        fn items(&self) -> Vec<(Vec<u8>, u32)> {
            self.tree.values().flatten().cloned().collect()
        }
    }

    fn sorted(mut v: Vec<(Vec<u8>, u32)>) -> Vec<(Vec<u8>, u32)> {
        v.sort();
        v
    }

    /// A whole scan from cursor 0: every element once, in the table's order.
    fn scan_all<F: FnMut(u64, &mut Vec<(Vec<u8>, u32)>) -> u64>(
        mut step: F,
    ) -> Vec<(Vec<u8>, u32)> {
        let (mut cursor, mut out) = (0u64, Vec::new());
        loop {
            cursor = step(cursor, &mut out);
            if cursor == 0 {
                return out;
            }
        }
    }

    /// The keyspace and the collections' map hold, find, scan and pick the same elements as
    /// the model, through growth, shrinking and removals; a scan returns each element once.
    #[test]
    fn the_tables_behave_as_the_model() {
        let mut m = Model::default();
        let mut k: Keyspace<u32> = Keyspace::new();
        let mut s: ScanMap<u32> = ScanMap::new();
        let mut x = 88172645463325252u64;
        let owned = |it: &mut dyn Iterator<Item = (&[u8], &u32)>| -> Vec<(Vec<u8>, u32)> {
            sorted(it.map(|(a, b)| (a.to_vec(), *b)).collect())
        };
        for round in 0..3u64 {
            for i in 0..20_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = format!("k{}", x % (3_000 + 2_000 * round));
                let key = key.as_bytes();
                // Early on mostly inserts, later mostly removals: the tables grow and shrink.
                if x % 10 < 3 + 3 * round {
                    let want = m.remove(key);
                    assert_eq!(k.remove(key), want);
                    assert_eq!(s.remove(key), want);
                } else {
                    let want = m.insert(key, i);
                    assert_eq!(k.insert(key, i), want);
                    assert_eq!(s.insert(key, i), want);
                }
                assert_eq!((k.len(), s.len()), (m.len(), m.len()));
                if i % 997 == 0 {
                    assert_eq!(owned(&mut k.iter()), sorted(m.items()));
                    assert_eq!(owned(&mut s.iter()), sorted(m.items()));
                }
            }
            let want = sorted(m.items());
            assert_eq!(owned(&mut k.iter()), want);
            assert_eq!(owned(&mut s.iter()), want);
            for (key, v) in &want {
                assert_eq!(k.get(key), Some(v));
                assert_eq!(s.get(key), Some(v));
            }
            assert_eq!(k.get(b"absent"), None);
            assert_eq!(
                s.key_bytes(),
                want.iter().map(|(a, _)| a.len()).sum::<usize>()
            );
            let by_k = scan_all(|c, out| k.scan(c, 10, |a, b| out.push((a.to_vec(), *b))));
            let by_s = scan_all(|c, out| s.scan(c, 10, |a, b| out.push((a.to_vec(), *b))));
            assert_eq!(sorted(by_k), want, "a scan returns each element once");
            assert_eq!(sorted(by_s), want);
            for r in [0, 1, u64::MAX / 3, u64::MAX] {
                let got = k.random(r).map(|(a, b)| (a.to_vec(), *b));
                assert!(got.as_ref().is_some_and(|g| want.contains(g)));
                assert_eq!(k.random(r).map(|(a, b)| (a.to_vec(), *b)), got);
            }
        }
        // Emptied, they shrink back and stay usable.
        for (key, _) in m.items() {
            assert!(k.remove(&key).is_some());
            assert!(s.remove(&key).is_some());
        }
        assert!(k.is_empty() && s.is_empty());
        assert!(k.table.homes <= 2 * MIN_HOMES);
        assert_eq!(k.insert(b"again", 1), None);
        assert_eq!(k.get(b"again"), Some(&1));
    }

    /// Guards the snapshot load's sizing: after `reserve(n)` the table takes n elements
    /// without being rebuilt, and `fit` gives back what was reserved beyond them; contents and
    /// lookups are as without either.
    #[test]
    fn a_reserved_table_takes_its_elements_without_growing_and_fits_after() {
        let mut k: Keyspace<u32> = Keyspace::new();
        k.reserve(10_000);
        let homes = k.table.homes;
        assert!(homes * 7 >= 10_000 * 8);
        for i in 0..10_000u32 {
            assert_eq!(k.insert(format!("key:{i}").as_bytes(), i), None);
        }
        assert_eq!(k.table.homes, homes, "no rebuild on the way");
        k.fit();
        assert_eq!(k.table.homes, homes, "a full table keeps its size");
        // Reserved for many more than came: fitted back to what growing would have made.
        let mut few: Keyspace<u32> = Keyspace::new();
        few.reserve(100_000);
        for i in 0..1_000u32 {
            few.insert(format!("key:{i}").as_bytes(), i);
        }
        few.fit();
        assert!(few.table.homes < 2_000, "{}", few.table.homes);
        for i in 0..1_000u32 {
            assert_eq!(few.get(format!("key:{i}").as_bytes()), Some(&i));
        }
        assert_eq!(few.len(), 1_000);
        // Reserving less than is there, or nothing, changes nothing.
        few.reserve(10);
        few.reserve(0);
        assert_eq!(few.len(), 1_000);
    }

    /// Guards the walks that fetch ahead (`iter`, `iter_mut`): each element once, in the
    /// slots' order, at every size around the distance they fetch ahead and beyond, and a
    /// change through `iter_mut` lands on the element it was made to.
    #[test]
    fn a_walk_that_fetches_ahead_visits_each_element_once_in_order() {
        let mut k: Keyspace<u32> = Keyspace::new();
        for n in 0..3 * WALK_PREFETCH_SLOTS_AHEAD as u32 + 1_000 {
            let in_slots: Vec<Vec<u8>> = k
                .table
                .slots
                .iter()
                .flatten()
                .map(|(_, e)| e.key().to_vec())
                .collect();
            let walked: Vec<Vec<u8>> = k.iter().map(|(a, _)| a.to_vec()).collect();
            assert_eq!(walked, in_slots, "{n} elements");
            for (key, v) in k.iter_mut() {
                *v = u32::try_from(key.len()).unwrap_or(0) + 1_000_000;
            }
            let changed: Vec<Vec<u8>> = k.iter().map(|(a, _)| a.to_vec()).collect();
            assert_eq!(changed, in_slots);
            for key in &in_slots {
                let want = u32::try_from(key.len()).unwrap_or(0) + 1_000_000;
                assert_eq!(k.get(key), Some(&want));
            }
            k.insert(format!("key:{n}").as_bytes(), n);
        }
    }

    /// Elements present for a whole scan are returned by it while others come and go and the
    /// table grows and shrinks between its calls.
    #[test]
    fn a_scan_returns_what_stays_while_the_table_changes() {
        let mut s: ScanMap<u32> = ScanMap::new();
        for i in 0..2_000u32 {
            s.insert(format!("stay{i}").as_bytes(), i);
        }
        let (mut cursor, mut seen, mut round) = (0u64, Vec::new(), 0u32);
        loop {
            cursor = s.scan(cursor, 50, |k, _| seen.push(k.to_vec()));
            // Between calls, a burst of others: the table grows, then shrinks back.
            for j in 0..3_000u32 {
                s.insert(format!("go{round}:{j}").as_bytes(), j);
            }
            for j in 0..3_000u32 {
                s.remove(format!("go{round}:{j}").as_bytes());
            }
            round += 1;
            if cursor == 0 {
                break;
            }
        }
        for i in 0..2_000u32 {
            assert!(
                seen.contains(&format!("stay{i}").into_bytes()),
                "stay{i} missed"
            );
        }
    }

    /// Guards the quadratic stall a sorted table invites: elements arriving in its own order,
    /// or another table's, or the stable hash's, must not pile up in one run of slots (before
    /// the per-table multiplier, loading a snapshot of 1,000,000 keys took 141 s).
    #[test]
    fn elements_in_order_do_not_pile_up() {
        let mut a: ScanMap<u32> = ScanMap::new();
        for i in 0..50_000u32 {
            a.insert(format!("m{i}").as_bytes(), i);
        }
        // Half of `a`, in `a`'s order (as a set built from another set's members), and half
        // in stable-hash order (as a snapshot is loaded): in order, the first half of the
        // order space is all there is, and piled up in its homes it would be one run of tens
        // of thousands of slots. Linear probing at 7/8 makes runs of a few hundred.
        let mut b: ScanMap<u32> = ScanMap::new();
        for (k, v) in a.iter().take(25_000) {
            b.insert(k, *v);
        }
        let mut keys: Vec<Vec<u8>> = a.keys().map(<[u8]>::to_vec).collect();
        keys.sort_by_key(|k| stable_hash(k));
        let mut c: ScanMap<u32> = ScanMap::new();
        for k in keys.iter().take(25_000) {
            c.insert(k, 0);
        }
        for t in [&a, &b, &c] {
            assert!(
                t.longest_run() < 2_000,
                "a run of {} slots",
                t.longest_run()
            );
        }
    }

    #[derive(Debug, PartialEq)]
    struct Named(&'static str, u32);

    impl Element for Named {
        fn key(&self) -> &[u8] {
            self.0.as_bytes()
        }
    }

    /// Elements whose 64-bit hashes collide each keep their place, and a scan never stops
    /// between them.
    #[test]
    fn colliding_hashes_are_kept_together() {
        let names: Vec<&'static str> = (0..100)
            .map(|i| &*Box::leak(format!("k{i}").into_boxed_str()))
            .collect();
        let mut t: SortedTable<Named> = SortedTable::new();
        for (i, n) in names.iter().enumerate() {
            t.insert(n.as_bytes(), Named(n, i as u32));
        }
        // Three more elements placed by hand at the place of `k7`.
        let h = t.order_of(stable_hash(b"k7"));
        for (j, name) in ["x1", "x2", "x3"].into_iter().enumerate() {
            assert!(t.place(h, Named(name, 1_000 + j as u32)).is_ok());
            t.len += 1;
        }
        for (j, name) in ["x1", "x2", "x3"].into_iter().enumerate() {
            let at = t.find(name.as_bytes(), h).map(|i| &t.slots[i]);
            assert_eq!(
                at.and_then(|s| s.as_ref()).map(|(_, e)| e.1),
                Some(1_000 + j as u32)
            );
        }
        let mut cursor = 0;
        loop {
            let mut got = Vec::new();
            cursor = t.scan(cursor, 1, |e| got.push(e.0));
            if got.contains(&"k7") {
                assert_eq!(got, ["k7", "x1", "x2", "x3"]);
            }
            if cursor == 0 {
                break;
            }
        }
    }

    /// A keyspace slot is a hash and a pointer; a set's, a hash and a member of up to 22
    /// bytes held in place.
    #[test]
    fn slots_are_small() {
        assert_eq!(
            std::mem::size_of::<Slot<Box<Node<super::super::Entry>>>>(),
            16
        );
        assert_eq!(
            std::mem::size_of::<Slot<super::super::scanmap::Member<()>>>(),
            32
        );
        assert_eq!(std::mem::size_of::<super::super::Entry>() + 24, 56);
    }
}
