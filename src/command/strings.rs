//! String commands, with Redis 7 grammar, replies and error texts.

use super::args::{clamp_range, int_arg, is, tri};
use super::ctx::Ctx;
use super::longdouble;
use crate::config::STRING_BYTES_MAX;
use crate::num::parse_i64;
use crate::reply::{errors, Reply};
use crate::state::{Db, Value};

/// The string at `key`: None when absent, WRONGTYPE when another type.
pub fn read_str<'a>(db: &'a Db, key: &[u8], now_ms: u64) -> Result<Option<&'a [u8]>, Reply> {
    match db.get(key, now_ms) {
        None => Ok(None),
        Some(e) => match &e.value {
            Value::Str(s) => Ok(Some(s)),
            _ => Err(Reply::err(errors::WRONGTYPE)),
        },
    }
}

pub fn get(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let v = tri!(read_str(ctx.db, &a[1], ctx.now_ms));
    let r = Reply::opt_bulk(v);
    ctx.db.touch(&a[1], ctx.now_ms);
    r
}

/// How an expiry was given.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ttl {
    None,
    Keep,
    Persist,
    /// Absolute Unix milliseconds.
    At(i64),
}

/// SET's condition: NX, XX, or one of Redis 8.4's compare-and-set conditions.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Cond {
    Always,
    Nx,
    Xx,
    /// Only if the key holds this value (not created when absent).
    IfEq(Vec<u8>),
    /// Only if the key does not hold this value (created when absent).
    IfNe(Vec<u8>),
    /// Only if the value's digest is this one (not created when absent).
    IfDeq(u64),
    /// Only if the value's digest is not this one (created when absent).
    IfDne(u64),
}

/// A digest argument of IFDEQ or IFDNE: exactly 16 hexadecimal digits, in either case.
pub fn digest_arg(b: &[u8]) -> Result<u64, Reply> {
    let bad = || Reply::err("ERR The digest must be exactly 16 hexadecimal characters");
    if b.len() != 16 || !b.iter().all(u8::is_ascii_hexdigit) {
        return Err(bad());
    }
    let text = std::str::from_utf8(b).map_err(|_| bad())?;
    u64::from_str_radix(text, 16).map_err(|_| bad())
}

/// The digest DIGEST answers and IFDEQ/IFDNE compare: XXH3's 64-bit hash of the value.
pub fn digest_of(v: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(v)
}

/// Whether a condition holds for the string the key holds (None: absent). A condition other
/// than NX and XX needs a string: another type is WRONGTYPE.
fn cond_holds(cond: &Cond, current: Option<&Value>) -> Result<bool, Reply> {
    let s = match (cond, current) {
        (Cond::Always, _) => return Ok(true),
        (Cond::Nx, c) => return Ok(c.is_none()),
        (Cond::Xx, c) => return Ok(c.is_some()),
        (_, None) => None,
        (_, Some(Value::Str(s))) => Some(&**s),
        (_, Some(_)) => return Err(Reply::err(errors::WRONGTYPE)),
    };
    Ok(match cond {
        Cond::IfEq(v) => s == Some(v.as_slice()),
        Cond::IfNe(v) => s != Some(v.as_slice()),
        Cond::IfDeq(d) => s.is_some_and(|s| digest_of(s) == *d),
        Cond::IfDne(d) => s.is_none_or(|s| digest_of(s) != *d),
        Cond::Always | Cond::Nx | Cond::Xx => true,
    })
}

