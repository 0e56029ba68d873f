//! The executor in a cluster (issue 30): the one `Machine` is the cluster's state, the
//! cluster's log is the log.
//!
//! - The leader runs requests as a single server does. A batch's records, framed by a detached
//!   writer, go to the proposer task as one Raft entry (in order), and the batch's replies wait
//!   for its commit where a single server's wait for the sync: a commit moves `durable_seq`.
//! - openraft applies committed entries through [`ExecutorApplier`]: a job here. A leader's own
//!   entries come back as it proposed them and are only confirmed; a follower applies the
//!   records through the machine's door. An entry that neither matches what this node proposed
//!   nor comes after its state means the node served records the cluster replaced (a leader
//!   deposed before its writes committed): the node then refuses everything and restarts
//!   itself in place (`refuse_and_rebuild`), which rebuilds its state from the cluster's
//!   snapshot and log.
//! - A follower answers reads from its state, forwards a write to its leader (a REST request,
//!   or a RESP one that needs nothing of its connection) and refuses the rest naming the
//!   leader; it runs no expiry, schedules or deliveries. A publish is the leader's too: it
//!   sends it on to every node, in its order.

use super::{Access, Answer, ExecMode, Executor, Job};
use crate::cluster::state_machine::{apply_batch, Applier};
use crate::cluster::{Batch, NodeId, TypeConfig};
use crate::reply::Reply;
use crate::wal::Progress;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// What a node knows of its role, shared with the HTTP side.
#[derive(Default)]
pub struct Role {
    /// This node leads and has applied every entry before its term's first: it takes writes.
    pub leading: AtomicBool,
    /// Who leads, as the refusal says it.
    pub leader: RwLock<String>,
    /// The leader's cluster address, where a follower forwards a write.
    pub leader_addr: RwLock<Option<String>>,
    /// The other members' cluster addresses, where a publish goes too.
    pub peers: RwLock<Vec<String>>,
    /// This node's id, the leader's (0: none known) and the term, for `INFO replication`.
    pub node_id: AtomicU64,
    pub leader_id: AtomicU64,
    pub term: AtomicU64,
    /// On the leader, the followers whose log holds every entry it has (`WAIT`).
    pub replicas_caught_up: AtomicU64,
    /// On the leader, its last log index and how far each follower's log matches its own
    /// (a RESP `WAIT` waits for followers to hold what was there when it began).
    pub last_log_index: AtomicU64,
    pub replicas_matched: RwLock<Vec<u64>>,
    /// When a quorum last confirmed this node leads (wall ms): its election, or the latest
    /// round of `keep_lease`. The lease lasts `CLUSTER_ELECTION_TIMEOUT_MIN_MS` from it, less
    /// than any other node waits before it stands for election.
    pub confirmed_at_ms: AtomicU64,
    /// The cluster has one voter: its leader needs no one's confirmation.
    pub alone: AtomicBool,
    /// Told when this node starts to lead, so that its lease is confirmed at once.
    pub elected: tokio::sync::Notify,
    /// Woken when a quorum has confirmed this node still leads (the lease renewed).
    pub confirmed: tokio::sync::Notify,
    /// On the leader, the log index of its last own entry known committed, published before
    /// the replies that waited for it go (the metrics' `last_log_index` can lag it).
    pub committed_own_index: AtomicU64,
}

impl Role {
    /// What `INFO replication` says of this node.
    pub fn facts(&self) -> crate::command::ctx::ClusterFacts {
        crate::command::ctx::ClusterFacts {
            node_id: self.node_id.load(Ordering::Relaxed),
            leading: self.leading(),
            leader: self.leader_id.load(Ordering::Relaxed),
            term: self.term.load(Ordering::Relaxed),
            peers: self.peers.read().map(|p| p.clone()).unwrap_or_default(),
            replicas_caught_up: self.replicas_caught_up.load(Ordering::Relaxed),
        }
    }

    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// On the leader, the followers whose log holds every entry up to `index`.
    pub fn replicas_at(&self, index: u64) -> u64 {
        self.replicas_matched
            .read()
            .map_or(0, |m| m.iter().filter(|i| **i >= index).count() as u64)
    }

    /// This node leads and a quorum confirmed it recently enough that no other node can
    /// have been elected since: it may answer reads and deliver messages.
    pub fn lease(&self) -> bool {
        self.leading()
            && (self.alone.load(Ordering::Relaxed)
                || crate::clock::wall_unix_ms()
                    .saturating_sub(self.confirmed_at_ms.load(Ordering::Acquire))
                    < crate::config::CLUSTER_ELECTION_TIMEOUT_MIN_MS)
    }

    /// On the leader, once `now` followers hold what it had at `since` (its last log index when
    /// a `WAIT` began): how many do once `want` do, or at `deadline` (None: no limit), or when
    /// this node stops leading. Polled every `CLUSTER_WAIT_POLL_MS`.
    pub async fn replicas_reaching(
        &self,
        since: u64,
        want: i64,
        now: i64,
        deadline: Option<tokio::time::Instant>,
    ) -> i64 {
        let mut n = now.max(self.replicas_at(since) as i64);
        while n < want && self.leading() && deadline.is_none_or(|d| tokio::time::Instant::now() < d)
        {
            tokio::time::sleep(Duration::from_millis(crate::config::CLUSTER_WAIT_POLL_MS)).await;
            n = n.max(self.replicas_at(since) as i64);
        }
        n
    }

