//! The delivery API's routes: each resource's paths and methods to one operation (`Op`) for
//! the executor, or the error answer. `super::handle` picks the resource by the path's first
//! segment after `/v2/`; each function here owns the rest of that path.

use super::parse::{
    batch as batch_items, batch_trigger, destination, endpoints, filter, flow_action, header_list,
    is_url, publish_req, queue_upsert, topic_headers, trigger_pairs, wait_req, DLQ_FILTERS,
    LOG_FILTERS, MESSAGE_FILTERS, RUN_CANCEL_FILTERS, WORKFLOW_DLQ_FILTERS, WORKFLOW_LOG_FILTERS,
};
use super::Req;
use crate::delivery::conf::{self, check_url, valid_name, Extra};
use crate::delivery::model::Endpoint;
use crate::delivery::ops::{Filter, Op, Recovery, ScheduleReq};
use crate::http::request::percent_decode;
use hyper::Method;

/// The answer to the hosted service's LLM routes (`/v2/publish/api/llm`,
/// `/llm/v1/chat/completions`), which proxy to Upstash's own model provider.
pub(super) const LLM_NOT_SERVED: &str = "the hosted LLM API is not served by tidepool: publish to your model provider's URL instead (for example /v2/publish/https://api.openai.com/v1/chat/completions with Upstash-Forward-Authorization: Bearer <key>), and the answer reaches your callback as any delivery's does";

/// An operation to run, or the refusal to answer at once.
pub(super) type Routed = Result<Op, Refusal>;

/// An HTTP status and the text of the JSON error.
pub(super) struct Refusal(pub u16, pub String);

fn refuse(status: u16, text: impl Into<String>) -> Refusal {
    Refusal(status, text.into())
}

/// A method the resource does not take.
fn not_allowed(r: &Req) -> Routed {
    Err(refuse(
        405,
        format!("method {} is not allowed on {}", r.method, r.path),
    ))
}

/// `POST /v2/publish/<destination>` and `POST /v2/enqueue/<queue>/<destination>`.
pub(super) fn publish(r: &Req) -> Routed {
    if r.method != Method::POST {
        return not_allowed(r);
    }
    let (queue, raw) = if r.head == "enqueue" {
        match r.tail.split_once('/') {
            Some((q, d)) => (Some(q.to_string()), d),
            None => return Err(refuse(400, "use /v2/enqueue/<queue>/<destination>")),
        }
    } else {
        (None, r.tail)
    };
    if raw.is_empty() {
        return Err(refuse(
            400,
            "missing destination: /v2/publish/<url or URL group>",
        ));
    }
    if raw == "api/llm" || raw.starts_with("api/llm/") {
        return Err(refuse(501, LLM_NOT_SERVED));
    }
    let dest = destination(raw, &r.query);
    let pairs = conf::pairs_from_request(r.headers, &r.query);
    request_publish(r, dest, queue, pairs).map(Op::Publish)
}

/// The publish a request makes of its body and headers, to `dest` with `pairs` as its
/// configuration; a bad one is 400.
fn request_publish(
    r: &Req,
    dest: String,
    queue: Option<String>,
    pairs: Vec<(String, String)>,
) -> Result<crate::delivery::ops::PublishReq, Refusal> {
    publish_req(
        dest,
        queue,
        pairs,
        r.content_type.clone(),
        header_list(r.headers),
        r.body.to_vec(),
        &r.peer,
    )
    .map(|(p, _)| p)
    .map_err(|e| refuse(400, e))
}

/// `POST /v2/trigger/<workflow url>`: starts a workflow run, as the workflow SDK's trigger
/// does (the run's first invocation, published to the URL).
pub(super) fn trigger(r: &Req) -> Routed {
    if r.method != Method::POST {
        return not_allowed(r);
    }
    if r.tail.is_empty() {
        return Err(refuse(400, "missing workflow URL: /v2/trigger/<url>"));
    }
    let dest = destination(r.tail, &r.query);
    if !is_url(&dest) {
        return Err(refuse(
            400,
            format!("invalid workflow URL '{dest}': use http:// or https://"),
        ));
    }
    let mut pairs = conf::pairs_from_request(r.headers, &r.query);
    let given = pairs
        .iter()
        .find(|(k, _)| k == "workflow-runid")
        .map(|(_, v)| v.clone());
    pairs.retain(|(k, _)| k != "workflow-runid");
    pairs.extend(trigger_pairs(given.as_deref(), &dest).map_err(|e| refuse(500, e))?);
    let req = request_publish(r, dest, None, pairs)?;
    Ok(Op::Trigger {
        items: vec![Ok(req)],
        single: true,
    })
}

