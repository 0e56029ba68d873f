//! What the differential test cannot compare: random picks. SPOP must remove exactly what it
//! returns, and a restart must rebuild the same set (the log holds the effect, an SREM, not the
//! random request).

use crate::common::*;

fn members(c: &mut Http, key: &str) -> Vec<Vec<u8>> {
    let Canon::Arr(items) = c.cmd_str(&["SMEMBERS", key]) else {
        panic!("SMEMBERS")
    };
    let mut v: Vec<Vec<u8>> = items
        .into_iter()
        .map(|m| if let Canon::Str(s) = m { s } else { panic!() })
        .collect();
    v.sort();
    v
}

#[test]
fn spop_removes_what_it_returns_and_replays_the_same() {
    let dir = TempDir::new("spop");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    let all: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    let mut sadd = vec!["SADD".to_string(), "s".into()];
    sadd.extend(all.iter().cloned());
    c.cmd(
        &sadd
            .iter()
            .map(|x| x.as_bytes().to_vec())
            .collect::<Vec<_>>(),
    );

    let Canon::Str(one) = c.cmd_str(&["SPOP", "s"]) else {
        panic!("SPOP returns a member")
    };
    let Canon::Arr(many) = c.cmd_str(&["SPOP", "s", "50"]) else {
        panic!("SPOP count returns an array")
    };
    assert_eq!(many.len(), 50);
    let mut popped: Vec<Vec<u8>> = many
        .into_iter()
        .map(|m| if let Canon::Str(s) = m { s } else { panic!() })
        .collect();
    popped.push(one);
    popped.sort();
    popped.dedup();
    assert_eq!(popped.len(), 51, "distinct members");
    let left = members(&mut c, "s");
    assert_eq!(left.len(), 149);
    for p in &popped {
        assert!(!left.contains(p), "popped member still in the set");
        assert!(all.iter().any(|a| a.as_bytes() == p.as_slice()));
    }
    // SRANDMEMBER with a negative count repeats, with a positive one it does not.
    let Canon::Arr(r) = c.cmd_str(&["SRANDMEMBER", "s", "-500"]) else {
        panic!()
    };
    assert_eq!(r.len(), 500);
    let Canon::Arr(r) = c.cmd_str(&["SRANDMEMBER", "s", "20"]) else {
        panic!()
    };
    let mut r: Vec<Canon> = r;
    r.sort();
    r.dedup();
    assert_eq!(r.len(), 20);
    // Popping everything deletes the key.
    let Canon::Arr(rest) = c.cmd_str(&["SPOP", "s", "1000"]) else {
        panic!()
    };
    assert_eq!(rest.len(), 149);
    assert_eq!(c.cmd_str(&["EXISTS", "s"]), Canon::Int(0));
    c.cmd(
        &sadd
            .iter()
            .map(|x| x.as_bytes().to_vec())
            .collect::<Vec<_>>(),
    );
    c.cmd_str(&["SPOP", "s", "77"]);
    let before = members(&mut c, "s");
    server.terminate();

    let server = Server::start(&data, &[]);
    let after = members(&mut server.client(), "s");
    assert_eq!(before, after, "replay rebuilt the same set");
    server.terminate(); // tidepool-log reads only logs no server holds
    let (code, dump) = {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool-log"))
            .args(["dump", data.to_str().unwrap()])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(code, Some(0));
    assert!(
        dump.contains("\"SREM\" \"s\""),
        "SPOP is logged as its effect"
    );
    assert!(!dump.contains("\"SPOP\""), "{dump}");
}

/// Regression: rotating a one-element list onto itself (RPOPLPUSH l l) deleted and recreated
/// the key, dropping its TTL; Redis pushes before it checks whether the source is empty.
#[test]
fn rotating_a_one_element_list_keeps_its_ttl() {
    let dir = TempDir::new("rotate");
    let server = Server::start(dir.path(), &["--fsync", "never"]);
    let mut c = server.client();
    c.cmd_str(&["RPUSH", "l", "x"]);
    c.cmd_str(&["EXPIRE", "l", "1000"]);
    assert_eq!(c.cmd_str(&["RPOPLPUSH", "l", "l"]), Canon::s("x"));
    assert_eq!(
        c.cmd_str(&["LMOVE", "l", "l", "LEFT", "RIGHT"]),
        Canon::s("x")
    );
    assert_eq!(
        c.cmd_str(&["LRANGE", "l", "0", "-1"]),
        Canon::Arr(vec![Canon::s("x")])
    );
    assert_eq!(c.cmd_str(&["TTL", "l"]), Canon::Int(1000));
}

/// XADD `*` takes its ID from the command's timestamp and is logged with the ID it produced:
/// IDs only grow, and a restart rebuilds exactly the same stream.
#[test]
fn auto_stream_ids_grow_and_replay_exactly() {
    let dir = TempDir::new("xadd-auto");
    let data = dir.path().join("d");
    let before = {
        let server = Server::start(&data, &["--fsync", "never"]);
        let mut c = server.client();
        let mut ids = Vec::new();
        for i in 0..50 {
            match c.cmd_str(&["XADD", "s", "*", "n", &i.to_string()]) {
                Canon::Str(id) => ids.push(String::from_utf8(id).expect("utf8")),
                other => panic!("XADD answered {other:?}"),
            }
        }
        let parse = |s: &str| -> (u64, u64) {
            let (a, b) = s.split_once('-').expect("ms-seq");
            (a.parse().expect("ms"), b.parse().expect("seq"))
        };
        for w in ids.windows(2) {
            assert!(parse(&w[1]) > parse(&w[0]), "{} then {}", w[0], w[1]);
        }
        // A partial ID gets the next sequence of its millisecond.
        let last = parse(ids.last().expect("ids"));
        assert_eq!(
            c.cmd_str(&["XADD", "s", &format!("{}-*", last.0), "n", "x"]),
            Canon::Str(format!("{}-{}", last.0, last.1 + 1).into_bytes())
        );
        c.cmd_str(&["XADD", "s", "MAXLEN", "~", "10", "*", "n", "y"]);
        let state = (
            c.cmd_str(&["XRANGE", "s", "-", "+"]),
            c.cmd_str(&["XINFO", "STREAM", "s"]),
        );
        server.kill9();
        state
    };
    let server = Server::start(&data, &["--fsync", "never"]);
    let mut c = server.client();
    let after = (
        c.cmd_str(&["XRANGE", "s", "-", "+"]),
        c.cmd_str(&["XINFO", "STREAM", "s"]),
    );
    assert_eq!(before, after);
    assert_eq!(
        c.cmd_str(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]),
        Canon::Err("ERR 'XREAD' is not supported over REST: the BLOCK option needs a connection that HTTP does not keep".into())
    );
}

