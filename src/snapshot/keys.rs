//! The key-value part of a snapshot: keys with their values, expiry and last write; function
//! libraries; ACL users. Every value keeps what the log would have rebuilt, including what only
//! shows indirectly: a stream's nodes with their deleted entries, a sorted set's encoding, a
//! hash's field TTLs. `log-format.md` ("Snapshots") lists the bytes.

use super::format::{put_bytes, put_f64, put_u64, put_uint, Cursor};
use crate::config::JSON_DEPTH_MAX;
use crate::state::acl::{AclUser, KeyPerm};
use crate::state::hash::Hash;
use crate::state::json::Json;
use crate::state::scanmap::ScanMap;
use crate::state::stream::{Consumer, Group, Nack, Stream, StreamId};
use crate::state::zset::ZSet;
use crate::state::{Db, Entry, Value};
use std::collections::{BTreeMap, VecDeque};

pub const TYPE_STRING: u8 = 0;
pub const TYPE_LIST: u8 = 1;
pub const TYPE_SET: u8 = 2;
pub const TYPE_ZSET: u8 = 3;
pub const TYPE_HASH: u8 = 4;
pub const TYPE_STREAM: u8 = 5;
pub const TYPE_JSON: u8 = 6;

const FLAG_EXPIRES: u8 = 1;

/// Appends one key: type, flags, key, last write, expiry when it has one, value. Fails only
/// for a JSON document deeper than the limit, which no command can build.
pub fn put_entry(out: &mut Vec<u8>, key: &[u8], e: &Entry) -> Result<(), String> {
    let ty = match &e.value {
        Value::Str(_) => TYPE_STRING,
        Value::List(_) => TYPE_LIST,
        Value::Set(_) => TYPE_SET,
        Value::ZSet(_) => TYPE_ZSET,
        Value::Hash(_) => TYPE_HASH,
        Value::Stream(_) => TYPE_STREAM,
        Value::Json(_) => TYPE_JSON,
    };
    out.push(ty);
    out.push(if e.expire_at_ms().is_some() {
        FLAG_EXPIRES
    } else {
        0
    });
    put_bytes(out, key);
    put_uint(out, e.access_ms());
    if let Some(t) = e.expire_at_ms() {
        put_u64(out, t);
    }
    match &e.value {
        Value::Str(s) => put_bytes(out, s),
        Value::List(l) => {
            put_uint(out, l.len() as u64);
            for item in l.iter() {
                put_bytes(out, item);
            }
        }
        Value::Set(s) => {
            put_uint(out, s.len() as u64);
            for m in s.keys() {
                put_bytes(out, m);
            }
        }
        Value::ZSet(z) => {
            out.push(u8::from(z.is_skiplist()));
            put_uint(out, z.len() as u64);
            for (m, score) in z.scores().iter() {
                put_bytes(out, m);
                put_f64(out, *score);
            }
        }
        Value::Hash(h) => {
            put_uint(out, h.len() as u64);
            for (f, v) in h.iter() {
                put_bytes(out, f);
                put_bytes(out, v);
                match h.ttl(f) {
                    Some(t) => {
                        out.push(1);
                        put_u64(out, t);
                    }
                    None => out.push(0),
                }
            }
        }
        Value::Stream(s) => put_stream(out, s),
        Value::Json(j) => put_json(out, j, 0)?,
    }
    Ok(())
}

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    put_uint(out, id.ms);
    put_uint(out, id.seq);
}

