//! Hash commands.

use super::args::tri;
use super::args::{int_arg, is, scan_opts, Scanning};
use super::ctx::Ctx;
use super::longdouble;
use super::typed;
use crate::num::parse_i64;
use crate::reply::{errors, Reply};
use crate::state::hash::Hash;

pub fn hset(ctx: &mut Ctx, a: &[Vec<u8>], hmset: bool) -> Reply {
    if !a.len().is_multiple_of(2) {
        return Reply::err(errors::wrong_arity(if hmset { "hmset" } else { "hset" }));
    }
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    // A packed hash grows once for all the pairs, not once a pair.
    h.reserve(a[2..].iter().map(|x| x.len() + 1).sum());
    let mut created = 0;
    for fv in a[2..].chunks(2) {
        if h.insert(&fv[0], fv[1].clone()).is_none() {
            created += 1;
        }
    }
    ctx.dirty = true;
    if hmset {
        Reply::ok()
    } else {
        Reply::Int(created)
    }
}

pub fn hsetnx(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).is_some_and(|h| h.contains_key(&a[2])) {
        return Reply::Int(0);
    }
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    h.insert(&a[2], a[3].clone());
    ctx.dirty = true;
    Reply::Int(1)
}

pub fn hget(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::opt_bulk(tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).and_then(|h| h.get(&a[2])))
}

pub fn hmget(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let h = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    Reply::Array(
        a[2..]
            .iter()
            .map(|f| Reply::opt_bulk(h.and_then(|h| h.get(f))))
            .collect(),
    )
}

pub fn hdel(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).is_none() {
        return Reply::Int(0);
    }
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    let n = a[2..].iter().filter(|f| h.remove(f).is_some()).count();
    if n > 0 {
        ctx.dirty = true;
    }
    typed::drop_if_empty::<Hash>(ctx, &a[1]);
    Reply::Int(n as i64)
}

/// `HGETDEL key FIELDS numfields field ...` (Redis 8.0): each field's value (nil when
/// absent), and the fields that were there are deleted; logged as the HDEL it amounts to.
pub fn hgetdel(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let exists = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).is_some();
    if !a[2].eq_ignore_ascii_case(b"fields") {
        return Reply::err("ERR Mandatory argument FIELDS is missing or not at the right position");
    }
    let n = match super::args::int_arg(&a[3]) {
        Ok(n) if n >= 1 => n as usize,
        _ => return Reply::err("ERR Number of fields must be a positive integer"),
    };
    let fields = &a[4..];
    if n != fields.len() {
        return Reply::err("ERR The `numfields` parameter must match the number of arguments");
    }
    if !exists {
        return Reply::Array(vec![Reply::Nil; n]);
    }
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    let mut deleted = Vec::new();
    let out: Vec<Reply> = fields
        .iter()
        .map(|f| match h.remove(f) {
            Some(v) => {
                deleted.push(f.clone());
                Reply::Bulk(v)
            }
            None => Reply::Nil,
        })
        .collect();
    if !deleted.is_empty() {
        let mut hdel = vec![b"HDEL".to_vec(), a[1].clone()];
        hdel.extend(deleted);
        ctx.log_as(hdel);
        ctx.dirty = true;
    }
    typed::drop_if_empty::<Hash>(ctx, &a[1]);
    Reply::Array(out)
}

pub fn hlen(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms))
            .map(|h| h.len())
            .unwrap_or(0) as i64,
    )
}

pub fn hstrlen(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms))
            .and_then(|h| h.get(&a[2]))
            .map(|v| v.len())
            .unwrap_or(0) as i64,
    )
}

pub fn hexists(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).is_some_and(|h| h.contains_key(&a[2]))
            as i64,
    )
}

pub fn hkeys(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let h = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    Reply::Array(
        h.map(|h| h.keys().map(Reply::bulk).collect())
            .unwrap_or_default(),
    )
}

pub fn hvals(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let h = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    Reply::Array(
        h.map(|h| h.iter().map(|(_, v)| Reply::bulk(v)).collect())
            .unwrap_or_default(),
    )
}

pub fn hgetall(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let h = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    let mut out = Vec::with_capacity(h.map(|h| h.len() * 2).unwrap_or(0));
    if let Some(h) = h {
        for (f, v) in h.iter() {
            out.push(Reply::bulk(f));
            out.push(Reply::bulk(v));
        }
    }
    Reply::Array(out)
}

