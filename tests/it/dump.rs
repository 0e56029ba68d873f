//! DUMP and RESTORE against a real redis-server 7.0: payloads of values built the way Redis
//! builds them are Redis's bytes exactly; payloads cross over both ways (Redis's restored in
//! tidepool, tidepool's restored in Redis) and read back equal, after any history; RESTORE's
//! argument checks and error texts are Redis's; and a restored key survives a restart.

use crate::common::*;

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn cmd(parts: &[&str]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| b(p)).collect()
}

/// A command whose last argument is binary, over HTTP: the POST body is that argument and the
/// query string holds the options after it.
fn post_binary(t: &mut Http, path: &str, body: &[u8], opts: &str) -> Canon {
    let q = if opts.is_empty() {
        String::new()
    } else {
        format!("?{opts}")
    };
    let r = t.request(
        "POST",
        &format!("{path}{q}"),
        &[("Upstash-Encoding", "base64")],
        body,
    );
    envelope_to_canon(&r.json())
}

/// `RESTORE key ttl payload [options]`.
fn tp_restore(t: &mut Http, key: &str, ttl: &str, payload: &[u8], opts: &str) -> Canon {
    post_binary(t, &format!("/restore/{key}/{ttl}"), payload, opts)
}

/// `FUNCTION RESTORE payload [policy]`.
fn tp_function_restore(t: &mut Http, payload: &[u8], policy: &str) -> Canon {
    post_binary(t, "/function/restore", payload, policy)
}

fn payload(c: Canon) -> Vec<u8> {
    match c {
        Canon::Str(p) => p,
        other => panic!("DUMP answered {other:?}"),
    }
}

fn word(r: &mut TestRng) -> String {
    match r.below(6) {
        0 => r.below(300).to_string(),
        1 => (r.next() as i64 >> r.below(60)).to_string(),
        2 => "ab".repeat(1 + r.below(60)),
        3 => (0..1 + r.below(90))
            .map(|_| (b'a' + r.below(26) as u8) as char)
            .collect(),
        4 => format!("m{}", r.below(40)),
        _ => "x".repeat(60 + r.below(20)),
    }
}

fn score(r: &mut TestRng) -> String {
    match r.below(5) {
        0 => r.below(1000).to_string(),
        1 => format!("{}.{}", r.below(100), r.below(1000)),
        2 => format!("-{}.25", r.below(50)),
        3 => "1e20".into(),
        _ => format!("{}", (r.next() % 1_000_000) as f64 / 7.0),
    }
}

/// Commands that build values only the way Redis's own payload would record them: appends,
/// no deletions, hashes of one field (Redis orders a small hash's fields by insertion,
/// tidepool by hash).
fn gen_redis_shaped(r: &mut TestRng, n: usize) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let k = format!("k{n}");
    match n % 7 {
        0 => out.push(vec![b("SET"), b(&k), b(&word(r))]),
        1 => {
            let count = [1, 5, 50, 400, 1500][r.below(5)];
            for _ in 0..count {
                out.push(vec![b("RPUSH"), b(&k), b(&word(r))]);
            }
        }
        2 => {
            // At most 512: a larger set is a hash table, whose order is Redis's own.
            let count = [1, 10, 200, 300, 512][r.below(5)];
            let mut c = vec![b("SADD"), b(&k)];
            for _ in 0..count {
                c.push(b(&((r.next() as i64) >> r.below(62)).to_string()));
            }
            out.push(c);
        }
        3 => {
            let count = [1, 20, 128, 129, 300][r.below(5)];
            for _ in 0..count {
                out.push(vec![b("ZADD"), b(&k), b(&score(r)), b(&word(r))]);
            }
        }
        4 => out.push(vec![b("HSET"), b(&k), b(&word(r)), b(&word(r))]),
        5 => {
            let count = [1, 3, 99, 100, 101, 250][r.below(6)];
            let mut ms = 1 + r.below(1000) as u64;
            for i in 0..count {
                ms += r.below(3) as u64;
                let mut c = vec![b("XADD"), b(&k), b(&format!("{ms}-{i}"))];
                let nf = if r.chance(70) { 2 } else { 1 + r.below(4) };
                for f in 0..nf {
                    c.push(b(&format!("f{f}")));
                    c.push(b(&word(r)));
                }
                out.push(c);
            }
            out.push(cmd(&["XGROUP", "CREATE", &k, "g1", "0"]));
            out.push(cmd(&["XGROUP", "CREATE", &k, "g2", "$"]));
        }
        _ => out.push(vec![
            b("SET"),
            b(&k),
            b(&"0123456789abcdef".repeat(1 + r.below(300))),
        ]),
    }
    out
}