    /// Where a `WAIT` starts counting on the leader: its last log index, and at least the
    /// last of its entries known committed, so that every write answered before the WAIT
    /// came is counted from.
    pub fn wait_since(&self) -> u64 {
        self.last_log_index
            .load(Ordering::Relaxed)
            .max(self.committed_own_index.load(Ordering::Acquire))
    }

    /// A leader's refusal when its lease has lapsed.
    pub fn lapsed(&self) -> String {
        "this node cannot confirm it still leads (it may be cut off from the others): retry, or ask another node".into()
    }

    /// A follower's refusal of a write.
    pub fn refusal(&self) -> String {
        let id = self.node_id.load(Ordering::Relaxed);
        if id != 0 && self.leader_id.load(Ordering::Relaxed) == id {
            return "this node leads the cluster but takes no writes yet: it has not applied every entry committed before (retry in a moment)".into();
        }
        let leader = self.leader.read().map(|l| l.clone()).unwrap_or_default();
        format!(
            "this node is a follower in a cluster and takes no writes; {}",
            if leader.is_empty() {
                "no leader is known yet".to_string()
            } else {
                format!("the leader is {leader}")
            }
        )
    }
}

/// One batch for the proposer: its frames and its last record's sequence number.
pub struct Proposal {
    frames: bytes::Bytes,
    last: u64,
}

/// A job of the cluster's for the executor.
pub enum ClusterJob {
    Apply {
        batch: Batch,
        reply: oneshot::Sender<Result<u64, String>>,
    },
    Install {
        image: Vec<u8>,
        reply: oneshot::Sender<Result<(), String>>,
    },
    Attach {
        proposer: mpsc::UnboundedSender<Proposal>,
        network: crate::cluster::network::Network,
    },
    /// Another node's publishes, for this node's subscribers (not sent on again).
    Publish { items: Vec<Published> },
}

/// One PUBLISH or SPUBLISH, as a node sends it to the others: publishes are not logged, so
/// without this a subscriber hears only what was published on its own node (Redis Cluster
/// broadcasts a publish to every node likewise).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Published {
    db: crate::state::databases::DbId,
    shard: bool,
    channel: serde_bytes::ByteBuf,
    message: serde_bytes::ByteBuf,
}

impl Published {
    pub fn new(
        db: crate::state::databases::DbId,
        shard: bool,
        channel: &[u8],
        message: &[u8],
    ) -> Published {
        Published {
            db,
            shard,
            channel: serde_bytes::ByteBuf::from(channel.to_vec()),
            message: serde_bytes::ByteBuf::from(message.to_vec()),
        }
    }
}

/// What one node's executor sends another's over `/raft/exec`.
#[derive(serde::Serialize, serde::Deserialize)]
enum ToExecutor {
    /// A follower's REST request, for its leader.
    Exec(Forwarded),
    /// Publishes, for the node's subscribers.
    Publish(Vec<Published>),
}

/// The executor's cluster side.
pub struct Link {
    pub role: Arc<Role>,
    /// This request's publishes, for the other nodes' subscribers.
    pub outbox: Vec<Published>,
    proposer: Option<mpsc::UnboundedSender<Proposal>>,
    /// How a follower reaches the leader with a forwarded request.
    network: Option<crate::cluster::network::Network>,
    /// Batches proposed and not yet applied back, oldest first.
    proposed: VecDeque<bytes::Bytes>,
    /// The term and the lease's last confirmation (`Role::confirmed_at_ms`) when a wait for
    /// the next one ran out: the batches after it do not wait again until another
    /// confirmation (or term) comes (a leader cut off would otherwise spend
    /// `CLUSTER_LEASE_WAIT_MS` on each).
    lease_given_up: Option<(u64, u64)>,
    /// Each peer's queue of publishes to send, in order.
    senders: std::collections::HashMap<String, mpsc::Sender<Vec<u8>>>,
}

impl Link {
    pub fn new(role: Arc<Role>) -> Link {
        Link {
            role,
            outbox: Vec::new(),
            proposer: None,
            network: None,
            proposed: VecDeque::new(),
            lease_given_up: None,
            senders: std::collections::HashMap::new(),
        }
    }
}

/// The executor as openraft's applier: each call a job.
#[derive(Clone)]
pub struct ExecutorApplier {
    pub tx: mpsc::Sender<Job>,
}

impl ExecutorApplier {
    async fn ask<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<T, String>>) -> ClusterJob,
    ) -> Result<T, String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Cluster(job(reply)))
            .await
            .map_err(|_| "the executor has stopped".to_string())?;
        rx.await
            .map_err(|_| "the executor has stopped".to_string())?
    }
}

impl Applier for ExecutorApplier {
    async fn apply(&self, batch: Batch) -> Result<u64, String> {
        self.ask(|reply| ClusterJob::Apply { batch, reply }).await
    }

    async fn install(&self, image: Vec<u8>) -> Result<(), String> {
        self.ask(|reply| ClusterJob::Install { image, reply }).await
    }
}