fn put_stream(out: &mut Vec<u8>, s: &Stream) {
    put_uint(out, s.len() as u64);
    for (id, fields) in s.iter() {
        put_id(out, id);
        put_uint(out, fields.len() as u64);
        for f in fields.iter() {
            put_bytes(out, f);
        }
    }
    put_id(out, s.last_id);
    put_id(out, s.max_deleted_id);
    put_uint(out, s.entries_added);
    put_uint(out, s.node_count() as u64);
    for n in s.nodes() {
        put_uint(out, n.len() as u64);
        for (id, deleted) in n.ids() {
            put_id(out, id);
            out.push(u8::from(deleted));
        }
        put_uint(out, n.live() as u64);
        put_uint(out, n.bytes() as u64);
    }
    put_uint(out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        put_bytes(out, name);
        put_id(out, g.last_id);
        match g.entries_read {
            Some(n) => {
                out.push(1);
                put_uint(out, n);
            }
            None => out.push(0),
        }
        put_uint(out, g.pel.len() as u64);
        for (id, nack) in &g.pel {
            put_id(out, *id);
            put_bytes(out, &nack.consumer);
            put_uint(out, nack.delivery_ms);
            put_uint(out, nack.count);
        }
        put_uint(out, g.consumers.len() as u64);
        for (name, c) in &g.consumers {
            put_bytes(out, name);
            put_uint(out, c.seen_ms);
            put_uint(out, c.pel.len() as u64);
            for id in &c.pel {
                put_id(out, *id);
            }
        }
    }
}

const JSON_NULL: u8 = 0;
const JSON_FALSE: u8 = 1;
const JSON_TRUE: u8 = 2;
const JSON_INT: u8 = 3;
const JSON_UINT: u8 = 4;
const JSON_FLOAT: u8 = 5;
const JSON_STR: u8 = 6;
const JSON_ARR: u8 = 7;
const JSON_OBJ: u8 = 8;

