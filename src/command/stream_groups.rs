//! Stream consumer groups: XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER),
//! XREADGROUP (not blocking), XACK, XPENDING (both forms), XCLAIM, XAUTOCLAIM, XINFO GROUPS and
//! XINFO CONSUMERS.
//!
//! Delivery times come from the command's timestamp (the record's), so a logged XREADGROUP or
//! XCLAIM replays to the same pending entries, owners and times.

use super::args::{int_arg, is};
use super::ctx::Ctx;
use super::streams::{
    entry_reply, group_progress, info_stream, parse_bound, parse_id, parse_read, read_reply,
    ReadArgs,
};
use super::typed;
use crate::reply::{errors, Reply};
use crate::state::stream::{Consumer, Group, Nack, Stream, StreamId};

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The stream at `key` with its group `gname` taken out, for the caller to put back when done
/// (XCLAIM, XAUTOCLAIM): NOGROUP when the key or the group is missing.
fn take_group<'a>(
    ctx: &'a mut Ctx,
    key: &[u8],
    gname: &[u8],
) -> Result<(&'a mut Stream, Group), Reply> {
    let st: &mut Stream =
        typed::existing::<Box<Stream>>(ctx, key)?.ok_or_else(|| nogroup_key(key, gname))?;
    let g = st
        .groups
        .remove(gname)
        .ok_or_else(|| nogroup_key(key, gname))?;
    Ok((st, g))
}

fn nogroup_key(key: &[u8], group: &[u8]) -> Reply {
    Reply::Error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        s(key),
        s(group)
    ))
}

fn nogroup_for(key: &[u8], group: &[u8]) -> Reply {
    Reply::Error(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        s(group),
        s(key)
    ))
}

/// The consumer, created (with its seen time) when missing.
fn consumer<'a>(g: &'a mut Group, name: &[u8], now: u64) -> &'a mut Consumer {
    let c = g.consumers.entry(name.to_vec()).or_default();
    c.seen_ms = now;
    c
}

/// XGROUP's subcommands, in Redis's order of checks: options, then the key (and the group for
/// SETID, CREATECONSUMER, DELCONSUMER), then the ID; MKSTREAM creates the key only once
/// nothing can fail any more.
/// The XGROUP subcommands that change a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XGroup {
    Create,
    SetId,
    Destroy,
    CreateConsumer,
    DelConsumer,
}

