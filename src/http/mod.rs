//! The HTTP side: one hyper service that authenticates, turns each request form into commands,
//! hands them to the executor, and writes the envelopes back.

pub mod admin;
pub mod body;
pub mod console;
pub mod qstash;
pub mod request;
pub mod response;
pub mod sse;
pub mod watch;

use crate::config::{
    self, HTTP_BODY_READ_TIMEOUT_MS, HTTP_CONNECTIONS_MAX, HTTP_DESCRIPTORS_RESERVED,
    HTTP_WATCHDOG_INTERVAL_MS, REQUEST_BYTES_MAX,
};
use crate::executor::tenants::{acl_token_db, Role};
use crate::executor::{Access, Answer, ExecMode, Job, Shared, SubKind, SubscriberHandle};
use crate::reply::Reply;
use crate::state::databases::DbId;
use body::BodyError;
use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use response::Encoding;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// What every request handler shares.
pub struct App {
    pub tx: mpsc::Sender<Job>,
    pub shared: Arc<Shared>,
    /// The admin API's token (`/_admin/...`).
    pub admin_token: String,
    /// Scratch databases on request (`POST /start`), unless switched off.
    pub start: Option<StartConfig>,
    /// Scratch databases created recently, per client address (the rate limit).
    pub(crate) started: std::sync::Mutex<admin::StartLog>,
    /// The delivery service's token and signing keys (`/v2/...`).
    pub qstash: Option<qstash::QstashAuth>,
    /// Origins allowed to call the REST routes from a browser (`--cors-origin`; `*` for any).
    pub cors_origins: Vec<String>,
    /// The server shows a past point of its log, read-only (`--at`): ready, but not writable.
    pub read_only: bool,
    /// The request counters of the common routes and statuses.
    request_counters: crate::metrics::RequestCounters,
    /// `GET /metrics` answers a loopback client without the admin token (`--metrics-open`).
    pub metrics_open: bool,
    /// The largest REST request body (`--max-request-bytes`; the hosted service's limit,
    /// `REQUEST_BYTES_MAX` by default).
    pub request_bytes_max: usize,
    /// The web console at `/console` (`--console`).
    pub console: bool,
    /// The data directory (the console's time travel reads it).
    pub data_dir: std::path::PathBuf,
    /// How long one console rebuild of a past state may take.
    pub console_rebuild_ms: u64,
    /// The URL clients reach this server at (its listening address), for the documents and
    /// answers that name it.
    pub url: String,
    /// This node's cluster, if it is in one.
    pub cluster: Option<ClusterHandle>,
}

impl ClusterHandle {
    /// Waits until this node's state holds record `seq` (a follower applies what the leader
    /// committed a moment later), at most `CLUSTER_SYNC_WAIT_MS`; whether it does.
    pub async fn caught_up_to(&self, log: &crate::wal::Progress, seq: u64) -> bool {
        let wait = std::time::Duration::from_millis(config::CLUSTER_SYNC_WAIT_MS);
        let done = tokio::time::timeout(wait, log.wait_durable(seq))
            .await
            .is_ok();
        done && log.durable_seq.load(Ordering::SeqCst) >= seq
    }

    /// This node's view of its cluster now.
    pub fn facts(&self) -> crate::metrics::ClusterFacts {
        let m = self.raft.metrics().borrow().clone();
        crate::metrics::ClusterFacts {
            node_id: self.node_id,
            leading: self.role.leading(),
            term: m.current_term,
            leader: m.current_leader.unwrap_or(0),
            last_log_index: m.last_log_index.unwrap_or(0),
            last_applied_index: m.last_applied.map_or(0, |l| l.index),
        }
    }
}

/// Whether a follower relays a request to its leader: a write of the delivery API or of the
/// admin API's databases (key-value writes go to the leader through the executor; the
/// cluster's own admin routes answer here).
fn relays(method: &Method, path: &str) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let databases = format!("{}/databases", config::ADMIN_PREFIX);
    let nodes = format!("{}/cluster/nodes", config::ADMIN_PREFIX);
    path.starts_with("/v2/")
        || path == databases
        || path.starts_with(&format!("{databases}/"))
        || path == nodes
        || path.starts_with(&format!("{nodes}/"))
}

/// Relays a request to the leader over the cluster listener and answers what it answered.
async fn relay(req: Request<Incoming>, app: &App, c: &ClusterHandle) -> Response<Body> {
    let refused = |status: StatusCode, why: String| {
        let mut r = Response::new(Body::Full(Some(Bytes::from(
            serde_json::json!({ "error": why }).to_string(),
        ))));
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    };
    let unavailable = |why: String| refused(StatusCode::SERVICE_UNAVAILABLE, why);
    let Some(addr) = c.role.leader_addr.read().ok().and_then(|a| a.clone()) else {
        return unavailable(format!("ERR {}", c.role.refusal()));
    };
    let (parts, body) = req.into_parts();
    let max = app.qstash.as_ref().map_or(app.request_bytes_max, |q| {
        q.message_bytes_max.max(app.request_bytes_max)
    });
    let body = match body::read(body, max).await {
        Ok(b) => b.to_vec(),
        Err(e) => {
            let (status, why) = match e {
                body::BodyError::TooLarge(m) => (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("it is larger than {m} bytes"),
                ),
                body::BodyError::TooSlow => (
                    StatusCode::REQUEST_TIMEOUT,
                    "it came too slowly".to_string(),
                ),
                body::BodyError::Broken(e) => (StatusCode::BAD_REQUEST, e),
            };
            return refused(
                status,
                format!("ERR the request's body could not be read: {why}"),
            );
        }
    };
    let request = crate::cluster::network::Relayed {
        method: parts.method.to_string(),
        target: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.to_string()),
        status: 0,
        headers: crate::cluster::network::relayable_headers(&parts.headers),
        body,
        applied: 0,
    };
    match c.network.relay(&addr, &request).await {
        Ok(answer) => {
            // The next read on this node shows what the request wrote, as after a forwarded
            // command (a node that cannot catch up in time answers anyway: the write is done).
            if answer.applied > 0 {
                let wait = std::time::Duration::from_millis(config::CLUSTER_SYNC_WAIT_MS);
                let _ = c
                    .raft
                    .wait(Some(wait))
                    .applied_index_at_least(Some(answer.applied), "a relayed request's writes")
                    .await;
            }
            let mut r = Response::new(Body::Full(Some(Bytes::from(answer.body))));
            *r.status_mut() =
                StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
            for (k, v) in answer.headers {
                if let (Ok(k), Ok(v)) = (
                    hyper::header::HeaderName::from_bytes(k.as_bytes()),
                    HeaderValue::from_str(&v),
                ) {
                    r.headers_mut().append(k, v);
                }
            }
            r
        }
        Err(e) => unavailable(format!(
            "ERR this node is a follower and could not reach the leader at {addr}: {e}"
        )),
    }
}

