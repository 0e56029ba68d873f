//! Outbound HTTP, outside the executor. The executor hands over due messages (never more than
//! `DELIVERY_IN_FLIGHT_MAX` at once, which bounds this pool); each attempt runs as its own task
//! and its result goes back on the pool's result channel, which the executor reads and turns
//! into a logged event. The pool knows nothing of the executor.
//!
//! The attempts run on a thread and runtime of their own ("delivery"), not on the HTTP
//! runtime's threads that also run the executor: 10,000 deliveries a second held a GET's p99
//! at ten times its idle value there, each request waiting behind the signing, sending and
//! reading of attempts.

use super::model::{Message, Response};
use super::ops::AttemptResult;
use super::sign::{self, SigningKeys};
use crate::clock;

use crate::config::{DELIVERY_IDLE_CONNECTIONS_PER_HOST_MAX, DELIVERY_REDIRECTS_MAX};
use crate::msgpack::Bin;
use crate::wal::Progress;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// One attempt to make.
pub struct Dispatch {
    pub msg: Message,
    pub retried: u32,
    /// For a workflow run's message: when the run was created (`Upstash-Workflow-CreatedAt`).
    pub run_created_ms: Option<u64>,
    /// The log sequence that holds the message; with fsync `always` the attempt waits until it
    /// is durable, so nothing is delivered that a crash could un-publish.
    pub durable_after: u64,
}

/// The pool's entrance.
#[derive(Clone)]
pub struct Workers {
    /// The delivery thread's runtime; the thread ends when the last `Workers` is dropped.
    runtime: tokio::runtime::Handle,
    _running: Arc<tokio::sync::oneshot::Sender<()>>,
    client: reqwest::Client,
    keys: Arc<RwLock<SigningKeys>>,
    log: Arc<Progress>,
    wait_for_sync: bool,
    results: mpsc::Sender<AttemptResult>,
    /// A response body longer than this (the maximum message size) is cut.
    response_bytes_max: usize,
    /// `--region`: every delivery's `Upstash-Region`.
    region: Option<String>,
}

