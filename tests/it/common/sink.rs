//! A local destination server for delivery tests: records every request and answers by path.
//!
//! - `/status/<code>`: that status, body `<code> <reason>` (so `404 Not Found`, as the hosted
//!   test stubs answer); `?retry_after=<s>` adds `Retry-After`.
//! - `/nonretryable`: 489 with `Upstash-NonRetryable-Error: true`.
//! - `/flaky/<n>/...`: the first n requests to that exact path answer 500, then 200.
//! - `/sleep/<ms>/...`: answers 200 after that long.
//! - `/big/<n>`: answers 200 with a body of n bytes.
//! - `/close/...`: 200 with `Connection: close`, then closes the connection.
//! - `/hangup/...`: 200 as if the connection stayed open, then closes it without a word.
//! - anything else: 200 `ok`.
//!
//! `?location=<path>` adds a `Location` header (`self`: the request's own target).

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Lower-case names.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

#[derive(Default)]
struct State {
    got: Vec<Received>,
    flaky: HashMap<String, u32>,
}

pub struct Sink {
    pub base: String,
    state: Arc<Mutex<State>>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl Sink {
    pub fn start() -> Sink {
        Sink::start_on("127.0.0.1")
    }

    /// The same on address `ip` (a host side of test network namespaces, say).
    pub fn start_on(ip: &str) -> Sink {
        let l = TcpListener::bind(format!("{ip}:0")).expect("bind sink");
        let base = format!("http://{}", l.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let st = st.clone();
                std::thread::spawn(move || serve(conn, st));
            }
        });
        Sink {
            base,
            state,
            connections,
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().expect("sink lock").got.clone()
    }

    /// Requests whose path (before `?`) is `path`.
    pub fn at(&self, path: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.target.split('?').next() == Some(path))
            .collect()
    }

    /// Waits until `pred` holds over what was received, or panics after `secs`.
    pub fn wait_for(
        &self,
        secs: u64,
        what: &str,
        pred: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let got = self.received();
            if pred(&got) {
                return got;
            }
            if Instant::now() > deadline {
                panic!(
                    "sink: gave up waiting for {what}; got {} requests: {:?}",
                    got.len(),
                    got.iter()
                        .map(|r| format!("{} {}", r.method, r.target))
                        .collect::<Vec<_>>()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        489 => "Unknown",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn serve(conn: TcpStream, st: Arc<Mutex<State>>) {
    let mut r = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut w = conn;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let path = target.split('?').next().unwrap_or("").to_string();
        let query = target.split_once('?').map(|x| x.1).unwrap_or("");
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let mut extra = String::new();
        let code: u16 = {
            let mut s = st.lock().expect("sink lock");
            s.got.push(Received {
                method: method.clone(),
                target: target.clone(),
                headers,
                body,
                at: Instant::now(),
            });
            match segs.as_slice() {
                ["status", c, ..] => c.parse().unwrap_or(500),
                ["nonretryable", ..] => {
                    extra.push_str("Upstash-NonRetryable-Error: true\r\n");
                    489
                }
                ["flaky", n, ..] => {
                    let n: u32 = n.parse().unwrap_or(1);
                    let seen = s.flaky.entry(path.clone()).or_insert(0);
                    *seen += 1;
                    if *seen <= n {
                        500
                    } else {
                        200
                    }
                }
                ["close", ..] => {
                    extra.push_str("Connection: close\r\n");
                    200
                }
                _ => 200,
            }
        };
        if let ["sleep", ms, ..] = segs.as_slice() {
            std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(10)));
        }
        for kv in query.split('&') {
            if let Some(v) = kv.strip_prefix("retry_after=") {
                extra.push_str(&format!("Retry-After: {v}\r\n"));
            }
            if let Some(v) = kv.strip_prefix("location=") {
                let v = if v == "self" { target.as_str() } else { v };
                extra.push_str(&format!("Location: {v}\r\n"));
            }
        }
        let text = if let ["big", n, ..] = segs.as_slice() {
            "x".repeat(n.parse().unwrap_or(0))
        } else if code == 200 {
            "ok".to_string()
        } else {
            format!("{code} {}", reason(code))
        };
        let resp = format!(
            "HTTP/1.1 {code} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Sink: yes\r\n{extra}\r\n{text}",
            reason(code),
            text.len()
        );
        if w.write_all(resp.as_bytes()).is_err() {
            return;
        }
        if matches!(segs.as_slice(), ["close", ..] | ["hangup", ..]) {
            let _ = w.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}