/// Marks the log as refusing everything, with `why` (see the module's note).
fn refuse_all(log: &Progress, why: String) {
    refused_now(log, why);
}

/// `refuse_all`, and whether this was the first refusal (false when the log refused already).
fn refused_now(log: &Progress, why: String) -> bool {
    if log.fsync_failed.set(why.clone()).is_err() {
        return false;
    }
    crate::log::line(&format!("error: {why}"));
    log.synced.notify_waiters();
    true
}

/// A node deposed with records in its state that the cluster does not hold: it refuses
/// everything (`refuse_all`), and after `CLUSTER_REBUILD_DELAY_MS` (time for the refusals to
/// reach the replies that waited) the process starts over as the same program with the same
/// arguments and environment (`exec`: the same process id), which rebuilds the state from
/// the cluster's snapshot and the committed entries of its log, as a restart does. Those
/// records are in its state and nowhere else, so the state goes whole; what was on disk was
/// synced before openraft heard of it, which is what a `kill -9` and a start rely on too.
fn refuse_and_rebuild(log: &Progress, why: String) {
    if !refused_now(log, format!("{why}; {}", crate::reply::errors::REBUILDING)) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("rebuild".into())
        .spawn(|| {
            std::thread::sleep(Duration::from_millis(
                crate::config::CLUSTER_REBUILD_DELAY_MS,
            ));
            crate::log::line("restarting in place to rebuild this node's state from the cluster");
            // Checked last, just before the exec: a stop begun meanwhile wins.
            if STOPPING.load(Ordering::SeqCst) {
                return;
            }
            let failed = start_over();
            crate::log::line(&format!(
                "error: this node cannot restart itself ({failed}): it refuses everything until restarted"
            ));
        });
    if let Err(e) = started {
        crate::log::line(&format!(
            "error: this node cannot restart itself ({e}): it refuses everything until restarted"
        ));
    }
}

/// Set once the server has begun to stop: a node deposed meanwhile does not start over.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// The server stops: no rebuild restarts it after this.
pub fn stopping() {
    STOPPING.store(true, Ordering::SeqCst);
}

/// Replaces the process with a new start of the same program, arguments and environment;
/// returns only if that fails.
fn start_over() -> std::io::Error {
    // The running program itself, even if its file has been replaced or removed since.
    let program = if cfg!(target_os = "linux") {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        match std::env::current_exe() {
            Ok(p) => p,
            Err(e) => return e,
        }
    };
    replace_with(&program)
}

/// Replaces the process with `program`, given this process's arguments (its name first) and
/// environment; returns only if that fails, with SIGPIPE ignored again.
fn replace_with(program: &std::path::Path) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new(program);
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    let failed = cmd.args(args).exec();
    // The failed exec left SIGPIPE at its default: a write to a closed connection would end
    // the process.
    crate::sys::ignore_sigpipe();
    failed
}

#[cfg(test)]
mod tests {
    /// Regression: `Command::exec` sets SIGPIPE back to its default before it replaces the
    /// process, and a failed exec left it so, which a deposed node that could not restart
    /// itself (and went on refusing) would have died of at its next write to a closed
    /// connection.
    #[test]
    fn a_failed_restart_in_place_leaves_sigpipe_ignored() {
        let failed = super::replace_with(std::path::Path::new("/nonexistent/tidepool"));
        assert_eq!(failed.kind(), std::io::ErrorKind::NotFound, "{failed}");
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let ignored = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .expect("SigIgn");
        assert_ne!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "SigIgn {ignored:x}"
        );
    }
}

/// Proposes the executor's batches, in the order they come, and marks each durable when it
/// commits. A batch that does not commit (the node lost its leadership first) stops the node's
/// writes and reads (see the module's note).
pub async fn propose(
    raft: openraft::Raft<TypeConfig>,
    mut rx: mpsc::UnboundedReceiver<Proposal>,
    log: Arc<Progress>,
    role: Arc<Role>,
) {
    while let Some(p) = rx.recv().await {
        let Proposal { frames, last } = p;
        match raft.client_write_ff(Batch { frames }).await {
            Ok(answer) => {
                if crate::fault::ack_before_commit() {
                    log.durable_seq.fetch_max(last, Ordering::SeqCst);
                    log.synced.notify_waiters();
                }
                let (log, role) = (log.clone(), role.clone());
                tokio::spawn(async move {
                    match answer.await {
                        Ok(Ok(written)) => {
                            role.committed_own_index
                                .fetch_max(written.log_id.index, Ordering::AcqRel);
                            log.durable_seq.fetch_max(last, Ordering::SeqCst);
                            log.synced.notify_waiters();
                        }
                        Ok(Err(e)) => refuse_and_rebuild(&log, format!(
                            "this node stopped leading before record #{last} was committed ({e}): a write answered with this may or may not be kept by the new leader, and this node's state may hold records the cluster does not"
                        )),
                        // The node is stopping: its waiting replies get this, and there
                        // is nothing to tell the operator.
                        Err(_) => {
                            if log.fsync_failed.set(format!(
                                "the write of record #{last} was not committed (the node stopped)"
                            )).is_ok() {
                                log.synced.notify_waiters();
                            }
                        }
                    }
                });
            }
            Err(e) => refuse_all(
                &log,
                format!("the write of record #{last} could not be proposed: {e}"),
            ),
        }
    }
}

