//! Hash-field expiration (Redis 7.4 and 8.0): HEXPIRE, HPEXPIRE, HEXPIREAT, HPEXPIREAT, HTTL,
//! HPTTL, HEXPIRETIME, HPEXPIRETIME, HPERSIST, HGETEX and HSETEX.
//!
//! Replies, argument checks and error texts follow Redis's `t_hash.c`. Relative times are
//! logged as absolute ones (HPEXPIREAT, `PXAT`), so a command replays to the same state at its
//! record's timestamp. A field whose time has passed is removed before any command touches its
//! hash, by a logged HDEL (see the executor), and by the expiry cycle.

use super::args::tri;
use super::args::{int_arg, is};
use super::ctx::Ctx;
use super::typed;
use crate::reply::{errors, Reply};
use crate::state::hash::Hash;

/// The latest field expiry accepted: any time in milliseconds that fits. Redis 8 refuses
/// times past 2^46 ms (`HFE_MAX_ABS_TIME_MSEC`, the year 4199); the hosted service accepts
/// them, and `@upstash/redis`'s own pipeline test sends `HEXPIREAT key Date.now() + 1000`,
/// milliseconds where seconds are meant, which only a time that far out can hold.
const MAX_ABS_TIME_MS: i64 = i64::MAX;

/// The expiry options of HGETEX and HSETEX: word, milliseconds per unit, absolute.
const TIME_OPTIONS: [(&str, i64, bool); 4] = [
    ("ex", 1000, false),
    ("px", 1, false),
    ("exat", 1000, true),
    ("pxat", 1, true),
];

/// Per-field answers of the expire commands.
const NO_FIELD: i64 = -2;
const NO_TTL: i64 = -1;
const CONDITION_NOT_MET: i64 = 0;
const SET: i64 = 1;
const DELETED: i64 = 2;

/// Redis's `parseExpireTime`: an integer, not negative, in range once made absolute.
fn expire_time(arg: &[u8], unit_ms: i64, base_ms: i64, cmd: &str) -> Result<u64, Reply> {
    let v = int_arg(arg)?;
    if v < 0 {
        return Err(Reply::err("ERR invalid expire time, must be >= 0"));
    }
    let out_of_range = || Reply::Error(format!("ERR invalid expire time in '{cmd}' command"));
    if unit_ms == 1000 && v > MAX_ABS_TIME_MS / 1000 {
        return Err(out_of_range());
    }
    let ms = v * unit_ms;
    if ms > MAX_ABS_TIME_MS - base_ms {
        return Err(out_of_range());
    }
    Ok((ms + base_ms) as u64)
}

/// `FIELDS numfields field ...` starting at `a[at]`: the fields.
fn fields_at<'a>(a: &'a [Vec<u8>], at: usize, count_error: &str) -> Result<&'a [Vec<u8>], Reply> {
    if !a.get(at).is_some_and(|f| is(f, "fields")) {
        return Err(Reply::err(
            "ERR Mandatory argument FIELDS is missing or not at the right position",
        ));
    }
    let n = match a.get(at + 1).map(|n| int_arg(n)) {
        Some(Ok(n)) if n >= 1 => n as usize,
        _ => return Err(Reply::Error(format!("ERR {count_error}"))),
    };
    let fields = &a[at + 2..];
    if n != fields.len() {
        return Err(Reply::err(
            "ERR The `numfields` parameter must match the number of arguments",
        ));
    }
    Ok(fields)
}

/// `HEXPIRE key seconds [NX|XX|GT|LT] FIELDS numfields field ...` and its millisecond and
/// absolute forms. `unit_ms` is 1000 or 1; `absolute` for the *AT forms.
pub fn hexpire(ctx: &mut Ctx, a: &[Vec<u8>], unit_ms: i64, absolute: bool, cmd: &str) -> Reply {
    let exists = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).is_some();
    let base = if absolute { 0 } else { ctx.now_ms as i64 };
    let at = tri!(expire_time(&a[2], unit_ms, base, cmd));
    let cond = ["nx", "xx", "gt", "lt"].into_iter().find(|c| is(&a[3], c));
    let fields_pos = if cond.is_some() { 4 } else { 3 };
    let fields = tri!(fields_at(
        a,
        fields_pos,
        "Parameter `numFields` should be greater than 0"
    ));
    if !exists {
        return Reply::Array(vec![Reply::Int(NO_FIELD); fields.len()]);
    }
    let now = ctx.now_ms;
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    let mut out = Vec::with_capacity(fields.len());
    let mut changed = false;
    for f in fields {
        let r = if !h.contains_key(f) {
            NO_FIELD
        } else {
            let met = match (h.ttl(f), cond) {
                (_, None) => true,
                (None, Some(c)) => c == "nx" || c == "lt",
                (Some(_), Some("nx")) => false,
                (Some(_), Some("xx")) => true,
                (Some(prev), Some("gt")) => prev < at,
                (Some(prev), Some(_)) => prev > at,
            };
            if !met {
                CONDITION_NOT_MET
            } else if at <= now {
                h.remove(f);
                DELETED
            } else {
                h.set_ttl(f, at);
                SET
            }
        };
        changed |= r == SET || r == DELETED;
        out.push(Reply::Int(r));
    }
    if changed {
        ctx.dirty = true;
        let mut logged = vec![
            b"HPEXPIREAT".to_vec(),
            a[1].clone(),
            at.to_string().into_bytes(),
        ];
        logged.extend_from_slice(&a[3..]);
        ctx.log_as(logged);
        ctx.db.index_field_ttls(&a[1]);
        typed::drop_if_empty::<Hash>(ctx, &a[1]);
    }
    Reply::Array(out)
}

