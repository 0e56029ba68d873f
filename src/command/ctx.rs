//! What a command runs against ([`Ctx`]): the state, the time and randomness of its record,
//! the token it came with ([`Perm`]), where it came from ([`Origin`]), the limits it is held to
//! ([`Limits`]), and the server around the state ([`Server`], which the executor implements and
//! replay stands in for with [`Replay`]). Every command family and the pipeline stand on it;
//! it knows no command.

use crate::lua::Scripts;
use crate::reply::Reply;
use crate::rng::Rng;
use crate::state::acl::AclUser;
use crate::state::Db;
use std::sync::Arc;

/// What a command runs against: the state, the time and randomness of its record, who sent it,
/// the server around the state, and where its logged form goes.
pub struct Ctx<'a> {
    pub db: &'a mut Db,
    /// The time this command runs at: the record's timestamp, Unix milliseconds.
    pub now_ms: u64,
    pub rng: &'a mut Rng,
    /// Set by a write that changed the data set; only such commands are logged.
    pub dirty: bool,
    /// The deterministic form(s) to log instead of the command as sent.
    pub rewrite: Option<Vec<Vec<Vec<u8>>>>,
    /// What the request's token may do.
    pub perm: &'a Perm,
    pub origin: Origin,
    /// The client's address, for monitors.
    pub client: &'a str,
    pub server: &'a mut dyn Server,
    /// The Lua engine: absent on replay (which never runs Lua) and inside a script.
    pub scripts: Option<&'a mut Scripts>,
    /// The request's commands to log, in deterministic form, in order.
    pub logged: &'a mut Vec<Vec<Vec<u8>>>,
    /// Replaying the log: nothing is logged again, so no logged form need be built.
    pub replaying: bool,
    /// The hosted service's limits this request is held to (none on replay).
    pub limits: Limits,
}

impl<'a> Ctx<'a> {
    /// A request's context: commands from `client` under `perm`, at `now_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        db: &'a mut Db,
        now_ms: u64,
        rng: &'a mut Rng,
        perm: &'a Perm,
        client: &'a str,
        server: &'a mut dyn Server,
        scripts: Option<&'a mut Scripts>,
        logged: &'a mut Vec<Vec<Vec<u8>>>,
    ) -> Ctx<'a> {
        Ctx {
            db,
            now_ms,
            rng,
            dirty: false,
            rewrite: None,
            perm,
            origin: Origin::Request,
            client,
            server,
            scripts,
            logged,
            replaying: false,
            limits: Limits::default(),
        }
    }

    /// The ACL user the token stands for (`None`: the default user).
    pub fn user(&self) -> Option<&str> {
        match self.perm {
            Perm::User(name, _) => Some(name),
            _ => None,
        }
    }

    /// Replaces `key` with `value` (no expiry), or deletes it when `value` is None: what every
    /// STORE form does with its destination. Marks the change when there was one.
    pub fn store_or_delete(&mut self, key: &[u8], value: Option<crate::state::Value>) {
        let existed = self.db.get_mut(key, self.now_ms).is_some();
        self.db.remove(key);
        let stored = value.is_some();
        if let Some(v) = value {
            self.db.insert(key, v, None, self.now_ms);
        }
        if stored || existed {
            self.dirty = true;
        }
    }

    /// Logs `cmd` in place of the command as sent (adds to the list: one command may need
    /// several deterministic commands).
    pub fn log_as(&mut self, cmd: Vec<Vec<u8>>) {
        if self.replaying {
            return;
        }
        self.rewrite.get_or_insert_with(Vec::new).push(cmd);
    }
}

/// What a request may do, once its token is resolved.
#[derive(Debug, Clone)]
pub enum Perm {
    /// The Standard token: the `default` user.
    Full,
    ReadOnly,
    /// An ACL user's REST token: the user as it was when the request arrived.
    User(Arc<str>, Box<AclUser>),
}

/// Where a command comes from: only the wording of refusals depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A client's REST request.
    Request,
    /// A command from a RESP connection: what only a connection can carry (blocking
    /// commands, XREAD's BLOCK) is not refused.
    Connection,
    /// `redis.call` or `redis.pcall` from a script or function; `read_only` for EVAL_RO,
    /// FCALL_RO and `no-writes` code.
    Script { read_only: bool },
}

impl Origin {
    /// A client's own command, not a script's call.
    pub fn top_level(self) -> bool {
        matches!(self, Origin::Request | Origin::Connection)
    }
}

/// Facts about the server around the state that INFO and CONFIG GET report.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub listen_port: u16,
    pub uptime_s: u64,
    /// The fsync mode as tidepool names it, and as Redis's `appendfsync` would.
    pub fsync: &'static str,
    pub appendfsync: &'static str,
    pub log_last_seq: u64,
    pub log_durable_seq: u64,
    pub log_syncs: u64,
    pub log_writable: bool,
    pub monitors: usize,
    pub subscribers: usize,
    pub commands_processed: u64,
    /// `--max-memory` in bytes (0: none).
    pub memory_max: u64,
    pub snapshots: SnapshotFacts,
    /// This database's usage over the days kept (`INFO commandstats`, `INFO stats`).
    pub usage: crate::state::databases::DayUsage,
    /// A cluster node's place in its cluster (`INFO replication`); None: a single server.
    pub cluster: Option<ClusterFacts>,
}