/// Keeps the leader's lease: every `CLUSTER_LEASE_CHECK_MS`, while this node leads, a round
/// of heartbeats asks a quorum whether it still does; the round's start is the lease's new
/// start. A leader cut off from the others stops answering reads and delivering within
/// `CLUSTER_ELECTION_TIMEOUT_MIN_MS`, before another can be elected.
pub async fn keep_lease(raft: openraft::Raft<TypeConfig>, role: Arc<Role>) {
    let every = Duration::from_millis(crate::config::CLUSTER_LEASE_CHECK_MS);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = role.elected.notified() => {}
        }
        if !role.leading() {
            continue;
        }
        let started = crate::clock::wall_unix_ms();
        let wait = Duration::from_millis(crate::config::CLUSTER_ELECTION_TIMEOUT_MIN_MS);
        if let Ok(Ok(_)) = tokio::time::timeout(wait, raft.get_read_log_id()).await {
            role.confirmed_at_ms.fetch_max(started, Ordering::AcqRel);
            role.confirmed.notify_waiters();
        }
    }
}

/// Keeps `role` in step with openraft's view: leading once this node leads and has applied
/// every entry its log held when it became leader, and one of its term (so every entry before
/// its first new record is in its state), and who leads.
///
/// The first condition matters after a restart: openraft restores a node that led before it
/// stopped as leader of the same term at once, without a new entry, while its state is still
/// the snapshot it kept; the entries after the snapshot, its term's among them, are applied
/// only once they are committed again. A node's lease starts with a quorum's confirmation
/// (`keep_lease`, told at once), never with the election alone: a node restored as leader
/// may have been replaced while it was down.
pub async fn follow_role(
    raft: openraft::Raft<TypeConfig>,
    role: Arc<Role>,
    peers: std::collections::BTreeMap<NodeId, String>,
    log: Arc<Progress>,
) {
    let mut metrics = raft.metrics();
    // While this node is openraft's leader: the term, and the last entry of its log when it
    // became leader in it.
    let mut must_apply: Option<(u64, u64)> = None;
    loop {
        let (leading, leader, addr, others) = {
            let m = metrics.borrow_and_update();
            // openraft stopped this node's part in the cluster (a storage error, not the
            // server's own shutdown): its state no longer follows the cluster's, so it serves
            // nothing from it.
            match &m.running_state {
                Err(openraft::error::Fatal::Stopped) | Ok(()) => {}
                Err(fatal) => refuse_all(
                    &log,
                    format!("this node's part in the cluster stopped ({fatal}); restart it to rebuild from the cluster"),
                ),
            }
            if m.state != openraft::ServerState::Leader {
                must_apply = None;
            } else if must_apply.is_none_or(|(term, _)| term != m.current_term) {
                must_apply = Some((m.current_term, m.last_log_index.unwrap_or(0)));
            }
            let leading = must_apply.is_some_and(|(_, index)| {
                m.last_applied
                    .is_some_and(|l| l.leader_id.term == m.current_term && l.index >= index)
            });
            let leader = m.current_leader.map(|id| match peers.get(&id) {
                Some(addr) => format!("node {id} (cluster address {addr})"),
                None => format!("node {id}"),
            });
            let addr = m.current_leader.filter(|id| *id != m.id).and_then(|id| {
                m.membership_config
                    .membership()
                    .get_node(&id)
                    .map(|n| n.addr.clone())
                    .or_else(|| peers.get(&id).cloned())
            });
            let others: Vec<String> = m
                .membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != m.id)
                .map(|(_, n)| n.addr.clone())
                .collect();
            (leading, leader, addr, others)
        };
        {
            let m = metrics.borrow();
            role.node_id.store(m.id, Ordering::Relaxed);
            role.leader_id
                .store(m.current_leader.unwrap_or(0), Ordering::Relaxed);
            role.term.store(m.current_term, Ordering::Relaxed);
            let caught_up = m.replication.as_ref().map_or(0, |r| {
                r.iter()
                    .filter(|(id, matched)| {
                        **id != m.id && matched.map(|l| l.index) >= m.last_log_index
                    })
                    .count() as u64
            });
            role.replicas_caught_up.store(caught_up, Ordering::Relaxed);
            role.last_log_index
                .store(m.last_log_index.unwrap_or(0), Ordering::Relaxed);
            let matched: Vec<u64> = m.replication.as_ref().map_or(Vec::new(), |r| {
                r.iter()
                    .filter(|(id, _)| **id != m.id)
                    .map(|(_, l)| l.map_or(0, |l| l.index))
                    .collect()
            });
            if let Ok(mut w) = role.replicas_matched.write() {
                *w = matched;
            }
            role.alone.store(
                m.membership_config.membership().voter_ids().count() <= 1,
                Ordering::Relaxed,
            );
        }
        if let Ok(mut p) = role.peers.write() {
            *p = others;
        }
        // Leading now: its lease waits for a quorum's confirmation, asked for at once. Not
        // leading: a lease of an earlier term is no lease.
        let was = role.leading.swap(leading, Ordering::AcqRel);
        if leading && !was {
            role.elected.notify_one();
        } else if !leading && was {
            role.confirmed_at_ms.store(0, Ordering::Release);
            // A batch waiting for the lease (`await_lease`) stops waiting: it is refused now.
            role.confirmed.notify_waiters();
        }
        if let Ok(mut l) = role.leader.write() {
            *l = leader.unwrap_or_default();
        }
        if let Ok(mut a) = role.leader_addr.write() {
            *a = addr;
        }
        if metrics.changed().await.is_err() {
            role.leading.store(false, Ordering::Release);
            // openraft's core ended. Unless it was stopped (the server's shutdown), it ended
            // by a panic, which leaves no word in the metrics: the node refuses everything.
            if !matches!(
                metrics.borrow().running_state,
                Err(openraft::error::Fatal::Stopped)
            ) {
                refuse_all(
                    &log,
                    "this node's part in the cluster ended unexpectedly; restart it to rebuild from the cluster".into(),
                );
            }
            return;
        }
    }
}

