//! The cluster's log: what Raft needs beyond a single node's log, on disk in `cluster/` of the
//! data directory (`log-format.md`, "The cluster's log", holds the bytes):
//!
//! - `raft-log`: a header, then one frame per Raft entry, each with its index, term and leader
//!   (an entry's term is what a single node's log has no need of), appended and synced before
//!   openraft is told the entry is durable; an uncommitted conflicting tail is cut with the
//!   file's length, and entries a snapshot covers are purged by rewriting the file without them;
//! - `raft-vote`: the vote, replaced whole (written, synced, renamed, the directory synced);
//! - `raft-purged`: the last purged entry's id, replaced the same way.
//!
//! A torn tail (a frame cut short or failing its CRC after a crash) is cut at the last whole
//! frame on open, as the single node's log is: it was never acknowledged to openraft.

use super::{replace_file, Batch, NodeId, TypeConfig};
use crate::config;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, StorageError,
    StorageIOError, Vote,
};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Magic at the start of `raft-log`.
pub const LOG_MAGIC: [u8; 8] = *b"TIDERAFT";
/// The cluster log's format version.
pub const LOG_VERSION: u16 = 1;
/// `raft-log`'s header: magic, version u16, header length u16, CRC32 of bytes 0..12.
pub const LOG_HEADER_BYTES: usize = 16;
/// An entry frame's fixed part: length u32, CRC32 u32, index u64, term u64, leader u64, kind u8.
pub const ENTRY_HEADER_BYTES: usize = 33;
/// `raft-vote`: term u64, node u64, committed u8, three zero bytes, CRC32 of bytes 0..20.
pub const VOTE_BYTES: usize = 24;
/// `raft-purged`: index u64, term u64, leader u64, CRC32 of bytes 0..24.
pub const PURGED_BYTES: usize = 28;
pub const NODE_ID_BYTES: usize = 12;

/// An entry's kind byte.
pub const KIND_BLANK: u8 = 0;
pub const KIND_BATCH: u8 = 1;
pub const KIND_MEMBERSHIP: u8 = 2;

pub const LOG_FILE: &str = "raft-log";
pub const VOTE_FILE: &str = "raft-vote";
pub const PURGED_FILE: &str = "raft-purged";
/// The id of the node whose files these are (see `claim_node_id`).
pub const NODE_ID_FILE: &str = "node-id";

