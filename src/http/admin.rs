//! The admin API (`/_admin/databases...`, with the admin token) and scratch databases on
//! request (`POST /start`, no token).
//!
//! - `GET    /_admin/databases`              every database (without tokens)
//! - `POST   /_admin/databases`              a new one; JSON body `{"name": "..."}` (optional)
//! - `GET    /_admin/databases/NAME`         one, with its tokens
//! - `DELETE /_admin/databases/NAME`         deletes it (not the default database)
//! - `POST   /_admin/databases/NAME/reset`   new tokens; the old ones answer 401 at once
//! - `POST   /_admin/databases/NAME/claim`   a scratch database no longer expires
//! - `POST   /_admin/cluster/init`           a cluster node and its `--peers` become members
//! - `GET    /_admin/cluster/status`         a cluster node's role, term, leader and log
//! - `POST   /_admin/cluster/nodes`          a new member (`{"id": N, "address": "H:P"}`)
//! - `DELETE /_admin/cluster/nodes/ID`       a member leaves

use super::{request, App, Body};
use crate::clock;
use crate::config;
use crate::executor::admin::{AdminOp, AdminReply};
use crate::executor::Job;
use crate::secret::ct_eq;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use tokio::sync::oneshot;

/// Scratch databases created in the last hour, per client address.
#[derive(Default)]
pub struct StartLog {
    by_client: HashMap<IpAddr, VecDeque<u64>>,
}

impl StartLog {
    /// Whether `client` may create one more at `now_ms` with `per_hour` allowed; counts it if so.
    fn admit(&mut self, client: IpAddr, now_ms: u64, per_hour: u32) -> bool {
        let hour_ago = now_ms.saturating_sub(3_600_000);
        if self.by_client.len() >= config::START_CLIENTS_TRACKED_MAX {
            self.by_client
                .retain(|_, times| times.back().is_some_and(|t| *t > hour_ago));
            if self.by_client.len() >= config::START_CLIENTS_TRACKED_MAX {
                return false;
            }
        }
        let times = self.by_client.entry(client).or_default();
        while times.front().is_some_and(|t| *t <= hour_ago) {
            times.pop_front();
        }
        if times.len() >= per_hour as usize {
            return false;
        }
        times.push_back(now_ms);
        true
    }

    /// Counts a scratch database `client` created at `at_ms` (from the catalog at start-up:
    /// the limit holds across restarts).
    pub fn seed(&mut self, client: IpAddr, at_ms: u64) {
        let times = self.by_client.entry(client).or_default();
        let at = times.partition_point(|t| *t <= at_ms);
        times.insert(at, at_ms);
    }

    /// The scratch databases of the catalog (the admin API's list) created in the last hour,
    /// by the address that created them.
    pub fn from_catalog(list: &serde_json::Value, now_ms: u64) -> StartLog {
        let mut log = StartLog::default();
        let hour_ago = now_ms.saturating_sub(3_600_000);
        for d in list["databases"].as_array().into_iter().flatten() {
            let by = d["created_by"]
                .as_str()
                .and_then(|a| a.parse::<IpAddr>().ok());
            let at = d["created_at"].as_u64().unwrap_or(0);
            if let (Some(by), true) = (by, at > hour_ago) {
                log.seed(by, at);
            }
        }
        log
    }
}

/// The list of databases, asked of the executor (for the start limit's seed).
pub async fn catalog(tx: &tokio::sync::mpsc::Sender<Job>) -> serde_json::Value {
    let (reply, rx) = oneshot::channel();
    if tx
        .send(Job::Admin {
            op: AdminOp::List,
            reply,
        })
        .await
        .is_err()
    {
        return serde_json::Value::Null;
    }
    rx.await.map(|a| a.body).unwrap_or(serde_json::Value::Null)
}

pub(crate) fn json_response(status: u16, body: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::from(crate::http::json_bytes(body)))));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn refuse(status: u16, text: &str) -> Response<Body> {
    json_response(status, &serde_json::json!({ "error": text }))
}

/// The address clients reach this server at: the one it listens on (as its start line
/// prints it). Never the request's `Host` header, which any client may set to anything and
/// which `/start` would then echo into its document.
fn base_url(app: &App) -> String {
    app.url.clone()
}

async fn ask(app: &App, op: AdminOp) -> AdminReply {
    let (reply, rx) = oneshot::channel();
    if app.tx.send(Job::Admin { op, reply }).await.is_err() {
        return AdminReply::error(503, "the server is shutting down");
    }
    rx.await
        .unwrap_or_else(|_| AdminReply::error(503, "the server is shutting down"))
}

