//! The snapshot file's layout, byte by byte: header, chunks, and the integer and string
//! encodings inside key-value chunks. `log-format.md` ("Snapshots") is the prose version and
//! `tests/it/log_format_golden.rs` holds the two together.
//!
//! All fixed-width integers are little-endian.

/// Magic at the start of every snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"TIDESNAP";
/// Format version written into every snapshot header. Version 2 added the catalog and
/// database chunks (many databases); a version 1 file, which has neither, still reads as the
/// default database alone.
pub const SNAPSHOT_VERSION: u16 = 2;
/// The oldest version read.
pub const SNAPSHOT_VERSION_MIN: u16 = 1;
/// Size of the snapshot header.
pub const SNAPSHOT_HEADER_BYTES: usize = 40;
/// Size of a chunk's fixed part (length, CRC, kind).
pub const CHUNK_HEADER_BYTES: usize = 9;
/// A chunk that declares a larger payload is corrupt, not merely long.
pub const CHUNK_PAYLOAD_BYTES_MAX: u32 = 1 << 30;

/// Chunk kinds.
pub const CHUNK_KEYS: u8 = 1;
pub const CHUNK_FUNCTIONS: u8 = 2;
pub const CHUNK_ACL: u8 = 3;
pub const CHUNK_DELIVERY: u8 = 4;
/// The catalog of databases and their usage counts (MessagePack), after the default
/// database's chunks.
pub const CHUNK_CATALOG: u8 = 5;
/// The beginning of another database: the ACL, functions and keys chunks after it are its.
pub const CHUNK_DATABASE: u8 = 6;
pub const CHUNK_END: u8 = 255;

/// Human name of a chunk kind (for the inspection tool and error texts).
pub fn chunk_name(kind: u8) -> &'static str {
    match kind {
        CHUNK_KEYS => "keys",
        CHUNK_FUNCTIONS => "functions",
        CHUNK_ACL => "acl",
        CHUNK_DELIVERY => "delivery",
        CHUNK_CATALOG => "catalog",
        CHUNK_DATABASE => "database",
        CHUNK_END => "end",
        _ => "unknown",
    }
}

/// The 40-byte header at offset 0 of every snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Sequence number of the last log record the snapshot includes (0: none).
    pub seq: u64,
    /// That record's timestamp, Unix milliseconds (0 when `seq` is 0).
    pub record_unix_ms: u64,
    /// Wall-clock time the snapshot was taken, Unix milliseconds.
    pub created_unix_ms: u64,
}

