//! The message-delivery service (the QStash v2 dialect) on the same log and executor as the
//! key-value store.
//!
//! - `model`: messages, DLQ entries, groups, queues, schedules, waiters, and the `Event`s that
//!   change them (the payload of a `delivery` log record).
//! - `Delivery` (here): the pure state. `apply(ts, event)` is the only way it changes; time comes
//!   with the record. What is due is a question the executor asks it.
//! - `ops`: API requests, turned into events plus a JSON answer, against the state.
//! - `conf`, `retry`, `sign`, `cron`: configuration headers, backoff, signing keys and JWT,
//!   schedules.
//! - `worker`: outbound HTTP outside the executor, through `client` (hyper's HTTP/1.1
//!   connections for `http://`, reqwest for `https://` and proxies); results come back on the
//!   pool's own channel and become `Attempt` events.
//!
//! The `/v2/...` routes and request parsing are the HTTP side's (`http::qstash`).
//!
//! Which messages are in flight is the one piece of state that is not logged: after a restart
//! every pending message is due again at its logged time, so an attempt that was running during
//! a crash is simply made again (at-least-once, as the hosted service promises).

pub mod client;
pub mod conf;
pub mod cron;
pub mod flow;
pub mod image;
pub mod json;
pub mod model;
pub mod named;
pub mod ops;
pub mod packed;
pub mod retry;
pub mod sign;
#[cfg(test)]
mod testgen;
pub mod worker;

use crate::config::{DELIVERY_DEDUP_WINDOW_MS, DELIVERY_LOG_ENTRIES_MAX};
use crate::msgpack::Bin;
use crate::state::table::{Element, SortedTable};
use model::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// A message in the pending set. The message itself is kept encoded (`packed`: its fields in
/// order, about 55 bytes for a small one where the struct and its strings took about 700),
/// because a million messages may wait: the scheduler reads only the fields kept beside it,
/// and the message is decoded when it is sent, shown, or finished.
#[derive(Debug)]
pub struct Pending {
    /// The message's id, shared with the pending map's key and the due index.
    pub id: Arc<str>,
    packed: Box<[u8]>,
    /// Retries already made (`Upstash-Retried` of the next attempt).
    pub retried: u32,
    pub due_ms: u64,
    /// Arrival order, the tie-break among messages due at the same time (queue order).
    pub order: u64,
    pub in_flight: bool,
    /// For a queued message: let out of the queue's wait list.
    pub released: bool,
    /// Counted in its flow-control key's in-flight number (scheduler state, not logged).
    pub flow_started: bool,
    /// Sequence number of the record that put it: an attempt waits for that record to be
    /// durable, and for nothing later.
    pub seq: u64,
}

impl Pending {
    /// `m`, waiting from its first due time.
    fn new(id: Arc<str>, m: &Message, order: u64, released: bool, seq: u64) -> Pending {
        Pending {
            id,
            packed: pack(m),
            retried: 0,
            due_ms: m.not_before_ms,
            order,
            in_flight: false,
            released,
            flow_started: false,
            seq,
        }
    }

    /// The message (decoded). None only if its encoding does not read back, which `pack`'s
    /// round trip rules out (a test holds it); the callers then treat it as gone.
    pub fn message(&self) -> Option<Message> {
        let m = packed::unpack(self.id.clone(), &self.packed);
        if m.is_none() {
            crate::log::line(&format!("pending message {} does not decode", self.id));
        }
        m
    }
}

/// The pending messages by id: a table of one pointer and one hash a message (about 20
/// bytes with its spare room, where a map from a shared id to the entry took about 40), keyed
/// by the id each entry holds.
#[derive(Debug, Default)]
pub struct Pendings(SortedTable<Box<Pending>>);

impl Element for Box<Pending> {
    fn key(&self) -> &[u8] {
        self.id.as_bytes()
    }
}

