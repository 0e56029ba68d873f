//! API operations against the delivery state, run by the executor.
//!
//! An operation reads the state and `emit`s events; `emit` applies each event at once (so a
//! later step of the same operation sees the earlier ones) and collects it for the log record.
//! The executor writes the collected events as one record and answers after it is durable.
//! Nothing here does I/O or reads the clock: `now_ms` and the random source come in.

use super::conf::{self, canonical};
use super::cron::CronSpec;
use super::json;
use super::model::*;
use super::retry;
use super::Delivery;
use crate::command::Rng;
use crate::config::DELIVERY_DEFAULT_RETRIES;
use crate::msgpack::Bin;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};

/// A publish, enqueue or batch item, parsed and checked by the HTTP layer.
#[derive(Debug, Clone)]
pub struct PublishReq {
    /// A URL or a URL-group name.
    pub dest: String,
    pub queue: Option<String>,
    pub conf: Conf,
    pub body: Vec<u8>,
    pub caller_ip: Option<String>,
}

/// Selects messages or DLQ entries: explicit ids, or filters.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub ids: Vec<String>,
    /// Filter name (as the SDKs send it) and accepted values (ORed).
    pub params: Vec<(String, Vec<String>)>,
    pub count: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ScheduleReq {
    pub id: Option<String>,
    pub cron: String,
    pub dest: String,
    pub conf: Conf,
    pub body: Vec<u8>,
    pub queue: Option<String>,
    pub caller_ip: Option<String>,
}

#[derive(Debug, Clone)]
pub struct WaitReq {
    pub event_id: String,
    pub url: String,
    pub timeout_ms: u64,
    pub timeout_url: Option<String>,
    pub timeout_body: Option<Vec<u8>>,
    pub timeout_headers: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub step: Value,
}

#[derive(Debug)]
pub enum Op {
    Publish(PublishReq),
    Batch(Vec<Result<PublishReq, String>>),
    MessageGet(String),
    MessageCancel(String),
    MessagesCancel(Filter),
    DlqList(Filter),
    DlqGet(String),
    DlqDelete(String),
    DlqDeleteMany(Filter),
    /// Retry DLQ entries; `single` answers `{messageId}` instead of the list form.
    DlqRetry {
        filter: Filter,
        single: bool,
        overrides: Conf,
    },
    TopicAdd {
        name: String,
        endpoints: Vec<Endpoint>,
    },
    TopicRemove {
        name: String,
        endpoints: Vec<(Option<String>, Option<String>)>,
    },
    TopicGet(String),
    TopicList,
    TopicDelete(String),
    QueueUpsert(QueueConf),
    QueueGet(String),
    QueueList,
    QueueDelete(String),
    QueuePause(String, bool),
    ScheduleCreate(ScheduleReq),
    ScheduleGet(String),
    ScheduleList,
    ScheduleDelete(String),
    SchedulePause(String, bool),
    Wait(WaitReq),
    Notify {
        event_id: String,
        body: Vec<u8>,
        /// The lookback form: a notify for a run keeps the event when nobody waits yet.
        run_id: Option<String>,
    },
    RunGet(String),
    RunDelete {
        id: String,
        cancel: bool,
        body: Vec<u8>,
    },
    RunsCancel(Filter),
    Waiters(String),
    Logs(Filter),
    WorkflowLogs(Filter),
    FlowList(Option<String>),
    FlowGet(String),
    FlowAction {
        key: String,
        action: FlowAction,
    },
    GlobalParallelism,
    /// `POST /v2/workflows/dlq/resume|restart[/<dlqId>]`: failed runs started again.
    RunRecover {
        how: Recovery,
        filter: Filter,
        /// The single-id form, answered with one object.
        single: bool,
        /// Configuration headers of the request (retries, flow control, ..., and
        /// `Upstash-Workflow-RunId` for the new run's id).
        overrides: Conf,
    },
    /// `POST /v2/workflows/dlq/callback/<dlqId>`: the failure function called again.
    RunFailureCallback(String),
}

/// How a failed workflow run starts again from the DLQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// From the failed step, keeping the steps before it.
    Resume,
    /// From the beginning, with the initial payload.
    Restart,
}

/// What `POST /v2/flowControl/<key>/<action>` asks.
#[derive(Debug, Clone)]
pub enum FlowAction {
    Pause,
    Resume,
    Pin {
        parallelism: Option<u32>,
        rate: Option<u32>,
        period_s: Option<u64>,
    },
    Unpin {
        parallelism: bool,
        rate: bool,
    },
    ResetRate,
    Reset,
}

impl Op {
    /// Whether the operation can change state (refused when the log is poisoned).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Op::MessageGet(_)
                | Op::DlqList(_)
                | Op::DlqGet(_)
                | Op::TopicGet(_)
                | Op::TopicList
                | Op::QueueGet(_)
                | Op::QueueList
                | Op::ScheduleGet(_)
                | Op::ScheduleList
                | Op::Waiters(_)
                | Op::Logs(_)
                | Op::RunGet(_)
                | Op::FlowList(_)
                | Op::WorkflowLogs(_)
                | Op::FlowGet(_)
                | Op::GlobalParallelism
        )
    }
}

/// An HTTP status and a JSON body.
#[derive(Debug)]
pub struct OpReply {
    pub status: u16,
    pub body: Value,
}

fn ok(body: Value) -> OpReply {
    OpReply { status: 200, body }
}

fn not_found(what: &str) -> OpReply {
    OpReply {
        status: 404,
        body: json!({ "error": what }),
    }
}

fn bad(what: impl Into<String>) -> OpReply {
    OpReply {
        status: 400,
        body: json!({ "error": what.into() }),
    }
}

/// The result of a delivery attempt, as a worker reports it.
#[derive(Debug)]
pub struct AttemptResult {
    pub id: String,
    pub retried: u32,
    pub started_ms: u64,
    pub response: Response,
}

/// An operation in progress: the state, the time, randomness, and the events so far.
pub struct Tx<'a> {
    pub d: &'a mut Delivery,
    pub now_ms: u64,
    pub rng: &'a mut Rng,
    pub events: Vec<Event>,
}

const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

