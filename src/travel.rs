//! Time travel: how a key came to be what it is, and a database as it was at a past point,
//! rebuilt from the data directory by the state machine's own recovery (the machinery of
//! `serve --at`), never by the executor. The console's routes and `tidepool-log history` use it.
//!
//! Everything here reads a log that a server may be appending to: segments are copied into
//! memory with ordinary reads (a map of a file the server cuts or rotates could fault), and
//! a torn tail is the log's end.

use crate::command::table;
use crate::machine::{self, Machine, Position, Recover, Start};
use crate::point::Point;
use crate::record::Record;
use crate::reply::Reply;
use crate::state::databases::DbId;
use crate::wal::reader::{self, ReadMode};
use std::path::Path;
use std::time::Instant;

/// Recovery that reads and never writes, from `from`, for a log a server may be writing,
/// given up at `deadline`.
fn reading<'a>(from: Start, deadline: Option<Instant>) -> Recover<'a> {
    Recover {
        access: machine::Access::Read(ReadMode::Copied),
        deadline,
        ..Recover::read(from)
    }
}

/// The keys a command names, as Redis's ACL finds them (key specifications, numkeys and
/// keywords such as STORE included; none for an unknown command).
pub fn keys_of(cmd: &[Vec<u8>]) -> Vec<&[u8]> {
    match table::global().lookup(cmd) {
        table::Lookup::Found(info) => info.key_refs(cmd).into_iter().map(|k| k.key).collect(),
        _ => Vec::new(),
    }
}

/// Whether `cmd` changes every key of its database (FLUSHDB, FLUSHALL), naming none.
pub fn touches_every_key(cmd: &[Vec<u8>]) -> bool {
    cmd.first()
        .is_some_and(|n| n.eq_ignore_ascii_case(b"flushdb") || n.eq_ignore_ascii_case(b"flushall"))
}

/// A key's value as one read shows it: its type (`none` when there is no key) and the reply of
/// the read that shows it, whole or, with `items_max`, its first items (a string's first
/// `items_max` * 64 bytes).
pub fn value_of(
    m: &mut Machine,
    db: DbId,
    key: &[u8],
    ts: u64,
    items_max: Option<usize>,
) -> (String, Reply) {
    let ty = match m.read(db, ts, &[b"TYPE", key]) {
        Reply::Status(s) => s.into_owned(),
        // No such database then: no such key either.
        _ => return ("none".into(), Reply::Nil),
    };
    let last = items_max.map_or_else(|| "-1".to_string(), |n| (n.max(1) - 1).to_string());
    let count = items_max.map_or_else(|| "0".to_string(), |n| n.max(1).to_string());
    let bytes_last =
        items_max.map_or_else(|| "-1".to_string(), |n| (n.max(1) * 64 - 1).to_string());
    let last = last.as_bytes();
    let read: Vec<&[u8]> = match (ty.as_str(), items_max) {
        ("none", _) => return (ty, Reply::Nil),
        ("string", _) => vec![b"GETRANGE", key, b"0", bytes_last.as_bytes()],
        ("hash", None) => vec![b"HGETALL", key],
        ("hash", Some(_)) => vec![b"HRANDFIELD", key, count.as_bytes(), b"WITHVALUES"],
        ("list", _) => vec![b"LRANGE", key, b"0", last],
        ("set", None) => vec![b"SORT", key, b"ALPHA"],
        ("set", Some(_)) => vec![b"SORT", key, b"ALPHA", b"LIMIT", b"0", count.as_bytes()],
        ("zset", _) => vec![b"ZRANGE", key, b"0", last, b"WITHSCORES"],
        ("stream", None) => vec![b"XRANGE", key, b"-", b"+"],
        ("stream", Some(_)) => vec![b"XRANGE", key, b"-", b"+", b"COUNT", count.as_bytes()],
        _ => vec![b"JSON.GET", key],
    };
    let reply = m.read(db, ts, &read);
    (ty, reply)
}

/// One record that touched a key.
pub struct Change {
    pub at: Position,
    /// The record's commands that name the key.
    pub commands: Vec<Vec<Vec<u8>>>,
    /// The key's type and value after the record.
    pub ty: String,
    pub value: Reply,
}

pub struct History {
    /// The newest changes, oldest first.
    pub changes: Vec<Change>,
    /// Changes older than those, not kept (the caller's bound).
    pub dropped: u64,
    /// Where the history begins when the log before it was compacted behind a snapshot: the
    /// snapshot's position, with the key's type and value there.
    pub from_snapshot: Option<(Position, String, Reply)>,
    /// The deadline passed before the end of the log: the changes end here (the last record
    /// replayed), and later ones are not shown.
    pub cut_at: Option<Position>,
}

