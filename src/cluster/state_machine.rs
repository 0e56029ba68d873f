//! openraft's state machine, on the state machine's own door ([`Machine`]), through an
//! [`Applier`]: an entry's batch is applied record by record with [`Machine::apply_logged`]
//! (checked as replay checks a record), a snapshot is the single node's snapshot image
//! ([`Machine::write_snapshot`]) and installing one is [`Machine::from_snapshot`]. The
//! snapshot a node holds is kept in `cluster/raft-snapshot` (its Raft metadata, then the
//! image), so a restart starts from it and openraft applies the entries after it. Only its
//! metadata stays in memory: a snapshot is written to its file as it is built, sent to a
//! follower from the file in chunks, and received into `raft-snapshot.recv`, which becomes
//! the node's once it is whole and reads back.

use super::{Batch, NodeId, Outcome, TypeConfig};
use crate::machine::{Machine, Position};
use crate::wal::format::{read_frame, FrameRead};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const SNAPSHOT_FILE: &str = "raft-snapshot";
/// A snapshot being received from the leader, until it is whole.
pub const SNAPSHOT_RECEIVING_FILE: &str = "raft-snapshot.recv";

type Meta = SnapshotMeta<NodeId, BasicNode>;

/// Where entries go: the state a node serves. The server's is its executor (which owns the one
/// `Machine`); [`Owned`] holds a `Machine` of its own (the tests, a tool).
pub trait Applier: Clone + Send + Sync + 'static {
    /// Applies the batch's records that the state has not applied yet (a leader's executor
    /// applied its own before proposing them); the sequence number of the last record applied.
    fn apply(&self, batch: Batch) -> impl std::future::Future<Output = Result<u64, String>> + Send;
    /// Replaces the state with an image's.
    fn install(
        &self,
        image: Vec<u8>,
    ) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

/// A `Machine` of its own, behind a lock.
#[derive(Clone, Default)]
pub struct Owned(Arc<Mutex<Machine>>);

impl Owned {
    /// The state of `image`, or the empty state.
    pub fn new(image: Option<&[u8]>) -> Result<Owned, String> {
        let m = match image {
            Some(i) => machine_of(i)?,
            None => Machine::new(),
        };
        Ok(Owned(Arc::new(Mutex::new(m))))
    }

    /// Runs `f` on the state (a read of a test, a tool).
    pub fn with_machine<T>(&self, f: impl FnOnce(&mut Machine) -> T) -> Option<T> {
        self.0.lock().ok().map(|mut g| f(&mut g))
    }
}

impl Applier for Owned {
    async fn apply(&self, batch: Batch) -> Result<u64, String> {
        let mut m = self
            .0
            .lock()
            .map_err(|_| "the state's lock is poisoned".to_string())?;
        apply_batch(&mut m, &batch)?;
        Ok(m.position().seq)
    }

    async fn install(&self, image: Vec<u8>) -> Result<(), String> {
        let fresh = machine_of(&image)?;
        let mut m = self
            .0
            .lock()
            .map_err(|_| "the state's lock is poisoned".to_string())?;
        *m = fresh;
        Ok(())
    }
}

struct Inner {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    /// The metadata of the snapshot this node holds (in `raft-snapshot`).
    snapshot: Option<Meta>,
    built: u64,
    dir: PathBuf,
    /// Held while `raft-snapshot` is read to build on or replaced, so that a snapshot built
    /// and one received at the same time neither mix nor put an older one back.
    files: Arc<Mutex<()>>,
}

/// The state machine; clones share it (openraft's snapshot builder is a clone).
pub struct StateMachine<A: Applier> {
    inner: Arc<Mutex<Inner>>,
    applier: A,
    /// The cluster's log, whose committed entries a snapshot is built from.
    log: super::log_store::LogStore,
}

impl<A: Applier> Clone for StateMachine<A> {
    fn clone(&self) -> Self {
        StateMachine {
            inner: self.inner.clone(),
            applier: self.applier.clone(),
            log: self.log.clone(),
        }
    }
}

