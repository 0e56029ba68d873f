//! Raft's messages between nodes: HTTP/1.1 on the cluster listener, one `POST` per message
//! (`/raft/append`, `/raft/vote`, `/raft/snapshot`), the body MessagePack of openraft's own
//! message (a snapshot's chunk as `bin`: `SnapshotChunk`) and the answer MessagePack of its
//! `Result`; and what a follower hands its leader (`/raft/exec`, `/raft/http`, and
//! `/raft/resp`, a RESP connection moved to the leader over an upgraded connection). Every
//! request is signed with the cluster's secret, which never travels: `Authorization:
//! TidepoolCluster <ms>.<nonce>.<body SHA-256>.<signature>`, the signature an HMAC-SHA256 of
//! the method, the path, the time, the nonce and the body's SHA-256. The header is checked
//! before the body is read (a request that is not a peer's costs its head, not its body),
//! and the body against its SHA-256 once it has come. A request signed more than
//! `CLUSTER_AUTH_SKEW_MS` from this node's clock, or whose nonce was seen already (a
//! replay), or not signed with the secret, too large, or not a message, is refused with a
//! status and a JSON `{"error": ...}` and reaches openraft never.

use super::{NodeId, TypeConfig};
use crate::config;
use crate::secret::hex;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;

/// What a node does with a request a follower forwarded to it (`/raft/exec`): bytes in, bytes
/// out, so this module knows nothing of the executor that answers them.
pub type Forward = Arc<
    dyn Fn(
            Vec<u8>,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, String>> + Send>>
        + Send
        + Sync,
>;

/// A connection moved here from a follower (`/raft/resp`): the upgraded stream, RESP both
/// ways from then on.
pub type Moved = hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>;

/// What serves a moved connection, once it is upgraded.
pub type MovedRun = Box<
    dyn FnOnce(Moved) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send,
>;

/// What a node does with a connection a follower moves to it (`/raft/resp`): given the
/// connection's state (bytes, as `forward`'s are), what will serve it, or why it is refused
/// (the node does not lead, it holds as many connections as it may).
pub type Tunnel = Arc<dyn Fn(Vec<u8>) -> Result<MovedRun, String> + Send + Sync>;

/// What a node does with what its followers hand it: forwarded requests (`/raft/exec`),
/// moved connections (`/raft/resp`), and relayed HTTP requests, sent on to its own HTTP
/// listener (`/raft/http`).
#[derive(Clone, Default)]
pub struct Handlers {
    pub forward: Option<Forward>,
    pub tunnel: Option<Tunnel>,
    pub local_http: Option<std::net::SocketAddr>,
}

/// The `Upgrade` protocol of `/raft/resp`.
pub const MOVED_PROTOCOL: &str = "tidepool-resp";

/// An HTTP request a follower hands its leader whole (the delivery and admin APIs' writes),
/// and the leader's answer to it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Relayed {
    /// The method; for an answer, empty.
    pub method: String,
    /// Path and query; for an answer, empty.
    pub target: String,
    /// The status of an answer (0 in a request).
    pub status: u16,
    pub headers: Vec<(String, String)>,
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// In an answer: the leader's last log index when it answered, which holds the request's
    /// writes; the follower answers once it has applied as far (its next read shows them).
    #[serde(default)]
    pub applied: u64,
}

/// Headers that belong to one connection, not to the request it carries.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "upgrade"
            | "te"
            | "trailer"
            | "host"
            | "content-length"
    )
}

/// Opens a client per peer (reqwest keeps its connections).
#[derive(Clone)]
pub struct Network {
    client: reqwest::Client,
    secret: Arc<str>,
    /// `https` when the cluster speaks TLS.
    scheme: &'static str,
}

/// The cluster listener's TLS (`--cluster-tls-cert`, `--cluster-tls-key`, `--cluster-tls-ca`):
/// what it serves, and the certificates a node trusts its peers' by (only those).
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// PEM of the certificate authority (or the shared certificate) peers' chains end in.
    pub ca_pem: Vec<u8>,
}