pub fn xgroup(ctx: &mut Ctx, args: &[Vec<u8>], sub: XGroup) -> Reply {
    let key = &args[2];
    let now = ctx.now_ms;
    let syntax = || {
        Reply::Error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
            s(&args[1])
        ))
    };
    let mut mkstream = false;
    let mut entries_read: Option<u64> = None;
    if sub == XGroup::Create || sub == XGroup::SetId {
        let max = if sub == XGroup::Create { 8 } else { 7 };
        if args.len() < 5 || args.len() > max {
            return syntax();
        }
        let mut i = 5;
        while i < args.len() {
            if sub == XGroup::Create && eq(&args[i], "mkstream") {
                mkstream = true;
                i += 1;
            } else if eq(&args[i], "entriesread") && i + 1 < args.len() {
                match int_arg(&args[i + 1]) {
                    Ok(-1) => entries_read = None,
                    Ok(n) if n >= 0 => entries_read = Some(n as u64),
                    Ok(_) => return Reply::err("ERR value for ENTRIESREAD must be positive or -1"),
                    Err(e) => return e,
                }
                i += 2;
            } else {
                return syntax();
            }
        }
    }
    let exists = match typed::read::<Box<Stream>>(ctx.db, key, now) {
        Ok(st) => st.map(|st| st.groups.contains_key(&args[3])),
        Err(e) => return e,
    };
    if !mkstream {
        match exists {
            None => return Reply::err("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."),
            Some(false)
                if matches!(
                    sub,
                    XGroup::SetId | XGroup::CreateConsumer | XGroup::DelConsumer
                ) =>
            {
                return nogroup_for(key, &args[3]);
            }
            _ => {}
        }
    }
    let id = if matches!(sub, XGroup::Create | XGroup::SetId) {
        if args[4].as_slice() == b"$" {
            None
        } else {
            match parse_id(&args[4], 0) {
                Ok(id) => Some(id),
                Err(e) => return e,
            }
        }
    } else {
        None
    };
    let st = match typed::create::<Box<Stream>>(ctx, key) {
        Ok(st) => st,
        Err(e) => return e,
    };
    let st: &mut Stream = st;
    let gname = args[3].clone();
    let id = id.unwrap_or(st.last_id);
    let reply = match sub {
        XGroup::Create => match st.groups.entry(gname) {
            std::collections::btree_map::Entry::Occupied(_) => {
                Reply::err("BUSYGROUP Consumer Group name already exists")
            }
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(Group {
                    last_id: id,
                    entries_read,
                    ..Group::default()
                });
                Reply::ok()
            }
        },
        XGroup::SetId => {
            if let Some(g) = st.groups.get_mut(&gname) {
                g.last_id = id;
                g.entries_read = entries_read;
            }
            Reply::ok()
        }
        XGroup::Destroy => Reply::Int(i64::from(st.groups.remove(&gname).is_some())),
        XGroup::CreateConsumer => match st.groups.get_mut(&gname) {
            Some(g) if !g.consumers.contains_key(&args[4]) => {
                consumer(g, &args[4], now);
                Reply::Int(1)
            }
            _ => Reply::Int(0),
        },
        XGroup::DelConsumer => match st.groups.get_mut(&gname) {
            Some(g) => match g.consumers.remove(&args[4]) {
                Some(c) => {
                    for id in &c.pel {
                        g.pel.remove(id);
                    }
                    Reply::Int(c.pel.len() as i64)
                }
                None => Reply::Int(0),
            },
            None => Reply::Int(0),
        },
    };
    ctx.dirty = true;
    reply
}

