//! The `/v2/...` routes: authentication with the delivery token, request parsing, and the JSON
//! answers. Each route becomes one `Op` for the executor, except the signing keys, which are
//! configuration and live beside the executor.

use super::conf::{self, canonical, check_url, valid_name, Extra};
use super::model::{Endpoint, QueueConf};
use super::ops::{Filter, FlowAction, Op, OpReply, PublishReq, Recovery, ScheduleReq, WaitReq};
use super::sign::SigningKeys;
use crate::config::REQUEST_BYTES_MAX;
use crate::executor::Job;
use crate::http::{request::percent_decode, App, Body};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use tokio::sync::oneshot;

/// The delivery service's credentials.
pub struct QstashAuth {
    pub token: String,
    pub keys: Arc<RwLock<SigningKeys>>,
    /// Persists rotated keys (to the data directory's credentials file).
    pub save_keys: SaveKeys,
    /// The maximum message size: larger publish bodies answer 413.
    pub max_message_bytes: usize,
}

/// Writes rotated keys where the next start finds them.
pub type SaveKeys = Box<dyn Fn(&SigningKeys) -> Result<(), String> + Send + Sync>;

fn reply(status: u16, body: &Value) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::from(body.to_string()))));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn berr(status: u16, text: impl Into<String>) -> Box<Response<Body>> {
    Box::new(err(status, text))
}

fn err(status: u16, text: impl Into<String>) -> Response<Body> {
    reply(status, &json!({ "error": text.into() }))
}

/// Query pairs, percent-decoded, in order.
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                String::from_utf8_lossy(&percent_decode(k, true)).into_owned(),
                String::from_utf8_lossy(&percent_decode(v, true)).into_owned(),
            )
        })
        .collect()
}

fn authorized(headers: &HeaderMap, query: &[(String, String)], auth: &QstashAuth) -> bool {
    let presented = crate::http::bearer_token(headers).or_else(|| {
        query
            .iter()
            .find(|(k, _)| k == "qstash_token")
            .map(|(_, v)| v.clone())
    });
    presented.is_some_and(|p| crate::secret::ct_eq(p.as_bytes(), auth.token.as_bytes()))
}

async fn read_body(body: Incoming, max: usize) -> Result<Bytes, Response<Body>> {
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(err(
                413,
                format!("message too large: the limit is {max} bytes"),
            ))
        }
        Err(e) => Err(err(400, format!("could not read the request body: {e}"))),
    }
}

/// Hands an operation to the executor and waits for its answer (sent once durable).
async fn ask(app: &App, op: Op) -> Result<OpReply, Response<Body>> {
    let (tx, rx) = oneshot::channel();
    let gone = || err(503, "the server is shutting down");
    let job = Job::Delivery {
        op: Box::new(op),
        reply: tx,
    };
    if app.tx.send(job).await.is_err() {
        return Err(gone());
    }
    rx.await.map_err(|_| gone())
}

async fn run(app: &App, op: Op) -> Response<Body> {
    match ask(app, op).await {
        Ok(OpReply { status, body }) => reply(status, &body),
        Err(r) => r,
    }
}

/// A destination taken from the raw path: repairs a slash-merged `https:/host`, and re-attaches
/// the request's own query minus tidepool's parameters.
fn destination(raw: &str, query: &[(String, String)]) -> String {
    let mut d = raw.to_string();
    for scheme in ["https:", "http:"] {
        if let Some(rest) = d.strip_prefix(scheme) {
            if !rest.starts_with("//") {
                d = format!("{scheme}//{}", rest.trim_start_matches('/'));
            }
            break;
        }
    }
    if d.contains("://") {
        let kept: Vec<String> = query
            .iter()
            .filter(|(k, _)| {
                let k = k.to_ascii_lowercase();
                k != "qstash_token" && !k.starts_with("upstash-")
            })
            .map(|(k, v)| {
                if v.is_empty() {
                    encode_component(k)
                } else {
                    format!("{}={}", encode_component(k), encode_component(v))
                }
            })
            .collect();
        if !kept.is_empty() {
            d.push(if d.contains('?') { '&' } else { '?' });
            d.push_str(&kept.join("&"));
        }
    }
    d
}