/// What the HTTP side holds of a cluster node: its Raft handle, its role and the members
/// `--peers` names (with itself), for `/_admin/cluster/...`.
pub struct ClusterHandle {
    pub node_id: u64,
    /// The way to the leader, for the requests a follower relays.
    pub network: crate::cluster::network::Network,
    pub raft: openraft::Raft<crate::cluster::TypeConfig>,
    pub role: Arc<crate::executor::cluster::Role>,
    pub members: std::collections::BTreeMap<u64, openraft::BasicNode>,
}

impl App {
    pub fn new(
        tx: mpsc::Sender<Job>,
        shared: Arc<Shared>,
        qstash: Option<qstash::QstashAuth>,
    ) -> App {
        App {
            request_counters: shared.metrics.request_counters(),
            tx,
            shared,
            admin_token: String::new(),
            start: None,
            started: Default::default(),
            qstash,
            cors_origins: Vec::new(),
            metrics_open: false,
            read_only: false,
            request_bytes_max: REQUEST_BYTES_MAX,
            console: false,
            data_dir: std::path::PathBuf::new(),
            console_rebuild_ms: config::CONSOLE_REBUILD_MS_MAX,
            url: "http://127.0.0.1".into(),
            cluster: None,
        }
    }
}

/// Where and how `POST /start` creates scratch databases.
#[derive(Debug, Clone)]
pub struct StartConfig {
    pub path: String,
    pub ttl_ms: u64,
    pub per_hour: u32,
}

/// A response body: a whole buffer (shared bytes, or a vector of the answer's own), or an
/// event stream.
pub enum Body {
    Full(Option<Bytes>),
    /// A REST answer's encoding as it was made: turning a vector with room to spare into
    /// `Bytes` would allocate a header of its own for every answer.
    Owned(Option<Vec<u8>>),
    Sse(Box<sse::SseBody>),
}

/// The bytes a [`Body`] hands to hyper.
pub enum Chunk {
    Shared(Bytes),
    Owned(std::io::Cursor<Vec<u8>>),
}

impl bytes::Buf for Chunk {
    fn remaining(&self) -> usize {
        match self {
            Chunk::Shared(b) => b.remaining(),
            Chunk::Owned(c) => c.remaining(),
        }
    }
    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::Shared(b) => b.chunk(),
            Chunk::Owned(c) => c.chunk(),
        }
    }
    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Shared(b) => b.advance(n),
            Chunk::Owned(c) => c.advance(n),
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Chunk;
    type Error = Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Chunk>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(Chunk::Shared(b))))),
            Body::Owned(v) => Poll::Ready(
                v.take()
                    .map(|v| Ok(Frame::data(Chunk::Owned(std::io::Cursor::new(v))))),
            ),
            Body::Sse(s) => s
                .poll_event(cx)
                .map(|f| f.map(|f| f.map(|f| f.map_data(Chunk::Shared)))),
        }
    }
    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None) | Body::Owned(None))
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Full(Some(b)) => hyper::body::SizeHint::with_exact(b.len() as u64),
            Body::Owned(Some(v)) => hyper::body::SizeHint::with_exact(v.len() as u64),
            Body::Full(None) | Body::Owned(None) => hyper::body::SizeHint::with_exact(0),
            Body::Sse(_) => hyper::body::SizeHint::default(),
        }
    }
}

/// Accepts connections until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let cap = connection_cap();
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin,
                    // then accept again (the idle timeout frees descriptors).
                    crate::log::line(&format!("warning: accept failed: {e}"));
                    tokio::time::sleep(std::time::Duration::from_millis(config::HTTP_ACCEPT_RETRY_MS)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // At the cap: one short answer, then the descriptor is free again.
            tokio::spawn(refuse_connection(stream, cap));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let client: Arc<str> = Arc::from(peer.to_string());
        tokio::spawn(async move {
            let watch = Arc::new(watch::Watch::default());
            let seen = watch.clone();
            let svc = hyper::service::service_fn(move |req| {
                let app = app.clone();
                let client = client.clone();
                seen.request_started();
                async move { Ok::<_, Infallible>(handle(req, &app, client, peer).await) }
            });
            let io = hyper_util::rt::TokioIo::new(watch::Watched {
                inner: stream,
                watch: watch.clone(),
            });
            let conn = hyper::server::conn::http1::Builder::new()
                // One plain write of a flattened buffer per response: measured 5-6% more SET/s
                // than writev of headers and body, and 1,000 fewer instructions a request.
                .writev(false)
                // The flat buffer (and the read buffer) holds at most this much: an event
                // stream whose client reads nothing kept a copy of up to hyper's default
                // (about 400 KB) of its events, 1.2 GB at 2,000 subscribers (issue 25).
                .max_buf_size(config::HTTP_CONNECTION_BUFFER_BYTES_MAX)
                .keep_alive(true)
                .serve_connection(io, svc);
            tokio::pin!(conn);
            // The watchdog closes an idle connection and one whose request head is slow
            // (hyper's header-read timer would arm a timer per request; this is one per
            // connection).
            let period = std::time::Duration::from_millis(HTTP_WATCHDOG_INTERVAL_MS);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut dog = watch::Dog::default();
            loop {
                tokio::select! {
                    biased;
                    _ = &mut conn => break,
                    _ = tick.tick() => {
                        if dog.expired(&watch, HTTP_WATCHDOG_INTERVAL_MS) {
                            break;
                        }
                    }
                }
            }
            drop(slot);
        });
    }
}