impl Executor {
    /// Why a write is refused here as a follower, if it is.
    pub(super) fn follower_refusal(&self) -> Option<String> {
        let c = self.cluster.as_ref()?;
        (!c.role.leading()).then(|| c.role.refusal())
    }

    /// Why a leader whose lease lapsed answers nothing (it may be cut off, and another
    /// elected), if it is one.
    pub(super) fn lapsed_leader(&self) -> Option<String> {
        let c = self.cluster.as_ref()?;
        (c.role.leading() && !c.role.lease()).then(|| c.role.lapsed())
    }

    /// The refusal of a follower that knows no leader to send a request to that it would
    /// send there. Such a request may write; and a script that only reads must not answer
    /// from this node's state either, which the leader may be ahead of: a script's read is
    /// the leader's wherever it is sent.
    pub(super) fn unforwarded(&self, cmds: &[Vec<Vec<u8>>]) -> Option<Answer> {
        let c = self.cluster.as_ref()?;
        (!c.role.leading() && for_leader(cmds)).then(|| Answer {
            replies: Err(format!("ERR {}", c.role.refusal())),
            sync_token: 0,
            unauthorized: false,
            aborted: false,
        })
    }

    /// The answer of a leader whose lease lapsed, if this is one.
    /// A leader whose lease lapsed waits (`await_lease`), up to `CLUSTER_LEASE_WAIT_MS`, for a quorum to
    /// confirm it again before it runs a batch: under load a round of heartbeats can outlast
    /// the lease (a follower busy syncing tens of megabytes answers late), and refusing the
    /// batch's requests then would be for nothing. A leader cut off from the others still
    /// refuses them, once the wait is over.
    pub(super) fn lease_to_await(&self) -> Option<Arc<Role>> {
        self.cluster
            .as_ref()
            .filter(|c| {
                c.role.leading() && !c.role.lease() && c.lease_given_up != Some(lease_mark(&c.role))
            })
            .map(|c| c.role.clone())
    }

    /// The wait for the lease ran out (`await_lease` answered false).
    pub(super) fn lease_gave_up(&mut self) {
        if let Some(c) = &mut self.cluster {
            c.lease_given_up = Some(lease_mark(&c.role));
        }
    }
}

/// The term and the lease's last confirmation: what a wait for the lease gave up on.
fn lease_mark(role: &Role) -> (u64, u64) {
    (
        role.term.load(Ordering::Relaxed),
        role.confirmed_at_ms.load(Ordering::Acquire),
    )
}

/// The wait of `Executor::lease_to_await`'s role for its lease: until a quorum confirms it,
/// the node stops leading, or `CLUSTER_LEASE_WAIT_MS` have passed; false only in the last
/// case.
pub(super) async fn await_lease(role: Arc<Role>) -> bool {
    let until =
        tokio::time::Instant::now() + Duration::from_millis(crate::config::CLUSTER_LEASE_WAIT_MS);
    while role.leading() && !role.lease() {
        let confirmed = role.confirmed.notified();
        tokio::pin!(confirmed);
        confirmed.as_mut().enable();
        if role.lease() || !role.leading() {
            break;
        }
        if tokio::time::timeout_at(until, confirmed).await.is_err() {
            return false;
        }
    }
    true
}

impl Executor {
    pub(super) fn lapsed_answer(&self) -> Option<Answer> {
        self.lapsed_leader().map(|why| Answer {
            replies: Err(format!("ERR {why}")),
            sync_token: 0,
            unauthorized: false,
            aborted: false,
        })
    }