/// What `INFO replication` says of a cluster node.
#[derive(Debug, Clone, Default)]
pub struct ClusterFacts {
    pub node_id: u64,
    /// This node leads and takes writes.
    pub leading: bool,
    /// The leader's id (0: none known).
    pub leader: u64,
    pub term: u64,
    /// The other members' cluster addresses.
    pub peers: Vec<String>,
    /// On the leader, the followers whose log holds every entry the leader has.
    pub replicas_caught_up: u64,
}

/// What INFO persistence reports about snapshots.
#[derive(Debug, Clone, Default)]
pub struct SnapshotFacts {
    /// A background snapshot is being written, started this many seconds ago.
    pub running_s: Option<u64>,
    /// One is asked for after the running one (BGSAVE SCHEDULE, BGREWRITEAOF).
    pub scheduled: bool,
    /// Unix seconds of the last snapshot written (or of start-up, before any).
    pub last_save_s: u64,
    pub last_ok: bool,
    /// How long the last one took, in seconds (None before any).
    pub last_took_s: Option<u64>,
    /// The same in milliseconds (`/metrics`).
    pub last_took_ms: Option<u64>,
    /// Snapshots written since start.
    pub saves: u64,
    /// Records logged since the last snapshot.
    pub changes_since: u64,
    /// Bytes of the log on disk, and of the newest snapshot.
    pub log_bytes: u64,
    pub snapshot_bytes: u64,
}

/// What some commands need from the server around the state (the executor implements it):
/// the log's health, monitor and pub/sub fan-out, and the facts INFO reports.
pub trait Server {
    /// The error a write gets when the server takes none (the log failed, or the server shows
    /// a past point of its log), if it does.
    fn writes_refused(&self) -> Option<String>;
    /// A command is about to run: counted under its table name (`get`, `acl|setuser`; a
    /// request's own commands, `top_level`, are also its database's usage), and shown to
    /// monitors as sent by `client`.
    /// `id` is the command's place in the table (`CommandInfo::id`).
    fn command_starts(&mut self, client: &str, args: &[Vec<u8>], id: usize, top_level: bool);
    /// The same, for a command MONITOR does not show (`CommandInfo::unmonitored`).
    fn unmonitored_command_starts(&mut self, id: usize, top_level: bool);
    /// The running script or function wrote: SCRIPT KILL may no longer stop it.
    fn script_wrote(&mut self) {}

    /// Sends a message to a channel's subscribers; how many received it.
    fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64;
    /// SPUBLISH: the same to a shard channel's subscribers (SSUBSCRIBE), a namespace of
    /// their own.
    fn publish_shard(&mut self, _channel: &[u8], _message: &[u8]) -> i64 {
        0
    }
    /// The shard channels with at least one subscriber, and how many a shard channel has.
    fn shard_channels(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    fn shard_subscribers(&self, _channel: &[u8]) -> usize {
        0
    }
    /// The channels with at least one subscriber.
    fn channels(&self) -> Vec<Vec<u8>>;
    /// How many streams subscribe to `channel`.
    fn subscribers(&self, channel: &[u8]) -> usize;
    /// How many distinct patterns are subscribed to.
    fn patterns(&self) -> usize;
    fn facts(&self) -> Facts;
    /// SAVE, BGSAVE, BGREWRITEAOF: the snapshot is taken once this request's record is
    /// logged; the reply now (Redis's text), or the refusal.
    fn snapshot(&mut self, ask: SnapshotAsk) -> Reply;
}

/// The server while the log is replayed: no streams, no monitors, a healthy log.
pub struct Replay;

impl Server for Replay {
    fn writes_refused(&self) -> Option<String> {
        None
    }
    fn command_starts(&mut self, _: &str, _: &[Vec<u8>], _: usize, _: bool) {}
    fn unmonitored_command_starts(&mut self, _: usize, _: bool) {}

    fn publish(&mut self, _: &[u8], _: &[u8]) -> i64 {
        0
    }
    fn channels(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    fn subscribers(&self, _: &[u8]) -> usize {
        0
    }
    fn patterns(&self) -> usize {
        0
    }
    fn facts(&self) -> Facts {
        Facts::default()
    }
    fn snapshot(&mut self, _: SnapshotAsk) -> Reply {
        Reply::err("ERR snapshots are not taken while the log is replayed")
    }
}

/// The hosted service's limits a request is held to, each off unless its flag sets it. Never
/// applied to replay: what the log holds was accepted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// The longest key a command may name (`--max-key-bytes`).
    pub key_bytes_max: Option<usize>,
    /// The most a write may store in one go (`--max-value-bytes`): the bytes of its arguments
    /// other than the name and the keys, or the length a string grows to (APPEND, SETRANGE).
    pub value_bytes_max: Option<usize>,
    /// Commands the database may still run today (`--max-requests-per-day`).
    pub commands_left: Option<u64>,
    /// The most data the database may hold (its `max_data_bytes`), keys and values together.
    pub data_bytes_max: Option<u64>,
    /// The server's memory is past `--max-memory`: writes that may grow it are refused.
    pub memory_full: bool,
    /// The database's data size at which the server's memory would reach `--max-memory`
    /// (its data size when the request began, plus what memory was left then): a write that
    /// grows the data past it is refused, as one past `memory_full` would be.
    pub memory_cap_data_bytes: Option<u64>,
}

/// Which command asks for a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotAsk {
    /// SAVE: written before the reply.
    Save,
    /// BGSAVE [SCHEDULE]: written by a child process while the server goes on.
    Background { schedule: bool },
    /// BGREWRITEAOF: the same as BGSAVE SCHEDULE (the log is rewritten as a snapshot), with
    /// Redis's texts for AOF rewrites.
    Rewrite,
}