/// How many connections may be open at once: [`HTTP_CONNECTIONS_MAX`], or fewer when the
/// process may open fewer descriptors (some are kept for the log, the delivery workers'
/// outbound connections and the refusal itself).
fn connection_cap() -> usize {
    let by_descriptors = match crate::sys::open_files_limit() {
        Some(n) => (n as usize).saturating_sub(HTTP_DESCRIPTORS_RESERVED),
        None => HTTP_CONNECTIONS_MAX,
    };
    HTTP_CONNECTIONS_MAX.min(by_descriptors).max(1)
}

/// Answers a connection past the cap with 503 and closes it.
async fn refuse_connection(mut stream: tokio::net::TcpStream, cap: usize) {
    use tokio::io::AsyncWriteExt;
    let body =
        format!("{{\"error\":\"ERR max number of clients reached ({cap} connections are open)\"}}");
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let limit = std::time::Duration::from_millis(config::HTTP_REFUSAL_WRITE_TIMEOUT_MS);
    let _ = tokio::time::timeout(limit, write).await;
}

/// The answer's header of the log position it reflects, made once.
static UPSTASH_SYNC_TOKEN: HeaderName = HeaderName::from_static("upstash-sync-token");

/// The Upstash headers a REST request may carry, found in one pass over its headers. A lookup
/// by name hashes the whole name each time, present or not (about 150 instructions for
/// these), and most requests carry none of them; a pass over the two to six headers a client
/// sends looks at each name's first bytes.
#[derive(Default)]
struct UpstashHeaders<'a> {
    sync_token: Option<&'a HeaderValue>,
    encoding: Option<&'a HeaderValue>,
    response_format: Option<&'a HeaderValue>,
    /// The spelling of the hosted service's documented curl examples (no "s"), read too;
    /// `response_format` wins when both come.
    reponse_format: Option<&'a HeaderValue>,
}

impl<'a> UpstashHeaders<'a> {
    /// The first value of each (as `HeaderMap::get` gives it).
    fn of(headers: &'a HeaderMap) -> Self {
        let mut u = Self::default();
        for (name, value) in headers {
            let Some(rest) = name.as_str().strip_prefix("upstash-") else {
                continue;
            };
            let slot = match rest {
                "sync-token" => &mut u.sync_token,
                "encoding" => &mut u.encoding,
                "response-format" => &mut u.response_format,
                "reponse-format" => &mut u.reponse_format,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        u
    }
}

/// What a REST path's first segment names, in any case; anything else is a command.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Command,
    Pipeline,
    MultiExec,
    Monitor,
    Subscribe,
    Psubscribe,
}

impl Endpoint {
    fn of(first: &str) -> Self {
        let is = |name: &str| first.eq_ignore_ascii_case(name);
        match first.len() {
            7 if is("monitor") => Self::Monitor,
            8 if is("pipeline") => Self::Pipeline,
            9 if is("subscribe") => Self::Subscribe,
            10 if is("multi-exec") => Self::MultiExec,
            10 if is("psubscribe") => Self::Psubscribe,
            _ => Self::Command,
        }
    }
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
    sync_token: u64,
) -> Response<Body> {
    let mut r = Response::new(Body::Owned(Some(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(&UPSTASH_SYNC_TOKEN, sync_token_value(sync_token));
    r
}

thread_local! {
    /// The last sync token's header value on this thread: reads answer the same token until
    /// the next write, and a value made from a number costs two allocations.
    static SYNC_TOKEN_VALUE: std::cell::RefCell<(u64, HeaderValue)> =
        const { std::cell::RefCell::new((0, HeaderValue::from_static("0"))) };
}

fn sync_token_value(seq: u64) -> HeaderValue {
    SYNC_TOKEN_VALUE.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != seq {
            *last = (seq, HeaderValue::from(seq));
        }
        last.1.clone()
    })
}

/// `v` as JSON text, written straight into bytes: `Value`'s `to_string` goes through the
/// formatting machinery, and a publish's answer took 3,600 instructions with it, 1,500
/// without (callgrind).
pub(crate) fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    // A `Value` always serializes (its map keys are strings); the fallback is never taken.
    serde_json::to_vec(v).unwrap_or_else(|_| v.to_string().into_bytes())
}

fn json(status: StatusCode, body: Vec<u8>, sync_token: u64) -> Response<Body> {
    respond(status, "application/json", body, sync_token)
}

fn error(app: &App, status: StatusCode, text: &str) -> Response<Body> {
    let mut body = Vec::with_capacity(text.len() + 12);
    response::error_envelope(&mut body, text);
    json(status, body, app.shared.log.last_seq.load(Ordering::SeqCst))
}

/// The database a request's token opens, and as whom: a database's Standard or Read Only
/// token, or (perhaps) an ACL user's token, which names its database and which the executor,
/// owning the users, checks.
fn authenticate(headers: &HeaderMap, query: Option<&str>, app: &App) -> Option<(DbId, Access)> {
    let presented = request::presented_token(headers, query, "_token")?;
    if presented.is_empty() {
        return None;
    }
    if let Some((db, role)) = app.shared.lookup_token(&presented) {
        let access = match role {
            Role::Standard => Access::Full,
            Role::ReadOnly => Access::ReadOnly,
        };
        return Some((db, access));
    }
    let db = acl_token_db(&presented)?;
    Some((db, Access::Token(Arc::from(&*presented))))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Resp2,
}

async fn read_body(app: &App, body: Incoming) -> Result<Bytes, Response<Body>> {
    body::read(body, app.request_bytes_max)
        .await
        .map_err(|e| match e {
            BodyError::TooSlow => error(
                app,
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "ERR the request body did not arrive within {HTTP_BODY_READ_TIMEOUT_MS} ms"
                ),
            ),
            BodyError::TooLarge(_) => error(
                app,
                StatusCode::PAYLOAD_TOO_LARGE,
                "ERR max request size exceeded",
            ),
            BodyError::Broken(e) => error(
                app,
                StatusCode::BAD_REQUEST,
                &format!("ERR could not read the request body: {e}"),
            ),
        })
}