impl<'a> Tx<'a> {
    pub fn new(d: &'a mut Delivery, now_ms: u64, rng: &'a mut Rng) -> Tx<'a> {
        Tx {
            d,
            now_ms,
            rng,
            events: Vec::new(),
        }
    }

    pub fn emit(&mut self, e: Event) {
        self.d.apply(self.now_ms, &e);
        self.events.push(e);
    }

    fn random_id(&mut self, prefix: &str, len: usize) -> String {
        let mut s = String::with_capacity(prefix.len() + len);
        s.push_str(prefix);
        for _ in 0..len {
            s.push(ALNUM[self.rng.below(ALNUM.len())] as char);
        }
        s
    }

    fn dlq_id(&mut self) -> String {
        format!("{}-{}", self.now_ms, self.rng.next_u64() % 1_000_000)
    }

    /// Builds a message to `url` (not yet emitted).
    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        url: &str,
        conf: &Conf,
        body: Vec<u8>,
        origin: Origin,
        topic: Option<(&str, Option<String>)>,
        queue: Option<String>,
        schedule_id: Option<String>,
        caller_ip: Option<String>,
    ) -> Message {
        let not_before = match (conf.not_before_ms, conf.delay_ms) {
            (Some(t), _) => t,
            (None, Some(d)) => self.now_ms.saturating_add(d),
            (None, None) => self.now_ms,
        };
        Message {
            id: self.random_id("msg_", 26).into(),
            url: url.to_string(),
            method: conf
                .method
                .as_deref()
                .and_then(HttpMethod::parse)
                .unwrap_or(HttpMethod::POST),
            body: Bin(body),
            created_ms: self.now_ms,
            not_before_ms: not_before,
            max_retries: conf.retries.unwrap_or(DELIVERY_DEFAULT_RETRIES),
            conf: conf.clone(),
            origin,
            topic: topic.as_ref().map(|t| t.0.into()),
            endpoint: topic.and_then(|t| t.1).map(String::into_boxed_str),
            queue: queue.map(String::into_boxed_str),
            schedule_id: schedule_id.map(String::into_boxed_str),
            caller_ip: caller_ip.map(String::into_boxed_str),
            dedup_key: None,
            source_id: None,
            holds_queue: None,
        }
    }

    /// A step published into a run without its own retries, retry delay, failure callback,
    /// flow control or label takes the run trigger's (`WF_TriggerOnConfig`: the workflow SDK
    /// sends those only with the trigger, so a step failing later reaches the failure function
    /// and the DLQ as configured). None when nothing is to be taken.
    fn inherit_trigger_conf(&self, c: &Conf) -> Option<Conf> {
        if !c.has_feature("WF_TriggerOnConfig") || c.call_type() != "step" {
            return None;
        }
        let t = self.d.runs.get(c.run_id()?)?.trigger_conf.as_deref()?;
        let mut n = c.clone();
        take_run_settings(&mut n, t, true);
        (n != *c).then_some(n)
    }

    /// Publishes to a URL or fans out to a group. Returns one answer item per message.
    fn publish_one(
        &mut self,
        req: &PublishReq,
        origin: Origin,
        schedule_id: Option<String>,
    ) -> Result<Value, OpReply> {
        let targets: Vec<(String, Option<GroupTarget>)> = if req.dest.starts_with("http://")
            || req.dest.starts_with("https://")
        {
            vec![(req.dest.clone(), None)]
        } else {
            let Some(t) = self.d.topics.get(&req.dest) else {
                return Err(not_found(&format!(
                        "topic {} not found: publish to a URL (http:// or https://) or to an existing URL group",
                        req.dest
                    )));
            };
            t.endpoints
                .iter()
                .map(|e| (e.url.clone(), Some((t.name.clone(), e.name.clone()))))
                .collect()
        };
        if let Some(run_id) = req.conf.run_id() {
            if let Some(run) = self.d.runs.get(run_id) {
                if req.conf.workflow_value("Upstash-Workflow-Init") == Some("true") {
                    let first = run.steps.first().map(|s| s.message_id.clone());
                    return Ok(json!({
                        "messageId": first.unwrap_or_default(),
                        "url": req.dest,
                        "deduplicated": true,
                    }));
                }
                if run.ended.is_some() {
                    return Err(bad(format!("workflow run {run_id} has already ended")));
                }
            }
        }
        let inherited = self.inherit_trigger_conf(&req.conf);
        let conf = inherited.as_ref().unwrap_or(&req.conf);
        if let Some(q) = &req.queue {
            if !self.d.queues.contains_key(q) {
                self.emit(Event::Queue(QueueConf {
                    name: q.clone(),
                    parallelism: 1,
                    paused: false,
                }));
            }
        }
        let mut items = Vec::new();
        for (url, topic) in &targets {
            let key = dedup_key(conf, url, &req.body);
            if let Some(k) = &key {
                if let Some(orig) = self.d.deduplicated(k, self.now_ms) {
                    items.push(json!({"messageId": orig, "url": url, "deduplicated": true}));
                    continue;
                }
            }
            let mut m = self.message(
                url,
                conf,
                req.body.clone(),
                origin,
                topic.as_ref().map(|(t, e)| (t.as_str(), e.clone())),
                req.queue.clone(),
                schedule_id.clone(),
                req.caller_ip.clone(),
            );
            m.dedup_key = key.map(String::into_boxed_str);
            items.push(json!({"messageId": m.id, "url": url}));
            self.emit(Event::Put(Box::new(m)));
        }
        if req.dest.contains("://") {
            Ok(items.pop().unwrap_or(Value::Null))
        } else {
            Ok(Value::Array(items))
        }
    }
}

/// A group's name and the endpoint's name.
type GroupTarget = (String, Option<String>);

/// The deduplication key of a message to `url`: by id, or by content (destination, body,
/// `Content-Type` and forwarded headers).
fn dedup_key(c: &Conf, url: &str, body: &[u8]) -> Option<String> {
    if let Some(id) = &c.dedup_id {
        return Some(format!("id:{url}\n{id}"));
    }
    if c.content_dedup {
        let mut parts: Vec<&[u8]> = vec![url.as_bytes(), body];
        let mut fwd = c.forward.clone();
        fwd.sort();
        for (k, v) in &fwd {
            parts.push(k.as_bytes());
            parts.push(v.as_bytes());
        }
        return Some(format!("content:{}", super::sign::sha256_hex(&parts)));
    }
    None
}

