//! The single task that owns all state.
//!
//! Exactly one task ever touches the state, so nothing locks the keyspace and every job runs
//! alone, in queue order: that is what makes a transaction atomic and orders the monitor stream.
//! The task lives on the HTTP runtime (a task switch per hand-off instead of a thread wake-up;
//! see `start`). HTTP handlers send `Job`s through a bounded queue. The executor takes a batch, runs each job
//! against the state, frames every change into the log buffer, writes the batch out once, and
//! hands the replies to the flusher, which sends them after one `fdatasync` covers them (group
//! commit). Reads in a batch that follows unsynced writes wait for that sync as well, so no reply
//! ever shows a write that could still be lost. Monitor lines and published messages leave from
//! here too, which is what puts them in execution order; so do Lua scripts (`scripts.rs`),
//! which run inside one job and are logged by their effects.

mod flusher;
mod lua_libs;
pub mod pubsub;
mod scripts;
pub use scripts::{kill_command, ScriptControl};

use crate::clock;
use crate::command::{self, table, CommandInfo, Ctx, Rng};
use crate::config::{self, FsyncMode};
use crate::delivery::ops::{self, AttemptResult, Op, OpReply, Tx};
use crate::delivery::sign::SigningKeys;
use crate::delivery::worker::{Dispatch, Workers};
use crate::delivery::Delivery;
use crate::record::Record;
use crate::reply::Reply;
use crate::state::acl::AclUser;
use crate::state::Db;
use crate::wal::{self, WalWriter};
use bytes::Bytes;
use flusher::{FlushItem, Flusher, Pending};
use pubsub::PubSub;
pub use pubsub::{SubKind, SubscriberHandle};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// What a request may do, once its token is resolved.
enum Perm {
    Full,
    ReadOnly,
    User(Arc<str>, Box<AclUser>),
}

