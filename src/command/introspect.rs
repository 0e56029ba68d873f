//! What the server says about itself: COMMAND (INFO, DOCS, LIST, GETKEYS) from the command
//! table, CONFIG GET for the parameters that mean something here, and MEMORY USAGE.
//!
//! The table tidepool carries holds arity, flags, key positions, ACL categories, group and
//! summary. COMMAND INFO therefore answers empty tips and key specifications, and COMMAND DOCS
//! the summary and group only; nothing is made up to fill the rest.

use super::args::tri;
use super::args::{int_arg, is};
use super::ctx::Ctx;
use super::info::{CommandInfo, CommandTable, Lookup};
use crate::glob::glob_match;
use crate::reply::{errors, Reply};
use crate::state::{Entry, Value};

fn sorted_entries(t: &CommandTable) -> Vec<&CommandInfo> {
    let mut all: Vec<&CommandInfo> = t.all().collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

fn subcommands_of<'t>(t: &'t CommandTable, name: &str) -> Vec<&'t CommandInfo> {
    let prefix = format!("{name}|");
    sorted_entries(t)
        .into_iter()
        .filter(|i| i.name.starts_with(&prefix))
        .collect()
}

/// One COMMAND INFO entry, in Redis 7.0's ten-element layout.
fn info_reply(t: &CommandTable, i: &CommandInfo) -> Reply {
    let subs = if i.has_subcommands {
        subcommands_of(t, &i.name)
            .into_iter()
            .map(|s| info_reply(t, s))
            .collect()
    } else {
        Vec::new()
    };
    Reply::Array(vec![
        Reply::bulk(i.name.as_str()),
        Reply::Int(i.arity as i64),
        Reply::Array(
            i.flags
                .iter()
                .map(|f| Reply::Status(f.clone().into()))
                .collect(),
        ),
        Reply::Int(i.first_key as i64),
        Reply::Int(i.last_key as i64),
        Reply::Int(i.step as i64),
        Reply::Array(
            i.categories
                .iter()
                .map(|c| Reply::Status(c.clone().into()))
                .collect(),
        ),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(subs),
    ])
}

/// One COMMAND DOCS entry: `name, [summary, ..., group, ..., subcommands?]`.
/// Redis 7.0's own COMMAND DOCS, with every argument (`tools/gen-command-docs.py`).
const REDIS_7_0_DOCS: &str = include_str!("redis-7.0-command-docs.json");

/// Redis 7.0's documentation of command `name` (`x|y` for a subcommand), as its reply.
fn redis_docs(name: &str) -> Option<Reply> {
    static DOCS: std::sync::OnceLock<serde_json::Map<String, serde_json::Value>> =
        std::sync::OnceLock::new();
    let docs = DOCS.get_or_init(|| serde_json::from_str(REDIS_7_0_DOCS).unwrap_or_default());
    let doc = match name.split_once('|') {
        None => docs.get(name)?,
        Some((parent, _)) => {
            let fields = docs.get(parent)?.as_array()?;
            let at = fields
                .iter()
                .position(|f| f.as_str() == Some("subcommands"))?;
            let subs = fields.get(at + 1)?.as_array()?;
            let at = subs.iter().position(|s| s.as_str() == Some(name))?;
            subs.get(at + 1)?
        }
    };
    Some(json_reply(doc))
}

/// A reply stored as typed JSON: a string is a bulk string, a number an integer, a list an
/// array, `{"status": text}` a status reply, null a nil.
fn json_reply(v: &serde_json::Value) -> Reply {
    match v {
        serde_json::Value::String(s) => Reply::bulk(s.as_bytes()),
        serde_json::Value::Number(n) => Reply::Int(n.as_i64().unwrap_or(0)),
        serde_json::Value::Array(items) => Reply::Array(items.iter().map(json_reply).collect()),
        serde_json::Value::Object(o) => match o.get("status").and_then(|s| s.as_str()) {
            Some(s) => Reply::Status(s.to_string().into()),
            None => Reply::Nil,
        },
        serde_json::Value::Bool(b) => Reply::Int(i64::from(*b)),
        serde_json::Value::Null => Reply::Nil,
    }
}

/// A command's COMMAND DOCS entry: Redis 7.0's own, with its arguments, for the commands of its
/// table; the summary and group (and subcommands) for the newer ones.
fn docs_reply(t: &CommandTable, i: &CommandInfo, out: &mut Vec<Reply>) {
    out.push(Reply::bulk(i.name.as_str()));
    if let Some(doc) = redis_docs(&i.name) {
        out.push(doc);
        return;
    }
    let mut doc = vec![
        Reply::bulk("summary"),
        Reply::bulk(i.summary.as_str()),
        Reply::bulk("group"),
        Reply::bulk(i.group.as_str()),
    ];
    if i.has_subcommands {
        let mut subs = Vec::new();
        for s in subcommands_of(t, &i.name) {
            docs_reply(t, s, &mut subs);
        }
        doc.push(Reply::bulk("subcommands"));
        doc.push(Reply::Array(subs));
    }
    out.push(Reply::Array(doc));
}

