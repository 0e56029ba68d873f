//! Instructions a request: what the server spends on one `GET /get/k`, one `GET /set/k/v` (the
//! load benchmark's GET and SET), one `POST /` `["SET","k","v"]`, one `POST /pipeline` of 100
//! SETs (the load benchmark's pipeline body), and one message published
//! and delivered (`POST /v2/publish/<url>` to a destination of the benchmark's own, which
//! answers 200; the server's work for the delivery included: the count is taken once every
//! message has arrived), counted by `valgrind --tool=callgrind` (instructions, not seconds: the
//! same binary and inputs give the same count whatever else the machine does). Each figure is
//! the difference between a run of 2N and a run of N keep-alive requests, divided by N, so
//! start-up and shutdown cancel out. With `--against OTHER`, the other binary is counted in
//! the same way beside it, for an A/B (the main before a change).
//!
//!     target/release/tidepool-bench --instructions [--requests N] [--against PATH]
//!
//! Needs valgrind (`apt-get install -y valgrind`). The servers run with `--fsync never`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The requests counted: a name, the request's bytes; `sink` is the destination's port.
fn requests(sink: u16) -> [(&'static str, String); 5] {
    let auth = "Authorization: Bearer bench\r\n";
    let set = r#"["SET","k","v"]"#;
    let pipeline = super::pipeline_body();
    [
        (
            "`GET /get/k`",
            format!("GET /get/k HTTP/1.1\r\nHost: x\r\n{auth}\r\n"),
        ),
        (
            "`GET /set/k/v`",
            format!("GET /set/k/v HTTP/1.1\r\nHost: x\r\n{auth}\r\n"),
        ),
        (
            "`POST /` `[\"SET\",\"k\",\"v\"]`",
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n{set}",
                set.len()
            ),
        ),
        (
            "`POST /pipeline` of 100 SETs",
            format!(
                "POST /pipeline HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n{pipeline}",
                pipeline.len()
            ),
        ),
        (
            "a message published and delivered",
            format!(
                "POST /v2/publish/http://127.0.0.1:{sink}/m HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 1\r\n\r\nx"
            ),
        ),
    ]
}

/// A destination that answers every request 200 and counts them; its port.
fn sink(arrived: Arc<AtomicU64>) -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let arrived = arrived.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16384];
                loop {
                    // One whole request (head and Content-Length body) at the front of `buf`.
                    while let Some(h) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..h]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buf.len() < h + 4 + len {
                            break;
                        }
                        buf.drain(..h + 4 + len);
                        arrived.fetch_add(1, Ordering::SeqCst);
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(ok).is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    Ok(port)
}

/// Sends `request` `n` times on one keep-alive connection, each after the last answer.
fn send(port: u16, request: &str, n: u64) -> Result<(), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    for _ in 0..n {
        s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        let (status, body) = super::read_response(&mut s, &mut buf)?;
        if status != 200 {
            return Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
    }
    Ok(())
}

/// The total instructions of one server run under callgrind that answers `request` `n` times
/// (and, for a publish, delivers its `n` messages to the sink that counts `arrived`).
fn count(
    bin: &Path,
    tmp: &Path,
    request: &str,
    n: u64,
    arrived: &AtomicU64,
) -> Result<u64, String> {
    let dir = tmp.join(format!("callgrind-{}", super::free_port()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let out = dir.join("callgrind.out");
    let port = super::free_port();
    let mut child = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(bin)
        .args(["serve", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args([
            "--token",
            "bench",
            "--qstash-token",
            "bench",
            "--read-only-token",
            "bench-ro",
            "--fsync",
            "never",
            "--data",
        ])
        .arg(dir.join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start valgrind (apt-get install -y valgrind): {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("{} did not listen under valgrind", bin.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = arrived.load(Ordering::SeqCst);
    let mut sent = send(port, request, n);
    if sent.is_ok() && request.starts_with("POST /v2/publish/") {
        let deadline = Instant::now() + Duration::from_secs(120);
        while arrived.load(Ordering::SeqCst) < before + n {
            if Instant::now() > deadline {
                sent = Err(format!(
                    "{} messages of {n} were delivered",
                    arrived.load(Ordering::SeqCst) - before
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // A clean stop (SIGTERM, through kill(1)), so callgrind writes its counts.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    sent?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let total = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or("callgrind wrote no totals")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(total)
}

/// Instructions a request of each kind, for `bin`.
fn per_request(
    bin: &Path,
    tmp: &Path,
    n: u64,
    sink: (u16, &AtomicU64),
) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for (_, req) in requests(sink.0) {
        let one = count(bin, tmp, &req, n, sink.1)?;
        let two = count(bin, tmp, &req, 2 * n, sink.1)?;
        out.push(two.saturating_sub(one) / n);
    }
    Ok(out)
}

pub fn run(bin: &Path, tmp: &Path, n: u64, against: Option<PathBuf>) -> Result<(), String> {
    let n = n.max(1);
    let arrived = Arc::new(AtomicU64::new(0));
    let port = sink(arrived.clone())?;
    let ours = per_request(bin, tmp, n, (port, &arrived))?;
    let theirs = match &against {
        Some(other) => Some(per_request(other, tmp, n, (port, &arrived))?),
        None => None,
    };
    println!(
        "Instructions a request (callgrind; the difference of {} and {n} keep-alive requests, \
         divided by {n}; `--fsync never`):\n",
        2 * n
    );
    match (&against, theirs) {
        (Some(other), Some(theirs)) => {
            println!(
                "| request | {} | {} | change |",
                bin.display(),
                other.display()
            );
            println!("|---|---|---|---|");
            for (((name, _), a), b) in requests(port).iter().zip(&ours).zip(&theirs) {
                let change = (*a as f64 - *b as f64) / (*b).max(1) as f64 * 100.0;
                println!("| {name} | {a} | {b} | {change:+.1} % |");
            }
        }
        _ => {
            println!("| request | {} |", bin.display());
            println!("|---|---|");
            for ((name, _), a) in requests(port).iter().zip(&ours) {
                println!("| {name} | {a} |");
            }
        }
    }
    Ok(())
}
