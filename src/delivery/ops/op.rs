//! What an operation is: the requests the HTTP side parses, the `Op` it hands the executor,
//! and the answer (`OpReply`) it gets back.

use crate::delivery::model::*;
use serde_json::{json, Value};

/// A publish, enqueue or batch item, parsed and checked by the HTTP layer.
#[derive(Debug, Clone)]
pub struct PublishReq {
    /// A URL or a URL-group name.
    pub dest: String,
    pub queue: Option<String>,
    pub conf: Conf,
    pub body: Vec<u8>,
    pub caller_ip: Option<String>,
    /// The request's other headers when it did not ask to forward them
    /// (`Upstash-Header-Forward`): a URL group's default headers may ask it instead.
    pub unforwarded: Vec<(String, String)>,
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
    /// `POST /v2/trigger/<url>` (`single`) and `POST /v2/batch/trigger`: workflow runs started
    /// by the server, as the workflow SDK's own trigger starts them.
    Trigger {
        items: Vec<Result<PublishReq, String>>,
        single: bool,
    },
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
    /// `PATCH /v2/topics/<name>`: the group's default headers, replaced.
    TopicHeaders {
        name: String,
        headers: Vec<(String, String)>,
    },
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
    /// `DELETE /v2/workflows/dlq/callback/<dlqId>`: a failure callback in progress cancelled.
    RunFailureCallbackCancel(String),
}

impl Op {
    /// Signs the messages this operation creates (and their callbacks) with dev user `user`'s
    /// keys (`serve --dev`).
    pub fn sign_as(&mut self, user: &str) {
        match self {
            Op::Publish(p) => p.conf.sign_as(user),
            Op::Batch(items) | Op::Trigger { items, .. } => {
                for p in items.iter_mut().flatten() {
                    p.conf.sign_as(user);
                }
            }
            Op::ScheduleCreate(s) => s.conf.sign_as(user),
            // A DLQ retry keeps the original publisher's signer, as it keeps its other settings.
            _ => {}
        }
    }
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

pub(crate) fn ok(body: Value) -> OpReply {
    OpReply { status: 200, body }
}

pub(crate) fn not_found(what: &str) -> OpReply {
    OpReply {
        status: 404,
        body: json!({ "error": what }),
    }
}

/// A request refused because the state it would add to is at its bound (`flag` raises it).
pub(crate) fn too_many(what: &str, max: usize, flag: &str) -> OpReply {
    OpReply {
        status: 429,
        body: json!({
            "error": format!("too many {what}: this server holds at most {max} (its {flag} setting)")
        }),
    }
}

pub(crate) fn bad(what: impl Into<String>) -> OpReply {
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
