//! Unsigned LEB128: seven bits a byte, low first, the high bit set on every byte but the last.
//! The snapshot format's integers (`snapshot::format`), and the lengths and ID differences
//! packed in lists and stream nodes.

/// Appends `v`.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// The bytes `put` writes for `v`.
pub fn len(mut v: u64) -> usize {
    let mut k = 1;
    while v >= 0x80 {
        v >>= 7;
        k += 1;
    }
    k
}

/// The value at `at`, moving past it; None past the end or past 64 bits.
#[inline]
pub fn read(buf: &[u8], at: &mut usize) -> Option<u64> {
    // Most are one byte (short lengths, small differences).
    let b = *buf.get(*at)?;
    if b < 0x80 {
        *at += 1;
        return Some(u64::from(b));
    }
    read_long(buf, at)
}

fn read_long(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    let mut shift = 0u32;
    let mut i = *at;
    loop {
        let b = *buf.get(i)?;
        i += 1;
        n |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            *at = i;
            return Some(n);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    /// Values across every byte count read back, with the length `len` gives; a value cut
    /// short or longer than 64 bits reads as None.
    #[test]
    fn values_read_back() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            super::put(&mut out, v);
            assert_eq!(out.len(), super::len(v));
            let mut at = 0;
            assert_eq!(super::read(&out, &mut at), Some(v));
            assert_eq!(at, out.len());
            let mut at = 0;
            assert_eq!(super::read(&out[..out.len() - 1], &mut at), None);
        }
        let mut at = 0;
        assert_eq!(super::read(&[0xff; 11], &mut at), None);
    }
}