impl Tls {
    /// The files of the flags, checked as a peer dialling `listen` would check them (not
    /// when it listens on every address, whose name is not known).
    pub fn load(
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
        listen: Option<std::net::SocketAddr>,
    ) -> Result<Tls, String> {
        let acceptor =
            crate::tls::acceptor(("--cluster-tls-cert", "--cluster-tls-key"), cert, key)?;
        crate::tls::certificates("--cluster-tls-ca", ca)?;
        if let Some(a) = listen.filter(|a| !a.ip().is_unspecified()) {
            crate::tls::check_chain_for(
                ("--cluster-tls-cert", "--cluster-tls-ca"),
                cert,
                ca,
                a.ip(),
            )?;
        }
        let ca_pem =
            std::fs::read(ca).map_err(|e| format!("--cluster-tls-ca {}: {e}", ca.display()))?;
        Ok(Tls { acceptor, ca_pem })
    }
}

/// The `Authorization` value of a request: signed with `secret` at `now_ms` with `nonce`.
pub fn sign(
    secret: &str,
    method: &str,
    path: &str,
    body: &[u8],
    now_ms: u64,
    nonce: u64,
) -> String {
    sign_digest(
        secret,
        method,
        path,
        &hex(&body_digest(body)),
        now_ms,
        nonce,
    )
}

/// The `Authorization` value of a request whose body's SHA-256 is `digest` (hex).
fn sign_digest(
    secret: &str,
    method: &str,
    path: &str,
    digest: &str,
    now_ms: u64,
    nonce: u64,
) -> String {
    format!(
        "TidepoolCluster {now_ms}.{nonce:016x}.{digest}.{}",
        signature(secret, method, path, digest, now_ms, nonce)
    )
}

fn body_digest(body: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(body).into()
}

/// `body` and its SHA-256 (hex), hashed on a blocking thread when it is larger than
/// `CLUSTER_LARGE_MESSAGE_BYTES`: the runtime's thread, which may be the node's only one,
/// runs Raft's core, heartbeats and the executor, and hashing tens of megabytes there held
/// them all. None only when the runtime is stopping.
async fn hashed<B: AsRef<[u8]> + Send + 'static>(body: B) -> Option<(B, String)> {
    if body.as_ref().len() <= config::CLUSTER_LARGE_MESSAGE_BYTES {
        let d = hex(&body_digest(body.as_ref()));
        return Some((body, d));
    }
    tokio::task::spawn_blocking(move || {
        let d = hex(&body_digest(body.as_ref()));
        (body, d)
    })
    .await
    .ok()
}

/// The signature of a request whose body's SHA-256 is `digest` (hex).
fn signature(
    secret: &str,
    method: &str,
    path: &str,
    digest: &str,
    at_ms: u64,
    nonce: u64,
) -> String {
    use hmac::{KeyInit, Mac};
    use sha2::Sha256;
    let Ok(mut m) = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    m.update(format!("{method}\n{path}\n{at_ms}\n{nonce:016x}\n").as_bytes());
    m.update(digest.as_bytes());
    hex(&m.finalize().into_bytes())
}

/// The nonces of the requests accepted within the allowed skew, to refuse a replay.
#[derive(Default)]
pub struct Seen {
    nonces: std::collections::HashMap<u64, u64>,
}

impl Seen {
    /// Whether `nonce` is new (and so is kept until `at_ms` is past the window).
    fn first(&mut self, nonce: u64, at_ms: u64, now_ms: u64) -> bool {
        if self.nonces.len() >= config::CLUSTER_AUTH_NONCES_MAX {
            self.nonces
                .retain(|_, at| now_ms.saturating_sub(*at) <= config::CLUSTER_AUTH_SKEW_MS);
            if self.nonces.len() >= config::CLUSTER_AUTH_NONCES_MAX {
                return false;
            }
        }
        self.nonces.insert(nonce, at_ms).is_none()
    }
}

