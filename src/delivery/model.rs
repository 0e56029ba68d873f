//! The delivery service's data: messages, their configuration, DLQ entries, URL groups, queues,
//! schedules, waiters, and the events that change them.
//!
//! An `Event` is the unit of change. A record of kind `delivery` (see `log-format.md`) holds a
//! list of events that are applied together; every field an event needs to be re-applied is in
//! it (ids, times, random choices), so replay gives the same state every time.
//!
//! Format: MessagePack with named fields (`rmp_serde::to_vec_named`), enums externally tagged
//! (`{"Put": {...}}`), byte strings as `bin`. Optional fields that are absent are still written
//! (as nil) so a reader never has to guess.

use crate::msgpack::Bin;
use serde::{Deserialize, Serialize};

/// How one message is to be sent: everything the `Upstash-*` configuration headers (or their
/// lowercase query forms) can say. `Upstash-Callback-X` configures the callback message the way
/// `Upstash-X` configures this one, hence the recursion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conf {
    pub method: Option<String>,
    pub retries: Option<u32>,
    pub retry_delay: Option<String>,
    pub timeout_ms: Option<u64>,
    pub delay_ms: Option<u64>,
    pub not_before_ms: Option<u64>,
    /// Headers delivered to the destination: `Upstash-Forward-<Name>` as `<Name>`, and
    /// `Content-Type`. Canonical names (Go's `CanonicalMIMEHeaderKey`).
    pub forward: Vec<(String, String)>,
    pub callback: Option<Box<Hook>>,
    pub failure_callback: Option<Box<Hook>>,
    pub dedup_id: Option<String>,
    pub content_dedup: bool,
    pub labels: Vec<String>,
    pub flow_key: Option<String>,
    pub parallelism: Option<u32>,
    pub rate: Option<u32>,
    pub period_s: Option<u64>,
    /// `Upstash-Workflow-*` and `Upstash-Feature-Set`, kept for the workflow protocol.
    pub workflow: Vec<(String, String)>,
    /// `Upstash-Redact-Fields`: `body`, `header` (all), `header[Name]`; shown redacted by the
    /// API, delivered unchanged.
    #[serde(default)]
    pub redact: Vec<String>,
    /// `serve --dev`: the dev user (other than the first) whose keys sign the deliveries of
    /// this message. Absent otherwise, and then not written at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
}

impl Conf {
    /// Signs this message's deliveries, and its callbacks', with dev user `user`'s keys.
    pub fn sign_as(&mut self, user: &str) {
        self.signer = Some(user.to_string());
        for hook in [&mut self.callback, &mut self.failure_callback]
            .into_iter()
            .flatten()
        {
            hook.conf.signer = Some(user.to_string());
        }
    }
}

/// A callback or failure callback: where it goes and how it is sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hook {
    pub url: String,
    pub conf: Conf,
}

/// What produced a message (logs and callback bodies show it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    Publish,
    Callback,
    FailureCallback,
    Schedule,
    Notify,
    WaitTimeout,
    DlqRetry,
}

/// An HTTP method a message is delivered with. In the log it is its name as a string, the
/// same bytes a `String` would give; in memory it saves an allocation per pending message.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HttpMethod {
    GET,
    POST,
    PUT,
    PATCH,
    DELETE,
    HEAD,
    OPTIONS,
}

impl HttpMethod {
    pub fn parse(s: &str) -> Option<HttpMethod> {
        Some(match s.to_ascii_uppercase().as_str() {
            "GET" => HttpMethod::GET,
            "POST" => HttpMethod::POST,
            "PUT" => HttpMethod::PUT,
            "PATCH" => HttpMethod::PATCH,
            "DELETE" => HttpMethod::DELETE,
            "HEAD" => HttpMethod::HEAD,
            "OPTIONS" => HttpMethod::OPTIONS,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::GET => "GET",
            HttpMethod::POST => "POST",
            HttpMethod::PUT => "PUT",
            HttpMethod::PATCH => "PATCH",
            HttpMethod::DELETE => "DELETE",
            HttpMethod::HEAD => "HEAD",
            HttpMethod::OPTIONS => "OPTIONS",
        }
    }
}

/// A message waiting to be delivered (or being delivered). Optional strings are `Box<str>`:
/// a million pending messages make every word count (see docs/performance.md's memory figure).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Shared with the pending map's key and the due index (one allocation per message).
    pub id: std::sync::Arc<str>,
    pub url: String,
    pub method: HttpMethod,
    pub body: Bin,
    pub created_ms: u64,
    /// When the first attempt is due.
    pub not_before_ms: u64,
    pub max_retries: u32,
    pub conf: Conf,
    pub origin: Origin,
    pub topic: Option<Box<str>>,
    pub endpoint: Option<Box<str>>,
    pub queue: Option<Box<str>>,
    pub schedule_id: Option<Box<str>>,
    pub caller_ip: Option<Box<str>>,
    /// The deduplication key this message holds for the window (id- or content-based).
    pub dedup_key: Option<Box<str>>,
    /// For a callback or failure callback: the message it reports on.
    pub source_id: Option<Box<str>>,
    /// For the callback of a queued message: the queue whose slot it holds until it is done
    /// (a queue's next message waits for the current one's callbacks too).
    #[serde(default)]
    pub holds_queue: Option<Box<str>>,
}