impl Pendings {
    pub fn get(&self, id: &str) -> Option<&Pending> {
        self.0.get(id.as_bytes()).map(|p| &**p)
    }
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Pending> {
        self.0.get_mut(id.as_bytes()).map(|p| &mut **p)
    }
    pub fn contains_key(&self, id: &str) -> bool {
        self.0.get(id.as_bytes()).is_some()
    }
    /// The entry's own id (shared) for `id`.
    pub fn shared_id(&self, id: &str) -> Option<Arc<str>> {
        self.get(id).map(|p| p.id.clone())
    }
    fn insert(&mut self, p: Box<Pending>) {
        let id = p.id.clone();
        self.0.insert(id.as_bytes(), p);
    }
    fn remove(&mut self, id: &str) -> Option<Box<Pending>> {
        self.0.remove(id.as_bytes())
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn values(&self) -> impl Iterator<Item = &Pending> {
        self.0.iter().map(|p| &**p)
    }
}

/// A message as a pending entry keeps it (`packed`), without its id: the entry keeps it
/// beside.
fn pack(m: &Message) -> Box<[u8]> {
    packed::pack(m).unwrap_or_else(|| {
        crate::log::line(&format!(
            "message {} nests its callbacks too deep to keep",
            m.id
        ));
        Box::default()
    })
}

#[derive(Debug)]
pub struct Queue {
    pub conf: QueueConf,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Messages not yet let out, in arrival order.
    pub waiting: VecDeque<Arc<str>>,
    /// Messages let out and not finished (in flight or waiting for a retry).
    pub active: u32,
}

/// One line of the delivery log (`GET /v2/events`).
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub time_ms: u64,
    pub message_id: Arc<str>,
    pub state: &'static str,
    pub url: String,
    pub topic: Option<String>,
    pub endpoint: Option<String>,
    pub schedule_id: Option<String>,
    pub queue: Option<String>,
    pub error: Option<String>,
    pub next_delivery_ms: Option<u64>,
    pub response_status: Option<u16>,
    pub method: &'static str,
    pub max_retries: u32,
    pub labels: Vec<String>,
    pub caller_ip: Option<String>,
    pub flow_key: Option<String>,
}

/// The delivery state. Only `apply` changes it (plus the in-flight marks, see the module doc).
#[derive(Default)]
pub struct Delivery {
    pub msgs: Pendings,
    due: BTreeSet<(u64, u64, Arc<str>)>,
    next_order: u64,
    pub dlq: BTreeMap<String, DlqEntry>,
    pub topics: BTreeMap<String, Topic>,
    pub queues: BTreeMap<String, Queue>,
    pub schedules: BTreeMap<String, Schedule>,
    schedule_due: BTreeSet<(u64, String)>,
    pub waiters: BTreeMap<String, Waiter>,
    waiter_deadlines: BTreeSet<(u64, String)>,
    /// Deduplication key -> (message id, window end).
    dedup: HashMap<String, (String, u64)>,
    dedup_expiry: VecDeque<(u64, String)>,
    pub logs: VecDeque<LogEntry>,
    pub in_flight: usize,
    /// Workflow runs by id (ended ones stay as tombstones so late steps are refused).
    pub runs: HashMap<String, Run>,
    /// Ended runs in the order they ended (whose history is still kept).
    ended_runs: VecDeque<String>,
    /// Lookback notifications by (run, event).
    pub notifications: BTreeMap<(String, String), Bin>,
    pub flows: flow::Flows,
    /// When a flow-control key's rate window reopens, for keys with messages held back.
    flow_wake: BTreeSet<(u64, String)>,
    /// The failure callback of each message in the DLQ that has one, by the failed message's
    /// id (the workflow DLQ shows it as `failureCallbackInfo`).
    pub failure_calls: HashMap<String, FailureCall>,
    /// The bounds operations hold the state to (configuration, not logged).
    pub limits: crate::config::DeliveryLimits,
}

/// A failure callback's progress.
#[derive(Debug, Clone)]
pub struct FailureCall {
    pub message_id: Arc<str>,
    /// `CALLBACK_INPROGRESS`, `CALLBACK_SUCCESS` or `CALLBACK_FAIL`.
    pub state: &'static str,
    /// The last answer of the callback's destination.
    pub response: Option<Response>,
}

