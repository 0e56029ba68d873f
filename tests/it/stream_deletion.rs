//! XDELEX and XACKDEL (Redis 8.2): no Redis 7.0 to diff against, so these hold tidepool to
//! Redis's documentation (redis.io/commands/xdelex, /xackdel): -1 no such entry, 1 deleted, 2 kept because a group still needs it (ACKED, and with no groups at
//! all); KEEPREF leaves pending references, DELREF removes them everywhere. One place follows
//! the hosted service instead: XACKDEL deletes an entry that is not pending in the group.

use crate::common::*;

fn ints(v: &[i64]) -> Canon {
    Canon::Arr(v.iter().map(|n| Canon::Int(*n)).collect())
}

fn setup(c: &mut Http) {
    for id in ["1-0", "2-0", "3-0", "4-0"] {
        c.cmd_str(&["XADD", "s", id, "f", "v"]);
    }
    c.cmd_str(&["XGROUP", "CREATE", "s", "g1", "0"]);
    c.cmd_str(&["XGROUP", "CREATE", "s", "g2", "0"]);
    // g1 reads 1-0..3-0, g2 reads 1-0 and 2-0.
    c.cmd_str(&[
        "XREADGROUP",
        "GROUP",
        "g1",
        "a",
        "COUNT",
        "3",
        "STREAMS",
        "s",
        ">",
    ]);
    c.cmd_str(&[
        "XREADGROUP",
        "GROUP",
        "g2",
        "b",
        "COUNT",
        "2",
        "STREAMS",
        "s",
        ">",
    ]);
}