pub fn hincrby(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let by = tri!(int_arg(&a[3]));
    let cur = match tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).and_then(|h| h.get(&a[2]))
    {
        None => 0,
        Some(v) => match parse_i64(v) {
            Some(n) => n,
            None => return Reply::err(errors::HASH_NOT_INTEGER),
        },
    };
    let Some(n) = cur.checked_add(by) else {
        return Reply::err(errors::OVERFLOW);
    };
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    h.insert_keep_ttl(&a[2], n.to_string().into_bytes());
    ctx.dirty = true;
    Reply::Int(n)
}

pub fn hincrbyfloat(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let Some(by) = longdouble::parse(&a[3]) else {
        return Reply::err(errors::NOT_FLOAT);
    };
    if by.is_inf() {
        return Reply::err("ERR value is NaN or Infinity");
    }
    let cur = match tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).and_then(|h| h.get(&a[2]))
    {
        None => longdouble::parse(b"0"),
        Some(v) => match longdouble::parse(v) {
            Some(n) => Some(n),
            None => return Reply::err(errors::HASH_NOT_FLOAT),
        },
    };
    let n = match cur.and_then(|c| longdouble::add(c, by)) {
        Some(n) if !n.is_inf() => n,
        _ => return Reply::err(errors::NAN_OR_INF),
    };
    let s = longdouble::format_human(n).into_bytes();
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    h.insert_keep_ttl(&a[2], s.clone());
    ctx.dirty = true;
    // Logged with its result, as Redis 8 propagates it: the field keeps its TTL.
    ctx.log_as(vec![
        b"HSETEX".to_vec(),
        a[1].clone(),
        b"KEEPTTL".to_vec(),
        b"FIELDS".to_vec(),
        b"1".to_vec(),
        a[2].clone(),
        s.clone(),
    ]);
    Reply::Bulk(s)
}

pub fn hrandfield(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (count, withvalues) = match a.len() {
        2 => (None, false),
        3 => (Some(tri!(super::args::random_count_arg(&a[2]))), false),
        4 if is(&a[3], "withvalues") => (Some(tri!(super::args::random_count_arg(&a[2]))), true),
        _ => return Reply::err(errors::SYNTAX),
    };
    if let Some(c) = count {
        // Redis refuses counts whose reply could not be built; so does tidepool, at a bound it
        // can answer within the request limits.
        if (withvalues && c < -(i64::MAX / 2))
            || c < -(crate::config::RANDOM_COUNT_REPEATS_MAX as i64)
        {
            return Reply::err("ERR value is out of range");
        }
    }
    let rng = &mut *ctx.rng;
    let h = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    let Some(h) = h else {
        return if count.is_some() {
            Reply::Array(vec![])
        } else {
            Reply::Nil
        };
    };
    let fields: Vec<(&[u8], &[u8])> = h.iter().collect();
    let push = |out: &mut Vec<Reply>, (f, v): (&[u8], &[u8])| {
        out.push(Reply::bulk(f));
        if withvalues {
            out.push(Reply::bulk(v));
        }
    };
    let mut out = Vec::new();
    match count {
        None => {
            let i = rng.below(fields.len());
            return Reply::bulk(fields[i].0);
        }
        Some(0) => {}
        Some(c) if c < 0 => {
            for _ in 0..c.unsigned_abs() {
                let i = rng.below(fields.len());
                push(&mut out, fields[i]);
            }
        }
        Some(c) => {
            let c = c as usize;
            if c >= fields.len() {
                for f in fields {
                    push(&mut out, f);
                }
            } else {
                // Partial Fisher-Yates: c distinct picks.
                let mut idx: Vec<usize> = (0..fields.len()).collect();
                for i in 0..c {
                    let j = i + rng.below(idx.len() - i);
                    idx.swap(i, j);
                    push(&mut out, fields[idx[i]]);
                }
            }
        }
    }
    Reply::Array(out)
}

pub fn hscan(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    // Redis reads the cursor, then the key, and only then the options.
    if super::args::parse_cursor(&a[2]).is_none() {
        return Reply::err(errors::INVALID_CURSOR);
    }
    let h = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    if h.is_none() {
        return Reply::Array(vec![Reply::bulk(&b"0"[..]), Reply::Array(vec![])]);
    }
    let o = tri!(scan_opts(a, 2, Scanning::Hash));
    let mut out = Vec::new();
    let next = match h {
        None => 0,
        Some(h) => h.scan(o.cursor, o.budget(h.len()), |f, v| {
            if o.matches(f) {
                out.push(Reply::bulk(f));
                if !o.novalues {
                    out.push(Reply::bulk(v));
                }
            }
        }),
    };
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(out)])
}
