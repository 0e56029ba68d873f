//! Redis 8.2's BITOP operations and Redis 8.4's compare-and-set strings (SET IFEQ, IFNE,
//! IFDEQ, IFDNE; DELEX; DIGEST): redis-server 7.0 has none of them, so these hold tidepool to
//! Redis's documentation (redis.io/commands/bitop, /set, /delex, /digest) and its example
//! digest. The differential test drives the BITOP operations against redis-server's state
//! (`differential::hosted_only`).

use crate::common::*;

fn err(text: &str) -> Canon {
    Canon::Err(text.into())
}

/// DIFF, DIFF1, ANDOR and ONE on three one-byte sources: 'p' 0111_0000, 'L' 0100_1100 and
/// '*' 0010_1010, whose others' disjunction is 0110_1110.
#[test]
fn bitop_diff_diff1_andor_and_one() {
    let dir = TempDir::new("bitop82");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    let setup: &[&[&str]] = &[&["MSET", "a", "p", "b", "L", "c", "*"]];
    for (op, byte) in [
        ("DIFF", 0x10u8),
        ("DIFF1", 0x0e),
        ("ANDOR", 0x60),
        ("ONE", 0x16),
    ] {
        every_door_and_lua(
            &mut c,
            setup,
            &["BITOP", op, "d", "a", "b", "c"],
            &Canon::Int(1),
        );
        assert_eq!(c.cmd_str(&["GET", "d"]), Canon::Str(vec![byte]), "{op}");
    }
    // Shorter sources read as zeros: DIFF keeps the first's longer tail.
    c.cmd_str(&["SET", "long", "pp"]);
    assert_eq!(
        c.cmd_str(&["BITOP", "DIFF", "d", "long", "b"]),
        Canon::Int(2)
    );
    assert_eq!(c.cmd_str(&["GET", "d"]), Canon::Str(vec![0x30, b'p']));
    // ONE of one source is that source; missing sources are empty strings; an empty result
    // deletes the destination.
    assert_eq!(c.cmd_str(&["BITOP", "ONE", "d", "a"]), Canon::Int(1));
    assert_eq!(c.cmd_str(&["GET", "d"]), Canon::s("p"));
    assert_eq!(
        c.cmd_str(&["BITOP", "ANDOR", "d", "none1", "none2"]),
        Canon::Int(0)
    );
    assert_eq!(c.cmd_str(&["EXISTS", "d"]), Canon::Int(0));
    for op in ["DIFF", "diff1", "AndOr"] {
        every_door_and_lua(
            &mut c,
            &[],
            &["BITOP", op, "d", "a"],
            &err(&format!(
                "ERR BITOP {} must be called with at least two source keys.",
                op.to_uppercase()
            )),
        );
    }
    c.cmd_str(&["HSET", "h", "f", "v"]);
    assert_eq!(
        c.cmd_str(&["BITOP", "ONE", "d", "a", "h"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(
        c.cmd_str(&["BITOP", "NOR", "d", "a", "b"]),
        err("ERR syntax error")
    );
}

/// The documentation's example: DIGEST of "Hello world" is b6acb9d84a38ff74 (XXH3, 64 bits,
/// 16 lowercase hex digits with leading zeros).
#[test]
fn digest_is_xxh3_in_sixteen_hex_digits() {
    let dir = TempDir::new("digest");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    every_door_and_lua(
        &mut c,
        &[&["SET", "key1", "Hello world"]],
        &["DIGEST", "key1"],
        &Canon::s("b6acb9d84a38ff74"),
    );
    assert_eq!(c.cmd_str(&["DIGEST", "none"]), Canon::Nil);
    c.cmd_str(&["LPUSH", "l", "x"]);
    assert_eq!(
        c.cmd_str(&["DIGEST", "l"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(
        c.cmd_str(&["DIGEST"]),
        err("ERR wrong number of arguments for 'digest' command")
    );
}

/// SET's conditions: IFEQ and IFDEQ never create a key, IFNE and IFDNE do; a failed condition
/// answers nil and changes nothing; GET answers the old value whatever the condition did.
#[test]
fn set_if_conditions_compare_the_value_or_its_digest() {
    let dir = TempDir::new("setif");
    let data = dir.path().join("data");
    let s = Server::start(&data, &[]);
    let mut c = s.client();
    let hello: &[&[&str]] = &[&["SET", "k", "Hello world"]];
    let d = "b6acb9d84a38ff74";
    for (cmd, want, after) in [
        (
            vec!["SET", "k", "n", "IFEQ", "Hello world"],
            Canon::s("OK"),
            "n",
        ),
        (
            vec!["SET", "k", "n", "IFEQ", "other"],
            Canon::Nil,
            "Hello world",
        ),
        (vec!["SET", "k", "n", "IFNE", "other"], Canon::s("OK"), "n"),
        (
            vec!["SET", "k", "n", "IFNE", "Hello world"],
            Canon::Nil,
            "Hello world",
        ),
        (vec!["SET", "k", "n", "IFDEQ", d], Canon::s("OK"), "n"),
        (
            vec!["SET", "k", "n", "IFDEQ", "B6ACB9D84A38FF74"],
            Canon::s("OK"),
            "n",
        ),
        (
            vec!["SET", "k", "n", "IFDEQ", "0000000000000000"],
            Canon::Nil,
            "Hello world",
        ),
        (vec!["SET", "k", "n", "IFDNE", d], Canon::Nil, "Hello world"),
        (
            vec!["SET", "k", "n", "IFDNE", "0000000000000000"],
            Canon::s("OK"),
            "n",
        ),
        (
            vec!["SET", "k", "n", "IFEQ", "other", "GET"],
            Canon::s("Hello world"),
            "Hello world",
        ),
        (
            vec![
                "SET",
                "k",
                "n",
                "IFEQ",
                "Hello world",
                "GET",
                "PX",
                "100000",
            ],
            Canon::s("Hello world"),
            "n",
        ),
    ] {
        every_door_and_lua(&mut c, hello, &cmd, &want);
        assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s(after), "{cmd:?}");
    }
    // On a missing key: IFEQ and IFDEQ do not create it, IFNE and IFDNE do.
    let gone: &[&[&str]] = &[&["DEL", "k"]];
    every_door_and_lua(&mut c, gone, &["SET", "k", "n", "IFEQ", "x"], &Canon::Nil);
    every_door_and_lua(&mut c, gone, &["SET", "k", "n", "IFDEQ", d], &Canon::Nil);
    assert_eq!(c.cmd_str(&["EXISTS", "k"]), Canon::Int(0));
    every_door_and_lua(
        &mut c,
        gone,
        &["SET", "k", "n", "IFNE", "x"],
        &Canon::s("OK"),
    );
    every_door_and_lua(
        &mut c,
        gone,
        &["SET", "k", "n", "IFDNE", d],
        &Canon::s("OK"),
    );
    // Errors: a condition with NX, XX or another condition; a bad digest; another type.
    for bad in [
        vec!["SET", "k", "n", "IFEQ", "a", "NX"],
        vec!["SET", "k", "n", "XX", "IFNE", "a"],
        vec!["SET", "k", "n", "IFEQ", "a", "IFNE", "b"],
        vec!["SET", "k", "n", "IFEQ"],
    ] {
        assert_eq!(c.cmd_str(&bad), err("ERR syntax error"), "{bad:?}");
    }
    for digest in [
        "b6acb9d84a38ff7",
        "b6acb9d84a38ff744",
        "g6acb9d84a38ff74",
        "",
    ] {
        assert_eq!(
            c.cmd_str(&["SET", "k", "n", "IFDEQ", digest]),
            err("ERR The digest must be exactly 16 hexadecimal characters"),
            "{digest:?}"
        );
    }
    c.cmd_str(&["HSET", "h", "f", "v"]);
    assert_eq!(
        c.cmd_str(&["SET", "h", "n", "IFEQ", "v"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    // What the conditions did survives a restart (the log holds plain SETs).
    c.cmd_str(&["SET", "kept", "a"]);
    c.cmd_str(&["SET", "kept", "b", "IFEQ", "a", "EX", "1000"]);
    c.cmd_str(&["SET", "kept", "c", "IFEQ", "a"]);
    assert_eq!(s.terminate(), Some(0));
    let s = Server::start(&data, &[]);
    let mut c = s.client();
    assert_eq!(c.cmd_str(&["GET", "kept"]), Canon::s("b"));
    assert!(matches!(c.cmd_str(&["TTL", "kept"]), Canon::Int(t) if t > 990));
}

/// DELEX: without a condition, DEL of one key of any type; with one, only a string key that
/// passes it. 1 when deleted, 0 otherwise.
#[test]
fn delex_deletes_when_the_condition_holds() {
    let dir = TempDir::new("delex");
    let data = dir.path().join("data");
    let s = Server::start(&data, &[]);
    let mut c = s.client();
    let hello: &[&[&str]] = &[&["SET", "k", "Hello world"]];
    let d = "b6acb9d84a38ff74";
    for (cmd, want) in [
        (vec!["DELEX", "k"], 1),
        (vec!["DELEX", "k", "IFEQ", "Hello world"], 1),
        (vec!["DELEX", "k", "IFEQ", "other"], 0),
        (vec!["DELEX", "k", "IFNE", "other"], 1),
        (vec!["DELEX", "k", "IFNE", "Hello world"], 0),
        (vec!["DELEX", "k", "IFDEQ", d], 1),
        (vec!["DELEX", "k", "ifdeq", "B6ACB9D84A38FF74"], 1),
        (vec!["DELEX", "k", "IFDNE", d], 0),
        (vec!["DELEX", "k", "IFDNE", "0123456789abcdef"], 1),
    ] {
        every_door_and_lua(&mut c, hello, &cmd, &Canon::Int(want));
        assert_eq!(c.cmd_str(&["EXISTS", "k"]), Canon::Int(1 - want), "{cmd:?}");
    }
    // A missing key is never deleted, not even by IFNE.
    assert_eq!(c.cmd_str(&["DELEX", "none", "IFNE", "x"]), Canon::Int(0));
    c.cmd_str(&["HSET", "h", "f", "v"]);
    assert_eq!(
        c.cmd_str(&["DELEX", "h", "IFEQ", "v"]),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(c.cmd_str(&["DELEX", "h"]), Canon::Int(1));
    for bad in [
        vec!["DELEX", "k", "IFEQ"],
        vec!["DELEX", "k", "IFXX", "a"],
        vec!["DELEX", "k", "IFEQ", "a", "b"],
    ] {
        assert_eq!(c.cmd_str(&bad), err("ERR syntax error"), "{bad:?}");
    }
    assert_eq!(
        c.cmd_str(&["DELEX", "k", "IFDNE", "xyz"]),
        err("ERR The digest must be exactly 16 hexadecimal characters")
    );
    // A deletion survives a restart.
    c.cmd_str(&["SET", "gone", "a"]);
    assert_eq!(c.cmd_str(&["DELEX", "gone", "IFEQ", "a"]), Canon::Int(1));
    assert_eq!(s.terminate(), Some(0));
    let s = Server::start(&data, &[]);
    assert_eq!(s.client().cmd_str(&["EXISTS", "gone"]), Canon::Int(0));
}
