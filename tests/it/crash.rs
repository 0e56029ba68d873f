//! Crash and recovery: kill -9 under concurrent acknowledged writes, torn tails, a flipped byte
//! in the middle, failures named by file and offset, and replay rebuilding the same state.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn segments(data: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Where the valid records of a segment end: segments are preallocated with zeros, and every
/// record these tests write ends with a non-zero byte.
fn valid_end(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map(|i| i + 1)
        .unwrap_or(0)
}

/// Every key, with its type, value and expiry: the state a restart must rebuild.
fn full_dump(c: &mut Http) -> BTreeMap<Vec<u8>, (Canon, Canon, Canon)> {
    let Canon::Arr(keys) = c.cmd_str(&["KEYS", "*"]) else {
        panic!("KEYS")
    };
    let mut out = BTreeMap::new();
    for k in keys {
        let Canon::Str(k) = k else { panic!("key") };
        let t = c.cmd(&[b"TYPE".to_vec(), k.clone()]);
        let v = match &t {
            Canon::Str(s) if s == b"string" => c.cmd(&[b"GET".to_vec(), k.clone()]),
            Canon::Str(s) if s == b"hash" => {
                let Canon::Arr(items) = c.cmd(&[b"HGETALL".to_vec(), k.clone()]) else {
                    panic!("hgetall")
                };
                let mut pairs: Vec<Vec<Canon>> = items.chunks(2).map(|p| p.to_vec()).collect();
                pairs.sort();
                Canon::Arr(pairs.into_iter().flatten().collect())
            }
            Canon::Str(s) if s == b"list" => {
                c.cmd(&[b"LRANGE".to_vec(), k.clone(), b"0".to_vec(), b"-1".to_vec()])
            }
            Canon::Str(s) if s == b"set" => {
                let Canon::Arr(mut items) = c.cmd(&[b"SMEMBERS".to_vec(), k.clone()]) else {
                    panic!("smembers")
                };
                items.sort();
                Canon::Arr(items)
            }
            Canon::Str(s) if s == b"zset" => c.cmd(&[
                b"ZRANGE".to_vec(),
                k.clone(),
                b"0".to_vec(),
                b"-1".to_vec(),
                b"WITHSCORES".to_vec(),
            ]),
            other => panic!("unexpected type {other:?}"),
        };
        let ttl = c.cmd(&[b"PEXPIRETIME".to_vec(), k.clone()]);
        out.insert(k, (t, v, ttl));
    }
    out
}

