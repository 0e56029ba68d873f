//! An ordered set that also answers "how many are before this one?" and "which one is n-th?"
//! in O(log n): the order behind a sorted set, so ZRANK, ZRANGE by index, ZCOUNT and
//! ZREMRANGEBYRANK cost O(log n + m) on a million members, as they do in Redis's skiplist.
//!
//! The elements live in sorted chunks of at most `2 * LOAD`; a Fenwick tree over the chunk
//! lengths turns a chunk number into the count before it and back. Finding a chunk is a binary
//! search on the chunks' last elements; inside a chunk, another. An insert or remove moves at
//! most `2 * LOAD` elements of one chunk; splitting or dropping a chunk rebuilds the Fenwick
//! tree, which happens once per `LOAD` changes at most.

/// Target chunk length: big enough that the chunk index stays small and cache-friendly,
/// small enough that shifting inside a chunk is cheap.
const LOAD: usize = 256;

#[derive(Debug, Clone)]
pub struct Ranked<T> {
    chunks: Vec<Vec<T>>,
    /// Fenwick tree over `chunks[i].len()`, 1-based.
    tree: Vec<usize>,
    len: usize,
}

impl<T> Default for Ranked<T> {
    fn default() -> Self {
        Ranked {
            chunks: Vec::new(),
            tree: vec![0],
            len: 0,
        }
    }
}

impl<T: Ord> PartialEq for Ranked<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl<T> Ranked<T> {
    /// The heap bytes of the chunks and the tree (not of what the elements point to).
    pub fn heap_bytes(&self) -> usize {
        use crate::alloc::chunk;
        chunk(self.chunks.capacity() * std::mem::size_of::<Vec<T>>())
            + self
                .chunks
                .iter()
                .map(|c| chunk(c.capacity() * std::mem::size_of::<T>()))
                .sum::<usize>()
            + chunk(self.tree.capacity() * std::mem::size_of::<usize>())
    }
}

impl<T: Ord> Ranked<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The Fenwick tree from scratch, in O(chunks).
    fn rebuild(&mut self) {
        let n = self.chunks.len();
        self.tree = vec![0; n + 1];
        for i in 1..=n {
            self.tree[i] += self.chunks[i - 1].len();
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                self.tree[parent] += self.tree[i];
            }
        }
    }

    fn tree_add(&mut self, chunk: usize, delta: isize) {
        let mut j = chunk + 1;
        while j < self.tree.len() {
            self.tree[j] = (self.tree[j] as isize + delta) as usize;
            j += j & j.wrapping_neg();
        }
    }

    /// Elements in chunks before `chunk`.
    fn before_chunk(&self, chunk: usize) -> usize {
        let mut j = chunk;
        let mut sum = 0;
        while j > 0 {
            sum += self.tree[j];
            j -= j & j.wrapping_neg();
        }
        sum
    }

    /// The chunk and offset of the element at position `i` (`i < len`).
    fn locate_index(&self, mut i: usize) -> (usize, usize) {
        let n = self.chunks.len();
        let mut pos = 0;
        let mut step = n.next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next <= n && self.tree[next] <= i {
                pos = next;
                i -= self.tree[next];
            }
            step >>= 1;
        }
        (pos, i)
    }

    /// The chunk an element `x` belongs in (the first whose last element is >= x, or the last).
    fn chunk_for(&self, x: &T) -> usize {
        let c = self
            .chunks
            .partition_point(|ch| ch.last().is_some_and(|l| l < x));
        c.min(self.chunks.len().saturating_sub(1))
    }

    /// Inserts `x`; false when an equal element was there already.
    pub fn insert(&mut self, x: T) -> bool {
        if self.chunks.is_empty() {
            self.chunks.push(vec![x]);
            self.len = 1;
            self.rebuild();
            return true;
        }
        let c = self.chunk_for(&x);
        let ch = &mut self.chunks[c];
        match ch.binary_search(&x) {
            Ok(_) => return false,
            Err(p) => ch.insert(p, x),
        }
        self.len += 1;
        if self.chunks[c].len() > 2 * LOAD {
            let tail = self.chunks[c].split_off(LOAD);
            self.chunks.insert(c + 1, tail);
            self.rebuild();
        } else {
            self.tree_add(c, 1);
        }
        true
    }

    /// Removes the element equal to `x`; false when there was none.
    pub fn remove(&mut self, x: &T) -> bool {
        if self.chunks.is_empty() {
            return false;
        }
        let c = self.chunk_for(x);
        let Ok(p) = self.chunks[c].binary_search(x) else {
            return false;
        };
        self.chunks[c].remove(p);
        self.len -= 1;
        if self.chunks[c].is_empty() {
            self.chunks.remove(c);
            self.rebuild();
        } else if self.chunks[c].len() < LOAD / 4 && self.chunks.len() > 1 {
            // Fold a small chunk into a neighbour so the chunk count stays near len / LOAD.
            let into = if c > 0 { c - 1 } else { c + 1 };
            let (lo, hi) = (into.min(c), into.max(c));
            let moved = self.chunks.remove(hi);
            self.chunks[lo].extend(moved);
            let merged = self.chunks[lo].len();
            if merged > 2 * LOAD {
                let tail = self.chunks[lo].split_off(merged / 2);
                self.chunks.insert(lo + 1, tail);
            }
            self.rebuild();
        } else {
            self.tree_add(c, -1);
        }
        true
    }

    /// How many elements are `< x` (`strict`) or `<= x`.
    pub fn count_below(&self, x: &T, strict: bool) -> usize {
        if self.chunks.is_empty() {
            return 0;
        }
        let c = self.chunks.partition_point(|ch| {
            ch.last()
                .is_some_and(|l| if strict { l < x } else { l <= x })
        });
        if c == self.chunks.len() {
            return self.len;
        }
        let inside = self.chunks[c].partition_point(|e| if strict { e < x } else { e <= x });
        self.before_chunk(c) + inside
    }

    /// The element at position `i`.
    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let (c, o) = self.locate_index(i);
        self.chunks.get(c).and_then(|ch| ch.get(o))
    }

    pub fn first(&self) -> Option<&T> {
        self.chunks.first().and_then(|c| c.first())
    }

    pub fn last(&self) -> Option<&T> {
        self.chunks.last().and_then(|c| c.last())
    }

    /// The elements at positions `start..end`, in order (reversible).
    pub fn range(&self, start: usize, end: usize) -> Iter<'_, T> {
        let end = end.min(self.len);
        let start = start.min(end);
        if start == end {
            return Iter {
                chunks: &self.chunks,
                front: (0, 0),
                back: (0, 0),
                left: 0,
            };
        }
        let front = self.locate_index(start);
        let (bc, bo) = self.locate_index(end - 1);
        Iter {
            chunks: &self.chunks,
            front,
            back: (bc, bo + 1),
            left: end - start,
        }
    }

    pub fn iter(&self) -> Iter<'_, T> {
        self.range(0, self.len)
    }
}

