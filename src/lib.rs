//! tidepool: a durable Redis-over-HTTP server (the Upstash Redis REST dialect) and a
//! message-delivery service (the QStash v2 dialect under `/v2/`), both built on one
//! event-sourced write-ahead log and one executor.
//!
//! A request flows one way through the crate, each layer importing only the ones below it:
//!
//! ```text
//! server -> http -> executor -> machine -+-> command ---> lua, rdb, state   (key-value)
//!   executor::cluster <-> cluster (Raft) --^
//!                                        +-> delivery                       (messages)
//!                                        +-> record ----> what a log record holds
//!                                        +-> snapshot                       (state images)
//!                                        +-> wal                            (append, sync)
//! leaves, used from every floor: config, reply, num, glob, rng, secret, msgpack, clock, log, point, alloc, sys
//! ```
//!
//! A key-value command, from any door (REST path or body, pipeline, transaction, `redis.call`
//! from Lua), passes through [`command::run_checked`], the one place it is checked and
//! dispatched; the executor only batches, logs, applies and replies. A delivery request is
//! routed by `http::qstash` to one `delivery::ops::Op`, run by `delivery::ops::run`.
//!
//! Module map:
//! - [`server`]: start-up: data directory, credentials, replay, listener, shutdown.
//! - [`cli`]: the `tidepool` command line (clap): every flag with its environment variable,
//!   default and help; `serve`'s values checked into a `config::Config`.
//! - [`admin_cli`]: `tidepool db ...`, the admin API from the command line.
//! - [`http`]: the hyper service: auth, the request forms (path, JSON body, pipeline,
//!   multi-exec), envelopes, base64 and RESP2, server-sent event streams, per-connection
//!   limits; `http::qstash` holds the delivery API's routes and request parsing.
//! - [`executor`]: the single task that owns the state: batches jobs, runs them (commands
//!   through `command::run_request`, delivery operations through `delivery::ops`), logs the
//!   changes, replies after group commit; monitor and pub/sub fan-out; the flusher thread.
//! - [`machine`]: the state machine's one door: the state (databases, delivery state, random
//!   source, last applied position); apply one record at its position, checked; write and load
//!   a snapshot image; recover a data directory up to a point. Start-up, `serve --at`,
//!   `tidepool-log`, the tests and the benchmarks all recover through `machine::recover`.
//! - [`cluster`]: replication (issue 30, in progress): openraft's log store (`cluster/` of the
//!   data directory, bytes in `log-format.md`), its state machine on `machine`'s door through
//!   an applier (the executor's `cluster` side), and its messages over HTTP on a cluster
//!   listener; `serve --node-id` starts it.
//! - [`record`]: what one log record holds (key-value commands or delivery events) and its
//!   MessagePack payload.
//! - [`command`]: the command table (`table`: one row per command, with its handler, the only
//!   place that names commands, joined to Redis's own entries in `info`), the one pipeline
//!   (`pipeline`), one file per family; commands that read the server around the state reach
//!   it through `command::Server`, which the executor implements.
//! - [`lua`]: the Lua engine (Redis 7.0's Lua 5.1 with its libraries); `redis.call` is a
//!   callback into the pipeline, so the engine knows no command.
//! - [`rdb`]: Redis's value serialization, for DUMP, RESTORE and FUNCTION DUMP/RESTORE.
//! - [`state`]: the pure state machine: keyspace, values (streams with their node model), ACL
//!   users, expiry. No clock, no I/O.
//! - [`delivery`]: the message-delivery service: its events and pure state (`apply`), API
//!   operations by resource (`ops`), configuration headers, retries, signing keys and JWT,
//!   cron, and the outbound worker pool (which reports on a channel of its own).
//! - [`snapshot`]: the state as a file at one log position: writing, reading with its damage
//!   table, salvage, choosing where start-up begins, compaction of the log behind it.
//! - [`wal`]: the log: framing, reading with recovery, appending, and its progress counters;
//!   it frames payloads it does not read. `log-format.md` describes the bytes.
//! - Leaves: [`config`] (every limit and default, units last in the names), [`reply`] (a
//!   command's reply and Redis's error texts), [`num`] (numbers as Redis reads and prints
//!   them), [`glob`] (Redis's patterns), [`rng`] (the deterministic random source), [`secret`]
//!   (constant-time comparison, generated credentials), [`msgpack`] (byte strings as `bin`),
//!   [`clock`] (wall-clock time, read in one place), [`log`] (operator lines that never panic),
//!   [`point`] (a position in the log: a sequence number or a time), [`metrics`] (what
//!   `GET /metrics` reports, kept with `prometheus-client`), [`alloc`] (the heap in use, as
//!   the allocator reports it, behind `--max-memory` and `used_memory`), [`fault`] (the
//!   test-only fault points of the `fault-injection` feature; no-ops without it), [`sys`] (the
//!   one module with `unsafe` code: the C library's calls, each behind a safe function with
//!   the reason it is sound).

pub mod admin_cli;
pub mod alloc;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod command;
pub mod config;
pub mod cooling;
pub mod delivery;
pub mod executor;
pub mod fault;
pub mod glob;
pub mod http;
pub mod leb128;
pub mod log;
pub mod lua;
pub mod machine;
pub mod metrics;
pub mod msgpack;
pub mod num;
pub mod point;
pub mod rdb;
pub mod record;
pub mod reply;
pub mod resp;
pub mod rng;
pub mod secret;
pub mod server;
pub mod snapshot;
pub mod spare;
pub mod state;
pub mod sys;
pub mod tls;
pub mod travel;
pub mod wal;
