//! The delivery API (`/v2/...`, the QStash v2 dialect): authentication with the delivery
//! token, the routes (`routes.rs`) and request parsing (`parse.rs`) that turn a request into
//! one `Op` for the executor, and the JSON answers. The signing keys are configuration, not
//! state: they are read and rotated here, beside the executor (`delivery::sign` holds them).

mod parse;
mod routes;

use super::body::{self, BodyError};
use super::{request, App, Body};
use crate::config::{HTTP_BODY_READ_TIMEOUT_MS, REQUEST_BYTES_MAX};
use crate::delivery::conf::canonical;
use crate::delivery::ops::{Op, OpReply};
use crate::delivery::sign::{DevUser, SigningKeys, DEV_USERS};
use crate::executor::Job;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use parse::{query_pairs, user_id};
use request::percent_decode;
use routes::Refusal;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::oneshot;

/// The delivery service's credentials.
pub struct QstashAuth {
    pub token: String,
    /// A token for the GET routes only (`--qstash-read-only-token`).
    pub read_only_token: String,
    /// `serve --dev`: the dev server's other test users (the first one is `token`).
    pub dev_users: bool,
    pub keys: Arc<RwLock<SigningKeys>>,
    /// Persists rotated keys (to the data directory's credentials file).
    pub save_keys: SaveKeys,
    /// The maximum message size: larger publish bodies answer 413.
    pub message_bytes_max: usize,
}

/// Writes rotated keys where the next start finds them.
pub type SaveKeys = Box<dyn Fn(&SigningKeys) -> Result<(), String> + Send + Sync>;

/// One authorized request, read whole: what every route looks at.
struct Req<'a> {
    method: Method,
    path: &'a str,
    /// The resource: the path's first segment after `/v2/`.
    head: &'a str,
    /// The rest of the path after `head/`, raw, and split at `/`.
    tail: &'a str,
    segs: Vec<&'a str>,
    query: Vec<(String, String)>,
    headers: &'a HeaderMap,
    content_type: Option<String>,
    body: Bytes,
    peer: SocketAddr,
}

impl Req<'_> {
    /// Path segment `i` after the resource, percent-decoded; None when absent or empty.
    fn name(&self, i: usize) -> Option<String> {
        self.segs
            .get(i)
            .map(|s| String::from_utf8_lossy(&percent_decode(s, false)).into_owned())
            .filter(|s| !s.is_empty())
    }
}

fn reply(status: u16, body: &Value) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::from(crate::http::json_bytes(body)))));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn err(status: u16, text: impl Into<String>) -> Response<Body> {
    reply(status, &json!({ "error": text.into() }))
}

/// Who a request is: `Some(None)` for the delivery token, `Some(Some(user))` for one of the
/// dev server's other test users (`serve --dev`), None for anyone else.
/// Who a request's token is: the delivery token, the read-only one, or (`--dev`) a dev user.
pub(crate) enum Caller {
    Owner,
    ReadOnly,
    Dev(&'static DevUser),
}

pub(crate) fn authorized(
    headers: &HeaderMap,
    query: Option<&str>,
    auth: &QstashAuth,
) -> Option<Caller> {
    let p = request::presented_token(headers, query, "qstash_token")?;
    if crate::secret::ct_eq(p.as_bytes(), auth.token.as_bytes()) {
        return Some(Caller::Owner);
    }
    if !auth.read_only_token.is_empty()
        && crate::secret::ct_eq(p.as_bytes(), auth.read_only_token.as_bytes())
    {
        return Some(Caller::ReadOnly);
    }
    if !auth.dev_users {
        return None;
    }
    DEV_USERS[1..]
        .iter()
        .find(|u| crate::secret::ct_eq(p.as_bytes(), u.token.as_bytes()))
        .map(Caller::Dev)
}

async fn read_body(body: Incoming, max: usize) -> Result<Bytes, Response<Body>> {
    body::read(body, max).await.map_err(|e| match e {
        BodyError::TooLarge(max) => {
            err(413, format!("message too large: the limit is {max} bytes"))
        }
        BodyError::TooSlow => err(
            408,
            format!("the request body did not arrive within {HTTP_BODY_READ_TIMEOUT_MS} ms"),
        ),
        BodyError::Broken(e) => err(400, format!("could not read the request body: {e}")),
    })
}

/// Hands an operation to the executor and waits for its answer (sent once durable).
async fn ask(app: &App, op: Op) -> Result<OpReply, Response<Body>> {
    let (tx, rx) = oneshot::channel();
    let gone = || err(503, "the server is shutting down");
    let job = Job::Delivery {
        op: Box::new(op),
        reply: tx,
    };
    // Counted while it is on its way to the queue; taken back if it never gets there (the
    // executor gone, or this request dropped while the queue was full).
    struct Queued<'a>(&'a AtomicUsize, bool);
    impl Drop for Queued<'_> {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    app.shared
        .delivery_jobs_queued
        .fetch_add(1, Ordering::Relaxed);
    let mut queued = Queued(&app.shared.delivery_jobs_queued, false);
    if app.tx.send(job).await.is_err() {
        return Err(gone());
    }
    queued.1 = true;
    drop(queued);
    rx.await.map_err(|_| gone())
}