/// Runs an operation. The caller logs `tx.events` and answers `OpReply` once they are durable.
pub fn run(tx: &mut Tx, op: Op) -> OpReply {
    match op {
        Op::Publish(req) => match tx.publish_one(&req, Origin::Publish, None) {
            Ok(v) => {
                let dup = match &v {
                    Value::Object(m) => m.contains_key("deduplicated"),
                    Value::Array(a) => {
                        !a.is_empty() && a.iter().all(|i| i.get("deduplicated").is_some())
                    }
                    _ => false,
                };
                OpReply {
                    status: if dup { 202 } else { 200 },
                    body: v,
                }
            }
            Err(e) => e,
        },
        Op::Batch(items) => {
            let mut out = Vec::new();
            for item in items {
                out.push(match item {
                    Ok(req) => match tx.publish_one(&req, Origin::Publish, None) {
                        Ok(v) => v,
                        Err(e) => e.body,
                    },
                    Err(e) => json!({ "error": e }),
                });
            }
            ok(Value::Array(out))
        }
        Op::MessageGet(id) => match tx.d.msgs.get(id.as_str()) {
            Some(p) => ok(json::pending(p)),
            None => not_found(&format!("message {id} not found")),
        },
        Op::MessageCancel(id) => {
            if !tx.d.msgs.contains_key(id.as_str()) {
                return not_found(&format!("message {id} not found"));
            }
            tx.emit(Event::Cancel { ids: vec![id] });
            ok(json!({"cancelled": 1}))
        }
        Op::MessagesCancel(f) => {
            let ids: Vec<String> = if !f.ids.is_empty() {
                f.ids
                    .iter()
                    .filter(|i| tx.d.msgs.contains_key(i.as_str()))
                    .cloned()
                    .collect()
            } else {
                let mut v: Vec<(u64, String)> =
                    tx.d.msgs
                        .values()
                        .filter(|p| message_matches(&p.msg, p.msg.created_ms, &f))
                        .map(|p| (p.order, p.msg.id.to_string()))
                        .collect();
                v.sort();
                let limit = if f.params.is_empty() && f.count.is_none() {
                    usize::MAX
                } else {
                    f.count.unwrap_or(100)
                };
                v.into_iter().take(limit).map(|(_, id)| id).collect()
            };
            let n = ids.len();
            if n > 0 {
                tx.emit(Event::Cancel { ids });
            }
            ok(json!({ "cancelled": n }))
        }
        Op::DlqList(f) => {
            let (page, cursor) = dlq_page(tx.d, &f);
            let messages: Vec<Value> = page
                .iter()
                .map(|id| dlq_json(tx.d, &tx.d.dlq[id]))
                .collect();
            let mut m = Map::new();
            m.insert("messages".into(), Value::Array(messages));
            if let Some(c) = cursor {
                m.insert("cursor".into(), json!(c));
            }
            ok(Value::Object(m))
        }
        Op::DlqGet(id) => match tx.d.dlq.get(&id) {
            Some(e) => ok(dlq_json(tx.d, e)),
            None => not_found(&format!("dlq message {id} not found")),
        },
        Op::DlqDelete(id) => {
            if !tx.d.dlq.contains_key(&id) {
                return not_found(&format!("dlq message {id} not found"));
            }
            tx.emit(Event::DlqRemove { ids: vec![id] });
            ok(json!({"deleted": 1}))
        }
        Op::DlqDeleteMany(f) => {
            let (ids, cursor) = dlq_page(tx.d, &f);
            let n = ids.len();
            if n > 0 {
                tx.emit(Event::DlqRemove { ids });
            }
            let mut m = Map::new();
            m.insert("deleted".into(), json!(n));
            if let Some(c) = cursor {
                m.insert("cursor".into(), json!(c));
            }
            ok(Value::Object(m))
        }
        Op::DlqRetry {
            filter,
            single,
            overrides,
        } => {
            let (ids, cursor) = dlq_page(tx.d, &filter);
            if single && ids.is_empty() {
                return not_found("dlq message not found");
            }
            let mut responses = Vec::new();
            for id in &ids {
                let Some(e) = tx.d.dlq.get(id) else { continue };
                let old = e.message.clone();
                let mut c = old.conf.clone();
                c.delay_ms = None;
                c.not_before_ms = None;
                override_conf(&mut c, &overrides);
                let mut m = tx.message(
                    &old.url,
                    &c,
                    old.body.0.clone(),
                    Origin::DlqRetry,
                    old.topic
                        .as_deref()
                        .map(|t| (t, old.endpoint.as_deref().map(str::to_string))),
                    None,
                    old.schedule_id.as_deref().map(str::to_string),
                    old.caller_ip.as_deref().map(str::to_string),
                );
                m.method = overrides
                    .method
                    .as_deref()
                    .and_then(HttpMethod::parse)
                    .unwrap_or(old.method);
                responses.push(json!({"messageId": m.id}));
                tx.emit(Event::Put(Box::new(m)));
            }
            if !ids.is_empty() {
                tx.emit(Event::DlqRemove { ids });
            }
            if single {
                return ok(responses.pop().unwrap_or(Value::Null));
            }
            ok(json!({"cursor": cursor.unwrap_or_default(), "responses": responses}))
        }
        Op::RunRecover {
            how,
            mut filter,
            single,
            overrides,
        } => {
            // At most 50 runs per request, as the hosted service pages them.
            filter.count = Some(filter.count.unwrap_or(50).clamp(1, 50));
            for id in &filter.ids {
                match tx.d.dlq.get(id) {
                    None => return not_found(&format!("dlq message {id} not found")),
                    Some(e) if !is_run_entry(e) => {
                        return bad(format!("dlq message {id} is not a workflow run's step"))
                    }
                    Some(_) => {}
                }
            }
            let (ids, cursor) = dlq_page(tx.d, &filter);
            if single && ids.is_empty() {
                return not_found("dlq message not found");
            }
            if overrides.run_id().is_some() && ids.len() > 1 {
                return bad("Upstash-Workflow-RunId names one run: give one dlqId with it");
            }
            // Every entry is checked before any event is written, so a refusal changes nothing.
            // One new start per run: a run with several failed steps (parallel ones) starts
            // again from the first; its other entries stay in the DLQ.
            let mut plans = Vec::new();
            let mut taken = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for id in ids {
                let e = &tx.d.dlq[&id];
                if !seen.insert(e.message.conf.run_id().unwrap_or_default().to_string()) {
                    continue;
                }
                match recovery_plan(tx.d, e, how, &overrides) {
                    Ok(p) => plans.push(p),
                    Err(e) => return e,
                }
                taken.push(id);
            }
            let ids = taken;
            let mut runs = Vec::new();
            for p in plans {
                runs.push(json!({"workflowRunId": p.run_id, "workflowCreatedAt": tx.now_ms}));
                let m = tx.message(
                    &p.url,
                    &p.conf,
                    p.body,
                    Origin::DlqRetry,
                    None,
                    None,
                    None,
                    p.caller_ip,
                );
                let m = Message {
                    method: p.method,
                    ..m
                };
                tx.emit(Event::RunStart {
                    id: p.run_id,
                    url: p.run_url,
                    steps: p.steps,
                });
                tx.emit(Event::Put(Box::new(m)));
            }
            if !ids.is_empty() {
                tx.emit(Event::DlqRemove { ids });
            }
            if single {
                return ok(runs.pop().unwrap_or(Value::Null));
            }
            let mut m = Map::new();
            m.insert("cursor".into(), json!(cursor.unwrap_or_default()));
            m.insert("workflowRuns".into(), Value::Array(runs));
            ok(Value::Object(m))
        }
        Op::RunFailureCallback(id) => {
            let Some(e) = tx.d.dlq.get(&id).cloned() else {
                return not_found(&format!("dlq message {id} not found"));
            };
            let Some(run_id) = e.message.conf.run_id().filter(|_| is_run_entry(&e)) else {
                return bad(format!("dlq message {id} is not a workflow run's step"));
            };
            let Some(hook) = e.message.conf.failure_callback.clone() else {
                return bad(format!(
                    "workflow run {run_id} has no failure function or failure URL"
                ));
            };
            if tx
                .d
                .failure_calls
                .get(&*e.message.id)
                .is_some_and(|c| tx.d.msgs.contains_key(&c.message_id))
            {
                return bad(format!(
                    "the failure function of workflow run {run_id} is still being called"
                ));
            }
            let run = tx.d.runs.get(run_id);
            let created = run.map(|r| r.created_ms).unwrap_or(e.message.created_ms);
            let retried = e.message.max_retries.max(e.retried);
            let body = callback_body(&e.message, retried, &e.response, Some(&e.dlq_id), run);
            let reply = json!({"workflowRunId": run_id, "workflowCreatedAt": created});
            let cm = callback_message(tx, &hook, body, Origin::FailureCallback, &e.message);
            tx.emit(Event::Put(Box::new(cm)));
            ok(reply)
        }
        Op::TopicAdd { name, endpoints } => {
            let mut t = tx.d.topics.get(&name).cloned().unwrap_or(Topic {
                name: name.clone(),
                created_ms: tx.now_ms,
                updated_ms: tx.now_ms,
                endpoints: Vec::new(),
            });
            for e in endpoints {
                t.endpoints
                    .retain(|x| !(x.url == e.url || (e.name.is_some() && x.name == e.name)));
                t.endpoints.push(e);
            }
            t.updated_ms = tx.now_ms;
            tx.emit(Event::Topic(t));
            ok(json!({}))
        }
        Op::TopicRemove { name, endpoints } => {
            let Some(mut t) = tx.d.topics.get(&name).cloned() else {
                return not_found(&format!("topic {name} not found"));
            };
            t.endpoints.retain(|x| {
                !endpoints.iter().any(|(url, n)| {
                    url.as_ref().is_some_and(|u| *u == x.url) || (n.is_some() && *n == x.name)
                })
            });
            t.updated_ms = tx.now_ms;
            if t.endpoints.is_empty() {
                tx.emit(Event::TopicDelete { name });
            } else {
                tx.emit(Event::Topic(t));
            }
            ok(json!({}))
        }
        Op::TopicGet(name) => match tx.d.topics.get(&name) {
            Some(t) => ok(json::topic(t)),
            None => not_found(&format!("topic {name} not found")),
        },
        Op::TopicList => ok(Value::Array(
            tx.d.topics.values().map(json::topic).collect(),
        )),
        Op::TopicDelete(name) => {
            if !tx.d.topics.contains_key(&name) {
                return not_found(&format!("topic {name} not found"));
            }
            tx.emit(Event::TopicDelete { name });
            ok(json!({}))
        }
        Op::QueueUpsert(q) => {
            tx.emit(Event::Queue(q));
            ok(json!({}))
        }
        Op::QueueGet(name) => match tx.d.queues.get(&name) {
            Some(q) => ok(json::queue(q)),
            None => not_found(&format!("queue {name} not found")),
        },
        Op::QueueList => ok(Value::Array(
            tx.d.queues.values().map(json::queue).collect(),
        )),
        Op::QueueDelete(name) => {
            if !tx.d.queues.contains_key(&name) {
                return not_found(&format!("queue {name} not found"));
            }
            tx.emit(Event::QueueDelete { name });
            ok(json!({}))
        }
        Op::QueuePause(name, paused) => {
            let Some(q) = tx.d.queues.get(&name) else {
                return not_found(&format!("queue {name} not found"));
            };
            let mut c = q.conf.clone();
            if c.paused != paused {
                c.paused = paused;
                tx.emit(Event::Queue(c));
            }
            ok(json!({}))
        }
        Op::ScheduleCreate(req) => {
            let spec = match CronSpec::parse(&req.cron) {
                Ok(s) => s,
                Err(e) => return bad(e),
            };
            let Some(next_ms) = spec.next_after(tx.now_ms) else {
                return bad(format!("cron '{}' never fires", req.cron));
            };
            let id = match req.id {
                Some(id) => id,
                None => tx.random_id("scd_", 26),
            };
            let (created, paused) = match tx.d.schedules.get(&id) {
                Some(old) => (old.created_ms, old.paused),
                None => (tx.now_ms, false),
            };
            let s = Schedule {
                id: id.clone(),
                cron: req.cron.trim().to_string(),
                destination: req.dest,
                method: req.conf.method.clone().unwrap_or_else(|| "POST".into()),
                body: (!req.body.is_empty()).then_some(Bin(req.body)),
                conf: req.conf,
                queue: req.queue,
                caller_ip: req.caller_ip,
                created_ms: created,
                paused,
                next_ms,
                last_ms: None,
                last_message_id: None,
            };
            tx.emit(Event::Schedule(Box::new(s)));
            ok(json!({ "scheduleId": id }))
        }
        Op::ScheduleGet(id) => match tx.d.schedules.get(&id) {
            Some(s) => ok(json::schedule(s, tx.d)),
            None => not_found(&format!("schedule {id} not found")),
        },
        Op::ScheduleList => ok(Value::Array(
            tx.d.schedules
                .values()
                .map(|s| json::schedule(s, tx.d))
                .collect(),
        )),
        Op::ScheduleDelete(id) => {
            if tx.d.schedules.contains_key(&id) {
                tx.emit(Event::ScheduleDelete { id });
            }
            ok(json!({}))
        }
        Op::SchedulePause(id, paused) => {
            let Some(s) = tx.d.schedules.get(&id) else {
                return not_found(&format!("schedule {id} not found"));
            };
            if s.paused != paused {
                tx.emit(Event::SchedulePause { id, paused });
            }
            ok(json!({}))
        }
        Op::Wait(w) => {
            let run = run_id(&w.headers);
            let stored = run.as_ref().and_then(|r| {
                tx.d.notifications
                    .get(&(r.clone(), w.event_id.clone()))
                    .cloned()
            });
            if let (Some(run), Some(event)) = (run, stored) {
                // A lookback notification came first: wake at once instead of waiting.
                let waiter = Waiter {
                    id: String::new(),
                    event_id: w.event_id.clone(),
                    url: w.url.clone(),
                    headers: w.headers.clone(),
                    deadline_s: 0,
                    timeout_url: None,
                    timeout_body: None,
                    timeout_headers: Vec::new(),
                    step: w.step.to_string(),
                    created_ms: tx.now_ms,
                };
                let c = conf::parse(&header_pairs(&w.headers), &mut conf::Extra::default())
                    .unwrap_or_default();
                let m = tx.message(
                    &w.url,
                    &c,
                    wake_body(&waiter, Some(&event.0)),
                    Origin::Notify,
                    None,
                    None,
                    None,
                    None,
                );
                tx.emit(Event::NotificationRemove {
                    run_id: run,
                    event_id: w.event_id,
                });
                tx.emit(Event::Put(Box::new(m)));
                return ok(json!({}));
            }
            let id = tx.random_id("wtr_", 20);
            let deadline_s = tx.now_ms.saturating_add(w.timeout_ms).div_ceil(1000);
            tx.emit(Event::Wait(Box::new(Waiter {
                id,
                event_id: w.event_id,
                url: w.url,
                headers: w.headers,
                deadline_s,
                timeout_url: w.timeout_url,
                timeout_body: w.timeout_body.map(Bin),
                timeout_headers: w.timeout_headers,
                step: w.step.to_string(),
                created_ms: tx.now_ms,
            })));
            ok(json!({}))
        }
        Op::Notify {
            event_id,
            body,
            run_id,
        } => notify(tx, &event_id, &body, run_id.as_deref()),
        Op::WorkflowLogs(f) => workflow_logs(tx.d, &f),
        Op::FlowList(search) => {
            let mut keys: Vec<&String> =
                tx.d.flows
                    .keys
                    .keys()
                    .filter(|k| search.as_ref().is_none_or(|s| k.contains(s.as_str())))
                    .collect();
            keys.sort();
            ok(Value::Array(
                keys.into_iter()
                    .map(|k| flow_info(k, &tx.d.flows.keys[k]))
                    .collect(),
            ))
        }
        Op::FlowGet(key) => match tx.d.flows.keys.get(&key) {
            Some(f) => ok(flow_info(&key, f)),
            None => not_found(&format!("flow control key {key} not found")),
        },
        Op::GlobalParallelism => ok(json!({
            "parallelismMax": crate::config::DELIVERY_IN_FLIGHT_MAX,
            "parallelismCount": tx.d.in_flight,
        })),
        Op::FlowAction { key, action } => {
            let f = tx.d.flows.get_mut(&key);
            let mut s = f.settings.clone();
            match action {
                FlowAction::Pause => s.paused = true,
                FlowAction::Resume => s.paused = false,
                FlowAction::Pin {
                    parallelism,
                    rate,
                    period_s,
                } => {
                    if parallelism.is_some() {
                        s.pin_parallelism = parallelism;
                    }
                    if rate.is_some() {
                        s.pin_rate = rate;
                    }
                    if period_s.is_some() {
                        s.pin_period_s = period_s;
                    }
                    // Pinning starts a new rate window.
                    f.window_count = 0;
                }
                FlowAction::Unpin { parallelism, rate } => {
                    if parallelism {
                        s.pin_parallelism = None;
                    }
                    if rate {
                        s.pin_rate = None;
                        s.pin_period_s = None;
                    }
                }
                FlowAction::ResetRate => f.window_count = 0,
                FlowAction::Reset => {
                    s = Default::default();
                    f.window_count = 0;
                }
            }
            if s != tx.d.flows.get_mut(&key).settings {
                tx.emit(Event::FlowControl {
                    key: key.clone(),
                    paused: s.paused,
                    pin_parallelism: s.pin_parallelism,
                    pin_rate: s.pin_rate,
                    pin_period_s: s.pin_period_s,
                });
            } else {
                tx.d.unpark(&key);
            }
            ok(json!({}))
        }
        Op::RunGet(id) => match tx.d.runs.get(&id) {
            Some(r) if r.ended.is_none() => {
                let steps: Vec<Value> = r
                    .steps
                    .iter()
                    .map(|s| {
                        json!({
                            "messageId": s.message_id,
                            "body": STANDARD.encode(&s.body.0),
                            "callType": s.call_type,
                        })
                    })
                    .collect();
                ok(Value::Array(steps))
            }
            _ => not_found(&format!("workflow run {id} not found or ended")),
        },
        Op::RunDelete { id, cancel, body } => match tx.d.runs.get(&id) {
            Some(r) if r.ended.is_none() => {
                end_run(tx, &id, cancel, (!body.is_empty()).then_some(body));
                ok(json!({}))
            }
            _ => not_found(&format!("workflow run {id} not found or ended")),
        },
        Op::RunsCancel(f) => {
            let ids: Vec<String> =
                tx.d.runs
                    .values()
                    .filter(|r| r.ended.is_none())
                    .filter(|r| f.ids.is_empty() || f.ids.contains(&r.id))
                    .filter(|r| {
                        values(&f, "workflowUrl").is_none_or(|vs| {
                            let exact = values(&f, "workflowUrlExactMatch")
                                .is_some_and(|v| v.iter().any(|x| x == "true"));
                            vs.iter().any(|v| {
                                if exact {
                                    r.url == *v
                                } else {
                                    r.url.starts_with(v.as_str())
                                }
                            })
                        })
                    })
                    .map(|r| r.id.clone())
                    .collect();
            for id in &ids {
                end_run(tx, id, true, None);
            }
            ok(json!({ "cancelled": ids.len() }))
        }
        Op::Waiters(event_id) => ok(Value::Array(
            tx.d.waiters
                .values()
                .filter(|w| w.event_id == event_id)
                .map(json::waiter)
                .collect(),
        )),
        Op::Logs(f) => logs(tx.d, &f),
    }
}

