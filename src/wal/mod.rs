//! The write-ahead log: format, reading with recovery, appending.
//!
//! `format` is the byte layout, `reader` walks a directory and applies the recovery table,
//! `writer` appends. The log frames payloads it does not read: what a kind byte and its payload
//! mean is `crate::record`'s (the [`Payload`] trait is all the writer asks of a record). Its one system call
//! beyond plain file I/O, the map in `mmap`, goes through `crate::sys`.

pub mod format;
pub mod mmap;
pub mod reader;
pub mod writer;

use crate::point::Point;
use reader::{Action, Damage};
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

pub use writer::WalWriter;

/// How far the log has come, shared with those who wait on it: the HTTP side (the sync token),
/// the flusher (which syncs), and delivery attempts (which wait until their message's record is
/// durable).
#[derive(Default)]
pub struct Progress {
    /// Sequence number of the last record written.
    pub last_seq: AtomicU64,
    /// Sequence number of the last record known to be on disk.
    pub durable_seq: AtomicU64,
    /// Successful syncs of the log (group commit: many records per sync).
    pub syncs: AtomicU64,
    /// Set once when a sync failed; the log takes no more writes after that.
    pub fsync_failed: OnceLock<String>,
    /// Woken after every successful sync.
    pub synced: tokio::sync::Notify,
    /// How long each sync took (`GET /metrics`).
    pub sync_seconds: crate::metrics::Seconds,
    /// Held across each sync of the log, by whichever thread makes it (the flusher, or the
    /// runtime's in `ParkSync`): the kernel reports a write-back error to one `fdatasync` of the
    /// file only, so a sync must start after the last one's failure is known.
    pub sync_lock: std::sync::Mutex<()>,
    /// How long the last sync took, in microseconds.
    pub last_sync_us: AtomicU64,
    /// When a sync last took `PARK_SYNC_STALL_US` or more (Unix milliseconds; 0: never).
    pub stalled_at_ms: AtomicU64,
}

impl Progress {
    /// Returns once record `seq` is on disk, or once the log failed (nothing will be synced
    /// again, and waiting would hang).
    pub async fn wait_durable(&self, seq: u64) {
        loop {
            let notified = self.synced.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.durable_seq.load(Ordering::SeqCst) >= seq || self.fsync_failed.get().is_some() {
                return;
            }
            // A bounded wait, so a missed wake-up costs a moment and never a hang.
            let recheck = Duration::from_millis(crate::config::DURABLE_WAIT_RECHECK_MS);
            let _ = tokio::time::timeout(recheck, notified).await;
        }
    }
}

/// What the writer frames: a kind byte and the payload bytes.
pub trait Payload {
    fn kind(&self) -> u8;
    fn encode_payload(&self, out: &mut Vec<u8>);
}

/// What recovery did, for the start-up message.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub records: u64,
    pub segments: usize,
    pub last_seq: u64,
    /// A torn tail that was cut off, with a message naming file and offset.
    pub cut_tail: Option<String>,
    /// The snapshot replay started from (the record it ends at), if any.
    pub snapshot: Option<u64>,
}

/// Where replay starts: after the record a snapshot ends at (sequence and timestamp), or at
/// the beginning of the log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Base {
    pub seq: u64,
    pub timestamp_unix_ms: u64,
}

