//! The single task that owns all state: it batches, logs, applies and replies.
//!
//! Exactly one task ever touches the state, so nothing locks the keyspace and every job runs
//! alone, in queue order: that is what makes a transaction atomic and orders the monitor stream.
//! The task lives on the HTTP runtime (a task switch per hand-off instead of a thread wake-up;
//! see `start`). HTTP handlers send `Job`s through a bounded queue. The executor takes a batch,
//! runs each job (key-value commands through `command::run_request`, the one pipeline, with
//! this task as its `command::Server`; delivery operations through `delivery::ops`), frames
//! every change into the log buffer, writes the batch out once, and hands the replies to the
//! flusher, which sends them after one `fdatasync` covers them (group commit). Reads in a batch
//! that follows unsynced writes wait for that sync as well, so no reply ever shows a write that
//! could still be lost. Monitor lines and published messages leave from here too, which is
//! what puts them in execution order; so do Lua scripts, which run inside one job and are
//! logged by their effects.

pub mod admin;
pub mod cluster;
mod flusher;
pub mod pubsub;
pub mod sessions;
mod shares;
pub mod snapshots;
pub mod tenants;

use crate::clock;
use crate::command::ctx::{Facts, Server};
use crate::command::pipeline;
pub use crate::command::ExecMode;
use crate::command::{Ctx, Perm};
use crate::config::{self, FsyncMode};
use crate::delivery::ops::{self, AttemptResult, Op, OpReply, Tx};
use crate::delivery::sign::SigningKeys;
use crate::delivery::worker::{Dispatch, Workers};
use crate::lua::{ScriptControl, Scripts};
use crate::machine::{self, Machine};
use crate::point::Point;
use crate::record::Record;
use crate::reply::{errors, Reply};
use crate::state::databases::{day_of, Databases, DayUsage, DbEvent, DbId, DEFAULT_DB};
use crate::wal::{self, WalWriter};
pub use flusher::ParkSync;
use flusher::{FlushItem, Flusher, Pending};
use pubsub::PubSub;
pub use pubsub::{StreamItem, SubKind, SubscriberHandle, Wire};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use tenants::{TokenSource, TokenTable};
use tokio::sync::{mpsc, oneshot};

/// Which token a request came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The Standard token: the `default` user.
    Full,
    ReadOnly,
    /// Some other token: maybe one minted by `ACL RESTTOKEN`, resolved by the executor (which
    /// owns the users) when the request runs.
    Token(Arc<str>),
}

/// The executor's answer to an `Exec` job.
#[derive(Debug)]
pub struct Answer {
    /// One reply per command; or the single error of a discarded transaction.
    pub replies: Result<Vec<Reply>, String>,
    /// The log sequence this answer reflects (the `upstash-sync-token`).
    pub sync_token: u64,
    /// The token matched no user (HTTP 401); nothing ran.
    pub unauthorized: bool,
    /// A RESP connection's transaction did not run: a key it watched changed (EXEC's nil).
    pub aborted: bool,
}

/// What a RESP connection's `Exec` carries besides a REST request's.
#[derive(Debug, Clone, Copy)]
pub struct Connection {
    /// The connection's id (CLIENT ID).
    pub id: u64,
    /// The one command may wait (a blocking command outside MULTI): when its try finds
    /// nothing, the executor keeps the reply until a write serves it or `Unblock` comes.
    pub may_block: bool,
}

/// A RESP connection's own operations.
pub enum SessionOp {
    /// WATCH keys (answered OK once they are watched).
    Watch {
        db: DbId,
        keys: Vec<Vec<u8>>,
        reply: oneshot::Sender<()>,
    },
    /// UNWATCH.
    Unwatch,
    /// The blocked command stops waiting: its time ran out (`None`: it answers its nil), or
    /// CLIENT UNBLOCK ... ERROR (the error text).
    Unblock(Option<String>),
    /// The connection closed: forget its watch and its wait.
    Closed,
    /// May the token run this command of the connection's own (CLIENT, WATCH, SUBSCRIBE,
    /// ...)? The refusal, if not.
    Check {
        db: DbId,
        access: Access,
        args: Vec<Vec<u8>>,
        reply: oneshot::Sender<Result<(), Reply>>,
    },
}

pub enum Job {
    Exec {
        /// The database the request's token opened.
        db: DbId,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        access: Access,
        client: Arc<str>,
        reply: oneshot::Sender<Answer>,
        /// A RESP connection's, or a REST request's (None).
        connection: Option<Connection>,
    },
    /// A RESP connection's WATCH, UNWATCH, unblock or close.
    Session {
        conn: u64,
        op: SessionOp,
    },
    /// Registers an event stream: a monitor, or a subscriber to channels or patterns.
    Subscribe(SubscriberHandle),
    Unsubscribe {
        db: DbId,
        id: u64,
    },
    /// A RESP connection's stream `id` hears more channels or patterns.
    SubscribeMore {
        db: DbId,
        id: u64,
        more: SubKind,
    },
    /// A RESP connection's stream `id` writes in RESP3 (or RESP2) from now on (HELLO).
    Rewire {
        db: DbId,
        id: u64,
        resp3: bool,
    },
    /// A RESP connection's stream `id` stops hearing some (none named: all).
    UnsubscribeSome {
        db: DbId,
        id: u64,
        less: SubKind,
    },
    /// Periodic work: expiry of keys whose time has passed.
    Tick,
    /// The numbers `GET /metrics` asks the state for.
    Metrics {
        reply: oneshot::Sender<crate::metrics::Scrape>,
    },
    /// Whether a token belongs to a live ACL user of database `db`.
    CheckToken {
        db: DbId,
        token: Arc<str>,
        reply: oneshot::Sender<bool>,
    },
    /// What a token may do in database `db` now (None: it opens nothing there): for a
    /// route that checks keys itself (the console's time travel).
    Permissions {
        db: DbId,
        access: Access,
        reply: oneshot::Sender<Option<Perm>>,
    },
    /// The cluster's: apply a committed entry, install a snapshot image, attach the
    /// proposer (`cluster`).
    Cluster(cluster::ClusterJob),
    /// A REST request a follower forwarded to this node, its leader: run as `Exec` is, and
    /// never forwarded again.
    Forwarded {
        db: DbId,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        access: Access,
        reply: oneshot::Sender<Answer>,
    },
    /// An administration request (create, list, delete a database, ...).
    Admin {
        op: admin::AdminOp,
        reply: oneshot::Sender<admin::AdminReply>,
    },
    /// A delivery-service request (publish, cancel, list, ...).
    Delivery {
        op: Box<Op>,
        reply: oneshot::Sender<OpReply>,
    },
    /// A delivery attempt finished (taken from the worker pool's result channel).
    Attempted(Box<AttemptResult>),
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

impl Job {
    /// The bytes of the commands a request carries (0 for the other jobs): what its records
    /// will about weigh.
    fn request_bytes(&self) -> usize {
        match self {
            Job::Exec { cmds, .. } | Job::Forwarded { cmds, .. } => {
                cmds.iter().flatten().map(Vec::len).sum()
            }
            _ => 0,
        }
    }
}

/// What the executor shares with the HTTP side.
#[derive(Default)]
pub struct Shared {
    /// The log's progress (the sync token is its last sequence).
    pub log: Arc<wal::Progress>,
    /// The running script, if any: SCRIPT KILL and FUNCTION KILL are answered through it
    /// while the executor is busy running that script.
    pub scripts: Arc<ScriptControl>,
    /// Which token opens which database (the executor rebuilds it when databases change).
    pub tokens: RwLock<TokenTable>,
    /// What is measured as it happens (`GET /metrics`).
    pub metrics: crate::metrics::Live,
    /// Jobs the executor has taken, and whether it is inside a batch now: a watchdog on the
    /// HTTP side (`watch_executor`) sees from them how long one job has held the executor,
    /// for `/readyz`, without a clock read per job here.
    pub jobs_taken: std::sync::atomic::AtomicU64,
    pub in_batch: std::sync::atomic::AtomicBool,
    /// Delivery API jobs (`Job::Delivery`) sent to the executor's queue and not yet taken:
    /// with the queue's length, whether a job of another kind (a key-value request) waits,
    /// which ends the executor's rounds of handing due messages over. Counted before the
    /// send, so it never undercounts what the queue holds.
    pub delivery_jobs_queued: std::sync::atomic::AtomicUsize,
    /// How long the executor has been on one job, as the watchdog last saw (ms).
    pub stalled_ms: std::sync::atomic::AtomicU64,
    /// Ids of event streams and RESP connections, from 1.
    pub next_id: std::sync::atomic::AtomicU64,
    /// Bumped whenever a credential may have been revoked (a database's tokens reset or
    /// the database deleted, an ACL user changed or deleted): a RESP connection checks its
    /// own again, and closes if it no longer holds.
    pub credentials: Credentials,
}

/// See [`Shared::credentials`].
#[derive(Default)]
pub struct Credentials {
    pub generation: std::sync::atomic::AtomicU64,
    pub changed: tokio::sync::Notify,
}

impl Credentials {
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }
}

impl Shared {
    /// The database and role a database token opens.
    pub fn lookup_token(&self, token: &str) -> Option<(DbId, tenants::Role)> {
        self.tokens.read().ok()?.lookup(token)
    }

    /// The tokens of database `db` now.
    pub fn tokens_of(&self, db: DbId) -> Option<tenants::DbTokens> {
        self.tokens.read().ok()?.of(db).cloned()
    }
}

