//! Streams without consumer groups: XADD (NOMKSTREAM, MAXLEN/MINID with `=`/`~` and LIMIT,
//! auto, partial and explicit IDs), XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XREAD (not
//! blocking), XSETID, XINFO STREAM.
//!
//! An auto-generated ID comes from the command's timestamp, which is the record's, and the
//! command is logged with the ID it produced, so replay yields the same IDs.

use super::args::tri;
use super::args::{int_arg, is};
use super::ctx::Ctx;
use super::typed;
use crate::reply::{errors, Reply};
use crate::state::stream::{Stream, StreamId, Trim};

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// `ms` or `ms-seq`; a missing sequence is `missing_seq`.
pub fn parse_id(b: &[u8], missing_seq: u64) -> Result<StreamId, Reply> {
    let text = std::str::from_utf8(b).map_err(|_| Reply::err(INVALID_ID))?;
    let num = |s: &str| -> Result<u64, Reply> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(Reply::err(INVALID_ID));
        }
        s.parse().map_err(|_| Reply::err(INVALID_ID))
    };
    match text.split_once('-') {
        Some((ms, seq)) => Ok(StreamId {
            ms: num(ms)?,
            seq: num(seq)?,
        }),
        None => Ok(StreamId {
            ms: num(text)?,
            seq: missing_seq,
        }),
    }
}

/// A range bound: `-`, `+`, an ID (a missing sequence is 0 for a start, the maximum for an
/// end), or `(ID` for an exclusive bound.
pub fn parse_bound(b: &[u8], start: bool) -> Result<StreamId, Reply> {
    match b {
        b"-" => return Ok(StreamId::MIN),
        b"+" => return Ok(StreamId::MAX),
        _ => {}
    }
    let missing = if start { 0 } else { u64::MAX };
    if let Some(rest) = b.strip_prefix(b"(") {
        let id = parse_id(rest, missing)?;
        return if start {
            id.next()
                .ok_or_else(|| Reply::err("ERR invalid start ID for the interval"))
        } else {
            id.prev()
                .ok_or_else(|| Reply::err("ERR invalid end ID for the interval"))
        };
    }
    parse_id(b, missing)
}

pub fn entry_reply(id: &StreamId, fields: crate::state::stream::FieldsRef<'_>) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(id.text()),
        Reply::bulks(fields.iter().map(<[u8]>::to_vec)),
    ])
}

/// The trimming options shared by XADD and XTRIM.
struct TrimArgs {
    how: Option<Trim>,
    approx: bool,
    limit: usize,
}

/// Trims `stream` as `trim` says. The approximate form (`~`) trims to the threshold, as the
/// hosted service does (Redis stops at a node's edge): the count it removes is that of an
/// exact `MAXLEN` to the length left, which is how it is logged, so replay does the same. A
/// `~` read from the log (written before tidepool trimmed as the hosted service does) keeps
/// Redis's whole-node meaning, so an older log replays to the state it had. Answers the
/// entries removed and, for a live `~` trim that removed any, the length to log.
fn trim_stream(
    stream: &mut Stream,
    how: Trim,
    trim: &TrimArgs,
    replaying: bool,
) -> (usize, Option<usize>) {
    if !trim.approx || replaying {
        return (stream.trim(how, trim.approx, trim.limit), None);
    }
    let n = stream.hosted_trim_count(how, trim.limit);
    if n == 0 {
        return (0, None);
    }
    let left = stream.len() - n;
    (stream.trim(Trim::MaxLen(left), false, 0), Some(left))
}