async fn execute(
    app: &App,
    db: DbId,
    cmds: Vec<Vec<Vec<u8>>>,
    mode: ExecMode,
    access: Access,
    client: Arc<str>,
) -> Result<Answer, Response<Body>> {
    // SCRIPT KILL / FUNCTION KILL cannot wait behind the script they stop. Only the Standard
    // token (Redis's default user may run them); others queue as usual.
    // The table's row says whether the command interrupts Lua (SCRIPT KILL, FUNCTION KILL).
    let kill = match (&access, cmds.as_slice()) {
        (Access::Full, [one]) => crate::command::table::global().interrupt_of(one),
        _ => None,
    };
    let killed = |app: &App, what| {
        app.shared.scripts.kill(what, db).map(|r| Answer {
            replies: Ok(vec![r]),
            sync_token: app.shared.log.last_seq.load(Ordering::Acquire),
            unauthorized: false,
            aborted: false,
        })
    };
    if let Some(answer) = kill.and_then(|what| killed(app, what)) {
        return Ok(answer);
    }
    let gone = || {
        error(
            app,
            StatusCode::SERVICE_UNAVAILABLE,
            "ERR the server is shutting down",
        )
    };
    let (reply, rx) = oneshot::channel();
    let job = Job::Exec {
        db,
        cmds,
        mode,
        access,
        client,
        reply,
        connection: None,
    };
    if app.tx.send(job).await.is_err() {
        return Err(gone());
    }
    let answer = match kill {
        None => rx.await.map_err(|_| gone())?,
        // A kill queued just before a script started would wait for that script's end:
        // while it waits, it watches for a script to start and stops it.
        Some(one) => {
            tokio::pin!(rx);
            loop {
                tokio::select! {
                    a = &mut rx => break a.map_err(|_| gone())?,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(config::SCRIPT_KILL_POLL_MS)) => {
                        if let Some(answer) = killed(app, one) {
                            break answer;
                        }
                    }
                }
            }
        }
    };
    if answer.unauthorized {
        return Err(error(
            app,
            StatusCode::UNAUTHORIZED,
            "WRONGPASS invalid or missing auth token",
        ));
    }
    Ok(answer)
}

/// `GET /healthz` (the process answers) and `GET /readyz` (start-up's replay is done, since
/// the listener opens after it, and the log takes writes: 503 once a failed write or sync
/// has made it refuse them). No token: they tell a load balancer or an orchestrator only
/// whether to send traffic. A server at a past point (`--at`) is ready, and says it is
/// read-only.
fn health(app: &App, path: &str) -> Response<Body> {
    let json = |status: StatusCode, v: serde_json::Value| {
        let mut r = Response::new(Body::Full(Some(Bytes::from(json_bytes(&v)))));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    if path == "/healthz" {
        return json(StatusCode::OK, serde_json::json!({"status": "ok"}));
    }
    let log = &app.shared.log;
    let last_seq = log.last_seq.load(std::sync::atomic::Ordering::SeqCst);
    // One job holding the executor (a script at a named database's limit, say) holds every
    // database's requests: not ready while it lasts.
    let busy_ms = app
        .shared
        .stalled_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    if busy_ms > config::EXECUTOR_STALL_MS {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "not ready", "error": format!("the executor has been on one job for {busy_ms} ms (more than {} ms): every request waits for it", config::EXECUTOR_STALL_MS)}),
        );
    }
    match log.fsync_failed.get() {
        Some(why) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "not ready", "error": crate::reply::errors::log_failed_text(why)}),
        ),
        None => {
            let mut v = serde_json::json!({"status": "ready", "log_last_seq": last_seq, "writable": !app.read_only});
            // A cluster node is ready to serve reads; it takes writes while it leads and its
            // lease holds (as the cluster status's `takes_writes`).
            if let Some(c) = &app.cluster {
                let f = c.facts();
                v["writable"] = (!app.read_only && c.role.lease()).into();
                v["cluster"] =
                    serde_json::json!({"node_id": f.node_id, "leader": f.leader, "term": f.term});
            }
            json(StatusCode::OK, v)
        }
    }
}

/// The origin to allow for a browser's request from `origin`, when `--cors-origin` allows it.
fn cors_origin(app: &App, origin: Option<&hyper::header::HeaderValue>) -> Option<String> {
    let origin = origin?.to_str().ok()?;
    app.cors_origins
        .iter()
        .find(|o| *o == "*" || o.as_str() == origin)
        .map(|o| {
            if o == "*" {
                "*".to_string()
            } else {
                origin.to_string()
            }
        })
}

/// Adds the CORS headers a browser needs to read the answer (and the sync token).
fn with_cors(mut r: Response<Body>, allow: Option<String>) -> Response<Body> {
    let Some(allow) = allow else {
        return r;
    };
    let h = r.headers_mut();
    if let Ok(v) = hyper::header::HeaderValue::from_str(&allow) {
        h.insert("access-control-allow-origin", v);
    }
    h.insert(
        "access-control-expose-headers",
        hyper::header::HeaderValue::from_static("upstash-sync-token"),
    );
    if allow != "*" {
        h.append("vary", hyper::header::HeaderValue::from_static("Origin"));
    }
    r
}