/// Everything the executor task owns.
pub struct Executor {
    /// The state, changed only through its door (`machine`).
    machine: Machine,
    tokens: TokenSource,
    wal: WalWriter,
    fsync: FsyncMode,
    flusher: Option<Flusher>,
    /// Where key-value writes wait for their sync with `always`, made by the runtime's thread
    /// (see `ParkSync`); None: the flusher makes them all.
    park_sync: Option<Arc<ParkSync>>,
    /// The last record that changed anything but the delivery service's state: a key-value
    /// read waits for it to be durable (it may show what it changed), and not for the
    /// delivery records after it, which no key-value read can show.
    kv_seq: u64,
    /// The last record written before the batch that runs now: a batch that wrote records and
    /// left `kv_seq` at or before it wrote the delivery service's records alone.
    batch_start_seq: u64,
    /// The last record accounted for in `kv_seq` or as the delivery service's: a record past
    /// it at the start of a batch was written between batches (a snapshot's) and counts as
    /// key-value.
    accounted_seq: u64,
    shared: Arc<Shared>,
    /// Monitors and subscribers, per database.
    pubsubs: BTreeMap<DbId, PubSub>,
    /// RESP connections' watched keys and blocked commands.
    sessions: sessions::Sessions,
    /// The next `exec` tries a blocked command again (`Around::retry`).
    retrying: bool,
    started_ms: u64,
    commands_processed: u64,
    listen_port: u16,
    workers: Workers,
    /// Due messages on their way to `workers`, kept between batches (see `dispatch_due`).
    due: Vec<crate::delivery::Due>,
    backoff_unit_ms: u64,
    scripts: Scripts,
    /// The scratch databases' use of the executor, and which of them cool down.
    shares: shares::Shares,
    /// How many scratch databases exist: while none does, no job is looked at for one.
    scratch_dbs: usize,
    /// Why writes are refused when the server shows a past point of its log (`--at`).
    read_only: Option<String>,
    /// A cluster node's side (None: a single server).
    cluster: Option<cluster::Link>,
    /// The time of that point: every job runs at it.
    frozen_ms: Option<u64>,
    snapshots: snapshots::Snapshots,
    /// The hosted service's limits, as configured (`commands_left` unused here).
    limits: crate::command::ctx::Limits,
    /// Commands a database may run per day (`--max-requests-per-day`).
    commands_per_day: Option<u64>,
    /// The script time limit of the default and named databases (`--script-time-limit-ms`).
    script_time_limit_ms: u64,
    /// `--max-memory`, in bytes of heap (`alloc::in_use`).
    memory_bytes_max: Option<u64>,
    /// Jobs taken since start (see `Shared::jobs_taken`).
    jobs_taken: u64,
    /// When the tick last told `trim_watch` what moved (see `alloc::TrimWatch`).
    heap_looked: std::time::Instant,
    /// What the log took and the data freed since the heap was last trimmed.
    trim_watch: crate::alloc::TrimWatch,
    /// An empty vector for the next request's logged commands (see `keep_logged`).
    logged_spare: Vec<Vec<Vec<u8>>>,
    /// Usage counted since it was last logged, per database, for `usage_day`.
    usage: BTreeMap<DbId, Counting>,
    /// Each command's latency, by table id (`GET /metrics`).
    command_seconds: Vec<crate::metrics::LocalSeconds>,
    /// Requests' own commands so far (one in `COMMAND_TIMING_EVERY` is timed).
    commands_timed_at: usize,
    usage_day: u32,
    usage_logged_ms: u64,
    /// How often the usage is logged (`USAGE_LOG_INTERVAL_MS`; tests lengthen it).
    usage_log_interval_ms: u64,
    /// Commands per database and name since the server started (`GET /metrics`), added to
    /// when the usage is logged.
    command_totals: BTreeMap<DbId, BTreeMap<String, u64>>,
}

/// What the executor needs at start besides the log: the delivery service's settings and the
/// secret that keys ACL REST tokens.
pub struct Setup {
    pub acl_secret: Vec<u8>,
    /// The default database's configured tokens (until its first reset).
    pub default_tokens: tenants::DbTokens,
    pub keys: Arc<RwLock<SigningKeys>>,
    /// Milliseconds per "second" of the default retry backoff (1000; tests shrink it).
    pub backoff_unit_ms: u64,
    /// Where a destination's response body is cut (the maximum message size).
    pub message_bytes_max: usize,
    /// `--region`: sent with every delivery as `Upstash-Region`.
    pub region: Option<String>,
    /// The bounds of the delivery state.
    pub delivery_limits: config::DeliveryLimits,
    /// Open the log at this past point, read-only (`tidepool serve --at`).
    pub at: Option<Point>,
    /// When snapshots are taken, and how much log is kept behind them.
    pub snapshots: config::SnapshotPolicy,
    /// The hosted service's limits (`--max-key-bytes`, `--max-value-bytes`).
    pub limits: crate::command::ctx::Limits,
    /// Commands a database may run per day (`--max-requests-per-day`); None: no limit.
    pub commands_per_day: Option<u64>,
    /// How often the usage counts are logged (`USAGE_LOG_INTERVAL_MS`).
    pub usage_log_interval_ms: u64,
    /// The script time limit of the default and named databases (`--script-time-limit-ms`).
    pub script_time_limit_ms: u64,
    /// `--max-memory`: writes that may grow memory are refused past it.
    pub memory_bytes_max: Option<u64>,
    /// A cluster node: its role, and the image of the snapshot it kept (its state starts there
    /// and the cluster applies the rest). None: a single server, whose log is its own.
    pub cluster: Option<ClusterStart>,
    /// The runtime's hook for key-value syncs (`ParkSync::run` before each park); None: the
    /// flusher syncs every record.
    pub park_sync: Option<Arc<ParkSync>>,
}

/// How a cluster node's executor starts.
pub struct ClusterStart {
    pub role: Arc<cluster::Role>,
    pub image: Option<Vec<u8>>,
}

/// Watches from the HTTP side how long the executor has been on one job: every `period`, a
/// job count that has not moved while a batch is open adds the period; `/readyz` reads the
/// sum. (A clock read per job on the executor cost more than this.)
pub async fn watch_executor(shared: Arc<Shared>, period: std::time::Duration) {
    let mut iv = tokio::time::interval(period);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (u64::MAX, std::time::Instant::now());
    loop {
        iv.tick().await;
        let jobs = shared.jobs_taken.load(Ordering::Relaxed);
        let now = std::time::Instant::now();
        if jobs != last.0 || !shared.in_batch.load(Ordering::Relaxed) {
            last = (jobs, now);
        }
        let stalled = now.duration_since(last.1).as_millis() as u64;
        shared.stalled_ms.store(stalled, Ordering::Relaxed);
        if std::sync::Arc::strong_count(&shared) == 1 {
            return;
        }
    }
}

/// Lets the connection tasks run inside a batch (answers written, requests queued); the time
/// is not the executor's, for `/readyz`'s watch.
async fn let_connections_run(shared: &Shared) {
    shared.in_batch.store(false, Ordering::Relaxed);
    tokio::task::yield_now().await;
    shared.in_batch.store(true, Ordering::Relaxed);
}

/// A started executor: its queue, its counters, and the task to await.
pub struct ExecutorHandle {
    pub tx: mpsc::Sender<Job>,
    pub shared: Arc<Shared>,
    /// The executor task; it ends after a `Shutdown` job, once the log is synced.
    pub task: tokio::task::JoinHandle<()>,
    pub report: wal::RecoveryReport,
}