/// Parses options from `i`; for XADD stops at the ID (returned with its index).
fn parse_options(
    args: &[Vec<u8>],
    mut i: usize,
    xadd: bool,
) -> Result<(TrimArgs, bool, Option<usize>), Reply> {
    let mut how = None;
    let mut approx = false;
    let mut limit: Option<i64> = None;
    let mut nomkstream = false;
    let mut id_at = None;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i];
        if xadd && opt.as_slice() == b"*" {
            id_at = Some(i);
            break;
        }
        if (eq(opt, "maxlen") || eq(opt, "minid")) && more > 0 {
            if how.is_some() {
                return Err(Reply::err(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            approx = false;
            let next = &args[i + 1];
            if more >= 2 && next.as_slice() == b"~" {
                approx = true;
                i += 1;
            } else if more >= 2 && next.as_slice() == b"=" {
                i += 1;
            }
            if eq(opt, "maxlen") {
                let n = int_arg(&args[i + 1])?;
                if n < 0 {
                    return Err(Reply::err("ERR The MAXLEN argument must be >= 0."));
                }
                how = Some(Trim::MaxLen(n as usize));
            } else {
                how = Some(Trim::MinId(parse_id(&args[i + 1], 0)?));
            }
            i += 2;
            continue;
        }
        if eq(opt, "limit") && more > 0 {
            let n = int_arg(&args[i + 1])?;
            if n < 0 {
                return Err(Reply::err("ERR The LIMIT argument must be >= 0."));
            }
            limit = Some(n);
            i += 2;
            continue;
        }
        if xadd && eq(opt, "nomkstream") {
            nomkstream = true;
            i += 1;
            continue;
        }
        if xadd {
            // An explicit ID, or `ms-*` (the sequence picked by the server).
            let ms_only = opt.strip_suffix(b"-*").unwrap_or(opt);
            parse_id(ms_only, 0)?;
            id_at = Some(i);
            break;
        }
        return Err(Reply::err(errors::SYNTAX));
    }
    if limit.is_some_and(|l| l > 0) && how.is_none() {
        return Err(Reply::err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && how.is_none() {
        return Err(Reply::err(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    let limit = match limit {
        Some(_) if !approx => {
            return Err(Reply::err(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ))
        }
        Some(l) => l as usize,
        None if approx => 100 * crate::state::stream::NODE_ENTRIES_MAX,
        None => 0,
    };
    Ok((TrimArgs { how, approx, limit }, nomkstream, id_at))
}

pub fn xadd(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let (trim, nomkstream, id_at) = match parse_options(args, 2, true) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let Some(id_at) = id_at else {
        return Reply::err("ERR wrong number of arguments for 'xadd' command");
    };
    let fields = &args[id_at + 1..];
    if fields.len() < 2 || fields.len() % 2 == 1 {
        return Reply::err("ERR wrong number of arguments for 'xadd' command");
    }
    // The ID as given: auto (`*`), partial (`ms-*`) or explicit.
    let raw = &args[id_at];
    let given: Option<(u64, Option<u64>)> = if raw.as_slice() == b"*" {
        None
    } else if let Some(ms) = raw.strip_suffix(b"-*") {
        match parse_id(ms, 0) {
            Ok(id) if !ms.contains(&b'-') => Some((id.ms, None)),
            _ => return Reply::err(INVALID_ID),
        }
    } else {
        match parse_id(raw, 0) {
            Ok(id) => Some((id.ms, Some(id.seq))),
            Err(e) => return e,
        }
    };
    if given == Some((0, Some(0))) {
        return Reply::err("ERR The ID specified in XADD must be greater than 0-0");
    }
    let key = &args[1];
    let now = ctx.now_ms;
    let last = match typed::read::<Box<Stream>>(ctx.db, key, now) {
        Err(e) => return e,
        Ok(None) if nomkstream => return Reply::Nil,
        Ok(s) => s.map(|s| s.last_id).unwrap_or(StreamId::MIN),
    };
    let id = match given {
        None => {
            if now > last.ms {
                Some(StreamId { ms: now, seq: 0 })
            } else {
                last.next()
            }
        }
        Some((ms, None)) => {
            if ms > last.ms {
                Some(StreamId { ms, seq: 0 })
            } else if ms == last.ms && last.seq < u64::MAX {
                Some(StreamId {
                    ms,
                    seq: last.seq + 1,
                })
            } else {
                None
            }
        }
        Some((ms, Some(seq))) => Some(StreamId { ms, seq }).filter(|id| *id > last),
    };
    // (Redis creates the key before it checks the ID; on a new stream every ID that got this
    // far is valid, so no refused XADD leaves an empty stream behind.)
    let Some(id) = id else {
        if given.is_none() {
            return Reply::err(
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            );
        }
        return Reply::err(
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
        );
    };
    let replaying = ctx.replaying;
    let stream = match typed::create::<Box<Stream>>(ctx, key) {
        Ok(s) => s,
        Err(e) => return e,
    };
    stream.append(id, fields);
    let mut exact_len = None;
    if let Some(how) = trim.how {
        exact_len = trim_stream(stream, how, &trim, replaying).1;
    }
    ctx.dirty = true;
    let logged = match (exact_len, trim.approx) {
        // An approximate trim is logged as the exact one it amounted to.
        (Some(left), _) => {
            let mut l = vec![args[0].clone(), key.clone()];
            l.extend([
                b"MAXLEN".to_vec(),
                b"=".to_vec(),
                left.to_string().into_bytes(),
            ]);
            l.push(id.text());
            l.extend_from_slice(fields);
            l
        }
        // One that removed nothing is logged without it.
        (None, true) => {
            let mut l = vec![args[0].clone(), key.clone(), id.text()];
            l.extend_from_slice(fields);
            l
        }
        (None, false) => {
            let mut l = args.to_vec();
            l[id_at] = id.text();
            l
        }
    };
    ctx.log_as(logged);
    Reply::Bulk(id.text())
}

pub fn xlen(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    match typed::read::<Box<Stream>>(ctx.db, &args[1], ctx.now_ms) {
        Ok(s) => Reply::Int(s.map(|s| s.len() as i64).unwrap_or(0)),
        Err(e) => e,
    }
}

pub fn xrange(ctx: &mut Ctx, args: &[Vec<u8>], rev: bool) -> Reply {
    let (lo_arg, hi_arg) = if rev {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let lo = match parse_bound(lo_arg, true) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let hi = match parse_bound(hi_arg, false) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut count: Option<usize> = None;
    let mut i = 4;
    while i < args.len() {
        if eq(&args[i], "count") && i + 1 < args.len() {
            match int_arg(&args[i + 1]) {
                Ok(n) => count = Some(n.max(0) as usize),
                Err(e) => return e,
            }
            i += 2;
        } else {
            return Reply::err(errors::SYNTAX);
        }
    }
    let s = match typed::read::<Box<Stream>>(ctx.db, &args[1], ctx.now_ms) {
        Ok(Some(s)) => s,
        Ok(None) => return Reply::Array(Vec::new()),
        Err(e) => return e,
    };
    if count == Some(0) {
        return Reply::NilArray;
    }
    if lo > hi {
        return Reply::Array(Vec::new());
    }
    let limit = count.unwrap_or(usize::MAX);
    let range = s.range(lo..=hi);
    let out: Vec<Reply> = if rev {
        range
            .rev()
            .take(limit)
            .map(|(id, f)| entry_reply(&id, f))
            .collect()
    } else {
        range
            .take(limit)
            .map(|(id, f)| entry_reply(&id, f))
            .collect()
    };
    Reply::Array(out)
}

pub fn xdel(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    // The key first (a missing one answers 0 whatever the IDs), then every ID, before any goes.
    let s = match typed::existing::<Box<Stream>>(ctx, &args[1]) {
        Ok(Some(s)) => s,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let mut ids = Vec::with_capacity(args.len() - 2);
    for a in &args[2..] {
        match parse_id(a, 0) {
            Ok(id) => ids.push(id),
            Err(e) => return e,
        }
    }
    let n = ids.into_iter().filter(|id| s.delete(*id)).count();
    if n > 0 {
        ctx.dirty = true;
    }
    Reply::Int(n as i64)
}

pub fn xtrim(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let replaying = ctx.replaying;
    let (trim, _, _) = match parse_options(args, 2, false) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let s = match typed::existing::<Box<Stream>>(ctx, &args[1]) {
        Ok(Some(s)) => s,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let Some(how) = trim.how else {
        return Reply::err(errors::SYNTAX);
    };
    let (n, exact_len) = trim_stream(s, how, &trim, replaying);
    if n > 0 {
        ctx.dirty = true;
    }
    if let Some(left) = exact_len {
        ctx.log_as(vec![
            args[0].clone(),
            args[1].clone(),
            b"MAXLEN".to_vec(),
            b"=".to_vec(),
            left.to_string().into_bytes(),
        ]);
    }
    Reply::Int(n as i64)
}

/// The options of XREAD and XREADGROUP, up to STREAMS.
pub struct ReadArgs<'a> {
    /// 0: no limit.
    pub count: usize,
    pub group: Option<(&'a [u8], &'a [u8])>,
    pub noack: bool,
    pub keys: &'a [Vec<u8>],
    pub ids: &'a [Vec<u8>],
}

/// Parses `[GROUP g c] [COUNT n] [BLOCK ms] [NOACK] STREAMS key ... id ...` (GROUP and NOACK only for
/// XREADGROUP). Redis words the unbalanced-list error as XREAD's for both.
pub fn parse_read(args: &[Vec<u8>], grouped: bool) -> Result<ReadArgs<'_>, Reply> {
    let mut r = ReadArgs {
        count: 0,
        group: None,
        noack: false,
        keys: &[],
        ids: &[],
    };
    let mut i = 1;
    let mut streams_at = None;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if grouped && eq(&args[i], "group") && more >= 2 {
            r.group = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if eq(&args[i], "count") && more > 0 {
            r.count = int_arg(&args[i + 1])?.max(0) as usize;
            i += 2;
        } else if eq(&args[i], "block") && more > 0 {
            // Checked here; the waiting is a RESP connection's (`command::blocking`).
            super::blocking::block_ms(&args[i + 1])?;
            i += 2;
        } else if grouped && eq(&args[i], "noack") {
            r.noack = true;
            i += 1;
        } else if eq(&args[i], "streams") && more > 0 {
            streams_at = Some(i + 1);
            break;
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
    }
    let Some(at) = streams_at else {
        return Err(Reply::err(errors::SYNTAX));
    };
    let rest = &args[at..];
    if rest.len() % 2 == 1 {
        return Err(Reply::err("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."));
    }
    (r.keys, r.ids) = rest.split_at(rest.len() / 2);
    Ok(r)
}

/// XREAD's arguments with each `$` replaced by its stream's last ID now: what a blocked XREAD
/// tries again with, so that it waits for entries added after it blocked, as in Redis.
pub fn with_last_ids(db: &crate::state::Db, now_ms: u64, args: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = args.to_vec();
    let Ok(ReadArgs { keys, ids, .. }) = parse_read(args, false) else {
        return out;
    };
    let first_id = args.len() - ids.len();
    for (i, (k, id)) in keys.iter().zip(ids).enumerate() {
        if id.as_slice() == b"$" {
            let last = match typed::read::<Box<Stream>>(db, k, now_ms) {
                Ok(Some(s)) => s.last_id,
                _ => StreamId::MIN,
            };
            out[first_id + i] = last.to_string().into_bytes();
        }
    }
    out
}

pub fn xread(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let ReadArgs {
        count, keys, ids, ..
    } = match parse_read(args, false) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let mut starts = Vec::with_capacity(ids.len());
    for (k, id) in keys.iter().zip(ids) {
        let s = match typed::read::<Box<Stream>>(ctx.db, k, ctx.now_ms) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let after = match id.as_slice() {
            b"$" => s.map(|s| s.last_id).unwrap_or(StreamId::MIN),
            b">" => return Reply::err("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."),
            raw => match parse_id(raw, 0) {
                Ok(id) => id,
                Err(e) => return e,
            },
        };
        starts.push(after);
    }
    let mut out = Vec::new();
    for (k, after) in keys.iter().zip(starts) {
        let Ok(Some(s)) = typed::read::<Box<Stream>>(ctx.db, k, ctx.now_ms) else {
            continue;
        };
        let Some(from) = after.next() else { continue };
        let entries: Vec<Reply> = s
            .range(from..=StreamId::MAX)
            .take(if count == 0 { usize::MAX } else { count })
            .map(|(id, f)| entry_reply(&id, f))
            .collect();
        if !entries.is_empty() {
            out.push((k.clone(), entries));
        }
    }
    read_reply(out)
}

/// XREAD's and XREADGROUP's reply: `[[key, entries], ...]` for the streams that gave something,
/// or a null array when none did.
pub fn read_reply(streams: Vec<(Vec<u8>, Vec<Reply>)>) -> Reply {
    if streams.is_empty() {
        return Reply::NilArray;
    }
    Reply::Array(
        streams
            .into_iter()
            .map(|(k, entries)| Reply::Array(vec![Reply::Bulk(k), Reply::Array(entries)]))
            .collect(),
    )
}

pub fn xsetid(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let id = match parse_id(&args[2], 0) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut entries_added: Option<u64> = None;
    let mut max_deleted: Option<StreamId> = None;
    let mut i = 3;
    while i < args.len() {
        if eq(&args[i], "entriesadded") && i + 1 < args.len() {
            match int_arg(&args[i + 1]) {
                Ok(n) if n >= 0 => entries_added = Some(n as u64),
                Ok(_) => {
                    return Reply::err("ERR entries_added must be positive");
                }
                Err(e) => return e,
            }
        } else if eq(&args[i], "maxdeletedid") && i + 1 < args.len() {
            // 0-0 means "not given" (as Redis 7.0 reads it).
            match parse_id(&args[i + 1], 0) {
                Ok(x) => max_deleted = Some(x).filter(|m| *m != StreamId::MIN),
                Err(e) => return e,
            }
        } else {
            return Reply::err(errors::SYNTAX);
        }
        i += 2;
    }
    if let Some(m) = max_deleted {
        if id < m {
            return Reply::err(
                "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
            );
        }
    }
    let s = match typed::existing::<Box<Stream>>(ctx, &args[1]) {
        Ok(Some(s)) => s,
        Ok(None) => return Reply::err("ERR no such key"),
        Err(e) => return e,
    };
    // Compared with the last entry still there, not with the last ID generated (as Redis 7.0).
    if s.last_entry_id().is_some_and(|last| last > id) {
        return Reply::err(
            "ERR The ID specified in XSETID is smaller than the target stream top item",
        );
    }
    if let Some(n) = entries_added {
        if (s.len() as u64) > n {
            return Reply::err(
                "ERR The entries_added specified in XSETID is smaller than the target stream length",
            );
        }
    }
    s.last_id = id;
    if let Some(n) = entries_added {
        s.entries_added = n;
    }
    if let Some(m) = max_deleted {
        s.max_deleted_id = m;
    }
    ctx.dirty = true;
    Reply::ok()
}

/// The stream XINFO's subcommands read: "no such key" when absent.
pub fn info_stream<'a>(ctx: &'a Ctx, key: &[u8]) -> Result<&'a Stream, Reply> {
    match typed::read::<Box<Stream>>(ctx.db, key, ctx.now_ms) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Reply::err("ERR no such key")),
        Err(e) => Err(e),
    }
}

/// A group's read progress as XINFO GROUPS and XINFO STREAM FULL list it.
pub fn group_progress(s: &Stream, g: &crate::state::stream::Group) -> [Reply; 6] {
    [
        Reply::bulk("last-delivered-id"),
        Reply::Bulk(g.last_id.text()),
        Reply::bulk("entries-read"),
        g.entries_read
            .map(|n| Reply::Int(n as i64))
            .unwrap_or(Reply::Nil),
        Reply::bulk("lag"),
        s.lag(g).map(Reply::Int).unwrap_or(Reply::Nil),
    ]
}

/// `XINFO STREAM key [FULL [COUNT n]]`.
pub fn xinfo_stream(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let s = tri!(info_stream(ctx, &args[2]));
    if args.len() > 3 {
        let syntax = || {
            Reply::err(
                "ERR unknown subcommand or wrong number of arguments for 'stream'. Try XINFO HELP.",
            )
        };
        if !is(&args[3], "full") {
            return syntax();
        }
        // COUNT bounds entries and each PEL listing: 0 means all, default (and below 0) 10.
        let count = match args.len() {
            4 => 10,
            6 if is(&args[4], "count") => tri!(int_arg(&args[5])),
            _ => return syntax(),
        };
        let count = match count {
            0 => usize::MAX,
            n if n < 0 => 10,
            n => n as usize,
        };
        return xinfo_stream_full(s, count);
    }
    let first = s.iter().next();
    let last = s.iter().next_back();
    let mut out = stream_fields(s);
    out.extend([
        Reply::bulk("groups"),
        Reply::Int(s.groups.len() as i64),
        Reply::bulk("first-entry"),
        first
            .map(|(id, f)| entry_reply(&id, f))
            .unwrap_or(Reply::Nil),
        Reply::bulk("last-entry"),
        last.map(|(id, f)| entry_reply(&id, f))
            .unwrap_or(Reply::Nil),
    ]);
    Reply::Array(out)
}

/// The fields both forms of XINFO STREAM start with.
fn stream_fields(s: &Stream) -> Vec<Reply> {
    let recorded_first = s.first_id().unwrap_or(StreamId::MIN);
    vec![
        Reply::bulk("length"),
        Reply::Int(s.len() as i64),
        Reply::bulk("radix-tree-keys"),
        Reply::Int(s.node_count() as i64),
        Reply::bulk("radix-tree-nodes"),
        Reply::Int(s.node_count() as i64 + 1),
        Reply::bulk("last-generated-id"),
        Reply::Bulk(s.last_id.text()),
        Reply::bulk("max-deleted-entry-id"),
        Reply::Bulk(s.max_deleted_id.text()),
        Reply::bulk("entries-added"),
        Reply::Int(s.entries_added as i64),
        Reply::bulk("recorded-first-entry-id"),
        Reply::Bulk(recorded_first.text()),
    ]
}

/// The FULL form: the stream's fields, its first `count` entries, and every group with its PEL
/// and consumers (each listing at most `count` pending entries), in Redis 7.0's layout.
fn xinfo_stream_full(s: &Stream, count: usize) -> Reply {
    let groups = s
        .groups
        .iter()
        .map(|(name, g)| {
            let pending = g
                .pel
                .iter()
                .take(count)
                .map(|(id, n)| {
                    Reply::Array(vec![
                        Reply::Bulk(id.text()),
                        Reply::Bulk(n.consumer.clone()),
                        Reply::Int(n.delivery_ms as i64),
                        Reply::Int(n.count as i64),
                    ])
                })
                .collect();
            let consumers = g
                .consumers
                .iter()
                .map(|(cname, c)| {
                    let pending = c
                        .pel
                        .iter()
                        .take(count)
                        .filter_map(|id| {
                            let n = g.pel.get(id)?;
                            Some(Reply::Array(vec![
                                Reply::Bulk(id.text()),
                                Reply::Int(n.delivery_ms as i64),
                                Reply::Int(n.count as i64),
                            ]))
                        })
                        .collect();
                    Reply::Array(vec![
                        Reply::bulk("name"),
                        Reply::Bulk(cname.clone()),
                        Reply::bulk("seen-time"),
                        Reply::Int(c.seen_ms as i64),
                        Reply::bulk("pel-count"),
                        Reply::Int(c.pel.len() as i64),
                        Reply::bulk("pending"),
                        Reply::Array(pending),
                    ])
                })
                .collect();
            let mut fields = vec![Reply::bulk("name"), Reply::Bulk(name.clone())];
            fields.extend(group_progress(s, g));
            fields.extend([
                Reply::bulk("pel-count"),
                Reply::Int(g.pel.len() as i64),
                Reply::bulk("pending"),
                Reply::Array(pending),
                Reply::bulk("consumers"),
                Reply::Array(consumers),
            ]);
            Reply::Array(fields)
        })
        .collect();
    let mut out = stream_fields(s);
    out.extend([
        Reply::bulk("entries"),
        Reply::Array(
            s.iter()
                .take(count)
                .map(|(id, f)| entry_reply(&id, f))
                .collect(),
        ),
        Reply::bulk("groups"),
        Reply::Array(groups),
    ]);
    Reply::Array(out)
}