/// A preflight (`OPTIONS` with `Access-Control-Request-Method`) from an allowed origin.
fn preflight(allow: Option<String>) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::new())));
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(
        "access-control-allow-methods",
        hyper::header::HeaderValue::from_static("GET, POST, PUT, HEAD, OPTIONS"),
    );
    h.insert(
        "access-control-allow-headers",
        hyper::header::HeaderValue::from_static(
            "Authorization, Content-Type, Upstash-Encoding, Upstash-Response-Format, Upstash-Sync-Token, Upstash-Telemetry-Runtime, Upstash-Telemetry-Platform, Upstash-Telemetry-Sdk",
        ),
    );
    h.insert(
        "access-control-max-age",
        hyper::header::HeaderValue::from_static("86400"),
    );
    with_cors(r, allow)
}

/// Every request, counted by route and status (`GET /metrics`).
async fn handle(
    req: Request<Incoming>,
    app: &App,
    client: Arc<str>,
    peer: SocketAddr,
) -> Response<Body> {
    let route = route_of(app, req.uri().path());
    // One line per request when logging is on (`--log-level`); the path is not logged, since
    // it may hold keys and values, nor the query, which may hold a token. Off, it costs a
    // check of one static level.
    let logged = tracing::enabled!(target: "tidepool::http", tracing::Level::INFO)
        .then(|| (std::time::Instant::now(), req.method().clone()));
    let r = route_request(req, app, client, peer).await;
    if let Some((started, method)) = logged {
        tracing::info!(
            target: "tidepool::http",
            %method,
            route = crate::metrics::ROUTES.get(route).copied().unwrap_or("other"),
            status = r.status().as_u16(),
            micros = started.elapsed().as_micros() as u64,
            client = %peer,
            "request"
        );
    }
    app.shared
        .metrics
        .count_request(&app.request_counters, route, r.status().as_u16());
    r
}

/// The route a path belongs to, as `/metrics` names it.
/// The route a path belongs to: its index in `metrics::ROUTES`.
fn route_of(app: &App, p: &str) -> usize {
    use crate::metrics::route;
    if app.start.as_ref().is_some_and(|s| s.path == p) {
        return route::START;
    }
    let first = p.trim_start_matches('/').split('/').next().unwrap_or("");
    match first.len() {
        // A command name is usually short; the routes' names are not.
        0 => route::COMMAND,
        1..=5 if first != "v2" => route::COMMAND,
        _ => match first {
            "v2" => route::QSTASH,
            "healthz" | "readyz" => route::HEALTH,
            "metrics" => route::METRICS,
            "_admin" => route::ADMIN,
            f if f.eq_ignore_ascii_case("pipeline") => route::PIPELINE,
            f if f.eq_ignore_ascii_case("multi-exec") => route::MULTI_EXEC,
            f if f.eq_ignore_ascii_case("monitor") => route::MONITOR,
            f if f.eq_ignore_ascii_case("subscribe") || f.eq_ignore_ascii_case("psubscribe") => {
                route::SUBSCRIBE
            }
            _ => route::COMMAND,
        },
    }
}