pub fn xreadgroup(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    let ReadArgs {
        count,
        group,
        noack,
        keys,
        ids,
    } = match parse_read(args, true) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some((gname, cname)) = group else {
        return Reply::err("ERR Missing GROUP option for XREADGROUP");
    };
    let (gname, cname) = (gname.to_vec(), cname.to_vec());
    // Check every stream and ID before anything is delivered.
    let mut starts: Vec<Option<StreamId>> = Vec::with_capacity(ids.len());
    for (k, id) in keys.iter().zip(ids) {
        let st = match typed::read::<Box<Stream>>(ctx.db, k, now) {
            Ok(st) => st,
            Err(e) => return e,
        };
        if st.is_none_or(|st| !st.groups.contains_key(&gname)) {
            return Reply::Error(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                s(k),
                s(&gname)
            ));
        }
        match id.as_slice() {
            b">" => starts.push(None),
            b"$" => return Reply::err("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."),
                        raw => match parse_id(raw, 0) {
                Ok(x) => starts.push(Some(x)),
                Err(e) => return e,
            },
        }
    }
    let limit = if count == 0 { usize::MAX } else { count };
    let mut out = Vec::new();
    // What a live NOACK read that created no consumer is logged as: per stream, the group's
    // new position (XGROUP SETID), or the read itself where the consumer existed. A NOACK
    // read in the log as sent, whose consumer does not exist, can then only come from a log
    // written before, when such a read created its consumer: replay does so.
    let mut noack_logged: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut noack_skipped = false;
    let replaying = ctx.replaying;
    for ((k, start), id) in keys.iter().zip(starts).zip(ids) {
        let Ok(Some(st)) = typed::existing::<Box<Stream>>(ctx, k) else {
            continue;
        };
        let st: &mut Stream = st;
        let Some(mut g) = st.groups.remove(&gname) else {
            continue;
        };
        // New entries are served (and the consumer created) only when the stream's last entry
        // is past the group's last ID, as Redis decides; the history is always served.
        if start.is_none() && st.last_entry_id().is_none_or(|m| m <= g.last_id) {
            st.groups.insert(gname.clone(), g);
            continue;
        }
        let new_only = start.is_none();
        // A NOACK read creates no consumer: nothing becomes pending for it, and the hosted
        // service lists no consumer after one (`XINFO CONSUMERS` answers []). Redis creates
        // it. An existing consumer is still seen.
        let had_consumer = g.consumers.contains_key(&cname);
        if !noack || had_consumer || replaying {
            consumer(&mut g, &cname, now);
        }
        let skipped_here = noack && !had_consumer && !replaying;
        noack_skipped |= skipped_here;
        let entries = match start {
            None => {
                let from = g.last_id.next();
                let picked: Vec<(StreamId, crate::state::stream::FieldsRef<'_>)> = match from {
                    Some(from) => st.range(from..=StreamId::MAX).take(limit).collect(),
                    None => Vec::new(),
                };
                for (id, _) in &picked {
                    if *id > g.last_id {
                        match g.entries_read {
                            Some(n) if !st.has_tombstones_from(*id) => g.entries_read = Some(n + 1),
                            _ if st.entries_added > 0 => g.entries_read = st.estimate_distance(*id),
                            _ => {}
                        }
                        g.last_id = *id;
                    }
                    if !noack {
                        if let Some(old) = g.pel.get(id).map(|n| n.consumer.clone()) {
                            if let Some(oc) = g.consumers.get_mut(&old) {
                                oc.pel.remove(id);
                            }
                        }
                        g.pel.insert(
                            *id,
                            Nack {
                                consumer: cname.clone(),
                                delivery_ms: now,
                                count: 1,
                            },
                        );
                        consumer(&mut g, &cname, now).pel.insert(*id);
                    }
                }
                picked
                    .iter()
                    .map(|(id, f)| entry_reply(id, *f))
                    .collect::<Vec<_>>()
            }
            Some(after) => {
                // The consumer's own history: its pending entries after `after`.
                let ids: Vec<StreamId> = g
                    .consumers
                    .get(&cname)
                    .map(|c| {
                        c.pel
                            .range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
                            .take(limit)
                            .copied()
                            .collect()
                    })
                    .unwrap_or_default();
                // Served again: each entry still there counts as a new delivery; one deleted
                // since shows as its ID with no fields.
                ids.iter()
                    .map(|id| match st.get(*id) {
                        Some(f) => {
                            if let Some(n) = g.pel.get_mut(id) {
                                n.delivery_ms = now;
                                n.count += 1;
                            }
                            entry_reply(id, f)
                        }
                        None => Reply::Array(vec![Reply::Bulk(id.text()), Reply::NilArray]),
                    })
                    .collect()
            }
        };
        if noack {
            noack_logged.push(if skipped_here {
                let read = g.entries_read.map_or(-1, |n| n as i64);
                vec![
                    b"XGROUP".to_vec(),
                    b"SETID".to_vec(),
                    k.clone(),
                    gname.clone(),
                    g.last_id.text(),
                    b"ENTRIESREAD".to_vec(),
                    read.to_string().into_bytes(),
                ]
            } else {
                let mut read = vec![
                    b"XREADGROUP".to_vec(),
                    b"GROUP".to_vec(),
                    gname.clone(),
                    cname.clone(),
                ];
                if count > 0 {
                    read.extend([b"COUNT".to_vec(), count.to_string().into_bytes()]);
                }
                read.extend([
                    b"NOACK".to_vec(),
                    b"STREAMS".to_vec(),
                    k.clone(),
                    id.clone(),
                ]);
                read
            });
        }
        st.groups.insert(gname.clone(), g);
        ctx.dirty = true;
        if new_only && entries.is_empty() {
            continue;
        }
        out.push((k.clone(), entries));
    }
    if noack_skipped {
        for cmd in noack_logged {
            ctx.log_as(cmd);
        }
    }
    read_reply(out)
}

