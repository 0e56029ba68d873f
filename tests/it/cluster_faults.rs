//! Fault schedules against a three-node cluster (issue 30), checked for linearizability.
//!
//! One cluster of three server processes (each on its own host in a network namespace when
//! the machine allows it, else on loopback) takes a mixed load: clients write and read
//! registers (`SET`, and `GET` inside `EVAL`, which any node sends to the leader), counters
//! (`INCR`) and lists (`RPUSH`, `LRANGE`), each to a node picked at random, alone or as the
//! one command of a `/pipeline` or a `/multi-exec` transaction; they also read a node's own
//! state (`GET`, `LRANGE`, which a follower answers itself), publish messages to a local
//! destination, create schedules and send workflow notifies. Meanwhile one fault of a
//! schedule strikes: `kill -9` of the leader, of a follower or of two nodes one after the
//! other, a node restarted with its directory emptied, a partition that isolates the leader or splits two against one, a leader
//! paused (SIGSTOP) past its lease, both followers paused while the leader is killed, or the
//! leader cut off and killed. Then everything heals, and the schedule's history is checked:
//! - every key's history (invocation and answer times, as the clients saw them) is
//!   linearizable (`linearizability::check`, a port of Wing and Gong's algorithm with Lowe's
//!   memoisation); a request that got no answer may or may not have taken effect;
//! - every node holds the same value for every key, every acknowledged append is in its list
//!   once, and every list a node ever answered is a prefix of the final one: no node answered
//!   a read with a value that was later lost;
//! - every acknowledged publish is delivered at least once (the duplicates are counted) and
//!   every acknowledged schedule is on every node.
//!
//! `TIDEPOOL_FAULT_SEED` picks the first schedule's seed (by default the clock's, printed) and
//! `TIDEPOOL_FAULT_SCHEDULES` how many run (20 by default; more for a soak), and
//! `TIDEPOOL_FAULT_ONLY` one fault for all of them (`fault_of`). A seed sets the
//! fault, its target and its timing; a failure names its seed and the command that runs it
//! again.

use super::cluster::{form_cluster, node_flags, Hosts, ADMIN};
use super::linearizability::{
    check, Counter, CounterInput, CounterOutput, List, ListInput, ListOutput, Model, Operation,
    Register, RegisterInput, RegisterOutput, Verdict,
};
use crate::common::sink::Sink;
use crate::common::*;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Schedules a run has unless `TIDEPOOL_FAULT_SCHEDULES` says otherwise.
const SCHEDULES: u64 = 20;
/// Concurrent key-value clients.
const CLIENTS: usize = 5;
/// Keys of each kind a schedule uses.
const KEYS: usize = 3;
/// How long a client waits for an answer before it counts the request as unanswered.
const ANSWER_WAIT: Duration = Duration::from_secs(3);
/// Steps the checker may take on one key before it gives up.
const CHECK_BUDGET: u64 = 2_000_000;

/// What a request came to.
#[derive(Debug)]
enum Outcome {
    /// The server answered this `result`.
    Value(serde_json::Value),
    /// The command did not run: the node could not be reached, or it said it takes no writes
    /// or cannot confirm it leads.
    Refused(String),
    /// No answer, or an error that leaves open whether the command ran.
    Unknown(String),
}

impl Outcome {
    fn why(&self) -> String {
        match self {
            Outcome::Value(v) => format!("answered {v}"),
            Outcome::Refused(e) => format!("refused: {e}"),
            Outcome::Unknown(e) => format!("no answer: {e}"),
        }
    }
}

/// One HTTP request on its own connection (no retry: a request sent twice could run twice);
/// the status and body, or whether it was sent and why it failed.
fn request(
    addr: &str,
    token: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, Vec<u8>), (bool, String)> {
    let to: std::net::SocketAddr = addr.parse().map_err(|e| (false, format!("{e}")))?;
    let mut s = std::net::TcpStream::connect_timeout(&to, Duration::from_millis(500))
        .map_err(|e| (false, format!("connect {addr}: {e}")))?;
    s.set_read_timeout(Some(ANSWER_WAIT)).ok();
    s.set_write_timeout(Some(ANSWER_WAIT)).ok();
    s.set_nodelay(true).ok();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\nAuthorization: Bearer {token}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    s.write_all(&out)
        .map_err(|e| (true, format!("send to {addr}: {e}")))?;
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .map_err(|e| (true, format!("answer from {addr}: {e}")))?;
    let end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or((true, format!("a cut answer from {addr}")))?;
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or((true, format!("no status from {addr}")))?;
    let mut body = got[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = unchunk(&body).ok_or((true, format!("a cut chunked answer from {addr}")))?;
    }
    Ok((status, body))
}

fn unchunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&b[..line]).ok()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        let data = b.get(line + 2..line + 2 + size)?;
        out.extend_from_slice(data);
        b = b.get(line + 4 + size..)?;
    }
}

/// Where a command is sent: alone as a JSON body, or as the one command of a `/pipeline` or
/// of a `/multi-exec` transaction.
#[derive(Clone, Copy, Debug)]
enum Door {
    Body,
    Pipeline,
    Transaction,
}

/// An answer's envelope (`{"result": ...}` or `{"error": ...}`) as an outcome.
fn enveloped(v: &serde_json::Value, status: u16) -> Outcome {
    if let Some(r) = v.get("result") {
        return Outcome::Value(r.clone());
    }
    let text = v
        .get("error")
        .and_then(|e| e.as_str())
        .map_or_else(|| v.to_string(), str::to_string);
    if text.contains("takes no writes") || text.contains("cannot confirm it still leads") {
        Outcome::Refused(text)
    } else {
        Outcome::Unknown(format!("{status} {text}"))
    }
}

/// A command as a JSON array to `POST /`.
fn command(addr: &str, args: &[&str]) -> Outcome {
    command_via(addr, Door::Body, args)
}

/// A command through `door`.
fn command_via(addr: &str, door: Door, args: &[&str]) -> Outcome {
    let (path, body) = match door {
        Door::Body => ("/", serde_json::to_vec(args)),
        Door::Pipeline => ("/pipeline", serde_json::to_vec(&[args])),
        Door::Transaction => ("/multi-exec", serde_json::to_vec(&[args])),
    };
    let body = body.expect("JSON");
    match request(addr, TOKEN, "POST", path, &[], &body) {
        Ok((status, b)) => match serde_json::from_slice::<serde_json::Value>(&b) {
            Ok(serde_json::Value::Array(mut v)) if v.len() == 1 => enveloped(&v.remove(0), status),
            Ok(v @ serde_json::Value::Object(_)) => enveloped(&v, status),
            _ => {
                let text = String::from_utf8_lossy(&b).into_owned();
                enveloped(&serde_json::json!({ "error": text }), status)
            }
        },
        Err((false, e)) => Outcome::Refused(e),
        Err((true, e)) => Outcome::Unknown(e),
    }
}