impl SnapshotHeader {
    pub fn encode(&self) -> [u8; SNAPSHOT_HEADER_BYTES] {
        let mut b = [0u8; SNAPSHOT_HEADER_BYTES];
        b[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
        b[8..10].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&(SNAPSHOT_HEADER_BYTES as u16).to_le_bytes());
        b[12..20].copy_from_slice(&self.seq.to_le_bytes());
        b[20..28].copy_from_slice(&self.record_unix_ms.to_le_bytes());
        b[28..36].copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = crc32fast::hash(&b[0..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<SnapshotHeader, String> {
        if b.len() < SNAPSHOT_HEADER_BYTES {
            return Err(format!(
                "snapshot header is {} bytes, expected {SNAPSHOT_HEADER_BYTES}",
                b.len()
            ));
        }
        if b[0..8] != SNAPSHOT_MAGIC {
            return Err("the file does not start with the magic TIDESNAP".into());
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if !(SNAPSHOT_VERSION_MIN..=SNAPSHOT_VERSION).contains(&version) {
            return Err(format!("unsupported snapshot version {version}"));
        }
        let len = u16::from_le_bytes([b[10], b[11]]);
        if len as usize != SNAPSHOT_HEADER_BYTES {
            return Err(format!(
                "snapshot header declares length {len}, expected {SNAPSHOT_HEADER_BYTES}"
            ));
        }
        let stored = u32::from_le_bytes([b[36], b[37], b[38], b[39]]);
        let computed = crc32fast::hash(&b[0..36]);
        if stored != computed {
            return Err(format!(
                "snapshot header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        Ok(SnapshotHeader {
            seq: u64_at(b, 12),
            record_unix_ms: u64_at(b, 20),
            created_unix_ms: u64_at(b, 28),
        })
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Appends one chunk: payload length, CRC32 of kind and payload, kind, payload.
pub fn encode_chunk(out: &mut Vec<u8>, kind: u8, payload: &[u8]) {
    let mut h = crc32fast::Hasher::new();
    h.update(&[kind]);
    h.update(payload);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
}

/// One chunk read from a file.
#[derive(Debug)]
pub struct Chunk<'a> {
    pub kind: u8,
    pub payload: &'a [u8],
}

/// Reads the chunk at `offset`; the error says what is wrong with it.
pub fn read_chunk(data: &[u8], offset: usize) -> Result<Chunk<'_>, String> {
    let rest = data.len().saturating_sub(offset);
    if rest < CHUNK_HEADER_BYTES {
        return Err(format!(
            "{rest} bytes left where a chunk header ({CHUNK_HEADER_BYTES} bytes) was expected: the file is cut short"
        ));
    }
    let d = &data[offset..];
    let len = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
    if len > CHUNK_PAYLOAD_BYTES_MAX {
        return Err(format!("chunk declares {len} bytes, more than 2^30"));
    }
    let len = len as usize;
    if rest - CHUNK_HEADER_BYTES < len {
        return Err(format!(
            "chunk declares {len} bytes but only {} follow: the file is cut short",
            rest - CHUNK_HEADER_BYTES
        ));
    }
    let stored = u32::from_le_bytes([d[4], d[5], d[6], d[7]]);
    let computed = crc32fast::hash(&d[8..CHUNK_HEADER_BYTES + len]);
    if stored != computed {
        return Err(format!(
            "chunk CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    Ok(Chunk {
        kind: d[8],
        payload: &d[CHUNK_HEADER_BYTES..CHUNK_HEADER_BYTES + len],
    })
}

/// The name of the snapshot that ends at record `seq`: 20 decimal digits and `.snap`.
pub fn snapshot_file_name(seq: u64) -> String {
    format!("{seq:020}.snap")
}

pub fn parse_snapshot_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".snap")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

// ---- the encodings inside key-value chunks ----

/// Unsigned LEB128 (`crate::leb128`).
pub fn put_uint(out: &mut Vec<u8>, v: u64) {
    crate::leb128::put(out, v);
}

/// A byte string: its length as a `uint`, then the bytes.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}

/// A bounds-checked reader over one chunk's payload; every read fails cleanly past the end.
#[derive(Clone)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Cursor<'a> {
        Cursor { data, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn short(&self, what: &str) -> String {
        format!("payload ends inside {what} at byte {}", self.pos)
    }

    pub fn u8(&mut self) -> Result<u8, String> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or_else(|| self.short("a byte"))?;
        self.pos += 1;
        Ok(b)
    }

    pub fn uint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("a uint longer than 10 bytes at byte {}", self.pos))
    }

    /// A count of items that each take at least one byte: never more than the bytes left, so a
    /// damaged count cannot make the reader reserve memory the payload does not hold.
    pub fn count(&mut self) -> Result<usize, String> {
        let n = self.uint()?;
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(format!(
                "a count of {n} with {left} bytes left at byte {}",
                self.pos
            ));
        }
        Ok(n as usize)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.uint()?;
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(format!(
                "a string of {n} bytes with {left} bytes left at byte {}",
                self.pos
            ));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    pub fn u64(&mut self) -> Result<u64, String> {
        if self.data.len() - self.pos < 8 {
            return Err(self.short("a 64-bit integer"));
        }
        let v = u64_at(self.data, self.pos);
        self.pos += 8;
        Ok(v)
    }

    pub fn f64(&mut self) -> Result<f64, String> {
        self.u64().map(f64::from_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uints_round_trip_at_every_width() {
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut b = Vec::new();
            put_uint(&mut b, v);
            assert_eq!(Cursor::new(&b).uint(), Ok(v));
        }
        let mut b = Vec::new();
        put_uint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
    }

    #[test]
    fn a_damaged_count_is_refused_not_trusted() {
        let mut b = Vec::new();
        put_uint(&mut b, u64::MAX);
        assert!(Cursor::new(&b).count().is_err());
        assert!(Cursor::new(&b).bytes().is_err());
        assert!(Cursor::new(&[0xff; 11]).uint().is_err());
    }

    #[test]
    fn file_names_round_trip() {
        assert_eq!(snapshot_file_name(42), "00000000000000000042.snap");
        assert_eq!(
            parse_snapshot_file_name("00000000000000000042.snap"),
            Some(42)
        );
        assert_eq!(parse_snapshot_file_name("42.snap"), None);
        assert_eq!(
            parse_snapshot_file_name("00000000000000000042.snap.tmp"),
            None
        );
    }
}