#[test]
fn kill_9_under_concurrent_writes_keeps_every_acknowledged_write_ten_rounds() {
    let dir = TempDir::new("crash");
    let data = dir.path().join("data");
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::new(Mutex::new(Vec::new()));
    for round in 0..10 {
        let server = Server::start(&data, &["--fsync", "always"]);
        // Everything acknowledged in earlier rounds is still there.
        let mut c = server.client();
        let expected = acked.lock().unwrap().clone();
        for chunk in expected.chunks(500) {
            let cmds: Vec<Vec<Vec<u8>>> = chunk
                .iter()
                .map(|(k, _)| vec![b"GET".to_vec(), k.as_bytes().to_vec()])
                .collect();
            let got = c.pipeline(&cmds);
            for ((k, v), g) in chunk.iter().zip(got) {
                assert_eq!(
                    g,
                    Canon::Str(v.as_bytes().to_vec()),
                    "round {round}: acknowledged write {k} lost"
                );
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..8)
            .map(|w| {
                let (addr, stop, acked) = (server.addr.clone(), stop.clone(), acked.clone());
                std::thread::spawn(move || {
                    let Ok(s) = std::net::TcpStream::connect(&addr) else {
                        return;
                    };
                    drop(s);
                    let mut c = Http::connect(&addr, TOKEN);
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let (k, v) = (format!("r{round}w{w}i{i}"), format!("v{round}-{w}-{i}"));
                        // A crashed server shows up as a panic inside the client: stop quietly.
                        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            let r = c.post(
                                "/pipeline",
                                format!(r#"[["SET","{k}","{v}"],["HSET","h{w}","{i}","{v}"]]"#)
                                    .as_bytes(),
                            );
                            r.status == 200
                        }));
                        match ok {
                            Ok(true) => acked.lock().unwrap().push((k, v)),
                            _ => return,
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150 + 30 * round as u64));
        server.kill9();
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            let _ = w.join();
        }
    }
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    let all = acked.lock().unwrap().clone();
    assert!(
        all.len() > 100,
        "the writers made progress ({} writes)",
        all.len()
    );
    for chunk in all.chunks(500) {
        let cmds: Vec<Vec<Vec<u8>>> = chunk
            .iter()
            .map(|(k, _)| vec![b"GET".to_vec(), k.as_bytes().to_vec()])
            .collect();
        for ((k, v), g) in chunk.iter().zip(c.pipeline(&cmds)) {
            assert_eq!(
                g,
                Canon::Str(v.as_bytes().to_vec()),
                "acknowledged write {k} lost"
            );
        }
    }
    server.terminate(); // tidepool-log reads only logs no server holds
    let (code, out) = log_tool(&["verify", data.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

fn seeded(data: &Path, n: usize) {
    let server = Server::start(data, &["--fsync", "always"]);
    let mut c = server.client();
    for i in 0..n {
        assert_eq!(
            c.cmd_str(&["SET", &format!("k{i}"), &format!("v{i}")]),
            Canon::s("OK")
        );
    }
    server.kill9();
}

#[test]
fn torn_tail_is_cut_with_a_warning() {
    let dir = TempDir::new("torn");
    let data = dir.path().join("data");
    seeded(&data, 20);
    let seg = segments(&data).pop().unwrap();
    let good_len = valid_end(&std::fs::read(&seg).unwrap()) as u64;
    // Half a frame at the write position: a length, a CRC and a few payload bytes, as a crash
    // mid-write leaves (the preallocated zeros follow it).
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[40, 0, 0, 0, 1, 2, 3, 4, 21, 0, 7], good_len)
        .unwrap();
    drop(f);
    let (code, out) = log_tool(&["verify", data.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("at offset {good_len}")) && out.contains("torn tail"),
        "{out}"
    );
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    for i in 0..20 {
        assert_eq!(
            c.cmd_str(&["GET", &format!("k{i}")]),
            Canon::s(&format!("v{i}"))
        );
    }
    let err = server.stderr();
    assert!(
        err.contains("warning")
            && err.contains(seg.file_name().unwrap().to_str().unwrap())
            && err.contains(&format!("offset {good_len}")),
        "{err}"
    );
    assert_eq!(
        valid_end(&std::fs::read(&seg).unwrap()) as u64,
        good_len,
        "the tail was cut at the last good record"
    );
    // The inspection tool will not judge damage in a log a live server is writing.
    let (code, out) = log_tool(&["verify", data.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("in use by a running tidepool"), "{out}");
    // And it keeps working after the cut.
    assert_eq!(c.cmd_str(&["SET", "after", "cut"]), Canon::s("OK"));
    server.terminate();
    let server = Server::start(&data, &[]);
    assert_eq!(server.client().cmd_str(&["GET", "after"]), Canon::s("cut"));
}

#[test]
fn a_complete_last_record_with_a_bad_crc_is_a_torn_tail() {
    let dir = TempDir::new("torncrc");
    let data = dir.path().join("data");
    seeded(&data, 5);
    let seg = segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let n = valid_end(&bytes);
    bytes[n - 1] ^= 0x55; // last byte of the last record's payload
    std::fs::write(&seg, &bytes).unwrap();
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", "k3"]), Canon::s("v3"));
    assert_eq!(
        c.cmd_str(&["GET", "k4"]),
        Canon::Nil,
        "the torn record is dropped"
    );
}

#[test]
fn a_flipped_byte_in_the_middle_refuses_to_start_until_repaired() {
    let dir = TempDir::new("flip");
    let data = dir.path().join("data");
    seeded(&data, 50);
    let seg = segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = valid_end(&bytes) / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();

    let err = match Server::try_start(&data, &[]) {
        Ok(_) => panic!("the server started on a corrupt log"),
        Err(e) => e,
    };
    let name = seg.file_name().unwrap().to_str().unwrap();
    assert!(
        err.contains(name) && err.contains("offset") && err.contains("tidepool-log"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let (code, out) = log_tool(&["verify", data.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains(name) && out.contains("corruption"), "{out}");
    // Declining leaves the file alone.
    let (code, _) = log_tool(&["repair", data.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
    let (code, out) = log_tool(&["repair", "--yes", data.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(
        c.cmd_str(&["GET", "k0"]),
        Canon::s("v0"),
        "records before the damage survive"
    );
    assert_eq!(
        c.cmd_str(&["GET", "k49"]),
        Canon::Nil,
        "records after the damage are dropped"
    );
}

#[test]
fn replay_rebuilds_exactly_the_same_state() {
    let dir = TempDir::new("replay");
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--fsync", "never"]);
    let mut c = server.client();
    let mut r = TestRng(42);
    let far = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 100_000)
        .to_string();
    for i in 0..5000 {
        let k = format!("k{}", r.below(50));
        let f = format!("f{}", r.below(8));
        let cmd: Vec<String> = match r.below(24) {
            0 => vec!["SET".into(), k, format!("{i}")],
            1 => vec!["SET".into(), k, "x".into(), "EX".into(), "5000".into()],
            2 => vec!["INCRBY".into(), k, "3".into()],
            3 => vec!["INCRBYFLOAT".into(), k, "0.1".into()],
            4 => vec!["APPEND".into(), k, "ab".into()],
            5 => vec!["HSET".into(), k, f, format!("{i}")],
            6 => vec!["HINCRBYFLOAT".into(), k, f, "1.5".into()],
            7 => vec!["DEL".into(), k],
            8 => vec!["EXPIREAT".into(), k, far.clone()],
            9 => vec!["PERSIST".into(), k],
            10 => vec!["RENAME".into(), k, format!("k{}", r.below(50))],
            11 => vec!["GETEX".into(), k, "PX".into(), "900000".into()],
            12 => vec!["SETRANGE".into(), k, "3".into(), "zz".into()],
            13 => vec!["RPUSH".into(), k, f, format!("{i}")],
            14 => vec![
                "LMOVE".into(),
                k,
                format!("k{}", r.below(50)),
                "LEFT".into(),
                "RIGHT".into(),
            ],
            15 => vec!["SADD".into(), k, f, format!("{}", i % 7)],
            16 => vec!["SPOP".into(), k, "2".into()],
            17 => vec![
                "SORT".into(),
                k,
                "ALPHA".into(),
                "STORE".into(),
                format!("k{}", r.below(50)),
            ],
            18 => vec!["LTRIM".into(), k, "1".into(), "-2".into()],
            19 => vec!["ZADD".into(), k, format!("{}", i % 13), f],
            20 => vec!["ZINCRBY".into(), k, "0.1".into(), f],
            21 => vec!["ZPOPMIN".into(), k],
            22 => vec![
                "ZUNIONSTORE".into(),
                k,
                "2".into(),
                format!("k{}", r.below(50)),
                format!("k{}", r.below(50)),
            ],
            _ => vec!["HDEL".into(), k, f],
        };
        c.cmd(
            &cmd.iter()
                .map(|s| s.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        );
    }
    c.cmd_str(&["SET", "gone", "soon", "PX", "1"]);
    // The expiry cycle logs its DEL: wait for that record in the log, read beside the server.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !log_tool(&["dump", "--key", "gone", data.to_str().expect("path")])
        .1
        .contains("\"DEL\"")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the expiry was never logged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = full_dump(&mut c);
    assert!(before.len() > 20);
    assert!(!before.contains_key(&b"gone"[..]));
    assert_eq!(server.terminate(), Some(0), "SIGTERM exits 0");
    let server = Server::start(&data, &[]);
    let after = full_dump(&mut server.client());
    assert_eq!(before, after);
}
