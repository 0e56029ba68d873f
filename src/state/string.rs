//! A string value: up to 14 bytes in place (most small values: a counter, a flag, a short
//! token), longer ones on the heap. The value enum stays 16 bytes, so a key with a small string
//! costs its table slot and one allocation of 64 bytes.

use std::ops::Deref;

/// The longest string kept in place.
pub const INLINE_BYTES_MAX: usize = 14;

#[derive(Clone)]
pub enum Str {
    Inline([u8; INLINE_BYTES_MAX], u8),
    Heap(Box<Vec<u8>>),
}

impl Str {
    pub fn new() -> Str {
        Str::Inline([0; INLINE_BYTES_MAX], 0)
    }

    /// The bytes, as a vector to change in place (a string kept in place moves to the heap
    /// first).
    pub fn make_mut(&mut self) -> &mut Vec<u8> {
        // At most two rounds: an inline string becomes a heap one, which is then answered.
        loop {
            match self {
                Str::Heap(v) => return v,
                Str::Inline(b, n) => {
                    let v = b[..*n as usize].to_vec();
                    *self = Str::Heap(Box::new(v));
                }
            }
        }
    }

    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Str::Inline(b, n) => b[..n as usize].to_vec(),
            Str::Heap(v) => *v,
        }
    }

    /// The heap bytes this string holds besides the value enum itself (its vector's box and
    /// buffer, as the allocator takes them).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Str::Inline(..) => 0,
            Str::Heap(v) => crate::alloc::chunk(24) + crate::alloc::chunk(v.capacity()),
        }
    }
}

impl Default for Str {
    fn default() -> Str {
        Str::new()
    }
}

impl Deref for Str {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Str::Inline(b, n) => &b[..*n as usize],
            Str::Heap(v) => v,
        }
    }
}

impl AsRef<[u8]> for Str {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for Str {
    fn from(v: Vec<u8>) -> Str {
        if v.len() <= INLINE_BYTES_MAX {
            Str::from(v.as_slice())
        } else {
            Str::Heap(Box::new(v))
        }
    }
}

impl From<&[u8]> for Str {
    fn from(s: &[u8]) -> Str {
        if s.len() <= INLINE_BYTES_MAX {
            let mut b = [0u8; INLINE_BYTES_MAX];
            b[..s.len()].copy_from_slice(s);
            Str::Inline(b, s.len() as u8)
        } else {
            Str::Heap(Box::new(s.to_vec()))
        }
    }
}

impl PartialEq for Str {
    fn eq(&self, other: &Str) -> bool {
        **self == **other
    }
}

impl Eq for Str {}

impl std::fmt::Debug for Str {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_strings_stay_in_place_and_grow_onto_the_heap() {
        assert_eq!(std::mem::size_of::<Str>(), 16);
        let mut s = Str::from(&b"counter:1"[..]);
        assert!(matches!(s, Str::Inline(..)));
        assert_eq!(&*s, b"counter:1");
        s.make_mut().extend_from_slice(b" and more than fourteen");
        assert!(matches!(s, Str::Heap(_)));
        assert_eq!(&*s, b"counter:1 and more than fourteen");
        assert_eq!(Str::from(vec![7u8; 15]).len(), 15);
        assert_eq!(Str::from(vec![7u8; 14]), Str::from(&[7u8; 14][..]));
        assert_eq!(Str::new().into_vec(), Vec::<u8>::new());
    }
}
