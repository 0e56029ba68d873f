//! Set commands. SPOP logs the members it removed (SREM), never the random request.

use super::args::tri;
use super::args::{scan_opts, Scanning};
use super::ctx::Ctx;
use super::lists::{positive, ranged};
use super::typed;
use crate::reply::{errors, Reply};
use crate::rng::Rng;
use crate::state::scanmap::ScanMap;
use crate::state::{Db, Value};

type Set = ScanMap<()>;

fn members(s: &Set) -> Reply {
    Reply::Array(s.keys().map(Reply::bulk).collect())
}

pub fn sadd(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let s = tri!(typed::create::<Set>(ctx, &a[1]));
    let n = a[2..].iter().filter(|m| s.insert(m, ()).is_none()).count();
    ctx.dirty = true;
    Reply::Int(n as i64)
}

pub fn srem(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let Some(s) = tri!(typed::existing::<Set>(ctx, &a[1])) else {
        return Reply::Int(0);
    };
    let n = a[2..].iter().filter(|m| s.remove(m).is_some()).count();
    if n > 0 {
        ctx.dirty = true;
    }
    typed::drop_if_empty::<Set>(ctx, &a[1]);
    Reply::Int(n as i64)
}

pub fn smembers(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    tri!(typed::read::<Set>(ctx.db, &a[1], ctx.now_ms))
        .map(members)
        .unwrap_or(Reply::Array(vec![]))
}

pub fn sismember(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(typed::read::<Set>(ctx.db, &a[1], ctx.now_ms)).is_some_and(|s| s.contains_key(&a[2]))
            as i64,
    )
}

pub fn smismember(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let s = tri!(typed::read::<Set>(ctx.db, &a[1], ctx.now_ms));
    Reply::Array(
        a[2..]
            .iter()
            .map(|m| Reply::Int(s.is_some_and(|s| s.contains_key(m)) as i64))
            .collect(),
    )
}

pub fn scard(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(typed::read::<Set>(ctx.db, &a[1], ctx.now_ms))
            .map(|s| s.len())
            .unwrap_or(0) as i64,
    )
}

/// `count` distinct members picked at random (all of them when count >= len). Small counts
/// probe random points of the hash space instead of walking the whole set.
fn pick_distinct(rng: &mut Rng, s: &Set, count: usize) -> Vec<Vec<u8>> {
    if count >= s.len() {
        return s.keys().map(<[u8]>::to_vec).collect();
    }
    if count * 4 < s.len() {
        let mut seen = std::collections::HashSet::with_capacity(count);
        let mut out = Vec::with_capacity(count);
        for _ in 0..count * 64 {
            if let Some((m, _)) = s.random(rng.next_u64()) {
                if seen.insert(m) {
                    out.push(m.to_vec());
                    if out.len() == count {
                        return out;
                    }
                }
            }
        }
    }
    let all: Vec<&[u8]> = s.keys().collect();
    let mut idx: Vec<usize> = (0..all.len()).collect();
    (0..count)
        .map(|i| {
            let j = i + rng.below(idx.len() - i);
            idx.swap(i, j);
            all[idx[i]].to_vec()
        })
        .collect()
}

pub fn spop(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 3 {
        return Reply::err(errors::SYNTAX);
    }
    let count = if a.len() == 3 {
        Some(tri!(positive(&a[2], None)) as usize)
    } else {
        None
    };
    let now = ctx.now_ms;
    let picked = {
        let rng = &mut *ctx.rng;
        let Some(s) = tri!(typed::read::<Set>(ctx.db, &a[1], now)) else {
            return nothing_picked(count.is_some());
        };
        match count {
            Some(0) => return Reply::Array(vec![]),
            None => pick_distinct(rng, s, 1),
            Some(n) => pick_distinct(rng, s, n),
        }
    };
    if let Ok(Some(s)) = typed::existing::<Set>(ctx, &a[1]) {
        for m in &picked {
            s.remove(m);
        }
    }
    typed::drop_if_empty::<Set>(ctx, &a[1]);
    ctx.dirty = true;
    let mut srem = vec![b"SREM".to_vec(), a[1].clone()];
    srem.extend(picked.iter().cloned());
    ctx.log_as(srem);
    match count {
        None => Reply::opt_bulk(picked.first().map(|m| m.as_slice())),
        Some(_) => Reply::Array(picked.into_iter().map(Reply::Bulk).collect()),
    }
}

/// SPOP's and SRANDMEMBER's answer on a missing key: an empty array with a count, else nil.
fn nothing_picked(with_count: bool) -> Reply {
    if with_count {
        Reply::Array(vec![])
    } else {
        Reply::Nil
    }
}

pub fn srandmember(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 3 {
        return Reply::err(errors::SYNTAX);
    }
    let count = if a.len() == 3 {
        let c = tri!(super::args::random_count_arg(&a[2]));
        if c < -(crate::config::RANDOM_COUNT_REPEATS_MAX as i64) {
            return Reply::err("ERR value is out of range");
        }
        Some(c)
    } else {
        None
    };
    let now = ctx.now_ms;
    let rng = &mut *ctx.rng;
    let Some(s) = tri!(typed::read::<Set>(ctx.db, &a[1], now)) else {
        return nothing_picked(count.is_some());
    };
    match count {
        None => Reply::opt_bulk(pick_distinct(rng, s, 1).first().map(|m| m.as_slice())),
        Some(c) if c >= 0 => Reply::Array(
            pick_distinct(rng, s, c as usize)
                .into_iter()
                .map(Reply::Bulk)
                .collect(),
        ),
        Some(c) => Reply::Array(
            (0..c.unsigned_abs())
                .filter_map(|_| s.random(rng.next_u64()))
                .map(|(m, _)| Reply::bulk(m))
                .collect(),
        ),
    }
}

