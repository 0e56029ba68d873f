//! The replicated log's first part (issue 30): three nodes in this process, each with its own
//! data directory and cluster listener on loopback, agree on executor batches through
//! openraft; every node applies them through the state machine's door to the same state; a
//! leader that stops is replaced and the log goes on; a node that was down catches up from its
//! log, and a new, empty one joins from the leader's snapshot once the log behind it is purged.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tidepool::cluster::log_store::{self, LogStore};
use tidepool::cluster::state_machine::{kept_snapshot, Owned};
use tidepool::cluster::{raft_config, Batch, NodeId};
use tidepool::record::Record;
use tidepool::reply::Reply;
use tidepool::state::databases::DEFAULT_DB;
use tidepool::wal::format::encode_frame;

const SECRET: &str = "cluster-test-secret";
const WAIT: Option<Duration> = Some(Duration::from_secs(20));

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The records of one batch: `SET key value` for each pair, one record each, from `seq` on.
fn batch(seq: u64, sets: &[(&str, &str)]) -> Batch {
    let mut frames = Vec::new();
    for (i, (k, v)) in sets.iter().enumerate() {
        let r = Record::KvCommands(vec![vec![
            b"SET".to_vec(),
            k.as_bytes().to_vec(),
            v.as_bytes().to_vec(),
        ]]);
        let mut payload = Vec::new();
        r.encode_payload(&mut payload);
        encode_frame(
            &mut frames,
            seq + i as u64,
            1_767_225_600_000 + seq,
            r.kind(),
            &payload,
        );
    }
    Batch { frames }
}

type Node = tidepool::cluster::Node<Owned>;

fn get(node: &Node, key: &str) -> Reply {
    node.state
        .applier()
        .with_machine(|m| m.read(DEFAULT_DB, 1_767_225_600_000, &[b"GET", key.as_bytes()]))
        .expect("the state machine")
}

async fn start(id: NodeId, dir: &Path, listen: &str, snapshot_every: u64, keep: u64) -> Node {
    let mut config = raft_config(snapshot_every).expect("config");
    config.max_in_snapshot_log_to_keep = keep;
    // Purge as soon as a snapshot covers an entry (tidepool's default waits for 256).
    config.purge_batch_size = 1;
    let kept = kept_snapshot(dir).expect("the kept snapshot");
    let owned = Owned::new(kept.as_ref().map(|k| &k.1[..])).expect("its state");
    Node::start(id, dir, listen, SECRET, config, owned, kept)
        .await
        .unwrap_or_else(|e| panic!("node {id}: {e}"))
}

async fn leader_of(nodes: &[&Node]) -> NodeId {
    nodes[0]
        .raft
        .wait(WAIT)
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .expect("a leader within the wait")
        .current_leader
        .expect("a leader")
}

async fn three(dirs: &[TempDir], snapshot_every: u64, keep: u64) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        nodes.push(start(i as u64 + 1, d.path(), "127.0.0.1:0", snapshot_every, keep).await);
    }
    let members: BTreeMap<NodeId, openraft::BasicNode> = nodes
        .iter()
        .map(|n| (n.id, openraft::BasicNode::new(n.addr.to_string())))
        .collect();
    nodes[0].raft.initialize(members).await.expect("initialize");
    nodes
}

/// Writes `count` batches of one SET each (`k<i>` = `v<i>`) through the leader, from
/// sequence number `seq`; the log index of the last.
async fn write(leader: &Node, seq: u64, count: u64) -> u64 {
    let mut last = 0;
    for i in 0..count {
        let (k, v) = (format!("k{}", seq + i), format!("v{}", seq + i));
        let done = leader
            .raft
            .client_write(batch(seq + i, &[(&k, &v)]))
            .await
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
        assert_eq!(
            done.data.seq,
            seq + i,
            "the leader applied up to the record written"
        );
        last = done.log_id.index;
    }
    last
}

async fn applied(node: &Node, index: u64) {
    node.raft
        .wait(WAIT)
        .applied_index_at_least(Some(index), "applied")
        .await
        .unwrap_or_else(|e| panic!("node {} did not apply {index}: {e}", node.id));
}

