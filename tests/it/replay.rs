//! Replay for debugging (issue 16, first part): `tidepool-log history` shows every record that
//! changed a key, `dump` takes a window and key and kind filters, and `replay --to --out`
//! writes a data directory holding the state of a past point, which the server opens.

use crate::common::*;

/// A log of four records, one a request: SET k v1 (#1), SET k v2 (#2), SET other x (#3),
/// DEL k (#4). Returns the data directory and each record's time.
fn four_records(dir: &TempDir) -> (std::path::PathBuf, Vec<u64>) {
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    for cmd in [
        &["SET", "k", "v1"][..],
        &["SET", "k", "v2"],
        &["SET", "other", "x"],
        &["DEL", "k"],
    ] {
        assert!(!c.cmd_str(cmd).is_err(), "{cmd:?}");
        // Distinct record times, so a time point falls between two records.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    let (code, json) = log_tool(&["dump", "--json", data.to_str().expect("path")]);
    assert_eq!(code, 0, "{json}");
    let times = json
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["timestamp_ms"]
                .as_u64()
                .expect("ts")
        })
        .collect();
    (data, times)
}

#[test]
fn history_lists_every_record_that_changed_a_key_with_its_value() {
    let dir = TempDir::new("history");
    let (data, _) = four_records(&dir);
    let d = data.to_str().expect("path");
    let (code, out) = log_tool(&["history", d, "k"]);
    assert_eq!(code, 0, "{out}");
    let seqs: Vec<&str> = out.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(seqs.len(), 3, "{out}");
    assert!(seqs[0].starts_with("#1 ") && seqs[1].starts_with("#2 ") && seqs[2].starts_with("#4 "));
    assert!(out.contains("\"SET\" \"k\" \"v2\""), "{out}");
    assert!(
        !out.contains("other"),
        "a record on another key is left out: {out}"
    );
    let (code, out) = log_tool(&["history", "--values", d, "k"]);
    assert_eq!(code, 0, "{out}");
    let values: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("= "))
        .collect();
    assert_eq!(
        values,
        ["string \"v1\"", "string \"v2\"", "(no key)"],
        "{out}"
    );
    let (code, out) = log_tool(&["history", "--from", "2", "--to", "3", d, "k"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with('#')).count(),
        1,
        "{out}"
    );
}

#[test]
fn dump_takes_a_window_a_key_pattern_and_a_kind() {
    let dir = TempDir::new("dumpfilter");
    let (data, times) = four_records(&dir);
    let d = data.to_str().expect("path");
    let seqs = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| l.split(' ').next().unwrap_or("").to_string())
            .collect()
    };
    let (_, out) = log_tool(&["dump", "--from", "2", "--to", "3", d]);
    assert_eq!(seqs(&out), ["#2", "#3"], "{out}");
    let (_, out) = log_tool(&["dump", "--key", "oth*", d]);
    assert_eq!(seqs(&out), ["#3"], "{out}");
    let (_, out) = log_tool(&["dump", "--kind", "delivery-events", d]);
    assert!(seqs(&out).is_empty(), "{out}");
    // A time point: Unix milliseconds, and RFC 3339.
    let (_, out) = log_tool(&["dump", "--to", &times[1].to_string(), d]);
    assert_eq!(seqs(&out), ["#1", "#2"], "{out}");
    let at = chrono::DateTime::from_timestamp_millis(times[2] as i64)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (_, out) = log_tool(&["dump", "--from", &at, d]);
    assert_eq!(seqs(&out), ["#3", "#4"], "{out}");
    let (code, out) = log_tool(&["dump", "--from", "yesterday", d]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("RFC 3339"), "{out}");
}