/// `GET /metrics`: the Prometheus text, for the admin token (or, with `--metrics-open`, for
/// any client on loopback).
async fn metrics(req: &Request<Incoming>, app: &App, peer: SocketAddr) -> Response<Body> {
    let query = req.uri().query();
    let presented = request::presented_token(req.headers(), query, "_token");
    let admin = presented.is_some_and(|t| {
        !app.admin_token.is_empty()
            && crate::secret::ct_eq(t.as_bytes(), app.admin_token.as_bytes())
    });
    if !(admin || (app.metrics_open && peer.ip().is_loopback())) {
        return error(
            app,
            StatusCode::UNAUTHORIZED,
            "ERR /metrics needs the admin token (or --metrics-open, for loopback clients)",
        );
    }
    let (reply, rx) = oneshot::channel();
    if app.tx.send(Job::Metrics { reply }).await.is_err() {
        return error(
            app,
            StatusCode::SERVICE_UNAVAILABLE,
            "ERR the server is shutting down",
        );
    }
    let Ok(mut scrape) = rx.await else {
        return error(
            app,
            StatusCode::SERVICE_UNAVAILABLE,
            "ERR the server is shutting down",
        );
    };
    scrape.cluster = app.cluster.as_ref().map(ClusterHandle::facts);
    match crate::metrics::encode(&app.shared.metrics, &app.shared.log.sync_seconds, &scrape) {
        Ok(text) => {
            let mut r = Response::new(Body::Full(Some(Bytes::from(text))));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        Err(e) => error(
            app,
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("ERR the metrics could not be encoded: {e}"),
        ),
    }
}

async fn route_request(
    req: Request<Incoming>,
    app: &App,
    client: Arc<str>,
    peer: SocketAddr,
) -> Response<Body> {
    let p = req.uri().path();
    if req.method() == Method::GET && p == "/metrics" {
        return metrics(&req, app, peer).await;
    }
    // A follower hands the delivery and admin APIs' writes to its leader whole.
    if let Some(c) = &app.cluster {
        if relays(req.method(), p) && !c.role.leading() {
            return relay(req, app, c).await;
        }
    }
    if p == "/v2" || p.starts_with("/v2/") {
        return qstash::handle(req, app, peer).await;
    }
    if p.starts_with("/llm/") && app.qstash.is_some() {
        return qstash::llm(app);
    }
    if matches!(req.method(), &Method::GET | &Method::HEAD) && (p == "/healthz" || p == "/readyz") {
        return health(app, p);
    }
    if p.strip_prefix(config::ADMIN_PREFIX)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    {
        return admin::handle(req, app).await;
    }
    if app.console && console::owns(p) {
        return console::handle(req, app).await;
    }
    if req.method() == Method::POST && app.start.as_ref().is_some_and(|s| s.path == p) {
        return admin::start(app, peer).await;
    }
    let allow = cors_origin(app, req.headers().get(hyper::header::ORIGIN));
    if req.method() == Method::OPTIONS && allow.is_some() {
        return preflight(allow);
    }
    with_cors(handle_rest(req, app, client).await, allow)
}

async fn handle_rest(req: Request<Incoming>, app: &App, client: Arc<str>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    if !matches!(
        method,
        Method::GET | Method::POST | Method::PUT | Method::HEAD
    ) {
        return error(
            app,
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("ERR HTTP method {method} is not allowed: use GET, POST, PUT or HEAD"),
        );
    }
    let query = parts.uri.query();
    let Some((db, access)) = authenticate(&parts.headers, query, app) else {
        return error(
            app,
            StatusCode::UNAUTHORIZED,
            "WRONGPASS invalid or missing auth token",
        );
    };
    let asked = UpstashHeaders::of(&parts.headers);
    // Read your writes across a cluster: a request that shows a sync token this node has not
    // applied yet (a write answered by the leader) waits for it, a bounded while.
    if let Some(c) = &app.cluster {
        if let Some(token) = asked
            .sync_token
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            if !c.caught_up_to(&app.shared.log, token).await {
                return error(
                    app,
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!(
                        "ERR this node has not applied record #{token} (the upstash-sync-token) within {} ms: retry, or ask the leader",
                        config::CLUSTER_SYNC_WAIT_MS
                    ),
                );
            }
        }
    }
    let enc = match asked.encoding.map(|v| v.as_bytes()) {
        Some(v) if v.eq_ignore_ascii_case(b"base64") => Encoding::Base64,
        _ => Encoding::Plain,
    };
    let format = match asked
        .response_format
        .or(asked.reponse_format)
        .map(|v| v.as_bytes())
    {
        None => Format::Json,
        Some(v) if v.eq_ignore_ascii_case(b"json") => Format::Json,
        Some(v) if v.eq_ignore_ascii_case(b"resp2") => Format::Resp2,
        Some(v) => {
            return error(
                app,
                StatusCode::BAD_REQUEST,
                &format!(
                    "ERR invalid Upstash-Response-Format '{}': use json or resp2",
                    String::from_utf8_lossy(&v.to_ascii_lowercase())
                ),
            )
        }
    };
    if enc == Encoding::Base64 && format == Format::Resp2 {
        return error(
            app,
            StatusCode::BAD_REQUEST,
            "ERR Upstash-Encoding: base64 cannot be combined with Upstash-Response-Format: resp2",
        );
    }
    let path = parts.uri.path().trim_start_matches('/');
    // The path's segments, walked where they lie: the first names the endpoint (any case), the
    // others are arguments. Past the first arm the path is not empty.
    let first = path.split('/').next().unwrap_or("");
    let body_allowed = matches!(method, Method::POST | Method::PUT);
    match Endpoint::of(first) {
        Endpoint::Command if path.is_empty() => {
            let body = match read_body(app, body).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            if body.is_empty() {
                return error(app, StatusCode::BAD_REQUEST, "ERR no command: POST a JSON array such as [\"GET\",\"key\"], or put the command in the path");
            }
            match request::parse_single(&body) {
                Ok(cmd) => single(app, db, cmd, access, client, enc, format).await,
                Err(e) => error(app, StatusCode::BAD_REQUEST, &e),
            }
        }
        ep @ (Endpoint::Pipeline | Endpoint::MultiExec) => {
            if path.contains('/') {
                return error(app, StatusCode::NOT_FOUND, "ERR unknown endpoint");
            }
            let multi = ep == Endpoint::MultiExec;
            let body = match read_body(app, body).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let cmds = match request::parse_batch(&body) {
                Ok(c) => c,
                Err(e) => return error(app, StatusCode::BAD_REQUEST, &e),
            };
            batch(app, db, cmds, multi, access, client, enc, format).await
        }
        Endpoint::Monitor if !path.contains('/') => {
            if let Err(r) = known_token(app, db, &access).await {
                return r;
            }
            stream(app, StreamKind::Monitor, db, access).await
        }
        kind @ (Endpoint::Subscribe | Endpoint::Psubscribe) => {
            let kind = if kind == Endpoint::Subscribe {
                "subscribe"
            } else {
                "psubscribe"
            };
            let names: Vec<Vec<u8>> = path
                .split('/')
                .skip(1)
                .map(|s| request::percent_decode(s, false))
                .collect();
            if names.is_empty() || names.iter().any(|n| n.is_empty()) {
                return error(
                    app,
                    StatusCode::BAD_REQUEST,
                    &format!("ERR {kind} needs a name: /{kind}/<name>"),
                );
            }
            let k = if kind == "subscribe" {
                StreamKind::Channels(names)
            } else {
                StreamKind::Patterns(names)
            };
            if let Err(r) = known_token(app, db, &access).await {
                return r;
            }
            stream(app, k, db, access).await
        }
        Endpoint::Command | Endpoint::Monitor => {
            // Room for the arguments the path gives, and for a body's.
            let count = 1 + path.bytes().filter(|&b| b == b'/').count();
            let mut cmd: Vec<Vec<u8>> = Vec::with_capacity(count + usize::from(body_allowed));
            cmd.extend(path.split('/').map(|s| request::percent_decode(s, false)));
            if body_allowed {
                let body = match read_body(app, body).await {
                    Ok(b) => b,
                    Err(r) => return r,
                };
                if !body.is_empty() {
                    cmd.push(body.to_vec());
                }
            }
            cmd.extend(request::query_args(query));
            single(app, db, cmd, access, client, enc, format).await
        }
    }
}

