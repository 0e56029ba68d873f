//! Reading a log directory: every segment in order, every frame checked, and the recovery
//! decision table applied. Reading never modifies a file; the caller decides what to do with a
//! torn tail (the server cuts it with a warning, `tidepool-log repair` asks first).

use super::format::{self, Frame, FrameDamage, FrameRead, SegmentHeader, SEGMENT_HEADER_BYTES};
use super::mmap::MappedFile;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// A segment file found in the log directory.
#[derive(Debug, Clone)]
pub struct SegmentFile {
    pub path: PathBuf,
    pub first_seq: u64,
}

/// Lists `*.wal` segments in `dir`, ordered by their first sequence number.
pub fn list_segments(dir: &Path) -> io::Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(first_seq) = name.to_str().and_then(format::parse_segment_file_name) {
            out.push(SegmentFile {
                path: entry.path(),
                first_seq,
            });
        }
    }
    out.sort_by_key(|s| s.first_seq);
    Ok(out)
}

/// The creation time in a segment's header (when the segment before it was closed).
pub fn segment_created_ms(path: &Path) -> io::Result<u64> {
    use std::io::Read;
    let mut b = [0u8; SEGMENT_HEADER_BYTES];
    File::open(path)?.read_exact(&mut b)?;
    SegmentHeader::decode(&b)
        .map(|h| h.created_unix_ms)
        .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

/// What the scan found wrong at one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The segment header is missing or damaged.
    Header(String),
    /// The bytes at this offset are not a whole, intact frame.
    Frame(FrameDamage),
    /// The frame's sequence number does not follow the previous one.
    SequenceGap { expected: u64, found: u64 },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Header(e) => write!(f, "{e}"),
            Finding::Frame(d) => write!(f, "{d}"),
            Finding::SequenceGap { expected, found } => {
                write!(f, "sequence number {found} where {expected} was expected")
            }
        }
    }
}

/// The recovery decision for one finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A torn write at the very end of the log: cut the file at the offset and go on.
    CutTail,
    /// Damage anywhere else: refuse to start and say where.
    Refuse,
}

/// The recovery table of `log-format.md`, as code. `in_newest` says whether the finding is in the
/// newest segment; `nothing_after` whether nothing that was written can follow the damaged
/// frame (see [`torn_tail`]): only then may a tail be cut.
pub fn decide(finding: &Finding, in_newest: bool, nothing_after: bool) -> Action {
    match (finding, in_newest, nothing_after) {
        (_, false, _) => Action::Refuse,
        (Finding::SequenceGap { .. }, _, _) => Action::Refuse,
        // A torn length (only zeros after it, nothing valid later: `torn_tail`) is the end of a
        // write the crash cut short; any other impossible length is damage.
        (Finding::Frame(FrameDamage::TooLarge { .. }), true, true) => Action::CutTail,
        (Finding::Frame(FrameDamage::TooLarge { .. }), _, _) => Action::Refuse,
        (Finding::Frame(FrameDamage::Incomplete { .. }), true, true) => Action::CutTail,
        (Finding::Header(_), true, true) => Action::CutTail,
        (Finding::Frame(FrameDamage::BadCrc { .. }), true, true) => Action::CutTail,
        (_, true, false) => Action::Refuse,
    }
}

/// Whether damage at `offset` of a segment can only be a torn write at the end of the log,
/// so that cutting the segment there loses nothing that was ever acknowledged. A torn write
/// leaves a prefix of what was written, then the preallocated zeros; so the tail is torn
/// only when all of these hold:
/// - no whole, valid frame with a later sequence number starts anywhere after `offset`
///   (a damaged length would otherwise hide the records behind it);
/// - for a frame that fits in the file: every byte after its declared end is zero, and no
///   other length makes its checksum match (which would mean a damaged length on a whole
///   record, not a torn one).
///
/// A whole last frame with a bad checksum and zeros after it still counts as torn: a disk
/// that reorders sector writes can leave exactly that, and it was never acknowledged if the
/// sync did not finish.
pub fn torn_tail(data: &[u8], offset: usize, finding: &Finding, expected_seq: u64) -> bool {
    if later_frame(data, offset, expected_seq) {
        return false;
    }
    match finding {
        Finding::Frame(FrameDamage::Incomplete { .. }) => true,
        // An impossible length with nothing but zeros after the length field: the first bytes
        // of a frame whose write was cut short, over the preallocated zeros.
        Finding::Frame(FrameDamage::TooLarge { .. }) => data
            .get(offset + 4..)
            .is_none_or(|r| r.iter().all(|&b| b == 0)),
        Finding::Frame(FrameDamage::BadCrc { frame_len, .. }) => {
            let end = offset + frame_len;
            data.get(end..).is_none_or(|r| r.iter().all(|&b| b == 0))
                && !other_length_matches(data, offset, *frame_len)
        }
        _ => false,
    }
}