#[test]
fn three_nodes_agree_and_a_stopped_leader_is_replaced() {
    let dirs = [
        TempDir::new("cluster-a1"),
        TempDir::new("cluster-a2"),
        TempDir::new("cluster-a3"),
    ];
    runtime().block_on(async {
        let mut nodes = three(&dirs, 10_000, 1000).await;
        let l = leader_of(&[&nodes[0]]).await;
        let li = nodes.iter().position(|n| n.id == l).expect("leader");
        let last = write(&nodes[li], 1, 20).await;
        for n in &nodes {
            applied(n, last).await;
            assert_eq!(get(n, "k7"), Reply::Bulk(b"v7".to_vec()), "node {}", n.id);
            assert_eq!(
                n.state.applier().with_machine(|m| m.position().seq),
                Some(20),
                "node {} is at the same record",
                n.id
            );
        }
        // The leader stops: the other two elect one and the log goes on from where it was.
        let old = nodes.remove(li);
        old.stop().await;
        let rest: Vec<&Node> = nodes.iter().collect();
        let l2 = rest[0]
            .raft
            .wait(WAIT)
            .metrics(|m| m.current_leader.is_some_and(|x| x != l), "a new leader")
            .await
            .expect("a new leader")
            .current_leader
            .expect("leader");
        let li2 = nodes.iter().position(|n| n.id == l2).expect("new leader");
        let last = write(&nodes[li2], 21, 5).await;
        for n in &nodes {
            applied(n, last).await;
            assert_eq!(get(n, "k24"), Reply::Bulk(b"v24".to_vec()));
        }
        // A write to a follower is refused with where the leader is.
        let follower = nodes.iter().find(|n| n.id != l2).expect("follower");
        let refused = follower
            .raft
            .client_write(batch(26, &[("x", "y")]))
            .await
            .expect_err("a follower does not take writes");
        assert_eq!(
            refused.forward_to_leader().and_then(|f| f.leader_id),
            Some(l2)
        );
        for n in nodes {
            n.stop().await;
        }
    });
}

#[test]
fn a_node_catches_up_from_its_log_or_from_a_snapshot() {
    let dirs = [
        TempDir::new("cluster-b1"),
        TempDir::new("cluster-b2"),
        TempDir::new("cluster-b3"),
    ];
    let fresh = TempDir::new("cluster-b3-fresh");
    runtime().block_on(async {
        // A snapshot every 10 entries, and nothing of the log kept past it.
        let mut nodes = three(&dirs, 10, 0).await;
        let l = leader_of(&[&nodes[0]]).await;
        // Node 2 or 3, whichever is not the leader, goes down and comes back on its own
        // directory: its vote and log reload, and it catches up.
        let down_id = if l == 3 { 2 } else { 3 };
        let di = nodes.iter().position(|n| n.id == down_id).expect("node");
        let down = nodes.remove(di);
        let down_addr = down.addr.to_string();
        down.stop().await;
        let li = nodes.iter().position(|n| n.id == l).expect("leader");
        let last = write(&nodes[li], 1, 35).await;
        let back = start(
            down_id,
            dirs[(down_id - 1) as usize].path(),
            &down_addr,
            10,
            0,
        )
        .await;
        applied(&back, last).await;
        assert_eq!(get(&back, "k30"), Reply::Bulk(b"v30".to_vec()));
        back.stop().await;
        // The leader has snapshotted and purged its log; a new node joins with an empty
        // directory, first as a learner, then as a voter: only the snapshot can bring it up to
        // date.
        nodes[li]
            .raft
            .wait(WAIT)
            .metrics(|m| m.purged.is_some(), "purged")
            .await
            .expect("the leader purged its log");
        let last = write(&nodes[li], 36, 3).await;
        let new = start(4, fresh.path(), "127.0.0.1:0", 10, 0).await;
        nodes[li]
            .raft
            .add_learner(4, openraft::BasicNode::new(new.addr.to_string()), true)
            .await
            .expect("node 4 joins as a learner");
        applied(&new, last).await;
        assert_eq!(get(&new, "k5"), Reply::Bulk(b"v5".to_vec()));
        assert_eq!(get(&new, "k38"), Reply::Bulk(b"v38".to_vec()));
        assert!(
            new.raft.metrics().borrow().snapshot.is_some(),
            "the empty node installed a snapshot"
        );
        assert!(fresh.path().join("raft-snapshot").exists());
        let voters: std::collections::BTreeSet<NodeId> = [1, 2, 3, 4].into();
        nodes[li]
            .raft
            .change_membership(voters, false)
            .await
            .expect("node 4 becomes a voter");
        let last = write(&nodes[li], 39, 2).await;
        applied(&new, last).await;
        assert_eq!(get(&new, "k40"), Reply::Bulk(b"v40".to_vec()));
        new.stop().await;
        for n in nodes {
            n.stop().await;
        }
    });
}