/// Whether `header` is a valid signature of this request's head by a holder of `secret`;
/// the SHA-256 it signs the body by (hex), which the body must then have.
fn verified(
    secret: &str,
    header: &str,
    method: &str,
    path: &str,
    seen: &std::sync::Mutex<Seen>,
) -> Result<String, &'static str> {
    let mut parts = header
        .strip_prefix("TidepoolCluster ")
        .ok_or("the request is not signed")?
        .splitn(4, '.');
    let (Some(at), Some(nonce), Some(digest), Some(sig)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the signature is malformed");
    };
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("the signature is malformed");
    }
    let at: u64 = at.parse().map_err(|_| "the signature is malformed")?;
    let nonce = u64::from_str_radix(nonce, 16).map_err(|_| "the signature is malformed")?;
    let now = crate::clock::wall_unix_ms();
    if !fresh(header) {
        return Err(STALE);
    }
    let want = signature(secret, method, path, digest, at, nonce);
    if want.is_empty() || !crate::secret::ct_eq(want.as_bytes(), sig.as_bytes()) {
        return Err("the request is not signed with the cluster's secret");
    }
    let mut seen = seen.lock().map_err(|_| "the listener's lock is poisoned")?;
    if !seen.first(nonce, at, now) {
        return Err("the request was sent before (a replay)");
    }
    Ok(digest.to_ascii_lowercase())
}

const STALE: &str = "the request was signed too long ago, or by a clock too far from this one's";

/// Whether a signature header's time is within the allowed skew of this node's clock.
fn fresh(header: &str) -> bool {
    header
        .strip_prefix("TidepoolCluster ")
        .and_then(|h| h.split('.').next())
        .and_then(|t| t.parse::<u64>().ok())
        .is_some_and(|at| crate::clock::wall_unix_ms().abs_diff(at) <= config::CLUSTER_AUTH_SKEW_MS)
}

/// A new nonce for a request.
fn nonce() -> u64 {
    crate::secret::random_bytes::<8>()
        .map(u64::from_le_bytes)
        .unwrap_or_else(|_| crate::clock::wall_unix_us())
}

impl Network {
    /// The `Authorization` value of a POST to `path` of a body whose SHA-256 is `digest`.
    fn authorization(&self, path: &str, digest: &str) -> String {
        sign_digest(
            &self.secret,
            "POST",
            path,
            digest,
            crate::clock::wall_unix_ms(),
            nonce(),
        )
    }

    /// The way to the other nodes: plain HTTP, or TLS trusting only `tls`'s authority.
    pub fn new(secret: &str, tls: Option<&Tls>) -> Result<Network, String> {
        let mut b = reqwest::Client::builder()
            .no_proxy()
            .pool_idle_timeout(std::time::Duration::from_secs(60));
        if let Some(t) = tls {
            let mut ca = reqwest::Certificate::from_pem_bundle(&t.ca_pem)
                .map_err(|e| format!("--cluster-tls-ca: {e}"))?;
            b = b.tls_built_in_root_certs(false).https_only(true);
            for c in ca.drain(..) {
                b = b.add_root_certificate(c);
            }
        }
        Ok(Network {
            client: b
                .build()
                .map_err(|e| format!("the cluster's HTTP client: {e}"))?,
            secret: secret.into(),
            scheme: if tls.is_some() { "https" } else { "http" },
        })
    }
}

impl Network {
    /// Hands an HTTP request to the node whose cluster listener is at `addr`; its answer.
    pub async fn relay(&self, addr: &str, req: &Relayed) -> Result<Relayed, String> {
        let body = rmp_serde::to_vec_named(req).map_err(|e| e.to_string())?;
        let bytes = self.post(addr, "/raft/http", body).await?;
        rmp_serde::from_slice(&bytes).map_err(|e| format!("the leader's answer does not read: {e}"))
    }

    /// Sends a message for the executor of the node whose cluster listener is at `addr` (a
    /// forwarded request, publishes); its answer.
    pub async fn forward(&self, addr: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
        self.post(addr, "/raft/exec", body).await
    }

    /// Moves a connection to the node whose cluster listener is at `addr`: a signed `POST
    /// /raft/resp` of its state (`start`), upgraded to a stream that then carries RESP both
    /// ways. Opening it (not what follows) is bounded by `CLUSTER_FORWARD_TIMEOUT_MS`.
    pub async fn open_moved(
        &self,
        addr: &str,
        start: Vec<u8>,
    ) -> Result<reqwest::Upgraded, String> {
        let sent = self
            .signed_post(addr, "/raft/resp", start)
            .await?
            .header(hyper::header::CONNECTION, "upgrade")
            .header(hyper::header::UPGRADE, MOVED_PROTOCOL)
            .send();
        let wait = std::time::Duration::from_millis(config::CLUSTER_FORWARD_TIMEOUT_MS);
        let sent = tokio::time::timeout(wait, sent)
            .await
            .map_err(|_| "it did not answer in time".to_string())?
            .map_err(|e| e.to_string())?;
        let status = sent.status();
        if status != StatusCode::SWITCHING_PROTOCOLS {
            let bytes = sent.bytes().await.unwrap_or_default();
            let why = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
            return Err(format!("{addr} answered {status}: {why}"));
        }
        sent.upgrade().await.map_err(|e| e.to_string())
    }