/// HGETDEL (Redis 8.0; no Redis 7.0 to compare with): the semantics and texts of Redis's
/// `hgetdelCommand`, and its log form (the HDEL it amounts to) replays.
#[test]
fn hgetdel_returns_and_deletes_fields() {
    let dir = TempDir::new("hgetdel");
    let data = dir.path().join("d");
    let s = |v: &str| Canon::s(v);
    {
        let server = Server::start(&data, &["--fsync", "never"]);
        let mut c = server.client();
        c.cmd_str(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
        c.cmd_str(&["SET", "str", "x"]);
        assert_eq!(
            c.cmd_str(&["HGETDEL", "h", "FIELDS", "2", "a", "x"]),
            Canon::Arr(vec![s("1"), Canon::Nil])
        );
        assert_eq!(c.cmd_str(&["HLEN", "h"]), Canon::Int(2));
        assert_eq!(
            c.cmd_str(&["HGETDEL", "nokey", "FIELDS", "1", "a"]),
            Canon::Arr(vec![Canon::Nil])
        );
        for (args, err) in [
            (
                vec!["HGETDEL", "str", "FIELDS", "1", "a"],
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            (
                vec!["HGETDEL", "h", "FIELD", "1", "a"],
                "ERR Mandatory argument FIELDS is missing or not at the right position",
            ),
            (
                vec!["HGETDEL", "h", "FIELDS", "0", "a"],
                "ERR Number of fields must be a positive integer",
            ),
            (
                vec!["HGETDEL", "h", "FIELDS", "x", "a"],
                "ERR Number of fields must be a positive integer",
            ),
            (
                vec!["HGETDEL", "h", "FIELDS", "2", "a"],
                "ERR The `numfields` parameter must match the number of arguments",
            ),
            (
                vec!["HGETDEL", "h", "FIELDS"],
                "ERR wrong number of arguments for 'hgetdel' command",
            ),
        ] {
            assert_eq!(c.cmd_str(&args), Canon::Err(err.into()), "{args:?}");
        }
        assert_eq!(
            c.cmd_str(&["HGETDEL", "h", "FIELDS", "1", "b"]),
            Canon::Arr(vec![s("2")])
        );
        server.kill9();
    }
    let server = Server::start(&data, &["--fsync", "never"]);
    let mut c = server.client();
    assert_eq!(
        c.cmd_str(&["HGETALL", "h"]),
        Canon::Arr(vec![s("c"), s("3")])
    );
    assert_eq!(
        c.cmd_str(&["HGETDEL", "h", "FIELDS", "1", "c"]),
        Canon::Arr(vec![s("3")])
    );
    assert_eq!(
        c.cmd_str(&["EXISTS", "h"]),
        Canon::Int(0),
        "an emptied hash is gone"
    );
}