fn override_conf(c: &mut Conf, o: &Conf) {
    take_run_settings(c, o, false);
    if o.timeout_ms.is_some() {
        c.timeout_ms = o.timeout_ms;
    }
    if o.delay_ms.is_some() {
        c.delay_ms = o.delay_ms;
    }
    if o.not_before_ms.is_some() {
        c.not_before_ms = o.not_before_ms;
    }
    if o.callback.is_some() {
        c.callback = o.callback.clone();
    }
    for (k, v) in &o.forward {
        c.forward.retain(|(x, _)| x != k);
        c.forward.push((k.clone(), v.clone()));
    }
}

/// Copies the settings `from` gives (retries, retry delay, failure callback, flow control,
/// labels) into `to`; with `keep_own`, only those `to` does not give itself. A DLQ retry's
/// headers override (`keep_own` false); a workflow step keeps its own and takes the rest from
/// its run's trigger (true).
fn take_run_settings(to: &mut Conf, from: &Conf, keep_own: bool) {
    // Whether to take a setting, from whether `from` and `to` give it.
    let take = |given: bool, own: bool| given && !(keep_own && own);
    if take(from.retries.is_some(), to.retries.is_some()) {
        to.retries = from.retries;
    }
    if take(from.retry_delay.is_some(), to.retry_delay.is_some()) {
        to.retry_delay = from.retry_delay.clone();
    }
    if take(
        from.failure_callback.is_some(),
        to.failure_callback.is_some(),
    ) {
        to.failure_callback = from.failure_callback.clone();
    }
    if take(from.flow_key.is_some(), to.flow_key.is_some()) {
        to.flow_key = from.flow_key.clone();
        to.parallelism = from.parallelism;
        to.rate = from.rate;
        to.period_s = from.period_s;
    }
    if take(!from.labels.is_empty(), !to.labels.is_empty()) {
        to.labels = from.labels.clone();
    }
}

