//! Commands: the table that says what each one is (`table`), the one way a command is checked
//! and run (`pipeline`), the one place that dispatches on a name (`dispatch`), and one file per
//! family that parses arguments and applies them to the state. Commands about the server around
//! the state (INFO, CONFIG GET, PUBSUB, PUBLISH) reach it through `pipeline::Server`, which the
//! executor implements; EVAL, FCALL, SCRIPT and FUNCTION run Lua through `scripting`.
//!
//! Every command runs as `fn(&mut Ctx, &[Vec<u8>]) -> Reply`. A write that changed the data set
//! sets `ctx.dirty`; when the command as sent would not replay to the same state (a relative
//! expiry, a random pick) it also sets `ctx.rewrite` to the deterministic form that is logged.

pub mod acl;
pub mod args;
pub mod bitmaps;
mod dispatch;
pub mod functions;
pub mod geo;
pub mod hash_ttl;
pub mod hashes;
pub mod hll;
pub mod introspect;
pub mod json;
pub mod keys;
pub mod lists;
pub mod longdouble;
pub mod pipeline;
pub mod scripting;
pub mod server;
pub mod sets;
pub mod sort;
pub mod stream_groups;
pub mod streams;
pub mod strings;
pub mod table;
pub mod typed;
pub mod zsets;

use crate::lua::Scripts;
use crate::rng::Rng;
use crate::state::Db;
pub use pipeline::{run_checked, run_request, ExecMode, Origin, Perm, Server};
pub use table::{CommandInfo, CommandTable};

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
    pub limits: pipeline::Limits,
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
            limits: pipeline::Limits::default(),
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
