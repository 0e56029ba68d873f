//! The JSON shapes the SDKs parse. Empty optional fields are left out (the hosted server is Go
//! with `omitempty`); header maps have canonical keys and arrays of values.

use super::model::*;
use super::{Delivery, LogEntry, Queue};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};

pub fn header_map(headers: &[(String, String)]) -> Value {
    let mut m = Map::new();
    for (k, v) in headers {
        let entry = m
            .entry(super::conf::canonical(k))
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(a) = entry {
            a.push(Value::String(v.clone()));
        }
    }
    Value::Object(m)
}

fn put_opt(m: &mut Map<String, Value>, k: &str, v: Option<impl Into<Value>>) {
    if let Some(v) = v {
        m.insert(k.to_string(), v.into());
    }
}

/// `body` when the bytes are UTF-8, `bodyBase64` otherwise.
fn put_body(m: &mut Map<String, Value>, key: &str, body: &[u8]) {
    if body.is_empty() {
        return;
    }
    match std::str::from_utf8(body) {
        Ok(s) => m.insert(key.to_string(), Value::String(s.to_string())),
        Err(_) => m.insert(format!("{key}Base64"), Value::String(STANDARD.encode(body))),
    };
}

/// `callback` / `failureCallback` with their forwarded headers.
fn hooks(m: &mut Map<String, Value>, c: &Conf) {
    for (key, hook) in [
        ("callback", &c.callback),
        ("failureCallback", &c.failure_callback),
    ] {
        if let Some(h) = hook {
            m.insert(key.into(), json!(h.url));
            if !h.conf.forward.is_empty() {
                m.insert(format!("{key}Header"), header_map(&h.conf.forward));
            }
        }
    }
}

fn labels(m: &mut Map<String, Value>, labels: &[String]) {
    if let Some(first) = labels.first() {
        m.insert("label".into(), Value::String(first.clone()));
        m.insert("labels".into(), json!(labels));
    }
}

fn flow(m: &mut Map<String, Value>, c: &Conf) {
    put_opt(m, "flowControlKey", c.flow_key.clone());
    if c.flow_key.is_some() {
        put_opt(m, "parallelism", c.parallelism);
        put_opt(m, "rate", c.rate);
        put_opt(m, "period", c.period_s);
    }
}

/// A `Message` (also the base of a DLQ message).
pub fn message(msg: &Message) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("messageId".into(), json!(msg.id));
    m.insert("url".into(), json!(msg.url));
    put_opt(&mut m, "topicName", msg.topic.as_deref());
    put_opt(&mut m, "endpointName", msg.endpoint.as_deref());
    m.insert("method".into(), json!(msg.method.as_str()));
    if !msg.conf.forward.is_empty() {
        m.insert("header".into(), header_map(&redacted_headers(&msg.conf)));
    }
    if msg.conf.redact.iter().any(|r| r == "body") && !msg.body.0.is_empty() {
        m.insert("body".into(), json!(redacted(&msg.body.0)));
    } else {
        put_body(&mut m, "body", &msg.body.0);
    }
    m.insert("maxRetries".into(), json!(msg.max_retries));
    m.insert("notBefore".into(), json!(msg.not_before_ms));
    m.insert("createdAt".into(), json!(msg.created_ms));
    hooks(&mut m, &msg.conf);
    put_opt(&mut m, "queueName", msg.queue.as_deref());
    put_opt(&mut m, "scheduleId", msg.schedule_id.as_deref());
    put_opt(&mut m, "callerIP", msg.caller_ip.as_deref());
    labels(&mut m, &msg.conf.labels);
    flow(&mut m, &msg.conf);
    put_opt(&mut m, "retryDelayExpression", msg.conf.retry_delay.clone());
    if let Some(t) = msg.conf.timeout_ms {
        m.insert("timeout".into(), json!(t / 1000));
    }
    m
}

/// How a redacted value shows: `REDACTED:<SHA-256 hex>`.
fn redacted(v: &[u8]) -> String {
    format!("REDACTED:{}", super::sign::sha256_plain_hex(v))
}