/// A DLQ entry of a workflow run's own step (not of a callback).
fn is_run_entry(e: &DlqEntry) -> bool {
    e.message.conf.run_id().is_some()
        && !matches!(e.message.origin, Origin::Callback | Origin::FailureCallback)
}

/// The workflow URL of a run's DLQ entry.
fn run_url<'d>(d: &'d Delivery, m: &'d Message) -> &'d str {
    m.conf
        .run_id()
        .and_then(|r| d.runs.get(r))
        .map(|r| r.url.as_str())
        .or_else(|| m.conf.workflow_value("Upstash-Workflow-Url"))
        .unwrap_or(&m.url)
}

/// A DLQ entry as the API shows it; a workflow run's step also gets the fields the workflow
/// SDK lists (`workflowRunId`, `workflowCreatedAt`, `workflowUrl`, the failure function's
/// progress).
fn dlq_json(d: &Delivery, e: &DlqEntry) -> Value {
    let mut v = json::dlq(e);
    let (Some(run_id), Value::Object(m)) = (e.message.conf.run_id(), &mut v) else {
        return v;
    };
    if !is_run_entry(e) {
        return v;
    }
    m.insert("workflowRunId".into(), json!(run_id));
    let created = d.runs.get(run_id).map(|r| r.created_ms);
    m.insert(
        "workflowCreatedAt".into(),
        json!(created.unwrap_or(e.message.created_ms)),
    );
    m.insert("workflowUrl".into(), json!(run_url(d, &e.message)));
    if let Some(l) = e.message.conf.labels.first() {
        m.insert("label".into(), json!(l));
    }
    if let Some(fc) = &e.message.conf.failure_callback {
        m.insert("failureCallback".into(), json!(fc.url));
        if let Some(call) = d.failure_calls.get(&*e.message.id) {
            let mut info = Map::new();
            info.insert("state".into(), json!(call.state));
            if let Some(r) = &call.response {
                info.insert("responseStatus".into(), json!(r.status));
                info.insert(
                    "responseBody".into(),
                    json!(String::from_utf8_lossy(&r.body.0).into_owned()),
                );
                info.insert("responseHeaders".into(), json::header_map(&r.headers));
            }
            m.insert("failureCallbackInfo".into(), Value::Object(info));
        }
    }
    v
}

/// Whether a DLQ entry passes the workflow DLQ's filters (`source=workflow`).
fn run_entry_matches(d: &Delivery, e: &DlqEntry, f: &Filter) -> bool {
    let Some(run_id) = e.message.conf.run_id().filter(|_| is_run_entry(e)) else {
        return false;
    };
    let created = d.runs.get(run_id).map(|r| r.created_ms.to_string());
    let state = d.failure_calls.get(&*e.message.id).map(|c| c.state);
    any_eq(f, "workflowRunId", Some(run_id))
        && any_eq(f, "workflowUrl", Some(run_url(d, &e.message)))
        && any_eq(f, "workflowCreatedAt", created.as_deref())
        && any_eq(f, "failureFunctionState", state)
}

/// Points a configuration at run `id`; `always` adds the header where there was none.
fn set_run_id(c: &mut Conf, id: &str, always: bool) {
    let had = c.run_id().is_some();
    c.workflow
        .retain(|(k, _)| !k.eq_ignore_ascii_case("Upstash-Workflow-Runid"));
    if had || always {
        c.workflow
            .push((canonical("upstash-workflow-runid"), id.to_string()));
    }
}

/// A failed run's new start, worked out before anything is written.
struct RecoveryPlan {
    run_id: String,
    run_url: String,
    steps: Vec<RunStep>,
    url: String,
    method: HttpMethod,
    conf: Conf,
    body: Vec<u8>,
    caller_ip: Option<String>,
}