    /// A cluster's job.
    pub(super) fn cluster_job(&mut self, job: ClusterJob) {
        match job {
            ClusterJob::Attach { proposer, network } => {
                if let Some(c) = &mut self.cluster {
                    c.proposer = Some(proposer);
                    c.network = Some(network);
                }
            }
            ClusterJob::Publish { items } => {
                for p in items {
                    if let Some(ps) = self.pubsubs.get_mut(&p.db) {
                        if p.shard {
                            ps.publish_shard(&p.channel, &p.message);
                        } else {
                            ps.publish(&p.channel, &p.message);
                        }
                    }
                }
            }
            ClusterJob::Apply { batch, reply } => {
                let _ = reply.send(self.apply_entry(batch));
            }
            ClusterJob::Install { image, reply } => {
                // A snapshot installed over records this node proposed and the cluster never
                // confirmed (it led, was cut off, and the new leader's log was purged past
                // them, so openraft sends a snapshot and cuts nothing): those records are
                // gone, and the new state numbers other records at their sequence numbers.
                // Their replies must not take the new state's position for their commit.
                let deposed = self
                    .cluster
                    .as_ref()
                    .is_some_and(|c| !c.proposed.is_empty());
                if deposed {
                    refuse_and_rebuild(
                        &self.shared.log,
                        "the cluster's snapshot replaced this node's state while records it proposed were unconfirmed: a write answered with this may or may not be kept".into(),
                    );
                }
                let r = crate::cluster::state_machine::machine_of(&image).map(|m| {
                    let limits = self.machine.delivery().limits;
                    self.machine = m;
                    self.machine.parts().delivery.limits = limits;
                    self.machine.reseed(crate::clock::wall_unix_us());
                    if !deposed {
                        self.caught_up();
                    }
                    self.state_replaced();
                });
                let _ = reply.send(r);
            }
        }
    }

    /// A committed entry: confirmed if it is this node's own next proposal, applied if it
    /// comes after the state, and otherwise the sign that this node served records the
    /// cluster replaced.
    fn apply_entry(&mut self, batch: Batch) -> Result<u64, String> {
        let Some(c) = &mut self.cluster else {
            return Err("not a cluster node".into());
        };
        if c.proposed.front() == Some(&batch.frames) {
            c.proposed.pop_front();
            return Ok(self.machine.position().seq);
        }
        let first = match crate::wal::format::read_frame(&batch.frames, 0) {
            crate::wal::format::FrameRead::Frame(f) => Some(f.seq),
            _ => None,
        };
        if first.is_some_and(|s| s <= self.machine.position().seq) {
            let why = format!(
                "the cluster committed record #{} other than this node's: this node served records the cluster replaced",
                first.unwrap_or(0)
            );
            refuse_and_rebuild(&self.shared.log, why);
            return Ok(self.machine.position().seq);
        }
        let databases = batch_has_kind(&batch, crate::record::KIND_DATABASES);
        if let Err(e) = apply_batch(&mut self.machine, &batch) {
            // openraft stops this node's part in the cluster on the error: it serves nothing.
            refuse_all(
                &self.shared.log,
                format!("a committed entry could not be applied ({e}); restart this node to rebuild from the cluster"),
            );
            return Err(e);
        }
        self.caught_up();
        if databases {
            self.state_replaced();
        }
        Ok(self.machine.position().seq)
    }

    /// The state moved to what the cluster committed: numbering goes on after it, and what
    /// waits for those records to be durable (committed) goes.
    fn caught_up(&mut self) {
        let at = self.machine.position();
        self.wal.advance(at.seq, at.unix_ms);
        self.shared.log.last_seq.store(at.seq, Ordering::SeqCst);
        self.shared
            .log
            .durable_seq
            .fetch_max(at.seq, Ordering::SeqCst);
        self.shared.log.synced.notify_waiters();
    }

    /// The databases changed under the executor (a snapshot installed, databases created or
    /// deleted by the leader): their ACL secrets and the token table follow.
    fn state_replaced(&mut self) {
        super::arm_acl_secrets(&self.tokens, self.machine.parts().dbs, None);
        if let Ok(mut t) = self.shared.tokens.write() {
            *t = super::tenants::TokenTable::build(&self.tokens, self.machine.dbs());
        }
    }

    /// The batch's records, for the cluster's log, and its replies on commit.
    pub(super) fn finish_batch_cluster(&mut self, pending: Vec<(u64, super::flusher::Pending)>) {
        let frames = bytes::Bytes::from(self.wal.take_buffered());
        let last = self.wal.last_seq();
        self.shared.log.last_seq.store(last, Ordering::SeqCst);
        if !frames.is_empty() {
            let sent = match &mut self.cluster {
                Some(c) => match &c.proposer {
                    Some(p) => {
                        c.proposed.push_back(frames.clone());
                        p.send(Proposal { frames, last }).is_ok()
                    }
                    None => false,
                },
                None => false,
            };
            if !sent {
                refuse_all(
                    &self.shared.log,
                    format!("record #{last} could not be proposed: the node's Raft is not running"),
                );
            }
        }
        let durable = self.shared.log.durable_seq.load(Ordering::SeqCst);
        let mut wait = Vec::new();
        for (needs, p) in pending {
            // What a reply shows is committed: it stands, even on a node deposed since.
            if needs <= durable {
                p.answer(None);
            } else {
                wait.push((needs, p));
            }
        }
        if wait.is_empty() {
            return;
        }
        let log = self.shared.log.clone();
        tokio::spawn(async move {
            for (needs, p) in wait {
                log.wait_durable(needs).await;
                // Committed before (or although) the node was deposed: the reply stands. A
                // refusal only for what the cluster has not confirmed.
                match log.fsync_failed.get() {
                    Some(why) if log.durable_seq.load(Ordering::SeqCst) < needs => {
                        p.answer(Some(&crate::reply::errors::log_failed(why)))
                    }
                    _ => p.answer(None),
                }
            }
        });
    }
}

