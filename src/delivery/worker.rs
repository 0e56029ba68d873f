//! Outbound HTTP, outside the executor. The executor hands over due messages (never more than
//! `DELIVERY_IN_FLIGHT_MAX` at once, which bounds this pool); each attempt runs as its own task
//! and its result goes back on the pool's result channel, which the executor reads and turns
//! into a logged event. The pool knows nothing of the executor.
//!
//! The attempts run on a thread and runtime of their own ("delivery"), not on the HTTP
//! runtime's threads that also run the executor: 10,000 deliveries a second held a GET's p99
//! at ten times its idle value there, each request waiting behind the signing, sending and
//! reading of attempts.

use super::client::Client;
use super::model::{Message, Response};
use super::ops::AttemptResult;
use super::sign::{self, SigningKeys};
use crate::clock;

use crate::config::DELIVERY_IDLE_CONNECTION_MS;
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
    client: Arc<Client>,
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
        let client = Arc::new(Client::new()?);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build the delivery runtime: {e}"))?;
        let runtime = rt.handle().clone();
        // Connections idle past their time are closed even when no attempt comes to find them.
        let sweeping = client.clone();
        runtime.spawn(async move {
            let every = Duration::from_millis(DELIVERY_IDLE_CONNECTION_MS / 4);
            loop {
                tokio::time::sleep(every).await;
                sweeping.close_stale();
            }
        });
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
            // If this task ends without a result (a panic in the HTTP client, say), the guard
            // sends a failed one, so the message is retried and its slot freed, not held in
            // flight for good.
            let mut guard = Unfinished {
                id: d.msg.id.clone(),
                retried: d.retried,
                results: Some(w.results.clone()),
            };
            if w.wait_for_sync {
                w.log.wait_durable(d.durable_after).await;
            }
            let started_ms = clock::wall_unix_ms();
            let response = w.attempt(&mut d).await;
            guard.results = None;
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
        let method =
            hyper::Method::from_bytes(m.method.as_str().as_bytes()).unwrap_or(hyper::Method::POST);
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
        let Some(url) = parsed_url(&m.url) else {
            let why = reqwest::Url::parse(&m.url).err();
            return Response::none(format!(
                "the destination {} is not a URL: {}",
                m.url,
                why.map_or_else(|| "it does not parse".to_string(), |e| e.to_string())
            ));
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout);
        let body = bytes::Bytes::from(std::mem::take(&mut m.body.0));
        let answer = match self
            .client
            .send(
                method,
                url,
                || self.headers(m, retried, run_created_ms, &signature),
                body,
                self.response_bytes_max,
                deadline,
            )
            .await
        {
            Ok(a) => a,
            Err(e) => return Response::none(e),
        };
        let status = answer.status;
        let mut error = answer.error;
        if error.is_none() && !(200..300).contains(&status) {
            error = Some(format!("destination answered {status}"));
        }
        Response {
            status,
            headers: answer.headers,
            body: Bin(answer.body),
            error,
        }
    }

    /// The headers of an attempt of `m`: the forwarded ones first (repeated names kept), then
    /// the delivery's own, which replace any forwarded header of the same name (a workflow
    /// step forwards the headers of the request that produced it, its old Upstash-Signature
    /// included).
    fn headers(
        &self,
        m: &Message,
        retried: u32,
        run_created_ms: Option<u64>,
        signature: &str,
    ) -> Result<hyper::HeaderMap, String> {
        use hyper::header::{HeaderMap, HeaderName, HeaderValue};
        // A header map holds about 24,500 entries (a table of 32,768, three quarters full) and
        // panics past that on `append` and `insert`: a message may forward more (a batch
        // item's headers are bounded by its size only), so the fallible forms are used and
        // such a message fails its attempt. The map is sized once for the forwarded headers
        // and the delivery's own; a size no map can take starts empty and fails below.
        let mut h = HeaderMap::try_with_capacity(m.conf.forward.len() + 16).unwrap_or_default();
        let mut full = false;
        for (k, v) in &m.conf.forward {
            if is_hop_by_hop(k) {
                continue;
            }
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                full |= h.try_append(name, value).is_err();
            }
        }
        let mut own = |name: &'static str, value: Result<HeaderValue, _>| {
            if let Ok(value) = value {
                full |= h.try_insert(HeaderName::from_static(name), value).is_err();
            }
        };
        own("upstash-message-id", HeaderValue::from_str(&m.id));
        own("upstash-retried", Ok(HeaderValue::from(retried)));
        own("upstash-signature", HeaderValue::from_str(signature));
        own("user-agent", Ok(HeaderValue::from_static("Upstash-QStash")));
        if let Some(s) = &m.schedule_id {
            own("upstash-schedule-id", HeaderValue::from_str(s));
        }
        if let Some(t) = &m.topic {
            own("upstash-topic-name", HeaderValue::from_str(t));
        }
        if let Some(ip) = &m.caller_ip {
            own("upstash-caller-ip", HeaderValue::from_str(ip));
        }
        if let Some(run) = m.conf.run_id() {
            let created = run_created_ms.unwrap_or(m.created_ms);
            own("upstash-workflow-runid", HeaderValue::from_str(run));
            own("upstash-workflow-createdat", Ok(HeaderValue::from(created)));
        }
        if let Some(u) = m.conf.workflow_value("Upstash-Workflow-Url") {
            own("upstash-workflow-url", HeaderValue::from_str(u));
        }
        if let Some(r) = &self.region {
            own("upstash-region", HeaderValue::from_str(r));
        }
        if full {
            return Err(format!(
                "the message forwards more headers than one request can carry ({} given)",
                m.conf.forward.len()
            ));
        }
        Ok(h)
    }
}

