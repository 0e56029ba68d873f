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

mod flusher;
pub mod pubsub;
pub mod snapshots;

use crate::clock;
use crate::command::pipeline::{self, Facts, Server};
pub use crate::command::ExecMode;
use crate::command::{Ctx, Perm};
use crate::config::{self, FsyncMode};
use crate::delivery::ops::{self, AttemptResult, Op, OpReply, Tx};
use crate::delivery::sign::SigningKeys;
use crate::delivery::worker::{Dispatch, Workers};
use crate::delivery::Delivery;
use crate::lua::{ScriptControl, Scripts};
use crate::point::Point;
use crate::record::Record;
use crate::reply::{errors, Reply};
use crate::rng::Rng;
use crate::state::Db;
use crate::wal::{self, WalWriter};
use bytes::Bytes;
use flusher::{FlushItem, Flusher, Pending};
use pubsub::PubSub;
pub use pubsub::{SubKind, SubscriberHandle};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
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
}

pub enum Job {
    Exec {
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        access: Access,
        client: Arc<str>,
        reply: oneshot::Sender<Answer>,
    },
    /// Registers an event stream: a monitor, or a subscriber to channels or patterns.
    Subscribe(SubscriberHandle),
    Unsubscribe {
        id: u64,
    },
    /// Periodic work: expiry of keys whose time has passed.
    Tick,
    /// Whether a token belongs to a live ACL user.
    CheckToken {
        token: Arc<str>,
        reply: oneshot::Sender<bool>,
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

/// What the executor shares with the HTTP side.
#[derive(Default)]
pub struct Shared {
    /// The log's progress (the sync token is its last sequence).
    pub log: Arc<wal::Progress>,
    /// The running script, if any: SCRIPT KILL and FUNCTION KILL are answered through it
    /// while the executor is busy running that script.
    pub scripts: Arc<ScriptControl>,
}

/// Everything the executor task owns.
pub struct Executor {
    db: Db,
    rng: Rng,
    wal: WalWriter,
    fsync: FsyncMode,
    flusher: Option<Flusher>,
    shared: Arc<Shared>,
    pubsub: PubSub,
    started_ms: u64,
    commands_processed: u64,
    listen_port: u16,
    delivery: Delivery,
    workers: Workers,
    backoff_unit_ms: u64,
    scripts: Scripts,
    /// Why writes are refused when the server shows a past point of its log (`--at`).
    read_only: Option<String>,
    /// The time of that point: every job runs at it.
    frozen_ms: Option<u64>,
    snapshots: snapshots::Snapshots,
    /// The longest key a request may name (`--max-key-bytes`).
    key_bytes_max: Option<usize>,
}

/// What the executor needs at start besides the log: the delivery service's settings and the
/// secret that keys ACL REST tokens.
pub struct Setup {
    pub acl_secret: Vec<u8>,
    pub keys: Arc<RwLock<SigningKeys>>,
    /// Milliseconds per "second" of the default retry backoff (1000; tests shrink it).
    pub backoff_unit_ms: u64,
    /// Where a destination's response body is cut (the maximum message size).
    pub message_bytes_max: usize,
    /// The bounds of the delivery state.
    pub delivery_limits: config::DeliveryLimits,
    /// Open the log at this past point, read-only (`tidepool serve --at`).
    pub at: Option<Point>,
    /// When snapshots are taken, and how much log is kept behind them.
    pub snapshots: config::SnapshotPolicy,
    /// The longest key a request may name (`--max-key-bytes`); None: no limit.
    pub key_bytes_max: Option<usize>,
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
    let chosen = match setup.at {
        None => crate::snapshot::choose(data_dir, dir, |_| true, |_| {})?,
        Some(p) => crate::snapshot::choose(
            data_dir,
            dir,
            |h| p.at_or_before(h.seq, h.record_unix_ms),
            |_| {},
        )?,
    };
    for d in &chosen.skipped {
        crate::log::line(&format!(
            "warning: the snapshot {d} is damaged; starting from an older point and a longer log instead"
        ));
    }
    let (mut db, mut delivery, base, last_snapshot) = match chosen.loaded {
        Some(l) => {
            let bytes = std::fs::metadata(
                crate::snapshot::snapshot_dir(data_dir)
                    .join(crate::snapshot::format::snapshot_file_name(l.header.seq)),
            )
            .map(|m| m.len())
            .unwrap_or(0);
            let base = wal::Base {
                seq: l.header.seq,
                timestamp_unix_ms: l.header.record_unix_ms,
            };
            (l.db, l.delivery, base, Some((l.header.seq, bytes)))
        }
        None => (Db::new(), Delivery::new(), wal::Base::default(), None),
    };
    let mut rng = Rng::new(clock::wall_unix_us());
    let mut replay_errors = 0u64;
    db.set_bulk(true);
    let mut replayed_bytes = 0u64;
    let mut apply = |seq, ts, kind, payload: &[u8]| {
        replayed_bytes += (wal::format::FRAME_HEADER_BYTES + payload.len()) as u64;
        let record = Record::decode(kind, payload).map_err(|e| e.to_string())?;
        delivery.applying_seq = seq;
        replay_errors += apply_record(&mut db, &mut delivery, &mut rng, ts, &record);
        Ok(())
    };
    let read_only = setup.at.map(|p| {
        format!(
            "this server shows its log as of {p}, read-only (--at): it answers reads, not writes"
        )
    });
    let (mut wal, mut report) = match (setup.at, &read_only) {
        (Some(point), Some(why)) => wal::replay_to(dir, point, base, why.clone(), &mut apply)?,
        _ => wal::recover(dir, config::SEGMENT_BYTES_MAX, base, &mut apply)?,
    };
    report.snapshot = last_snapshot.map(|(seq, _)| seq);
    db.set_bulk(false);
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
    db.acl.set_secret(setup.acl_secret);
    delivery.limits = setup.delivery_limits;
    let shared = Arc::new(Shared::default());
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
    let flusher = match fsync {
        // Read-only at a past point: nothing is ever written, so nothing is synced.
        _ if read_only.is_some() => None,
        FsyncMode::Never => None,
        mode => Some(Flusher::start(mode, shared.log.clone())),
    };
    let (tx, rx) = mpsc::channel(config::EXECUTOR_QUEUE_JOBS_MAX);
    // One result per attempt in flight, and never more attempts than that: sends never wait.
    let (results_tx, results) = mpsc::channel(config::DELIVERY_IN_FLIGHT_MAX);
    let workers = Workers::new(
        setup.keys,
        shared.log.clone(),
        fsync == FsyncMode::Always,
        setup.message_bytes_max,
        results_tx,
    )?;
    let mut ex = Executor {
        db,
        rng,
        wal,
        fsync,
        flusher,
        shared: shared.clone(),
        pubsub: PubSub::default(),
        started_ms: clock::wall_unix_ms(),
        commands_processed: 0,
        listen_port,
        delivery,
        workers,
        backoff_unit_ms: setup.backoff_unit_ms,
        scripts: Scripts::new(shared.scripts.clone())?,
        snapshots: snapshots::Snapshots::new(
            data_dir.to_path_buf(),
            dir.to_path_buf(),
            setup.snapshots,
            last_snapshot,
            replayed_bytes,
            read_only.clone(),
            clock::wall_unix_ms(),
        ),
        read_only,
        frozen_ms,
        key_bytes_max: setup.key_bytes_max,
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

/// Applies one logged record to `db` at its timestamp. Returns how many commands answered an
/// error (which a correct log never produces, since only commands that changed state are
/// logged).
pub fn apply_record(
    db: &mut Db,
    delivery: &mut Delivery,
    rng: &mut Rng,
    ts: u64,
    record: &Record,
) -> u64 {
    let mut errors = 0;
    match record {
        Record::Delivery(events) => {
            for e in events {
                delivery.apply(ts, e);
            }
        }
        Record::KvCommands(cmds) => {
            // Look up every command's first key before running any: the lookups of a record's
            // commands are independent, so their cache misses overlap instead of coming one
            // after another (a record of a pipeline holds up to hundreds of keys).
            for args in cmds {
                if let Some(key) = args.get(1) {
                    db.warm(key);
                }
            }
            for args in cmds {
                if pipeline::replay(db, rng, ts, args).is_error() {
                    errors += 1;
                }
            }
        }
    }
    errors
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
            None => self.poisoned().map(|why| errors::log_failed(&why)),
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

    async fn run(
        &mut self,
        mut rx: mpsc::Receiver<Job>,
        mut results: mpsc::Receiver<AttemptResult>,
    ) {
        let attempted = |r: AttemptResult| Job::Attempted(Box::new(r));
        let mut batch = Vec::with_capacity(config::EXECUTOR_BATCH_JOBS_MAX);
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        while shutdown.is_none() {
            let wake = if self.poisoned().is_some() {
                None
            } else {
                let full = self.delivery.in_flight >= config::DELIVERY_IN_FLIGHT_MAX;
                self.delivery.next_wake_ms(!full)
            };
            // No attempt in flight means no result can arrive: then the job queue alone is
            // awaited, as cheaply as before the workers had a channel of their own (the
            // key-value hot path). Jobs are polled first; results wait at most one batch.
            let first = match (wake, self.delivery.in_flight) {
                (None, 0) => rx.recv().await,
                (None, _) => tokio::select! {
                    biased;
                    j = rx.recv() => j,
                    Some(r) = results.recv() => Some(attempted(r)),
                },
                (Some(at), _) => {
                    let now = clock::wall_unix_ms();
                    let sleep = std::time::Duration::from_millis(at.saturating_sub(now));
                    tokio::select! {
                        biased;
                        j = rx.recv() => j,
                        Some(r) = results.recv() => Some(attempted(r)),
                        _ = tokio::time::sleep(sleep) => Some(Job::Tick),
                    }
                }
            };
            let Some(first) = first else {
                break;
            };
            batch.push(first);
            // Let the connection tasks that are ready run first: their jobs join this batch,
            // so one log write (and one sync) covers them all.
            tokio::task::yield_now().await;
            while batch.len() < config::EXECUTOR_BATCH_JOBS_MAX {
                match rx.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            while let Ok(r) = results.try_recv() {
                batch.push(attempted(r));
            }
            let mut pending: Vec<Pending> = Vec::with_capacity(batch.len());
            for job in batch.drain(..) {
                match job {
                    Job::Exec {
                        cmds,
                        mode,
                        access,
                        client,
                        reply,
                    } => {
                        let last_seq = self.wal.last_seq();
                        let Some(perm) = self.resolve(&access) else {
                            let _ = reply.send(Answer {
                                replies: Err("WRONGPASS invalid or missing auth token".into()),
                                sync_token: last_seq,
                                unauthorized: true,
                            });
                            continue;
                        };
                        let replies = self.exec(cmds, mode, &perm, &client);
                        let last_seq = self.wal.last_seq();
                        pending.push(Box::new(move |failure: Option<&str>| {
                            let replies = match failure {
                                None => replies,
                                Some(e) => Err(e.to_string()),
                            };
                            let _ = reply.send(Answer {
                                replies,
                                sync_token: last_seq,
                                unauthorized: false,
                            });
                        }));
                    }
                    Job::Subscribe(handle) => self.pubsub.add(handle),
                    Job::Unsubscribe { id } => self.pubsub.remove(id),
                    Job::Tick => self.expire_cycle(),
                    Job::CheckToken { token, reply } => {
                        let _ = reply.send(self.db.acl.resolve(&token).is_some());
                    }
                    Job::Delivery { op, reply } => {
                        let answer = self.delivery_op(*op);
                        pending.push(Box::new(move |failure: Option<&str>| {
                            let answer = match failure {
                                None => answer,
                                Some(e) => OpReply {
                                    status: 500,
                                    body: serde_json::json!({ "error": e }),
                                },
                            };
                            let _ = reply.send(answer);
                        }));
                    }
                    Job::Attempted(r) => self.delivery_events(|tx, unit| {
                        ops::attempt_done(tx, *r, unit);
                    }),
                    Job::Shutdown { done } => shutdown = Some(done),
                }
            }
            // Schedules and waiter deadlines: only when one is due, so a key-value batch pays
            // two B-tree peeks here and nothing more.
            if self.delivery.timers_due(clock::wall_unix_ms()) {
                self.delivery_events(|tx, _| {
                    ops::fire_schedules(tx);
                    ops::expire_waiters(tx);
                });
            }
            self.finish_batch(pending);
            self.dispatch_due();
            if self.poisoned().is_none() && self.snapshots.due(&self.wal) {
                // Logged by the snapshot's own lines; nobody waits for an answer.
                let _ = self.take_snapshot(true);
            }
        }
        self.snapshots.stop();
        // Shutdown: everything written is synced before the process exits.
        if let Some(f) = self.flusher.take() {
            f.stop();
        }
        if self.poisoned().is_none() {
            if let Err(e) = self.wal.current_file().sync_data() {
                crate::log::line(&format!("error: final sync of the log failed: {e}"));
            }
        }
        if let Some(done) = shutdown {
            let _ = done.send(());
        }
    }

    /// Runs a delivery API operation; its events become one record.
    fn delivery_op(&mut self, op: Op) -> OpReply {
        if op.writes() {
            if let Some(why) = &self.read_only {
                return OpReply {
                    status: 403,
                    body: serde_json::json!({ "error": why }),
                };
            }
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
        self.delivery.applying_seq = self.wal.last_seq() + 1;
        let mut tx = Tx::new(&mut self.delivery, ts, &mut self.rng);
        let reply = ops::run(&mut tx, op);
        tx.enforce_bounds();
        let events = std::mem::take(&mut tx.events);
        if !events.is_empty() {
            self.wal.append(ts, &Record::Delivery(events));
        }
        reply
    }

    /// Runs internal delivery work (attempt results, schedules, waiter deadlines) as one record.
    fn delivery_events(&mut self, f: impl FnOnce(&mut Tx, u64)) {
        if self.poisoned().is_some() {
            return;
        }
        let ts = self.now();
        self.delivery.applying_seq = self.wal.last_seq() + 1;
        let mut tx = Tx::new(&mut self.delivery, ts, &mut self.rng);
        f(&mut tx, self.backoff_unit_ms);
        tx.enforce_bounds();
        let events = std::mem::take(&mut tx.events);
        if !events.is_empty() {
            self.wal.append(ts, &Record::Delivery(events));
        }
    }

    /// Hands due messages to the worker pool, up to the in-flight limit. Runs after the batch
    /// was written, so each attempt can wait for the record that holds its message.
    fn dispatch_due(&mut self) {
        if self.poisoned().is_some() {
            return;
        }
        let room = config::DELIVERY_IN_FLIGHT_MAX.saturating_sub(self.delivery.in_flight);
        if room == 0 {
            return;
        }
        let now = clock::wall_unix_ms();
        for d in self.delivery.take_due(now, room) {
            self.workers.start(Dispatch {
                msg: d.msg,
                retried: d.retried,
                run_created_ms: d.run_created_ms,
                durable_after: d.seq,
            });
        }
    }

    /// Writes the batch's records out and releases its replies when the fsync mode allows.
    fn finish_batch(&mut self, pending: Vec<Pending>) {
        let wrote = self.wal.has_buffered();
        if wrote {
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
                for p in pending {
                    p(Some(&msg));
                }
            } else {
                // Nothing will ever be synced again, so nothing is worth waiting for: reads
                // answer at once (they may show writes that were answered with this error,
                // whose fate was unknown anyway).
                for p in pending {
                    p(None);
                }
            }
            return;
        }
        let needs_sync = self.shared.log.durable_seq.load(Ordering::SeqCst) < last;
        match (&self.flusher, self.fsync) {
            (Some(f), FsyncMode::Always) if needs_sync => {
                if wrote {
                    // The disk writes these bytes while the flusher may still be waiting on
                    // the previous sync's cache flush, so the sync that covers them has only
                    // its own flush left to wait for.
                    self.wal.start_writeback();
                }
                f.send(FlushItem {
                    file: self.wal.current_file(),
                    seq: last,
                    replies: pending,
                });
            }
            (Some(f), _) => {
                for p in pending {
                    p(None);
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
                for p in pending {
                    p(None);
                }
            }
        }
    }

    /// The permissions of a request's token (None: the token names no live user).
    fn resolve(&self, access: &Access) -> Option<Perm> {
        match access {
            Access::Full => Some(Perm::Full),
            Access::ReadOnly => Some(Perm::ReadOnly),
            Access::Token(t) => self
                .db
                .acl
                .resolve(t)
                .map(|(name, user)| Perm::User(Arc::from(name), Box::new(user.clone()))),
        }
    }

    /// Runs a request's commands through the one pipeline; their changes become one record.
    fn exec(
        &mut self,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        perm: &Perm,
        client: &str,
    ) -> Result<Vec<Reply>, String> {
        let ts = self.now();
        let mut logged: Vec<Vec<Vec<u8>>> = Vec::new();
        let refusal = self.write_refusal();
        let Executor {
            db,
            rng,
            scripts,
            pubsub,
            wal,
            shared,
            fsync,
            started_ms,
            commands_processed,
            listen_port,
            snapshots,
            key_bytes_max,
            ..
        } = self;
        let mut around = Around {
            pubsub,
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
        ctx.key_bytes_max = *key_bytes_max;
        let mut replies = pipeline::run_request(&mut ctx, cmds, mode);
        let asked = around.snapshot_asked;
        // At a past point only reads run; what they change (hash fields whose time has passed
        // leave before a read sees them) is a view of that moment, not a record.
        if !logged.is_empty() && self.read_only.is_none() {
            self.wal.append(ts, &Record::KvCommands(logged));
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
            .take(background, &mut self.wal, &self.db, &self.delivery, now);
        if let Some(why) = self.wal.poisoned() {
            crate::log::line(&format!("error: {why}; the log now refuses writes"));
        }
        r
    }

    /// Removes keys and hash fields whose expiry has passed, through a logged DEL and HDELs
    /// like any other change.
    fn expire_cycle(&mut self) {
        if self.poisoned().is_some() {
            return;
        }
        let ts = self.now();
        let mut cmds = Vec::new();
        let keys = self.db.expired_keys(ts, config::EXPIRE_CYCLE_KEYS_MAX);
        if !keys.is_empty() {
            for k in &keys {
                self.db.remove(k);
            }
            let mut del = Vec::with_capacity(keys.len() + 1);
            del.push(b"DEL".to_vec());
            del.extend(keys);
            cmds.push(del);
        }
        for (key, fields) in self
            .db
            .due_field_expiries(ts, config::EXPIRE_CYCLE_KEYS_MAX)
        {
            self.db.remove_fields(&key, &fields);
            cmds.push(pipeline::hdel(&key, fields));
        }
        if !cmds.is_empty() {
            self.wal.append(ts, &Record::KvCommands(cmds));
        }
    }
}

/// The server around the state, as commands see it (`command::pipeline::Server`): the
/// executor's pub/sub, log and counters, borrowed for one request.
struct Around<'a> {
    pubsub: &'a mut PubSub,
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
}

impl Server for Around<'_> {
    fn writes_refused(&self) -> Option<String> {
        self.refusal.clone()
    }
    fn command_starts(&mut self, client: &str, args: &[Vec<u8>]) {
        *self.commands_processed += 1;
        self.started += 1;
        self.pubsub.feed_monitors(client, args);
    }
    fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64 {
        self.pubsub.publish(channel, message)
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
            monitors: self.pubsub.monitor_count(),
            subscribers: self.pubsub.subscriber_count(),
            commands_processed: *self.commands_processed,
            snapshots: self
                .snapshots
                .facts(self.wal.last_seq(), clock::wall_unix_ms()),
        }
    }
    fn snapshot(&mut self, ask: crate::command::server::SnapshotAsk) -> Reply {
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

/// Bytes for a monitor or subscriber line.
pub fn sse_event(payload: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(payload.len() + 8);
    v.extend_from_slice(b"data: ");
    v.extend_from_slice(payload);
    v.extend_from_slice(b"\n\n");
    Bytes::from(v)
}
