//! Load benchmark: tidepool against webdis in front of redis-server (both from Debian), driven
//! by the same HTTP load generator (wrk) in the same run on the same machine.
//!
//!     cargo build --release && target/release/tidepool-bench [--seconds N] [--connections C]
//!
//!     target/release/tidepool-bench --structures
//!
//!     target/release/tidepool-bench --delivery [--messages N] [--connections C] [--pending P] [--only PHASE]
//!
//!     target/release/tidepool-bench --replay [--commands N] [--singles S]
//!
//!     target/release/tidepool-bench --noisy [--seconds N]
//!
//!     target/release/tidepool-bench --instructions [--requests N] [--against PATH]
//!
//!     target/release/tidepool-bench --against PATH [--rounds R] [--seconds N]
//!
//!     target/release/tidepool-bench --memory [--only NAME]
//!     target/release/tidepool-bench --resp [--rounds N]
//!     target/release/tidepool-bench --cluster [--rounds N] [--seconds N]
//!
//!     target/release/tidepool-bench --snapshots [--writes N] [--keys K] [--min-bytes B]
//!
//! That form writes N SETs over K keys (pipelines of 100) twice, once with snapshots off and
//! once with them on (the automatic trigger, `--log-retention 0`); then it times restarts and
//! measures the directories, times a snapshot's load and the log's replay in this process, and
//! the longest request latency of a steady load with and without a background snapshot.
//!
//!     target/release/tidepool-bench --targets [--rounds R] [--messages N]
//!
//! The `--targets` form runs the load form, `--memory`, `--delivery`, `--replay` and
//! `--snapshots` one after the other, and ends with one table of issue 27's targets (hard ones
//! and goals), each with this run's figure, its bound and whether it holds.
//!
//! The `--replay` form times a start-up's replay of the log: N SETs written in pipelines of 100 (one
//! record each) and S more one request (one record) each, over N/10 keys; then the median of
//! three starts, from spawning the process to its first line (which comes after the replay).
//!
//! The second form times range reads on big structures (LRANGE, ZRANGEBYSCORE, ZRANGE BYSCORE
//! LIMIT) at 10,000 and at 1,000,000 elements: with O(log n + m) structures the two sizes cost
//! about the same.
//!
//! Workloads: GET, SET (tidepool --fsync never vs redis without persistence), durable SET
//! (tidepool --fsync always vs redis with appendfsync always), and POST /pipeline with 100
//! SETs (commands/s). Prints Markdown tables for docs/performance.md.

mod ab;
mod ceiling;
mod cluster;
mod delivery;
mod instructions;
mod memory;
mod noisy;
mod resp;
mod targets;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use targets::{thousands, Kind, Targets};

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A process's resident memory, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> Result<u64, String> {
    status_kib(pid, "VmRSS:")
}

/// A field of `/proc/PID/status` in KiB (`VmRSS:`, `RssAnon:`).
fn status_kib(pid: u32, field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no {field}"))
}

fn wait_port(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on port {port}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn tidepool(bin: &Path, dir: &Path, fsync: &str) -> Result<(Proc, u16), String> {
    tidepool_with(bin, dir, fsync, &[])
}

fn tidepool_with(
    bin: &Path,
    dir: &Path,
    fsync: &str,
    extra: &[&str],
) -> Result<(Proc, u16), String> {
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "bench",
            "--read-only-token",
            "bench-ro",
            "--fsync",
            fsync,
            "--data",
        ])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut r = BufReader::new(stdout);
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    std::thread::spawn(move || for _ in r.lines() {});
    let port = line
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .ok_or(format!("bad start line {line}"))?;
    Ok((Proc(child), port))
}