/// A frame cut short at the end of the cluster's log (a crash while it was written) is cut
/// on open, as the single node's torn tail is; the entries before it stay.
#[test]
fn a_torn_tail_of_the_cluster_log_is_cut_on_open() {
    use openraft::RaftLogReader;
    let dirs = [
        TempDir::new("cluster-c1"),
        TempDir::new("cluster-c2"),
        TempDir::new("cluster-c3"),
    ];
    let rt = runtime();
    let kept = rt.block_on(async {
        let nodes = three(&dirs, 10_000, 1000).await;
        let l = leader_of(&[&nodes[0]]).await;
        let li = nodes.iter().position(|n| n.id == l).expect("leader");
        let last = write(&nodes[li], 1, 5).await;
        for n in &nodes {
            applied(n, last).await;
        }
        for n in nodes {
            n.stop().await;
        }
        last
    });
    let path = dirs[0].path().join(log_store::LOG_FILE);
    let whole = std::fs::metadata(&path).expect("log").len();
    let mut bytes = std::fs::read(&path).expect("log");
    bytes.extend_from_slice(&[7, 0, 0, 0, 1, 2, 3]);
    std::fs::write(&path, &bytes).expect("write");
    rt.block_on(async {
        let mut store = LogStore::open(dirs[0].path()).expect("open");
        let entries = store.try_get_log_entries(0..).await.expect("read");
        assert_eq!(entries.last().map(|e| e.log_id.index), Some(kept));
    });
    assert_eq!(std::fs::metadata(&path).expect("log").len(), whole);
}

/// The cluster listener refuses a request without the secret, a body that is not a Raft
/// message, and a route it does not have, each with a status and a JSON error, and the node
/// goes on.
#[test]
fn the_cluster_listener_refuses_what_is_not_a_peers_message() {
    let dir = TempDir::new("cluster-d1");
    runtime().block_on(async {
        let node = start(1, dir.path(), "127.0.0.1:0", 10_000, 1000).await;
        let c = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let url = |p: &str| format!("http://{}{p}", node.addr);
        let no_secret = c
            .post(url("/raft/vote"))
            .body("x")
            .send()
            .await
            .expect("send");
        assert_eq!(no_secret.status(), 401);
        let garbage = c
            .post(url("/raft/append"))
            .bearer_auth(SECRET)
            .body(vec![0xc1u8; 64])
            .send()
            .await
            .expect("send");
        assert_eq!(garbage.status(), 400);
        let body: serde_json::Value =
            serde_json::from_slice(&garbage.bytes().await.expect("body")).expect("json");
        assert!(body["error"]
            .as_str()
            .is_some_and(|e| e.contains("not a Raft message")));
        let nowhere = c
            .post(url("/raft/x"))
            .bearer_auth(SECRET)
            .send()
            .await
            .expect("send");
        assert_eq!(nowhere.status(), 404);
        let get = c.get(url("/raft/vote")).send().await.expect("send");
        assert_eq!(get.status(), 405);
        // Still a node: it initializes and leads alone.
        let me = BTreeMap::from([(1u64, openraft::BasicNode::new(node.addr.to_string()))]);
        node.raft.initialize(me).await.expect("initialize");
        let only = [&node];
        assert_eq!(leader_of(&only).await, 1);
        node.stop().await;
    });
}
