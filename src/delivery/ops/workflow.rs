//! Workflow runs: waits and notifies, run history, cancel, the DLQ of failed runs (resume,
//! restart, failure callback), and the waiters whose time ran out.

use super::filter::*;
use super::op::*;
use super::tx::*;
use crate::config::{
    WORKFLOW_DLQ_PAGE_ENTRIES_MAX, WORKFLOW_LOG_PAGE_RUNS_DEFAULT, WORKFLOW_LOG_PAGE_RUNS_MAX,
};
use crate::delivery::conf;
use crate::delivery::json;
use crate::delivery::model::*;
use crate::delivery::Delivery;
use crate::msgpack::Bin;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};

pub(super) fn recover(
    tx: &mut Tx,
    how: Recovery,
    mut filter: Filter,
    single: bool,
    overrides: Conf,
) -> OpReply {
    // At most 50 runs per request, as the hosted service pages them.
    filter.count = Some(
        filter
            .count
            .unwrap_or(WORKFLOW_DLQ_PAGE_ENTRIES_MAX)
            .clamp(1, WORKFLOW_DLQ_PAGE_ENTRIES_MAX),
    );
    for id in &filter.ids {
        match tx.d.dlq.get(id) {
            None => return not_found(&format!("dlq message {id} not found")),
            Some(e) if !e.is_run_entry() => {
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

pub(super) fn failure_callback(tx: &mut Tx, id: String) -> OpReply {
    let Some(e) = tx.d.dlq.get(&id).cloned() else {
        return not_found(&format!("dlq message {id} not found"));
    };
    let Some(run_id) = e.message.conf.run_id().filter(|_| e.is_run_entry()) else {
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

/// Cancels the failure callback of a DLQ entry while it is still being delivered (retrying);
/// 400 when none is in progress, as the workflow API documents. The call then counts as
/// failed (`CALLBACK_FAIL`), and `POST .../callback/<dlqId>` can start it again.
pub(super) fn failure_callback_cancel(tx: &mut Tx, id: String) -> OpReply {
    let Some(e) = tx.d.dlq.get(&id) else {
        return not_found(&format!("dlq message {id} not found"));
    };
    let in_progress =
        tx.d.failure_calls
            .get(&*e.message.id)
            .map(|c| c.message_id.to_string())
            .filter(|m| tx.d.msgs.contains_key(m.as_str()));
    let Some(message_id) = in_progress else {
        return bad(format!(
            "no failure callback of dlq message {id} is in progress"
        ));
    };
    tx.emit(Event::Cancel {
        ids: vec![message_id],
    });
    ok(json!({}))
}

pub(super) fn wait(tx: &mut Tx, w: WaitReq) -> OpReply {
    let run = run_id(&w.headers);
    let stored = run.as_ref().and_then(|r| {
        tx.d.notifications
            .get(&(r.clone(), w.event_id.clone()))
            .cloned()
    });
    let mut waiter = Waiter {
        id: String::new(),
        event_id: w.event_id,
        url: w.url,
        headers: w.headers,
        deadline_s: tx.now_ms.saturating_add(w.timeout_ms).div_ceil(1000),
        timeout_url: w.timeout_url,
        timeout_body: w.timeout_body.map(Bin),
        timeout_headers: w.timeout_headers,
        step: w.step.to_string(),
        created_ms: tx.now_ms,
    };
    if let (Some(run), Some(event)) = (run, stored) {
        // A lookback notification came first: wake at once instead of waiting.
        let c = conf::parse(&header_pairs(&waiter.headers), &mut conf::Extra::default())
            .unwrap_or_default();
        let m = tx.message(
            &waiter.url,
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
            event_id: waiter.event_id,
        });
        tx.emit(Event::Put(Box::new(m)));
        return ok(json!({}));
    }
    let max = tx.d.limits.waiters_max;
    if tx.d.waiters.len() >= max {
        return too_many("open waits", max, "--waiters-max");
    }
    waiter.id = tx.random_id("wtr_", 20);
    tx.emit(Event::Wait(Box::new(waiter)));
    ok(json!({}))
}

pub(super) fn run_get(tx: &mut Tx, id: String) -> OpReply {
    match tx.d.runs.get(&id) {
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
    }
}

pub(super) fn run_delete(tx: &mut Tx, id: String, cancel: bool, body: Vec<u8>) -> OpReply {
    match tx.d.runs.get(&id) {
        Some(r) if r.ended.is_none() => {
            end_run(tx, &id, cancel, (!body.is_empty()).then_some(body));
            ok(json!({}))
        }
        // The SDK finishes a run again when the delivery of its last step is retried: the
        // run stays finished, and the answer is the same as the first time.
        Some(r) if !cancel && r.ended.as_deref() == Some("RUN_SUCCESS") => ok(json!({})),
        _ => not_found(&format!("workflow run {id} not found or ended")),
    }
}

pub(super) fn runs_cancel(tx: &mut Tx, f: Filter) -> OpReply {
    let ids: Vec<String> = tx
        .d
        .runs
        .values()
        .filter(|r| r.ended.is_none())
        .filter(|r| f.ids.is_empty() || f.ids.contains(&r.id))
        .filter(|r| {
            let at = |k: &str| {
                values(&f, k)
                    .and_then(|v| v.first())
                    .and_then(|v| v.parse::<u64>().ok())
            };
            at("fromDate").is_none_or(|from| r.created_ms >= from)
                && at("toDate").is_none_or(|to| r.created_ms <= to)
        })
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
        .filter(|r| values(&f, "label").is_none_or(|vs| r.labels.iter().any(|l| vs.contains(l))))
        .filter(|r| any_eq(&f, "callerIp", r.caller_ip.as_deref()))
        .filter(|r| {
            any_eq(
                &f,
                "flowControlKey",
                r.trigger_conf.as_ref().and_then(|c| c.flow_key.as_deref()),
            )
        })
        .map(|r| r.id.clone())
        .collect();
    // `count` caps how many runs one call cancels, oldest first.
    let mut ids = ids;
    if let Some(n) = f.count {
        ids.sort_by_key(|id| tx.d.runs.get(id).map(|r| (r.created_ms, r.id.clone())));
        ids.truncate(n);
    }
    for id in &ids {
        end_run(tx, id, true, None);
    }
    ok(json!({ "cancelled": ids.len() }))
}

pub(super) fn waiters(tx: &mut Tx, event_id: String) -> OpReply {
    ok(Value::Array(
        tx.d.waiters
            .values()
            .filter(|w| w.event_id == event_id)
            .map(json::waiter)
            .collect(),
    ))
}

/// A failed run's new start, worked out before anything is written.
pub(super) struct RecoveryPlan {
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
pub(super) fn recovery_plan(
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

/// The step JSON a waiter receives on notify (`timeout` false, `out` = base64 of the event)
/// or on its deadline (`waitTimeout` true, no `out`).
pub(super) fn wake_body(w: &Waiter, event: Option<&[u8]>) -> Vec<u8> {
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

pub(super) fn header_pairs(headers: &[(String, String)]) -> Vec<(String, String)> {
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

pub(super) fn run_id(headers: &[(String, String)]) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("upstash-workflow-runid"))
        .map(|(_, v)| v.clone())
}

/// `GET /v2/workflows/events` (and `/logs`): runs newest first, each with its steps.
pub(super) fn logs(d: &Delivery, f: &Filter) -> OpReply {
    let (count, skip) = page(
        f,
        WORKFLOW_LOG_PAGE_RUNS_DEFAULT,
        WORKFLOW_LOG_PAGE_RUNS_MAX,
    );
    let mut runs: Vec<&Run> = d
        .runs
        .values()
        .filter(|r| f.ids.is_empty() || f.ids.contains(&r.id))
        .filter(|r| any_eq(f, "workflowRunId", Some(&r.id)))
        .filter(|r| any_eq(f, "workflowUrl", Some(&r.url)))
        .filter(|r| any_eq(f, "state", Some(json::run_state(r))))
        .filter(|r| values(f, "label").is_none_or(|vs| r.labels.iter().any(|l| vs.contains(l))))
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
        .map(|r| json::run_log(d, r))
        .collect();
    let mut m = Map::new();
    if more {
        m.insert("cursor".into(), json!((skip + count).to_string()));
    }
    m.insert("runs".into(), Value::Array(page));
    ok(Value::Object(m))
}

/// Ends a run: cancelled runs lose their pending messages and waiters.
/// When an invoked run finishes, fails or is cancelled, its invoker gets the result as the
/// Invoke step's `out` (`{"body", "isFailed", "isCanceled"}` as JSON text), published into the
/// invoker's run as the workflow SDK publishes a step, to the invoker's URL with its headers.
/// Nothing when the run was not invoked, or its invoker has ended.
pub(super) fn invoke_result(
    tx: &mut Tx,
    run_id: &str,
    body: Option<&[u8]>,
    failed: bool,
    canceled: bool,
) {
    let Some(invoker) =
        tx.d.runs
            .get(run_id)
            .and_then(|r| r.trigger_conf.as_ref())
            .and_then(|c| c.workflow_value(INVOKER))
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
    else {
        return;
    };
    let (Some(url), Some(step)) = (
        invoker.get("workflowUrl").and_then(Value::as_str),
        invoker.get("step"),
    ) else {
        return;
    };
    let mut out = Map::new();
    out.insert(
        "body".into(),
        body.map_or(Value::Null, |b| {
            Value::String(String::from_utf8_lossy(b).into_owned())
        }),
    );
    if failed {
        out.insert("isFailed".into(), json!(true));
    }
    if canceled {
        out.insert("isCanceled".into(), json!(true));
    }
    let mut step = step.clone();
    step["stepType"] = json!("Invoke");
    step["out"] = json!(Value::Object(out).to_string());
    if let Some(s) = step.as_object_mut() {
        s.remove("targetStep");
    }
    // The invoker's headers, as its SDK gave them: `Upstash-*` configuration pairs.
    let conf::JsonHeaders {
        pairs,
        content_type,
        ..
    } = conf::json_headers(invoker.get("headers").and_then(Value::as_object));
    let Ok(mut conf) = conf::parse(&pairs, &mut conf::Extra::default()) else {
        return;
    };
    set_run_id(
        &mut conf,
        invoker
            .get("workflowRunId")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        true,
    );
    conf.workflow
        .retain(|(k, _)| !k.eq_ignore_ascii_case("Upstash-Workflow-Init"));
    conf.workflow
        .push(("Upstash-Workflow-Init".into(), "false".into()));
    if let Some(ct) = content_type {
        if !conf.forward.iter().any(|(k, _)| k == "Content-Type") {
            conf.forward.insert(0, ("Content-Type".into(), ct));
        }
    }
    let req = PublishReq {
        unforwarded: Vec::new(),
        dest: url.to_string(),
        queue: None,
        conf,
        body: step.to_string().into_bytes(),
        caller_ip: None,
    };
    // A refusal (the invoker ended meanwhile) drops the result, as a late step is dropped.
    let _ = tx.publish_one(&req, Origin::Publish, None);
}

pub(super) fn end_run(tx: &mut Tx, id: &str, cancel: bool, response: Option<Vec<u8>>) {
    invoke_result(tx, id, response.as_deref(), false, cancel);
    if cancel {
        let mut msgs: Vec<(u64, String)> =
            tx.d.msgs
                .values()
                .filter(|p| p.message().is_some_and(|m| m.conf.run_id() == Some(id)))
                .map(|p| (p.order, p.id.to_string()))
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

pub(super) fn notify(tx: &mut Tx, event_id: &str, body: &[u8], only_run: Option<&str>) -> OpReply {
    let waiters: Vec<Waiter> =
        tx.d.waiters
            .values()
            .filter(|w| w.event_id == event_id)
            .filter(|w| only_run.is_none() || run_id(&w.headers).as_deref() == only_run)
            .cloned()
            .collect();
    if let (Some(run), true) = (only_run, waiters.is_empty()) {
        // Lookback: nobody in the run waits yet; the run's next wait for this event gets it.
        let max = tx.d.limits.notifications_max;
        let key = (run.to_string(), event_id.to_string());
        if tx.d.notifications.len() >= max && !tx.d.notifications.contains_key(&key) {
            return too_many(
                "notifications kept for later waits",
                max,
                "--notifications-max",
            );
        }
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
