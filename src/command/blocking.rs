//! The blocking commands (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX,
//! BZMPOP) as their one non-blocking try: what Redis runs inside MULTI or a script, and what a
//! RESP connection runs before it waits and each time a key it waits on is written (the
//! waiting itself is the connection's and the executor's: `executor::sessions`). Each is
//! logged as the non-blocking effect it had (BLPOP as LPOP, BLMOVE as LMOVE), as Redis
//! propagates it. REST refuses them: a request cannot wait on a connection.

use super::args::tri;
use super::ctx::Ctx;
use super::lists;
use super::typed;
use super::zsets;
use crate::reply::Reply;
use crate::state::list::List;
use crate::state::zset::ZSet;

/// Redis's `getTimeoutFromObjectOrReply` in seconds: a non-negative number of seconds, as
/// milliseconds rounded up (0: wait for ever).
pub fn timeout_ms(arg: &[u8]) -> Result<u64, Reply> {
    let Some(s) = crate::num::parse_f64(arg) else {
        return Err(Reply::err("ERR timeout is not a float or out of range"));
    };
    if !s.is_finite() || s * 1000.0 > i64::MAX as f64 {
        return Err(Reply::err("ERR timeout is out of range"));
    }
    if s < 0.0 {
        return Err(Reply::err("ERR timeout is negative"));
    }
    Ok((s * 1000.0).ceil() as u64)
}

/// XREAD's and XREADGROUP's `BLOCK milliseconds`: a non-negative integer.
pub fn block_ms(arg: &[u8]) -> Result<u64, Reply> {
    match crate::num::parse_i64(arg) {
        None => Err(Reply::err("ERR timeout is not an integer or out of range")),
        Some(n) if n < 0 => Err(Reply::err("ERR timeout is negative")),
        Some(n) => Ok(n as u64),
    }
}

/// How long a blocking command may wait, in milliseconds (0: for ever), or None when these
/// arguments do not block (not a blocking command, XREAD without BLOCK, a bad timeout: the
/// command's own try answers the error).
pub fn wait_ms(args: &[Vec<u8>]) -> Option<u64> {
    let name = args.first()?.to_ascii_lowercase();
    match name.as_slice() {
        b"blpop" | b"brpop" | b"brpoplpush" | b"blmove" | b"bzpopmin" | b"bzpopmax" => {
            timeout_ms(args.last()?).ok()
        }
        b"blmpop" | b"bzmpop" => timeout_ms(args.get(1)?).ok(),
        b"xread" | b"xreadgroup" => {
            let at = args
                .iter()
                .take_while(|a| !a.eq_ignore_ascii_case(b"streams"))
                .position(|a| a.eq_ignore_ascii_case(b"block"))?;
            block_ms(args.get(at + 1)?).ok()
        }
        _ => None,
    }
}

fn arg(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// BLPOP / BRPOP `key [key ...] timeout`: `[key, item]` from the first non-empty list.
pub fn bpop(ctx: &mut Ctx, a: &[Vec<u8>], left: bool) -> Reply {
    let Some((timeout, keys)) = a[1..].split_last() else {
        return Reply::NilArray;
    };
    tri!(timeout_ms(timeout));
    for key in keys {
        if tri!(typed::read::<List>(ctx.db, key, ctx.now_ms)).is_none() {
            continue;
        }
        let pop = vec![arg(if left { "LPOP" } else { "RPOP" }), key.clone()];
        let item = lists::pop(ctx, &pop, left);
        if let Reply::Bulk(_) = item {
            ctx.log_as(pop);
            return Reply::Array(vec![Reply::bulk(key.as_slice()), item]);
        }
        return item;
    }
    Reply::NilArray
}

/// BRPOPLPUSH `source destination timeout` (as RPOPLPUSH) and BLMOVE `source destination
/// LEFT|RIGHT LEFT|RIGHT timeout` (as LMOVE): the item moved, or a null array.
pub fn bmove(ctx: &mut Ctx, a: &[Vec<u8>], rpoplpush: bool) -> Reply {
    let Some((timeout, rest)) = a.split_last() else {
        return Reply::Nil;
    };
    tri!(timeout_ms(timeout));
    let mut moved: Vec<Vec<u8>> = rest.to_vec();
    moved[0] = arg(if rpoplpush { "RPOPLPUSH" } else { "LMOVE" });
    let sides = rpoplpush.then_some((false, true));
    match lists::lmove(ctx, &moved, sides) {
        Reply::Bulk(item) => {
            ctx.log_as(moved);
            Reply::Bulk(item)
        }
        // Nothing moved: the null array, as Redis answers a blocking move's timeout (and its
        // try inside MULTI), where LMOVE answers a null bulk string.
        Reply::Nil => Reply::NilArray,
        other => other,
    }
}

/// BLMPOP `timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]` (as LMPOP) and BZMPOP
/// `timeout numkeys key [key ...] MIN|MAX [COUNT count]` (as ZMPOP).
pub fn bmpop(ctx: &mut Ctx, a: &[Vec<u8>], zset: bool) -> Reply {
    tri!(timeout_ms(&a[1]));
    let mut popped = Vec::with_capacity(a.len() - 1);
    popped.push(arg(if zset { "ZMPOP" } else { "LMPOP" }));
    popped.extend(a[2..].iter().cloned());
    let reply = if zset {
        zsets::zmpop(ctx, &popped)
    } else {
        lists::lmpop(ctx, &popped)
    };
    if let Reply::Array(_) = reply {
        ctx.log_as(popped);
    }
    reply
}

/// BZPOPMIN / BZPOPMAX `key [key ...] timeout`: `[key, member, score]` from the first
/// non-empty sorted set.
pub fn bzpop(ctx: &mut Ctx, a: &[Vec<u8>], min: bool) -> Reply {
    let Some((timeout, keys)) = a[1..].split_last() else {
        return Reply::NilArray;
    };
    tri!(timeout_ms(timeout));
    for key in keys {
        if tri!(typed::read::<ZSet>(ctx.db, key, ctx.now_ms)).is_none() {
            continue;
        }
        let pop = vec![arg(if min { "ZPOPMIN" } else { "ZPOPMAX" }), key.clone()];
        return match zsets::zpop(ctx, &pop, min) {
            Reply::Array(mut pair) if pair.len() == 2 => {
                ctx.log_as(pop);
                pair.insert(0, Reply::bulk(key.as_slice()));
                Reply::Array(pair)
            }
            Reply::Array(_) => continue,
            other => other,
        };
    }
    Reply::NilArray
}