    /// A POST of `body` to `path` at `addr`, signed (`hashed`: off the runtime's thread when
    /// large).
    async fn signed_post(
        &self,
        addr: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<reqwest::RequestBuilder, String> {
        let (body, digest) = hashed(body)
            .await
            .ok_or("the node is stopping: the message was not sent")?;
        Ok(self
            .client
            .post(format!("{}://{addr}{path}", self.scheme))
            .header(
                hyper::header::AUTHORIZATION,
                self.authorization(path, &digest),
            )
            .body(body))
    }

    /// One signed POST of `body` to `path` at `addr`; the answer's body, or why there is none.
    async fn post(&self, addr: &str, path: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let sent = self
            .signed_post(addr, path, body)
            .await?
            .timeout(std::time::Duration::from_millis(
                config::CLUSTER_FORWARD_TIMEOUT_MS,
            ))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = sent.status();
        let bytes = sent.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!(
                "{addr} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        Ok(bytes.to_vec())
    }
}

/// `/raft/snapshot`'s body: openraft's `InstallSnapshotRequest`, with its chunk as MessagePack
/// `bin`. openraft's own serde form writes the chunk's bytes as an array of integers (one or
/// two bytes each, each encoded and decoded on its own), which made a few megabytes of
/// snapshot take longer to send than the leader waited for it.
#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotChunk {
    vote: openraft::Vote<NodeId>,
    meta: openraft::SnapshotMeta<NodeId, BasicNode>,
    offset: u64,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
    done: bool,
}

impl From<InstallSnapshotRequest<TypeConfig>> for SnapshotChunk {
    fn from(r: InstallSnapshotRequest<TypeConfig>) -> SnapshotChunk {
        SnapshotChunk {
            vote: r.vote,
            meta: r.meta,
            offset: r.offset,
            data: r.data,
            done: r.done,
        }
    }
}

impl From<SnapshotChunk> for InstallSnapshotRequest<TypeConfig> {
    fn from(c: SnapshotChunk) -> InstallSnapshotRequest<TypeConfig> {
        InstallSnapshotRequest {
            vote: c.vote,
            meta: c.meta,
            offset: c.offset,
            data: c.data,
            done: c.done,
        }
    }
}

/// One peer.
pub struct Peer {
    net: Network,
    target: NodeId,
    addr: String,
    /// The append of entries last sent to this peer and not yet answered (`append_entries`).
    in_flight: Option<InFlight>,
}

type AppendResult =
    Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>>;

/// An append sent on its own task, which goes on when openraft stops waiting for it: its
/// vote, the entry it follows and its last entry, so that openraft's next try of the same
/// entries (or of more after them) takes its answer instead of sending them again.
struct InFlight {
    vote: openraft::Vote<NodeId>,
    prev: Option<openraft::LogId<NodeId>>,
    last: openraft::LogId<NodeId>,
    task: tokio::task::JoinHandle<AppendResult>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            net: self.clone(),
            target,
            addr: node.addr.clone(),
            in_flight: None,
        }
    }
}

/// None when `entries` fit in one append (`CLUSTER_APPEND_BYTES_TARGET`, or a single entry);
/// else how many of them, from the first, do (at least one).
fn entries_that_fit(entries: &[openraft::Entry<TypeConfig>]) -> Option<u64> {
    let size = |e: &openraft::Entry<TypeConfig>| match &e.payload {
        openraft::EntryPayload::Normal(b) => b.frames.len(),
        _ => 0,
    };
    if entries.len() < 2
        || entries.iter().map(size).sum::<usize>() <= config::CLUSTER_APPEND_BYTES_TARGET
    {
        return None;
    }
    let mut sum = 0;
    let mut n = 0u64;
    for e in entries {
        sum += size(e);
        if n > 0 && sum > config::CLUSTER_APPEND_BYTES_TARGET {
            break;
        }
        n += 1;
    }
    Some(n.max(1))
}