async fn single(
    app: &App,
    db: DbId,
    cmd: Vec<Vec<u8>>,
    access: Access,
    client: Arc<str>,
    enc: Encoding,
    format: Format,
) -> Response<Body> {
    let waits = replicas_wait(app, &cmd);
    let answer = match execute(app, db, vec![cmd], ExecMode::Each, access, client).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let reply = match answer.replies {
        Ok(mut v) if v.len() == 1 => v.pop().unwrap_or(Reply::Nil),
        Ok(_) => Reply::err("ERR internal error: expected one reply"),
        Err(e) => Reply::Error(e),
    };
    // WAIT on a cluster's leader: the executor answered the count now (and its checks); short
    // of `numreplicas`, it waits for the followers as over RESP.
    let reply = match (waits, reply) {
        (Some((role, since, want, deadline)), Reply::Int(n)) if n < want => {
            Reply::Int(role.replicas_reaching(since, want, n, deadline).await)
        }
        (_, r) => r,
    };
    let status = if reply.is_error() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let size = reply.wire_bytes();
    let body = encoded(size, move || {
        // One allocation for a small reply: the envelope's braces and key, and the reply
        // (a JSON string of it may be longer, with escapes; then the vector grows).
        let mut body = Vec::with_capacity(size.min(1 << 16) + 16);
        match format {
            Format::Resp2 => reply.write_resp2(&mut body),
            Format::Json => response::envelope(&mut body, &reply, enc),
        }
        body
    })
    .await;
    match format {
        Format::Resp2 => respond(status, "application/octet-stream", body, answer.sync_token),
        Format::Json => json(status, body, answer.sync_token),
    }
}

/// For `WAIT numreplicas timeout` sent to a cluster's leader: its role, its last log index
/// now, `numreplicas` and the deadline (None: a timeout of 0, no limit). The count then waits
/// for the followers to hold what the leader held when the WAIT came, as Redis's WAIT waits
/// for its replicas' acknowledgements.
#[allow(clippy::type_complexity)]
fn replicas_wait(
    app: &App,
    cmd: &[Vec<u8>],
) -> Option<(
    Arc<crate::executor::cluster::Role>,
    u64,
    i64,
    Option<tokio::time::Instant>,
)> {
    let c = app.cluster.as_ref()?;
    if cmd.len() != 3 || !cmd[0].eq_ignore_ascii_case(b"wait") || !c.role.leading() {
        return None;
    }
    let want = crate::num::parse_i64(&cmd[1])?;
    let timeout = crate::num::parse_i64(&cmd[2]).filter(|t| *t >= 0)?;
    let since = c.role.wait_since();
    let deadline = (timeout > 0)
        .then(|| tokio::time::Instant::now() + std::time::Duration::from_millis(timeout as u64));
    Some((c.role.clone(), since, want, deadline))
}

/// Runs `encode` here for a small reply, and on the blocking pool for a large one, so that
/// encoding hundreds of megabytes holds up no other connection.
async fn encoded(size: usize, encode: impl FnOnce() -> Vec<u8> + Send + 'static) -> Vec<u8> {
    if size <= config::REPLY_ENCODE_INLINE_BYTES_MAX {
        return encode();
    }
    tokio::task::spawn_blocking(encode)
        .await
        .unwrap_or_else(|_| b"{\"error\":\"ERR the reply could not be encoded\"}".to_vec())
}

#[allow(clippy::too_many_arguments)]
async fn batch(
    app: &App,
    db: DbId,
    cmds: Vec<Vec<Vec<u8>>>,
    multi: bool,
    access: Access,
    client: Arc<str>,
    enc: Encoding,
    format: Format,
) -> Response<Body> {
    if cmds.is_empty() {
        return json(
            StatusCode::OK,
            b"[]".to_vec(),
            app.shared.log.last_seq.load(Ordering::SeqCst),
        );
    }
    let mode = if multi {
        ExecMode::Multi
    } else {
        ExecMode::Each
    };
    let answer = match execute(app, db, cmds, mode, access, client).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    match answer.replies {
        Err(e) => {
            let mut body = Vec::new();
            response::error_envelope(&mut body, &e);
            json(StatusCode::BAD_REQUEST, body, answer.sync_token)
        }
        Ok(replies) if format == Format::Resp2 && !multi => {
            let size = replies.iter().map(Reply::wire_bytes).sum();
            let body = encoded(size, move || {
                let mut body = Vec::new();
                for r in &replies {
                    r.write_resp2(&mut body);
                }
                body
            })
            .await;
            respond(
                StatusCode::OK,
                "application/octet-stream",
                body,
                answer.sync_token,
            )
        }
        Ok(replies) => {
            let size = replies.iter().map(Reply::wire_bytes).sum();
            let body = encoded(size, move || response::envelopes(&replies, enc)).await;
            json(StatusCode::OK, body, answer.sync_token)
        }
    }
}

enum StreamKind {
    Monitor,
    Channels(Vec<Vec<u8>>),
    Patterns(Vec<Vec<u8>>),
}

/// For a token other than the two fixed ones: 401 unless it is a live ACL user's token (asked of
/// the executor, which owns the users).
async fn known_token(app: &App, db: DbId, access: &Access) -> Result<(), Response<Body>> {
    let Access::Token(t) = access else {
        return Ok(());
    };
    let (reply, rx) = oneshot::channel();
    let job = Job::CheckToken {
        db,
        token: t.clone(),
        reply,
    };
    let known = app.tx.send(job).await.is_ok() && rx.await.unwrap_or(false);
    if known {
        Ok(())
    } else {
        Err(error(
            app,
            StatusCode::UNAUTHORIZED,
            "WRONGPASS invalid or missing auth token",
        ))
    }
}