impl Conf {
    /// Takes from `d` what this configuration leaves out (a URL group's default headers):
    /// each setting it does not give, and each forwarded header it does not name.
    pub fn fill_from(&mut self, d: &Conf) {
        fn or<T: Clone>(own: &mut Option<T>, d: &Option<T>) {
            if own.is_none() {
                own.clone_from(d);
            }
        }
        or(&mut self.method, &d.method);
        or(&mut self.retries, &d.retries);
        or(&mut self.retry_delay, &d.retry_delay);
        or(&mut self.timeout_ms, &d.timeout_ms);
        or(&mut self.delay_ms, &d.delay_ms);
        or(&mut self.not_before_ms, &d.not_before_ms);
        or(&mut self.callback, &d.callback);
        or(&mut self.failure_callback, &d.failure_callback);
        self.content_dedup |= d.content_dedup;
        for (k, v) in &d.forward {
            if !self
                .forward
                .iter()
                .any(|(own, _)| own.eq_ignore_ascii_case(k))
            {
                self.forward.push((k.clone(), v.clone()));
            }
        }
        if self.labels.is_empty() {
            self.labels.clone_from(&d.labels);
        }
        if self.flow_key.is_none() && d.flow_key.is_some() {
            self.flow_key.clone_from(&d.flow_key);
            self.parallelism = d.parallelism;
            self.rate = d.rate;
            self.period_s = d.period_s;
        }
        if self.redact.is_empty() {
            self.redact.clone_from(&d.redact);
        }
    }

    /// A `Upstash-Workflow-*` value (canonical name, e.g. `Upstash-Workflow-Runid`).
    pub fn workflow_value(&self, name: &str) -> Option<&str> {
        self.workflow
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The workflow run this message belongs to.
    pub fn run_id(&self) -> Option<&str> {
        self.workflow_value("Upstash-Workflow-Runid")
    }

    /// Whether `Upstash-Feature-Set` lists `flag`.
    pub fn has_feature(&self, flag: &str) -> bool {
        self.workflow_value("Upstash-Feature-Set")
            .is_some_and(|v| v.split(',').any(|f| f.trim() == flag))
    }

    /// `Upstash-Workflow-CallType`, `step` when absent.
    pub fn call_type(&self) -> &str {
        self.workflow_value("Upstash-Workflow-Calltype")
            .unwrap_or("step")
    }
}

/// The destination's answer to the last attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// HTTP status; 0 when no response came (refused, timed out).
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bin,
    /// Why the attempt failed, for logs (`error`).
    pub error: Option<String>,
}

impl Response {
    /// An attempt that got no answer, and why.
    pub fn none(error: String) -> Response {
        Response {
            error: Some(error),
            ..Response::default()
        }
    }
}

/// A message whose retries are exhausted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DlqEntry {
    pub dlq_id: String,
    pub message: Message,
    pub retried: u32,
    pub response: Response,
    pub failed_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: Option<String>,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topic {
    pub name: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub endpoints: Vec<Endpoint>,
    /// Default headers of the group's messages (`PATCH /v2/topics/<name>`): `Upstash-*`
    /// configuration a publish to the group leaves out is taken from here. Added after the
    /// first records: absent in older ones, not written when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueConf {
    pub name: String,
    pub parallelism: u32,
    pub paused: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: String,
    /// As given, trimmed, `CRON_TZ=` prefix included.
    pub cron: String,
    pub destination: String,
    pub method: String,
    pub body: Option<Bin>,
    pub conf: Conf,
    pub queue: Option<String>,
    pub caller_ip: Option<String>,
    pub created_ms: u64,
    pub paused: bool,
    /// The next firing time (kept while paused: that firing is then skipped).
    pub next_ms: u64,
    pub last_ms: Option<u64>,
    /// The message of the last firing (for `lastScheduleStates`).
    #[serde(default)]
    pub last_message_id: Option<String>,
}