/// The recursion stops at the depth the reader accepts (`JSON_DEPTH_MAX`).
fn put_json(out: &mut Vec<u8>, j: &Json, depth: usize) -> Result<(), String> {
    if depth > JSON_DEPTH_MAX {
        return Err(format!(
            "a JSON document nested deeper than {JSON_DEPTH_MAX} (config::JSON_DEPTH_MAX)"
        ));
    }
    match j {
        Json::Null => out.push(JSON_NULL),
        Json::Bool(false) => out.push(JSON_FALSE),
        Json::Bool(true) => out.push(JSON_TRUE),
        Json::Int(i) => {
            out.push(JSON_INT);
            put_u64(out, *i as u64);
        }
        Json::UInt(u) => {
            out.push(JSON_UINT);
            put_u64(out, *u);
        }
        Json::Float(f) => {
            out.push(JSON_FLOAT);
            put_f64(out, *f);
        }
        Json::Str(s) => {
            out.push(JSON_STR);
            put_bytes(out, s.as_bytes());
        }
        Json::Arr(items) => {
            out.push(JSON_ARR);
            put_uint(out, items.len() as u64);
            for item in items {
                put_json(out, item, depth + 1)?;
            }
        }
        Json::Obj(members) => {
            out.push(JSON_OBJ);
            put_uint(out, members.len() as u64);
            for (k, v) in members {
                put_bytes(out, k.as_bytes());
                put_json(out, v, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// The fewest bytes a key takes in a keys chunk: its type, flags, key length, access time and
/// an empty string's length, a byte each.
pub const ENTRY_BYTES_MIN: usize = 5;

/// Reads one key written by [`put_entry`].
pub fn read_entry(c: &mut Cursor<'_>) -> Result<(Vec<u8>, Entry), String> {
    let ty = c.u8()?;
    let flags = c.u8()?;
    if flags & !FLAG_EXPIRES != 0 {
        return Err(format!("unknown key flags {flags:#04x}"));
    }
    let key = c.bytes()?.to_vec();
    let access_ms = c.uint()?;
    let expire_at_ms = if flags & FLAG_EXPIRES != 0 {
        Some(c.u64()?)
    } else {
        None
    };
    let value = match ty {
        TYPE_STRING => Value::Str(crate::state::Str::from(c.bytes()?.to_vec())),
        TYPE_LIST => {
            let n = c.count()?;
            let mut l = VecDeque::with_capacity(n);
            for _ in 0..n {
                l.push_back(c.bytes()?.to_vec());
            }
            Value::List(l.into())
        }
        TYPE_SET => {
            let n = c.count()?;
            let mut s = ScanMap::new();
            for _ in 0..n {
                let m = c.bytes()?;
                if s.insert(m, ()).is_some() {
                    return Err(format!("the set member {} twice", shown(m)));
                }
            }
            Value::Set(Box::new(s))
        }
        TYPE_ZSET => {
            let skiplist = read_bool(c)?;
            let n = c.count()?;
            let mut z = ZSet::with_encoding(skiplist);
            for _ in 0..n {
                let m = c.bytes()?;
                let score = c.f64()?;
                if score.is_nan() {
                    return Err("a sorted-set score that is NaN".into());
                }
                if z.insert(m, score).is_some() {
                    return Err(format!("the sorted-set member {} twice", shown(m)));
                }
            }
            Value::ZSet(Box::new(z))
        }
        TYPE_HASH => {
            let n = c.count()?;
            let mut h = Hash::new();
            for _ in 0..n {
                let f = c.bytes()?;
                let v = c.bytes()?.to_vec();
                if h.insert(f, v).is_some() {
                    return Err(format!("the hash field {} twice", shown(f)));
                }
                if read_bool(c)? {
                    h.set_ttl(f, c.u64()?);
                }
            }
            Value::Hash(Box::new(h))
        }
        TYPE_STREAM => Value::Stream(Box::new(read_stream(c)?)),
        TYPE_JSON => Value::Json(Box::new(read_json(c, 0)?)),
        other => return Err(format!("unknown value type {other}")),
    };
    Ok((key, Entry::new(value, expire_at_ms, access_ms)))
}

fn read_bool(c: &mut Cursor<'_>) -> Result<bool, String> {
    match c.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(format!("{b} where 0 or 1 was expected")),
    }
}

fn read_id(c: &mut Cursor<'_>) -> Result<StreamId, String> {
    Ok(StreamId {
        ms: c.uint()?,
        seq: c.uint()?,
    })
}

/// One entry of a stream's entry list: its ID and its fields and values.
fn read_stream_entry<'d>(c: &mut Cursor<'d>) -> Result<(StreamId, Vec<&'d [u8]>), String> {
    let id = read_id(c)?;
    let nf = c.count()?;
    let mut fields = Vec::with_capacity(nf);
    for _ in 0..nf {
        fields.push(c.bytes()?);
    }
    Ok((id, fields))
}

fn read_stream(c: &mut Cursor<'_>) -> Result<Stream, String> {
    let mut s = Stream::new();
    // The entries come before the nodes that hold them: they are passed over here and read
    // again, in step with the nodes, from where they start (so no copy of them is held).
    let n = c.count()?;
    let mut entries_at = c.clone();
    for _ in 0..n {
        read_id(c)?;
        for _ in 0..c.count()? {
            c.bytes()?;
        }
    }
    let mut left = n;
    let mut entries = std::iter::from_fn(|| {
        left = left.checked_sub(1)?;
        Some(read_stream_entry(&mut entries_at))
    });
    s.last_id = read_id(c)?;
    s.max_deleted_id = read_id(c)?;
    s.entries_added = c.uint()?;
    let nodes = c.count()?;
    let mut ids = Vec::new();
    for _ in 0..nodes {
        let nids = c.count()?;
        ids.clear();
        ids.reserve(nids);
        for _ in 0..nids {
            let id = read_id(c)?;
            ids.push((id, read_bool(c)?));
        }
        let live = usize::try_from(c.uint()?).unwrap_or(usize::MAX);
        let bytes = usize::try_from(c.uint()?).unwrap_or(usize::MAX);
        s.load_node(&ids, live, bytes, &mut entries)?;
    }
    s.load_end(&mut entries)?;
    let groups = c.count()?;
    for _ in 0..groups {
        let name = c.bytes()?.to_vec();
        let mut g = Group {
            last_id: read_id(c)?,
            ..Group::default()
        };
        if read_bool(c)? {
            g.entries_read = Some(c.uint()?);
        }
        let pel = c.count()?;
        for _ in 0..pel {
            let id = read_id(c)?;
            let nack = Nack {
                consumer: c.bytes()?.to_vec(),
                delivery_ms: c.uint()?,
                count: c.uint()?,
            };
            g.pel.insert(id, nack);
        }
        let consumers = c.count()?;
        for _ in 0..consumers {
            let name = c.bytes()?.to_vec();
            let mut consumer = Consumer {
                seen_ms: c.uint()?,
                ..Consumer::default()
            };
            let ids = c.count()?;
            for _ in 0..ids {
                consumer.pel.insert(read_id(c)?);
            }
            g.consumers.insert(name, consumer);
        }
        s.groups.insert(name, g);
    }
    // A stream whose parts contradict each other would trip the stream commands later (a
    // node's count below its live entries, a pending entry of no consumer): damage, here.
    s.check()?;
    Ok(s)
}

/// A member or field as an error shows it: printable, and cut.
fn shown(b: &[u8]) -> String {
    let t = String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned();
    format!("{t:?}")
}

/// Reads a document; nesting past `JSON_DEPTH_MAX` is damage (no stored document is that deep),
/// so a damaged snapshot cannot recurse without bound.
fn read_json(c: &mut Cursor<'_>, depth: usize) -> Result<Json, String> {
    if depth > JSON_DEPTH_MAX {
        return Err(format!(
            "a JSON document nested deeper than {JSON_DEPTH_MAX} (config::JSON_DEPTH_MAX)"
        ));
    }
    let text = |b: &[u8]| {
        String::from_utf8(b.to_vec()).map_err(|_| "a JSON string that is not UTF-8".to_string())
    };
    Ok(match c.u8()? {
        JSON_NULL => Json::Null,
        JSON_FALSE => Json::Bool(false),
        JSON_TRUE => Json::Bool(true),
        JSON_INT => Json::Int(c.u64()? as i64),
        JSON_UINT => Json::UInt(c.u64()?),
        JSON_FLOAT => Json::Float(c.f64()?),
        JSON_STR => Json::Str(text(c.bytes()?)?),
        JSON_ARR => {
            let n = c.count()?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_json(c, depth + 1)?);
            }
            Json::Arr(items)
        }
        JSON_OBJ => {
            let n = c.count()?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                let k = text(c.bytes()?)?;
                members.push((k, read_json(c, depth + 1)?));
            }
            Json::Obj(members)
        }
        t => return Err(format!("unknown JSON tag {t}")),
    })
}

