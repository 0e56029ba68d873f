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

/// A hasher that passes a `stable_hash` through: the keys of [`IndexedScanMap`]'s table are
/// already well-mixed 64-bit hashes.
#[derive(Default, Clone, Copy)]
pub struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type PassThroughState = std::hash::BuildHasherDefault<PassThrough>;

/// A key as [`IndexedScanMap`] keeps it: up to 22 bytes in place (most keys: comparing one
/// then reads the slot's own cache line, not a pointer's), longer ones on the heap.
#[derive(Clone)]
enum Key {
    Inline([u8; 22], u8),
    Heap(Box<[u8]>),
}

impl Key {
    fn new(k: &[u8]) -> Key {
        if k.len() <= 22 {
            let mut b = [0u8; 22];
            b[..k.len()].copy_from_slice(k);
            Key::Inline(b, k.len() as u8)
        } else {
            Key::Heap(k.into())
        }
    }
    fn bytes(&self) -> &[u8] {
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

/// The elements of one hash in [`IndexedScanMap`]: almost always one, kept in the table's slot
/// itself (no allocation and no pointer to follow); a collision of 64-bit hashes spills to a list.
#[derive(Debug, Clone, PartialEq)]
enum Slot<V> {
    One(Key, V),
    Many(Vec<(Key, V)>),
}

impl<V> Slot<V> {
    fn find(&self, key: &[u8]) -> Option<&V> {
        match self {
            Slot::One(k, v) => (k.bytes() == key).then_some(v),
            Slot::Many(list) => list.iter().find(|(k, _)| k.bytes() == key).map(|(_, v)| v),
        }
    }
    fn find_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        match self {
            Slot::One(k, v) => (k.bytes() == key).then_some(v),
            Slot::Many(list) => list
                .iter_mut()
                .find(|(k, _)| k.bytes() == key)
                .map(|(_, v)| v),
        }
    }
    fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        let (one, many) = match self {
            Slot::One(k, v) => (Some((k.bytes(), v)), None),
            Slot::Many(list) => (None, Some(list.iter().map(|(k, v)| (k.bytes(), v)))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
    fn len(&self) -> usize {
        match self {
            Slot::One(..) => 1,
            Slot::Many(list) => list.len(),
        }
    }
    fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut V)> {
        let (one, many) = match self {
            Slot::One(k, v) => (Some((k.bytes(), v)), None),
            Slot::Many(list) => (None, Some(list.iter_mut().map(|(k, v)| (k.bytes(), v)))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// A [`ScanMap`] with a hash index, for the keyspace: a lookup is one probe of a hash table
/// instead of a B-tree descent through a million keys (measured: the descents were 42 % of a
/// replay at 1,000,000 keys, three per SET). The B-tree keeps only the hashes, in the order
/// SCAN walks; iteration and SCAN visit the same elements in the same order as `ScanMap`.
///
/// In bulk mode (loading a snapshot, replaying the log) the order is not kept up on every
/// insert, which measured 11 % of a replay: it is built once, sorted, when bulk mode ends.
/// Reads stay correct meanwhile, only slower.
#[derive(Debug, Clone)]
pub struct IndexedScanMap<V> {
    buckets: std::collections::HashMap<u64, Slot<V>, PassThroughState>,
    order: std::collections::BTreeSet<u64>,
    len: usize,
    bulk: bool,
}

impl<V: PartialEq> PartialEq for IndexedScanMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.buckets == other.buckets
    }
}

impl<V> Default for IndexedScanMap<V> {
    fn default() -> Self {
        IndexedScanMap {
            buckets: Default::default(),
            order: Default::default(),
            len: 0,
            bulk: false,
        }
    }
}

impl<V> IndexedScanMap<V> {
    pub fn new() -> Self {
        Self::default()
    }
    /// Every element, to change values in place, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut V)> {
        self.buckets.values_mut().flat_map(|s| s.iter_mut())
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn clear(&mut self) {
        self.buckets.clear();
        self.order.clear();
        self.len = 0;
    }

    /// Enters or leaves bulk mode (see the type's doc).
    pub fn set_bulk(&mut self, bulk: bool) {
        if bulk == self.bulk {
            return;
        }
        self.bulk = bulk;
        if bulk {
            self.order.clear();
        } else {
            let mut hashes: Vec<u64> = self.buckets.keys().copied().collect();
            hashes.sort_unstable();
            self.order = hashes.into_iter().collect();
        }
    }

    /// The hashes present from `from` on, in order.
    fn hashes_from(&self, from: u64) -> Box<dyn Iterator<Item = u64> + '_> {
        if !self.bulk {
            return Box::new(self.order.range(from..).copied());
        }
        let mut hashes: Vec<u64> = self
            .buckets
            .keys()
            .copied()
            .filter(|h| *h >= from)
            .collect();
        hashes.sort_unstable();
        Box::new(hashes.into_iter())
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.buckets.get(&stable_hash(key))?.find(key)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        self.buckets.get_mut(&stable_hash(key))?.find_mut(key)
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        use std::collections::hash_map::Entry;
        let h = stable_hash(key);
        match self.buckets.entry(h) {
            Entry::Vacant(e) => {
                e.insert(Slot::One(Key::new(key), value));
                if !self.bulk {
                    self.order.insert(h);
                }
            }
            Entry::Occupied(mut e) => {
                let slot = e.get_mut();
                if let Some(v) = slot.find_mut(key) {
                    return Some(std::mem::replace(v, value));
                }
                let list = match std::mem::replace(slot, Slot::Many(Vec::new())) {
                    Slot::One(k, v) => vec![(k, v), (Key::new(key), value)],
                    Slot::Many(mut list) => {
                        list.push((Key::new(key), value));
                        list
                    }
                };
                *slot = Slot::Many(list);
            }
        }
        self.len += 1;
        None
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let h = stable_hash(key);
        let slot = self.buckets.get_mut(&h)?;
        let v = match slot {
            Slot::One(k, _) if k.bytes() != key => return None,
            Slot::One(..) => match self.buckets.remove(&h) {
                Some(Slot::One(_, v)) => {
                    self.order.remove(&h);
                    v
                }
                _ => return None,
            },
            Slot::Many(list) => {
                let pos = list.iter().position(|(k, _)| k.bytes() == key)?;
                let (_, v) = list.swap_remove(pos);
                if list.is_empty() {
                    self.buckets.remove(&h);
                    self.order.remove(&h);
                }
                v
            }
        };
        self.len -= 1;
        Some(v)
    }

    fn bucket(&self, h: u64) -> impl Iterator<Item = (&[u8], &V)> {
        self.buckets.get(&h).into_iter().flat_map(|b| b.iter())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.hashes_from(0).flat_map(|h| self.bucket(h))
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|(k, _)| k)
    }

    /// As [`ScanMap::scan`].
    pub fn scan(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &V)) -> u64 {
        let mut seen = 0usize;
        let mut range = self.hashes_from(cursor);
        for h in range.by_ref() {
            for (k, v) in self.bucket(h) {
                visit(k, v);
                seen += 1;
            }
            if seen >= count {
                break;
            }
        }
        range.next().unwrap_or(0)
    }

    /// A scan that stops once `visit` has accepted `want` entries or `examine` entries have
    /// been visited, whichever comes first (at a bucket's end: a cursor cannot point inside
    /// one). Answers the next cursor, 0 at the end.
    pub fn scan_until(
        &self,
        cursor: u64,
        want: usize,
        examine: usize,
        mut visit: impl FnMut(&[u8], &V) -> bool,
    ) -> u64 {
        let (mut seen, mut taken) = (0usize, 0usize);
        let mut range = self.hashes_from(cursor);
        for h in range.by_ref() {
            for (k, v) in self.bucket(h) {
                taken += usize::from(visit(k, v));
                seen += 1;
            }
            if taken >= want || seen >= examine {
                break;
            }
        }
        range.next().unwrap_or(0)
    }

    /// As [`ScanMap::random`].
    pub fn random(&self, r: u64) -> Option<(&[u8], &V)> {
        let h = self
            .hashes_from(r)
            .next()
            .or_else(|| self.hashes_from(0).next())?;
        let slot = self.buckets.get(&h)?;
        slot.iter().nth((r as usize) % slot.len())
    }
}

#[cfg(test)]
mod indexed_tests {
    use super::*;