/// A workflow run waiting for an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    pub id: String,
    pub event_id: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub deadline_s: u64,
    pub timeout_url: Option<String>,
    pub timeout_body: Option<Bin>,
    pub timeout_headers: Vec<(String, String)>,
    /// The wait request's `step` object, as JSON text.
    pub step: String,
    pub created_ms: u64,
}

/// One entry of a workflow run's history (what the SDK calls a RawStep).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStep {
    pub message_id: String,
    pub body: Bin,
    /// `step`, `toCallback`, `fromCallback`, ... (`Upstash-Workflow-CallType`).
    pub call_type: String,
}

/// A workflow run: created by its first message, ended by `DELETE /v2/workflows/runs/<id>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: String,
    pub url: String,
    pub created_ms: u64,
    pub steps: Vec<RunStep>,
    /// `RUN_SUCCESS` or `RUN_CANCELED` once ended (the history is then dropped).
    pub ended: Option<String>,
    /// The DLQ entry of the step that failed for good: the run shows as `RUN_FAILED` until it
    /// is resumed or restarted from the DLQ.
    pub failed_dlq_id: Option<String>,
    /// The configuration of the run's first message (the trigger), which later steps take
    /// what they leave out from (`WF_TriggerOnConfig`).
    pub trigger_conf: Option<Box<Conf>>,
    pub completed_ms: Option<u64>,
    pub response: Option<Vec<u8>>,
    /// The first message's labels and caller, kept past the run's end for the filters.
    pub labels: Vec<String>,
    pub caller_ip: Option<String>,
}

/// How an attempt ended, as the executor decided it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    Delivered,
    /// Failed; attempt again at this time.
    Retry {
        next_ms: u64,
    },
    /// Failed for good; kept in the DLQ under this id.
    Dead {
        dlq_id: String,
    },
}

/// One change to the delivery state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A new message (publish, enqueue, batch, callback, schedule firing, notify, retry from DLQ).
    Put(Box<Message>),
    /// An attempt finished.
    Attempt {
        id: String,
        /// `Upstash-Retried` of this attempt.
        retried: u32,
        started_ms: u64,
        response: Response,
        outcome: Outcome,
    },
    Cancel {
        ids: Vec<String>,
    },
    DlqRemove {
        ids: Vec<String>,
    },
    /// Creates or replaces a URL group; no endpoints deletes it.
    Topic(Topic),
    TopicDelete {
        name: String,
    },
    Queue(QueueConf),
    QueueDelete {
        name: String,
    },
    /// Creates or replaces a schedule.
    Schedule(Box<Schedule>),
    ScheduleDelete {
        id: String,
    },
    SchedulePause {
        id: String,
        paused: bool,
    },
    /// A firing time passed: the schedule moves on to `next_ms`. The message it produced (none
    /// when paused) is a `Put` in the same record.
    ScheduleFired {
        id: String,
        at_ms: u64,
        next_ms: u64,
        message_id: Option<String>,
    },
    Wait(Box<Waiter>),
    /// Waiters that were notified or timed out.
    WaitersRemove {
        ids: Vec<String>,
    },
    /// A workflow run ended: finished (`RUN_SUCCESS`, with the result) or cancelled
    /// (`RUN_CANCELED`).
    RunEnd {
        id: String,
        state: String,
        response: Option<Bin>,
    },
    /// A run created from the DLQ (resume or restart): its history starts as `steps` (the
    /// failed run's steps before the failed one, or none), and replaces any run of that id.
    RunStart {
        id: String,
        url: String,
        steps: Vec<RunStep>,
    },
    /// A lookback notify that found no waiter in its run, kept for the run's next wait.
    Notification {
        run_id: String,
        event_id: String,
        body: Bin,
    },
    NotificationRemove {
        run_id: String,
        event_id: String,
    },
    /// A flow-control key's settings: paused, and the limits pinned over the messages' own.
    FlowControl {
        key: String,
        paused: bool,
        pin_parallelism: Option<u32>,
        pin_rate: Option<u32>,
        pin_period_s: Option<u64>,
    },
}