fn io_err(e: impl ToString) -> io::Error {
    io::Error::other(e.to_string())
}

/// Applies a batch's records (the single node's log frames, back to back) to `m`: those after
/// its position; a record at or before it is there already.
pub fn apply_batch(m: &mut Machine, batch: &Batch) -> Result<(), String> {
    let mut at = 0;
    loop {
        match read_frame(&batch.frames, at) {
            FrameRead::End => return Ok(()),
            FrameRead::Damaged(d) => return Err(format!("record at byte {at} of the batch: {d}")),
            FrameRead::Frame(f) => {
                if f.seq > m.position().seq {
                    let pos = Position {
                        seq: f.seq,
                        unix_ms: f.timestamp_unix_ms,
                    };
                    m.apply_logged(pos, f.kind, f.payload)
                        .map_err(|e| format!("record #{}: {e}", f.seq))?;
                }
                at += f.encoded_len();
            }
        }
    }
}

/// Writes `image` with `meta` as the snapshot a node keeps in `dir` (replacing the file whole).
pub fn keep_snapshot(dir: &Path, meta: &Meta, image: &[u8]) -> io::Result<()> {
    let file = encode_snapshot_file(meta, image)?;
    super::replace_file(dir, SNAPSHOT_FILE, &file)
}

/// Writes the snapshot a node keeps in `dir` as `image` writes its image into it, without
/// holding the image: to `raft-snapshot.tmp`, synced, then renamed over `raft-snapshot`.
fn write_snapshot_file(
    dir: &Path,
    meta: &Meta,
    image: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    let m = rmp_serde::to_vec_named(meta).map_err(io_err)?;
    let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    out.write_all(&(m.len() as u32).to_le_bytes())?;
    out.write_all(&m)?;
    image(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, dir.join(SNAPSHOT_FILE))?;
    crate::wal::writer::sync_dir(dir)
}

/// The snapshot file this node keeps, opened to be sent from (from its first byte: the
/// receiver gets the file as it is).
async fn open_snapshot(dir: &Path) -> io::Result<tokio::fs::File> {
    tokio::fs::File::open(dir.join(SNAPSHOT_FILE)).await
}

/// A snapshot file's bytes: the metadata's length (u32), the metadata (MessagePack), the image.
fn encode_snapshot_file(meta: &Meta, image: &[u8]) -> io::Result<Vec<u8>> {
    let m = rmp_serde::to_vec_named(meta).map_err(io_err)?;
    let mut out = Vec::with_capacity(4 + m.len() + image.len());
    out.extend_from_slice(&(m.len() as u32).to_le_bytes());
    out.extend_from_slice(&m);
    out.extend_from_slice(image);
    Ok(out)
}

fn decode_snapshot_file(b: &[u8]) -> Result<(Meta, &[u8]), String> {
    let len = b
        .get(0..4)
        .map(|l| u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize)
        .ok_or("a snapshot file shorter than its length field")?;
    let meta = b
        .get(4..4 + len)
        .ok_or("a snapshot file cut inside its metadata")?;
    let meta = rmp_serde::from_slice(meta).map_err(|e| format!("a snapshot's metadata: {e}"))?;
    Ok((meta, &b[4 + len..]))
}

/// The state an image holds.
pub fn machine_of(image: &[u8]) -> Result<Machine, String> {
    crate::snapshot::read(Path::new("(cluster snapshot)"), image, |_| {})
        .map(Machine::from_snapshot)
        .map_err(|d| d.to_string())
}