/// The forwarded headers with `Upstash-Redact-Fields` applied.
fn redacted_headers(c: &Conf) -> Vec<(String, String)> {
    let all = c.redact.iter().any(|r| r == "header");
    c.forward
        .iter()
        .map(|(k, v)| {
            if all || c.redact.iter().any(|r| *r == format!("header[{k}]")) {
                (k.clone(), redacted(v.as_bytes()))
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect()
}

pub fn pending(m: &Message) -> Value {
    Value::Object(message(m))
}

pub fn dlq(e: &DlqEntry) -> Value {
    let mut m = message(&e.message);
    m.insert("dlqId".into(), json!(e.dlq_id));
    m.insert("responseStatus".into(), json!(e.response.status));
    if !e.response.headers.is_empty() {
        m.insert("responseHeader".into(), header_map(&e.response.headers));
    }
    put_body(&mut m, "responseBody", &e.response.body.0);
    Value::Object(m)
}

pub fn schedule(s: &Schedule, d: &super::Delivery) -> Value {
    let mut m = Map::new();
    m.insert("scheduleId".into(), json!(s.id));
    m.insert("cron".into(), json!(s.cron));
    m.insert("destination".into(), json!(s.destination));
    m.insert("createdAt".into(), json!(s.created_ms));
    m.insert("method".into(), json!(s.method));
    if !s.conf.forward.is_empty() {
        m.insert("header".into(), header_map(&s.conf.forward));
    }
    if let Some(b) = &s.body {
        put_body(&mut m, "body", &b.0);
    }
    m.insert("retries".into(), json!(s.conf.retries.unwrap_or(3)));
    if let Some(d) = s.conf.delay_ms {
        m.insert("delay".into(), json!(d / 1000));
    }
    hooks(&mut m, &s.conf);
    put_opt(&mut m, "callerIp", s.caller_ip.clone());
    m.insert("isPaused".into(), json!(s.paused));
    put_opt(&mut m, "queueName", s.queue.clone());
    flow(&mut m, &s.conf);
    put_opt(&mut m, "retryDelayExpression", s.conf.retry_delay.clone());
    labels(&mut m, &s.conf.labels);
    put_opt(&mut m, "lastScheduleTime", s.last_ms);
    m.insert("nextScheduleTime".into(), json!(s.next_ms));
    if let Some(id) = &s.last_message_id {
        let state = if d.msgs.contains_key(id.as_str()) {
            "IN_PROGRESS"
        } else if d.dlq.values().any(|e| *e.message.id == **id) {
            "FAIL"
        } else {
            "SUCCESS"
        };
        m.insert("lastScheduleStates".into(), json!({ id.as_str(): state }));
    }
    if let Some(t) = s.conf.timeout_ms {
        m.insert("timeout".into(), json!(t / 1000));
    }
    Value::Object(m)
}

pub fn topic(t: &Topic) -> Value {
    let endpoints: Vec<Value> = t
        .endpoints
        .iter()
        .map(|e| {
            let mut m = Map::new();
            put_opt(&mut m, "name", e.name.clone());
            m.insert("url".into(), json!(e.url));
            Value::Object(m)
        })
        .collect();
    let mut v = json!({"name": t.name, "createdAt": t.created_ms, "updatedAt": t.updated_ms, "endpoints": endpoints});
    if !t.headers.is_empty() {
        v["headers"] = Value::Object(
            t.headers
                .iter()
                .map(|(k, val)| (k.clone(), json!(val)))
                .collect(),
        );
    }
    v
}

pub fn queue(q: &Queue) -> Value {
    json!({
        "name": q.conf.name,
        "createdAt": q.created_ms,
        "updatedAt": q.updated_ms,
        "parallelism": q.conf.parallelism,
        "lag": q.waiting.len(),
        "paused": q.conf.paused,
    })
}

pub fn log(l: &LogEntry) -> Value {
    let mut m = Map::new();
    m.insert("time".into(), json!(l.time_ms));
    m.insert("messageId".into(), json!(&*l.message_id));
    m.insert("state".into(), json!(l.state));
    m.insert("url".into(), json!(l.url));
    put_opt(&mut m, "topicName", l.topic.clone());
    put_opt(&mut m, "endpointName", l.endpoint.clone());
    put_opt(&mut m, "scheduleId", l.schedule_id.clone());
    put_opt(&mut m, "queueName", l.queue.clone());
    put_opt(&mut m, "error", l.error.clone());
    put_opt(&mut m, "nextDeliveryTime", l.next_delivery_ms);
    put_opt(&mut m, "responseStatus", l.response_status);
    m.insert("method".into(), json!(l.method));
    m.insert("maxRetries".into(), json!(l.max_retries));
    labels(&mut m, &l.labels);
    put_opt(&mut m, "flowControlKey", l.flow_key.clone());
    put_opt(&mut m, "callerIP", l.caller_ip.clone());
    Value::Object(m)
}

pub fn waiter(w: &Waiter) -> Value {
    let mut m = Map::new();
    m.insert("url".into(), json!(w.url));
    m.insert("deadline".into(), json!(w.deadline_s));
    m.insert("headers".into(), header_map(&w.headers));
    put_opt(&mut m, "timeoutUrl", w.timeout_url.clone());
    if let Some(b) = &w.timeout_body {
        m.insert(
            "timeoutBody".into(),
            json!(String::from_utf8_lossy(&b.0).into_owned()),
        );
    }
    if !w.timeout_headers.is_empty() {
        m.insert("timeoutHeaders".into(), header_map(&w.timeout_headers));
    }
    Value::Object(m)
}

/// A DLQ entry as the API shows it; a workflow run's step also gets the fields the workflow
/// SDK lists (`workflowRunId`, `workflowCreatedAt`, `workflowUrl`, the failure function's
/// progress).
pub fn dlq_entry(d: &Delivery, e: &DlqEntry) -> Value {
    let mut v = dlq(e);
    let (Some(run_id), Value::Object(m)) = (e.message.conf.run_id(), &mut v) else {
        return v;
    };
    if !e.is_run_entry() {
        return v;
    }
    m.insert("workflowRunId".into(), json!(run_id));
    let created = d.runs.get(run_id).map(|r| r.created_ms);
    m.insert(
        "workflowCreatedAt".into(),
        json!(created.unwrap_or(e.message.created_ms)),
    );
    m.insert("workflowUrl".into(), json!(d.run_url(&e.message)));
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
                info.insert("responseHeaders".into(), header_map(&r.headers));
            }
            m.insert("failureCallbackInfo".into(), Value::Object(info));
        }
    }
    v
}

pub fn run_state(r: &Run) -> &str {
    match (&r.ended, &r.failed_dlq_id) {
        (Some(state), _) => state,
        (None, Some(_)) => "RUN_FAILED",
        (None, None) => "RUN_STARTED",
    }
}

/// One run as the workflow SDK's `WorkflowRunLog`: the initial payload and each step message,
/// with the step's own fields (stepId, stepName, stepType, out, ...) when its body is a step.
pub fn run_log(d: &Delivery, r: &Run) -> Value {
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

pub fn flow_info(key: &str, f: &super::flow::Flow) -> Value {
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