fn find<'t>(t: &'t CommandTable, name: &[u8]) -> Option<&'t CommandInfo> {
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    t.get(&lower)
}

/// `COMMAND` alone: every top-level command's INFO entry.
pub fn command(t: &CommandTable) -> Reply {
    Reply::Array(
        sorted_entries(t)
            .into_iter()
            .filter(|i| !i.name.contains('|'))
            .map(|i| info_reply(t, i))
            .collect(),
    )
}

/// `COMMAND INFO [name ...]`: each entry, nil for an unknown name; all without names.
pub fn command_info(t: &CommandTable, a: &[Vec<u8>]) -> Reply {
    if a.len() == 2 {
        return command(t);
    }
    Reply::Array(
        a[2..]
            .iter()
            .map(|n| find(t, n).map(|i| info_reply(t, i)).unwrap_or(Reply::Nil))
            .collect(),
    )
}

/// `COMMAND DOCS [name ...]`: unknown names are left out, as Redis does.
pub fn command_docs(t: &CommandTable, a: &[Vec<u8>]) -> Reply {
    let mut out = Vec::new();
    if a.len() == 2 {
        for i in sorted_entries(t)
            .into_iter()
            .filter(|i| !i.name.contains('|'))
        {
            docs_reply(t, i, &mut out);
        }
    } else {
        for n in &a[2..] {
            if let Some(i) = find(t, n) {
                docs_reply(t, i, &mut out);
            }
        }
    }
    Reply::Array(out)
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`.
pub fn command_list(t: &CommandTable, a: &[Vec<u8>]) -> Reply {
    let keep: Box<dyn Fn(&CommandInfo) -> bool> = match a.len() {
        2 => Box::new(|_| true),
        5 if is(&a[2], "filterby") => {
            let arg = a[4].clone();
            if is(&a[3], "module") {
                // No modules.
                Box::new(|_| false)
            } else if is(&a[3], "aclcat") {
                let cat = format!("@{}", String::from_utf8_lossy(&arg).to_ascii_lowercase());
                Box::new(move |i| i.categories.contains(&cat))
            } else if is(&a[3], "pattern") {
                Box::new(move |i| glob_match(&arg, i.name.as_bytes(), true))
            } else {
                return Reply::err(errors::SYNTAX);
            }
        }
        _ => return Reply::err(errors::SYNTAX),
    };
    Reply::Array(
        sorted_entries(t)
            .into_iter()
            .filter(|i| keep(i))
            .map(|i| Reply::bulk(i.name.as_str()))
            .collect(),
    )
}

/// The command GETKEYS and GETKEYSANDFLAGS look into (`a[2..]`), with Redis's refusals.
fn getkeys_target<'t, 'a>(
    t: &'t CommandTable,
    a: &'a [Vec<u8>],
) -> Result<(&'t CommandInfo, &'a [Vec<u8>]), Reply> {
    let args = &a[2..];
    let info = match t.lookup(args) {
        Lookup::Found(i) => i,
        _ => return Err(Reply::err("ERR Invalid command specified")),
    };
    if !info.arity_ok(args.len()) {
        return Err(Reply::err(
            "ERR Invalid number of arguments specified for command",
        ));
    }
    Ok((info, args))
}

/// `COMMAND GETKEYS command arg ...`: the key arguments, by the table's key positions.
pub fn command_getkeys(t: &CommandTable, a: &[Vec<u8>]) -> Reply {
    let (info, args) = tri!(getkeys_target(t, a));
    if info.movable_keys {
        // Redis finds these keys with key specifications tidepool's table does not hold; an
        // answer from the fixed positions would be wrong.
        return Reply::Error(format!(
            "ERR COMMAND GETKEYS for '{}' is not implemented by tidepool: its keys move with its arguments",
            info.name
        ));
    }
    let keys = info.keys(args);
    if keys.is_empty() {
        return Reply::err("ERR The command has no key arguments");
    }
    Reply::bulks(keys.into_iter().map(|k| k.to_vec()))
}

/// `COMMAND GETKEYSANDFLAGS command arg ...`: each key argument with its key flags.
pub fn command_getkeysandflags(t: &CommandTable, a: &[Vec<u8>]) -> Reply {
    let (info, args) = tri!(getkeys_target(t, a));
    let movable = info.movable_keys && info.own_keys.is_none();
    let found = match info.keys_and_flags(args) {
        Some(found) if !movable || info.key_specs.is_some() => found,
        _ => {
            return Reply::Error(format!(
                "ERR COMMAND GETKEYSANDFLAGS for '{}' is not implemented by tidepool: its table holds no key flags for it",
                info.name
            ))
        }
    };
    if found.is_empty() {
        return Reply::err("ERR The command has no key arguments");
    }
    Reply::Array(
        found
            .into_iter()
            .map(|(key, flags)| {
                Reply::Array(vec![
                    Reply::bulk(key),
                    Reply::Array(flags.into_iter().map(|f| Reply::Status(f.into())).collect()),
                ])
            })
            .collect(),
    )
}

/// The process's resident bytes now and at their peak, from /proc (0 where it cannot be read).
fn resident_bytes() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// This database's keys and an estimate of the bytes their data takes: the mean of up to
/// MEMORY_STATS_SAMPLE_KEYS keys' MEMORY USAGE estimates, times the number of keys.
fn dataset_estimate(ctx: &Ctx) -> (usize, u64) {
    let keys = ctx.db.len();
    let mut seen = 0u64;
    let mut bytes = 0u64;
    for (k, e) in ctx
        .db
        .raw()
        .iter()
        .take(crate::config::MEMORY_STATS_SAMPLE_KEYS)
    {
        seen += 1;
        bytes += approx_bytes(ctx, k, e) as u64;
    }
    let estimate = bytes.checked_div(seen).unwrap_or(0) * keys as u64;
    (keys, estimate)
}

/// `MEMORY STATS`: Redis's field names where tidepool has the figure. `peak.allocated` and
/// `total.allocated` are the whole process's resident bytes (every database's, and the
/// delivery service's); `dataset.bytes` is this database's estimate (see `dataset_estimate`).
pub fn memory_stats(ctx: &mut Ctx, _a: &[Vec<u8>]) -> Reply {
    let (rss, peak) = resident_bytes();
    let (keys, dataset) = dataset_estimate(ctx);
    let pct = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 * 100.0 / whole as f64
        }
    };
    let float = |v: f64| Reply::bulk(format!("{v}"));
    Reply::Array(vec![
        Reply::bulk("peak.allocated"),
        Reply::Int(peak as i64),
        Reply::bulk("total.allocated"),
        Reply::Int(rss as i64),
        Reply::bulk("overhead.total"),
        Reply::Int(rss.saturating_sub(dataset) as i64),
        Reply::bulk("keys.count"),
        Reply::Int(keys as i64),
        Reply::bulk("keys.bytes-per-key"),
        Reply::Int(if keys == 0 {
            0
        } else {
            (rss / keys as u64) as i64
        }),
        Reply::bulk("dataset.bytes"),
        Reply::Int(dataset as i64),
        Reply::bulk("dataset.percentage"),
        float(pct(dataset, rss)),
        Reply::bulk("peak.percentage"),
        float(pct(rss, peak)),
    ])
}

/// `MEMORY DOCTOR`: what tidepool can tell of its memory, in a sentence or two.
pub fn memory_doctor(ctx: &mut Ctx, _a: &[Vec<u8>]) -> Reply {
    let (rss, peak) = resident_bytes();
    let (keys, dataset) = dataset_estimate(ctx);
    let mut text = format!(
        "tidepool: this database holds {keys} keys, about {dataset} bytes of data by tidepool's estimate; the server's resident memory is {rss} bytes (peak {peak})."
    );
    if peak > 0 && rss * 2 < peak {
        text.push_str(" Resident memory is under half its peak: much was freed, and the allocator may keep some of it.");
    } else {
        text.push_str(" No memory issue found.");
    }
    Reply::bulk(text)
}

/// `MEMORY USAGE key [SAMPLES count]`: tidepool's estimate of the bytes it holds for the key
/// (its name, value and bookkeeping), nil when there is no key. It counts tidepool's own
/// structures, so it is not Redis's figure for the same data.
pub fn memory_usage(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    match a.len() {
        3 => {}
        5 if is(&a[3], "samples") => {
            tri!(int_arg(&a[4]));
        }
        _ => return Reply::err(errors::SYNTAX),
    }
    match ctx.db.get(&a[2], ctx.now_ms) {
        None => Reply::Nil,
        Some(e) => Reply::Int(approx_bytes(ctx, &a[2], e) as i64),
    }
}

/// What the key costs: its share of the keyspace's slots, its node (name and entry), and what
/// its value holds on the heap, each allocation counted as the allocator takes it
/// (`alloc::chunk`), so that the keys' figures add up to what the process holds for them.
fn approx_bytes(ctx: &Ctx, key: &[u8], e: &Entry) -> usize {
    use crate::alloc::chunk;
    let boxed = |size: usize| chunk(size);
    let value = match &e.value {
        Value::Str(s) => s.heap_bytes(),
        Value::Hash(h) => boxed(std::mem::size_of_val(&**h)) + h.heap_bytes(),
        Value::List(l) => boxed(std::mem::size_of_val(&**l)) + l.heap_bytes(),
        Value::Set(s) => boxed(std::mem::size_of_val(&**s)) + s.heap_bytes(|_| 0),
        Value::ZSet(z) => boxed(std::mem::size_of_val(&**z)) + z.heap_bytes(),
        Value::Stream(s) => boxed(std::mem::size_of_val(&**s)) + s.heap_bytes() + s.groups_bytes(),
        Value::Json(j) => j.mem_bytes(),
    };
    // A key with a TTL is also in the expiry index (a tree entry of its time and name).
    let expiry = if e.expire_at_ms().is_some() {
        40 + chunk(key.len())
    } else {
        0
    };
    ctx.db.raw().key_heap_bytes(key) + value + expiry
}