/// How long a peer is given to answer a message of `bytes`: openraft's `wait`, or more for a
/// large one, which the peer must read, check and sync before it answers (at
/// `CLUSTER_APPEND_BYTES_PER_SEC_MIN`).
fn patience(wait: std::time::Duration, bytes: usize) -> std::time::Duration {
    let rate = config::CLUSTER_APPEND_BYTES_PER_SEC_MIN.max(1);
    let ms = (bytes as u64).saturating_mul(1000) / rate;
    wait.max(std::time::Duration::from_millis(
        config::CLUSTER_HEARTBEAT_MS.saturating_add(ms),
    ))
}

/// One signed message to `/raft/{path}` at `addr` (node `target`), given `wait` to answer;
/// openraft's answer, or why there is none.
async fn exchange<Resp: DeserializeOwned, E>(
    net: Network,
    addr: String,
    target: NodeId,
    path: &'static str,
    body: Vec<u8>,
    wait: std::time::Duration,
) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
where
    E: std::error::Error + DeserializeOwned,
{
    let sent = net
        .signed_post(&addr, &format!("/raft/{path}"), body)
        .await
        .map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?
        .timeout(wait)
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                // Not unreachable (which makes openraft hold off sending for a while): slow.
                RPCError::Network(NetworkError::new(&e))
            } else {
                RPCError::Unreachable(Unreachable::new(&e))
            }
        })?;
    let status = sent.status();
    let bytes = sent
        .bytes()
        .await
        .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
    if !status.is_success() {
        return Err(RPCError::Network(NetworkError::new(
            &std::io::Error::other(format!(
                "{addr} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )),
        )));
    }
    let answer: Result<Resp, RaftError<NodeId, E>> =
        rmp_serde::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
    answer.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
}

impl Peer {
    async fn send<Req: Serialize, Resp: DeserializeOwned, E>(
        &self,
        path: &'static str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        E: std::error::Error + DeserializeOwned,
    {
        let body =
            rmp_serde::to_vec_named(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        exchange(
            self.net.clone(),
            self.addr.clone(),
            self.target,
            path,
            body,
            option.hard_ttl(),
        )
        .await
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    /// openraft 0.9 waits one heartbeat (`CLUSTER_HEARTBEAT_MS`) for an append's answer and
    /// then sends it again, which a batch of tens of megabytes always outlasts (the peer
    /// reads, checks and syncs it first): sent again and again, it never committed, and
    /// nothing after it did. So entries of more than `CLUSTER_LARGE_MESSAGE_BYTES` go out on
    /// a task of their own, given the time their size needs (`patience`), and a later try of
    /// the same entries, or of more after them, waits for that task's answer instead of
    /// sending them again. When it answers for fewer
    /// entries than the try holds, the answer is a partial success up to its last entry,
    /// which is what openraft then sends on from. Raft allows an answer to any message it
    /// sent, however late; a message of another vote or after another entry drops the task.
    /// A heartbeat (no entries) is sent on its own, beside any such task.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> AppendResult {
        let Some(last) = rpc.entries.last().map(|e| e.log_id) else {
            return self.send("append", &rpc, &option).await;
        };
        let joins = self.in_flight.as_ref().is_some_and(|f| {
            f.vote == rpc.vote
                && f.prev == rpc.prev_log_id
                && rpc.entries.iter().any(|e| e.log_id == f.last)
        });
        if !joins {
            self.in_flight = None;
            // Entries beyond what one message should carry: openraft is told how many to send
            // instead (its hint lasts ten messages); a single entry always goes.
            if let Some(fit) = entries_that_fit(&rpc.entries) {
                return Err(RPCError::PayloadTooLarge(
                    openraft::error::PayloadTooLarge::new_entries_hint(fit),
                ));
            }
            let body = rmp_serde::to_vec_named(&rpc)
                .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
            if body.len() <= config::CLUSTER_LARGE_MESSAGE_BYTES {
                // The usual append, answered well within the heartbeat: sent as it was.
                return exchange(
                    self.net.clone(),
                    self.addr.clone(),
                    self.target,
                    "append",
                    body,
                    option.hard_ttl(),
                )
                .await;
            }
            let wait = patience(option.hard_ttl(), body.len());
            let task = tokio::spawn(exchange(
                self.net.clone(),
                self.addr.clone(),
                self.target,
                "append",
                body,
                wait,
            ));
            self.in_flight = Some(InFlight {
                vote: rpc.vote,
                prev: rpc.prev_log_id,
                last,
                task,
            });
        }
        let Some(f) = self.in_flight.as_mut() else {
            return Err(RPCError::Network(NetworkError::new(
                &std::io::Error::other("no append in flight"),
            )));
        };
        // openraft drops this future at its timeout; the task goes on, kept in `in_flight`.
        let done = (&mut f.task).await;
        let answered = f.last;
        self.in_flight = None;
        let answer =
            done.map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))??;
        Ok(match answer {
            AppendEntriesResponse::Success if answered != last => {
                AppendEntriesResponse::PartialSuccess(Some(answered))
            }
            other => other,
        })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.send("snapshot", &SnapshotChunk::from(rpc), &option)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.send("vote", &rpc, &option).await
    }
}

fn reply(status: StatusCode, body: Vec<u8>, json: bool) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let kind = if json {
        "application/json"
    } else {
        "application/msgpack"
    };
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn refuse(status: StatusCode, why: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "error": why }).to_string().into_bytes();
    reply(status, body, true)
}

