//! One command pipeline: every command of the table answers the same through REST and through
//! `redis.call` from Lua, on the same data. Guards the bug that three copies of the
//! check-and-dispatch code had drifted apart: `redis.call('INFO')` and
//! `redis.call('PUBSUB', 'CHANNELS')` failed from Lua while they worked over REST.

use crate::common::*;
use tidepool::command::table;

/// Commands whose answer changes between two runs on the same data whatever the door: the
/// clock (idle times, and the claims that compare them with a minimum), randomness, or
/// counters of the server itself.
const DIFFERS_BY_NATURE: &[&str] = &[
    "xinfo|consumers",
    "xclaim",
    "xautoclaim",
    "time",
    "lastsave",
    "randomkey",
    "spop",
    "srandmember",
    "hrandfield",
    "zrandmember",
    "object|idletime",
    "object|freq",
    "info",
    // Figures of the process that move between two calls, and random credentials.
    "memory|stats",
    "memory|doctor",
    "acl|genpass",
    "acl|gentoken",
];

/// Commands that answer in a table's own order: two tables of the same contents (the two
/// runs' fixtures) need not share it, so their answers compare as multisets.
const IN_A_TABLES_ORDER: &[&str] = &[
    "smembers", "sscan", "sinter", "sunion", "sdiff", "hgetall", "hkeys", "hvals", "hscan", "keys",
    "scan", "zscan", "sort", "sort_ro",
];

/// Two keys, `k0` and `k1`, holding values of the type a command of `group` works on.
fn fixture(name: &str, group: &str) -> Vec<Vec<&'static str>> {
    if name.starts_with("json.") {
        return vec![
            vec!["JSON.SET", "k0", "$", r#"{"1":1,"a":[1,2]}"#],
            vec!["JSON.SET", "k1", "$", "[1]"],
        ];
    }
    match group {
        "hash" => vec![
            vec!["HSET", "k0", "1", "1", "2", "2"],
            vec!["HSET", "k1", "1", "3"],
        ],
        "list" => vec![vec!["RPUSH", "k0", "1", "2", "3"], vec!["RPUSH", "k1", "1"]],
        "set" => vec![vec!["SADD", "k0", "1", "2", "3"], vec!["SADD", "k1", "1"]],
        "sorted-set" => vec![
            vec!["ZADD", "k0", "1", "1", "2", "2"],
            vec!["ZADD", "k1", "1", "1"],
        ],
        "geo" => vec![
            vec![
                "GEOADD",
                "k0",
                "13.361389",
                "38.115556",
                "1",
                "15.087269",
                "37.502669",
                "2",
            ],
            vec!["GEOADD", "k1", "13.361389", "38.115556", "1"],
        ],
        "hyperloglog" => vec![vec!["PFADD", "k0", "1", "2"], vec!["PFADD", "k1", "3"]],
        "stream" => vec![
            vec!["XADD", "k0", "1-1", "1", "1"],
            vec!["XADD", "k0", "2-1", "2", "2"],
            vec!["XGROUP", "CREATE", "k0", "1", "0"],
            vec!["XREADGROUP", "GROUP", "1", "1", "STREAMS", "k0", ">"],
            vec!["XADD", "k1", "1-1", "1", "1"],
        ],
        _ => vec![vec!["SET", "k0", "1"], vec!["SET", "k1", "2"]],
    }
}

/// The command as sent: its name, then as many arguments as its arity asks, keys where the
/// table puts keys (`k0`, `k1`, ...), `1` elsewhere.
fn example(info: &table::CommandInfo) -> Vec<String> {
    if info.name == "info" {
        return vec!["INFO".into(), "keyspace".into()];
    }
    let mut args: Vec<String> = info.name.split('|').map(str::to_ascii_uppercase).collect();
    let want = info.arity.unsigned_abs() as usize;
    let (first, step) = (info.first_key, info.step.max(1));
    let last = if info.last_key < 0 {
        want as i32 + info.last_key
    } else {
        info.last_key
    };
    let mut key = 0;
    while args.len() < want {
        let at = args.len() as i32;
        if first > 0 && at >= first && at <= last && (at - first) % step == 0 {
            args.push(format!("k{key}"));
            key += 1;
        } else {
            args.push("1".into());
        }
    }
    args
}