/// Elements between two positions; `back` is one past the last, within its chunk.
pub struct Iter<'a, T> {
    chunks: &'a [Vec<T>],
    front: (usize, usize),
    back: (usize, usize),
    left: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        if self.left == 0 {
            return None;
        }
        let (c, o) = self.front;
        let item = self.chunks.get(c)?.get(o)?;
        self.left -= 1;
        self.front = if o + 1 < self.chunks[c].len() {
            (c, o + 1)
        } else {
            (c + 1, 0)
        };
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<T> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let (mut c, mut o) = self.back;
        while o == 0 {
            c = c.checked_sub(1)?;
            o = self.chunks.get(c)?.len();
        }
        o -= 1;
        self.back = (c, o);
        self.left -= 1;
        self.chunks.get(c)?.get(o)
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn agrees_with_a_btreeset_under_random_changes() {
        let mut r = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        let mut model = BTreeSet::new();
        let mut ranked = Ranked::new();
        for step in 0..60_000 {
            let x = next() % 3000;
            if next() % 3 == 0 {
                assert_eq!(ranked.remove(&x), model.remove(&x));
            } else {
                assert_eq!(ranked.insert(x), model.insert(x));
            }
            assert_eq!(ranked.len(), model.len());
            if step % 997 == 0 {
                let all: Vec<u64> = ranked.iter().copied().collect();
                let want: Vec<u64> = model.iter().copied().collect();
                assert_eq!(all, want);
                let back: Vec<u64> = ranked.iter().rev().copied().collect();
                assert_eq!(back, want.iter().rev().copied().collect::<Vec<_>>());
                for probe in [0, 1, 1500, 2999, 3000] {
                    assert_eq!(
                        ranked.count_below(&probe, true),
                        model.range(..probe).count()
                    );
                    assert_eq!(
                        ranked.count_below(&probe, false),
                        model.range(..=probe).count()
                    );
                }
                let n = model.len();
                if n > 0 {
                    let i = (next() as usize) % n;
                    assert_eq!(ranked.get(i), model.iter().nth(i));
                    let j = i + (next() as usize) % (n - i + 1);
                    let got: Vec<u64> = ranked.range(i, j).copied().collect();
                    let want: Vec<u64> = model.iter().skip(i).take(j - i).copied().collect();
                    assert_eq!(got, want);
                    let got: Vec<u64> = ranked.range(i, j).rev().copied().collect();
                    assert_eq!(got, want.into_iter().rev().collect::<Vec<_>>());
                }
            }
        }
    }
}
