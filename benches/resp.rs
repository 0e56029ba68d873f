//! `--resp`: tidepool's RESP listener against redis-server with `redis-benchmark`, in one
//! run, alternating which goes first each round: the five tests without pipelining and with
//! `-P 16` (tidepool `--fsync never` against redis-server without persistence), durable SET
//! (tidepool `--fsync always` against redis-server with `appendfsync always`), and the memory
//! of 10,000 idle authenticated connections.

use super::{free_port, tidepool_with, wait_port, Proc};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const TESTS: &str = "set,get,lpush,lpop,incr";

fn redis(dir: &Path, aof_always: bool) -> Result<(Proc, u16), String> {
    let port = free_port();
    let mut args = vec![
        "--port".to_string(),
        port.to_string(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--save".into(),
        "".into(),
        "--dir".into(),
        dir.display().to_string(),
    ];
    if aof_always {
        args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
    }
    let p = Proc(
        Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e} (apt-get install -y redis-server)"))?,
    );
    wait_port(port)?;
    Ok((p, port))
}

fn tidepool(bin: &Path, dir: &Path, fsync: &str) -> Result<(Proc, u16), String> {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (p, _) = tidepool_with(bin, dir, fsync, &["--resp-listen", &listen])?;
    wait_port(port)?;
    Ok((p, port))
}

/// `redis-benchmark -q` against `port`: requests per second by test.
fn bench(
    port: u16,
    password: Option<&str>,
    tests: &str,
    pipeline: u32,
    n: u64,
) -> Result<BTreeMap<String, f64>, String> {
    let mut c = Command::new("redis-benchmark");
    c.args([
        "-p",
        &port.to_string(),
        "-q",
        "-t",
        tests,
        "-c",
        "50",
        "-n",
        &n.to_string(),
    ]);
    c.args(["-P", &pipeline.to_string()]);
    if let Some(p) = password {
        c.args(["-a", p]);
    }
    let out = c
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut got = BTreeMap::new();
    // Lines end "\r" between progress updates; the last piece of each is the result.
    for piece in text.split(['\n', '\r']) {
        if let Some((name, rest)) = piece.trim().split_once(": ") {
            if let Some(rps) = rest.strip_suffix(" requests per second").or_else(|| {
                rest.split(" requests per second")
                    .next()
                    .filter(|_| rest.contains("requests per second"))
            }) {
                if let Ok(v) = rps.trim().parse::<f64>() {
                    got.insert(name.to_string(), v);
                }
            }
        }
    }
    if got.is_empty() {
        return Err(format!("redis-benchmark printed nothing usable: {text}"));
    }
    Ok(got)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Opens `n` connections to `port` and authenticates each, or as many as the server's
/// connection cap takes (fewer where the descriptor limit is low); the server's resident
/// memory before and after, in KiB, and the connections held.
fn idle_connections(pid: u32, port: u16, n: usize) -> Result<(u64, u64, usize), String> {
    let before = super::rss_kib(pid)?;
    let mut conns = Vec::with_capacity(n);
    let auth = b"*2\r\n$4\r\nAUTH\r\n$5\r\nbench\r\n";
    for _ in 0..n {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        s.write_all(auth).map_err(|e| e.to_string())?;
        let mut ok = [0u8; 5];
        s.read_exact(&mut ok).map_err(|e| e.to_string())?;
        if &ok != b"+OK\r\n" {
            let mut rest = [0u8; 64];
            let got = s.read(&mut rest).unwrap_or(0);
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&ok),
                String::from_utf8_lossy(&rest[..got])
            );
            if said.contains("max number of clients reached") && !conns.is_empty() {
                break;
            }
            return Err(format!("AUTH answered {:?}", said.trim_end()));
        }
        conns.push(s);
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after = super::rss_kib(pid)?;
    let held = conns.len();
    drop(conns);
    Ok((before, after, held))
}

pub fn run(bin: &Path, tmp: &Path, rounds: usize, n: u64) -> Result<(), String> {
    let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut add = |label: String, t: f64, r: f64| match rows.iter_mut().find(|x| x.0 == label) {
        Some(row) => {
            row.1.push(t);
            row.2.push(r);
        }
        None => rows.push((label, vec![t], vec![r])),
    };
    for round in 0..rounds {
        let (tp, tport) = tidepool(bin, &tmp.join(format!("t{round}")), "never")?;
        let (rp, rport) = redis(&tmp.join(format!("r{round}")).tap_dir()?, false)?;
        for pipeline in [1u32, 16] {
            let run_t = || {
                bench(
                    tport,
                    Some("bench"),
                    TESTS,
                    pipeline,
                    n * u64::from(pipeline.min(4)),
                )
            };
            let run_r = || bench(rport, None, TESTS, pipeline, n * u64::from(pipeline.min(4)));
            let (t, r) = if round % 2 == 0 {
                let t = run_t()?;
                (t, run_r()?)
            } else {
                let r = run_r()?;
                (run_t()?, r)
            };
            for (name, tv) in &t {
                let rv = r.get(name).copied().unwrap_or(f64::NAN);
                let label = if pipeline == 1 {
                    name.clone()
                } else {
                    format!("{name} -P {pipeline}")
                };
                add(label, *tv, rv);
            }
        }
        drop((tp, rp));
        let (tp, tport) = tidepool(bin, &tmp.join(format!("td{round}")), "always")?;
        let (rp, rport) = redis(&tmp.join(format!("rd{round}")).tap_dir()?, true)?;
        let (t, r) = if round % 2 == 0 {
            let t = bench(tport, Some("bench"), "set", 1, n)?;
            (t, bench(rport, None, "set", 1, n)?)
        } else {
            let r = bench(rport, None, "set", 1, n)?;
            (bench(tport, Some("bench"), "set", 1, n)?, r)
        };
        add(
            "durable SET (`--fsync always` / `appendfsync always`)".into(),
            t.get("SET").copied().unwrap_or(f64::NAN),
            r.get("SET").copied().unwrap_or(f64::NAN),
        );
        drop((tp, rp));
    }
    println!("`redis-benchmark -q -c 50`, {rounds} rounds alternating, medians (requests/s):");
    println!();
    println!("| test | tidepool | redis-server | ratio | target |");
    println!("|---|---|---|---|---|");
    for (label, t, r) in rows {
        let (t, r) = (median(t), median(r));
        let target = if label.starts_with("durable") {
            ">= 1.0x"
        } else if label.contains("-P") {
            ">= 0.5x"
        } else {
            ">= 0.8x"
        };
        println!("| {label} | {t:.0} | {r:.0} | {:.2}x | {target} |", t / r);
    }
    let (tp, tport) = tidepool(bin, &tmp.join("idle"), "never")?;
    let n = 10_000;
    let (before, after, held) = idle_connections(tp.0.id(), tport, n)?;
    println!();
    println!(
        "{held} idle authenticated RESP connections (of {n}; the server's cap follows the descriptor limit): resident memory {} -> {} MiB, {:.1} KB each (target <= 16 KB)",
        before / 1024,
        after / 1024,
        (after.saturating_sub(before) * 1024) as f64 / held.max(1) as f64 / 1000.0
    );
    drop(tp);
    Ok(())
}

trait TapDir {
    fn tap_dir(self) -> Result<std::path::PathBuf, String>;
}

impl TapDir for std::path::PathBuf {
    /// Creates the directory (redis-server needs its `--dir` to exist).
    fn tap_dir(self) -> Result<std::path::PathBuf, String> {
        std::fs::create_dir_all(&self).map_err(|e| e.to_string())?;
        Ok(self)
    }
}