/// An attempt under way; dropped before its result was sent, it sends a failed one.
struct Unfinished {
    id: Arc<str>,
    retried: u32,
    results: Option<mpsc::Sender<AttemptResult>>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(results) = self.results.take() else {
            return;
        };
        let r = AttemptResult {
            id: self.id.to_string(),
            retried: self.retried,
            started_ms: clock::wall_unix_ms(),
            response: Response::none(
                "the attempt ended without an answer (an internal error)".into(),
            ),
        };
        // The channel holds a slot for every attempt in flight, so this does not fail while
        // the executor runs; when it has stopped, nobody needs the result.
        let _ = results.try_send(r);
    }
}

thread_local! {
    /// Destinations parsed before, on the delivery thread (the only one that sends): a burst
    /// to one URL parses it once, not once an attempt (6 % of the thread's time). Traffic to
    /// more distinct destinations than it holds pays a little more than a parse an attempt.
    static PARSED_URLS: std::cell::RefCell<std::collections::HashMap<Box<str>, reqwest::Url>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `url` parsed, from the delivery thread's cache of recent destinations (`conf::remembered`);
/// None if it does not parse.
fn parsed_url(url: &str) -> Option<reqwest::Url> {
    super::conf::remembered(&PARSED_URLS, url, || reqwest::Url::parse(url)).ok()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DELIVERY_PARSED_URLS_MAX, DELIVERY_PARSED_URL_BYTES_MAX};

    #[test]
    fn an_attempt_that_ends_without_its_result_sends_a_failed_one() {
        let (tx, mut rx) = mpsc::channel(4);
        drop(Unfinished {
            id: "msg_a".into(),
            retried: 2,
            results: Some(tx.clone()),
        });
        let r = rx.try_recv().expect("a result for the unfinished attempt");
        assert_eq!(
            (r.id.as_str(), r.retried, r.response.status),
            ("msg_a", 2, 0)
        );
        assert!(r
            .response
            .error
            .is_some_and(|e| e.contains("without an answer")));
        // Finished: the guard is disarmed and sends nothing.
        drop(Unfinished {
            id: "msg_b".into(),
            retried: 0,
            results: None,
        });
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_destination_parses_the_same_from_the_cache_and_a_bad_one_is_not_kept() {
        let url = "http://127.0.0.1:9/a?b=c";
        let first = parsed_url(url).map(|u| u.to_string());
        assert_eq!(first.as_deref(), Some("http://127.0.0.1:9/a?b=c"));
        assert_eq!(parsed_url(url).map(|u| u.to_string()), first);
        assert!(PARSED_URLS.with(|c| c.borrow().contains_key(url)));
        assert!(parsed_url("not a url").is_none());
        let long = format!("http://h/{}", "x".repeat(DELIVERY_PARSED_URL_BYTES_MAX));
        assert!(parsed_url(&long).is_some());
        assert!(!PARSED_URLS.with(|c| c.borrow().contains_key(long.as_str())));
        for i in 0..DELIVERY_PARSED_URLS_MAX + 1 {
            parsed_url(&format!("http://h/{i}"));
        }
        assert!(PARSED_URLS.with(|c| c.borrow().len()) <= DELIVERY_PARSED_URLS_MAX);
    }
}