/// A message ready for a worker: its body is the one to send (a workflow step gets the run's
/// history instead of its own body).
pub struct Due {
    pub msg: Message,
    pub retried: u32,
    pub run_created_ms: Option<u64>,
    /// The record that put the message (see `Pending::seq`).
    pub seq: u64,
}

impl Delivery {
    pub fn new() -> Delivery {
        Delivery::default()
    }

    /// The message a live deduplication key points to.
    pub fn deduplicated(&self, key: &str, now_ms: u64) -> Option<&str> {
        self.dedup
            .get(key)
            .filter(|(_, until)| *until > now_ms)
            .map(|(id, _)| id.as_str())
    }

    /// Deduplication keys whose window is still open at `now_ms`.
    pub fn dedup_live(&self, now_ms: u64) -> usize {
        // Expired keys leave at the next publish; count them out only near the bound.
        if self.dedup.len() < self.limits.dedup_entries_max {
            return self.dedup.len();
        }
        self.dedup
            .values()
            .filter(|(_, until)| *until > now_ms)
            .count()
    }

    fn log(&mut self, time_ms: u64, msg: &Message, id: &Arc<str>, state: &'static str) {
        if self.logs.len() >= DELIVERY_LOG_ENTRIES_MAX {
            self.logs.pop_front();
        }
        self.logs.push_back(LogEntry {
            time_ms,
            message_id: id.clone(),
            state,
            url: msg.url.clone(),
            topic: msg.topic.as_deref().map(str::to_string),
            endpoint: msg.endpoint.as_deref().map(str::to_string),
            schedule_id: msg.schedule_id.as_deref().map(str::to_string),
            queue: msg.queue.as_deref().map(str::to_string),
            error: None,
            next_delivery_ms: None,
            response_status: None,
            method: msg.method.as_str(),
            max_retries: msg.max_retries,
            labels: msg.conf.labels.clone(),
            caller_ip: msg.caller_ip.as_deref().map(str::to_string),
            flow_key: msg.conf.flow_key.clone(),
        });
    }

    fn last_log(&mut self) -> Option<&mut LogEntry> {
        self.logs.back_mut()
    }

    /// Applies one event of record `seq`, at the record's timestamp.
    pub fn apply(&mut self, seq: u64, ts: u64, event: &Event) {
        self.apply_decoded(seq, ts, event, None)
    }