/// Parses SET's and GETEX's option lists (Redis's `parseExtendedStringArgumentsOrReply`).
/// Returns (condition, get, ttl). The conditions exclude each other.
fn parse_set_opts(
    a: &[Vec<u8>],
    from: usize,
    is_set: bool,
) -> Result<(Cond, bool, TtlSpec), Reply> {
    let (mut cond, mut get, mut keep, mut persist) = (Cond::Always, false, false, false);
    let mut expire: Option<(&[u8], i64, bool)> = None; // (value, unit ms, relative)
    let mut j = from;
    while j < a.len() {
        let opt = a[j].as_slice();
        let next = a.get(j + 1);
        let has_exp = expire.is_some();
        // NX again after NX (or XX after XX) is allowed, as in Redis; any other pair is not.
        let free = |c: &Cond| cond == Cond::Always || cond == *c;
        if is_set && is(opt, "nx") && free(&Cond::Nx) {
            cond = Cond::Nx;
        } else if is_set && is(opt, "xx") && free(&Cond::Xx) {
            cond = Cond::Xx;
        } else if is_set && is(opt, "get") {
            get = true;
        } else if is_set && is(opt, "keepttl") && !persist && !has_exp {
            keep = true;
        } else if !is_set && is(opt, "persist") && !keep && !has_exp {
            persist = true;
        } else if let (Some(n), true, true) = (
            next,
            is_set && cond == Cond::Always,
            ["ifeq", "ifne", "ifdeq", "ifdne"]
                .iter()
                .any(|w| is(opt, w)),
        ) {
            cond = if is(opt, "ifeq") {
                Cond::IfEq(n.clone())
            } else if is(opt, "ifne") {
                Cond::IfNe(n.clone())
            } else if is(opt, "ifdeq") {
                Cond::IfDeq(digest_arg(n)?)
            } else {
                Cond::IfDne(digest_arg(n)?)
            };
            j += 1;
        } else if let (Some(n), true) = (next, !keep && !persist) {
            let kind = if is(opt, "ex") {
                Some((1000, true))
            } else if is(opt, "px") {
                Some((1, true))
            } else if is(opt, "exat") {
                Some((1000, false))
            } else if is(opt, "pxat") {
                Some((1, false))
            } else {
                None
            };
            match kind {
                // A second expiry option of a different kind is a syntax error; the same kind
                // again replaces the first (as in Redis).
                Some((unit, rel)) if expire.is_none_or(|(_, u, r)| u == unit && r == rel) => {
                    expire = Some((n, unit, rel));
                    j += 1;
                }
                _ => return Err(Reply::err(errors::SYNTAX)),
            }
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
        j += 1;
    }
    let ttl = match expire {
        None if keep => TtlSpec::Keep,
        None if persist => TtlSpec::Persist,
        None => TtlSpec::None,
        Some((v, unit, rel)) => TtlSpec::Expire(v.to_vec(), unit, rel),
    };
    Ok((cond, get, ttl))
}

/// An expiry option as given, not yet validated (SET validates it before looking at the key,
/// GETEX after).
enum TtlSpec {
    None,
    Keep,
    Persist,
    Expire(Vec<u8>, i64, bool),
}

fn resolve_ttl(ctx: &Ctx, spec: TtlSpec, name: &[u8]) -> Result<Ttl, Reply> {
    Ok(match spec {
        TtlSpec::None => Ttl::None,
        TtlSpec::Keep => Ttl::Keep,
        TtlSpec::Persist => Ttl::Persist,
        TtlSpec::Expire(v, unit, rel) => {
            let t = int_arg(&v)?;
            let name = String::from_utf8_lossy(name);
            Ttl::At(
                expire_at(t, unit, rel, ctx.now_ms)
                    .ok_or_else(|| Reply::err(errors::invalid_expire(&name)))?,
            )
        }
    })
}

/// Redis's `getExpireMillisecondsOrReply`: positive, no overflow on the unit or base.
fn expire_at(t: i64, unit: i64, relative: bool, now_ms: u64) -> Option<i64> {
    if t <= 0 || (unit == 1000 && t > i64::MAX / 1000) {
        return None;
    }
    let ms = t * unit;
    if relative {
        ms.checked_add(now_ms as i64)
    } else {
        Some(ms)
    }
}

fn abs_ms_arg(ms: i64) -> Vec<u8> {
    ms.to_string().into_bytes()
}

fn to_expire(t: i64) -> Option<u64> {
    Some(t.max(0) as u64)
}

pub fn set(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (cond, get, spec) = tri!(parse_set_opts(a, 3, true));
    let ttl = tri!(resolve_ttl(ctx, spec, &a[0]));
    let key = &a[1];
    let old = if get {
        tri!(read_str(ctx.db, key, ctx.now_ms)).map(|v| v.to_vec())
    } else {
        None
    };
    // Only a condition and KEEPTTL look at the key first; a plain SET replaces whatever is
    // there (saves two lookups of the key, the most common write's).
    let existing = if cond != Cond::Always || ttl == Ttl::Keep {
        ctx.db.get_mut(key, ctx.now_ms)
    } else {
        None
    };
    if !tri!(cond_holds(&cond, existing.as_ref().map(|e| &e.value))) {
        return if get {
            Reply::opt_bulk(old.as_deref())
        } else {
            Reply::Nil
        };
    }
    let keep_expire = if ttl == Ttl::Keep {
        existing.and_then(|e| e.expire_at_ms())
    } else {
        None
    };
    let expire = match ttl {
        Ttl::At(t) => to_expire(t),
        _ => keep_expire,
    };
    ctx.db
        .insert(key, Value::Str(a[2].as_slice().into()), expire, ctx.now_ms);
    ctx.dirty = true;
    // A plain `SET key value` is its own deterministic form; with options it is logged
    // without them, its expiry made absolute.
    if !ctx.replaying && a.len() > 3 {
        let mut logged = vec![b"SET".to_vec(), key.clone(), a[2].clone()];
        if let Ttl::At(t) = ttl {
            logged.push(b"PXAT".to_vec());
            logged.push(abs_ms_arg(t));
        } else if ttl == Ttl::Keep {
            logged.push(b"KEEPTTL".to_vec());
        }
        ctx.log_as(logged);
    }
    if get {
        Reply::opt_bulk(old.as_deref())
    } else {
        Reply::ok()
    }
}

pub fn setnx(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if ctx.db.get_mut(&a[1], ctx.now_ms).is_some() {
        return Reply::Int(0);
    }
    ctx.db.insert(
        &a[1],
        Value::Str(crate::state::Str::from(a[2].clone())),
        None,
        ctx.now_ms,
    );
    ctx.dirty = true;
    Reply::Int(1)
}

/// SETEX (unit 1000) and PSETEX (unit 1): `key time value`.
pub fn setex(ctx: &mut Ctx, a: &[Vec<u8>], unit: i64) -> Reply {
    let t = tri!(int_arg(&a[2]));
    let name = String::from_utf8_lossy(&a[0]).to_string();
    let Some(at) = expire_at(t, unit, true, ctx.now_ms) else {
        return Reply::err(errors::invalid_expire(&name));
    };
    ctx.db.insert(
        &a[1],
        Value::Str(crate::state::Str::from(a[3].clone())),
        to_expire(at),
        ctx.now_ms,
    );
    ctx.dirty = true;
    ctx.log_as(vec![
        b"SET".to_vec(),
        a[1].clone(),
        a[3].clone(),
        b"PXAT".to_vec(),
        abs_ms_arg(at),
    ]);
    Reply::ok()
}

pub fn getset(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let old = tri!(read_str(ctx.db, &a[1], ctx.now_ms)).map(|v| v.to_vec());
    ctx.db.insert(
        &a[1],
        Value::Str(crate::state::Str::from(a[2].clone())),
        None,
        ctx.now_ms,
    );
    ctx.dirty = true;
    ctx.log_as(vec![b"SET".to_vec(), a[1].clone(), a[2].clone()]);
    Reply::opt_bulk(old.as_deref())
}

pub fn getdel(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let old = tri!(read_str(ctx.db, &a[1], ctx.now_ms)).map(|v| v.to_vec());
    if old.is_some() {
        ctx.db.remove(&a[1]);
        ctx.dirty = true;
        ctx.log_as(vec![b"DEL".to_vec(), a[1].clone()]);
    }
    Reply::opt_bulk(old.as_deref())
}

/// DELEX key [IFEQ v | IFNE v | IFDEQ d | IFDNE d] (Redis 8.4): DEL of one key, or, with a
/// condition, of a string key whose value (or its digest) passes it. 1 when deleted.
pub fn delex(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let cond = match a.len() {
        2 => Cond::Always,
        4 if is(&a[2], "ifeq") => Cond::IfEq(a[3].clone()),
        4 if is(&a[2], "ifne") => Cond::IfNe(a[3].clone()),
        4 if is(&a[2], "ifdeq") => Cond::IfDeq(tri!(digest_arg(&a[3]))),
        4 if is(&a[2], "ifdne") => Cond::IfDne(tri!(digest_arg(&a[3]))),
        _ => return Reply::err(errors::SYNTAX),
    };
    let current = ctx.db.get(&a[1], ctx.now_ms).map(|e| &e.value);
    // An absent key is never deleted, whatever the condition says of it.
    if current.is_none() || !tri!(cond_holds(&cond, current)) {
        return Reply::Int(0);
    }
    ctx.db.remove(&a[1]);
    ctx.dirty = true;
    ctx.log_as(vec![b"DEL".to_vec(), a[1].clone()]);
    Reply::Int(1)
}

/// DIGEST key (Redis 8.4): the XXH3 digest of a string value as 16 lowercase hex digits.
pub fn digest(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    match tri!(read_str(ctx.db, &a[1], ctx.now_ms)) {
        None => Reply::Nil,
        Some(v) => Reply::bulk(format!("{:016x}", digest_of(v))),
    }
}

pub fn getex(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (_, _, spec) = tri!(parse_set_opts(a, 2, false));
    let key = &a[1];
    let Some(v) = tri!(read_str(ctx.db, key, ctx.now_ms)).map(|v| v.to_vec()) else {
        return Reply::Nil;
    };
    let ttl = tri!(resolve_ttl(ctx, spec, &a[0]));
    match ttl {
        Ttl::At(t) if t <= ctx.now_ms as i64 => {
            ctx.db.remove(key);
            ctx.dirty = true;
            ctx.log_as(vec![b"DEL".to_vec(), key.clone()]);
        }
        Ttl::At(t) => {
            ctx.db.set_expire(key, to_expire(t));
            ctx.dirty = true;
            ctx.log_as(vec![b"PEXPIREAT".to_vec(), key.clone(), abs_ms_arg(t)]);
        }
        Ttl::Persist => {
            if ctx
                .db
                .get(key, ctx.now_ms)
                .and_then(|e| e.expire_at_ms())
                .is_some()
            {
                ctx.db.set_expire(key, None);
                ctx.dirty = true;
                ctx.log_as(vec![b"PERSIST".to_vec(), key.clone()]);
            }
        }
        Ttl::None | Ttl::Keep => {}
    }
    ctx.db.touch(key, ctx.now_ms);
    Reply::Bulk(v)
}

pub fn mget(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    Reply::Array(
        a[1..]
            .iter()
            .map(|k| match ctx.db.get(k, now).map(|e| &e.value) {
                Some(Value::Str(s)) => Reply::Bulk(crate::state::Str::into_vec(s.clone())),
                _ => Reply::Nil,
            })
            .collect(),
    )
}

pub fn mset(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len().is_multiple_of(2) {
        return Reply::err(errors::wrong_arity("mset"));
    }
    for kv in a[1..].chunks(2) {
        ctx.db.insert(
            &kv[0],
            Value::Str(crate::state::Str::from(kv[1].clone())),
            None,
            ctx.now_ms,
        );
    }
    ctx.dirty = true;
    Reply::ok()
}

pub fn msetnx(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len().is_multiple_of(2) {
        return Reply::err(errors::wrong_arity("msetnx"));
    }
    let now = ctx.now_ms;
    if a[1..].chunks(2).any(|kv| ctx.db.get(&kv[0], now).is_some()) {
        return Reply::Int(0);
    }
    mset(ctx, a);
    Reply::Int(1)
}

fn check_len(total: usize) -> Result<(), Reply> {
    if total > STRING_BYTES_MAX {
        Err(Reply::err(errors::STRING_TOO_LONG))
    } else {
        Ok(())
    }
}

pub fn append(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    match ctx.db.get_mut(&a[1], now) {
        None => {
            ctx.db
                .insert(&a[1], Value::Str(a[2].as_slice().into()), None, now);
            ctx.dirty = true;
            Reply::Int(a[2].len() as i64)
        }
        Some(e) => match &mut e.value {
            Value::Str(s) => {
                tri!(check_len(s.len() + a[2].len()));
                let s = s.make_mut();
                make_room(s, a[2].len());
                s.extend_from_slice(&a[2]);
                let n = s.len();
                e.set_access_ms(now);
                ctx.dirty = true;
                Reply::Int(n as i64)
            }
            _ => Reply::err(errors::WRONGTYPE),
        },
    }
}

pub fn strlen(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(
        tri!(read_str(ctx.db, &a[1], ctx.now_ms))
            .map(|s| s.len())
            .unwrap_or(0) as i64,
    )
}

pub fn incrby_const(ctx: &mut Ctx, a: &[Vec<u8>], by: i64) -> Reply {
    incr_generic(ctx, &a[1], by)
}

pub fn incrby(ctx: &mut Ctx, a: &[Vec<u8>], negate: bool) -> Reply {
    let by = tri!(int_arg(&a[2]));
    if negate {
        return match by.checked_neg() {
            Some(n) => incr_generic(ctx, &a[1], n),
            None => Reply::err("ERR decrement would overflow"),
        };
    }
    incr_generic(ctx, &a[1], by)
}

fn incr_generic(ctx: &mut Ctx, key: &[u8], by: i64) -> Reply {
    let now = ctx.now_ms;
    let (cur, expire) = match ctx.db.get_mut(key, now) {
        None => (0, None),
        Some(e) => match &e.value {
            Value::Str(s) => match parse_i64(s) {
                Some(v) => (v, e.expire_at_ms()),
                None => return Reply::err(errors::NOT_INTEGER),
            },
            _ => return Reply::err(errors::WRONGTYPE),
        },
    };
    let Some(n) = cur.checked_add(by) else {
        return Reply::err(errors::OVERFLOW);
    };
    ctx.db.insert(
        key,
        Value::Str(crate::state::Str::from(n.to_string().into_bytes())),
        expire,
        now,
    );
    ctx.dirty = true;
    Reply::Int(n)
}

pub fn incrbyfloat(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    let key = &a[1];
    let (cur, expire) = match ctx.db.get_mut(key, now) {
        None => (longdouble::parse(b"0"), None),
        Some(e) => match &e.value {
            Value::Str(s) => (longdouble::parse(s), e.expire_at_ms()),
            _ => return Reply::err(errors::WRONGTYPE),
        },
    };
    let (Some(cur), Some(by)) = (cur, longdouble::parse(&a[2])) else {
        return Reply::err(errors::NOT_FLOAT);
    };
    let n = match longdouble::add(cur, by) {
        Some(n) if !n.is_inf() => n,
        _ => return Reply::err(errors::NAN_OR_INF),
    };
    let s = longdouble::format_human(n).into_bytes();
    ctx.db.insert(
        key,
        Value::Str(crate::state::Str::from(s.clone())),
        expire,
        now,
    );
    ctx.dirty = true;
    ctx.log_as(vec![
        b"SET".to_vec(),
        key.clone(),
        s.clone(),
        b"KEEPTTL".to_vec(),
    ]);
    Reply::Bulk(s)
}

pub fn getrange(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let start = tri!(int_arg(&a[2]));
    let end = tri!(int_arg(&a[3]));
    let s = tri!(read_str(ctx.db, &a[1], ctx.now_ms)).unwrap_or(b"");
    // Both from the end and crossed: empty, before clamping could make them meet.
    if start < 0 && end < 0 && start > end {
        return Reply::bulk(Vec::new());
    }
    match clamp_range(s.len() as i64, start, end) {
        Some((from, to)) => Reply::bulk(&s[from as usize..=to as usize]),
        None => Reply::bulk(Vec::new()),
    }
}

pub fn setrange(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let offset = tri!(int_arg(&a[2]));
    if offset < 0 {
        return Reply::err(errors::OFFSET_OUT_OF_RANGE);
    }
    let offset = offset as usize;
    let val = &a[3];
    let now = ctx.now_ms;
    match ctx.db.get_mut(&a[1], now) {
        None => {
            if val.is_empty() {
                return Reply::Int(0);
            }
            tri!(check_len(offset.saturating_add(val.len())));
            // Allocated once at its final length: `vec![0; offset]` then an append would
            // double the allocation, holding twice the string's bytes.
            let mut s = Vec::with_capacity(offset + val.len());
            s.resize(offset, 0);
            s.extend_from_slice(val);
            let n = s.len();
            ctx.db
                .insert(&a[1], Value::Str(crate::state::Str::from(s)), None, now);
            ctx.dirty = true;
            Reply::Int(n as i64)
        }
        Some(e) => match &mut e.value {
            Value::Str(s) => {
                if val.is_empty() {
                    return Reply::Int(s.len() as i64);
                }
                tri!(check_len(offset.saturating_add(val.len())));
                let s = s.make_mut();
                if s.len() < offset + val.len() {
                    make_room(s, offset + val.len() - s.len());
                    s.resize(offset + val.len(), 0);
                }
                s[offset..offset + val.len()].copy_from_slice(val);
                ctx.dirty = true;
                Reply::Int(s.len() as i64)
            }
            _ => Reply::err(errors::WRONGTYPE),
        },
    }
}

/// Cells of the LCS table beyond which the command refuses instead of allocating: Redis's rule,
/// 4 bytes a cell at most proto-max-bulk-len (512 MB).
const LCS_CELLS_MAX: u64 = STRING_BYTES_MAX as u64 / 4;

pub fn lcs(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    let strval = |k: &[u8]| match ctx.db.get(k, now).map(|e| &e.value) {
        None => Ok(&[][..]),
        Some(Value::Str(s)) => Ok(&**s),
        Some(_) => Err(Reply::err(
            "ERR The specified keys must contain string values",
        )),
    };
    let x = tri!(strval(&a[1]));
    let y = tri!(strval(&a[2]));
    let (mut getlen, mut getidx, mut withmatchlen, mut minmatchlen) = (false, false, false, 0i64);
    let mut j = 3;
    while j < a.len() {
        let more = a.len() - 1 - j;
        if is(&a[j], "idx") {
            getidx = true;
        } else if is(&a[j], "len") {
            getlen = true;
        } else if is(&a[j], "withmatchlen") {
            withmatchlen = true;
        } else if is(&a[j], "minmatchlen") && more > 0 {
            minmatchlen = tri!(int_arg(&a[j + 1])).max(0);
            j += 1;
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    if getidx && getlen {
        return Reply::err("ERR If you want both the length and indexes, please just use IDX.");
    }
    let (alen, blen) = (x.len(), y.len());
    if (alen as u64 + 1) * (blen as u64 + 1) > LCS_CELLS_MAX {
        return Reply::err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let w = blen + 1;
    let mut t = vec![0u32; (alen + 1) * w];
    for i in 1..=alen {
        for jj in 1..=blen {
            t[i * w + jj] = if x[i - 1] == y[jj - 1] {
                t[(i - 1) * w + jj - 1] + 1
            } else {
                t[(i - 1) * w + jj].max(t[i * w + jj - 1])
            };
        }
    }
    let total = t[alen * w + blen];
    let mut idx = total as usize;
    let mut result = vec![0u8; idx];
    let mut matches = Vec::new();
    let (mut i, mut jj) = (alen, blen);
    let (mut ars, mut are, mut brs, mut bre) = (alen, 0usize, 0usize, 0usize);
    while i > 0 && jj > 0 {
        let mut emit = false;
        if x[i - 1] == y[jj - 1] {
            result[idx - 1] = x[i - 1];
            if ars == alen {
                ars = i - 1;
                are = i - 1;
                brs = jj - 1;
                bre = jj - 1;
            } else if ars == i && brs == jj {
                ars -= 1;
                brs -= 1;
            } else {
                emit = true;
            }
            if ars == 0 || brs == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            jj -= 1;
        } else {
            let l1 = t[(i - 1) * w + jj];
            let l2 = t[i * w + jj - 1];
            if l1 > l2 {
                i -= 1;
            } else {
                jj -= 1;
            }
            if ars != alen {
                emit = true;
            }
        }
        let match_len = are as i64 - ars as i64 + 1;
        if emit {
            if minmatchlen == 0 || match_len >= minmatchlen {
                let mut m = vec![
                    Reply::Array(vec![Reply::Int(ars as i64), Reply::Int(are as i64)]),
                    Reply::Array(vec![Reply::Int(brs as i64), Reply::Int(bre as i64)]),
                ];
                if withmatchlen {
                    m.push(Reply::Int(match_len));
                }
                matches.push(Reply::Array(m));
            }
            ars = alen;
        }
    }
    if getidx {
        Reply::Array(vec![
            Reply::bulk(&b"matches"[..]),
            Reply::Array(matches),
            Reply::bulk(&b"len"[..]),
            Reply::Int(total as i64),
        ])
    } else if getlen {
        Reply::Int(total as i64)
    } else {
        Reply::Bulk(result)
    }
}

/// SET's own key finding (Redis's `setGetKeys`): the key is read too when the reply depends on
/// its value (GET, and Redis 8.4's IFEQ, IFNE, IFDEQ and IFDNE); otherwise SET overwrites it.
pub fn set_keys(args: &[Vec<u8>]) -> Vec<(usize, &'static [&'static str])> {
    if args.len() < 2 {
        return Vec::new();
    }
    let reads = args.iter().skip(3).any(|a| {
        ["get", "ifeq", "ifne", "ifdeq", "ifdne"]
            .iter()
            .any(|w| a.eq_ignore_ascii_case(w.as_bytes()))
    });
    let flags: &'static [&'static str] = if reads {
        &["RW", "access", "update"]
    } else {
        &["OW", "update"]
    };
    vec![(1, flags)]
}

/// Makes room in a string for `more` bytes as Redis's `sdsMakeRoomFor` does: twice the new
/// length while it is under 1 MiB, 1 MiB more than it past that. A Vec's own growth doubles
/// whatever the size, so a 300 MB string grown by a byte would hold 600 MB.
pub fn make_room(s: &mut Vec<u8>, more: usize) {
    const GREEDY_MAX: usize = 1 << 20;
    let need = s.len().saturating_add(more);
    if need <= s.capacity() {
        return;
    }
    let target = if need < GREEDY_MAX {
        need.saturating_mul(2)
    } else {
        need.saturating_add(GREEDY_MAX)
    };
    s.reserve_exact(target - s.len());
}