/// Loads the newest snapshot of `data_dir`, replays the log after it and starts the executor
/// task. Must be called inside the tokio runtime.
pub fn start(
    data_dir: &Path,
    fsync: FsyncMode,
    listen_port: u16,
    setup: Setup,
) -> Result<ExecutorHandle, String> {
    let dir = &data_dir.join("wal");
    let read_only = setup.at.map(|p| {
        format!(
            "this server shows its log as of {p}, read-only (--at): it answers reads, not writes"
        )
    });
    let access = match &read_only {
        Some(why) => machine::Access::ReadOnlyServer(why.clone()),
        None => machine::Access::Write,
    };
    let recovered = match &setup.cluster {
        // A cluster node's state is the cluster's: its kept snapshot, then the entries the
        // cluster applies; its own `wal/` is not its log.
        Some(c) => {
            let machine = match &c.image {
                Some(i) => crate::cluster::state_machine::machine_of(i)?,
                None => Machine::new(),
            };
            let at = machine.position();
            let writer = WalWriter::detached(dir, at.seq, at.unix_ms)
                .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
            machine::Recovered::cluster(machine, writer)
        }
        None => machine::recover(
            data_dir,
            machine::Recover {
                from: machine::Start::Newest,
                upto: setup.at,
                access,
                progress: None,
                observe: None,
                deadline: None,
            },
        )?,
    };
    if recovered.removed_tmp > 0 {
        crate::log::line(&format!(
            "removed {} temporary snapshot file(s) left by an interrupted snapshot",
            recovered.removed_tmp
        ));
    }
    for d in &recovered.skipped {
        crate::log::line(&format!(
            "warning: the snapshot {d} is damaged; starting from an older point and a longer log instead"
        ));
    }
    let machine::Recovered {
        mut machine,
        writer,
        report,
        snapshot: last_snapshot,
        replayed_bytes,
        errors: replay_errors,
        ..
    } = recovered;
    let Some(mut wal) = writer else {
        return Err(format!("cannot open the log in {}", dir.display()));
    };
    // What a crash left of an interrupted snapshot goes now (it was never published); what
    // the retention no longer keeps too.
    if read_only.is_none() {
        if let Some((seq, _)) = last_snapshot {
            let now = clock::wall_unix_ms();
            if let Err(e) =
                crate::snapshot::compact(data_dir, dir, seq, setup.snapshots.retention, now)
            {
                crate::log::line(&format!("warning: compacting the log failed: {e}"));
            }
        }
    }
    if replay_errors > 0 {
        crate::log::line(&format!("warning: {replay_errors} logged commands answered an error on replay (they changed nothing)"));
    }
    // The log goes on after the last record it holds, which may be past the state's (a
    // snapshot that holds records a crash took from the log: numbering goes on after it).
    machine.logged(machine::Position {
        seq: wal.last_seq(),
        unix_ms: wal.last_timestamp(),
    });
    // Live random choices (SPOP, generated ids) are logged as they came out; their seed is
    // the live server's own.
    machine.reseed(clock::wall_unix_us());
    let tokens = TokenSource::new(setup.acl_secret, setup.default_tokens);
    arm_acl_secrets(&tokens, machine.parts().dbs, None);
    machine.parts().delivery.limits = setup.delivery_limits;
    let shared = Arc::new(Shared::default());
    if let Ok(mut t) = shared.tokens.write() {
        *t = TokenTable::build(&tokens, machine.dbs());
    }
    shared.log.last_seq.store(wal.last_seq(), Ordering::SeqCst);
    shared
        .log
        .durable_seq
        .store(wal.last_seq(), Ordering::SeqCst);
    // A point given as a time is that time; a record's, the record's time.
    let frozen_ms = match setup.at {
        Some(Point::TimeMs(t)) => Some(t),
        Some(Point::Seq(_)) => Some(wal.next_timestamp(0)),
        None => None,
    };
    // The writer's own syncs (a segment closed) take the same lock as the flusher's.
    wal.share_progress(shared.log.clone());
    let flusher = match fsync {
        // Read-only at a past point: nothing is ever written, so nothing is synced.
        _ if read_only.is_some() => None,
        // A cluster node's records are synced in the cluster's log.
        _ if setup.cluster.is_some() => None,
        FsyncMode::Never => None,
        mode => Some(Flusher::start(mode, shared.log.clone())),
    };
    let park_sync = match (&flusher, fsync) {
        (Some(f), FsyncMode::Always) => {
            setup.park_sync.inspect(|p| p.attach(shared.log.clone(), f))
        }
        _ => None,
    };
    let (tx, rx) = mpsc::channel(config::EXECUTOR_QUEUE_JOBS_MAX);
    // One result per attempt in flight, and never more attempts than that: sends never wait.
    let (results_tx, results) = mpsc::channel(config::DELIVERY_IN_FLIGHT_MAX);
    let workers = Workers::new(
        setup.keys,
        shared.log.clone(),
        fsync == FsyncMode::Always,
        setup.message_bytes_max,
        setup.region.clone(),
        results_tx,
    )?;
    let now = clock::wall_unix_ms();
    let mut ex = Executor {
        machine,
        tokens,
        wal,
        fsync,
        flusher,
        park_sync,
        kv_seq: 0,
        batch_start_seq: 0,
        accounted_seq: 0,
        shared: shared.clone(),
        pubsubs: BTreeMap::new(),
        sessions: sessions::Sessions::default(),
        retrying: false,
        started_ms: clock::wall_unix_ms(),
        commands_processed: 0,
        listen_port,
        workers,
        due: Vec::new(),
        backoff_unit_ms: setup.backoff_unit_ms,
        scripts: Scripts::new(shared.scripts.clone())?,
        shares: shares::Shares::default(),
        scratch_dbs: 0,
        snapshots: snapshots::Snapshots::new(
            data_dir.to_path_buf(),
            dir.to_path_buf(),
            setup.snapshots,
            last_snapshot,
            replayed_bytes,
            match &setup.cluster {
                Some(_) => Some(format!(
                    "a cluster node's snapshots are the cluster's: one every {} entries, kept in cluster/ of the data directory",
                    config::CLUSTER_SNAPSHOT_EVERY_ENTRIES
                )),
                None => read_only.clone(),
            },
            clock::wall_unix_ms(),
        ),
        read_only,
        cluster: setup.cluster.map(|c| cluster::Link::new(c.role)),
        frozen_ms,
        limits: setup.limits,
        commands_per_day: setup.commands_per_day,
        script_time_limit_ms: setup.script_time_limit_ms,
        memory_bytes_max: setup.memory_bytes_max,
        jobs_taken: 0,
        usage: BTreeMap::new(),
        command_seconds: Vec::new(),
        commands_timed_at: 0,
        usage_day: day_of(now),
        usage_logged_ms: now,
        logged_spare: Vec::new(),
        heap_looked: std::time::Instant::now(),
        trim_watch: crate::alloc::TrimWatch::after_start(
            replayed_bytes + last_snapshot.map_or(0, |(_, bytes)| bytes),
        ),
        usage_log_interval_ms: setup.usage_log_interval_ms,
        command_totals: BTreeMap::new(),
    };
    // One task owns the state. It runs on the HTTP runtime so that handing it a job and getting
    // the reply back costs a task switch, not a thread wake-up (measured: the thread hand-off
    // took a fifth of the CPU under load). Still one owner, one queue, one order.
    let task = tokio::spawn(async move { ex.run(rx, results).await });
    Ok(ExecutorHandle {
        tx,
        shared,
        task,
        report,
    })
}

/// Keys every database's ACL tokens with its own secret (`only`: one database).
fn arm_acl_secrets(tokens: &TokenSource, dbs: &mut Databases, only: Option<DbId>) {
    let metas: Vec<_> = dbs
        .metas()
        .filter(|m| only.is_none_or(|id| id == m.id))
        .cloned()
        .collect();
    for m in metas {
        let (secret, suffix) = tokens.acl_secret(&m);
        if let Some(db) = dbs.get_mut(m.id) {
            db.acl.set_secret(secret, suffix);
        }
    }
}

impl Executor {
    /// The time a job runs at: wall-clock time, never below the last record's; or, for a
    /// server showing a past point of its log, that point's time, so that what had not
    /// expired then has not expired now.
    fn now(&mut self) -> u64 {
        match self.frozen_ms {
            Some(t) => t,
            None => self.wal.next_timestamp(clock::wall_unix_ms()),
        }
    }

    /// The error a key-value write gets when writes are refused: the server shows a past point
    /// of its log (`--at`), or the log failed.
    fn write_refusal(&self) -> Option<String> {
        match &self.read_only {
            Some(why) => Some(format!("ERR {why}")),
            None => self
                .poisoned()
                .map(|why| errors::log_failed(&why))
                .or_else(|| self.follower_refusal().map(|why| format!("ERR {why}"))),
        }
    }

    /// Why the log refuses writes, if it does: a failed write here or a failed sync in the
    /// flusher, or a server opened read-only at a past point (its writer starts poisoned).
    fn poisoned(&self) -> Option<String> {
        self.wal
            .poisoned()
            .map(str::to_string)
            .or_else(|| self.shared.log.fsync_failed.get().cloned())
    }

    /// Whether `job` is a request of a scratch database, which waits its turn (`run`).
    fn is_scratch_request(&self, job: &Job) -> bool {
        match job {
            Job::Exec { db, .. } if self.scratch_dbs > 0 => {
                self.machine.dbs().meta(*db).is_some_and(|m| m.scratch)
            }
            _ => false,
        }
    }