fn answer<T: Serialize>(v: &T) -> Response<Full<Bytes>> {
    match rmp_serde::to_vec_named(v) {
        Ok(b) => reply(StatusCode::OK, b, false),
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("encoding the answer: {e}"),
        ),
    }
}

/// A node whose directory was emptied under the same id has forgotten the entries it held for
/// a majority and the vote it gave. Were it to vote at once, it could elect a node that lacks
/// an entry it had helped commit (it and one other held the entry, the third did not), and the
/// new leader would replace that entry. So a node with no log and no snapshot withholds its
/// vote from a candidate whose log goes past the cluster's first entry (the membership at
/// index 0, which the nodes of a first formation vote on) for `CLUSTER_EMPTY_VOTE_HOLD_MS`
/// after the first such request, or until a leader has given it entries: the node that holds
/// the entry, if it is up, stands and wins meanwhile. After that it votes as openraft decides,
/// so that a voter that never got an entry cannot keep a cluster that lost a node for good
/// from electing a leader. The refusal to send, or None to let openraft decide.
fn forgot_its_log(
    raft: &Raft<TypeConfig>,
    req: &VoteRequest<NodeId>,
) -> Option<VoteResponse<NodeId>> {
    let (empty, vote) = {
        let m = raft.metrics();
        let m = m.borrow();
        (m.last_log_index.is_none() && m.snapshot.is_none(), m.vote)
    };
    let past_first = req.last_log_id.is_some_and(|l| l.index > 0);
    if !empty || !past_first {
        return None;
    }
    static FIRST_ASKED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let mut first = false;
    let asked = FIRST_ASKED.get_or_init(|| {
        first = true;
        std::time::Instant::now()
    });
    if first {
        crate::log::line(&format!(
            "cluster: this node holds no log; it withholds its vote from node {} (and any candidate past the first entry) for {} ms, or until a leader gives it entries",
            req.vote.leader_id().voted_for().unwrap_or_default(),
            config::CLUSTER_EMPTY_VOTE_HOLD_MS
        ));
    }
    if asked.elapsed() >= std::time::Duration::from_millis(config::CLUSTER_EMPTY_VOTE_HOLD_MS) {
        return None;
    }
    Some(VoteResponse {
        vote,
        vote_granted: false,
        last_log_id: None,
    })
}