pub fn xack(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let exists = match typed::read::<Box<Stream>>(ctx.db, &args[1], ctx.now_ms) {
        Ok(st) => st.is_some_and(|st| st.groups.contains_key(&args[2])),
        Err(e) => return e,
    };
    if !exists {
        return Reply::Int(0);
    }
    let mut ids = Vec::new();
    for a in &args[3..] {
        match parse_id(a, 0) {
            Ok(id) => ids.push(id),
            Err(e) => return e,
        }
    }
    let Ok(Some(st)) = typed::existing::<Box<Stream>>(ctx, &args[1]) else {
        return Reply::Int(0);
    };
    let Some(g) = st.groups.get_mut(&args[2]) else {
        return Reply::Int(0);
    };
    let mut n = 0;
    for id in ids {
        if let Some(nack) = g.pel.remove(&id) {
            if let Some(c) = g.consumers.get_mut(&nack.consumer) {
                c.pel.remove(&id);
            }
            n += 1;
        }
    }
    if n > 0 {
        ctx.dirty = true;
    }
    Reply::Int(n)
}

pub fn xpending(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    let mut i = 3;
    let mut min_idle: u64 = 0;
    let extended = args.len() > 3;
    if extended && eq(&args[3], "idle") {
        if args.len() < 5 {
            return Reply::err(errors::SYNTAX);
        }
        match int_arg(&args[4]) {
            Ok(n) => min_idle = n.max(0) as u64,
            Err(e) => return e,
        }
        i = 5;
    }
    let rest = &args[i..];
    if extended && !(rest.len() == 3 || rest.len() == 4) {
        return Reply::err(errors::SYNTAX);
    }
    let range = if extended {
        let lo = match parse_bound(&rest[0], true) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let hi = match parse_bound(&rest[1], false) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let count = match int_arg(&rest[2]) {
            Ok(n) => n.max(0) as usize,
            Err(e) => return e,
        };
        Some((lo, hi, count, rest.get(3)))
    } else {
        None
    };
    let st = match typed::read::<Box<Stream>>(ctx.db, &args[1], now) {
        Ok(Some(st)) => st,
        Ok(None) => return nogroup_key(&args[1], &args[2]),
        Err(e) => return e,
    };
    let Some(g) = st.groups.get(&args[2]) else {
        return nogroup_key(&args[1], &args[2]);
    };
    match range {
        None => {
            if g.pel.is_empty() {
                return Reply::Array(vec![Reply::Int(0), Reply::Nil, Reply::Nil, Reply::NilArray]);
            }
            let first = g.pel.keys().next().map(|i| i.text());
            let last = g.pel.keys().next_back().map(|i| i.text());
            let per: Vec<Reply> = g
                .consumers
                .iter()
                .filter(|(_, c)| !c.pel.is_empty())
                .map(|(name, c)| {
                    Reply::Array(vec![
                        Reply::Bulk(name.clone()),
                        Reply::Bulk(c.pel.len().to_string().into_bytes()),
                    ])
                })
                .collect();
            Reply::Array(vec![
                Reply::Int(g.pel.len() as i64),
                Reply::opt_bulk(first.as_deref()),
                Reply::opt_bulk(last.as_deref()),
                Reply::Array(per),
            ])
        }
        Some((lo, hi, count, who)) => {
            if lo > hi || count == 0 {
                return Reply::Array(Vec::new());
            }
            let out: Vec<Reply> = g
                .pel
                .range(lo..=hi)
                .filter(|(_, n)| who.is_none_or(|w| n.consumer == *w))
                .filter(|(_, n)| now.saturating_sub(n.delivery_ms) >= min_idle)
                .take(count)
                .map(|(id, n)| {
                    Reply::Array(vec![
                        Reply::Bulk(id.text()),
                        Reply::Bulk(n.consumer.clone()),
                        Reply::Int(now.saturating_sub(n.delivery_ms) as i64),
                        Reply::Int(n.count as i64),
                    ])
                })
                .collect();
            Reply::Array(out)
        }
    }
}