fn encode_component(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~:/,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// Builds a publish request from headers (or batch-item headers), query, body and destination.
fn publish_req(
    dest: String,
    queue: Option<String>,
    pairs: Vec<(String, String)>,
    content_type: Option<String>,
    all_headers: Vec<(String, String)>,
    body: Vec<u8>,
    caller: &SocketAddr,
) -> Result<(PublishReq, Extra), String> {
    let mut extra = Extra::default();
    let mut c = conf::parse(&pairs, &mut extra)?;
    if let Some(ct) = content_type {
        if !c.forward.iter().any(|(k, _)| k == "Content-Type") {
            c.forward.insert(0, ("Content-Type".into(), ct));
        }
    }
    if extra.header_forward {
        for (k, v) in all_headers {
            let lk = k.to_ascii_lowercase();
            if lk.starts_with("upstash-")
                || matches!(
                    lk.as_str(),
                    "authorization" | "host" | "content-length" | "content-type" | "connection"
                )
            {
                continue;
            }
            c.forward.push((canonical(&k), v));
        }
    }
    if is_url(&dest) {
        check_url(&dest)?;
    } else if !valid_name(&dest) {
        return Err(format!(
            "invalid destination '{dest}': use a URL (http:// or https://) or a URL group name"
        ));
    }
    if let Some(q) = &queue {
        if !valid_name(q) {
            return Err(format!(
                "invalid queue name '{q}': use letters, digits, '-', '_' and '.'"
            ));
        }
        if c.delay_ms.is_some() || c.not_before_ms.is_some() {
            return Err("delay and not-before are not supported for queues".into());
        }
    }
    Ok((
        PublishReq {
            dest,
            queue,
            conf: c,
            body,
            caller_ip: Some(caller.ip().to_string()),
        },
        extra,
    ))
}

fn header_list(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Ids and filters of a bulk request: repeated or comma-separated query values, or a JSON body
/// (`{"messageIds": [...]}` / `{"dlqIds": [...]}` from the Python SDK).
fn filter(query: &[(String, String)], body: &[u8], ids_key: &str) -> Result<Filter, String> {
    let mut f = Filter::default();
    for (k, v) in query {
        match k.as_str() {
            "count" => {
                f.count = Some(
                    v.parse()
                        .map_err(|_| format!("invalid count '{v}': not a number"))?,
                )
            }
            "cursor" => f.cursor = Some(v.clone()).filter(|c| !c.is_empty()),
            "qstash_token" | "order" | "cancel" | "groupBy" => {}
            k if k == ids_key => f.ids.extend(v.split(',').map(str::to_string)),
            "messageIds" => f.ids.extend(v.split(',').map(str::to_string)),
            _ => {
                let vals: Vec<String> = if k == "url" {
                    vec![v.clone()]
                } else {
                    v.split(',').map(str::to_string).collect()
                };
                match f.params.iter_mut().find(|(n, _)| n == k) {
                    Some((_, existing)) => existing.extend(vals),
                    None => f.params.push((k.clone(), vals)),
                }
            }
        }
    }
    if !body.is_empty() {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
        if let Some(ids) = v.get(ids_key).and_then(Value::as_array) {
            f.ids
                .extend(ids.iter().filter_map(|i| i.as_str().map(str::to_string)));
        }
    }
    f.ids.retain(|i| !i.is_empty());
    Ok(f)
}

/// Handles a request whose path starts with `/v2`.
pub async fn handle(req: Request<Incoming>, app: &App, peer: SocketAddr) -> Response<Body> {
    let Some(auth) = app.qstash.as_ref() else {
        return err(404, "the delivery service is not enabled");
    };
    let (parts, body) = req.into_parts();
    let query = query_pairs(parts.uri.query());
    let path = parts.uri.path();
    // Webhook calls come from third parties, without credentials: the URL is the secret.
    if let Some(rest) = path.strip_prefix("/v2/workflows/hooks/") {
        return webhook(app, auth, rest, &parts, body).await;
    }
    if !authorized(&parts.headers, &query, auth) {
        return err(
            401,
            "unauthorized: use Authorization: Bearer <QSTASH_TOKEN>",
        );
    }
    let rest = path.strip_prefix("/v2/").unwrap_or("");
    let method = parts.method.clone();
    let (head, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let limit = if head == "batch" {
        REQUEST_BYTES_MAX
    } else {
        auth.max_message_bytes
    };
    let body = match read_body(body, limit).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let headers = &parts.headers;
    let content_type = headers
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let segs: Vec<&str> = if tail.is_empty() {
        Vec::new()
    } else {
        tail.split('/').collect()
    };
    let name = |i: usize| -> Option<String> {
        segs.get(i)
            .map(|s| String::from_utf8_lossy(&percent_decode(s, false)).into_owned())
            .filter(|s| !s.is_empty())
    };
    let m = &method;
    let op = match (head, m) {
        ("publish", &Method::POST) | ("enqueue", &Method::POST) => {
            let (queue, raw) = if head == "enqueue" {
                match tail.split_once('/') {
                    Some((q, d)) => (Some(q.to_string()), d),
                    None => return err(400, "use /v2/enqueue/<queue>/<destination>"),
                }
            } else {
                (None, tail)
            };
            if raw.is_empty() {
                return err(400, "missing destination: /v2/publish/<url or URL group>");
            }
            let dest = destination(raw, &query);
            let pairs = conf::pairs_from_request(headers, &query);
            match publish_req(
                dest,
                queue,
                pairs,
                content_type,
                header_list(headers),
                body.to_vec(),
                &peer,
            ) {
                Ok((r, _)) => Op::Publish(r),
                Err(e) => return err(400, e),
            }
        }
        ("batch", &Method::POST) if tail.is_empty() => match batch(&body, &peer) {
            Ok(items) => Op::Batch(items),
            Err(e) => return err(400, e),
        },
        ("messages", &Method::GET) => match name(0) {
            Some(id) if segs.len() == 1 => Op::MessageGet(id),
            _ => return err(404, "use /v2/messages/<messageId>"),
        },
        ("messages", &Method::DELETE) => match (segs.len(), name(0)) {
            (0, _) => match filter(&query, &body, "messageIds") {
                Ok(f) => Op::MessagesCancel(f),
                Err(e) => return err(400, e),
            },
            (1, Some(id)) => Op::MessageCancel(id),
            _ => return err(400, "missing message id: use /v2/messages/<messageId>"),
        },
        ("dlq", _) => match (m, segs.as_slice()) {
            (&Method::GET, []) => match filter(&query, &body, "dlqIds") {
                Ok(f) => Op::DlqList(f),
                Err(e) => return err(400, e),
            },
            (&Method::GET, [_]) => match name(0) {
                Some(id) => Op::DlqGet(id),
                None => return err(404, "missing dlq id"),
            },
            (&Method::DELETE, []) => match filter(&query, &body, "dlqIds") {
                Ok(f) => Op::DlqDeleteMany(f),
                Err(e) => return err(400, e),
            },
            (&Method::DELETE, [_]) => match name(0) {
                Some(id) => Op::DlqDelete(id),
                None => return err(404, "missing dlq id"),
            },
            (&Method::POST, ["retry", ..]) => {
                let mut extra = Extra::default();
                let overrides =
                    match conf::parse(&conf::pairs_from_request(headers, &[]), &mut extra) {
                        Ok(c) => c,
                        Err(e) => return err(400, e),
                    };
                match segs.len() {
                    1 => match filter(&query, &body, "dlqIds") {
                        Ok(f) => Op::DlqRetry {
                            filter: f,
                            single: false,
                            overrides,
                        },
                        Err(e) => return err(400, e),
                    },
                    2 => match name(1) {
                        Some(id) => Op::DlqRetry {
                            filter: Filter {
                                ids: vec![id],
                                ..Filter::default()
                            },
                            single: true,
                            overrides,
                        },
                        None => return err(404, "missing dlq id"),
                    },
                    _ => return err(404, "use /v2/dlq/retry/<dlqId>"),
                }
            }
            _ => return err(404, "unknown dlq route"),
        },
        ("topics", _) => {
            let Some(topic) = name(0) else {
                return match m {
                    &Method::GET if segs.is_empty() => run(app, Op::TopicList).await,
                    _ => err(404, "use /v2/topics/<name>"),
                };
            };
            match (m, segs.get(1).copied()) {
                (&Method::GET, None) => Op::TopicGet(topic),
                (&Method::DELETE, None) => Op::TopicDelete(topic),
                (&Method::POST, Some("endpoints")) | (&Method::DELETE, Some("endpoints")) => {
                    if !valid_name(&topic) {
                        return err(400, format!("invalid URL group name '{topic}': use letters, digits, '-', '_' and '.'"));
                    }
                    let eps = match endpoints(&body) {
                        Ok(e) => e,
                        Err(e) => return err(400, e),
                    };
                    if m == Method::POST {
                        let mut list = Vec::new();
                        for (url, name) in eps {
                            let Some(url) = url else {
                                return err(400, "every endpoint needs a url");
                            };
                            if let Err(e) = check_url(&url) {
                                return err(400, e);
                            }
                            list.push(Endpoint { name, url });
                        }
                        if list.is_empty() {
                            return err(400, "endpoints must not be empty");
                        }
                        Op::TopicAdd {
                            name: topic,
                            endpoints: list,
                        }
                    } else {
                        Op::TopicRemove {
                            name: topic,
                            endpoints: eps,
                        }
                    }
                }
                _ => return err(404, "unknown URL group route"),
            }
        }
        ("queues", _) => match (m, segs.as_slice()) {
            (&Method::GET, []) => Op::QueueList,
            (&Method::POST, []) => match queue_upsert(&body) {
                Ok(q) => Op::QueueUpsert(q),
                Err(e) => return err(400, e),
            },
            (&Method::GET, [_]) | (&Method::DELETE, [_]) => match name(0) {
                Some(q) if m == Method::GET => Op::QueueGet(q),
                Some(q) => Op::QueueDelete(q),
                None => return err(404, "missing queue name"),
            },
            (&Method::POST, [_, action @ ("pause" | "resume")]) => match name(0) {
                Some(q) => Op::QueuePause(q, *action == "pause"),
                None => return err(404, "missing queue name"),
            },
            _ => return err(404, "unknown queue route"),
        },
        ("schedules", _) => {
            match schedule_route(m, tail, &segs, &query, headers, content_type, &body, &peer) {
                Ok(op) => op,
                Err(r) => return *r,
            }
        }
        ("keys", &Method::GET) if tail.is_empty() => {
            let k = read_keys(auth);
            return reply(200, &json!({"current": k.current, "next": k.next}));
        }
        ("keys", &Method::POST) if tail == "rotate" => return rotate(auth),
        ("events" | "logs", &Method::GET) if tail.is_empty() => {
            match filter(&query, &[], "messageIds") {
                Ok(f) => Op::Logs(f),
                Err(e) => return err(400, e),
            }
        }
        ("wait", &Method::POST) => match (name(0), segs.len()) {
            (Some(event_id), 1) => match wait_req(event_id, &body, headers) {
                Ok(w) => Op::Wait(w),
                Err(e) => return err(400, e),
            },
            _ => return err(404, "use /v2/wait/<eventId>"),
        },
        ("notify", &Method::POST) => match (segs.len(), name(0), name(1)) {
            (1, Some(event_id), _) => Op::Notify {
                event_id,
                body: body.to_vec(),
                run_id: None,
            },
            // The lookback form: kept for the run when nobody in it waits yet.
            (2, Some(run_id), Some(event_id)) => Op::Notify {
                event_id,
                body: body.to_vec(),
                run_id: Some(run_id),
            },
            _ => {
                return err(
                    404,
                    "use /v2/notify/<eventId> or /v2/notify/<runId>/<eventId>",
                )
            }
        },
        ("workflows", &Method::GET) if matches!(segs.as_slice(), ["events" | "logs"]) => {
            match filter(&query, &[], "workflowRunIds") {
                Ok(f) => Op::WorkflowLogs(f),
                Err(e) => return err(400, e),
            }
        }
        ("workflows", _) if segs.first() == Some(&"runs") => match (m, segs.len(), name(1)) {
            (&Method::GET, 2, Some(id)) => Op::RunGet(id),
            (&Method::DELETE, 2, Some(id)) => Op::RunDelete {
                id,
                cancel: query.iter().any(|(k, v)| k == "cancel" && v == "true"),
                body: body.to_vec(),
            },
            (&Method::DELETE, 1, _) => match filter(&query, &body, "workflowRunIds") {
                Ok(f) => Op::RunsCancel(f),
                Err(e) => return err(400, e),
            },
            _ => return err(404, "use /v2/workflows/runs/<runId>"),
        },
        ("waiters", &Method::GET) => match (name(0), segs.len()) {
            (Some(e), 1) => Op::Waiters(e),
            _ => return err(404, "use /v2/waiters/<eventId>"),
        },
        (
            "publish" | "enqueue" | "batch" | "messages" | "keys" | "events" | "logs" | "wait"
            | "notify" | "waiters",
            _,
        ) => return err(405, format!("method {method} is not allowed on {path}")),
        ("flowControl", &Method::GET) => match (segs.len(), name(0)) {
            (0, _) => Op::FlowList(
                query
                    .iter()
                    .find(|(k, _)| k == "search")
                    .map(|(_, v)| v.clone())
                    .filter(|v| !v.is_empty()),
            ),
            (1, Some(key)) => Op::FlowGet(key),
            _ => return err(404, "use /v2/flowControl/<key>"),
        },
        ("flowControl", &Method::POST) => match (segs.len(), name(0), segs.get(1).copied()) {
            (2, Some(key), Some(a)) => match flow_action(a, &query) {
                Ok(action) => Op::FlowAction { key, action },
                Err(e) => return err(400, e),
            },
            _ => return err(404, "use /v2/flowControl/<key>/<action>"),
        },
        ("globalParallelism", &Method::GET) if tail.is_empty() => Op::GlobalParallelism,
        ("flowControl" | "globalParallelism", _) => {
            return err(405, format!("method {method} is not allowed on {path}"))
        }
        ("workflows", _) if segs.first() == Some(&"dlq") => {
            match workflow_dlq_route(m, &segs, &query, &body, headers) {
                Ok(op) => op,
                Err(r) => return *r,
            }
        }
        // The OpenAPI-only trigger route (the SDKs do not call it).
        ("trigger", _) => return err(501, format!("{path} is not implemented by tidepool yet")),
        _ => return err(404, format!("unknown route {path}")),
    };
    run(app, op).await
}

/// `/v2/workflows/dlq...`: the DLQ seen as failed workflow runs (`source=workflow`), and
/// resuming, restarting, or calling a run's failure function again.
fn workflow_dlq_route(
    m: &Method,
    segs: &[&str],
    query: &[(String, String)],
    body: &[u8],
    headers: &HeaderMap,
) -> Result<Op, Box<Response<Body>>> {
    let bulk = |ids: Option<&str>| -> Result<Filter, Box<Response<Body>>> {
        let mut f = match ids {
            Some(id) => Filter {
                ids: vec![id.to_string()],
                ..Filter::default()
            },
            None => filter(query, body, "dlqIds").map_err(|e| Box::new(err(400, e)))?,
        };
        f.params.retain(|(k, _)| k != "source");
        f.params.push(("source".into(), vec!["workflow".into()]));
        Ok(f)
    };
    let id = segs
        .last()
        .map(|s| String::from_utf8_lossy(&percent_decode(s, false)).into_owned())
        .unwrap_or_default();
    Ok(match (m, &segs[1..]) {
        (&Method::GET, []) => Op::DlqList(bulk(None)?),
        (&Method::GET, [_]) => Op::DlqGet(id),
        (&Method::DELETE, []) => Op::DlqDeleteMany(bulk(None)?),
        (&Method::DELETE, [_]) => Op::DlqDelete(id),
        (&Method::POST, [action @ ("resume" | "restart"), rest @ ..]) if rest.len() <= 1 => {
            let mut extra = Extra::default();
            let overrides = conf::parse(&conf::pairs_from_request(headers, &[]), &mut extra)
                .map_err(|e| Box::new(err(400, e)))?;
            let single = rest.len() == 1;
            Op::RunRecover {
                how: if *action == "resume" {
                    Recovery::Resume
                } else {
                    Recovery::Restart
                },
                filter: bulk(single.then_some(id.as_str()))?,
                single,
                overrides,
            }
        }
        (&Method::POST, ["callback", _]) => Op::RunFailureCallback(id),
        (&Method::GET | &Method::DELETE | &Method::POST, _) => {
            return Err(Box::new(err(
                404,
                "use /v2/workflows/dlq[/<dlqId>], /v2/workflows/dlq/resume|restart[/<dlqId>] or /v2/workflows/dlq/callback/<dlqId>",
            )))
        }
        _ => {
            return Err(Box::new(err(
                405,
                format!("method {m} is not allowed on /v2/workflows/dlq"),
            )))
        }
    })
}

fn flow_action(action: &str, query: &[(String, String)]) -> Result<FlowAction, String> {
    let q = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let num = |k: &str| -> Result<Option<u32>, String> {
        q(k).filter(|v| !v.is_empty())
            .map(|v| v.parse().map_err(|_| format!("invalid {k} '{v}'")))
            .transpose()
    };
    Ok(match action {
        "pause" => FlowAction::Pause,
        "resume" => FlowAction::Resume,
        "resetRate" => FlowAction::ResetRate,
        "reset" => FlowAction::Reset,
        "pin" => FlowAction::Pin {
            parallelism: num("parallelism")?,
            rate: num("rate")?,
            period_s: q("period")
                .filter(|v| !v.is_empty())
                .map(|v| conf::duration_ms(v).map(|ms| (ms / 1000).max(1)))
                .transpose()?,
        },
        "unpin" => FlowAction::Unpin {
            parallelism: q("parallelism") == Some("true"),
            rate: q("rate") == Some("true"),
        },
        other => return Err(format!("unknown flow control action '{other}'")),
    })
}

/// The `UserID` inside a token (base64 of `{"UserID":...,"Password":...}`).
fn user_id(token: &str) -> Option<String> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    v.get("UserID")?.as_str().map(str::to_string)
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
    let body = match read_body(body, auth.max_message_bytes).await {
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

fn read_keys(auth: &QstashAuth) -> SigningKeys {
    match auth.keys.read() {
        Ok(k) => k.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

fn rotate(auth: &QstashAuth) -> Response<Body> {
    let new = match crate::secret::random_signing_key() {
        Ok(k) => k,
        Err(e) => return err(500, e),
    };
    let mut guard = match auth.keys.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let rotated = SigningKeys {
        current: guard.next.clone(),
        next: new,
    };
    if let Err(e) = (auth.save_keys)(&rotated) {
        return err(500, format!("cannot save the rotated keys: {e}"));
    }
    *guard = rotated.clone();
    reply(
        200,
        &json!({"current": rotated.current, "next": rotated.next}),
    )
}

fn batch(body: &[u8], peer: &SocketAddr) -> Result<Vec<Result<PublishReq, String>>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid batch body: {e}"))?;
    let items = v
        .as_array()
        .ok_or("invalid batch body: expected a JSON array of messages")?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(dest) = item.get("destination").and_then(Value::as_str) else {
            out.push(Err("every batch item needs a destination".to_string()));
            continue;
        };
        let mut pairs = Vec::new();
        let mut content_type = None;
        let mut all = Vec::new();
        if let Some(h) = item.get("headers").and_then(Value::as_object) {
            for (k, v) in h {
                let val = match v {
                    Value::String(s) => s.clone(),
                    Value::Array(a) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(","),
                    Value::Null => continue,
                    other => other.to_string(),
                };
                let lk = k.to_ascii_lowercase();
                if lk == "content-type" {
                    content_type = Some(val.clone());
                } else if let Some(rest) = lk.strip_prefix("upstash-") {
                    pairs.push((rest.to_string(), val.clone()));
                }
                all.push((k.clone(), val));
            }
        }
        let body = match item.get("body") {
            Some(Value::String(s)) => s.clone().into_bytes(),
            Some(Value::Null) | None => Vec::new(),
            Some(other) => other.to_string().into_bytes(),
        };
        let queue = item
            .get("queue")
            .and_then(Value::as_str)
            .map(str::to_string);
        let dest = destination(dest, &[]);
        out.push(publish_req(dest, queue, pairs, content_type, all, body, peer).map(|(r, _)| r));
    }
    Ok(out)
}

#[allow(clippy::type_complexity)]
fn endpoints(body: &[u8]) -> Result<Vec<(Option<String>, Option<String>)>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let list = v
        .get("endpoints")
        .and_then(Value::as_array)
        .ok_or("expected {\"endpoints\": [{\"url\": ..., \"name\": ...}]}")?;
    Ok(list
        .iter()
        .map(|e| {
            let s = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            (s("url"), s("name"))
        })
        .collect())
}

fn queue_upsert(body: &[u8]) -> Result<QueueConf, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let name = v
        .get("queueName")
        .and_then(Value::as_str)
        .ok_or("expected {\"queueName\": ..., \"parallelism\": n}")?;
    if !valid_name(name) {
        return Err(format!(
            "invalid queue name '{name}': use letters, digits, '-', '_' and '.'"
        ));
    }
    let parallelism = match v.get("parallelism") {
        None | Some(Value::Null) => 1,
        Some(p) => p
            .as_u64()
            .filter(|p| (1..=1000).contains(p))
            .ok_or("parallelism must be a whole number from 1 to 1000")? as u32,
    };
    Ok(QueueConf {
        name: name.to_string(),
        parallelism,
        paused: v.get("paused").and_then(Value::as_bool).unwrap_or(false),
    })
}

#[allow(clippy::too_many_arguments)]
fn schedule_route(
    m: &Method,
    tail: &str,
    segs: &[&str],
    query: &[(String, String)],
    headers: &HeaderMap,
    content_type: Option<String>,
    body: &[u8],
    peer: &SocketAddr,
) -> Result<Op, Box<Response<Body>>> {
    let first = segs.first().copied().unwrap_or("");
    let has_cron = headers.contains_key("upstash-cron")
        || query
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("upstash-cron"));
    let id = || String::from_utf8_lossy(&percent_decode(first, false)).into_owned();
    // A URL destination (or a group name with Upstash-Cron) is a creation: the whole tail is the
    // destination, even when it ends in /pause.
    let creation = *m == Method::POST
        && (first.starts_with("http:")
            || first.starts_with("https:")
            || (segs.len() == 1 && has_cron));
    if creation {
        let dest = destination(tail, query);
        let pairs = conf::pairs_from_request(headers, query);
        let (req, extra) = publish_req(
            dest,
            None,
            pairs,
            content_type.or_else(|| Some("application/json".into())),
            header_list(headers),
            body.to_vec(),
            peer,
        )
        .map_err(|e| berr(400, e))?;
        let Some(cron) = extra.cron else {
            return Err(berr(400, "missing Upstash-Cron header"));
        };
        if let Some(sid) = &extra.schedule_id {
            if !valid_name(sid) {
                return Err(berr(
                    400,
                    format!("invalid schedule id '{sid}': use letters, digits, '-', '_' and '.'"),
                ));
            }
        }
        if let Some(q) = &extra.queue_name {
            if !valid_name(q) {
                return Err(berr(400, format!("invalid queue name '{q}'")));
            }
        }
        return Ok(Op::ScheduleCreate(ScheduleReq {
            id: extra.schedule_id,
            cron,
            dest: req.dest,
            conf: req.conf,
            body: req.body,
            queue: extra.queue_name,
            caller_ip: req.caller_ip,
        }));
    }
    match (m, segs) {
        (&Method::GET, []) => Ok(Op::ScheduleList),
        (&Method::GET, [s]) if !s.is_empty() => Ok(Op::ScheduleGet(id())),
        (&Method::DELETE, [s]) if !s.is_empty() => Ok(Op::ScheduleDelete(id())),
        (&Method::POST | &Method::PATCH, [s, action @ ("pause" | "resume")]) if !s.is_empty() => {
            Ok(Op::SchedulePause(id(), *action == "pause"))
        }
        _ => Err(berr(404, "unknown schedule route")),
    }
}

fn header_map_pairs(v: Option<&Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(Value::Object(m)) = v {
        for (k, val) in m {
            match val {
                Value::Array(a) => {
                    for x in a.iter().filter_map(Value::as_str) {
                        out.push((k.clone(), x.to_string()));
                    }
                }
                Value::String(s) => out.push((k.clone(), s.clone())),
                _ => {}
            }
        }
    }
    // The workflow SDK sends both RunId and Runid spellings; keep one of each name.
    let mut seen = std::collections::HashSet::new();
    out.retain(|(k, _)| {
        seen.insert(k.to_ascii_lowercase()) || !k.eq_ignore_ascii_case("upstash-workflow-runid")
    });
    out
}

fn wait_req(event_id: String, body: &[u8], headers: &HeaderMap) -> Result<WaitReq, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid wait body: {e}"))?;
    let url = v
        .get("url")
        .and_then(Value::as_str)
        .ok_or("the wait body needs a url")?
        .to_string();
    check_url(&url)?;
    let timeout_ms = match v.get("timeout") {
        None | Some(Value::Null) => 7 * 86_400_000,
        Some(Value::Number(n)) => n.as_u64().ok_or("invalid timeout")?.saturating_mul(1000),
        Some(Value::String(s)) => conf::duration_ms(s)?,
        Some(_) => return Err("invalid timeout".into()),
    };
    let timeout_url = v
        .get("timeoutUrl")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(u) = &timeout_url {
        check_url(u)?;
    }
    let timeout_body = v.get("timeoutBody").and_then(|b| match b {
        Value::Null => None,
        Value::String(s) => Some(s.clone().into_bytes()),
        other => Some(other.to_string().into_bytes()),
    });
    let own: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| {
            let k = k.as_str();
            k.starts_with("upstash-") || k == "content-type"
        })
        .map(|(k, v)| {
            (
                canonical(k.as_str()),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    Ok(WaitReq {
        event_id,
        url,
        timeout_ms,
        timeout_url,
        timeout_body,
        timeout_headers: header_map_pairs(v.get("timeoutHeaders")),
        headers: own,
        step: v.get("step").cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations() {
        let q = vec![
            ("x".to_string(), "1".to_string()),
            ("upstash-retries".to_string(), "2".to_string()),
            ("qstash_token".to_string(), "t".to_string()),
        ];
        assert_eq!(destination("https://h/a", &q), "https://h/a?x=1");
        assert_eq!(destination("https:/h/a", &[]), "https://h/a");
        assert_eq!(destination("group", &q), "group");
    }
}