fn redis_and_webdis(dir: &Path, aof_always: bool) -> Result<(Proc, Proc, u16), String> {
    let rport = free_port();
    let mut args = vec![
        "--port".to_string(),
        rport.to_string(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--save".into(),
        "".into(),
    ];
    if aof_always {
        args.extend([
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            "always".into(),
        ]);
    } else {
        args.extend(["--appendonly".into(), "no".into()]);
    }
    args.extend(["--dir".into(), dir.display().to_string()]);
    let redis = Proc(
        Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?,
    );
    wait_port(rport)?;
    let wport = free_port();
    let conf = dir.join("webdis.json");
    std::fs::write(
        &conf,
        format!(r#"{{"redis_host":"127.0.0.1","redis_port":{rport},"http_host":"127.0.0.1","http_port":{wport},"threads":1,"daemonize":false,"database":0,"verbosity":0,"logfile":"{}/webdis.log"}}"#, dir.display()),
    )
    .map_err(|e| e.to_string())?;
    let webdis = Proc(
        Command::new("webdis")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("webdis: {e}"))?,
    );
    wait_port(wport)?;
    Ok((redis, webdis, wport))
}

#[derive(Default, Clone, Copy)]
struct Result_ {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn parse_ms(s: &str) -> f64 {
    let s = s.trim();
    if let Some(v) = s.strip_suffix("us") {
        v.parse::<f64>().unwrap_or(0.0) / 1000.0
    } else if let Some(v) = s.strip_suffix("ms") {
        v.parse().unwrap_or(0.0)
    } else if let Some(v) = s.strip_suffix('s') {
        v.parse::<f64>().unwrap_or(0.0) * 1000.0
    } else {
        0.0
    }
}

fn wrk(
    url: &str,
    seconds: u64,
    conns: u32,
    script: Option<&Path>,
    token: Option<&str>,
) -> Result<Result_, String> {
    let mut cmd = Command::new("wrk");
    cmd.args([
        "-t1",
        &format!("-c{conns}"),
        &format!("-d{seconds}s"),
        "--latency",
    ]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    if let Some(s) = script {
        cmd.arg("-s").arg(s);
    }
    cmd.arg(url);
    let out = cmd
        .output()
        .map_err(|e| format!("wrk: {e} (apt-get install -y wrk)"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut r = Result_::default();
    for line in text.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Requests/sec:") {
            r.rps = v.trim().parse().unwrap_or(0.0);
        } else if let Some(v) = l.strip_prefix("50%") {
            r.p50_ms = parse_ms(v);
        } else if let Some(v) = l.strip_prefix("99%") {
            r.p99_ms = parse_ms(v);
        }
        if l.starts_with("Non-2xx") {
            return Err(format!("{url}: wrk saw error responses:\n{text}"));
        }
    }
    if r.rps == 0.0 {
        return Err(format!("{url}: no result from wrk:\n{text}"));
    }
    Ok(r)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("tidepool-bench: {e}");
        std::process::exit(1);
    }
}

/// A minimal keep-alive HTTP client for the structure benchmark.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(port: u16) -> Result<Client, String> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    /// POSTs `body` to `path` and returns the response body.
    fn post(&mut self, path: &str, body: &str) -> Result<Vec<u8>, String> {
        let req = request("POST", path, "bench", body);
        self.stream
            .write_all(req.as_bytes())
            .map_err(|e| e.to_string())?;
        Ok(read_response(&mut self.stream, &mut self.buf)?.1)
    }
}

/// The load benchmark's `/pipeline` body: 100 SETs, each of its own key.
fn pipeline_body() -> String {
    format!(
        "[{}]",
        (0..100)
            .map(|i| format!(r#"["SET","p{i}","value-{i}"]"#))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// An HTTP/1.1 request with a body, and a bearer token unless `token` is empty.
fn request(method: &str, path: &str, token: &str, body: &str) -> String {
    let auth = if token.is_empty() {
        String::new()
    } else {
        format!("Authorization: Bearer {token}\r\n")
    };
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads one response (with a Content-Length: tidepool's and the ceiling's all have one) from a
/// keep-alive connection that has no other request in flight; its status and body. `buf` is
/// scratch space, kept between calls.
fn read_response(
    stream: &mut impl std::io::Read,
    buf: &mut Vec<u8>,
) -> Result<(u16, Vec<u8>), String> {
    buf.clear();
    let mut chunk = [0u8; 16384];
    loop {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some((status, body)) = whole_response(buf)? {
            return Ok((status, buf[body].to_vec()));
        }
    }
}

/// The status and the body's place in `buf` once it holds a whole response (with a
/// Content-Length), or None while more is to come.
fn whole_response(buf: &[u8]) -> Result<Option<(u16, std::ops::Range<usize>)>, String> {
    let Some(h) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buf[..h]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or("no content-length")?;
    Ok((buf.len() >= h + 4 + len).then_some((status, h + 4..h + 4 + len)))
}

/// Median microseconds of `runs` calls of one command.
fn time_cmd(c: &mut Client, body: &str, runs: usize) -> Result<f64, String> {
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let r = c.post("/", body)?;
        t.push(start.elapsed().as_secs_f64() * 1e6);
        if r.starts_with(b"{\"error\"") {
            return Err(format!("{body}: {}", String::from_utf8_lossy(&r)));
        }
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

/// Start-up replay: how fast a log of `commands` pipelined SETs and `singles` one-command
/// records is replayed.
fn replay(
    bin: &Path,
    tmp: &Path,
    commands: u64,
    singles: u64,
    targets: &mut Targets,
) -> Result<(), String> {
    let dir = tmp.join("replay");
    let keys = (commands / 10).max(1);
    {
        let (_tp, port) = tidepool(bin, &dir, "never")?;
        let mut c = Client::connect(port)?;
        let mut n = 0;
        while n < commands {
            let body: Vec<String> = (n..(n + 100).min(commands))
                .map(|i| format!(r#"["SET","k{}","value-{i}"]"#, i % keys))
                .collect();
            c.post("/pipeline", &format!("[{}]", body.join(",")))?;
            n += 100;
        }
        for i in 0..singles {
            c.post("/", &format!(r#"["SET","k{}","single-{i}"]"#, i % keys))?;
        }
    }
    let log_bytes: u64 = std::fs::read_dir(dir.join("wal"))
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let (tp, _) = tidepool(bin, &dir, "never")?;
        times.push(start.elapsed().as_secs_f64());
        drop(tp);
    }
    times.sort_by(f64::total_cmp);
    let t = times[1];
    let records = commands.div_ceil(100) + singles;
    let all = commands + singles;
    println!("| log | records | commands | start-up (median of 3) | records/s | commands/s |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {:.1} MB | {records} | {all} | {t:.2} s | {:.0} | {:.0} |",
        log_bytes as f64 / 1e6,
        records as f64 / t,
        all as f64 / t
    );
    println!();
    println!("(the start-up includes spawning the process and opening the listener)");
    let rate = all as f64 / t;
    targets.at_least(
        Kind::Hard,
        &format!(
            "start-up replay, commands a second ({} in {records} records)",
            thousands(all as f64)
        ),
        rate,
        thousands(rate),
        3_000_000.0,
    );
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for sub in ["wal", "snapshots"] {
        if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
            total += entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum::<u64>();
        }
    }
    total
}

/// Writes `writes` SETs over `keys` keys, in pipelines of 100 from 4 connections.
fn fill(port: u16, writes: u64, keys: u64) -> Result<(), String> {
    let per = writes / 4;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || -> Result<(), String> {
                let mut c = Client::connect(port)?;
                let mut n = t * per;
                let end = n + per;
                while n < end {
                    let body: Vec<String> = (n..(n + 100).min(end))
                        .map(|i| format!(r#"["SET","key:{}","value-{i}"]"#, i % keys))
                        .collect();
                    c.post("/pipeline", &format!("[{}]", body.join(",")))?;
                    n += 100;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "a writer panicked")??;
    }
    Ok(())
}

/// Median of three starts: spawn to first line.
fn restart_time(bin: &Path, dir: &Path, extra: &[&str]) -> Result<f64, String> {
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let (tp, _) = tidepool_with(bin, dir, "never", extra)?;
        times.push(start.elapsed().as_secs_f64());
        drop(tp);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[1])
}

/// Request latencies (µs) of a steady load: 8 connections, each SET then GET of random keys,
/// for `ms`; with `bgsave`, a BGSAVE is sent after a quarter of it. Returns (max, p99, p50,
/// requests).
fn steady(port: u16, keys: u64, ms: u64, bgsave: bool) -> Result<(f64, f64, f64, usize), String> {
    let stop = Instant::now() + Duration::from_millis(ms);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            std::thread::spawn(move || -> Result<Vec<f64>, String> {
                let mut c = Client::connect(port)?;
                let mut lat = Vec::new();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                while Instant::now() < stop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = x % keys;
                    let body = if x.is_multiple_of(2) {
                        format!(r#"["SET","key:{k}","v{x}"]"#)
                    } else {
                        format!(r#"["GET","key:{k}"]"#)
                    };
                    let start = Instant::now();
                    c.post("/", &body)?;
                    lat.push(start.elapsed().as_secs_f64() * 1e6);
                }
                Ok(lat)
            })
        })
        .collect();
    if bgsave {
        std::thread::sleep(Duration::from_millis(ms / 4));
        let mut c = Client::connect(port)?;
        let r = c.post("/", r#"["BGSAVE"]"#)?;
        if !String::from_utf8_lossy(&r).contains("started") {
            return Err(format!("BGSAVE: {}", String::from_utf8_lossy(&r)));
        }
    }
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().map_err(|_| "a client panicked")??);
    }
    all.sort_by(f64::total_cmp);
    let at = |q: f64| all[((all.len() as f64 - 1.0) * q) as usize];
    Ok((at(1.0), at(0.99), at(0.5), all.len()))
}

fn snapshots(
    bin: &Path,
    tmp: &Path,
    writes: u64,
    keys: u64,
    min_bytes: u64,
    targets: &mut Targets,
) -> Result<(), String> {
    let off = tmp.join("snap-off");
    let on = tmp.join("snap-on");
    let off_flags = ["--auto-snapshot-percentage", "0"];
    let min = min_bytes.to_string();
    let on_flags = [
        "--log-retention",
        "0",
        "--auto-snapshot-min-bytes",
        min.as_str(),
    ];
    let fill_s = {
        let (_tp, port) = tidepool_with(bin, &off, "never", &off_flags)?;
        let started = Instant::now();
        fill(port, writes, keys)?;
        started.elapsed().as_secs_f64()
    };
    {
        let (_tp, port) = tidepool_with(bin, &on, "never", &on_flags)?;
        fill(port, writes, keys)?;
        // Let a snapshot the trigger started finish before the server stops.
        let mut c = Client::connect(port)?;
        loop {
            let info = c.post("/", r#"["INFO","persistence"]"#)?;
            if String::from_utf8_lossy(&info).contains("rdb_bgsave_in_progress:0") {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let snaps = tidepool::snapshot::list(&tidepool::snapshot::snapshot_dir(&on))
        .map_err(|e| e.to_string())?;
    let newest = snaps.last().ok_or("no snapshot was taken")?;
    let snap_bytes = std::fs::metadata(&newest.path)
        .map_err(|e| e.to_string())?
        .len();
    let t_off = restart_time(bin, &off, &off_flags)?;
    let t_on = restart_time(bin, &on, &on_flags)?;
    let (b_off, b_on) = (dir_bytes(&off), dir_bytes(&on));
    // Issue 27: at most a second per million live keys, whatever the history: what the
    // snapshots (on by default) are for. Without them a restart replays the whole history.
    let per_million = keys as f64 / 1e6;
    targets.at_most(
        Kind::Hard,
        &format!(
            "restart with {} keys after {} SETs (the default snapshot trigger), seconds per million keys",
            thousands(keys as f64),
            thousands(writes as f64)
        ),
        t_on / per_million,
        format!("{:.2} s", t_on / per_million),
        1.0,
    );
    println!(
        "{writes} SETs over {keys} keys (written in {fill_s:.1} s, {} commands a second in pipelines of 100 from 4 connections), --fsync never:\n",
        thousands(writes as f64 / fill_s)
    );
    println!("| snapshots | restart (median of 3) | log + snapshots on disk | snapshot |");
    println!("|---|---|---|---|");
    println!(
        "| off | {t_off:.2} s | {:.0} MB | none |",
        b_off as f64 / 1e6
    );
    println!(
        "| on (`--log-retention 0`) | {t_on:.2} s | {:.0} MB ({:.2}x the snapshot) | {:.0} MB at record #{} |",
        b_on as f64 / 1e6,
        b_on as f64 / snap_bytes as f64,
        snap_bytes as f64 / 1e6,
        newest.seq
    );
    // In this process: a snapshot's load, and the log's replay (no process start, no listener).
    let start = Instant::now();
    let loaded = tidepool::snapshot::read_file(&newest.path, |_| {}).map_err(|d| d.to_string())?;
    let load_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let replayed = tidepool::machine::recover(
        &off,
        tidepool::machine::Recover::read(tidepool::machine::Start::Empty),
    )?;
    let (records, commands) = (replayed.report.records, replayed.changes);
    let replay_s = start.elapsed().as_secs_f64();
    println!();
    println!("| in process | time | rate |");
    println!("|---|---|---|");
    println!(
        "| load the snapshot ({} keys) | {load_s:.2} s | {:.0} keys/s |",
        loaded.keys,
        loaded.keys as f64 / load_s
    );
    println!(
        "| replay the whole log ({records} records, {commands} commands) | {replay_s:.2} s | {:.0} records/s, {:.0} commands/s |",
        records as f64 / replay_s,
        commands as f64 / replay_s
    );
    drop((loaded, replayed));
    // Latency under a steady load, with and without a background snapshot of all the keys.
    let (_tp, port) = tidepool_with(bin, &on, "never", &["--auto-snapshot-percentage", "0"])?;
    let write_start = Instant::now();
    let mut c = Client::connect(port)?;
    c.post("/", r#"["SAVE"]"#)?;
    let save_s = write_start.elapsed().as_secs_f64();
    let quiet = steady(port, keys, 4000, false)?;
    // Memory while the background snapshot runs: the server and its forked child together,
    // each page counted once (proportional set sizes), sampled every 10 ms.
    let pid = _tp.0.id();
    let steady_kib = smaps(pid, "Rss:").unwrap_or(0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let children: u64 = children_of(pid)
                    .into_iter()
                    .filter_map(|c| smaps(c, "Pss:"))
                    .sum();
                peak = peak.max(smaps(pid, "Pss:").unwrap_or(0) + children);
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let during = steady(port, keys, 4000, true)?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak_kib = sampler.join().map_err(|_| "the sampler panicked")?;
    let mut c = Client::connect(port)?;
    let info = String::from_utf8_lossy(&c.post("/", r#"["INFO","persistence"]"#)?).to_string();
    let took = info
        .split("rdb_last_bgsave_time_sec:")
        .nth(1)
        .and_then(|r| r.split('\\').next())
        .unwrap_or("?")
        .to_string();
    println!();
    println!(
        "A steady load (8 connections, SET and GET of random keys among {keys}) for 4 s, without and with a BGSAVE of the whole keyspace a second in (a SAVE in place took {save_s:.2} s; the background one {took} s):"
    );
    println!();
    println!("| load | requests | p50 | p99 | longest |");
    println!("|---|---|---|---|---|");
    for (name, (max, p99, p50, n)) in [("no snapshot", quiet), ("BGSAVE during it", during)] {
        println!(
            "| {name} | {n} | {:.0} µs | {:.0} µs | {:.1} ms |",
            p50,
            p99,
            max / 1000.0
        );
    }
    println!();
    println!(
        "Memory: {:.1} MB resident before the BGSAVE; the server and the child it forked together at their peak while it ran and the writes went on: {:.1} MB ({:.2}x; proportional set sizes, so a page the two share counts once).",
        steady_kib as f64 / 1024.0,
        peak_kib as f64 / 1024.0,
        peak_kib as f64 / steady_kib.max(1) as f64
    );
    let peak = peak_kib as f64 / steady_kib.max(1) as f64;
    targets.at_most(
        Kind::Hard,
        "memory at its peak during a `BGSAVE` under writes (server and child), against before it",
        peak,
        format!("{peak:.2}x"),
        1.5,
    );
    Ok(())
}

/// A field of `/proc/PID/smaps_rollup`, in KiB.
fn smaps(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The processes `pid` forked (of any of its threads).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn structures(bin: &Path, tmp: &Path) -> Result<(), String> {
    let (_tp, port) = tidepool(bin, &tmp.join("structures"), "never")?;
    let mut c = Client::connect(port)?;
    println!("| operation | 10,000 elements | 1,000,000 elements |");
    println!("|---|---|---|");
    let mut rows: Vec<(String, Vec<f64>)> = vec![
        ("LRANGE".into(), Vec::new()),
        ("ZRANGEBYSCORE min max".into(), Vec::new()),
        ("ZRANGE BYSCORE LIMIT 0 100".into(), Vec::new()),
        ("XRANGE start + COUNT 100".into(), Vec::new()),
        ("ZRANGE by index (100 from the middle)".into(), Vec::new()),
        ("ZRANK of the middle member (one reply)".into(), Vec::new()),
        ("ZCOUNT over half the set (one reply)".into(), Vec::new()),
    ];
    for n in [10_000usize, 1_000_000] {
        c.post("/", r#"["FLUSHALL"]"#)?;
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let push: Vec<String> = chunk.iter().map(|i| format!(r#""e{i}""#)).collect();
            c.post("/", &format!(r#"["RPUSH","l",{}]"#, push.join(",")))?;
            let zadd: Vec<String> = chunk.iter().map(|i| format!(r#"{i},"m{i}""#)).collect();
            c.post("/", &format!(r#"["ZADD","z",{}]"#, zadd.join(",")))?;
            let xadd: Vec<String> = chunk
                .iter()
                .map(|i| format!(r#"["XADD","x","{}-0","f","v{i}"]"#, i + 1))
                .collect();
            c.post("/pipeline", &format!("[{}]", xadd.join(",")))?;
        }
        let mid = n / 2;
        rows[0].1.push(time_cmd(
            &mut c,
            &format!(r#"["LRANGE","l",{mid},{}]"#, mid + 99),
            200,
        )?);
        rows[1].1.push(time_cmd(
            &mut c,
            &format!(r#"["ZRANGEBYSCORE","z",{mid},{}]"#, mid + 99),
            200,
        )?);
        rows[2].1.push(time_cmd(
            &mut c,
            &format!(r#"["ZRANGE","z",{mid},"+inf","BYSCORE","LIMIT",0,100]"#),
            200,
        )?);
        rows[3].1.push(time_cmd(
            &mut c,
            &format!(r#"["XRANGE","x","{mid}-0","+","COUNT",100]"#),
            200,
        )?);
        rows[4].1.push(time_cmd(
            &mut c,
            &format!(r#"["ZRANGE","z",{mid},{}]"#, mid + 99),
            200,
        )?);
        rows[5].1.push(time_cmd(
            &mut c,
            &format!(r#"["ZRANK","z","m{mid}"]"#),
            200,
        )?);
        rows[6].1.push(time_cmd(
            &mut c,
            &format!(r#"["ZCOUNT","z",{},{}]"#, n / 4, 3 * n / 4),
            200,
        )?);
    }
    for (name, t) in rows {
        println!("| {name} | {:.0} µs | {:.0} µs |", t[0], t[1]);
    }
    println!();
    println!("(median of 200 requests each, one keep-alive connection, the whole HTTP round trip)");
    Ok(())
}

/// The benchmark's flags: a form (none: the HTTP load against webdis and Redis) and its
/// sizes, each with its default.
#[derive(clap::Parser, Debug)]
#[command(
    name = "tidepool-bench",
    about = "Benchmarks of tidepool against its peers, printed as Markdown tables.",
    after_help = "Build with `cargo build --release` first: it runs target/release/tidepool (and, \
                  for the load form, webdis, redis-server and wrk).",
    disable_version_flag = true
)]
struct Cli {
    /// Print the version
    #[arg(short = 'V', long = "version")]
    version: bool,
    /// Value structures: memory per key against Redis
    #[arg(long, group = "form")]
    structures: bool,
    /// The delivery service: publishes, deliveries and waiting messages
    #[arg(long, group = "form")]
    delivery: bool,
    /// Start-up: the replay of a log
    #[arg(long, group = "form")]
    replay: bool,
    /// Snapshots: restarts, their size, latency during one
    #[arg(long, group = "form")]
    snapshots: bool,
    /// Many tenants: one busy tenant beside quiet ones
    #[arg(long, group = "form")]
    noisy: bool,
    /// Instructions a GET and a SET cost, counted by valgrind's callgrind
    #[arg(long, group = "form")]
    instructions: bool,
    /// What a key costs: resident memory against redis-server, per data set
    #[arg(long, group = "form")]
    memory: bool,
    /// The RESP listener against redis-server with redis-benchmark, and idle connections
    #[arg(long, group = "form")]
    resp: bool,
    /// Issue 27's targets in one run: the load form, --memory, --delivery, --replay and
    /// --snapshots in turn, then one table of every target with its figure and verdict
    #[arg(long, group = "form")]
    targets: bool,
    /// Three cluster nodes against one: durable SET, a follower's GET, the failover time
    #[arg(long, group = "form")]
    cluster: bool,
    /// Serve the bare-hyper ceiling on this port (the load form starts it itself)
    #[arg(long, value_name = "PORT", hide = true)]
    ceiling_server: Option<u16>,
    /// --memory: only the data sets whose name contains this; --delivery: only the phases
    /// (throughput, pending, get) whose name contains this
    #[arg(long, value_name = "NAME")]
    only: Option<String>,
    /// --instructions: keep-alive requests counted (the run of twice as many is subtracted)
    #[arg(long, value_name = "N", default_value_t = 2_000)]
    requests: u64,
    /// Another tidepool binary beside this one, an A/B: its instructions with --instructions;
    /// alone, the load form's workloads against it instead of webdis
    #[arg(long, value_name = "PATH")]
    against: Option<PathBuf>,
    /// Seconds per measurement [default: 5; 10 with --noisy]
    #[arg(long, value_name = "N")]
    seconds: Option<u64>,
    /// Concurrent connections [default: 50; 64 with --delivery]
    #[arg(long, value_name = "C")]
    connections: Option<u64>,
    /// Rounds, alternating the peers; the median is reported
    #[arg(long, value_name = "R", default_value_t = 3)]
    rounds: u64,
    /// --delivery: messages published [default: 30,000; 100,000 with --targets]
    #[arg(long, value_name = "N")]
    messages: Option<u64>,
    /// --delivery: waiting messages
    #[arg(long, value_name = "P", default_value_t = 1_000_000)]
    pending: u64,
    /// --replay: commands in pipelines of 100
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    commands: u64,
    /// --replay: one-command requests after them
    #[arg(long, value_name = "S", default_value_t = 100_000)]
    singles: u64,
    /// --snapshots: SETs written
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    writes: u64,
    /// --snapshots: keys they spread over
    #[arg(long, value_name = "K", default_value_t = 1_000_000)]
    keys: u64,
    /// --snapshots: --auto-snapshot-min-bytes of the server
    #[arg(long, value_name = "B", default_value_t = 64 << 20)]
    min_bytes: u64,
}

fn run() -> Result<(), String> {
    use clap::Parser;
    // Answered at once, with nothing started.
    let cli = Cli::parse();
    if cli.version {
        println!("tidepool-bench {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    if let Some(port) = cli.ceiling_server {
        return ceiling::serve(port);
    }
    let seconds = cli.seconds.unwrap_or(if cli.noisy { 10 } else { 5 });
    let conns = cli
        .connections
        .unwrap_or(if cli.delivery { 64 } else { 50 }) as u32;
    let rounds = cli.rounds.max(1) as usize;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin: PathBuf = exe.with_file_name("tidepool");
    let tmp = std::env::temp_dir().join(format!("tidepool-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let script = |name: &str, body: &str| -> Result<PathBuf, String> {
        let p = tmp.join(name);
        let mut f = std::fs::File::create(&p).map_err(|e| e.to_string())?;
        write!(f, "wrk.method = \"POST\"\nwrk.body = '{body}'\n").map_err(|e| e.to_string())?;
        Ok(p)
    };
    if cli.delivery {
        let r = delivery::run(
            &bin,
            &tmp,
            cli.messages.unwrap_or(30_000),
            conns as u64,
            cli.pending,
            cli.only.as_deref(),
            &mut Targets::default(),
        );
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.snapshots {
        let r = snapshots(
            &bin,
            &tmp,
            cli.writes,
            cli.keys,
            cli.min_bytes,
            &mut Targets::default(),
        );
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.replay {
        let r = replay(
            &bin,
            &tmp,
            cli.commands,
            cli.singles,
            &mut Targets::default(),
        );
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.cluster {
        let r = cluster::run(&bin, &tmp, rounds.max(3), seconds, conns);
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.resp {
        let r = resp::run(&bin, &tmp, rounds, cli.requests.max(100) * 50);
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.memory {
        let r = memory::run(&bin, &tmp, cli.only.as_deref(), &mut Targets::default());
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.instructions {
        let r = instructions::run(&bin, &tmp, cli.requests, cli.against.clone());
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.noisy {
        let r = noisy::run(&bin, &tmp, seconds);
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    if cli.structures {
        let r = structures(&bin, &tmp);
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    let pipe_script = script("pipeline.lua", &pipeline_body())?;
    if let Some(other) = &cli.against {
        let r = ab::run(&bin, other, &tmp, &pipe_script, rounds, seconds, conns);
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }

    // The load form; with --targets, the first of the forms that measure issue 27's targets.
    let mut targets = Targets::default();
    if cli.targets {
        println!("## Requests\n");
    }
    let r = load(
        &bin,
        &exe,
        &tmp,
        &pipe_script,
        rounds,
        seconds,
        conns,
        &mut targets,
    );
    if !cli.targets || r.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        return r;
    }
    let r = (|| {
        println!("\n## Memory\n");
        memory::run(&bin, &tmp, None, &mut targets)?;
        println!("\n## Delivery\n");
        let messages = cli.messages.unwrap_or(100_000);
        delivery::run(&bin, &tmp, messages, 64, cli.pending, None, &mut targets)?;
        println!("\n## Start-up replay\n");
        replay(&bin, &tmp, cli.commands, cli.singles, &mut targets)?;
        println!("\n## Restarts and snapshots\n");
        let (writes, keys, min) = (cli.writes, cli.keys, cli.min_bytes);
        snapshots(&bin, &tmp, writes, keys, min, &mut targets)?;
        println!("\n## Issue 27's targets in this run\n");
        targets.print();
        println!();
        println!("hard targets missed in this run: {}", targets.missed());
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    r
}

/// The load form: GET, SET, durable SET and `/pipeline` against webdis + redis-server and the
/// bare-hyper ceiling, each alternating with its peer for `rounds` rounds.
#[allow(clippy::too_many_arguments)]
fn load(
    bin: &Path,
    exe: &Path,
    tmp: &Path,
    pipe_script: &Path,
    rounds: usize,
    seconds: u64,
    conns: u32,
    targets: &mut Targets,
) -> Result<(), String> {
    // The ceiling: bare hyper answering a constant, in a process of its own.
    let cport = free_port();
    let _ceiling = Proc(
        Command::new(exe)
            .args(["--ceiling-server", &cport.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("the ceiling server: {e}"))?,
    );
    wait_port(cport)?;
    let c = format!("http://127.0.0.1:{cport}");

    // Not durable: tidepool --fsync never against redis without persistence.
    let (tp, tport) = tidepool(bin, &tmp.join("tp-never"), "never")?;
    let (_r, _w, wport) = redis_and_webdis(&tmp.join("redis-plain").tap_mkdir()?, false)?;
    let t = format!("http://127.0.0.1:{tport}");
    let w = format!("http://127.0.0.1:{wport}");
    let bench = Some("bench");
    wrk(&format!("{t}/set/key/value"), 1, conns, None, bench)?; // warm up
    wrk(&format!("{w}/SET/key/value"), 1, conns, None, None)?;
    // Each workload alternates tidepool and webdis for `rounds` rounds; the median round (by
    // requests/s) is reported, so one noisy interval does not decide the ratio.
    let get = paired(
        rounds,
        || wrk(&format!("{t}/get/key"), seconds, conns, None, bench),
        || wrk(&format!("{w}/GET/key"), seconds, conns, None, None),
    )?;
    let set = paired(
        rounds,
        || wrk(&format!("{t}/set/key/value"), seconds, conns, None, bench),
        || wrk(&format!("{w}/SET/key/value"), seconds, conns, None, None),
    )?;
    let (get_t, get_w) = get;
    let (set_t, set_w) = set;
    // The ceiling, alternating with tidepool's GET and SET again.
    let (get_t2, get_c) = paired(
        rounds,
        || wrk(&format!("{t}/get/key"), seconds, conns, None, bench),
        || wrk(&format!("{c}/get/key"), seconds, conns, None, None),
    )?;
    let (set_t2, set_c) = paired(
        rounds,
        || wrk(&format!("{t}/set/key/value"), seconds, conns, None, bench),
        || wrk(&format!("{c}/set/key/value"), seconds, conns, None, None),
    )?;
    let pipe_t = median(
        (0..rounds)
            .map(|_| {
                wrk(
                    &format!("{t}/pipeline"),
                    seconds,
                    conns,
                    Some(pipe_script),
                    bench,
                )
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    drop(tp);

    // Durable: tidepool --fsync always, first against redis without persistence (the target),
    // then against redis appendfsync always. The first pairing runs before the AOF server
    // starts: the host's disk stays slow for seconds after a round of Redis's fsyncs, and that
    // would be charged to whichever durable round follows it.
    let (tp, tport) = tidepool(bin, &tmp.join("tp-always"), "always")?;
    let t = format!("http://127.0.0.1:{tport}");
    let durable = || wrk(&format!("{t}/set/key/value"), seconds, conns, None, bench);
    let (dvp_t, dvp_w) = paired(rounds, durable, || {
        wrk(&format!("{w}/SET/key/value"), seconds, conns, None, None)
    })?;
    let (_r2, _w2, wport2) = redis_and_webdis(&tmp.join("redis-aof").tap_mkdir()?, true)?;
    let w2 = format!("http://127.0.0.1:{wport2}");
    let (dset_t, dset_w) = paired(rounds, durable, || {
        wrk(&format!("{w2}/SET/key/value"), seconds, conns, None, None)
    })?;
    drop(tp);

    println!(
        "| workload | tidepool req/s | p50 / p99 ms | webdis+redis req/s | p50 / p99 ms | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, a: Result_, b: Option<Result_>| {
        let (bs, bl, ratio) = match b {
            Some(b) => (
                format!("{:.0}", b.rps),
                format!("{:.2} / {:.2}", b.p50_ms, b.p99_ms),
                format!("{:.2}x", a.rps / b.rps),
            ),
            None => ("—".into(), "—".into(), "—".into()),
        };
        println!(
            "| {name} | {:.0} | {:.2} / {:.2} | {bs} | {bl} | {ratio} |",
            a.rps, a.p50_ms, a.p99_ms
        );
    };
    row("GET", get_t, Some(get_w));
    row("SET", set_t, Some(set_w));
    row(
        "durable SET (tidepool fsync always vs redis appendfsync always)",
        dset_t,
        Some(dset_w),
    );
    row(
        "durable SET vs webdis+redis non-durable SET (own rounds)",
        dvp_t,
        Some(dvp_w),
    );
    row("/pipeline of 100 SETs (requests/s)", pipe_t, None);
    println!();
    println!("| against the ceiling (bare hyper answering a constant) | tidepool req/s | ceiling req/s | ratio |");
    println!("|---|---|---|---|");
    for (name, a, b) in [("GET", get_t2, get_c), ("SET", set_t2, set_c)] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}x |",
            a.rps,
            b.rps,
            a.rps / b.rps.max(1.0)
        );
    }
    println!();
    println!("/pipeline: {:.0} commands/s", pipe_t.rps * 100.0);
    for (name, a, b) in [("GET", get_t2, get_c), ("SET", set_t2, set_c)] {
        let r = a.rps / b.rps.max(1.0);
        let what = format!("`{name}` against the ceiling (bare hyper), {conns} connections");
        let figure = format!(
            "{r:.2}x ({} / {} req/s)",
            thousands(a.rps),
            thousands(b.rps)
        );
        targets.at_least(Kind::Hard, &what, r, figure.clone(), 0.75);
        targets.at_least(Kind::Goal, &what, r, figure, 0.9);
    }
    let r = dvp_t.rps / dvp_w.rps.max(1.0);
    targets.at_least(
        Kind::Goal,
        "durable `SET` against webdis + redis's non-durable `SET`",
        r,
        format!("{r:.2}x"),
        1.5,
    );
    let cmds = pipe_t.rps * 100.0;
    targets.at_least(
        Kind::Goal,
        "`/pipeline` of 100 SETs, commands a second",
        cmds,
        thousands(cmds),
        2_000_000.0,
    );
    println!(
        "(wrk -t1 -c{conns} -d{seconds}s, keep-alive, median of {rounds} alternating rounds; {} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    Ok(())
}

fn median(mut v: Vec<Result_>) -> Result_ {
    v.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    v[v.len() / 2]
}

/// Runs `a` and `b` alternately, `rounds` times each; the median of each.
fn paired(
    rounds: usize,
    a: impl Fn() -> Result<Result_, String>,
    b: impl Fn() -> Result<Result_, String>,
) -> Result<(Result_, Result_), String> {
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        ra.push(a()?);
        rb.push(b()?);
    }
    Ok((median(ra), median(rb)))
}

trait MkDir {
    fn tap_mkdir(self) -> Result<PathBuf, String>;
}
impl MkDir for PathBuf {
    fn tap_mkdir(self) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self).map_err(|e| e.to_string())?;
        Ok(self)
    }
}