/// Looks for a whole frame with a valid CRC and a sequence number after `expected_seq` at any
/// byte position after `offset`. Cheap per position: the CRC is computed only where the
/// sequence number is in the range that frames could have there.
fn later_frame(data: &[u8], offset: usize, expected_seq: u64) -> bool {
    let h = format::FRAME_HEADER_BYTES;
    let end = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let most_frames = (end.saturating_sub(offset) / h) as u64;
    let mut p = offset + 1;
    while p + h <= end {
        let seq = u64::from_le_bytes(data[p + 8..p + 16].try_into().unwrap_or([0; 8]));
        if seq > expected_seq && seq - expected_seq <= most_frames {
            if let FrameRead::Frame(f) = format::read_frame(data, p) {
                if f.seq == seq {
                    return true;
                }
            }
        }
        p += 1;
    }
    false
}

/// Whether the frame at `offset` has a valid CRC under a length other than its declared one
/// (a payload that ends where the written bytes end, allowing a few trailing zero bytes).
fn other_length_matches(data: &[u8], offset: usize, frame_len: usize) -> bool {
    const TRAILING_ZEROS_TRIED: usize = 64;
    let h = format::FRAME_HEADER_BYTES;
    let rest = &data[offset..];
    let stored = u32::from_le_bytes(rest[4..8].try_into().unwrap_or([0; 4]));
    let written = rest.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let mut len = written.max(h);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&rest[8..len]);
    while len <= rest.len() && len <= written.max(h) + TRAILING_ZEROS_TRIED {
        if len != frame_len && crc.clone().finalize() == stored {
            return true;
        }
        if let Some(&b) = rest.get(len) {
            crc.update(&[b]);
        }
        len += 1;
    }
    false
}

/// A place in the log where the scan stopped.
#[derive(Debug, Clone)]
pub struct Damage {
    pub path: PathBuf,
    pub offset: u64,
    pub file_len: u64,
    pub finding: Finding,
    pub action: Action,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at offset {}: {}",
            self.path.display(),
            self.offset,
            self.finding
        )
    }
}

/// Result of scanning a whole directory.
#[derive(Debug, Default)]
pub struct ScanSummary {
    pub segments: usize,
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    pub last_timestamp_unix_ms: Option<u64>,
    pub bytes: u64,
    /// Where the scan stopped early, if it did. With `Action::CutTail` everything before it was
    /// delivered to the callback; with `Action::Refuse` the log must not be used as it is.
    pub damage: Option<Damage>,
    /// Where the last segment's valid records end (its append position).
    pub end_offset: u64,
}

/// Errors that stop a scan before any decision can be made.
#[derive(Debug)]
pub enum ScanError {
    Io {
        path: PathBuf,
        error: io::Error,
    },
    /// The callback refused a frame (for example its payload did not decode).
    Callback {
        path: PathBuf,
        offset: u64,
        message: String,
    },
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            ScanError::Callback {
                path,
                offset,
                message,
            } => {
                write!(f, "{} at offset {offset}: {message}", path.display())
            }
        }
    }
}

/// How a scan reads a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Through a memory map: for a log no process writes meanwhile (the server at start-up,
    /// the log tool on a stopped server's directory).
    Mapped,
    /// Copied into memory with ordinary reads, so that a running server may go on writing.
    /// What a copy catches of a record still being written reads as a torn tail.
    Copied,
}

