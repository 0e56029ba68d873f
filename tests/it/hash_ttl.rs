//! Hash-field expiration (Redis 7.4 and 8.0: HEXPIRE and its family, HTTL and its family,
//! HPERSIST, HGETEX, HSETEX). The Redis the differential test runs (7.0) does not have them, so
//! these tests hold tidepool to the replies and error texts of Redis's documentation and
//! `t_hash.c`. Replay with field TTLs is covered by the differential test's replay workload.

use crate::common::*;

fn ints(v: &[i64]) -> Canon {
    Canon::Arr(v.iter().map(|n| Canon::Int(*n)).collect())
}

fn err(c: Canon) -> String {
    match c {
        Canon::Err(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[test]
fn expire_commands_answer_per_field_as_redis_documents() {
    let dir = TempDir::new("hfe-replies");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    c.cmd_str(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);

    // 1 set, -2 no such field.
    assert_eq!(
        c.cmd_str(&["HEXPIRE", "h", "100", "FIELDS", "2", "a", "zz"]),
        ints(&[1, -2])
    );
    // HTTL: seconds left, -1 no TTL, -2 no field.
    assert_eq!(
        c.cmd_str(&["HTTL", "h", "FIELDS", "3", "a", "b", "zz"]),
        ints(&[100, -1, -2])
    );
    // NX: only fields without a TTL; XX: only fields with one.
    assert_eq!(
        c.cmd_str(&["HPEXPIRE", "h", "300000", "NX", "FIELDS", "2", "a", "b"]),
        ints(&[0, 1])
    );
    assert_eq!(
        c.cmd_str(&["HPEXPIRE", "h", "200000", "XX", "FIELDS", "2", "a", "c"]),
        ints(&[1, 0])
    );
    // No TTL counts as infinite: GT fails, LT succeeds.
    assert_eq!(
        c.cmd_str(&["HEXPIRE", "h", "50", "GT", "FIELDS", "1", "c"]),
        ints(&[0])
    );
    assert_eq!(
        c.cmd_str(&["HEXPIRE", "h", "50", "LT", "FIELDS", "1", "c"]),
        ints(&[1])
    );
    // GT against an existing TTL: a (200 s) to 100 s is not greater; to 400 s is.
    assert_eq!(
        c.cmd_str(&["HEXPIRE", "h", "100", "GT", "FIELDS", "1", "a"]),
        ints(&[0])
    );
    assert_eq!(
        c.cmd_str(&["HEXPIRE", "h", "400", "GT", "FIELDS", "1", "a"]),
        ints(&[1])
    );
    // The absolute forms and the *EXPIRETIME readers agree.
    let at = now_ms() / 1000 + 1000;
    assert_eq!(
        c.cmd_str(&["HEXPIREAT", "h", &at.to_string(), "FIELDS", "1", "b"]),
        ints(&[1])
    );
    assert_eq!(
        c.cmd_str(&["HEXPIRETIME", "h", "FIELDS", "1", "b"]),
        ints(&[at])
    );
    assert_eq!(
        c.cmd_str(&["HPEXPIRETIME", "h", "FIELDS", "1", "b"]),
        ints(&[at * 1000])
    );
    let Canon::Arr(pttl) = c.cmd_str(&["HPTTL", "h", "FIELDS", "1", "b"]) else {
        panic!()
    };
    assert!(matches!(pttl[0], Canon::Int(n) if n > 990_000 && n <= 1_000_000));
    // A time in the past deletes the field: 2.
    assert_eq!(
        c.cmd_str(&["HPEXPIREAT", "h", "1000", "FIELDS", "1", "c"]),
        ints(&[2])
    );
    assert_eq!(c.cmd_str(&["HEXISTS", "h", "c"]), Canon::Int(0));
    // HPERSIST: 1 removed, -1 had none, -2 no field.
    c.cmd_str(&["HSET", "h", "d", "4"]);
    assert_eq!(
        c.cmd_str(&["HPERSIST", "h", "FIELDS", "3", "a", "d", "zz"]),
        ints(&[1, -1, -2])
    );
    assert_eq!(c.cmd_str(&["HTTL", "h", "FIELDS", "1", "a"]), ints(&[-1]));
    // A missing key answers -2 for every field; another type is WRONGTYPE.
    assert_eq!(
        c.cmd_str(&["HEXPIRE", "none", "10", "FIELDS", "2", "a", "b"]),
        ints(&[-2, -2])
    );
    assert_eq!(
        c.cmd_str(&["HTTL", "none", "FIELDS", "1", "a"]),
        ints(&[-2])
    );
    assert_eq!(
        c.cmd_str(&["HPERSIST", "none", "FIELDS", "1", "a"]),
        ints(&[-2])
    );
    c.cmd_str(&["SET", "s", "x"]);
    for cmd in [
        &["HEXPIRE", "s", "10", "FIELDS", "1", "a"][..],
        &["HTTL", "s", "FIELDS", "1", "a"],
        &["HPERSIST", "s", "FIELDS", "1", "a"],
        &["HGETEX", "s", "FIELDS", "1", "a"],
    ] {
        assert!(err(c.cmd_str(cmd)).starts_with("WRONGTYPE"), "{cmd:?}");
    }
    // A small hash with field TTLs reports Redis 7.4's encoding.
    c.cmd_str(&["HEXPIRE", "h", "100", "FIELDS", "1", "a"]);
    assert_eq!(
        c.cmd_str(&["OBJECT", "ENCODING", "h"]),
        Canon::s("listpackex")
    );
}

#[test]
fn bad_arguments_get_redis_error_texts() {
    let dir = TempDir::new("hfe-errors");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    c.cmd_str(&["HSET", "h", "a", "1"]);
    let cases: &[(&[&str], &str)] = &[
        (
            &["HEXPIRE", "h", "x", "FIELDS", "1", "a"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["HEXPIRE", "h", "-1", "FIELDS", "1", "a"],
            "ERR invalid expire time, must be >= 0",
        ),
        (
            // Past what milliseconds can hold (Redis's own bound, 2^46 ms, is not kept: the
            // hosted service accepts later times, tests/it/hosted.rs).
            &["HEXPIRE", "h", "9223372036854776", "FIELDS", "1", "a"],
            "ERR invalid expire time in 'hexpire' command",
        ),
        (
            &["HPEXPIRE", "h", "9223372036854775807", "FIELDS", "1", "a"],
            "ERR invalid expire time in 'hpexpire' command",
        ),
        (
            &["HEXPIRE", "h", "10", "FIELDS", "0", "a"],
            "ERR Parameter `numFields` should be greater than 0",
        ),
        (
            &["HEXPIRE", "h", "10", "FIELDS", "2", "a"],
            "ERR The `numfields` parameter must match the number of arguments",
        ),
        (
            &["HEXPIRE", "h", "10", "FILEDS", "1", "a"],
            "ERR Mandatory argument FIELDS is missing or not at the right position",
        ),
        (
            &["HTTL", "h", "FIELDS", "-1", "a"],
            "ERR Number of fields must be a positive integer",
        ),
        (
            &["HGETEX", "h", "EX", "-5", "FIELDS", "1", "a"],
            "ERR invalid expire time, must be >= 0",
        ),
        (
            &["HSETEX", "h", "EX", "1", "PX", "2", "FIELDS", "1", "a", "b"],
            "ERR Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified",
        ),
        (
            &["HSETEX", "h", "FNX", "FXX", "FIELDS", "1", "a", "b"],
            "ERR Only one of FXX or FNX arguments can be specified",
        ),
        (
            &["HSETEX", "h", "NOPE", "FIELDS", "1", "a", "b"],
            "ERR unknown argument: NOPE",
        ),
        (
            &["HSETEX", "h", "FIELDS", "0", "a", "b"],
            "ERR invalid number of fields",
        ),
        (
            &["HSETEX", "h", "FIELDS", "2", "a", "b"],
            "ERR wrong number of arguments for 'hsetex' command",
        ),
    ];
    for (cmd, want) in cases {
        assert_eq!(err(c.cmd_str(cmd)), *want, "{cmd:?}");
    }
    // Nothing above changed the hash.
    assert_eq!(c.cmd_str(&["HTTL", "h", "FIELDS", "1", "a"]), ints(&[-1]));
}

#[test]
fn fields_expire_on_time_and_the_last_one_takes_the_key() {
    let dir = TempDir::new("hfe-expiry");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    let mut ro = Http::connect(&server.addr, RO_TOKEN);
    c.cmd_str(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
    c.cmd_str(&["HSET", "gone", "x", "1"]);
    assert_eq!(
        c.cmd_str(&["HPEXPIRE", "h", "150", "FIELDS", "2", "a", "b"]),
        ints(&[1, 1])
    );
    c.cmd_str(&["HPEXPIRE", "gone", "150", "FIELDS", "1", "x"]);
    assert_eq!(c.cmd_str(&["HGET", "h", "a"]), Canon::s("1"));
    // The server's clock moves on (a test build's route): no real time is waited for.
    server.advance_clock(400);
    // Read through the Read Only token: expired fields are gone for reads too.
    assert_eq!(ro.cmd_str(&["HGET", "h", "a"]), Canon::Nil);
    assert_eq!(ro.cmd_str(&["HLEN", "h"]), Canon::Int(1));
    assert_eq!(
        ro.cmd_str(&["HGETALL", "h"]),
        Canon::Arr(vec![Canon::s("c"), Canon::s("3")])
    );
    assert_eq!(c.cmd_str(&["EXISTS", "gone"]), Canon::Int(0));
    // After a restart the state is the same: once the expiry cycle has logged its deletions
    // (read beside the server), since the restarted server's clock is the real one again.
    let data = dir.path().join("data");
    let d = data.to_str().expect("path");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !(log_tool(&["dump", "--key", "gone", d]).1.contains("DEL\"")
        && log_tool(&["dump", "--key", "h", d]).1.contains("\"HDEL\""))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the expiry was never logged"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(ro);
    assert_eq!(server.terminate(), Some(0));
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["HLEN", "h"]), Canon::Int(1));
    assert_eq!(c.cmd_str(&["EXISTS", "gone"]), Canon::Int(0));
}

#[test]
fn writes_keep_or_drop_field_ttls_as_redis_does() {
    let dir = TempDir::new("hfe-writes");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    let ttl = |c: &mut Http, k: &str, f: &str| match c.cmd_str(&["HTTL", k, "FIELDS", "1", f]) {
        Canon::Arr(v) => v[0].clone(),
        other => panic!("{other:?}"),
    };
    c.cmd_str(&["HSET", "h", "a", "1", "b", "2", "n", "5", "x", "1.5"]);
    c.cmd_str(&["HEXPIRE", "h", "100", "FIELDS", "4", "a", "b", "n", "x"]);
    // HSET overwrites the value and drops the TTL; HINCRBY and HINCRBYFLOAT keep it.
    c.cmd_str(&["HSET", "h", "a", "new"]);
    assert_eq!(ttl(&mut c, "h", "a"), Canon::Int(-1));
    assert_eq!(c.cmd_str(&["HINCRBY", "h", "n", "2"]), Canon::Int(7));
    assert_eq!(ttl(&mut c, "h", "n"), Canon::Int(100));
    assert_eq!(c.cmd_str(&["HINCRBYFLOAT", "h", "x", "1"]), Canon::s("2.5"));
    assert_eq!(ttl(&mut c, "h", "x"), Canon::Int(100));
    // HSETEX: KEEPTTL keeps it, no option drops it, EX sets it; FNX and FXX answer 0 and
    // change nothing when a field fails them.
    assert_eq!(
        c.cmd_str(&["HSETEX", "h", "KEEPTTL", "FIELDS", "1", "b", "B"]),
        Canon::Int(1)
    );
    assert_eq!(ttl(&mut c, "h", "b"), Canon::Int(100));
    assert_eq!(
        c.cmd_str(&["HSETEX", "h", "FNX", "EX", "50", "FIELDS", "2", "b", "z", "new", "v"]),
        Canon::Int(0)
    );
    assert_eq!(c.cmd_str(&["HEXISTS", "h", "new"]), Canon::Int(0));
    assert_eq!(
        c.cmd_str(&["HSETEX", "h", "FXX", "EX", "50", "FIELDS", "2", "b", "z", "n", "9"]),
        Canon::Int(1)
    );
    assert_eq!(ttl(&mut c, "h", "b"), Canon::Int(50));
    assert_eq!(c.cmd_str(&["HGET", "h", "b"]), Canon::s("z"));
    assert_eq!(
        c.cmd_str(&["HSETEX", "h", "FIELDS", "1", "b", "plain"]),
        Canon::Int(1)
    );
    assert_eq!(ttl(&mut c, "h", "b"), Canon::Int(-1));
    assert_eq!(
        c.cmd_str(&["HSETEX", "fresh", "FXX", "FIELDS", "1", "a", "b"]),
        Canon::Int(0)
    );
    assert_eq!(c.cmd_str(&["EXISTS", "fresh"]), Canon::Int(0));
    // HGETEX answers the values, then sets, removes or (with a past time) deletes.
    assert_eq!(
        c.cmd_str(&["HGETEX", "h", "EX", "70", "FIELDS", "2", "n", "missing"]),
        Canon::Arr(vec![Canon::s("9"), Canon::Nil])
    );
    assert_eq!(ttl(&mut c, "h", "n"), Canon::Int(70));
    c.cmd_str(&["HGETEX", "h", "PERSIST", "FIELDS", "1", "n"]);
    assert_eq!(ttl(&mut c, "h", "n"), Canon::Int(-1));
    assert_eq!(
        c.cmd_str(&["HGETEX", "h", "PXAT", "1", "FIELDS", "1", "n"]),
        Canon::Arr(vec![Canon::s("9")])
    );
    assert_eq!(c.cmd_str(&["HEXISTS", "h", "n"]), Canon::Int(0));
    assert_eq!(
        c.cmd_str(&["HGETEX", "none", "FIELDS", "1", "a"]),
        Canon::Arr(vec![Canon::Nil])
    );
    // HDEL drops a field's TTL with it: a field set again has none.
    c.cmd_str(&["HDEL", "h", "x"]);
    c.cmd_str(&["HSET", "h", "x", "again"]);
    assert_eq!(ttl(&mut c, "h", "x"), Canon::Int(-1));
    // RENAME and COPY carry the TTLs, and the copy's fields expire on their own.
    c.cmd_str(&["HPEXPIRE", "h", "200", "FIELDS", "1", "x"]);
    c.cmd_str(&["COPY", "h", "h2"]);
    c.cmd_str(&["RENAME", "h", "h3"]);
    assert!(matches!(ttl(&mut c, "h3", "x"), Canon::Int(n) if n == 1));
    server.advance_clock(450);
    assert_eq!(c.cmd_str(&["HEXISTS", "h2", "x"]), Canon::Int(0));
    assert_eq!(c.cmd_str(&["HEXISTS", "h3", "x"]), Canon::Int(0));
    assert_eq!(c.cmd_str(&["HGET", "h3", "a"]), Canon::s("new"));
}
