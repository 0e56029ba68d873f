//! Every integration test of tidepool, as one test binary with a module per subject (one
//! build and one link instead of one per file). Most tests start the real `tidepool` binary
//! on port 0 in a temporary directory (`common`); the differential ones run `redis-server`
//! beside it (`common::Both`) and require the same answers. A test that guards a fixed bug
//! says which in its name or its doc comment.
//!
//! Run one subject: `cargo test --features fault-injection --test it delivery::`.

mod common;

mod acl;
mod bad_input;
mod cli;
mod cluster;
mod cluster_faults;
mod collections;
mod console;
mod crash;
mod databases;
mod delivery;
mod differential;
mod dump;
mod every_tenant;
mod fault;
mod hardening;
mod hash_ttl;
mod hosted;
mod http;
mod json;
mod linearizability;
mod log_format_golden;
mod one_pipeline;
mod properties;
mod readme;
mod replay;
mod resp;
mod scripting;
mod server_commands;
mod snapshots;
mod stream_deletion;
mod string_cas;
mod wal_corruption;
