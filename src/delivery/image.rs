//! The delivery state as a snapshot holds it: everything replaying the log would rebuild, and
//! nothing the scheduler keeps for itself (in-flight marks, flow-control counters and wait
//! lists, which start from zero after any restart; see the module doc of `delivery`).
//!
//! `Delivery::image` names every field of `Delivery` (no `..`), so a field added to the state
//! does not compile until it is either kept here or said to be derived; `Delivery::from_image`
//! rebuilds the derived indexes (due times, schedule and waiter deadlines, dedup expiry) from
//! what is kept. It is written as MessagePack with named fields, as log events are.

use super::model::{
    Conf, DlqEntry, HttpMethod, Message, Response, RunStep, Schedule, Topic, Waiter,
};
use super::model::{QueueConf, Run};
use super::{flow, Delivery, FailureCall, LogEntry, Pending, Queue};
use crate::msgpack::Bin;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryImage {
    /// Pending messages in arrival order.
    pub messages: Vec<PendingImage>,
    pub next_order: u64,
    pub dlq: Vec<DlqEntry>,
    pub topics: Vec<Topic>,
    pub queues: Vec<QueueImage>,
    pub schedules: Vec<Schedule>,
    pub waiters: Vec<Waiter>,
    /// Deduplication keys: key, message id, end of the window; by window end.
    pub dedup: Vec<(String, String, u64)>,
    /// The delivery log (`GET /v2/events`), oldest first.
    pub logs: Vec<LogImage>,
    /// Workflow runs by id.
    pub runs: Vec<RunImage>,
    /// Ended runs whose history is still kept, in the order they ended.
    pub ended_runs: Vec<String>,
    pub notifications: Vec<(String, String, Bin)>,
    /// Flow-control keys: what is logged of them.
    pub flows: Vec<FlowImage>,
    pub failure_calls: Vec<FailureCallImage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingImage {
    pub msg: Message,
    pub retried: u32,
    pub due_ms: u64,
    pub order: u64,
    pub released: bool,
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueImage {
    pub conf: QueueConf,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub waiting: Vec<String>,
    pub active: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogImage {
    pub time_ms: u64,
    pub message_id: String,
    pub state: String,
    pub url: String,
    pub topic: Option<String>,
    pub endpoint: Option<String>,
    pub schedule_id: Option<String>,
    pub queue: Option<String>,
    pub error: Option<String>,
    pub next_delivery_ms: Option<u64>,
    pub response_status: Option<u16>,
    pub method: String,
    pub max_retries: u32,
    pub labels: Vec<String>,
    /// Added after the first snapshots: absent in older files, and not written when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunImage {
    pub id: String,
    pub url: String,
    pub created_ms: u64,
    pub steps: Vec<RunStep>,
    pub ended: Option<String>,
    pub failed_dlq_id: Option<String>,
    pub trigger_conf: Option<Conf>,
    pub completed_ms: Option<u64>,
    pub response: Option<Bin>,
    /// Added after the first snapshots: absent in older files, and not written when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_ip: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowImage {
    pub key: String,
    pub paused: bool,
    pub pin_parallelism: Option<u32>,
    pub pin_rate: Option<u32>,
    pub pin_period_s: Option<u64>,
    pub parallelism: Option<u32>,
    pub rate: Option<u32>,
    pub period_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureCallImage {
    /// The failed message's id.
    pub source_id: String,
    pub message_id: String,
    pub state: String,
    pub response: Option<Response>,
}

/// The delivery-log states and failure-callback states, as the fixed strings the state holds.
const LOG_STATES: [&str; 8] = [
    "CREATED",
    "ACTIVE",
    "DELIVERED",
    "ERROR",
    "RETRY",
    "FAILED",
    "CANCEL_REQUESTED",
    "CANCELED",
];
const CALLBACK_STATES: [&str; 3] = ["CALLBACK_INPROGRESS", "CALLBACK_SUCCESS", "CALLBACK_FAIL"];

fn known(s: &str, among: &[&'static str]) -> Result<&'static str, String> {
    among
        .iter()
        .find(|k| **k == s)
        .copied()
        .ok_or_else(|| format!("unknown state {s:?}"))
}

impl Delivery {
    /// What a snapshot keeps of the state, in a deterministic order.
    pub fn image(&self) -> DeliveryImage {
        let Delivery {
            msgs,
            due: _, // derived from the messages
            next_order,
            dlq,
            topics,
            queues,
            schedules,
            schedule_due: _, // derived from the schedules
            waiters,
            waiter_deadlines: _, // derived from the waiters
            dedup,
            dedup_expiry: _, // derived from the dedup windows
            logs,
            in_flight: _, // scheduler state
            runs,
            ended_runs,
            notifications,
            flows,
            flow_wake: _, // scheduler state
            failure_calls,
            limits: _, // configuration
        } = self;
        let mut messages: Vec<PendingImage> = msgs
            .values()
            .filter_map(|p| {
                let Pending {
                    id: _, // the message's own
                    packed: _,
                    retried,
                    due_ms,
                    order,
                    in_flight: _,
                    released,
                    flow_started: _,
                    seq,
                } = p;
                Some(PendingImage {
                    msg: p.message()?,
                    retried: *retried,
                    due_ms: *due_ms,
                    order: *order,
                    released: *released,
                    seq: *seq,
                })
            })
            .collect();
        messages.sort_by_key(|p| p.order);
        let mut dedup: Vec<(String, String, u64)> = dedup
            .iter()
            .map(|(k, (id, until))| (k.clone(), id.clone(), *until))
            .collect();
        dedup.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
        let mut run_list: Vec<RunImage> = runs
            .values()
            .map(|r| RunImage {
                id: r.id.clone(),
                url: r.url.clone(),
                created_ms: r.created_ms,
                steps: r.steps.clone(),
                ended: r.ended.clone(),
                failed_dlq_id: r.failed_dlq_id.clone(),
                trigger_conf: r.trigger_conf.as_deref().cloned(),
                completed_ms: r.completed_ms,
                response: r.response.clone().map(Bin),
                labels: r.labels.clone(),
                caller_ip: r.caller_ip.clone(),
            })
            .collect();
        run_list.sort_by(|a, b| a.id.cmp(&b.id));
        let mut flow_list: Vec<FlowImage> = flows
            .keys
            .iter()
            .map(|(k, f)| FlowImage {
                key: k.clone(),
                paused: f.settings.paused,
                pin_parallelism: f.settings.pin_parallelism,
                pin_rate: f.settings.pin_rate,
                pin_period_s: f.settings.pin_period_s,
                parallelism: f.parallelism,
                rate: f.rate,
                period_s: f.period_s,
            })
            .collect();
        flow_list.sort_by(|a, b| a.key.cmp(&b.key));
        let mut calls: Vec<FailureCallImage> = failure_calls
            .iter()
            .map(|(source, c)| FailureCallImage {
                source_id: source.clone(),
                message_id: c.message_id.to_string(),
                state: c.state.to_string(),
                response: c.response.clone(),
            })
            .collect();
        calls.sort_by(|a, b| a.source_id.cmp(&b.source_id));
        DeliveryImage {
            messages,
            next_order: *next_order,
            dlq: dlq.values().cloned().collect(),
            topics: topics.values().cloned().collect(),
            queues: queues
                .values()
                .map(|q| QueueImage {
                    conf: q.conf.clone(),
                    created_ms: q.created_ms,
                    updated_ms: q.updated_ms,
                    waiting: q.waiting.iter().map(|w| w.to_string()).collect(),
                    active: q.active,
                })
                .collect(),
            schedules: schedules.values().cloned().collect(),
            waiters: waiters.values().cloned().collect(),
            dedup,
            logs: logs
                .iter()
                .map(|l| LogImage {
                    time_ms: l.time_ms,
                    message_id: l.message_id.to_string(),
                    state: l.state.to_string(),
                    url: l.url.clone(),
                    topic: l.topic.clone(),
                    endpoint: l.endpoint.clone(),
                    schedule_id: l.schedule_id.clone(),
                    queue: l.queue.clone(),
                    error: l.error.clone(),
                    next_delivery_ms: l.next_delivery_ms,
                    response_status: l.response_status,
                    method: l.method.to_string(),
                    max_retries: l.max_retries,
                    labels: l.labels.clone(),
                    caller_ip: l.caller_ip.clone(),
                    flow_key: l.flow_key.clone(),
                })
                .collect(),
            runs: run_list,
            ended_runs: ended_runs.iter().cloned().collect(),
            notifications: notifications
                .iter()
                .map(|((run, event), body)| (run.clone(), event.clone(), body.clone()))
                .collect(),
            flows: flow_list,
            failure_calls: calls,
        }
    }

    /// The state a snapshot kept, with its indexes rebuilt; as after replaying the log up to
    /// the snapshot's record (nothing in flight).
    pub fn from_image(img: DeliveryImage) -> Result<Delivery, String> {
        let mut d = Delivery::new();
        for p in img.messages {
            let id: Arc<str> = p.msg.id.clone();
            if p.released {
                d.due.insert((p.due_ms, p.order, id.clone()));
            }
            let mut pending = Pending::new(id.clone(), &p.msg, p.order, p.released, p.seq);
            pending.retried = p.retried;
            pending.due_ms = p.due_ms;
            d.msgs.insert(Box::new(pending));
        }
        d.next_order = img.next_order;
        for e in img.dlq {
            d.dlq.insert(e.dlq_id.clone(), e);
        }
        for t in img.topics {
            d.topics.insert(t.name.clone(), t);
        }
        for q in img.queues {
            let waiting: VecDeque<Arc<str>> = q
                .waiting
                .iter()
                .map(|w| d.msgs.shared_id(w).unwrap_or_else(|| Arc::from(w.as_str())))
                .collect();
            d.queues.insert(
                q.conf.name.clone(),
                Queue {
                    conf: q.conf,
                    created_ms: q.created_ms,
                    updated_ms: q.updated_ms,
                    waiting,
                    active: q.active,
                },
            );
        }
        for s in img.schedules {
            d.schedule_due.insert((s.next_ms, s.id.clone()));
            d.schedules.insert(s.id.clone(), s);
        }
        for w in img.waiters {
            d.waiter_deadlines
                .insert((w.deadline_s.saturating_mul(1000), w.id.clone()));
            d.waiters.insert(w.id.clone(), w);
        }
        for (key, id, until) in img.dedup {
            d.dedup_expiry.push_back((until, key.clone()));
            d.dedup.insert(key, (id, until));
        }
        for l in img.logs {
            let method = HttpMethod::parse(&l.method)
                .ok_or_else(|| format!("unknown method {:?} in the delivery log", l.method))?;
            d.logs.push_back(LogEntry {
                time_ms: l.time_ms,
                message_id: Arc::from(l.message_id.as_str()),
                state: known(&l.state, &LOG_STATES)?,
                url: l.url,
                topic: l.topic,
                endpoint: l.endpoint,
                schedule_id: l.schedule_id,
                queue: l.queue,
                error: l.error,
                next_delivery_ms: l.next_delivery_ms,
                response_status: l.response_status,
                method: method.as_str(),
                max_retries: l.max_retries,
                labels: l.labels,
                caller_ip: l.caller_ip,
                flow_key: l.flow_key,
            });
        }
        for r in img.runs {
            d.runs.insert(
                r.id.clone(),
                Run {
                    id: r.id,
                    url: r.url,
                    created_ms: r.created_ms,
                    steps: r.steps,
                    ended: r.ended,
                    failed_dlq_id: r.failed_dlq_id,
                    trigger_conf: r.trigger_conf.map(Box::new),
                    completed_ms: r.completed_ms,
                    response: r.response.map(|b| b.0),
                    labels: r.labels,
                    caller_ip: r.caller_ip,
                },
            );
        }
        d.ended_runs = img.ended_runs.into();
        for (run, event, body) in img.notifications {
            d.notifications.insert((run, event), body);
        }
        for f in img.flows {
            let flow = d.flows.get_mut(&f.key);
            flow.settings = flow::FlowSettings {
                paused: f.paused,
                pin_parallelism: f.pin_parallelism,
                pin_rate: f.pin_rate,
                pin_period_s: f.pin_period_s,
            };
            flow.parallelism = f.parallelism;
            flow.rate = f.rate;
            flow.period_s = f.period_s;
        }
        for c in img.failure_calls {
            d.failure_calls.insert(
                c.source_id,
                FailureCall {
                    message_id: Arc::from(c.message_id.as_str()),
                    state: known(&c.state, &CALLBACK_STATES)?,
                    response: c.response,
                },
            );
        }
        Ok(d)
    }

    /// The derived indexes, for a test that checks `from_image` rebuilds them as replay does.
    pub fn indexes_text(&self) -> String {
        format!(
            "due {:?}\nschedules {:?}\nwaiters {:?}\nqueues {:?}",
            self.due,
            self.schedule_due,
            self.waiter_deadlines,
            self.queues
                .values()
                .map(|q| (&q.conf.name, &q.waiting, q.active))
                .collect::<Vec<_>>()
        )
    }
}