/// What HTTL and its siblings answer.
#[derive(Clone, Copy)]
pub enum TtlKind {
    /// Seconds left, rounded up (HTTL).
    Seconds,
    /// Milliseconds left (HPTTL).
    Millis,
    /// Unix seconds (HEXPIRETIME).
    UnixSeconds,
    /// Unix milliseconds (HPEXPIRETIME).
    UnixMillis,
}

/// `HTTL key FIELDS numfields field ...` and HPTTL, HEXPIRETIME, HPEXPIRETIME.
pub fn httl(ctx: &mut Ctx, a: &[Vec<u8>], kind: TtlKind) -> Reply {
    let h = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    let fields = tri!(fields_at(
        a,
        2,
        "Number of fields must be a positive integer"
    ));
    let now = ctx.now_ms as i64;
    Reply::Array(
        fields
            .iter()
            .map(|f| {
                let r = match h {
                    Some(h) if h.contains_key(f) => match h.ttl(f).map(|t| t as i64) {
                        None => NO_TTL,
                        Some(t) if t <= now => NO_FIELD,
                        Some(t) => match kind {
                            TtlKind::Seconds => (t - now + 999) / 1000,
                            TtlKind::Millis => t - now,
                            TtlKind::UnixSeconds => t / 1000,
                            TtlKind::UnixMillis => t,
                        },
                    },
                    _ => NO_FIELD,
                };
                Reply::Int(r)
            })
            .collect(),
    )
}

/// `HPERSIST key FIELDS numfields field ...`: -2 no field, -1 no TTL, 1 TTL removed.
pub fn hpersist(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let exists = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).is_some();
    let fields = tri!(fields_at(
        a,
        2,
        "Number of fields must be a positive integer"
    ));
    if !exists {
        return Reply::Array(vec![Reply::Int(NO_FIELD); fields.len()]);
    }
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    let mut changed = false;
    let out = fields
        .iter()
        .map(|f| {
            Reply::Int(if !h.contains_key(f) {
                NO_FIELD
            } else if h.clear_ttl(f) {
                changed = true;
                SET
            } else {
                NO_TTL
            })
        })
        .collect();
    ctx.dirty |= changed;
    Reply::Array(out)
}

/// `HGETEX key [EX s | PX ms | EXAT unix-s | PXAT unix-ms | PERSIST] FIELDS numfields field ...`
/// (Redis 8.0): the values, and the fields' TTLs set or removed.
pub fn hgetex(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    enum Then {
        Nothing,
        Persist,
        Expire(u64),
    }
    let exists = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms)).is_some();
    let now = ctx.now_ms;
    let timed = TIME_OPTIONS.into_iter().find(|(w, _, _)| is(&a[2], w));
    let (then, fields_pos) = match timed {
        Some((_, unit, absolute)) => {
            let Some(t) = a.get(3) else {
                return Reply::err(
                    "ERR Mandatory argument FIELDS is missing or not at the right position",
                );
            };
            let base = if absolute { 0 } else { now as i64 };
            (Then::Expire(tri!(expire_time(t, unit, base, "hgetex"))), 4)
        }
        None if is(&a[2], "persist") => (Then::Persist, 3),
        None => (Then::Nothing, 2),
    };
    let fields = tri!(fields_at(
        a,
        fields_pos,
        "Number of fields must be a positive integer"
    ));
    if !exists {
        return Reply::Array(vec![Reply::Nil; fields.len()]);
    }
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    let mut out = Vec::with_capacity(fields.len());
    let mut changed = false;
    for f in fields {
        let Some(v) = h.get(f) else {
            out.push(Reply::Nil);
            continue;
        };
        out.push(Reply::Bulk(v.to_vec()));
        match then {
            Then::Nothing => {}
            Then::Persist => changed |= h.clear_ttl(f),
            Then::Expire(at) if at <= now => {
                h.remove(f);
                changed = true;
            }
            Then::Expire(at) => {
                h.set_ttl(f, at);
                changed = true;
            }
        }
    }
    if changed {
        ctx.dirty = true;
        if let Then::Expire(at) = then {
            let mut logged = vec![
                b"HGETEX".to_vec(),
                a[1].clone(),
                b"PXAT".to_vec(),
                at.to_string().into_bytes(),
            ];
            logged.extend_from_slice(&a[fields_pos..]);
            ctx.log_as(logged);
        }
        ctx.db.index_field_ttls(&a[1]);
        typed::drop_if_empty::<Hash>(ctx, &a[1]);
    }
    Reply::Array(out)
}

