//! Server and connection commands that make sense for one database over REST, with those that
//! read the server around the state (INFO, CONFIG GET, PUBSUB, PUBLISH) through
//! `ctx::Server`.

use super::args::is;
use super::ctx::{Ctx, SnapshotAsk};
use crate::glob::glob_match;
use crate::reply::{errors, Reply};

pub fn ping(a: &[Vec<u8>]) -> Reply {
    match a.len() {
        1 => Reply::Status("PONG".into()),
        2 => Reply::Bulk(a[1].clone()),
        _ => Reply::err(errors::wrong_arity("ping")),
    }
}

pub fn echo(a: &[Vec<u8>]) -> Reply {
    Reply::Bulk(a[1].clone())
}

pub fn dbsize(ctx: &Ctx) -> Reply {
    Reply::Int(ctx.db.len() as i64)
}

/// `WAIT numreplicas timeout`: a single server has no replicas (it answers 0, as a standalone
/// Redis does); a cluster's leader answers at once how many followers hold every entry it
/// has (its writes are answered only once a majority holds them), a follower 0.
pub fn wait(ctx: &Ctx, a: &[Vec<u8>]) -> Reply {
    match (super::args::int_arg(&a[1]), super::args::int_arg(&a[2])) {
        (Ok(_), Ok(t)) if t >= 0 => Reply::Int(
            ctx.server
                .facts()
                .cluster
                .filter(|c| c.leading)
                .map_or(0, |c| c.replicas_caught_up as i64),
        ),
        (Ok(_), Ok(_)) => Reply::err("ERR timeout is negative"),
        (Err(e), _) | (_, Err(e)) => e,
    }
}

/// FLUSHDB and FLUSHALL, with the optional ASYNC or SYNC (both synchronous here).
pub fn flush(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    match a.len() {
        1 => {}
        2 if is(&a[1], "async") || is(&a[1], "sync") => {}
        _ => return Reply::err(errors::SYNTAX),
    }
    ctx.db.clear();
    ctx.dirty = true;
    ctx.log_as(vec![b"FLUSHALL".to_vec()]);
    Reply::ok()
}

pub fn time(ctx: &Ctx) -> Reply {
    let us = ctx.now_ms * 1000;
    Reply::Array(vec![
        Reply::bulk((us / 1_000_000).to_string()),
        Reply::bulk((us % 1_000_000).to_string()),
    ])
}

/// The parameters CONFIG GET answers: what tidepool actually does, in Redis's names.
/// `appendfsync` and `port` depend on how the server was started.
fn config_params(appendfsync: &str, port: u16, maxmemory: u64) -> Vec<(&'static str, String)> {
    let fixed: &[(&str, &str)] = &[
        ("appendonly", "yes"),
        ("save", ""),
        ("databases", "1"),
        ("maxmemory-policy", "noeviction"),
        ("maxclients", "10000"),
        ("timeout", "0"),
        ("notify-keyspace-events", ""),
        ("hash-max-listpack-entries", "128"),
        ("hash-max-listpack-value", "64"),
        ("hash-max-ziplist-entries", "128"),
        ("hash-max-ziplist-value", "64"),
        ("set-max-intset-entries", "512"),
        ("set-max-listpack-entries", "128"),
        ("zset-max-listpack-entries", "128"),
        ("zset-max-listpack-value", "64"),
        ("zset-max-ziplist-entries", "128"),
        ("zset-max-ziplist-value", "64"),
        ("list-max-listpack-size", "-2"),
        ("list-max-ziplist-size", "-2"),
        ("stream-node-max-entries", "100"),
        ("stream-node-max-bytes", "4096"),
        ("proto-max-bulk-len", "536870912"),
    ];
    let mut out: Vec<(&str, String)> = fixed.iter().map(|(k, v)| (*k, v.to_string())).collect();
    out.push(("appendfsync", appendfsync.to_string()));
    out.push(("port", port.to_string()));
    out.push(("maxmemory", maxmemory.to_string()));
    out
}