pub fn xclaim(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    // The key and group first (NOGROUP), then the arguments, as Redis does.
    match typed::read::<Box<Stream>>(ctx.db, &args[1], now) {
        Ok(Some(st)) if st.groups.contains_key(&args[2]) => {}
        Ok(_) => return nogroup_key(&args[1], &args[2]),
        Err(e) => return e,
    }
    let min_idle = match int_arg(&args[4]) {
        Ok(n) => n.max(0) as u64,
        Err(_) => return Reply::err("ERR Invalid min-idle-time argument for XCLAIM"),
    };
    // IDs, then options.
    let mut ids = Vec::new();
    let mut i = 5;
    while i < args.len() {
        match parse_id(&args[i], 0) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        i += 1;
    }
    let mut delivery_ms = now;
    let mut retry: Option<u64> = None;
    let (mut force, mut justid) = (false, false);
    let mut last_id: Option<StreamId> = None;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let a = &args[i];
        if eq(a, "force") {
            force = true;
        } else if eq(a, "justid") {
            justid = true;
        } else if eq(a, "idle") && more > 0 {
            i += 1;
            match int_arg(&args[i]) {
                Ok(n) => delivery_ms = now.saturating_sub(n.max(0) as u64),
                Err(_) => return Reply::err("ERR Invalid IDLE option argument for XCLAIM"),
            }
        } else if eq(a, "time") && more > 0 {
            i += 1;
            match int_arg(&args[i]) {
                Ok(n) => delivery_ms = n.max(0) as u64,
                Err(_) => return Reply::err("ERR Invalid TIME option argument for XCLAIM"),
            }
        } else if eq(a, "retrycount") && more > 0 {
            i += 1;
            match int_arg(&args[i]) {
                Ok(n) => retry = Some(n.max(0) as u64),
                Err(_) => return Reply::err("ERR Invalid RETRYCOUNT option argument for XCLAIM"),
            }
        } else if eq(a, "lastid") && more > 0 {
            i += 1;
            match parse_id(&args[i], 0) {
                Ok(x) => last_id = Some(x),
                Err(e) => return e,
            }
        } else {
            return Reply::Error(format!("ERR Unrecognized XCLAIM option '{}'", s(a)));
        }
        i += 1;
    }
    let (key, gname, cname) = (&args[1], &args[2], &args[3]);
    let (st, mut g) = match take_group(ctx, key, gname) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if let Some(l) = last_id {
        if l > g.last_id {
            g.last_id = l;
        }
    }
    let mut out = Vec::new();
    for id in ids {
        let exists = st.contains(id);
        // A pending entry made by FORCE has no owner yet, so no idle time to check.
        let mut forced = false;
        if !exists {
            // The entry is gone: it leaves the PEL too.
            if let Some(n) = g.pel.remove(&id) {
                if let Some(c) = g.consumers.get_mut(&n.consumer) {
                    c.pel.remove(&id);
                }
            }
            continue;
        }
        if let std::collections::btree_map::Entry::Vacant(slot) = g.pel.entry(id) {
            if !force {
                continue;
            }
            forced = true;
            slot.insert(Nack {
                consumer: Vec::new(),
                delivery_ms: now,
                count: 1,
            });
        }
        let Some(nack) = g.pel.get(&id) else { continue };
        if !forced && min_idle > 0 && now.saturating_sub(nack.delivery_ms) < min_idle {
            continue;
        }
        let count = match retry {
            Some(r) => Count::Set(r),
            None if justid => Count::Keep,
            None => Count::Increment,
        };
        transfer(&mut g, id, cname, now, delivery_ms, count);
        out.push(if justid {
            Reply::Bulk(id.text())
        } else {
            match st.get(id) {
                Some(f) => entry_reply(&id, f),
                None => Reply::Nil,
            }
        });
    }
    st.groups.insert(gname.clone(), g);
    ctx.dirty = true;
    Reply::Array(out)
}

/// What a claim does to a pending entry's delivery count.
enum Count {
    Keep,
    Increment,
    Set(u64),
}

/// Gives the pending entry `id` to consumer `cname` (created if needed) with a new delivery
/// time: the one move XCLAIM and XAUTOCLAIM share.
fn transfer(g: &mut Group, id: StreamId, cname: &[u8], now: u64, delivery_ms: u64, count: Count) {
    let Some(old) = g.pel.get(&id).map(|n| n.consumer.clone()) else {
        return;
    };
    if let Some(c) = g.consumers.get_mut(&old) {
        c.pel.remove(&id);
    }
    consumer(g, cname, now).pel.insert(id);
    if let Some(n) = g.pel.get_mut(&id) {
        n.consumer = cname.to_vec();
        n.delivery_ms = delivery_ms;
        match count {
            Count::Keep => {}
            Count::Increment => n.count += 1,
            Count::Set(c) => n.count = c,
        }
    }
}