/// Resume: the failed message again, in a run holding the steps before it. Restart: the run's
/// initial payload to the workflow URL, in a run with no steps. The new run keeps the old id
/// unless `Upstash-Workflow-RunId` names another.
fn recovery_plan(
    d: &Delivery,
    e: &DlqEntry,
    how: Recovery,
    overrides: &Conf,
) -> Result<RecoveryPlan, OpReply> {
    let old = &e.message;
    let old_id = old.conf.run_id().unwrap_or_default();
    let run = d
        .runs
        .get(old_id)
        .filter(|r| !r.steps.is_empty())
        .ok_or_else(|| {
            bad(format!(
                "workflow run {old_id} has no history left to start again from"
            ))
        })?;
    let new_id = overrides.run_id().unwrap_or(old_id).to_string();
    if new_id != old_id && d.runs.contains_key(&new_id) {
        return Err(bad(format!("workflow run {new_id} already exists")));
    }
    let (url, method, mut conf, body, steps) = match how {
        Recovery::Resume => (
            old.url.clone(),
            old.method,
            old.conf.clone(),
            old.body.0.clone(),
            run.steps
                .iter()
                .take_while(|s| *s.message_id != *old.id)
                .cloned()
                .collect(),
        ),
        Recovery::Restart => {
            // A failed `context.call` went to another URL; what goes back to the workflow is
            // configured by its callback.
            let mut conf = match (&old.conf.callback, old.conf.call_type()) {
                (Some(cb), t) if t != "step" => {
                    let mut c = cb.conf.clone();
                    c.workflow = old.conf.workflow.clone();
                    c
                }
                _ => old.conf.clone(),
            };
            conf.workflow
                .retain(|(k, _)| !k.eq_ignore_ascii_case("Upstash-Workflow-Calltype"));
            let first = run.steps[0].body.0.clone();
            (run.url.clone(), HttpMethod::POST, conf, first, Vec::new())
        }
    };
    conf.delay_ms = None;
    conf.not_before_ms = None;
    override_conf(&mut conf, overrides);
    // The run id, and the one the callbacks report to (`context.call`, the failure function).
    let hooks = [
        conf.callback.as_deref_mut(),
        conf.failure_callback.as_deref_mut(),
    ];
    for c in hooks.into_iter().flatten().map(|h| &mut h.conf) {
        set_run_id(c, &new_id, false);
    }
    set_run_id(&mut conf, &new_id, true);
    Ok(RecoveryPlan {
        run_id: new_id,
        run_url: run.url.clone(),
        steps,
        url,
        method,
        conf,
        body,
        caller_ip: old.caller_ip.as_deref().map(str::to_string),
    })
}

fn values<'f>(f: &'f Filter, name: &str) -> Option<&'f [String]> {
    f.params
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

fn any_eq(f: &Filter, name: &str, have: Option<&str>) -> bool {
    match values(f, name) {
        None => true,
        Some(vs) => have.is_some_and(|h| vs.iter().any(|v| v == h)),
    }
}

fn message_matches(m: &Message, time_ms: u64, f: &Filter) -> bool {
    let (host, path) = split_url(&m.url);
    let time_ok = values(f, "fromDate")
        .and_then(|v| v.first())
        .and_then(|v| v.parse::<u64>().ok())
        .is_none_or(|from| time_ms >= from)
        && values(f, "toDate")
            .and_then(|v| v.first())
            .and_then(|v| v.parse::<u64>().ok())
            .is_none_or(|to| time_ms <= to);
    time_ok
        && any_eq(f, "messageId", Some(&m.id))
        && any_eq(f, "url", Some(&m.url))
        && any_eq(f, "host", Some(host))
        && any_eq(f, "path", Some(path))
        && any_eq(f, "topicName", m.topic.as_deref())
        && any_eq(f, "queueName", m.queue.as_deref())
        && any_eq(f, "scheduleId", m.schedule_id.as_deref())
        && any_eq(f, "callerIp", m.caller_ip.as_deref())
        && any_eq(f, "flowControlKey", m.conf.flow_key.as_deref())
        && values(f, "label").is_none_or(|vs| m.conf.labels.iter().any(|l| vs.contains(l)))
}

fn split_url(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map(|x| x.1).unwrap_or(url);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    }
}

/// One page of DLQ ids in order, after the cursor; and the cursor of the next page.
fn dlq_page(d: &Delivery, f: &Filter) -> (Vec<String>, Option<String>) {
    let count = f.count.unwrap_or(100).clamp(1, 100);
    if !f.ids.is_empty() {
        return (
            f.ids
                .iter()
                .filter(|i| d.dlq.contains_key(*i))
                .cloned()
                .collect(),
            None,
        );
    }
    let workflow = values(f, "source").is_some_and(|v| v.iter().any(|s| s == "workflow"));
    let start = f.cursor.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut more = false;
    for (id, e) in d
        .dlq
        .range::<String, _>((std::ops::Bound::Excluded(start), std::ops::Bound::Unbounded))
    {
        let status = e.response.status.to_string();
        if !message_matches(&e.message, e.failed_ms, f)
            || !any_eq(f, "responseStatus", Some(&status))
            || !any_eq(f, "dlqIds", Some(id))
            || (workflow && !run_entry_matches(d, e, f))
        {
            continue;
        }
        if out.len() == count {
            more = true;
            break;
        }
        out.push(id.clone());
    }
    let cursor = if more { out.last().cloned() } else { None };
    (out, cursor)
}

fn logs(d: &Delivery, f: &Filter) -> OpReply {
    let count = f.count.unwrap_or(100).clamp(1, 1000);
    // Newest first; the cursor is how many matching entries were already returned.
    let skip: usize = f
        .cursor
        .as_deref()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut events = Vec::new();
    let mut seen = 0usize;
    let mut more = false;
    for l in d.logs.iter().rev() {
        let time_ok = values(f, "fromDate")
            .and_then(|v| v.first())
            .and_then(|v| v.parse::<u64>().ok())
            .is_none_or(|from| l.time_ms >= from)
            && values(f, "toDate")
                .and_then(|v| v.first())
                .and_then(|v| v.parse::<u64>().ok())
                .is_none_or(|to| l.time_ms <= to);
        let ids_ok = f.ids.is_empty() || f.ids.iter().any(|i| **i == *l.message_id);
        if !(time_ok
            && ids_ok
            && any_eq(f, "messageId", Some(&l.message_id))
            && any_eq(f, "state", Some(l.state))
            && any_eq(f, "url", Some(&l.url))
            && any_eq(f, "topicName", l.topic.as_deref())
            && any_eq(f, "scheduleId", l.schedule_id.as_deref())
            && any_eq(f, "queueName", l.queue.as_deref())
            && values(f, "label").is_none_or(|vs| l.labels.iter().any(|x| vs.contains(x))))
        {
            continue;
        }
        seen += 1;
        if seen <= skip {
            continue;
        }
        if events.len() == count {
            more = true;
            break;
        }
        events.push(json::log(l));
    }
    let mut m = Map::new();
    if more {
        m.insert("cursor".into(), json!((skip + count).to_string()));
    }
    m.insert("events".into(), Value::Array(events));
    ok(Value::Object(m))
}

/// The step JSON a waiter receives on notify (`timeout` false, `out` = base64 of the event)
/// or on its deadline (`waitTimeout` true, no `out`).
fn wake_body(w: &Waiter, event: Option<&[u8]>) -> Vec<u8> {
    let mut step: Map<String, Value> = serde_json::from_str(&w.step)
        .ok()
        .and_then(|v: Value| v.as_object().cloned())
        .unwrap_or_default();
    step.insert("waitEventId".into(), json!(w.event_id));
    match event {
        Some(e) => {
            step.insert("out".into(), json!(STANDARD.encode(e)));
            step.insert("waitTimeout".into(), json!(false));
        }
        None => {
            step.remove("out");
            step.insert("waitTimeout".into(), json!(true));
        }
    }
    Value::Object(step).to_string().into_bytes()
}

fn header_pairs(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(k, v)| {
            let k = k.to_ascii_lowercase();
            match k.strip_prefix("upstash-") {
                Some(rest) => Some((rest.to_string(), v.clone())),
                None if k == "content-type" => Some(("forward-content-type".into(), v.clone())),
                None => None,
            }
        })
        .collect()
}

fn run_id(headers: &[(String, String)]) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("upstash-workflow-runid"))
        .map(|(_, v)| v.clone())
}