    /// `apply`, given for an `Attempt` its pending message already decoded (what
    /// `Pending::message` gives for it now), so that it is not decoded again.
    pub fn apply_decoded(&mut self, seq: u64, ts: u64, event: &Event, decoded: Option<Message>) {
        match event {
            Event::Put(m) => self.put(seq, ts, m),
            Event::Attempt {
                id,
                retried,
                started_ms,
                response,
                outcome,
            } => self.attempted(ts, id, *retried, *started_ms, response, outcome, decoded),
            Event::Cancel { ids } => {
                for id in ids {
                    if let Some(p) = self.msgs.remove(id) {
                        let key = p.id.clone();
                        let m = p.message();
                        if let Some(m) = &m {
                            self.log(ts, m, &key, "CANCEL_REQUESTED");
                            self.log(ts, m, &key, "CANCELED");
                            // A cancelled failure callback did not succeed: it shows as failed
                            // (and can be called again), not as in progress forever.
                            if let Some(call) = m
                                .source_id
                                .as_deref()
                                .filter(|_| m.origin == Origin::FailureCallback)
                                .and_then(|s| self.failure_calls.get_mut(s))
                                .filter(|c| c.message_id == key)
                            {
                                call.state = "CALLBACK_FAIL";
                            }
                        }
                        self.forget(&key, p, m.as_ref());
                    }
                }
            }
            Event::DlqRemove { ids } => {
                for id in ids {
                    if let Some(e) = self.dlq.remove(id) {
                        self.failure_calls.remove(&*e.message.id);
                    }
                }
            }
            Event::Topic(t) => {
                self.topics.insert(t.name.clone(), t.clone());
            }
            Event::TopicDelete { name } => {
                self.topics.remove(name);
            }
            Event::Queue(q) => {
                let entry = self.queues.entry(q.name.clone()).or_insert_with(|| Queue {
                    conf: q.clone(),
                    created_ms: ts,
                    updated_ms: ts,
                    waiting: VecDeque::new(),
                    active: 0,
                });
                entry.conf = q.clone();
                entry.updated_ms = ts;
                self.pump(&q.name);
            }
            Event::QueueDelete { name } => {
                // Messages already in the queue stay and are delivered as if unqueued.
                if let Some(q) = self.queues.remove(name) {
                    for id in q.waiting {
                        self.release(&id);
                    }
                }
            }
            Event::Schedule(s) => {
                if let Some(old) = self.schedules.remove(&s.id) {
                    self.schedule_due.remove(&(old.next_ms, old.id));
                }
                self.schedule_due.insert((s.next_ms, s.id.clone()));
                self.schedules.insert(s.id.clone(), (**s).clone());
            }
            Event::ScheduleDelete { id } => {
                if let Some(old) = self.schedules.remove(id) {
                    self.schedule_due.remove(&(old.next_ms, old.id));
                }
            }
            Event::SchedulePause { id, paused } => {
                if let Some(s) = self.schedules.get_mut(id) {
                    s.paused = *paused;
                }
            }
            Event::ScheduleFired {
                id,
                at_ms,
                next_ms,
                message_id,
            } => {
                if let Some(s) = self.schedules.get_mut(id) {
                    self.schedule_due.remove(&(s.next_ms, id.clone()));
                    s.last_ms = Some(*at_ms);
                    if message_id.is_some() {
                        s.last_message_id = message_id.clone();
                    }
                    s.next_ms = *next_ms;
                    self.schedule_due.insert((*next_ms, id.clone()));
                }
            }
            Event::Wait(w) => {
                self.waiter_deadlines
                    .insert((w.deadline_s.saturating_mul(1000), w.id.clone()));
                self.waiters.insert(w.id.clone(), (**w).clone());
            }
            Event::WaitersRemove { ids } => {
                for id in ids {
                    if let Some(w) = self.waiters.remove(id) {
                        self.waiter_deadlines
                            .remove(&(w.deadline_s.saturating_mul(1000), w.id));
                    }
                }
            }
            Event::RunEnd {
                id,
                state,
                response,
            } => {
                if let Some(r) = self.runs.get_mut(id) {
                    r.ended = Some(state.clone());
                    r.trigger_conf = None; // no step joins an ended run
                    r.completed_ms = Some(ts);
                    r.response = response.as_ref().map(|b| b.0.clone());
                    // The history stays for the logs of the last runs, not forever.
                    self.ended_runs.push_back(id.clone());
                    while self.ended_runs.len() > crate::config::WORKFLOW_ENDED_RUNS_KEPT_MAX {
                        if let Some(old) = self.ended_runs.pop_front() {
                            if let Some(o) = self.runs.get_mut(&old) {
                                o.steps = Vec::new();
                            }
                        }
                    }
                }
                self.notifications.retain(|(run, _), _| run != id);
            }
            Event::RunStart { id, url, steps } => {
                self.ended_runs.retain(|r| r != id);
                self.notifications.retain(|(run, _), _| run != id);
                self.runs.insert(
                    id.clone(),
                    Run {
                        id: id.clone(),
                        url: url.clone(),
                        created_ms: ts,
                        steps: steps.clone(),
                        ended: None,
                        failed_dlq_id: None,
                        trigger_conf: None,
                        completed_ms: None,
                        response: None,
                        labels: Vec::new(),
                        caller_ip: None,
                    },
                );
            }
            Event::Notification {
                run_id,
                event_id,
                body,
            } => {
                self.notifications
                    .insert((run_id.clone(), event_id.clone()), body.clone());
            }
            Event::NotificationRemove { run_id, event_id } => {
                self.notifications
                    .remove(&(run_id.clone(), event_id.clone()));
            }
            Event::FlowControl {
                key,
                paused,
                pin_parallelism,
                pin_rate,
                pin_period_s,
            } => {
                self.flows.get_mut(key).settings = flow::FlowSettings {
                    paused: *paused,
                    pin_parallelism: *pin_parallelism,
                    pin_rate: *pin_rate,
                    pin_period_s: *pin_period_s,
                };
                self.unpark(key);
            }
        }
    }