pub fn xautoclaim(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    let min_idle = match int_arg(&args[4]) {
        Ok(n) => n.max(0) as u64,
        Err(_) => return Reply::err("ERR Invalid min-idle-time argument for XAUTOCLAIM"),
    };
    let start = match parse_bound(&args[5], true) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut count = 100usize;
    let mut justid = false;
    let mut i = 6;
    while i < args.len() {
        if eq(&args[i], "count") && i + 1 < args.len() {
            match int_arg(&args[i + 1]) {
                Ok(n) if (1..=i64::MAX / 10).contains(&n) => count = n as usize,
                Ok(_) => return Reply::err("ERR COUNT must be > 0"),
                Err(e) => return e,
            }
            i += 2;
        } else if eq(&args[i], "justid") {
            justid = true;
            i += 1;
        } else {
            return Reply::err(errors::SYNTAX);
        }
    }
    let (key, gname, cname) = (&args[1], &args[2], &args[3]);
    let (st, mut g) = match take_group(ctx, key, gname) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut attempts = count * 10;
    let mut claimed = Vec::new();
    let mut deleted = Vec::new();
    let candidates: Vec<StreamId> = g.pel.range(start..).map(|(id, _)| *id).collect();
    let mut next = StreamId::MIN;
    let mut it = candidates.into_iter().peekable();
    // COUNT bounds the reply: claimed and deleted entries both use it up (as in Redis).
    let mut remaining = count;
    while attempts > 0 && remaining > 0 {
        let Some(id) = it.next() else { break };
        attempts -= 1;
        if !g.pel.contains_key(&id) {
            continue;
        }
        // A deleted entry leaves the PEL whatever its idle time.
        if !st.contains(id) {
            if let Some(n) = g.pel.remove(&id) {
                if let Some(c) = g.consumers.get_mut(&n.consumer) {
                    c.pel.remove(&id);
                }
            }
            deleted.push(Reply::Bulk(id.text()));
            remaining -= 1;
            continue;
        }
        let Some(nack) = g.pel.get(&id) else { continue };
        if min_idle > 0 && now.saturating_sub(nack.delivery_ms) < min_idle {
            continue;
        }
        let count = if justid {
            Count::Keep
        } else {
            Count::Increment
        };
        transfer(&mut g, id, cname, now, now, count);
        claimed.push(if justid {
            Reply::Bulk(id.text())
        } else {
            match st.get(id) {
                Some(f) => entry_reply(&id, f),
                None => Reply::Nil,
            }
        });
        remaining -= 1;
    }
    if let Some(n) = it.peek() {
        next = *n;
    }
    st.groups.insert(gname.clone(), g);
    ctx.dirty = true;
    Reply::Array(vec![
        Reply::Bulk(next.text()),
        Reply::Array(claimed),
        Reply::Array(deleted),
    ])
}

pub fn xinfo_groups(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let st = match info_stream(ctx, &args[2]) {
        Ok(st) => st,
        Err(e) => return e,
    };
    Reply::Array(
        st.groups
            .iter()
            .map(|(name, g)| {
                let mut fields = vec![
                    Reply::bulk("name"),
                    Reply::Bulk(name.clone()),
                    Reply::bulk("consumers"),
                    Reply::Int(g.consumers.len() as i64),
                    Reply::bulk("pending"),
                    Reply::Int(g.pel.len() as i64),
                ];
                fields.extend(group_progress(st, g));
                Reply::Array(fields)
            })
            .collect(),
    )
}