/// `POST /v2/batch` and `POST /v2/batch/trigger`.
pub(super) fn batch(r: &Req) -> Routed {
    if r.method == Method::POST && r.tail == "trigger" {
        return batch_trigger(&r.body, &r.peer)
            .map(|items| Op::Trigger {
                items,
                single: false,
            })
            .map_err(|e| refuse(400, e));
    }
    if r.method != Method::POST || !r.tail.is_empty() {
        return not_allowed(r);
    }
    batch_items(&r.body, &r.peer)
        .map(Op::Batch)
        .map_err(|e| refuse(400, e))
}

/// `GET|DELETE /v2/messages[/<id>]`.
pub(super) fn messages(r: &Req) -> Routed {
    match r.method {
        Method::GET => match r.name(0) {
            Some(id) if r.segs.len() == 1 => Ok(Op::MessageGet(id)),
            _ => Err(refuse(404, "use /v2/messages/<messageId>")),
        },
        Method::DELETE => match (r.segs.len(), r.name(0)) {
            (0, _) => filter(&r.query, &r.body, "messageIds", &[MESSAGE_FILTERS])
                .map(Op::MessagesCancel)
                .map_err(|e| refuse(400, e)),
            (1, Some(id)) => Ok(Op::MessageCancel(id)),
            _ => Err(refuse(
                400,
                "missing message id: use /v2/messages/<messageId>",
            )),
        },
        _ => not_allowed(r),
    }
}

/// `/v2/dlq...`: list, get, delete and retry.
pub(super) fn dlq(r: &Req) -> Routed {
    let bulk = || {
        // The workflow SDK lists its runs' entries here too (`source=workflow`).
        filter(
            &r.query,
            &r.body,
            "dlqIds",
            &[MESSAGE_FILTERS, DLQ_FILTERS, WORKFLOW_DLQ_FILTERS],
        )
        .map_err(|e| refuse(400, e))
    };
    let missing = || refuse(404, "missing dlq id");
    match (&r.method, r.segs.as_slice()) {
        (&Method::GET, []) => bulk().map(Op::DlqList),
        (&Method::GET, [_]) => r.name(0).map(Op::DlqGet).ok_or_else(missing),
        (&Method::DELETE, []) => bulk().map(Op::DlqDeleteMany),
        (&Method::DELETE, [_]) => r.name(0).map(Op::DlqDelete).ok_or_else(missing),
        (&Method::POST, ["retry", ..]) => {
            let mut extra = Extra::default();
            let overrides = conf::parse(&conf::pairs_from_request(r.headers, &[]), &mut extra)
                .map_err(|e| refuse(400, e))?;
            let (filter, single) = match r.segs.len() {
                1 => (bulk()?, false),
                2 => {
                    let id = r.name(1).ok_or_else(missing)?;
                    let f = Filter {
                        ids: vec![id],
                        ..Filter::default()
                    };
                    (f, true)
                }
                _ => return Err(refuse(404, "use /v2/dlq/retry/<dlqId>")),
            };
            Ok(Op::DlqRetry {
                filter,
                single,
                overrides,
            })
        }
        _ => Err(refuse(404, "unknown dlq route")),
    }
}

/// `/v2/topics...`: URL groups and their endpoints.
pub(super) fn topics(r: &Req) -> Routed {
    let Some(topic) = r.name(0) else {
        return match r.method {
            Method::GET if r.segs.is_empty() => Ok(Op::TopicList),
            _ => Err(refuse(404, "use /v2/topics/<name>")),
        };
    };
    match (&r.method, r.segs.get(1).copied()) {
        (&Method::GET, None) => Ok(Op::TopicGet(topic)),
        (&Method::DELETE, None) => Ok(Op::TopicDelete(topic)),
        (&Method::POST, Some("endpoints")) | (&Method::DELETE, Some("endpoints")) => {
            if !valid_name(&topic) {
                return Err(refuse(
                    400,
                    crate::delivery::conf::invalid_name("URL group", &topic),
                ));
            }
            let eps = endpoints(&r.body).map_err(|e| refuse(400, e))?;
            if r.method != Method::POST {
                return Ok(Op::TopicRemove {
                    name: topic,
                    endpoints: eps,
                });
            }
            let mut list = Vec::new();
            for (url, name) in eps {
                let Some(url) = url else {
                    return Err(refuse(400, "every endpoint needs a url"));
                };
                check_url(&url).map_err(|e| refuse(400, e))?;
                list.push(Endpoint { name, url });
            }
            if list.is_empty() {
                return Err(refuse(400, "endpoints must not be empty"));
            }
            Ok(Op::TopicAdd {
                name: topic,
                endpoints: list,
            })
        }
        (&Method::PATCH, None) => topic_headers(&r.body)
            .map(|headers| Op::TopicHeaders {
                name: topic,
                headers,
            })
            .map_err(|e| refuse(400, e)),
        _ => Err(refuse(404, "unknown URL group route")),
    }
}

