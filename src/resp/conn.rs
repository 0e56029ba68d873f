//! One RESP connection: it reads requests, answers the connection's own commands (AUTH,
//! HELLO, MULTI, WATCH, SUBSCRIBE, MONITOR, CLIENT, ...) itself, and sends the rest to the
//! executor, the commands of one read together as one job (a pipeline costs one hop, as
//! `/pipeline` does). It answers in order, and writes only what it was asked, so a client
//! that reads nothing stops being read (its replies never pile up here); the events of a
//! subscription or a monitor are held to the stream buffer's bound, past which the
//! connection closes, as Redis closes a client past its output buffer limit.
//!
//! On a cluster's follower, a connection whose next command needs the leader's connection
//! state (MULTI, WATCH, a blocking command that may wait, MONITOR, WAIT) moves to the
//! leader: the follower opens `/raft/resp` on the leader's cluster listener with the
//! connection's state (its credential, id, protocol, name, reply mode), hands over that
//! command and every byte it read after it, and from then on carries bytes both ways. The
//! leader runs the connection as one of its own (`moved_in`), which ends when it stops
//! leading.

use super::clients::{Client, Clients, Shown};
use super::read::Reader;
use super::write;
use crate::cluster::network::{Moved, MovedRun, Network, Tunnel};
use crate::command::table::{self, Lookup};
use crate::config;
use crate::executor::cluster::Role as ClusterRole;
use crate::executor::tenants::{acl_token_db, Role};
use crate::executor::{
    Access, Answer, Connection, ExecMode, Job, SessionOp, Shared, StreamItem, SubKind,
    SubscriberHandle, Wire,
};
use crate::reply::Reply;
use crate::state::databases::DbId;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// A connection's byte stream: TCP, or TLS over it.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// What every RESP connection shares.
pub struct Listener {
    pub tx: mpsc::Sender<Job>,
    pub shared: Arc<Shared>,
    pub clients: Clients,
    /// The largest request (`--max-request-bytes`, as over REST).
    pub request_bytes_max: usize,
    /// How long an authenticated connection may stay idle (`RESP_IDLE_TIMEOUT_MS`).
    pub idle_timeout_ms: u64,
    /// A cluster node's role and the way to its leader (set once the node has started).
    pub to_leader: std::sync::OnceLock<ToLeader>,
    /// Connections open at once, accepted here or moved here from a follower.
    slots: Arc<tokio::sync::Semaphore>,
}

/// A cluster node's role, and the way to the other nodes' cluster listeners.
pub struct ToLeader {
    pub role: Arc<ClusterRole>,
    pub network: Network,
    /// Moves being opened at once (`CLUSTER_MOVES_OPENING_MAX`): a burst waits here rather
    /// than past the leader's cluster listener's cap.
    pub opening: Arc<tokio::sync::Semaphore>,
}

impl ToLeader {
    pub fn new(role: Arc<ClusterRole>, network: Network) -> ToLeader {
        ToLeader {
            role,
            network,
            opening: Arc::new(tokio::sync::Semaphore::new(
                config::CLUSTER_MOVES_OPENING_MAX,
            )),
        }
    }
}

impl Listener {
    pub fn new(tx: mpsc::Sender<Job>, shared: Arc<Shared>, request_bytes_max: usize) -> Listener {
        Listener {
            tx,
            shared,
            clients: Clients::default(),
            request_bytes_max,
            idle_timeout_ms: config::RESP_IDLE_TIMEOUT_MS,
            to_leader: std::sync::OnceLock::new(),
            slots: Arc::new(tokio::sync::Semaphore::new(connection_cap())),
        }
    }
}

/// What a follower tells its leader of a connection it moves there.
#[derive(serde::Serialize, serde::Deserialize)]
struct MovedState {
    /// The credential the connection authenticated with (the leader checks it again).
    token: String,
    user: String,
    resp3: bool,
    name: String,
    /// CLIENT REPLY: 0 on, 1 off, 2 skip the next.
    reply_mode: u8,
    /// The client's address, for CLIENT LIST.
    client: String,
    /// The connection's id (ids are the cluster's: each node numbers from its own range).
    #[serde(default)]
    id: u64,
    /// The connection held a WATCH on the follower, whose state may lag: the transaction it
    /// guards fails, as when a watched key changed (its client retries).
    #[serde(default)]
    watch_broken: bool,
}

/// The leader's side of `/raft/resp`: a connection a follower moves here runs as one of this
/// node's own, under this listener's connection cap, authenticated by its credential as this
/// node checks it now. Refused when this node does not lead.
pub fn moved_in(l: Arc<Listener>) -> Tunnel {
    Arc::new(move |bytes: Vec<u8>| {
        let state: MovedState = rmp_serde::from_slice(&bytes)
            .map_err(|e| format!("not a moved connection's state: {e}"))?;
        if let Some(t) = l.to_leader.get().filter(|t| !t.role.leading()) {
            return Err(t.role.refusal());
        }
        let slot = l
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| "max number of clients reached".to_string())?;
        let l = l.clone();
        let run: MovedRun = Box::new(move |mut io: Moved| {
            Box::pin(async move {
                let peer = state
                    .client
                    .parse()
                    .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                let metrics = &l.shared.metrics;
                metrics.resp_connections_opened.inc();
                metrics.resp_connections.inc();
                let local = format!("{peer} (moved from a follower)");
                let mut c = Conn::with_id(l.clone(), state.id, peer, local);
                if c.resume(state).await {
                    c.run(&mut io).await;
                } else {
                    let refused = b"-WRONGPASS the leader refused this connection's credential\r\n";
                    let _ = tokio::io::AsyncWriteExt::write_all(&mut io, refused).await;
                }
                c.close().await;
                l.shared.metrics.resp_connections.dec();
                drop(slot);
            })
        });
        Ok(run)
    })
}