async fn stream(app: &App, kind: StreamKind, db: DbId, access: Access) -> Response<Body> {
    let name = match &kind {
        StreamKind::Monitor => "monitor",
        StreamKind::Channels(_) => "subscribe",
        StreamKind::Patterns(_) => "psubscribe",
    };
    if access != Access::Full {
        return error(
            app,
            StatusCode::BAD_REQUEST,
            &format!(
                "NOPERM this user has no permissions to run the '{name}' command or its subcommand"
            ),
        );
    }
    let (tx, rx) = mpsc::channel(config::SUBSCRIBER_BUFFER_EVENTS_MAX);
    let id = app.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
    let lagged = Arc::new(AtomicBool::new(false));
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let notice_head = format!(
        ": tidepool: this stream fell more than {} events or {} bytes behind and is closed\n",
        config::SUBSCRIBER_BUFFER_EVENTS_MAX,
        config::SUBSCRIBER_BUFFER_BYTES_MAX
    );
    let mut notice = notice_head.into_bytes();
    let sub_kind = match kind {
        StreamKind::Monitor => {
            notice.extend_from_slice(&sse::event(
                b"\"ERR monitor stream fell behind and was closed\"",
            ));
            SubKind::Monitor
        }
        StreamKind::Channels(chs) => {
            for c in &chs {
                notice.extend_from_slice(&sse::event(&[&b"unsubscribe,"[..], c, b",0"].concat()));
            }
            SubKind::Channels(chs)
        }
        StreamKind::Patterns(pats) => {
            for p in &pats {
                notice.extend_from_slice(&sse::event(&[&b"punsubscribe,"[..], p, b",0"].concat()));
            }
            SubKind::Patterns(pats)
        }
    };
    let (opened, refusal) = oneshot::channel();
    let handle = SubscriberHandle {
        id,
        db,
        kind: sub_kind,
        tx,
        lagged: lagged.clone(),
        queued: queued.clone(),
        opened: Some(opened),
        wire: crate::executor::Wire::Sse,
    };
    let busy = || {
        error(
            app,
            StatusCode::SERVICE_UNAVAILABLE,
            "ERR the server is busy or shutting down; try again",
        )
    };
    if app.tx.try_send(Job::Subscribe(handle)).is_err() {
        return busy();
    }
    // The executor opens the stream, or refuses it (the database's daily limit is spent).
    match refusal.await {
        Ok(None) => {}
        Ok(Some(why)) => return error(app, StatusCode::BAD_REQUEST, &why),
        Err(_) => return busy(),
    }
    let period = std::time::Duration::from_millis(config::SSE_PING_INTERVAL_MS);
    let ping = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let body = sse::SseBody {
        rx,
        ping,
        lagged,
        queued,
        lag_notice: Some(Bytes::from(notice)),
        rest: [None, None],
        unsubscribe: Some((app.tx.clone(), db, id)),
        done: false,
    };
    let mut r = Response::new(Body::Sse(Box::new(body)));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    h.insert(
        "upstash-sync-token",
        HeaderValue::from(app.shared.log.last_seq.load(Ordering::SeqCst)),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Body as _;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        h
    }

    /// Guards the one-pass read of the Upstash headers against `HeaderMap::get`'s answers: the
    /// first value of a repeated header, the correctly spelt format header over the misspelt
    /// one whatever their order, and nothing from other headers.
    #[test]
    fn the_upstash_headers_read_in_one_pass_are_those_a_lookup_by_name_gives() {
        let h = headers(&[
            ("upstash-reponse-format", "resp2"),
            ("authorization", "Bearer x"),
            ("upstash-encoding", "base64"),
            ("upstash-encoding", "plain"),
            ("upstash-response-format", "json"),
            ("upstash-sync-token", "7"),
            ("upstash-other", "1"),
        ]);
        let u = UpstashHeaders::of(&h);
        assert_eq!(u.encoding, h.get("upstash-encoding"));
        assert_eq!(u.encoding.map(HeaderValue::as_bytes), Some(&b"base64"[..]));
        assert_eq!(
            u.response_format.or(u.reponse_format),
            h.get("upstash-response-format")
        );
        assert_eq!(u.sync_token.map(HeaderValue::as_bytes), Some(&b"7"[..]));
        let h = headers(&[("upstash-reponse-format", "resp2"), ("host", "x")]);
        let u = UpstashHeaders::of(&h);
        assert_eq!(
            u.response_format.or(u.reponse_format),
            h.get("upstash-reponse-format")
        );
        let none = HeaderMap::new();
        let u = UpstashHeaders::of(&none);
        assert!(u.encoding.is_none() && u.response_format.is_none() && u.sync_token.is_none());
    }

    /// Guards the path's first segment: each endpoint in any case, and anything else (a
    /// longer or shorter name, the empty path) a command.
    #[test]
    fn a_paths_first_segment_names_its_endpoint_in_any_case() {
        for (first, want) in [
            ("pipeline", Endpoint::Pipeline),
            ("PIPELINE", Endpoint::Pipeline),
            ("Multi-Exec", Endpoint::MultiExec),
            ("monitor", Endpoint::Monitor),
            ("SUBSCRIBE", Endpoint::Subscribe),
            ("pSubscribe", Endpoint::Psubscribe),
            ("pipelines", Endpoint::Command),
            ("multi", Endpoint::Command),
            ("monito", Endpoint::Command),
            ("set", Endpoint::Command),
            ("", Endpoint::Command),
        ] {
            assert!(Endpoint::of(first) == want, "{first}");
        }
    }

    /// Guards the sync token's header value kept between answers: a new position gives its
    /// own value at once.
    #[test]
    fn the_sync_token_header_follows_the_position_it_is_given() {
        for seq in [5u64, 5, 6, 0, u64::MAX, 6] {
            assert_eq!(sync_token_value(seq), HeaderValue::from(seq));
        }
    }

    /// Guards an answer's own vector as a body: its bytes, once, with their exact length.
    #[test]
    fn an_owned_body_gives_its_bytes_once() {
        use bytes::Buf as _;
        let mut body = Body::Owned(Some(b"{\"result\":\"OK\"}".to_vec()));
        assert_eq!(body.size_hint().exact(), Some(15));
        assert!(!body.is_end_stream());
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) else {
            panic!("no frame");
        };
        let mut data = frame.into_data().unwrap_or_else(|_| panic!("not data"));
        assert_eq!(
            data.copy_to_bytes(data.remaining()),
            &b"{\"result\":\"OK\"}"[..]
        );
        assert!(body.is_end_stream());
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(None)
        ));
    }
}