/// `CONFIG GET pattern [pattern ...]`: name and value of every parameter that matches, each
/// once.
pub fn config_get(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let facts = ctx.server.facts();
    let params = config_params(facts.appendfsync, facts.listen_port, facts.memory_max);
    let mut out = Vec::new();
    for (name, value) in &params {
        if a[2..].iter().any(|p| glob_match(p, name.as_bytes(), true)) {
            out.push(Reply::bulk(*name));
            out.push(Reply::bulk(value.as_str()));
        }
    }
    Reply::Array(out)
}

/// `PUBLISH`.
pub fn publish(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(ctx.server.publish(&a[1], &a[2]))
}

/// `SPUBLISH`: to the shard channel's subscribers (SSUBSCRIBE over RESP) only, as in Redis.
pub fn spublish(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    Reply::Int(ctx.server.publish_shard(&a[1], &a[2]))
}

/// The PUBSUB subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PubSub {
    Channels,
    NumSub,
    NumPat,
    ShardChannels,
    ShardNumSub,
    Help,
}

/// PUBSUB `sub`.
pub fn pubsub(ctx: &mut Ctx, sub: PubSub, a: &[Vec<u8>]) -> Reply {
    match sub {
        PubSub::Channels => {
            let pat = a.get(2);
            Reply::Array(
                ctx.server
                    .channels()
                    .into_iter()
                    .filter(|c| pat.is_none_or(|p| glob_match(p, c, false)))
                    .map(Reply::Bulk)
                    .collect(),
            )
        }
        PubSub::NumSub => Reply::Array(
            a[2..]
                .iter()
                .flat_map(|c| {
                    let n = ctx.server.subscribers(c);
                    [Reply::bulk(c.as_slice()), Reply::Int(n as i64)]
                })
                .collect(),
        ),
        PubSub::NumPat => Reply::Int(ctx.server.patterns() as i64),
        PubSub::ShardChannels => {
            let pat = a.get(2);
            Reply::Array(
                ctx.server
                    .shard_channels()
                    .into_iter()
                    .filter(|c| pat.is_none_or(|p| glob_match(p, c, false)))
                    .map(Reply::Bulk)
                    .collect(),
            )
        }
        PubSub::ShardNumSub => Reply::Array(
            a[2..]
                .iter()
                .flat_map(|c| {
                    let n = ctx.server.shard_subscribers(c);
                    [Reply::bulk(c.as_slice()), Reply::Int(n as i64)]
                })
                .collect(),
        ),
        PubSub::Help => Reply::Array(
            [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "NUMPAT",
                "NUMSUB [<channel> ...]",
                "SHARDCHANNELS [<pattern>]",
                "SHARDNUMSUB [<shardchannel> ...]",
                "HELP",
            ]
            .iter()
            .map(|s| Reply::Status(s.to_string().into()))
            .collect(),
        ),
    }
}