#[test]
fn payloads_are_redis_bytes() {
    let Some(both) = Both::start("dump-bytes", &[]) else {
        return;
    };
    let Both {
        mut t, r: mut rd, ..
    } = both;
    let mut r = TestRng(0x5eed_d00d);
    for n in 0..140 {
        let cmds = gen_redis_shaped(&mut r, n);
        for c in &cmds {
            let (a, want) = (t.cmd(c), rd.cmd(c));
            assert_eq!(a, want, "{c:?}");
        }
        let k = format!("k{n}");
        let d = cmd(&["DUMP", &k]);
        let what = String::from_utf8_lossy(&cmds[0].concat())
            .chars()
            .take(80)
            .collect::<String>();
        assert!(
            t.cmd(&d) == rd.cmd(&d),
            "DUMP of {k} differs; built by {} commands like {what}",
            cmds.len()
        );
    }
    assert_eq!(t.cmd(&cmd(&["DUMP", "nosuch"])), Canon::Nil);
}

/// Any history: deletions inside lists and streams, hashes of many fields, consumer groups
/// with pending entries.
fn gen_history(r: &mut TestRng, keys: &[&str], next_id: &mut u64) -> Vec<Vec<u8>> {
    let k = *r.pick(keys);
    // Stream IDs are given, so both servers hold the same entries.
    *next_id += 1;
    let id = format!("{next_id}-1");
    let old_id = format!("{}-1", 1 + r.below(*next_id as usize));
    let w = word(r);
    let parts: Vec<String> = match r.below(16) {
        0 => vec!["SET".into(), k.into(), w],
        1 => vec!["RPUSH".into(), k.into(), w, word(r)],
        2 => vec!["LPUSH".into(), k.into(), w],
        3 => vec!["LREM".into(), k.into(), "1".into(), w],
        4 => vec!["SADD".into(), k.into(), w, r.below(50).to_string()],
        5 => vec!["SREM".into(), k.into(), w],
        6 => vec!["ZADD".into(), k.into(), score(r), w],
        7 => vec!["ZREM".into(), k.into(), w],
        8 => vec!["HSET".into(), k.into(), w, word(r)],
        9 => vec!["HDEL".into(), k.into(), w],
        10 | 11 => vec![
            "XADD".into(),
            k.into(),
            id,
            "f".into(),
            w,
            "g".into(),
            word(r),
        ],
        12 => vec!["XDEL".into(), k.into(), old_id],
        13 => vec![
            "XGROUP".into(),
            "CREATE".into(),
            k.into(),
            "grp".into(),
            "0".into(),
            "MKSTREAM".into(),
        ],
        14 => vec![
            "XREADGROUP".into(),
            "GROUP".into(),
            "grp".into(),
            format!("c{}", r.below(3)),
            "COUNT".into(),
            "3".into(),
            "STREAMS".into(),
            k.into(),
            ">".into(),
        ],
        _ => vec![
            "XTRIM".into(),
            k.into(),
            "MAXLEN".into(),
            r.below(20).to_string(),
        ],
    };
    parts.into_iter().map(|p| p.into_bytes()).collect()
}