/// An admin API request.
pub async fn handle(req: Request<Incoming>, app: &App) -> Response<Body> {
    let query = req.uri().query().map(str::to_string);
    let presented = request::presented_token(req.headers(), query.as_deref(), "_token");
    let authorized = presented.is_some_and(|t| {
        !app.admin_token.is_empty() && ct_eq(t.as_bytes(), app.admin_token.as_bytes())
    });
    if !authorized {
        return refuse(
            401,
            "the admin API needs the admin token (Authorization: Bearer ...)",
        );
    }
    let url = base_url(app);
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let rest = path
        .strip_prefix(config::ADMIN_PREFIX)
        .unwrap_or("")
        .trim_matches('/')
        .to_string();
    let segments: Vec<String> = rest
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(&request::percent_decode(s, false)).into_owned())
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    // Tests only (the fault-injection feature): the resident memory after the allocator gave
    // its free memory back, for the memory bounds of the slow-body and subscriber tests.
    #[cfg(feature = "fault-injection")]
    if method == Method::POST && seg.as_slice() == ["debug", "trim"] {
        let rss = tokio::task::spawn_blocking(crate::fault::trim_heap)
            .await
            .unwrap_or(0);
        return json_response(200, &serde_json::json!({ "rss_bytes": rss }));
    }
    // Tests only: the server's clock moves forward, for expiry without waiting.
    #[cfg(feature = "fault-injection")]
    if let (&Method::POST, ["debug", "clock", ms]) = (&method, seg.as_slice()) {
        return match ms.parse::<u64>() {
            Ok(ms) => json_response(
                200,
                &serde_json::json!({ "ahead_ms": crate::clock::advance(ms) }),
            ),
            Err(_) => refuse(400, "the clock moves by a whole number of milliseconds"),
        };
    }
    if seg.first() == Some(&"cluster") {
        let rest: Vec<String> = seg[1..].iter().map(|s| s.to_string()).collect();
        return cluster(app, &method, &rest, req.into_body()).await;
    }
    let op = match (&method, seg.as_slice()) {
        (&Method::GET, ["databases"]) => AdminOp::List,
        (&Method::POST, ["databases"]) => {
            let body = match super::body::read(req.into_body(), config::ADMIN_BODY_BYTES_MAX).await
            {
                Ok(b) => b,
                Err(super::body::BodyError::TooLarge(max)) => {
                    return refuse(413, &format!("the body is over {max} bytes"))
                }
                Err(super::body::BodyError::TooSlow) => {
                    return refuse(408, "the body did not arrive in time")
                }
                Err(super::body::BodyError::Broken(e)) => {
                    return refuse(400, &format!("could not read the body: {e}"))
                }
            };
            let o = if body.iter().all(u8::is_ascii_whitespace) {
                serde_json::Map::new()
            } else {
                match serde_json::from_slice::<serde_json::Value>(&body) {
                    Ok(serde_json::Value::Object(o)) => o,
                    _ => {
                        return refuse(
                            400,
                            "the body must be a JSON object such as {\"name\": \"app\"}",
                        )
                    }
                }
            };
            let name = match o.get("name") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(n)) => Some(n.clone()),
                Some(_) => return refuse(400, "\"name\" must be a string"),
            };
            let count = |field: &str| match o.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(Some)
                    .ok_or(format!("\"{field}\" must be a whole number of at least 0")),
            };
            let (script_ms, max_data_bytes) =
                match (count("script_time_limit_ms"), count("max_data_bytes")) {
                    (Ok(s), Ok(d)) => (s, d),
                    (Err(e), _) | (_, Err(e)) => return refuse(400, &e),
                };
            if let Some(k) = o
                .keys()
                .find(|k| !["name", "script_time_limit_ms", "max_data_bytes"].contains(&k.as_str()))
            {
                return refuse(
                    400,
                    &format!(
                        "unknown field \"{k}\" (a database takes \"name\", \"script_time_limit_ms\" and \"max_data_bytes\")"
                    ),
                );
            }
            AdminOp::Create {
                name,
                expires_in_ms: None,
                script_ms,
                max_data_bytes,
                created_by: None,
            }
        }
        (&Method::GET, ["databases", name]) => AdminOp::Get(name.to_string()),
        (&Method::DELETE, ["databases", name]) => AdminOp::Delete(name.to_string()),
        (&Method::POST, ["databases", name, "reset"]) => AdminOp::ResetTokens(name.to_string()),
        (&Method::POST, ["databases", name, "claim"]) => AdminOp::Claim(name.to_string()),
        _ => {
            return refuse(
                404,
                &format!(
                    "no such admin route: {method} {path} (see GET {}/databases)",
                    config::ADMIN_PREFIX
                ),
            )
        }
    };
    let mut answer = ask(app, op).await;
    with_url(&mut answer.body, &url);
    json_response(answer.status, &answer.body)
}

