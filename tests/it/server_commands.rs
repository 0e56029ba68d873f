//! Server introspection: COMMAND (COUNT, INFO, DOCS, LIST, GETKEYS, GETKEYSANDFLAGS), CONFIG GET and MEMORY
//! USAGE, compared with a real redis-server where the two can agree (tidepool's command table
//! has no key specifications, tips or argument docs, so those parts are not compared).

use crate::common::*;

fn arr(c: Canon) -> Vec<Canon> {
    match c {
        Canon::Arr(v) => v,
        other => panic!("expected an array, got {other:?}"),
    }
}

#[test]
fn command_introspection_agrees_with_redis() {
    let Some(mut both) = Both::start("introspect", &[]) else {
        return;
    };
    let Both { t, r, .. } = &mut both;

    assert_eq!(
        t.cmd_str(&["COMMAND", "COUNT"]),
        r.cmd_str(&["COMMAND", "COUNT"])
    );
    // GETKEYS at fixed positions, and its errors.
    for c in [
        &["COMMAND", "GETKEYS", "SET", "a", "b"][..],
        &["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"],
        &["COMMAND", "GETKEYS", "RENAME", "x", "y"],
        &["COMMAND", "GETKEYS", "XINFO", "STREAM", "s"],
        &["COMMAND", "GETKEYS", "NOPE", "a"],
        &["COMMAND", "GETKEYS", "GET", "a", "b"],
        &["COMMAND", "GETKEYS", "PING", "x"],
        &["COMMAND", "GETKEYS", "GET"],
    ] {
        assert_eq!(t.cmd_str(c), r.cmd_str(c), "{c:?}");
    }
    // GETKEYSANDFLAGS: each key with its flags, from the key specifications or the command's
    // own key finding (SET, BITFIELD, SORT), as Redis lists them.
    for line in [
        "SET a b",
        "SET a b GET",
        "LMOVE a b LEFT LEFT",
        "ZUNIONSTORE d 2 a b",
        "SORT a STORE b",
        "SORT_RO a",
        "BITFIELD a GET u8 0",
        "BITFIELD a SET u8 0 1",
        "EVAL x 2 a b",
        "XREAD STREAMS s 0",
        "XREADGROUP GROUP g c STREAMS s >",
        "GEORADIUS g 0 0 1 m STORE d",
        "MIGRATE h 1 k 0 1",
        "GETEX a",
        "LCS a b",
        "MSET a 1 b 2",
        "RENAME x y",
        "DEL a b c",
        "XINFO STREAM s",
        "GET",
        "NOPE a",
        "PING x",
    ] {
        let mut c = vec!["COMMAND", "GETKEYSANDFLAGS"];
        c.extend(line.split(' '));
        assert_eq!(t.cmd_str(&c), r.cmd_str(&c), "{c:?}");
    }
    // Keys that move with the arguments: a clear error, never a wrong list.
    assert!(t
        .cmd_str(&["COMMAND", "GETKEYS", "ZUNIONSTORE", "d", "2", "a", "b"])
        .is_err());
    // COMMAND INFO: name, arity, flags, key positions and ACL categories are Redis's.
    for name in ["get", "hset", "xinfo|stream", "zunionstore", "nosuch"] {
        let (tv, rv) = (
            arr(t.cmd_str(&["COMMAND", "INFO", name])),
            arr(r.cmd_str(&["COMMAND", "INFO", name])),
        );
        match (&tv[0], &rv[0]) {
            (Canon::Arr(a), Canon::Arr(b)) => assert_eq!(a[..7], b[..7], "{name}"),
            (a, b) => assert_eq!(a, b, "{name}"),
        }
    }
    // Subcommands are listed under their container.
    let info = arr(t.cmd_str(&["COMMAND", "INFO", "xinfo"]));
    let subs = arr(arr(info[0].clone())[9].clone());
    assert_eq!(subs.len(), 4);
    // COMMAND DOCS: the summary and group match; unknown names are left out.
    let docs = arr(t.cmd_str(&["COMMAND", "DOCS", "get", "nosuch"]));
    assert_eq!(docs[0], Canon::s("get"));
    assert_eq!(
        arr(docs[1].clone())[..4],
        [
            Canon::s("summary"),
            Canon::s("Get the value of a key"),
            Canon::s("group"),
            Canon::s("string")
        ]
    );
    assert_eq!(docs.len(), 2);
    // COMMAND LIST FILTERBY ACLCAT: Redis 7.0's list, plus the newer commands tidepool serves.
    let mut tl = arr(t.cmd_str(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "list"]));
    let mut rl = arr(r.cmd_str(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "list"]));
    tl.sort();
    rl.sort();
    assert_eq!(tl, rl);
    let pat = arr(t.cmd_str(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "xinfo*"]));
    assert_eq!(pat.len(), 5, "xinfo and its four subcommands");
}

#[test]
fn config_get_and_memory_usage() {
    let dir = TempDir::new("config");
    let s = Server::start(dir.path(), &["--fsync", "everysec"]);
    let mut t = s.client();
    // CONFIG GET answers what the server does, in Redis's names; CONFIG SET is refused.
    let got = arr(t.cmd_str(&["CONFIG", "GET", "appendfsync", "maxmemory*"]));
    let pairs: Vec<(Canon, Canon)> = got
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    assert!(pairs.contains(&(Canon::s("appendfsync"), Canon::s("everysec"))));
    assert!(pairs.contains(&(Canon::s("maxmemory"), Canon::s("0"))));
    assert!(pairs.contains(&(Canon::s("maxmemory-policy"), Canon::s("noeviction"))));
    assert_eq!(t.cmd_str(&["CONFIG", "GET", "nosuch"]), Canon::Arr(vec![]));
    match t.cmd_str(&["CONFIG", "SET", "maxmemory", "1"]) {
        Canon::Err(e) => assert!(e.starts_with("ERR 'CONFIG SET' is not supported"), "{e}"),
        other => panic!("{other:?}"),
    }
    // MEMORY USAGE: nil for no key; grows with the value.
    assert_eq!(t.cmd_str(&["MEMORY", "USAGE", "none"]), Canon::Nil);
    t.cmd_str(&["SET", "small", "x"]);
    t.cmd_str(&["SET", "big", &"x".repeat(10_000)]);
    let (Canon::Int(a), Canon::Int(b)) = (
        t.cmd_str(&["MEMORY", "USAGE", "small"]),
        t.cmd_str(&["MEMORY", "USAGE", "big", "SAMPLES", "5"]),
    ) else {
        panic!("MEMORY USAGE answers integers")
    };
    assert!(a > 0 && b > a + 9_000, "{a} {b}");
    assert!(t.cmd_str(&["MEMORY", "USAGE", "big", "FOO"]).is_err());
}
