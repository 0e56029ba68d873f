//! openraft's state machine, on the state machine's own door ([`Machine`]): an entry's batch
//! is applied record by record with [`Machine::apply_frame`] (checked as replay checks a
//! record), a snapshot is the single node's snapshot image ([`Machine::write_snapshot`]) and
//! installing one is [`Machine::from_snapshot`]. The snapshot a node holds is kept in
//! `cluster/raft-snapshot` (its Raft metadata, then the image), so a restart starts from it
//! and openraft applies the entries after it.

use super::{Batch, NodeId, Outcome, TypeConfig};
use crate::machine::{Machine, Position};
use crate::wal::format::{read_frame, FrameRead};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const SNAPSHOT_FILE: &str = "raft-snapshot";

type Meta = SnapshotMeta<NodeId, BasicNode>;

struct Inner {
    machine: Machine,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    /// The snapshot this node holds: its metadata and image.
    snapshot: Option<(Meta, Arc<Vec<u8>>)>,
    built: u64,
    dir: PathBuf,
}

/// The state machine; clones share it (openraft's snapshot builder is a clone).
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Mutex<Inner>>,
}

fn io_err(e: impl ToString) -> io::Error {
    io::Error::other(e.to_string())
}

/// Applies a batch's records (the single node's log frames, back to back) to `m`.
pub fn apply_batch(m: &mut Machine, batch: &Batch) -> Result<(), String> {
    let mut at = 0;
    loop {
        match read_frame(&batch.frames, at) {
            FrameRead::End => return Ok(()),
            FrameRead::Damaged(d) => return Err(format!("record at byte {at} of the batch: {d}")),
            FrameRead::Frame(f) => {
                let pos = Position {
                    seq: f.seq,
                    unix_ms: f.timestamp_unix_ms,
                };
                m.apply_frame(pos, f.kind, f.payload)
                    .map_err(|e| format!("record #{}: {e}", f.seq))?;
                at += f.encoded_len();
            }
        }
    }
}

/// A snapshot file's bytes: the metadata's length (u32), the metadata (MessagePack), the image.
fn encode_snapshot_file(
    meta: &SnapshotMeta<NodeId, BasicNode>,
    image: &[u8],
) -> io::Result<Vec<u8>> {
    let m = rmp_serde::to_vec_named(meta).map_err(io_err)?;
    let mut out = Vec::with_capacity(4 + m.len() + image.len());
    out.extend_from_slice(&(m.len() as u32).to_le_bytes());
    out.extend_from_slice(&m);
    out.extend_from_slice(image);
    Ok(out)
}

fn decode_snapshot_file(b: &[u8]) -> Result<(SnapshotMeta<NodeId, BasicNode>, &[u8]), String> {
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
fn machine_of(image: &[u8]) -> Result<Machine, String> {
    crate::snapshot::read(Path::new("(cluster snapshot)"), image, |_| {})
        .map(Machine::from_snapshot)
        .map_err(|d| d.to_string())
}

impl StateMachine {
    /// The state machine of the node whose cluster files are in `dir`: the snapshot it kept,
    /// or the empty state.
    pub fn open(dir: &Path) -> io::Result<StateMachine> {
        std::fs::create_dir_all(dir)?;
        let mut inner = Inner {
            machine: Machine::new(),
            last_applied: None,
            membership: StoredMembership::default(),
            snapshot: None,
            built: 0,
            dir: dir.to_path_buf(),
        };
        match std::fs::read(dir.join(SNAPSHOT_FILE)) {
            Ok(b) => {
                let (meta, image) = decode_snapshot_file(&b).map_err(io_err)?;
                inner.machine = machine_of(image).map_err(io_err)?;
                inner.last_applied = meta.last_log_id;
                inner.membership = meta.last_membership.clone();
                inner.snapshot = Some((meta, Arc::new(image.to_vec())));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(StateMachine {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StorageError<NodeId>> {
        self.inner.lock().map_err(|_| {
            StorageIOError::read_state_machine(&io_err("the state machine's lock is poisoned"))
                .into()
        })
    }

    /// Runs `f` on the state (a read of a test, a tool).
    pub fn with_machine<T>(&self, f: impl FnOnce(&mut Machine) -> T) -> Option<T> {
        self.inner.lock().ok().map(|mut g| f(&mut g.machine))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut g = me.lock()?;
            let mut image = Vec::new();
            g.machine
                .write_snapshot(&mut image, crate::clock::wall_unix_ms(), |_| {})
                .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
            g.built += 1;
            let id = match g.last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id, l.index, g.built),
                None => format!("empty-{}", g.built),
            };
            let meta = SnapshotMeta {
                last_log_id: g.last_applied,
                last_membership: g.membership.clone(),
                snapshot_id: id,
            };
            let file = encode_snapshot_file(&meta, &image)
                .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
            super::replace_file(&g.dir, SNAPSHOT_FILE, &file)
                .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
            let image = Arc::new(image);
            g.snapshot = Some((meta.clone(), image.clone()));
            Ok(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(image.as_ref().clone())),
            })
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &io_err(e)))?
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
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
        let mut g = self.lock()?;
        let mut out = Vec::new();
        for e in entries {
            match &e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => apply_batch(&mut g.machine, batch)
                    .map_err(|why| StorageIOError::apply(e.log_id, &io_err(why)))?,
                EntryPayload::Membership(m) => {
                    g.membership = StoredMembership::new(Some(e.log_id), m.clone())
                }
            }
            g.last_applied = Some(e.log_id);
            out.push(Outcome {
                seq: g.machine.position().seq,
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let image = snapshot.into_inner();
        let me = self.clone();
        let meta = meta.clone();
        tokio::task::spawn_blocking(move || {
            let fail = |e: io::Error| StorageIOError::read_snapshot(Some(meta.signature()), &e);
            let machine = machine_of(&image).map_err(|e| fail(io_err(e)))?;
            let mut g = me.lock()?;
            let file = encode_snapshot_file(&meta, &image).map_err(fail)?;
            super::replace_file(&g.dir, SNAPSHOT_FILE, &file).map_err(fail)?;
            g.machine = machine;
            g.last_applied = meta.last_log_id;
            g.membership = meta.last_membership.clone();
            g.snapshot = Some((meta, Arc::new(image)));
            Ok(())
        })
        .await
        .map_err(|e| StorageIOError::read_snapshot(None, &io_err(e)))?
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let g = self.lock()?;
        Ok(g.snapshot.as_ref().map(|(meta, image)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(image.as_ref().clone())),
        }))
    }
}