/// What a reply reads as after a trip through Lua: RESP2's nil array becomes Lua's false and
/// comes back as a nil bulk, which the REST envelope cannot tell apart anyway.
fn run_both(c: &mut Http, setup: &[Vec<&str>], args: &[String]) -> (Canon, Canon) {
    let reset = |c: &mut Http| {
        c.cmd_str(&["FLUSHALL"]);
        for s in setup {
            let r = c.cmd_str(s);
            assert!(!r.is_err(), "fixture {s:?}: {r:?}");
        }
    };
    reset(c);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let rest = c.cmd_str(&argv);
    reset(c);
    let mut eval = vec!["EVAL", "return redis.pcall(unpack(ARGV))", "0"];
    eval.extend(argv);
    let lua = c.cmd_str(&eval);
    (rest, lua)
}

#[test]
fn every_command_answers_the_same_through_rest_and_redis_call() {
    let dir = TempDir::new("onepipeline");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let mut compared = 0;
    let mut refused_in_scripts = 0;
    for info in table::global().all() {
        if info.has_subcommands || DIFFERS_BY_NATURE.contains(&info.name.as_str()) {
            continue;
        }
        let args = example(info);
        for setup in [fixture(&info.name, &info.group), Vec::new()] {
            let (rest, lua) = run_both(&mut c, &setup, &args);
            if info.flags.iter().any(|f| f == "noscript") {
                assert_eq!(
                    lua,
                    Canon::Err("ERR This Redis command is not allowed from script".into()),
                    "{args:?}"
                );
                refused_in_scripts += 1;
            } else if info.blocking
                && info
                    .rest_refusal(
                        &args
                            .iter()
                            .map(|a| a.as_bytes().to_vec())
                            .collect::<Vec<_>>(),
                    )
                    .is_some()
                && matches!(&rest, Canon::Err(e) if e.contains("not supported over REST"))
            {
                // REST cannot wait on a connection; a script runs the command once without
                // blocking, as Redis does (tests/it/resp.rs holds the waiting).
            } else if IN_A_TABLES_ORDER.contains(&info.name.as_str()) {
                assert_eq!(rest.unordered(), lua.unordered(), "{args:?} on {setup:?}");
                compared += 1;
            } else {
                assert_eq!(rest, lua, "{args:?} on {setup:?}");
                compared += 1;
            }
        }
    }
    assert!(compared > 500, "only {compared} compared");
    assert!(refused_in_scripts > 50);
}

/// The two commands the issue named: INFO and PUBSUB CHANNELS now run from Lua, with the
/// same answer as over REST.
#[test]
fn info_and_pubsub_run_from_lua() {
    let dir = TempDir::new("infolua");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    c.cmd_str(&["SET", "a", "1"]);
    let Canon::Str(text) = c.cmd_str(&["EVAL", "return redis.call('INFO', 'keyspace')", "0"])
    else {
        panic!("INFO from Lua is no string");
    };
    assert_eq!(
        String::from_utf8_lossy(&text),
        "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"
    );
    assert_eq!(
        c.cmd_str(&["EVAL", "return redis.call('PUBSUB', 'CHANNELS')", "0"]),
        Canon::Arr(vec![])
    );
    assert_eq!(
        c.cmd_str(&["EVAL", "return redis.call('PUBSUB', 'NUMSUB', 'x')", "0"]),
        c.cmd_str(&["PUBSUB", "NUMSUB", "x"])
    );
}