/// One message from a peer, for the local node.
pub async fn handle(
    mut req: Request<hyper::body::Incoming>,
    raft: &Raft<TypeConfig>,
    secret: &str,
    ours: &Handlers,
    seen: &std::sync::Mutex<Seen>,
) -> Response<Full<Bytes>> {
    let (forward, tunnel, local_http) =
        (ours.forward.as_ref(), ours.tunnel.as_ref(), ours.local_http);
    // A moved connection's stream, once the answer below upgrades it (taken before the body
    // is read; nothing unless the request is signed and a moved connection is taken).
    let upgrade = (req.uri().path() == "/raft/resp").then(|| hyper::upgrade::on(&mut req));
    let asks_upgrade = req
        .headers()
        .get(hyper::header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(MOVED_PROTOCOL.as_bytes()));
    if req.method() != hyper::Method::POST {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "the cluster listener takes POST only",
        );
    }
    let given = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    // An unsigned request is refused before its body is read.
    if !given.starts_with("TidepoolCluster ") {
        return refuse(StatusCode::UNAUTHORIZED, "the request is not signed");
    }
    // A signature too old (or too new) is refused before the body is read.
    if !fresh(&given) {
        return refuse(StatusCode::UNAUTHORIZED, STALE);
    }
    let path = req.uri().path().to_string();
    // The head's signature before the body is read: a request that is not a peer's costs
    // its head only, however large a body it announces.
    let digest = match verified(secret, &given, "POST", &path, seen) {
        Ok(d) => d,
        Err(why) => return refuse(StatusCode::UNAUTHORIZED, why),
    };
    // A body is read whole within CLUSTER_READ_TIMEOUT_MS (or, for a large one, the time its
    // length takes at CLUSTER_APPEND_BYTES_PER_SEC_MIN, as its sender waits), at most
    // CLUSTER_MESSAGE_BYTES_MAX.
    let announced = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(config::CLUSTER_MESSAGE_BYTES_MAX as u64);
    let read = Limited::new(req.into_body(), config::CLUSTER_MESSAGE_BYTES_MAX).collect();
    let wait = std::time::Duration::from_millis(config::CLUSTER_READ_TIMEOUT_MS)
        .max(patience(std::time::Duration::ZERO, announced as usize));
    let body = match tokio::time::timeout(wait, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "a cluster message past CLUSTER_MESSAGE_BYTES_MAX, or a body that failed",
            )
        }
        Err(_) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                "the message's body did not come within CLUSTER_READ_TIMEOUT_MS",
            )
        }
    };
    let Some((body, got)) = hashed(body).await else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping");
    };
    if !crate::secret::ct_eq(got.as_bytes(), digest.as_bytes()) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "the body is not the one the request signs",
        );
    }
    fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, Response<Full<Bytes>>> {
        rmp_serde::from_slice(b)
            .map_err(|e| refuse(StatusCode::BAD_REQUEST, &format!("not a Raft message: {e}")))
    }
    match path.as_str() {
        "/raft/append" => match decode::<AppendEntriesRequest<TypeConfig>>(&body) {
            Ok(m) => answer(&raft.append_entries(m).await),
            Err(r) => r,
        },
        "/raft/vote" => match decode::<VoteRequest<NodeId>>(&body) {
            Ok(m) => match forgot_its_log(raft, &m) {
                Some(refusal) => answer(&Ok::<_, RaftError<NodeId>>(refusal)),
                None => answer(&raft.vote(m).await),
            },
            Err(r) => r,
        },
        "/raft/snapshot" => match decode::<SnapshotChunk>(&body) {
            Ok(m) => answer(&raft.install_snapshot(m.into()).await),
            Err(r) => r,
        },
        "/raft/http" => match (local_http, decode::<Relayed>(&body)) {
            (Some(local), Ok(r)) => match relay_locally(local, r).await {
                Ok(mut a) => {
                    a.applied = raft.metrics().borrow().last_log_index.unwrap_or(0);
                    answer(&a)
                }
                Err(e) => refuse(StatusCode::BAD_GATEWAY, &e),
            },
            (None, _) => refuse(StatusCode::NOT_FOUND, "this node relays no HTTP requests"),
            (_, Err(r)) => r,
        },
        "/raft/resp" => match (tunnel, upgrade) {
            (Some(_), Some(_)) if !asks_upgrade => refuse(
                StatusCode::BAD_REQUEST,
                "a moved connection asks for the upgrade to tidepool-resp",
            ),
            (Some(t), Some(upgrade)) => match t(body.to_vec()) {
                Ok(run) => {
                    tokio::spawn(async move {
                        if let Ok(up) = upgrade.await {
                            run(hyper_util::rt::TokioIo::new(up)).await;
                        }
                    });
                    let mut r = Response::new(Full::new(Bytes::new()));
                    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                    r.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("upgrade"),
                    );
                    r.headers_mut().insert(
                        hyper::header::UPGRADE,
                        hyper::header::HeaderValue::from_static(MOVED_PROTOCOL),
                    );
                    r
                }
                Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, &e),
            },
            _ => refuse(
                StatusCode::NOT_FOUND,
                "this node takes no moved connections",
            ),
        },
        "/raft/exec" => match forward {
            Some(f) => match f(body.to_vec()).await {
                Ok(b) => reply(StatusCode::OK, b, false),
                Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, &e),
            },
            None => refuse(
                StatusCode::NOT_FOUND,
                "this node takes no forwarded requests",
            ),
        },
        _ => refuse(StatusCode::NOT_FOUND, "no such cluster route"),
    }
}