/// Accepts connections until `shutdown`; past `RESP_CONNECTIONS_MAX` open ones a new one
/// gets Redis's refusal and is closed.
pub async fn serve(
    listener: TcpListener,
    l: Arc<Listener>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let slots = l.slots.clone();
    loop {
        let (mut stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    crate::log::line(&format!("warning: RESP accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(config::HTTP_ACCEPT_RETRY_MS)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                let write = stream.write_all(b"-ERR max number of clients reached\r\n");
                let limit = Duration::from_millis(config::HTTP_REFUSAL_WRITE_TIMEOUT_MS);
                let _ = tokio::time::timeout(limit, write).await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let l = l.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let local = stream
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let metrics = &l.shared.metrics;
            metrics.resp_connections_opened.inc();
            metrics.resp_connections.inc();
            let mut c = Conn::new(l.clone(), peer, local);
            match tls {
                None => c.run(&mut stream).await,
                Some(acceptor) => {
                    // A handshake is a request head: it must end in time.
                    let limit = Duration::from_millis(config::RESP_REQUEST_TIMEOUT_MS);
                    if let Ok(Ok(mut s)) =
                        tokio::time::timeout(limit, acceptor.accept(stream)).await
                    {
                        c.run(&mut s).await;
                    }
                }
            }
            c.close().await;
            l.shared.metrics.resp_connections.dec();
            drop(slot);
        });
    }
}

/// How many RESP connections may be open at once: `RESP_CONNECTIONS_MAX`, or fewer when the
/// process may open fewer descriptors (half of what is left after the reserve: the HTTP
/// listener counts on the same descriptors).
fn connection_cap() -> usize {
    let by_descriptors = match crate::sys::open_files_limit() {
        Some(n) => (n as usize).saturating_sub(config::HTTP_DESCRIPTORS_RESERVED) / 2,
        None => config::RESP_CONNECTIONS_MAX,
    };
    config::RESP_CONNECTIONS_MAX.min(by_descriptors).max(1)
}

/// Who a connection authenticated as.
#[derive(Clone)]
struct Auth {
    db: DbId,
    access: Access,
    /// The credential presented: it is checked again when credentials change.
    token: String,
    user: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReplyMode {
    On,
    Off,
    /// The next command's reply is skipped.
    Skip,
}

/// What ends the connection after the current replies are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Go,
    Close,
    /// The connection moves to the leader (see the module's doc), with `Conn::moving`.
    Move,
}

/// A connection's own command that a transaction queues and EXEC runs in its place, as Redis
/// does: AUTH, HELLO, SELECT, UNWATCH, CLIENT, the subscription commands, and MONITOR and
/// SSUBSCRIBE (which EXEC refuses, as a client in EXEC may not block).
fn queued_own(args: &[Vec<u8>]) -> bool {
    let name = args
        .first()
        .map(|n| n.to_ascii_lowercase())
        .unwrap_or_default();
    matches!(
        name.as_slice(),
        b"auth"
            | b"hello"
            | b"select"
            | b"unwatch"
            | b"monitor"
            | b"client"
            | b"subscribe"
            | b"psubscribe"
            | b"ssubscribe"
            | b"unsubscribe"
            | b"punsubscribe"
            | b"sunsubscribe"
    )
}

/// A connection's subscription streams: channels, patterns, shard channels and the monitor
/// each register with the executor as one stream, sharing one queue.
struct Events {
    rx: mpsc::Receiver<StreamItem>,
    tx: mpsc::Sender<StreamItem>,
    lagged: Arc<AtomicBool>,
    queued: Arc<AtomicUsize>,
    /// Stream ids of channels, patterns, shard channels, monitor (0: not registered).
    ids: [u64; 4],
}

struct Conn {
    l: Arc<Listener>,
    id: u64,
    peer: Arc<str>,
    me: Arc<Client>,
    auth: Option<Auth>,
    reader: Reader,
    resp3: bool,
    name: String,
    multi: Option<Vec<Vec<Vec<u8>>>>,
    multi_failed: bool,
    watching: bool,
    channels: Vec<Vec<u8>>,
    patterns: Vec<Vec<u8>>,
    shards: Vec<Vec<u8>>,
    monitor: bool,
    events: Option<Events>,
    reply_mode: ReplyMode,
    /// EXEC is writing its replies (see `writing`).
    in_exec: bool,
    credentials_seen: u64,
    out: Vec<u8>,
    /// Plain commands of the current read, not yet sent to the executor.
    batch: Vec<Vec<Vec<u8>>>,
    /// Bytes read while a command was blocked, for the next requests.
    carry: Vec<u8>,
    /// The last command's name (CLIENT LIST's `cmd`), kept here and shown once per read.
    last_command: Vec<u8>,
    /// On a follower, the requests that go to the leader with the connection, as RESP.
    moving: Vec<u8>,
    /// On the leader, a connection a follower moved here: it ends when this node stops
    /// leading.
    moved_in: bool,
    /// A WATCH the connection held before it moved here: its transaction fails.
    watch_broken: bool,
}

impl Conn {
    fn new(l: Arc<Listener>, peer: SocketAddr, local: String) -> Conn {
        Conn::with_id(l, 0, peer, local)
    }

    /// A connection with id `id` (0: a new one).
    fn with_id(l: Arc<Listener>, id: u64, peer: SocketAddr, local: String) -> Conn {
        let id = match id {
            0 => l.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            id => id,
        };
        let me = Arc::new(Client {
            id,
            addr: peer.to_string(),
            laddr: local,
            created: Instant::now(),
            shown: std::sync::Mutex::new(Shown {
                resp: 2,
                multi: -1,
                ..Shown::default()
            }),
            last_active: std::sync::Mutex::new(Instant::now()),
            killed: AtomicBool::new(false),
            kill: tokio::sync::Notify::new(),
        });
        l.clients.add(me.clone());
        let mut reader = Reader::new();
        reader.request_bytes_max = l.request_bytes_max;
        let credentials_seen = l.shared.credentials.generation.load(Ordering::Acquire);
        Conn {
            id,
            peer: Arc::from(peer.to_string()),
            me,
            auth: None,
            reader,
            resp3: false,
            name: String::new(),
            multi: None,
            multi_failed: false,
            watching: false,
            channels: Vec::new(),
            patterns: Vec::new(),
            shards: Vec::new(),
            monitor: false,
            events: None,
            reply_mode: ReplyMode::On,
            in_exec: false,
            credentials_seen,
            out: Vec::new(),
            batch: Vec::new(),
            carry: Vec::new(),
            last_command: Vec::new(),
            moving: Vec::new(),
            moved_in: false,
            watch_broken: false,
            l,
        }
    }

    /// A connection moved here: as the follower had it, once its credential holds here.
    async fn resume(&mut self, s: MovedState) -> bool {
        let Some((db, access)) = self.check_credential(&s.token).await else {
            return false;
        };
        self.authenticated(Auth {
            db,
            access,
            token: s.token,
            user: s.user,
        });
        self.resp3 = s.resp3;
        if valid_name(s.name.as_bytes()).is_ok() {
            self.name = s.name;
        }
        self.watch_broken = s.watch_broken;
        self.reply_mode = match s.reply_mode {
            1 => ReplyMode::Off,
            2 => ReplyMode::Skip,
            _ => ReplyMode::On,
        };
        self.moved_in = true;
        self.show();
        true
    }

    /// Whether `args` moves this connection to the leader: on a follower that knows its
    /// leader, a command whose state lives on the connection's node (MULTI, WATCH, a blocking
    /// command that may wait, MONITOR, WAIT), of an authenticated connection with no
    /// subscription, monitor or transaction here (a WATCH held here goes as a broken one).
    fn moves(&self, args: &[Vec<u8>]) -> bool {
        let Some(t) = self.l.to_leader.get() else {
            return false;
        };
        if self.auth.is_none()
            || self.monitor
            || self.subscribed()
            || self.multi.is_some()
            || t.role.leading()
            || !t.role.leader_addr.read().is_ok_and(|a| a.is_some())
        {
            return false;
        }
        let Lookup::Found(info) = table::global().lookup(args) else {
            return false;
        };
        if !info.arity_ok(args.len()) {
            return false;
        }
        match info.name.as_str() {
            "multi" | "watch" | "monitor" | "wait" => true,
            _ => info.blocking && crate::command::blocking::wait_ms(args).is_some(),
        }
    }

    /// Moves the connection to the leader (see the module's doc) and carries its bytes both
    /// ways until either side closes, the connection is killed here, or another node leads.
    async fn move_to_leader<S: Stream>(&mut self, stream: &mut S, first: Vec<u8>) {
        let (Some(t), Some(a)) = (self.l.to_leader.get(), self.auth.clone()) else {
            return;
        };
        let Some(addr) = t.role.leader_addr.read().ok().and_then(|a| a.clone()) else {
            return;
        };
        let state = MovedState {
            token: a.token,
            user: a.user,
            resp3: self.resp3,
            name: self.name.clone(),
            reply_mode: match self.reply_mode {
                ReplyMode::On => 0,
                ReplyMode::Off => 1,
                ReplyMode::Skip => 2,
            },
            client: self.peer.to_string(),
            id: self.id,
            watch_broken: self.watching,
        };
        let Ok(_opening) = t.opening.acquire().await else {
            return;
        };
        let same_leader = || {
            t.role
                .leader_addr
                .read()
                .is_ok_and(|l| l.as_deref() == Some(addr.as_str()))
        };
        let opened = match rmp_serde::to_vec_named(&state) {
            Ok(b) => {
                // A leader that stopped answering (frozen, cut off) is waited for only until
                // this node follows another one, not the whole CLUSTER_FORWARD_TIMEOUT_MS.
                let open = t.network.open_moved(&addr, b);
                tokio::pin!(open);
                let mut check =
                    tokio::time::interval(Duration::from_millis(config::CLUSTER_HEARTBEAT_MS));
                loop {
                    tokio::select! {
                        r = &mut open => break r,
                        _ = check.tick() => {
                            if !same_leader() {
                                break Err("this node follows that leader no more (another is elected, or is being): send the command again".into());
                            }
                        }
                    }
                }
            }
            Err(e) => Err(e.to_string()),
        };
        drop(_opening);
        let mut leader = match opened {
            Ok(u) => u,
            Err(e) => {
                self.put_plain(Reply::Error(format!(
                    "ERR this node is a follower and could not move the connection to the leader at {addr}: {e}"
                )));
                let _ = self.write_out(stream).await;
                return;
            }
        };
        self.l.shared.metrics.resp_connections_moved.inc();
        if leader.write_all(&first).await.is_err() {
            return;
        }
        let me = self.me.clone();
        let mut check = tokio::time::interval(Duration::from_millis(
            config::CLUSTER_ELECTION_TIMEOUT_MIN_MS,
        ));
        // Either side's end ends the connection (the leader's closing it, or the client's),
        // as a Redis server closes a client that closed; what one side wrote before its end
        // has been passed on.
        let (mut client_in, mut client_out) = tokio::io::split(stream);
        let (mut leader_in, mut leader_out) = tokio::io::split(leader);
        let up = tokio::io::copy(&mut client_in, &mut leader_out);
        let down = tokio::io::copy(&mut leader_in, &mut client_out);
        tokio::pin!(up, down);
        loop {
            tokio::select! {
                _ = &mut up => return,
                _ = &mut down => return,
                _ = me.kill.notified() => return,
                _ = check.tick() => {
                    // A leader this node no longer follows (it died, or was deposed and the
                    // connection with it) may never close its side: the client reconnects.
                    if !same_leader() {
                        return;
                    }
                }
            }
        }
    }

    /// Forgets the connection: its watch, its wait, its streams.
    async fn close(&mut self) {
        self.l.clients.remove(self.id);
        let _ = self.l.tx.try_send(Job::Session {
            conn: self.id,
            op: SessionOp::Closed,
        });
        self.drop_streams();
    }

    fn drop_streams(&mut self) {
        if let (Some(ev), Some(a)) = (self.events.take(), &self.auth) {
            for id in ev.ids.into_iter().filter(|i| *i != 0) {
                let _ = self.l.tx.try_send(Job::Unsubscribe { db: a.db, id });
            }
        }
        self.channels.clear();
        self.patterns.clear();
        self.shards.clear();
        self.monitor = false;
    }

    fn subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty() || !self.shards.is_empty()
    }

    async fn run<S: Stream>(&mut self, stream: &mut S) {
        let mut buf: Vec<u8> = Vec::with_capacity(config::RESP_READ_BYTES);
        // When the request being read began: it must end within RESP_REQUEST_TIMEOUT_MS
        // however its bytes trickle in.
        let mut begun: Option<tokio::time::Instant> = None;
        loop {
            // Every whole request read so far, up to a batch's worth.
            let mut at = 0;
            let mut requests = Vec::new();
            let mut failed = None;
            while requests.len() < config::RESP_PIPELINE_COMMANDS_MAX {
                match self.reader.next_at(&buf, &mut at) {
                    Ok(Some(r)) => requests.push(r),
                    Ok(None) => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            buf.drain(..at);
            if !requests.is_empty() {
                // What is left is the beginning of a new request.
                begun = None;
                if let Ok(mut t) = self.me.last_active.lock() {
                    *t = Instant::now();
                }
                let then = self.handle(requests, stream).await;
                // Idle time counts from the last answer: a blocking wait is not idleness.
                if let Ok(mut t) = self.me.last_active.lock() {
                    *t = Instant::now();
                }
                if then == Then::Move {
                    // The leader gets the moving requests, the one begun, and every byte read.
                    let mut first = std::mem::take(&mut self.moving);
                    first.extend_from_slice(&self.reader.take_partial());
                    first.append(&mut buf);
                    first.append(&mut self.carry);
                    if self.write_out(stream).await {
                        self.move_to_leader(stream, first).await;
                    }
                    return;
                }
                // What arrived while a command was blocked follows what was read before, and
                // is read now: it may end a request begun before the wait.
                let carried = !self.carry.is_empty();
                if carried {
                    buf.append(&mut self.carry);
                }
                if !self.write_out(stream).await || then == Then::Close {
                    return;
                }
                // Some requests may still be whole in the buffer.
                if failed.is_none() && (carried || !buf.is_empty() && !self.reader.in_request()) {
                    continue;
                }
            }
            if let Some(e) = failed {
                // Redis answers the protocol error, then closes.
                Reply::Error(e.reply_text()).write_resp2(&mut self.out);
                let _ = self.write_out(stream).await;
                return;
            }
            if buf.capacity() > config::RESP_READ_BYTES * 4 && buf.len() < config::RESP_READ_BYTES {
                buf.shrink_to(config::RESP_READ_BYTES);
            }
            // Wait for more input, an event, a kill or a change of credentials.
            let partial = self.reader.in_request() || !buf.is_empty();
            if !partial {
                begun = None;
            }
            let now = tokio::time::Instant::now();
            let limit = if partial {
                let since = *begun.get_or_insert(now);
                let left = Duration::from_millis(config::RESP_REQUEST_TIMEOUT_MS)
                    .saturating_sub(now.saturating_duration_since(since));
                Some(left.as_millis() as u64)
            } else if self.auth.is_none() {
                Some(config::RESP_UNAUTHENTICATED_IDLE_MS)
            } else if self.subscribed() || self.monitor {
                None
            } else {
                // From the last answer, not from this wait's start: a moved connection's
                // wait is cut short to look at the node's role.
                let idle = self
                    .me
                    .last_active
                    .lock()
                    .map(|t| t.elapsed())
                    .unwrap_or_default();
                Some(
                    self.l
                        .idle_timeout_ms
                        .saturating_sub(idle.as_millis() as u64),
                )
            };
            let shared = self.l.shared.clone();
            let me = self.me.clone();
            let changed = shared.credentials.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.me.killed.load(Ordering::Acquire) {
                return;
            }
            if !self.credentials_hold().await {
                return;
            }
            buf.reserve(config::RESP_READ_BYTES);
            let sleep = tokio::time::sleep(Duration::from_millis(limit.unwrap_or(u64::MAX / 4)));
            tokio::pin!(sleep);
            tokio::select! {
                r = stream.read_buf(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
                item = next_event(&mut self.events) => {
                    if !self.write_event(item) || !self.drain_events() {
                        let _ = self.write_out(stream).await;
                        return;
                    }
                    if !self.write_out(stream).await {
                        return;
                    }
                }
                _ = me.kill.notified() => return,
                _ = &mut changed => {}
                _ = &mut sleep, if limit.is_some() => return,
                _ = tokio::time::sleep(Duration::from_millis(config::CLUSTER_HEARTBEAT_MS)), if self.moved_in => {
                    if self.l.to_leader.get().is_some_and(|t| !t.role.leading()) {
                        return;
                    }
                }
            }
        }
    }

    /// Whether the connection's credential still holds; checked when credentials changed.
    async fn credentials_hold(&mut self) -> bool {
        let now = self.l.shared.credentials.generation.load(Ordering::Acquire);
        if now == self.credentials_seen {
            return true;
        }
        self.credentials_seen = now;
        let Some(a) = self.auth.clone() else {
            return true;
        };
        match self.check_credential(&a.token).await {
            Some((db, access)) if db == a.db && access == a.access => {}
            _ => return false,
        }
        // An ACL user's channel rules may have changed: its subscriptions and its monitor must
        // still be allowed, or the connection closes, as Redis closes it.
        if matches!(a.access, Access::Token(_)) {
            let with = |cmd: &str, names: &[Vec<u8>]| {
                let mut args = vec![cmd.as_bytes().to_vec()];
                args.extend(names.iter().cloned());
                args
            };
            let mut asks = Vec::new();
            if !self.channels.is_empty() {
                asks.push(with("SUBSCRIBE", &self.channels));
            }
            if !self.patterns.is_empty() {
                asks.push(with("PSUBSCRIBE", &self.patterns));
            }
            if !self.shards.is_empty() {
                asks.push(with("SSUBSCRIBE", &self.shards));
            }
            if self.monitor {
                asks.push(with("MONITOR", &[]));
            }
            for args in asks {
                if !self.permits(&a, args).await {
                    return false;
                }
            }
        }
        true
    }

    /// Whether the executor allows `args` to this connection's user now.
    async fn permits(&self, a: &Auth, args: Vec<Vec<u8>>) -> bool {
        let (reply, rx) = oneshot::channel();
        let op = SessionOp::Check {
            db: a.db,
            access: a.access.clone(),
            args,
            reply,
        };
        if self
            .l
            .tx
            .send(Job::Session { conn: self.id, op })
            .await
            .is_err()
        {
            return false;
        }
        matches!(rx.await, Ok(Ok(())))
    }

    /// The database and access a token opens now.
    async fn check_credential(&self, token: &str) -> Option<(DbId, Access)> {
        if token.is_empty() {
            return None;
        }
        if let Some((db, role)) = self.l.shared.lookup_token(token) {
            let access = match role {
                Role::Standard => Access::Full,
                Role::ReadOnly => Access::ReadOnly,
            };
            return Some((db, access));
        }
        let db = acl_token_db(token)?;
        let token: Arc<str> = Arc::from(token);
        let (reply, rx) = oneshot::channel();
        self.l
            .tx
            .send(Job::CheckToken {
                db,
                token: token.clone(),
                reply,
            })
            .await
            .ok()?;
        rx.await.ok()?.then_some((db, Access::Token(token)))
    }

    /// Writes what is buffered; false when the connection is gone.
    async fn write_out<S: Stream>(&mut self, stream: &mut S) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let ok = stream.write_all(&self.out).await.is_ok();
        self.out.clear();
        if self.out.capacity() > config::RESP_READ_BYTES * 4 {
            self.out.shrink_to(config::RESP_READ_BYTES);
        }
        ok
    }

    /// Writes one event; false when the stream fell behind or ended.
    fn write_event(&mut self, item: Option<StreamItem>) -> bool {
        match item {
            Some(StreamItem::Event(b)) => {
                if let Some(ev) = &self.events {
                    ev.queued.fetch_sub(b.len(), Ordering::AcqRel);
                }
                self.out.extend_from_slice(&b);
                true
            }
            Some(StreamItem::End(_)) | None => false,
        }
    }

    /// Writes the events already queued; false when the stream fell behind.
    fn drain_events(&mut self) -> bool {
        while let Some(item) = self.events.as_mut().and_then(|ev| ev.rx.try_recv().ok()) {
            if !self.write_event(Some(item)) {
                return false;
            }
            if self.out.len() > config::RESP_READ_BYTES * 4 {
                break;
            }
        }
        !self
            .events
            .as_ref()
            .is_some_and(|e| e.lagged.load(Ordering::Acquire))
    }

    /// Whether the next reply is written: not while CLIENT REPLY turned replies off, nor the
    /// one that a CLIENT REPLY SKIP skips. Inside EXEC every element is written, and a SKIP
    /// given there skips the command after EXEC, as in Redis.
    fn writing(&mut self) -> bool {
        match self.reply_mode {
            ReplyMode::On => true,
            ReplyMode::Off => false,
            ReplyMode::Skip if self.in_exec => true,
            ReplyMode::Skip => {
                self.reply_mode = ReplyMode::On;
                false
            }
        }
    }

    /// Writes a reply, unless CLIENT REPLY turned replies off.
    fn put(&mut self, r: &Reply, shape: write::Shape) {
        if self.writing() {
            write::reply(&mut self.out, r, self.resp3, shape);
        }
    }

    fn put_plain(&mut self, r: Reply) {
        self.put(&r, write::Shape::Plain);
    }

    /// A command refused before it runs. An EXEC refused so ends its transaction, with
    /// Redis's EXECABORT text around the reason.
    async fn refuse(&mut self, name: &[u8], error: String) {
        if name == b"exec" {
            self.multi = None;
            self.multi_failed = false;
            if std::mem::take(&mut self.watching) {
                self.session(SessionOp::Unwatch).await;
            }
            // Redis formats its own refusals there without their ERR.
            let reason = error.strip_prefix("ERR ").unwrap_or(&error);
            self.put_plain(Reply::Error(format!(
                "EXECABORT Transaction discarded because of: {reason}"
            )));
        } else {
            self.put_plain(Reply::Error(error));
        }
    }

    /// Answers the requests of one read, in order.
    async fn handle<S: Stream>(&mut self, requests: Vec<Vec<Vec<u8>>>, stream: &mut S) -> Then {
        self.l
            .shared
            .metrics
            .resp_commands
            .inc_by(requests.len() as u64);
        let mut requests = requests.into_iter();
        while let Some(args) = requests.next() {
            if self.moves(&args) {
                // What came before is answered here; this and what follows, by the leader.
                self.flush_batch().await;
                super::read::encode_request(&mut self.moving, &args);
                for rest in requests {
                    super::read::encode_request(&mut self.moving, &rest);
                }
                return Then::Move;
            }
            if self.command(args, stream).await == Then::Close {
                self.flush_batch().await;
                return Then::Close;
            }
        }
        self.flush_batch().await;
        self.show();
        Then::Go
    }

    /// Keeps CLIENT LIST's view of this connection up to date.
    fn show(&self) {
        if let Ok(mut s) = self.me.shown.lock() {
            s.db = self.auth.as_ref().map(|a| a.db);
            let user = self.auth.as_ref().map_or("default", |a| a.user.as_str());
            if s.user != user {
                s.user = user.to_string();
            }
            if s.name != self.name {
                s.name.clone_from(&self.name);
            }
            s.resp = if self.resp3 { 3 } else { 2 };
            s.subscriptions = self.channels.len();
            s.patterns = self.patterns.len();
            s.shard_subscriptions = self.shards.len();
            s.multi = self.multi.as_ref().map_or(-1, |m| m.len() as i64);
            s.monitor = self.monitor;
            if s.last_command.as_bytes() != self.last_command.as_slice() {
                s.last_command = String::from_utf8_lossy(&self.last_command).into_owned();
            }
        }
    }

    /// One request.
    async fn command<S: Stream>(&mut self, args: Vec<Vec<u8>>, stream: &mut S) -> Then {
        let name = args[0].to_ascii_lowercase();
        self.last_command.clear();
        self.last_command.extend_from_slice(&name);
        // Before AUTH only AUTH, HELLO and QUIT.
        if self.auth.is_none() && !matches!(name.as_slice(), b"auth" | b"hello" | b"quit") {
            self.flush_batch().await;
            self.refuse(&name, "NOAUTH Authentication required.".to_string())
                .await;
            return Then::Go;
        }
        // A monitoring connection is a replica to Redis, and a replica may not touch the
        // keyspace: a command flagged readonly, write or may_replicate is refused (after
        // the checks of its name and arity, which the executor makes), and inside MULTI
        // it fails the transaction as a refused command does.
        if self.monitor {
            if let Lookup::Found(info) = table::global().lookup(&args) {
                // Redis's may_replicate flag, which COMMAND does not show: the scripts that
                // may write, and the publishes.
                let may_replicate = matches!(
                    info.name.as_str(),
                    "eval" | "evalsha" | "fcall" | "publish" | "spublish"
                );
                if info.arity_ok(args.len())
                    && (may_replicate
                        || info
                            .flags
                            .iter()
                            .any(|f| matches!(f.as_str(), "readonly" | "write")))
                {
                    self.flush_batch().await;
                    if self.multi.is_some() {
                        self.multi_failed = true;
                    }
                    self.put_plain(Reply::err("ERR Replica can't interact with the keyspace"));
                    return Then::Go;
                }
            }
        }
        // A subscribed RESP2 connection runs only the subscription commands, PING, QUIT and
        // RESET.
        if self.subscribed()
            && !self.resp3
            && !matches!(
                name.as_slice(),
                b"subscribe"
                    | b"psubscribe"
                    | b"ssubscribe"
                    | b"unsubscribe"
                    | b"punsubscribe"
                    | b"sunsubscribe"
                    | b"ping"
                    | b"quit"
                    | b"reset"
            )
        {
            self.refuse(&name, format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                String::from_utf8_lossy(&name)
            )).await;
            return Then::Go;
        }
        let own = queued_own(&args)
            || matches!(
                name.as_slice(),
                b"quit" | b"reset" | b"multi" | b"exec" | b"discard" | b"watch"
            )
            || (name.as_slice() == b"ping" && self.subscribed() && !self.resp3);
        if self.multi.is_some()
            && !matches!(
                name.as_slice(),
                b"exec" | b"discard" | b"multi" | b"watch" | b"quit" | b"reset"
            )
        {
            // The connection's own commands are queued like the others, and EXEC runs them
            // in their places.
            return self.queue(args).await;
        }
        if !own {
            return self.plain(args, stream).await;
        }
        self.flush_batch().await;
        if !matches!(
            name.as_slice(),
            b"auth" | b"hello" | b"quit" | b"reset" | b"ping"
        ) {
            if let Err(r) = self.check(&args).await {
                // A command refused inside MULTI fails the transaction, and a refused EXEC
                // ends it, as Redis refuses them.
                if self.multi.is_some() {
                    self.multi_failed = true;
                }
                match r {
                    Reply::Error(e) => self.refuse(&name, e).await,
                    other => self.put_plain(other),
                }
                return Then::Go;
            }
        }
        match name.as_slice() {
            b"auth" => self.auth_command(&args).await,
            b"hello" => self.hello(&args).await,
            b"quit" => {
                self.put_plain(Reply::ok());
                return Then::Close;
            }
            b"reset" => self.reset().await,
            b"select" => self.select(&args),
            b"multi" => self.multi_command(&args),
            b"exec" => return self.exec_command(&args).await,
            b"discard" => self.discard(&args).await,
            b"watch" => self.watch(args).await,
            b"unwatch" if args.len() != 1 => {
                self.put_plain(Reply::Error(crate::reply::errors::wrong_arity("unwatch")))
            }
            b"unwatch" => {
                self.watch_broken = false;
                if self.watching {
                    self.session(SessionOp::Unwatch).await;
                    self.watching = false;
                }
                self.put_plain(Reply::ok());
            }
            b"subscribe" | b"psubscribe" | b"ssubscribe" => self.subscribe(&name, args).await,
            b"unsubscribe" | b"punsubscribe" | b"sunsubscribe" => {
                self.unsubscribe(&name, args).await
            }
            b"ping" => {
                // RESP2 in subscribed mode: PING answers as a message.
                let arg = args.get(1).cloned().unwrap_or_default();
                if args.len() > 2 {
                    self.put_plain(Reply::Error(crate::reply::errors::wrong_arity("ping")));
                } else {
                    self.put_plain(Reply::Array(vec![Reply::bulk("pong"), Reply::Bulk(arg)]));
                }
            }
            b"monitor" => self.monitor_command().await,
            b"client" => return self.client(&args).await,
            _ => {}
        }
        Then::Go
    }

    /// A command for the executor: kept for the batch, or (a blocking one, SCRIPT KILL) run
    /// on its own.
    async fn plain<S: Stream>(&mut self, args: Vec<Vec<u8>>, stream: &mut S) -> Then {
        let Lookup::Found(info) = table::global().lookup(&args) else {
            self.batch.push(args);
            return Then::Go;
        };
        if let (Some(what), Some(a)) = (table::global().interrupt_of(&args), self.auth.clone()) {
            if a.access == Access::Full {
                self.flush_batch().await;
                self.kill(what, a, args).await;
                return Then::Go;
            }
        }
        if info.blocking {
            if let Some(wait) = crate::command::blocking::wait_ms(&args) {
                self.flush_batch().await;
                return self.blocking(args, wait, stream).await;
            }
        }
        if info.name == "wait" && self.l.to_leader.get().is_some_and(|t| t.role.leading()) {
            self.flush_batch().await;
            return self.wait_replicas(args, stream).await;
        }
        self.batch.push(args);
        Then::Go
    }

    /// SCRIPT KILL or FUNCTION KILL: answered at once while a script of the database runs;
    /// otherwise sent to the executor, and while it waits there (behind a script that started
    /// meanwhile) it keeps watching for a script to stop, as the REST side does.
    async fn kill(&mut self, what: crate::lua::Interrupt, a: Auth, args: Vec<Vec<u8>>) {
        let scripts = self.l.shared.scripts.clone();
        if let Some(r) = scripts.kill(what, a.db) {
            self.put_plain(r);
            return;
        }
        let (job, rx) = self.job(a.db, a.access, vec![args], ExecMode::Each, false);
        if self.l.tx.send(job).await.is_err() {
            self.put_plain(Reply::err("ERR the server is shutting down"));
            return;
        }
        tokio::pin!(rx);
        let poll = Duration::from_millis(config::SCRIPT_KILL_POLL_MS);
        let r = loop {
            tokio::select! {
                answer = &mut rx => break match answer {
                    Ok(Answer { replies: Ok(mut r), .. }) => r.pop().unwrap_or(Reply::Nil),
                    Ok(Answer { replies: Err(e), .. }) => Reply::Error(e),
                    Err(_) => Reply::err("ERR the server is shutting down"),
                },
                _ = tokio::time::sleep(poll) => {
                    if let Some(r) = scripts.kill(what, a.db) {
                        break r;
                    }
                }
            }
        };
        self.put_plain(r);
    }

    /// This connection's `Exec` job for `cmds`, and where its answer comes.
    fn job(
        &self,
        db: DbId,
        access: Access,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        may_block: bool,
    ) -> (Job, oneshot::Receiver<Answer>) {
        let (reply, rx) = oneshot::channel();
        let job = Job::Exec {
            db,
            cmds,
            mode,
            access,
            client: self.peer.clone(),
            reply,
            connection: Some(Connection {
                id: self.id,
                may_block,
            }),
        };
        (job, rx)
    }

    /// Sends the batch to the executor and writes its replies.
    async fn flush_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let cmds = std::mem::take(&mut self.batch);
        let shapes: Vec<write::Shape> = if self.resp3 {
            cmds.iter().map(|c| write::shape(c)).collect()
        } else {
            Vec::new()
        };
        let n = cmds.len();
        match self.exec(cmds, ExecMode::Each, false).await {
            Some(Answer {
                replies: Ok(replies),
                ..
            }) => {
                for (i, r) in replies.iter().enumerate() {
                    let shape = shapes.get(i).copied().unwrap_or(write::Shape::Plain);
                    self.put(r, shape);
                }
            }
            Some(Answer {
                replies: Err(e), ..
            }) => {
                for _ in 0..n {
                    self.put_plain(Reply::Error(e.clone()));
                }
            }
            None => {
                for _ in 0..n {
                    self.put_plain(Reply::err("ERR the server is shutting down"));
                }
            }
        }
    }

    /// Runs commands in the executor. None when the server is going away; an unauthorized
    /// answer (the credential was revoked) kills the connection.
    async fn exec(
        &mut self,
        cmds: Vec<Vec<Vec<u8>>>,
        mode: ExecMode,
        may_block: bool,
    ) -> Option<Answer> {
        let a = self.auth.as_ref()?;
        let (job, rx) = self.job(a.db, a.access.clone(), cmds, mode, may_block);
        self.l.tx.send(job).await.ok()?;
        let answer = rx.await.ok()?;
        if answer.unauthorized {
            self.me.kill();
        }
        Some(answer)
    }

    /// A blocking command: its try now, then (when it found nothing) its wait, until a write
    /// serves it or `wait_ms` passes (0: no limit).
    async fn blocking<S: Stream>(
        &mut self,
        args: Vec<Vec<u8>>,
        wait_ms: u64,
        stream: &mut S,
    ) -> Then {
        let shape = if self.resp3 {
            write::shape(&args)
        } else {
            write::Shape::Plain
        };
        let Some(a) = self.auth.clone() else {
            return Then::Go;
        };
        // The replies before it leave now, not after the wait.
        if !self.write_out(stream).await {
            return Then::Close;
        }
        let (job, rx) = self.job(a.db, a.access.clone(), vec![args], ExecMode::Each, true);
        if self.l.tx.send(job).await.is_err() {
            self.put_plain(Reply::err("ERR the server is shutting down"));
            return Then::Go;
        }
        if let Ok(mut s) = self.me.shown.lock() {
            s.blocked = true;
        }
        let me = self.me.clone();
        tokio::pin!(rx);
        let deadline =
            (wait_ms > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(wait_ms));
        let sleep =
            tokio::time::sleep_until(deadline.unwrap_or_else(|| {
                tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
            }));
        tokio::pin!(sleep);
        // The client may send more meanwhile (kept for after), or close: a closed client
        // stops waiting, so that no write is served to it.
        let mut carry = std::mem::take(&mut self.carry);
        let shared = self.l.shared.clone();
        // Closed by the server (a revoked credential, CLIENT KILL) rather than by the client:
        // an answer the command was served with just before (a value popped, its reply
        // waiting for the sync) is still written, and then the connection closes.
        let mut close_after = false;
        let answer = loop {
            if carry.len()
                > self
                    .l
                    .request_bytes_max
                    .saturating_add(config::RESP_READ_BYTES)
            {
                self.session(SessionOp::Closed).await;
                break None;
            }
            // A credential revoked while the command waits (its user deleted, disabled or
            // given a new password) closes the connection now, as it closes an idle one.
            let changed = shared.credentials.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.credentials_hold().await {
                self.session(SessionOp::Closed).await;
                close_after = true;
                break rx.await.ok();
            }
            carry.reserve(config::RESP_READ_BYTES);
            tokio::select! {
                biased;
                r = &mut rx => break r.ok(),
                _ = &mut changed => {}
                _ = &mut sleep, if deadline.is_some() => {
                    // Its time ran out: the executor answers its nil, or the reply it was
                    // served with just before.
                    self.session(SessionOp::Unblock(None)).await;
                    break rx.await.ok();
                }
                _ = me.kill.notified() => {
                    self.session(SessionOp::Closed).await;
                    close_after = true;
                    break rx.await.ok();
                }
                n = stream.read_buf(&mut carry) => {
                    if !matches!(n, Ok(n) if n > 0) {
                        self.session(SessionOp::Closed).await;
                        break None;
                    }
                }
                // A subscribed RESP3 connection hears its messages while it waits.
                item = next_event(&mut self.events) => {
                    let ok = self.write_event(item) && self.drain_events();
                    if !ok || !self.write_out(stream).await {
                        self.session(SessionOp::Closed).await;
                        break None;
                    }
                }
            }
        };
        self.carry = carry;
        if let Ok(mut s) = self.me.shown.lock() {
            s.blocked = false;
        }
        match answer {
            None => Then::Close,
            Some(a) if a.unauthorized => {
                self.me.kill();
                Then::Close
            }
            Some(Answer {
                replies: Ok(replies),
                ..
            }) => {
                for r in &replies {
                    self.put(r, shape);
                }
                if close_after {
                    Then::Close
                } else {
                    Then::Go
                }
            }
            Some(Answer {
                replies: Err(e), ..
            }) => {
                self.put_plain(Reply::Error(e));
                if close_after {
                    Then::Close
                } else {
                    Then::Go
                }
            }
        }
    }

    /// WAIT on a cluster's leader: the followers that hold every entry the leader had when it
    /// began, once `numreplicas` do or its timeout passes (0: no limit), as Redis waits for
    /// its replicas' acknowledgements. It runs in the executor first (its checks, MONITOR,
    /// the count now), and waits here only if that count is short.
    async fn wait_replicas<S: Stream>(&mut self, args: Vec<Vec<u8>>, stream: &mut S) -> Then {
        let (Some(t), Some(want), Some(timeout)) = (
            self.l.to_leader.get(),
            args.get(1).and_then(|a| crate::num::parse_i64(a)),
            args.get(2).and_then(|a| crate::num::parse_i64(a)),
        ) else {
            self.batch.push(args);
            self.flush_batch().await;
            return Then::Go;
        };
        let role = t.role.clone();
        let since = role.wait_since();
        let began = tokio::time::Instant::now();
        // The executor's answer: an error, or the count now; short of `want`, it waits.
        let now = match self.exec(vec![args], ExecMode::Each, false).await {
            Some(Answer {
                replies: Ok(mut r), ..
            }) => r.pop().unwrap_or(Reply::Nil),
            Some(Answer {
                replies: Err(e), ..
            }) => Reply::Error(e),
            None => Reply::err("ERR the server is shutting down"),
        };
        let n = match now {
            Reply::Int(n) if n < want && timeout >= 0 => n,
            other => {
                self.put_plain(other);
                return Then::Go;
            }
        };
        // The replies before it leave now, not after the wait.
        if !self.write_out(stream).await {
            return Then::Close;
        }
        let deadline = (timeout > 0).then(|| began + Duration::from_millis(timeout as u64));
        let me = self.me.clone();
        let mut carry = std::mem::take(&mut self.carry);
        let mut n = n.max(role.replicas_at(since) as i64);
        while n < want && role.leading() && deadline.is_none_or(|d| tokio::time::Instant::now() < d)
        {
            // A credential revoked meanwhile closes the connection, as it closes an idle one.
            if !self.credentials_hold().await {
                return Then::Close;
            }
            carry.reserve(config::RESP_READ_BYTES);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(config::CLUSTER_WAIT_POLL_MS)) => {}
                _ = me.kill.notified() => return Then::Close,
                r = stream.read_buf(&mut carry) => {
                    if !matches!(r, Ok(k) if k > 0) {
                        return Then::Close;
                    }
                    if carry.len() > self.l.request_bytes_max.saturating_add(config::RESP_READ_BYTES) {
                        return Then::Close;
                    }
                }
            }
            n = n.max(role.replicas_at(since) as i64);
        }
        self.carry = carry;
        self.put_plain(Reply::Int(n));
        Then::Go
    }

    /// Whether the token may run this command of the connection's own; answers the refusal
    /// when not. The Standard token may run them all without asking the executor.
    async fn allowed(&mut self, args: &[Vec<u8>]) -> bool {
        match self.check(args).await {
            Ok(()) => true,
            Err(r) => {
                self.put_plain(r);
                false
            }
        }
    }

    /// Whether this connection's credentials may run `args` now, or the refusal.
    async fn check(&mut self, args: &[Vec<u8>]) -> Result<(), Reply> {
        let Some(a) = self.auth.clone() else {
            return Err(Reply::err("NOAUTH Authentication required."));
        };
        if a.access == Access::Full {
            return Ok(());
        }
        // The Read Only token runs transactions of reads, as /multi-exec does.
        let name = args[0].to_ascii_lowercase();
        if a.access == Access::ReadOnly
            && matches!(
                name.as_slice(),
                b"multi" | b"exec" | b"discard" | b"watch" | b"unwatch"
            )
        {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        self.session(SessionOp::Check {
            db: a.db,
            access: a.access,
            args: args.to_vec(),
            reply,
        })
        .await;
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(Reply::err("ERR the server is shutting down")),
        }
    }

    async fn session(&mut self, op: SessionOp) {
        let _ = self.l.tx.send(Job::Session { conn: self.id, op }).await;
    }

    /// A command inside MULTI: queued, or refused (and the transaction with it) when it is
    /// unknown or has the wrong number of arguments, as Redis checks before it queues.
    async fn queue(&mut self, args: Vec<Vec<u8>>) -> Then {
        let refusal = match table::global().lookup(&args) {
            Lookup::Found(info) if !info.arity_ok(args.len()) => {
                Some(crate::command::pipeline::arity_error(info))
            }
            Lookup::Found(_) => None,
            Lookup::Unknown => Some(crate::command::pipeline::unknown_command(&args)),
            Lookup::UnknownSubcommand(c) => {
                Some(crate::command::pipeline::unknown_subcommand(c, &args))
            }
        };
        match refusal {
            Some(r) => {
                self.multi_failed = true;
                self.put_plain(r);
            }
            // A token's rights, keys included, are checked as it is queued, as Redis does
            // (not for AUTH and HELLO, which any connection may send, as outside MULTI).
            None if !args[0].eq_ignore_ascii_case(b"auth")
                && !args[0].eq_ignore_ascii_case(b"hello")
                && !self.allowed(&args).await =>
            {
                self.multi_failed = true
            }
            None => {
                if let Some(q) = &mut self.multi {
                    q.push(args);
                }
                self.put_plain(Reply::Status("QUEUED".into()));
            }
        }
        Then::Go
    }

    fn multi_command(&mut self, args: &[Vec<u8>]) {
        if args.len() != 1 {
            if self.multi.is_some() {
                self.multi_failed = true;
            }
            self.put_plain(Reply::Error(crate::reply::errors::wrong_arity("multi")));
        } else if self.multi.is_some() {
            self.put_plain(Reply::err("ERR MULTI calls can not be nested"));
        } else {
            self.multi = Some(Vec::new());
            self.multi_failed = false;
            self.put_plain(Reply::ok());
        }
    }

    async fn exec_command(&mut self, args: &[Vec<u8>]) -> Then {
        if args.len() != 1 {
            self.refuse(b"exec", crate::reply::errors::wrong_arity("exec"))
                .await;
            return Then::Go;
        }
        let Some(queued) = self.multi.take() else {
            self.put_plain(Reply::err("ERR EXEC without MULTI"));
            return Then::Go;
        };
        self.watching = false;
        if std::mem::take(&mut self.multi_failed) {
            self.watch_broken = false;
            self.session(SessionOp::Unwatch).await;
            self.put_plain(Reply::err(
                "EXECABORT Transaction discarded because of previous errors.",
            ));
            return Then::Go;
        }
        if std::mem::take(&mut self.watch_broken) {
            self.session(SessionOp::Unwatch).await;
            self.put_plain(Reply::NilArray);
            return Then::Go;
        }
        // The connection's own commands run here, after the executor has run the others as
        // one job: they touch no key, so their place in the order shows only in the replies,
        // which keep it.
        let own: Vec<bool> = queued.iter().map(|c| queued_own(c)).collect();
        let kv: Vec<Vec<Vec<u8>>> = queued
            .iter()
            .zip(&own)
            .filter(|(_, o)| !**o)
            .map(|(c, _)| c.clone())
            .collect();
        let shapes: Vec<write::Shape> = kv.iter().map(|c| write::shape(c)).collect();
        match self.exec(kv, ExecMode::Multi, false).await {
            Some(a) if a.aborted => self.put_plain(Reply::NilArray),
            Some(Answer {
                replies: Ok(replies),
                ..
            }) => {
                // EXEC's reply is not written while replies are off or skipped (a skip is
                // used up by it); its own commands run either way. Inside it, as in Redis, a
                // CLIENT REPLY OFF silences the elements after it (the array keeps the length
                // it announced) and a HELLO changes the protocol of the elements after it.
                let silent = !self.writing();
                let mark = self.out.len();
                self.out.push(b'*');
                self.out
                    .extend_from_slice(queued.len().to_string().as_bytes());
                self.out.extend_from_slice(b"\r\n");
                let mut kv_replies = replies.iter().zip(shapes);
                let mut then = Then::Go;
                self.in_exec = true;
                for (cmd, own) in queued.iter().zip(own) {
                    if own {
                        if let Then::Close = self.own_in_exec(cmd).await {
                            then = Then::Close;
                        }
                    } else if let Some((r, shape)) = kv_replies.next() {
                        if self.reply_mode != ReplyMode::Off {
                            write::reply(
                                &mut self.out,
                                r,
                                self.resp3,
                                if self.resp3 {
                                    shape
                                } else {
                                    write::Shape::Plain
                                },
                            );
                        }
                    }
                }
                self.in_exec = false;
                if silent {
                    self.out.truncate(mark);
                }
                return then;
            }
            Some(Answer {
                replies: Err(e), ..
            }) => self.put_plain(Reply::Error(e)),
            None => self.put_plain(Reply::err("ERR the server is shutting down")),
        }
        Then::Go
    }

    /// One of the connection's own commands queued in a transaction, run by EXEC; its
    /// reply goes into EXEC's array. Its rights were checked when it was queued, as Redis
    /// checks them.
    async fn own_in_exec(&mut self, args: &[Vec<u8>]) -> Then {
        let name = args
            .first()
            .map(|n| n.to_ascii_lowercase())
            .unwrap_or_default();
        // Rights are checked again now, as Redis checks every queued command at EXEC: they
        // may have changed since it was queued, or an AUTH before it in this EXEC changed
        // whose they are.
        if !matches!(name.as_slice(), b"auth" | b"hello") && !self.allowed(args).await {
            return Then::Go;
        }
        match name.as_slice() {
            b"select" => self.select(args),
            b"unwatch" => self.put_plain(Reply::ok()),
            // Redis's answers for MONITOR and SSUBSCRIBE inside EXEC (a client in EXEC may not
            // block).
            b"monitor" => self.put_plain(Reply::err(
                "ERR MONITOR isn't allowed for DENY BLOCKING client",
            )),
            b"ssubscribe" => self.put_plain(Reply::err(
                "ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client",
            )),
            b"client" => return self.client(args).await,
            b"auth" => self.auth_command(args).await,
            b"hello" => self.hello(args).await,
            b"subscribe" | b"psubscribe" => self.subscribe(&name, args.to_vec()).await,
            b"unsubscribe" | b"punsubscribe" | b"sunsubscribe" => {
                self.unsubscribe(&name, args.to_vec()).await
            }
            _ => self.put_plain(Reply::err("ERR Command not allowed inside a transaction")),
        }
        Then::Go
    }

    async fn discard(&mut self, args: &[Vec<u8>]) {
        if args.len() != 1 {
            // Refused for its arity, it fails the transaction it was sent in.
            if self.multi.is_some() {
                self.multi_failed = true;
            }
            self.put_plain(Reply::Error(crate::reply::errors::wrong_arity("discard")));
            return;
        }
        if self.multi.take().is_none() {
            self.put_plain(Reply::err("ERR DISCARD without MULTI"));
            return;
        }
        self.multi_failed = false;
        self.watch_broken = false;
        if std::mem::take(&mut self.watching) {
            self.session(SessionOp::Unwatch).await;
        }
        self.put_plain(Reply::ok());
    }

    async fn watch(&mut self, mut args: Vec<Vec<u8>>) {
        if self.multi.is_some() {
            self.put_plain(Reply::err("ERR WATCH inside MULTI is not allowed"));
            return;
        }
        if args.len() < 2 {
            self.put_plain(Reply::Error(crate::reply::errors::wrong_arity("watch")));
            return;
        }
        let Some(db) = self.auth.as_ref().map(|a| a.db) else {
            return;
        };
        let keys = args.split_off(1);
        let (reply, rx) = oneshot::channel();
        self.session(SessionOp::Watch { db, keys, reply }).await;
        let _ = rx.await;
        self.watching = true;
        self.put_plain(Reply::ok());
    }

    fn select(&mut self, args: &[Vec<u8>]) {
        if args.len() != 2 {
            self.put_plain(Reply::Error(crate::reply::errors::wrong_arity("select")));
            return;
        }
        match crate::num::parse_i64(&args[1]) {
            None => self.put_plain(Reply::err(crate::reply::errors::NOT_INTEGER)),
            Some(0) => self.put_plain(Reply::ok()),
            Some(_) => self.put_plain(Reply::err("ERR DB index is out of range")),
        }
    }

    /// AUTH `password` or AUTH `user password`: a database's Standard or Read Only token
    /// (any user name, as `default`), an ACL user's REST token, or an ACL user's password
    /// in the default database.
    async fn auth_command(&mut self, args: &[Vec<u8>]) {
        let (user, password) = match args {
            [_, p] => (None, p),
            [_, u, p] => (Some(u.as_slice()), p),
            [_] => {
                self.put_plain(Reply::Error(crate::reply::errors::wrong_arity("auth")));
                return;
            }
            _ => {
                self.put_plain(Reply::err(crate::reply::errors::SYNTAX));
                return;
            }
        };
        match self.login(user, password).await {
            Some(a) => {
                self.authenticated(a);
                self.put_plain(Reply::ok());
            }
            None => self.put_plain(Reply::err(WRONGPASS)),
        }
    }

    fn authenticated(&mut self, a: Auth) {
        // Another AUTH of a connection with streams of the old database ends them.
        if self.auth.as_ref().is_some_and(|old| old.db != a.db) {
            self.drop_streams();
        }
        self.auth = Some(a);
        self.reader.authenticated = true;
        self.show();
    }

    async fn login(&self, user: Option<&[u8]>, password: &[u8]) -> Option<Auth> {
        let password = std::str::from_utf8(password).ok()?;
        let user = user.map(|u| String::from_utf8_lossy(u).into_owned());
        if let Some((db, access)) = self.check_credential(password).await {
            let name = match &access {
                Access::Token(_) => password
                    .strip_prefix("acl_")
                    .and_then(|r| r.split('.').next())
                    .and_then(|u| {
                        use base64::Engine;
                        base64::engine::general_purpose::URL_SAFE_NO_PAD
                            .decode(u)
                            .ok()
                    })
                    .map(|u| String::from_utf8_lossy(&u).into_owned())
                    .unwrap_or_default(),
                _ => "default".to_string(),
            };
            // `AUTH user token`: the token must be that user's (any name for a database's
            // own tokens, which stand for `default`).
            if let (Some(u), Access::Token(_)) = (&user, &access) {
                if *u != name {
                    return None;
                }
            }
            return Some(Auth {
                db,
                access,
                token: password.to_string(),
                user: name,
            });
        }
        // An ACL user's password, in the default database: the executor turns it into the
        // user's REST token, which holds as long as the password does.
        let user = user.filter(|u| u != "default")?;
        let token = self.rest_token(&user, password).await?;
        let (db, access) = self.check_credential(&token).await?;
        Some(Auth {
            db,
            access,
            token,
            user,
        })
    }

    /// Whether `user` is a user of this connection's database (`default` always is): `ACL
    /// GETUSER` run as the database's Standard token (MONITOR never shows an ACL command).
    async fn user_exists(&self, user: &str) -> bool {
        if user == "default" {
            return true;
        }
        let Some(db) = self.auth.as_ref().map(|a| a.db) else {
            return false;
        };
        let cmd = vec![
            b"ACL".to_vec(),
            b"GETUSER".to_vec(),
            user.as_bytes().to_vec(),
        ];
        let (job, rx) = self.job(db, Access::Full, vec![cmd], ExecMode::Each, false);
        if self.l.tx.send(job).await.is_err() {
            return false;
        }
        matches!(
            rx.await
                .ok()
                .and_then(|a| a.replies.ok())
                .and_then(|mut r| r.pop()),
            Some(Reply::Array(_))
        )
    }

    /// `ACL RESTTOKEN user password` in the default database, run as its Standard token.
    async fn rest_token(&self, user: &str, password: &str) -> Option<String> {
        let cmd = vec![
            b"ACL".to_vec(),
            b"RESTTOKEN".to_vec(),
            user.as_bytes().to_vec(),
            password.as_bytes().to_vec(),
        ];
        let db = crate::state::databases::DEFAULT_DB;
        let (job, rx) = self.job(db, Access::Full, vec![cmd], ExecMode::Each, false);
        self.l.tx.send(job).await.ok()?;
        match rx.await.ok()?.replies.ok()?.pop()? {
            Reply::Bulk(t) => String::from_utf8(t).ok(),
            Reply::Status(t) => Some(t.into_owned()),
            _ => None,
        }
    }

    /// HELLO `[protover [AUTH user password] [SETNAME name]]`.
    async fn hello(&mut self, args: &[Vec<u8>]) {
        let mut version = None;
        let mut i = 1;
        if let Some(v) = args.get(1) {
            match crate::num::parse_i64(v) {
                Some(v @ 2..=3) => version = Some(v),
                Some(_) => {
                    self.put_plain(Reply::err("NOPROTO unsupported protocol version"));
                    return;
                }
                None => {
                    self.put_plain(Reply::err(
                        "ERR Protocol version is not an integer or out of range",
                    ));
                    return;
                }
            }
            i = 2;
        }
        let mut login = None;
        let mut setname = None;
        while i < args.len() {
            let more = args.len() - i - 1;
            if args[i].eq_ignore_ascii_case(b"auth") && more >= 2 {
                login = Some((args[i + 1].clone(), args[i + 2].clone()));
                i += 3;
            } else if args[i].eq_ignore_ascii_case(b"setname") && more >= 1 {
                setname = Some(args[i + 1].clone());
                i += 2;
            } else {
                self.put_plain(Reply::Error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[i])
                )));
                return;
            }
        }
        if let Some((user, password)) = login {
            match self.login(Some(&user), &password).await {
                Some(a) => self.authenticated(a),
                None => {
                    self.put_plain(Reply::err(WRONGPASS));
                    return;
                }
            }
        }
        if self.auth.is_none() {
            self.put_plain(Reply::err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"));
            return;
        }
        if let Some(n) = setname {
            if let Err(e) = valid_name(&n) {
                self.put_plain(e);
                return;
            }
            self.name = String::from_utf8_lossy(&n).into_owned();
        }
        if let Some(v) = version {
            let was = std::mem::replace(&mut self.resp3, v == 3);
            // The streams this connection has write in the new protocol from now on.
            if was != self.resp3 {
                if let (Some(ev), Some(a)) = (&self.events, &self.auth) {
                    for id in ev.ids.iter().filter(|id| **id != 0) {
                        let job = Job::Rewire {
                            db: a.db,
                            id: *id,
                            resp3: self.resp3,
                        };
                        let _ = self.l.tx.send(job).await;
                    }
                }
            }
        }
        let pairs = [
            ("server", Reply::bulk("redis")),
            ("version", Reply::bulk("7.0.15")),
            ("proto", Reply::Int(if self.resp3 { 3 } else { 2 })),
            ("id", Reply::Int(self.id as i64)),
            ("mode", Reply::bulk("standalone")),
            ("role", Reply::bulk("master")),
            ("modules", Reply::Array(Vec::new())),
        ];
        if self.writing() {
            write::map(&mut self.out, &pairs, self.resp3);
        }
    }

    /// RESET: the connection as it was after AUTH's absence: no transaction, watch,
    /// subscription or monitor, RESP2, no name, and not authenticated (every credential here
    /// is a password).
    async fn reset(&mut self) {
        self.multi = None;
        self.multi_failed = false;
        self.watch_broken = false;
        if std::mem::take(&mut self.watching) {
            self.session(SessionOp::Unwatch).await;
        }
        self.drop_streams();
        self.resp3 = false;
        self.name.clear();
        self.reply_mode = ReplyMode::On;
        self.auth = None;
        self.reader.authenticated = false;
        self.put_plain(Reply::Status("RESET".into()));
    }

    /// Registers this connection's stream of kind `slot` (0 channels, 1 patterns, 2 shard
    /// channels, 3 monitor) with `kind`, or extends it.
    async fn listen(&mut self, slot: usize, kind: SubKind) -> bool {
        let Some(a) = self.auth.clone() else {
            return false;
        };
        let ev = self.events.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel(config::SUBSCRIBER_BUFFER_EVENTS_MAX);
            Events {
                rx,
                tx,
                lagged: Arc::new(AtomicBool::new(false)),
                queued: Arc::new(AtomicUsize::new(0)),
                ids: [0; 4],
            }
        });
        let job = if ev.ids[slot] == 0 {
            let id = self.l.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
            ev.ids[slot] = id;
            let wire = match (slot, self.resp3) {
                (2, r) => Wire::Shard(r),
                (_, false) => Wire::Resp2,
                (_, true) => Wire::Resp3,
            };
            Job::Subscribe(SubscriberHandle {
                id,
                db: a.db,
                kind,
                tx: ev.tx.clone(),
                lagged: ev.lagged.clone(),
                queued: ev.queued.clone(),
                opened: None,
                wire,
            })
        } else {
            Job::SubscribeMore {
                db: a.db,
                id: ev.ids[slot],
                more: kind,
            }
        };
        self.l.tx.send(job).await.is_ok()
    }

    async fn subscribe(&mut self, name: &[u8], args: Vec<Vec<u8>>) {
        let cmd = String::from_utf8_lossy(name).into_owned();
        if args.len() < 2 {
            self.put_plain(Reply::Error(crate::reply::errors::wrong_arity(&cmd)));
            return;
        }
        let names: Vec<Vec<u8>> = args[1..].to_vec();
        let (slot, kind, confirm): (usize, SubKind, &str) = match name {
            b"psubscribe" => (1, SubKind::Patterns(names.clone()), "psubscribe"),
            b"ssubscribe" => (2, SubKind::Channels(names.clone()), "ssubscribe"),
            _ => (0, SubKind::Channels(names.clone()), "subscribe"),
        };
        if !self.listen(slot, kind).await {
            return;
        }
        for n in names {
            let list = match slot {
                1 => &mut self.patterns,
                2 => &mut self.shards,
                _ => &mut self.channels,
            };
            if !list.contains(&n) {
                list.push(n.clone());
            }
            let count = if slot == 2 {
                self.shards.len()
            } else {
                self.channels.len() + self.patterns.len()
            };
            self.push_reply(confirm, Reply::Bulk(n), count);
        }
    }

    async fn unsubscribe(&mut self, name: &[u8], args: Vec<Vec<u8>>) {
        let (slot, confirm) = match name {
            b"punsubscribe" => (1, "punsubscribe"),
            b"sunsubscribe" => (2, "sunsubscribe"),
            _ => (0, "unsubscribe"),
        };
        let named: Vec<Vec<u8>> = args[1..].to_vec();
        let had = match slot {
            1 => self.patterns.clone(),
            2 => self.shards.clone(),
            _ => self.channels.clone(),
        };
        let gone: Vec<Vec<u8>> = if named.is_empty() { had } else { named.clone() };
        if let (Some(ev), Some(a)) = (&self.events, &self.auth) {
            if ev.ids[slot] != 0 {
                let less = if slot == 1 {
                    SubKind::Patterns(named.clone())
                } else {
                    SubKind::Channels(named.clone())
                };
                let _ = self
                    .l
                    .tx
                    .send(Job::UnsubscribeSome {
                        db: a.db,
                        id: ev.ids[slot],
                        less,
                    })
                    .await;
            }
        }
        // Each confirmation counts what is left after it, as Redis's do.
        let others = match slot {
            0 => self.patterns.len(),
            1 => self.channels.len(),
            _ => 0,
        };
        if gone.is_empty() {
            self.push_reply(confirm, Reply::Nil, others);
        }
        for n in gone {
            let list = match slot {
                1 => &mut self.patterns,
                2 => &mut self.shards,
                _ => &mut self.channels,
            };
            list.retain(|c| *c != n);
            let count = list.len() + others;
            self.push_reply(confirm, Reply::Bulk(n), count);
        }
        let emptied = match slot {
            1 => self.patterns.is_empty(),
            2 => self.shards.is_empty(),
            _ => self.channels.is_empty(),
        };
        if emptied {
            if let Some(ev) = &mut self.events {
                ev.ids[slot] = 0;
            }
        }
    }

    /// A subscription's confirmation: an array in RESP2, a push in RESP3.
    fn push_reply(&mut self, kind: &str, name: Reply, count: usize) {
        let items = vec![Reply::bulk(kind), name, Reply::Int(count as i64)];
        if self.resp3 {
            self.out.extend_from_slice(b">3\r\n");
            for i in &items {
                write::reply(&mut self.out, i, true, write::Shape::Plain);
            }
        } else {
            Reply::Array(items).write_resp2(&mut self.out);
        }
    }

    async fn monitor_command(&mut self) {
        if !self.monitor && self.listen(3, SubKind::Monitor).await {
            self.monitor = true;
        }
        self.put_plain(Reply::ok());
    }

    /// CLIENT `subcommand ...`.
    async fn client(&mut self, args: &[Vec<u8>]) -> Then {
        let sub = args
            .get(1)
            .map(|s| s.to_ascii_lowercase())
            .unwrap_or_default();
        let arity = |n: usize| args.len() == n;
        let wrong =
            |sub: &str| Reply::Error(crate::reply::errors::wrong_arity(&format!("client|{sub}")));
        let db = self.auth.as_ref().map(|a| a.db);
        let reply = match sub.as_slice() {
            b"id" if arity(2) => Reply::Int(self.id as i64),
            b"getname" if arity(2) => {
                if self.name.is_empty() {
                    Reply::Nil
                } else {
                    Reply::bulk(self.name.as_bytes())
                }
            }
            b"setname" if arity(3) => match valid_name(&args[2]) {
                Ok(()) => {
                    self.name = String::from_utf8_lossy(&args[2]).into_owned();
                    Reply::ok()
                }
                Err(e) => e,
            },
            b"setinfo" if arity(4) => {
                let what = args[2].to_ascii_lowercase();
                let value = String::from_utf8_lossy(&args[3]).into_owned();
                if value.contains(|c: char| c == ' ' || c.is_control()) {
                    Reply::Error(format!(
                        "ERR {} cannot contain spaces, newlines or special characters.",
                        String::from_utf8_lossy(&args[2])
                    ))
                } else {
                    match (what.as_slice(), self.me.shown.lock()) {
                        (b"lib-name", Ok(mut s)) => {
                            s.lib_name = value;
                            Reply::ok()
                        }
                        (b"lib-ver", Ok(mut s)) => {
                            s.lib_ver = value;
                            Reply::ok()
                        }
                        _ => Reply::Error(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&args[2])
                        )),
                    }
                }
            }
            b"info" if arity(2) => {
                self.show();
                verbatim(format!("{}\n", self.me.line(Instant::now())))
            }
            b"list" => {
                self.show();
                let now = Instant::now();
                // None: every client; Some(false): none (no replicas here).
                let mut ids: Option<Vec<u64>> = None;
                let mut kind: Option<Option<bool>> = None;
                match args.get(2) {
                    Some(w) if w.eq_ignore_ascii_case(b"id") && args.len() > 3 => {
                        let parsed: Option<Vec<u64>> = args[3..]
                            .iter()
                            .map(|a| crate::num::parse_i64(a).filter(|n| *n > 0).map(|n| n as u64))
                            .collect();
                        match parsed {
                            Some(v) => ids = Some(v),
                            None => {
                                self.put_plain(Reply::err("ERR Invalid client ID"));
                                return Then::Go;
                            }
                        }
                    }
                    Some(w) if w.eq_ignore_ascii_case(b"type") && args.len() == 4 => {
                        kind = match args[3].to_ascii_lowercase().as_slice() {
                            b"normal" => Some(Some(false)),
                            b"pubsub" => Some(Some(true)),
                            b"master" | b"replica" | b"slave" => Some(None),
                            _ => {
                                self.put_plain(Reply::Error(format!(
                                    "ERR Unknown client type '{}'",
                                    String::from_utf8_lossy(&args[3])
                                )));
                                return Then::Go;
                            }
                        };
                    }
                    None => {}
                    Some(_) => {
                        self.put_plain(Reply::err(crate::reply::errors::SYNTAX));
                        return Then::Go;
                    }
                }
                let mut text = String::new();
                for c in db.map(|d| self.l.clients.of(d)).unwrap_or_default() {
                    if ids.as_ref().is_some_and(|ids| !ids.contains(&c.id)) {
                        continue;
                    }
                    if let Some(want) = kind {
                        let pubsub = c.shown.lock().is_ok_and(|s| {
                            s.subscriptions + s.patterns + s.shard_subscriptions > 0
                        });
                        if want != Some(pubsub) {
                            continue;
                        }
                    }
                    text.push_str(&c.line(now));
                    text.push('\n');
                }
                verbatim(text)
            }
            b"kill" if args.len() >= 3 => return self.client_kill(args).await,
            b"unblock" if args.len() == 3 || args.len() == 4 => {
                let error = match args.get(3).map(|a| a.to_ascii_lowercase()) {
                    None => Some(None),
                    Some(w) if w == b"timeout" => Some(None),
                    Some(w) if w == b"error" => Some(Some(
                        "UNBLOCKED client unblocked via CLIENT UNBLOCK".to_string(),
                    )),
                    Some(_) => None,
                };
                match (crate::num::parse_i64(&args[2]), error) {
                    (_, None) => Reply::err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
                    (None, _) => Reply::err(crate::reply::errors::NOT_INTEGER),
                    (Some(id), Some(error)) => {
                        let target = db
                            .map(|d| self.l.clients.of(d))
                            .unwrap_or_default()
                            .into_iter()
                            .find(|c| c.id == id as u64);
                        let blocked = target
                            .as_ref()
                            .is_some_and(|c| c.shown.lock().is_ok_and(|s| s.blocked));
                        if blocked {
                            let _ = self
                                .l
                                .tx
                                .send(Job::Session {
                                    conn: id as u64,
                                    op: SessionOp::Unblock(error),
                                })
                                .await;
                            Reply::Int(1)
                        } else {
                            Reply::Int(0)
                        }
                    }
                }
            }
            b"reply" if arity(3) => {
                let mode = args[2].to_ascii_lowercase();
                match mode.as_slice() {
                    b"on" => {
                        self.reply_mode = ReplyMode::On;
                        Reply::ok()
                    }
                    b"off" => {
                        self.reply_mode = ReplyMode::Off;
                        return Then::Go;
                    }
                    b"skip" => {
                        // This reply is not written, nor the next command's.
                        if self.reply_mode == ReplyMode::On {
                            self.reply_mode = ReplyMode::Skip;
                        }
                        return Then::Go;
                    }
                    _ => Reply::err(crate::reply::errors::SYNTAX),
                }
            }
            b"no-evict" | b"no-touch" if arity(3) => {
                let v = args[2].to_ascii_lowercase();
                if v == b"on" || v == b"off" {
                    Reply::ok()
                } else {
                    Reply::err(crate::reply::errors::SYNTAX)
                }
            }
            b"tracking" | b"caching" | b"getredir" | b"trackinginfo" => Reply::err(
                "ERR client-side caching (CLIENT TRACKING) is not supported by tidepool",
            ),
            b"pause" | b"unpause" => Reply::Error(format!(
                "ERR 'CLIENT {}' is not supported: it controls a Redis process, which tidepool is not",
                String::from_utf8_lossy(&sub).to_ascii_uppercase()
            )),
            b"help" if arity(2) => Reply::bulks(CLIENT_HELP.iter().copied()),
            b"id" | b"getname" | b"setname" | b"setinfo" | b"info" | b"reply" | b"no-evict"
            | b"no-touch" | b"help" | b"kill" | b"unblock" => {
                wrong(&String::from_utf8_lossy(&sub))
            }
            _ if args.len() < 2 => Reply::Error(crate::reply::errors::wrong_arity("client")),
            _ => Reply::Error(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        };
        self.put_plain(reply);
        Then::Go
    }

    /// CLIENT KILL `addr` (the old form) or CLIENT KILL `[ID id] [ADDR addr] [LADDR addr]
    /// [USER user] [SKIPME yes|no]`, among this database's connections.
    async fn client_kill(&mut self, args: &[Vec<u8>]) -> Then {
        let db = self.auth.as_ref().map(|a| a.db);
        let all = db.map(|d| self.l.clients.of(d)).unwrap_or_default();
        if args.len() == 3 {
            let addr = String::from_utf8_lossy(&args[2]).into_owned();
            return match all.iter().find(|c| c.addr == addr) {
                Some(c) => {
                    self.put_plain(Reply::ok());
                    if c.id == self.id {
                        return Then::Close;
                    }
                    c.kill();
                    Then::Go
                }
                None => {
                    self.put_plain(Reply::err("ERR No such client"));
                    Then::Go
                }
            };
        }
        let (mut id, mut addr, mut laddr, mut user, mut skipme) = (None, None, None, None, true);
        let mut i = 2;
        while i + 1 < args.len() {
            let v = String::from_utf8_lossy(&args[i + 1]).into_owned();
            match args[i].to_ascii_lowercase().as_slice() {
                b"id" => match crate::num::parse_i64(&args[i + 1]) {
                    Some(n) if n > 0 => id = Some(n as u64),
                    _ => {
                        self.put_plain(Reply::err("ERR client-id should be greater than 0"));
                        return Then::Go;
                    }
                },
                b"addr" => addr = Some(v),
                b"laddr" => laddr = Some(v),
                // Redis refuses a user that does not exist as it reads the option.
                b"user" if !self.user_exists(&v).await => {
                    self.put_plain(Reply::Error(format!("ERR No such user '{v}'")));
                    return Then::Go;
                }
                b"user" => user = Some(v),
                b"skipme" => match v.to_ascii_lowercase().as_str() {
                    "yes" => skipme = true,
                    "no" => skipme = false,
                    _ => {
                        self.put_plain(Reply::err(crate::reply::errors::SYNTAX));
                        return Then::Go;
                    }
                },
                _ => {
                    self.put_plain(Reply::err(crate::reply::errors::SYNTAX));
                    return Then::Go;
                }
            }
            i += 2;
        }
        if i != args.len() {
            self.put_plain(Reply::err(crate::reply::errors::SYNTAX));
            return Then::Go;
        }
        let mut killed = 0;
        let mut me = false;
        for c in all {
            let matches = id.is_none_or(|i| i == c.id)
                && addr.as_ref().is_none_or(|a| *a == c.addr)
                && laddr.as_ref().is_none_or(|a| *a == c.laddr)
                && user
                    .as_ref()
                    .is_none_or(|u| c.shown.lock().is_ok_and(|s| s.user == *u));
            if !matches || (c.id == self.id && skipme) {
                continue;
            }
            killed += 1;
            if c.id == self.id {
                me = true;
            } else {
                c.kill();
            }
        }
        self.put_plain(Reply::Int(killed));
        if me {
            Then::Close
        } else {
            Then::Go
        }
    }
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are: ID, ADDR, LADDR, USER, SKIPME.",
    "LIST [TYPE normal] [ID <id> [<id> ...]]",
    "    Return information about client connections of this database.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "    Set client meta attributes.",
    "NO-EVICT (ON|OFF)",
    "    Accepted; tidepool does not evict.",
    "HELP",
    "    Print this help.",
];

/// Text that RESP3 sends as a verbatim string (`txt`), as Redis sends CLIENT INFO and LIST.
fn verbatim(text: String) -> Reply {
    Reply::Typed(Box::new((
        crate::reply::Resp3::Verbatim(*b"txt"),
        Reply::bulk(text),
    )))
}

/// Redis's rule for CLIENT SETNAME: no spaces, newlines or special characters.
fn valid_name(n: &[u8]) -> Result<(), Reply> {
    if n.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(Reply::err(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// The next event of the connection's streams; pending for ever when it has none.
async fn next_event(events: &mut Option<Events>) -> Option<StreamItem> {
    match events {
        Some(ev) => ev.rx.recv().await,
        None => std::future::pending().await,
    }
}