/// Guards the pipeline's fetches ahead (`PIPELINE_PREFETCH_KEYS_MIN`, `PREFETCH_SLOTS_AHEAD`,
/// `_NODES_AHEAD`, `_KEY_BYTES_MAX`), which only a database of tens of thousands of keys
/// takes: on two servers holding the same 70,000 keys, the same mixed commands (keys present
/// and absent, keys longer than the fetches take, commands whose second argument is no key,
/// or that have none) answer alike sent as pipelines of several lengths, as transactions and
/// as a RESP pipeline on one, one request at a time on the other, and leave the same data
/// behind.
#[test]
fn a_pipeline_over_a_large_keyspace_answers_as_its_commands_one_by_one() {
    let keys = 70_000usize;
    assert!(keys > tidepool::config::PIPELINE_PREFETCH_KEYS_MIN);
    let (da, db) = (TempDir::new("prefetch-a"), TempDir::new("prefetch-b"));
    let (a, b) = (Server::start(da.path(), &[]), Server::start(db.path(), &[]));
    let (mut ca, mut cb) = (a.client(), b.client());
    let arg = |s: String| s.into_bytes();
    for c in [&mut ca, &mut cb] {
        for chunk in (0..keys).collect::<Vec<_>>().chunks(1_000) {
            let sets: Vec<Vec<Vec<u8>>> = chunk
                .iter()
                .map(|i| vec![arg("SET".into()), arg(format!("k{i}")), arg(format!("{i}"))])
                .collect();
            assert!(c.pipeline(&sets).iter().all(|r| !r.is_err()));
        }
    }
    let mut rng = tidepool::rng::Rng::new(7);
    let mut cmds: Vec<Vec<Vec<u8>>> = Vec::new();
    for _ in 0..400 {
        // Keys that exist, and some past the end that do not.
        let k = format!("k{}", rng.below(keys + keys / 10));
        let cmd: Vec<String> = match rng.below(14) {
            0 => vec!["SET".into(), k, format!("v{}", rng.below(100))],
            1 | 2 => vec!["GET".into(), k],
            3 => vec!["INCR".into(), k],
            4 => vec!["DEL".into(), k],
            5 => vec!["APPEND".into(), k, "x".into()],
            6 => vec!["EXISTS".into(), k, format!("k{}", rng.below(keys))],
            7 => vec!["MGET".into(), k, format!("k{}", rng.below(keys))],
            8 => vec!["ECHO".into(), k],
            9 => vec!["PING".into()],
            10 => vec!["HSET".into(), format!("h{}", rng.below(8)), k, "1".into()],
            // Keys longer than a pipeline fetches ahead.
            11 => vec![
                "SET".into(),
                format!("{k}{}", "x".repeat(200)),
                "long".into(),
            ],
            12 => vec!["GET".into(), format!("{k}{}", "x".repeat(200))],
            _ => vec!["GET".into(), String::new()],
        };
        cmds.push(cmd.into_iter().map(arg).collect());
    }
    let mut at = 0;
    for (i, len) in [2usize, 17, 100, 7, 1, 60, 150].into_iter().enumerate() {
        let part = &cmds[at..at + len];
        at += len;
        let got = if i % 2 == 0 {
            ca.pipeline(part)
        } else {
            ca.multi_exec(part)
        };
        let want: Vec<Canon> = part.iter().map(|c| cb.cmd(c)).collect();
        assert_eq!(got, want, "part {i} of {len} commands");
    }
    // The rest as one RESP pipeline: the listener hands what arrived together to the
    // executor as one batch.
    let rest = &cmds[at..];
    let mut r = Redis::connect_addr(a.resp_addr.as_deref().expect("RESP listener"));
    assert_eq!(r.cmd_str(&["AUTH", TOKEN]), Canon::s("OK"));
    let mut wire = Vec::new();
    for c in rest {
        wire.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
        for arg in c {
            wire.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            wire.extend_from_slice(arg);
            wire.extend_from_slice(b"\r\n");
        }
    }
    r.send_raw(&wire);
    for (j, c) in rest.iter().enumerate() {
        assert_eq!(r.read(), Some(cb.cmd(c)), "RESP pipeline, command {j}");
    }
    for i in (0..keys + keys / 10).step_by(97) {
        let k = format!("k{i}");
        assert_eq!(ca.cmd_str(&["GET", &k]), cb.cmd_str(&["GET", &k]), "{k}");
    }
    for h in 0..8 {
        let h = format!("h{h}");
        assert_eq!(ca.cmd_str(&["HLEN", &h]), cb.cmd_str(&["HLEN", &h]), "{h}");
    }
    assert_eq!(ca.cmd_str(&["DBSIZE"]), cb.cmd_str(&["DBSIZE"]));
}