impl Event {
    /// The variant's name (the inspection tool counts them).
    pub fn name(&self) -> &'static str {
        match self {
            Event::Put(_) => "Put",
            Event::Attempt { .. } => "Attempt",
            Event::Cancel { .. } => "Cancel",
            Event::DlqRemove { .. } => "DlqRemove",
            Event::Topic(_) => "Topic",
            Event::TopicDelete { .. } => "TopicDelete",
            Event::Queue(_) => "Queue",
            Event::QueueDelete { .. } => "QueueDelete",
            Event::Schedule(_) => "Schedule",
            Event::ScheduleDelete { .. } => "ScheduleDelete",
            Event::SchedulePause { .. } => "SchedulePause",
            Event::ScheduleFired { .. } => "ScheduleFired",
            Event::Wait(_) => "Wait",
            Event::WaitersRemove { .. } => "WaitersRemove",
            Event::RunEnd { .. } => "RunEnd",
            Event::RunStart { .. } => "RunStart",
            Event::Notification { .. } => "Notification",
            Event::NotificationRemove { .. } => "NotificationRemove",
            Event::FlowControl { .. } => "FlowControl",
        }
    }

    /// One readable line (the inspection tool's dump).
    pub fn summary(&self) -> String {
        match self {
            Event::Put(m) => format!(
                "Put {} {} {} not-before={} retries={} body={}B",
                m.id,
                m.method.as_str(),
                m.url,
                m.not_before_ms,
                m.max_retries,
                m.body.0.len()
            ),
            Event::Attempt {
                id,
                retried,
                response,
                outcome,
                ..
            } => format!(
                "Attempt {id} retried={retried} status={} {outcome:?}",
                response.status
            ),
            Event::Cancel { ids } => format!("Cancel {}", ids.join(" ")),
            Event::DlqRemove { ids } => format!("DlqRemove {}", ids.join(" ")),
            Event::Topic(t) => format!("Topic {} endpoints={}", t.name, t.endpoints.len()),
            Event::TopicDelete { name } => format!("TopicDelete {name}"),
            Event::Queue(q) => format!(
                "Queue {} parallelism={} paused={}",
                q.name, q.parallelism, q.paused
            ),
            Event::QueueDelete { name } => format!("QueueDelete {name}"),
            Event::Schedule(s) => format!(
                "Schedule {} '{}' -> {} next={}",
                s.id, s.cron, s.destination, s.next_ms
            ),
            Event::ScheduleDelete { id } => format!("ScheduleDelete {id}"),
            Event::SchedulePause { id, paused } => format!("SchedulePause {id} paused={paused}"),
            Event::ScheduleFired {
                id,
                at_ms,
                next_ms,
                message_id,
            } => format!(
                "ScheduleFired {id} at={at_ms} next={next_ms} message={}",
                message_id.as_deref().unwrap_or("-")
            ),
            Event::Wait(w) => format!(
                "Wait {} event={} url={} deadline={}",
                w.id, w.event_id, w.url, w.deadline_s
            ),
            Event::WaitersRemove { ids } => format!("WaitersRemove {}", ids.join(" ")),
            Event::RunEnd { id, state, .. } => format!("RunEnd {id} {state}"),
            Event::RunStart { id, url, steps } => {
                format!("RunStart {id} {url} steps={}", steps.len())
            }
            Event::Notification {
                run_id,
                event_id,
                body,
            } => format!("Notification {run_id} {event_id} body={}B", body.0.len()),
            Event::NotificationRemove { run_id, event_id } => {
                format!("NotificationRemove {run_id} {event_id}")
            }
            Event::FlowControl {
                key,
                paused,
                pin_parallelism,
                pin_rate,
                pin_period_s,
            } => format!(
                "FlowControl {key} paused={paused} pin_parallelism={pin_parallelism:?} pin_rate={pin_rate:?} pin_period_s={pin_period_s:?}"
            ),
        }
    }
}

impl DlqEntry {
    /// A DLQ entry of a workflow run's own step (not of a callback).
    pub fn is_run_entry(&self) -> bool {
        self.message.conf.run_id().is_some()
            && !matches!(
                self.message.origin,
                Origin::Callback | Origin::FailureCallback
            )
    }
}
