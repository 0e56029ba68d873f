//! A list value: its items packed in chunks, as Redis's quicklist packs them in listpacks, and
//! the bytes they hold, kept as the list changes so that a value's size is known without
//! walking it (the value-size and data-size limits read it on every write).
//!
//! A chunk is one buffer of items, each written as its length (LEB128), its bytes, and its
//! length again with the LEB128 bytes reversed, so that a chunk reads from either end: an item
//! of 9 bytes costs 11, as in a listpack (a `VecDeque` of 16-byte items cost 16 and more). A
//! chunk takes items up to `CHUNK_BYTES_MAX` (Redis's `list-max-listpack-size -2`, 8 KB); a
//! larger item has a chunk of its own. Pushes and pops at either end touch one chunk; an index
//! is found by walking the chunks' counts from the nearer end, then the items of one chunk.

use std::collections::VecDeque;

/// The bytes past which a chunk takes no more items.
const CHUNK_BYTES_MAX: usize = 8192;

/// One chunk: its items' encodings, end to end, and how many there are.
#[derive(Clone, Default)]
struct Chunk {
    buf: Vec<u8>,
    count: usize,
}

fn leb_len(n: usize) -> usize {
    crate::leb128::len(n as u64)
}

fn put_leb(out: &mut Vec<u8>, n: usize) {
    crate::leb128::put(out, n as u64);
}

/// The bytes an item of `len` bytes takes in a chunk.
fn encoded_len(len: usize) -> usize {
    len + 2 * leb_len(len)
}

/// An item's encoding: length, bytes, reversed length.
fn encode(item: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(item.len()));
    put_leb(&mut out, item.len());
    out.extend_from_slice(item);
    let at = out.len();
    put_leb(&mut out, item.len());
    out[at..].reverse();
    out
}

/// The item that starts at `pos`, and where the next one starts.
fn read_forward(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let mut i = pos;
    let len = usize::try_from(crate::leb128::read(buf, &mut i)?).ok()?;
    let item = buf.get(i..i.checked_add(len)?)?;
    Some((item, i + len + leb_len(len)))
}

