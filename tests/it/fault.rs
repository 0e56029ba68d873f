//! After a failed sync the log refuses writes, and reads too (issue 25, defect 6: the write
//! that failed stayed visible until a restart); a restart recovers every write acknowledged
//! before the failure. Needs `--features fault-injection` (tools/test.sh
//! passes it); without the feature this file compiles to nothing.
#![cfg(feature = "fault-injection")]

use crate::common::*;

#[test]
fn a_failed_fsync_refuses_writes_and_reads_until_a_restart() {
    let dir = TempDir::new("fault");
    let data = dir.path().join("data");
    // In the server's own environment: the other tests of this binary start servers too.
    let server = Server::try_start_env(
        &data,
        &["--fsync", "always", "--qstash-token", QSTASH_TOKEN],
        &[("TIDEPOOL_FAULT_FSYNC_FAIL_AFTER", "20")],
    )
    .unwrap_or_else(|e| panic!("tidepool did not start: {e}"));
    let mut c = server.client();
    let mut acked = Vec::new();
    let mut first_error = None;
    for i in 0..100 {
        match c.cmd_str(&["SET", &format!("k{i}"), &format!("v{i}")]) {
            Canon::Str(ok) if ok == b"OK" => acked.push(i),
            Canon::Err(e) => {
                first_error = Some((i, e));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let (failed_at, err) = first_error.expect("the injected sync failure surfaces as an error");
    assert!(err.starts_with("ERR the write-ahead log failed"), "{err}");
    assert!(err.contains("injected fault"), "{err}");
    assert_eq!(acked.len(), failed_at);
    // Every later write is refused, and so is every read, the failed write's key first (it
    // was applied in memory before its record failed): no reader may see what the disk may
    // not hold. Pipelines, transactions, the delivery API and the admin API alike.
    let refused = |c: Canon| matches!(&c, Canon::Err(t) if t.contains("reads and writes are refused until the server is restarted"));
    let failed = format!("k{failed_at}");
    for cmd in [
        vec!["SET", "after", "x"],
        vec!["EXISTS", failed.as_str()],
        vec!["GET", "k0"],
        vec!["DBSIZE"],
        vec!["PING"],
    ] {
        let got = c.cmd_str(&cmd);
        assert!(refused(got.clone()), "{cmd:?}: {got:?}");
    }
    // A pipeline or transaction is refused whole, as one error (400).
    for path in ["/pipeline", "/multi-exec"] {
        let r = c.post(path, br#"[["GET","k0"],["DBSIZE"]]"#);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(
            r.text().contains("reads and writes are refused"),
            "{path}: {}",
            r.text()
        );
    }
    let r = server.qstash().get("/v2/messages/msg_x");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("reads and writes are refused"),
        "{}",
        r.text()
    );
    server.kill9();

    let server = Server::start(&data, &[]);
    let mut c = server.client();
    for i in acked {
        assert_eq!(
            c.cmd_str(&["GET", &format!("k{i}")]),
            Canon::s(&format!("v{i}")),
            "acknowledged write k{i}"
        );
    }
    assert_eq!(
        c.cmd_str(&["SET", "after", "restart"]),
        Canon::s("OK"),
        "a restart clears the poison"
    );
}

/// Writes `n` keys `p:i` of 100 bytes in pipelines of 500; every reply must be OK.
fn write_keys(c: &mut Http, prefix: &str, n: usize) {
    let value = "v".repeat(100);
    for start in (0..n).step_by(500) {
        let cmds: Vec<Vec<Vec<u8>>> = (start..(start + 500).min(n))
            .map(|i| {
                vec![
                    b"SET".to_vec(),
                    format!("{prefix}:{i}").into_bytes(),
                    value.clone().into_bytes(),
                ]
            })
            .collect();
        for r in c.pipeline(&cmds) {
            assert_eq!(r, Canon::s("OK"));
        }
    }
}

fn count_keys(c: &mut Http, prefix: &str, n: usize) -> usize {
    let mut found = 0;
    for start in (0..n).step_by(500) {
        let mut cmd = vec![b"EXISTS".to_vec()];
        cmd.extend((start..(start + 500).min(n)).map(|i| format!("{prefix}:{i}").into_bytes()));
        match c.cmd(&cmd) {
            Canon::Int(k) => found += k as usize,
            other => panic!("EXISTS: {other:?}"),
        }
    }
    found
}

/// Waits for a server killed by a crash point to be gone.
/// A background save's child dies a moment after the server it kills, and holds the data
/// directory's lock (an inherited descriptor) until then: wait for the lock to be free too.
fn wait_dead(mut s: Server, data: &std::path::Path) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let lock_free =
            || std::fs::File::open(data.join("LOCK")).is_ok_and(|f| f.try_lock().is_ok());
        if let Ok(Some(_)) = s.child.try_wait() {
            if lock_free() {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < until,
            "the crash point was never reached; stderr: {}",
            s.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `kill -9` at every point of taking a snapshot and of deleting segments behind it (SAVE in
/// place and BGSAVE in a child, which takes the server down with it) loses no acknowledged
/// write and always leaves a directory that starts.
#[test]
fn a_crash_at_any_point_of_a_snapshot_loses_nothing() {
    let points = [
        "log-rolled",
        "snapshot-partial",
        "snapshot-written",
        "snapshot-synced",
        "snapshot-renamed",
        "snapshot-published",
        "segment-deleted",
    ];
    const N: usize = 12_000; // 1.2 MB of values: more than one chunk of keys
    for point in points {
        for ask in ["SAVE", "BGSAVE"] {
            let dir = TempDir::new(&format!("crash-{point}-{ask}"));
            let data = dir.path().join("data");
            // Three segments and two snapshots, the log all kept.
            let s = Server::start(&data, &["--auto-snapshot-percentage", "0"]);
            let mut c = s.client();
            write_keys(&mut c, "a", N);
            assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
            write_keys(&mut c, "b", N);
            assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
            write_keys(&mut c, "c", 100);
            drop(c);
            assert_eq!(s.terminate(), Some(0));
            // Now with nothing kept behind a snapshot: start-up compacts (deleting two
            // segments), then a snapshot is taken; the crash comes at `point`.
            let faulty = Server::try_start_env(
                &data,
                &["--log-retention", "0", "--auto-snapshot-percentage", "0"],
                &[("TIDEPOOL_FAULT_CRASH_AT", point)],
            );
            let mut d_written = 0;
            match faulty {
                // The crash came during start-up's compaction.
                Err(_) => assert_eq!(point, "segment-deleted"),
                Ok(s) => {
                    let mut c = s.client();
                    write_keys(&mut c, "d", N);
                    d_written = N;
                    drop(c);
                    // The server dies while it answers (or right after): send, never mind.
                    use std::io::Write;
                    let held = std::net::TcpStream::connect(&s.addr);
                    if let Ok(mut t) = held.as_ref() {
                        let _ = write!(
                            t,
                            "POST /{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n\r\n",
                            ask.to_lowercase()
                        );
                    }
                    wait_dead(s, &data);
                    drop(held);
                }
            }
            let s = Server::try_start(&data, &[])
                .unwrap_or_else(|e| panic!("{point}/{ask}: the directory does not start: {e}"));
            let mut c = s.client();
            for (prefix, n) in [("a", N), ("b", N), ("c", 100), ("d", d_written)] {
                assert_eq!(
                    count_keys(&mut c, prefix, n),
                    n,
                    "{point}/{ask}: keys {prefix}"
                );
            }
            write_keys(&mut c, "e", 10);
            assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"), "{point}/{ask}");
            drop(c);
            assert_eq!(s.terminate(), Some(0));
            let s = Server::try_start(&data, &[]).expect("starts again");
            assert_eq!(count_keys(&mut s.client(), "e", 10), 10, "{point}/{ask}");
        }
    }
}

/// `/readyz` answers 503 once a failed sync has made the server refuse reads and writes, and
/// says why (`/healthz` still answers: the process is alive).
#[test]
fn readiness_fails_when_the_log_refuses_writes() {
    let dir = TempDir::new("readyz");
    let s = Server::try_start_env(
        &dir.path().join("data"),
        &["--fsync", "always"],
        &[("TIDEPOOL_FAULT_FSYNC_FAIL_AFTER", "2")],
    )
    .unwrap_or_else(|e| panic!("tidepool did not start: {e}"));
    let mut c = s.client();
    for i in 0..5 {
        c.cmd_str(&["SET", &format!("k{i}"), "v"]);
    }
    let mut anon = Http::connect(&s.addr, "");
    let r = anon.get("/readyz");
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["status"], "not ready");
    assert!(r.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("reads and writes are refused until the server is restarted")));
    assert_eq!(anon.get("/healthz").status, 200);
}

/// A server with `--fsync always` whose syncs wait while the file it returns exists (a disk
/// that stalls for as long as a test needs), and the directory that holds both.
fn with_held_syncs(name: &str, args: &[&str]) -> (TempDir, std::path::PathBuf, Server) {
    let dir = TempDir::new(name);
    let data = dir.path().join("data");
    let hold = dir.path().join("hold-syncs");
    let mut all = vec!["--fsync", "always"];
    all.extend_from_slice(args);
    let server = Server::try_start_env(
        &data,
        &all,
        &[(
            "TIDEPOOL_FAULT_FSYNC_HOLD",
            hold.to_str().expect("utf-8 path"),
        )],
    )
    .unwrap_or_else(|e| panic!("tidepool did not start: {e}"));
    (dir, hold, server)
}

/// Runs `f` on a thread of its own; its answer comes on the channel.
fn in_background(f: Box<dyn FnOnce() -> String + Send>) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// Issue 27: a key-value read waits for the key-value records it may show to be durable, and
/// not for the delivery service's. While the disk holds a sync, a publish (a delivery record)
/// waits for it, and a GET of a key written and synced before answers at once; then a SET
/// waits, and a GET of the key it set waits with it (it would show a write a crash could lose).
#[test]
fn a_read_waits_for_the_key_value_records_it_may_show_and_no_others() {
    use std::time::Duration;
    let (_dir, hold, server) = with_held_syncs("fault-hold", &["--qstash-token", QSTASH_TOKEN]);
    let mut c = server.client();
    assert_eq!(
        c.cmd_str(&["SET", "synced", "1"]),
        Canon::Str(b"OK".to_vec())
    );
    std::fs::write(&hold, b"").expect("hold file");
    // In the background, each on its own connection: what waits for the held sync.
    let run = in_background;
    let mut q = server.qstash();
    let published = run(Box::new(move || {
        let r = q.request("POST", "/v2/publish/http://127.0.0.1:9/x", &[], b"x");
        format!("{}", r.status)
    }));
    assert!(published.recv_timeout(Duration::from_millis(300)).is_err());
    // A read of durable state answers while the publish's sync is held.
    let mut r = server.client();
    let read = run(Box::new(move || {
        format!("{:?}", r.cmd_str(&["GET", "synced"]))
    }));
    assert_eq!(
        read.recv_timeout(Duration::from_secs(20)).as_deref(),
        Ok(r#"Str([49])"#),
        "a GET of a synced key waited for a delivery record's sync"
    );
    // A read that may show an unsynced SET waits for it.
    let mut w = server.client();
    let set = run(Box::new(move || {
        format!("{:?}", w.cmd_str(&["SET", "unsynced", "2"]))
    }));
    assert!(set.recv_timeout(Duration::from_millis(300)).is_err());
    let mut r2 = server.client();
    let read2 = run(Box::new(move || {
        format!("{:?}", r2.cmd_str(&["GET", "unsynced"]))
    }));
    assert!(
        read2.recv_timeout(Duration::from_millis(300)).is_err(),
        "a GET answered from a write that was not durable"
    );
    // The HTTP thread waits for none of it: the key-value sync waits on the flusher, behind
    // the sync it has under way, not on the runtime's thread.
    let mut anon = Http::connect(&server.addr, "");
    let health = run(Box::new(move || format!("{}", anon.get("/healthz").status)));
    assert_eq!(
        health.recv_timeout(Duration::from_secs(20)).as_deref(),
        Ok("200"),
        "a health check waited for a held sync"
    );
    std::fs::remove_file(&hold).expect("release");
    let wait = Duration::from_secs(20);
    assert_eq!(published.recv_timeout(wait).as_deref(), Ok("200"));
    assert_eq!(set.recv_timeout(wait).as_deref(), Ok(r#"Str([79, 75])"#));
    assert_eq!(read2.recv_timeout(wait).as_deref(), Ok(r#"Str([50])"#));
}

/// Issue 28: the HTTP thread makes key-value syncs itself only while the disk is quick. Its
/// first sync on a disk that stalls holds it (and every request on it) until the disk answers,
/// as redis-server's loop is held; after that slow sync the flusher makes them, so that a
/// second stall holds the writes and the reads that may show them, and not a health check.
#[test]
fn after_one_slow_sync_the_flusher_makes_the_key_value_syncs_and_health_checks_answer() {
    use std::time::Duration;
    let (_dir, hold, server) = with_held_syncs("fault-slow", &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["SET", "a", "1"]), Canon::Str(b"OK".to_vec()));
    let run = in_background;
    // The first stall: the HTTP thread's own sync waits for the disk.
    std::fs::write(&hold, b"").expect("hold file");
    let mut w = server.client();
    let first = run(Box::new(move || {
        format!("{:?}", w.cmd_str(&["SET", "b", "2"]))
    }));
    assert!(first.recv_timeout(Duration::from_millis(500)).is_err());
    std::fs::remove_file(&hold).expect("release");
    let wait = Duration::from_secs(20);
    assert_eq!(first.recv_timeout(wait).as_deref(), Ok(r#"Str([79, 75])"#));
    // The second: the flusher waits, the HTTP thread answers what needs no sync.
    std::fs::write(&hold, b"").expect("hold file");
    let mut w = server.client();
    let second = run(Box::new(move || {
        format!("{:?}", w.cmd_str(&["SET", "c", "3"]))
    }));
    assert!(second.recv_timeout(Duration::from_millis(300)).is_err());
    let mut r = server.client();
    let read = run(Box::new(move || format!("{:?}", r.cmd_str(&["GET", "c"]))));
    let mut anon = Http::connect(&server.addr, "");
    let health = run(Box::new(move || format!("{}", anon.get("/healthz").status)));
    assert_eq!(
        health.recv_timeout(wait).as_deref(),
        Ok("200"),
        "a health check waited for a sync after the disk had been slow"
    );
    assert!(
        read.recv_timeout(Duration::from_millis(100)).is_err(),
        "a GET answered from a write that was not durable"
    );
    std::fs::remove_file(&hold).expect("release");
    assert_eq!(second.recv_timeout(wait).as_deref(), Ok(r#"Str([79, 75])"#));
    assert_eq!(read.recv_timeout(wait).as_deref(), Ok(r#"Str([51])"#));
    // Quick again: writes go on being acknowledged.
    for i in 0..20 {
        assert_eq!(
            c.cmd_str(&["SET", &format!("k{i}"), "v"]),
            Canon::Str(b"OK".to_vec())
        );
    }
}
