//! Snapshots (issue 16): the state at one log position, written without stopping the server,
//! loaded at start-up with only the log after it replayed; compaction under `--log-retention`;
//! SAVE, BGSAVE, BGREWRITEAOF, LASTSAVE and INFO persistence; damaged snapshots.

use crate::common::sink::Sink;
use crate::common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tidepool::delivery::Delivery;
use tidepool::machine;
use tidepool::rng::Rng;
use tidepool::snapshot;
use tidepool::state::databases::Databases;
use tidepool::state::Db;
use tidepool::wal::reader;

/// The state after the snapshot at `from` (or none) and every record after it in the log.
fn rebuild(data: &Path, from: Option<&Path>) -> (Databases, Delivery) {
    let start = match from {
        Some(p) => machine::Start::File(p.to_path_buf()),
        None => machine::Start::Empty,
    };
    let r = machine::recover(data, machine::Recover::read(start)).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.damage.is_none(), "{:?}", r.damage);
    r.machine.into_parts()
}

fn assert_same(what: &str, a: &(Databases, Delivery), b: &(Databases, Delivery)) {
    if let Some(d) = a.0.difference(&b.0) {
        panic!("{what}: the key-value state differs: {d}");
    }
    assert!(
        a.1.image() == b.1.image(),
        "{what}: the delivery state differs:\n{:?}\n{:?}",
        a.1.image(),
        b.1.image()
    );
    assert_eq!(
        a.1.indexes_text(),
        b.1.indexes_text(),
        "{what}: the delivery indexes differ"
    );
}

