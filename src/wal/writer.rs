//! Appending records: a buffer filled by the executor, written out once per batch, segments
//! rotated at a size limit, and a poison flag once any write or sync has failed.

use super::format::{self, SegmentHeader};
use super::Payload;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Zeroed space kept ahead of the write position. Overwriting blocks that already exist lets
/// `fdatasync` skip the metadata (size and extent) journal commit that an append needs:
/// measured here 0.10 ms instead of 0.17 ms per sync.
const ZEROED_AHEAD_BYTES: u64 = 1 << 20;

pub struct WalWriter {
    dir: PathBuf,
    file: Arc<File>,
    /// Where the next record goes in the current segment (the end of its valid records).
    segment_bytes: u64,
    /// Bytes of the current segment known to exist on disk (written records or zeros).
    zeroed_until: u64,
    segment_bytes_max: u64,
    next_seq: u64,
    last_timestamp_unix_ms: u64,
    buf: Vec<u8>,
    payload: Vec<u8>,
    /// Bytes of records written since this writer was opened (what automatic snapshots
    /// measure the log's growth by).
    written_bytes: u64,
    /// Set after the first failed write or sync. A log that failed once may have lost data the
    /// kernel claimed to hold, so it takes no more writes.
    poisoned: Option<String>,
    /// A new segment could not be created when the current one was full (said once).
    rotate_failed_said: bool,
    /// A cluster node's writer: it frames records and numbers them, and the batch's frames
    /// go to the cluster's log instead of a segment (`take_buffered`).
    detached: bool,
    /// The log's progress, shared with the threads that sync it: the writer's own syncs (a
    /// segment closed) take its lock, and a failure of one is known to them all.
    progress: Option<Arc<super::Progress>>,
}