#[test]
fn replay_writes_a_data_directory_at_a_past_point_that_the_server_opens() {
    let dir = TempDir::new("replayto");
    let (data, times) = four_records(&dir);
    let d = data.to_str().expect("path");
    let past = dir.path().join("at-2");
    let (code, out) = log_tool(&["replay", "--to", "2", "--out", past.to_str().expect("p"), d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("record #2"), "{out}");
    let server = Server::start(&past, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("v2"));
    assert_eq!(c.cmd_str(&["GET", "other"]), Canon::Nil);
    drop(c);
    assert_eq!(server.terminate(), Some(0));
    // By time, and the original directory untouched (all four records still there).
    let at3 = dir.path().join("at-3");
    let (code, out) = log_tool(&[
        "replay",
        "--to",
        &times[2].to_string(),
        "--out",
        at3.to_str().expect("p"),
        d,
    ]);
    assert_eq!(code, 0, "{out}");
    let server = Server::start(&at3, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("v2"));
    assert_eq!(c.cmd_str(&["GET", "other"]), Canon::s("x"));
    drop(c);
    server.terminate();
    let (_, all) = log_tool(&["dump", d]);
    assert_eq!(all.lines().filter(|l| l.starts_with('#')).count(), 4);
    // A directory that is not empty is refused.
    let (code, out) = log_tool(&["replay", "--to", "1", "--out", past.to_str().expect("p"), d]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not empty"), "{out}");
}

/// Every file of a data directory with its bytes: what `--at` must leave as it found it.
fn snapshot_of(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).expect("read")));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn serve_at_a_past_point_answers_reads_refuses_writes_and_writes_nothing() {
    let dir = TempDir::new("serveat");
    let (data, times) = four_records(&dir);
    let before = snapshot_of(&data);
    let server = Server::start_delivery_with(&data, &["--at", "2"]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("v2"));
    assert_eq!(c.cmd_str(&["EXISTS", "other"]), Canon::Int(0));
    let Canon::Err(e) = c.cmd_str(&["SET", "k", "v3"]) else {
        panic!("a write must be refused");
    };
    assert!(
        e.starts_with("ERR this server shows its log as of record #2"),
        "{e}"
    );
    assert_eq!(
        c.cmd_str(&["GET", "k"]),
        Canon::s("v2"),
        "the refused write changed nothing"
    );
    // Through every door (path, query, body, body as last argument, pipeline, multi-exec,
    // base64 and plain), the same refusal.
    for door in DOORS {
        let set: Vec<Vec<u8>> = ["SET", "k", "v3"]
            .iter()
            .map(|a| a.as_bytes().to_vec())
            .collect();
        let Canon::Err(e) = c.cmd_via(*door, &set) else {
            panic!("{door:?}: a write must be refused");
        };
        assert!(
            e.starts_with("ERR this server shows its log as of record #2"),
            "{door:?}: {e}"
        );
        let get = [b"GET".to_vec(), b"k".to_vec()];
        assert_eq!(c.cmd_via(*door, &get), Canon::s("v2"), "{door:?}");
    }
    // A script that writes is refused at its write; the delivery API refuses publishing.
    let Canon::Err(e) = c.cmd_str(&["EVAL", "return redis.call('SET','k','x')", "0"]) else {
        panic!("a script's write must be refused");
    };
    assert!(e.contains("read-only (--at)"), "{e}");
    let mut q = server.qstash();
    let r = q.request("POST", "/v2/publish/https://example.com/x", &[], b"x");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("--at")));
    // A live server cannot open the directory meanwhile, and a second --at can.
    let second = Server::try_start(&data, &["--at", &times[2].to_string()]).expect("a second --at");
    let mut c2 = second.client();
    assert_eq!(c2.cmd_str(&["GET", "other"]), Canon::s("x"));
    let busy = Server::try_start(&data, &[]);
    assert!(
        busy.is_err(),
        "a writing server must not share the directory"
    );
    drop((c, c2, q));
    second.terminate();
    assert_eq!(server.terminate(), Some(0));
    assert_eq!(snapshot_of(&data), before, "--at wrote into the directory");
    // The directory still opens normally, with all four records.
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::Nil);
    assert_eq!(c.cmd_str(&["GET", "other"]), Canon::s("x"));
}