/// `HSETEX key [FNX|FXX] [EX s | PX ms | EXAT unix-s | PXAT unix-ms | KEEPTTL]
/// FIELDS numfields field value ...` (Redis 8.0): 1 when the fields were set, 0 when FNX or
/// FXX refused.
pub fn hsetex(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    #[derive(PartialEq)]
    enum Ttl {
        Clear,
        Keep,
        At(u64),
    }
    let now = ctx.now_ms;
    let mut ttl = Ttl::Clear;
    let mut field_cond: Option<bool> = None; // Some(true): FXX; Some(false): FNX
    let mut expiry_given = false;
    let mut pairs: Option<&[Vec<u8>]> = None;
    let mut i = 2;
    while i < a.len() {
        let w = &a[i];
        if is(w, "fields") {
            if i + 3 >= a.len() {
                return Reply::err(errors::wrong_arity("hsetex"));
            }
            let n = match int_arg(&a[i + 1]) {
                Ok(n) if (1..=i32::MAX as i64).contains(&n) => n as usize,
                _ => return Reply::err("ERR invalid number of fields"),
            };
            let rest = &a[i + 2..];
            if !rest.len().is_multiple_of(2) || n != rest.len() / 2 {
                return Reply::err(errors::wrong_arity("hsetex"));
            }
            pairs = Some(rest);
            break;
        }
        let timed = TIME_OPTIONS.into_iter().find(|(word, _, _)| is(w, word));
        if timed.is_some() || is(w, "keepttl") {
            if expiry_given {
                return Reply::err(
                    "ERR Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified",
                );
            }
            expiry_given = true;
            match timed {
                Some((_, unit, absolute)) => {
                    let Some(t) = a.get(i + 1) else {
                        return Reply::err("ERR missing expire time");
                    };
                    let base = if absolute { 0 } else { now as i64 };
                    ttl = Ttl::At(tri!(expire_time(t, unit, base, "hsetex")));
                    i += 1;
                }
                None => ttl = Ttl::Keep,
            }
        } else if is(w, "fxx") || is(w, "fnx") {
            if field_cond.is_some() {
                return Reply::err("ERR Only one of FXX or FNX arguments can be specified");
            }
            field_cond = Some(is(w, "fxx"));
        } else {
            return Reply::Error(format!(
                "ERR unknown argument: {}",
                String::from_utf8_lossy(w)
            ));
        }
        i += 1;
    }
    let Some(pairs) = pairs else {
        return Reply::err(errors::wrong_arity("hsetex"));
    };
    let existing = tri!(typed::read::<Hash>(ctx.db, &a[1], ctx.now_ms));
    if let Some(must_exist) = field_cond {
        let ok = pairs.chunks(2).all(|p| {
            let present = existing.is_some_and(|h| h.contains_key(&p[0]));
            present == must_exist
        });
        if !ok {
            return Reply::Int(0);
        }
    }
    let h = tri!(typed::create::<Hash>(ctx, &a[1]));
    for p in pairs.chunks(2) {
        match ttl {
            Ttl::Clear => {
                h.insert(&p[0], p[1].clone());
            }
            Ttl::Keep => {
                h.insert_keep_ttl(&p[0], p[1].clone());
            }
            Ttl::At(at) if at <= now => {
                h.remove(&p[0]);
            }
            Ttl::At(at) => {
                h.insert_keep_ttl(&p[0], p[1].clone());
                h.set_ttl(&p[0], at);
            }
        }
    }
    ctx.dirty = true;
    if let Ttl::At(at) = ttl {
        // Logged with the absolute time: `HSETEX key [FNX|FXX] PXAT ms FIELDS ...`.
        let mut logged = vec![b"HSETEX".to_vec(), a[1].clone()];
        match field_cond {
            Some(true) => logged.push(b"FXX".to_vec()),
            Some(false) => logged.push(b"FNX".to_vec()),
            None => {}
        }
        logged.push(b"PXAT".to_vec());
        logged.push(at.to_string().into_bytes());
        logged.push(b"FIELDS".to_vec());
        logged.push((pairs.len() / 2).to_string().into_bytes());
        logged.extend_from_slice(pairs);
        ctx.log_as(logged);
    }
    ctx.db.index_field_ttls(&a[1]);
    typed::drop_if_empty::<Hash>(ctx, &a[1]);
    Reply::Int(1)
}