impl Workers {
    pub fn new(
        keys: Arc<RwLock<SigningKeys>>,
        log: Arc<Progress>,
        wait_for_sync: bool,
        response_bytes_max: usize,
        region: Option<String>,
        results: mpsc::Sender<AttemptResult>,
    ) -> Result<Workers, String> {
        // Follow 307/308 (method and body kept) a few times; any other 3xx is a failed attempt.
        let policy = reqwest::redirect::Policy::custom(|a| {
            if a.previous().len() < DELIVERY_REDIRECTS_MAX
                && matches!(a.status().as_u16(), 307 | 308)
            {
                a.follow()
            } else {
                a.stop()
            }
        });
        let client = reqwest::Client::builder()
            .redirect(policy)
            .user_agent("Upstash-QStash")
            .pool_max_idle_per_host(DELIVERY_IDLE_CONNECTIONS_PER_HOST_MAX)
            .build()
            .map_err(|e| format!("cannot build the delivery HTTP client: {e}"))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build the delivery runtime: {e}"))?;
        let runtime = rt.handle().clone();
        let (running, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("delivery".into())
            .spawn(move || {
                crate::sys::lower_thread_priority(crate::config::DELIVERY_THREAD_NICE);
                // Runs the attempts until every `Workers` is gone.
                let _ = rt.block_on(stopped);
            })
            .map_err(|e| format!("cannot start the delivery thread: {e}"))?;
        Ok(Workers {
            runtime,
            _running: Arc::new(running),
            client,
            keys,
            log,
            wait_for_sync,
            response_bytes_max,
            region,
            results,
        })
    }

    /// Starts one attempt; its result arrives on the result channel.
    pub fn start(&self, d: Dispatch) {
        let w = self.clone();
        self.runtime.spawn(async move {
            let mut d = d;
            if w.wait_for_sync {
                w.log.wait_durable(d.durable_after).await;
            }
            let started_ms = clock::wall_unix_ms();
            let response = w.attempt(&mut d).await;
            let _ = w
                .results
                .send(AttemptResult {
                    id: d.msg.id.to_string(),
                    retried: d.retried,
                    started_ms,
                    response,
                })
                .await;
        });
    }

    /// Sends `d` (its body is moved into the request, not copied).
    async fn attempt(&self, d: &mut Dispatch) -> Response {
        let retried = d.retried;
        let run_created_ms = d.run_created_ms;
        let m = &mut d.msg;
        let method = reqwest::Method::from_bytes(m.method.as_str().as_bytes())
            .unwrap_or(reqwest::Method::POST);
        let timeout = m
            .conf
            .timeout_ms
            .unwrap_or(crate::config::DELIVERY_ATTEMPT_TIMEOUT_MS_DEFAULT)
            .max(1);
        let now_s = clock::wall_unix_ms() / 1000;
        // A dev user's message (`serve --dev`) is signed with that user's keys.
        let dev_key = m
            .conf
            .signer
            .as_deref()
            .and_then(sign::dev_user_keys)
            .map(|k| k.current);
        let key = match (dev_key, self.keys.read()) {
            (Some(k), _) => k,
            (None, Ok(k)) => k.current.clone(),
            (None, Err(p)) => p.into_inner().current.clone(),
        };
        let jti = format!("jwt_{}", &m.id[m.id.len().saturating_sub(20)..]);
        let signature = sign::sign(&key, &m.url, &m.body.0, now_s, &format!("{jti}{retried}"));
        // Forwarded headers first (repeated names kept), then the delivery's own headers, which
        // replace any forwarded header of the same name: a workflow step forwards the headers
        // of the request that produced it, its old Upstash-Signature included.
        let mut h = reqwest::header::HeaderMap::new();
        for (k, v) in &m.conf.forward {
            if is_hop_by_hop(k) {
                continue;
            }
            if let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                reqwest::header::HeaderValue::from_str(v),
            ) {
                h.append(name, value);
            }
        }
        let mut own = vec![
            ("upstash-message-id", m.id.to_string()),
            ("upstash-retried", retried.to_string()),
            ("upstash-signature", signature),
            ("user-agent", "Upstash-QStash".to_string()),
        ];
        if let Some(s) = &m.schedule_id {
            own.push(("upstash-schedule-id", s.to_string()));
        }
        if let Some(t) = &m.topic {
            own.push(("upstash-topic-name", t.to_string()));
        }
        if let Some(ip) = &m.caller_ip {
            own.push(("upstash-caller-ip", ip.to_string()));
        }
        if let Some(run) = m.conf.run_id() {
            let created = run_created_ms.unwrap_or(m.created_ms);
            own.push(("upstash-workflow-runid", run.to_string()));
            own.push(("upstash-workflow-createdat", created.to_string()));
        }
        if let Some(u) = m.conf.workflow_value("Upstash-Workflow-Url") {
            own.push(("upstash-workflow-url", u.to_string()));
        }
        if let Some(r) = &self.region {
            own.push(("upstash-region", r.clone()));
        }
        for (k, v) in own {
            if let Ok(value) = reqwest::header::HeaderValue::from_str(&v) {
                h.insert(reqwest::header::HeaderName::from_static(k), value);
            }
        }
        let rb = self
            .client
            .request(method, &m.url)
            .timeout(Duration::from_millis(timeout))
            .headers(h)
            .body(std::mem::take(&mut m.body.0));
        let resp = match rb.send().await {
            Ok(r) => r,
            Err(e) => {
                return Response {
                    status: 0,
                    headers: Vec::new(),
                    body: Bin(Vec::new()),
                    error: Some(describe(&e)),
                }
            }
        };
        let status = resp.status().as_u16();
        let headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    super::conf::canonical(k.as_str()),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = Vec::new();
        let mut resp = resp;
        let mut error = None;
        loop {
            match resp.chunk().await {
                Ok(Some(c)) => {
                    let room = self.response_bytes_max.saturating_sub(body.len());
                    body.extend_from_slice(&c[..c.len().min(room)]);
                    if room <= c.len() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(describe(&e));
                    break;
                }
            }
        }
        if error.is_none() && !(200..300).contains(&status) {
            error = Some(format!("destination answered {status}"));
        }
        Response {
            status,
            headers,
            body: Bin(body),
            error,
        }
    }
}

fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "te"
            | "trailer"
            | "proxy-connection"
    )
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "attempt timed out".to_string()
    } else if e.is_connect() {
        format!("cannot connect: {e}")
    } else {
        e.to_string()
    }
}