fn info_field(c: &mut Http, field: &str) -> String {
    let text = match c.cmd_str(&["INFO", "persistence"]) {
        Canon::Str(b) => String::from_utf8(b).expect("utf8"),
        other => panic!("INFO: {other:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
        .trim()
        .to_string()
}

/// Waits until no background snapshot runs, and returns how many were written.
fn wait_saved(c: &mut Http) -> u64 {
    let until = Instant::now() + Duration::from_secs(30);
    while info_field(c, "rdb_bgsave_in_progress") != "0" {
        assert!(
            Instant::now() < until,
            "the background snapshot never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_field(c, "rdb_last_bgsave_status"), "ok");
    info_field(c, "rdb_saves").parse().expect("saves")
}

fn snapshots_in(data: &Path) -> Vec<PathBuf> {
    snapshot::list(&snapshot::snapshot_dir(data))
        .expect("list")
        .into_iter()
        .map(|s| s.path)
        .collect()
}

fn s(v: &[&str]) -> Vec<Vec<u8>> {
    v.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// One random key-value command from every family that keeps state: strings, lists, sets,
/// sorted sets (past the listpack size, and -0), hashes with field TTLs, streams with groups,
/// pending entries and deletions, JSON, expiry, ACL users, function libraries.
fn kv_command(r: &mut TestRng, i: usize) -> Vec<Vec<u8>> {
    let which = r.below(35);
    // Keys by family, so that most commands meet a value of their own type.
    let family = match which {
        0..=3 | 8..=10 | 31 | 34 => "s",
        4..=7 => "h",
        11 | 12 | 32 => "l",
        13 | 14 => "t",
        15..=17 => "z",
        18..=23 => "x",
        24..=27 => "j",
        _ => "s",
    };
    let k = format!("{family}{}", r.below(6));
    let k2 = format!("{family}{}", r.below(6));
    let f = format!("f{}", r.below(6));
    let n = i.to_string();
    let far = "4102444800000"; // 2100-01-01, in ms
    let long = "m".repeat(70);
    match which {
        0 => s(&["SET", &k, &n]),
        1 => s(&["SET", &k, "x", "PX", "9000000"]),
        2 => s(&["INCRBY", &k, "7"]),
        3 => s(&["APPEND", &k, "ab"]),
        4 => s(&["HSET", &k, &f, &n]),
        5 => s(&["HSETEX", &k, "PXAT", far, "FIELDS", "1", &f, &n]),
        6 => s(&["HPEXPIRE", &k, "9000000", "FIELDS", "1", &f]),
        7 => s(&["HDEL", &k, &f]),
        8 => s(&["DEL", &k]),
        9 => s(&["PEXPIREAT", &k, far]),
        10 => s(&["RENAME", &k, &k2]),
        11 => s(&["RPUSH", &k, &f, &n]),
        12 => s(&["LPOP", &k]),
        13 => s(&["SADD", &k, &f, &n]),
        14 => s(&["SREM", &k, &f]),
        15 => s(&["ZADD", &k, &(i % 17).to_string(), &f]),
        // A member past 64 bytes makes the set a skiplist for good, which keeps -0 scores.
        16 if r.chance(30) => s(&["ZADD", &k, "1", &long]),
        16 if r.chance(30) => s(&["ZREM", &k, &long]),
        16 => s(&["ZADD", &k, "-0", &format!("z{}", r.below(200))]),
        17 => s(&["ZINCRBY", &k, "0.5", &f]),
        18 => s(&["XADD", &k, "*", "f", &n]),
        19 => s(&["XADD", &k, "MAXLEN", "~", "30", "*", "g", &n]),
        20 => s(&["XDEL", &k, &format!("{}-0", r.below(3))]),
        21 => s(&["XGROUP", "CREATE", &k, "grp", "0", "MKSTREAM"]),
        22 => s(&[
            "XREADGROUP",
            "GROUP",
            "grp",
            &f,
            "COUNT",
            "2",
            "STREAMS",
            &k,
            ">",
        ]),
        23 => s(&["XTRIM", &k, "MAXLEN", "~", "10"]),
        24 => s(&[
            "JSON.SET",
            &k,
            "$",
            &format!(r#"{{"a":[1,2.5,"x",null,true],"n":{i},"o":{{"d":{{"e":-0.0}}}}}}"#),
        ]),
        25 => s(&["JSON.ARRAPPEND", &k, "$.a", &n]),
        26 => s(&["JSON.NUMINCRBY", &k, "$.n", "1.5"]),
        27 => s(&["JSON.DEL", &k, "$.o.d"]),
        28 => s(&[
            "ACL",
            "SETUSER",
            &format!("u{}", r.below(3)),
            "on",
            &format!(">pw{i}"),
            "~s*",
            "&ch*",
            "+@read",
            "-get",
        ]),
        29 if r.chance(30) => s(&["ACL", "DELUSER", &format!("u{}", r.below(3))]),
        29 => s(&["XACK", "x1", "grp", "0-1"]),
        30 => s(&[
            "FUNCTION",
            "LOAD",
            "REPLACE",
            &format!(
                "#!lua name=lib{}\nredis.register_function('f{i}', function() return 1 end)",
                r.below(2)
            ),
        ]),
        31 => s(&["SETRANGE", &k, "2", "zz"]),
        32 => s(&["LTRIM", &k, "0", "5"]),
        33 => s(&["FLUSHALL"]),
        _ => s(&["GETDEL", &k]),
    }
}

/// One random delivery operation: messages delayed far (pending), to a failing destination
/// with no retries (the DLQ), retried ones, queued ones, topics, schedules (some paused),
/// waits and notifications, flow-control keys, deduplicated ones, cancels.
fn delivery_op(c: &mut Http, sink: &Sink, r: &mut TestRng, i: usize) {
    let body = format!("m{i}");
    let (method, path, headers, body): (&str, String, Vec<(String, String)>, Vec<u8>) =
        match r.below(10) {
            0 => (
                "POST",
                format!("/v2/publish/{}", sink.url("/ok")),
                vec![("Upstash-Delay".into(), "3h".into())],
                body.into_bytes(),
            ),
            1 => (
                "POST",
                format!("/v2/publish/{}", sink.url("/status/500")),
                vec![("Upstash-Retries".into(), "0".into())],
                body.into_bytes(),
            ),
            2 => (
                "POST",
                format!("/v2/publish/{}", sink.url("/status/500")),
                vec![("Upstash-Retries".into(), "3".into())],
                body.into_bytes(),
            ),
            3 if r.chance(20) => (
                "POST",
                format!("/v2/queues/q{}/{}", r.below(2), if r.chance(70) { "pause" } else { "resume" }),
                vec![],
                Vec::new(),
            ),
            3 => (
                "POST",
                format!("/v2/enqueue/q{}/{}", r.below(2), sink.url("/sleep/20/q")),
                vec![],
                body.into_bytes(),
            ),
            4 => (
                "POST",
                format!("/v2/topics/t{}/endpoints", r.below(2)),
                vec![],
                json!({"endpoints": [{"url": sink.url(&format!("/e{}", r.below(3)))}]})
                    .to_string()
                    .into_bytes(),
            ),
            5 => (
                "POST",
                format!("/v2/schedules/{}", sink.url("/tick")),
                vec![
                    ("Upstash-Cron".into(), "0 0 1 1 *".into()),
                    ("Upstash-Schedule-Id".into(), format!("s{}", r.below(3))),
                ],
                body.into_bytes(),
            ),
            6 => (
                "POST",
                format!("/v2/schedules/s{}/pause", r.below(3)),
                vec![],
                Vec::new(),
            ),
            7 => (
                "POST",
                format!("/v2/wait/ev{}", r.below(3)),
                vec![("Upstash-Workflow-RunId".into(), format!("wfr_{i}"))],
                json!({"url": sink.url("/wf"), "timeout": "3h", "step": {"stepId": 1, "stepType": "Wait", "stepName": "w", "concurrent": 1}})
                    .to_string()
                    .into_bytes(),
            ),
            8 => (
                "POST",
                format!("/v2/publish/{}", sink.url("/ok")),
                vec![
                    ("Upstash-Delay".into(), "1h".into()),
                    ("Upstash-Flow-Control-Key".into(), format!("fc{}", r.below(2))),
                    ("Upstash-Flow-Control-Value".into(), "parallelism=2, rate=5".into()),
                    ("Upstash-Deduplication-Id".into(), format!("d{}", r.below(5))),
                ],
                body.into_bytes(),
            ),
            _ => (
                "POST",
                format!("/v2/notify/ev{}", r.below(3)),
                vec![],
                body.into_bytes(),
            ),
        };
    let h: Vec<(&str, &str)> = headers
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let resp = c.request(method, &path, &h, &body);
    assert!(
        resp.status < 500,
        "{method} {path}: {} {}",
        resp.status,
        resp.text()
    );
}

#[test]
fn snapshot_plus_the_log_after_it_is_the_whole_log() {
    let dir = TempDir::new("snap-equiv");
    let data = dir.path().join("data");
    let sink = Sink::start();
    let server = Server::start_delivery_with(
        &data,
        &["--fsync", "never", "--auto-snapshot-percentage", "0"],
    );
    let mut c = server.client();
    let mut q = server.qstash();
    let mut r = TestRng(0x5eed_1616);
    let kept = dir.path().join("kept");
    std::fs::create_dir_all(&kept).expect("mkdir");
    let mut saves = 0;
    for i in 0..2400 {
        if r.chance(80) {
            let cmd = kv_command(&mut r, i);
            // A FLUSHALL now and then, not so often that little is left.
            if cmd[0] == b"FLUSHALL" && !r.chance(3) {
                continue;
            }
            c.cmd(&cmd);
        } else {
            delivery_op(&mut q, &sink, &mut r, i);
        }
        if i % 400 == 399 {
            // A snapshot in the middle of the traffic; a copy is kept, since compaction keeps
            // only the newest and the one before it.
            let asked = if r.chance(50) {
                "BGSAVE"
            } else {
                "BGREWRITEAOF"
            };
            assert!(!c.cmd_str(&[asked]).is_err());
            saves = wait_saved(&mut c);
            let newest = snapshots_in(&data).pop().expect("a snapshot");
            std::fs::copy(&newest, kept.join(newest.file_name().expect("name"))).expect("copy");
        }
    }
    assert_eq!(saves, 6);
    // Let the failing messages reach the DLQ and the retries run.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.terminate(), Some(0));
    let whole = rebuild(&data, None);
    assert!(
        whole.0.default_db().len() > 20,
        "the workload built a keyspace"
    );
    let img = whole.1.image();
    let types: std::collections::BTreeSet<&str> = whole
        .0
        .default_db()
        .raw()
        .iter()
        .map(|(_, e)| e.value.type_name())
        .collect();
    assert_eq!(types.len(), 7, "every type is in the state: {types:?}");
    for (what, n) in [
        ("pending messages", img.messages.len()),
        ("DLQ entries", img.dlq.len()),
        ("schedules", img.schedules.len()),
        ("waiters", img.waiters.len()),
        ("topics", img.topics.len()),
        ("queues", img.queues.len()),
        ("flow-control keys", img.flows.len()),
        ("dedup ids", img.dedup.len()),
        ("ACL users", whole.0.default_db().acl.users.len() - 1),
    ] {
        assert!(n > 0, "the workload left no {what}");
    }
    let mut kept_files: Vec<PathBuf> = std::fs::read_dir(&kept)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .collect();
    kept_files.sort();
    assert_eq!(kept_files.len(), 6);
    for f in &kept_files {
        let from_snapshot = rebuild(&data, Some(f));
        assert_same(&f.display().to_string(), &whole, &from_snapshot);
    }
    // And the server itself, started from the newest snapshot, answers the same.
    let server = Server::start_delivery_with(&data, &[]);
    assert!(server.stderr().is_empty() || !server.stderr().contains("warning"));
    let mut c = server.client();
    for k in 0..40 {
        let key = format!("k{k}");
        let t = c.cmd_str(&["TYPE", &key]);
        let now = tidepool::clock::wall_unix_ms();
        let direct = whole
            .0
            .default_db()
            .get(key.as_bytes(), now)
            .map_or("none", |e| e.value.type_name());
        assert_eq!(t, Canon::s(direct), "{key}");
    }
}

/// Every value shape a command can leave, written and read back by itself: a sorted set that
/// became a skiplist and shrank (it keeps -0), a stream with deleted entries, trimmed nodes,
/// groups, consumers and pending entries, hashes with field TTLs, JSON with every number kind,
/// ACL users with every kind of rule, deleted users, function libraries.
#[test]
fn every_value_shape_survives_a_snapshot() {
    use tidepool::command::pipeline;
    let mut db = Db::new();
    let mut rng = Rng::new(7);
    let far = "4102444800000";
    let long = "m".repeat(70);
    let big = "9".repeat(20);
    let mut ts = 1_767_225_600_000u64;
    for cmd in [
        vec!["SET", "str", "v"],
        vec!["SET", "ttl", "v", "PXAT", far],
        vec!["RPUSH", "list", "a", "b", "c"],
        vec!["SADD", "set", "1", "2", "x"],
        vec!["SADD", "ints", "1", "2", "3"],
        vec!["ZADD", "zs", "1", &long, "-0", "a"],
        vec!["ZREM", "zs", &long],
        vec!["ZADD", "small", "-0", "a", "2.5", "b"],
        vec!["HSET", "h", "a", "1", "b", "2"],
        vec!["HPEXPIREAT", "h", far, "FIELDS", "1", "a"],
        vec!["XADD", "x", "1-1", "f", "1"],
        vec!["XADD", "x", "1-2", "f", "2"],
        vec!["XADD", "x", "2-1", "f", "3", "g", "4"],
        vec!["XDEL", "x", "1-2"],
        vec!["XGROUP", "CREATE", "x", "g1", "0"],
        vec!["XGROUP", "CREATE", "x", "g2", "$", "ENTRIESREAD", "3"],
        vec!["XGROUP", "CREATECONSUMER", "x", "g1", "idle"],
        vec![
            "XREADGROUP",
            "GROUP",
            "g1",
            "c1",
            "COUNT",
            "1",
            "STREAMS",
            "x",
            ">",
        ],
        vec![
            "JSON.SET",
            "j",
            "$",
            &format!(
                r#"{{"i":-3,"u":{big},"f":1.0,"z":-0.0,"s":"é","a":[[],{{}},null,false,true]}}"#
            ),
        ],
        vec![
            "ACL",
            "SETUSER",
            "alice",
            "on",
            ">p1",
            ">p2",
            "~a*",
            "%R~r*",
            "%W~w*",
            "&ch",
            "+@read",
            "-get",
            "+config|get",
            "sanitize-payload",
        ],
        vec![
            "ACL",
            "SETUSER",
            "bob",
            "nopass",
            "allchannels",
            "allkeys",
            "+@all",
        ],
        vec!["ACL", "SETUSER", "gone", "on"],
        vec!["ACL", "DELUSER", "gone"],
        vec![
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function('f', function() return 1 end)",
        ],
    ] {
        ts += 1;
        let args: Vec<Vec<u8>> = cmd.iter().map(|a| a.as_bytes().to_vec()).collect();
        let reply = pipeline::replay(&mut db, &mut rng, ts, &args);
        assert!(!reply.is_error(), "{cmd:?}: {reply:?}");
    }
    let header = snapshot::format::SnapshotHeader {
        seq: 23,
        record_unix_ms: ts,
        created_unix_ms: ts,
    };
    let mut bytes = Vec::new();
    let dbs = Databases::with_default(db);
    snapshot::write(&mut bytes, &dbs, &Delivery::new(), header, |_| {}).expect("write");
    let loaded = snapshot::read(Path::new("mem"), &bytes, |_| {}).expect("read");
    assert_eq!(loaded.header, header);
    if let Some(d) = dbs.difference(&loaded.dbs) {
        panic!("{d}");
    }
    let Some(tidepool::state::Value::ZSet(z)) =
        loaded.dbs.default_db().get(b"zs", ts).map(|e| &e.value)
    else {
        panic!("zs")
    };
    assert!(z.is_skiplist() && z.score(b"a").is_some_and(|s| s.is_sign_negative()));
    // A second write of the same state reads back to the same state. (Not to the same bytes:
    // each table keeps its elements in an order of its own, see `state::table`.)
    let mut again = Vec::new();
    snapshot::write(&mut again, &loaded.dbs, &loaded.delivery, header, |_| {}).expect("write");
    assert_eq!(bytes.len(), again.len());
    let reloaded = snapshot::read(Path::new("mem"), &again, |_| {}).expect("read");
    if let Some(d) = dbs.difference(&reloaded.dbs) {
        panic!("{d}");
    }
}

fn wal_segments(data: &Path) -> Vec<u64> {
    reader::list_segments(&data.join("wal"))
        .expect("list")
        .into_iter()
        .map(|s| s.first_seq)
        .collect()
}

fn flip_byte(path: &Path, at: usize) {
    let mut b = std::fs::read(path).expect("read");
    b[at] ^= 0x40;
    std::fs::write(path, b).expect("write");
}

/// SAVE, BGSAVE, BGREWRITEAOF and LASTSAVE answer as Redis does; INFO persistence says what
/// happened; a restart loads the snapshot and replays only what came after it; with
/// `--log-retention 0` the segments behind it go.
#[test]
fn snapshot_commands_answer_as_redis_and_restart_loads_the_snapshot() {
    let dir = TempDir::new("snap-cmds");
    let data = dir.path().join("data");
    let server = Server::start(
        &data,
        &["--log-retention", "0", "--auto-snapshot-percentage", "0"],
    );
    let mut c = server.client();
    let started = c.cmd_str(&["LASTSAVE"]);
    assert!(
        matches!(started, Canon::Int(t) if t > 1_700_000_000),
        "{started:?}"
    );
    for i in 0..100 {
        c.cmd_str(&["SET", &format!("k{i}"), &i.to_string()]);
    }
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "100");
    assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "0");
    assert_eq!(info_field(&mut c, "rdb_saves"), "1");
    assert_eq!(snapshots_in(&data).len(), 1);
    assert_eq!(
        wal_segments(&data),
        [101],
        "the segment behind the snapshot went"
    );
    c.cmd_str(&["SET", "after", "1"]);
    assert_eq!(
        c.cmd_str(&["BGSAVE"]),
        Canon::s("Background saving started")
    );
    wait_saved(&mut c);
    assert_eq!(
        c.cmd_str(&["BGREWRITEAOF"]),
        Canon::s("Background append only file rewriting started")
    );
    assert_eq!(wait_saved(&mut c), 3);
    assert_eq!(
        c.cmd_str(&["BGSAVE", "NOW"]),
        Canon::Err("ERR syntax error".into())
    );
    // The Read Only token may not take snapshots.
    let mut ro = Http::connect(&server.addr, RO_TOKEN);
    assert!(ro.cmd_str(&["SAVE"]).is_err());
    let last = c.cmd_str(&["LASTSAVE"]);
    assert!(matches!((&last, &started), (Canon::Int(a), Canon::Int(b)) if a >= b));
    c.cmd_str(&["SET", "tail", "1"]);
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["DBSIZE"]), Canon::Int(102));
    assert_eq!(c.cmd_str(&["GET", "tail"]), Canon::s("1"));
    assert_eq!(c.cmd_str(&["GET", "k42"]), Canon::s("42"));
}

/// The log growing past the share of the last snapshot that `--auto-snapshot-percentage` sets
/// (and past `--auto-snapshot-min-bytes`) takes a snapshot by itself.
#[test]
fn a_growing_log_takes_a_snapshot_by_itself() {
    let dir = TempDir::new("snap-auto");
    let data = dir.path().join("data");
    let server = Server::start(
        &data,
        &[
            "--auto-snapshot-percentage",
            "100",
            "--auto-snapshot-min-bytes",
            "50000",
        ],
    );
    let mut c = server.client();
    let v = "v".repeat(200);
    for i in 0..400 {
        c.cmd_str(&["SET", &format!("k{}", i % 50), &v]);
    }
    let until = Instant::now() + Duration::from_secs(20);
    while info_field(&mut c, "rdb_saves") == "0" {
        assert!(Instant::now() < until, "no automatic snapshot");
        c.cmd_str(&["SET", "more", &v]);
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_saved(&mut c);
    assert!(!snapshots_in(&data).is_empty());
}

/// A damaged newest snapshot is reported with its file and offset, and start-up uses the older
/// snapshot and the longer log; with nothing older left it refuses, names the repair, and
/// `tidepool-log repair` rebuilds what the intact chunks hold.
#[test]
fn a_damaged_snapshot_falls_back_or_refuses_with_the_repair() {
    let dir = TempDir::new("snap-damage");
    let data = dir.path().join("data");
    let d = data.to_str().expect("path");
    // The log is kept (default retention): two snapshots, the older one still usable.
    let server = Server::start(&data, &["--auto-snapshot-percentage", "0"]);
    let mut c = server.client();
    for i in 0..50 {
        c.cmd_str(&["SET", &format!("a{i}"), "1"]);
    }
    assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
    for i in 0..50 {
        c.cmd_str(&["SET", &format!("b{i}"), "1"]);
    }
    assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
    c.cmd_str(&["SET", "c", "1"]);
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    let snaps = snapshots_in(&data);
    assert_eq!(snaps.len(), 2);
    let newest = snaps[1].clone();
    flip_byte(&newest, 60);
    let (code, out) = log_tool(&["verify", d]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("DAMAGE: snapshot") && out.contains("at offset 40"),
        "{out}"
    );
    let server = Server::start(&data, &[]);
    let err = server.stderr();
    assert!(
        err.contains("warning: the snapshot") && err.contains(newest.to_str().expect("p")),
        "{err}"
    );
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["DBSIZE"]), Canon::Int(101));
    drop(c);
    assert_eq!(server.terminate(), Some(0));

    // Nothing older: the log behind the snapshot is gone (retention 0).
    let dir = TempDir::new("snap-damage0");
    let data = dir.path().join("data");
    let d = data.to_str().expect("path");
    let server = Server::start(
        &data,
        &["--log-retention", "0", "--auto-snapshot-percentage", "0"],
    );
    let mut c = server.client();
    for i in 0..50 {
        c.cmd_str(&["SET", &format!("a{i}"), "1"]);
    }
    c.cmd_str(&["HSET", "h", "f", "v"]);
    assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
    c.cmd_str(&["SET", "after", "1"]);
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    let snap = snapshots_in(&data).pop().expect("snapshot");
    // The first chunk (ACL users) at offset 40: damage there loses no key.
    flip_byte(&snap, 50);
    let e = Server::try_start(&data, &[])
        .err()
        .expect("start-up refuses");
    assert!(
        e.contains(snap.to_str().expect("p"))
            && e.contains("at offset 40")
            && e.contains("tidepool-log repair"),
        "{e}"
    );
    let (code, out) = log_tool(&["repair", "--yes", d]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("rebuilt from its intact parts (51 keys"),
        "{out}"
    );
    let (code, out) = log_tool(&["verify", d]);
    assert_eq!(code, 0, "{out}");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["DBSIZE"]), Canon::Int(52));
    assert_eq!(c.cmd_str(&["HGET", "h", "f"]), Canon::s("v"));
}