/// Bytes as Redis's `bytesToHuman` prints them (`1.50M`).
fn human_bytes(b: u64) -> String {
    let units = [
        (1u64 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in units {
        if b >= size {
            return format!("{:.2}{unit}", b as f64 / size as f64);
        }
    }
    format!("{b}B")
}

/// `INFO [section ...]`: the sections tidepool can answer truthfully.
pub fn info(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let wanted: Vec<String> = a[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| w == "all" || w == "default" || w == "everything");
    let want = |s: &str| all || wanted.iter().any(|w| w == s);
    let f = ctx.server.facts();
    let mut out = String::new();
    if want("server") {
        out.push_str(&format!(
            "# Server\r\nredis_version:7.0.15\r\ntidepool_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            f.listen_port,
            f.uptime_s,
            f.uptime_s / 86400
        ));
    }
    if want("memory") {
        let used = crate::alloc::sample();
        out.push_str(&format!(
            "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nmaxmemory:{}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:noeviction\r\ntidepool_db_data_bytes:{}\r\ntidepool_db_max_data_bytes:{}\r\ntidepool_db_keys:{}\r\n\r\n",
            human_bytes(used),
            f.memory_max,
            human_bytes(f.memory_max),
            ctx.db.data_bytes(),
            ctx.limits.data_bytes_max.unwrap_or(0),
            ctx.db.len(),
        ));
    }
    if want("clients") {
        out.push_str(&format!(
            "# Clients\r\nmonitors:{}\r\npubsub_subscribers:{}\r\n\r\n",
            f.monitors, f.subscribers
        ));
    }
    if want("persistence") {
        let s = &f.snapshots;
        let status = if s.last_ok { "ok" } else { "err" };
        let running = s.running_s.is_some();
        out.push_str(&format!(
            "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{status}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:{}\r\nrdb_saves:{}\r\naof_enabled:1\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:{}\r\naof_last_rewrite_time_sec:{}\r\naof_current_rewrite_time_sec:{}\r\naof_last_bgrewrite_status:{status}\r\naof_rewrites:{}\r\naof_last_write_status:{}\r\naof_current_size:{}\r\naof_base_size:{}\r\ntidepool_fsync:{}\r\ntidepool_log_last_seq:{}\r\ntidepool_log_durable_seq:{}\r\ntidepool_log_syncs:{}\r\ntidepool_log_writable:{}\r\ntidepool_snapshot_bytes:{}\r\n\r\n",
            s.changes_since,
            u8::from(running),
            s.last_save_s,
            s.last_took_s.map_or(-1, |t| t as i64),
            s.running_s.map_or(-1, |t| t as i64),
            s.saves,
            u8::from(running),
            u8::from(s.scheduled),
            s.last_took_s.map_or(-1, |t| t as i64),
            s.running_s.map_or(-1, |t| t as i64),
            s.saves,
            if f.log_writable { "ok" } else { "err" },
            s.log_bytes,
            s.snapshot_bytes,
            f.fsync,
            f.log_last_seq,
            f.log_durable_seq,
            f.log_syncs,
            u8::from(f.log_writable),
            s.snapshot_bytes,
        ));
    }
    if want("stats") {
        out.push_str(&format!(
            "# Stats\r\ntotal_commands_processed:{}\r\ntidepool_requests:{}\r\ntidepool_server_commands_processed:{}\r\n\r\n",
            f.usage.commands, f.usage.requests, f.commands_processed
        ));
    }
    if want("replication") {
        // A single server is a master without replicas; a cluster node a master while it
        // leads, a replica (`slave`, as Redis 7.0 says) otherwise, with its cluster's view.
        match &f.cluster {
            None => out.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n"),
            Some(c) => {
                let role = if c.leading { "master" } else { "slave" };
                out.push_str(&format!(
                    "# Replication\r\nrole:{role}\r\nconnected_slaves:{}\r\nmaster_repl_offset:{}\r\ntidepool_cluster_node_id:{}\r\ntidepool_cluster_leader_id:{}\r\ntidepool_cluster_term:{}\r\ntidepool_cluster_peers:{}\r\n\r\n",
                    if c.leading { c.peers.len() } else { 0 },
                    f.log_durable_seq,
                    c.node_id,
                    c.leader,
                    c.term,
                    c.peers.join(","),
                ));
            }
        }
    }
    // Not in the default set, as in Redis: asked for by name, or with `all`/`everything`.
    if wanted
        .iter()
        .any(|w| w == "commandstats" || w == "all" || w == "everything")
    {
        out.push_str("# Commandstats\r\n");
        for (name, calls) in &f.usage.by_command {
            out.push_str(&format!(
                "cmdstat_{name}:calls={calls},usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\n"
            ));
        }
        out.push_str("\r\n");
    }
    if want("keyspace") {
        out.push_str("# Keyspace\r\n");
        if !ctx.db.is_empty() {
            out.push_str(&format!(
                "db0:keys={},expires={},avg_ttl=0\r\n",
                ctx.db.len(),
                ctx.db.expires_count()
            ));
        }
    }
    let mut text = out.trim_end_matches("\r\n").to_string();
    text.push_str("\r\n");
    Reply::Bulk(text.into_bytes())
}

/// LASTSAVE: when the last snapshot was written, Unix seconds.
pub fn lastsave(ctx: &mut Ctx) -> Reply {
    Reply::Int(ctx.server.facts().snapshots.last_save_s as i64)
}

/// SAVE, BGSAVE [SCHEDULE] (`Background`, its option read here) and BGREWRITEAOF: the
/// snapshot itself is the server's (`Server::snapshot`).
pub fn snapshot(ctx: &mut Ctx, ask: SnapshotAsk, a: &[Vec<u8>]) -> Reply {
    match ask {
        SnapshotAsk::Save | SnapshotAsk::Rewrite => ctx.server.snapshot(ask),
        SnapshotAsk::Background { .. } => match a.get(1) {
            None => ctx
                .server
                .snapshot(SnapshotAsk::Background { schedule: false }),
            Some(s) if s.eq_ignore_ascii_case(b"schedule") => ctx
                .server
                .snapshot(SnapshotAsk::Background { schedule: true }),
            Some(_) => Reply::err("ERR syntax error"),
        },
    }
}

/// The CLIENT subcommands a REST client may send, answered as a request without a
/// connection can: SETINFO and SETNAME check their value as Redis does and change nothing (a
/// request's connection ends with it), GETNAME is nil, LIST is empty (as the hosted service
/// answers), NO-EVICT and NO-TOUCH accept their switch. The others are refused as
/// connection state (their rows in `table`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    SetInfo,
    SetName,
    GetName,
    List,
    /// NO-EVICT and NO-TOUCH: a switch, `on` or `off`.
    Switch,
}

/// CLIENT `sub`.
pub fn client(_ctx: &mut Ctx, sub: Client, a: &[Vec<u8>]) -> Reply {
    // Redis's `validateClientAttr`: printable ASCII, no spaces.
    let plain = |v: &[u8]| v.iter().all(|&c| (b'!'..=b'~').contains(&c));
    match sub {
        Client::SetInfo => {
            let attr = String::from_utf8_lossy(&a[2]).into_owned();
            if !is(&a[2], "lib-name") && !is(&a[2], "lib-ver") {
                return Reply::Error(format!("ERR Unrecognized option '{attr}'"));
            }
            if !plain(&a[3]) {
                return Reply::Error(format!(
                    "ERR {attr} cannot contain spaces, newlines or special characters."
                ));
            }
            Reply::ok()
        }
        Client::SetName if !plain(&a[2]) => {
            Reply::err("ERR Client names cannot contain spaces, newlines or special characters.")
        }
        Client::SetName => Reply::ok(),
        Client::GetName => Reply::Nil,
        Client::List => Reply::bulk(""),
        Client::Switch if is(&a[2], "on") || is(&a[2], "off") => Reply::ok(),
        Client::Switch => Reply::err(errors::SYNTAX),
    }
}

/// `WAITAOF numlocal numreplicas timeout`: whether this server's log has synced every write
/// made so far (1 or 0), and no replicas (0). It never blocks: a request cannot wait on a
/// connection it does not keep, and with `--fsync always` every acknowledged write is synced.
pub fn waitaof(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let mut n = [0i64; 3];
    for (i, v) in a[1..4].iter().enumerate() {
        match super::args::int_arg(v) {
            Ok(x) => n[i] = x,
            Err(e) => return e,
        }
    }
    if n[2] < 0 {
        return Reply::err("ERR timeout is negative");
    }
    let f = ctx.server.facts();
    let synced = i64::from(f.log_durable_seq >= f.log_last_seq);
    Reply::Array(vec![Reply::Int(synced), Reply::Int(0)])
}