    /// A slot holding several keys (two keys whose 64-bit hashes collide) finds, lists and
    /// counts each of them.
    #[test]
    fn a_slot_of_colliding_keys_keeps_them_all() {
        let long = [b'x'; 40];
        let mut slot = Slot::One(Key::new(b"a"), 1);
        assert_eq!(slot.find(b"a"), Some(&1));
        assert_eq!(slot.find(b"b"), None);
        assert_eq!(slot.find(b""), None);
        slot = Slot::Many(vec![
            (Key::new(b"a"), 1),
            (Key::new(b"b"), 2),
            (Key::new(&long), 4),
        ]);
        assert_eq!(slot.find(&long), Some(&4));
        assert_eq!(slot.find(&long[..22]), None);
        if let Some(v) = slot.find_mut(b"b") {
            *v = 3;
        }
        assert_eq!(slot.find(b"b"), Some(&3));
        assert_eq!(slot.len(), 3);
        assert_eq!(
            slot.iter()
                .map(|(k, v)| (k.to_vec(), *v))
                .collect::<Vec<_>>(),
            [(b"a".to_vec(), 1), (b"b".to_vec(), 3), (long.to_vec(), 4)]
        );
    }

    /// The indexed map answers, iterates and scans exactly as the plain one.
    #[test]
    fn the_indexed_map_behaves_as_the_plain_one() {
        let mut a: ScanMap<u32> = ScanMap::new();
        let mut b: IndexedScanMap<u32> = IndexedScanMap::new();
        let mut x = 88172645463325252u64;
        for i in 0..5000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = format!("k{}", x % 700);
            if x.is_multiple_of(3) {
                assert_eq!(a.remove(k.as_bytes()), b.remove(k.as_bytes()));
            } else {
                assert_eq!(a.insert(k.as_bytes(), i), b.insert(k.as_bytes(), i));
            }
            assert_eq!(a.len(), b.len());
        }
        assert!(a.iter().eq(b.iter()));
        // Bulk mode answers the same, and leaves the order as it was.
        b.set_bulk(true);
        assert!(a.iter().eq(b.iter()));
        b.insert(b"extra", 1);
        b.remove(b"extra");
        b.set_bulk(false);
        assert!(a.iter().eq(b.iter()));
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
}
