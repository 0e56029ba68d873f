//! Test support: the real binary on port 0 in a temporary directory, a minimal keep-alive
//! HTTP/1.1 client, a RESP client for `redis-server`, and a canonical reply form both can be
//! compared in.
#![allow(dead_code)]

use base64::Engine;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!(
            "tidepool-test-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const TOKEN: &str = "test-token";
pub const RO_TOKEN: &str = "test-read-only-token";
/// The public dev-server credentials of user 1 (qstash-compat.md section 17).
pub const QSTASH_TOKEN: &str =
    "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=";
/// The delivery service's flags with the test credentials.
pub const QSTASH_FLAGS: [&str; 6] = [
    "--qstash-token",
    QSTASH_TOKEN,
    "--qstash-current-signing-key",
    QSTASH_CURRENT,
    "--qstash-next-signing-key",
    QSTASH_NEXT,
];

pub const QSTASH_CURRENT: &str = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r";
pub const QSTASH_NEXT: &str = "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs";

pub mod sink;

/// A running `tidepool serve`.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// The RESP listener's address (every test server has one).
    pub resp_addr: Option<String>,
    pub stderr_path: PathBuf,
    /// The data directory (its `credentials.json` holds a generated admin token).
    pub data: PathBuf,
}

impl Server {
    /// Moves the server's clock `ms` forward (a test build's debug route): expiry and delays
    /// happen without waiting for real time. Needs the admin token the server generated.
    pub fn advance_clock(&self, ms: u64) {
        let creds: serde_json::Value = serde_json::from_slice(
            &std::fs::read(self.data.join("credentials.json")).expect("credentials.json"),
        )
        .expect("json");
        let token = creds["admin_token"]
            .as_str()
            .expect("a generated admin token");
        let r = Http::connect(&self.addr, token).post(&format!("/_admin/debug/clock/{ms}"), b"");
        assert_eq!(r.status, 200, "{}", r.text());
    }

    /// Starts the binary on 127.0.0.1:0 with `data` and the test tokens.
    pub fn start(data: &Path, extra: &[&str]) -> Server {
        Self::try_start(data, extra).unwrap_or_else(|e| panic!("tidepool did not start: {e}"))
    }

    pub fn try_start(data: &Path, extra: &[&str]) -> Result<Server, String> {
        Self::try_start_env(data, extra, &[])
    }

    /// Starts with the delivery test credentials and a millisecond retry backoff.
    pub fn start_delivery(data: &Path) -> Server {
        Self::start_delivery_with(data, &[])
    }

    /// The same, with more flags.
    pub fn start_delivery_with(data: &Path, extra: &[&str]) -> Server {
        let mut args = QSTASH_FLAGS.to_vec();
        args.extend_from_slice(extra);
        Self::try_start_env(data, &args, &[("TIDEPOOL_RETRY_BACKOFF_UNIT_MS", "1")])
            .unwrap_or_else(|e| panic!("tidepool did not start: {e}"))
    }

    /// A client that authenticates with the delivery token.
    pub fn qstash(&self) -> Http {
        Http::connect(&self.addr, QSTASH_TOKEN)
    }

    pub fn try_start_env(
        data: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        Self::try_start_under(&[], data, extra, env)
    }