/// `/v2/queues...`.
pub(super) fn queues(r: &Req) -> Routed {
    let missing = || refuse(404, "missing queue name");
    match (&r.method, r.segs.as_slice()) {
        (&Method::GET, []) => Ok(Op::QueueList),
        (&Method::POST, []) => queue_upsert(&r.body)
            .map(Op::QueueUpsert)
            .map_err(|e| refuse(400, e)),
        (&Method::GET, [_]) => r.name(0).map(Op::QueueGet).ok_or_else(missing),
        (&Method::DELETE, [_]) => r.name(0).map(Op::QueueDelete).ok_or_else(missing),
        (&Method::POST, [_, action @ ("pause" | "resume")]) => {
            let q = r.name(0).ok_or_else(missing)?;
            Ok(Op::QueuePause(q, *action == "pause"))
        }
        _ => Err(refuse(404, "unknown queue route")),
    }
}

/// `GET /v2/events` and `GET /v2/logs`.
pub(super) fn logs(r: &Req) -> Routed {
    if r.method != Method::GET || !r.tail.is_empty() {
        return not_allowed(r);
    }
    filter(&r.query, &[], "messageIds", &[LOG_FILTERS])
        .map(Op::Logs)
        .map_err(|e| refuse(400, e))
}

/// `POST /v2/wait/<eventId>`.
pub(super) fn wait(r: &Req) -> Routed {
    if r.method != Method::POST {
        return not_allowed(r);
    }
    match (r.name(0), r.segs.len()) {
        (Some(event_id), 1) => wait_req(event_id, &r.body, r.headers)
            .map(Op::Wait)
            .map_err(|e| refuse(400, e)),
        _ => Err(refuse(404, "use /v2/wait/<eventId>")),
    }
}

/// `POST /v2/notify/<eventId>`, and the lookback form `/v2/notify/<runId>/<eventId>`, kept for
/// the run when nobody in it waits yet.
pub(super) fn notify(r: &Req) -> Routed {
    if r.method != Method::POST {
        return not_allowed(r);
    }
    let (event_id, run_id) = match (r.segs.len(), r.name(0), r.name(1)) {
        (1, Some(event_id), _) => (event_id, None),
        (2, Some(run_id), Some(event_id)) => (event_id, Some(run_id)),
        _ => {
            return Err(refuse(
                404,
                "use /v2/notify/<eventId> or /v2/notify/<runId>/<eventId>",
            ))
        }
    };
    Ok(Op::Notify {
        event_id,
        body: r.body.to_vec(),
        run_id,
    })
}

/// `GET /v2/waiters/<eventId>`.
pub(super) fn waiters(r: &Req) -> Routed {
    if r.method != Method::GET {
        return not_allowed(r);
    }
    match (r.name(0), r.segs.len()) {
        (Some(e), 1) => Ok(Op::Waiters(e)),
        _ => Err(refuse(404, "use /v2/waiters/<eventId>")),
    }
}

