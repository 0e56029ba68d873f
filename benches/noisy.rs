//! The noisy neighbour (issue 25): another database's GET latency while three scratch
//! databases run busy scripts (`EVAL "while true do end" 0`, three clients each, without
//! pause), against the same server idle. The single executor runs one job at a time, so a
//! busy script holds every database for its time limit; the scratch limit (50 ms) and the
//! cooling period after a script runs past it bound what three such databases can take.
//!
//!     target/release/tidepool-bench --noisy [--seconds N]

use super::{tidepool_with, Proc};
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ADMIN: &str = "bench-admin";

/// One keep-alive HTTP/1.1 connection with a bearer token.
struct Conn {
    stream: TcpStream,
    token: String,
}

impl Conn {
    fn open(port: u16, token: &str) -> Result<Conn, String> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Conn {
            stream,
            token: token.to_string(),
        })
    }

    /// Sends a request; the status and body.
    fn send(&mut self, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
        let req = super::request(method, path, &self.token, body);
        self.stream
            .write_all(req.as_bytes())
            .map_err(|e| e.to_string())?;
        let (status, body) = super::read_response(&mut self.stream, &mut Vec::new())?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// GETs for `seconds` on one connection: each latency in microseconds, sorted.
fn gets(port: u16, token: &str, seconds: u64) -> Result<Vec<u64>, String> {
    let mut c = Conn::open(port, token)?;
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut out = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        let (status, _) = c.send("GET", "/get/k", "")?;
        if status != 200 {
            return Err(format!("GET answered {status}"));
        }
        out.push(t.elapsed().as_micros() as u64);
    }
    out.sort_unstable();
    Ok(out)
}

fn pct(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1000.0
}

/// Makes a scratch database (`POST /start`); its token.
fn scratch(port: u16) -> Result<String, String> {
    let (status, text) = Conn::open(port, "")?.send("POST", "/start", "")?;
    if status != 201 {
        return Err(format!("POST /start answered {status}: {text}"));
    }
    text.split("UPSTASH_REDIS_REST_TOKEN=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .map(str::to_string)
        .ok_or_else(|| "no token in the quickstart".to_string())
}

/// One noisy neighbour: `dbs` scratch databases, each set up with `setup` (JSON command
/// bodies) and then sent `cmd` by `clients` clients without pause, while the victim's GETs
/// are timed. The GET latencies, and how the noise was answered: (ran, stopped at the time
/// limit, refused while cooling down).
fn noisy(
    port: u16,
    victim: &str,
    seconds: u64,
    dbs: usize,
    clients: usize,
    setup: &[String],
    cmd: &str,
) -> Result<(Vec<u64>, [u64; 3]), String> {
    let mut tokens = Vec::new();
    for _ in 0..dbs {
        let token = scratch(port)?;
        let mut c = Conn::open(port, &token)?;
        for body in setup {
            // Scratch requests may still be refused after the last phase: wait them out.
            loop {
                let (status, text) = c.send("POST", "/", body)?;
                if status == 200 {
                    break;
                }
                if !text.contains("are refused for") {
                    return Err(format!("setup answered {status}: {text}"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        tokens.push(token);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let mut noise = Vec::new();
    for token in &tokens {
        for _ in 0..clients {
            let (stop, counts) = (stop.clone(), counts.clone());
            let mut c = Conn::open(port, token)?;
            let cmd = cmd.to_string();
            noise.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = match c.send("POST", "/", &cmd) {
                        Ok((_, b)) if b.contains("are refused for") => 2,
                        Ok((_, b)) if b.contains("script time limit") => 1,
                        Ok(_) => 0,
                        Err(_) => return,
                    };
                    counts[i].fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    let got = gets(port, victim, seconds)?;
    stop.store(true, Ordering::Relaxed);
    for t in noise {
        let _ = t.join();
    }
    let c = [0, 1, 2].map(|i| counts[i].load(Ordering::Relaxed));
    Ok((got, c))
}

pub fn run(bin: &Path, tmp: &Path, seconds: u64) -> Result<(), String> {
    let (_tp, port): (Proc, u16) = tidepool_with(
        bin,
        &tmp.join("noisy"),
        "never",
        &["--admin-token", ADMIN, "--start-per-hour", "1000"],
    )?;
    let mut admin = Conn::open(port, ADMIN)?;
    let (status, body) = admin.send("POST", "/_admin/databases", r#"{"name":"victim"}"#)?;
    if status != 201 {
        return Err(format!("creating the victim answered {status}: {body}"));
    }
    let doc: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let victim = doc["token"].as_str().ok_or("no token")?.to_string();
    Conn::open(port, &victim)?.send("POST", "/set/k/v", "")?;

    let idle = gets(port, &victim, seconds)?;
    // A list of 1,000,000 items, in pushes of 10,000.
    let list: Vec<String> = (0..100)
        .map(|chunk| {
            let items: Vec<String> = (0..10_000)
                .map(|i| format!("\"i{}\"", chunk * 10_000 + i))
                .collect();
            format!("[\"RPUSH\",\"big\",{}]", items.join(","))
        })
        .collect();
    let scenarios: [(&str, usize, usize, Vec<String>, &str); 3] = [
        (
            "three scratch databases, three clients each, `EVAL \"while true do end\" 0`",
            3,
            3,
            vec![],
            r#"["EVAL","while true do end","0"]"#,
        ),
        (
            "ten scratch databases, one client each, a script of about 40 ms",
            10,
            1,
            vec![],
            r#"["EVAL","for i=1,4000000 do end return 1","0"]"#,
        ),
        (
            "one scratch database, three clients, `SORT big ALPHA LIMIT 0 1` on a list of 1,000,000",
            1,
            3,
            list,
            r#"["SORT","big","ALPHA","LIMIT","0","1"]"#,
        ),
    ];
    println!("| another database's GET | requests | p50 ms | p99 ms | max ms | the noise: ran / stopped at the limit / refused while cooling |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, v: &[u64], c: Option<[u64; 3]>| {
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {} |",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 1.0),
            c.map_or("".to_string(), |c| format!(
                "{} / {} / {}",
                c[0], c[1], c[2]
            ))
        );
    };
    row("idle server", &idle, None);
    for (name, dbs, clients, setup, cmd) in scenarios {
        let (v, c) = noisy(port, &victim, seconds, dbs, clients, &setup, cmd)?;
        row(name, &v, Some(c));
    }
    println!();
    println!("({seconds} s each phase, one GET client on a named database, `--fsync never`)");
    Ok(())
}