/// The header of `raft-log`.
pub fn log_header() -> [u8; LOG_HEADER_BYTES] {
    let mut b = [0u8; LOG_HEADER_BYTES];
    b[0..8].copy_from_slice(&LOG_MAGIC);
    b[8..10].copy_from_slice(&LOG_VERSION.to_le_bytes());
    b[10..12].copy_from_slice(&(LOG_HEADER_BYTES as u16).to_le_bytes());
    let crc = crc32fast::hash(&b[0..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Appends the frame of `entry` to `out`.
pub fn encode_entry(out: &mut Vec<u8>, entry: &Entry<TypeConfig>) -> io::Result<()> {
    let (kind, payload): (u8, std::borrow::Cow<'_, [u8]>) = match &entry.payload {
        EntryPayload::Blank => (KIND_BLANK, (&[][..]).into()),
        EntryPayload::Normal(b) => (KIND_BATCH, (&b.frames[..]).into()),
        EntryPayload::Membership(m) => (
            KIND_MEMBERSHIP,
            rmp_serde::to_vec_named(m).map_err(io::Error::other)?.into(),
        ),
    };
    if payload.len() > config::CLUSTER_ENTRY_BYTES_MAX {
        return Err(io::Error::other(format!(
            "an entry of {} bytes is past CLUSTER_ENTRY_BYTES_MAX",
            payload.len()
        )));
    }
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&entry.log_id.index.to_le_bytes());
    out.extend_from_slice(&entry.log_id.leader_id.term.to_le_bytes());
    out.extend_from_slice(&entry.log_id.leader_id.node_id.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&payload);
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The entry whose frame starts at `at` of `data` and the frame's length, `None` at the end
/// of the data, or why the bytes there are not a whole frame.
pub fn decode_entry(data: &[u8], at: usize) -> Result<Option<(Entry<TypeConfig>, usize)>, String> {
    let rest = data.get(at..).unwrap_or(&[]);
    if rest.is_empty() {
        return Ok(None);
    }
    if rest.len() < ENTRY_HEADER_BYTES {
        return Err(format!("a partial entry frame of {} bytes", rest.len()));
    }
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&rest[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let mut l = [0u8; 4];
    l.copy_from_slice(&rest[0..4]);
    let len = u32::from_le_bytes(l) as usize;
    if len > config::CLUSTER_ENTRY_BYTES_MAX {
        return Err(format!("an entry frame declares {len} bytes"));
    }
    let frame_len = ENTRY_HEADER_BYTES + len;
    if rest.len() < frame_len {
        return Err(format!(
            "a partial entry frame: {} of {frame_len} bytes",
            rest.len()
        ));
    }
    l.copy_from_slice(&rest[4..8]);
    let stored = u32::from_le_bytes(l);
    if stored != crc32fast::hash(&rest[8..frame_len]) {
        return Err("an entry frame fails its CRC".into());
    }
    let log_id = LogId::new(CommittedLeaderId::new(u64_at(16), u64_at(24)), u64_at(8));
    let payload = &rest[ENTRY_HEADER_BYTES..frame_len];
    let payload = match rest[32] {
        KIND_BLANK if payload.is_empty() => EntryPayload::Blank,
        KIND_BATCH => EntryPayload::Normal(Batch {
            frames: bytes::Bytes::copy_from_slice(payload),
        }),
        KIND_MEMBERSHIP => EntryPayload::Membership(
            rmp_serde::from_slice(payload).map_err(|e| format!("a membership entry: {e}"))?,
        ),
        k => return Err(format!("an entry of unknown kind {k}")),
    };
    Ok(Some((Entry { log_id, payload }, frame_len)))
}

/// `raft-vote`'s bytes.
pub fn encode_vote(v: &Vote<NodeId>) -> [u8; VOTE_BYTES] {
    let mut b = [0u8; VOTE_BYTES];
    b[0..8].copy_from_slice(&v.leader_id.term.to_le_bytes());
    b[8..16].copy_from_slice(&v.leader_id.node_id.to_le_bytes());
    b[16] = u8::from(v.committed);
    let crc = crc32fast::hash(&b[0..20]);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

pub fn decode_vote(b: &[u8]) -> Result<Vote<NodeId>, String> {
    if b.len() != VOTE_BYTES {
        return Err(format!(
            "the vote file is {} bytes, not {VOTE_BYTES}",
            b.len()
        ));
    }
    let mut c = [0u8; 4];
    c.copy_from_slice(&b[20..24]);
    if u32::from_le_bytes(c) != crc32fast::hash(&b[0..20]) || b[17..20] != [0, 0, 0] || b[16] > 1 {
        return Err("the vote file fails its check".into());
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&b[0..8]);
    let mut n = [0u8; 8];
    n.copy_from_slice(&b[8..16]);
    let (term, node) = (u64::from_le_bytes(t), u64::from_le_bytes(n));
    Ok(if b[16] == 1 {
        Vote::new_committed(term, node)
    } else {
        Vote::new(term, node)
    })
}

/// `words`, little-endian, then the CRC32 of their bytes: `raft-purged` and `node-id`.
fn words_with_crc<const B: usize>(words: &[u64]) -> [u8; B] {
    let mut b = [0u8; B];
    let end = words.len() * 8;
    for (i, w) in words.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    let crc = crc32fast::hash(&b[0..end]);
    b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The `n` words of a file `words_with_crc` wrote, once its length and CRC hold (`what`
/// names the file in the refusal).
fn checked_words(b: &[u8], n: usize, what: &str) -> Result<Vec<u64>, String> {
    let end = n * 8;
    if b.len() != end + 4 {
        return Err(format!(
            "the {what} file is {} bytes, not {}",
            b.len(),
            end + 4
        ));
    }
    let mut c = [0u8; 4];
    c.copy_from_slice(&b[end..end + 4]);
    if u32::from_le_bytes(c) != crc32fast::hash(&b[0..end]) {
        return Err(format!("the {what} file fails its check"));
    }
    Ok(b[0..end]
        .chunks_exact(8)
        .map(|w| {
            let mut x = [0u8; 8];
            x.copy_from_slice(w);
            u64::from_le_bytes(x)
        })
        .collect())
}

/// `raft-purged`'s bytes.
pub fn encode_purged(id: &LogId<NodeId>) -> [u8; PURGED_BYTES] {
    words_with_crc(&[id.index, id.leader_id.term, id.leader_id.node_id])
}

pub fn decode_purged(b: &[u8]) -> Result<LogId<NodeId>, String> {
    let w = checked_words(b, 3, "purged")?;
    Ok(LogId::new(CommittedLeaderId::new(w[1], w[2]), w[0]))
}

/// `node-id`'s bytes.
pub fn encode_node_id(id: NodeId) -> [u8; NODE_ID_BYTES] {
    words_with_crc(&[id])
}

pub fn decode_node_id(b: &[u8]) -> Result<NodeId, String> {
    Ok(checked_words(b, 1, "node-id")?[0])
}

/// Makes `dir` (a node's `cluster/`) node `id`'s, or refuses if it is another node's. The
/// vote, the log and the snapshot a node keeps are its own promises and its own copy: under
/// another id they would be a second node's, which Raft's safety does not allow (a vote
/// cast twice in one term, entries counted for a majority twice). A directory that holds no
/// `node-id` yet (new, emptied, or written before the file existed) takes `id`.
pub fn claim_node_id(dir: &Path, id: NodeId) -> Result<(), String> {
    let path = dir.join(NODE_ID_FILE);
    let shown = || path.display().to_string();
    match read_optional(&path).map_err(|e| format!("{}: {e}", shown()))? {
        Some(b) => {
            let kept = decode_node_id(&b).map_err(|e| format!("{}: {e}", shown()))?;
            if kept != id {
                return Err(format!(
                    "{} holds node {kept}'s cluster state ({}), not node {id}'s: start it with --node-id {kept}, or start node {id} on a data directory of its own (empty but for a copy of credentials.json)",
                    dir.parent().unwrap_or(dir).display(),
                    shown()
                ));
            }
            Ok(())
        }
        None => {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            super::replace_file(dir, NODE_ID_FILE, &encode_node_id(id))
                .map_err(|e| format!("{}: {e}", shown()))
        }
    }
}

fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

struct Inner {
    dir: PathBuf,
    file: File,
    /// The entries not purged, by index, with their frame's offset in the file.
    entries: BTreeMap<u64, (u64, Entry<TypeConfig>)>,
    /// Where the next frame goes.
    end: u64,
    /// Bytes of the file that purged entries still take.
    dead: u64,
    vote: Option<Vote<NodeId>>,
    purged: Option<LogId<NodeId>>,
}

/// The cluster's log on disk; clones share it (openraft's log reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
    /// The last entry the snapshot on disk (`raft-snapshot`) holds, as the state machine
    /// reports it: entries are purged only up to it (see `purge`).
    kept: Arc<tokio::sync::watch::Sender<Option<u64>>>,
}

fn io_err(e: impl ToString) -> io::Error {
    io::Error::other(e.to_string())
}

impl LogStore {
    /// Opens (or creates) the cluster log in `dir`, cutting a torn tail.
    pub fn open(dir: &Path) -> io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LOG_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        if data.len() < LOG_HEADER_BYTES {
            // New, or torn while its header was written: nothing was ever acknowledged.
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&log_header())?;
            file.sync_all()?;
            crate::wal::writer::sync_dir(dir)?;
            data = log_header().to_vec();
        } else if data[..LOG_HEADER_BYTES] != log_header() {
            return Err(io_err(format!(
                "{} does not start with a cluster log header of version {LOG_VERSION}",
                path.display()
            )));
        }
        let vote = read_optional(&dir.join(VOTE_FILE))?
            .map(|b| decode_vote(&b))
            .transpose()
            .map_err(io_err)?;
        let purged = read_optional(&dir.join(PURGED_FILE))?
            .map(|b| decode_purged(&b))
            .transpose()
            .map_err(io_err)?;
        let mut entries = BTreeMap::new();
        let mut at = LOG_HEADER_BYTES;
        let mut dead = 0u64;
        let mut last: Option<u64> = None;
        loop {
            match decode_entry(&data, at) {
                Ok(None) => break,
                Ok(Some((e, len))) => {
                    let index = e.log_id.index;
                    // Entries follow one another, but for the first after a purge that went
                    // past the file's end (a snapshot installed past what the node had), which
                    // follows the purged point: the entries before it are dead.
                    let after_purge =
                        |l: u64| purged.is_some_and(|p| l <= p.index && index == p.index + 1);
                    if last.is_some_and(|l| index != l + 1 && !after_purge(l)) {
                        return Err(io_err(format!(
                            "{}: entry {index} follows entry {} at offset {at}",
                            path.display(),
                            last.unwrap_or(0)
                        )));
                    }
                    last = Some(index);
                    if purged.is_some_and(|p| index <= p.index) {
                        dead += len as u64;
                    } else {
                        entries.insert(index, (at as u64, e));
                    }
                    at += len;
                }
                Err(why) => {
                    crate::log::line(&format!(
                        "warning: {}: {why} at offset {at}; the tail from there is cut (never acknowledged)",
                        path.display()
                    ));
                    file.set_len(at as u64)?;
                    file.sync_all()?;
                    break;
                }
            }
        }
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_path_buf(),
                file,
                entries,
                end: at as u64,
                dead,
                vote,
                purged,
            })),
            kept: Arc::new(tokio::sync::watch::Sender::new(None)),
        })
    }

    /// The snapshot on disk now holds the entries up to `last` (the state machine kept it).
    pub fn snapshot_kept(&self, last: Option<LogId<NodeId>>) {
        let Some(index) = last.map(|l| l.index) else {
            return;
        };
        self.kept.send_if_modified(|k| {
            let newer = k.is_none_or(|k| index > k);
            if newer {
                *k = Some(index);
            }
            newer
        });
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StorageError<NodeId>> {
        self.inner.lock().map_err(|_| {
            StorageIOError::read_logs(&io_err("the cluster log's lock is poisoned")).into()
        })
    }

    /// The entries in `range` (those kept).
    pub(crate) fn range(
        &self,
        range: impl RangeBounds<u64>,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .lock()?
            .entries
            .range(range)
            .map(|(_, (_, e))| e.clone())
            .collect())
    }
}