/// `tidepool-log snapshot` writes the snapshot of a stopped server's directory and compacts;
/// `replay --to` and `serve --at` start from the newest snapshot at or before their point, so
/// they work where the log before it is gone, and refuse a point older than what is kept.
#[test]
fn the_tools_and_past_points_work_with_snapshots() {
    let dir = TempDir::new("snap-tools");
    let data = dir.path().join("data");
    let d = data.to_str().expect("path");
    let server = Server::start(&data, &["--auto-snapshot-percentage", "0"]);
    let mut c = server.client();
    for i in 1..=5 {
        c.cmd_str(&["SET", "k", &format!("v{i}")]); // records #1..#5
    }
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    let (code, out) = log_tool(&["snapshot", "--log-retention", "0", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("snapshot at record #5: 1 keys"), "{out}");
    assert_eq!(wal_segments(&data), [6]);
    let server = Server::start(&data, &["--auto-snapshot-percentage", "0"]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("v5"));
    c.cmd_str(&["SET", "k", "v6"]); // #6
    c.cmd_str(&["SET", "k", "v7"]); // #7
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    // A point after the snapshot: the snapshot and the log up to it.
    let out_dir = dir.path().join("at6");
    let (code, out) = log_tool(&[
        "replay",
        "--to",
        "6",
        "--out",
        out_dir.to_str().expect("p"),
        d,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the snapshot at record #5"), "{out}");
    let s6 = Server::start(&out_dir, &[]);
    assert_eq!(s6.client().cmd_str(&["GET", "k"]), Canon::s("v6"));
    drop(s6);
    // The snapshot's own point.
    let at = Server::start(&data, &["--at", "5"]);
    assert_eq!(at.client().cmd_str(&["GET", "k"]), Canon::s("v5"));
    drop(at);
    let at = Server::start(&data, &["--at", "7"]);
    assert_eq!(at.client().cmd_str(&["GET", "k"]), Canon::s("v7"));
    drop(at);
    // Before it: compacted away, said clearly.
    let e = Server::try_start(&data, &["--at", "3"])
        .err()
        .expect("refused");
    assert!(e.contains("compacted away"), "{e}");
    let (code, out) = log_tool(&["history", "--values", d, "k"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("removed behind a snapshot") && out.contains("string \"v7\""),
        "{out}"
    );
    assert!(!out.contains("#3 "), "{out}");
    let (code, out) = log_tool(&["verify", d]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("start-up would load the snapshot at record #5"),
        "{out}"
    );
}

/// The automatic trigger counts the log written before a restart too: a server restarted
/// before its log reaches the threshold still takes its snapshot once the log does (it used to
/// count only what the running process wrote, so frequent restarts put it off for good).
#[test]
fn the_automatic_trigger_counts_the_log_from_before_a_restart() {
    let dir = TempDir::new("snap-auto-restart");
    let data = dir.path().join("data");
    let flags = [
        "--auto-snapshot-percentage",
        "100",
        "--auto-snapshot-min-bytes",
        "100000",
    ];
    let v = "v".repeat(500);
    for round in 0..2 {
        let server = Server::start(&data, &flags);
        let mut c = server.client();
        for i in 0..110 {
            c.cmd_str(&["SET", &format!("k{round}-{i}"), &v]);
        }
        if round == 0 {
            // About 60 KB: below the threshold.
            assert_eq!(info_field(&mut c, "rdb_saves"), "0");
        } else {
            // About 120 KB since the beginning, half of it from before the restart.
            let until = Instant::now() + Duration::from_secs(20);
            while info_field(&mut c, "rdb_saves") == "0" {
                assert!(Instant::now() < until, "no snapshot after the restart");
                std::thread::sleep(Duration::from_millis(20));
            }
            wait_saved(&mut c);
            assert_eq!(c.cmd_str(&["DBSIZE"]), Canon::Int(220));
        }
        drop(c);
        assert_eq!(server.terminate(), Some(0));
    }
    assert!(!snapshots_in(&data).is_empty());
}

/// Issue 26: a snapshot chunk whose checksum matches but whose contents contradict themselves
/// (a stream node that counts more live entries than it holds, a pending entry no consumer
/// lists, an entry in no node) was loaded as it was, and stream commands tripped over it later. It is damage now, with the file and
/// the chunk's offset: `verify` reports it and, with no log behind it, start-up refuses.
///
/// A stream's entries live in its nodes, so no stream in memory has an entry in no node or a
/// node that miscounts: those two are made by rewriting the written snapshot's node list
/// (`Spoil::Nodes`, with the chunk's checksum made again), the pending entry in memory.
#[test]
fn a_snapshot_that_contradicts_itself_is_damage_with_its_place() {
    use tidepool::command::pipeline;
    use tidepool::state::Value;
    let ts = 1_767_225_600_000u64;
    // The stream's node list as written: one node (1), of two IDs (2), 1-1 and 1-2 live
    // (ms, seq, deleted 0), 2 live, 24 modelled bytes.
    const NODES: &[u8] = &[1, 2, 1, 1, 0, 1, 2, 0, 2, 24];
    enum Spoil {
        Db(fn(&mut Db)),
        Nodes(&'static [u8]),
    }
    let cases: [(&str, Spoil); 3] = [
        (
            "says 3 live entries and holds 2",
            Spoil::Nodes(&[1, 2, 1, 1, 0, 1, 2, 0, 3, 24]),
        ),
        (
            "is not its consumer's",
            Spoil::Db(|db| {
                let Some(Value::Stream(s)) = db.get_mut(b"x", 0).map(|e| &mut e.value) else {
                    panic!("no stream");
                };
                for g in s.groups.values_mut() {
                    for c in g.consumers.values_mut() {
                        c.pel.clear();
                    }
                }
            }),
        ),
        ("is in no node", Spoil::Nodes(&[0])),
    ];
    for (i, (what, spoil)) in cases.iter().enumerate() {
        let mut db = Db::new();
        let mut rng = Rng::new(1);
        for cmd in [
            &["XADD", "x", "1-1", "f", "v"][..],
            &["XADD", "x", "1-2", "f", "v"],
            &["XGROUP", "CREATE", "x", "g", "0"],
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "x", ">"],
        ] {
            let args: Vec<Vec<u8>> = cmd.iter().map(|a| a.as_bytes().to_vec()).collect();
            assert!(!pipeline::replay(&mut db, &mut rng, ts, &args).is_error());
        }
        if let Spoil::Db(spoil) = spoil {
            spoil(&mut db);
        }
        let dir = TempDir::new(&format!("snap-contradicts-{i}"));
        let data = dir.path().join("data");
        let path = write_snapshot_of(db, &data, 4, ts);
        if let Spoil::Nodes(nodes) = spoil {
            rewrite_in_chunk(&path, NODES, nodes);
        }
        let err = match snapshot::read_file(&path, |_| {}) {
            Err(d) => d.to_string(),
            Ok(_) => panic!("{what}: read as whole"),
        };
        assert!(err.contains(what), "{err}");
        assert!(err.contains("at offset"), "{err}");
        let (code, out) = log_tool(&["verify", data.to_str().expect("path")]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains(what), "{out}");
        let e = Server::try_start(&data, &[]).err().expect("refused");
        assert!(
            e.contains(what) && e.contains(path.to_str().expect("p")),
            "{e}"
        );
        assert!(!e.contains("panicked"), "{e}");
    }
}

/// Guards the load that reads keys ahead of their insert (`SNAPSHOT_PREFETCH_KEYS_AHEAD`): a
/// key written twice in a chunk of many more keys than it reads ahead is still damage, named,
/// wherever the two fall, and the server refuses the file rather than keeping either value.
#[test]
fn a_key_written_twice_in_a_snapshot_is_damage() {
    use tidepool::command::pipeline;
    let ts = 1_767_225_600_000u64;
    let mut db = Db::new();
    let mut rng = Rng::new(1);
    for i in 0..100 {
        let args = vec![
            b"SET".to_vec(),
            format!("key:{i:03}").into_bytes(),
            b"v".to_vec(),
        ];
        assert!(!pipeline::replay(&mut db, &mut rng, ts, &args).is_error());
    }
    let dir = TempDir::new("snap-key-twice");
    let data = dir.path().join("data");
    let path = write_snapshot_of(db, &data, 100, ts);
    rewrite_in_chunk(&path, b"key:097", b"key:003");
    let err = match snapshot::read_file(&path, |_| {}) {
        Err(d) => d.to_string(),
        Ok(_) => panic!("a key written twice was read as whole"),
    };
    assert!(err.contains("key \"key:003\" appears twice"), "{err}");
    assert!(err.contains("at offset"), "{err}");
    let (code, out) = log_tool(&["verify", data.to_str().expect("path")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("appears twice"), "{out}");
    let e = Server::try_start(&data, &[]).err().expect("refused");
    assert!(e.contains("appears twice"), "{e}");
}

/// Writes `db` as the default database of a snapshot at record `seq` (made at `ts`) into the
/// new data directory `data`, beside an empty log: the snapshot's path.
fn write_snapshot_of(db: Db, data: &Path, seq: u64, ts: u64) -> PathBuf {
    std::fs::create_dir_all(data.join("wal")).expect("wal");
    let header = snapshot::format::SnapshotHeader {
        seq,
        record_unix_ms: ts,
        created_unix_ms: ts,
    };
    snapshot::write_file(
        data,
        &Databases::with_default(db),
        &Delivery::new(),
        header,
        |_| {},
    )
    .expect("write");
    snapshots_in(data).pop().expect("snapshot")
}

/// Replaces `from` (found once in the snapshot, inside a chunk) with `to`, and writes that
/// chunk again with its length and checksum: contents that contradict themselves under a
/// matching checksum.
fn rewrite_in_chunk(path: &Path, from: &[u8], to: &[u8]) {
    use snapshot::format::{encode_chunk, read_chunk, CHUNK_HEADER_BYTES, SNAPSHOT_HEADER_BYTES};
    let file = std::fs::read(path).expect("read");
    let mut out = file[..SNAPSHOT_HEADER_BYTES].to_vec();
    let mut at = SNAPSHOT_HEADER_BYTES;
    let mut found = 0;
    while at < file.len() {
        let chunk = read_chunk(&file, at).expect("chunk");
        let p = chunk.payload;
        match p.windows(from.len()).position(|w| w == from) {
            Some(i) => {
                found += 1;
                let mut payload = p[..i].to_vec();
                payload.extend_from_slice(to);
                payload.extend_from_slice(&p[i + from.len()..]);
                encode_chunk(&mut out, chunk.kind, &payload);
            }
            None => encode_chunk(&mut out, chunk.kind, p),
        }
        at += CHUNK_HEADER_BYTES + p.len();
    }
    assert_eq!(found, 1, "the bytes to rewrite are in one chunk");
    std::fs::write(path, out).expect("write");
}

/// Issue 26: no fixture of an older format was read in a test. `tests/fixtures/v1-snapshot-log`
/// was written by the build before many databases (302b269): a version-1 snapshot at record
/// #15 and a log without record kinds 2 and 3, with a pending delivery and a schedule. Today's
/// server starts from it (a copy: start-up may write), answers every value, and the log tool
/// verifies it.
#[test]
fn an_older_snapshot_and_log_are_read_as_written() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-snapshot-log");
    let dir = TempDir::new("v1-fixture");
    let data = dir.path().join("data");
    for sub in ["wal", "snapshots"] {
        std::fs::create_dir_all(data.join(sub)).expect("mkdir");
        for f in std::fs::read_dir(fixture.join(sub)).expect("fixture") {
            let f = f.expect("entry").path();
            std::fs::copy(&f, data.join(sub).join(f.file_name().expect("name"))).expect("copy");
        }
    }
    std::fs::copy(
        fixture.join("credentials.json"),
        data.join("credentials.json"),
    )
    .expect("copy");
    let d = data.to_str().expect("path");
    let (code, out) = log_tool(&["verify", d]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("snapshot") && out.contains("at record #15"),
        "{out}"
    );
    let r =
        machine::recover(&data, machine::Recover::read(machine::Start::Newest)).expect("recover");
    assert_eq!(r.snapshot.map(|s| s.0), Some(15));
    assert_eq!(r.report.records, 8, "the records after the snapshot");
    assert_eq!(r.machine.position().seq, 23);
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    for (cmd, want) in [
        (&["GET", "s"][..], Canon::Nil),
        (&["GET", "ttl"], Canon::s("v")),
        (&["PEXPIRETIME", "ttl"], Canon::Int(4_102_444_800_000)),
        (
            &["LRANGE", "l", "0", "-1"],
            Canon::Arr(vec![Canon::s("a"), Canon::s("b"), Canon::s("c")]),
        ),
        (&["SMEMBERS", "set"], Canon::Arr(vec![Canon::s("x")])),
        (&["ZSCORE", "z", "m"], Canon::s("1.5")),
        (
            &["HPEXPIRETIME", "h", "FIELDS", "1", "f"],
            Canon::Arr(vec![Canon::Int(4_102_444_800_000)]),
        ),
        (&["HGET", "h", "g"], Canon::s("w")),
        (&["XLEN", "x"], Canon::Int(2)),
        (&["JSON.GET", "j", "$.a[1]"], Canon::s("[2.5]")),
        (&["FCALL", "f", "0"], Canon::Int(1)),
        (&["PFCOUNT", "hll"], Canon::Int(2)),
        (&["GET", "after"], Canon::s("1")),
        (&["GET", "counter"], Canon::s("2")),
        (&["GET", "last"], Canon::s("1")),
    ] {
        assert_eq!(c.cmd_str(cmd), want, "{cmd:?}");
    }
    let Canon::Arr(pending) = c.cmd_str(&["XPENDING", "x", "g", "-", "+", "10", "c"]) else {
        panic!("XPENDING");
    };
    assert_eq!(pending.len(), 2, "the consumer's two pending entries");
    let users = c.cmd_str(&["ACL", "USERS"]);
    assert_eq!(users, Canon::Arr(vec![Canon::s("default"), Canon::s("u")]));
    // The delivery state: the pending message and the schedule.
    let creds: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("credentials.json")).expect("credentials"))
            .expect("json");
    let mut q = Http::connect(&server.addr, creds["qstash_token"].as_str().expect("token"));
    let schedules = q.get("/v2/schedules").json();
    assert_eq!(schedules.as_array().map(Vec::len), Some(1), "{schedules}");
    assert_eq!(schedules[0]["cron"], "0 0 1 1 *");
    let message = q.get("/v2/messages/msg_qIxOb3CbO0HrbGNZrgi6S0EVp0").json();
    assert_eq!(message["url"], "http://127.0.0.1:9/x", "{message}");
    drop((c, q));
    assert_eq!(server.terminate(), Some(0));
}