    /// Starts the binary through `wrapper` (a program and its arguments that runs the rest
    /// of its command line, such as `prlimit --nofile=128:128 --`), or directly when empty.
    pub fn try_start_under(
        wrapper: &[&str],
        data: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let stderr_path = data.with_extension("stderr");
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_tidepool"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_tidepool")),
        };
        let mut child = cmd
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token",
                TOKEN,
                "--read-only-token",
                RO_TOKEN,
                "--resp-listen",
                "127.0.0.1:0",
                "--data",
            ])
            .arg(data)
            .args(extra)
            // Usage counts are logged once an hour here, not once a second, so a test's
            // record numbers never depend on how long it ran; a test that needs them sooner
            // sets the variable itself.
            .env("TIDEPOOL_USAGE_LOG_INTERVAL_MS", "3600000")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next();
        let line = match first {
            Some(Ok(l)) => l,
            _ => {
                let _ = child.wait();
                let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                return Err(format!("no start line; stderr: {err}"));
            }
        };
        let addr = line
            .split("http://")
            .nth(1)
            .ok_or_else(|| format!("unexpected start line {line}"))?
            .trim()
            .to_string();
        // The RESP line follows, when the listener is on.
        let mut resp_addr = None;
        if let Some(Ok(l)) = lines.next() {
            if let Some(rest) = l.trim().strip_prefix("RESP (Redis protocol) on ") {
                let a = rest.split(':').take(2).collect::<Vec<_>>().join(":");
                resp_addr = Some(a.clone());
                if let Ok(mut m) = resp_addresses().lock() {
                    m.insert(addr.clone(), a);
                }
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Server {
            child,
            addr,
            resp_addr,
            stderr_path,
            data: data.to_path_buf(),
        })
    }

    pub fn client(&self) -> Http {
        Http::connect(&self.addr, TOKEN)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGKILL, no chance to flush anything.
    /// The process has not exited (it may have replaced itself with `exec`, which keeps it).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait; returns the exit status code.
    /// (None: it ended by a signal, or did not stop within 20 s; which, and its stderr, are
    /// printed for the failing test's output.)
    pub fn terminate(mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        unsafe_free_kill(self.child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                if let Some(sig) = st.signal() {
                    eprintln!(
                        "tidepool ended by signal {sig}; its stderr:\n{}",
                        self.stderr()
                    );
                }
                return st.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                eprintln!(
                    "tidepool did not stop within 20 s of SIGTERM; its stderr:\n{}",
                    self.stderr()
                );
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn unsafe_free_kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The ACL user `name` with `rules` (its password `pw`) on redis-server, and on tidepool
/// unless `tidepool_token` is given (the Read Only token stands for a user tidepool does not
/// create): a redis-server connection authenticated as the user, and a tidepool client with
/// the user's REST token (or `tidepool_token`).
pub fn user_on_both(
    server: &Server,
    redis_port: u16,
    name: &str,
    rules: &[&str],
    tidepool_token: Option<&str>,
) -> (Http, Redis) {
    let mut setuser = vec!["ACL", "SETUSER", name];
    setuser.extend_from_slice(rules);
    assert_eq!(
        Redis::connect(redis_port).cmd_str(&setuser),
        Canon::s("OK"),
        "{name} on redis-server"
    );
    let http = match tidepool_token {
        Some(t) => Http::connect(&server.addr, t),
        None => {
            let mut admin = server.client();
            assert_eq!(
                admin.cmd_str(&setuser),
                Canon::s("OK"),
                "{name} on tidepool"
            );
            let Canon::Str(t) = admin.cmd_str(&["ACL", "RESTTOKEN", name, "pw"]) else {
                panic!("ACL RESTTOKEN {name}")
            };
            Http::connect(&server.addr, &String::from_utf8_lossy(&t))
        }
    };
    let mut redis = Redis::connect(redis_port);
    assert_eq!(
        redis.cmd_str(&["AUTH", name, "pw"]),
        Canon::s("OK"),
        "AUTH {name}"
    );
    (http, redis)
}

/// Runs `tidepool-log` with `args`: its exit code and its stdout and stderr together.
pub fn log_tool(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tidepool-log"))
        .args(args)
        .output()
        .expect("run tidepool-log");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A keep-alive HTTP/1.1 client that speaks just enough of the protocol for these tests.
pub struct Http {
    addr: String,
    pub token: String,
    reader: BufReader<TcpStream>,
    /// The RESP door's connection, opened (and authenticated with `token`) at first use.
    resp: Option<Redis>,
}

/// Each test server's RESP address, by its HTTP address: any client of a server can take
/// the RESP door.
pub fn resp_addresses() -> &'static std::sync::Mutex<std::collections::HashMap<String, String>> {
    static M: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, String>>> =
        std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}

impl Http {
    pub fn connect(addr: &str, token: &str) -> Http {
        Http::try_connect(addr, token).expect("connect")
    }

    /// A connection, or None while nothing listens at `addr` (a server starting over).
    pub fn try_connect(addr: &str, token: &str) -> Option<Http> {
        let s = TcpStream::connect(addr).ok()?;
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(Duration::from_secs(60))).ok();
        Some(Http {
            addr: addr.to_string(),
            token: token.to_string(),
            reader: BufReader::new(s),
            resp: None,
        })
    }

    /// Sends `args` over the server's RESP listener, authenticated with this client's token;
    /// None when the server has no RESP listener.
    pub fn resp_cmd(&mut self, args: &[Vec<u8>]) -> Option<Canon> {
        if self.resp.is_none() {
            let addr = resp_addresses().lock().ok()?.get(&self.addr)?.clone();
            let mut r = Redis::connect_addr(&addr);
            let auth = r.cmd(&[b"AUTH".to_vec(), self.token.as_bytes().to_vec()]);
            if auth != Canon::Str(b"OK".to_vec()) {
                // A refused credential answers as REST answers it.
                return Some(Canon::Err("WRONGPASS invalid or missing auth token".into()));
            }
            self.resp = Some(r);
        }
        let r = self.resp.as_mut()?;
        Some(r.cmd(args))
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Resp {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if !self.token.is_empty()
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            req.push_str(&format!("Authorization: Bearer {}\r\n", self.token));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        // A keep-alive connection the server closed while idle (its idle timeout) is opened
        // again and the request sent once more, as HTTP clients do.
        let sent = self.reader.get_mut().write_all(&bytes).is_ok();
        if !sent || self.reader.fill_buf().map(|b| b.is_empty()).unwrap_or(true) {
            *self = Http::connect(&self.addr, &self.token);
            self.reader
                .get_mut()
                .write_all(&bytes)
                .expect("write request");
        }
        read_response(&mut self.reader, method == "HEAD")
    }

    pub fn post(&mut self, path: &str, body: &[u8]) -> Resp {
        self.request("POST", path, &[], body)
    }

    pub fn get(&mut self, path: &str) -> Resp {
        self.request("GET", path, &[], b"")
    }

    /// POSTs a JSON command with base64 mode on and returns the decoded canonical reply.
    pub fn cmd(&mut self, args: &[Vec<u8>]) -> Canon {
        let body = json_array(args);
        let r = self.request(
            "POST",
            "/",
            &[("Upstash-Encoding", "base64")],
            body.as_bytes(),
        );
        envelope_to_canon(&r.json())
    }

    pub fn cmd_str(&mut self, args: &[&str]) -> Canon {
        self.cmd(
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
    }

    /// A pipeline, decoded entry by entry.
    pub fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> Vec<Canon> {
        self.batch("/pipeline", cmds)
    }

    /// A transaction (`/multi-exec`) that runs, decoded entry by entry.
    pub fn multi_exec(&mut self, cmds: &[Vec<Vec<u8>>]) -> Vec<Canon> {
        self.batch("/multi-exec", cmds)
    }

    fn batch(&mut self, path: &str, cmds: &[Vec<Vec<u8>>]) -> Vec<Canon> {
        let body = format!(
            "[{}]",
            cmds.iter()
                .map(|c| json_array(c))
                .collect::<Vec<_>>()
                .join(",")
        );
        let r = self.request(
            "POST",
            path,
            &[("Upstash-Encoding", "base64")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{path} status: {}", r.text());
        r.json()
            .as_array()
            .expect("array")
            .iter()
            .map(envelope_to_canon)
            .collect()
    }
}

fn read_response(r: &mut BufReader<TcpStream>, head: bool) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).expect("header");
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if !head {
        if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(len, 0);
            r.read_exact(&mut body).expect("body");
        } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut sz = String::new();
                r.read_line(&mut sz).expect("chunk size");
                let n = usize::from_str_radix(sz.trim(), 16).expect("chunk size hex");
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk).expect("chunk");
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
    }
    Resp {
        status,
        headers,
        body,
    }
}

/// A JSON array of strings (binary-safe only for UTF-8 arguments; others go through \u escapes
/// of their lossy form, so generators keep arguments UTF-8).
pub fn json_array(args: &[Vec<u8>]) -> String {
    let items: Vec<String> = args
        .iter()
        .map(|a| serde_json::to_string(&String::from_utf8_lossy(a)).unwrap_or_default())
        .collect();
    format!("[{}]", items.join(","))
}

/// The ways a command can reach the server over REST. Every door must give the same reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// `POST /` with a JSON array, base64 replies.
    JsonBody,
    /// `POST /` with a JSON array, plain (UTF-8) replies.
    JsonBodyPlain,
    /// `GET /cmd/arg/arg`, each argument percent-encoded.
    Path,
    /// The command name in the path, the other arguments as query parameters.
    PathQuery,
    /// `POST /cmd/arg` with the last argument as the raw body.
    BodyLast,
    /// `POST /pipeline` holding just this command.
    Pipeline,
    /// `POST /multi-exec` holding just this command.
    MultiExec,
    /// The RESP listener, as redis-cli and every Redis client send it.
    Resp,
}

pub const DOORS: &[Door] = &[
    Door::JsonBody,
    Door::JsonBodyPlain,
    Door::Path,
    Door::PathQuery,
    Door::BodyLast,
    Door::Pipeline,
    Door::MultiExec,
    Door::Resp,
];

/// Percent-encodes everything but unreserved characters (so `/`, `?`, `&`, `+`, `%` and
/// non-UTF-8 bytes all survive the trip).
pub fn percent_encode(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for &c in b {
        if c.is_ascii_alphanumeric() || b"-_.~".contains(&c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

impl Http {
    /// Sends `args` through `door` and returns the canonical reply. A door that cannot carry
    /// these arguments (an empty last argument as a body, a non-UTF-8 argument in a JSON
    /// string) falls back to the JSON body.
    pub fn cmd_via(&mut self, door: Door, args: &[Vec<u8>]) -> Canon {
        let utf8 = args.iter().all(|a| std::str::from_utf8(a).is_ok());
        let b64 = [("Upstash-Encoding", "base64")];
        match door {
            Door::JsonBody => self.cmd(args),
            Door::JsonBodyPlain if utf8 => {
                let r = self.request("POST", "/", &[], json_array(args).as_bytes());
                plain_envelope_to_canon(&r.json())
            }
            Door::Path if !args.is_empty() => {
                let path: Vec<String> = args.iter().map(|a| percent_encode(a)).collect();
                let r = self.request("GET", &format!("/{}", path.join("/")), &b64, b"");
                envelope_to_canon(&r.json())
            }
            // An empty query parameter is no argument at all: such commands use the body.
            Door::PathQuery if !args.is_empty() && args[1..].iter().all(|a| !a.is_empty()) => {
                // A query parameter without `=` is one argument.
                let q: Vec<String> = args[1..].iter().map(|a| percent_encode(a)).collect();
                let path = if q.is_empty() {
                    format!("/{}", percent_encode(&args[0]))
                } else {
                    format!("/{}?{}", percent_encode(&args[0]), q.join("&"))
                };
                let r = self.request("GET", &path, &b64, b"");
                envelope_to_canon(&r.json())
            }
            Door::BodyLast if args.len() > 1 && !args[args.len() - 1].is_empty() => {
                let (last, rest) = args.split_last().unwrap_or((&args[0], &[]));
                let path: Vec<String> = rest.iter().map(|a| percent_encode(a)).collect();
                let r = self.request("POST", &format!("/{}", path.join("/")), &b64, last);
                envelope_to_canon(&r.json())
            }
            Door::Pipeline => self
                .pipeline(&[args.to_vec()])
                .pop()
                .unwrap_or(Canon::Err("empty pipeline reply".into())),
            Door::MultiExec => {
                let body = format!("[{}]", json_array(args));
                let r = self.request("POST", "/multi-exec", &b64, body.as_bytes());
                let v = r.json();
                match v.as_array() {
                    Some(items) if items.len() == 1 => envelope_to_canon(&items[0]),
                    // A command refused before the transaction ran discards it: the error
                    // is Redis's, behind EXECABORT's words.
                    _ => match envelope_to_canon(&v) {
                        Canon::Err(e) => Canon::Err(
                            e.strip_prefix("EXECABORT Transaction discarded because of: ")
                                .unwrap_or(&e)
                                .to_string(),
                        ),
                        other => other,
                    },
                }
            }
            Door::Resp => match self.resp_cmd(args) {
                Some(c) => c,
                None => self.cmd(args),
            },
            _ => self.cmd(args),
        }
    }
}

fn plain(v: &serde_json::Value) -> Canon {
    match v {
        serde_json::Value::Null => Canon::Nil,
        serde_json::Value::Number(n) => Canon::Int(
            n.as_i64()
                .unwrap_or_else(|| panic!("non-integer number {n} in a result")),
        ),
        serde_json::Value::String(s) => Canon::Str(s.as_bytes().to_vec()),
        serde_json::Value::Array(a) => Canon::Arr(a.iter().map(plain).collect()),
        other => panic!("a result must never hold {other}"),
    }
}

/// `{"result": ...}` (plain mode) or `{"error": "..."}` to canonical form.
pub fn plain_envelope_to_canon(v: &serde_json::Value) -> Canon {
    if let Some(e) = v.get("error") {
        return Canon::Err(e.as_str().expect("error is a string").to_string());
    }
    plain(
        v.get("result")
            .unwrap_or_else(|| panic!("no result key: {v}")),
    )
}

/// Whether every string in a reply is UTF-8 (so plain mode carries it unchanged).
pub fn all_utf8(c: &Canon) -> bool {
    match c {
        Canon::Str(b) => std::str::from_utf8(b).is_ok(),
        Canon::Arr(items) => items.iter().all(all_utf8),
        _ => true,
    }
}

/// A reply in a form both servers' answers convert to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Canon {
    Str(Vec<u8>),
    Int(i64),
    Nil,
    Arr(Vec<Canon>),
    Err(String),
}

impl Canon {
    /// The reply with every array's items sorted, at every depth: for replies whose order is
    /// a table's own (SMEMBERS, HGETALL, SCAN, ...), which two tables of the same contents
    /// need not share (see `state::table`).
    pub fn unordered(self) -> Canon {
        match self {
            Canon::Arr(items) => {
                let mut items: Vec<Canon> = items.into_iter().map(Canon::unordered).collect();
                items.sort();
                Canon::Arr(items)
            }
            other => other,
        }
    }

    pub fn s(v: &str) -> Canon {
        Canon::Str(v.as_bytes().to_vec())
    }
    pub fn is_err(&self) -> bool {
        matches!(self, Canon::Err(_))
    }
}

fn b64(v: &serde_json::Value, top: bool) -> Canon {
    match v {
        serde_json::Value::Null => Canon::Nil,
        serde_json::Value::Number(n) => Canon::Int(
            n.as_i64()
                .unwrap_or_else(|| panic!("non-integer number {n} in a result")),
        ),
        serde_json::Value::String(s) if top && s == "OK" => Canon::s("OK"),
        serde_json::Value::String(s) => Canon::Str(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .unwrap_or_else(|e| panic!("not base64 {s:?}: {e}")),
        ),
        serde_json::Value::Array(a) => Canon::Arr(a.iter().map(|x| b64(x, false)).collect()),
        other => panic!("a result must never hold {other}"),
    }
}

/// `{"result": ...}` (base64 mode) or `{"error": "..."}` to canonical form.
pub fn envelope_to_canon(v: &serde_json::Value) -> Canon {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("envelope is not an object: {v}"));
    assert_eq!(o.len(), 1, "an envelope has exactly one key: {v}");
    if let Some(e) = o.get("error") {
        return Canon::Err(e.as_str().expect("error is a string").to_string());
    }
    b64(
        o.get("result")
            .unwrap_or_else(|| panic!("no result key: {v}")),
        true,
    )
}

/// A RESP2 client for redis-server.
pub struct Redis {
    r: BufReader<TcpStream>,
}

impl Redis {
    pub fn connect(port: u16) -> Redis {
        Redis::connect_addr(&format!("127.0.0.1:{port}"))
    }

    pub fn connect_addr(addr: &str) -> Redis {
        let s = TcpStream::connect(addr).expect("connect redis");
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(Duration::from_secs(60))).ok();
        Redis {
            r: BufReader::new(s),
        }
    }

    /// Sends raw bytes (a malformed request, a pipeline).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.r.get_mut().write_all(bytes).expect("write redis");
    }

    /// Whether the server closes the connection within `wait` (an end of stream, or a reset);
    /// false when it is still open then, or sent something instead.
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        self.r.get_ref().set_read_timeout(Some(wait)).ok();
        let closed = match self.r.fill_buf() {
            Ok(b) => b.is_empty(),
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        self.r
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(60)))
            .ok();
        closed
    }

    /// Reads one byte; None when the connection is closed.
    pub fn read_byte(&mut self) -> Option<u8> {
        let b = *self.r.fill_buf().ok()?.first()?;
        self.r.consume(1);
        Some(b)
    }

    /// Reads one reply; None when the connection is closed.
    pub fn read(&mut self) -> Option<Canon> {
        if self.r.fill_buf().ok()?.is_empty() {
            return None;
        }
        Some(read_resp(&mut self.r))
    }

    pub fn cmd(&mut self, args: &[Vec<u8>]) -> Canon {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.r.get_mut().write_all(&out).expect("write redis");
        read_resp(&mut self.r)
    }

    pub fn cmd_str(&mut self, args: &[&str]) -> Canon {
        self.cmd(
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
    }
}