/// `ANY /llm/...`: the hosted service's OpenAI-compatible LLM route, which tidepool does not
/// serve; 501 with what to do instead (404 when the delivery service is off).
pub fn llm(app: &App) -> Response<Body> {
    if app.qstash.is_none() {
        return err(404, "the delivery service is not enabled");
    }
    err(501, routes::LLM_NOT_SERVED)
}

/// Handles a request whose path starts with `/v2`.
pub async fn handle(req: Request<Incoming>, app: &App, peer: SocketAddr) -> Response<Body> {
    let Some(auth) = app.qstash.as_ref() else {
        return err(404, "the delivery service is not enabled");
    };
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    // Webhook calls come from third parties, without credentials: the URL is the secret.
    if let Some(rest) = path.strip_prefix("/v2/workflows/hooks/") {
        return webhook(app, auth, rest, &parts, body).await;
    }
    let dev_user = match authorized(&parts.headers, parts.uri.query(), auth) {
        None => {
            return err(
                401,
                "unauthorized: use Authorization: Bearer <QSTASH_TOKEN>",
            )
        }
        Some(Caller::ReadOnly) if !matches!(parts.method, Method::GET | Method::HEAD) => {
            return err(
                403,
                format!(
                    "forbidden: the read-only token may only read (GET); {} {} needs QSTASH_TOKEN",
                    parts.method, path
                ),
            )
        }
        Some(Caller::ReadOnly) if path == "/v2/keys" || path.starts_with("/v2/keys/") => {
            return err(
                403,
                "forbidden: the signing keys are for QSTASH_TOKEN, not the read-only token",
            )
        }
        Some(Caller::Dev(u)) => Some(u),
        Some(_) => None,
    };
    let rest = path.strip_prefix("/v2/").unwrap_or("");
    let (head, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let limit = if head == "batch" {
        REQUEST_BYTES_MAX
    } else {
        auth.message_bytes_max
    };
    let body = match read_body(body, limit).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let r = Req {
        method: parts.method.clone(),
        path,
        head,
        tail,
        segs: if tail.is_empty() {
            Vec::new()
        } else {
            tail.split('/').collect()
        },
        query: query_pairs(parts.uri.query()),
        headers: &parts.headers,
        content_type: parts
            .headers
            .get(CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        body,
        peer,
    };
    let routed = match head {
        "publish" | "enqueue" => routes::publish(&r),
        "batch" => routes::batch(&r),
        "messages" => routes::messages(&r),
        "dlq" => routes::dlq(&r),
        "topics" => routes::topics(&r),
        "queues" => routes::queues(&r),
        "schedules" => routes::schedules(&r),
        "keys" => return keys(&r, auth, dev_user),
        "events" | "logs" => routes::logs(&r),
        "wait" => routes::wait(&r),
        "notify" => routes::notify(&r),
        "waiters" => routes::waiters(&r),
        "workflows" => routes::workflows(&r),
        "flowControl" | "globalParallelism" => routes::flow_control(&r),
        "trigger" => routes::trigger(&r),
        _ => Err(Refusal(404, format!("unknown route {path}"))),
    };
    let mut op = match routed {
        Ok(op) => op,
        Err(routes::Refusal(status, text)) => return err(status, text),
    };
    if let Some(u) = dev_user {
        op.sign_as(u.name);
    }
    match ask(app, op).await {
        Ok(OpReply { status, body }) => reply(status, &body),
        Err(r) => r,
    }
}

/// `GET /v2/keys` and `POST /v2/keys/rotate`.
fn keys(r: &Req, auth: &QstashAuth, dev_user: Option<&DevUser>) -> Response<Body> {
    if let Some(u) = dev_user {
        // A dev user's keys are the public ones the SDKs know; they never rotate.
        return match (&r.method, r.tail) {
            (&Method::GET, "") => reply(200, &json!({"current": u.current, "next": u.next})),
            _ => err(
                400,
                format!(
                    "the dev user {}'s keys are fixed: they cannot be rotated",
                    u.name
                ),
            ),
        };
    }
    let mut guard = match auth.keys.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    match (&r.method, r.tail) {
        (&Method::GET, "") => {}
        (&Method::POST, "rotate") => {
            let rotated = match guard.rotated() {
                Ok(k) => k,
                Err(e) => return err(500, e),
            };
            if let Err(e) = (auth.save_keys)(&rotated) {
                return err(500, format!("cannot save the rotated keys: {e}"));
            }
            *guard = rotated;
        }
        _ => {
            return err(
                405,
                format!("method {} is not allowed on {}", r.method, r.path),
            )
        }
    }
    reply(200, &json!({"current": guard.current, "next": guard.next}))
}

/// `ANY /v2/workflows/hooks/<userId>/<runId>/<eventId>`: the request itself becomes the event
/// of a lookback notify for that run (`context.waitForWebhook` reads it back).
async fn webhook(
    app: &App,
    auth: &QstashAuth,
    rest: &str,
    parts: &hyper::http::request::Parts,
    body: Incoming,
) -> Response<Body> {
    let segs: Vec<String> = rest
        .split('/')
        .map(|s| String::from_utf8_lossy(&percent_decode(s, false)).into_owned())
        .collect();
    let [user, run_id, event_id] = segs.as_slice() else {
        return err(
            404,
            "use /v2/workflows/hooks/<userId>/<workflowRunId>/<eventId>",
        );
    };
    if user_id(&auth.token).as_deref() != Some(user.as_str())
        || run_id.is_empty()
        || event_id.is_empty()
    {
        return err(404, "unknown webhook");
    }
    let body = match read_body(body, auth.message_bytes_max).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    use base64::Engine;
    let host = parts
        .headers
        .get(hyper::header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        .unwrap_or_default();
    let mut header = serde_json::Map::new();
    for (k, v) in &parts.headers {
        let entry = header
            .entry(canonical(k.as_str()))
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(a) = entry {
            a.push(Value::String(
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            ));
        }
    }
    let event = json!({
        "method": parts.method.as_str(),
        "header": header,
        "body": base64::engine::general_purpose::STANDARD.encode(&body),
        "proto": "http",
        "host": host,
        "url": parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or(""),
    });
    let op = Op::Notify {
        event_id: event_id.clone(),
        body: event.to_string().into_bytes(),
        run_id: Some(run_id.clone()),
    };
    match ask(app, op).await {
        Ok(r) if r.status < 300 => reply(200, &json!({"ok": true})),
        Ok(r) => reply(r.status, &r.body),
        Err(r) => r,
    }
}