/// Replays the log in `dir` after `base` through `apply` (segment, offset, frame)
/// and returns a writer positioned after the last good record. A torn tail is cut; any other
/// damage is an error whose text names the file, the offset and the way to repair.
pub fn recover<F>(
    dir: &Path,
    segment_bytes_max: u64,
    base: Base,
    mut apply: F,
) -> Result<(WalWriter, RecoveryReport), String>
where
    F: FnMut(&Path, u64, &format::Frame<'_>) -> Result<(), String>,
{
    let summary = reader::scan_from(dir, reader::ReadMode::Mapped, base.seq + 1, &mut apply)
        .map_err(|e| {
            format!(
                "the log cannot be replayed: {e}. Run `tidepool-log verify {}` to see the damage.",
                dir.display()
            )
        })?;
    let mut report = RecoveryReport {
        records: summary.records,
        segments: summary.segments,
        last_seq: summary.last_seq.unwrap_or(0),
        cut_tail: None,
        snapshot: None,
    };
    if let Some(damage) = &summary.damage {
        match damage.action {
            Action::Refuse => return Err(refusal(dir, damage)),
            Action::CutTail => {
                cut_tail(damage)
                    .map_err(|e| format!("cutting the torn tail of {damage} failed: {e}"))?;
                report.cut_tail = Some(format!(
                    "cut a torn record off the log tail: {damage}; {} bytes dropped",
                    damage.file_len - damage.offset
                ));
            }
        }
    }
    // Segments whose header was torn were removed by cut_tail; list again.
    let segments = reader::list_segments(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // After a cut the valid end is the cut offset; a removed torn segment leaves the previous
    // one newest, whose end the scan recorded only if it was last: scan again in that case.
    let end = match &summary.damage {
        Some(d) if d.offset >= format::SEGMENT_HEADER_BYTES as u64 => d.offset,
        Some(_) => reader::scan(dir, |_, _, _| Ok(()))
            .map(|s| s.end_offset)
            .unwrap_or(0),
        None => summary.end_offset,
    };
    let mut newest = segments.last().map(|s| (s.path.as_path(), end));
    if report.last_seq < base.seq {
        // The snapshot holds records the log does not (they were in its buffer when the
        // snapshot was taken, and a crash lost them from the log): numbering goes on after the
        // snapshot, in a segment of its own, since a segment may hold no gap.
        report.last_seq = base.seq;
        // A segment that starts right after the snapshot (the one the snapshot rolled to, with
        // nothing in it yet) is where numbering goes on.
        if segments.last().is_none_or(|s| s.first_seq != base.seq + 1) {
            newest = None;
        }
    }
    let next_seq = report.last_seq + 1;
    let last_ts = summary
        .last_timestamp_unix_ms
        .unwrap_or(0)
        .max(base.timestamp_unix_ms);
    let writer = WalWriter::open(dir, newest, next_seq, last_ts, segment_bytes_max)
        .map_err(|e| format!("cannot open the log in {} for writing: {e}", dir.display()))?;
    Ok((writer, report))
}

/// Replays the log in `dir` up to `point` (the last record at or before it) through `apply`,
/// and returns a writer that refuses every write with `why`: the log is read as it is, never
/// cut, never written. Damage before the point is refused as at start-up; a torn tail after it
/// is left alone.
pub fn replay_to<F>(
    dir: &Path,
    point: Point,
    base: Base,
    why: String,
    mut apply: F,
) -> Result<(WalWriter, RecoveryReport), String>
where
    F: FnMut(&Path, u64, &format::Frame<'_>) -> Result<(), String>,
{
    let mut last: Option<(u64, u64)> = (base.seq > 0).then_some((base.seq, base.timestamp_unix_ms));
    let mut records = 0;
    let summary = reader::scan_from(
        dir,
        reader::ReadMode::Mapped,
        base.seq + 1,
        |path, offset, frame| {
            if !point.at_or_before(frame.seq, frame.timestamp_unix_ms) {
                return Ok(());
            }
            records += 1;
            last = Some((frame.seq, frame.timestamp_unix_ms));
            apply(path, offset, frame)
        },
    )
    .map_err(|e| format!("the log cannot be replayed: {e}"))?;
    if let Some(damage) = &summary.damage {
        if damage.action == Action::Refuse {
            return Err(refusal(dir, damage));
        }
    }
    let Some((last_seq, last_ts)) = last else {
        return Err(format!(
            "the log in {} holds no record at or before {point}",
            dir.display()
        ));
    };
    let report = RecoveryReport {
        records,
        segments: summary.segments,
        last_seq,
        cut_tail: None,
        snapshot: None,
    };
    let writer = WalWriter::read_only(dir, last_seq + 1, last_ts, why)
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    Ok((writer, report))
}

/// The refusal message: where, what, and how to repair.
pub fn refusal(dir: &Path, damage: &Damage) -> String {
    format!(
        "the log is damaged: {damage}. This is not a torn write at the end of the log, so tidepool \
         will not guess. Inspect it with `tidepool-log verify {dir}`; `tidepool-log repair {dir}` \
         can cut the log at that offset, dropping every record after it (back up the directory first).",
        dir = dir.display()
    )
}

/// Cuts a segment at the damaged offset; a segment left without a whole header is removed.
pub fn cut_tail(damage: &Damage) -> std::io::Result<()> {
    if damage.offset < format::SEGMENT_HEADER_BYTES as u64 {
        std::fs::remove_file(&damage.path)?;
    } else {
        let f = OpenOptions::new().write(true).open(&damage.path)?;
        f.set_len(damage.offset)?;
        f.sync_all()?;
    }
    if let Some(parent) = damage.path.parent() {
        writer::sync_dir(parent)?;
    }
    Ok(())
}