/// The item that ends at `end`, and where it starts.
fn read_backward(buf: &[u8], end: usize) -> Option<(&[u8], usize)> {
    let (mut len, mut shift, mut i) = (0usize, 0u32, end);
    loop {
        i = i.checked_sub(1)?;
        let b = *buf.get(i)?;
        len |= usize::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let start = i.checked_sub(len)?;
    let item = buf.get(start..i)?;
    Some((item, start.checked_sub(leb_len(len))?))
}

impl Chunk {
    fn items(&self) -> impl Iterator<Item = &[u8]> {
        let mut pos = 0;
        std::iter::from_fn(move || {
            let (item, next) = read_forward(&self.buf, pos)?;
            pos = next;
            Some(item)
        })
    }

    /// Where the `k`th item's encoding starts and ends.
    fn span(&self, k: usize) -> Option<(usize, usize)> {
        if k >= self.count {
            return None;
        }
        if k < self.count / 2 {
            let mut pos = 0;
            for _ in 0..k {
                pos = read_forward(&self.buf, pos)?.1;
            }
            Some((pos, read_forward(&self.buf, pos)?.1))
        } else {
            let mut end = self.buf.len();
            for _ in 0..self.count - 1 - k {
                end = read_backward(&self.buf, end)?.1;
            }
            Some((read_backward(&self.buf, end)?.1, end))
        }
    }

    fn full_for(&self, len: usize) -> bool {
        self.count > 0 && self.buf.len() + encoded_len(len) > CHUNK_BYTES_MAX
    }

    /// A chunk that will take no more at this end gives back its spare room.
    fn seal(&mut self) {
        self.buf.shrink_to_fit();
    }
}

#[derive(Clone, Default)]
pub struct List {
    chunks: VecDeque<Chunk>,
    len: usize,
    /// The bytes of the items together.
    bytes: usize,
}

impl PartialEq for List {
    /// The same items in the same order, wherever the chunks end.
    fn eq(&self, other: &List) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for List {}

impl std::fmt::Debug for List {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

impl From<VecDeque<Vec<u8>>> for List {
    fn from(items: VecDeque<Vec<u8>>) -> List {
        items.into_iter().collect()
    }
}

impl FromIterator<Vec<u8>> for List {
    fn from_iter<I: IntoIterator<Item = Vec<u8>>>(iter: I) -> List {
        let mut l = List::new();
        for v in iter {
            l.push_back(v);
        }
        if let Some(c) = l.chunks.back_mut() {
            c.seal();
        }
        l
    }
}

impl<'a> IntoIterator for &'a List {
    type Item = &'a [u8];
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The items in order, from either end.
pub struct Iter<'a> {
    list: &'a List,
    /// The chunk and byte position of the next item from the front.
    front: (usize, usize),
    /// The chunk and byte end of the next item from the back.
    back: (usize, usize),
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        loop {
            let c = self.list.chunks.get(self.front.0)?;
            if self.front.1 < c.buf.len() {
                let (item, next) = read_forward(&c.buf, self.front.1)?;
                self.front.1 = next;
                self.left -= 1;
                return Some(item);
            }
            self.front = (self.front.0 + 1, 0);
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        loop {
            let c = self.list.chunks.get(self.back.0)?;
            let end = self.back.1.min(c.buf.len());
            if end > 0 {
                let (item, start) = read_backward(&c.buf, end)?;
                self.back.1 = start;
                self.left -= 1;
                return Some(item);
            }
            let prev = self.back.0.checked_sub(1)?;
            self.back = (prev, usize::MAX);
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl List {
    pub fn new() -> List {
        List::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of the items together.
    pub fn data_bytes(&self) -> usize {
        self.bytes
    }

    /// The heap bytes the list holds: its chunks' buffers and the deque of them.
    pub fn heap_bytes(&self) -> usize {
        crate::alloc::chunk(self.chunks.capacity() * std::mem::size_of::<Chunk>())
            + self
                .chunks
                .iter()
                .map(|c| crate::alloc::chunk(c.buf.capacity()))
                .sum::<usize>()
    }

    /// Every item, in order (double-ended).
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            list: self,
            front: (0, 0),
            back: (self.chunks.len().saturating_sub(1), usize::MAX),
            left: self.len,
        }
    }

    /// The items from index `start` on, in order.
    pub fn iter_from(&self, start: usize) -> Iter<'_> {
        let mut it = self.iter();
        match self.locate(start) {
            Some((c, k)) => {
                let pos = self.chunks.get(c).and_then(|ch| ch.span(k)).map(|s| s.0);
                it.front = (c, pos.unwrap_or(0));
                it.left = self.len - start;
            }
            None => it.left = 0,
        }
        it
    }

    /// The chunk holding item `i`, and the item's place in it.
    fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.len {
            return None;
        }
        if i < self.len / 2 {
            let mut before = 0;
            for (c, ch) in self.chunks.iter().enumerate() {
                if i < before + ch.count {
                    return Some((c, i - before));
                }
                before += ch.count;
            }
        } else {
            let mut after = self.len;
            for (c, ch) in self.chunks.iter().enumerate().rev() {
                after -= ch.count;
                if i >= after {
                    return Some((c, i - after));
                }
            }
        }
        None
    }

    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let (c, k) = self.locate(i)?;
        let ch = self.chunks.get(c)?;
        let (start, _) = ch.span(k)?;
        read_forward(&ch.buf, start).map(|(item, _)| item)
    }

    pub fn front(&self) -> Option<&[u8]> {
        self.iter().next()
    }

    pub fn back(&self) -> Option<&[u8]> {
        self.iter().next_back()
    }

    pub fn push_front(&mut self, v: Vec<u8>) {
        if self.chunks.front().is_none_or(|c| c.full_for(v.len())) {
            if let Some(c) = self.chunks.front_mut() {
                c.seal();
            }
            self.chunks.push_front(Chunk::default());
        }
        if let Some(c) = self.chunks.front_mut() {
            c.buf.splice(0..0, encode(&v));
            c.count += 1;
            self.len += 1;
            self.bytes += v.len();
        }
    }

    pub fn push_back(&mut self, v: Vec<u8>) {
        if self.chunks.back().is_none_or(|c| c.full_for(v.len())) {
            if let Some(c) = self.chunks.back_mut() {
                c.seal();
            }
            self.chunks.push_back(Chunk::default());
        }
        if let Some(c) = self.chunks.back_mut() {
            c.buf.extend_from_slice(&encode(&v));
            c.count += 1;
            self.len += 1;
            self.bytes += v.len();
        }
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let c = self.chunks.front_mut()?;
        let (item, next) = read_forward(&c.buf, 0)?;
        let item = item.to_vec();
        c.buf.drain(..next);
        c.count -= 1;
        if c.count == 0 {
            self.chunks.pop_front();
        }
        self.len -= 1;
        self.bytes -= item.len();
        Some(item)
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let c = self.chunks.back_mut()?;
        let (item, start) = read_backward(&c.buf, c.buf.len())?;
        let item = item.to_vec();
        c.buf.truncate(start);
        c.count -= 1;
        if c.count == 0 {
            self.chunks.pop_back();
        }
        self.len -= 1;
        self.bytes -= item.len();
        Some(item)
    }

    /// Replaces the item at `i` (which must exist); returns the old one.
    pub fn set(&mut self, i: usize, v: Vec<u8>) -> Option<Vec<u8>> {
        let (c, k) = self.locate(i)?;
        let ch = self.chunks.get_mut(c)?;
        let (start, end) = ch.span(k)?;
        let old = read_forward(&ch.buf, start)?.0.to_vec();
        ch.buf.splice(start..end, encode(&v));
        self.bytes = self.bytes - old.len() + v.len();
        self.split_if_large(c);
        Some(old)
    }

    /// Inserts `v` before the item at `i` (at the end when `i` is the length).
    pub fn insert(&mut self, i: usize, v: Vec<u8>) {
        if i >= self.len {
            return self.push_back(v);
        }
        if i == 0 {
            return self.push_front(v);
        }
        let Some((c, k)) = self.locate(i) else {
            return;
        };
        let Some(ch) = self.chunks.get_mut(c) else {
            return;
        };
        let Some((start, _)) = ch.span(k) else {
            return;
        };
        ch.buf.splice(start..start, encode(&v));
        ch.count += 1;
        self.len += 1;
        self.bytes += v.len();
        self.split_if_large(c);
    }

    pub fn remove(&mut self, i: usize) -> Option<Vec<u8>> {
        let (c, k) = self.locate(i)?;
        let ch = self.chunks.get_mut(c)?;
        let (start, end) = ch.span(k)?;
        let old = read_forward(&ch.buf, start)?.0.to_vec();
        ch.buf.drain(start..end);
        ch.count -= 1;
        self.len -= 1;
        self.bytes -= old.len();
        self.after_removal(c);
        Some(old)
    }

    /// Removes up to `limit` items equal to `v` (all when `limit` is 0), from the head, or from
    /// the tail when `from_tail`; how many went. Each chunk is rewritten once.
    pub fn remove_matching(&mut self, v: &[u8], limit: usize, from_tail: bool) -> usize {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut removed = 0;
        let order: Vec<usize> = if from_tail {
            (0..self.chunks.len()).rev().collect()
        } else {
            (0..self.chunks.len()).collect()
        };
        let mut emptied = Vec::new();
        for c in order {
            if removed >= limit {
                break;
            }
            let Some(ch) = self.chunks.get_mut(c) else {
                continue;
            };
            let items: Vec<&[u8]> = ch.items().collect();
            let mut keep = vec![true; items.len()];
            let idx: Vec<usize> = if from_tail {
                (0..items.len()).rev().collect()
            } else {
                (0..items.len()).collect()
            };
            let mut here = 0;
            for k in idx {
                if removed + here >= limit {
                    break;
                }
                if items[k] == v {
                    keep[k] = false;
                    here += 1;
                }
            }
            if here == 0 {
                continue;
            }
            let mut buf = Vec::with_capacity(ch.buf.len());
            for (item, kept) in items.iter().zip(&keep) {
                if *kept {
                    buf.extend_from_slice(&encode(item));
                }
            }
            ch.buf = buf;
            ch.count -= here;
            if ch.count == 0 {
                emptied.push(c);
            }
            removed += here;
            self.len -= here;
            self.bytes -= here * v.len();
        }
        emptied.sort_unstable();
        for c in emptied.into_iter().rev() {
            self.chunks.remove(c);
        }
        removed
    }

    pub fn clear(&mut self) {
        *self = List::default();
    }

    /// Keeps the first `n` items.
    pub fn truncate(&mut self, n: usize) {
        while self.len > n {
            let last = self.chunks.back().map_or(0, |c| c.count);
            if self.len - last >= n {
                if let Some(c) = self.chunks.pop_back() {
                    self.len -= c.count;
                    self.bytes -= c.items().map(<[u8]>::len).sum::<usize>();
                }
            } else {
                self.pop_back();
            }
        }
    }

    /// Drops the first `n` items.
    pub fn drop_front(&mut self, n: usize) {
        let keep = self.len - n.min(self.len);
        while self.len > keep {
            let first = self.chunks.front().map_or(0, |c| c.count);
            if self.len - first >= keep {
                if let Some(c) = self.chunks.pop_front() {
                    self.len -= c.count;
                    self.bytes -= c.items().map(<[u8]>::len).sum::<usize>();
                }
            } else {
                self.pop_front();
            }
        }
    }

    pub fn into_items(self) -> VecDeque<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }

    /// A chunk that grew past the limit (a larger item set or inserted in it) is cut in two.
    fn split_if_large(&mut self, c: usize) {
        let Some(ch) = self.chunks.get_mut(c) else {
            return;
        };
        if ch.buf.len() <= CHUNK_BYTES_MAX || ch.count < 2 {
            return;
        }
        let half = ch.count / 2;
        let Some((at, _)) = ch.span(half) else {
            return;
        };
        let tail = Chunk {
            buf: ch.buf.split_off(at),
            count: ch.count - half,
        };
        ch.count = half;
        ch.seal();
        self.chunks.insert(c + 1, tail);
    }

    /// After an item left chunk `c`: an empty chunk goes, and a small one joins a neighbour
    /// when both fit in one, so that removals do not leave many small chunks.
    fn after_removal(&mut self, c: usize) {
        let Some(ch) = self.chunks.get(c) else {
            return;
        };
        if ch.count == 0 {
            self.chunks.remove(c);
            return;
        }
        if ch.buf.len() >= CHUNK_BYTES_MAX / 4 {
            return;
        }
        for (a, b) in [(c, c + 1), (c.wrapping_sub(1), c)] {
            let (Some(x), Some(y)) = (self.chunks.get(a), self.chunks.get(b)) else {
                continue;
            };
            if x.buf.len() + y.buf.len() <= CHUNK_BYTES_MAX {
                if let Some(y) = self.chunks.remove(b) {
                    if let Some(x) = self.chunks.get_mut(a) {
                        x.buf.extend_from_slice(&y.buf);
                        x.count += y.count;
                    }
                }
                return;
            }
        }
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

    /// Every operation against a `VecDeque` model, on items of lengths that cross chunk
    /// boundaries and LEB128's one-byte limit, including items larger than a chunk.
    #[test]
    fn packed_chunks_behave_as_a_deque() {
        let mut rng = crate::rng::Rng::new(7);
        for round in 0..40 {
            let mut l = List::new();
            let mut m: VecDeque<Vec<u8>> = VecDeque::new();
            for step in 0..600 {
                let len = match rng.next_u64() % 10 {
                    0 => (rng.next_u64() % 20_000) as usize,
                    1 => 127 + (rng.next_u64() % 3) as usize,
                    _ => (rng.next_u64() % 16) as usize,
                };
                let v: Vec<u8> = (0..len).map(|i| (i as u8) ^ (step as u8)).collect();
                let i = if m.is_empty() {
                    0
                } else {
                    (rng.next_u64() as usize) % m.len()
                };
                match rng.next_u64() % 12 {
                    0 | 1 => {
                        l.push_back(v.clone());
                        m.push_back(v);
                    }
                    2 | 3 => {
                        l.push_front(v.clone());
                        m.push_front(v);
                    }
                    4 => assert_eq!(l.pop_front(), m.pop_front()),
                    5 => assert_eq!(l.pop_back(), m.pop_back()),
                    6 => {
                        if !m.is_empty() {
                            assert_eq!(l.set(i, v.clone()), Some(std::mem::replace(&mut m[i], v)));
                        }
                    }
                    7 => {
                        let at = if m.is_empty() { 0 } else { i + (step % 2) };
                        l.insert(at, v.clone());
                        m.insert(at.min(m.len()), v);
                    }
                    8 => assert_eq!(l.remove(i), m.remove(i)),
                    9 => {
                        if let Some(target) = m.get(i).cloned() {
                            let limit = (rng.next_u64() % 3) as usize;
                            let tail = step % 2 == 0;
                            let n = l.remove_matching(&target, limit, tail);
                            let mut gone = 0;
                            let idx: Vec<usize> = if tail {
                                (0..m.len()).rev().collect()
                            } else {
                                (0..m.len()).collect()
                            };
                            let mut drop = vec![false; m.len()];
                            for k in idx {
                                if (limit == 0 || gone < limit) && m[k] == target {
                                    drop[k] = true;
                                    gone += 1;
                                }
                            }
                            let mut k = 0;
                            m.retain(|_| {
                                k += 1;
                                !drop[k - 1]
                            });
                            assert_eq!(n, gone);
                        }
                    }
                    10 => {
                        let n = m.len().saturating_sub(step % 5);
                        l.truncate(n);
                        m.truncate(n);
                    }
                    _ => {
                        let n = step % 4;
                        l.drop_front(n);
                        m.drain(..n.min(m.len()));
                    }
                }
                assert_eq!(l.len(), m.len(), "round {round} step {step}");
                assert_eq!(l.data_bytes(), m.iter().map(Vec::len).sum::<usize>());
            }
            assert!(l.iter().eq(m.iter().map(Vec::as_slice)));
            assert!(l.iter().rev().eq(m.iter().rev().map(Vec::as_slice)));
            for (i, want) in m.iter().enumerate() {
                assert_eq!(l.get(i), Some(want.as_slice()));
            }
            for s in [0, m.len() / 3, m.len().saturating_sub(1), m.len()] {
                assert!(l.iter_from(s).eq(m.iter().skip(s).map(Vec::as_slice)));
            }
            assert_eq!(l.get(m.len()), None);
            assert_eq!(l.clone().into_items(), m);
        }
    }

    /// Small items pack as a listpack does: a 9-byte item costs 11 bytes.
    #[test]
    fn small_items_cost_their_length_and_two_bytes() {
        let l: List = (0..1000)
            .map(|i| format!("item:{i:04}").into_bytes())
            .collect();
        let held: usize = l.chunks.iter().map(|c| c.buf.capacity()).sum();
        assert_eq!(held, 11 * 1000);
    }
}