impl Inner {
    fn append(&mut self, entries: Vec<Entry<TypeConfig>>) -> io::Result<()> {
        let mut out = Vec::new();
        let mut placed = Vec::with_capacity(entries.len());
        for e in entries {
            let at = self.end + out.len() as u64;
            encode_entry(&mut out, &e)?;
            placed.push((at, e));
        }
        self.file.seek(SeekFrom::Start(self.end))?;
        self.file.write_all(&out)?;
        self.file.sync_data()?;
        self.end += out.len() as u64;
        for (at, e) in placed {
            self.entries.insert(e.log_id.index, (at, e));
        }
        Ok(())
    }

    /// Cuts the entries from `index` on (an uncommitted tail another leader replaced).
    fn truncate(&mut self, index: u64) -> io::Result<()> {
        let Some(&(at, _)) = self.entries.get(&index) else {
            return Ok(());
        };
        self.file.set_len(at)?;
        self.file.sync_data()?;
        self.end = at;
        self.entries.split_off(&index);
        Ok(())
    }

    /// Forgets the entries up to `id` (a snapshot holds them); the file is rewritten without
    /// them once they take more of it than the rest.
    fn purge(&mut self, id: LogId<NodeId>) -> io::Result<()> {
        replace_file(&self.dir, PURGED_FILE, &encode_purged(&id))?;
        self.purged = Some(id);
        self.entries = self.entries.split_off(&(id.index + 1));
        if self.entries.is_empty() && self.end > LOG_HEADER_BYTES as u64 {
            // Every entry the file holds is purged (a snapshot installed past them): the file
            // goes back to its header, so that the next entry, which follows the purged
            // point and not them, is not written after them.
            self.file.set_len(LOG_HEADER_BYTES as u64)?;
            self.file.sync_data()?;
            self.end = LOG_HEADER_BYTES as u64;
        }
        let live_start = self.entries.values().next().map_or(self.end, |(at, _)| *at);
        self.dead = live_start - LOG_HEADER_BYTES as u64;
        if self.dead > config::CLUSTER_LOG_REWRITE_BYTES_MIN && self.dead > self.end - live_start {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Writes the kept entries to a new file and puts it in the old one's place.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut out = log_header().to_vec();
        let mut offsets = Vec::with_capacity(self.entries.len());
        for (index, (_, e)) in &self.entries {
            offsets.push((*index, out.len() as u64));
            encode_entry(&mut out, e)?;
        }
        replace_file(&self.dir, LOG_FILE, &out)?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(LOG_FILE))?;
        for (index, at) in offsets {
            if let Some(slot) = self.entries.get_mut(&index) {
                slot.0 = at;
            }
        }
        self.end = out.len() as u64;
        self.dead = 0;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        self.range(range)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let g = self.lock()?;
        let last = g
            .entries
            .values()
            .next_back()
            .map(|(_, e)| e.log_id)
            .or(g.purged);
        Ok(LogState {
            last_purged_log_id: g.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let store = self.clone();
        let vote = *vote;
        blocking(move || {
            let mut g = store.lock()?;
            replace_file(&g.dir, VOTE_FILE, &encode_vote(&vote))
                .map_err(|e| StorageIOError::write_vote(&e))?;
            g.vote = Some(vote);
            Ok(())
        })
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock()?.vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let store = self.clone();
        let written = blocking(move || {
            store
                .lock()?
                .append(entries)
                .map_err(|e| StorageIOError::write_logs(&e).into())
        })
        .await;
        match &written {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(io_err(e))),
        }
        written
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let store = self.clone();
        blocking(move || {
            store
                .lock()?
                .truncate(log_id.index)
                .map_err(|e| StorageIOError::write_logs(&e).into())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        // openraft purges what a snapshot it installs holds without waiting for the state
        // machine to have written that snapshot (its install runs beside): a crash between
        // the two would leave entries gone that no snapshot on disk holds. The purge waits
        // for the snapshot on disk to hold them (a bounded while; past it, the purge fails,
        // which stops this node's part in the cluster rather than lose the entries).
        let past = self.lock()?.purged.is_some_and(|p| p.index >= log_id.index);
        if !past {
            let mut kept = self.kept.subscribe();
            let wait = std::time::Duration::from_millis(config::CLUSTER_SNAPSHOT_CHUNK_TIMEOUT_MS);
            let held = kept.wait_for(|k| k.is_some_and(|k| k >= log_id.index));
            if !matches!(tokio::time::timeout(wait, held).await, Ok(Ok(_))) {
                return Err(StorageIOError::write_logs(&io_err(format!(
                    "entries up to {} are to be purged, but no snapshot on disk holds them",
                    log_id.index
                )))
                .into());
            }
        }
        let store = self.clone();
        blocking(move || {
            store
                .lock()?
                .purge(log_id)
                .map_err(|e| StorageIOError::write_logs(&e).into())
        })
        .await
    }
}

/// Runs the file work `f` on a blocking thread, off the runtime's.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError<NodeId>> + Send + 'static,
) -> Result<T, StorageError<NodeId>> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StorageIOError::write_logs(&io_err(e)))?
}