/// Function libraries: count, then name and code of each.
pub fn put_functions(out: &mut Vec<u8>, db: &Db) {
    put_uint(out, db.functions().len() as u64);
    for (name, code) in db.functions() {
        put_bytes(out, name.as_bytes());
        put_bytes(out, code);
    }
}

pub fn read_functions(c: &mut Cursor<'_>, db: &mut Db) -> Result<(), String> {
    let n = c.count()?;
    for _ in 0..n {
        let name = String::from_utf8(c.bytes()?.to_vec())
            .map_err(|_| "a library name that is not UTF-8".to_string())?;
        db.set_function_library(&name, c.bytes()?.to_vec());
    }
    Ok(())
}

const ACL_ENABLED: u8 = 1;
const ACL_NOPASS: u8 = 2;
const ACL_ALL_CHANNELS: u8 = 4;

/// ACL users, then the deletions per name.
pub fn put_acl(out: &mut Vec<u8>, db: &Db) {
    put_uint(out, db.acl.users.len() as u64);
    for (name, u) in &db.acl.users {
        put_bytes(out, name.as_bytes());
        let mut flags = 0;
        if u.enabled {
            flags |= ACL_ENABLED;
        }
        if u.nopass {
            flags |= ACL_NOPASS;
        }
        if u.all_channels {
            flags |= ACL_ALL_CHANNELS;
        }
        out.push(flags);
        put_uint(out, u.passwords.len() as u64);
        for p in &u.passwords {
            put_bytes(out, p.as_bytes());
        }
        put_uint(out, u.keys.len() as u64);
        for (perm, pattern) in &u.keys {
            out.push(match perm {
                KeyPerm::Read => 1,
                KeyPerm::Write => 2,
                KeyPerm::ReadWrite => 3,
            });
            put_bytes(out, pattern);
        }
        put_uint(out, u.channels.len() as u64);
        for ch in &u.channels {
            put_bytes(out, ch);
        }
        put_uint(out, u.generation);
        out.push(match u.sanitize {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        });
        put_uint(out, u.rules.len() as u64);
        for r in &u.rules {
            put_bytes(out, r.as_bytes());
        }
    }
    let deleted = db.acl.deletions();
    put_uint(out, deleted.len() as u64);
    for (name, n) in deleted {
        put_bytes(out, name.as_bytes());
        put_uint(out, *n);
    }
}