    async fn run(
        &mut self,
        mut rx: mpsc::Receiver<Job>,
        mut results: mpsc::Receiver<AttemptResult>,
    ) {
        let attempted = |r: AttemptResult| Job::Attempted(Box::new(r));
        let mut batch = Vec::with_capacity(config::EXECUTOR_BATCH_JOBS_MAX);
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        // Requests of scratch databases, in arrival order, each waiting for a batch of its own
        // turn: a batch runs every other job it has and at most one of these, so a request of
        // a named database waits behind at most one scratch request (which `shares` bounds),
        // however many scratch clients keep the queue full.
        let mut deferred: std::collections::VecDeque<Job> = std::collections::VecDeque::new();
        // Batches run while scratch requests waited: past `SCRATCH_DEFERRED_BATCHES_MAX`, one
        // joins the next batch whatever else it holds, so busy named databases cannot starve
        // them.
        let mut skipped = 0u32;
        self.scratch_dbs = self.machine.dbs().metas().filter(|m| m.scratch).count();
        while shutdown.is_none() {
            let wake = if self.poisoned().is_some() {
                None
            } else {
                let full = self.machine.delivery().in_flight >= config::DELIVERY_IN_FLIGHT_MAX;
                self.machine.delivery().next_wake_ms(!full)
            };
            // No attempt in flight means no result can arrive: then the job queue alone is
            // awaited, as cheaply as before the workers had a channel of their own (the
            // key-value hot path). Jobs are polled first; results wait at most one batch.
            // Whether this batch begins with the oldest deferred request.
            let mut from_deferred = false;
            // What the executor waits for besides jobs: the next timer of the delivery service
            // or of the tick (true), or key-value writes that the runtime's thread has not
            // synced for too long (false).
            let park_due = self.park_sync_due_in();
            let timer = match wake {
                Some(at) => {
                    let now = clock::wall_unix_ms();
                    let sleep = std::time::Duration::from_millis(at.saturating_sub(now));
                    match park_due {
                        Some(due) if due < sleep => Some((due, false)),
                        _ => Some((sleep, true)),
                    }
                }
                None => park_due.map(|due| (due, false)),
            };
            let first = match (timer, self.machine.delivery().in_flight) {
                // Deferred requests wait: the queue is only looked at, not awaited.
                _ if !deferred.is_empty() => match rx.try_recv() {
                    Ok(j) => Some(j),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        from_deferred = true;
                        deferred.pop_front()
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                },
                (None, 0) => rx.recv().await,
                (None, _) => tokio::select! {
                    biased;
                    j = rx.recv() => j,
                    Some(r) = results.recv() => Some(attempted(r)),
                },
                (Some((sleep, tick)), _) => {
                    tokio::select! {
                        biased;
                        j = rx.recv() => j,
                        Some(r) = results.recv() => Some(attempted(r)),
                        _ = tokio::time::sleep(sleep) => {
                            if !tick {
                                self.park_sync_overdue();
                                continue;
                            }
                            Some(Job::Tick)
                        }
                    }
                }
            };
            let Some(first) = first else {
                break;
            };
            if !from_deferred {
                self.taken(&first);
            }
            // A cluster's batch is one Raft entry: past CLUSTER_BATCH_REQUEST_BYTES_MAX of
            // requests it takes no more, so that no entry outgrows what the log holds.
            let bytes_max = if self.cluster.is_some() {
                config::CLUSTER_BATCH_REQUEST_BYTES_MAX
            } else {
                usize::MAX
            };
            let mut bytes = first.request_bytes();
            batch.push(first);
            // Let the connection tasks that are ready run first: their jobs join this batch,
            // so one log write (and one sync) covers them all.
            tokio::task::yield_now().await;
            while batch.len() < config::EXECUTOR_BATCH_JOBS_MAX && bytes < bytes_max {
                match rx.try_recv() {
                    Ok(j) => {
                        self.taken(&j);
                        bytes = bytes.saturating_add(j.request_bytes());
                        batch.push(j);
                    }
                    Err(_) => break,
                }
            }
            // Attempts' results a few at a time: each costs the executor about what a publish
            // does, and a request that comes meanwhile waits for the whole batch.
            let mut taken = 0;
            while taken < config::DELIVERY_RESULTS_PER_BATCH_MAX {
                let Ok(r) = results.try_recv() else {
                    break;
                };
                batch.push(attempted(r));
                taken += 1;
            }
            if self.scratch_dbs > 0 || !deferred.is_empty() {
                let mut jobs = std::mem::take(&mut batch).into_iter();
                let mut turn = if from_deferred { jobs.next() } else { None };
                for job in jobs {
                    if self.is_scratch_request(&job) {
                        deferred.push_back(job);
                    } else {
                        batch.push(job);
                    }
                }
                // A scratch request runs in a batch of its own (the others' replies would
                // wait for it), unless they have kept it waiting for several batches.
                if turn.is_none()
                    && (batch.is_empty() || skipped >= config::SCRATCH_DEFERRED_BATCHES_MAX)
                {
                    turn = deferred.pop_front();
                }
                match turn {
                    Some(job)
                        if batch.is_empty() || skipped >= config::SCRATCH_DEFERRED_BATCHES_MAX =>
                    {
                        batch.push(job);
                        skipped = 0;
                    }
                    Some(job) => {
                        deferred.push_front(job);
                        skipped += 1;
                    }
                    None if !deferred.is_empty() => skipped += 1,
                    None => {}
                }
                if batch.is_empty() {
                    continue;
                }
            }
            // A cluster's leader whose lease lapsed waits a while for it before it answers.
            if let Some(role) = self.lease_to_await() {
                if !cluster::await_lease(role).await {
                    self.lease_gave_up();
                }
            }
            // The key-value sync the runtime's thread has not made for a while (it was never
            // out of work): made here, before this batch adds to it.
            self.park_sync_overdue();
            // Each reply with the record it waits for (see `kv_seq`).
            let mut pending: Vec<(u64, Pending)> = Vec::with_capacity(batch.len());
            self.shared.in_batch.store(true, Ordering::Relaxed);
            if self.wal.last_seq() > self.accounted_seq {
                self.kv_seq = self.wal.last_seq();
            }
            self.batch_start_seq = self.wal.last_seq();
            // The delivery service's jobs after the others: every job of a batch is in flight
            // at once, so any order among them is one the clients could see, and a key-value
            // request then does not wait behind the publishes that came with it.
            let is_delivery = |j: &Job| matches!(j, Job::Delivery { .. } | Job::Attempted(_));
            let later: Vec<Job> = if batch.iter().any(is_delivery) {
                let (d, rest): (Vec<Job>, Vec<Job>) = batch.drain(..).partition(is_delivery);
                batch.extend(rest);
                d
            } else {
                Vec::new()
            };
            // With delivery work after them (attempts' results, publishes, due messages), the
            // other jobs are answered first and the connection tasks run before that work
            // starts: a request then waits for at most one slice of delivery work, the one in
            // progress when it came, not also for the slice of its own batch.
            let split = self.cluster.is_none()
                && !batch.is_empty()
                && (!later.is_empty() || self.messages_due());
            for job in batch.drain(..) {
                let before = self.wal.last_seq();
                self.handle_job(job, &mut pending, &mut shutdown);
                let after = self.wal.last_seq();
                if after != before {
                    self.kv_seq = after;
                }
            }
            if split {
                self.accounted_seq = self.wal.last_seq();
                self.finish_batch(std::mem::take(&mut pending));
                let_connections_run(&self.shared).await;
                if self.wal.last_seq() > self.accounted_seq {
                    self.kv_seq = self.wal.last_seq();
                }
                self.batch_start_seq = self.wal.last_seq();
            }
            for job in later {
                self.handle_job(job, &mut pending, &mut shutdown);
            }
            // Schedules and waiter deadlines: only when one is due, so a key-value batch pays
            // two B-tree peeks here and nothing more.
            if self.machine.delivery().timers_due(clock::wall_unix_ms()) {
                self.delivery_events(|tx, _| {
                    ops::fire_schedules(tx);
                    ops::expire_waiters(tx);
                });
            }
            self.accounted_seq = self.wal.last_seq();
            self.finish_batch(pending);
            // Between rounds the connection tasks run, so that a request that came meanwhile
            // is in the queue: unless it is the delivery service's (a publish waits for the
            // rounds, which is what keeps the delivery thread in work while publishes keep
            // coming), it ends the rounds and starts the next batch.
            let mut rounds = 1;
            while self.dispatch_due() && rounds < config::DELIVERY_DISPATCH_ROUNDS_MAX {
                let_connections_run(&self.shared).await;
                if rx.len() > self.shared.delivery_jobs_queued.load(Ordering::Relaxed)
                    || !deferred.is_empty()
                {
                    break;
                }
                rounds += 1;
            }
            if self.poisoned().is_none() && self.snapshots.due(&self.wal) {
                // Logged by the snapshot's own lines; nobody waits for an answer.
                let _ = self.take_snapshot(true);
            }
            self.shared.in_batch.store(false, Ordering::Relaxed);
        }
        self.snapshots.stop();
        // Shutdown: everything written is synced before the process exits.
        if let Some(p) = &self.park_sync {
            p.run();
            p.detach();
        }
        if let Some(f) = self.flusher.take() {
            f.stop();
        }
        if self.poisoned().is_none() {
            // After any other sync of the log, as every sync is (`flusher::sync`).
            let (file, last) = (self.wal.current_file(), self.wal.last_seq());
            if let Some(why) = flusher::sync(&self.shared.log, &file, last) {
                crate::log::line(&format!("error: final sync of the log failed: {why}"));
            }
        }
        if let Some(done) = shutdown {
            let _ = done.send(());
        }
    }

    /// Runs a delivery API operation; its events become one record.
    fn delivery_op(&mut self, op: Op) -> OpReply {
        if op.writes() {
            if let Some(why) = self.read_only.clone().or_else(|| self.follower_refusal()) {
                return OpReply {
                    status: 403,
                    body: serde_json::json!({ "error": why }),
                };
            }
        }
        // Reads too, after a failed write or sync (see `exec`).
        if self.read_only.is_none() {
            if let Some(why) = self.poisoned() {
                return OpReply {
                    status: 500,
                    body: serde_json::json!({
                        "error": errors::log_failed_text(&why)
                    }),
                };
            }
        }
        let ts = self.now();
        let seq = self.machine.next_seq();
        let parts = self.machine.parts();
        let mut tx = Tx::new(parts.delivery, seq, ts, parts.rng);
        let reply = ops::run(&mut tx, op);
        tx.enforce_bounds();
        let events = std::mem::take(&mut tx.events);
        if !events.is_empty() {
            self.append(ts, &Record::Delivery(events));
        }
        reply
    }

    /// Runs internal delivery work (attempt results, schedules, waiter deadlines) as one record.
    fn delivery_events(&mut self, f: impl FnOnce(&mut Tx, u64)) {
        // A follower's delivery state changes only by what the leader logs.
        if self.poisoned().is_some() || self.follower_refusal().is_some() {
            return;
        }
        let ts = self.now();
        let seq = self.machine.next_seq();
        let unit = self.backoff_unit_ms;
        let parts = self.machine.parts();
        let mut tx = Tx::new(parts.delivery, seq, ts, parts.rng);
        f(&mut tx, unit);
        tx.enforce_bounds();
        let events = std::mem::take(&mut tx.events);
        for e in &events {
            if let crate::delivery::model::Event::Attempt { outcome, .. } = e {
                let outcome = match outcome {
                    crate::delivery::model::Outcome::Delivered => "delivered",
                    crate::delivery::model::Outcome::Retry { .. } => "retried",
                    crate::delivery::model::Outcome::Dead { .. } => "failed",
                };
                self.shared
                    .metrics
                    .delivery_attempts
                    .get_or_create(&crate::metrics::OutcomeLabel { outcome })
                    .inc();
            }
        }
        if !events.is_empty() {
            self.append(ts, &Record::Delivery(events));
        }
    }