/// `/v2/workflows/...`: logs, runs, and the DLQ of failed runs.
pub(super) fn workflows(r: &Req) -> Routed {
    match r.segs.first().copied() {
        Some("events" | "logs") if r.method == Method::GET && r.segs.len() == 1 => {
            filter(&r.query, &[], "workflowRunIds", &[WORKFLOW_LOG_FILTERS])
                .map(Op::WorkflowLogs)
                .map_err(|e| refuse(400, e))
        }
        Some("runs") => match (&r.method, r.segs.len(), r.name(1)) {
            (&Method::GET, 2, Some(id)) => Ok(Op::RunGet(id)),
            (&Method::DELETE, 2, Some(id)) => Ok(Op::RunDelete {
                id,
                cancel: r.query.iter().any(|(k, v)| k == "cancel" && v == "true"),
                body: r.body.to_vec(),
            }),
            (&Method::DELETE, 1, _) => {
                filter(&r.query, &r.body, "workflowRunIds", &[RUN_CANCEL_FILTERS])
                    .map(Op::RunsCancel)
                    .map_err(|e| refuse(400, e))
            }
            _ => Err(refuse(404, "use /v2/workflows/runs/<runId>")),
        },
        Some("dlq") => workflow_dlq(r),
        _ => Err(refuse(404, format!("unknown route {}", r.path))),
    }
}

/// `/v2/flowControl...` and `GET /v2/globalParallelism`.
pub(super) fn flow_control(r: &Req) -> Routed {
    match (r.head, &r.method) {
        ("flowControl", &Method::GET) => match (r.segs.len(), r.name(0)) {
            (0, _) => Ok(Op::FlowList(
                r.query
                    .iter()
                    .find(|(k, _)| k == "search")
                    .map(|(_, v)| v.clone())
                    .filter(|v| !v.is_empty()),
            )),
            (1, Some(key)) => Ok(Op::FlowGet(key)),
            _ => Err(refuse(404, "use /v2/flowControl/<key>")),
        },
        ("flowControl", &Method::POST) => match (r.segs.len(), r.name(0), r.segs.get(1).copied()) {
            (2, Some(key), Some(a)) => flow_action(a, &r.query)
                .map(|action| Op::FlowAction { key, action })
                .map_err(|e| refuse(400, e)),
            _ => Err(refuse(404, "use /v2/flowControl/<key>/<action>")),
        },
        ("globalParallelism", &Method::GET) if r.tail.is_empty() => Ok(Op::GlobalParallelism),
        _ => not_allowed(r),
    }
}

/// `/v2/schedules...`.
pub(super) fn schedules(r: &Req) -> Routed {
    let (m, tail, segs, query, headers, body, peer) = (
        &r.method,
        r.tail,
        r.segs.as_slice(),
        &r.query,
        r.headers,
        &r.body[..],
        &r.peer,
    );
    let content_type = r.content_type.clone();
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
        .map_err(|e| refuse(400, e))?;
        let Some(cron) = extra.cron else {
            return Err(refuse(400, "missing Upstash-Cron header"));
        };
        if let Some(sid) = &extra.schedule_id {
            if !valid_name(sid) {
                return Err(refuse(
                    400,
                    format!("invalid schedule id '{sid}': use letters, digits, '-', '_' and '.'"),
                ));
            }
        }
        if let Some(q) = &extra.queue_name {
            if !valid_name(q) {
                return Err(refuse(400, crate::delivery::conf::invalid_name("queue", q)));
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
        _ => Err(refuse(404, "unknown schedule route")),
    }
}
/// `/v2/workflows/dlq...`: the DLQ seen as failed workflow runs (`source=workflow`), and
/// resuming, restarting, or calling a run's failure function again.
fn workflow_dlq(r: &Req) -> Routed {
    let (m, segs, query, body, headers) = (
        &r.method,
        r.segs.as_slice(),
        &r.query,
        &r.body[..],
        r.headers,
    );
    let bulk = |ids: Option<&str>| -> Result<Filter, Refusal> {
        let mut f = match ids {
            Some(id) => Filter {
                ids: vec![id.to_string()],
                ..Filter::default()
            },
            None => filter(
                query,
                body,
                "dlqIds",
                &[MESSAGE_FILTERS, DLQ_FILTERS, WORKFLOW_DLQ_FILTERS],
            )
            .map_err(|e| refuse(400, e))?,
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
                .map_err(|e| refuse(400, e))?;
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
        (&Method::DELETE, ["callback", _]) => Op::RunFailureCallbackCancel(id),
        (&Method::GET | &Method::DELETE | &Method::POST, _) => {
            return Err(refuse(
                404,
                "use /v2/workflows/dlq[/<dlqId>], /v2/workflows/dlq/resume|restart[/<dlqId>] or /v2/workflows/dlq/callback/<dlqId>",
            ))
        }
        _ => {
            return Err(refuse(
                405,
                format!("method {m} is not allowed on /v2/workflows/dlq"),
            ))
        }
    })
}