pub fn xinfo_consumers(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    let st = match info_stream(ctx, &args[2]) {
        Ok(st) => st,
        Err(e) => return e,
    };
    // A group that does not exist has no consumers: the hosted service answers an empty list
    // (upstash-redis's tests expect it) where Redis answers NOGROUP.
    let Some(g) = st.groups.get(&args[3]) else {
        return Reply::Array(vec![]);
    };
    Reply::Array(
        g.consumers
            .iter()
            .map(|(name, c)| {
                Reply::Array(vec![
                    Reply::bulk("name"),
                    Reply::Bulk(name.clone()),
                    Reply::bulk("pending"),
                    Reply::Int(c.pel.len() as i64),
                    Reply::bulk("idle"),
                    Reply::Int(now.saturating_sub(c.seen_ms) as i64),
                ])
            })
            .collect(),
    )
}

/// What XDELEX and XACKDEL do with consumer-group references to the entries they delete.
#[derive(Clone, Copy, PartialEq)]
enum RefPolicy {
    /// Delete the entry; pending-list references stay (XDEL's way).
    KeepRef,
    /// Delete the entry and every group's reference to it.
    DelRef,
    /// Delete only entries no group still needs.
    Acked,
}

/// The policies by their words, for parsing and for the commands a change is logged as.
const REF_POLICIES: [(&str, RefPolicy); 3] = [
    ("KEEPREF", RefPolicy::KeepRef),
    ("DELREF", RefPolicy::DelRef),
    ("ACKED", RefPolicy::Acked),
];

/// `[KEEPREF | DELREF | ACKED] IDS numids id ...` from `args[from..]`, in any order: the policy
/// (KEEPREF by default) and the IDs, each checked before anything changes.
fn ref_policy_args(args: &[Vec<u8>], from: usize) -> Result<(RefPolicy, Vec<StreamId>), Reply> {
    let mut policy = None;
    let mut ids_at: Option<(usize, usize)> = None;
    let mut j = from;
    while j < args.len() {
        let a = &args[j];
        let named = REF_POLICIES.into_iter().find(|(w, _)| is(a, w));
        match named {
            Some((_, p)) if policy.is_none() => {
                policy = Some(p);
                j += 1;
            }
            None if is(a, "ids") && j + 1 < args.len() => {
                let n = match int_arg(&args[j + 1]) {
                    Ok(n) if n >= 1 => n as usize,
                    _ => return Err(Reply::err("ERR Number of IDs must be a positive integer")),
                };
                if n > args.len() - j - 2 {
                    return Err(Reply::err(
                        "ERR The `numids` parameter must match the number of arguments",
                    ));
                }
                ids_at = Some((j + 2, n));
                j += 2 + n;
            }
            _ => return Err(Reply::err(errors::SYNTAX)),
        }
    }
    let Some((at, n)) = ids_at else {
        return Err(Reply::err("ERR IDS option is required"));
    };
    let ids = args[at..at + n]
        .iter()
        .map(|a| parse_id(a, 0))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((policy.unwrap_or(RefPolicy::KeepRef), ids))
}

/// Whether some consumer group still needs entry `id`: it is pending somewhere, or a group has
/// not been delivered that far yet. With no groups at all Redis documents the entry as kept
/// too (ACKED answers 2).
fn still_referenced(st: &Stream, id: StreamId) -> bool {
    st.groups.is_empty()
        || st
            .groups
            .values()
            .any(|g| g.pel.contains_key(&id) || g.last_id < id)
}

/// Removes every group's pending reference to `id`. Returns whether there was one.
fn drop_refs(st: &mut Stream, id: StreamId) -> bool {
    let mut any = false;
    for g in st.groups.values_mut() {
        if let Some(nack) = g.pel.remove(&id) {
            if let Some(c) = g.consumers.get_mut(&nack.consumer) {
                c.pel.remove(&id);
            }
            any = true;
        }
    }
    any
}

/// Deletes `id` under `policy`: 1 deleted, -1 no such entry, 2 kept (ACKED, still needed).
/// Sets `changed` when the stream changed.
fn delete_with_policy(st: &mut Stream, id: StreamId, policy: RefPolicy, changed: &mut bool) -> i64 {
    match policy {
        RefPolicy::Acked if still_referenced(st, id) => return 2,
        RefPolicy::DelRef => *changed |= drop_refs(st, id),
        _ => {}
    }
    if st.delete(id) {
        *changed = true;
        1
    } else {
        -1
    }
}