/// Whether any record of `batch` is of `kind`.
fn batch_has_kind(batch: &Batch, kind: u8) -> bool {
    let mut at = 0;
    while let crate::wal::format::FrameRead::Frame(f) =
        crate::wal::format::read_frame(&batch.frames, at)
    {
        if f.kind == kind {
            return true;
        }
        at += f.encoded_len();
    }
    false
}

/// A request a follower forwards to its leader: what `Job::Exec` carries of a REST request.
#[derive(serde::Serialize, serde::Deserialize)]
struct Forwarded {
    db: crate::state::databases::DbId,
    /// 0 the Standard token, 1 the Read Only token, 2 another token (`token`).
    access: u8,
    token: String,
    cmds: Vec<Vec<serde_bytes::ByteBuf>>,
    multi: bool,
}

/// The leader's answer to it.
#[derive(serde::Serialize, serde::Deserialize)]
struct ForwardedAnswer {
    replies: Result<Vec<Reply>, String>,
    sync_token: u64,
    unauthorized: bool,
}

/// Whether a follower forwards these commands to its leader rather than answer them: a
/// command that writes (by its table flags), a script that may (EVAL, EVALSHA, FCALL; the
/// `_RO` ones run here) and the script cache they run from (SCRIPT LOAD, EXISTS, FLUSH: a
/// script loaded on a follower would be unknown to the EVALSHA it forwards), and a publish
/// (PUBLISH, SPUBLISH: the leader sends it on to every node, so every node's subscribers
/// hear the publishes in the leader's order), and SCRIPT KILL and FUNCTION KILL (the
/// scripts a follower forwarded run there). Reads are answered by the follower itself.
pub(super) fn for_leader(cmds: &[Vec<Vec<u8>>]) -> bool {
    cmds.iter()
        .any(|c| match crate::command::table::global().lookup(c) {
            crate::command::table::Lookup::Found(info) => {
                info.write
                    || matches!(
                        info.name.as_str(),
                        "eval"
                            | "evalsha"
                            | "fcall"
                            | "script|load"
                            | "script|exists"
                            | "script|flush"
                            | "script|kill"
                            | "function|kill"
                            | "publish"
                            | "spublish"
                    )
            }
            _ => false,
        })
}

/// Whether any of these commands may block (BLPOP, XREAD with BLOCK, ...).
pub(super) fn blocks(cmds: &[Vec<Vec<u8>>]) -> bool {
    cmds.iter().any(|c| {
        matches!(
            crate::command::table::global().lookup(c),
            crate::command::table::Lookup::Found(info) if info.blocking
        )
    })
}

/// The leader's side of `/raft/exec`: the request runs here as a REST request would, unless
/// this node does not lead (then it is refused: a forwarded request is never forwarded again).
/// A SCRIPT KILL or FUNCTION KILL with the Standard token stops the running script through
/// `scripts`, as a local one does: it cannot wait behind the script it stops.
pub fn forward_handler(
    tx: mpsc::Sender<Job>,
    role: Arc<Role>,
    scripts: Arc<crate::lua::ScriptControl>,
) -> crate::cluster::network::Forward {
    Arc::new(move |body: Vec<u8>| {
        let (tx, role, scripts) = (tx.clone(), role.clone(), scripts.clone());
        Box::pin(async move {
            let f = match rmp_serde::from_slice::<ToExecutor>(&body)
                .map_err(|e| format!("not a message for the executor: {e}"))?
            {
                ToExecutor::Exec(f) => f,
                ToExecutor::Publish(items) => {
                    tx.send(Job::Cluster(ClusterJob::Publish { items }))
                        .await
                        .map_err(|_| "the executor has stopped".to_string())?;
                    return Ok(Vec::new());
                }
            };
            let answer = if !role.leading() {
                ForwardedAnswer {
                    replies: Err(format!("ERR {}", role.refusal())),
                    sync_token: 0,
                    unauthorized: false,
                }
            } else {
                let access = match f.access {
                    0 => Access::Full,
                    1 => Access::ReadOnly,
                    _ => Access::Token(f.token.into()),
                };
                let cmds: Vec<Vec<Vec<u8>>> = f
                    .cmds
                    .into_iter()
                    .map(|c| c.into_iter().map(|a| a.into_vec()).collect())
                    .collect();
                let kill = match (&access, cmds.as_slice()) {
                    (Access::Full, [one]) => crate::command::table::global().interrupt_of(one),
                    _ => None,
                };
                let killed = |r: Reply| ForwardedAnswer {
                    replies: Ok(vec![r]),
                    sync_token: 0,
                    unauthorized: false,
                };
                if let Some(r) = kill.and_then(|what| scripts.kill(what, f.db)) {
                    return rmp_serde::to_vec_named(&killed(r)).map_err(|e| e.to_string());
                }
                let (reply, rx) = oneshot::channel();
                let job = Job::Forwarded {
                    db: f.db,
                    cmds,
                    mode: if f.multi {
                        ExecMode::Multi
                    } else {
                        ExecMode::Each
                    },
                    access,
                    reply,
                };
                tx.send(job)
                    .await
                    .map_err(|_| "the leader's executor has stopped".to_string())?;
                let stopped = || "the leader's executor has stopped".to_string();
                let a = match kill {
                    None => rx.await.map_err(|_| stopped())?,
                    // A kill queued just before a script started would wait for that script's
                    // end: while it waits, it watches for a script to start and stops it.
                    Some(what) => {
                        tokio::pin!(rx);
                        let poll = Duration::from_millis(crate::config::SCRIPT_KILL_POLL_MS);
                        loop {
                            tokio::select! {
                                a = &mut rx => break a.map_err(|_| stopped())?,
                                _ = tokio::time::sleep(poll) => {
                                    if let Some(r) = scripts.kill(what, f.db) {
                                        let body = rmp_serde::to_vec_named(&killed(r));
                                        return body.map_err(|e| e.to_string());
                                    }
                                }
                            }
                        }
                    }
                };
                ForwardedAnswer {
                    replies: a.replies,
                    sync_token: a.sync_token,
                    unauthorized: a.unauthorized,
                }
            };
            rmp_serde::to_vec_named(&answer).map_err(|e| e.to_string())
        })
    })
}

