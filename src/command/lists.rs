//! List commands (the non-blocking ones), with Redis 7 argument order and error texts.

use super::args::tri;
use super::args::{int_arg, is};
use super::ctx::Ctx;
use super::typed;
use crate::reply::{errors, Reply};
use crate::state::list::List;

/// A count that must not be negative: Redis's `getPositiveLongFromObjectOrReply`, whose message
/// also answers a non-integer.
pub fn positive(arg: &[u8], msg: Option<&str>) -> Result<i64, Reply> {
    ranged(
        arg,
        0,
        msg.unwrap_or("value is out of range, must be positive"),
    )
}

/// At least `min`, else `ERR <msg>` (also for a non-integer): `getRangeLongFromObjectOrReply`.
pub fn ranged(arg: &[u8], min: i64, msg: &str) -> Result<i64, Reply> {
    match crate::num::parse_i64(arg) {
        Some(n) if n >= min => Ok(n),
        _ => Err(Reply::Error(format!("ERR {msg}"))),
    }
}

/// LPUSH / RPUSH (and the X forms, which need the key to exist).
pub fn push(ctx: &mut Ctx, a: &[Vec<u8>], left: bool, only_existing: bool) -> Reply {
    if only_existing && tri!(typed::existing::<List>(ctx, &a[1])).is_none() {
        return Reply::Int(0);
    }
    let l = tri!(typed::create::<List>(ctx, &a[1]));
    for v in &a[2..] {
        if left {
            l.push_front(v.clone());
        } else {
            l.push_back(v.clone());
        }
    }
    let n = l.len();
    ctx.dirty = true;
    Reply::Int(n as i64)
}

/// LPOP / RPOP `key [count]`.
pub fn pop(ctx: &mut Ctx, a: &[Vec<u8>], left: bool) -> Reply {
    if a.len() > 3 {
        return Reply::err(errors::wrong_arity(if left { "lpop" } else { "rpop" }));
    }
    let count = if a.len() == 3 {
        Some(tri!(positive(&a[2], None)))
    } else {
        None
    };
    let Some(l) = tri!(typed::existing::<List>(ctx, &a[1])) else {
        return if count.is_some() {
            Reply::NilArray
        } else {
            Reply::Nil
        };
    };
    let reply = match count {
        Some(0) => return Reply::Array(vec![]),
        None => Reply::opt_bulk(pop_one(l, left).as_deref()),
        Some(n) => {
            let n = (n as usize).min(l.len());
            Reply::Array(
                (0..n)
                    .filter_map(|_| pop_one(l, left))
                    .map(Reply::Bulk)
                    .collect(),
            )
        }
    };
    ctx.dirty = true;
    typed::drop_if_empty::<List>(ctx, &a[1]);
    reply
}

fn pop_one(l: &mut List, left: bool) -> Option<Vec<u8>> {
    if left {
        l.pop_front()
    } else {
        l.pop_back()
    }
}

pub fn llen(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(typed::read::<List>(ctx.db, &a[1], ctx.now_ms))
            .map(|l| l.len())
            .unwrap_or(0) as i64,
    )
}

/// Redis's LRANGE index arithmetic (also ZRANGE's and ZREMRANGEBYRANK's): the inclusive range,
/// or None when empty.
pub fn range(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let (mut s, mut e) = (start, end);
    if s < 0 {
        s += len;
    }
    if e < 0 {
        e += len;
    }
    if s < 0 {
        s = 0;
    }
    if s > e || s >= len {
        return None;
    }
    if e >= len {
        e = len - 1;
    }
    Some((s as usize, e as usize))
}