/// `GET /v2/workflows/events` (and `/logs`): runs newest first, each with its steps.
fn workflow_logs(d: &Delivery, f: &Filter) -> OpReply {
    let count = f.count.unwrap_or(10).clamp(1, 1000);
    let skip: usize = f
        .cursor
        .as_deref()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut runs: Vec<&Run> = d
        .runs
        .values()
        .filter(|r| any_eq(f, "workflowRunId", Some(&r.id)))
        .filter(|r| any_eq(f, "workflowUrl", Some(&r.url)))
        .filter(|r| any_eq(f, "state", Some(run_state(r))))
        .filter(|r| {
            values(f, "workflowCreatedAt")
                .and_then(|v| v.first())
                .and_then(|v| v.parse::<u64>().ok())
                .is_none_or(|t| r.created_ms == t)
        })
        .collect();
    runs.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
    let more = runs.len() > skip + count;
    let page: Vec<Value> = runs
        .into_iter()
        .skip(skip)
        .take(count)
        .map(|r| run_log(d, r))
        .collect();
    let mut m = Map::new();
    if more {
        m.insert("cursor".into(), json!((skip + count).to_string()));
    }
    m.insert("runs".into(), Value::Array(page));
    ok(Value::Object(m))
}

fn run_state(r: &Run) -> &str {
    match (&r.ended, &r.failed_dlq_id) {
        (Some(state), _) => state,
        (None, Some(_)) => "RUN_FAILED",
        (None, None) => "RUN_STARTED",
    }
}

/// One run as the workflow SDK's `WorkflowRunLog`: the initial payload and each step message,
/// with the step's own fields (stepId, stepName, stepType, out, ...) when its body is a step.
fn run_log(d: &Delivery, r: &Run) -> Value {
    let mut groups = Vec::new();
    let mut next = Vec::new();
    let failed = r.failed_dlq_id.as_ref().and_then(|id| d.dlq.get(id));
    for (i, s) in r.steps.iter().enumerate() {
        let pending = d.msgs.contains_key(s.message_id.as_str());
        let mut step = Map::new();
        if i == 0 {
            step.insert("stepId".into(), json!(0));
            step.insert("stepName".into(), json!("init"));
            step.insert("stepType".into(), json!("Initial"));
            step.insert(
                "out".into(),
                json!(String::from_utf8_lossy(&s.body.0).into_owned()),
            );
        } else if let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&s.body.0) {
            for k in [
                "stepId",
                "stepName",
                "stepType",
                "out",
                "concurrent",
                "targetStep",
            ] {
                if let Some(v) = body.get(k) {
                    step.insert(k.into(), v.clone());
                }
            }
        }
        step.insert("callType".into(), json!(s.call_type));
        step.insert("messageId".into(), json!(s.message_id));
        if failed.is_some_and(|e| *e.message.id == *s.message_id) {
            step.insert("state".into(), json!("STEP_FAILED"));
            groups.push(json!({"type": "sequential", "steps": [Value::Object(step)]}));
        } else if pending && r.ended.is_none() {
            step.insert("state".into(), json!("STEP_PROGRESS"));
            next.push(Value::Object(step));
        } else {
            step.insert("state".into(), json!("STEP_SUCCESS"));
            groups.push(json!({"type": "sequential", "steps": [Value::Object(step)]}));
        }
    }
    if !next.is_empty() {
        groups.push(json!({"type": "next", "steps": next}));
    }
    let mut m = Map::new();
    m.insert("workflowRunId".into(), json!(r.id));
    m.insert("workflowUrl".into(), json!(r.url));
    m.insert("workflowState".into(), json!(run_state(r)));
    m.insert("workflowRunCreatedAt".into(), json!(r.created_ms));
    if let Some(t) = r.completed_ms {
        m.insert("workflowRunCompletedAt".into(), json!(t));
    }
    if let Some(id) = &r.failed_dlq_id {
        m.insert("dlqId".into(), json!(id));
    }
    if let Some(resp) = &r.response {
        m.insert(
            "workflowRunResponse".into(),
            json!(String::from_utf8_lossy(resp).into_owned()),
        );
    }
    m.insert("steps".into(), Value::Array(groups));
    Value::Object(m)
}

fn flow_info(key: &str, f: &super::flow::Flow) -> Value {
    json!({
        "flowControlKey": key,
        "waitListSize": f.waiting.len(),
        "parallelismMax": f.parallelism_max().unwrap_or(0),
        "parallelismCount": f.in_flight,
        "rateMax": f.rate_max().unwrap_or(0),
        "rateCount": f.window_count,
        "ratePeriod": f.period_s(),
        "ratePeriodStart": f.window_start_ms / 1000,
        "isPaused": f.settings.paused,
        "isPinnedParallelism": f.settings.pin_parallelism.is_some(),
        "isPinnedRate": f.settings.pin_rate.is_some(),
    })
}

/// Ends a run: cancelled runs lose their pending messages and waiters.
fn end_run(tx: &mut Tx, id: &str, cancel: bool, response: Option<Vec<u8>>) {
    if cancel {
        let mut msgs: Vec<(u64, String)> =
            tx.d.msgs
                .values()
                .filter(|p| p.msg.conf.run_id() == Some(id))
                .map(|p| (p.order, p.msg.id.to_string()))
                .collect();
        msgs.sort();
        if !msgs.is_empty() {
            tx.emit(Event::Cancel {
                ids: msgs.into_iter().map(|(_, i)| i).collect(),
            });
        }
        let waiters: Vec<String> =
            tx.d.waiters
                .values()
                .filter(|w| run_id(&w.headers).as_deref() == Some(id))
                .map(|w| w.id.clone())
                .collect();
        if !waiters.is_empty() {
            tx.emit(Event::WaitersRemove { ids: waiters });
        }
    }
    tx.emit(Event::RunEnd {
        id: id.to_string(),
        state: if cancel {
            "RUN_CANCELED"
        } else {
            "RUN_SUCCESS"
        }
        .into(),
        response: response.map(Bin),
    });
}

fn notify(tx: &mut Tx, event_id: &str, body: &[u8], only_run: Option<&str>) -> OpReply {
    let waiters: Vec<Waiter> =
        tx.d.waiters
            .values()
            .filter(|w| w.event_id == event_id)
            .filter(|w| only_run.is_none() || run_id(&w.headers).as_deref() == only_run)
            .cloned()
            .collect();
    if let (Some(run), true) = (only_run, waiters.is_empty()) {
        // Lookback: nobody in the run waits yet; the run's next wait for this event gets it.
        tx.emit(Event::Notification {
            run_id: run.to_string(),
            event_id: event_id.to_string(),
            body: Bin(body.to_vec()),
        });
        return ok(json!([]));
    }
    let mut out = Vec::new();
    let mut ids = Vec::new();
    for w in waiters {
        let c =
            conf::parse(&header_pairs(&w.headers), &mut conf::Extra::default()).unwrap_or_default();
        let m = tx.message(
            &w.url,
            &c,
            wake_body(&w, Some(body)),
            Origin::Notify,
            None,
            None,
            None,
            None,
        );
        let mut item = Map::new();
        item.insert("waiter".into(), json::waiter(&w));
        item.insert("messageId".into(), json!(m.id));
        if let Some(r) = run_id(&w.headers) {
            item.insert("workflowRunId".into(), json!(r));
        }
        item.insert("workflowCreatedAt".into(), json!(w.created_ms));
        out.push(Value::Object(item));
        ids.push(w.id.clone());
        tx.emit(Event::Put(Box::new(m)));
    }
    if !ids.is_empty() {
        tx.emit(Event::WaitersRemove { ids });
    }
    ok(Value::Array(out))
}