impl Executor {
    /// Where a follower sends a REST request that writes: its leader's cluster address and
    /// the way there; None when this node answers it itself.
    pub(super) fn forward_target(
        &self,
        cmds: &[Vec<Vec<u8>>],
    ) -> Option<(crate::cluster::network::Network, String)> {
        let c = self.cluster.as_ref()?;
        if c.role.leading() || !for_leader(cmds) {
            return None;
        }
        let addr = c.role.leader_addr.read().ok()?.clone()?;
        Some((c.network.clone()?, addr))
    }

    /// Sends this request's publishes to every other member, for their subscribers (best
    /// effort, as a publish is: a node that does not answer misses them).
    pub(super) fn broadcast_published(&mut self) {
        let Some(c) = &mut self.cluster else {
            return;
        };
        if c.outbox.is_empty() {
            return;
        }
        let items = std::mem::take(&mut c.outbox);
        let (Some(net), Ok(peers)) = (c.network.clone(), c.role.peers.read()) else {
            return;
        };
        let Ok(body) = rmp_serde::to_vec_named(&ToExecutor::Publish(items)) else {
            return;
        };
        // One sender per peer, so a peer hears the publishes in the order they were made; a
        // peer that does not keep up (or is down) misses what its full queue cannot hold, as
        // a publish to an unreachable subscriber is lost.
        for addr in peers.iter() {
            let tx = c.senders.entry(addr.clone()).or_insert_with(|| {
                let (tx, mut rx) =
                    mpsc::channel::<Vec<u8>>(crate::config::CLUSTER_PUBLISH_QUEUE_MAX);
                let (net, addr) = (net.clone(), addr.clone());
                tokio::spawn(async move {
                    while let Some(body) = rx.recv().await {
                        let _ = net.forward(&addr, body).await;
                    }
                });
                tx
            });
            let _ = tx.try_send(body.clone());
        }
    }

    /// Sends a REST request to the leader; its answer goes to `reply` as the leader gave it.
    pub(super) fn forward(
        &self,
        to: (crate::cluster::network::Network, String),
        db: crate::state::databases::DbId,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        access: Access,
        reply: oneshot::Sender<Answer>,
    ) {
        let (access, token) = match access {
            Access::Full => (0, String::new()),
            Access::ReadOnly => (1, String::new()),
            Access::Token(t) => (2, t.to_string()),
        };
        let f = Forwarded {
            db,
            access,
            token,
            cmds: cmds
                .into_iter()
                .map(|c| c.into_iter().map(serde_bytes::ByteBuf::from).collect())
                .collect(),
            multi: mode == ExecMode::Multi,
        };
        let (net, addr) = to;
        let log = self.shared.log.clone();
        tokio::spawn(async move {
            let answer = match rmp_serde::to_vec_named(&ToExecutor::Exec(f)) {
                Ok(body) => match net.forward(&addr, body).await {
                    Ok(bytes) => rmp_serde::from_slice::<ForwardedAnswer>(&bytes)
                        .map_err(|e| format!("the leader's answer does not read: {e}")),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e.to_string()),
            };
            let answer = match answer {
                Ok(a) => {
                    // The write is visible here when it is answered here: this node waits
                    // (a bounded while) until it has applied what the leader answered with,
                    // so a client that reads next from the same node reads its write, with
                    // or without a sync token.
                    let wait = Duration::from_millis(crate::config::CLUSTER_SYNC_WAIT_MS);
                    let _ = tokio::time::timeout(wait, log.wait_durable(a.sync_token)).await;
                    Answer {
                        replies: a.replies,
                        sync_token: a.sync_token,
                        unauthorized: a.unauthorized,
                        aborted: false,
                    }
                }
                Err(e) => Answer {
                    replies: Err(format!(
                        "ERR this node is a follower and could not reach the leader at {addr}: {e}"
                    )),
                    sync_token: 0,
                    unauthorized: false,
                    aborted: false,
                },
            };
            let _ = reply.send(answer);
        });
    }
}