    /// Puts a flow-control key's held-back messages back in line; they are checked again
    /// against the key's limits when they are next taken.
    pub fn unpark(&mut self, key: &str) {
        let Some(f) = self.flows.keys.get_mut(key) else {
            return;
        };
        for id in std::mem::take(&mut f.waiting) {
            if let Some(p) = self.msgs.get(&id) {
                if !p.in_flight {
                    self.due.insert((p.due_ms, p.order, id.clone()));
                }
            }
        }
    }

    /// A message leaves flight: its key has a free slot again.
    fn flow_finished(&mut self, p: &mut Pending, m: Option<&Message>) {
        if !p.flow_started {
            return;
        }
        p.flow_started = false;
        if let Some(key) = m.and_then(|m| m.conf.flow_key.as_deref()) {
            self.flows.get_mut(key).finished();
            self.unpark(key);
        }
    }

    /// Adds a message of a workflow run to the run's history, creating the run on its first.
    fn run_append(&mut self, ts: u64, m: &Message) {
        let Some(run_id) = m.conf.run_id() else {
            return;
        };
        let run = self.runs.entry(run_id.to_string()).or_insert_with(|| Run {
            id: run_id.to_string(),
            url: m
                .conf
                .workflow_value("Upstash-Workflow-Url")
                .unwrap_or(&m.url)
                .to_string(),
            created_ms: ts,
            steps: Vec::new(),
            ended: None,
            failed_dlq_id: None,
            trigger_conf: None,
            completed_ms: None,
            response: None,
            labels: m.conf.labels.clone(),
            caller_ip: m.caller_ip.as_deref().map(str::to_string),
        });
        if run.ended.is_none() {
            if run.trigger_conf.is_none() {
                run.trigger_conf = Some(Box::new(m.conf.clone()));
            }
            run.steps.push(RunStep {
                message_id: m.id.to_string(),
                body: m.body.clone(),
                call_type: m.conf.call_type().to_string(),
            });
        }
    }

    /// The run's history up to and including `message_id`, as the SDK's RawStep array.
    pub fn run_history(&self, run_id: &str, message_id: &str) -> Option<Vec<u8>> {
        use base64::Engine;
        let run = self.runs.get(run_id).filter(|r| r.ended.is_none())?;
        let mut out = Vec::new();
        for s in &run.steps {
            out.push(serde_json::json!({
                "messageId": s.message_id,
                "body": base64::engine::general_purpose::STANDARD.encode(&s.body.0),
                "callType": s.call_type,
            }));
            if s.message_id == message_id {
                break;
            }
        }
        Some(serde_json::Value::Array(out).to_string().into_bytes())
    }