impl WalWriter {
    /// Opens `segment` for appending at its end, or creates a fresh segment starting at
    /// `next_seq` when there is none.
    /// `segment` is the newest segment and the offset where its valid records end.
    pub fn open(
        dir: &Path,
        segment: Option<(&Path, u64)>,
        next_seq: u64,
        last_timestamp_unix_ms: u64,
        segment_bytes_max: u64,
    ) -> io::Result<WalWriter> {
        let (file, segment_bytes, zeroed_until) = match segment {
            Some((path, end)) => {
                let file = OpenOptions::new().write(true).open(path)?;
                let len = file.metadata()?.len();
                (file, end, len.max(end))
            }
            None => {
                let (f, len) = create_segment(dir, next_seq)?;
                (f, len, len)
            }
        };
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            file: Arc::new(file),
            segment_bytes,
            zeroed_until,
            segment_bytes_max,
            next_seq,
            last_timestamp_unix_ms,
            buf: Vec::with_capacity(1 << 16),
            payload: Vec::with_capacity(1 << 12),
            written_bytes: 0,
            poisoned: None,
            rotate_failed_said: false,
            detached: false,
            progress: None,
        })
    }

    /// A cluster node's writer (see `detached`), numbering on after `last_seq`. In place of a
    /// segment it holds the directory open read-only; nothing is written through it.
    pub fn detached(
        dir: &Path,
        last_seq: u64,
        last_timestamp_unix_ms: u64,
    ) -> io::Result<WalWriter> {
        let mut w = WalWriter::read_only(dir, last_seq + 1, last_timestamp_unix_ms, String::new())?;
        w.poisoned = None;
        w.detached = true;
        w.buf = Vec::with_capacity(1 << 16);
        w.payload = Vec::with_capacity(1 << 12);
        Ok(w)
    }

    /// A detached writer's batch: the frames buffered since the last call.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// A detached writer's numbering goes on after a record applied from the cluster.
    pub fn advance(&mut self, seq: u64, timestamp_unix_ms: u64) {
        self.next_seq = self.next_seq.max(seq + 1);
        self.last_timestamp_unix_ms = self.last_timestamp_unix_ms.max(timestamp_unix_ms);
    }

    /// A writer that takes no record: every write is refused with `why` (a server opened at a
    /// past point of its log). In place of a segment it holds the directory open read-only;
    /// nothing is ever written or synced through it, since the writer starts poisoned.
    pub fn read_only(
        dir: &Path,
        next_seq: u64,
        last_timestamp_unix_ms: u64,
        why: String,
    ) -> io::Result<WalWriter> {
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            file: Arc::new(File::open(dir)?),
            segment_bytes: 0,
            zeroed_until: 0,
            segment_bytes_max: 0,
            next_seq,
            last_timestamp_unix_ms,
            buf: Vec::new(),
            payload: Vec::new(),
            written_bytes: 0,
            poisoned: Some(why),
            rotate_failed_said: false,
            detached: false,
            progress: None,
        })
    }

    /// The sequence number of the last appended record (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// A timestamp for the next record: wall-clock milliseconds, never below the previous
    /// record's, so replay sees time move forward only.
    pub fn next_timestamp(&mut self, wall_unix_ms: u64) -> u64 {
        self.last_timestamp_unix_ms = self.last_timestamp_unix_ms.max(wall_unix_ms);
        self.last_timestamp_unix_ms
    }

    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Shares the log's progress with this writer (see `progress`).
    pub fn share_progress(&mut self, progress: Arc<super::Progress>) {
        self.progress = Some(progress);
    }

    /// Syncs the current segment before it is closed, after any other sync of the log and
    /// never after one failed: the kernel reports a write-back error to one `fdatasync` of the
    /// file only. A failure poisons the log here and for every thread that syncs it.
    fn sync_segment(&mut self, what: &str) -> io::Result<()> {
        let progress = self.progress.clone();
        let _one = progress.as_ref().map(|p| {
            p.sync_lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
        if let Some(why) = progress.as_ref().and_then(|p| p.fsync_failed.get()) {
            let why = why.clone();
            self.poison(why.clone());
            return Err(io::Error::other(why));
        }
        if let Err(e) = self.file.sync_data() {
            let why = format!("{what}: {e}");
            self.poison(why.clone());
            if let Some(p) = &progress {
                let _ = p.fsync_failed.set(why);
            }
            return Err(e);
        }
        Ok(())
    }

    pub fn poison(&mut self, why: String) {
        if self.poisoned.is_none() {
            self.poisoned = Some(why);
        }
    }

    /// Frames `record` into the buffer and returns its sequence number.
    pub fn append(&mut self, timestamp_unix_ms: u64, record: &impl Payload) -> u64 {
        self.payload.clear();
        record.encode_payload(&mut self.payload);
        let seq = self.next_seq;
        format::encode_frame(
            &mut self.buf,
            seq,
            timestamp_unix_ms,
            record.kind(),
            &self.payload,
        );
        self.next_seq += 1;
        // A large record's encoding gives its memory back: kept, it would count against
        // `--max-memory` after the data it held is gone.
        self.payload.shrink_to(crate::config::LOG_BUFFER_KEEP_BYTES);
        seq
    }

    pub fn has_buffered(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Writes the buffer to the current segment (to the OS, not yet to the disk), then rotates
    /// if the segment is full. Rotation syncs the finished segment first, so every segment but
    /// the newest is always wholly durable.
    pub fn write_buffered(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.detached {
            return Err(io::Error::other(
                "a cluster node's records go to the cluster's log, not to a segment",
            ));
        }
        if let Some(why) = &self.poisoned {
            return Err(io::Error::other(why.clone()));
        }
        let end = self.segment_bytes + self.buf.len() as u64;
        let mut result = Ok(());
        if end > self.zeroed_until {
            // Zeros first, so the sync that follows overwrites existing blocks.
            let target = end + ZEROED_AHEAD_BYTES;
            let zeros = vec![0u8; (target - self.zeroed_until) as usize];
            result = self.file.write_all_at(&zeros, self.zeroed_until);
            self.zeroed_until = target;
        }
        if result.is_ok() {
            result = self.file.write_all_at(&self.buf, self.segment_bytes);
        }
        self.segment_bytes = end;
        self.written_bytes += self.buf.len() as u64;
        self.buf.clear();
        self.buf.shrink_to(crate::config::LOG_BUFFER_KEEP_BYTES);
        if let Err(e) = result {
            self.poison(format!("write to the log failed: {e}"));
            return Err(e);
        }
        if self.segment_bytes >= self.segment_bytes_max {
            // A failed sync poisons the log. A new segment that cannot be created (a full
            // disk) does not: what was written is in the current segment, which goes on
            // taking records past its usual size while it can, and the next write tries the
            // new segment again.
            self.sync_segment("syncing the log segment before the next failed")?;
            if let Err(e) = self.rotate() {
                if !self.rotate_failed_said {
                    crate::log::line(&format!(
                        "warning: cannot start a new log segment ({e}); the current one goes on"
                    ));
                    self.rotate_failed_said = true;
                }
            } else {
                self.rotate_failed_said = false;
            }
        }
        Ok(())
    }

    /// The timestamp of the last appended record (or the floor the writer was opened with).
    pub fn last_timestamp(&self) -> u64 {
        self.last_timestamp_unix_ms
    }

    /// Bytes of records written since the writer was opened.
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes
    }

    /// Writes out what is buffered and starts a new segment at the next record, so that every
    /// record so far lies in closed, synced segments (a snapshot is taken at this position).
    /// A segment that holds no record yet already starts there and is kept.
    pub fn roll(&mut self) -> io::Result<()> {
        self.write_buffered()?;
        if self.segment_bytes <= format::SEGMENT_HEADER_BYTES as u64 {
            return Ok(());
        }
        // The current segment is synced first: a failed sync poisons the log as any does. A
        // new segment that cannot be created (a full disk) fails the roll, and the snapshot
        // that asked for it, but the current segment takes writes while it has room.
        self.sync_segment("syncing the log before a new segment failed")?;
        self.rotate()
    }

    /// Starts the next segment; the current one was synced by the caller.
    fn rotate(&mut self) -> io::Result<()> {
        crate::fault::no_space("segment-create")?;
        let (file, len) = create_segment(&self.dir, self.next_seq)?;
        self.file = Arc::new(file);
        self.segment_bytes = len;
        self.zeroed_until = len;
        Ok(())
    }

    /// The segment being appended to, for the thread that syncs it.
    pub fn current_file(&self) -> Arc<File> {
        self.file.clone()
    }
}

/// Creates a segment file with its header, synced together with the directory entry.
fn create_segment(dir: &Path, first_seq: u64) -> io::Result<(File, u64)> {
    let path = dir.join(format::segment_file_name(first_seq));
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)?;
    let header = SegmentHeader {
        first_seq,
        created_unix_ms: crate::clock::wall_unix_ms(),
    };
    let written = file
        .write_all(&header.encode())
        .and_then(|()| file.sync_all())
        .and_then(|()| sync_dir(dir));
    if let Err(e) = written {
        // A segment left half made would be taken for the newest at the next start.
        let _ = std::fs::remove_file(&path);
        let _ = sync_dir(dir);
        return Err(e);
    }
    Ok((file, format::SEGMENT_HEADER_BYTES as u64))
}