/// Walks every frame of every segment in order, calling `on_frame(path, offset, frame)`.
/// Stops at the first damage and reports it with its decided action.
pub fn scan<F>(dir: &Path, on_frame: F) -> Result<ScanSummary, ScanError>
where
    F: FnMut(&Path, u64, &Frame<'_>) -> Result<(), String>,
{
    scan_with(dir, ReadMode::Mapped, on_frame)
}

/// [`scan`], reading the segments as `mode` says.
pub fn scan_with<F>(dir: &Path, mode: ReadMode, on_frame: F) -> Result<ScanSummary, ScanError>
where
    F: FnMut(&Path, u64, &Frame<'_>) -> Result<(), String>,
{
    scan_from(dir, mode, 0, on_frame)
}

/// [`scan_with`] for the records from `from_seq` on (those a snapshot does not hold): segments
/// that end before it are not read, and earlier records of the first segment read are checked
/// but not handed to `on_frame` (nor counted).
pub fn scan_from<F>(
    dir: &Path,
    mode: ReadMode,
    from_seq: u64,
    mut on_frame: F,
) -> Result<ScanSummary, ScanError>
where
    F: FnMut(&Path, u64, &Frame<'_>) -> Result<(), String>,
{
    let mut segments = list_segments(dir).map_err(|error| ScanError::Io {
        path: dir.to_path_buf(),
        error,
    })?;
    let before = segments
        .windows(2)
        .take_while(|w| w[1].first_seq <= from_seq)
        .count();
    segments.drain(..before);
    let mut summary = ScanSummary {
        segments: segments.len(),
        ..Default::default()
    };
    let mut expected_seq: Option<u64> = None;
    for (i, seg) in segments.iter().enumerate() {
        let in_newest = i + 1 == segments.len();
        let io_err = |error| ScanError::Io {
            path: seg.path.clone(),
            error,
        };
        let (map, copy) = match mode {
            ReadMode::Mapped => {
                let file = File::open(&seg.path).map_err(io_err)?;
                (Some(MappedFile::open(&file).map_err(io_err)?), Vec::new())
            }
            ReadMode::Copied => (None, std::fs::read(&seg.path).map_err(io_err)?),
        };
        let data = map.as_ref().map_or(copy.as_slice(), |m| m.bytes());
        summary.bytes += data.len() as u64;
        let damage = |offset: usize, finding: Finding, nothing_after: bool| Damage {
            path: seg.path.clone(),
            offset: offset as u64,
            file_len: data.len() as u64,
            action: decide(&finding, in_newest, nothing_after),
            finding,
        };
        let header = match SegmentHeader::decode(data) {
            Ok(h) => h,
            Err(e) => {
                let nothing_after = data.len() <= SEGMENT_HEADER_BYTES;
                summary.damage = Some(damage(0, Finding::Header(e.to_string()), nothing_after));
                return Ok(summary);
            }
        };
        if header.first_seq != seg.first_seq {
            let finding = Finding::Header(format!(
                "header says first sequence {}, file name says {}",
                header.first_seq, seg.first_seq
            ));
            summary.damage = Some(damage(0, finding, false));
            return Ok(summary);
        }
        if let Some(exp) = expected_seq {
            if header.first_seq != exp {
                let finding = Finding::SequenceGap {
                    expected: exp,
                    found: header.first_seq,
                };
                summary.damage = Some(damage(0, finding, false));
                return Ok(summary);
            }
        }
        expected_seq = Some(header.first_seq);
        let mut offset = SEGMENT_HEADER_BYTES;
        loop {
            // Segments are preallocated with zeros: an all-zero remainder is the end of the log.
            let at = offset.min(data.len());
            let zero_header = data[at..]
                .iter()
                .take(format::FRAME_HEADER_BYTES)
                .all(|&b| b == 0);
            if zero_header && data[at..].iter().all(|&b| b == 0) {
                summary.end_offset = offset as u64;
                break;
            }
            let finding = match format::read_frame(data, offset) {
                FrameRead::End => {
                    summary.end_offset = offset as u64;
                    break;
                }
                FrameRead::Frame(frame) => {
                    let exp = expected_seq.unwrap_or(frame.seq);
                    if frame.seq != exp {
                        let finding = Finding::SequenceGap {
                            expected: exp,
                            found: frame.seq,
                        };
                        summary.damage = Some(damage(offset, finding, false));
                        return Ok(summary);
                    }
                    if frame.seq >= from_seq {
                        on_frame(&seg.path, offset as u64, &frame).map_err(|message| {
                            ScanError::Callback {
                                path: seg.path.clone(),
                                offset: offset as u64,
                                message,
                            }
                        })?;
                        summary.records += 1;
                        summary.first_seq.get_or_insert(frame.seq);
                    }
                    summary.last_seq = Some(frame.seq);
                    summary.last_timestamp_unix_ms = Some(frame.timestamp_unix_ms);
                    expected_seq = Some(frame.seq + 1);
                    offset += frame.encoded_len();
                    continue;
                }
                FrameRead::Damaged(d) => Finding::Frame(d),
            };
            let expected = expected_seq.unwrap_or(header.first_seq);
            let nothing_after = torn_tail(data, offset, &finding, expected);
            summary.damage = Some(damage(offset, finding, nothing_after));
            return Ok(summary);
        }
    }
    Ok(summary)
}
