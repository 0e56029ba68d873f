//! Commands: what a command runs against (`ctx`), what a command is (`info`, Redis's table
//! entry joined with tidepool's row), the rows themselves (`table`, the only place that names
//! commands), the one way a command is checked and run (`pipeline`), and one file per family
//! that parses arguments and applies them to the state. Commands about the server around the
//! state (INFO, CONFIG GET, PUBSUB, PUBLISH) reach it through `ctx::Server`, which the executor
//! implements; EVAL, FCALL, SCRIPT and FUNCTION run Lua through `scripting`.
//!
//! Every command runs as `fn(&mut Ctx, &[Vec<u8>]) -> Reply`. A write that changed the data set
//! sets `ctx.dirty`; when the command as sent would not replay to the same state (a relative
//! expiry, a random pick) it also gives the deterministic form that is logged (`Ctx::log_as`),
//! and its row says so (`Log::Rewritten`).
//!
//! Inside this folder imports run one way: the families stand on `ctx`, `args`, `typed` and
//! `info`; `table` stands on the families; `pipeline` on `table`. Nothing here imports this
//! file, which only gathers what the rest of the server uses.

pub mod acl;
pub mod args;
pub mod bitmaps;
pub mod blocking;
pub mod ctx;
pub mod functions;
pub mod geo;
pub mod hash_ttl;
pub mod hashes;
pub mod hll;
pub mod info;
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

pub use ctx::{Ctx, Origin, Perm, Server};
pub use info::{CommandInfo, CommandTable};
pub use pipeline::{run_checked, run_request, ExecMode};
