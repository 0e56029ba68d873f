//! `tidepool cluster convert`: a single server's data directory made the first node of a new
//! cluster, offline (the server stopped), as if that node had been initialized as a cluster of
//! itself and had then taken a snapshot of the server's whole state:
//!
//! - `cluster/raft-vote`: term 1, this node, committed (openraft restores a node whose
//!   committed vote is its own as leader at start);
//! - `cluster/raft-snapshot`: the server's state as its snapshot image, at log id (term 1,
//!   this node, index 1), with a membership of this node alone;
//! - `cluster/raft-purged`: the same log id, and an empty `cluster/raft-log`: every entry up
//!   to the snapshot is purged, so a node that joins (`cluster add-node`) gets the state as
//!   that snapshot, as openraft sends a snapshot to a node whose next entry is purged.
//!
//! - `cluster/node-id`: this node's id, so that the directory starts under no other.
//!
//! The single server's `wal/` and `snapshots/` are moved into `single-server/`, which the
//! cluster node never reads: they stay as they were, for going back.

use super::log_store::{self, NODE_ID_FILE, PURGED_FILE, VOTE_FILE};
use super::state_machine::keep_snapshot;
use super::NodeId;
use crate::machine::{recover, Recover, Start};
use openraft::{
    BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote,
};
use std::path::Path;

/// Where the single server's files go.
pub const SET_ASIDE: &str = "single-server";

/// Converts `dir`; what was done, for the operator.
pub fn convert(dir: &Path, node_id: NodeId, listen: &str) -> Result<String, String> {
    if node_id == 0 {
        return Err("--node-id must be 1 or more".into());
    }
    listen
        .parse::<std::net::SocketAddr>()
        .map_err(|e| format!("--cluster-listen {listen}: {e} (HOST:PORT, as serve takes it)"))?;
    let cluster = dir.join("cluster");
    if cluster.exists() {
        return Err(format!(
            "{} is already a cluster node's directory ({} exists)",
            dir.display(),
            cluster.display()
        ));
    }
    let aside = dir.join(SET_ASIDE);
    if aside.exists() {
        return Err(format!("{} exists: move it away first", aside.display()));
    }
    if !dir.join("wal").is_dir() {
        return Err(format!(
            "{} holds no single server's log (no wal/): nothing to convert",
            dir.display()
        ));
    }
    // The server's own lock: held while the conversion runs, refused while a server runs.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))
        .map_err(|e| format!("cannot use the data directory {}: {e}", dir.display()))?;
    if lock.try_lock().is_err() {
        return Err(format!(
            "a server is running on {}: stop it first",
            dir.display()
        ));
    }
    let recovered = recover(dir, Recover::read(Start::Newest))?;
    let machine = recovered.machine;
    let at = machine.position();
    let mut image = Vec::new();
    machine
        .write_snapshot(&mut image, crate::clock::wall_unix_ms(), |_| {})
        .map_err(|e| format!("the state's image: {e}"))?;
    let log_id = LogId::new(CommittedLeaderId::new(1, node_id), 1);
    let membership = Membership::new(
        vec![std::collections::BTreeSet::from([node_id])],
        std::collections::BTreeMap::from([(node_id, BasicNode::new(listen))]),
    );
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), membership),
        snapshot_id: format!("converted-{}", at.seq),
    };
    std::fs::create_dir_all(&cluster).map_err(|e| format!("{}: {e}", cluster.display()))?;
    let written = (|| -> std::io::Result<()> {
        // Whose files these are, the log (its header), what says where it starts, the state.
        super::replace_file(&cluster, NODE_ID_FILE, &log_store::encode_node_id(node_id))?;
        drop(log_store::LogStore::open(&cluster)?);
        super::replace_file(
            &cluster,
            VOTE_FILE,
            &log_store::encode_vote(&Vote::new_committed(1, node_id)),
        )?;
        super::replace_file(&cluster, PURGED_FILE, &log_store::encode_purged(&log_id))?;
        keep_snapshot(&cluster, &meta, &image)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&cluster);
        return Err(format!("writing {}: {e}", cluster.display()));
    }
    std::fs::create_dir_all(&aside).map_err(|e| format!("{}: {e}", aside.display()))?;
    for sub in ["wal", "snapshots"] {
        let from = dir.join(sub);
        if from.exists() {
            std::fs::rename(&from, aside.join(sub))
                .map_err(|e| format!("moving {} into {}: {e}", from.display(), aside.display()))?;
        }
    }
    crate::wal::writer::sync_dir(dir).map_err(|e| e.to_string())?;
    Ok(format!(
        "{} is now node {node_id} of a cluster of one, holding the server's state up to record #{} ({} bytes of snapshot); the single server's files are in {}.\nStart it with: tidepool serve --data {} --node-id {node_id} --cluster-listen {listen} --cluster-secret ... (and the other flags it had)\nThen start each other node on an empty directory holding a copy of {}, and add it: tidepool cluster add-node ID ADDRESS",
        dir.display(),
        at.seq,
        image.len(),
        aside.display(),
        dir.display(),
        dir.join("credentials.json").display()
    ))
}
