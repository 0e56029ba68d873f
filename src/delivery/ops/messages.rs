//! Messages: publish, batch, get, cancel; and what happens when an attempt ends (retry, the DLQ,
//! callbacks).

use super::filter::*;
use super::op::*;
use super::tx::*;
use crate::config::MESSAGES_CANCEL_ENTRIES_DEFAULT;
use crate::delivery::json;
use crate::delivery::model::*;
use crate::delivery::retry;
use serde_json::{json, Value};

pub(super) fn publish(tx: &mut Tx, req: PublishReq) -> OpReply {
    match tx.publish_one(&req, Origin::Publish, None) {
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
    }
}

pub(super) fn batch(tx: &mut Tx, items: Vec<Result<PublishReq, String>>) -> OpReply {
    // A step for a run that has ended fails the batch as a whole, before anything of it is
    // published (the hosted service's answer; the workflow SDK then reports the run as
    // finished, not a step as done).
    for req in items.iter().flatten() {
        if let Some(refusal) = tx.ended_run_refusal(req) {
            return refusal;
        }
    }
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

/// Starts workflow runs: each item is the first invocation the workflow SDK's trigger would
/// publish. Answers `{workflowRunId, workflowCreatedAt}` per run, with `deduplicated` when
/// the run existed already; one run alone for `/v2/trigger`, a list for `/v2/batch/trigger`.
pub(super) fn trigger(
    tx: &mut Tx,
    items: Vec<Result<PublishReq, String>>,
    single: bool,
) -> OpReply {
    let mut out = Vec::new();
    for item in items {
        let req = match item {
            Ok(req) => req,
            Err(e) if single => return bad(e),
            Err(e) => {
                out.push(json!({ "error": e }));
                continue;
            }
        };
        let run_id = req.conf.run_id().unwrap_or_default().to_string();
        match tx.publish_one(&req, Origin::Publish, None) {
            Ok(v) => {
                let mut answer = json!({
                    "workflowRunId": run_id,
                    "workflowCreatedAt": tx.d.runs.get(&run_id).map_or(0, |r| r.created_ms),
                });
                if v.get("deduplicated").is_some() {
                    answer["deduplicated"] = json!(true);
                }
                out.push(answer);
            }
            Err(e) if single => return e,
            Err(e) => out.push(e.body),
        }
    }
    match (single, out.pop()) {
        (true, Some(one)) => ok(one),
        (_, last) => {
            out.extend(last);
            ok(Value::Array(out))
        }
    }
}

pub(super) fn get(tx: &mut Tx, id: String) -> OpReply {
    match tx.d.msgs.get(id.as_str()).and_then(|p| p.message()) {
        Some(m) => ok(json::pending(&m)),
        None => not_found(&format!("message {id} not found")),
    }
}

pub(super) fn cancel(tx: &mut Tx, id: String) -> OpReply {
    if !tx.d.msgs.contains_key(id.as_str()) {
        return not_found(&format!("message {id} not found"));
    }
    tx.emit(Event::Cancel { ids: vec![id] });
    ok(json!({"cancelled": 1}))
}

pub(super) fn cancel_many(tx: &mut Tx, f: Filter) -> OpReply {
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
                .filter(|p| {
                    p.message()
                        .is_some_and(|m| message_matches(&m, m.created_ms, &f))
                })
                .map(|p| (p.order, p.id.to_string()))
                .collect();
        v.sort();
        let limit = if f.params.is_empty() && f.count.is_none() {
            usize::MAX
        } else {
            f.count.unwrap_or(MESSAGES_CANCEL_ENTRIES_DEFAULT)
        };
        v.into_iter().take(limit).map(|(_, id)| id).collect()
    };
    let n = ids.len();
    if n > 0 {
        tx.emit(Event::Cancel { ids });
    }
    ok(json!({ "cancelled": n }))
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
    let Some(m) = p.message() else {
        return;
    };
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
    // A run that fails for good answers its invoker (`context.invoke`), if it has one.
    let failed_run = dlq_id
        .as_ref()
        .and(m.conf.run_id())
        .filter(|_| m.origin == Origin::Publish)
        .map(str::to_string);
    let failed_body = failed_run.as_ref().map(|_| r.response.body.0.clone());
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
    // The pending message is decoded once for its outcome and its record's apply.
    tx.emit_decoded(attempt, m);
    if let (Some(run), Some(body)) = (failed_run, failed_body) {
        super::workflow::invoke_result(tx, &run, Some(&body), true, false);
    }
}
