//! Replication (issue 30, its first part): the log agreed by a majority of nodes, on openraft
//! 0.9 (the stable line; 0.10 is in alpha). One Raft entry is one executor batch: the records
//! it wrote, as the single node's log frames them, so every node's log holds the same records
//! at the same sequence numbers and the `upstash-sync-token` names a position all share.
//!
//! - [`log_store`]: the cluster's log on disk (term per entry, the vote, the cut of an
//!   uncommitted tail, purge), `log-format.md`'s "The cluster's log";
//! - [`state_machine`]: openraft's state machine on [`crate::machine::Machine`]'s door: apply
//!   a batch record by record, a snapshot is the single node's image;
//! - [`network`]: Raft's messages over HTTP on the cluster listener, with the cluster secret;
//! - [`convert`]: a single server's directory made a cluster's first node.
//!
//! The executor's side (proposing its batches, replying on commit, applying a follower's
//! entries) is `executor::cluster`; `server` starts a node for `serve --node-id`. What is not
//! here yet is in `docs/replication.md`, "What comes next".

// openraft's traits return its `StorageError` (over 200 bytes) by value; the size is theirs.
#![allow(clippy::result_large_err)]

pub mod convert;
pub mod log_store;
pub mod network;
pub mod state_machine;

use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::Path;

pub type NodeId = u64;

/// An entry's payload: the records one executor batch wrote, as the log's frames (sequence,
/// time, kind, payload, CRC), back to back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Shared, not copied: openraft clones an entry each time it reads one to send (every
    /// try of an append), and the leader keeps what it proposed to confirm it.
    pub frames: bytes::Bytes,
}

/// What applying an entry left: the sequence number of the last record applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub seq: u64,
}

openraft::declare_raft_types!(
    /// The cluster's types for openraft.
    pub TypeConfig:
        D = Batch,
        R = Outcome,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Replaces `dir/name` with `bytes` so that a crash leaves the old file or the new one whole.
pub(crate) fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(name))?;
    crate::wal::writer::sync_dir(dir)
}

/// openraft's settings for tidepool: the timings of `config.rs` and a snapshot every
/// `snapshot_every` entries.
pub fn raft_config(snapshot_every: u64) -> Result<openraft::Config, String> {
    let c = openraft::Config {
        cluster_name: "tidepool".into(),
        heartbeat_interval: crate::config::CLUSTER_HEARTBEAT_MS,
        election_timeout_min: crate::config::CLUSTER_ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: crate::config::CLUSTER_ELECTION_TIMEOUT_MAX_MS,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: crate::config::CLUSTER_LOG_KEPT_PAST_SNAPSHOT,
        purge_batch_size: 256,
        install_snapshot_timeout: crate::config::CLUSTER_SNAPSHOT_CHUNK_TIMEOUT_MS,
        ..Default::default()
    };
    c.validate().map_err(|e| e.to_string())
}

/// Where a node starts: its id, its cluster files' directory, the address it listens on for
/// its peers, the cluster's secret and openraft's settings.
pub struct Start<'a> {
    pub id: NodeId,
    pub dir: &'a Path,
    pub listen: &'a str,
    pub secret: &'a str,
    pub config: openraft::Config,
    /// This node's own HTTP listener, where requests its followers relay go.
    pub local_http: Option<std::net::SocketAddr>,
    /// TLS on the cluster listener and to the peers, if given.
    pub tls: Option<network::Tls>,
    /// What serves a RESP connection a follower moves here (`/raft/resp`), if anything.
    pub tunnel: Option<network::Tunnel>,
}

/// A running node: its Raft handle, its state machine, and the task serving its peers.
pub struct Node<A: state_machine::Applier> {
    pub id: NodeId,
    pub raft: openraft::Raft<TypeConfig>,
    pub state: state_machine::StateMachine<A>,
    pub addr: std::net::SocketAddr,
    server: tokio::task::JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl<A: state_machine::Applier> Node<A> {
    /// Starts the node `at` describes, applying entries to `applier`, whose state is already
    /// that of `kept` (the snapshot the node kept: [`state_machine::kept_snapshot`]) or empty;
    /// requests followers forward go to `forward`.
    pub async fn start(
        at: Start<'_>,
        applier: A,
        kept: Option<(openraft::SnapshotMeta<NodeId, openraft::BasicNode>, Vec<u8>)>,
        forward: Option<network::Forward>,
    ) -> Result<Node<A>, String> {
        let Start {
            id,
            dir,
            listen,
            secret,
            config,
            local_http,
            tls,
            tunnel,
        } = at;
        let log = log_store::LogStore::open(dir).map_err(|e| format!("the cluster log: {e}"))?;
        let state = state_machine::StateMachine::new(dir, applier, kept, log.clone());
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let raft = openraft::Raft::new(
            id,
            std::sync::Arc::new(config),
            network::Network::new(secret, tls.as_ref())?,
            log,
            state.clone(),
        )
        .await
        .map_err(|e| format!("openraft: {e}"))?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(network::serve(
            listener,
            raft.clone(),
            secret.into(),
            stopped,
            network::Handlers {
                forward,
                tunnel,
                local_http,
            },
            tls.map(|t| t.acceptor),
        ));
        Ok(Node {
            id,
            raft,
            state,
            addr,
            server,
            stop,
        })
    }

    /// Stops the node: its listener and connections, then Raft.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        let _ = self.raft.shutdown().await;
    }
}