/// One key-value operation as a client saw it.
#[derive(Debug, Clone)]
enum Op {
    Register(RegisterInput, Option<RegisterOutput>),
    Counter(CounterInput, Option<CounterOutput>),
    List(ListInput, Option<ListOutput>),
}

#[derive(Debug, Clone)]
struct Rec {
    key: String,
    /// Who sent it where, as a failure shows it: client `c` through node `n` (1-based) is
    /// `10 c + n`.
    client: usize,
    op: Op,
    call: u64,
    ret: Option<u64>,
}

/// A node's own answer to a read of a list: it must be a prefix of the list's final value.
#[derive(Debug, Clone)]
struct Local {
    key: String,
    node: usize,
    items: Vec<String>,
}

#[derive(Default)]
struct History {
    ops: Vec<Rec>,
    local: Vec<Local>,
    /// Register values some node answered from its own state.
    local_values: Vec<(String, usize, Option<String>)>,
}

fn text(v: &serde_json::Value) -> Option<Option<String>> {
    match v {
        serde_json::Value::Null => Some(None),
        serde_json::Value::String(s) => Some(Some(s.clone())),
        _ => None,
    }
}

fn items(v: &serde_json::Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|i| i.as_str().map(str::to_string))
        .collect()
}

/// What an answer means for an operation of a client (given the value it wrote), or None if it
/// cannot be an answer to it.
type Answered = fn(&str, &serde_json::Value) -> Option<Op>;

const READ_GET: &str = "return redis.call('GET', KEYS[1])";
const READ_LIST: &str = "return redis.call('LRANGE', KEYS[1], 0, -1)";