/// What a key holds, read the same way from either server, without what depends on the
/// clock or on how a server packs its nodes.
fn value_of(run: &mut dyn FnMut(&[&str]) -> Canon, k: &str) -> Vec<Canon> {
    let ty = run(&["TYPE", k]);
    let sorted = |c: Canon| match c {
        Canon::Arr(mut v) => {
            v.sort();
            Canon::Arr(v)
        }
        o => o,
    };
    let pairs = |c: Canon| match c {
        Canon::Arr(v) => {
            let mut p: Vec<Canon> = v.chunks(2).map(|x| Canon::Arr(x.to_vec())).collect();
            p.sort();
            Canon::Arr(p)
        }
        o => o,
    };
    let pick = |c: Canon, names: &[&str]| match c {
        Canon::Arr(v) => Canon::Arr(
            v.chunks(2)
                .filter(|x| names.iter().any(|n| x[0] == Canon::s(n)))
                .flat_map(|x| x.to_vec())
                .collect(),
        ),
        o => o,
    };
    let mut out = vec![ty.clone()];
    match ty {
        Canon::Str(t) if t == b"string" => out.push(run(&["GET", k])),
        Canon::Str(t) if t == b"list" => out.push(run(&["LRANGE", k, "0", "-1"])),
        Canon::Str(t) if t == b"set" => out.push(sorted(run(&["SMEMBERS", k]))),
        Canon::Str(t) if t == b"zset" => out.push(run(&["ZRANGE", k, "0", "-1", "WITHSCORES"])),
        Canon::Str(t) if t == b"hash" => out.push(pairs(run(&["HGETALL", k]))),
        Canon::Str(t) if t == b"stream" => {
            out.push(run(&["XRANGE", k, "-", "+"]));
            out.push(pick(
                run(&["XINFO", "STREAM", k]),
                &[
                    "length",
                    "last-generated-id",
                    "max-deleted-entry-id",
                    "entries-added",
                    "recorded-first-entry-id",
                    "groups",
                ],
            ));
            if let Canon::Arr(groups) = run(&["XINFO", "GROUPS", k]) {
                for g in groups {
                    out.push(g.clone());
                    let Canon::Arr(f) = g else { continue };
                    let Some(Canon::Str(name)) = f.get(1).cloned() else {
                        continue;
                    };
                    let name = String::from_utf8_lossy(&name).into_owned();
                    if let Canon::Arr(p) = run(&["XPENDING", k, &name, "-", "+", "1000"]) {
                        for e in p {
                            // (id, consumer, idle ms, deliveries): the idle time is the clock's.
                            if let Canon::Arr(mut e) = e {
                                e[2] = Canon::Nil;
                                out.push(Canon::Arr(e));
                            }
                        }
                    }
                    if let Canon::Arr(cs) = run(&["XINFO", "CONSUMERS", k, &name]) {
                        for c in cs {
                            out.push(pick(c, &["name", "pending"]));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    out
}

#[test]
fn payloads_cross_over_after_any_history() {
    let Some(both) = Both::start("dump-cross", &[]) else {
        return;
    };
    let Both {
        mut t, r: mut rd, ..
    } = both;
    let keys = ["a", "b", "c", "d", "e", "f"];
    let mut r = TestRng(0xc0ff_ee11);
    let mut next_id = 0;
    for round in 0..30 {
        for _ in 0..80 {
            let c = gen_history(&mut r, &keys, &mut next_id);
            let what = String::from_utf8_lossy(&c.concat()).into_owned();
            assert_eq!(t.cmd(&c), rd.cmd(&c), "{what}");
        }
        for k in keys {
            let d = cmd(&["DUMP", k]);
            let (from_t, from_r) = (t.cmd(&d), rd.cmd(&d));
            if from_r == Canon::Nil {
                assert_eq!(from_t, Canon::Nil, "{k}");
                continue;
            }
            let (from_t, from_r) = (payload(from_t), payload(from_r));
            // Redis's payload into tidepool, tidepool's into Redis.
            let into = format!("r{round}{k}");
            assert_eq!(tp_restore(&mut t, &into, "0", &from_r, ""), Canon::s("OK"));
            let back = format!("t{round}{k}");
            let restore = vec![b("RESTORE"), b(&back), b("0"), from_t];
            assert_eq!(
                rd.cmd(&restore),
                Canon::s("OK"),
                "redis restores tidepool's {k}"
            );
            let want = value_of(&mut |a| rd.cmd_str(a), k);
            assert_eq!(
                value_of(&mut |a| t.cmd_str(a), &into),
                want,
                "tidepool restored Redis's {k}"
            );
            assert_eq!(
                value_of(&mut |a| rd.cmd_str(a), &back),
                want,
                "Redis restored tidepool's {k}"
            );
        }
    }
}

#[test]
fn restore_checks_arguments_as_redis_does() {
    let Some(both) = Both::start("dump-errors", &[]) else {
        return;
    };
    let Both {
        mut t, r: mut rd, ..
    } = both;
    for c in [cmd(&["SET", "src", "value"]), cmd(&["SET", "busy", "x"])] {
        assert_eq!(t.cmd(&c), rd.cmd(&c));
    }
    let good = payload(rd.cmd(&cmd(&["DUMP", "src"])));
    assert_eq!(payload(t.cmd(&cmd(&["DUMP", "src"]))), good);
    let mut bad_crc = good.clone();
    bad_crc[2] ^= 0x20;
    // A valid footer around a value of an unknown type.
    let mut bad_type = vec![0x7e, 1, 2, 3];
    bad_type.extend_from_slice(&10u16.to_le_bytes());
    let crc = tidepool::rdb::crc64(&bad_type);
    bad_type.extend_from_slice(&crc.to_le_bytes());
    // A string whose length runs past the end.
    let mut short = vec![0x00, 0x30, b'a'];
    short.extend_from_slice(&10u16.to_le_bytes());
    let crc = tidepool::rdb::crc64(&short);
    short.extend_from_slice(&crc.to_le_bytes());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("new1", good.clone(), "0"),
        ("busy", good.clone(), "0"),
        ("busy", good.clone(), "-1"),
        ("new2", good.clone(), "-1"),
        ("new3", good.clone(), "abc"),
        ("new4", b"garbage".to_vec(), "0"),
        ("new5", bad_crc, "0"),
        ("new6", bad_type, "0"),
        ("new7", short, "0"),
    ];
    for (key, p, ttl) in &cases {
        let c = vec![b("RESTORE"), b(key), b(ttl), p.clone()];
        let want = rd.cmd(&c);
        assert_eq!(tp_restore(&mut t, key, ttl, p, ""), want, "{key} {ttl}");
    }
    // An empty payload (the body form cannot carry an empty last argument).
    let empty = cmd(&["RESTORE", "new8", "0", ""]);
    assert_eq!(t.cmd(&empty), rd.cmd(&empty));
    let opts: &[&[&str]] = &[
        &["REPLACE"],
        &["replace", "ABSTTL"],
        &["IDLETIME", "100"],
        &["IDLETIME", "-1"],
        &["IDLETIME", "x"],
        &["IDLETIME"],
        &["FREQ", "256"],
        &["FREQ", "-1"],
        &["FREQ", "5"],
        &["IDLETIME", "5", "FREQ", "5"],
        &["FREQ", "5", "IDLETIME", "5"],
        &["BOGUS"],
        &["REPLACE", "REPLACE"],
    ];
    for (i, o) in opts.iter().enumerate() {
        let key = if i % 2 == 0 {
            "busy".to_string()
        } else {
            format!("o{i}")
        };
        let mut c = vec![b("RESTORE"), b(&key), b("0"), good.clone()];
        c.extend(o.iter().map(|x| b(x)));
        let want = rd.cmd(&c);
        // The query string carries the options after the payload, one name or name=value each.
        let mut q = Vec::new();
        let mut j = 0;
        while j < o.len() {
            let takes_value = matches!(o[j].to_ascii_uppercase().as_str(), "IDLETIME" | "FREQ")
                && j + 1 < o.len();
            if takes_value {
                q.push(format!("{}={}", o[j], o[j + 1]));
                j += 2;
            } else {
                q.push(o[j].to_string());
                j += 1;
            }
        }
        assert_eq!(
            tp_restore(&mut t, &key, "0", &good, &q.join("&")),
            want,
            "{o:?}"
        );
    }
    let c = vec![
        b("RESTORE"),
        b("idle"),
        b("0"),
        good.clone(),
        b("IDLETIME"),
        b("100"),
    ];
    assert_eq!(rd.cmd(&c), Canon::s("OK"));
    assert_eq!(
        tp_restore(&mut t, "idle", "0", &good, "IDLETIME=100"),
        Canon::s("OK")
    );
    let idle = cmd(&["OBJECT", "IDLETIME", "idle"]);
    // Both count whole seconds: a second may tick between RESTORE and the question.
    for got in [t.cmd(&idle), rd.cmd(&idle)] {
        assert!(
            matches!(got, Canon::Int(100 | 101)),
            "IDLETIME 100 is kept: {got:?}"
        );
    }
    // An absolute time in the past: OK, and nothing is created (a replaced key is gone).
    for c in [
        cmd(&["SET", "gone", "1"]),
        vec![
            b("RESTORE"),
            b("gone"),
            b("1000"),
            good.clone(),
            b("ABSTTL"),
            b("REPLACE"),
        ],
        vec![
            b("RESTORE"),
            b("never"),
            b("1000"),
            good.clone(),
            b("ABSTTL"),
        ],
        cmd(&["EXISTS", "gone", "never"]),
    ] {
        let want = rd.cmd(&c);
        let got = if c[0] == b"RESTORE" {
            let opts = if c.len() > 5 {
                "ABSTTL&REPLACE"
            } else {
                "ABSTTL"
            };
            tp_restore(&mut t, &String::from_utf8_lossy(&c[1]), "1000", &good, opts)
        } else {
            t.cmd(&c)
        };
        assert_eq!(got, want, "{:?}", String::from_utf8_lossy(&c[0]));
    }
    for c in [
        cmd(&["DUMP"]),
        cmd(&["DUMP", "a", "b"]),
        cmd(&["RESTORE", "a", "0"]),
    ] {
        assert_eq!(t.cmd(&c), rd.cmd(&c));
    }
}

#[test]
fn restored_keys_survive_a_restart_with_their_ttl() {
    let dir = TempDir::new("dump-replay");
    let (p_list, p_str);
    {
        let s = Server::start(dir.path(), &[]);
        let mut t = s.client();
        t.cmd(&cmd(&["RPUSH", "l", "a", "b", "7"]));
        t.cmd(&cmd(&["SET", "s", "kept"]));
        p_list = payload(t.cmd(&cmd(&["DUMP", "l"])));
        p_str = payload(t.cmd(&cmd(&["DUMP", "s"])));
        assert_eq!(tp_restore(&mut t, "copy", "0", &p_list, ""), Canon::s("OK"));
        assert_eq!(
            tp_restore(&mut t, "ttl", "500000", &p_str, ""),
            Canon::s("OK")
        );
        assert_eq!(
            tp_restore(&mut t, "l", "0", &p_str, "REPLACE"),
            Canon::s("OK")
        );
        assert_eq!(s.terminate(), Some(0));
    }
    let s = Server::start(dir.path(), &[]);
    let mut t = s.client();
    assert_eq!(
        t.cmd(&cmd(&["LRANGE", "copy", "0", "-1"])),
        Canon::Arr(vec![Canon::s("a"), Canon::s("b"), Canon::s("7")])
    );
    assert_eq!(t.cmd(&cmd(&["GET", "l"])), Canon::s("kept"));
    match t.cmd(&cmd(&["PTTL", "ttl"])) {
        Canon::Int(ms) => assert!(ms > 400_000 && ms <= 500_000, "PTTL {ms}"),
        other => panic!("PTTL answered {other:?}"),
    }
    // A payload from Redis 7.2 (RDB 11) is read too; Redis 7.0 itself refuses it.
    let mut newer = p_str[..p_str.len() - 10].to_vec();
    newer.extend_from_slice(&11u16.to_le_bytes());
    let crc = tidepool::rdb::crc64(&newer);
    newer.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(tp_restore(&mut t, "v11", "0", &newer, ""), Canon::s("OK"));
    assert_eq!(t.cmd(&cmd(&["GET", "v11"])), Canon::s("kept"));
    // What Redis's format cannot hold is refused with a reason, not written half.
    t.cmd(&cmd(&["JSON.SET", "j", "$", "{\"a\":1}"]));
    match t.cmd(&cmd(&["DUMP", "j"])) {
        Canon::Err(e) => assert!(e.contains("JSON"), "{e}"),
        other => panic!("DUMP of JSON answered {other:?}"),
    }
}

#[test]
fn function_dump_and_restore_match_redis() {
    let Some(redis) = redis_or_skip() else { return };
    let mut rd = Redis::connect(redis.port);
    let dir = TempDir::new("dump-functions");
    let s = Server::start(dir.path(), &[]);
    let mut t = s.client();
    let lib = "#!lua name=mylib\nredis.register_function('f1', function(keys, args) return 'one' end)\nredis.register_function('f2', function(keys, args) return #keys end)";
    let clash = "#!lua name=other\nredis.register_function('f1', function() return 'other' end)";
    let both = |t: &mut Http, rd: &mut Redis, c: &[&str]| {
        let want = rd.cmd_str(c);
        assert_eq!(t.cmd_str(c), want, "{c:?}");
        want
    };
    both(&mut t, &mut rd, &["FUNCTION", "LOAD", lib]);
    let dump = both(&mut t, &mut rd, &["FUNCTION", "DUMP"]);
    let p = payload(dump);
    both(&mut t, &mut rd, &["SET", "k", "value"]);
    let not_functions = payload(both(&mut t, &mut rd, &["DUMP", "k"]));
    let mut damaged = p.clone();
    damaged[5] ^= 1;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (p.clone(), ""),
        (p.clone(), "APPEND"),
        (p.clone(), "REPLACE"),
        (p.clone(), "bogus"),
        (p.clone(), "FLUSH"),
        (damaged, "FLUSH"),
        (not_functions, "FLUSH"),
        (b"short".to_vec(), ""),
    ];
    for (payload, policy) in &cases {
        let mut c = vec![b("FUNCTION"), b("RESTORE"), payload.clone()];
        if !policy.is_empty() {
            c.push(b(policy));
        }
        let want = rd.cmd(&c);
        assert_eq!(
            tp_function_restore(&mut t, payload, policy),
            want,
            "policy {policy:?}"
        );
    }
    // Too many arguments, an empty payload.
    for c in [
        vec![b("FUNCTION"), b("RESTORE"), p.clone(), b("FLUSH"), b("x")],
        vec![b("FUNCTION"), b("RESTORE"), Vec::new()],
    ] {
        let want = rd.cmd(&c);
        assert_eq!(t.cmd(&c), want);
    }
    // A function of the payload already belongs to another library.
    both(&mut t, &mut rd, &["FUNCTION", "FLUSH"]);
    both(&mut t, &mut rd, &["FUNCTION", "LOAD", clash]);
    let c = vec![b("FUNCTION"), b("RESTORE"), p.clone(), b("REPLACE")];
    assert_eq!(tp_function_restore(&mut t, &p, "REPLACE"), rd.cmd(&c));
    // With FLUSH it goes in, and the functions run.
    let c = vec![b("FUNCTION"), b("RESTORE"), p.clone(), b("FLUSH")];
    assert_eq!(tp_function_restore(&mut t, &p, "FLUSH"), rd.cmd(&c));
    both(&mut t, &mut rd, &["FCALL", "f1", "0"]);
    both(&mut t, &mut rd, &["FCALL", "f2", "2", "a", "b"]);
    let list = ["FUNCTION", "LIST", "WITHCODE"];
    assert_eq!(
        functions_sorted(t.cmd_str(&list)),
        functions_sorted(rd.cmd_str(&list))
    );
    // An empty set of libraries dumps to the footer alone.
    both(&mut t, &mut rd, &["FUNCTION", "FLUSH"]);
    let empty = payload(both(&mut t, &mut rd, &["FUNCTION", "DUMP"]));
    assert_eq!(empty.len(), 10);
    // A restore is logged as the loads it made: it survives a restart.
    assert_eq!(tp_function_restore(&mut t, &p, ""), Canon::s("OK"));
    drop(t);
    assert_eq!(s.terminate(), Some(0));
    let s = Server::start(dir.path(), &[]);
    let mut t = s.client();
    assert_eq!(t.cmd_str(&["FCALL", "f1", "0"]), Canon::s("one"));
}
