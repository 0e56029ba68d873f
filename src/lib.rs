//! tidepool: a durable Redis-over-HTTP server (the Upstash Redis REST dialect) and a
//! message-delivery service (the QStash v2 dialect under `/v2/`), both built on one
//! event-sourced write-ahead log and one executor.
//!
//! A request flows one way through the crate:
//!
//! ```text
//! http  ->  executor  ->  command  ->  state      (apply, reply)
//!                     ->  wal                     (append, group commit)
//! ```
//!
//! Module map:
//! - [`config`]: every limit and default, units in the names.
//! - [`http`]: hyper service, auth, the request forms (path, JSON body, pipeline, multi-exec),
//!   envelopes, base64 and RESP2, server-sent event streams.
//! - [`executor`]: the single task that owns the state: batches jobs, logs changes, replies
//!   after group commit; monitor and pub/sub fan-out.
//! - [`command`]: the command table (from Redis's own), the one dispatch on names, one file per
//!   family; `command::typed` is the shared typed access to aggregate values.
//! - [`state`]: the pure state machine: keyspace, values (streams with their node model), ACL
//!   users, expiry. No clock, no I/O.
//! - [`delivery`]: the message-delivery service: its events and pure state (`apply`), API
//!   operations, configuration headers, retries, JWT signing, cron, the outbound worker pool,
//!   and the `/v2` routes.
//! - [`wal`]: the log format, reading with recovery, appending; `log-format.md` describes it.
//! - [`log`]: operator lines on stderr that never panic.
//! - [`server`]: start-up: data directory, credentials, replay, listener, shutdown.

pub mod clock;
pub mod command;
pub mod config;
pub mod delivery;
pub mod executor;
pub mod glob;
pub mod http;
pub mod log;
pub mod lua;
pub mod msgpack;
pub mod num;
pub mod rdb;
pub mod record;
pub mod reply;
pub mod rng;
pub mod secret;
pub mod server;
pub mod state;
pub mod wal;