/// Serves peers' messages on `listener` until `stop` turns true: then the listener and every
/// connection close (a connection kept alive must not go on serving a stopped node).
pub async fn serve(
    listener: tokio::net::TcpListener,
    raft: Raft<TypeConfig>,
    secret: Arc<str>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    ours: Handlers,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    // Connections at once: past them, one more is closed as it comes (peers are few).
    let open = Arc::new(tokio::sync::Semaphore::new(config::CLUSTER_CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors, most likely: wait for some to close rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            continue;
        };
        stream.set_nodelay(true).ok();
        let (raft, secret, mut stop) = (raft.clone(), secret.clone(), stop.clone());
        let (ours, seen, tls) = (ours.clone(), seen.clone(), tls.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let svc = hyper::service::service_fn(move |req| {
                let (raft, secret, ours, seen) =
                    (raft.clone(), secret.clone(), ours.clone(), seen.clone());
                async move { Ok::<_, Infallible>(handle(req, &raft, &secret, &ours, &seen).await) }
            });
            // A request head that never ends is closed.
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_millis(
                    config::CLUSTER_READ_TIMEOUT_MS,
                ));
            match tls {
                None => {
                    let conn = http
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .with_upgrades();
                    tokio::select! {
                        _ = conn => {}
                        _ = stop.changed() => {}
                    }
                }
                Some(acceptor) => {
                    // A handshake that does not finish in time is dropped.
                    let wait = std::time::Duration::from_millis(config::RESP_REQUEST_TIMEOUT_MS);
                    let Ok(Ok(tls_stream)) =
                        tokio::time::timeout(wait, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let conn = http
                        .serve_connection(hyper_util::rt::TokioIo::new(tls_stream), svc)
                        .with_upgrades();
                    tokio::select! {
                        _ = conn => {}
                        _ = stop.changed() => {}
                    }
                }
            }
        });
    }
}

/// A relayed request sent to this node's own HTTP listener, as its client sent it to the
/// follower; the answer as it came.
async fn relay_locally(local: std::net::SocketAddr, r: Relayed) -> Result<Relayed, String> {
    if !r.target.starts_with('/') {
        return Err("a relayed request's target is a path".into());
    }
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    let method = reqwest::Method::from_bytes(r.method.as_bytes()).map_err(|e| e.to_string())?;
    let mut req = client
        .request(method, format!("http://{local}{}", r.target))
        .timeout(std::time::Duration::from_millis(
            config::CLUSTER_FORWARD_TIMEOUT_MS,
        ));
    for (k, v) in &r.headers {
        if !hop_by_hop(k) {
            req = req.header(k.as_str(), v.as_str());
        }
    }
    let resp = req.body(r.body).send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .filter(|(k, _)| !hop_by_hop(k.as_str()))
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let body = resp.bytes().await.map_err(|e| e.to_string())?.to_vec();
    Ok(Relayed {
        method: String::new(),
        target: String::new(),
        status,
        headers,
        body,
        applied: 0,
    })
}

/// The headers of a request to relay, without those of its connection.
pub fn relayable_headers(h: &hyper::HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .filter(|(k, _)| !hop_by_hop(k.as_str()))
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect()
}