/// The changes of `key` in database `db`, from the oldest state the directory can rebuild to
/// the end of its log: the newest `keep` of them, each with its value after (`items_max` as for
/// [`value_of`]).
/// Past `deadline` the history ends where the replay got to (`History::cut_at`).
pub fn key_history(
    data_dir: &Path,
    db: DbId,
    key: &[u8],
    keep: usize,
    items_max: Option<usize>,
    deadline: Option<Instant>,
) -> Result<History, String> {
    let mut last = None;
    let mut changes: std::collections::VecDeque<Change> = std::collections::VecDeque::new();
    let mut dropped = 0u64;
    let mut observe = |m: &mut Machine, at: Position, record: &Record| {
        last = Some(at);
        let Some((rdb, cmds)) = record.kv_commands() else {
            return;
        };
        if rdb != db {
            return;
        }
        let touching: Vec<Vec<Vec<u8>>> = cmds
            .iter()
            .filter(|c| touches_every_key(c) || keys_of(c).contains(&key))
            .cloned()
            .collect();
        if touching.is_empty() {
            return;
        }
        let (ty, value) = value_of(m, db, key, at.unix_ms, items_max);
        if changes.len() == keep.max(1) {
            changes.pop_front();
            dropped += 1;
        }
        changes.push_back(Change {
            at,
            commands: touching,
            ty,
            value,
        });
    };
    let recovered = machine::recover(
        data_dir,
        Recover {
            observe: Some(&mut observe),
            ..reading(Start::Oldest, deadline)
        },
    );
    let (snapshot, cut_at) = match recovered {
        Ok(r) => (r.snapshot, None),
        Err(e) if e.contains(machine::DEADLINE_PASSED) => (None, last),
        Err(e) => return Err(e),
    };
    // Started from a snapshot (the log before it was compacted): the key as the snapshot
    // holds it begins the history.
    let from_snapshot = match snapshot {
        Some((seq, _)) => {
            let (at, (ty, value)) = at(data_dir, Point::Seq(seq), deadline, |m, ts| {
                value_of(m, db, key, ts, items_max)
            })?;
            Some((at, ty, value))
        }
        None => None,
    };
    Ok(History {
        changes: changes.into(),
        dropped,
        from_snapshot,
        cut_at,
    })
}

/// The state as it was at `point` (the last record at or before it), and what `look` answers
/// of it. `look` gets the record's time, for the reads it makes. Past `deadline` it fails with
/// [`machine::DEADLINE_PASSED`].
pub fn at<T>(
    data_dir: &Path,
    point: Point,
    deadline: Option<Instant>,
    look: impl FnOnce(&mut Machine, u64) -> T,
) -> Result<(Position, T), String> {
    let mut r = machine::recover(
        data_dir,
        Recover {
            upto: Some(point),
            ..reading(Start::Newest, deadline)
        },
    )?;
    let at = r.machine.position();
    let answer = look(&mut r.machine, at.unix_ms);
    Ok((at, answer))
}

/// The keys of database `db` in `m` that match `pattern` (all with None) and `keep`, in SCAN's
/// order, at most `max`; and whether there were more of them.
pub fn keys(
    m: &mut Machine,
    db: DbId,
    ts: u64,
    pattern: Option<&[u8]>,
    keep: impl Fn(&[u8]) -> bool,
    max: usize,
) -> (Vec<Vec<u8>>, bool) {
    let mut out = Vec::new();
    let mut cursor = b"0".to_vec();
    loop {
        let mut args: Vec<&[u8]> = vec![b"SCAN", &cursor, b"COUNT", b"1000"];
        if let Some(p) = pattern {
            args.extend([&b"MATCH"[..], p]);
        }
        let Reply::Array(parts) = m.read(db, ts, &args) else {
            return (out, false);
        };
        let mut parts = parts.into_iter();
        let (Some(Reply::Bulk(next)), Some(Reply::Array(found))) = (parts.next(), parts.next())
        else {
            return (out, false);
        };
        for k in found {
            if let Reply::Bulk(k) = k {
                if !keep(&k) {
                    continue;
                }
                if out.len() == max {
                    return (out, true);
                }
                out.push(k);
            }
        }
        if next == b"0" {
            return (out, false);
        }
        cursor = next;
    }
}

/// One bar of a log's timeline.
pub struct Bucket {
    /// The bucket's first millisecond.
    pub start_ms: u64,
    pub records: u64,
    /// The last record in it (a point to travel to).
    pub last_seq: u64,
}

/// The records of database `db` per `bucket_ms` milliseconds over the log that `wal_dir` still
/// holds, oldest first; the bucket doubles while there would be more than `buckets_max`.
/// Returns the bucket size used.
pub fn timeline(
    wal_dir: &Path,
    db: DbId,
    bucket_ms: u64,
    buckets_max: usize,
) -> Result<(u64, Vec<Bucket>), String> {
    use crate::record::{KIND_KV_COMMANDS, KIND_KV_COMMANDS_IN};
    let mut size = bucket_ms.max(1);
    let mut buckets: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    reader::scan_with(wal_dir, ReadMode::Copied, |_, _, frame| {
        let mine = match frame.kind {
            KIND_KV_COMMANDS => db == crate::state::databases::DEFAULT_DB,
            KIND_KV_COMMANDS_IN => Record::decode(frame.kind, frame.payload)
                .ok()
                .and_then(|r| r.kv_commands().map(|(d, _)| d == db))
                .unwrap_or(false),
            _ => false,
        };
        if mine {
            let b = buckets
                .entry(frame.timestamp_unix_ms - frame.timestamp_unix_ms % size)
                .or_default();
            b.0 += 1;
            b.1 = b.1.max(frame.seq);
            while buckets.len() > buckets_max.max(1) {
                size = size.saturating_mul(2);
                let old = std::mem::take(&mut buckets);
                for (start, (n, last)) in old {
                    let b = buckets.entry(start - start % size).or_default();
                    b.0 += n;
                    b.1 = b.1.max(last);
                }
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok((
        size,
        buckets
            .into_iter()
            .map(|(start_ms, (records, last_seq))| Bucket {
                start_ms,
                records,
                last_seq,
            })
            .collect(),
    ))
}
