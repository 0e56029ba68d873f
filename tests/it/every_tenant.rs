//! Issue 25, "every tenant, every byte": no database may stall the others, no slow body may
//! grow the server, no revoked token may keep listening, and the limits hold for every key a
//! command writes and every value it grows. Each test names the defect it guards; each failed
//! on the main before the issue (076610d).

use crate::common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ADMIN: &str = "tenant-admin-token";

fn start(data: &std::path::Path, extra: &[&str]) -> Server {
    let mut flags = vec!["--admin-token", ADMIN];
    flags.extend_from_slice(extra);
    Server::start(data, &flags)
}

fn admin(server: &Server) -> Http {
    Http::connect(&server.addr, ADMIN)
}

/// Creates database `name` with `settings` (script_time_limit_ms, max_data_bytes).
fn create_with(server: &Server, name: &str, settings: Value) -> Value {
    let mut body = settings;
    body["name"] = json!(name);
    let r = admin(server).post("/_admin/databases", body.to_string().as_bytes());
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()
}

fn client_of(server: &Server, db: &Value) -> Http {
    Http::connect(&server.addr, db["token"].as_str().expect("token"))
}

/// A scratch database from `POST /start`, as anyone on loopback may make one: its name and
/// Standard token.
fn scratch(server: &Server) -> (String, String) {
    let r = Http::connect(&server.addr, "").post("/start", b"");
    assert_eq!(r.status, 201, "{}", r.text());
    let text = r.text();
    let token = text
        .split("UPSTASH_REDIS_REST_TOKEN=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .expect("token in the quickstart")
        .to_string();
    let name = text
        .split("scratch database: `")
        .nth(1)
        .and_then(|t| t.split('`').next())
        .expect("name")
        .to_string();
    (name, token)
}

fn err_of(c: Canon) -> String {
    match c {
        Canon::Err(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Polls `f` until it answers true, for at most `secs` seconds (a wait for an event, never a
/// timing assertion).
fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const BUSY: &str = "while true do end";

/// Defect 1: one database's busy scripts stalled every database for 15 s (three parallel
/// `EVAL "while true do end" 0` on one scratch database, each held for Redis's 5 s). Now a
/// scratch database's scripts stop at its own limit (50 ms), and a database whose script ran
/// past its limit has its scripts refused for a cooling period, which grows while it keeps
/// doing so; other databases are not affected, their scripts included.
#[test]
fn defect_1_a_scratch_databases_busy_script_stops_at_its_limit_and_cools_down() {
    let dir = TempDir::new("tenant-busy");
    let server = start(&dir.path().join("data"), &[]);
    let (name, token) = scratch(&server);
    let victim = create_with(&server, "victim", json!({}));
    let mut v = client_of(&server, &victim);
    v.cmd_str(&["SET", "k", "v"]);

    // The limits each database was created with, in the admin API.
    let scratch_doc = admin(&server)
        .get(&format!("/_admin/databases/{name}"))
        .json();
    assert_eq!(scratch_doc["script_time_limit_ms"], 50, "{scratch_doc}");
    assert_eq!(victim["script_time_limit_ms"], 5000, "{victim}");

    // Three busy scripts at once, as the defect's report sent them: one runs to the limit,
    // the ones queued behind it are refused by the cooling period it started.
    let addr = server.addr.clone();
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (addr, token) = (addr.clone(), token.clone());
            std::thread::spawn(move || Http::connect(&addr, &token).cmd_str(&["EVAL", BUSY, "0"]))
        })
        .collect();
    let replies: Vec<String> = threads
        .into_iter()
        .map(|t| err_of(t.join().expect("thread")))
        .collect();
    let stopped = replies
        .iter()
        .filter(|e| e.contains("after 50 ms (this database's script time limit)"))
        .count();
    assert!(stopped >= 1, "{replies:?}");
    assert!(
        replies
            .iter()
            .all(|e| e.contains("script time limit") || e.contains("scripts are refused")),
        "{replies:?}"
    );
    // The next script of that database is refused while it cools down, whatever it is.
    let mut s = Http::connect(&server.addr, &token);
    let refused = err_of(s.cmd_str(&["EVAL", "return 1", "0"]));
    assert!(
        refused.starts_with("ERR this database's scripts are refused for"),
        "{refused}"
    );
    assert!(refused.contains("time limit of 50 ms"), "{refused}");
    // Everything else of that database, and every other database, goes on.
    assert_eq!(s.cmd_str(&["SET", "a", "1"]), Canon::s("OK"));
    assert_eq!(v.cmd_str(&["GET", "k"]), Canon::s("v"));
    assert_eq!(v.cmd_str(&["EVAL", "return 7", "0"]), Canon::Int(7));
    // Once the cooling period is over, scripts run again; one more past the limit cools it
    // for longer (two in a row).
    wait_until(10, "the cooling period ends", || {
        s.cmd_str(&["EVAL", "return 1", "0"]) == Canon::Int(1)
    });
    let again = err_of(s.cmd_str(&["EVAL", BUSY, "0"]));
    assert!(again.contains("after 50 ms"), "{again}");
    let refused = err_of(s.cmd_str(&["EVAL", "return 1", "0"]));
    assert!(refused.contains("(2 times in a row)"), "{refused}");
    // The victim cannot stop another database's script: SCRIPT KILL answers for its own.
    assert_eq!(
        err_of(v.cmd_str(&["SCRIPT", "KILL"])),
        "NOTBUSY No scripts in execution right now."
    );
}

/// Defect 1, found in review: the script limits held, but a scratch database's slow
/// commands did not count (three parallel `SORT big ALPHA LIMIT 0 1` on a list of 1,000,000,
/// 815 ms each, held another database's GET for 2.4 s), and each scratch database had a share
/// of its own (ten of them, each within it, held a GET for 334 ms). Now every request of a
/// scratch database is timed, and one that keeps the executor past its share of it (or all
/// of them together past theirs) is refused for a cooling period, whatever it runs.
#[test]
fn defect_1_a_scratch_databases_slow_commands_count_against_its_share() {
    let dir = TempDir::new("tenant-slowcmd");
    let server = start(&dir.path().join("data"), &[]);
    let (_, token) = scratch(&server);
    let victim = create_with(&server, "victim", json!({}));
    let mut v = client_of(&server, &victim);
    v.cmd_str(&["SET", "k", "v"]);
    let mut s = Http::connect(&server.addr, &token);
    for chunk in 0..20 {
        let mut push = vec!["RPUSH".to_string(), "big".to_string()];
        push.extend((0..5_000).map(|i| format!("item:{chunk}:{i}")));
        let push: Vec<&str> = push.iter().map(String::as_str).collect();
        assert!(matches!(s.cmd_str(&push), Canon::Int(_)));
    }
    let mut refusal = None;
    for _ in 0..200 {
        match s.cmd_str(&["SORT", "big", "ALPHA", "LIMIT", "0", "1"]) {
            Canon::Err(e) => {
                refusal = Some(e);
                break;
            }
            other => assert!(matches!(other, Canon::Arr(_)), "{other:?}"),
        }
    }
    let refusal = refusal.expect("a scratch database's slow commands were never refused");
    assert!(
        refusal.starts_with("ERR this scratch database's requests are refused for"),
        "{refusal}"
    );
    assert!(refusal.contains("of the server over the last"), "{refusal}");
    // Everything of that database is refused while it cools down; other databases go on.
    assert!(matches!(s.cmd_str(&["GET", "x"]), Canon::Err(_)));
    assert_eq!(v.cmd_str(&["GET", "k"]), Canon::s("v"));
    wait_until(10, "the cooling period ends", || {
        s.cmd_str(&["LLEN", "big"]) == Canon::Int(100_000)
    });
}

/// Defect 1: a database created with a script time limit of its own holds to it, through the
/// admin API and `tidepool db create`; the limit is kept across a restart; and `/readyz`
/// answers 503 while one job holds the executor longer than `EXECUTOR_STALL_MS` (it stayed
/// green through the 15 s stall).
#[test]
fn defect_1_script_limits_are_set_at_creation_and_readyz_reports_a_held_executor() {
    let dir = TempDir::new("tenant-limit");
    let data = dir.path().join("data");
    let server = start(&data, &[]);
    let quick = create_with(&server, "quick", json!({"script_time_limit_ms": 120}));
    assert_eq!(quick["script_time_limit_ms"], 120);
    let mut q = client_of(&server, &quick);
    let e = err_of(q.cmd_str(&["EVAL", BUSY, "0"]));
    assert!(e.contains("after 120 ms"), "{e}");
    // Bad settings are refused with a clear error.
    for (body, frag) in [
        (
            json!({"name": "x", "script_time_limit_ms": 0}),
            "must be 1 to",
        ),
        (
            json!({"name": "x", "script_time_limit_ms": 999_999}),
            "must be 1 to",
        ),
        (
            json!({"name": "x", "script_time_limit_ms": "fast"}),
            "whole number",
        ),
        (json!({"name": "x", "max_data_bytes": -1}), "whole number"),
        (json!({"name": "x", "scripts": 1}), "unknown field"),
    ] {
        let r = admin(&server).post("/_admin/databases", body.to_string().as_bytes());
        assert_eq!(r.status, 400, "{body}");
        assert!(r.text().contains(frag), "{}", r.text());
    }
    // From the command line.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args(["db", "create", "cli", "--script-time-limit-ms", "300"])
        .args(["--max-data-bytes", "100000"])
        .args([
            "--url",
            &format!("http://{}", server.addr),
            "--admin-token",
            ADMIN,
        ])
        .output()
        .expect("tidepool db create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(cli["script_time_limit_ms"], 300);
    assert_eq!(cli["max_data_bytes"], 100000);

    // A named database with a long limit holds the executor for it, as Redis does; /readyz
    // says so while it lasts.
    let slow = create_with(&server, "slow", json!({"script_time_limit_ms": 4000}));
    let (addr, token) = (
        server.addr.clone(),
        slow["token"].as_str().expect("token").to_string(),
    );
    let busy =
        std::thread::spawn(move || Http::connect(&addr, &token).cmd_str(&["EVAL", BUSY, "0"]));
    let mut probe = Http::connect(&server.addr, "");
    wait_until(10, "/readyz reports the held executor", || {
        let r = probe.get("/readyz");
        r.status == 503 && r.text().contains("the executor has been on one job")
    });
    assert!(err_of(busy.join().expect("thread")).contains("after 4000 ms"));
    wait_until(10, "/readyz is ready again", || {
        probe.get("/readyz").status == 200
    });

    // The limits survive a restart (they are in the database's create record).
    server.kill9();
    let server = start(&data, &[]);
    let doc = admin(&server).get("/_admin/databases/cli").json();
    assert_eq!(doc["script_time_limit_ms"], 300, "{doc}");
    assert_eq!(doc["max_data_bytes"], 100000, "{doc}");
    let doc = admin(&server).get("/_admin/databases/quick").json();
    assert_eq!(doc["script_time_limit_ms"], 120, "{doc}");
}

/// Defect 3: a `/monitor` opened with a database's Standard token kept receiving every
/// command, keys and values, for 99 s after `POST /_admin/databases/NAME/reset`, and so did
/// `/subscribe`: the keep-alive pings kept the idle timeout away. A reset now ends every
/// stream the old tokens opened, as deleting the database does; streams opened with the new
/// token work. (ACL users' tokens and the Read Only token open no streams, so a change to an
/// ACL user has no stream to end.)
#[test]
fn defect_3_a_token_reset_ends_the_streams_the_old_token_opened() {
    let dir = TempDir::new("tenant-reset");
    let server = start(&dir.path().join("data"), &[]);
    let db = create_with(&server, "streams", json!({}));
    let old = db["token"].as_str().expect("token").to_string();
    let mut mon = SseReader::open(&server.addr, "/monitor", &old);
    assert_eq!(mon.next_data().as_deref(), Some("\"OK\""));
    let mut sub = SseReader::open(&server.addr, "/subscribe/ch", &old);
    assert_eq!(sub.next_data().as_deref(), Some("subscribe,ch,1"));
    let mut psub = SseReader::open(&server.addr, "/psubscribe/c*", &old);
    assert_eq!(psub.next_data().as_deref(), Some("psubscribe,c*,1"));
    let r = admin(&server).post("/_admin/databases/streams/reset", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let new = r.json()["token"].as_str().expect("token").to_string();
    assert_ne!(new, old);
    // A write with the new token reaches none of the old streams: they end.
    let mut c = Http::connect(&server.addr, &new);
    assert_eq!(c.cmd_str(&["SET", "secret", "value"]), Canon::s("OK"));
    assert_eq!(c.cmd_str(&["PUBLISH", "ch", "after-reset"]), Canon::Int(0));
    for s in [&mut mon, &mut sub, &mut psub] {
        assert_eq!(
            s.next_line().as_deref(),
            Some(": tidepool: the token that opened it was reset; this stream is closed")
        );
        assert!(s.ended(), "the stream did not end");
    }
    // The old token opens nothing any more; the new one does.
    assert_eq!(
        Http::connect(&server.addr, &old)
            .request("POST", "/monitor", &[], b"")
            .status,
        401
    );
    let mut sub = SseReader::open(&server.addr, "/subscribe/ch", &new);
    assert_eq!(sub.next_data().as_deref(), Some("subscribe,ch,1"));
    assert_eq!(c.cmd_str(&["PUBLISH", "ch", "hello"]), Canon::Int(1));
    assert_eq!(sub.next_data().as_deref(), Some("message,ch,hello"));
}

/// The server's resident memory after its allocator gave free memory back (a test-only
/// admin route of the fault-injection build).
fn rss(server: &Server) -> u64 {
    let r = admin(server).post("/_admin/debug/trim", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["rss_bytes"].as_u64().expect("rss_bytes")
}

const MIB: u64 = 1024 * 1024;

/// The server's resident memory as the system counts it now (no trim asked for).
fn resident(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
        .expect("the server's /proc status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Guards the free memory the server gives back of itself: glibc returns only the top of its
/// heap, so memory freed among live data (here 2,000 values of 8 KB deleted between 2,000
/// kept ones) stayed resident for good, as did a bulk load's request buffers. The executor
/// now looks at the allocator's free memory every second and gives it back when it is much.
#[test]
fn memory_freed_among_live_data_is_given_back_without_being_asked() {
    let dir = TempDir::new("tenant-giveback");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    let value = vec![b'x'; 8 * 1024];
    for chunk in 0..20 {
        let cmds: Vec<Vec<Vec<u8>>> = (0..100)
            .flat_map(|i| {
                let n = chunk * 100 + i;
                ["keep", "drop"].map(|kind| {
                    vec![
                        b"SET".to_vec(),
                        format!("{kind}:{n}").into_bytes(),
                        value.clone(),
                    ]
                })
            })
            .collect();
        assert!(c
            .pipeline(&cmds)
            .iter()
            .all(|r| *r == Canon::Str(b"OK".to_vec())));
    }
    let mut del = vec![b"DEL".to_vec()];
    del.extend((0..2_000).map(|n| format!("drop:{n}").into_bytes()));
    let loaded = resident(&server);
    assert_eq!(c.cmd(&del), Canon::Int(2_000));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = resident(&server);
        if loaded.saturating_sub(now) >= 8 * MIB {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "resident memory went from {} to {} MiB after 16 MB of values among the kept ones were deleted",
            loaded / MIB,
            now / MIB
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(c.cmd_str(&["DBSIZE"]), Canon::Int(2_000));
}

/// Defect 2: a body that trickles in cost about 4.2 KB of memory per byte: 50 connections
/// declaring `Content-Length: 64000000` and sending a byte a millisecond took the server from
/// 74 MB to 1,672 MB in 10 s, `/v2/publish` too, and the memory stayed after they closed. A
/// body now costs about its own size, a declared length past the limit is refused before
/// anything is read, and the memory comes back when the connections close.
#[test]
fn defect_2_a_body_that_trickles_in_costs_about_its_own_size() {
    use std::io::Write;
    let dir = TempDir::new("tenant-slowbody");
    let server = Server::start_delivery_with(&dir.path().join("data"), &["--admin-token", ADMIN]);
    let base = rss(&server);
    let heads = [
        format!("POST /set/k HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"),
        format!(
            "POST /v2/publish/http://127.0.0.1:9/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {QSTASH_TOKEN}\r\n"
        ),
    ];
    let mut conns: Vec<std::net::TcpStream> = (0..50)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
            s.set_nodelay(true).ok();
            // Each within its route's limit: 64 MiB for REST, 10 MiB for a message.
            let declared = if i % 2 == 0 { 64_000_000 } else { 10_000_000 };
            let head = format!("{}Content-Length: {declared}\r\n\r\n", heads[i % 2]);
            s.write_all(head.as_bytes()).expect("head");
            s
        })
        .collect();
    // Three seconds of a byte a millisecond on each connection.
    let mut sent = 0u64;
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        for s in &mut conns {
            s.write_all(b"x").expect("byte");
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let during = rss(&server);
    let bound = base + 16 * MIB + 32 * sent;
    assert!(
        during <= bound,
        "{sent} bytes received took the server from {base} to {during} bytes (bound {bound})"
    );
    // A declared length past the limit is refused before any of the body is sent.
    for (head, limit) in [
        (&heads[0], "ERR max request size exceeded"),
        (&heads[1], ""),
    ] {
        let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let req = format!("{head}Content-Length: 100000000\r\n\r\n");
        s.write_all(req.as_bytes()).expect("head");
        let text = read_raw_response(&mut s);
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
        assert!(text.contains(limit), "{text}");
    }
    // Closed, the connections give their memory back.
    drop(conns);
    wait_until(20, "memory comes back after the connections close", || {
        rss(&server) <= base + 8 * MIB
    });
    // --max-request-bytes refuses a declared length past it at once, too.
    let small = Server::start(&dir.path().join("small"), &["--max-request-bytes", "10000"]);
    let mut s = std::net::TcpStream::connect(&small.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    s.write_all(format!("{}Content-Length: 64000000\r\n\r\n", heads[0]).as_bytes())
        .expect("head");
    let text = read_raw_response(&mut s);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
}

/// Defect 2: 2,000 subscribers that never read while messages were published took resident
/// memory to 1.2-1.8 GB, never given back, and a GET took up to 5.4 s. Each stream now has a
/// bounded output buffer (SUBSCRIBER_BUFFER_BYTES_MAX); one past it is closed, as Redis
/// disconnects a subscriber past `client-output-buffer-limit pubsub`, and its memory returns.
#[test]
fn defect_2_subscribers_that_never_read_are_bounded_and_closed() {
    use std::io::Write;
    let dir = TempDir::new("tenant-slowsub");
    let server = start(&dir.path().join("data"), &[]);
    let base = rss(&server);
    let subscribers = 300;
    let streams: Vec<std::net::TcpStream> = (0..subscribers)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
            // A small receive window, so the kernel holds little for the server either.
            let req = format!(
                "POST /subscribe/news HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n\r\n"
            );
            s.write_all(req.as_bytes()).expect("subscribe");
            s
        })
        .collect();
    let mut c = server.client();
    wait_until(20, "every subscriber is registered", || {
        c.cmd_str(&["PUBSUB", "NUMSUB", "news"])
            == Canon::Arr(vec![Canon::s("news"), Canon::Int(subscribers)])
    });
    // 8 MB published to each subscriber, which reads none of it.
    let msg = "m".repeat(4096);
    let mut published = 0;
    let mut peak = 0;
    for i in 0..2048 {
        published += 1;
        let got = c.cmd_str(&["PUBLISH", "news", &msg]);
        if i % 256 == 255 {
            peak = peak.max(rss(&server));
        }
        if got == Canon::Int(0) {
            break;
        }
    }
    let bound = base + 96 * MIB;
    assert!(
        peak <= bound,
        "{subscribers} subscribers that never read took the server from {base} to {peak} bytes (bound {bound})"
    );
    // Every one of them fell past its buffer and was closed.
    assert_eq!(
        c.cmd_str(&["PUBSUB", "NUMSUB", "news"]),
        Canon::Arr(vec![Canon::s("news"), Canon::Int(0)]),
        "after {published} messages"
    );
    drop(streams);
    wait_until(20, "memory comes back after the streams close", || {
        rss(&server) <= base + 16 * MIB
    });
    // A GET answers as ever.
    assert_eq!(c.cmd_str(&["SET", "k", "v"]), Canon::s("OK"));
}

/// The files of a data directory's `snapshots` folder whose names end with `suffix`.
fn snapshot_files(data: &std::path::Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(data.join("snapshots"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(suffix))
                .collect()
        })
        .unwrap_or_default()
}

fn info_persistence(c: &mut Http) -> String {
    match c.cmd_str(&["INFO", "persistence"]) {
        Canon::Str(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO: {other:?}"),
    }
}

/// Defect 7: a snapshot that failed for lack of space left its `.snap.tmp` behind, using the
/// last bytes; the next BGSAVE failed at "rolling the log" and every write was refused until a
/// restart. Now a failed snapshot removes its temporary file, a new segment that cannot be
/// created fails only the snapshot, and writes go on while the log can append. (A full disk is
/// made by the fault-injection build: `TIDEPOOL_FAULT_NO_SPACE_AT`.)
#[test]
fn defect_7_a_snapshot_that_fails_for_lack_of_space_leaves_nothing_and_stops_no_write() {
    let dir = TempDir::new("tenant-nospace");
    // Writing the snapshot's file fails: SAVE and BGSAVE.
    let data = dir.path().join("write");
    let server = Server::try_start_env(
        &data,
        &[],
        &[("TIDEPOOL_FAULT_NO_SPACE_AT", "snapshot-write")],
    )
    .unwrap_or_else(|e| panic!("tidepool did not start: {e}"));
    let mut c = server.client();
    c.cmd_str(&["SET", "before", "1"]);
    let e = err_of(c.cmd_str(&["SAVE"]));
    assert!(e.contains("No space left on device"), "{e}");
    assert!(snapshot_files(&data, ".tmp").is_empty());
    assert_eq!(c.cmd_str(&["SET", "after-save", "1"]), Canon::s("OK"));
    assert_eq!(
        c.cmd_str(&["BGSAVE"]),
        Canon::s("Background saving started")
    );
    wait_until(30, "the background save ends", || {
        info_persistence(&mut c).contains("rdb_bgsave_in_progress:0")
    });
    assert!(info_persistence(&mut c).contains("rdb_last_bgsave_status:err"));
    assert!(snapshot_files(&data, ".tmp").is_empty());
    assert_eq!(c.cmd_str(&["SET", "after-bgsave", "1"]), Canon::s("OK"));
    drop(c);
    server.kill9();

    // A new segment cannot be created: the snapshot fails at rolling the log, writes go on.
    let data = dir.path().join("segment");
    let server = Server::try_start_env(
        &data,
        &[],
        &[("TIDEPOOL_FAULT_NO_SPACE_AT", "segment-create")],
    )
    .unwrap_or_else(|e| panic!("tidepool did not start: {e}"));
    let mut c = server.client();
    c.cmd_str(&["SET", "before", "1"]);
    let segments = || std::fs::read_dir(data.join("wal")).map_or(0, |d| d.count());
    let before = segments();
    for cmd in ["SAVE", "BGSAVE"] {
        let e = err_of(c.cmd_str(&[cmd]));
        assert!(e.contains("rolling the log"), "{cmd}: {e}");
        assert_eq!(segments(), before, "{cmd} left a half-made segment");
        assert_eq!(c.cmd_str(&["SET", cmd, "1"]), Canon::s("OK"), "{cmd}");
    }
    assert_eq!(c.cmd_str(&["GET", "before"]), Canon::s("1"));
    drop(c);
    server.kill9();
    let server = start(&data, &[]);
    let mut c = server.client();
    assert_eq!(
        c.cmd_str(&["MGET", "before", "SAVE", "BGSAVE"]),
        Canon::Arr(vec![Canon::s("1"); 3])
    );
    drop(c);
    server.kill9();

    // Temporary files a crash left (12 kill -9 during BGSAVE left 112 MB of them) are removed
    // at start-up, except by `serve --at`, which writes nothing.
    std::fs::create_dir_all(data.join("snapshots")).expect("snapshots dir");
    let stale = data.join("snapshots").join("00000000000000000002.snap.tmp");
    std::fs::write(&stale, vec![0u8; 4096]).expect("stale tmp");
    let at = Server::start(&data, &["--at", "1"]);
    assert!(stale.exists(), "serve --at removed a file");
    drop(at);
    let server = start(&data, &[]);
    assert!(
        !stale.exists(),
        "the stale temporary snapshot is still there"
    );
    assert!(server.client().cmd_str(&["GET", "before"]) == Canon::s("1"));
}

/// A command of the table that stores a value at a key (a key specification with INSERT or
/// UPDATE, or the commands whose keys Redis finds itself: SET, BITFIELD, SORT ... STORE),
/// written with the long key where the key specifications look for the stored key. The list
/// comes from the command table, so a command added to it is covered.
fn key_storing_examples(long: &str) -> Vec<(String, Vec<String>)> {
    use tidepool::command::table;
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<String>>();
    let mut out = Vec::new();
    for info in table::global().all() {
        let stores = matches!(info.name.as_str(), "set" | "bitfield" | "sort")
            || info
                .key_specs
                .as_ref()
                .is_some_and(|specs| specs.iter().any(|k| k.stores && !k.not_key));
        if !info.write || !stores || info.has_subcommands {
            continue;
        }
        // Where the stored key hides behind a keyword or a count of keys.
        let args = match info.name.as_str() {
            "sort" => s(&["SORT", "src", "STORE", long]),
            "bitfield" => s(&["BITFIELD", long, "SET", "u8", "0", "1"]),
            "georadius" => s(&["GEORADIUS", "src", "0", "0", "1", "km", "STOREDIST", long]),
            "georadiusbymember" => s(&["GEORADIUSBYMEMBER", "src", "m", "1", "km", "STORE", long]),
            "zunionstore" | "zinterstore" | "zdiffstore" => {
                s(&[&info.name.to_ascii_uppercase(), long, "1", "src"])
            }
            "xreadgroup" => s(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", long, ">"]),
            _ => {
                // The long key in every argument: every fixed key position finds it.
                let mut a: Vec<String> =
                    info.name.split('|').map(str::to_ascii_uppercase).collect();
                while a.len() < (info.arity.unsigned_abs() as usize).max(2) {
                    a.push(long.to_string());
                }
                a
            }
        };
        out.push((info.name.clone(), args));
    }
    out
}

/// Defect 4: with `--max-key-bytes 100`, `SORT ... STORE`, `GEORADIUS ... STORE|STOREDIST`,
/// `GEORADIUSBYMEMBER ... STORE` (and the same from Lua) created a 101-byte key, which then
/// survived a restart and could not even be read or deleted. Every key a command stores a value
/// at is now checked, found through the command table's key specifications (which the
/// commands newer than Redis 7.0 now have too); reads and deletes never are, so a key kept from
/// an older, higher limit can still be read and deleted.
#[test]
fn defect_4_every_key_a_command_stores_at_is_held_to_the_key_size_limit() {
    let dir = TempDir::new("tenant-keysize");
    let data = dir.path().join("data");
    let long = "k".repeat(101);
    let refusal = "ERR max key size exceeded. Limit: 100 bytes, Actual: 101 bytes";
    {
        let server = start(&data, &["--max-key-bytes", "100"]);
        let mut c = server.client();
        c.cmd_str(&["GEOADD", "src", "0", "0", "m"]);
        c.cmd_str(&["SADD", "src2", "1"]);
        let examples = key_storing_examples(&long);
        assert!(examples.len() > 80, "only {} commands", examples.len());
        let mut checked = 0;
        for (name, args) in &examples {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let got = c.cmd_str(&argv);
            if matches!(&got, Canon::Err(e) if e.contains("is not supported over REST")) {
                continue;
            }
            assert_eq!(got, Canon::Err(refusal.into()), "{name}: {args:?}");
            let mut lua = vec!["EVAL", "return redis.pcall(unpack(ARGV))", "0"];
            lua.extend(&argv);
            match c.cmd_str(&lua) {
                Canon::Err(e) if e.contains("not allowed from script") => {}
                Canon::Err(e) => assert!(e.starts_with(refusal), "{name} from Lua: {e}"),
                other => panic!("{name} from Lua: {other:?}"),
            }
            checked += 1;
        }
        assert!(checked > 80, "only {checked} commands checked");
        assert_eq!(c.cmd_str(&["EXISTS", &long]), Canon::Int(0));
        // Through every door, the three the defect's report named.
        for args in [
            vec!["SORT", "src2", "STORE", &long],
            vec!["GEORADIUS", "src", "0", "0", "1", "km", "STORE", &long],
            vec![
                "GEORADIUSBYMEMBER",
                "src",
                "m",
                "1",
                "km",
                "STOREDIST",
                &long,
            ],
        ] {
            every_door_and_lua(&mut c, &[], &args, &Canon::Err(refusal.into()));
        }
        // The commands newer than Redis 7.0 have key specifications now.
        assert_eq!(
            c.cmd_str(&[
                "COMMAND",
                "GETKEYSANDFLAGS",
                "HSETEX",
                "h",
                "FIELDS",
                "1",
                "f",
                "v"
            ]),
            Canon::Arr(vec![Canon::Arr(vec![
                Canon::s("h"),
                Canon::Arr(vec![Canon::s("RW"), Canon::s("update")])
            ])])
        );
        // Reads and deletes of a long key are never refused.
        assert_eq!(c.cmd_str(&["GET", &long]), Canon::Nil);
        assert_eq!(c.cmd_str(&["DEL", &long]), Canon::Int(0));
        server.kill9();
    }
    // A key stored under a higher limit (none here) stays readable and deletable under a
    // lower one, and cannot be written again.
    {
        let server = start(&data, &[]);
        server.client().cmd_str(&["SET", &long, "v"]);
        server.kill9();
    }
    let server = start(&data, &["--max-key-bytes", "100"]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", &long]), Canon::s("v"));
    assert_eq!(c.cmd_str(&["SET", &long, "w"]), Canon::Err(refusal.into()));
    assert_eq!(c.cmd_str(&["DEL", &long]), Canon::Int(1));
}

/// Defect 9: `tidepool-log repair` rebuilt 0 of 25,000 keys from a snapshot whose keyspace sat
/// in one chunk. A chunk now holds at most SNAPSHOT_CHUNK_KEYS_MAX keys, so one damaged chunk
/// loses at most that many.
#[test]
fn defect_9_one_damaged_snapshot_chunk_loses_a_bounded_share_of_the_keys() {
    let dir = TempDir::new("tenant-chunks");
    let data = dir.path().join("data");
    let server = start(
        &data,
        &["--log-retention", "0", "--auto-snapshot-percentage", "0"],
    );
    let mut c = server.client();
    let keys = 25_000;
    let cmds: Vec<Vec<Vec<u8>>> = (0..keys)
        .map(|i| {
            vec![
                b"SET".to_vec(),
                format!("key:{i}").into_bytes(),
                b"v".to_vec(),
            ]
        })
        .collect();
    for chunk in cmds.chunks(1000) {
        c.pipeline(chunk);
    }
    assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    let snap = std::fs::read_dir(data.join("snapshots"))
        .expect("snapshots")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".snap"))
        .expect("a snapshot");
    let mut bytes = std::fs::read(&snap).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&snap, &bytes).expect("write");
    let d = data.to_str().expect("path");
    let (code, out) = log_tool(&["repair", "--yes", d]);
    assert_eq!(code, 0, "{out}");
    let kept: u64 = out
        .split("rebuilt from its intact parts (")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of kept keys in: {out}"));
    let bound = keys - tidepool::config::SNAPSHOT_CHUNK_KEYS_MAX;
    assert!(kept >= bound, "repair kept {kept} of {keys} keys: {out}");
    assert!(kept < keys, "the damage lost nothing? {out}");
    let server = start(&data, &[]);
    assert_eq!(
        server.client().cmd_str(&["DBSIZE"]),
        Canon::Int(kept as i64)
    );
}

/// Defect 9, the smaller ones: `POST /start` was open on any address by default; its per-hour
/// limit reset on restart; its document echoed the request's Host header; `/subscribe` and
/// `/monitor` opened after the daily request limit was spent; `Upstash-Workflow-RunId` and
/// `Upstash-Label` took 100 KB.
#[test]
fn defect_9_start_is_safe_by_default_and_its_limit_holds_across_restarts() {
    use std::io::{Read, Write};
    let dir = TempDir::new("tenant-start");
    let data = dir.path().join("data");
    // On loopback (where the tests listen) /start is open, two per hour here.
    let server = start(&data, &["--start-per-hour", "2"]);
    let host_doc = {
        let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
        s.write_all(b"POST /start HTTP/1.1\r\nHost: evil.example:666\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .expect("request");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("answer");
        text
    };
    assert!(host_doc.starts_with("HTTP/1.1 201"), "{host_doc}");
    assert!(!host_doc.contains("evil.example"), "{host_doc}");
    assert!(
        host_doc.contains(&format!("http://{}", server.addr)),
        "{host_doc}"
    );
    scratch(&server);
    assert_eq!(
        Http::connect(&server.addr, "").post("/start", b"").status,
        429
    );
    server.kill9();
    // The limit holds across a restart: the catalog knows who created what, and when.
    let server = start(&data, &["--start-per-hour", "2"]);
    assert_eq!(
        Http::connect(&server.addr, "").post("/start", b"").status,
        429
    );
    let listed = admin(&server).get("/_admin/databases").json();
    let by: Vec<&Value> = listed["databases"]
        .as_array()
        .expect("list")
        .iter()
        .filter(|d| d["scratch"] == true)
        .map(|d| &d["created_by"])
        .collect();
    assert_eq!(by, [&json!("127.0.0.1"), &json!("127.0.0.1")]);
    server.kill9();

    // On any other address it is off unless --start-path asks for it.
    let lan = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
            .args(["serve", "--listen", "0.0.0.0:0", "--data"])
            .arg(dir.path().join("lan"))
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let mut child = out;
        let mut banner = String::new();
        let mut stdout = child.stdout.take().expect("stdout");
        let mut buf = [0u8; 4096];
        while !banner.contains("admin token") {
            let n = stdout.read(&mut buf).expect("banner");
            if n == 0 {
                break;
            }
            banner.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let _ = child.kill();
        let _ = child.wait();
        banner
    };
    assert!(!lan(&[]).contains("scratch databases:"));
    assert!(lan(&["--start-path", "/start"]).contains("scratch databases:"));

    // Streams do not open once the daily request limit is spent.
    let limited = start(
        &dir.path().join("limited"),
        &["--max-requests-per-day", "2"],
    );
    let mut c = limited.client();
    c.cmd_str(&["SET", "a", "1"]);
    c.cmd_str(&["SET", "b", "1"]);
    assert!(matches!(c.cmd_str(&["GET", "a"]), Canon::Err(e) if e.contains("daily request limit")));
    for path in ["/monitor", "/subscribe/ch", "/psubscribe/c*"] {
        let r = c.request("POST", path, &[], b"");
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(
            r.text().contains("max daily request limit exceeded"),
            "{path}: {}",
            r.text()
        );
    }

    // Names and ids of a publish are bounded.
    let d = Server::start_delivery_with(&dir.path().join("delivery"), &[]);
    let mut q = d.qstash();
    let long = "x".repeat(tidepool::config::DELIVERY_ID_BYTES_MAX + 1);
    for header in [
        "Upstash-Label",
        "Upstash-Workflow-RunId",
        "Upstash-Deduplication-Id",
        "Upstash-Flow-Control-Key",
    ] {
        let r = q.request(
            "POST",
            "/v2/publish/http://127.0.0.1:9/x",
            &[(header, &long)],
            b"hi",
        );
        assert_eq!(r.status, 400, "{header}: {}", r.text());
        assert!(
            r.text().contains("longer than 256 bytes"),
            "{header}: {}",
            r.text()
        );
    }
    let ok = "y".repeat(tidepool::config::DELIVERY_ID_BYTES_MAX);
    let r = q.request(
        "POST",
        "/v2/publish/http://127.0.0.1:9/x",
        &[("Upstash-Label", &ok)],
        b"hi",
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The key-storing commands of the table that cannot make a value larger than the limit by
/// themselves, with why: the value-growth test covers every other one.
const CANNOT_GROW_PAST_THE_LIMIT: &[(&str, &str)] = &[
    ("incr", "a number"),
    ("decr", "a number"),
    ("incrby", "a number"),
    ("decrby", "a number"),
    ("incrbyfloat", "a number"),
    ("json.numincrby", "a number"),
    ("json.nummultby", "a number"),
    ("persist", "a TTL"),
    ("expire", "a TTL"),
    ("pexpire", "a TTL"),
    ("expireat", "a TTL"),
    ("pexpireat", "a TTL"),
    ("getex", "a TTL"),
    ("hpersist", "field TTLs"),
    ("hexpire", "field TTLs"),
    ("hpexpire", "field TTLs"),
    ("hexpireat", "field TTLs"),
    ("hpexpireat", "field TTLs"),
    ("hgetex", "field TTLs"),
    ("xsetid", "stream metadata"),
    ("xclaim", "stream metadata"),
    ("xack", "stream metadata"),
    ("xgroup|setid", "stream metadata"),
    ("rename", "moves a value"),
    ("renamenx", "moves a value"),
    ("move", "moves a value"),
    ("copy", "copies a value already within the limit"),
    ("bitop", "no longer than its longest source"),
    ("sinterstore", "no larger than a source"),
    ("sdiffstore", "no larger than a source"),
    ("zinterstore", "no larger than a source"),
    ("zdiffstore", "no larger than a source"),
    ("zrangestore", "no larger than a source"),
    ("georadius", "no larger than its source"),
    ("georadiusbymember", "no larger than its source"),
    ("geosearchstore", "no larger than its source"),
    ("json.clear", "shrinks"),
    ("json.arrpop", "shrinks"),
    ("json.arrtrim", "shrinks"),
    ("json.toggle", "a boolean"),
    ("blmove", "blocking: refused over REST"),
    ("brpoplpush", "blocking: refused over REST"),
    ("restore-asking", "cluster: refused"),
];

/// A command that could grow a value past the limit: its name, its setup, and the command.
type GrowthCase = (&'static str, Vec<Vec<String>>, Vec<String>);

/// What `keys` hold, for "nothing changed": each one's type and size.
fn sizes(c: &mut Http, keys: &[&str]) -> Vec<(Canon, Canon)> {
    keys.iter()
        .map(|k| {
            let t = c.cmd_str(&["TYPE", k]);
            let size = match &t {
                Canon::Str(s) if s == b"string" => c.cmd_str(&["STRLEN", k]),
                Canon::Str(s) if s == b"list" => c.cmd_str(&["LLEN", k]),
                Canon::Str(s) if s == b"set" => c.cmd_str(&["SCARD", k]),
                Canon::Str(s) if s == b"zset" => c.cmd_str(&["ZCARD", k]),
                Canon::Str(s) if s == b"hash" => c.cmd_str(&["HLEN", k]),
                Canon::Str(s) if s == b"stream" => c.cmd_str(&["XLEN", k]),
                Canon::Str(s) if s == b"json" => c.cmd_str(&["JSON.GET", k]),
                _ => Canon::Nil,
            };
            (t, size)
        })
        .collect()
}

/// Defect 5: with `--max-value-bytes 1000`, `SETBIT b 4294967295 1` made a 512 MiB string,
/// BITFIELD at a large offset the same, and SUNIONSTORE and friends built collections past the
/// limit: only arguments were counted (a 62-byte pipeline and a BGSAVE wrote a 1 GB snapshot).
/// Now the size a value grows to is checked for every command that stores one; a write that
/// would take a value past the limit is refused and changes nothing. Every key-storing command
/// of the table is either driven here or listed, with why, as unable to grow a value past it.
#[test]
fn defect_5_no_command_grows_a_value_past_the_value_size_limit() {
    use tidepool::command::table;
    let dir = TempDir::new("tenant-valuesize");
    // A RESTORE payload that decodes to 5,000 bytes: made on a server without the limit.
    let payload = {
        let free = start(&dir.path().join("free"), &[]);
        let mut c = free.client();
        c.cmd_str(&["SET", "big", &"a".repeat(5000)]);
        match c.cmd_str(&["DUMP", "big"]) {
            Canon::Str(p) => p,
            other => panic!("DUMP: {other:?}"),
        }
    };
    assert!(payload.len() < 1000, "the payload is compressed");
    let server = start(&dir.path().join("data"), &["--max-value-bytes", "1000"]);
    let mut c = server.client();
    let v = |n: usize, ch: &str| ch.repeat(n);
    let (v900, v600, w600, v200, v1001) = (
        v(900, "x"),
        v(600, "x"),
        v(600, "w"),
        v(200, "y"),
        v(1001, "z"),
    );
    let v995 = v(995, "x");
    let s = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let many: Vec<String> = (0..2000).map(|i| format!("e{i}")).collect();
    let mut pfadd = vec!["PFADD".to_string(), "k".into()];
    pfadd.extend(many.iter().cloned());
    // Two sparse HyperLogLogs of about 600 bytes whose union is over 1,000.
    let pf = |key: &str, p: &str| {
        let mut c = vec!["PFADD".to_string(), key.to_string()];
        c.extend((0..250).map(|i| format!("{p}{i}")));
        c
    };
    let (pf_a, pf_b) = (pf("a", "a"), pf("b", "b"));
    let json_900 = format!("\"{v900}\"");
    let json_200 = format!("\"{v200}\"");
    let json_obj = format!("{{\"a\":\"{v900}\"}}");
    let json_arr = format!("[\"{v900}\"]");
    // (command name, setup, the command): the command must be refused and change nothing.
    let grows: Vec<GrowthCase> = vec![
        ("set", vec![], s(&["SET", "k", &v1001])),
        ("setnx", vec![], s(&["SETNX", "k", &v1001])),
        ("setex", vec![], s(&["SETEX", "k", "100", &v1001])),
        ("psetex", vec![], s(&["PSETEX", "k", "100000", &v1001])),
        ("getset", vec![], s(&["GETSET", "k", &v1001])),
        ("mset", vec![], s(&["MSET", "k", &v1001])),
        ("msetnx", vec![], s(&["MSETNX", "k", &v1001])),
        (
            "append",
            vec![s(&["SET", "k", &v900])],
            s(&["APPEND", "k", &v200]),
        ),
        (
            "setrange",
            vec![s(&["SET", "k", "a"])],
            s(&["SETRANGE", "k", "2000", "x"]),
        ),
        ("setbit", vec![], s(&["SETBIT", "k", "4294967295", "1"])),
        (
            "bitfield",
            vec![],
            s(&["BITFIELD", "k", "SET", "u8", "#2000", "1"]),
        ),
        (
            "lpush",
            vec![s(&["RPUSH", "k", &v900])],
            s(&["LPUSH", "k", &v200]),
        ),
        (
            "rpush",
            vec![s(&["RPUSH", "k", &v900])],
            s(&["RPUSH", "k", &v200]),
        ),
        (
            "lpushx",
            vec![s(&["RPUSH", "k", &v900])],
            s(&["LPUSHX", "k", &v200]),
        ),
        (
            "rpushx",
            vec![s(&["RPUSH", "k", &v900])],
            s(&["RPUSHX", "k", &v200]),
        ),
        (
            "linsert",
            vec![s(&["RPUSH", "k", &v900])],
            s(&["LINSERT", "k", "BEFORE", &v900, &v200]),
        ),
        (
            "lset",
            vec![s(&["RPUSH", "k", &v900, "a"])],
            s(&["LSET", "k", "1", &v200]),
        ),
        (
            "lmove",
            vec![s(&["RPUSH", "k", &v900]), s(&["RPUSH", "src", &v200])],
            s(&["LMOVE", "src", "k", "LEFT", "LEFT"]),
        ),
        (
            "rpoplpush",
            vec![s(&["RPUSH", "k", &v900]), s(&["RPUSH", "src", &v200])],
            s(&["RPOPLPUSH", "src", "k"]),
        ),
        (
            "sadd",
            vec![s(&["SADD", "k", &v900])],
            s(&["SADD", "k", &v200]),
        ),
        (
            "smove",
            vec![s(&["SADD", "k", &v900]), s(&["SADD", "src", &v200])],
            s(&["SMOVE", "src", "k", &v200]),
        ),
        (
            "sunionstore",
            vec![s(&["SADD", "a", &v600]), s(&["SADD", "b", &w600])],
            s(&["SUNIONSTORE", "k", "a", "b"]),
        ),
        (
            "zadd",
            vec![s(&["ZADD", "k", "1", &v900])],
            s(&["ZADD", "k", "2", &v200]),
        ),
        (
            "zincrby",
            vec![s(&["ZADD", "k", "1", &v900])],
            s(&["ZINCRBY", "k", "1", &v200]),
        ),
        (
            "zunionstore",
            vec![s(&["ZADD", "a", "1", &v600]), s(&["ZADD", "b", "1", &w600])],
            s(&["ZUNIONSTORE", "k", "2", "a", "b"]),
        ),
        (
            "hset",
            vec![s(&["HSET", "k", "f", &v900])],
            s(&["HSET", "k", "g", &v200]),
        ),
        (
            "hmset",
            vec![s(&["HSET", "k", "f", &v900])],
            s(&["HMSET", "k", "g", &v200]),
        ),
        (
            "hsetnx",
            vec![s(&["HSET", "k", "f", &v900])],
            s(&["HSETNX", "k", "g", &v200]),
        ),
        (
            "hsetex",
            vec![s(&["HSET", "k", "f", &v900])],
            s(&["HSETEX", "k", "FIELDS", "1", "g", &v200]),
        ),
        (
            "hincrby",
            vec![s(&["HSET", "k", "f", &v995])],
            s(&["HINCRBY", "k", "newfield", "1"]),
        ),
        (
            "hincrbyfloat",
            vec![s(&["HSET", "k", "f", &v995])],
            s(&["HINCRBYFLOAT", "k", "newfield", "1.5"]),
        ),
        (
            "xadd",
            vec![s(&["XADD", "k", "1-1", "f", &v900])],
            s(&["XADD", "k", "*", "f", &v200]),
        ),
        // A stream's consumer groups and consumers count with its entries: names of any
        // length, as many as asked (the review of issue 25 made 100 groups with 404-byte
        // names on a stream under a 1,000-byte limit).
        (
            "xgroup|create",
            vec![s(&["XADD", "k", "1-1", "f", &v900])],
            s(&["XGROUP", "CREATE", "k", &v200, "0"]),
        ),
        (
            "xgroup|createconsumer",
            vec![
                s(&["XADD", "k", "1-1", "f", &v900]),
                s(&["XGROUP", "CREATE", "k", "g", "0"]),
            ],
            s(&["XGROUP", "CREATECONSUMER", "k", "g", &v200]),
        ),
        (
            "geoadd",
            vec![s(&["GEOADD", "k", "0", "0", &v900])],
            s(&["GEOADD", "k", "1", "1", &v200]),
        ),
        ("pfadd", vec![], pfadd.clone()),
        (
            "pfmerge",
            vec![pf_a.clone(), pf_b.clone()],
            s(&["PFMERGE", "k", "a", "b"]),
        ),
        (
            "sort",
            vec![
                s(&["RPUSH", "src", "1", "2"]),
                s(&["SET", "w_1", &v600]),
                s(&["SET", "w_2", &w600]),
            ],
            s(&["SORT", "src", "GET", "w_*", "STORE", "k"]),
        ),
        ("restore", vec![], s(&["RESTORE", "k", "0", "<payload>"])),
        (
            "json.set",
            vec![],
            s(&["JSON.SET", "k", "$", &format!("\"{v1001}\"")]),
        ),
        (
            "json.mset",
            vec![s(&["JSON.SET", "k", "$", &json_obj])],
            s(&["JSON.MSET", "k", "$.b", &json_200]),
        ),
        (
            "json.merge",
            vec![s(&["JSON.SET", "k", "$", &json_obj])],
            s(&["JSON.MERGE", "k", "$", &format!("{{\"b\":{json_200}}}")]),
        ),
        (
            "json.arrappend",
            vec![s(&["JSON.SET", "k", "$", &json_arr])],
            s(&["JSON.ARRAPPEND", "k", "$", &json_200]),
        ),
        (
            "json.arrinsert",
            vec![s(&["JSON.SET", "k", "$", &json_arr])],
            s(&["JSON.ARRINSERT", "k", "$", "0", &json_200]),
        ),
        (
            "json.strappend",
            vec![s(&["JSON.SET", "k", "$", &json_900])],
            s(&["JSON.STRAPPEND", "k", "$", &json_200]),
        ),
    ];
    // Coverage: every key-storing command of the table is driven here or listed.
    let driven: Vec<&str> = grows.iter().map(|(n, _, _)| *n).collect();
    for (name, _) in key_storing_examples("k") {
        assert!(
            driven.contains(&name.as_str())
                || CANNOT_GROW_PAST_THE_LIMIT.iter().any(|(n, _)| *n == name),
            "{name} stores a value: drive it in this test or list it as unable to grow one"
        );
    }
    let refusal = Canon::Err("ERR max single record size exceeded".into());
    for (name, setup, cmd) in &grows {
        c.cmd_str(&["FLUSHALL"]);
        for st in setup {
            let argv: Vec<&str> = st.iter().map(String::as_str).collect();
            let r = c.cmd_str(&argv);
            assert!(!r.is_err(), "{name}: setup {argv:?}: {r:?}");
        }
        let keys = ["k", "src", "a", "b"];
        let before = sizes(&mut c, &keys);
        let argv: Vec<Vec<u8>> = cmd
            .iter()
            .map(|a| {
                if a == "<payload>" {
                    payload.clone()
                } else {
                    a.as_bytes().to_vec()
                }
            })
            .collect();
        // A binary payload goes as the body, the last argument (JSON cannot carry it).
        let (got, lua_got) = if *name == "restore" {
            let direct = c.request("POST", "/restore/k/0", &[], &payload).json();
            let lua = c
                .request(
                    "POST",
                    "/eval/return%20redis.pcall(unpack(ARGV))/0/RESTORE/k/0",
                    &[],
                    &payload,
                )
                .json();
            let canon = |v: Value| match v["error"].as_str() {
                Some(e) => Canon::Err(e.to_string()),
                None => Canon::Nil,
            };
            (canon(direct), canon(lua))
        } else {
            let mut lua: Vec<Vec<u8>> = ["EVAL", "return redis.pcall(unpack(ARGV))", "0"]
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect();
            lua.extend(argv.iter().cloned());
            let got = c.cmd(&argv);
            let before_lua = sizes(&mut c, &keys);
            assert_eq!(before_lua, before, "{name} changed something");
            (got, c.cmd(&lua))
        };
        assert_eq!(got, refusal, "{name}: {}", cmd[0]);
        assert_eq!(sizes(&mut c, &keys), before, "{name} changed something");
        match lua_got {
            Canon::Err(e) if e.starts_with("ERR max single record size exceeded") => {}
            other => panic!("{name} from Lua: {other:?}"),
        }
        assert_eq!(
            sizes(&mut c, &keys),
            before,
            "{name} from Lua changed something"
        );
    }
    let _ = table::global();
    // A write that keeps a value within the limit still runs, and a restart has nothing past it.
    c.cmd_str(&["FLUSHALL"]);
    assert_eq!(c.cmd_str(&["SETBIT", "b", "7999", "1"]), Canon::Int(0));
    assert_eq!(c.cmd_str(&["SETBIT", "b", "8000", "1"]), refusal);
    assert_eq!(c.cmd_str(&["STRLEN", "b"]), Canon::Int(1000));
    // In a transaction, the refused command answers its error; the others run.
    let r = c.post(
        "/multi-exec",
        br#"[["SET","t","1"],["SETBIT","t2","99999","1"],["SET","u","2"]]"#,
    );
    let replies = r.json();
    assert_eq!(replies[0]["result"], "OK", "{replies}");
    assert_eq!(
        replies[1]["error"], "ERR max single record size exceeded",
        "{replies}"
    );
    assert_eq!(replies[2]["result"], "OK", "{replies}");
    server.kill9();
    let server = start(&dir.path().join("data"), &["--max-value-bytes", "1000"]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["STRLEN", "b"]), Canon::Int(1000));
    assert_eq!(c.cmd_str(&["EXISTS", "t2"]), Canon::Int(0));
}

fn info_field(c: &mut Http, section: &str, field: &str) -> u64 {
    let Canon::Str(text) = c.cmd_str(&["INFO", section]) else {
        panic!("INFO {section}")
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {text}"))
}

/// Defect 8: there was no memory limit at all, so one scratch database could fill the machine.
/// Now each database has a data-size limit, set at creation (small by default for scratch
/// databases), reported in the admin API and `INFO memory`: once the database holds that much,
/// a write answers the hosted service's `ERR DB capacity quota exceeded`, and reads and deletes
/// go on.
#[test]
fn defect_8_a_databases_data_size_limit_refuses_writes_past_it() {
    let dir = TempDir::new("tenant-datasize");
    let data = dir.path().join("data");
    let server = start(&data, &[]);
    let (scratch_name, _) = scratch(&server);
    let doc = admin(&server)
        .get(&format!("/_admin/databases/{scratch_name}"))
        .json();
    assert_eq!(
        doc["max_data_bytes"],
        tidepool::config::SCRATCH_DATA_BYTES_MAX,
        "{doc}"
    );
    let db = create_with(&server, "small", json!({"max_data_bytes": 20_000}));
    let mut c = client_of(&server, &db);
    let value = "v".repeat(1000);
    let mut stored = 0;
    let refusal = Canon::Err("ERR DB capacity quota exceeded".into());
    loop {
        let k = format!("key:{stored}");
        match c.cmd_str(&["SET", &k, &value]) {
            Canon::Str(_) => stored += 1,
            e => {
                assert_eq!(e, refusal);
                break;
            }
        }
        assert!(stored < 100, "never refused");
    }
    assert!(
        (18..=20).contains(&stored),
        "{stored} values of 1,000 bytes"
    );
    // Growth in place is refused too, and changes nothing; so is a store.
    assert_eq!(c.cmd_str(&["APPEND", "key:0", &value]), refusal);
    // One write cannot pass the limit by what it adds (the review of issue 25: SETBIT at
    // the last offset made 512 MiB in a scratch database of 64 MiB), nor consumer groups,
    // which count with their stream (20,000 groups of 4 KB names counted 54 bytes).
    assert_eq!(c.cmd_str(&["SETBIT", "bits", "4294967295", "1"]), refusal);
    assert_eq!(c.cmd_str(&["SETRANGE", "range", "100000", "x"]), refusal);
    assert_eq!(c.cmd_str(&["EXISTS", "bits", "range"]), Canon::Int(0));
    assert_eq!(c.cmd_str(&["STRLEN", "key:0"]), Canon::Int(1000));
    assert_eq!(c.cmd_str(&["COPY", "key:0", "copy"]), refusal);
    // The size is reported, within the limit: a write that would take the data past it is
    // refused, so the database holds at most the limit.
    let used = info_field(&mut c, "memory", "tidepool_db_data_bytes");
    assert!((20_000 - 1100..=20_000).contains(&used), "{used}");
    assert!(used >= (stored as u64) * 1000, "{used}");
    assert_eq!(
        info_field(&mut c, "memory", "tidepool_db_max_data_bytes"),
        20_000
    );
    let listed = admin(&server).get("/_admin/databases/small").json();
    assert_eq!(listed["data_bytes"], used, "{listed}");
    // Reads and deletes go on; a delete makes room again.
    assert_eq!(c.cmd_str(&["GET", "key:1"]), Canon::s(&value));
    assert_eq!(c.cmd_str(&["DEL", "key:1", "key:2"]), Canon::Int(2));
    assert_eq!(c.cmd_str(&["SET", "again", &value]), Canon::s("OK"));
    let name = "g".repeat(600);
    let mut groups = 0;
    loop {
        match c.cmd_str(&[
            "XGROUP",
            "CREATE",
            "xs",
            &format!("{name}{groups}"),
            "$",
            "MKSTREAM",
        ]) {
            Canon::Str(_) => groups += 1,
            e => {
                assert_eq!(e, refusal, "after {groups} groups");
                break;
            }
        }
        assert!(groups < 100, "consumer groups are not counted");
    }
    // Another database is not held to this one's limit.
    let mut d = server.client();
    assert_eq!(
        d.cmd_str(&["SET", "big", &"x".repeat(50_000)]),
        Canon::s("OK")
    );
    // A restart counts the same bytes (replay changes values without counting them: the
    // count is made again after it).
    let used = info_field(&mut c, "memory", "tidepool_db_data_bytes");
    server.kill9();
    let server = start(&data, &[]);
    let mut c = Http::connect(&server.addr, db["token"].as_str().expect("token"));
    assert_eq!(info_field(&mut c, "memory", "tidepool_db_data_bytes"), used);
}

/// Defect 8: `maxmemory` answered 0 whatever the server held. `--max-memory` is Redis's
/// `maxmemory` with `noeviction`: past it, a command that may grow memory answers Redis's OOM
/// error; reads and deletes run, and freeing memory lets writes in again. `INFO memory` and
/// `CONFIG GET maxmemory` answer what the process holds and the limit.
#[test]
fn defect_8_max_memory_refuses_writes_past_it() {
    let dir = TempDir::new("tenant-maxmemory");
    let server = start(&dir.path().join("data"), &["--max-memory", "64MiB"]);
    let mut c = server.client();
    assert_eq!(
        c.cmd_str(&["CONFIG", "GET", "maxmemory"]),
        Canon::Arr(vec![
            Canon::s("maxmemory"),
            Canon::s(&(64u64 << 20).to_string())
        ])
    );
    assert!(info_field(&mut c, "memory", "used_memory") > 0);
    assert_eq!(info_field(&mut c, "memory", "maxmemory"), 64 << 20);
    let value = "m".repeat(1 << 20);
    let mut stored = 0;
    let oom = Canon::Err("OOM command not allowed when used memory > 'maxmemory'.".into());
    loop {
        match c.cmd_str(&["SET", &format!("k{stored}"), &value]) {
            Canon::Str(_) => stored += 1,
            e => {
                assert_eq!(e, oom);
                break;
            }
        }
        assert!(stored < 200, "never refused");
    }
    assert!(stored > 10, "refused after only {stored} MiB");
    // That refusal can come from the write's own growth (more than memory has left) before
    // the process is past the limit. Small keys, whose heap costs more than their counted
    // bytes, take it past: then every command that may grow memory is refused.
    let mut small = 0;
    while info_field(&mut c, "memory", "used_memory") <= 64 << 20 {
        let batch: Vec<Vec<Vec<u8>>> = (0..1_000)
            .map(|i| {
                vec![
                    b"SET".to_vec(),
                    format!("s{small}:{i}").into_bytes(),
                    vec![b's'; 100],
                ]
            })
            .collect();
        c.pipeline(&batch);
        small += 1;
        assert!(small < 2_000, "memory never passed the limit");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The newer commands that may grow memory are refused too (Redis 8's and RedisJSON's
    // deny-oom flags), and so is a value built from others.
    for cmd in [
        vec!["JSON.SET", "j", "$", "[1]"],
        vec!["HSETEX", "h", "FIELDS", "1", "f", "v"],
        vec!["SUNIONSTORE", "u", "k0"],
    ] {
        assert_eq!(c.cmd_str(&cmd), oom, "{cmd:?}");
    }
    assert!(info_field(&mut c, "memory", "used_memory") > 48 << 20);
    // Reads and deletes run.
    assert_eq!(c.cmd_str(&["STRLEN", "k0"]), Canon::Int(1 << 20));
    let mut del = vec!["DEL".to_string()];
    del.extend((0..stored).map(|i| format!("k{i}")));
    let del: Vec<&str> = del.iter().map(String::as_str).collect();
    assert_eq!(c.cmd_str(&del), Canon::Int(stored as i64));
    wait_until(20, "writes are let in again once memory is freed", || {
        c.cmd_str(&["SET", "after", "1"]) == Canon::s("OK")
    });
    // Below the limit, one write cannot pass it by what it adds, nor a script by its writes together
    // (the review of issue 25: SETBIT at the last offset, a 512 MiB string, and an EVAL of
    // 300 SETs of 1 MiB, all accepted).
    assert_eq!(c.cmd_str(&["SETBIT", "bits", "4294967295", "1"]), oom);
    match c.cmd_str(&[
        "EVAL",
        "for i=1,300 do redis.call('SET','e'..i,string.rep('x',1048576)) end return 1",
        "0",
    ]) {
        Canon::Err(e) => assert!(e.starts_with("OOM command not allowed"), "{e}"),
        other => panic!("a script wrote 300 MiB past --max-memory: {other:?}"),
    }
    c.cmd_str(&[
        "EVAL",
        "for i=1,300 do redis.call('DEL','e'..i) end return 1",
        "0",
    ]);
    wait_until(
        20,
        "writes are let in again once the script's writes are deleted",
        || c.cmd_str(&["SET", "after", "2"]) == Canon::s("OK"),
    );
    // A server with no data is never locked in OOM by memory it kept: the log's buffers
    // held a 40 MiB pipeline's record after FLUSHALL, and every write was refused until a
    // restart (the review of issue 25).
    let big: Vec<Vec<Vec<u8>>> = (0..40)
        .map(|i| {
            vec![
                b"SET".to_vec(),
                format!("p{i}").into_bytes(),
                value.clone().into_bytes(),
            ]
        })
        .collect();
    c.pipeline(&big);
    assert_eq!(c.cmd_str(&["FLUSHALL"]), Canon::s("OK"));
    wait_until(20, "memory comes back after FLUSHALL", || {
        info_field(&mut c, "memory", "used_memory") < 16 << 20
    });
    assert_eq!(c.cmd_str(&["SET", "after", "1"]), Canon::s("OK"));
}

/// Defect 5, found in review: a JSON write copies its value into every match of a path, so
/// `JSON.SET k $..a <value>` on a document of many `a`s multiplied a small request into
/// gigabytes, with no limit set at all. One JSON command may add at most
/// `JSON_CHANGE_BYTES_MAX` to a document; past it, it is refused before anything changes.
#[test]
fn defect_5_a_json_write_cannot_multiply_its_value_without_bound() {
    let dir = TempDir::new("tenant-jsonmult");
    let server = start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    let doc = format!("[{}]", vec![r#"{"a":0}"#; 2000].join(","));
    assert_eq!(c.cmd_str(&["JSON.SET", "k", "$", &doc]), Canon::s("OK"));
    let value = format!("\"{}\"", "v".repeat(40_000));
    for cmd in [
        vec!["JSON.SET", "k", "$..a", value.as_str()],
        vec!["JSON.MERGE", "k", "$[*]", &format!("{{\"b\":{value}}}")],
    ] {
        match c.cmd_str(&cmd) {
            Canon::Err(e) => assert!(e.contains("more than one command may add"), "{e}"),
            other => panic!("{:?}: {other:?}", &cmd[..2]),
        }
    }
    let arr = format!("[{}]", vec!["[]"; 2000].join(","));
    assert_eq!(c.cmd_str(&["JSON.SET", "l", "$", &arr]), Canon::s("OK"));
    for cmd in [
        vec!["JSON.ARRAPPEND", "l", "$[*]", value.as_str()],
        vec!["JSON.ARRINSERT", "l", "$[*]", "0", value.as_str()],
    ] {
        assert!(
            matches!(c.cmd_str(&cmd), Canon::Err(e) if e.contains("more than one command may add")),
            "{:?}",
            &cmd[..2]
        );
    }
    // Nothing changed; a change within the bound runs.
    assert_eq!(
        c.cmd_str(&["JSON.GET", "k", "$[0]"]),
        Canon::s(r#"[{"a":0}]"#)
    );
    assert_eq!(c.cmd_str(&["JSON.SET", "k", "$..a", "1"]), Canon::s("OK"));
}
