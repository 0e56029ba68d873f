//! Delivery-service benchmark (`tidepool-bench --delivery`): tidepool with `--fsync always`
//! delivering to a local sink (a hyper server in this process), on the same machine.
//!
//! - deliveries/s: N messages published by C concurrent clients; the rate at which the sink
//!   receives them, from the first publish to the last delivery;
//! - publish-to-delivery latency at a moderate rate (p50, p99): from sending the publish to the
//!   sink receiving the delivery;
//! - lateness of delayed messages (`Upstash-Delay: 2s`): delivery time minus (publish send time
//!   + 2 s); an over-estimate by the publish's own latency, never an under-estimate;
//! - memory per pending delayed message: the server's RSS growth over 1,000,000 pending small
//!   messages (published in batches of 100), divided by their number.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-qstash";

use super::targets::{thousands, Kind, Targets};
use super::Proc;
use tidepool::clock::wall_unix_ms as wall_ms;

fn start(bin: &Path, dir: &Path) -> Result<(Proc, String), String> {
    use std::io::BufRead;
    let mut child = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--fsync", "always"])
        .args(["--qstash-token", TOKEN, "--token", TOKEN, "--data"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut r = std::io::BufReader::new(stdout);
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    std::thread::spawn(move || for _ in r.lines() {});
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .ok_or(format!("bad start line {line}"))?
        .to_string();
    Ok((Proc(child), url))
}

/// What the sink saw: every delivery's count and the last one's arrival; for the latency
/// phases' paths (`/l`, `/d`), message id -> (arrival instant, arrival wall ms). The
/// throughput phase's deliveries are only counted, so that the sink's own work per delivery
/// (on the cores the server uses too) stays small.
struct Seen {
    at: Mutex<HashMap<String, (Instant, u64)>>,
    count: AtomicU64,
    /// Nanoseconds from `start` to the last delivery's arrival.
    last_ns: AtomicU64,
    start: Instant,
}

impl Seen {
    fn new() -> Seen {
        Seen {
            at: Mutex::new(HashMap::new()),
            count: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            start: Instant::now(),
        }
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_nanos(self.last_ns.load(Ordering::Relaxed))
    }
}

async fn sink(seen: Arc<Seen>) -> Result<String, String> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let now = (Instant::now(), wall_ms());
                            if let Some(id) = req.headers().get("upstash-message-id") {
                                if matches!(req.uri().path(), "/l" | "/d") {
                                    let id = String::from_utf8_lossy(id.as_bytes()).into_owned();
                                    if let Ok(mut m) = seen.at.lock() {
                                        m.entry(id).or_insert(now);
                                    }
                                }
                                let ns = now.0.duration_since(seen.start).as_nanos() as u64;
                                seen.last_ns.fetch_max(ns, Ordering::Relaxed);
                                seen.count.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok::<_, Infallible>(hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::from_static(b"ok"),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    Ok(format!("http://{addr}"))
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

async fn publish(
    c: &reqwest::Client,
    base: &str,
    dest: &str,
    delay: Option<&str>,
) -> Result<String, String> {
    let mut rb = c
        .post(format!("{base}/v2/publish/{dest}"))
        .bearer_auth(TOKEN)
        .body("x");
    if let Some(d) = delay {
        rb = rb.header("Upstash-Delay", d);
    }
    let r = rb.send().await.map_err(|e| e.to_string())?;
    let b = r.bytes().await.map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_slice(&b).map_err(|e| e.to_string())?;
    v["messageId"]
        .as_str()
        .map(str::to_string)
        .ok_or(format!("publish answered {v}"))
}

/// Sends one prepared publish on a keep-alive connection and reads its answer (status 200
/// and a body that names the message), into `buf`.
async fn publish_on(
    s: &mut tokio::net::TcpStream,
    req: &[u8],
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(req).await.map_err(|e| e.to_string())?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some((status, body)) = super::whole_response(buf)? else {
            continue;
        };
        let body = &buf[body];
        if status != 200 || !body.starts_with(b"{\"messageId\":") {
            return Err(format!(
                "publish answered {status}: {}",
                String::from_utf8_lossy(body)
            ));
        }
        return Ok(());
    }
}

/// GETs of one key for `for_` on one keep-alive connection: p50 and p99 in milliseconds.
fn gets(port: u16, for_: Duration) -> Result<(f64, f64), String> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let set = super::request("POST", "/", TOKEN, r#"["SET","k","v"]"#);
    s.write_all(set.as_bytes()).map_err(|e| e.to_string())?;
    super::read_response(&mut s, &mut buf)?;
    let get = super::request("GET", "/get/k", TOKEN, "");
    let mut lat = Vec::new();
    let end = Instant::now() + for_;
    while Instant::now() < end {
        let t = Instant::now();
        s.write_all(get.as_bytes()).map_err(|e| e.to_string())?;
        let (status, _) = super::read_response(&mut s, &mut buf)?;
        if status != 200 {
            return Err(format!("GET answered {status}"));
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok((pct(&mut lat, 0.50), pct(&mut lat, 0.99)))
}

/// `only`: run only the phases whose names ("throughput", "pending", "get") contain it.
pub fn run(
    bin: &Path,
    tmp: &Path,
    messages: u64,
    conns: u64,
    pending: u64,
    only: Option<&str>,
    targets: &mut Targets,
) -> Result<(), String> {
    let want = |phase: &str| only.is_none_or(|o| phase.contains(o));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let seen = Arc::new(Seen::new());
        let sink_url = sink(seen.clone()).await?;
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(conns as usize)
            .build()
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        if want("throughput latency lateness") {
        let (server, base) = start(bin, &tmp.join("delivery"))?;

        // 1. Throughput.
        let t0 = Instant::now();
        // Each publisher a keep-alive connection of its own that sends a prepared request and
        // reads the answer's id, as wrk would: a general HTTP client's own work per request
        // (URL, header map, JSON) would be taken from the cores the server runs on.
        let next = Arc::new(AtomicU64::new(0));
        let addr = base.trim_start_matches("http://").to_string();
        let req = super::request("POST", &format!("/v2/publish/{sink_url}/t"), TOKEN, "x");
        let mut tasks = Vec::new();
        for _ in 0..conns {
            let (addr, req, next) = (addr.clone(), req.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut s = tokio::net::TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                let mut buf = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < messages {
                    publish_on(&mut s, req.as_bytes(), &mut buf).await?;
                }
                Ok::<(), String>(())
            }));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        let published = t0.elapsed();
        while seen.count.load(Ordering::Relaxed) < messages {
            if t0.elapsed() > Duration::from_secs(300) {
                return Err("deliveries did not finish in 300 s".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let last = seen.last();
        let rate = messages as f64 / last.duration_since(t0).as_secs_f64();
        let pub_rate = messages as f64 / published.as_secs_f64();

        // 2. Latency at a moderate rate (500/s).
        let mut sent: Vec<(String, Instant)> = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..2000u64 {
            let (c, b, d) = (client.clone(), base.clone(), format!("{sink_url}/l"));
            handles.push(tokio::spawn(async move {
                let at = Instant::now();
                publish(&c, &b, &d, None).await.map(|id| (id, at))
            }));
            tokio::time::sleep_until((Instant::now() + Duration::from_micros(2000)).into()).await;
        }
        for h in handles {
            sent.push(h.await.map_err(|e| e.to_string())??);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut lat: Vec<f64> = {
            let m = seen.at.lock().map_err(|_| "lock")?;
            sent.iter()
                .filter_map(|(id, at)| m.get(id).map(|(r, _)| r.duration_since(*at).as_secs_f64() * 1000.0))
                .collect()
        };
        let (l50, l99) = (pct(&mut lat, 0.50), pct(&mut lat, 0.99));

        // 3. Lateness of delayed messages.
        let mut sent: Vec<(String, u64)> = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..2000u64 {
            let (c, b, d) = (client.clone(), base.clone(), format!("{sink_url}/d"));
            handles.push(tokio::spawn(async move {
                let at = wall_ms();
                publish(&c, &b, &d, Some("2s")).await.map(|id| (id, at))
            }));
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        for h in handles {
            sent.push(h.await.map_err(|e| e.to_string())??);
        }
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let mut late: Vec<f64> = {
            let m = seen.at.lock().map_err(|_| "lock")?;
            sent.iter()
                .filter_map(|(id, at)| m.get(id).map(|(_, w)| *w as f64 - (*at + 2000) as f64))
                .collect()
        };
        let delivered_late = late.len();
        let (d50, d99) = (pct(&mut late, 0.50), pct(&mut late, 0.99));
        let dmax = late.last().copied().unwrap_or(f64::NAN);
        drop(server);
        rows.push(format!("| deliveries/s ({messages} messages, {conns} publishers) | {rate:.0} (publish {pub_rate:.0}/s) | >= 20,000 |"));
        targets.at_least(Kind::Hard, &format!("deliveries a second, `--fsync always`, {conns} publishers, {messages} messages"), rate, thousands(rate), 20_000.0);
        targets.at_most(Kind::Hard, "lateness of 2,000 delayed messages due within one second, p99", d99, format!("{d99:.0} ms"), 5.0);
        rows.push(format!("| publish-to-delivery latency at 500 msg/s | p50 {l50:.1} ms, p99 {l99:.1} ms | |"));
        rows.push(format!("| lateness of 2,000 delayed messages, due within one second ({delivered_late} seen) | p50 {d50:.0} ms, p99 {d99:.0} ms, max {dmax:.0} ms | p99 <= 5 ms |"));
        }

        if want("pending memory") {

        // 4. Memory per pending delayed message, on a fresh server.
        let (server, base) = start(bin, &tmp.join("memory"))?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pid = server.0.id();
        let before = super::rss_kib(pid)?;
        let batches = pending / 100;
        let next = Arc::new(AtomicU64::new(0));
        let item = serde_json::json!({"destination": "http://127.0.0.1:9/pending", "headers": {"upstash-delay": "1h"}, "body": "x"});
        let batch_body = serde_json::Value::Array(vec![item; 100]).to_string();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (c, b, body, next) = (client.clone(), base.clone(), batch_body.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < batches {
                    let r = c.post(format!("{b}/v2/batch")).bearer_auth(TOKEN).body(body.clone()).send().await.map_err(|e| e.to_string())?;
                    if !r.status().is_success() {
                        return Err(format!("batch answered {}", r.status()));
                    }
                }
                Ok::<(), String>(())
            }));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = super::rss_kib(pid)?;
        let per_msg = (after.saturating_sub(before) * 1024) as f64 / (batches * 100) as f64;
        drop(server);
        rows.push(format!("| memory per pending delayed message ({} pending) | {per_msg:.0} bytes (RSS {} -> {} MiB) | <= 400 bytes |", batches * 100, before / 1024, after / 1024));
        targets.at_most(Kind::Hard, &format!("memory a pending delayed message takes ({} pending), bytes", thousands((batches * 100) as f64)), per_msg, format!("{per_msg:.0}"), 400.0);
        }

        if want("get latency") {

        // 5. GET latency on an idle server, then while about 10,000 deliveries a second go out.
        let (server, base) = start(bin, &tmp.join("get"))?;
        let port: u16 = base.rsplit(':').next().and_then(|p| p.parse().ok()).ok_or("no port")?;
        let idle = tokio::task::spawn_blocking(move || gets(port, Duration::from_secs(5)))
            .await
            .map_err(|e| e.to_string())??;
        // Deliveries of messages published before, due at 10,000 a second over 7 s: the
        // delivery workers' load alone.
        let count_at = |t: Instant| (t, seen.count.load(Ordering::Relaxed));
        let lead_ms = 8_000u64;
        let t_pub = Instant::now();
        let due = 70_000u64;
        let mut bodies = Vec::new();
        for b in 0..due / 100 {
            let items: Vec<serde_json::Value> = (0..100)
                .map(|i| {
                    let k = b * 100 + i;
                    serde_json::json!({"destination": format!("{sink_url}/w"), "headers": {"upstash-delay": format!("{}ms", lead_ms + k / 10)}, "body": "x"})
                })
                .collect();
            bodies.push(serde_json::Value::Array(items).to_string());
        }
        let queue = Arc::new(Mutex::new(bodies));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (c, b, q) = (client.clone(), base.clone(), queue.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let Some(body) = q.lock().map_err(|_| "lock")?.pop() else {
                        return Ok::<(), String>(());
                    };
                    let r = c.post(format!("{b}/v2/batch")).bearer_auth(TOKEN).body(body).send().await.map_err(|e| e.to_string())?;
                    if !r.status().is_success() {
                        return Err(format!("batch answered {}", r.status()));
                    }
                }
            }));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        if t_pub.elapsed() > Duration::from_millis(lead_ms) {
            return Err("publishing the due messages took longer than their lead".into());
        }
        tokio::time::sleep_until((t_pub + Duration::from_millis(lead_ms + 500)).into()).await;
        let (t0, c0) = count_at(Instant::now());
        let draining = tokio::task::spawn_blocking(move || gets(port, Duration::from_secs(5)))
            .await
            .map_err(|e| e.to_string())??;
        let rate_drain = (seen.count.load(Ordering::Relaxed) - c0) as f64 / t0.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(2)).await;

        // The same while the 10,000 a second are published at the same time.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut pubs = Vec::new();
        // 20 publishers, each one message every 2 ms: 10,000 a second.
        for _ in 0..20 {
            let (c, b, d, stop) = (client.clone(), base.clone(), format!("{sink_url}/g"), stop.clone());
            pubs.push(tokio::spawn(async move {
                let mut at = tokio::time::Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    publish(&c, &b, &d, None).await?;
                    at += Duration::from_millis(2);
                    tokio::time::sleep_until(at).await;
                }
                Ok::<(), String>(())
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (t_load, count_load) = (Instant::now(), seen.count.load(Ordering::Relaxed));
        let loaded = tokio::task::spawn_blocking(move || gets(port, Duration::from_secs(5)))
            .await
            .map_err(|e| e.to_string())??;
        let rate_load = (seen.count.load(Ordering::Relaxed) - count_load) as f64
            / t_load.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for p in pubs {
            p.await.map_err(|e| e.to_string())??;
        }
        drop(server);

        rows.push(format!(
            "| `GET` latency, one keep-alive client: idle / while {rate_drain:.0} deliveries/s of messages published before go out | p50 {:.2} / {:.2} ms, p99 {:.2} / {:.2} ms ({:.2}x) | p99 within 2x of idle |",
            idle.0, draining.0, idle.1, draining.1, draining.1 / idle.1
        ));
        let ratio = draining.1 / idle.1;
        targets.at_most(Kind::Hard, &format!("`GET` p99 while {} deliveries a second go out, against idle", thousands(rate_drain)), ratio, format!("{ratio:.2}x ({:.2} / {:.2} ms)", draining.1, idle.1), 2.0);
        rows.push(format!(
            "| the same while {rate_load:.0} deliveries/s go out and as many are published | p50 {:.2} ms, p99 {:.2} ms ({:.2}x) | |",
            loaded.0, loaded.1, loaded.1 / idle.1
        ));
        }

        println!("| measure | tidepool (`--fsync always`) | target |");
        println!("|---|---|---|");
        for r in rows {
            println!("{r}");
        }
        Ok(())
    })
}