/// Waiters whose deadline passed: their timeout message, and their removal.
pub fn expire_waiters(tx: &mut Tx) {
    let ids = tx.d.expired_waiters(tx.now_ms);
    if ids.is_empty() {
        return;
    }
    for id in &ids {
        let Some(w) = tx.d.waiters.get(id).cloned() else {
            continue;
        };
        let Some(url) = w.timeout_url.clone() else {
            continue;
        };
        let c = conf::parse(
            &header_pairs(&w.timeout_headers),
            &mut conf::Extra::default(),
        )
        .unwrap_or_default();
        let body = match &w.timeout_body {
            Some(b) => b.0.clone(),
            None => wake_body(&w, None),
        };
        let m = tx.message(&url, &c, body, Origin::WaitTimeout, None, None, None, None);
        tx.emit(Event::Put(Box::new(m)));
    }
    tx.emit(Event::WaitersRemove { ids });
}

/// Schedules whose time has come: each moves on to its next time and, unless paused, publishes
/// its message. A server that was down does not catch up missed firings: the next time is
/// computed from now.
pub fn fire_schedules(tx: &mut Tx) {
    for id in tx.d.due_schedules(tx.now_ms) {
        let Some(s) = tx.d.schedules.get(&id).cloned() else {
            continue;
        };
        let next = CronSpec::parse(&s.cron)
            .ok()
            .and_then(|c| c.next_after(tx.now_ms.max(s.next_ms)))
            .unwrap_or(u64::MAX);
        let mut message_id = None;
        if !s.paused {
            let req = PublishReq {
                dest: s.destination.clone(),
                queue: s.queue.clone(),
                conf: s.conf.clone(),
                body: s.body.as_ref().map(|b| b.0.clone()).unwrap_or_default(),
                caller_ip: s.caller_ip.clone(),
            };
            // A group that no longer exists makes the firing publish nothing.
            if let Ok(v) = tx.publish_one(&req, Origin::Schedule, Some(s.id.clone())) {
                message_id = match &v {
                    Value::Array(a) => a.first().and_then(|x| x.get("messageId")),
                    other => other.get("messageId"),
                }
                .and_then(|x| x.as_str())
                .map(str::to_string);
            }
        }
        tx.emit(Event::ScheduleFired {
            id,
            at_ms: s.next_ms,
            next_ms: next,
            message_id,
        });
    }
}

/// Callback body (section 7 of the reference): after every attempt to `Upstash-Callback`, and
/// with `dlqId` once retries are exhausted to `Upstash-Failure-Callback`.
fn callback_body(
    m: &Message,
    retried: u32,
    r: &Response,
    dlq_id: Option<&str>,
    run: Option<&Run>,
) -> Vec<u8> {
    let mut b = Map::new();
    b.insert("status".into(), json!(r.status));
    b.insert("header".into(), json::header_map(&r.headers));
    // Already cut to the maximum message size by the worker.
    let body = &r.body.0;
    b.insert("body".into(), json!(STANDARD.encode(body)));
    b.insert("retried".into(), json!(retried));
    b.insert("maxRetries".into(), json!(m.max_retries));
    b.insert("sourceMessageId".into(), json!(m.id));
    if let Some(t) = &m.topic {
        b.insert("topicName".into(), json!(t));
    }
    if let Some(e) = &m.endpoint {
        b.insert("endpointName".into(), json!(e));
    }
    b.insert("url".into(), json!(m.url));
    b.insert("method".into(), json!(m.method.as_str()));
    b.insert("sourceHeader".into(), json::header_map(&m.conf.forward));
    b.insert("sourceBody".into(), json!(STANDARD.encode(&m.body.0)));
    b.insert("notBefore".into(), json!(m.not_before_ms.to_string()));
    b.insert("createdAt".into(), json!(m.created_ms.to_string()));
    if let Some(s) = &m.schedule_id {
        b.insert("scheduleId".into(), json!(s));
    }
    if let Some(ip) = &m.caller_ip {
        b.insert("callerIP".into(), json!(ip));
    }
    if let Some(d) = dlq_id {
        b.insert("dlqId".into(), json!(d));
    }
    if let Some(run) = run {
        b.insert("workflowRunId".into(), json!(run.id));
        b.insert("workflowCreatedAt".into(), json!(run.created_ms));
        // The workflow SDK reads the run's initial payload here.
        if let Some(first) = run.steps.first() {
            b.insert("sourceBody".into(), json!(STANDARD.encode(&first.body.0)));
        }
    }
    Value::Object(b).to_string().into_bytes()
}

/// A callback or failure callback reporting on `source`: JSON, retried like its source unless
/// the hook says otherwise.
fn callback_message(
    tx: &mut Tx,
    hook: &Hook,
    body: Vec<u8>,
    origin: Origin,
    source: &Message,
) -> Message {
    let mut c = hook.conf.clone();
    if c.retries.is_none() {
        c.retries = Some(source.max_retries);
    }
    if !c.forward.iter().any(|(k, _)| k == "Content-Type") {
        c.forward
            .push((canonical("content-type"), "application/json".into()));
    }
    let mut cm = tx.message(&hook.url, &c, body, origin, None, None, None, None);
    cm.source_id = Some(source.id.as_ref().into());
    cm
}

/// Turns a worker's report into events: the outcome, and the callback messages it causes.
/// `backoff_unit_ms` is the length of a "second" in the default backoff (tests shrink it).
pub fn attempt_done(tx: &mut Tx, r: AttemptResult, backoff_unit_ms: u64) {
    let Some(p) = tx.d.msgs.get(r.id.as_str()) else {
        // Cancelled while in flight: nothing to record.
        return;
    };
    if p.retried != r.retried {
        return;
    }
    let m = p.msg.clone();
    let status = r.response.status;
    let success = (200..300).contains(&status);
    let non_retryable = status == 489
        && r.response.headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("upstash-nonretryable-error") && v.trim() == "true"
        });
    let outcome = if success {
        Outcome::Delivered
    } else if non_retryable || r.retried >= m.max_retries {
        Outcome::Dead {
            dlq_id: tx.dlq_id(),
        }
    } else {
        let asked = retry::asked_delay_ms(&r.response.headers, tx.now_ms);
        let delay = asked
            .or_else(|| {
                m.conf
                    .retry_delay
                    .as_deref()
                    .and_then(|e| retry::expression_delay_ms(e, r.retried))
            })
            .unwrap_or_else(|| retry::default_backoff_ms(r.retried + 1, backoff_unit_ms));
        Outcome::Retry {
            next_ms: tx.now_ms.saturating_add(delay),
        }
    };
    let dlq_id = match &outcome {
        Outcome::Dead { dlq_id } => Some(dlq_id.clone()),
        _ => None,
    };
    // On exhaustion `retried` equals maxRetries, which is how receivers recognise the end.
    let reported_retried = if dlq_id.is_some() {
        m.max_retries.max(r.retried)
    } else {
        r.retried
    };
    let mut spawned = Vec::new();
    let run = m.conf.run_id().and_then(|id| tx.d.runs.get(id));
    if let Some(cb) = &m.conf.callback {
        let body = callback_body(&m, reported_retried, &r.response, None, run);
        spawned.push((cb.clone(), body, Origin::Callback));
    }
    if let (Some(fcb), Some(d)) = (&m.conf.failure_callback, &dlq_id) {
        let body = callback_body(&m, reported_retried, &r.response, Some(d), run);
        spawned.push((fcb.clone(), body, Origin::FailureCallback));
    }
    // The callbacks of a queued message's last attempt hold its queue slot until they are done;
    // their Puts come before the Attempt so that the slot never looks free in between.
    let last_attempt = !matches!(outcome, Outcome::Retry { .. });
    let attempt = Event::Attempt {
        id: r.id,
        retried: r.retried,
        started_ms: r.started_ms,
        response: r.response,
        outcome,
    };
    for (hook, body, origin) in spawned {
        let mut cm = callback_message(tx, &hook, body, origin, &m);
        if last_attempt {
            cm.holds_queue = m.queue.clone();
        }
        tx.emit(Event::Put(Box::new(cm)));
    }
    tx.emit(attempt);
}
