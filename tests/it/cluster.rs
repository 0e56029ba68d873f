//! The replicated log's first part (issue 30): three nodes in this process, each with its own
//! data directory and cluster listener on loopback, agree on executor batches through
//! openraft; every node applies them through the state machine's door to the same state; a
//! leader that stops is replaced and the log goes on; a node that was down catches up from its
//! log, and a new, empty one joins from the leader's snapshot once the log behind it is purged.

use crate::common::sink::Sink;
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

pub(crate) const SECRET: &str = "cluster-test-secret";
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
    Batch {
        frames: frames.into(),
    }
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
    let at = tidepool::cluster::Start {
        id,
        dir,
        listen,
        secret: SECRET,
        config,
        local_http: None,
        tls: tls_of(dir),
        tunnel: None,
    };
    Node::start(at, owned, kept, None)
        .await
        .unwrap_or_else(|e| panic!("node {id}: {e}"))
}

/// The cluster's TLS, when the test put a certificate beside the node's directory
/// (`<dir>.tls/cert.pem` and `key.pem`); plain HTTP otherwise.
fn tls_of(dir: &Path) -> Option<tidepool::cluster::network::Tls> {
    let t = dir.with_extension("tls");
    let (cert, key) = (t.join("cert.pem"), t.join("key.pem"));
    cert.exists().then(|| {
        let local = "127.0.0.1:1".parse().ok();
        tidepool::cluster::network::Tls::load(&cert, &key, &cert, local).expect("TLS files")
    })
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

/// Where node `id` is among `nodes`.
fn index_of(nodes: &[Node], id: NodeId) -> usize {
    nodes
        .iter()
        .position(|n| n.id == id)
        .unwrap_or_else(|| panic!("node {id} is not among the nodes"))
}

#[test]
fn three_nodes_agree_and_a_stopped_leader_is_replaced() {
    let dirs = three_dirs("cluster-a");
    runtime().block_on(async {
        let mut nodes = three(&dirs, 10_000, 1000).await;
        let l = leader_of(&[&nodes[0]]).await;
        let li = index_of(&nodes, l);
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

/// Stops node 2 or 3, whichever does not lead (`leader`), taking it out of `nodes`: its id
/// and its cluster address, where it comes back.
async fn stop_a_follower(nodes: &mut Vec<Node>, leader: NodeId) -> (NodeId, String) {
    let down_id = if leader == 3 { 2 } else { 3 };
    let di = nodes.iter().position(|n| n.id == down_id).expect("node");
    let down = nodes.remove(di);
    let addr = down.addr.to_string();
    down.stop().await;
    (down_id, addr)
}

#[test]
fn a_node_catches_up_from_its_log_or_from_a_snapshot() {
    let dirs = three_dirs("cluster-b");
    let fresh = TempDir::new("cluster-b3-fresh");
    runtime().block_on(async {
        // A snapshot every 10 entries, and nothing of the log kept past it.
        let mut nodes = three(&dirs, 10, 0).await;
        let l = leader_of(&[&nodes[0]]).await;
        // Node 2 or 3, whichever is not the leader, goes down and comes back on its own
        // directory: its vote and log reload, and it catches up.
        let (down_id, down_addr) = stop_a_follower(&mut nodes, l).await;
        let li = index_of(&nodes, l);
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

/// Regression (the soaks' "node restarted empty that stops after a snapshot"): a follower
/// killed, emptied and started again behind a leader whose log is purged gets the leader's
/// snapshot, of several megabytes here, and then the entries after it. openraft's default
/// snapshot timeout (200 ms) was shorter than sending such a snapshot took, with its bytes
/// written as MessagePack integers: the leader gave up on every send and began again,
/// forever, while the follower, which had installed the first, got no entry after it.
#[test]
fn a_follower_restarted_empty_catches_up_past_a_large_snapshot() {
    let dirs = three_dirs("cluster-empty");
    runtime().block_on(async {
        let mut nodes = three(&dirs, 10, 0).await;
        let l = leader_of(&[&nodes[0]]).await;
        let li = index_of(&nodes, l);
        // 24 entries of 256 KB each: a state of 6 MB, snapshotted and purged twice over.
        let big = "x".repeat(256 << 10);
        let mut last = 0;
        for i in 0..24u64 {
            let done = nodes[li]
                .raft
                .client_write(batch(i + 1, &[(&format!("big{i}"), &big)]))
                .await
                .unwrap_or_else(|e| panic!("write {i}: {e}"));
            last = done.log_id.index;
        }
        nodes[li]
            .raft
            .wait(WAIT)
            .metrics(|m| m.purged.is_some(), "purged")
            .await
            .expect("the leader purged its log");
        for n in &nodes {
            applied(n, last).await;
        }
        let (down_id, addr) = stop_a_follower(&mut nodes, l).await;
        let dir = dirs[(down_id - 1) as usize].path();
        std::fs::remove_dir_all(dir).expect("empty the directory");
        std::fs::create_dir_all(dir).expect("the directory again");
        let back = start(down_id, dir, &addr, 10, 0).await;
        let li = index_of(&nodes, l);
        let last = write(&nodes[li], 100, 3).await;
        applied(&back, last).await;
        assert_eq!(get(&back, "k102"), Reply::Bulk(b"v102".to_vec()));
        assert_eq!(get(&back, "big23"), Reply::Bulk(big.clone().into_bytes()));
        // Regression: a node that kept its log (entries up to X) and was brought up to date
        // by a snapshot past X purged its whole log but left those entries in the file, then
        // appended after them: its next start refused the file ("entry S+1 follows entry
        // X"). The same node, down again while the leader writes past another snapshot,
        // comes back on its own directory, and then restarts once more.
        back.stop().await;
        let mut seq = 200;
        for i in 0..24u64 {
            nodes[li]
                .raft
                .client_write(batch(seq, &[(&format!("more{i}"), &big)]))
                .await
                .unwrap_or_else(|e| panic!("write {i}: {e}"));
            seq += 1;
        }
        let back = start(down_id, dir, &addr, 10, 0).await;
        let last = write(&nodes[li], seq, 3).await;
        applied(&back, last).await;
        back.stop().await;
        let back = start(down_id, dir, &addr, 10, 0).await;
        applied(&back, last).await;
        assert_eq!(
            get(&back, &format!("k{}", seq + 2)),
            Reply::Bulk(format!("v{}", seq + 2).into_bytes())
        );
        assert_eq!(get(&back, "more23"), Reply::Bulk(big.clone().into_bytes()));
        back.stop().await;
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
    let dirs = three_dirs("cluster-c");
    let rt = runtime();
    let kept = rt.block_on(async {
        let nodes = three(&dirs, 10_000, 1000).await;
        let l = leader_of(&[&nodes[0]]).await;
        let li = index_of(&nodes, l);
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

/// Regression: openraft purges the entries a snapshot it installs holds without waiting for
/// the state machine to have written that snapshot, so a crash between the two lost entries
/// that no snapshot on disk held. A follower catching up from a snapshot whose writing is
/// held (a slow disk) keeps its log until the snapshot is on disk.
#[test]
fn a_follower_purges_nothing_that_no_snapshot_on_its_disk_holds() {
    let dirs = three_dirs("cluster-hold");
    runtime().block_on(async {
        let mut nodes = three(&dirs, 10, 0).await;
        let l = leader_of(&[&nodes[0]]).await;
        let (down_id, addr) = stop_a_follower(&mut nodes, l).await;
        let li = index_of(&nodes, l);
        write(&nodes[li], 1, 35).await;
        nodes[li]
            .raft
            .wait(WAIT)
            .metrics(|m| m.purged.is_some_and(|p| p.index >= 20), "purged")
            .await
            .expect("the leader purged its log");
        let dir = dirs[(down_id - 1) as usize].path();
        let purged_on_disk = || {
            std::fs::read(dir.join(log_store::PURGED_FILE))
                .ok()
                .and_then(|b| log_store::decode_purged(&b).ok())
                .map(|p| p.index)
        };
        let before = purged_on_disk();
        // Released however the test ends: a held install would keep the runtime from ending.
        struct Hold(std::path::PathBuf);
        impl Drop for Hold {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let hold = Hold(dir.join("fault-hold-snapshot-install"));
        std::fs::write(&hold.0, b"").expect("hold");
        let back = start(down_id, dir, &addr, 10, 0).await;
        // The leader's snapshot arrives and waits to be written; the log stays as it was.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            purged_on_disk(),
            before,
            "the log was purged before the snapshot that holds its entries was written"
        );
        drop(hold);
        let last = write(&nodes[li], 100, 2).await;
        applied(&back, last).await;
        assert!(
            purged_on_disk().is_some_and(|p| p >= 20),
            "{:?}",
            purged_on_disk()
        );
        back.stop().await;
        for n in nodes {
            n.stop().await;
        }
    });
}

/// Entries follow one another in the cluster log's file but for one case: a crash between
/// recording a purge past the file's last entry and cutting the file back leaves the purged
/// entries before the next one, which follows the purged point. That file opens, with only
/// the live entry; the same gap without such a purge is damage, and is refused.
#[test]
fn the_cluster_log_opens_past_entries_a_snapshot_purged() {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader};
    let dir = TempDir::new("cluster-gap");
    let entry = |index: u64| Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(batch(index, &[("k", "v")])),
    };
    let mut bytes = log_store::log_header().to_vec();
    for index in [1, 2, 3, 11] {
        log_store::encode_entry(&mut bytes, &entry(index)).expect("encode");
    }
    std::fs::write(dir.path().join(log_store::LOG_FILE), &bytes).expect("write");
    let refused = LogStore::open(dir.path()).err().map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("entry 11 follows entry 3")),
        "{refused:?}"
    );
    let purged = LogId::new(CommittedLeaderId::new(1, 1), 10);
    std::fs::write(
        dir.path().join(log_store::PURGED_FILE),
        log_store::encode_purged(&purged),
    )
    .expect("write");
    runtime().block_on(async {
        let mut store = LogStore::open(dir.path()).expect("open");
        let entries = store.try_get_log_entries(0..).await.expect("read");
        let got: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, vec![11]);
    });
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
        use tidepool::cluster::network::sign;
        let now = || tidepool::clock::wall_unix_ms();
        // Unsigned, with the secret itself as a bearer token (it never travels), signed with
        // another secret, signed too long ago: refused.
        for auth in [
            None,
            Some(format!("Bearer {SECRET}")),
            Some(sign(
                "another-secret-0123456789",
                "POST",
                "/raft/vote",
                b"x",
                now(),
                1,
            )),
            Some(sign(
                SECRET,
                "POST",
                "/raft/vote",
                b"x",
                now() - 3_600_000,
                2,
            )),
            Some(sign(SECRET, "POST", "/raft/append", b"x", now(), 3)),
        ] {
            let mut r = c.post(url("/raft/vote")).body("x");
            if let Some(a) = &auth {
                r = r.header("authorization", a);
            }
            let r = r.send().await.expect("send");
            assert_eq!(r.status(), 401, "{auth:?}");
        }
        let body = vec![0xc1u8; 64];
        let signed = sign(SECRET, "POST", "/raft/append", &body, now(), 4);
        let garbage = c
            .post(url("/raft/append"))
            .header("authorization", &signed)
            .body(body.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(garbage.status(), 400);
        let answer: serde_json::Value =
            serde_json::from_slice(&garbage.bytes().await.expect("body")).expect("json");
        assert!(answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("not a Raft message")));
        // The same signed request again is a replay.
        let replay = c
            .post(url("/raft/append"))
            .header("authorization", &signed)
            .body(body)
            .send()
            .await
            .expect("send");
        assert_eq!(replay.status(), 401);
        // Signed for one body, sent with another: refused.
        let swapped = c
            .post(url("/raft/append"))
            .header(
                "authorization",
                sign(SECRET, "POST", "/raft/append", b"signed", now(), 6),
            )
            .body("sent")
            .send()
            .await
            .expect("send");
        assert_eq!(swapped.status(), 401);
        // Regression (review): a fresh-looking forged signature made the node read and hash
        // the body it announced (up to CLUSTER_MESSAGE_BYTES_MAX) before checking it. The
        // head's signature is checked first: 100 MB announced, none sent, refused at once.
        let forged = format!(
            "TidepoolCluster {}.0000000000000007.{}.{}",
            now(),
            "0".repeat(64),
            "f".repeat(64)
        );
        let mut raw = tokio::net::TcpStream::connect(node.addr).await.expect("connect");
        let head = format!(
            "POST /raft/append HTTP/1.1\r\nhost: x\r\nauthorization: {forged}\r\ncontent-length: 100000000\r\n\r\n"
        );
        tokio::io::AsyncWriteExt::write_all(&mut raw, head.as_bytes())
            .await
            .expect("write");
        let mut answer = vec![0u8; 12];
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_exact(&mut raw, &mut answer),
        )
        .await
        .expect("answered before any of the body came")
        .expect("read");
        assert_eq!(&answer, b"HTTP/1.1 401");
        let nowhere = c
            .post(url("/raft/x"))
            .header(
                "authorization",
                sign(SECRET, "POST", "/raft/x", b"", now(), 5),
            )
            .send()
            .await
            .expect("send");
        assert_eq!(nowhere.status(), 404);
        // Silent connections take the listener's places; past CLUSTER_CONNECTIONS_MAX one
        // more is closed at once, and nothing grows (each would be closed after
        // CLUSTER_READ_TIMEOUT_MS without a whole head).
        let mut silent = Vec::new();
        for _ in 0..tidepool::config::CLUSTER_CONNECTIONS_MAX {
            silent.push(
                tokio::net::TcpStream::connect(node.addr)
                    .await
                    .expect("connect"),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut extra = tokio::net::TcpStream::connect(node.addr)
            .await
            .expect("connect");
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read(&mut extra, &mut byte),
        )
        .await
        .expect("the connection past the cap is closed, not left waiting");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        drop(silent);
        tokio::time::sleep(Duration::from_millis(100)).await;
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

pub(crate) const ADMIN: &str = "cluster-test-admin";

/// Three temporary data directories, `tag` followed by 1, 2 and 3.
pub(crate) fn three_dirs(tag: &str) -> [TempDir; 3] {
    [1, 2, 3].map(|i| TempDir::new(&format!("{tag}{i}")))
}

/// Node `i`'s flags in a cluster whose nodes listen for peers on `ports`.
pub(crate) fn node_flags(i: usize, ports: &[u16; 3]) -> Vec<String> {
    let peers: Vec<String> = (0..3)
        .filter(|j| *j != i)
        .map(|j| format!("{}=127.0.0.1:{}", j + 1, ports[j]))
        .collect();
    vec![
        "--admin-token".into(),
        ADMIN.into(),
        "--node-id".into(),
        (i + 1).to_string(),
        "--cluster-listen".into(),
        format!("127.0.0.1:{}", ports[i]),
        "--peers".into(),
        peers.join(","),
        "--cluster-secret".into(),
        SECRET.into(),
    ]
}

fn ok_canon() -> Canon {
    Canon::s("OK")
}

/// Node `i`, snapshotting every 20 entries (so that snapshots are built while writes are in
/// flight).
fn serve_node(dir: &Path, i: usize, ports: &[u16; 3]) -> Server {
    let flags = node_flags(i, ports);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Server::try_start_env(dir, &flags, &[("TIDEPOOL_CLUSTER_SNAPSHOT_EVERY", "20")])
        .unwrap_or_else(|e| panic!("node {}: {e}", i + 1))
}

/// Three servers, `start(i)` each (node `i + 1`), made one cluster: node 1 first, its
/// credentials copied to the others (the tokens of databases derive from them), then
/// `POST /_admin/cluster/init` on node 1; the servers, and the index of the one that leads.
pub(crate) fn form_cluster(
    dirs: &[TempDir; 3],
    start: impl Fn(usize) -> Server,
) -> ([Option<Server>; 3], usize) {
    let first = start(0);
    for d in &dirs[1..] {
        std::fs::copy(
            dirs[0].path().join("credentials.json"),
            d.path().join("credentials.json"),
        )
        .expect("copy credentials");
    }
    let servers = [Some(first), Some(start(1)), Some(start(2))];
    let init = Http::connect(&servers[0].as_ref().expect("node 1").addr, ADMIN)
        .post("/_admin/cluster/init", b"");
    assert_eq!(init.status, 200, "{}", String::from_utf8_lossy(&init.body));
    let li = leader_among(&servers.iter().map(Option::as_ref).collect::<Vec<_>>());
    (servers, li)
}

fn status(s: &Server) -> serde_json::Value {
    let r = Http::connect(&s.addr, ADMIN).get("/_admin/cluster/status");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).expect("status JSON")
}

/// The index among `servers` of the one that takes writes, within the wait.
fn leader_among(servers: &[Option<&Server>]) -> usize {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < until {
        for (i, s) in servers.iter().enumerate() {
            if let Some(s) = s {
                if status(s)["takes_writes"] == true {
                    return i;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no node took writes within 20 s");
}

/// Polls `s` until `cmd` answers `want` (a follower applies what the leader committed a moment
/// later).
fn eventually(s: &Server, cmd: &[&str], want: Canon) {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let mut got = Canon::Nil;
    while std::time::Instant::now() < until {
        // A node that restarts itself in place (deposed) listens again a moment later.
        let Some(mut c) = Http::try_connect(&s.addr, TOKEN) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        // It may also close the connection between the connect and the answer, and not listen
        // for the helper's one reconnection (which panics then): that try is no answer.
        let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.cmd_str(cmd)));
        let Ok(answer) = asked else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        got = answer;
        if got == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{cmd:?} on {} answered {got:?}, not {want:?}", s.addr);
}

/// Three server processes on loopback form a cluster (`--node-id`, `--cluster-listen`,
/// `--peers`, `POST /_admin/cluster/init`): the leader takes every kind of write, the
/// followers serve them to readers over REST and RESP, forward writes (REST and RESP) and
/// relay the delivery and admin APIs' writes to the leader, a
/// database created on the leader opens on a follower with its token, and when the leader is
/// killed the other two elect one that goes on; the killed node comes back on its directory
/// and catches up.
#[test]
fn three_servers_form_a_cluster_and_outlive_their_leader() {
    let dirs = three_dirs("cluster-s");
    let ports = [free_port(), free_port(), free_port()];
    let (mut servers, li) = form_cluster(&dirs, |i| serve_node(dirs[i].path(), i, &ports));
    let leader = servers[li].as_ref().expect("leader");
    let mut c = leader.client();
    assert_eq!(c.cmd_str(&["SET", "a", "1"]), Canon::s("OK"));
    assert_eq!(c.cmd_str(&["INCR", "n"]), Canon::Int(1));
    assert_eq!(
        c.cmd_str(&[
            "EVAL",
            "redis.call('set', KEYS[1], 'lua'); return 1",
            "1",
            "s"
        ]),
        Canon::Int(1)
    );
    let created =
        Http::connect(&leader.addr, ADMIN).post("/_admin/databases", br#"{"name":"two"}"#);
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let two: serde_json::Value = serde_json::from_slice(&created.body).expect("JSON");
    let two_token = two["token"].as_str().expect("token").to_string();
    assert_eq!(
        Http::connect(&leader.addr, &two_token).cmd_str(&["SET", "t", "2"]),
        Canon::s("OK")
    );
    for (i, s) in servers.iter().enumerate() {
        let s = s.as_ref().expect("node");
        if i == li {
            continue;
        }
        eventually(s, &["GET", "s"], Canon::s("lua"));
        assert_eq!(s.client().cmd_str(&["GET", "a"]), Canon::s("1"));
        eventually(s, &["GET", "t"], Canon::Nil);
        let mut other = Http::connect(&s.addr, &two_token);
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while other.cmd_str(&["GET", "t"]) != Canon::s("2") {
            assert!(
                std::time::Instant::now() < until,
                "database two never opened on node {}",
                i + 1
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // A REST write sent to a follower is forwarded to the leader and answered as the
        // leader answers it, pipelines and transactions too; the follower then serves it.
        let key = format!("from-{}", i + 1);
        assert_eq!(s.client().cmd_str(&["SET", &key, "v"]), Canon::s("OK"));
        // Answered here, so visible here at once, without a sync token.
        assert_eq!(s.client().cmd_str(&["GET", &key]), Canon::s("v"));
        // Every REST door of a write is forwarded: the path, the body as the last argument,
        // a script, and base64 answers as they would come from the leader.
        let path = s.client().get(&format!("/set/{key}-path/p"));
        assert_eq!(String::from_utf8_lossy(&path.body), r#"{"result":"OK"}"#);
        let last = s
            .client()
            .post(&format!("/set/{key}-last"), b"from the body");
        assert_eq!(String::from_utf8_lossy(&last.body), r#"{"result":"OK"}"#);
        assert_eq!(
            s.client().cmd_str(&[
                "EVAL",
                "return redis.call('INCR', KEYS[1])",
                "1",
                &format!("{key}-lua")
            ]),
            Canon::Int(1)
        );
        let b64 = s.client().request(
            "POST",
            "/",
            &[("upstash-encoding", "base64")],
            format!(r#"["SET","{key}-b64","v"]"#).as_bytes(),
        );
        assert_eq!(String::from_utf8_lossy(&b64.body), r#"{"result":"OK"}"#);
        assert_eq!(
            s.client().cmd_str(&[
                "MGET",
                &format!("{key}-path"),
                &format!("{key}-last"),
                &format!("{key}-b64")
            ]),
            Canon::Arr(vec![
                Canon::s("p"),
                Canon::s("from the body"),
                Canon::s("v")
            ])
        );
        let piped = s.client().post(
            "/pipeline",
            format!(r#"[["INCR","{key}-n"],["INCR","{key}-n"],["GET","a"]]"#).as_bytes(),
        );
        assert_eq!(
            String::from_utf8_lossy(&piped.body),
            r#"[{"result":1},{"result":2},{"result":"1"}]"#
        );
        let tx = s.client().post(
            "/multi-exec",
            format!(r#"[["SET","{key}-t","1"],["INCR","{key}-t"]]"#).as_bytes(),
        );
        assert_eq!(
            String::from_utf8_lossy(&tx.body),
            r#"[{"result":"OK"},{"result":2}]"#
        );
        assert_eq!(leader.client().cmd_str(&["GET", &key]), Canon::s("v"));
        // The answer's sync token, shown back to the follower, makes it wait until it has
        // applied that write: read your writes on any node.
        let token = tx
            .header("upstash-sync-token")
            .expect("sync token")
            .to_string();
        let read = s.client().request(
            "POST",
            "/",
            &[("upstash-sync-token", token.as_str())],
            format!(r#"["GET","{key}-t"]"#).as_bytes(),
        );
        assert_eq!(String::from_utf8_lossy(&read.body), r#"{"result":"2"}"#);
        // Over RESP a follower answers reads and forwards writes too (what needs the
        // connection's state moves it to the leader: its own test below).
        let mut r = Redis::connect_addr(s.resp_addr.as_deref().expect("RESP"));
        assert_eq!(r.cmd_str(&["AUTH", TOKEN]), Canon::s("OK"));
        assert_eq!(r.cmd_str(&["GET", "n"]), Canon::s("1"));
        assert_eq!(
            r.cmd_str(&["SET", &format!("{key}-resp"), "y"]),
            Canon::s("OK")
        );
        assert_eq!(
            leader.client().cmd_str(&["GET", &format!("{key}-resp")]),
            Canon::s("y")
        );
        // The script cache is the leader's, as the scripts are: a script loaded through a
        // follower runs by its digest through the same follower (redis-py's Script objects
        // load on NOSCRIPT, then run by digest again).
        let sha = r.cmd_str(&["SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"]);
        let Canon::Str(sha) = sha else {
            panic!("SCRIPT LOAD answered {sha:?}")
        };
        let sha = String::from_utf8_lossy(&sha).into_owned();
        assert_eq!(r.cmd_str(&["EVALSHA", &sha, "1", "n"]), Canon::s("1"));
        assert_eq!(
            r.cmd_str(&["SCRIPT", "EXISTS", &sha]),
            Canon::Arr(vec![Canon::Int(1)])
        );
    }
    // A publish on any node reaches the subscribers of every node (publishes are not
    // logged: a follower forwards one to the leader, which sends it on to every node).
    let fi = (li + 1) % 3;
    let other = (li + 2) % 3;
    // A RESP subscriber to `news` on node `i`.
    let subscribe = |i: usize| {
        let mut s = Redis::connect_addr(
            servers[i]
                .as_ref()
                .expect("node")
                .resp_addr
                .as_deref()
                .expect("RESP"),
        );
        assert_eq!(s.cmd_str(&["AUTH", TOKEN]), ok_canon());
        s.send_raw(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nnews\r\n");
        assert!(s.read().is_some(), "the subscription's confirmation");
        s
    };
    let mut sub = subscribe(fi);
    for (from, text) in [(li, "from the leader"), (other, "from a follower")] {
        let n = servers[from]
            .as_ref()
            .expect("node")
            .client()
            .cmd_str(&["PUBLISH", "news", text]);
        assert!(matches!(n, Canon::Int(_)), "{n:?}");
        assert_eq!(
            sub.read(),
            Some(Canon::Arr(vec![
                Canon::s("message"),
                Canon::s("news"),
                Canon::s(text)
            ])),
        );
    }
    // In the order they were published, on every node, whichever node each was sent to.
    let mut subs = vec![sub, subscribe(li), subscribe(other)];
    let mut pcs: Vec<Http> = [li, fi, other]
        .iter()
        .map(|i| servers[*i].as_ref().expect("node").client())
        .collect();
    for n in 0..30 {
        let sent = pcs[n % 3].cmd_str(&["PUBLISH", "news", &format!("n{n}")]);
        assert!(matches!(sent, Canon::Int(_)), "{sent:?}");
    }
    for s in &mut subs {
        for n in 0..30 {
            assert_eq!(
                s.read(),
                Some(Canon::Arr(vec![
                    Canon::s("message"),
                    Canon::s("news"),
                    Canon::s(&format!("n{n}"))
                ])),
            );
        }
    }
    // A follower relays the delivery and admin APIs' writes to the leader whole, and
    // answers their reads itself once it has applied them.
    let creds: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dirs[0].path().join("credentials.json")).expect("credentials"),
    )
    .expect("JSON");
    let qstash = creds["qstash_token"].as_str().expect("QStash token");
    let follower = servers[fi].as_ref().expect("follower");
    let group = Http::connect(&follower.addr, qstash).post(
        "/v2/topics/grp/endpoints",
        br#"{"endpoints":[{"url":"http://127.0.0.1:9/x"}]}"#,
    );
    assert_eq!(
        group.status,
        200,
        "{}",
        String::from_utf8_lossy(&group.body)
    );
    let three =
        Http::connect(&follower.addr, ADMIN).post("/_admin/databases", br#"{"name":"three"}"#);
    assert_eq!(
        three.status,
        201,
        "{}",
        String::from_utf8_lossy(&three.body)
    );
    let listed = Http::connect(&leader.addr, ADMIN).get("/_admin/databases/three");
    assert_eq!(listed.status, 200);
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let g = Http::connect(&follower.addr, qstash).get("/v2/topics/grp");
        if g.status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the URL group never reached the follower"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // /readyz, /metrics and INFO replication say who leads and whether this node takes
    // writes.
    for (i, s) in servers.iter().enumerate() {
        let s = s.as_ref().expect("node");
        let Canon::Str(info) = s.client().cmd_str(&["INFO", "replication"]) else {
            panic!("INFO answers text");
        };
        let info = String::from_utf8_lossy(&info).into_owned();
        let role = if i == li { "role:master" } else { "role:slave" };
        assert!(info.contains(role), "{info}");
        // WAIT: the leader counts the followers that hold all it has; a follower 0.
        if i == li {
            eventually(s, &["WAIT", "2", "0"], Canon::Int(2));
        } else {
            assert_eq!(s.client().cmd_str(&["WAIT", "1", "0"]), Canon::Int(0));
        }
        assert!(
            info.contains(&format!("tidepool_cluster_leader_id:{}", li + 1)),
            "{info}"
        );
        let ready = Http::connect(&s.addr, "").get("/readyz");
        let ready: serde_json::Value = serde_json::from_slice(&ready.body).expect("JSON");
        assert_eq!(ready["writable"], i == li, "node {}: {ready}", i + 1);
        assert_eq!(ready["cluster"]["leader"], li as u64 + 1);
        let m = Http::connect(&s.addr, ADMIN).get("/metrics");
        let text = String::from_utf8_lossy(&m.body);
        assert!(
            text.contains(&format!("tidepool_cluster_leading {}", u8::from(i == li))),
            "{text}"
        );
        assert!(text.contains(&format!("tidepool_cluster_leader_id {}", li + 1)));
    }
    // WAIT over REST on the leader waits, as over RESP, for the followers to hold what the
    // leader had when it began. One follower stopped: a write commits on the other, and the
    // WAIT for two answers once the stopped one is resumed and has caught up; with a
    // timeout, it answers the one that holds it. (Regression: over REST it answered the
    // count at once, 1.)
    let paused = (li + 1) % 3;
    let signal = |sig: &str| {
        let pid = servers[paused].as_ref().expect("follower").child.id();
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    assert_eq!(leader.client().cmd_str(&["SET", "waited", "1"]), ok_canon());
    // Over RESP too; and a WAIT whose user is deleted meanwhile closes its connection, as a
    // revoked credential closes an idle one. (Regression: it waited on.)
    assert_eq!(
        leader
            .client()
            .cmd_str(&["ACL", "SETUSER", "wes", "on", ">pw", "~*", "+@all"]),
        ok_canon()
    );
    let mut wes = Redis::connect_addr(leader.resp_addr.as_deref().expect("RESP"));
    assert_eq!(wes.cmd_str(&["AUTH", "wes", "pw"]), ok_canon());
    assert_eq!(wes.cmd_str(&["WAIT", "2", "200"]), Canon::Int(1));
    wes.send_raw(b"*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$1\r\n0\r\n");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        leader.client().cmd_str(&["ACL", "DELUSER", "wes"]),
        Canon::Int(1)
    );
    assert!(
        wes.closed_within(Duration::from_secs(10)),
        "a WAIT of a deleted user kept its connection open"
    );
    assert_eq!(
        leader.client().cmd_str(&["WAIT", "2", "300"]),
        Canon::Int(1)
    );
    let addr = leader.addr.clone();
    let waiting =
        std::thread::spawn(move || Http::connect(&addr, TOKEN).cmd_str(&["WAIT", "2", "0"]));
    std::thread::sleep(Duration::from_millis(200));
    signal("-CONT");
    assert_eq!(waiting.join().expect("the WAIT"), Canon::Int(2));
    // A script sent to a follower runs on the leader; SCRIPT KILL sent to a follower, over
    // REST or RESP, stops it there. (Regression: the follower answered NOTBUSY, as it runs
    // no script itself.)
    let fol = &servers[(li + 2) % 3].as_ref().expect("follower").addr;
    for over_resp in [false, true] {
        let addr = fol.clone();
        let script = std::thread::spawn(move || {
            Http::connect(&addr, TOKEN).cmd_str(&["EVAL", "while true do end", "0"])
        });
        let killed = (0..200).find_map(|_| {
            std::thread::sleep(Duration::from_millis(25));
            let mut c = Http::connect(fol, TOKEN);
            let r = if over_resp {
                c.resp_cmd(&[b"SCRIPT".to_vec(), b"KILL".to_vec()])
                    .expect("RESP")
            } else {
                c.cmd_str(&["SCRIPT", "KILL"])
            };
            (r != Canon::Err("NOTBUSY No scripts in execution right now.".into())).then_some(r)
        });
        assert_eq!(killed, Some(ok_canon()), "over RESP: {over_resp}");
        let ended = script.join().expect("the script");
        assert!(
            matches!(&ended, Canon::Err(e) if e.contains("killed by user")),
            "{ended:?}"
        );
    }
    // `tidepool cluster status` is the same route from the command line.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args(["cluster", "status", "--admin-token", ADMIN, "--url"])
        .arg(format!("http://{}", leader.addr))
        .output()
        .expect("tidepool cluster status");
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(shown["role"], "leader", "{shown}");
    // Writers in parallel, so the leader snapshots while batches it applied are not yet
    // committed: its snapshot must hold only what was committed (before, it held what it had
    // applied, and the node refused everything after a restart from it).
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let addr = leader.addr.clone();
            std::thread::spawn(move || {
                let mut c = Http::connect(&addr, TOKEN);
                for _ in 0..60 {
                    assert!(matches!(c.cmd_str(&["INCR", "many"]), Canon::Int(_)));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("a writer");
    }
    // The leader is killed: the other two elect one, which takes writes.
    servers[li].take().expect("leader").kill9();
    let l2 = leader_among(&servers.iter().map(Option::as_ref).collect::<Vec<_>>());
    let leader = servers[l2].as_ref().expect("new leader");
    assert_eq!(leader.client().cmd_str(&["INCR", "n"]), Canon::Int(2));
    assert_eq!(leader.client().cmd_str(&["SET", "c", "3"]), Canon::s("OK"));
    // The killed node comes back on its directory, follows, and catches up.
    let back = serve_node(dirs[li].path(), li, &ports);
    eventually(&back, &["GET", "c"], Canon::s("3"));
    assert_eq!(back.client().cmd_str(&["GET", "many"]), Canon::s("240"));
    assert!(
        dirs[li].path().join("cluster/raft-snapshot").exists(),
        "the killed leader had snapshotted"
    );
    assert_eq!(back.client().cmd_str(&["GET", "n"]), Canon::s("2"));
    assert_eq!(status(&back)["takes_writes"], false);
}

/// The cluster flags are checked together, and a cluster node refuses a data directory that
/// holds a single server's log rather than set it aside.
/// RESP on a follower: a command whose state lives on the node that runs the connection's
/// commands (MULTI, WATCH, a blocking command that may wait, MONITOR, WAIT) moves the connection to
/// the leader, which runs it as one of its own from then on, with its credential, name and
/// protocol; the follower carries the bytes, the moving command's and every one after it
/// (a pipeline cut in the middle of a request too). Before, such a follower refused a
/// transaction that wrote and every blocking command.
#[test]
fn a_followers_resp_connection_moves_to_the_leader_for_what_needs_its_state() {
    let dirs = three_dirs("cluster-move");
    let ports = [free_port(), free_port(), free_port()];
    let (mut servers, li) = form_cluster(&dirs, |i| serve_node(dirs[i].path(), i, &ports));
    let (fi, other) = ((li + 1) % 3, (li + 2) % 3);
    let follower_resp = servers[fi]
        .as_ref()
        .and_then(|s| s.resp_addr.clone())
        .expect("the follower's RESP address");
    let resp = || {
        let mut r = Redis::connect_addr(&follower_resp);
        assert_eq!(r.cmd_str(&["AUTH", TOKEN]), ok_canon());
        r
    };
    let role = |r: &mut Redis| match r.cmd_str(&["INFO", "replication"]) {
        Canon::Str(b) => String::from_utf8_lossy(&b)
            .lines()
            .find(|l| l.starts_with("role:"))
            .unwrap_or_default()
            .to_string(),
        other => panic!("INFO answered {other:?}"),
    };
    let node = |i: usize| servers[i].as_ref().expect("node");
    // A transaction that writes: the connection moves with its name, the leader runs it, and
    // its write reaches every node.
    let mut t = resp();
    assert_eq!(t.cmd_str(&["CLIENT", "SETNAME", "mover"]), ok_canon());
    assert_eq!(role(&mut t), "role:slave");
    assert_eq!(t.cmd_str(&["MULTI"]), ok_canon());
    assert_eq!(t.cmd_str(&["SET", "tx", "1"]), Canon::s("QUEUED"));
    assert_eq!(t.cmd_str(&["INCR", "tx"]), Canon::s("QUEUED"));
    assert_eq!(
        t.cmd_str(&["EXEC"]),
        Canon::Arr(vec![ok_canon(), Canon::Int(2)])
    );
    assert_eq!(
        role(&mut t),
        "role:master",
        "the connection runs on the leader"
    );
    assert_eq!(t.cmd_str(&["CLIENT", "GETNAME"]), Canon::s("mover"));
    eventually(node(fi), &["GET", "tx"], Canon::s("2"));
    // WATCH, broken by a write sent to the other follower (which forwards it to the leader).
    let mut w = resp();
    assert_eq!(w.cmd_str(&["WATCH", "w"]), ok_canon());
    assert_eq!(
        node(other).client().cmd_str(&["SET", "w", "theirs"]),
        ok_canon()
    );
    assert_eq!(w.cmd_str(&["MULTI"]), ok_canon());
    assert_eq!(w.cmd_str(&["SET", "w", "mine"]), Canon::s("QUEUED"));
    assert_eq!(w.cmd_str(&["EXEC"]), Canon::Nil, "a broken WATCH");
    assert_eq!(node(li).client().cmd_str(&["GET", "w"]), Canon::s("theirs"));
    // A blocking pop without a timeout, served by a push sent to the other follower.
    let addr = follower_resp.clone();
    let waiter = std::thread::spawn(move || {
        let mut b = Redis::connect_addr(&addr);
        assert_eq!(b.cmd_str(&["AUTH", TOKEN]), Canon::s("OK"));
        b.cmd_str(&["BLPOP", "q", "0"])
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        node(other).client().cmd_str(&["RPUSH", "q", "v"]),
        Canon::Int(1)
    );
    assert_eq!(
        waiter.join().expect("the waiting client"),
        Canon::Arr(vec![Canon::s("q"), Canon::s("v")])
    );
    // One write holding a command answered here, the moving MULTI, the rest of the
    // transaction, and a GET cut in the middle of its key's length line: the second write
    // ends it, on the leader.
    let mut p = resp();
    p.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\np\r\n$1\r\n1\r\n*1\r\n$5\r\nMULTI\r\n*2\r\n$4\r\nINCR\r\n$1\r\np\r\n*1\r\n$4\r\nEXEC\r\n*2\r\n$3\r\nGET\r\n$1");
    assert_eq!(p.read(), Some(ok_canon()));
    assert_eq!(p.read(), Some(ok_canon()));
    assert_eq!(p.read(), Some(Canon::s("QUEUED")));
    assert_eq!(p.read(), Some(Canon::Arr(vec![Canon::Int(2)])));
    p.send_raw(b"\r\np\r\n");
    assert_eq!(p.read(), Some(Canon::s("2")));
    // MONITOR shows the leader's commands, those the followers forward to it too.
    let mut m = resp();
    assert_eq!(m.cmd_str(&["MONITOR"]), ok_canon());
    assert_eq!(
        node(other).client().cmd_str(&["SET", "seen", "1"]),
        ok_canon()
    );
    let mut lines = Vec::new();
    while !lines
        .iter()
        .any(|l: &String| l.contains("\"SET\" \"seen\" \"1\""))
    {
        assert!(
            lines.len() < 50,
            "the monitor never showed the SET: {lines:?}"
        );
        match m.read() {
            Some(Canon::Str(l)) => lines.push(String::from_utf8_lossy(&l).into_owned()),
            other => panic!("the monitor answered {other:?}"),
        }
    }
    // WAIT moves too, and on the leader waits for the followers to hold what it had when
    // it began: both do, soon; asked for more replicas than there are, it answers how many
    // hold it once its timeout passes.
    let mut wt = resp();
    assert_eq!(wt.cmd_str(&["SET", "waited", "1"]), ok_canon());
    assert_eq!(wt.cmd_str(&["WAIT", "2", "0"]), Canon::Int(2));
    assert_eq!(wt.cmd_str(&["WAIT", "5", "200"]), Canon::Int(2));
    assert_eq!(
        wt.cmd_str(&["WAIT", "x", "0"]),
        Canon::Err("ERR value is not an integer or out of range".into())
    );
    // Regression (review): a WATCH held on the follower (here sent while subscribed, so the
    // connection did not move then) was dropped when MULTI moved the connection, and EXEC
    // overwrote a key another client had changed. It moves as a broken watch: EXEC fails,
    // as when a watched key changed.
    let mut hw = resp();
    assert!(matches!(hw.cmd_str(&["HELLO", "3"]), Canon::Arr(_)));
    assert!(matches!(hw.cmd_str(&["SUBSCRIBE", "ch"]), Canon::Arr(_)));
    assert_eq!(hw.cmd_str(&["WATCH", "wk"]), ok_canon());
    assert!(matches!(hw.cmd_str(&["UNSUBSCRIBE", "ch"]), Canon::Arr(_)));
    assert_eq!(
        node(other).client().cmd_str(&["SET", "wk", "theirs"]),
        ok_canon()
    );
    assert_eq!(hw.cmd_str(&["MULTI"]), ok_canon());
    assert_eq!(hw.cmd_str(&["SET", "wk", "mine"]), Canon::s("QUEUED"));
    assert_eq!(
        hw.cmd_str(&["EXEC"]),
        Canon::Nil,
        "a WATCH lost in the move"
    );
    assert_eq!(
        node(li).client().cmd_str(&["GET", "wk"]),
        Canon::s("theirs")
    );
    // The connection keeps its id on the leader (ids are the cluster's), so CLIENT KILL ID
    // on the follower reaches the moved connection, and nothing else.
    let Canon::Int(id) = hw.cmd_str(&["CLIENT", "ID"]) else {
        panic!("CLIENT ID")
    };
    let mut bystander = resp();
    assert_eq!(
        bystander.cmd_str(&["CLIENT", "KILL", "ID", &id.to_string()]),
        Canon::Int(1)
    );
    assert_eq!(hw.read(), None, "the moved connection was killed");
    assert_eq!(bystander.cmd_str(&["PING"]), Canon::s("PONG"));
    // Regression (review): a burst of moves past the leader's cluster listener's cap had
    // some refused ("could not move the connection"). They wait their turn now.
    let burst: Vec<_> = (0..80)
        .map(|i| {
            let addr = follower_resp.clone();
            std::thread::spawn(move || {
                let mut b = Redis::connect_addr(&addr);
                assert_eq!(b.cmd_str(&["AUTH", TOKEN]), Canon::s("OK"));
                b.cmd_str(&["BLPOP", &format!("burst{i}"), "0.2"])
            })
        })
        .collect();
    for b in burst {
        assert_eq!(b.join().expect("a client of the burst"), Canon::Nil);
    }
    // The follower counts what it moved.
    let metrics = Http::connect(&node(fi).addr, ADMIN).get("/metrics");
    let moved: u64 = metrics
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("tidepool_resp_connections_moved_total "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the moved connections' count");
    assert_eq!(moved, 87, "{}", metrics.text());
    // Reads and plain writes stay on the follower's own connection.
    let mut plain = resp();
    assert_eq!(plain.cmd_str(&["SET", "plain", "1"]), ok_canon());
    assert_eq!(role(&mut plain), "role:slave");
    // When the leader dies, a moved connection closes (its client reconnects); the
    // follower's own connections stay.
    servers[li].take().expect("leader").kill9();
    let closed = t.read();
    assert_eq!(closed, None, "a moved connection outlived its leader");
    assert_eq!(plain.cmd_str(&["GET", "tx"]), Canon::s("2"));
}

/// Regression (review): a move opened to a leader that had stopped answering (frozen) waited
/// all of CLUSTER_FORWARD_TIMEOUT_MS (30 s), even once another node led. It gives up when
/// the follower follows another leader, saying so; sent again, the command moves to the new
/// one (or runs on the follower, if it is the one elected).
#[test]
fn a_move_to_a_frozen_leader_gives_up_once_another_leads() {
    let dirs = three_dirs("cluster-frozen");
    let ports = [free_port(), free_port(), free_port()];
    let (servers, li) = form_cluster(&dirs, |i| serve_node(dirs[i].path(), i, &ports));
    let fi = (li + 1) % 3;
    let follower_resp = servers[fi]
        .as_ref()
        .and_then(|s| s.resp_addr.clone())
        .expect("the follower's RESP address");
    let leader_pid = servers[li].as_ref().expect("leader").child.id().to_string();
    let signal = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &leader_pid])
            .status()
            .expect("kill")
    };
    signal("-STOP");
    let mut c = Redis::connect_addr(&follower_resp);
    assert_eq!(c.cmd_str(&["AUTH", TOKEN]), Canon::s("OK"));
    let gave_up = c.cmd_str(&["BLPOP", "q", "1"]);
    // Sent again once a leader is known (while none is, the follower refuses it).
    let mut moved = Canon::Nil;
    for _ in 0..100 {
        let mut again = Redis::connect_addr(&follower_resp);
        assert_eq!(again.cmd_str(&["AUTH", TOKEN]), Canon::s("OK"));
        moved = again.cmd_str(&["BLPOP", "q", "1"]);
        if !matches!(&moved, Canon::Err(e) if e.contains("takes no writes")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    signal("-CONT");
    assert!(
        matches!(&gave_up, Canon::Err(e) if e.contains("follows that leader no more")),
        "{gave_up:?}"
    );
    assert_eq!(moved, Canon::Nil);
}

/// A write of tens of megabytes commits, and so does every write after it. openraft 0.9 gives
/// an append one heartbeat (100 ms) to be answered before it sends it again; a follower takes
/// longer than that to read, check and sync a batch this large, so the leader used to send it
/// again and again, and nothing after it ever committed. Eight writers of 3 MB run beside it,
/// as a few of those at once also stalled a debug build under load.
#[test]
fn a_write_of_tens_of_megabytes_commits_and_so_do_the_writes_after_it() {
    const BIG: usize = 40 << 20;
    let dirs = three_dirs("cluster-big");
    let ports = [free_port(), free_port(), free_port()];
    let (servers, li) = form_cluster(&dirs, |i| serve_node(dirs[i].path(), i, &ports));
    let leader = servers[li].as_ref().expect("leader");
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let addr = leader.addr.clone();
            std::thread::spawn(move || {
                let value = "m".repeat(3 << 20);
                Http::connect(&addr, TOKEN).cmd_str(&["SET", &format!("m{i}"), &value])
            })
        })
        .collect();
    let big = "b".repeat(BIG);
    let r = leader.client().cmd_str(&["SET", "big", &big]);
    if r != ok_canon() {
        for s in servers.iter().flatten() {
            eprintln!("==== {}\n{}", s.addr, s.stderr());
        }
    }
    assert_eq!(r, ok_canon());
    for w in writers {
        assert_eq!(w.join().expect("writer"), ok_canon());
    }
    assert_eq!(leader.client().cmd_str(&["SET", "after", "1"]), ok_canon());
    for s in servers.iter().flatten() {
        eventually(s, &["GET", "after"], Canon::s("1"));
        eventually(s, &["STRLEN", "big"], Canon::Int(BIG as i64));
        eventually(s, &["STRLEN", "m7"], Canon::Int(3 << 20));
    }
    // A follower that was down while three writes of 30 MiB went by catches up: the entries
    // it lacks pass CLUSTER_APPEND_BYTES_TARGET together, so the leader is told to send them
    // a few at a time (openraft's hint), each append in time.
    let mut servers = servers;
    let fi = (li + 1) % 3;
    servers[fi].take().expect("a follower").kill9();
    let leader = servers[li].as_ref().expect("leader");
    let chunk = "c".repeat(30 << 20);
    for k in ["c1", "c2", "c3"] {
        assert_eq!(leader.client().cmd_str(&["SET", k, &chunk]), ok_canon());
    }
    assert_eq!(leader.client().cmd_str(&["SET", "last", "1"]), ok_canon());
    let back = serve_node(dirs[fi].path(), fi, &ports);
    eventually(&back, &["GET", "last"], Canon::s("1"));
    eventually(&back, &["STRLEN", "c2"], Canon::Int(30 << 20));
}

#[test]
fn cluster_flags_are_checked_and_a_single_servers_directory_is_refused() {
    let dir = TempDir::new("cluster-flags");
    let err = Server::try_start(dir.path(), &["--node-id", "1"])
        .err()
        .unwrap_or_default();
    assert!(err.contains("--cluster-listen"), "{err}");
    let err = Server::try_start(dir.path(), &["--peers", "2=127.0.0.1:1"])
        .err()
        .unwrap_or_default();
    assert!(err.contains("need --node-id"), "{err}");
    let single = Server::start(dir.path(), &[]);
    single.client().cmd_str(&["SET", "k", "v"]);
    single.kill9();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let err = Server::try_start(
        dir.path(),
        &[
            "--node-id",
            "1",
            "--cluster-listen",
            &listen,
            "--cluster-secret",
            SECRET,
        ],
    )
    .err()
    .unwrap_or_default();
    assert!(err.contains("single server"), "{err}");
    // A TLS certificate a peer would refuse stops the start, saying why: one that names
    // another address, and a CA's used as an end entity's (before, such a cluster started
    // and silently elected no leader).
    let tls_dir = TempDir::new("cluster-flags-tls");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other = rcgen::CertificateParams::new(vec!["10.9.9.9".into()]).expect("params");
    for (name, params) in [("ca", ca), ("other", other)] {
        let cert = params.self_signed(&key).expect("certificate");
        let (c, k) = (
            tls_dir.path().join(format!("{name}.pem")),
            tls_dir.path().join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).expect("cert");
        std::fs::write(&k, key.serialize_pem()).expect("key");
        let fresh = TempDir::new("cluster-flags-tls-data");
        let err = Server::try_start(
            fresh.path(),
            &[
                "--node-id",
                "1",
                "--cluster-listen",
                &listen,
                "--cluster-secret",
                SECRET,
                "--cluster-tls-cert",
                c.to_str().expect("path"),
                "--cluster-tls-key",
                k.to_str().expect("path"),
            ],
        )
        .err()
        .unwrap_or_default();
        assert!(err.contains("would refuse it"), "{name}: {err}");
    }
}

/// Three hosts in network namespaces: each node has a cluster interface on one bridge and a
/// client interface on another, so a test can cut a node off from its peers while its
/// clients still reach it. Removed on drop.
pub(crate) struct Hosts {
    tag: String,
    /// The first two octets of the two subnets: cluster `10.n.0.0/24`, clients `10.n.1.0/24`.
    net: u8,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Hosts {
    /// Three namespaces, or None when this machine cannot make them (not root) and
    /// TIDEPOOL_SKIP_NETNS=1 says so; CI runs as root.
    pub(crate) fn make() -> Option<Hosts> {
        // Several tests of this process may each have hosts at once (up to ten): each set has
        // its own names and subnets.
        static SETS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let pid = std::process::id();
        let k = SETS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 10;
        let h = Hosts {
            tag: format!("tp{:04x}{k}", pid & 0xffff),
            net: 10 + ((pid % 24) * 10 + k) as u8,
        };
        match h.build() {
            Ok(()) => Some(h),
            Err(e) if std::env::var("TIDEPOOL_SKIP_NETNS").as_deref() == Ok("1") => {
                eprintln!(
                    "skipping: cannot make network namespaces ({e}) and TIDEPOOL_SKIP_NETNS=1"
                );
                None
            }
            Err(e) => panic!(
                "cannot make network namespaces ({e}): run as root, or set TIDEPOOL_SKIP_NETNS=1"
            ),
        }
    }

    fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.tag)
    }

    fn build(&self) -> Result<(), String> {
        let (t, n) = (&self.tag, self.net);
        for (br, addr) in [
            (format!("{t}c"), None),
            (format!("{t}h"), Some(format!("10.{n}.1.254/24"))),
        ] {
            ip(&["link", "add", &br, "type", "bridge"])?;
            if let Some(a) = addr {
                ip(&["addr", "add", &a, "dev", &br])?;
            }
            ip(&["link", "set", &br, "up"])?;
        }
        for i in 1..=3 {
            let ns = self.ns(i);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            for (side, sub, inner) in [("c", 0, "c0"), ("h", 1, "h0")] {
                let outer = format!("{t}{side}{i}");
                ip(&[
                    "link", "add", &outer, "type", "veth", "peer", "name", inner, "netns", &ns,
                ])?;
                ip(&["link", "set", &outer, "master", &format!("{t}{side}")])?;
                ip(&["link", "set", &outer, "up"])?;
                ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("10.{n}.{sub}.{i}/24"),
                    "dev",
                    inner,
                ])?;
                ip(&["-n", &ns, "link", "set", inner, "up"])?;
            }
        }
        Ok(())
    }

    /// Cuts node `i` off from its peers (its clients still reach it), or joins it again.
    pub(crate) fn partition(&self, i: usize, cut: bool) {
        let link = format!("{}c{i}", self.tag);
        ip(&["link", "set", &link, if cut { "down" } else { "up" }]).expect("partition");
    }

    pub(crate) fn cluster_addr(&self, i: usize) -> String {
        format!("10.{}.0.{i}:7001", self.net)
    }

    pub(crate) fn http_addr(&self, i: usize) -> String {
        format!("10.{}.1.{i}:8079", self.net)
    }

    /// The address of the host side of the clients' bridge, which the nodes reach (a
    /// destination of their deliveries listens there).
    pub(crate) fn outside_ip(&self) -> String {
        format!("10.{}.1.254", self.net)
    }

    /// Node `i` (1-based) on its host.
    fn serve(&self, i: usize, dir: &Path) -> Server {
        self.serve_with(i, dir, &[], &[])
            .unwrap_or_else(|e| panic!("node {i}: {e}"))
    }

    /// The same, with more flags and environment variables.
    pub(crate) fn serve_with(
        &self,
        i: usize,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let peers: Vec<String> = (1..=3)
            .filter(|j| *j != i)
            .map(|j| format!("{j}={}", self.cluster_addr(j)))
            .collect();
        let (listen, cluster, peers, id) = (
            self.http_addr(i),
            self.cluster_addr(i),
            peers.join(","),
            i.to_string(),
        );
        let ns = self.ns(i);
        let mut flags = vec![
            "--listen",
            &listen,
            "--admin-token",
            ADMIN,
            "--node-id",
            &id,
            "--cluster-listen",
            &cluster,
            "--peers",
            &peers,
            "--cluster-secret",
            SECRET,
        ];
        flags.extend_from_slice(extra);
        Server::try_start_under(&["ip", "netns", "exec", &ns], dir, &flags, env)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for i in 1..=3 {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        for br in ["c", "h"] {
            let _ = ip(&["link", "del", &format!("{}{br}", self.tag)]);
        }
    }
}

/// A leader cut off from its peers (network namespaces, its cluster link down) is replaced
/// by the other two, which go on taking writes. A write sent to the old leader meanwhile is
/// never acknowledged: when the partition heals, it learns it was deposed, answers the write
/// with an error, refuses everything and restarts itself in place, which rebuilds its state
/// from the cluster: it holds what the cluster holds, without that write.
#[test]
fn a_partitioned_leader_is_replaced_and_its_unacknowledged_write_is_not_kept() {
    let Some(hosts) = Hosts::make() else { return };
    let dirs = three_dirs("cluster-p");
    let (mut servers, li) = form_cluster(&dirs, |i| hosts.serve(i + 1, dirs[i].path()));
    let old = servers[li].as_ref().expect("leader");
    assert_eq!(
        old.client().cmd_str(&["SET", "before", "1"]),
        Canon::s("OK")
    );
    hosts.partition(li + 1, true);
    // The old leader's clients still reach it; a write there cannot commit.
    let old_addr = old.addr.clone();
    let stuck =
        std::thread::spawn(move || Http::connect(&old_addr, TOKEN).cmd_str(&["SET", "lost", "1"]));
    let others: Vec<Option<&Server>> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| if i == li { None } else { s.as_ref() })
        .collect();
    let l2 = leader_among(&others);
    let new = servers[l2].as_ref().expect("new leader");
    assert_eq!(
        new.client().cmd_str(&["SET", "during", "2"]),
        Canon::s("OK")
    );
    // The cut-off leader's lease has lapsed (no quorum confirms it): it answers no read,
    // which could miss the new leader's write, and no write, through the admin API too (a
    // write taken there could not commit: it would hang, then depose the node).
    // (Regression: the admin API's answers, refusals too, waited for the uncommitted write
    // before them to commit, as long as the node stayed cut off.)
    for admin in [
        Http::connect(&servers[li].as_ref().expect("old").addr, ADMIN).get("/_admin/databases"),
        Http::connect(&servers[li].as_ref().expect("old").addr, ADMIN)
            .post("/_admin/databases", b"{\"name\":\"during\"}"),
    ] {
        assert_eq!(admin.status, 503, "{}", admin.text());
        assert!(
            admin.text().contains("cannot confirm it still leads"),
            "{}",
            admin.text()
        );
    }
    let read =
        Http::connect(&servers[li].as_ref().expect("old").addr, TOKEN).cmd_str(&["GET", "during"]);
    assert!(
        matches!(&read, Canon::Err(e) if e.contains("cannot confirm it still leads")),
        "the cut-off leader answered {read:?}"
    );
    hosts.partition(li + 1, false);
    let answer = stuck.join().expect("the stuck write");
    assert!(
        answer.is_err(),
        "the deposed leader's write was answered {answer:?}"
    );
    // It restarts itself in place (the same process, which the test never restarts) and
    // rebuilds from the cluster: the other nodes' write, not its own.
    let back = servers[li].as_mut().expect("old");
    eventually(back, &["GET", "during"], Canon::s("2"));
    assert!(
        back.running(),
        "the deposed node exited:\n{}",
        back.stderr()
    );
    assert!(
        back.stderr()
            .contains("restarting in place to rebuild this node's state from the cluster"),
        "{}",
        back.stderr()
    );
    let ready = Http::connect(&back.addr, "").get("/readyz");
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert_eq!(back.client().cmd_str(&["GET", "lost"]), Canon::Nil);
    assert_eq!(back.client().cmd_str(&["GET", "before"]), Canon::s("1"));
    assert_eq!(
        servers[l2]
            .as_ref()
            .expect("leader")
            .client()
            .cmd_str(&["GET", "lost"]),
        Canon::Nil
    );
}

/// `tidepool cluster add-node` and `remove-node`: a fourth server started empty joins (sent
/// to a follower, which relays it to the leader), catches up from the others, becomes a voter
/// and serves what the cluster wrote before it came; then it leaves the voters.
#[test]
fn a_node_joins_a_running_cluster_and_leaves_it() {
    let dirs = three_dirs("cluster-j");
    let fourth_dir = TempDir::new("cluster-j4");
    let ports = [free_port(), free_port(), free_port()];
    let (servers, li) = form_cluster(&dirs, |i| serve_node(dirs[i].path(), i, &ports));
    std::fs::copy(
        dirs[0].path().join("credentials.json"),
        fourth_dir.path().join("credentials.json"),
    )
    .expect("copy credentials");
    let mut c = servers[li].as_ref().expect("leader").client();
    for i in 0..50 {
        c.cmd_str(&["SET", &format!("k{i}"), "v"]);
    }
    // Node 4: its own id and cluster address, the others as its peers.
    let p4 = free_port();
    let peers: Vec<String> = (0..3)
        .map(|j| format!("{}=127.0.0.1:{}", j + 1, ports[j]))
        .collect();
    let listen = format!("127.0.0.1:{p4}");
    let peers = peers.join(",");
    let fourth = Server::try_start_env(
        fourth_dir.path(),
        &[
            "--admin-token",
            ADMIN,
            "--node-id",
            "4",
            "--cluster-listen",
            &listen,
            "--peers",
            &peers,
            "--cluster-secret",
            SECRET,
        ],
        &[("TIDEPOOL_CLUSTER_SNAPSHOT_EVERY", "20")],
    )
    .expect("node 4");
    let follower = servers[(li + 1) % 3].as_ref().expect("follower");
    let cli = |args: &[&str]| -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
            .args(["cluster"])
            .args(args)
            .args(["--admin-token", ADMIN, "--url"])
            .arg(format!("http://{}", follower.addr))
            .output()
            .expect("tidepool cluster");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let added = cli(&["add-node", "4", &listen]);
    assert_eq!(added["voters"], serde_json::json!([1, 2, 3, 4]), "{added}");
    eventually(&fourth, &["GET", "k49"], Canon::s("v"));
    assert_eq!(status(&fourth)["voters"], serde_json::json!([1, 2, 3, 4]));
    let removed = cli(&["remove-node", "4"]);
    assert_eq!(removed["voters"], serde_json::json!([1, 2, 3]), "{removed}");
    // A node that is not a voter cannot be removed.
    let again = Http::connect(&servers[li].as_ref().expect("leader").addr, ADMIN).request(
        "DELETE",
        "/_admin/cluster/nodes/4",
        &[],
        b"",
    );
    assert_eq!(
        again.status,
        404,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
}

/// Delivery under failover: messages published to the cluster while its leader is killed
/// are each delivered at least once, from whichever node leads. A publish answered 200 is
/// delivered; duplicates (an attempt in flight when the leader died is made again) are
/// counted and reported.
#[test]
fn messages_published_across_a_leader_kill_are_each_delivered() {
    let sink = Sink::start();
    let dirs = three_dirs("cluster-q");
    let ports = [free_port(), free_port(), free_port()];
    let start = |i: usize| -> Server {
        let mut flags = node_flags(i, &ports);
        flags.extend(QSTASH_FLAGS.map(String::from));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        Server::try_start_env(
            dirs[i].path(),
            &flags,
            &[("TIDEPOOL_RETRY_BACKOFF_UNIT_MS", "1")],
        )
        .unwrap_or_else(|e| panic!("node {}: {e}", i + 1))
    };
    let (mut servers, li) = form_cluster(&dirs, start);
    let survivor = servers[(li + 1) % 3]
        .as_ref()
        .expect("a follower")
        .addr
        .clone();
    let leader_addr = servers[li].as_ref().expect("leader").addr.clone();
    const MESSAGES: usize = 10_000;
    let dest = sink.url("/m");
    // Four publishers: the first half to the leader, the rest through a follower (relayed to
    // whichever node leads); a publish that fails is sent again until one is answered 201.
    let publish = |from: usize, to: usize, dest: String, leader: String, survivor: String| {
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            for n in from..to {
                let body = format!("message-{n}");
                let until = std::time::Instant::now() + Duration::from_secs(30);
                let mut first = true;
                loop {
                    // Half to the leader first; a retry goes through the follower.
                    let addr = if first && n % 2 == 0 {
                        &leader
                    } else {
                        &survivor
                    };
                    first = false;
                    if std::net::TcpStream::connect(addr.as_str()).is_err() {
                        continue;
                    }
                    let r = std::panic::catch_unwind(|| {
                        Http::connect(addr, QSTASH_TOKEN).request(
                            "POST",
                            &format!("/v2/publish/{dest}"),
                            &[],
                            body.as_bytes(),
                        )
                    });
                    if matches!(&r, Ok(resp) if resp.status == 200) {
                        acked.push(n);
                        break;
                    }
                    assert!(
                        std::time::Instant::now() < until,
                        "message {n} never published"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            acked
        })
    };
    let quarter = MESSAGES / 4;
    let publishers: Vec<_> = (0..4)
        .map(|p| {
            publish(
                p * quarter,
                (p + 1) * quarter,
                dest.clone(),
                leader_addr.clone(),
                survivor.clone(),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    servers[li].take().expect("leader").kill9();
    let mut acked: Vec<usize> = Vec::new();
    for p in publishers {
        acked.extend(p.join().expect("a publisher"));
    }
    assert_eq!(
        acked.len(),
        MESSAGES,
        "every message was published in the end"
    );
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let counts = loop {
        let mut counts = std::collections::HashMap::new();
        for r in sink.received() {
            *counts
                .entry(String::from_utf8_lossy(&r.body).into_owned())
                .or_insert(0usize) += 1;
        }
        let missing = acked
            .iter()
            .filter(|n| !counts.contains_key(&format!("message-{n}")))
            .count();
        if missing == 0 {
            break counts;
        }
        assert!(
            std::time::Instant::now() < until,
            "{missing} published messages never delivered"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    eprintln!(
        "delivered {} messages across a leader kill, {duplicates} of them again",
        counts.len()
    );
}

/// With `--cluster-tls-*` the cluster listener speaks only TLS and a node trusts only the
/// given authority: three nodes sharing one certificate agree over TLS, and a plain HTTP
/// request to the listener gets no answer.
#[test]
fn nodes_agree_over_tls_and_the_listener_takes_no_plain_http() {
    let dirs = three_dirs("cluster-t");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).expect("certificate");
    for d in &dirs {
        let t = d.path().with_extension("tls");
        std::fs::create_dir_all(&t).expect("tls dir");
        std::fs::write(t.join("cert.pem"), made.cert.pem()).expect("cert");
        std::fs::write(t.join("key.pem"), made.signing_key.serialize_pem()).expect("key");
    }
    runtime().block_on(async {
        let nodes = three(&dirs, 10_000, 1000).await;
        let l = leader_of(&[&nodes[0]]).await;
        let li = index_of(&nodes, l);
        let last = write(&nodes[li], 1, 10).await;
        for n in &nodes {
            applied(n, last).await;
            assert_eq!(get(n, "k10"), Reply::Bulk(b"v10".to_vec()));
        }
        let plain = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("client")
            .post(format!("http://{}/raft/vote", nodes[0].addr))
            .body("x")
            .send()
            .await;
        assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
        for n in nodes {
            n.stop().await;
        }
    });
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d.path().with_extension("tls"));
    }
}

/// `tidepool cluster convert`: a single server's directory, with its keys and a database of
/// its own, becomes node 1 of a cluster of one that leads at once and holds that state; two
/// empty nodes added with `add-node` get it as the snapshot the conversion made, and hold it
/// when node 1 is killed. A running server's directory, or a converted one, is refused.
#[test]
fn a_single_servers_directory_becomes_a_clusters_first_node() {
    let dirs = three_dirs("convert-");
    let ports = [free_port(), free_port(), free_port()];
    let convert = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
            .args(["cluster", "convert", "--data"])
            .arg(dirs[0].path())
            .args(args)
            .output()
            .expect("tidepool cluster convert")
    };
    let listen = format!("127.0.0.1:{}", ports[0]);
    let single = Server::start(dirs[0].path(), &["--admin-token", ADMIN]);
    let mut c = single.client();
    assert_eq!(c.cmd_str(&["SET", "a", "1"]), ok_canon());
    c.cmd_str(&["RPUSH", "l", "x", "y"]);
    let created =
        Http::connect(&single.addr, ADMIN).post("/_admin/databases", b"{\"name\":\"shop\"}");
    assert_eq!(created.status, 201, "{}", created.text());
    let shop_token = created.json()["token"]
        .as_str()
        .expect("the database's token")
        .to_string();
    assert_eq!(
        Http::connect(&single.addr, &shop_token).cmd_str(&["SET", "cart", "3"]),
        ok_canon()
    );
    let running = convert(&["--node-id", "1", "--cluster-listen", &listen]);
    assert!(!running.status.success());
    assert!(
        String::from_utf8_lossy(&running.stderr).contains("a server is running"),
        "{}",
        String::from_utf8_lossy(&running.stderr)
    );
    assert_eq!(single.terminate(), Some(0));
    let done = convert(&["--node-id", "1", "--cluster-listen", &listen]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let again = convert(&["--node-id", "1", "--cluster-listen", &listen]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already a cluster node's directory"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(dirs[0].path().join("single-server").join("wal").is_dir());
    // Started without its cluster flags, the converted directory is refused: a single server
    // would serve an empty state and write a log beside the cluster's.
    let plain = Server::try_start(dirs[0].path(), &["--admin-token", ADMIN])
        .err()
        .expect("a single server on a cluster node's directory");
    assert!(
        plain.contains("is a cluster node's data directory"),
        "{plain}"
    );
    assert!(!dirs[0].path().join("wal").exists());
    // Regression (review F6): node 1's converted state started as node 2 used to come up as
    // a learner serving node 1's state. The directory names its node, and refuses another.
    let flags = node_flags(1, &ports);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let other = Server::try_start(dirs[0].path(), &flags)
        .err()
        .expect("node 1's directory started as node 2");
    assert!(
        other.contains("holds node 1's cluster state") && other.contains("--node-id 1"),
        "{other}"
    );
    let mut servers = [Some(serve_node(dirs[0].path(), 0, &ports)), None, None];
    let first = servers[0].as_ref().expect("node 1");
    assert_eq!(status(first)["takes_writes"], true, "{}", status(first));
    assert_eq!(first.client().cmd_str(&["GET", "a"]), Canon::s("1"));
    assert_eq!(first.client().cmd_str(&["SET", "b", "2"]), ok_canon());
    for i in 1..3 {
        std::fs::copy(
            dirs[0].path().join("credentials.json"),
            dirs[i].path().join("credentials.json"),
        )
        .expect("copy credentials");
        servers[i] = Some(serve_node(dirs[i].path(), i, &ports));
        let add = Http::connect(&servers[0].as_ref().expect("node 1").addr, ADMIN).post(
            "/_admin/cluster/nodes",
            format!(
                "{{\"id\":{},\"address\":\"127.0.0.1:{}\"}}",
                i + 1,
                ports[i]
            )
            .as_bytes(),
        );
        assert_eq!(add.status, 200, "{}", add.text());
    }
    for s in servers[1..].iter().flatten() {
        eventually(s, &["GET", "b"], Canon::s("2"));
        assert_eq!(s.client().cmd_str(&["GET", "a"]), Canon::s("1"));
        assert_eq!(
            s.client().cmd_str(&["LRANGE", "l", "0", "-1"]),
            Canon::Arr(vec![Canon::s("x"), Canon::s("y")])
        );
        assert_eq!(
            Http::connect(&s.addr, &shop_token).cmd_str(&["GET", "cart"]),
            Canon::s("3")
        );
    }
    servers[0].take().expect("node 1").kill9();
    // A node's own directory, once it has started, is its too: node 2's, started as node 3,
    // is refused.
    let flags = node_flags(2, &ports);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let s2 = servers[1].take().expect("node 2");
    s2.kill9();
    let err = Server::try_start(dirs[1].path(), &flags)
        .err()
        .expect("node 2's directory started as node 3");
    assert!(err.contains("holds node 2's cluster state"), "{err}");
    servers[1] = Some(serve_node(dirs[1].path(), 1, &ports));
    let others: Vec<Option<&Server>> = vec![None, servers[1].as_ref(), servers[2].as_ref()];
    let l = leader_among(&others);
    let leader = servers[l].as_ref().expect("the new leader");
    assert_eq!(leader.client().cmd_str(&["SET", "c", "3"]), ok_canon());
    assert_eq!(leader.client().cmd_str(&["GET", "a"]), Canon::s("1"));
}