    /// The numbers `GET /metrics` reports from the state.
    fn scrape(&self) -> crate::metrics::Scrape {
        let now = clock::wall_unix_ms();
        let facts = self.snapshots.facts(self.wal.last_seq(), now);
        let census = self.machine.census();
        crate::metrics::Scrape {
            log_records: self.wal.last_seq(),
            log_bytes: facts.log_bytes,
            log_syncs: self.shared.log.syncs.load(Ordering::Relaxed),
            snapshot_age_s: (facts.saves > 0 || facts.snapshot_bytes > 0)
                .then(|| (now / 1000).saturating_sub(facts.last_save_s)),
            snapshot_took_ms: facts.last_took_ms,
            snapshots: facts.saves,
            databases: census
                .databases
                .into_iter()
                .map(|(id, name, keys)| {
                    let mut by: BTreeMap<String, u64> =
                        self.command_totals.get(&id).cloned().unwrap_or_default();
                    for (name, n) in self
                        .usage
                        .get(&id)
                        .map(Counting::day)
                        .unwrap_or_default()
                        .by_command
                    {
                        *by.entry(name).or_insert(0) += n;
                    }
                    crate::metrics::DbScrape {
                        name,
                        keys,
                        commands: by.into_iter().collect(),
                    }
                })
                .collect(),
            messages_pending: census.messages_pending,
            messages_in_flight: census.messages_in_flight,
            dlq_entries: census.dlq_entries,
            schedules: census.schedules,
            command_seconds: {
                let table = crate::command::table::global();
                self.command_seconds
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.count() > 0)
                    .filter_map(|(id, h)| Some((table.name_of(id)?.to_string(), h.clone())))
                    .collect()
            },
            cluster: None,
        }
    }

    /// Runs a request's commands (`Job::Exec`) and answers, at once or after the sync of
    /// what it wrote or may have read. A RESP connection's EXEC fails here when a key it
    /// watched changed; its blocking command that found nothing waits here.
    #[allow(clippy::too_many_arguments)]
    fn exec_job(
        &mut self,
        db: DbId,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        access: Access,
        client: Arc<str>,
        reply: oneshot::Sender<Answer>,
        connection: Option<Connection>,
        pending: &mut Vec<(u64, Pending)>,
    ) {
        let last_seq = self.wal.last_seq();
        let Some(perm) = self.resolve(db, &access) else {
            let _ = reply.send(Answer {
                replies: Err("WRONGPASS invalid or missing auth token".into()),
                sync_token: last_seq,
                unauthorized: true,
                aborted: false,
            });
            return;
        };
        let origin = match connection {
            Some(_) => crate::command::ctx::Origin::Connection,
            None => crate::command::ctx::Origin::Request,
        };
        if let (Some(c), ExecMode::Multi) = (connection, mode) {
            let now = self.now();
            let dbs = self.machine.dbs();
            let broken = self.sessions.take_watch(c.id, |d, k| {
                dbs.get(d).is_none_or(|db| db.get(k, now).is_none())
            });
            if broken {
                let _ = reply.send(Answer {
                    replies: Ok(Vec::new()),
                    sync_token: last_seq,
                    unauthorized: false,
                    aborted: true,
                });
                return;
            }
        }
        let before = last_seq;
        let blocking = connection.filter(|c| c.may_block && cmds.len() == 1);
        let args = blocking.and_then(|_| cmds.first().cloned());
        let replies = self.exec(db, cmds, mode, &perm, &client, origin);
        if let (Some(c), Some(args), Ok([only])) = (blocking, args, replies.as_deref()) {
            if matches!(only, Reply::Nil | Reply::NilArray) {
                self.block(c.id, db, args, access, client, only.clone(), reply);
                self.serve_ready(pending);
                return;
            }
        }
        self.answer_after(before, replies, reply, pending);
        self.serve_ready(pending);
    }

    /// Sends an `Exec`'s answer now, or after the sync of what it wrote (or, for a read, of
    /// the last key-value record it may show).
    fn answer_after(
        &mut self,
        before: u64,
        replies: Result<Vec<Reply>, String>,
        reply: oneshot::Sender<Answer>,
        pending: &mut Vec<(u64, Pending)>,
    ) {
        let last_seq = self.wal.last_seq();
        // What it wrote, or else the last key-value record it may have read.
        let needs = if last_seq != before {
            last_seq
        } else {
            self.kv_seq
        };
        let answer = Pending::Answer {
            reply,
            replies,
            sync_token: last_seq,
        };
        // A read of durable state answers now, not after the rest of the batch.
        if needs <= self.shared.log.durable_seq.load(Ordering::SeqCst)
            && self.fsync == FsyncMode::Always
            && self.poisoned().is_none()
        {
            answer.answer(None);
        } else {
            pending.push((needs, answer));
        }
    }

    /// Keeps a blocking command that found nothing until a write to one of its keys serves
    /// it, or its connection's `Unblock` comes.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &mut self,
        conn: u64,
        db: DbId,
        mut args: Vec<Vec<u8>>,
        access: Access,
        client: Arc<str>,
        timeout_reply: Reply,
        reply: oneshot::Sender<Answer>,
    ) {
        let table = crate::command::table::global();
        let crate::command::table::Lookup::Found(info) = table.lookup(&args) else {
            return;
        };
        if info.name == "xread" {
            // It waits for entries after those there now, not after each new one's `$`.
            let now = self.now();
            if let Some(d) = self.machine.dbs().get(db) {
                args = crate::command::streams::with_last_ids(d, now, &args);
            }
        }
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for r in info.key_refs(&args) {
            if !keys.iter().any(|k| k.as_slice() == r.key) {
                keys.push(r.key.to_vec());
            }
        }
        self.sessions.block(
            conn,
            keys,
            sessions::BlockedParts {
                db,
                args,
                access,
                client,
                timeout_reply,
                reply,
            },
        );
    }

    /// Tries again the blocked commands whose keys were written, in the order they blocked,
    /// until none is left to serve: a served command may write a key another waits on
    /// (BLMOVE's destination).
    fn serve_ready(&mut self, pending: &mut Vec<(u64, Pending)>) {
        while let Some((_, conns)) = self.sessions.next_ready() {
            for conn in conns {
                let Some(b) = self.sessions.unblock(conn) else {
                    continue;
                };
                // Its connection is gone: it takes nothing.
                if b.reply.is_closed() {
                    continue;
                }
                let Some(perm) = self.resolve(b.db, &b.access) else {
                    let _ = b.reply.send(Answer {
                        replies: Err("WRONGPASS invalid or missing auth token".into()),
                        sync_token: self.wal.last_seq(),
                        unauthorized: true,
                        aborted: false,
                    });
                    continue;
                };
                let before = self.wal.last_seq();
                self.retrying = true;
                let replies = self.exec(
                    b.db,
                    vec![b.args.clone()],
                    ExecMode::Each,
                    &perm,
                    &b.client,
                    crate::command::ctx::Origin::Connection,
                );
                // Still nothing for it (or a key of another type, which Redis does not wake
                // it for): it waits on, in its place.
                let waits = match replies.as_deref() {
                    Ok([Reply::Nil | Reply::NilArray]) => true,
                    Ok([Reply::Error(e)]) => e.starts_with("WRONGTYPE"),
                    _ => false,
                };
                if waits && self.wal.last_seq() == before {
                    self.block(
                        conn,
                        b.db,
                        b.args,
                        b.access,
                        b.client,
                        b.timeout_reply,
                        b.reply,
                    );
                    continue;
                }
                self.answer_after(before, replies, b.reply, pending);
            }
        }
    }

    /// Database `db`'s tokens were reset or it was deleted: the commands blocked in it were
    /// sent with a token that no longer opens it, and end unanswered (their connections
    /// close) before a write with the new token could serve them.
    fn end_waits(&mut self, db: DbId) {
        for conn in self.sessions.blocked_in(db) {
            if let Some(b) = self.sessions.unblock(conn) {
                let _ = b.reply.send(Answer {
                    replies: Err("WRONGPASS invalid or missing auth token".into()),
                    sync_token: self.wal.last_seq(),
                    unauthorized: true,
                    aborted: false,
                });
            }
        }
    }

    /// A RESP connection's WATCH, UNWATCH, unblock or close.
    fn session_op(&mut self, conn: u64, op: SessionOp, pending: &mut Vec<(u64, Pending)>) {
        match op {
            SessionOp::Watch { db, keys, reply } => {
                let now = self.now();
                let d = self.machine.dbs().get(db);
                let keys = keys
                    .into_iter()
                    .map(|k| {
                        let expired = d.is_none_or(|d| d.get(&k, now).is_none());
                        (k, expired)
                    })
                    .collect();
                self.sessions.watch(conn, db, keys);
                let _ = reply.send(());
            }
            SessionOp::Unwatch => self.sessions.unwatch(conn),
            SessionOp::Unblock(error) => {
                if let Some(b) = self.sessions.unblock(conn) {
                    let replies = match error {
                        None => Ok(vec![b.timeout_reply]),
                        Some(e) => Ok(vec![Reply::Error(e)]),
                    };
                    let _ = b.reply.send(Answer {
                        replies,
                        sync_token: self.wal.last_seq(),
                        unauthorized: false,
                        aborted: false,
                    });
                }
            }
            SessionOp::Closed => {
                self.sessions.unwatch(conn);
                self.sessions.unblock(conn);
            }
            SessionOp::Check {
                db,
                access,
                args,
                reply,
            } => {
                let verdict = match self.resolve(db, &access) {
                    Some(perm) => pipeline::check_connection(&args, &perm),
                    None => Err(Reply::err("WRONGPASS invalid or missing auth token")),
                };
                let _ = reply.send(verdict);
            }
        }
        let _ = pending;
    }

    /// Runs one job of a batch; a reply that waits for the log goes into `pending` with the
    /// record it waits for.
    fn handle_job(
        &mut self,
        job: Job,
        pending: &mut Vec<(u64, Pending)>,
        shutdown: &mut Option<oneshot::Sender<()>>,
    ) {
        self.jobs_taken += 1;
        self.shared
            .jobs_taken
            .store(self.jobs_taken, Ordering::Relaxed);
        match job {
            Job::Exec {
                db,
                cmds,
                mode,
                access,
                client,
                reply,
                connection,
            } => {
                // A follower sends a request that writes to its leader: a REST one, or a RESP
                // one that needs nothing of its connection (no transaction, whose WATCH lives
                // here, and no blocking command, which waits here).
                let resp_alone =
                    connection.is_some() && mode == ExecMode::Each && !cluster::blocks(&cmds);
                if connection.is_none() || resp_alone {
                    if let Some(to) = self.forward_target(&cmds) {
                        return self.forward(to, db, cmds, mode, access, reply);
                    }
                }
                // What is the leader's and was not sent there (no leader known; or a RESP
                // transaction or blocking command of a connection that did not move to the
                // leader, `resp::conn`) is refused whole, as a read-only Redis replica refuses
                // a write in MULTI.
                if let Some(answer) = self.unforwarded(&cmds) {
                    let _ = reply.send(answer);
                    return;
                }
                // A leader that cannot confirm it still leads answers nothing: a read could
                // miss what a newer leader took.
                if let Some(answer) = self.lapsed_answer() {
                    let _ = reply.send(answer);
                    return;
                }
                self.exec_job(db, cmds, mode, access, client, reply, connection, pending)
            }
            Job::Forwarded {
                db,
                cmds,
                mode,
                access,
                reply,
            } => {
                // The same for a request a follower forwarded here; and one that arrives once
                // this node no longer leads (it led when the request was taken) is refused: it
                // is the leader's, and this node's state may be behind the new one's.
                if let Some(why) = self.follower_refusal().or_else(|| self.lapsed_leader()) {
                    let _ = reply.send(Answer {
                        replies: Err(format!("ERR {why}")),
                        sync_token: 0,
                        unauthorized: false,
                        aborted: false,
                    });
                    return;
                }
                self.exec_job(
                    db,
                    cmds,
                    mode,
                    access,
                    "forwarded".into(),
                    reply,
                    None,
                    pending,
                )
            }
            Job::Session { conn, op } => self.session_op(conn, op, pending),
            Job::Subscribe(mut handle) => {
                // A stream of a database deleted meanwhile ends at once; one of a
                // database whose daily limit is spent does not open.
                if self.machine.dbs().meta(handle.db).is_none() {
                    return;
                }
                if self.commands_left(handle.db) == Some(0) {
                    if let Some(o) = handle.opened.take() {
                        let _ = o.send(Some(errors::DAILY_LIMIT.to_string()));
                    }
                    return;
                }
                // After a failed log write nothing is served from memory: a monitor
                // or subscriber would see commands that are all refused.
                if self.read_only.is_none() {
                    if let Some(why) = self.poisoned() {
                        if let Some(o) = handle.opened.take() {
                            let _ = o.send(Some(errors::log_failed(&why)));
                        }
                        return;
                    }
                }
                self.pubsubs.entry(handle.db).or_default().add(handle);
            }
            Job::Unsubscribe { db, id } => {
                if let Some(p) = self.pubsubs.get_mut(&db) {
                    p.remove(id);
                }
            }
            Job::SubscribeMore { db, id, more } => {
                if let Some(p) = self.pubsubs.get_mut(&db) {
                    p.extend(id, more);
                }
            }
            Job::Rewire { db, id, resp3 } => {
                if let Some(p) = self.pubsubs.get_mut(&db) {
                    p.rewire(id, resp3);
                }
            }
            Job::UnsubscribeSome { db, id, less } => {
                if let Some(p) = self.pubsubs.get_mut(&db) {
                    p.shrink(id, less);
                }
            }
            Job::Tick => self.tick(),
            Job::Metrics { reply } => {
                let _ = reply.send(self.scrape());
            }
            Job::CheckToken { db, token, reply } => {
                let known = self
                    .machine
                    .dbs()
                    .get(db)
                    .is_some_and(|d| d.acl.resolve(&token).is_some());
                let _ = reply.send(known);
            }
            Job::Permissions { db, access, reply } => {
                let _ = reply.send(self.resolve(db, &access));
            }
            Job::Cluster(job) => self.cluster_job(job),
            // A leader that cannot confirm it still leads answers the admin and delivery APIs
            // nothing, as it answers no key-value request: a write could not commit, a read
            // could miss what a newer leader took. At once: a wait for the records before the
            // refusal to commit could last as long as the node is cut off.
            Job::Admin { op, reply } => {
                if let Some(why) = self.lapsed_leader() {
                    let _ = reply.send(admin::AdminReply::error(503, &why));
                    return;
                }
                let answer = self.admin(op);
                pending.push((
                    self.wal.last_seq(),
                    Pending::call(move |failure: Option<&str>| {
                        let answer = match failure {
                            None => answer,
                            Some(e) => admin::AdminReply::error(500, e),
                        };
                        let _ = reply.send(answer);
                    }),
                ));
            }
            Job::Delivery { op, reply } => {
                if let Some(why) = self.lapsed_leader() {
                    let _ = reply.send(OpReply {
                        status: 503,
                        body: serde_json::json!({ "error": why }),
                    });
                    return;
                }
                let answer = self.delivery_op(*op);
                pending.push((
                    self.wal.last_seq(),
                    Pending::call(move |failure: Option<&str>| {
                        let answer = match failure {
                            None => answer,
                            Some(e) => OpReply {
                                status: 500,
                                body: serde_json::json!({ "error": e }),
                            },
                        };
                        let _ = reply.send(answer);
                    }),
                ));
            }
            Job::Attempted(r) => self.delivery_events(|tx, unit| {
                ops::attempt_done(tx, *r, unit);
            }),
            Job::Shutdown { done } => *shutdown = Some(done),
        }
    }

    /// Counts a job taken from the queue (see `Shared::delivery_jobs_queued`).
    fn taken(&self, job: &Job) {
        if matches!(job, Job::Delivery { .. }) {
            self.shared
                .delivery_jobs_queued
                .fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether due messages wait for the delivery workers and there is room for them.
    fn messages_due(&self) -> bool {
        let d = self.machine.delivery();
        d.in_flight < config::DELIVERY_IN_FLIGHT_MAX
            && d.next_due_ms().is_some_and(|t| t <= clock::wall_unix_ms())
    }

    /// Hands due messages to the worker pool, up to `DELIVERY_DISPATCH_PER_BATCH_MAX` and the
    /// in-flight limit. Runs after the batch was written, so each attempt can wait for the
    /// record that holds its message. True if it handed over as many as it may at a time
    /// (more may be due).
    fn dispatch_due(&mut self) -> bool {
        // Only the leader delivers (each node holds the same due messages), and only while
        // its lease holds.
        if self.poisoned().is_some()
            || self.follower_refusal().is_some()
            || self.lapsed_leader().is_some()
        {
            return false;
        }
        let room = config::DELIVERY_IN_FLIGHT_MAX
            .saturating_sub(self.machine.delivery().in_flight)
            .min(config::DELIVERY_DISPATCH_PER_BATCH_MAX);
        if room == 0 {
            return false;
        }
        let now = clock::wall_unix_ms();
        let mut due = std::mem::take(&mut self.due);
        self.machine.parts().delivery.take_due(now, room, &mut due);
        let full = due.len() == config::DELIVERY_DISPATCH_PER_BATCH_MAX;
        for d in due.drain(..) {
            if d.retried == 0 {
                let late = now.saturating_sub(d.msg.not_before_ms);
                self.shared
                    .metrics
                    .delivery_lateness_seconds
                    .observe(late as f64 / 1000.0);
            }
            self.workers.start(Dispatch {
                msg: d.msg,
                retried: d.retried,
                run_created_ms: d.run_created_ms,
                durable_after: d.seq,
            });
        }
        self.due = due;
        full
    }

    /// How long until the key-value writes waiting for the runtime's thread to park have
    /// waited `PARK_SYNC_WAIT_MAX_US` (zero: they have), or None if none wait.
    fn park_sync_due_in(&self) -> Option<std::time::Duration> {
        let max = std::time::Duration::from_micros(config::PARK_SYNC_WAIT_MAX_US);
        self.park_sync.as_ref().and_then(|p| p.due_in(max))
    }

    /// Syncs the key-value writes that have waited `PARK_SYNC_WAIT_MAX_US` for the runtime's
    /// thread to park (see `ParkSync`).
    fn park_sync_overdue(&self) {
        if let Some(p) = &self.park_sync {
            if self.park_sync_due_in().is_some_and(|d| d.is_zero()) {
                // A sync here is the executor's time, which `/readyz`'s watch counts.
                let was = self.shared.in_batch.swap(true, Ordering::Relaxed);
                p.run();
                self.shared.in_batch.store(was, Ordering::Relaxed);
            }
        }
    }

    /// Writes the batch's records out and releases its replies when the fsync mode allows.
    fn finish_batch(&mut self, pending: Vec<(u64, Pending)>) {
        if self.cluster.is_some() {
            return self.finish_batch_cluster(pending);
        }
        let wrote = self.wal.has_buffered();
        if wrote {
            // The requests one log write (and with `always`, one sync) covers.
            self.shared.metrics.batch_jobs.observe(pending.len() as f64);
            if let Err(e) = self.wal.write_buffered() {
                crate::log::line(&format!("error: {e}; the log now refuses writes"));
                // Shared, so that /readyz and whoever waits for a sync learn it too.
                let _ = self
                    .shared
                    .log
                    .fsync_failed
                    .set(format!("write to the log failed: {e}"));
            }
        }
        let last = self.wal.last_seq();
        self.shared.log.last_seq.store(last, Ordering::SeqCst);
        if let Some(why) = self.poisoned() {
            let msg = errors::log_failed(&why);
            if wrote {
                for (_, p) in pending {
                    p.answer(Some(&msg));
                }
            } else {
                // Nothing will ever be synced again, so nothing is worth waiting for: reads
                // answer at once (they may show writes that were answered with this error,
                // whose fate was unknown anyway).
                for (_, p) in pending {
                    p.answer(None);
                }
            }
            return;
        }
        let durable = self.shared.log.durable_seq.load(Ordering::SeqCst);
        let needs_sync = durable < last;
        match (&self.flusher, self.fsync) {
            (Some(f), FsyncMode::Always) if needs_sync => {
                // A reply whose record (or the last key-value record it may show) is durable
                // already goes now; the others wait for this batch's sync.
                let mut wait = Vec::with_capacity(pending.len());
                for (needs, p) in pending {
                    if needs <= durable {
                        p.answer(None);
                    } else {
                        wait.push(p);
                    }
                }
                let item = FlushItem {
                    file: self.wal.current_file(),
                    seq: last,
                    replies: wait,
                };
                // Key-value records, and replies that wait for them, are synced on the
                // runtime's thread; a batch that wrote the delivery service's records alone by
                // the flusher (its sync covers any key-value record before them), so that no
                // key-value read of durable state waits on this thread for a publish's sync.
                // A slow disk's syncs are the flusher's too, at once (see `ParkSync::quick`).
                let delivery_alone = wrote && self.kv_seq <= self.batch_start_seq;
                match &self.park_sync {
                    Some(p) if self.kv_seq > durable && !delivery_alone && p.quick() => p.add(item),
                    _ => f.send(item),
                }
            }
            (Some(f), _) => {
                for (_, p) in pending {
                    p.answer(None);
                }
                if wrote {
                    f.send(FlushItem {
                        file: self.wal.current_file(),
                        seq: last,
                        replies: Vec::new(),
                    });
                }
            }
            (None, _) => {
                for (_, p) in pending {
                    p.answer(None);
                }
            }
        }
    }

    /// The permissions of a request's token in database `db` (None: the database is gone,
    /// or the token names no live user of it).
    fn resolve(&self, db: DbId, access: &Access) -> Option<Perm> {
        let db = self.machine.dbs().get(db)?;
        match access {
            Access::Full => Some(Perm::Full),
            Access::ReadOnly => Some(Perm::ReadOnly),
            Access::Token(t) => db
                .acl
                .resolve(t)
                .map(|(name, user)| Perm::User(Arc::from(name), Box::new(user.clone()))),
        }
    }

    /// Commands database `db` may still run today (`--max-requests-per-day`), or None when
    /// there is no such limit.
    fn commands_left(&self, db: DbId) -> Option<u64> {
        self.commands_per_day.map(|max| {
            let today = self.machine.dbs().usage_on(db, self.usage_day);
            let counted =
                today.map_or(0, |u| u.commands) + self.usage.get(&db).map_or(0, |u| u.commands);
            max.saturating_sub(counted)
        })
    }

    /// Runs a request's commands in database `db_id` through the one pipeline; their changes
    /// become one record.
    fn exec(
        &mut self,
        db_id: DbId,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        perm: &Perm,
        client: &str,
        origin: crate::command::ctx::Origin,
    ) -> Result<Vec<Reply>, String> {
        let retry = std::mem::take(&mut self.retrying);
        // After a failed log write or sync nothing is answered from memory, reads included:
        // the failed write changed it, and the disk may not hold that change.
        if self.read_only.is_none() {
            if let Some(why) = self.poisoned() {
                return Err(errors::log_failed(&why));
            }
        }
        // A scratch database is held to a share of the executor (`shares`): refused while it
        // cools down, and its request timed.
        // One look at the database's settings: whether it is a scratch one, its script time
        // limit and its data quota.
        let (scratch, script_ms, data_bytes_max) = match self.machine.dbs().meta(db_id) {
            Some(m) => (
                m.scratch,
                m.script_limit_ms(self.script_time_limit_ms),
                m.data_limit_bytes(),
            ),
            None => (false, self.script_time_limit_ms, None),
        };
        if scratch {
            if let Some(refusal) = self.shares.refusal(db_id) {
                return Err(refusal);
            }
        }
        let began = scratch.then(std::time::Instant::now);
        let ts = self.now();
        if !retry {
            self.count_request(db_id, ts);
        }
        // A retry was within the daily limit when it was sent.
        let commands_left = if retry {
            None
        } else {
            self.commands_left(db_id)
        };
        let mut logged = std::mem::take(&mut self.logged_spare);
        let refusal = self.write_refusal();
        let Executor {
            machine,
            scripts,
            pubsubs,
            usage,
            command_seconds,
            commands_timed_at,
            wal,
            shared,
            fsync,
            started_ms,
            commands_processed,
            listen_port,
            snapshots,
            limits,
            cluster,
            ..
        } = self;
        let (published, role) = match cluster.as_mut() {
            Some(c) => (Some(&mut c.outbox), Some(&*c.role)),
            None => (None, None),
        };
        let machine::Parts { dbs, rng, .. } = machine.parts();
        let in_use = crate::alloc::in_use();
        let memory_full = self.memory_bytes_max.is_some_and(|max| in_use > max);
        let Some((db, kept)) = dbs.split_mut(db_id) else {
            return Err("WRONGPASS invalid or missing auth token".into());
        };
        let memory_cap_data_bytes = self
            .memory_bytes_max
            .map(|max| db.data_bytes().saturating_add(max.saturating_sub(in_use)));
        scripts.enter(db_id, script_ms);
        let mut around = Around {
            pubsub: pubsubs.entry(db_id).or_default(),
            command_started: None,
            commands_timed_at,
            usage: usage.entry(db_id).or_default(),
            command_seconds,
            kept,
            db: db_id,
            wal,
            shared,
            fsync: *fsync,
            started_ms: *started_ms,
            listen_port: *listen_port,
            commands_processed,
            refusal,
            snapshots,
            started: 0,
            snapshot_asked: None,
            memory_max: self.memory_bytes_max.unwrap_or(0),
            retry,
            published,
            role,
        };
        let mut ctx = Ctx::new(
            db,
            ts,
            rng,
            perm,
            client,
            &mut around,
            Some(scripts),
            &mut logged,
        );
        ctx.origin = origin;
        ctx.limits = crate::command::ctx::Limits {
            commands_left,
            data_bytes_max,
            memory_full,
            memory_cap_data_bytes,
            ..*limits
        };
        let mut replies = pipeline::run_request(&mut ctx, cmds, mode);
        let ended = std::time::Instant::now();
        around.command_ended(ended);
        if let Some(began) = began {
            self.shares.ran(db_id, ended.duration_since(began));
        }
        let asked = around.snapshot_asked;
        self.broadcast_published();
        // At a past point only reads run; what they change (hash fields whose time has passed
        // leave before a read sees them) is a view of that moment, not a record.
        if !logged.is_empty() && self.read_only.is_none() {
            self.append_commands(db_id, ts, logged);
        } else {
            self.keep_logged(logged);
        }
        // SAVE, BGSAVE, BGREWRITEAOF: taken here, between this request's record and the next.
        if let Some((background, index)) = asked {
            if let Err(e) = self.take_snapshot(background) {
                if let Ok(Some(r)) = replies.as_mut().map(|r| r.get_mut(index)) {
                    *r = Reply::Error(format!("ERR {e}"));
                }
            }
        }
        replies
    }

    /// Takes a snapshot at the log's current end (see `snapshots`).
    fn take_snapshot(&mut self, background: bool) -> Result<(), String> {
        let now = clock::wall_unix_ms();
        let r = self
            .snapshots
            .take(background, &mut self.wal, &self.machine, now);
        if let Some(why) = self.wal.poisoned() {
            crate::log::line(&format!("error: {why}; the log now refuses writes"));
        }
        r
    }

    /// Logs a record whose changes the live path made already; the state machine's position
    /// moves to it.
    fn append(&mut self, ts: u64, record: &Record) {
        let seq = self.wal.append(ts, record);
        self.machine.logged(machine::Position { seq, unix_ms: ts });
    }

    /// Logs a record, then applies it through the state machine's door.
    fn append_and_apply(&mut self, ts: u64, record: &Record) {
        let seq = self.wal.append(ts, record);
        if let Err(e) = self
            .machine
            .apply(machine::Position { seq, unix_ms: ts }, record)
        {
            // The live path only logs what it built itself: a refusal here is a bug, and the
            // log (which holds the record) and the state would part. Stop writing.
            let why = format!("the state machine refused the server's own record #{seq}: {e}");
            crate::log::line(&format!("error: {why}; the log now refuses writes"));
            self.wal.poison(why);
        }
    }

    /// Logs a request's commands of database `db`.
    fn append_commands(&mut self, db: DbId, ts: u64, cmds: Vec<Vec<Vec<u8>>>) {
        self.touched(db, &cmds);
        let record = if db == DEFAULT_DB {
            Record::KvCommands(cmds)
        } else {
            Record::KvCommandsIn { db, cmds }
        };
        self.append(ts, &record);
        if let Record::KvCommands(cmds) | Record::KvCommandsIn { cmds, .. } = record {
            self.keep_logged(cmds);
        }
    }

    /// Keeps a request's emptied vector of logged commands for the next request: most
    /// requests write, and a new vector is an allocation each. A large one is let go.
    fn keep_logged(&mut self, mut cmds: Vec<Vec<Vec<u8>>>) {
        // The arguments' buffers go back for the next requests' (`spare`).
        crate::spare::give_back(&mut cmds);
        if cmds.capacity() <= crate::config::LOGGED_COMMANDS_KEEP {
            self.logged_spare = cmds;
        }
    }

    /// What a key-value record wrote breaks the watches on its keys and wakes the commands
    /// blocked on them; an ACL change makes RESP connections check their credentials again.
    fn touched(&mut self, db: DbId, cmds: &[Vec<Vec<u8>>]) {
        let table = crate::command::table::global();
        for args in cmds {
            let Some(name) = args.first() else { continue };
            if name.eq_ignore_ascii_case(b"acl") {
                self.shared.credentials.bump();
                continue;
            }
            if self.sessions.is_empty() {
                continue;
            }
            if name.eq_ignore_ascii_case(b"flushall") || name.eq_ignore_ascii_case(b"flushdb") {
                self.sessions.touch_all(db);
                continue;
            }
            if let crate::command::table::Lookup::Found(info) = table.lookup(args) {
                for r in info.key_refs_with(args, true) {
                    if r.write {
                        self.sessions.touch(db, r.key);
                    }
                }
            }
        }
    }

    /// Periodic work: expiry of keys and of scratch databases, and the usage counts' record.
    fn tick(&mut self) {
        if self.memory_bytes_max.is_some() {
            crate::alloc::sample();
        }
        let trim_every = std::time::Duration::from_millis(crate::config::HEAP_TRIM_INTERVAL_MS);
        if self.heap_looked.elapsed() >= trim_every {
            self.heap_looked = std::time::Instant::now();
            let data: u64 = self.machine.dbs().iter().map(|(_, d)| d.data_bytes()).sum();
            if self.trim_watch.look(self.wal.written_bytes(), data) {
                crate::sys::trim_heap();
            }
        }
        if self.poisoned().is_some()
            || self.read_only.is_some()
            || self.follower_refusal().is_some()
        {
            return;
        }
        self.expire_cycle();
        let now = self.now();
        let gone: Vec<DbEvent> = self
            .machine
            .dbs()
            .expired(now)
            .into_iter()
            .map(|id| DbEvent::Delete { id })
            .collect();
        if !gone.is_empty() {
            self.catalog_change(now, gone);
        }
        if now.saturating_sub(self.usage_logged_ms) >= self.usage_log_interval_ms {
            self.log_usage(now);
        }
    }

    /// Counts a request of database `db` at `ts`; a new day first logs the old day's counts.
    fn count_request(&mut self, db: DbId, ts: u64) {
        let day = day_of(ts);
        if day != self.usage_day {
            self.log_usage(ts);
            self.usage_day = day;
        }
        self.usage.entry(db).or_default().requests += 1;
    }

    /// Logs (and applies) the usage counted since the last time, if any.
    fn log_usage(&mut self, ts: u64) {
        self.usage_logged_ms = ts;
        let counts: Vec<(DbId, DayUsage)> = std::mem::take(&mut self.usage)
            .into_iter()
            .map(|(id, c)| (id, c.day()))
            .filter(|(_, u)| !u.is_empty())
            .collect();
        for (id, u) in &counts {
            let totals = self.command_totals.entry(*id).or_default();
            for (name, n) in &u.by_command {
                *totals.entry(name.clone()).or_insert(0) += n;
            }
        }
        if counts.is_empty()
            || self.read_only.is_some()
            || self.poisoned().is_some()
            || self.follower_refusal().is_some()
        {
            return;
        }
        let event = DbEvent::Usage {
            day: self.usage_day,
            counts,
        };
        self.append_and_apply(ts, &Record::Databases(vec![event]));
    }

    /// Applies and logs changes to the set of databases, and brings the tokens, the ACL
    /// secrets, the streams and the script caches in line with them.
    fn catalog_change(&mut self, ts: u64, events: Vec<DbEvent>) {
        let record = Record::Databases(events);
        self.append_and_apply(ts, &record);
        let Record::Databases(events) = record else {
            return;
        };
        for e in &events {
            match e {
                DbEvent::Create { id, .. } => {
                    arm_acl_secrets(&self.tokens, self.machine.parts().dbs, Some(*id));
                }
                DbEvent::ResetTokens { id } => {
                    self.shared.credentials.bump();
                    self.end_waits(*id);
                    arm_acl_secrets(&self.tokens, self.machine.parts().dbs, Some(*id));
                    // Every stream of the database was opened with a token this reset revokes
                    // (only the Standard token opens one): they end now, as the tokens do.
                    if let Some(p) = self.pubsubs.remove(id) {
                        p.end_all("the token that opened it was reset");
                    }
                }
                DbEvent::Delete { id } => {
                    self.shared.credentials.bump();
                    self.end_waits(*id);
                    // Dropping its streams' senders ends them.
                    self.pubsubs.remove(id);
                    self.scripts.forget(*id);
                    self.shares.forget(*id);
                    self.usage.remove(id);
                    self.command_totals.remove(id);
                }
                DbEvent::Claim { .. } | DbEvent::Usage { .. } => {}
            }
        }
        self.scratch_dbs = self.machine.dbs().metas().filter(|m| m.scratch).count();
        if let Ok(mut t) = self.shared.tokens.write() {
            // Only the databases these events name: a change costs the same with 10 databases
            // as with 100,000.
            for e in &events {
                let id = match e {
                    DbEvent::Create { id, .. }
                    | DbEvent::ResetTokens { id }
                    | DbEvent::Delete { id } => *id,
                    DbEvent::Claim { .. } | DbEvent::Usage { .. } => continue,
                };
                match self.machine.dbs().meta(id) {
                    Some(m) => t.set(&self.tokens, m),
                    None => t.remove(id),
                }
            }
        }
    }

    /// Removes keys and hash fields whose expiry has passed, in every database, through a
    /// logged DEL and HDELs like any other change.
    fn expire_cycle(&mut self) {
        let ts = self.now();
        let ids: Vec<DbId> = self.machine.dbs().iter().map(|(id, _)| id).collect();
        for id in ids {
            let Some(db) = self.machine.parts().dbs.get_mut(id) else {
                continue;
            };
            let mut cmds = Vec::new();
            let keys = db.expired_keys(ts, config::EXPIRE_CYCLE_KEYS_MAX);
            if !keys.is_empty() {
                for k in &keys {
                    db.remove(k);
                }
                let mut del = Vec::with_capacity(keys.len() + 1);
                del.push(b"DEL".to_vec());
                del.extend(keys);
                cmds.push(del);
            }
            for (key, fields) in db.due_field_expiries(ts, config::EXPIRE_CYCLE_KEYS_MAX) {
                db.remove_fields(&key, &fields);
                cmds.push(pipeline::hdel(&key, fields));
            }
            if !cmds.is_empty() {
                self.append_commands(id, ts, cmds);
            }
        }
    }
}

/// The server around the state, as commands see it (`command::ctx::Server`): the
/// executor's pub/sub, log and counters, borrowed for one request.
struct Around<'a> {
    pubsub: &'a mut PubSub,
    /// The timed command (table id) and when it started: it ends when the next one starts,
    /// or with the request. One request's command in `COMMAND_TIMING_EVERY` is timed.
    command_started: Option<(usize, std::time::Instant)>,
    /// Requests' own commands started since the server started (which ones are timed).
    commands_timed_at: &'a mut usize,
    /// This request's database's usage, counted since it was last logged, and as logged.
    usage: &'a mut Counting,
    command_seconds: &'a mut Vec<crate::metrics::LocalSeconds>,
    kept: Option<&'a BTreeMap<u32, DayUsage>>,
    db: DbId,
    wal: &'a WalWriter,
    shared: &'a Shared,
    fsync: FsyncMode,
    started_ms: u64,
    listen_port: u16,
    commands_processed: &'a mut u64,
    /// The error writes get, when they are refused.
    refusal: Option<String>,
    snapshots: &'a mut snapshots::Snapshots,
    /// Commands started in this request (the index of a SAVE's reply).
    started: usize,
    /// A snapshot asked for by this request: in the background or not, and the asking
    /// command's place among the replies.
    snapshot_asked: Option<(bool, usize)>,
    /// `--max-memory` (0: none), for INFO memory and CONFIG GET maxmemory.
    memory_max: u64,
    /// A blocked command tried again after a write: it was counted and shown to MONITOR
    /// when it was sent, and is neither again.
    retry: bool,
    /// A cluster node's publishes, for its peers' subscribers (`cluster`).
    published: Option<&'a mut Vec<cluster::Published>>,
    /// A cluster node's role (`INFO replication`).
    role: Option<&'a cluster::Role>,
}