fn pending(c: &mut Http, g: &str) -> i64 {
    match c.cmd_str(&["XPENDING", "s", g]) {
        Canon::Arr(v) => match v[0] {
            Canon::Int(n) => n,
            _ => panic!(),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn xdelex_follows_each_reference_policy() {
    let dir = TempDir::new("xdelex");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    setup(&mut c);
    // ACKED: 1-0 is pending in both groups, 4-0 not yet delivered to any: both kept. The
    // reference check comes first (as in Redis's xdelexCommand), so an absent ID past what
    // some group has read is "kept" too; an absent one every group has passed is -1.
    assert_eq!(
        c.cmd_str(&["XDELEX", "s", "ACKED", "IDS", "4", "1-0", "4-0", "9-9", "1-5"]),
        ints(&[2, 2, 2, -1])
    );
    // KEEPREF (the default) deletes and leaves the pending entries.
    assert_eq!(c.cmd_str(&["XDELEX", "s", "IDS", "1", "1-0"]), ints(&[1]));
    assert_eq!(pending(&mut c, "g1"), 3);
    // DELREF deletes and removes the references in every group.
    assert_eq!(
        c.cmd_str(&["XDELEX", "s", "DELREF", "IDS", "1", "2-0"]),
        ints(&[1])
    );
    assert_eq!(pending(&mut c, "g1"), 2);
    assert_eq!(pending(&mut c, "g2"), 1);
    // DELREF on an entry already gone still cleans dangling references: -1, and 1-0 is no
    // longer pending anywhere.
    assert_eq!(
        c.cmd_str(&["XDELEX", "s", "IDS", "1", "1-0", "DELREF"]),
        ints(&[-1])
    );
    assert_eq!(pending(&mut c, "g1"), 1);
    assert_eq!(pending(&mut c, "g2"), 0);
    // Acknowledged by every group that got it and delivered to all: ACKED deletes.
    c.cmd_str(&["XACK", "s", "g1", "3-0"]);
    c.cmd_str(&["XREADGROUP", "GROUP", "g2", "b", "STREAMS", "s", ">"]);
    c.cmd_str(&["XACK", "s", "g2", "3-0", "4-0"]);
    assert_eq!(
        c.cmd_str(&["XDELEX", "s", "ACKED", "IDS", "1", "3-0"]),
        ints(&[1])
    );
    assert_eq!(c.cmd_str(&["XLEN", "s"]), Canon::Int(1));
    // A missing key answers -1 per ID; with no groups ACKED keeps the entry (2).
    assert_eq!(
        c.cmd_str(&["XDELEX", "none", "IDS", "2", "1-0", "2-0"]),
        ints(&[-1, -1])
    );
    c.cmd_str(&["XADD", "lone", "1-0", "f", "v"]);
    assert_eq!(
        c.cmd_str(&["XDELEX", "lone", "ACKED", "IDS", "1", "1-0"]),
        ints(&[2])
    );
    // Errors, with nothing changed.
    for (cmd, want) in [
        (
            &["XDELEX", "s", "IDS", "0", "1-0"][..],
            "ERR Number of IDs must be a positive integer",
        ),
        (
            &["XDELEX", "s", "IDS", "3", "1-0"],
            "ERR The `numids` parameter must match the number of arguments",
        ),
        (
            &["XDELEX", "s", "ACKED", "KEEPREF", "IDS", "1", "1-0"],
            "ERR syntax error",
        ),
        (&["XDELEX", "s", "ACKED", "FOO", "1-0"], "ERR syntax error"),
        (
            &["XDELEX", "s", "IDS", "1", "bad"],
            "ERR Invalid stream ID specified as stream command argument",
        ),
    ] {
        assert_eq!(c.cmd_str(cmd), Canon::Err(want.into()), "{cmd:?}");
    }
    c.cmd_str(&["SET", "str", "x"]);
    assert!(
        matches!(c.cmd_str(&["XDELEX", "str", "IDS", "1", "1-0"]), Canon::Err(e) if e.starts_with("WRONGTYPE"))
    );
    assert_eq!(c.cmd_str(&["XLEN", "s"]), Canon::Int(1));
}

#[test]
fn xackdel_acknowledges_then_deletes() {
    let dir = TempDir::new("xackdel");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    setup(&mut c);
    // Not pending in g2 (3-0 went to g1 only; 4-0 to nobody): deleted all the same, as the
    // hosted service does (Redis answers -1 and keeps them), under the policy: with ACKED,
    // 3-0 stays for g1 and 4-0, which no group has read yet, stays too (2 each).
    assert_eq!(
        c.cmd_str(&["XACKDEL", "s", "g2", "ACKED", "IDS", "2", "3-0", "4-0"]),
        ints(&[2, 2])
    );
    assert_eq!(c.cmd_str(&["XLEN", "s"]), Canon::Int(4));
    // ACKED: 1-0 is still pending in g1, so g2 acknowledges it and it stays (2).
    assert_eq!(
        c.cmd_str(&["XACKDEL", "s", "g2", "ACKED", "IDS", "1", "1-0"]),
        ints(&[2])
    );
    assert_eq!(pending(&mut c, "g2"), 1);
    assert_eq!(c.cmd_str(&["XLEN", "s"]), Canon::Int(4));
    // Now g1 acknowledges it too, and it goes.
    assert_eq!(
        c.cmd_str(&["XACKDEL", "s", "g1", "ACKED", "IDS", "1", "1-0"]),
        ints(&[1])
    );
    assert_eq!(c.cmd_str(&["XLEN", "s"]), Canon::Int(3));
    // KEEPREF: 2-0 deleted, still pending in g2.
    assert_eq!(
        c.cmd_str(&["XACKDEL", "s", "g1", "IDS", "1", "2-0"]),
        ints(&[1])
    );
    assert_eq!(pending(&mut c, "g2"), 1);
    // A missing group has nothing pending: its entries are deleted (KEEPREF: g1 keeps its
    // reference to 3-0); an entry that does not exist is -1, and so is every ID of a missing
    // key.
    assert_eq!(
        c.cmd_str(&["XACKDEL", "s", "nog", "IDS", "2", "3-0", "9-0"]),
        ints(&[1, -1])
    );
    assert_eq!(c.cmd_str(&["XLEN", "s"]), Canon::Int(1));
    assert_eq!(pending(&mut c, "g1"), 1);
    assert_eq!(
        c.cmd_str(&["XACKDEL", "none", "g1", "IDS", "1", "3-0"]),
        ints(&[-1])
    );
    // The log replays to the same stream and pending lists.
    let before = (
        c.cmd_str(&["XRANGE", "s", "-", "+"]),
        c.cmd_str(&["XPENDING", "s", "g1"]),
        c.cmd_str(&["XPENDING", "s", "g2"]),
        c.cmd_str(&["XINFO", "STREAM", "s"]),
    );
    assert_eq!(server.terminate(), Some(0));
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    let after = (
        c.cmd_str(&["XRANGE", "s", "-", "+"]),
        c.cmd_str(&["XPENDING", "s", "g1"]),
        c.cmd_str(&["XPENDING", "s", "g2"]),
        c.cmd_str(&["XINFO", "STREAM", "s"]),
    );
    assert_eq!(after, before);
}