/// The snapshot kept in `dir` (its metadata and image), if any.
pub fn kept_snapshot(dir: &Path) -> io::Result<Option<(Meta, Vec<u8>)>> {
    match std::fs::read(dir.join(SNAPSHOT_FILE)) {
        Ok(b) => {
            let (meta, image) = decode_snapshot_file(&b).map_err(io_err)?;
            Ok(Some((meta, image.to_vec())))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// With the `fault-injection` feature, a snapshot sent by the leader waits before it is
/// written while the node's cluster directory holds `fault-hold-snapshot-install` (a slow
/// disk, for as long as a test needs).
fn hold_install(_dir: &Path) {
    #[cfg(feature = "fault-injection")]
    while _dir.join("fault-hold-snapshot-install").exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

impl<A: Applier> StateMachine<A> {
    /// The state machine of the node whose cluster files are in `dir`, applying to `applier`,
    /// whose state is already `kept`'s (the snapshot the node kept) or empty.
    pub fn new(
        dir: &Path,
        applier: A,
        kept: Option<(Meta, Vec<u8>)>,
        log: super::log_store::LogStore,
    ) -> StateMachine<A> {
        let mut inner = Inner {
            last_applied: None,
            membership: StoredMembership::default(),
            snapshot: None,
            built: 0,
            dir: dir.to_path_buf(),
            files: Arc::new(Mutex::new(())),
        };
        // A snapshot whose receiving a crash cut short is nobody's.
        let _ = std::fs::remove_file(dir.join(SNAPSHOT_RECEIVING_FILE));
        if let Some((meta, _)) = kept {
            log.snapshot_kept(meta.last_log_id);
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
            inner.snapshot = Some(meta);
        }
        StateMachine {
            inner: Arc::new(Mutex::new(inner)),
            applier,
            log,
        }
    }

    pub fn applier(&self) -> &A {
        &self.applier
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StorageError<NodeId>> {
        self.inner.lock().map_err(|_| {
            StorageIOError::read_state_machine(&io_err("the state machine's lock is poisoned"))
                .into()
        })
    }
}

impl<A: Applier> RaftSnapshotBuilder<TypeConfig> for StateMachine<A> {
    /// The state at the last entry applied, rebuilt apart from the live one: the snapshot
    /// this node holds, then the committed entries after it from the cluster's log. A
    /// leader's live state runs ahead of the commit (it applies a batch before proposing it),
    /// so its image could hold records that never commit; this one cannot.
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (last, membership, built, dir, files) = {
            let mut g = self.lock()?;
            g.built += 1;
            (
                g.last_applied,
                g.membership.clone(),
                g.built,
                g.dir.clone(),
                g.files.clone(),
            )
        };
        let id = match last {
            Some(l) => format!("{}-{}-{built}", l.leader_id, l.index),
            None => format!("empty-{built}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: membership,
            snapshot_id: id,
        };
        let (log, want) = (self.log.clone(), meta.clone());
        let file_dir = dir.clone();
        let kept = tokio::task::spawn_blocking(move || -> Result<Meta, String> {
            let _files = files
                .lock()
                .map_err(|_| "the snapshot files' lock is poisoned")?;
            // The snapshot this one is built on, from its file (the only copy).
            let base = kept_snapshot(&file_dir).map_err(|e| e.to_string())?;
            let from = base
                .as_ref()
                .and_then(|(m, _)| m.last_log_id)
                .map_or(0, |l| l.index + 1);
            let upto = want.last_log_id.map(|l| l.index);
            if let (Some((held, _)), true) = (&base, upto.is_none_or(|u| u < from)) {
                // What it holds is as new as asked, or newer (one received meanwhile).
                return Ok(held.clone());
            }
            let mut m = match &base {
                Some((_, image)) => machine_of(image)?,
                None => crate::machine::Machine::new(),
            };
            drop(base);
            if let Some(upto) = upto {
                let entries = log.range(from..=upto).map_err(|e| e.to_string())?;
                if entries.len() as u64 != upto + 1 - from {
                    return Err(format!(
                        "the cluster's log lacks entries {from}..={upto} to build a snapshot on"
                    ));
                }
                for e in &entries {
                    if let EntryPayload::Normal(b) = &e.payload {
                        apply_batch(&mut m, b)?;
                    }
                }
            }
            write_snapshot_file(&file_dir, &want, |out| {
                m.write_snapshot(out, crate::clock::wall_unix_ms(), |_| {})
                    .map(|_| ())
            })
            .map_err(|e| e.to_string())?;
            Ok(want)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &io_err(e)))?;
        self.log.snapshot_kept(kept.last_log_id);
        self.lock()?.snapshot = Some(kept.clone());
        let file = open_snapshot(&dir)
            .await
            .map_err(|e| StorageIOError::read_snapshot(Some(kept.signature()), &e))?;
        Ok(Snapshot {
            meta: kept,
            snapshot: Box::new(file),
        })
    }
}

impl<A: Applier> RaftStateMachine<TypeConfig> for StateMachine<A> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let g = self.lock()?;
        Ok((g.last_applied, g.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
    {
        let mut out = Vec::new();
        for e in entries {
            let seq = match e.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(batch) => Some(
                    self.applier
                        .apply(batch)
                        .await
                        .map_err(|why| StorageIOError::apply(e.log_id, &io_err(why)))?,
                ),
                EntryPayload::Membership(m) => {
                    self.lock()?.membership = StoredMembership::new(Some(e.log_id), m);
                    None
                }
            };
            self.lock()?.last_applied = Some(e.log_id);
            out.push(Outcome {
                seq: seq.unwrap_or(0),
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<tokio::fs::File>, StorageError<NodeId>> {
        let path = self.lock()?.dir.join(SNAPSHOT_RECEIVING_FILE);
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError<NodeId>> {
        let fail = |e: io::Error| StorageIOError::read_snapshot(Some(meta.signature()), &e);
        let mut received = snapshot;
        tokio::io::AsyncWriteExt::flush(&mut received)
            .await
            .map_err(fail)?;
        drop(received);
        let (dir, files) = {
            let g = self.lock()?;
            (g.dir.clone(), g.files.clone())
        };
        let kept = meta.clone();
        // The file the leader sent, whole: its own metadata, then the image. Checked before
        // anything changes (an image that does not read leaves the state), then made this
        // node's snapshot, written as the metadata openraft gives.
        let image = tokio::task::spawn_blocking(move || -> io::Result<Vec<u8>> {
            hold_install(&dir);
            let recv = dir.join(SNAPSHOT_RECEIVING_FILE);
            let mut bytes = std::fs::read(&recv)?;
            let (sent, image) = decode_snapshot_file(&bytes).map_err(io_err)?;
            machine_of(image).map_err(io_err)?;
            let header = bytes.len() - image.len();
            let _files = files
                .lock()
                .map_err(|_| io_err("the snapshot files' lock is poisoned"))?;
            if sent == kept {
                std::fs::File::open(&recv)?.sync_all()?;
                std::fs::rename(&recv, dir.join(SNAPSHOT_FILE))?;
                crate::wal::writer::sync_dir(&dir)?;
            } else {
                keep_snapshot(&dir, &kept, &bytes[header..])?;
                let _ = std::fs::remove_file(&recv);
            }
            bytes.drain(..header);
            Ok(bytes)
        })
        .await
        .map_err(io_err)
        .and_then(|r| r)
        .map_err(fail)?;
        self.log.snapshot_kept(meta.last_log_id);
        self.applier
            .install(image)
            .await
            .map_err(|e| fail(io_err(e)))?;
        let mut g = self.lock()?;
        g.last_applied = meta.last_log_id;
        g.membership = meta.last_membership.clone();
        g.snapshot = Some(meta.clone());
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let (meta, dir) = {
            let g = self.lock()?;
            (g.snapshot.clone(), g.dir.clone())
        };
        let Some(meta) = meta else {
            return Ok(None);
        };
        let file = open_snapshot(&dir)
            .await
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(file),
        }))
    }
}