/// `tail` works beside a running server: the newest records, then (`-f`) each new one.
#[test]
fn tail_follows_a_running_server() {
    use std::io::BufRead;
    let dir = TempDir::new("tail");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    for i in 1..=12 {
        c.cmd_str(&["SET", &format!("k{i}"), "v"]);
    }
    let d = data.to_str().expect("path");
    let (code, out) = log_tool(&["tail", d]);
    assert_eq!(code, 0, "{out}");
    let seqs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    let want: Vec<String> = (3..=12).map(|i| format!("#{i}")).collect();
    assert_eq!(seqs, want, "{out}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool-log"))
        .args(["tail", "-f", d])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tail -f");
    // Should a line never come, the follower is killed and the read below fails instead of
    // hanging the suite.
    let pid = child.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(30));
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status();
    });
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    // The ten it starts with, then what is written while it follows.
    let mut seen = Vec::new();
    while seen.len() < 10 {
        let l = lines.next().expect("a line").expect("utf-8");
        if l.starts_with('#') {
            seen.push(l);
        }
    }
    c.cmd_str(&["SET", "later", "1"]);
    let got = loop {
        let l = lines.next().expect("a line").expect("utf-8");
        if l.starts_with('#') {
            break l;
        }
    };
    assert!(got.starts_with("#13 "), "{got}");
    let cmd = lines.next().expect("a line").expect("utf-8");
    assert!(cmd.contains("\"later\""), "{cmd}");
    let _ = child.kill();
    let _ = child.wait();
}