/// A client of the key-value store: picks an operation and a node, records what it saw, until
/// `stop`. A node that refused it or left it without an answer is avoided for a moment.
fn kv_client(
    id: usize,
    seed: u64,
    addrs: Vec<String>,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> History {
    let mut rng = TestRng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (id as u64 + 1) | 1);
    let mut h = History::default();
    let mut avoid = [t0; 3];
    let mut n = 0u64;
    let now = || t0.elapsed().as_nanos() as u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let usable: Vec<usize> = (0..3).filter(|i| avoid[*i] <= Instant::now()).collect();
        let node = if usable.is_empty() {
            rng.below(3)
        } else {
            *rng.pick(&usable)
        };
        let addr = &addrs[node];
        let k = rng.below(KEYS);
        let value = format!("c{id}-{n}");
        let pick = rng.below(100);
        let (key, args, build): (String, Vec<String>, Answered) = match pick {
            0..=19 => (
                format!("s{seed}-r{k}"),
                vec!["SET".into(), format!("s{seed}-r{k}"), value.clone()],
                |v, got| {
                    (got == "OK").then(|| {
                        Op::Register(
                            RegisterInput::Write(v.to_string()),
                            Some(RegisterOutput::Ok),
                        )
                    })
                },
            ),
            20..=37 => (
                format!("s{seed}-r{k}"),
                vec![
                    "EVAL".into(),
                    READ_GET.into(),
                    "1".into(),
                    format!("s{seed}-r{k}"),
                ],
                |_, got| {
                    Some(Op::Register(
                        RegisterInput::Read,
                        Some(RegisterOutput::Value(text(got)?)),
                    ))
                },
            ),
            38..=49 => (
                format!("s{seed}-c{k}"),
                vec!["INCR".into(), format!("s{seed}-c{k}")],
                |_, got| {
                    Some(Op::Counter(
                        CounterInput::Incr,
                        Some(CounterOutput::Value(got.as_i64()?)),
                    ))
                },
            ),
            50..=59 => (
                format!("s{seed}-c{k}"),
                vec![
                    "EVAL".into(),
                    READ_GET.into(),
                    "1".into(),
                    format!("s{seed}-c{k}"),
                ],
                |_, got| {
                    let n = match text(got)? {
                        None => 0,
                        Some(s) => s.parse().ok()?,
                    };
                    Some(Op::Counter(
                        CounterInput::Read,
                        Some(CounterOutput::Value(n)),
                    ))
                },
            ),
            60..=74 => (
                format!("s{seed}-l{k}"),
                vec!["RPUSH".into(), format!("s{seed}-l{k}"), value.clone()],
                |v, got| {
                    Some(Op::List(
                        ListInput::Append(v.to_string()),
                        Some(ListOutput::Len(usize::try_from(got.as_i64()?).ok()?)),
                    ))
                },
            ),
            75..=84 => (
                format!("s{seed}-l{k}"),
                vec![
                    "EVAL".into(),
                    READ_LIST.into(),
                    "1".into(),
                    format!("s{seed}-l{k}"),
                ],
                |_, got| {
                    Some(Op::List(
                        ListInput::Read,
                        Some(ListOutput::Items(items(got)?)),
                    ))
                },
            ),
            // A node's own state: a follower answers from what it has applied.
            _ => {
                let key = if rng.chance(50) {
                    format!("s{seed}-l{k}")
                } else {
                    format!("s{seed}-r{k}")
                };
                let args: Vec<&str> = if key.contains("-l") {
                    vec!["LRANGE", &key, "0", "-1"]
                } else {
                    vec!["GET", &key]
                };
                if let Outcome::Value(v) = command(addr, &args) {
                    if key.contains("-l") {
                        let items = items(&v).unwrap_or_else(|| {
                            panic!("LRANGE {key} on node {} answered {v}", node + 1)
                        });
                        h.local.push(Local { key, node, items });
                    } else {
                        let got = text(&v).unwrap_or_else(|| {
                            panic!("GET {key} on node {} answered {v}", node + 1)
                        });
                        h.local_values.push((key, node, got));
                    }
                } else {
                    avoid[node] = Instant::now() + Duration::from_millis(300);
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let door = *rng.pick(&[Door::Body, Door::Body, Door::Pipeline, Door::Transaction]);
        let call = now();
        let outcome = command_via(addr, door, &args);
        let ret = now();
        let writes = matches!(pick, 0..=19 | 38..=49 | 60..=74);
        match outcome {
            Outcome::Value(got) => {
                let op = build(&value, &got)
                    .unwrap_or_else(|| panic!("{args:?} on node {} answered {got}", node + 1));
                h.ops.push(Rec {
                    key,
                    client: id * 10 + node + 1,
                    op,
                    call,
                    ret: Some(ret),
                });
            }
            Outcome::Refused(_) => {
                avoid[node] = Instant::now() + Duration::from_millis(300);
                std::thread::sleep(Duration::from_millis(20));
            }
            Outcome::Unknown(_) => {
                // A write may have taken effect, at any time from its call on; a read that
                // got no answer tells nothing.
                if writes {
                    let op = match pick {
                        0..=19 => Op::Register(RegisterInput::Write(value.clone()), None),
                        38..=49 => Op::Counter(CounterInput::Incr, None),
                        _ => Op::List(ListInput::Append(value.clone()), None),
                    };
                    h.ops.push(Rec {
                        key,
                        client: id * 10 + node + 1,
                        op,
                        call,
                        ret: None,
                    });
                }
                // Every request without an answer widens what the checker must search:
                // leave that node alone for a while.
                avoid[node] = Instant::now() + Duration::from_millis(1500);
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    h
}

/// What the delivery client had acknowledged.
#[derive(Default)]
struct Published {
    /// Bodies of messages a node answered 200 to.
    messages: Vec<String>,
    /// Ids of schedules created.
    schedules: Vec<String>,
}

/// Publishes messages, creates schedules and sends notifies through nodes picked at random,
/// until `stop`.
fn delivery_client(
    seed: u64,
    addrs: Vec<String>,
    dest: String,
    stop: Arc<AtomicBool>,
) -> Published {
    let mut rng = TestRng(seed ^ 0x5bd1_e995 | 1);
    let mut p = Published::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let addr = rng.pick(&addrs).clone();
        match rng.below(10) {
            0..=5 => {
                let body = format!("s{seed}-p{n}");
                if let Ok((200 | 201, _)) = request(
                    &addr,
                    QSTASH_TOKEN,
                    "POST",
                    &format!("/v2/publish/{dest}"),
                    &[],
                    body.as_bytes(),
                ) {
                    p.messages.push(body);
                }
            }
            6..=7 => {
                if let Ok((200 | 201, b)) = request(
                    &addr,
                    QSTASH_TOKEN,
                    "POST",
                    &format!("/v2/schedules/{dest}"),
                    &[("Upstash-Cron", "0 0 1 1 *")],
                    format!("s{seed}-schedule-{n}").as_bytes(),
                ) {
                    let v: serde_json::Value =
                        serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null);
                    if let Some(id) = v["scheduleId"].as_str() {
                        p.schedules.push(id.to_string());
                    }
                }
            }
            _ => {
                let _ = request(
                    &addr,
                    QSTASH_TOKEN,
                    "POST",
                    &format!("/v2/notify/s{seed}-event-{}", n % 7),
                    &[],
                    b"notified",
                );
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    p
}

/// The faults a schedule may strike with.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    KillLeader,
    KillFollower,
    /// The leader, then whichever node leads after it.
    KillTwo,
    /// A node killed, its directory emptied but for its credentials, and started again.
    RestartEmpty,
    /// The leader paused (SIGSTOP) past its lease, then resumed.
    PauseLeader,
    /// Both followers paused, the leader killed, the followers resumed.
    PauseFollowersKillLeader,
    /// The leader cut off from its peers and killed, then joined again once they went on.
    CutAndKillLeader,
    /// The leader cut off from its peers (its clients still reach it), then joined again.
    IsolateLeader,
    /// A follower cut off: two against one.
    IsolateFollower,
}

const FAULTS: [Fault; 9] = [
    Fault::KillLeader,
    Fault::KillFollower,
    Fault::KillTwo,
    Fault::RestartEmpty,
    Fault::PauseLeader,
    Fault::PauseFollowersKillLeader,
    Fault::IsolateLeader,
    Fault::IsolateFollower,
    Fault::CutAndKillLeader,
];

/// Three nodes and what a schedule does to them.
struct Cluster {
    dirs: [TempDir; 3],
    servers: [Option<Server>; 3],
    paused: [bool; 3],
    cut: [bool; 3],
    hosts: Option<Hosts>,
    /// Each node's HTTP address (the same across restarts) and cluster port on loopback.
    addrs: [String; 3],
    ports: [u16; 3],
    env: Vec<(String, String)>,
    sink: Sink,
    /// Nodes deposed with records the cluster replaced, which restarted themselves in place.
    deposed: usize,
    /// Nodes that refused everything for another reason and were restarted here.
    restarted_unready: usize,
    /// Appends sent to a leader whose followers were paused that it answered (only a leader
    /// that answers before commit does).
    probes_acknowledged: usize,
}

impl Cluster {
    fn new(tag: &str, env: &[(&str, &str)]) -> Cluster {
        let hosts = Hosts::make();
        let sink = Sink::start_on(
            &hosts
                .as_ref()
                .map_or_else(|| "127.0.0.1".to_string(), Hosts::outside_ip),
        );
        let ports = [free_port(), free_port(), free_port()];
        let addrs = match &hosts {
            Some(h) => [h.http_addr(1), h.http_addr(2), h.http_addr(3)],
            None => [0, 1, 2].map(|_| format!("127.0.0.1:{}", free_port())),
        };
        let mut c = Cluster {
            dirs: [0, 1, 2].map(|i| TempDir::new(&format!("{tag}{}", i + 1))),
            servers: [None, None, None],
            paused: [false; 3],
            cut: [false; 3],
            hosts,
            addrs,
            ports,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            sink,
            deposed: 0,
            restarted_unready: 0,
            probes_acknowledged: 0,
        };
        let (servers, _) = form_cluster(&c.dirs, |i| c.start_node(i));
        c.servers = servers;
        c
    }

    /// Starts node `i` (0-based) on its directory.
    fn start_node(&self, i: usize) -> Server {
        let mut extra: Vec<String> = QSTASH_FLAGS.map(String::from).to_vec();
        let mut env: Vec<(&str, &str)> = vec![
            ("TIDEPOOL_RETRY_BACKOFF_UNIT_MS", "1"),
            // Snapshots while the load goes on, and sent to a node that comes back empty.
            ("TIDEPOOL_CLUSTER_SNAPSHOT_EVERY", "200"),
        ];
        env.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if self.hosts.is_none() {
            extra.extend(node_flags(i, &self.ports));
            extra.push("--listen".into());
            extra.push(self.addrs[i].clone());
        }
        let flags: Vec<&str> = extra.iter().map(String::as_str).collect();
        let dir = self.dirs[i].path();
        let mut last = String::new();
        for _ in 0..20 {
            let started = match &self.hosts {
                Some(h) => h.serve_with(i + 1, dir, &flags, &env),
                None => Server::try_start_env(dir, &flags, &env),
            };
            match started {
                Ok(s) => return s,
                // A port the killed process held may still be taken for a moment.
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("node {} did not start: {last}", i + 1)
    }

    fn pid(&self, i: usize) -> Option<u32> {
        self.servers[i].as_ref().map(|s| s.child.id())
    }

    fn signal(&mut self, i: usize, sig: &str) {
        if let Some(pid) = self.pid(i) {
            let _ = std::process::Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status();
        }
    }

    fn pause(&mut self, i: usize, on: bool) {
        self.signal(i, if on { "STOP" } else { "CONT" });
        self.paused[i] = on;
    }

    fn kill(&mut self, i: usize) {
        if self.paused[i] {
            self.pause(i, false);
        }
        if let Some(s) = self.servers[i].take() {
            s.kill9();
        }
    }

    fn restart(&mut self, i: usize) {
        if self.servers[i].is_none() {
            self.servers[i] = Some(self.start_node(i));
        }
    }

    /// Node `i` answered `/readyz` with 503 (`body`). A node deposed with records the cluster
    /// replaced says it rebuilds itself, and must be ready again within 30 s without help; a
    /// node unready for another reason is restarted here (and counted).
    fn unready(&mut self, i: usize, body: &[u8]) -> Result<(), String> {
        let said = String::from_utf8_lossy(body).into_owned();
        if !said.contains("rebuilds itself") {
            self.restarted_unready += 1;
            self.kill(i);
            self.restart(i);
            return Ok(());
        }
        self.deposed += 1;
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if let Ok((200, _)) = request(&self.addrs[i], "", "GET", "/readyz", &[], b"") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "node {} was deposed and did not rebuild itself within 30 s: {said}\n{}",
            i + 1,
            self.servers[i]
                .as_ref()
                .map(|s| s.stderr())
                .unwrap_or_default()
        ))
    }

    /// Empties node `i`'s directory but for its credentials (the tokens derive from them).
    fn wipe(&mut self, i: usize) {
        self.kill(i);
        let dir = self.dirs[i].path();
        for e in std::fs::read_dir(dir)
            .expect("read the node's directory")
            .flatten()
        {
            if e.file_name() == "credentials.json" {
                continue;
            }
            let p = e.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }

    fn partition(&mut self, i: usize, on: bool) {
        if let Some(h) = &self.hosts {
            h.partition(i + 1, on);
            self.cut[i] = on;
        }
    }

    /// The node that says it takes writes, among those running and not paused.
    fn leader(&self) -> Option<usize> {
        (0..3).find(|i| {
            self.servers[*i].is_some()
                && !self.paused[*i]
                && matches!(
                    request(&self.addrs[*i], ADMIN, "GET", "/_admin/cluster/status", &[], b""),
                    Ok((200, b)) if serde_json::from_slice::<serde_json::Value>(&b)
                        .is_ok_and(|v| v["takes_writes"] == true)
                )
        })
    }

    /// Asserts that a GET of `key` on every node answers `want` ("node N" and `what` if not).
    fn each_node_reads(&self, key: &str, want: &str, what: &str) {
        for i in 0..3 {
            assert!(
                matches!(command(&self.addrs[i], &["GET", key]), Outcome::Value(v) if v == want),
                "node {}{what}",
                i + 1
            );
        }
    }

    /// The leader, waiting for one to be elected.
    fn wait_leader(&self, within: Duration) -> Option<usize> {
        let until = Instant::now() + within;
        loop {
            if let Some(l) = self.leader() {
                return Some(l);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Leaves the nodes' directories in place for a look after a failure; where they are.
    fn keep_dirs(&mut self) -> String {
        let mut kept = Vec::new();
        for d in &mut self.dirs {
            let d = std::mem::replace(d, TempDir(std::path::PathBuf::new()));
            kept.push(d.path().display().to_string());
            std::mem::forget(d);
        }
        kept.join(" ")
    }

    /// Each node's view of the cluster and the end of its log, for a failure's message.
    fn describe(&self) -> String {
        (0..3)
            .map(|i| {
                let status = request(
                    &self.addrs[i],
                    ADMIN,
                    "GET",
                    "/_admin/cluster/status",
                    &[],
                    b"",
                )
                .map(|(s, b)| format!("{s} {}", String::from_utf8_lossy(&b)))
                .unwrap_or_else(|(_, e)| e);
                let stderr = self.servers[i]
                    .as_ref()
                    .map(Server::stderr)
                    .unwrap_or_default();
                let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
                format!(
                    "node {}: {status}\n  {}",
                    i + 1,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n  ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Ends every fault: nodes resumed, joined and started; a node deposed with writes the
    /// cluster did not keep (ready no more: it restarts itself in place) waited for; then a
    /// write through the cluster that every node must show.
    fn heal(&mut self, barrier: &str) -> Result<(), String> {
        for i in 0..3 {
            if self.paused[i] {
                self.pause(i, false);
            }
            if self.cut[i] {
                self.partition(i, false);
            }
            self.restart(i);
        }
        let until = Instant::now() + Duration::from_secs(60);
        let mut n = 0;
        let mut last = String::new();
        loop {
            if Instant::now() > until {
                return Err(format!(
                    "the cluster did not take the write {barrier} within 60 s (last: {last})"
                ));
            }
            for i in 0..3 {
                if let Ok((503, body)) = request(&self.addrs[i], "", "GET", "/readyz", &[], b"") {
                    self.unready(i, &body)?;
                }
            }
            n += 1;
            // A key of each attempt's own: an earlier attempt left unanswered may still be
            // applied later, and must not overwrite the one that was answered.
            match command(&self.addrs[n % 3], &["SET", &format!("{barrier}-{n}"), "1"]) {
                Outcome::Value(v) if v == "OK" => break,
                other => last = other.why(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let barrier = format!("{barrier}-{n}");
        for i in 0..3 {
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                if let Outcome::Value(v) = command(&self.addrs[i], &["GET", &barrier]) {
                    if v.as_str() == Some("1") {
                        break;
                    }
                }
                // A node may learn only now that it was deposed: its own records were not the
                // cluster's, and it rebuilds itself.
                if let Ok((503, body)) = request(&self.addrs[i], "", "GET", "/readyz", &[], b"") {
                    self.unready(i, &body)?;
                }
                if Instant::now() > until {
                    return Err(format!(
                        "node {} did not show the write {barrier} within 30 s\n{}",
                        i + 1,
                        self.describe()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Strikes with `fault`, as `rng` times it, and returns once it is over (or left for
    /// `heal` to end).
    fn strike(
        &mut self,
        fault: Fault,
        rng: &mut TestRng,
        seed: u64,
        t0: Instant,
    ) -> Result<Vec<Rec>, String> {
        let mut probes = Vec::new();
        let hold = Duration::from_millis(700 + rng.below(900) as u64);
        let leader = self
            .wait_leader(Duration::from_secs(20))
            .ok_or("no leader before the fault")?;
        let follower = (leader + 1 + rng.below(2)) % 3;
        match fault {
            Fault::KillLeader | Fault::KillFollower => {
                let i = if fault == Fault::KillLeader {
                    leader
                } else {
                    follower
                };
                self.kill(i);
                std::thread::sleep(hold);
                self.restart(i);
            }
            Fault::KillTwo => {
                self.kill(leader);
                let next = self.wait_leader(Duration::from_secs(5)).unwrap_or(follower);
                std::thread::sleep(Duration::from_millis(rng.below(500) as u64));
                self.kill(next);
                std::thread::sleep(hold);
                self.restart(leader);
                std::thread::sleep(Duration::from_millis(rng.below(500) as u64));
                self.restart(next);
            }
            Fault::RestartEmpty => {
                let i = if rng.chance(50) { leader } else { follower };
                self.wipe(i);
                std::thread::sleep(Duration::from_millis(rng.below(500) as u64));
                self.restart(i);
                std::thread::sleep(hold);
            }
            Fault::PauseLeader => {
                self.pause(leader, true);
                std::thread::sleep(hold + Duration::from_millis(1000));
                self.pause(leader, false);
            }
            Fault::PauseFollowersKillLeader | Fault::CutAndKillLeader => {
                // The leader alone: its followers stalled (what it sent them waits in their
                // sockets), or its cluster link cut (what it sends is lost).
                let cut = fault == Fault::CutAndKillLeader;
                for i in 0..3 {
                    if cut && i == leader {
                        self.partition(i, true);
                    } else if !cut && i != leader {
                        self.pause(i, true);
                    }
                }
                // An append sent to the leader now cannot commit: it must get no answer.
                let (addr, key, value) = (
                    self.addrs[leader].clone(),
                    format!("s{seed}-l0"),
                    format!("probe-{seed}"),
                );
                let probe = std::thread::spawn(move || {
                    let call = t0.elapsed().as_nanos() as u64;
                    let outcome = command(&addr, &["RPUSH", &key, &value]);
                    let ret = t0.elapsed().as_nanos() as u64;
                    let (output, ret) = match outcome {
                        Outcome::Value(v) => {
                            (v.as_u64().map(|n| ListOutput::Len(n as usize)), Some(ret))
                        }
                        _ => (None, None),
                    };
                    Rec {
                        key,
                        client: (CLIENTS + 1) * 10 + leader + 1,
                        op: Op::List(ListInput::Append(value), output),
                        call,
                        ret,
                    }
                });
                std::thread::sleep(Duration::from_millis(300));
                self.kill(leader);
                for i in 0..3 {
                    if cut && i == leader {
                        self.partition(i, false);
                    } else if !cut && i != leader {
                        self.pause(i, false);
                    }
                }
                // The old leader comes back once the others have gone on without it.
                self.wait_leader(Duration::from_secs(10));
                std::thread::sleep(hold);
                self.restart(leader);
                let probe = probe.join().expect("the probe");
                if matches!(probe.op, Op::List(_, Some(_))) {
                    self.probes_acknowledged += 1;
                }
                probes.push(probe);
            }
            Fault::IsolateLeader | Fault::IsolateFollower => {
                let i = if fault == Fault::IsolateLeader {
                    leader
                } else {
                    follower
                };
                self.partition(i, true);
                std::thread::sleep(hold + Duration::from_millis(1000));
                self.partition(i, false);
            }
        }
        Ok(probes)
    }
}

/// The first seed and how many schedules, from the environment or the clock.
fn seeds() -> (u64, u64) {
    let seed = std::env::var("TIDEPOOL_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
    let count = std::env::var("TIDEPOOL_FAULT_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SCHEDULES);
    (seed, count)
}

/// The fault a seed strikes with: consecutive seeds go through every fault this machine can
/// make (partitions need network namespaces). `TIDEPOOL_FAULT_ONLY=<fault>` (its name as
/// `Debug` writes it, such as `RestartEmpty`) makes every schedule strike that one, for a
/// soak of one fault.
fn fault_of(seed: u64, partitions: bool) -> Fault {
    let only = std::env::var("TIDEPOOL_FAULT_ONLY").ok();
    let faults: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| {
            partitions
                || !matches!(
                    f,
                    Fault::IsolateLeader | Fault::IsolateFollower | Fault::CutAndKillLeader
                )
        })
        .filter(|f| only.as_ref().is_none_or(|o| *o == format!("{f:?}")))
        .collect();
    match faults.len() {
        0 => panic!("TIDEPOOL_FAULT_ONLY={only:?} names no fault this machine can make"),
        n => faults[(seed % n as u64) as usize],
    }
}

/// What a schedule found wrong, each line starting with what kind of finding it is.
type Findings = Vec<String>;

/// Runs one schedule with `fault` (the seed's unless given) and checks it.
fn run_schedule(c: &mut Cluster, seed: u64, fault: Option<Fault>) -> Findings {
    let mut rng = TestRng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    let fault = fault.unwrap_or_else(|| fault_of(seed, c.hosts.is_some()));
    let started = Instant::now();
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let addrs: Vec<String> = c.addrs.to_vec();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (addrs, stop) = (addrs.clone(), stop.clone());
            std::thread::spawn(move || kv_client(id, seed, addrs, t0, stop))
        })
        .collect();
    let deliveries = {
        let (addrs, stop, dest) = (addrs.clone(), stop.clone(), c.sink.url("/m"));
        std::thread::spawn(move || delivery_client(seed, addrs, dest, stop))
    };
    std::thread::sleep(Duration::from_millis(400));
    let mut findings = Findings::new();
    let probes = c.strike(fault, &mut rng, seed, t0).unwrap_or_else(|e| {
        findings.push(format!("fault: {e}"));
        Vec::new()
    });
    std::thread::sleep(Duration::from_millis(600));
    stop.store(true, Ordering::Relaxed);
    let mut history = History::default();
    for h in clients {
        let h = h.join().expect("a client");
        history.ops.extend(h.ops);
        history.local.extend(h.local);
        history.local_values.extend(h.local_values);
    }
    history.ops.extend(probes);
    let published = deliveries.join().expect("the delivery client");
    if let Err(e) = c.heal(&format!("s{seed}-healed")) {
        findings.push(format!("heal: {e}"));
        return findings;
    }
    // The final value of every key, through the cluster (an operation of the history) and
    // from each node's own state.
    let final_call = t0.elapsed().as_nanos() as u64;
    let mut finals: HashMap<String, Vec<serde_json::Value>> = HashMap::new();
    for kind in ["r", "c", "l"] {
        for k in 0..KEYS {
            let key = format!("s{seed}-{kind}{k}");
            let (script, local): (&str, Vec<&str>) = if kind == "l" {
                (READ_LIST, vec!["LRANGE", &key, "0", "-1"])
            } else {
                (READ_GET, vec!["GET", &key])
            };
            if let Outcome::Value(v) = command(&c.addrs[0], &["EVAL", script, "1", &key]) {
                let ret = t0.elapsed().as_nanos() as u64;
                let op = match kind {
                    "r" => text(&v)
                        .map(|t| Op::Register(RegisterInput::Read, Some(RegisterOutput::Value(t)))),
                    "c" => text(&v).map(|t| {
                        Op::Counter(
                            CounterInput::Read,
                            Some(CounterOutput::Value(
                                t.and_then(|t| t.parse().ok()).unwrap_or(0),
                            )),
                        )
                    }),
                    _ => items(&v).map(|i| Op::List(ListInput::Read, Some(ListOutput::Items(i)))),
                };
                if let Some(op) = op {
                    history.ops.push(Rec {
                        key: key.clone(),
                        client: CLIENTS * 10 + 1,
                        op,
                        call: final_call,
                        ret: Some(ret),
                    });
                }
            }
            for i in 0..3 {
                match command(&c.addrs[i], &local) {
                    Outcome::Value(v) => finals.entry(key.clone()).or_default().push(v),
                    other => findings.push(format!(
                        "final read: {key} on node {}: {}",
                        i + 1,
                        other.why()
                    )),
                }
            }
        }
    }
    findings.extend(check_state(&history, &finals));
    let checking = Instant::now();
    unseen_dropped(&mut history);
    findings.extend(check_linearizable(&history));
    let checked = checking.elapsed();
    findings.extend(check_deliveries(c, &published));
    let unknown = history.ops.iter().filter(|r| r.ret.is_none()).count();
    eprintln!(
        "schedule seed {seed}: {fault:?}; {} operations ({unknown} unanswered), {} local reads, {} messages and {} schedules acknowledged; {} deposed nodes rebuilt themselves and {} unready ones were restarted so far; {} findings; {:.1} s ({:.1} s checking)",
        history.ops.len(),
        history.local.len() + history.local_values.len(),
        published.messages.len(),
        published.schedules.len(),
        c.deposed,
        c.restarted_unready,
        findings.len(),
        started.elapsed().as_secs_f64(),
        checked.as_secs_f64()
    );
    findings
}

/// Every node holds the same value for each key; every acknowledged append is in its list
/// once and nothing else is; every list a node answered is a prefix of the final one; every
/// value a node answered for a register was written by someone; a counter counts every
/// acknowledged increment and no more than were sent.
fn check_state(h: &History, finals: &HashMap<String, Vec<serde_json::Value>>) -> Findings {
    let mut f = Findings::new();
    for (key, values) in finals {
        if values.iter().any(|v| v != &values[0]) {
            f.push(format!("diverged: {key} is {values:?} on the three nodes"));
        }
    }
    for (key, values) in finals {
        let Some(last) = values.first() else { continue };
        if key.contains("-l") {
            let list = items(last).unwrap_or_default();
            let mut seen = HashSet::new();
            for i in &list {
                if !seen.insert(i) {
                    f.push(format!("duplicated: {i} is twice in {key}"));
                }
            }
            let sent: HashSet<&str> = ops_of(h, key)
                .filter_map(|r| match &r.op {
                    Op::List(ListInput::Append(v), _) => Some(v.as_str()),
                    _ => None,
                })
                .collect();
            for i in &list {
                if !sent.contains(i.as_str()) {
                    f.push(format!("invented: {i} in {key} was never appended"));
                }
            }
            for r in ops_of(h, key) {
                if let Op::List(ListInput::Append(v), Some(_)) = &r.op {
                    if !seen.contains(v) {
                        f.push(format!(
                            "lost: the acknowledged append of {v} is not in {key}"
                        ));
                    }
                }
            }
            for l in h.local.iter().filter(|l| &l.key == key) {
                if !list.starts_with(&l.items) {
                    f.push(format!(
                        "lost: node {} answered {key} = {:?}, not a prefix of its final {:?}",
                        l.node + 1,
                        l.items,
                        list
                    ));
                }
            }
        } else if key.contains("-r") {
            let written: HashSet<&str> = ops_of(h, key)
                .filter_map(|r| match &r.op {
                    Op::Register(RegisterInput::Write(v), _) => Some(v.as_str()),
                    _ => None,
                })
                .collect();
            for (k, node, v) in h.local_values.iter().filter(|l| &l.0 == key) {
                if let Some(v) = v {
                    if !written.contains(v.as_str()) {
                        f.push(format!(
                            "invented: node {} answered {k} = {v}, never written",
                            node + 1
                        ));
                    }
                }
            }
        } else {
            let value: i64 = text(last)
                .flatten()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            let incrs =
                ops_of(h, key).filter(|r| matches!(r.op, Op::Counter(CounterInput::Incr, _)));
            let acked = incrs.clone().filter(|r| r.ret.is_some()).count() as i64;
            let sent = incrs.count() as i64;
            if value < acked || value > sent {
                f.push(format!(
                    "lost: {key} is {value}, with {acked} increments acknowledged of {sent} sent"
                ));
            }
        }
    }
    f
}

/// The operations on `key`.
fn ops_of<'a>(h: &'a History, key: &'a str) -> impl Iterator<Item = &'a Rec> + Clone {
    h.ops.iter().filter(move |r| r.key == key)
}

fn verdict<M: Model>(
    key: &str,
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
) -> Option<String> {
    match check(model, ops, CHECK_BUDGET) {
        Verdict::Linearizable => None,
        Verdict::Illegal { explanation } => Some(format!(
            "not linearizable: the history of {key} ({} operations):\n{explanation}",
            ops.len()
        )),
        Verdict::Unknown => {
            eprintln!(
                "the checker gave up on {key} ({} operations) after {CHECK_BUDGET} steps",
                ops.len()
            );
            None
        }
    }
}

/// Drops the unanswered writes no one ever saw take effect: an unanswered register write whose
/// value no read (through the cluster or of a node's own state) returned, and an unanswered
/// append whose element no read returned. Either may have happened and been hidden at once
/// (a write overwritten before any read), or happened after the last read, or never: a history
/// with it is linearizable exactly when the history without it is (put it last). Each one kept
/// doubles what the checker may have to search.
fn unseen_dropped(h: &mut History) -> usize {
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for r in &h.ops {
        match &r.op {
            Op::Register(_, Some(RegisterOutput::Value(Some(v)))) => {
                seen.insert((r.key.clone(), v.clone()));
            }
            Op::List(_, Some(ListOutput::Items(items))) => {
                for i in items {
                    seen.insert((r.key.clone(), i.clone()));
                }
            }
            _ => {}
        }
    }
    for l in &h.local {
        for i in &l.items {
            seen.insert((l.key.clone(), i.clone()));
        }
    }
    for (k, _, v) in &h.local_values {
        if let Some(v) = v {
            seen.insert((k.clone(), v.clone()));
        }
    }
    let before = h.ops.len();
    h.ops.retain(|r| match &r.op {
        Op::Register(RegisterInput::Write(v), None) | Op::List(ListInput::Append(v), None) => {
            seen.contains(&(r.key.clone(), v.clone()))
        }
        _ => true,
    });
    before - h.ops.len()
}

/// The records `pick` takes (the input and the answer of one model's operations), as the
/// checker takes them.
fn operations<'a, I: Clone + 'a, O: Clone + 'a>(
    recs: impl Iterator<Item = &'a Rec>,
    pick: impl Fn(&'a Op) -> Option<(&'a I, &'a Option<O>)>,
) -> Vec<Operation<I, O>> {
    recs.filter_map(|r| {
        pick(&r.op).map(|(input, output)| Operation {
            client: r.client,
            input: input.clone(),
            call: r.call,
            output: output.clone(),
            ret: r.ret,
        })
    })
    .collect()
}

/// Each key's history, checked on its own.
fn check_linearizable(h: &History) -> Findings {
    let mut keys: Vec<&str> = h.ops.iter().map(|r| r.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut f = Findings::new();
    for key in keys {
        let recs = h.ops.iter().filter(|r| r.key == key);
        let finding = if key.contains("-r") {
            let ops = operations(recs, |op| match op {
                Op::Register(i, o) => Some((i, o)),
                _ => None,
            });
            verdict(key, &Register, &ops)
        } else if key.contains("-c") {
            let ops = operations(recs, |op| match op {
                Op::Counter(i, o) => Some((i, o)),
                _ => None,
            });
            verdict(key, &Counter, &ops)
        } else {
            let ops = operations(recs, |op| match op {
                Op::List(i, o) => Some((i, o)),
                _ => None,
            });
            verdict(key, &List, &ops)
        };
        f.extend(finding);
    }
    f
}

/// Every acknowledged message is delivered at least once; every acknowledged schedule is on
/// every node.
fn check_deliveries(c: &Cluster, p: &Published) -> Findings {
    let mut f = Findings::new();
    let until = Instant::now() + Duration::from_secs(30);
    let (missing, duplicates) = loop {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for r in c.sink.received() {
            *counts
                .entry(String::from_utf8_lossy(&r.body).into_owned())
                .or_default() += 1;
        }
        let missing: Vec<&String> = p
            .messages
            .iter()
            .filter(|m| !counts.contains_key(*m))
            .collect();
        if missing.is_empty() || Instant::now() > until {
            let duplicates: usize = p
                .messages
                .iter()
                .filter_map(|m| counts.get(m))
                .map(|n| n.saturating_sub(1))
                .sum();
            break (missing.len(), duplicates);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if missing > 0 {
        f.push(format!(
            "lost: {missing} of {} acknowledged messages were not delivered within 30 s",
            p.messages.len()
        ));
    }
    if duplicates > 0 {
        eprintln!(
            "{duplicates} messages were delivered more than once (at least once is the promise)"
        );
    }
    for id in &p.schedules {
        for i in 0..3 {
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                match request(
                    &c.addrs[i],
                    QSTASH_TOKEN,
                    "GET",
                    &format!("/v2/schedules/{id}"),
                    &[],
                    b"",
                ) {
                    Ok((200, _)) => break,
                    other if Instant::now() > until => {
                        f.push(format!(
                            "lost: the acknowledged schedule {id} is not on node {}: {other:?}",
                            i + 1
                        ));
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
    }
    f
}

/// The issue's fault schedules (20 by default, `TIDEPOOL_FAULT_SCHEDULES` for more), each
/// seeded, on one cluster under a mixed load: every acknowledged write survives on every
/// node, no node answers a value later lost, and each key's history is linearizable.
#[test]
fn fault_schedules_keep_every_acknowledged_write_and_stay_linearizable() {
    let (first, count) = seeds();
    eprintln!("fault schedules: seeds {first} to {}", first + count - 1);
    let mut c = Cluster::new("faults", &[]);
    for seed in first..first + count {
        let findings = run_schedule(&mut c, seed, None);
        if !findings.is_empty() {
            eprintln!("the nodes' directories are kept: {}", c.keep_dirs());
        }
        assert!(
            findings.is_empty(),
            "the schedule of seed {seed} ({:?}) found:\n{}\nthe nodes now:\n{}\nrun it again: TIDEPOOL_FAULT_SEED={seed} TIDEPOOL_FAULT_SCHEDULES=1 cargo test --features fault-injection --test it cluster_faults::fault_schedules -- --nocapture",
            fault_of(seed, c.hosts.is_some()),
            findings.join("\n"),
            c.describe()
        );
    }
}

/// The schedules can fail: a leader that answers a write once proposed, before a majority
/// has it (`TIDEPOOL_FAULT_ACK_BEFORE_COMMIT`), loses acknowledged writes when it is cut off
/// and dies, and the checker says the history is not linearizable.
#[cfg(feature = "fault-injection")]
#[test]
fn the_schedules_catch_a_leader_that_acknowledges_before_commit() {
    let (seed, _) = seeds();
    let mut c = Cluster::new("ack-early", &[("TIDEPOOL_FAULT_ACK_BEFORE_COMMIT", "1")]);
    // With hosts, the leader's link is cut: what it sent is lost. Paused followers would keep
    // what it sent in their sockets and might elect a node that got the write after all.
    let fault = if c.hosts.is_some() {
        Fault::CutAndKillLeader
    } else {
        Fault::PauseFollowersKillLeader
    };
    // The probe must reach the leader within its lease (half a second after it is left
    // alone); on a machine too busy for that, the schedule runs again.
    let mut findings = Vec::new();
    for attempt in 0..3 {
        findings = run_schedule(&mut c, seed + attempt, Some(fault));
        if c.probes_acknowledged > 0 {
            break;
        }
    }
    assert!(
        c.probes_acknowledged > 0,
        "seed {seed}: in three schedules the leader never answered the probe within its lease"
    );
    assert!(
        findings.iter().any(|f| f.starts_with("not linearizable")),
        "seed {seed}: the checker did not catch the early acknowledgement; it found {findings:#?}"
    );
    assert!(
        findings.iter().any(|f| f.starts_with("lost")),
        "seed {seed}: no acknowledged write was found lost: {findings:#?}"
    );
}

/// Regression (the fault schedules found it): a follower that knew no leader ran a script
/// itself, so a script's read answered from the follower's state, which the cluster had
/// moved past. It now refuses a script as it refuses a write; a plain GET still answers from
/// its state, as a follower's reads do.
#[test]
fn a_follower_that_knows_no_leader_refuses_a_script_rather_than_answer_from_its_state() {
    let mut c = Cluster::new("leaderless", &[]);
    let leader = c.wait_leader(Duration::from_secs(20)).expect("a leader");
    let (follower, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let set = command(&c.addrs[follower], &["SET", "k", "v"]);
    assert!(
        matches!(&set, Outcome::Value(v) if v == "OK"),
        "{}",
        set.why()
    );
    c.kill(leader);
    c.kill(other);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let status = request(
            &c.addrs[follower],
            ADMIN,
            "GET",
            "/_admin/cluster/status",
            &[],
            b"",
        );
        if let Ok((200, b)) = status {
            let v: serde_json::Value = serde_json::from_slice(&b).expect("status JSON");
            if v["leader"].is_null() || v["leader"] == 0 {
                break;
            }
        }
        assert!(Instant::now() < until, "the follower still names a leader");
        std::thread::sleep(Duration::from_millis(100));
    }
    let script = command(&c.addrs[follower], &["EVAL", READ_GET, "1", "k"]);
    assert!(
        matches!(&script, Outcome::Refused(e) if e.contains("no leader is known")),
        "{}",
        script.why()
    );
    let get = command(&c.addrs[follower], &["GET", "k"]);
    assert!(
        matches!(&get, Outcome::Value(v) if v == "v"),
        "{}",
        get.why()
    );
}

/// Regression (the fault schedules found it): openraft restores a node that led before it
/// was killed as leader of the same term at once, and its state is the snapshot it kept,
/// without the entries after it. That node took itself for a caught-up leader (its snapshot
/// was of its own term) with a lease it was never confirmed: for half a second it answered
/// reads from the snapshot and numbered writes after it. Now it leads only once it has
/// applied every entry of its log, and its lease starts with a quorum's confirmation.
#[test]
fn a_leader_restarted_on_an_old_snapshot_answers_nothing_from_it() {
    let mut c = Cluster::new("restored", &[("TIDEPOOL_CLUSTER_SNAPSHOT_EVERY", "20")]);
    let leader = c.wait_leader(Duration::from_secs(20)).expect("a leader");
    // Forty entries: a snapshot at the twentieth, and the rest after it in the log.
    for n in 0..40 {
        let n = n.to_string();
        let set = command(&c.addrs[leader], &["SET", "k", &n]);
        assert!(
            matches!(&set, Outcome::Value(v) if v == "OK"),
            "{}",
            set.why()
        );
    }
    // With its followers stalled, the restarted leader can commit nothing.
    for i in 0..3 {
        if i != leader {
            c.pause(i, true);
        }
    }
    c.kill(leader);
    c.restart(leader);
    let until = Instant::now() + Duration::from_millis(1500);
    let mut refused = 0;
    while Instant::now() < until {
        match command(&c.addrs[leader], &["EVAL", READ_GET, "1", "k"]) {
            Outcome::Value(v) => {
                assert_eq!(
                    v, "39",
                    "the restarted leader answered from its old snapshot"
                )
            }
            Outcome::Refused(_) => refused += 1,
            Outcome::Unknown(e) => panic!("{e}"),
        }
        let set = command(&c.addrs[leader], &["SET", "late", "1"]);
        assert!(
            matches!(&set, Outcome::Refused(e) if e.contains("takes no writes")),
            "the restarted leader took a write on its old snapshot: {}",
            set.why()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(refused > 0, "no read reached the restarted leader");
    for i in 0..3 {
        if i != leader {
            c.pause(i, false);
        }
    }
    c.heal("restored-healed").expect("the cluster heals");
    c.each_node_reads("k", "39", "");
}

/// A leader restarted on an empty directory must not elect, by its vote, a node that lacks an
/// entry it had helped commit. The write is committed by the leader and one follower while
/// the other is stopped; then that follower is stopped, the leader emptied and restarted, and
/// the lagging node resumes: with the emptied node's vote it would lead and replace the write
/// (found by the fault schedules on 2026-11-27). It may lead only once the follower that holds
/// the write is back, and the write survives.
#[test]
fn an_emptied_leader_elects_no_node_that_lacks_a_write_it_helped_commit() {
    let mut c = Cluster::new("emptied", &[]);
    let leader = c.wait_leader(Duration::from_secs(20)).expect("a leader");
    let lagging = (leader + 1) % 3;
    let holding = (leader + 2) % 3;
    c.pause(lagging, true);
    let set = command(&c.addrs[leader], &["SET", "kept", "1"]);
    assert!(
        matches!(&set, Outcome::Value(v) if v == "OK"),
        "{}",
        set.why()
    );
    c.pause(holding, true);
    c.wipe(leader);
    c.restart(leader);
    c.pause(lagging, false);
    // Several election timeouts: the lagging node stands, and must not win.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_ne!(
            c.leader(),
            Some(lagging),
            "the emptied node's vote elected a node without the committed write"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.pause(holding, false);
    c.heal("emptied-healed").expect("the cluster heals");
    c.each_node_reads("kept", "1", " lost the committed write");
}