impl Around<'_> {
    /// The current command (if any) ended at `now`: its latency is recorded.
    fn command_ended(&mut self, now: std::time::Instant) {
        let Some((id, started)) = self.command_started.take() else {
            return;
        };
        if self.command_seconds.len() <= id {
            self.command_seconds
                .resize(id + 1, crate::metrics::LocalSeconds::default());
        }
        if let Some(h) = self.command_seconds.get_mut(id) {
            h.observe(now.saturating_duration_since(started));
        }
    }
}

impl Server for Around<'_> {
    fn writes_refused(&self) -> Option<String> {
        self.refusal.clone()
    }
    fn command_starts(&mut self, client: &str, args: &[Vec<u8>], id: usize, top_level: bool) {
        if self.retry {
            return;
        }
        self.unmonitored_command_starts(id, top_level);
        self.pubsub.feed_monitors(client, args);
    }
    fn script_wrote(&mut self) {
        self.shared.scripts.note_write();
    }
    fn unmonitored_command_starts(&mut self, id: usize, top_level: bool) {
        if self.retry {
            return;
        }
        *self.commands_processed += 1;
        self.started += 1;
        if top_level {
            let timed = (*self.commands_timed_at).is_multiple_of(config::COMMAND_TIMING_EVERY);
            *self.commands_timed_at += 1;
            if timed || self.command_started.is_some() {
                let now = std::time::Instant::now();
                self.command_ended(now);
                if timed {
                    self.command_started = Some((id, now));
                }
            }
            self.usage.count(id);
        }
    }
    fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64 {
        if let Some(out) = self.published.as_deref_mut() {
            out.push(cluster::Published::new(self.db, false, channel, message));
        }
        self.pubsub.publish(channel, message)
    }
    fn publish_shard(&mut self, channel: &[u8], message: &[u8]) -> i64 {
        if let Some(out) = self.published.as_deref_mut() {
            out.push(cluster::Published::new(self.db, true, channel, message));
        }
        self.pubsub.publish_shard(channel, message)
    }
    fn shard_channels(&self) -> Vec<Vec<u8>> {
        self.pubsub.shard_channels()
    }
    fn shard_subscribers(&self, channel: &[u8]) -> usize {
        self.pubsub.shard_subscribers_of(channel)
    }
    fn channels(&self) -> Vec<Vec<u8>> {
        self.pubsub.channels()
    }
    fn subscribers(&self, channel: &[u8]) -> usize {
        self.pubsub.subscribers_of(channel)
    }
    fn patterns(&self) -> usize {
        self.pubsub.pattern_count()
    }
    fn facts(&self) -> Facts {
        Facts {
            listen_port: self.listen_port,
            uptime_s: clock::wall_unix_ms().saturating_sub(self.started_ms) / 1000,
            fsync: self.fsync.name(),
            appendfsync: self.fsync.redis_name(),
            log_last_seq: self.wal.last_seq(),
            log_durable_seq: self.shared.log.durable_seq.load(Ordering::SeqCst),
            log_syncs: self.shared.log.syncs.load(Ordering::Relaxed),
            log_writable: self.refusal.is_none(),
            cluster: self.role.map(cluster::Role::facts),
            monitors: self.pubsub.monitor_count(),
            subscribers: self.pubsub.subscriber_count(),
            commands_processed: *self.commands_processed,
            memory_max: self.memory_max,
            snapshots: self
                .snapshots
                .facts(self.wal.last_seq(), clock::wall_unix_ms()),
            usage: {
                let mut total = self.usage.day();
                for day in self.kept.into_iter().flat_map(|k| k.values()) {
                    total.add(day);
                }
                total
            },
        }
    }
    fn snapshot(&mut self, ask: crate::command::ctx::SnapshotAsk) -> Reply {
        if self.db != DEFAULT_DB {
            // Snapshots are the server's, taken by its operator: one database may not take
            // them, as a hosted database may not.
            return Reply::err(
                "ERR snapshots are taken by the server's operator, through the default database",
            );
        }
        if self.snapshot_asked.is_some() {
            return Reply::err("ERR Background save already in progress");
        }
        let (reply, take) = self.snapshots.ask(ask, self.refusal.clone());
        if let Some(background) = take {
            self.snapshot_asked = Some((background, self.started.saturating_sub(1)));
        }
        reply
    }
}

/// Usage counted since it was last logged, for one database: by table id on the hot path,
/// by name once logged.
#[derive(Debug, Clone, Default)]
pub struct Counting {
    pub requests: u64,
    pub commands: u64,
    by_id: Vec<u64>,
}

impl Counting {
    fn count(&mut self, id: usize) {
        self.commands += 1;
        if self.by_id.len() <= id {
            self.by_id.resize(id + 1, 0);
        }
        if let Some(n) = self.by_id.get_mut(id) {
            *n += 1;
        }
    }

    /// The same counts by command name.
    pub fn day(&self) -> DayUsage {
        let table = crate::command::table::global();
        DayUsage {
            requests: self.requests,
            commands: self.commands,
            by_command: self
                .by_id
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .filter_map(|(id, n)| Some((table.name_of(id)?.to_string(), *n)))
                .collect(),
        }
    }
}
