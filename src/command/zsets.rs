//! Sorted-set commands (all but the blocking ones), following Redis 7.0's t_zset.c: argument
//! order, option parsing, error texts, and `%.17g` scores.

use super::args::tri;
use super::args::{int_arg, is, scan_opts, Scanning};
use super::ctx::Ctx;
use super::lists::{positive, ranged};
use super::typed;
use crate::num::{fmt_g17, parse_double, strtod_full};
use crate::reply::{errors, Reply};
use crate::rng::Rng;
use crate::state::zset::{LexBound, LexRange, ScoreRange, ZSet};
use crate::state::Value;

fn score_reply(s: f64) -> Reply {
    Reply::Bulk(fmt_g17(s).into_bytes())
}

/// Replaces `dst` with `z` (deleting it when `z` is empty); returns the stored size.
fn store(ctx: &mut Ctx, dst: &[u8], z: ZSet) -> Reply {
    let z = z.into_stored();
    let n = z.len();
    ctx.store_or_delete(dst, (n > 0).then_some(Value::ZSet(Box::new(z))));
    Reply::Int(n as i64)
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`, and ZINCRBY.
pub fn zadd(ctx: &mut Ctx, a: &[Vec<u8>], zincrby: bool) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, zincrby);
    let mut i = 2;
    if !zincrby {
        while i < a.len() {
            let o = &a[i];
            if is(o, "nx") {
                nx = true;
            } else if is(o, "xx") {
                xx = true;
            } else if is(o, "ch") {
                ch = true;
            } else if is(o, "incr") {
                incr = true;
            } else if is(o, "gt") {
                gt = true;
            } else if is(o, "lt") {
                lt = true;
            } else {
                break;
            }
            i += 1;
        }
    }
    let elements = a.len() - i;
    if elements % 2 == 1 || elements == 0 {
        return Reply::err(errors::SYNTAX);
    }
    let pairs = elements / 2;
    if xx && nx {
        return Reply::err("ERR XX and NX options at the same time are not compatible");
    }
    if ((gt || lt) && nx) || (gt && lt) {
        return Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && pairs > 1 {
        return Reply::err("ERR INCR option supports a single increment-element pair");
    }
    let mut scores = Vec::with_capacity(pairs);
    for j in 0..pairs {
        match parse_double(&a[i + j * 2]) {
            Some(s) => scores.push(s),
            None => return Reply::err(errors::NOT_FLOAT),
        }
    }
    let key = &a[1];
    let now = ctx.now_ms;
    if tri!(typed::existing::<ZSet>(ctx, key)).is_none() {
        if xx {
            return if incr { Reply::Nil } else { Reply::Int(0) };
        }
        ctx.db
            .insert(key, Value::ZSet(Box::new(ZSet::new())), None, now);
    }
    let Some(z) = tri!(typed::existing::<ZSet>(ctx, key)) else {
        return Reply::Int(0);
    };
    let (mut added, mut updated, mut processed) = (0, 0, 0);
    let mut last = 0.0;
    let mut error = None;
    for (j, &score) in scores.iter().enumerate() {
        let m = &a[i + 1 + j * 2];
        match z.score(m) {
            Some(cur) => {
                if nx {
                    continue;
                }
                let new = if incr { score + cur } else { score };
                if new.is_nan() {
                    error = Some("ERR resulting score is not a number (NaN)");
                    break;
                }
                if (lt && new >= cur) || (gt && new <= cur) {
                    continue;
                }
                last = new;
                processed += 1;
                if new != cur {
                    z.insert(m, new);
                    updated += 1;
                }
            }
            None if !xx => {
                z.insert(m, score);
                added += 1;
                processed += 1;
                last = score;
            }
            None => {}
        }
    }
    if added + updated > 0 {
        ctx.dirty = true;
    }
    typed::drop_if_empty::<ZSet>(ctx, key);
    if let Some(e) = error {
        return Reply::err(e);
    }
    if incr {
        if processed > 0 {
            score_reply(last)
        } else {
            Reply::Nil
        }
    } else {
        Reply::Int(if ch { added + updated } else { added })
    }
}

pub fn zrem(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let Some(z) = tri!(typed::existing::<ZSet>(ctx, &a[1])) else {
        return Reply::Int(0);
    };
    let n = a[2..].iter().filter(|m| z.remove(m).is_some()).count();
    if n > 0 {
        ctx.dirty = true;
    }
    typed::drop_if_empty::<ZSet>(ctx, &a[1]);
    Reply::Int(n as i64)
}

pub fn zcard(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms))
            .map(|z| z.len())
            .unwrap_or(0) as i64,
    )
}

pub fn zscore(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    match tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms)).and_then(|z| z.score(&a[2])) {
        Some(s) => score_reply(s),
        None => Reply::Nil,
    }
}

pub fn zmscore(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let z = tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms));
    Reply::Array(
        a[2..]
            .iter()
            .map(|m| {
                z.and_then(|z| z.score(m))
                    .map(score_reply)
                    .unwrap_or(Reply::Nil)
            })
            .collect(),
    )
}

pub fn zrank(ctx: &mut Ctx, a: &[Vec<u8>], rev: bool) -> Reply {
    let Some(z) = tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Nil;
    };
    match z.rank(&a[2]) {
        Some(r) => Reply::Int(if rev { z.len() - 1 - r } else { r } as i64),
        None => Reply::Nil,
    }
}

/// Redis's `zslParseRange` for one end: `(` for exclusive, then `strtod` over the rest.
fn score_bound(b: &[u8]) -> Option<(f64, bool)> {
    let (ex, text) = match b.first() {
        Some(b'(') => (true, &b[1..]),
        _ => (false, b),
    };
    let s = std::str::from_utf8(text).ok()?;
    let v = strtod_full(s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']))?;
    if v.is_nan() || s.is_empty() {
        return None;
    }
    Some((v, ex))
}

fn score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
    match (score_bound(min), score_bound(max)) {
        (Some((min, minex)), Some((max, maxex))) => Ok(ScoreRange {
            min,
            max,
            minex,
            maxex,
        }),
        _ => Err(Reply::err("ERR min or max is not a float")),
    }
}

fn lex_bound(b: &[u8]) -> Option<LexBound> {
    match b.first()? {
        b'+' if b.len() == 1 => Some(LexBound::PosInf),
        b'-' if b.len() == 1 => Some(LexBound::NegInf),
        b'(' => Some(LexBound::Exclusive(b[1..].to_vec())),
        b'[' => Some(LexBound::Inclusive(b[1..].to_vec())),
        _ => None,
    }
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<LexRange, Reply> {
    match (lex_bound(min), lex_bound(max)) {
        (Some(min), Some(max)) => Ok(LexRange { min, max }),
        _ => Err(Reply::err("ERR min or max not valid string range item")),
    }
}

#[derive(Clone, Copy, PartialEq)]
pub enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

#[derive(Clone, Copy, PartialEq)]
pub enum Direction {
    Auto,
    Forward,
    Reverse,
}

/// Redis's `zrangeGenericCommand`: ZRANGE, ZREVRANGE, `Z[REV]RANGEBY{SCORE,LEX}`, ZRANGESTORE.
pub fn zrange(
    ctx: &mut Ctx,
    a: &[Vec<u8>],
    start_at: usize,
    storing: bool,
    mut rt: RangeType,
    mut dir: Direction,
) -> Reply {
    let key = &a[start_at];
    // ZREVRANGE: a range by rank by name, where LIMIT stays refused.
    let rank_by_name = rt == RangeType::Rank;
    let (mut minidx, mut maxidx) = (start_at + 1, start_at + 2);
    let (mut withscores, mut offset, mut limit) = (false, 0i64, -1i64);
    let mut j = start_at + 3;
    while j < a.len() {
        let left = a.len() - j - 1;
        if !storing && is(&a[j], "withscores") {
            withscores = true;
        } else if is(&a[j], "limit") && left >= 2 {
            offset = tri!(int_arg(&a[j + 1]));
            limit = tri!(int_arg(&a[j + 2]));
            j += 2;
        } else if dir == Direction::Auto && is(&a[j], "rev") {
            dir = Direction::Reverse;
        } else if rt == RangeType::Auto && is(&a[j], "bylex") {
            rt = RangeType::Lex;
        } else if rt == RangeType::Auto && is(&a[j], "byscore") {
            rt = RangeType::Score;
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    if dir == Direction::Auto {
        dir = Direction::Forward;
    }
    if rt == RangeType::Auto {
        rt = RangeType::Rank;
    }
    // Redis refuses LIMIT on a range by rank; the hosted service accepts it in ZRANGE and
    // ZRANGESTORE and pages the ranked range as it pages the others, so tidepool does too.
    if limit != -1 && rank_by_name {
        return Reply::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if withscores && rt == RangeType::Lex {
        return Reply::err("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    let rev = dir == Direction::Reverse;
    if rev && rt != RangeType::Rank {
        std::mem::swap(&mut minidx, &mut maxidx);
    }
    enum Spec {
        Rank(i64, i64),
        Score(ScoreRange),
        Lex(LexRange),
    }
    let spec = match rt {
        RangeType::Score => Spec::Score(tri!(score_range(&a[minidx], &a[maxidx]))),
        RangeType::Lex => Spec::Lex(tri!(lex_range(&a[minidx], &a[maxidx]))),
        _ => Spec::Rank(tri!(int_arg(&a[minidx])), tri!(int_arg(&a[maxidx]))),
    };
    let now = ctx.now_ms;
    let picked: Vec<(Vec<u8>, f64)> = {
        let z = match tri!(typed::read::<ZSet>(ctx.db, key, now)) {
            Some(z) => z,
            None if storing => return store(ctx, &a[1], ZSet::new()),
            None => return Reply::Array(vec![]),
        };
        let own = |(m, s): (&[u8], f64)| (m.to_vec(), s);
        // LIMIT offset count: a negative offset, or one past the end, selects nothing
        // (genericZrangebyscoreCommand); a negative count means all.
        let window = (offset >= 0 && !(offset > 0 && offset as usize >= z.len())).then_some((
            offset as usize,
            if limit < 0 {
                usize::MAX
            } else {
                limit as usize
            },
        ));
        match spec {
            Spec::Rank(start, end) => match (super::lists::range(z.len(), start, end), window) {
                (None, _) | (_, None) => Vec::new(),
                // Ranks from the top are positions from the end.
                (Some((s, e)), Some((skip, take))) if rev => {
                    let n = z.len();
                    z.by_rank(n - 1 - e, n - s)
                        .rev()
                        .skip(skip)
                        .take(take)
                        .map(own)
                        .collect()
                }
                (Some((s, e)), Some((skip, take))) => {
                    z.by_rank(s, e + 1).skip(skip).take(take).map(own).collect()
                }
            },
            Spec::Score(r) => match window {
                None => Vec::new(),
                Some((skip, take)) if rev => z
                    .range_by_score(&r)
                    .rev()
                    .skip(skip)
                    .take(take)
                    .map(own)
                    .collect(),
                Some((skip, take)) => z
                    .range_by_score(&r)
                    .skip(skip)
                    .take(take)
                    .map(own)
                    .collect(),
            },
            Spec::Lex(r) => match window {
                None => Vec::new(),
                Some((skip, take)) => {
                    let mut v = z.range_by_lex(&r);
                    if rev {
                        v.reverse();
                    }
                    v.into_iter().skip(skip).take(take).map(own).collect()
                }
            },
        }
    };
    if storing {
        let mut z = ZSet::computed();
        for (m, s) in &picked {
            z.insert(m, *s);
        }
        return store(ctx, &a[1], z);
    }
    let mut out = Vec::with_capacity(picked.len() * if withscores { 2 } else { 1 });
    for (m, s) in picked {
        out.push(Reply::Bulk(m));
        if withscores {
            out.push(score_reply(s));
        }
    }
    Reply::Array(out)
}

pub fn zcount(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let r = tri!(score_range(&a[2], &a[3]));
    let z = tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms));
    Reply::Int(z.map(|z| z.count_by_score(&r)).unwrap_or(0) as i64)
}

pub fn zlexcount(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let r = tri!(lex_range(&a[2], &a[3]));
    let z = tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms));
    Reply::Int(z.map(|z| z.range_by_lex(&r).len()).unwrap_or(0) as i64)
}

/// ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX.
pub fn zremrange(ctx: &mut Ctx, a: &[Vec<u8>], rt: RangeType) -> Reply {
    enum Spec {
        Rank(i64, i64),
        Score(ScoreRange),
        Lex(LexRange),
    }
    let spec = match rt {
        RangeType::Score => Spec::Score(tri!(score_range(&a[2], &a[3]))),
        RangeType::Lex => Spec::Lex(tri!(lex_range(&a[2], &a[3]))),
        _ => Spec::Rank(tri!(int_arg(&a[2])), tri!(int_arg(&a[3]))),
    };
    let victims: Vec<Vec<u8>> = {
        let Some(z) = tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms)) else {
            return Reply::Int(0);
        };
        match spec {
            Spec::Rank(start, end) => match super::lists::range(z.len(), start, end) {
                None => return Reply::Int(0),
                Some((s, e)) => z.by_rank(s, e + 1).map(|(m, _)| m.to_vec()).collect(),
            },
            Spec::Score(r) => z.range_by_score(&r).map(|(m, _)| m.to_vec()).collect(),
            Spec::Lex(r) => z
                .range_by_lex(&r)
                .into_iter()
                .map(|(m, _)| m.to_vec())
                .collect(),
        }
    };
    if let Ok(Some(z)) = typed::existing::<ZSet>(ctx, &a[1]) {
        for m in &victims {
            z.remove(m);
        }
    }
    if !victims.is_empty() {
        ctx.dirty = true;
    }
    typed::drop_if_empty::<ZSet>(ctx, &a[1]);
    Reply::Int(victims.len() as i64)
}

/// Pops up to `count` from the low (`min`) or high end; (member, score) pairs.
fn pop_n(z: &mut ZSet, count: usize, min: bool) -> Vec<(Vec<u8>, f64)> {
    let picked: Vec<(Vec<u8>, f64)> = if min {
        z.iter().take(count).map(|(m, s)| (m.to_vec(), s)).collect()
    } else {
        z.iter()
            .rev()
            .take(count)
            .map(|(m, s)| (m.to_vec(), s))
            .collect()
    };
    for (m, _) in &picked {
        z.remove(m);
    }
    picked
}

pub fn zpop(ctx: &mut Ctx, a: &[Vec<u8>], min: bool) -> Reply {
    if a.len() > 3 {
        return Reply::err(errors::SYNTAX);
    }
    let count = if a.len() == 3 {
        tri!(positive(&a[2], None))
    } else {
        -1
    };
    let Some(z) = tri!(typed::existing::<ZSet>(ctx, &a[1])) else {
        return Reply::Array(vec![]);
    };
    if count == 0 {
        return Reply::Array(vec![]);
    }
    let picked = pop_n(z, count.max(1) as usize, min);
    ctx.dirty = true;
    typed::drop_if_empty::<ZSet>(ctx, &a[1]);
    Reply::Array(
        picked
            .into_iter()
            .flat_map(|(m, s)| [Reply::Bulk(m), score_reply(s)])
            .collect(),
    )
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]
pub fn zmpop(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let numkeys = tri!(ranged(&a[1], 1, "numkeys should be greater than 0")) as usize;
    let where_idx = 2usize.saturating_add(numkeys);
    if where_idx >= a.len() {
        return Reply::err(errors::SYNTAX);
    }
    let min = if is(&a[where_idx], "min") {
        true
    } else if is(&a[where_idx], "max") {
        false
    } else {
        return Reply::err(errors::SYNTAX);
    };
    let mut count = -1i64;
    let mut j = where_idx + 1;
    while j < a.len() {
        if count == -1 && is(&a[j], "count") && j + 1 < a.len() {
            j += 1;
            count = tri!(ranged(&a[j], 1, "count should be greater than 0"));
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    let count = count.max(1) as usize;
    for key in &a[2..where_idx] {
        let Some(z) = tri!(typed::existing::<ZSet>(ctx, key)) else {
            continue;
        };
        let picked = pop_n(z, count, min);
        ctx.dirty = true;
        typed::drop_if_empty::<ZSet>(ctx, key);
        return Reply::Array(vec![
            Reply::bulk(key.as_slice()),
            Reply::Array(
                picked
                    .into_iter()
                    .map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), score_reply(s)]))
                    .collect(),
            ),
        ]);
    }
    Reply::NilArray
}

pub fn zrandmember(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (count, withscores) = match a.len() {
        2 => (None, false),
        3 => (Some(tri!(super::args::random_count_arg(&a[2]))), false),
        4 if is(&a[3], "withscores") => (Some(tri!(super::args::random_count_arg(&a[2]))), true),
        _ => return Reply::err(errors::SYNTAX),
    };
    if let Some(c) = count {
        if (withscores && c < -(i64::MAX / 2))
            || c < -(crate::config::RANDOM_COUNT_REPEATS_MAX as i64)
        {
            return Reply::err("ERR value is out of range");
        }
    }
    let rng: &mut Rng = &mut *ctx.rng;
    let Some(z) = tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms)) else {
        return if count.is_some() {
            Reply::Array(vec![])
        } else {
            Reply::Nil
        };
    };
    let all: Vec<(&[u8], f64)> = z.iter().collect();
    let mut out = Vec::new();
    let mut push = |(m, s): (&[u8], f64)| {
        out.push(Reply::bulk(m));
        if withscores {
            out.push(score_reply(s));
        }
    };
    match count {
        None => return Reply::bulk(all[rng.below(all.len())].0),
        Some(c) if c < 0 => {
            for _ in 0..c.unsigned_abs() {
                push(all[rng.below(all.len())]);
            }
        }
        Some(c) => {
            let c = (c as usize).min(all.len());
            let mut idx: Vec<usize> = (0..all.len()).collect();
            for i in 0..c {
                let j = i + rng.below(idx.len() - i);
                idx.swap(i, j);
                push(all[idx[i]]);
            }
        }
    }
    Reply::Array(out)
}

pub fn zscan(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if super::args::parse_cursor(&a[2]).is_none() {
        return Reply::err(errors::INVALID_CURSOR);
    }
    let Some(z) = tri!(typed::read::<ZSet>(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Array(vec![Reply::bulk(&b"0"[..]), Reply::Array(vec![])]);
    };
    let o = tri!(scan_opts(a, 2, Scanning::Members));
    let mut out = Vec::new();
    let next = z.scores().scan(o.cursor, o.budget(z.len()), |m, s| {
        if o.matches(m) {
            out.push(Reply::bulk(m));
            out.push(score_reply(*s));
        }
    });
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(out)])
}

/// (member, score) pairs of one input.
type Members = Vec<(Vec<u8>, f64)>;

#[derive(Clone, Copy, PartialEq)]
pub enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// `ZUNION/ZINTER/ZDIFF[STORE]` and ZINTERCARD: Redis's `zunionInterDiffGenericCommand`.
/// `numkeys_at` is the index of numkeys; `dst` is set for the STORE forms.
pub fn zsetop(
    ctx: &mut Ctx,
    a: &[Vec<u8>],
    numkeys_at: usize,
    op: SetOp,
    storing: bool,
    card_only: bool,
) -> Reply {
    let name = String::from_utf8_lossy(&a[0]).to_ascii_lowercase();
    let setnum = tri!(int_arg(&a[numkeys_at]));
    if setnum < 1 {
        return Reply::Error(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    if setnum as usize > a.len() - (numkeys_at + 1) {
        return Reply::err(errors::SYNTAX);
    }
    let setnum = setnum as usize;
    let now = ctx.now_ms;
    let keys = &a[numkeys_at + 1..numkeys_at + 1 + setnum];
    // Inputs: a sorted set, a set (scores 1), or nothing.
    let mut inputs: Vec<Option<Members>> = Vec::with_capacity(setnum);
    for k in keys {
        match ctx.db.get(k, now).map(|e| &e.value) {
            None => inputs.push(None),
            Some(Value::ZSet(z)) => {
                inputs.push(Some(z.iter().map(|(m, s)| (m.to_vec(), s)).collect()))
            }
            Some(Value::Set(s)) => inputs.push(Some(s.keys().map(|m| (m.to_vec(), 1.0)).collect())),
            Some(_) => return Reply::err(errors::WRONGTYPE),
        }
    }
    let mut weights = vec![1.0f64; setnum];
    let mut aggregate = Aggregate::Sum;
    let mut withscores = false;
    let mut limit = 0i64;
    let mut j = numkeys_at + 1 + setnum;
    while j < a.len() {
        let remaining = a.len() - j;
        if op != SetOp::Diff && !card_only && remaining > setnum && is(&a[j], "weights") {
            j += 1;
            for w in weights.iter_mut() {
                match parse_double(&a[j]) {
                    Some(v) => *w = v,
                    None => return Reply::err("ERR weight value is not a float"),
                }
                j += 1;
            }
            continue;
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && is(&a[j], "aggregate") {
            aggregate = if is(&a[j + 1], "sum") {
                Aggregate::Sum
            } else if is(&a[j + 1], "min") {
                Aggregate::Min
            } else if is(&a[j + 1], "max") {
                Aggregate::Max
            } else {
                return Reply::err(errors::SYNTAX);
            };
            j += 2;
            continue;
        } else if !storing && !card_only && is(&a[j], "withscores") {
            withscores = true;
        } else if card_only && remaining >= 2 && is(&a[j], "limit") {
            limit = tri!(positive(&a[j + 1], Some("LIMIT can't be negative")));
            j += 2;
            continue;
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    let weighted = |s: f64, w: f64| {
        let v = s * w;
        if v.is_nan() {
            0.0
        } else {
            v
        }
    };
    let combine = |acc: f64, v: f64| match aggregate {
        Aggregate::Sum => {
            let r = acc + v;
            if r.is_nan() {
                0.0
            } else {
                r
            }
        }
        Aggregate::Min => acc.min(v),
        Aggregate::Max => acc.max(v),
    };
    let mut result = ZSet::computed();
    match op {
        SetOp::Union => {
            // Redis visits the sets smallest first (a stable sort by cardinality); with +inf
            // and -inf weighted in, the order decides where a sum turns NaN and so 0.
            let mut order: Vec<usize> = (0..setnum).collect();
            order.sort_by_key(|&i| inputs[i].as_ref().map_or(0, |v| v.len()));
            for &i in &order {
                let (input, w) = (&inputs[i], &weights[i]);
                for (m, s) in input.iter().flatten() {
                    let v = weighted(*s, *w);
                    let new = match result.score(m) {
                        Some(acc) => combine(acc, v),
                        None => v,
                    };
                    result.insert(m, new);
                }
            }
        }
        SetOp::Inter => {
            if inputs
                .iter()
                .all(|i| i.as_ref().is_some_and(|v| !v.is_empty()))
            {
                let maps: Vec<std::collections::HashMap<&[u8], f64>> = inputs
                    .iter()
                    .flatten()
                    .map(|v| v.iter().map(|(m, s)| (m.as_slice(), *s)).collect())
                    .collect();
                let mut order: Vec<usize> = (0..setnum).collect();
                order.sort_by_key(|&i| maps[i].len());
                let smallest = order[0];
                for (m, _) in inputs[smallest].iter().flatten() {
                    if !maps.iter().all(|mp| mp.contains_key(m.as_slice())) {
                        continue;
                    }
                    // Summed in Redis's order, smallest set first (a stable sort by cardinality):
                    // with +inf and -inf weighted in, the order decides where NaN turns to 0.
                    // As in Redis, only the first product has NaN made 0; a later NaN product
                    // (inf times 0) reaches the aggregate, where a sum turns it to 0.
                    let mut acc: Option<f64> = None;
                    for &i in &order {
                        let s = maps[i][m.as_slice()];
                        acc = Some(match acc {
                            None => weighted(s, weights[i]),
                            Some(x) => combine(x, s * weights[i]),
                        });
                    }
                    result.insert(m, acc.unwrap_or(0.0));
                }
            }
        }
        SetOp::Diff => {
            if let Some(first) = &inputs[0] {
                for (m, s) in first {
                    if !inputs[1..]
                        .iter()
                        .flatten()
                        .any(|other| other.iter().any(|(o, _)| o == m))
                    {
                        result.insert(m, *s);
                    }
                }
            }
        }
    }
    if card_only {
        let n = result.len();
        return Reply::Int(if limit > 0 { n.min(limit as usize) } else { n } as i64);
    }
    if storing {
        return store(ctx, &a[1], result);
    }
    let mut out = Vec::new();
    for (m, s) in result.iter() {
        out.push(Reply::bulk(m));
        if withscores {
            out.push(score_reply(s));
        }
    }
    Reply::Array(out)
}