/// Makes a directory entry (a created or removed file) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rec;

    impl super::super::Payload for Rec {
        fn kind(&self) -> u8 {
            1
        }
        fn encode_payload(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(b"x");
        }
    }

    /// Guards the writer's own syncs (a segment closed) against a failure another thread's
    /// sync saw: the kernel reports a write-back error once, so a later sync of the same file
    /// may succeed over lost data. After the log failed elsewhere, closing a segment fails and
    /// poisons the writer; a failure of its own is known to the other threads.
    #[test]
    fn a_segment_is_never_closed_by_a_sync_after_the_log_failed_elsewhere() {
        let dir = std::env::temp_dir().join(format!(
            "tidepool-writer-sync-{}-{}",
            std::process::id(),
            crate::clock::wall_unix_us()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut w = WalWriter::open(&dir, None, 1, 0, 1 << 20).expect("writer");
        let progress = Arc::new(super::super::Progress::default());
        w.share_progress(progress.clone());
        w.append(1, &Rec);
        assert!(w.roll().is_ok(), "a healthy log closes its segment");
        w.append(2, &Rec);
        let _ = progress
            .fsync_failed
            .set("fdatasync failed: injected".to_string());
        assert!(w.roll().is_err());
        assert!(w.poisoned().is_some_and(|why| why.contains("injected")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
