//! Server and connection commands that make sense for one database over REST.

use super::args::is;
use super::Ctx;
use crate::reply::{errors, Reply};

pub fn ping(a: &[Vec<u8>]) -> Reply {
    match a.len() {
        1 => Reply::Status("PONG".into()),
        2 => Reply::Bulk(a[1].clone()),
        _ => Reply::err(errors::wrong_arity("ping")),
    }
}

/// FLUSHDB and FLUSHALL, with the optional ASYNC or SYNC (both synchronous here).
pub fn flush(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    match a.len() {
        1 => {}
        2 if is(&a[1], "async") || is(&a[1], "sync") => {}
        _ => return Reply::err(errors::SYNTAX),
    }
    ctx.db.clear();
    ctx.dirty = true;
    ctx.log_as(vec![b"FLUSHALL".to_vec()]);
    Reply::ok()
}

pub fn time(ctx: &Ctx) -> Reply {
    let us = ctx.now_ms * 1000;
    Reply::Array(vec![
        Reply::bulk((us / 1_000_000).to_string()),
        Reply::bulk((us % 1_000_000).to_string()),
    ])
}