/// How a list of commands is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// One command, or a pipeline: each command is checked and run on its own.
    Each,
    /// A transaction: checked as a whole first (any bad command discards all), then run
    /// atomically.
    Multi,
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
    /// A delivery attempt finished (from the worker pool).
    Attempted(Box<AttemptResult>),
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// Runs `f`, which may take long (Lua: up to the script time limit), with this runtime
/// thread's other tasks handed to another thread meanwhile, so that connections go on being
/// accepted and answered (SCRIPT KILL among them) while the executor is busy.
fn beside_the_runtime<R>(f: impl FnOnce() -> R) -> R {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// The error of a reply past [`config::REPLY_BYTES_MAX`].
fn too_large_reply() -> String {
    format!(
        "ERR the reply would exceed {} bytes (the reply size limit): ask for less at once, for example with GETRANGE, SCAN or fewer keys per request",
        config::REPLY_BYTES_MAX
    )
}

/// Counters the INFO command and the sync token read.
#[derive(Default)]
pub struct Shared {
    /// Sequence number of the last record written.
    pub last_seq: AtomicU64,
    /// Sequence number of the last record known to be on disk.
    pub durable_seq: AtomicU64,
    /// Successful syncs of the log (group commit: many records per sync).
    pub syncs: AtomicU64,
    /// Set once when a sync failed; the log takes no more writes after that.
    pub fsync_failed: std::sync::OnceLock<String>,
    /// Woken after every successful sync (delivery attempts wait for their message's record).
    pub synced: tokio::sync::Notify,
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
    /// The executor's own queue, for workers to report back on.
    jobs: mpsc::Sender<Job>,
    backoff_unit_ms: u64,
    scripts: scripts::Scripts,
}

/// What the executor needs at start besides the log: the delivery service's settings and the
/// secret that keys ACL REST tokens.
pub struct Setup {
    pub acl_secret: Vec<u8>,
    pub keys: Arc<RwLock<SigningKeys>>,
    /// Milliseconds per "second" of the default retry backoff (1000; tests shrink it).
    pub backoff_unit_ms: u64,
    /// Where a destination's response body is cut (the maximum message size).
    pub max_message_bytes: usize,
}

/// A started executor: its queue, its counters, and the task to await.
pub struct ExecutorHandle {
    pub tx: mpsc::Sender<Job>,
    pub shared: Arc<Shared>,
    /// The executor task; it ends after a `Shutdown` job, once the log is synced.
    pub task: tokio::task::JoinHandle<()>,
    pub report: wal::RecoveryReport,
}

/// Replays the log in `dir` and starts the executor task.
/// Must be called inside the tokio runtime.
pub fn start(
    dir: &Path,
    fsync: FsyncMode,
    listen_port: u16,
    setup: Setup,
) -> Result<ExecutorHandle, String> {
    let mut db = Db::new();
    let mut delivery = Delivery::new();
    let mut rng = Rng::new(clock::wall_unix_us());
    let mut replay_errors = 0u64;
    let (wal, report) = wal::recover(dir, config::SEGMENT_BYTES_MAX, |seq, ts, kind, payload| {
        let record = Record::decode(kind, payload).map_err(|e| e.to_string())?;
        delivery.applying_seq = seq;
        replay_errors += apply_record(&mut db, &mut delivery, &mut rng, ts, &record);
        Ok(())
    })?;
    if replay_errors > 0 {
        crate::log::line(&format!("warning: {replay_errors} logged commands answered an error on replay (they changed nothing)"));
    }
    db.acl.set_secret(setup.acl_secret);
    let shared = Arc::new(Shared::default());
    shared.last_seq.store(wal.last_seq(), Ordering::SeqCst);
    shared.durable_seq.store(wal.last_seq(), Ordering::SeqCst);
    let flusher = match fsync {
        FsyncMode::Never => None,
        mode => Some(Flusher::start(mode, shared.clone())),
    };
    let (tx, rx) = mpsc::channel(config::EXECUTOR_QUEUE_JOBS_MAX);
    let workers = Workers::new(
        setup.keys,
        shared.clone(),
        fsync == FsyncMode::Always,
        setup.max_message_bytes,
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
        jobs: tx.clone(),
        backoff_unit_ms: setup.backoff_unit_ms,
        scripts: scripts::Scripts::new(shared.scripts.clone())?,
    };
    // One task owns the state. It runs on the HTTP runtime so that handing it a job and getting
    // the reply back costs a task switch, not a thread wake-up (measured: the thread hand-off
    // took a fifth of the CPU under load). Still one owner, one queue, one order.
    let task = tokio::spawn(async move { ex.run(rx).await });
    Ok(ExecutorHandle {
        tx,
        shared,
        task,
        report,
    })
}

/// Hash fields whose time has passed, in the keys a command names, go before the command by a
/// logged HDEL, so the command (a read too) sees them gone and replay removes them at the same
/// point.
fn hdel_expired_fields(
    db: &mut Db,
    info: &CommandInfo,
    args: &[Vec<u8>],
    ts: u64,
    logged: &mut Vec<Vec<Vec<u8>>>,
) {
    if !db.has_field_ttls() {
        return;
    }
    for key in info.keys(args) {
        let fields = db.expired_fields_of(key, ts);
        if !fields.is_empty() {
            db.remove_fields(key, &fields);
            logged.push(hdel(key, fields));
        }
    }
}

/// Where the keys of `EVAL/FCALL x numkeys key ... arg ...` end, with Redis's checks of
/// `numkeys`.
fn keys_end(args: &[Vec<u8>], numkeys: i64) -> Result<usize, Reply> {
    if numkeys > (args.len() - 3) as i64 {
        return Err(Reply::err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    if numkeys < 0 {
        return Err(Reply::err("ERR Number of keys can't be negative"));
    }
    Ok(3 + numkeys as usize)
}

/// `HDEL key field ...`: how a field whose time passed leaves the log.
fn hdel(key: &[u8], fields: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut cmd = Vec::with_capacity(fields.len() + 2);
    cmd.push(b"HDEL".to_vec());
    cmd.push(key.to_vec());
    cmd.extend(fields);
    cmd
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
            for args in cmds {
                let info = match table::global().lookup(args) {
                    table::Lookup::Found(i) => i,
                    _ => {
                        errors += 1;
                        continue;
                    }
                };
                let mut ctx = Ctx::new(db, ts, rng);
                ctx.replaying = true;
                if command::execute(&mut ctx, info, args).is_error() {
                    errors += 1;
                }
            }
        }
    }
    errors
}

impl Executor {
    /// Why the log refuses writes, if it does: a failed write here or a failed sync in the
    /// flusher.
    fn poisoned(&self) -> Option<String> {
        self.wal
            .poisoned()
            .map(str::to_string)
            .or_else(|| self.shared.fsync_failed.get().cloned())
    }

    async fn run(&mut self, mut rx: mpsc::Receiver<Job>) {
        let mut batch = Vec::with_capacity(config::EXECUTOR_BATCH_JOBS_MAX);
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        while shutdown.is_none() {
            let wake = if self.poisoned().is_some() {
                None
            } else {
                let full = self.delivery.in_flight >= config::DELIVERY_IN_FLIGHT_MAX;
                self.delivery.next_wake_ms(!full)
            };
            let first = match wake {
                None => rx.recv().await,
                Some(at) => {
                    let now = clock::wall_unix_ms();
                    let sleep = std::time::Duration::from_millis(at.saturating_sub(now));
                    tokio::select! {
                        j = rx.recv() => j,
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
        }
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
            if let Some(why) = self.poisoned() {
                return OpReply {
                    status: 500,
                    body: serde_json::json!({
                        "error": format!("the write-ahead log failed ({why}); writes are refused, reads still work")
                    }),
                };
            }
        }
        let ts = self.wal.next_timestamp(clock::wall_unix_ms());
        self.delivery.applying_seq = self.wal.last_seq() + 1;
        let mut tx = Tx::new(&mut self.delivery, ts, &mut self.rng);
        let reply = ops::run(&mut tx, op);
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
        let ts = self.wal.next_timestamp(clock::wall_unix_ms());
        self.delivery.applying_seq = self.wal.last_seq() + 1;
        let mut tx = Tx::new(&mut self.delivery, ts, &mut self.rng);
        f(&mut tx, self.backoff_unit_ms);
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
            self.workers.start(
                Dispatch {
                    msg: d.msg,
                    retried: d.retried,
                    run_created_ms: d.run_created_ms,
                    durable_after: d.seq,
                },
                self.jobs.clone(),
            );
        }
    }

    /// Writes the batch's records out and releases its replies when the fsync mode allows.
    fn finish_batch(&mut self, pending: Vec<Pending>) {
        let wrote = self.wal.has_buffered();
        if wrote {
            if let Err(e) = self.wal.write_buffered() {
                crate::log::line(&format!("error: {e}; the log now refuses writes"));
            }
        }
        let last = self.wal.last_seq();
        self.shared.last_seq.store(last, Ordering::SeqCst);
        if let Some(why) = self.poisoned() {
            let msg = format!(
                "ERR the write-ahead log failed ({why}); writes are refused, reads still work"
            );
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
        let needs_sync = self.shared.durable_seq.load(Ordering::SeqCst) < last;
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

    /// Checks a command before it runs: known, supported over REST, right arity, allowed for
    /// the token.
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

    fn check(args: &[Vec<u8>], perm: &Perm) -> Result<&'static CommandInfo, Reply> {
        let info = match table::global().lookup(args) {
            table::Lookup::Found(i) => i,
            table::Lookup::Unknown => return Err(command::unknown_command(args)),
            table::Lookup::UnknownSubcommand(c) => {
                return Err(Reply::Error(format!(
                    "ERR unknown subcommand '{}'. Try {} HELP.",
                    String::from_utf8_lossy(&args[1]),
                    c.name.to_ascii_uppercase()
                )))
            }
        };
        if let Some(why) = unsupported(info, args) {
            return Err(Reply::Error(why));
        }
        if !command::arity_ok(info, args.len()) {
            return Err(command::arity_error(info));
        }
        Self::permitted(info, args, perm)?;
        Ok(info)
    }

    /// Whether the token may run this command on these keys (a NOPERM error if not).
    fn permitted(info: &CommandInfo, args: &[Vec<u8>], perm: &Perm) -> Result<(), Reply> {
        let denied = || {
            Reply::Error(format!(
                "NOPERM this user has no permissions to run the '{}' command or its subcommand",
                info.name
            ))
        };
        match perm {
            Perm::Full => {}
            Perm::ReadOnly if !read_only_allows(info) => return Err(denied()),
            Perm::ReadOnly => {}
            Perm::User(_, u) => {
                if !u.allows(&info.name, &info.categories) {
                    return Err(denied());
                }
                if info
                    .key_refs(args)
                    .iter()
                    .any(|k| !u.key_allowed(k.key, k.read, k.write))
                {
                    return Err(Reply::err(
                        "NOPERM this user has no permissions to access one of the keys used as arguments",
                    ));
                }
                let publishes = matches!(info.name.as_str(), "publish" | "spublish");
                if publishes && !u.channel_allowed(&args[1], false) {
                    return Err(Reply::err(
                        "NOPERM this user has no permissions to access one of the channels used as arguments",
                    ));
                }
            }
        }
        Ok(())
    }

    fn exec(
        &mut self,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        perm: &Perm,
        client: &str,
    ) -> Result<Vec<Reply>, String> {
        let ts = self.wal.next_timestamp(clock::wall_unix_ms());
        if mode == ExecMode::Multi {
            for args in &cmds {
                if let Err(Reply::Error(e)) = Self::check(args, perm) {
                    return Err(format!("EXECABORT Transaction discarded because of: {e}"));
                }
            }
        }
        let mut logged: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut replies = Vec::with_capacity(cmds.len());
        // The replies of one request together stay under the reply size limit: a reply that
        // would cross it is replaced by an error (its command still ran, writes included).
        let mut reply_bytes = 0usize;
        for args in cmds {
            let reply = self.run_one(args, perm, ts, client, &mut logged);
            let size = reply.wire_bytes();
            if reply_bytes + size > config::REPLY_BYTES_MAX {
                replies.push(Reply::err(too_large_reply()));
            } else {
                reply_bytes += size;
                replies.push(reply);
            }
        }
        if !logged.is_empty() {
            self.wal.append(ts, &Record::KvCommands(logged));
        }
        Ok(replies)
    }

    fn run_one(
        &mut self,
        args: Vec<Vec<u8>>,
        perm: &Perm,
        ts: u64,
        client: &str,
        logged: &mut Vec<Vec<Vec<u8>>>,
    ) -> Reply {
        let info = match Self::check(&args, perm) {
            Ok(i) => i,
            Err(r) => return r,
        };
        self.commands_processed += 1;
        if info.write || matches!(info.name.as_str(), "acl|setuser" | "acl|deluser") {
            if let Some(why) = self.poisoned() {
                return Reply::Error(format!(
                    "ERR the write-ahead log failed ({why}); writes are refused, reads still work"
                ));
            }
        }
        self.pubsub.feed_monitors(client, &args);
        match info.name.as_str() {
            "info" => return self.info(&args),
            "config|get" => {
                let params =
                    command::introspect::config_params(self.fsync.redis_name(), self.listen_port);
                return command::introspect::config_get(&args, &params);
            }
            "publish" => return Reply::Int(self.pubsub.publish(&args[1], &args[2])),
            "pubsub|channels"
            | "pubsub|numsub"
            | "pubsub|numpat"
            | "pubsub|shardchannels"
            | "pubsub|shardnumsub"
            | "pubsub|help" => return self.pubsub.command(info, &args),
            "spublish" => return Reply::Int(self.pubsub.publish(&args[1], &args[2])),
            "eval" | "evalsha" | "eval_ro" | "evalsha_ro" => {
                return self.eval(info.name.as_str(), &args, perm, ts, logged)
            }
            "fcall" | "fcall_ro" => return self.fcall(info.name.as_str(), &args, perm, ts, logged),
            "function|load" => {
                // Checked here (it takes Lua); stored and logged below like any write.
                if let Err(e) = self.check_function_load(&args) {
                    return e;
                }
            }
            "function|restore" => {
                if let Err(e) = self.check_function_restore(&args) {
                    return e;
                }
            }
            "function|list" => return self.function_list(&args),
            "function|stats" => {
                self.scripts.sync(&self.db);
                let fns: usize = self.scripts.libraries.values().map(|l| l.1.len()).sum();
                return Reply::Array(vec![
                    Reply::bulk("running_script"),
                    Reply::Nil,
                    Reply::bulk("engines"),
                    Reply::Array(vec![
                        Reply::bulk("LUA"),
                        Reply::Array(vec![
                            Reply::bulk("libraries_count"),
                            Reply::Int(self.scripts.libraries.len() as i64),
                            Reply::bulk("functions_count"),
                            Reply::Int(fns as i64),
                        ]),
                    ]),
                ]);
            }
            "function|kill" => return Reply::err("NOTBUSY No scripts in execution right now."),
            "script|load" => {
                return match self.scripts.load(&args[2]) {
                    Ok(sha) => Reply::Bulk(sha.into_bytes()),
                    Err(e) => e,
                }
            }
            "script|exists" => {
                return Reply::Array(
                    args[2..]
                        .iter()
                        .map(|sha| Reply::Int(self.scripts.exists(sha) as i64))
                        .collect(),
                )
            }
            "script|flush" => {
                return match args.get(2) {
                    Some(a)
                        if !a.eq_ignore_ascii_case(b"sync")
                            && !a.eq_ignore_ascii_case(b"async") =>
                    {
                        Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
                    }
                    _ => {
                        self.scripts.flush();
                        Reply::ok()
                    }
                }
            }
            // A script runs to its end inside one job: when a request arrives, none runs.
            "script|kill" => return Reply::err("NOTBUSY No scripts in execution right now."),
            _ => {}
        }
        if !info.write && self.read_bytes(info, &args, ts) > config::REPLY_BYTES_MAX {
            return Reply::err(too_large_reply());
        }
        hdel_expired_fields(&mut self.db, info, &args, ts, logged);
        let mut ctx = Ctx::new(&mut self.db, ts, &mut self.rng);
        if let Perm::User(name, _) = perm {
            ctx.user = Some(name.clone());
        }
        let reply = command::execute(&mut ctx, info, &args);
        if ctx.dirty {
            match ctx.rewrite.take() {
                Some(rw) => logged.extend(rw),
                None => logged.push(args),
            }
        }
        reply
    }

    /// The bytes of the string values a read names, counting a key each time it is named:
    /// `MGET big big big ...` would copy the value once per name into its reply, so it is
    /// refused before it runs when the copies would pass the reply size limit.
    fn read_bytes(&self, info: &CommandInfo, args: &[Vec<u8>], ts: u64) -> usize {
        // A command of one key copies its value once at most: the check after it bounds
        // that, and GET and its like pay nothing here.
        if args.len() < 3 {
            return 0;
        }
        let keys = info.keys(args);
        if keys.len() < 2 {
            return 0;
        }
        keys.iter()
            .map(|k| match self.db.get(k, ts).map(|e| &e.value) {
                Some(crate::state::Value::Str(s)) => s.len(),
                _ => 0,
            })
            .sum()
    }

    /// `EVAL script numkeys key ... arg ...` and its SHA and read-only forms.
    fn eval(
        &mut self,
        name: &str,
        args: &[Vec<u8>],
        perm: &Perm,
        ts: u64,
        logged: &mut Vec<Vec<Vec<u8>>>,
    ) -> Reply {
        let split = match command::args::int_arg(&args[2]).and_then(|n| keys_end(args, n)) {
            Ok(at) => at,
            Err(e) => return e,
        };
        let by_sha = name.starts_with("evalsha");
        let sha = if by_sha {
            String::from_utf8_lossy(&args[1]).to_ascii_lowercase()
        } else {
            match self.scripts.load(&args[1]) {
                Ok(sha) => sha,
                Err(e) => return e,
            }
        };
        self.with_script_env(perm, ts, name.ends_with("_ro"), logged, |scripts, env| {
            scripts.run(&sha, &args[3..split], &args[split..], env)
        })
    }

    /// Runs `f` with the Lua side and what `redis.call` needs from the executor.
    fn with_script_env(
        &mut self,
        perm: &Perm,
        ts: u64,
        read_only: bool,
        logged: &mut Vec<Vec<Vec<u8>>>,
        f: impl FnOnce(&scripts::Scripts, &mut scripts::ScriptEnv) -> Reply,
    ) -> Reply {
        let log_failed = self.poisoned();
        let Executor {
            scripts,
            db,
            rng,
            pubsub,
            ..
        } = self;
        let mut env = scripts::ScriptEnv {
            db,
            rng,
            pubsub,
            perm,
            ts,
            read_only,
            log_failed,
            logged,
        };
        beside_the_runtime(|| f(scripts, &mut env))
    }

    /// FUNCTION LOAD's checks that need Lua: the library must load and register functions,
    /// and none of them may belong to another library.
    fn check_function_load(&mut self, args: &[Vec<u8>]) -> Result<(), Reply> {
        self.scripts.sync(&self.db);
        let (replace, code) = command::functions::load_args(args)?;
        let (name, _) = command::functions::library_header(code)?;
        if !replace && self.db.functions().contains_key(&name) {
            return Err(Reply::Error(format!("ERR Library '{name}' already exists")));
        }
        let (_, defs) = beside_the_runtime(|| self.scripts.check_library(code))?;
        self.refuse_taken_functions(defs.iter().map(|(f, _)| f), |lib| lib != name)
    }

    /// Refuses a function name that a library which stays (`stays(library)`) already owns.
    fn refuse_taken_functions<'a>(
        &self,
        names: impl Iterator<Item = &'a String>,
        stays: impl Fn(&str) -> bool,
    ) -> Result<(), Reply> {
        for fname in names {
            let taken = self
                .scripts
                .libraries
                .iter()
                .any(|(lib, (_, fns))| stays(lib) && fns.contains(fname));
            if taken {
                return Err(Reply::Error(format!("ERR Function {fname} already exists")));
            }
        }
        Ok(())
    }

    /// FUNCTION RESTORE's checks, in Redis's order: the payload, each library as FUNCTION LOAD
    /// checks it, then joining them to the libraries that stay (names and functions).
    fn check_function_restore(&mut self, args: &[Vec<u8>]) -> Result<(), Reply> {
        use command::functions::RestorePolicy;
        self.scripts.sync(&self.db);
        let (policy, libs) = command::functions::restore_args(args)?;
        let mut defined: Vec<String> = Vec::new();
        for (_, code) in &libs {
            let (_, defs) = beside_the_runtime(|| self.scripts.check_library(code))?;
            for (fname, _) in defs {
                if defined.contains(&fname) {
                    return Err(Reply::Error(format!("ERR Function {fname} already exists")));
                }
                defined.push(fname);
            }
        }
        if policy == RestorePolicy::Flush {
            return Ok(());
        }
        if let Some(e) = command::functions::append_clash(&self.db, policy, &libs) {
            return Err(e);
        }
        // Libraries named in the payload are replaced (APPEND refused them above).
        self.refuse_taken_functions(defined.iter(), |lib| !libs.iter().any(|(n, _)| n == lib))
    }

    /// `FCALL function numkeys key ... arg ...` and FCALL_RO.
    fn fcall(
        &mut self,
        name: &str,
        args: &[Vec<u8>],
        perm: &Perm,
        ts: u64,
        logged: &mut Vec<Vec<Vec<u8>>>,
    ) -> Reply {
        let Ok(numkeys) = command::args::int_arg(&args[2]) else {
            return Reply::err("ERR Bad number of keys provided");
        };
        let split = match keys_end(args, numkeys) {
            Ok(at) => at,
            Err(e) => return e,
        };
        self.scripts.sync(&self.db);
        let function = String::from_utf8_lossy(&args[1]).into_owned();
        self.with_script_env(perm, ts, name == "fcall_ro", logged, |scripts, env| {
            scripts.call_function(&function, &args[3..split], &args[split..], env)
        })
    }

    /// `FUNCTION LIST [WITHCODE] [LIBRARYNAME pattern]`.
    fn function_list(&mut self, args: &[Vec<u8>]) -> Reply {
        let mut with_code = false;
        let mut pattern: Option<&[u8]> = None;
        let mut i = 2;
        while i < args.len() {
            if args[i].eq_ignore_ascii_case(b"withcode") {
                with_code = true;
            } else if args[i].eq_ignore_ascii_case(b"libraryname") {
                let Some(p) = args.get(i + 1) else {
                    return Reply::err("ERR library name argument was not given");
                };
                pattern = Some(p);
                i += 1;
            } else {
                return Reply::Error(format!(
                    "ERR Unknown argument {}",
                    String::from_utf8_lossy(&args[i])
                ));
            }
            i += 1;
        }
        self.scripts.sync(&self.db);
        let mut out = Vec::new();
        for (lib, (code, fns)) in &self.scripts.libraries {
            if pattern.is_some_and(|p| !crate::glob::glob_match(p, lib.as_bytes(), false)) {
                continue;
            }
            let functions = fns
                .iter()
                .filter_map(|f| self.scripts.function(f).map(|d| (f, d)))
                .map(|(f, d)| {
                    Reply::Array(vec![
                        Reply::bulk("name"),
                        Reply::bulk(f.as_str()),
                        Reply::bulk("description"),
                        d.description
                            .as_ref()
                            .map(|s| Reply::bulk(s.as_str()))
                            .unwrap_or(Reply::Nil),
                        Reply::bulk("flags"),
                        Reply::Array(d.flags.iter().map(|x| Reply::Status(x.clone())).collect()),
                    ])
                })
                .collect();
            let mut entry = vec![
                Reply::bulk("library_name"),
                Reply::bulk(lib.as_str()),
                Reply::bulk("engine"),
                Reply::bulk("LUA"),
                Reply::bulk("functions"),
                Reply::Array(functions),
            ];
            if with_code {
                entry.push(Reply::bulk("library_code"));
                entry.push(Reply::Bulk(code.clone()));
            }
            out.push(Reply::Array(entry));
        }
        Reply::Array(out)
    }

    /// Removes keys and hash fields whose expiry has passed, through a logged DEL and HDELs
    /// like any other change.
    fn expire_cycle(&mut self) {
        if self.poisoned().is_some() {
            return;
        }
        let ts = self.wal.next_timestamp(clock::wall_unix_ms());
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
            cmds.push(hdel(&key, fields));
        }
        if !cmds.is_empty() {
            self.wal.append(ts, &Record::KvCommands(cmds));
        }
    }

    fn info(&self, args: &[Vec<u8>]) -> Reply {
        let wanted: Vec<String> = args[1..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| w == "all" || w == "default" || w == "everything");
        let want = |s: &str| all || wanted.iter().any(|w| w == s);
        let now = clock::wall_unix_ms();
        let uptime = now.saturating_sub(self.started_ms) / 1000;
        let mut out = String::new();
        if want("server") {
            out.push_str(&format!(
                "# Server\r\nredis_version:7.0.15\r\ntidepool_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\n\r\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                std::process::id(),
                self.listen_port,
                uptime,
                uptime / 86400
            ));
        }
        if want("clients") {
            out.push_str(&format!(
                "# Clients\r\nmonitors:{}\r\npubsub_subscribers:{}\r\n\r\n",
                self.pubsub.monitor_count(),
                self.pubsub.subscriber_count()
            ));
        }
        if want("persistence") {
            out.push_str(&format!(
                "# Persistence\r\nloading:0\r\naof_enabled:1\r\ntidepool_fsync:{}\r\ntidepool_log_last_seq:{}\r\ntidepool_log_durable_seq:{}\r\ntidepool_log_syncs:{}\r\ntidepool_log_writable:{}\r\n\r\n",
                self.fsync.name(),
                self.wal.last_seq(),
                self.shared.durable_seq.load(Ordering::SeqCst),
                self.shared.syncs.load(Ordering::Relaxed),
                if self.poisoned().is_none() { 1 } else { 0 }
            ));
        }
        if want("stats") {
            out.push_str(&format!(
                "# Stats\r\ntotal_commands_processed:{}\r\n\r\n",
                self.commands_processed
            ));
        }
        if want("keyspace") {
            out.push_str("# Keyspace\r\n");
            if !self.db.is_empty() {
                out.push_str(&format!(
                    "db0:keys={},expires={},avg_ttl=0\r\n",
                    self.db.len(),
                    self.db.expires_count()
                ));
            }
        }
        let mut text = out.trim_end_matches("\r\n").to_string();
        text.push_str("\r\n");
        Reply::Bulk(text.into_bytes())
    }
}

/// Commands refused over REST, with the reason.
fn unsupported(info: &CommandInfo, args: &[Vec<u8>]) -> Option<String> {
    let name = info.name.as_str();
    let why = match (info.group.as_str(), name) {
        (_, "ping" | "echo") => return None,
        (_, "xread" | "xreadgroup") if args.iter().any(|a| a.eq_ignore_ascii_case(b"block")) => {
            "the BLOCK option needs a connection that HTTP does not keep"
        }
        (_, "xread" | "xreadgroup") => return None,
        (_, "multi" | "exec" | "discard" | "watch" | "unwatch") => {
            "send the commands of a transaction together to /multi-exec"
        }
        (_, "monitor") => "open the /monitor event stream instead",
        (
            _,
            "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe"
            | "sunsubscribe",
        ) => "open the /subscribe/<channel> or /psubscribe/<pattern> event stream instead",
        ("cluster", _) => "tidepool is a single node, not a cluster",
        ("connection", _) => {
            "only PING and ECHO are supported over REST; a request has no connection state"
        }
        _ if info.blocking => "blocking commands need a connection that HTTP does not keep",
        (_, "migrate") => "tidepool has no TCP peers to migrate keys to",
        (_, "config|set" | "config|rewrite" | "config|resetstat") => {
            "tidepool is configured by its command-line flags (CONFIG GET reads them)"
        }
        (_, "shutdown" | "debug" | "sync" | "psync" | "replicaof" | "slaveof" | "failover") => {
            "it controls a Redis process, which tidepool is not"
        }
        _ => return None,
    };
    Some(format!(
        "ERR '{}' is not supported over REST: {why}",
        name.replace('|', " ").to_ascii_uppercase()
    ))
}

/// The Read Only token's profile: the `@read` category minus `@dangerous`, minus the scan
/// family and KEYS (the hosted service names SCAN and KEYS), plus PING, ECHO and TIME.
fn read_only_allows(info: &CommandInfo) -> bool {
    match info.name.as_str() {
        "ping" | "echo" | "time" => true,
        // The SDKs' read-only script helpers; a write inside one is refused.
        "eval_ro" | "evalsha_ro" | "fcall_ro" => true,
        "scan" | "hscan" | "sscan" | "zscan" | "keys" => false,
        _ => info.category_read && !info.category_dangerous,
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