fn read_resp(r: &mut BufReader<TcpStream>) -> Canon {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).expect("resp line");
    let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    match line[0] {
        b'+' => Canon::Str(text.into_bytes()),
        b'-' => Canon::Err(text),
        b':' => Canon::Int(text.parse().expect("int")),
        b'$' => {
            let n: i64 = text.parse().expect("len");
            if n < 0 {
                return Canon::Nil;
            }
            let mut b = vec![0; n as usize + 2];
            r.read_exact(&mut b).expect("bulk");
            b.truncate(n as usize);
            Canon::Str(b)
        }
        // RESP3's arrays, pushes, maps (keys and values in one array) and null.
        b'*' | b'>' | b'~' | b'%' => {
            let n: i64 = text.parse().expect("len");
            if n < 0 {
                return Canon::Nil;
            }
            let n = if line[0] == b'%' { n * 2 } else { n };
            Canon::Arr((0..n).map(|_| read_resp(r)).collect())
        }
        b'_' => Canon::Nil,
        c => panic!("unexpected RESP type {c}"),
    }
}

/// A `redis-server` on a free port, without persistence, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: TempDir,
}

impl RedisServer {
    /// None when redis-server is not installed (the caller decides whether that is fatal).
    pub fn start() -> Option<RedisServer> {
        let port = free_port();
        let dir = TempDir::new("redis");
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(RedisServer {
            child,
            port,
            _dir: dir,
        })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on, for a server that is told its port in advance (the
/// peers of a cluster must know each other's before any starts).
///
/// It is taken from below the kernel's ephemeral range: a port from `bind(0)` is free only
/// until the next outgoing connection or `bind(0)` of any concurrent test, which the kernel
/// may give that very port, and a node then failed to start with "Address already in use".
/// Below the range only another call of this function hands ports out, and a counter shared
/// by the whole test binary never hands out the same one twice; the process id spreads
/// concurrent test binaries apart.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .min(32_768);
    let span = high.saturating_sub(LOW);
    if span >= 1_000 {
        let base = std::process::id().wrapping_mul(7_919) % span;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (LOW + (base + n) % span) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// tidepool and a redis-server side by side, empty, with a client of each: what every
/// differential test starts from.
pub struct Both {
    /// tidepool, over REST (JSON body, base64 replies).
    pub t: Http,
    /// redis-server, over RESP.
    pub r: Redis,
    pub server: Server,
    pub redis: RedisServer,
    _dir: TempDir,
}

impl Both {
    /// Starts both (tidepool with `flags`); None when redis-server is missing and
    /// TIDEPOOL_SKIP_REDIS=1 allows that (see [`redis_or_skip`]).
    pub fn start(tag: &str, flags: &[&str]) -> Option<Both> {
        let redis = redis_or_skip()?;
        let r = Redis::connect(redis.port);
        let dir = TempDir::new(tag);
        let server = Server::start(dir.path(), flags);
        Some(Both {
            t: server.client(),
            r,
            server,
            redis,
            _dir: dir,
        })
    }

    /// Sends `args` to both and requires the same reply; returns it.
    pub fn same(&mut self, args: &[&str]) -> Canon {
        let (mine, theirs) = (self.t.cmd_str(args), self.r.cmd_str(args));
        assert_eq!(mine, theirs, "{args:?}");
        mine
    }
}

/// A redis-server for a differential test; missing redis-server fails the test unless
/// TIDEPOOL_SKIP_REDIS=1 says the machine has none on purpose.
pub fn redis_or_skip() -> Option<RedisServer> {
    match RedisServer::start() {
        Some(r) => Some(r),
        None if std::env::var("TIDEPOOL_SKIP_REDIS").as_deref() == Ok("1") => {
            eprintln!("skipping: redis-server not available and TIDEPOOL_SKIP_REDIS=1");
            None
        }
        None => panic!("redis-server is not installed (apt-get install -y redis-server), or set TIDEPOOL_SKIP_REDIS=1"),
    }
}

/// xorshift for test generators (fixed seeds, so a failure replays).
pub struct TestRng(pub u64);

impl TestRng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Reads server-sent events from a raw connection (hyper sends streams chunked).
pub struct SseReader {
    r: BufReader<TcpStream>,
    buf: Vec<u8>,
    pub status: u16,
    /// The last read gave up on the read timeout: a None from `next_line` then says nothing
    /// about the stream's end.
    pub timed_out: bool,
}

impl SseReader {
    /// Opens `path` with POST and reads the response head.
    pub fn open(addr: &str, path: &str, token: &str) -> SseReader {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let mut r = BufReader::new(s);
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\nContent-Length: 2\r\n\r\n[]"
        );
        r.get_mut().write_all(req.as_bytes()).expect("write");
        let mut line = String::new();
        r.read_line(&mut line).expect("status");
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        loop {
            let mut h = String::new();
            r.read_line(&mut h).expect("header");
            if h.trim_end().is_empty() {
                break;
            }
        }
        SseReader {
            r,
            buf: Vec::new(),
            status,
            timed_out: false,
        }
    }

    fn fill(&mut self) -> bool {
        let mut sz = String::new();
        match self.r.read_line(&mut sz) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) => {
                self.timed_out = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
                return false;
            }
        }
        let n = match usize::from_str_radix(sz.trim(), 16) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if n == 0 {
            return false;
        }
        let mut chunk = vec![0; n + 2];
        if self.r.read_exact(&mut chunk).is_err() {
            return false;
        }
        self.buf.extend_from_slice(&chunk[..n]);
        true
    }

    /// Whether the stream ended (the server closed it), rather than went quiet past the read
    /// timeout.
    pub fn ended(&mut self) -> bool {
        while self.next_line().is_some() {}
        !self.timed_out
    }

    /// The next line of the stream (data lines and comments alike), or None at its end.
    pub fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                if text.is_empty() {
                    continue;
                }
                return Some(text);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The payload of the next `data: ` line, skipping comments.
    pub fn next_data(&mut self) -> Option<String> {
        loop {
            let l = self.next_line()?;
            if let Some(d) = l.strip_prefix("data: ") {
                return Some(d.to_string());
            }
        }
    }
}

/// FUNCTION LIST lists a library's functions in its hash table's order, which differs between
/// two runs of the same Redis: compare them sorted.
pub fn functions_sorted(c: Canon) -> Canon {
    let Canon::Arr(libs) = c else { return c };
    Canon::Arr(
        libs.into_iter()
            .map(|lib| match lib {
                Canon::Arr(mut fields) => {
                    for i in 0..fields.len().saturating_sub(1) {
                        if fields[i] == Canon::s("functions") {
                            if let Canon::Arr(f) = &mut fields[i + 1] {
                                f.sort();
                            }
                        }
                    }
                    Canon::Arr(fields)
                }
                other => other,
            })
            .collect(),
    )
}

/// Sends `cmd` through every door and from a Lua script (`redis.call`), running `setup` before
/// each, and requires `want` from each; from Lua an error is compared without the script's name
/// and line that follow Redis's text.
pub fn every_door_and_lua(c: &mut Http, setup: &[&[&str]], cmd: &[&str], want: &Canon) {
    let bytes: Vec<Vec<u8>> = cmd.iter().map(|a| a.as_bytes().to_vec()).collect();
    let mut lua = vec!["EVAL", "return redis.call(unpack(ARGV))", "0"];
    lua.extend(cmd);
    let lua: Vec<Vec<u8>> = lua.iter().map(|a| a.as_bytes().to_vec()).collect();
    for door in DOORS.iter().map(Some).chain([None]) {
        for s in setup {
            c.cmd_str(s);
        }
        let got = match door {
            Some(d) => c.cmd_via(*d, &bytes),
            // From Lua, an error names the script after Redis's text.
            None => match c.cmd(&lua) {
                Canon::Err(e) => {
                    Canon::Err(e.split(" script: ").next().unwrap_or_default().to_string())
                }
                other => other,
            },
        };
        assert_eq!(&got, want, "{cmd:?} via {door:?} (None: Lua)");
    }
}

/// Waits until the database's scripts are no longer refused for cooling down after one ran
/// past its time limit (issue 25): polls a script that does nothing, for at most 90 s (the
/// longest cooling period is 60 s).
pub fn scripts_cooled(c: &mut Http) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        match c.cmd_str(&["EVAL_RO", "return 1", "0"]) {
            Canon::Int(1) => return,
            Canon::Err(e) if e.contains("scripts are refused") => {}
            other => panic!("a script that does nothing answered {other:?}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the scripts never stopped cooling down"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The error of a script stopped at its time limit.
pub const SCRIPT_STOPPED: &str = "tidepool stopped the script after";

/// Reads one HTTP response (head and a Content-Length body) from a raw connection, however
/// many reads it arrives in; what arrived if the connection ends or times out first.
pub fn read_raw_response(s: &mut TcpStream) -> String {
    use std::io::Read;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(h) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..h]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= h + 4 + len {
                break;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Writes `cmds` into `data` as a log of one segment, one record each (records 1, 2, ...),
/// as a server (or an older one, or a damaged disk) would have.
pub fn write_log(data: &std::path::Path, cmds: &[&[&str]]) {
    use tidepool::record::{self, Record};
    use tidepool::wal::format::{self, SegmentHeader};
    let wal = data.join("wal");
    std::fs::create_dir_all(&wal).expect("wal dir");
    let mut seg = SegmentHeader {
        first_seq: 1,
        created_unix_ms: 1_767_225_600_000,
    }
    .encode()
    .to_vec();
    for (i, cmd) in cmds.iter().enumerate() {
        let seq = i as u64 + 1;
        let mut payload = Vec::new();
        let args: Vec<Vec<u8>> = cmd.iter().map(|a| a.as_bytes().to_vec()).collect();
        record::encode_kv_commands(&mut payload, &[args]);
        let kind = Record::KvCommands(Vec::new()).kind();
        format::encode_frame(&mut seg, seq, 1_767_225_600_000 + seq, kind, &payload);
    }
    seg.resize(1 << 20, 0);
    std::fs::write(wal.join(format::segment_file_name(1)), &seg).expect("segment");
}