    fn put(&mut self, seq: u64, ts: u64, m: &Message) {
        let id: Arc<str> = m.id.clone();
        if self.msgs.contains_key(&id) {
            return;
        }
        self.prune_dedup(ts);
        if let Some(k) = &m.dedup_key {
            let until = ts.saturating_add(DELIVERY_DEDUP_WINDOW_MS);
            self.dedup.insert(k.to_string(), (m.id.to_string(), until));
            self.dedup_expiry.push_back((until, k.to_string()));
        }
        self.log(ts, m, &id, "CREATED");
        self.run_append(ts, m);
        if let (Origin::FailureCallback, Some(source)) = (m.origin, &m.source_id) {
            self.failure_calls.insert(
                source.to_string(),
                FailureCall {
                    message_id: id.clone(),
                    state: "CALLBACK_INPROGRESS",
                    response: None,
                },
            );
        }
        let order = self.next_order;
        self.next_order += 1;
        let queued = m.queue.as_deref().and_then(|q| self.queues.get_mut(q));
        let released = queued.is_none();
        if let Some(q) = queued {
            q.waiting.push_back(id.clone());
        } else {
            self.due.insert((m.not_before_ms, order, id.clone()));
        }
        self.msgs
            .insert(Box::new(Pending::new(id, m, order, released, seq)));
        if let Some(q) = m
            .holds_queue
            .as_deref()
            .and_then(|q| self.queues.get_mut(q))
        {
            q.active += 1;
        }
        if let Some(key) = &m.conf.flow_key {
            let f = self.flows.get_mut(key);
            if m.conf.parallelism.is_some() || m.conf.rate.is_some() {
                f.parallelism = m.conf.parallelism;
                f.rate = m.conf.rate;
                f.period_s = m.conf.period_s;
            }
        }
        if let Some(q) = m.queue.as_deref() {
            if !self.queues.contains_key(q) {
                // Enqueue creates the queue (parallelism 1) through its own Queue event, which
                // comes first in the record; a queue deleted since is simply not there.
                return;
            }
            let q = q.to_string();
            self.pump(&q);
        }
    }

    fn prune_dedup(&mut self, now: u64) {
        while let Some((until, _)) = self.dedup_expiry.front() {
            if *until > now {
                break;
            }
            if let Some((until, key)) = self.dedup_expiry.pop_front() {
                if self.dedup.get(&key).is_some_and(|(_, u)| *u == until) {
                    self.dedup.remove(&key);
                }
            }
        }
    }

    /// Lets waiting messages of a queue out while it has room.
    fn pump(&mut self, name: &str) {
        loop {
            let Some(q) = self.queues.get_mut(name) else {
                return;
            };
            if q.conf.paused || q.active >= q.conf.parallelism.max(1) {
                return;
            }
            let Some(id) = q.waiting.pop_front() else {
                return;
            };
            q.active += 1;
            self.release(&id);
        }
    }

    fn release(&mut self, id: &Arc<str>) {
        if let Some(p) = self.msgs.get_mut(id) {
            p.released = true;
            self.due.insert((p.due_ms, p.order, id.clone()));
        }
    }

