//! The key of a table element and the stable hash that orders it: the leaf below `table` and
//! `scanmap`.

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

/// A key as the tables keep it (`table::Keyspace`, `ScanMap`): up to 22 bytes in place, in the
/// key's node (most keys: one allocation a key), longer ones on the heap.
#[derive(Clone)]
pub(super) enum Key {
    Inline([u8; 22], u8),
    Heap(Box<[u8]>),
}

impl Key {
    pub(super) fn new(k: &[u8]) -> Key {
        if k.len() <= 22 {
            let mut b = [0u8; 22];
            b[..k.len()].copy_from_slice(k);
            Key::Inline(b, k.len() as u8)
        } else {
            Key::Heap(k.into())
        }
    }
    /// The heap bytes a key longer than 22 bytes holds.
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Key::Inline(..) => 0,
            Key::Heap(b) => crate::alloc::chunk(b.len()),
        }
    }
    pub(super) fn bytes(&self) -> &[u8] {
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

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// By bytes, as Redis orders members of equal score.
impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}
