//! Where tidepool answers as the hosted service does rather than as Redis 7.0, because the
//! official SDKs (and their own test suites) rely on it (issue 18). Each answer is checked
//! through every door and from Lua; the differential test derives the same answers from what
//! redis-server holds (`differential::hosted_only`).

use crate::common::*;

fn strs(v: &[&str]) -> Canon {
    Canon::Arr(v.iter().map(|s| Canon::s(s)).collect())
}

/// The upstash-redis test suite asks `SCAN 0 MATCH hash` once over about 30 keys and expects
/// `[0, ["hash"]]`: a small keyspace is scanned whole in one call, as Redis scans a small
/// hash, set or sorted set (whose compact encodings it walks whole). A large one still pages.
#[test]
fn a_scan_over_few_entries_answers_whole_in_one_call() {
    let dir = TempDir::new("scanwhole");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    for i in 0..40 {
        c.cmd_str(&["SET", &format!("k{i}"), "v"]);
    }
    c.cmd_str(&["HSET", "hash", "f", "v"]);
    every_door_and_lua(
        &mut c,
        &[],
        &["SCAN", "0", "MATCH", "hash"],
        &Canon::Arr(vec![Canon::s("0"), strs(&["hash"])]),
    );
    let mut fields = vec!["HSET", "h"];
    let names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    for n in &names {
        fields.push(n);
        fields.push("1");
    }
    c.cmd_str(&fields);
    match c.cmd_str(&["HSCAN", "h", "0", "NOVALUES"]) {
        Canon::Arr(v) => {
            assert_eq!(v[0], Canon::s("0"));
            assert!(matches!(&v[1], Canon::Arr(f) if f.len() == 20), "{v:?}");
        }
        other => panic!("{other:?}"),
    }
    for (cmd, n) in [("SADD", 20), ("ZADD", 20)] {
        let key = cmd.to_lowercase();
        let mut args = vec![cmd.to_string(), key.clone()];
        for i in 0..n {
            if cmd == "ZADD" {
                args.push(i.to_string());
            }
            args.push(format!("m{i}"));
        }
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        c.cmd_str(&args);
        let scan = if cmd == "SADD" { "SSCAN" } else { "ZSCAN" };
        match c.cmd_str(&[scan, &key, "0", "COUNT", "1"]) {
            Canon::Arr(v) => {
                assert_eq!(v[0], Canon::s("0"), "{scan}");
                let per = if cmd == "ZADD" { 2 } else { 1 };
                assert!(
                    matches!(&v[1], Canon::Arr(f) if f.len() == n * per),
                    "{v:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // NOVALUES is HSCAN's alone (Redis 7.4).
        assert_eq!(
            c.cmd_str(&[scan, &key, "0", "NOVALUES"]),
            Canon::Err("ERR syntax error".into())
        );
    }
    // Past the bound, COUNT pages again, and a full walk still meets every key once.
    for i in 40..400 {
        c.cmd_str(&["SET", &format!("k{i}"), "v"]);
    }
    let mut cursor = "0".to_string();
    let mut seen = std::collections::BTreeSet::new();
    let mut calls = 0;
    loop {
        let Canon::Arr(v) = c.cmd_str(&["SCAN", &cursor, "MATCH", "k*"]) else {
            panic!("scan");
        };
        calls += 1;
        let Canon::Str(next) = &v[0] else { panic!() };
        if let Canon::Arr(keys) = &v[1] {
            for k in keys {
                assert!(seen.insert(k.clone()), "{k:?} twice");
            }
        }
        cursor = String::from_utf8_lossy(next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 400);
    assert!(calls > 1, "a large keyspace pages");
}

/// `@upstash/redis` sends `SCAN cursor WITHTYPE` for `scan(cursor, { withType: true })` and
/// reads the keys as key, type pairs; JSON documents are of type `json` there.
#[test]
fn scan_withtype_lists_each_key_with_its_type() {
    let dir = TempDir::new("withtype");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    c.cmd_str(&["SET", "s", "v"]);
    c.cmd_str(&["ZADD", "z", "1", "m"]);
    c.cmd_str(&["JSON.SET", "j", "$", "{}"]);
    let bytes = [b"SCAN".to_vec(), b"0".to_vec(), b"WITHTYPE".to_vec()];
    for door in DOORS {
        let Canon::Arr(v) = c.cmd_via(*door, &bytes) else {
            panic!("{door:?}");
        };
        assert_eq!(v[0], Canon::s("0"));
        let Canon::Arr(flat) = &v[1] else { panic!() };
        let mut pairs: Vec<(Canon, Canon)> = flat
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![
                (Canon::s("j"), Canon::s("json")),
                (Canon::s("s"), Canon::s("string")),
                (Canon::s("z"), Canon::s("zset")),
            ],
            "{door:?}"
        );
    }
    every_door_and_lua(
        &mut c,
        &[],
        &["SCAN", "0", "TYPE", "zset", "WITHTYPE"],
        &Canon::Arr(vec![Canon::s("0"), strs(&["z", "zset"])]),
    );
    // WITHTYPE belongs to SCAN; the collection scans refuse it.
    assert_eq!(
        c.cmd_str(&["ZSCAN", "z", "0", "WITHTYPE"]),
        Canon::Err("ERR syntax error".into())
    );
}

/// COPY of a key onto itself: the hosted service answers 0 (the SDK's "NOT_COPIED"), where
/// Redis fails with "source and destination objects are the same". Nothing changes.
#[test]
fn copy_onto_itself_answers_not_copied() {
    let dir = TempDir::new("copyself");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    c.cmd_str(&["SET", "a", "v"]);
    every_door_and_lua(&mut c, &[], &["COPY", "a", "a"], &Canon::Int(0));
    every_door_and_lua(&mut c, &[], &["COPY", "a", "a", "REPLACE"], &Canon::Int(0));
    assert_eq!(c.cmd_str(&["GET", "a"]), Canon::s("v"));
    assert_eq!(
        c.cmd_str(&["COPY", "a", "a", "BAD"]),
        Canon::Err("ERR syntax error".into())
    );
}

/// ZRANGE by rank with LIMIT: the hosted service pages the ranked range (`zrange(key, 0, -1,
/// { offset, count })` in the SDK); Redis refuses LIMIT without BYSCORE or BYLEX. ZREVRANGE
/// keeps refusing it, as both do.
#[test]
fn zrange_by_rank_takes_limit() {
    let dir = TempDir::new("zrangelimit");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    c.cmd_str(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d"]);
    every_door_and_lua(
        &mut c,
        &[],
        &["ZRANGE", "z", "0", "-1", "LIMIT", "1", "2"],
        &strs(&["b", "c"]),
    );
    every_door_and_lua(
        &mut c,
        &[],
        &[
            "ZRANGE",
            "z",
            "0",
            "-1",
            "REV",
            "LIMIT",
            "1",
            "-1",
            "WITHSCORES",
        ],
        &strs(&["c", "3", "b", "2", "a", "1"]),
    );
    every_door_and_lua(
        &mut c,
        &[],
        &["ZRANGE", "z", "1", "2", "LIMIT", "1", "5"],
        &strs(&["c"]),
    );
    every_door_and_lua(
        &mut c,
        &[],
        &["ZRANGE", "z", "0", "-1", "LIMIT", "4", "1"],
        &strs(&[]),
    );
    every_door_and_lua(
        &mut c,
        &[],
        &["ZRANGE", "z", "0", "-1", "LIMIT", "-1", "1"],
        &strs(&[]),
    );
    assert_eq!(
        c.cmd_str(&["ZRANGESTORE", "dst", "z", "0", "-1", "LIMIT", "2", "10"]),
        Canon::Int(2)
    );
    assert_eq!(c.cmd_str(&["ZRANGE", "dst", "0", "-1"]), strs(&["c", "d"]));
    assert_eq!(
        c.cmd_str(&["ZREVRANGE", "z", "0", "-1", "LIMIT", "0", "1"]),
        Canon::Err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                .into()
        )
    );
}

/// HEXPIREAT with a time in milliseconds where seconds are meant (`@upstash/redis`'s own
/// pipeline test sends `Date.now() + 1000`): the hosted service accepts it, where Redis 8
/// refuses times past 2^46 ms. The field then keeps its value, with that far expiry.
#[test]
fn hexpireat_accepts_a_time_past_redis_bound() {
    let dir = TempDir::new("hexpireatfar");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    let far = "1764045000000"; // seconds: the year 57870
    every_door_and_lua(
        &mut c,
        &[],
        &["HEXPIREAT", "missing", far, "FIELDS", "1", "f"],
        &Canon::Arr(vec![Canon::Int(-2)]),
    );
    c.cmd_str(&["HSET", "h", "f", "v"]);
    assert_eq!(
        c.cmd_str(&["HEXPIREAT", "h", far, "FIELDS", "1", "f"]),
        Canon::Arr(vec![Canon::Int(1)])
    );
    assert_eq!(
        c.cmd_str(&["HEXPIRETIME", "h", "FIELDS", "1", "f"]),
        Canon::Arr(vec![Canon::Int(1764045000000)])
    );
    assert_eq!(c.cmd_str(&["HGET", "h", "f"]), Canon::s("v"));
}

/// FCALL_RO decides by what the function does, as the hosted service does: a function
/// without the `no-writes` flag that only reads runs; one that writes is refused at its write
/// ("commands are not allowed from read-only", which is what the SDKs' tests look for) and
/// changes nothing. Redis refuses both before they start.
#[test]
fn fcall_ro_runs_a_function_that_only_reads() {
    let dir = TempDir::new("fcallro");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    let lib = "#!lua name=lib\n\
               redis.register_function('rd', function(k) return redis.call('GET', k[1]) end)\n\
               redis.register_function('wr', function(k) redis.call('SET', k[1], 'w') return 1 end)";
    assert_eq!(c.cmd_str(&["FUNCTION", "LOAD", lib]), Canon::s("lib"));
    c.cmd_str(&["SET", "k", "v"]);
    // (FCALL_RO is not allowed from a script, so only the request forms.)
    let rd: Vec<Vec<u8>> = ["FCALL_RO", "rd", "1", "k"]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect();
    let bytes: Vec<Vec<u8>> = ["FCALL_RO", "wr", "1", "k"]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect();
    for door in DOORS {
        assert_eq!(c.cmd_via(*door, &rd), Canon::s("v"), "{door:?}");
        match c.cmd_via(*door, &bytes) {
            Canon::Err(e) => assert!(
                e.starts_with("ERR Write commands are not allowed from read-only scripts."),
                "{door:?}: {e}"
            ),
            other => panic!("{door:?}: {other:?}"),
        }
    }
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("v"));
    // FCALL runs the same function as a write.
    assert_eq!(c.cmd_str(&["FCALL", "wr", "1", "k"]), Canon::Int(1));
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("w"));
}