    /// Drops a finished message's indexes and frees its queue slot.
    /// Drops a finished message's indexes and frees its queue slot (`m`: the message `p`
    /// holds, decoded).
    fn forget(&mut self, id: &Arc<str>, mut p: Box<Pending>, m: Option<&Message>) {
        self.due.remove(&(p.due_ms, p.order, id.clone()));
        self.flow_finished(&mut p, m);
        if p.in_flight {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        if let Some(qn) = m.and_then(|m| m.holds_queue.as_deref()) {
            if let Some(q) = self.queues.get_mut(qn) {
                q.active = q.active.saturating_sub(1);
            }
            let qn = qn.to_string();
            self.pump(&qn);
        }
        if let Some(qn) = m.and_then(|m| m.queue.as_deref()) {
            if let Some(q) = self.queues.get_mut(qn) {
                if p.released {
                    q.active = q.active.saturating_sub(1);
                } else {
                    q.waiting.retain(|w| w != id);
                }
            }
            let qn = qn.to_string();
            self.pump(&qn);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn attempted(
        &mut self,
        ts: u64,
        id: &str,
        retried: u32,
        started_ms: u64,
        response: &Response,
        outcome: &Outcome,
        decoded: Option<Message>,
    ) {
        let Some(mut p) = self.msgs.remove(id) else {
            return;
        };
        let key = p.id.clone();
        self.due.remove(&(p.due_ms, p.order, key.clone()));
        debug_assert!(decoded.is_none() || decoded == p.message());
        let Some(m) = decoded.or_else(|| p.message()) else {
            self.forget(&key, p, None);
            return;
        };
        self.log(started_ms, &m, &key, "ACTIVE");
        let status = (response.status != 0).then_some(response.status);
        self.failure_call_attempted(&m, response, outcome);
        if let (Outcome::Dead { dlq_id }, Some(run_id)) = (outcome, m.conf.run_id()) {
            if !matches!(m.origin, Origin::Callback | Origin::FailureCallback) {
                if let Some(run) = self.runs.get_mut(run_id).filter(|r| r.ended.is_none()) {
                    run.failed_dlq_id = Some(dlq_id.clone());
                }
            }
        }
        match outcome {
            Outcome::Delivered => {
                self.log(ts, &m, &key, "DELIVERED");
                if let Some(l) = self.last_log() {
                    l.response_status = status;
                }
                self.forget(&key, p, Some(&m));
            }
            Outcome::Retry { next_ms } => {
                self.log(ts, &m, &key, "ERROR");
                if let Some(l) = self.last_log() {
                    l.response_status = status;
                    l.error = response.error.clone();
                }
                self.log(ts, &m, &key, "RETRY");
                if let Some(l) = self.last_log() {
                    l.next_delivery_ms = Some(*next_ms);
                }
                if p.in_flight {
                    p.in_flight = false;
                    self.in_flight = self.in_flight.saturating_sub(1);
                }
                self.flow_finished(&mut p, Some(&m));
                p.retried = retried + 1;
                p.due_ms = *next_ms;
                self.due.insert((p.due_ms, p.order, key.clone()));
                self.msgs.insert(p);
            }
            Outcome::Dead { dlq_id } => {
                self.log(ts, &m, &key, "ERROR");
                if let Some(l) = self.last_log() {
                    l.response_status = status;
                    l.error = response.error.clone();
                }
                self.log(ts, &m, &key, "FAILED");
                if let Some(l) = self.last_log() {
                    l.response_status = status;
                    l.error = response.error.clone();
                }
                self.dlq.insert(
                    dlq_id.clone(),
                    DlqEntry {
                        dlq_id: dlq_id.clone(),
                        message: m.clone(),
                        retried,
                        response: response.clone(),
                        failed_ms: ts,
                    },
                );
                self.forget(&key, p, Some(&m));
            }
        }
    }

    /// Follows a failure callback's attempts (for the workflow DLQ's `failureCallbackInfo`).
    fn failure_call_attempted(&mut self, m: &Message, response: &Response, outcome: &Outcome) {
        if m.origin != Origin::FailureCallback {
            return;
        }
        let Some(call) = m
            .source_id
            .as_deref()
            .and_then(|s| self.failure_calls.get_mut(s))
            .filter(|c| c.message_id == m.id)
        else {
            return;
        };
        call.response = Some(response.clone());
        call.state = match outcome {
            Outcome::Delivered => "CALLBACK_SUCCESS",
            Outcome::Retry { .. } => "CALLBACK_INPROGRESS",
            Outcome::Dead { .. } => "CALLBACK_FAIL",
        };
    }

    /// Messages due at `now_ms`, at most `limit`, marked in flight, into `out` (emptied first;
    /// the caller keeps it, so a batch's hand-over allocates no vector). Not logged: see module
    /// doc.
    pub fn take_due(&mut self, now_ms: u64, limit: usize, out: &mut Vec<Due>) {
        out.clear();
        while let Some((t, _)) = self.flow_wake.first() {
            if *t > now_ms {
                break;
            }
            if let Some((_, key)) = self.flow_wake.pop_first() {
                self.unpark(&key);
            }
        }
        while out.len() < limit {
            let Some(first) = self.due.first() else {
                break;
            };
            if first.0 > now_ms {
                break;
            }
            let Some((_, _, id)) = self.due.pop_first() else {
                break;
            };
            if let Some(p) = self.msgs.get_mut(&id) {
                let Some(msg) = p.message() else {
                    continue;
                };
                if let Some(key) = &msg.conf.flow_key {
                    let f = self.flows.get_mut(key);
                    match f.try_start(now_ms) {
                        Ok(()) => p.flow_started = true,
                        Err(reopens) => {
                            f.waiting.push_back(id.clone());
                            if let Some(t) = reopens {
                                self.flow_wake.insert((t, key.clone()));
                            }
                            continue;
                        }
                    }
                }
                p.in_flight = true;
                self.in_flight += 1;
                out.push(Due {
                    msg,
                    retried: p.retried,
                    run_created_ms: None,
                    seq: p.seq,
                });
            }
        }
        // A workflow step is delivered with the run's history up to itself (the SDK's eager
        // form of LazyFetch); calls and callbacks carry their own bodies.
        for d in out.iter_mut() {
            let Some(run_id) = d.msg.conf.run_id() else {
                continue;
            };
            let Some(run) = self.runs.get(run_id) else {
                continue;
            };
            d.run_created_ms = Some(run.created_ms);
            if d.msg.conf.call_type() == "step" {
                if let Some(h) = self.run_history(run_id, &d.msg.id) {
                    d.msg.body = Bin(h);
                }
            }
        }
    }

    /// Schedules whose firing time has come.
    pub fn due_schedules(&self, now_ms: u64) -> Vec<String> {
        self.schedule_due
            .iter()
            .take_while(|(t, _)| *t <= now_ms)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Waiters whose deadline has passed.
    pub fn expired_waiters(&self, now_ms: u64) -> Vec<String> {
        self.waiter_deadlines
            .iter()
            .take_while(|(t, _)| *t <= now_ms)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// The earliest time something becomes due: a message, a schedule, a waiter's deadline.
    /// Whether a schedule firing or a waiter's deadline has come.
    pub fn timers_due(&self, now_ms: u64) -> bool {
        self.schedule_due.first().is_some_and(|(t, _)| *t <= now_ms)
            || self
                .waiter_deadlines
                .first()
                .is_some_and(|(t, _)| *t <= now_ms)
    }

    /// When the first message of the due order is due (None: none waits).
    pub fn next_due_ms(&self) -> Option<u64> {
        self.due.first().map(|d| d.0)
    }

    /// Messages count only when `messages` is set (not while the in-flight limit is reached).
    pub fn next_wake_ms(&self, messages: bool) -> Option<u64> {
        [
            self.due.first().filter(|_| messages).map(|d| d.0),
            self.schedule_due.first().map(|d| d.0),
            self.waiter_deadlines.first().map(|d| d.0),
            self.flow_wake.first().map(|d| d.0),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn pending_count(&self) -> usize {
        self.msgs.len()
    }
}

impl Delivery {
    /// The workflow URL of the run a message belongs to (the message's own URL when none).
    pub fn run_url<'d>(&'d self, m: &'d Message) -> &'d str {
        m.conf
            .run_id()
            .and_then(|r| self.runs.get(r))
            .map(|r| r.url.as_str())
            .or_else(|| m.conf.workflow_value("Upstash-Workflow-Url"))
            .unwrap_or(&m.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message with every field set, nested hooks included, and one with none: what the
    /// pending set keeps reads back as it was given (`Pending::message` never loses one).
    #[test]
    fn a_pending_message_reads_back_whole() {
        let full = testgen::full("msg_full");
        let bare = testgen::bare("msg_bare");
        for m in [full, bare.clone()] {
            let p = Pending::new(m.id.clone(), &m, 7, true, 9);
            assert_eq!(p.message().as_ref(), Some(&m));
            // The id is kept beside, not in the encoding.
            assert!(!p.packed.windows(m.id.len()).any(|w| w == m.id.as_bytes()));
        }
        // Ids of any length read back, kept beside the packed form, not in it.
        for len in [0usize, 31, 32, 255, 256, 65_536] {
            let mut m = bare.clone();
            m.id = "i".repeat(len).into();
            let p = Pending::new(m.id.clone(), &m, 0, true, 0);
            assert_eq!(p.message().as_ref(), Some(&m));
            assert!(p.packed.len() < 100, "{len}: the id was kept");
        }
    }
}