pub fn smove(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (src, dst, m) = (&a[1], &a[2], &a[3]);
    let now = ctx.now_ms;
    let Some(s) = tri!(typed::read::<Set>(ctx.db, src, now)) else {
        return Reply::Int(0);
    };
    let is_member = s.contains_key(m);
    tri!(typed::read::<Set>(ctx.db, dst, now));
    if src == dst {
        return Reply::Int(is_member as i64);
    }
    if !is_member {
        return Reply::Int(0);
    }
    if let Ok(Some(s)) = typed::existing::<Set>(ctx, src) {
        s.remove(m);
    }
    typed::drop_if_empty::<Set>(ctx, src);
    tri!(typed::create::<Set>(ctx, dst)).insert(m, ());
    ctx.dirty = true;
    Reply::Int(1)
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// Reads every set (a missing key is an empty set); WRONGTYPE if any key holds another type.
fn load<'a>(db: &'a Db, keys: &[Vec<u8>], now: u64) -> Result<Vec<Option<&'a Set>>, Reply> {
    keys.iter()
        .map(|k| typed::read::<Set>(db, k, now))
        .collect()
}

fn combine(sets: &[Option<&Set>], op: Op) -> Vec<Vec<u8>> {
    match op {
        Op::Inter => {
            if sets.iter().any(|s| s.is_none_or(|s| s.is_empty())) {
                return Vec::new();
            }
            let mut order: Vec<&Set> = sets.iter().flatten().copied().collect();
            order.sort_by_key(|s| s.len());
            order[0]
                .keys()
                .filter(|m| order[1..].iter().all(|s| s.contains_key(m)))
                .map(<[u8]>::to_vec)
                .collect()
        }
        Op::Union => {
            let mut out = Set::new();
            for s in sets.iter().flatten() {
                for m in s.keys() {
                    out.insert(m, ());
                }
            }
            out.keys().map(<[u8]>::to_vec).collect()
        }
        Op::Diff => match sets.first().copied().flatten() {
            None => Vec::new(),
            Some(first) => first
                .keys()
                .filter(|m| !sets[1..].iter().flatten().any(|s| s.contains_key(m)))
                .map(<[u8]>::to_vec)
                .collect(),
        },
    }
}

fn algebra(ctx: &mut Ctx, a: &[Vec<u8>], op: Op, store: bool) -> Reply {
    let keys = if store { &a[2..] } else { &a[1..] };
    let now = ctx.now_ms;
    let result = {
        let sets = tri!(load(ctx.db, keys, now));
        combine(&sets, op)
    };
    if !store {
        return Reply::bulks(result);
    }
    let n = result.len();
    let mut s = Set::new();
    for m in &result {
        s.insert(m, ());
    }
    ctx.store_or_delete(&a[1], (n > 0).then_some(Value::Set(Box::new(s))));
    Reply::Int(n as i64)
}

pub fn sinter(ctx: &mut Ctx, a: &[Vec<u8>], store: bool) -> Reply {
    algebra(ctx, a, Op::Inter, store)
}
pub fn sunion(ctx: &mut Ctx, a: &[Vec<u8>], store: bool) -> Reply {
    algebra(ctx, a, Op::Union, store)
}
pub fn sdiff(ctx: &mut Ctx, a: &[Vec<u8>], store: bool) -> Reply {
    algebra(ctx, a, Op::Diff, store)
}

pub fn sintercard(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let numkeys = tri!(ranged(&a[1], 1, "numkeys should be greater than 0")) as usize;
    if numkeys > a.len() - 2 {
        return Reply::err("ERR Number of keys can't be greater than number of args");
    }
    let mut limit = 0i64;
    let mut j = 2 + numkeys;
    while j < a.len() {
        if super::args::is(&a[j], "limit") && j + 1 < a.len() {
            j += 1;
            limit = tri!(positive(&a[j], Some("LIMIT can't be negative")));
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    let sets = tri!(load(ctx.db, &a[2..2 + numkeys], ctx.now_ms));
    let n = combine(&sets, Op::Inter).len();
    Reply::Int(if limit > 0 { n.min(limit as usize) } else { n } as i64)
}

pub fn sscan(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if super::args::parse_cursor(&a[2]).is_none() {
        return Reply::err(errors::INVALID_CURSOR);
    }
    let Some(s) = tri!(typed::read::<Set>(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Array(vec![Reply::bulk(&b"0"[..]), Reply::Array(vec![])]);
    };
    let o = tri!(scan_opts(a, 2, Scanning::Members));
    let mut out = Vec::new();
    let next = s.scan(o.cursor, o.budget(s.len()), |m, _| {
        if o.matches(m) {
            out.push(Reply::bulk(m));
        }
    });
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(out)])
}