/// `XDELEX key [KEEPREF | DELREF | ACKED] IDS numids id ...` (Redis 8.2).
pub fn xdelex(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let exists = match typed::read::<Box<Stream>>(ctx.db, &args[1], ctx.now_ms) {
        Ok(st) => st.is_some(),
        Err(e) => return e,
    };
    let (policy, ids) = match ref_policy_args(args, 2) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if !exists {
        return Reply::Array(vec![Reply::Int(-1); ids.len()]);
    }
    let Ok(Some(st)) = typed::existing::<Box<Stream>>(ctx, &args[1]) else {
        return Reply::Array(vec![Reply::Int(-1); ids.len()]);
    };
    let mut changed = false;
    let out = ids
        .into_iter()
        .map(|id| Reply::Int(delete_with_policy(st, id, policy, &mut changed)))
        .collect();
    ctx.dirty |= changed;
    Reply::Array(out)
}

/// `XACKDEL key group [KEEPREF | DELREF | ACKED] IDS numids id ...` (Redis 8.2): acknowledges
/// in `group`, then deletes under the policy. Per ID: 1 deleted, 2 kept (ACKED: another group
/// still needs it), -1 no such entry. As the hosted service does (and upstash-redis's tests
/// expect), an entry that is not pending in the group (already acknowledged, never read, or
/// the group does not exist) is deleted all the same; Redis answers -1 and keeps it.
pub fn xackdel(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let exists = match typed::read::<Box<Stream>>(ctx.db, &args[1], ctx.now_ms) {
        Ok(st) => st.is_some(),
        Err(e) => return e,
    };
    let (policy, ids) = match ref_policy_args(args, 3) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let Ok(Some(st)) = typed::existing::<Box<Stream>>(ctx, &args[1]).map(|s| s.filter(|_| exists))
    else {
        return Reply::Array(vec![Reply::Int(-1); ids.len()]);
    };
    let mut changed = false;
    let mut out = Vec::with_capacity(ids.len());
    // Which IDs were acknowledged, and which were deleted without being pending: the log
    // holds those as XACKDEL and XDELEX, so that replay needs no rule of its own.
    let (mut acked, mut unpending) = (Vec::new(), Vec::new());
    for id in ids {
        let nack = st.groups.get_mut(&args[2]).and_then(|g| {
            let nack = g.pel.remove(&id)?;
            if let Some(c) = g.consumers.get_mut(&nack.consumer) {
                c.pel.remove(&id);
            }
            Some(nack)
        });
        let r = delete_with_policy(st, id, policy, &mut changed);
        if nack.is_some() {
            changed = true;
            acked.push(id);
            // Acknowledged; an entry already gone from the stream still counts as deleted.
            out.push(Reply::Int(if r == 2 { 2 } else { 1 }));
        } else {
            if r != -1 {
                unpending.push(id);
            }
            out.push(Reply::Int(r));
        }
    }
    if !unpending.is_empty() {
        let policy_word = REF_POLICIES
            .iter()
            .find(|(_, p)| *p == policy)
            .map_or(&b"KEEPREF"[..], |(w, _)| w.as_bytes());
        let ids_of = |ids: &[StreamId]| {
            let mut v = vec![b"IDS".to_vec(), ids.len().to_string().into_bytes()];
            v.extend(ids.iter().map(StreamId::text));
            v
        };
        if !acked.is_empty() {
            let mut c = vec![
                b"XACKDEL".to_vec(),
                args[1].clone(),
                args[2].clone(),
                policy_word.to_vec(),
            ];
            c.extend(ids_of(&acked));
            ctx.log_as(c);
        }
        let mut c = vec![b"XDELEX".to_vec(), args[1].clone(), policy_word.to_vec()];
        c.extend(ids_of(&unpending));
        ctx.log_as(c);
    }
    ctx.dirty |= changed;
    Reply::Array(out)
}