/// The operator's question, asked without stopping the server: `history` and `dump` read a
/// running server's log (a copy, never a map), even while it is being written, and the record
/// being written is not taken for damage.
#[test]
fn history_and_dump_read_a_running_server() {
    let dir = TempDir::new("livehist");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    c.cmd_str(&["SET", "cart:42", "a"]);
    c.cmd_str(&["APPEND", "cart:42", "b"]);
    let d = data.to_str().expect("path").to_string();
    let (code, out) = log_tool(&["history", "--values", &d, "cart:42"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("= string \"ab\""), "{out}");
    // Writes going on meanwhile, from another connection.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let addr = server.addr.clone();
        std::thread::spawn(move || {
            let mut w = Http::connect(&addr, TOKEN);
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                w.cmd_str(&["SET", &format!("w{}", n % 100), &"x".repeat(500)]);
                n += 1;
            }
            n
        })
    };
    for _ in 0..20 {
        let (code, out) = log_tool(&["dump", "--key", "cart:*", &d]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(
            out.lines().filter(|l| l.starts_with('#')).count(),
            2,
            "{out}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().expect("writer");
    assert!(written > 0);
    // verify and repair still want a log nobody writes.
    let (code, out) = log_tool(&["verify", &d]);
    assert_eq!(code, 2, "{out}");
}

/// Found when reading `tail` again: a record larger than its 4 MiB read buffer would have
/// stalled it for good. It makes room for the record.
#[test]
fn tail_shows_a_record_larger_than_its_buffer() {
    let dir = TempDir::new("tailbig");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    let big = "x".repeat(5 << 20);
    assert_eq!(c.cmd_str(&["SET", "big", &big]), Canon::s("OK"));
    c.cmd_str(&["SET", "small", "1"]);
    let (code, out) = log_tool(&["tail", data.to_str().expect("path")]);
    assert_eq!(code, 0);
    let seqs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(seqs, ["#1", "#2"]);
}

/// Issue 26: a segment whose only record is `["SET","k"]`, with a valid checksum, passed
/// `tidepool-log verify` ("ok: 1 records") and then made `tidepool serve` panic during start-up
/// (replay ran commands without the arity check the live path makes). Start-up now refuses it
/// with the file, the offset and the record's number, naming the repair; verify reports it;
/// repair cuts the log at it; and no logged command reaches a handler unchecked.
#[test]
fn a_record_no_server_writes_refuses_start_up_with_its_place() {
    let dir = TempDir::new("badrecord");
    let data = dir.path().join("data");
    write_log(
        &data,
        &[&["SET", "a", "1"], &["SET", "k"], &["SET", "b", "2"]],
    );
    let err = Server::try_start(&data, &[])
        .err()
        .expect("start-up refuses the directory");
    assert!(err.contains("00000000000000000001.wal at offset"), "{err}");
    assert!(err.contains("record #2"), "{err}");
    assert!(err.contains("'set' has 1 arguments"), "{err}");
    assert!(err.contains("tidepool-log repair"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let d = data.to_str().expect("path");
    let (code, out) = log_tool(&["verify", d]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("record #2") && out.contains("has 1 arguments"),
        "{out}"
    );
    // An unknown command is refused the same way.
    let other = dir.path().join("unknown");
    write_log(&other, &[&["NOSUCHCOMMAND", "k"]]);
    let err = Server::try_start(&other, &[]).err().expect("refused");
    assert!(
        err.contains("'NOSUCHCOMMAND' is not a command tidepool runs"),
        "{err}"
    );
    // repair cuts the log at the record; the records before it stay.
    let (code, out) = log_tool(&["repair", "--yes", d]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = log_tool(&["verify", d]);
    assert_eq!(code, 0, "{out}");
    let s = Server::start(&data, &[]);
    let mut c = s.client();
    assert_eq!(c.cmd_str(&["GET", "a"]), Canon::s("1"));
    assert_eq!(c.cmd_str(&["EXISTS", "b"]), Canon::Int(0));
}

/// Issue 26: replay never draws from the random source, so every tool and every replica
/// replays a log to the same state whatever its seed. Random choices made live (SPOP with and
/// without a count, a script's SPOP, generated message ids, dead-letter ids) are logged as
/// they came out; replaying that log draws nothing, and the replayed state is the one the
/// server answered.
#[test]
fn replay_draws_nothing_from_the_random_source() {
    let dir = TempDir::new("draws");
    let data = dir.path().join("data");
    let server = Server::start_delivery(&data);
    let mut c = server.client();
    let members: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    let mut sadd = vec!["SADD", "s"];
    sadd.extend(members.iter().map(String::as_str));
    assert_eq!(c.cmd_str(&sadd), Canon::Int(40));
    assert!(!c.cmd_str(&["SPOP", "s"]).is_err());
    assert!(!c.cmd_str(&["SPOP", "s", "5"]).is_err());
    assert!(!c
        .cmd_str(&["EVAL", "return redis.call('SPOP', KEYS[1], 3)", "1", "s"])
        .is_err());
    assert!(!c.cmd_str(&["HSET", "h", "a", "1", "b", "2"]).is_err());
    assert!(!c.cmd_str(&["HRANDFIELD", "h", "-5"]).is_err());
    assert!(!c.cmd_str(&["XADD", "x", "*", "f", "v"]).is_err());
    let left = c.cmd_str(&["SMEMBERS", "s"]);
    let mut q = server.qstash();
    for _ in 0..3 {
        // A destination nobody listens on: the attempt fails, and the message dies into the
        // DLQ (generated message and DLQ ids) after its one retry.
        let r = q.request(
            "POST",
            &format!("/v2/publish/http://127.0.0.1:{}/", free_port()),
            &[("Upstash-Retries", "0")],
            b"x",
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while q.get("/v2/dlq").json()["messages"]
        .as_array()
        .map_or(0, Vec::len)
        < 3
    {
        assert!(std::time::Instant::now() < deadline, "the DLQ never filled");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop((c, q));
    assert_eq!(server.terminate(), Some(0));
    let r = tidepool::machine::recover(
        &data,
        tidepool::machine::Recover::read(tidepool::machine::Start::Newest),
    )
    .expect("recover");
    assert!(r.damage.is_none(), "{:?}", r.damage);
    assert_eq!(r.machine.replay_draws(), 0, "replay drew from the source");
    assert_eq!(r.errors, 0);
    assert_eq!(r.machine.delivery().dlq.len(), 3);
    let mut m = r.machine;
    let replayed = m.read(
        tidepool::state::databases::DEFAULT_DB,
        m.position().unix_ms,
        &[b"SMEMBERS", b"s"],
    );
    let tidepool::reply::Reply::Array(items) = replayed else {
        panic!("SMEMBERS: {replayed:?}");
    };
    let mut got: Vec<Vec<u8>> = items
        .into_iter()
        .map(|i| match i {
            tidepool::reply::Reply::Bulk(b) => b.to_vec(),
            other => panic!("{other:?}"),
        })
        .collect();
    got.sort();
    let Canon::Arr(live) = left else {
        panic!("SMEMBERS: {left:?}");
    };
    let mut live: Vec<Vec<u8>> = live
        .into_iter()
        .map(|i| match i {
            Canon::Str(b) => b,
            other => panic!("{other:?}"),
        })
        .collect();
    live.sort();
    assert_eq!(got.len(), 31);
    assert_eq!(got, live, "the replayed set is the one the server answered");
}
