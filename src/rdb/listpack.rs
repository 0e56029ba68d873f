//! Redis's two packed containers as they appear inside a DUMP payload: the listpack
//! (`listpack.c`: small hashes, sorted sets, list nodes, stream nodes) and the intset
//! (`intset.c`: small sets of integers). Writing follows Redis's encoder choices byte for
//! byte; reading checks every length, so a bad payload is refused, never trusted.

use crate::num::parse_i64;

/// An element of a listpack: a string, or an integer that was stored as one.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Str(Vec<u8>),
    Int(i64),
}

impl Item {
    /// The element as the string Redis hands out (an integer as its decimal text).
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Item::Str(s) => s,
            Item::Int(i) => i.to_string().into_bytes(),
        }
    }
    pub fn int(&self) -> Option<i64> {
        match self {
            Item::Int(i) => Some(*i),
            Item::Str(s) => parse_i64(s),
        }
    }
}

const HEADER: usize = 6;
const EOF: u8 = 0xff;

/// Builds a listpack element by element.
pub struct Writer {
    buf: Vec<u8>,
    count: usize,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            buf: vec![0; HEADER],
            count: 0,
        }
    }

    /// Appends a string; one that reads as an integer is stored as an integer, as Redis does.
    pub fn push(&mut self, s: &[u8]) {
        match parse_i64(s) {
            Some(v) => self.push_int(v),
            None => self.push_str(s),
        }
    }

    pub fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        if (0..=127).contains(&v) {
            self.buf.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = if v < 0 { (1i64 << 13) + v } else { v } as u64;
            self.buf.push(((u >> 8) as u8) | 0xc0);
            self.buf.push(u as u8);
        } else if (-32768..=32767).contains(&v) {
            self.buf.push(0xf1);
            self.buf.extend_from_slice(&(v as i16).to_le_bytes());
        } else if (-8_388_608..=8_388_607).contains(&v) {
            self.buf.push(0xf2);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if (i32::MIN as i64..=i32::MAX as i64).contains(&v) {
            self.buf.push(0xf3);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            self.buf.push(0xf4);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        self.end_entry(start);
    }

    fn push_str(&mut self, s: &[u8]) {
        let start = self.buf.len();
        let n = s.len();
        if n < 64 {
            self.buf.push(0x80 | n as u8);
        } else if n < 4096 {
            self.buf.push(0xe0 | (n >> 8) as u8);
            self.buf.push(n as u8);
        } else {
            self.buf.push(0xf0);
            self.buf.extend_from_slice(&(n as u32).to_le_bytes());
        }
        self.buf.extend_from_slice(s);
        self.end_entry(start);
    }

    fn end_entry(&mut self, start: usize) {
        let l = (self.buf.len() - start) as u64;
        let mut back = [0u8; 5];
        let n = if l <= 127 {
            back[0] = l as u8;
            1
        } else if l < 16383 {
            back[0] = (l >> 7) as u8;
            back[1] = (l & 127) as u8 | 128;
            2
        } else if l < 2_097_151 {
            back[0] = (l >> 14) as u8;
            back[1] = ((l >> 7) & 127) as u8 | 128;
            back[2] = (l & 127) as u8 | 128;
            3
        } else if l < 268_435_455 {
            back[0] = (l >> 21) as u8;
            back[1] = ((l >> 14) & 127) as u8 | 128;
            back[2] = ((l >> 7) & 127) as u8 | 128;
            back[3] = (l & 127) as u8 | 128;
            4
        } else {
            back[0] = (l >> 28) as u8;
            back[1] = ((l >> 21) & 127) as u8 | 128;
            back[2] = ((l >> 14) & 127) as u8 | 128;
            back[3] = ((l >> 7) & 127) as u8 | 128;
            back[4] = (l & 127) as u8 | 128;
            5
        };
        self.buf.extend_from_slice(&back[..n]);
        self.count += 1;
    }

    /// The size the listpack would have if finished now (its terminator included): what
    /// Redis compares with a node's size limit.
    pub fn len(&self) -> usize {
        self.buf.len() + 1
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(EOF);
        let total = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(65535) as u16;
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

/// Reads every element of a listpack, checking its header, each entry and its back-length,
/// and the terminator.
pub fn read(lp: &[u8]) -> Option<Vec<Item>> {
    if lp.len() < HEADER + 1 {
        return None;
    }
    let total = u32::from_le_bytes(lp[..4].try_into().ok()?) as usize;
    let count = u16::from_le_bytes(lp[4..6].try_into().ok()?) as usize;
    if total != lp.len() || lp[total - 1] != EOF {
        return None;
    }
    let mut items = Vec::new();
    let mut p = HEADER;
    while lp[p] != EOF {
        let start = p;
        let b = lp[p];
        let (item, len) = if b & 0x80 == 0 {
            (Item::Int((b & 0x7f) as i64), 1)
        } else if b & 0xc0 == 0x80 {
            let n = (b & 0x3f) as usize;
            (Item::Str(lp.get(p + 1..p + 1 + n)?.to_vec()), 1 + n)
        } else if b & 0xe0 == 0xc0 {
            let u = (((b & 0x1f) as u64) << 8) | *lp.get(p + 1)? as u64;
            let v = if u >= 1 << 12 {
                u as i64 - (1 << 13)
            } else {
                u as i64
            };
            (Item::Int(v), 2)
        } else if b & 0xf0 == 0xe0 {
            let n = (((b & 0x0f) as usize) << 8) | *lp.get(p + 1)? as usize;
            (Item::Str(lp.get(p + 2..p + 2 + n)?.to_vec()), 2 + n)
        } else {
            match b {
                0xf0 => {
                    let n = u32::from_le_bytes(lp.get(p + 1..p + 5)?.try_into().ok()?) as usize;
                    let end = (p + 5).checked_add(n)?;
                    (Item::Str(lp.get(p + 5..end)?.to_vec()), 5 + n)
                }
                0xf1 => (
                    Item::Int(i16::from_le_bytes(lp.get(p + 1..p + 3)?.try_into().ok()?) as i64),
                    3,
                ),
                0xf2 => {
                    let s = lp.get(p + 1..p + 4)?;
                    let u = (s[0] as i32) | ((s[1] as i32) << 8) | ((s[2] as i32) << 16);
                    ((Item::Int(((u << 8) >> 8) as i64)), 4)
                }
                0xf3 => (
                    Item::Int(i32::from_le_bytes(lp.get(p + 1..p + 5)?.try_into().ok()?) as i64),
                    5,
                ),
                0xf4 => (
                    Item::Int(i64::from_le_bytes(lp.get(p + 1..p + 9)?.try_into().ok()?)),
                    9,
                ),
                _ => return None,
            }
        };
        p = start + len;
        // The back-length: the entry's size in 7-bit groups, most significant first; every
        // byte but the first carries the continuation bit (it is read from the end).
        let n = backlen_size(len);
        let back = lp.get(p..p + n)?;
        let marked = back[0] & 128 == 0 && back[1..].iter().all(|c| c & 128 != 0);
        if !marked || backlen_value(back) != len as u64 {
            return None;
        }
        p += n;
        items.push(item);
        if p >= lp.len() {
            return None;
        }
    }
    if p != total - 1 || (count != 65535 && count != items.len()) {
        return None;
    }
    Some(items)
}

fn backlen_size(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

/// The value of a back-length as written (most significant 7-bit group first).
fn backlen_value(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &c| (acc << 7) | (c & 127) as u64)
}

/// An intset of `members` (all integers): sorted, at the smallest width that holds them all.
pub fn intset(members: &mut [i64]) -> Vec<u8> {
    members.sort_unstable();
    let width: u32 = if members
        .iter()
        .all(|&v| (i16::MIN as i64..=i16::MAX as i64).contains(&v))
    {
        2
    } else if members
        .iter()
        .all(|&v| (i32::MIN as i64..=i32::MAX as i64).contains(&v))
    {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(8 + members.len() * width as usize);
    out.extend_from_slice(&width.to_le_bytes());
    out.extend_from_slice(&(members.len() as u32).to_le_bytes());
    for &v in members.iter() {
        match width {
            2 => out.extend_from_slice(&(v as i16).to_le_bytes()),
            4 => out.extend_from_slice(&(v as i32).to_le_bytes()),
            _ => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

/// Reads an intset, refusing a wrong size, an unknown width, or members out of order.
pub fn read_intset(b: &[u8]) -> Option<Vec<i64>> {
    let width = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let n = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
    if !matches!(width, 2 | 4 | 8) || b.len() != 8 + n.checked_mul(width)? {
        return None;
    }
    let out: Vec<i64> = b[8..]
        .chunks_exact(width)
        .map(|c| match width {
            2 => i16::from_le_bytes([c[0], c[1]]) as i64,
            4 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64,
            _ => i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
        })
        .collect();
    out.windows(2).all(|w| w[0] < w[1]).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listpack_round_trip() {
        let values: Vec<Vec<u8>> = vec![
            b"0".to_vec(),
            b"127".to_vec(),
            b"128".to_vec(),
            b"-1".to_vec(),
            b"-4096".to_vec(),
            b"4096".to_vec(),
            b"-40000".to_vec(),
            b"8388607".to_vec(),
            b"2147483647".to_vec(),
            b"-9223372036854775808".to_vec(),
            b"01".to_vec(),
            b"".to_vec(),
            vec![b'x'; 63],
            vec![b'y'; 64],
            vec![b'z'; 4095],
            vec![b'w'; 4096],
            vec![b'v'; 20000],
        ];
        let mut w = Writer::new();
        for v in &values {
            w.push(v);
        }
        let lp = w.finish();
        let back: Vec<Vec<u8>> = read(&lp)
            .expect("valid")
            .into_iter()
            .map(Item::into_bytes)
            .collect();
        assert_eq!(back, values);
    }

    #[test]
    fn listpack_known_bytes() {
        // Redis 7.0: RPUSH l a 1 → DUMP shows this listpack.
        let mut w = Writer::new();
        w.push(b"a");
        w.push(b"1");
        assert_eq!(
            w.finish(),
            vec![0x0c, 0, 0, 0, 2, 0, 0x81, b'a', 2, 0x01, 1, 0xff]
        );
    }

    #[test]
    fn listpack_rejects_damage() {
        let mut w = Writer::new();
        w.push(b"hello");
        let lp = w.finish();
        for cut in 0..lp.len() {
            assert_eq!(read(&lp[..cut]), None);
        }
        let mut bad = lp.clone();
        bad[6] = 0x85 + 1; // string longer than what follows
        assert_eq!(read(&bad), None);
    }

    #[test]
    fn intset_round_trip() {
        let mut m = vec![5, -3, 70000, 2];
        let b = intset(&mut m);
        assert_eq!(read_intset(&b), Some(vec![-3, 2, 5, 70000]));
        assert_eq!(&b[..4], &4u32.to_le_bytes());
        let mut unsorted = b.clone();
        unsorted[8..12].copy_from_slice(&9i32.to_le_bytes());
        assert_eq!(read_intset(&unsorted), None);
    }
}