pub fn read_acl(c: &mut Cursor<'_>, db: &mut Db) -> Result<(), String> {
    let text = |b: &[u8]| {
        String::from_utf8(b.to_vec()).map_err(|_| "an ACL string that is not UTF-8".to_string())
    };
    let mut users = BTreeMap::new();
    let n = c.count()?;
    for _ in 0..n {
        let name = text(c.bytes()?)?;
        let flags = c.u8()?;
        if flags & !(ACL_ENABLED | ACL_NOPASS | ACL_ALL_CHANNELS) != 0 {
            return Err(format!("unknown ACL flags {flags:#04x}"));
        }
        let mut u = AclUser {
            enabled: flags & ACL_ENABLED != 0,
            nopass: flags & ACL_NOPASS != 0,
            all_channels: flags & ACL_ALL_CHANNELS != 0,
            passwords: Vec::new(),
            keys: Vec::new(),
            channels: Vec::new(),
            generation: 0,
            sanitize: None,
            rules: Vec::new(),
        };
        for _ in 0..c.count()? {
            u.passwords.push(text(c.bytes()?)?);
        }
        for _ in 0..c.count()? {
            let perm = match c.u8()? {
                1 => KeyPerm::Read,
                2 => KeyPerm::Write,
                3 => KeyPerm::ReadWrite,
                p => return Err(format!("unknown key permission {p}")),
            };
            u.keys.push((perm, c.bytes()?.to_vec()));
        }
        for _ in 0..c.count()? {
            u.channels.push(c.bytes()?.to_vec());
        }
        u.generation = c.uint()?;
        u.sanitize = match c.u8()? {
            0 => None,
            1 => Some(false),
            2 => Some(true),
            s => return Err(format!("unknown sanitize-payload value {s}")),
        };
        for _ in 0..c.count()? {
            u.rules.push(text(c.bytes()?)?);
        }
        users.insert(name, u);
    }
    let mut deleted = BTreeMap::new();
    for _ in 0..c.count()? {
        let name = text(c.bytes()?)?;
        deleted.insert(name, c.uint()?);
    }
    db.acl.restore(users, deleted);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards `ENTRY_BYTES_MIN`, the bound on a snapshot's declared key count: no key takes
    /// fewer bytes than the smallest one, an empty name holding an empty string.
    #[test]
    fn the_smallest_key_takes_entry_bytes_min() {
        let mut out = Vec::new();
        let e = Entry::new(Value::Str(crate::state::Str::from(Vec::new())), None, 0);
        put_entry(&mut out, b"", &e).expect("put");
        assert_eq!(out.len(), ENTRY_BYTES_MIN);
        let (k, back) = read_entry(&mut Cursor::new(&out)).expect("read");
        assert!(k.is_empty() && back.expire_at_ms().is_none());
    }
}