pub fn lrange(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let start = tri!(int_arg(&a[2]));
    let end = tri!(int_arg(&a[3]));
    let Some(l) = tri!(typed::read::<List>(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Array(vec![]);
    };
    match range(l.len(), start, end) {
        None => Reply::Array(vec![]),
        Some((s, e)) => Reply::Array(l.iter_from(s).take(e + 1 - s).map(Reply::bulk).collect()),
    }
}

fn index(len: usize, i: i64) -> Option<usize> {
    let i = if i < 0 { i + len as i64 } else { i };
    (i >= 0 && (i as usize) < len).then_some(i as usize)
}

pub fn lindex(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let Some(l) = tri!(typed::read::<List>(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Nil;
    };
    let i = tri!(int_arg(&a[2]));
    Reply::opt_bulk(index(l.len(), i).and_then(|i| l.get(i)))
}

pub fn lset(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let Some(l) = tri!(typed::existing::<List>(ctx, &a[1])) else {
        return Reply::err(errors::NO_SUCH_KEY);
    };
    let i = tri!(int_arg(&a[2]));
    match index(l.len(), i) {
        None => Reply::err("ERR index out of range"),
        Some(i) => {
            l.set(i, a[3].clone());
            ctx.dirty = true;
            Reply::ok()
        }
    }
}

pub fn linsert(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let after = if is(&a[2], "after") {
        true
    } else if is(&a[2], "before") {
        false
    } else {
        return Reply::err(errors::SYNTAX);
    };
    let Some(l) = tri!(typed::existing::<List>(ctx, &a[1])) else {
        return Reply::Int(0);
    };
    let Some(pos) = l.iter().position(|v| v == a[3].as_slice()) else {
        return Reply::Int(-1);
    };
    l.insert(if after { pos + 1 } else { pos }, a[4].clone());
    let n = l.len();
    ctx.dirty = true;
    Reply::Int(n as i64)
}

pub fn lrem(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let count = tri!(int_arg(&a[2]));
    let Some(l) = tri!(typed::existing::<List>(ctx, &a[1])) else {
        return Reply::Int(0);
    };
    // 0: every match.
    let limit = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
    let removed = l.remove_matching(&a[3], limit, count < 0);
    if removed > 0 {
        ctx.dirty = true;
    }
    typed::drop_if_empty::<List>(ctx, &a[1]);
    Reply::Int(removed as i64)
}

pub fn ltrim(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let start = tri!(int_arg(&a[2]));
    let end = tri!(int_arg(&a[3]));
    let Some(l) = tri!(typed::existing::<List>(ctx, &a[1])) else {
        return Reply::ok();
    };
    match range(l.len(), start, end) {
        None => l.clear(),
        Some((s, e)) => {
            l.truncate(e + 1);
            l.drop_front(s);
        }
    }
    ctx.dirty = true;
    typed::drop_if_empty::<List>(ctx, &a[1]);
    Reply::ok()
}

pub fn lpos(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (mut rank, mut count, mut maxlen) = (1i64, -1i64, 0i64);
    let mut j = 3;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if is(&a[j], "rank") && more > 0 {
            j += 1;
            rank = tri!(int_arg(&a[j]));
            if rank == 0 {
                return Reply::err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
            if rank == i64::MIN {
                return Reply::err("ERR value is out of range");
            }
        } else if is(&a[j], "count") && more > 0 {
            j += 1;
            count = tri!(positive(&a[j], Some("COUNT can't be negative")));
        } else if is(&a[j], "maxlen") && more > 0 {
            j += 1;
            maxlen = tri!(positive(&a[j], Some("MAXLEN can't be negative")));
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    let Some(l) = tri!(typed::read::<List>(ctx.db, &a[1], ctx.now_ms)) else {
        return if count != -1 {
            Reply::Array(vec![])
        } else {
            Reply::Nil
        };
    };
    let from_tail = rank < 0;
    let rank = rank.unsigned_abs();
    let len = l.len();
    let mut matches = 0u64;
    let mut out = Vec::new();
    let mut found = None;
    let items: Box<dyn Iterator<Item = &[u8]>> = if from_tail {
        Box::new(l.iter().rev())
    } else {
        Box::new(l.iter())
    };
    for (i, item) in items.enumerate() {
        if maxlen != 0 && i as i64 >= maxlen {
            break;
        }
        let idx = if from_tail { len - 1 - i } else { i };
        if item == a[2].as_slice() {
            matches += 1;
            if matches >= rank {
                if count != -1 {
                    out.push(Reply::Int(idx as i64));
                    if count != 0 && (matches - rank + 1) as i64 >= count {
                        break;
                    }
                } else {
                    found = Some(idx);
                    break;
                }
            }
        }
    }
    if count != -1 {
        Reply::Array(out)
    } else {
        found.map(|i| Reply::Int(i as i64)).unwrap_or(Reply::Nil)
    }
}

fn side(arg: &[u8]) -> Result<bool, Reply> {
    if is(arg, "left") {
        Ok(true)
    } else if is(arg, "right") {
        Ok(false)
    } else {
        Err(Reply::err(errors::SYNTAX))
    }
}

/// LMOVE src dst LEFT|RIGHT LEFT|RIGHT, and RPOPLPUSH as `from_left = false, to_left = true`.
pub fn lmove(ctx: &mut Ctx, a: &[Vec<u8>], sides: Option<(bool, bool)>) -> Reply {
    let (from_left, to_left) = match sides {
        Some(s) => s,
        None => (tri!(side(&a[3])), tri!(side(&a[4]))),
    };
    let (src, dst) = (&a[1], &a[2]);
    if tri!(typed::read::<List>(ctx.db, src, ctx.now_ms)).is_none() {
        return Reply::Nil;
    }
    tri!(typed::read::<List>(ctx.db, dst, ctx.now_ms));
    let Some(v) = tri!(typed::existing::<List>(ctx, src)).and_then(|l| pop_one(l, from_left))
    else {
        return Reply::Nil;
    };
    // Push before the source's emptiness check, as Redis does: rotating a one-element list onto
    // itself must not delete and recreate the key (which would drop its TTL).
    let l = tri!(typed::create::<List>(ctx, dst));
    if to_left {
        l.push_front(v.clone());
    } else {
        l.push_back(v.clone());
    }
    typed::drop_if_empty::<List>(ctx, src);
    ctx.dirty = true;
    Reply::Bulk(v)
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]
pub fn lmpop(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let numkeys = tri!(ranged(&a[1], 1, "numkeys should be greater than 0"));
    let where_idx = 2usize.saturating_add(numkeys as usize);
    if where_idx >= a.len() {
        return Reply::err(errors::SYNTAX);
    }
    let left = tri!(side(&a[where_idx]));
    let mut count = -1i64;
    let mut j = where_idx + 1;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if count == -1 && is(&a[j], "count") && more > 0 {
            j += 1;
            count = tri!(ranged(&a[j], 1, "count should be greater than 0"));
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    let count = if count == -1 { 1 } else { count as usize };
    for key in &a[2..where_idx] {
        let Some(l) = tri!(typed::existing::<List>(ctx, key)) else {
            continue;
        };
        let n = count.min(l.len());
        let items: Vec<Reply> = (0..n)
            .filter_map(|_| pop_one(l, left))
            .map(Reply::Bulk)
            .collect();
        ctx.dirty = true;
        typed::drop_if_empty::<List>(ctx, key);
        return Reply::Array(vec![Reply::bulk(key.as_slice()), Reply::Array(items)]);
    }
    Reply::NilArray
}