/// Adds the REST URL to a database (or to each of a list).
fn with_url(body: &mut serde_json::Value, url: &str) {
    if let Some(list) = body.get_mut("databases").and_then(|d| d.as_array_mut()) {
        for d in list {
            d["rest_url"] = serde_json::json!(url);
        }
    } else if body.get("name").is_some() && body.get("id").is_some() {
        body["rest_url"] = serde_json::json!(url);
    }
}

/// `POST /start`: a scratch database, answered as a Markdown document with its credentials
/// and a quickstart.
pub async fn start(app: &App, peer: SocketAddr) -> Response<Body> {
    let Some(cfg) = &app.start else {
        return refuse(404, "scratch databases are switched off on this server");
    };
    let now = clock::wall_unix_ms();
    let admitted = match app.started.lock() {
        Ok(mut log) => log.admit(peer.ip(), now, cfg.per_hour),
        Err(_) => false,
    };
    if !admitted {
        return refuse(
            429,
            &format!(
                "too many scratch databases from {}: at most {} per hour; try again later",
                peer.ip(),
                cfg.per_hour
            ),
        );
    }
    let url = base_url(app);
    let answer = ask(
        app,
        AdminOp::Create {
            name: None,
            expires_in_ms: Some(cfg.ttl_ms),
            script_ms: None,
            max_data_bytes: None,
            created_by: Some(peer.ip().to_string()),
        },
    )
    .await;
    if answer.status != 201 {
        return json_response(answer.status, &answer.body);
    }
    let b = &answer.body;
    let text = |k: &str| {
        b.get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let time = |ms: u64| {
        chrono::DateTime::from_timestamp_millis(ms as i64)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default()
    };
    let created = b.get("created_at").and_then(|v| v.as_u64()).unwrap_or(now);
    let expires = b.get("expires_at").and_then(|v| v.as_u64()).unwrap_or(now);
    let doc = quickstart(
        &text("name"),
        &url,
        &text("token"),
        &text("read_only_token"),
        &time(created),
        &time(expires),
        cfg.ttl_ms,
    );
    let mut r = Response::new(Body::Full(Some(Bytes::from(doc))));
    *r.status_mut() = StatusCode::CREATED;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/markdown; charset=utf-8"),
    );
    r
}

/// The Markdown a scratch database is answered with.
fn quickstart(
    name: &str,
    url: &str,
    token: &str,
    ro: &str,
    created: &str,
    expires: &str,
    ttl_ms: u64,
) -> String {
    let hours = ttl_ms as f64 / 3_600_000.0;
    format!(
        r#"# Your scratch database: `{name}`

Created {created}. It **expires at {expires}** ({hours} hours after creation) and is deleted
then, unless the server's operator claims it (`tidepool db claim {name}`).

## Credentials

```sh
export UPSTASH_REDIS_REST_URL="{url}"
export UPSTASH_REDIS_REST_TOKEN="{token}"
# Read Only token (reads only, for browsers and dashboards):
export UPSTASH_REDIS_REST_READONLY_TOKEN="{ro}"
```

## Quickstart

### curl

```sh
curl {url}/set/hello/world -H "Authorization: Bearer {token}"
curl {url}/get/hello -H "Authorization: Bearer {token}"
```

### Python (`pip install upstash-redis`)

```python
from upstash_redis import Redis

redis = Redis(url="{url}", token="{token}")
redis.set("hello", "world")
print(redis.get("hello"))
```

### JavaScript (`npm install @upstash/redis`)

```js
import {{ Redis }} from "@upstash/redis";

const redis = new Redis({{ url: "{url}", token: "{token}" }});
await redis.set("hello", "world");
console.log(await redis.get("hello"));
```
"#
    )
}

/// The cluster's voters as this node knows them.
fn voters_of(raft: &openraft::Raft<crate::cluster::TypeConfig>) -> std::collections::BTreeSet<u64> {
    raft.metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect()
}

