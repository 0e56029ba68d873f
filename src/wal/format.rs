//! The on-disk format, byte by byte. `log-format.md` is the prose version of this file and
//! `tests/it/log_format_golden.rs` holds the two together: change one and the test fails until the
//! other follows.
//!
//! All integers are little-endian.

/// Magic at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"TIDEPOOL";
/// Format version written into every segment header.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// Size of the fixed part of a record frame (before the payload).
pub const FRAME_HEADER_BYTES: usize = 25;
/// A frame that declares a larger payload is corrupt, not merely long.
pub const RECORD_PAYLOAD_BYTES_MAX: u32 = 1 << 30;

// Format: { magic[8] | version u16 | header_len u16 | first_seq u64 | created_unix_ms u64 | crc32 u32 }
/// The 32-byte header at offset 0 of every segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Sequence number of the first record in this segment.
    pub first_seq: u64,
    /// Wall-clock time the segment was created, Unix milliseconds.
    pub created_unix_ms: u64,
}

/// Why a segment header was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    Short { len: usize },
    BadMagic,
    UnsupportedVersion(u16),
    BadLength(u16),
    BadCrc { stored: u32, computed: u32 },
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Short { len } => write!(f, "segment header is {len} bytes, expected 32"),
            HeaderError::BadMagic => write!(f, "segment does not start with the magic TIDEPOOL"),
            HeaderError::UnsupportedVersion(v) => write!(f, "unsupported format version {v}"),
            HeaderError::BadLength(l) => {
                write!(f, "segment header declares length {l}, expected 32")
            }
            HeaderError::BadCrc { stored, computed } => write!(
                f,
                "segment header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
        }
    }
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut b = [0u8; SEGMENT_HEADER_BYTES];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&(SEGMENT_HEADER_BYTES as u16).to_le_bytes());
        b[12..20].copy_from_slice(&self.first_seq.to_le_bytes());
        b[20..28].copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = crc32fast::hash(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if b.len() < SEGMENT_HEADER_BYTES {
            return Err(HeaderError::Short { len: b.len() });
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err(HeaderError::BadMagic);
        }
        let stored = read_u32(&b[28..32]);
        let computed = crc32fast::hash(&b[0..28]);
        if stored != computed {
            return Err(HeaderError::BadCrc { stored, computed });
        }
        let version = read_u16(&b[8..10]);
        if version != FORMAT_VERSION {
            return Err(HeaderError::UnsupportedVersion(version));
        }
        let len = read_u16(&b[10..12]);
        if len as usize != SEGMENT_HEADER_BYTES {
            return Err(HeaderError::BadLength(len));
        }
        Ok(SegmentHeader {
            first_seq: read_u64(&b[12..20]),
            created_unix_ms: read_u64(&b[20..28]),
        })
    }
}

// Format: { payload_len u32 | crc32 u32 | seq u64 | timestamp_unix_ms u64 | kind u8 | payload[payload_len] }
// The CRC covers every byte after itself: seq, timestamp, kind and payload.
/// One decoded record frame, borrowing its payload from the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub seq: u64,
    pub timestamp_unix_ms: u64,
    pub kind: u8,
    pub payload: &'a [u8],
}

impl Frame<'_> {
    /// Bytes this frame occupies on disk.
    pub fn encoded_len(&self) -> usize {
        FRAME_HEADER_BYTES + self.payload.len()
    }
}

/// Appends one encoded frame to `out`.
pub fn encode_frame(out: &mut Vec<u8>, seq: u64, timestamp_unix_ms: u64, kind: u8, payload: &[u8]) {
    debug_assert!(payload.len() <= RECORD_PAYLOAD_BYTES_MAX as usize);
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&timestamp_unix_ms.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What lies at an offset of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameRead<'a> {
    /// A whole frame whose CRC matches.
    Frame(Frame<'a>),
    /// Exactly at the end of the data: nothing more to read.
    End,
    /// Something that is not a whole, intact frame.
    Damaged(FrameDamage),
}

/// How the bytes at an offset fail to be a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameDamage {
    /// Fewer bytes remain than the frame needs (header or declared payload).
    Incomplete { available: usize, needed: usize },
    /// The declared length is beyond any record this format allows.
    TooLarge { declared: u32 },
    /// A complete frame whose stored CRC does not match its bytes.
    BadCrc {
        stored: u32,
        computed: u32,
        frame_len: usize,
    },
}

impl std::fmt::Display for FrameDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameDamage::Incomplete { available, needed } => {
                write!(
                    f,
                    "partial record: {available} bytes left, frame needs {needed}"
                )
            }
            FrameDamage::TooLarge { declared } => {
                write!(f, "record declares an impossible length {declared}")
            }
            FrameDamage::BadCrc {
                stored, computed, ..
            } => {
                write!(
                    f,
                    "CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
                )
            }
        }
    }
}

/// Reads the frame at `offset` of `data` (a whole segment, header included).
pub fn read_frame(data: &[u8], offset: usize) -> FrameRead<'_> {
    let rest = data.get(offset..).unwrap_or(&[]);
    if rest.is_empty() {
        return FrameRead::End;
    }
    if rest.len() < FRAME_HEADER_BYTES {
        return FrameRead::Damaged(FrameDamage::Incomplete {
            available: rest.len(),
            needed: FRAME_HEADER_BYTES,
        });
    }
    let len = read_u32(&rest[0..4]);
    if len > RECORD_PAYLOAD_BYTES_MAX {
        return FrameRead::Damaged(FrameDamage::TooLarge { declared: len });
    }
    let frame_len = FRAME_HEADER_BYTES + len as usize;
    if rest.len() < frame_len {
        return FrameRead::Damaged(FrameDamage::Incomplete {
            available: rest.len(),
            needed: frame_len,
        });
    }
    let stored = read_u32(&rest[4..8]);
    let computed = crc32fast::hash(&rest[8..frame_len]);
    if stored != computed {
        return FrameRead::Damaged(FrameDamage::BadCrc {
            stored,
            computed,
            frame_len,
        });
    }
    FrameRead::Frame(Frame {
        seq: read_u64(&rest[8..16]),
        timestamp_unix_ms: read_u64(&rest[16..24]),
        kind: rest[24],
        payload: &rest[FRAME_HEADER_BYTES..frame_len],
    })
}

/// The file name of the segment whose first record has `first_seq`.
pub fn segment_file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.wal")
}

/// Parses a segment file name back to its first sequence number.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn read_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}
fn read_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}
fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[0..8]);
    u64::from_le_bytes(a)
}