/// `POST /_admin/cluster/init` (the node and its `--peers` become the cluster's first
/// members) and `GET /_admin/cluster/status` (openraft's view of the cluster from this node).
async fn cluster(app: &App, method: &Method, rest: &[String], body: Incoming) -> Response<Body> {
    let seg: Vec<&str> = rest.iter().map(String::as_str).collect();
    let what = seg.join("/");
    let Some(c) = &app.cluster else {
        return refuse(
            404,
            "this server is not a cluster node (start it with --node-id, --cluster-listen, --peers and --cluster-secret)",
        );
    };
    match (method, seg.as_slice()) {
        // A new member: a learner first, which catches up (from a snapshot when the log
        // behind it was purged), then a voter. On the leader; a follower relays it there.
        (&Method::POST, ["nodes"]) => {
            let body = match super::body::read(body, config::ADMIN_BODY_BYTES_MAX).await {
                Ok(b) => b,
                Err(_) => return refuse(400, "the body could not be read"),
            };
            let v: serde_json::Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => return refuse(400, &format!("the body is not JSON: {e}")),
            };
            let (Some(id), Some(addr)) = (v["id"].as_u64(), v["address"].as_str()) else {
                return refuse(400, r#"the body is {"id": N, "address": "HOST:PORT"} (the node's --cluster-listen)"#);
            };
            if id == 0 || !addr.contains(':') {
                return refuse(400, "a node id is 1 or more, and its address is HOST:PORT");
            }
            if let Err(e) = c
                .raft
                .add_learner(id, openraft::BasicNode::new(addr), true)
                .await
            {
                return refuse(409, &format!("cannot add node {id}: {e}"));
            }
            let mut voters = voters_of(&c.raft);
            voters.insert(id);
            match c.raft.change_membership(voters.clone(), false).await {
                Ok(_) => json_response(200, &serde_json::json!({ "voters": voters })),
                Err(e) => refuse(409, &format!("node {id} caught up, but could not vote: {e}")),
            }
        }
        (&Method::DELETE, ["nodes", id]) => {
            let Ok(id) = id.parse::<u64>() else {
                return refuse(400, "a node id is a number");
            };
            let mut voters = voters_of(&c.raft);
            if !voters.remove(&id) {
                return refuse(404, &format!("node {id} is not a voter of this cluster"));
            }
            if voters.is_empty() {
                return refuse(409, "the last voter cannot leave its cluster");
            }
            match c.raft.change_membership(voters.clone(), false).await {
                Ok(_) => json_response(200, &serde_json::json!({ "voters": voters })),
                Err(e) => refuse(409, &format!("cannot remove node {id}: {e}")),
            }
        }
        (&Method::POST, ["init"]) => match c.raft.initialize(c.members.clone()).await {
            Ok(()) => json_response(
                200,
                &serde_json::json!({ "initialized": true, "members": c.members.keys().collect::<Vec<_>>() }),
            ),
            Err(e) => refuse(409, &format!("cannot initialize the cluster: {e}")),
        },
        (&Method::GET, ["status"]) => {
            let m = c.raft.metrics().borrow().clone();
            let role = match m.state {
                openraft::ServerState::Leader => "leader",
                openraft::ServerState::Follower => "follower",
                openraft::ServerState::Candidate => "candidate",
                openraft::ServerState::Learner => "learner",
                openraft::ServerState::Shutdown => "shutdown",
            };
            let membership = m.membership_config.membership();
            json_response(
                200,
                &serde_json::json!({
                    "node_id": c.node_id,
                    "role": role,
                    // Leads, has applied its whole log, and a quorum confirmed it within
                    // its lease: a write sent now is taken (a leader whose lease lapsed, or a
                    // new one before the first confirmation, refuses it).
                    "takes_writes": c.role.lease(),
                    "term": m.current_term,
                    "leader": m.current_leader,
                    "last_log_index": m.last_log_index,
                    "last_applied_index": m.last_applied.map(|l| l.index),
                    "snapshot_index": m.snapshot.map(|l| l.index),
                    "purged_index": m.purged.map(|l| l.index),
                    "voters": membership.voter_ids().collect::<Vec<_>>(),
                    "learners": membership.learner_ids().collect::<Vec<_>>(),
                    "record_seq": app.shared.log.last_seq.load(std::sync::atomic::Ordering::SeqCst),
                }),
            )
        }
        _ => refuse(
            404,
            &format!("no such cluster route: {method} {what} (POST {0}/cluster/init, GET {0}/cluster/status, POST {0}/cluster/nodes, DELETE {0}/cluster/nodes/ID)", config::ADMIN_PREFIX),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_limit_counts_per_client_and_per_hour() {
        let mut log = StartLog::default();
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        assert!(log.admit(a, 1_000, 2));
        assert!(log.admit(a, 2_000, 2));
        assert!(!log.admit(a, 3_000, 2));
        assert!(log.admit(b, 3_000, 2));
        // An hour after the first, one more is allowed.
        assert!(log.admit(a, 3_601_000, 2));
        assert!(!log.admit(a, 3_601_500, 2));
    }
}
