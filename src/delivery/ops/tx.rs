//! An operation in progress (`Tx`): the state, the time, randomness and the events so far; and
//! what several operations share: building and publishing messages (with deduplication and a
//! run's inherited settings) and merging configuration.

use super::op::*;
use crate::config::DELIVERY_RETRIES_DEFAULT;
use crate::delivery::conf::canonical;
use crate::delivery::json;
use crate::delivery::model::*;
use crate::delivery::Delivery;
use crate::msgpack::Bin;
use crate::rng::Rng;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value};

/// An operation in progress: the state, the time, randomness, and the events so far.
pub struct Tx<'a> {
    pub d: &'a mut Delivery,
    /// The record the operation's events go into.
    pub seq: u64,
    pub now_ms: u64,
    pub rng: &'a mut Rng,
    pub events: Vec<Event>,
}

const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The deduplication key of a message to `url`: by id, or by content (destination, body,
/// `Content-Type` and forwarded headers).
pub(super) fn dedup_key(c: &Conf, url: &str, body: &[u8]) -> Option<String> {
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
        return Some(format!(
            "content:{}",
            crate::delivery::sign::sha256_hex(&parts)
        ));
    }
    None
}

pub(super) fn override_conf(c: &mut Conf, o: &Conf) {
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
pub(super) fn take_run_settings(to: &mut Conf, from: &Conf, keep_own: bool) {
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

/// Points a configuration at run `id`; `always` adds the header where there was none.
pub(super) fn set_run_id(c: &mut Conf, id: &str, always: bool) {
    let had = c.run_id().is_some();
    c.workflow
        .retain(|(k, _)| !k.eq_ignore_ascii_case("Upstash-Workflow-Runid"));
    if had || always {
        c.workflow
            .push((canonical("upstash-workflow-runid"), id.to_string()));
    }
}

/// The pseudo configuration header that keeps, on an invoked run's first message, who invoked
/// it: `{"workflowRunId", "workflowUrl", "headers", "step"}` as JSON. Never delivered; a
/// publisher cannot set it (`unwrap_invoke` drops one that arrives).
pub const INVOKER: &str = "Upstash-Workflow-Invoker";

/// A publish with `Upstash-Workflow-Invoke: true` (the workflow SDK's `context.invoke`) holds
/// the invoker's request as its body: `{body, headers, workflowRunId, workflowRunCreatedAt,
/// workflowUrl, step}`. The invoked run's first message gets `body` as its payload and the
/// rest under [`INVOKER`]. None when the publish is no invoke (and holds no forged INVOKER).
pub(super) fn unwrap_invoke(req: &PublishReq) -> Result<Option<PublishReq>, String> {
    let forged = req.conf.workflow_value(INVOKER).is_some();
    let invoke = req.conf.workflow_value("Upstash-Workflow-Invoke") == Some("true")
        && req.conf.workflow_value("Upstash-Workflow-Init") == Some("true");
    if !invoke && !forged {
        return Ok(None);
    }
    let mut out = req.clone();
    out.conf
        .workflow
        .retain(|(k, _)| !k.eq_ignore_ascii_case(INVOKER));
    if !invoke {
        return Ok(Some(out));
    }
    let v: Value = serde_json::from_slice(&req.body)
        .map_err(|e| format!("invalid invoke request: the body is not JSON ({e})"))?;
    let (Some(run), Some(url), Some(step)) = (
        v.get("workflowRunId").and_then(Value::as_str),
        v.get("workflowUrl").and_then(Value::as_str),
        v.get("step").filter(|s| s.is_object()),
    ) else {
        return Err("invalid invoke request: it needs workflowRunId, workflowUrl and step".into());
    };
    // The invoker's headers configure the message that answers it when the run ends: what
    // would not parse then (callbacks nested past the bound, a bad retry delay) is refused now.
    let invoker_headers =
        crate::delivery::conf::json_headers(v.get("headers").and_then(Value::as_object));
    crate::delivery::conf::parse(
        &invoker_headers.pairs,
        &mut crate::delivery::conf::Extra::default(),
    )
    .map_err(|e| format!("invalid invoke request: its headers: {e}"))?;
    out.body = crate::delivery::conf::json_body(v.get("body"));
    let invoker = json!({
        "workflowRunId": run,
        "workflowUrl": url,
        "headers": v.get("headers").cloned().unwrap_or(json!({})),
        "step": step,
    });
    out.conf
        .workflow
        .push((INVOKER.into(), invoker.to_string()));
    Ok(Some(out))
}

impl<'a> Tx<'a> {
    /// An operation whose events go into record `seq`, at `now_ms`.
    pub fn new(d: &'a mut Delivery, seq: u64, now_ms: u64, rng: &'a mut Rng) -> Tx<'a> {
        Tx {
            d,
            seq,
            now_ms,
            rng,
            events: Vec::new(),
        }
    }

    /// Holds the state to its bounds (`config::DeliveryLimits`) after an operation: a full
    /// DLQ lets its oldest entries go, by a logged removal, as a retention would.
    pub fn enforce_bounds(&mut self) {
        let over = self
            .d
            .dlq
            .len()
            .saturating_sub(self.d.limits.dlq_entries_max);
        if over > 0 {
            // DLQ ids begin with the failure's time in milliseconds: the first are the oldest.
            let ids: Vec<String> = self.d.dlq.keys().take(over).cloned().collect();
            self.emit(Event::DlqRemove { ids });
        }
    }

    pub fn emit(&mut self, e: Event) {
        self.d.apply(self.seq, self.now_ms, &e);
        self.events.push(e);
    }

    /// `emit` of an `Attempt` whose pending message the caller has decoded already.
    pub(super) fn emit_decoded(&mut self, e: Event, m: Message) {
        self.d.apply_decoded(self.seq, self.now_ms, &e, Some(m));
        self.events.push(e);
    }

    pub(super) fn random_id(&mut self, prefix: &str, len: usize) -> String {
        let mut s = String::with_capacity(prefix.len() + len);
        s.push_str(prefix);
        for _ in 0..len {
            s.push(ALNUM[self.rng.below(ALNUM.len())] as char);
        }
        s
    }

    pub(super) fn dlq_id(&mut self) -> String {
        format!("{}-{}", self.now_ms, self.rng.next_u64() % 1_000_000)
    }

    /// Builds a message to `url` (not yet emitted).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn message(
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
            max_retries: conf.retries.unwrap_or(DELIVERY_RETRIES_DEFAULT),
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
    pub(super) fn inherit_trigger_conf(&self, c: &Conf) -> Option<Conf> {
        if !c.has_feature("WF_TriggerOnConfig") || c.call_type() != "step" {
            return None;
        }
        let t = self.d.runs.get(c.run_id()?)?.trigger_conf.as_deref()?;
        let mut n = c.clone();
        take_run_settings(&mut n, t, true);
        (n != *c).then_some(n)
    }

    /// The 400 for a step of a workflow run that has ended (finished or cancelled): the
    /// workflow SDK reads a 400 as "the run was finished" and stops without publishing.
    /// A first invocation (`Upstash-Workflow-Init`) of a known run is a duplicate instead.
    pub(super) fn ended_run_refusal(&self, req: &PublishReq) -> Option<OpReply> {
        let run_id = req.conf.run_id()?;
        let run = self.d.runs.get(run_id)?;
        if req.conf.workflow_value("Upstash-Workflow-Init") == Some("true") {
            return None;
        }
        let how = match run.ended.as_deref()? {
            "RUN_CANCELED" => "was cancelled",
            _ => "has finished",
        };
        Some(bad(format!(
            "workflow run {run_id} {how}: no step can be added to it"
        )))
    }

    /// The publish with its URL group's default headers (`PATCH /v2/topics/<name>`) taken in
    /// where it gives none of its own; None when the destination has none. Defaults that no
    /// longer parse (they were checked when set) are left out.
    fn group_defaults(&self, req: &PublishReq) -> Option<PublishReq> {
        let t = self
            .d
            .topics
            .get(&req.dest)
            .filter(|t| !t.headers.is_empty())?;
        let mut extra = crate::delivery::conf::Extra::default();
        let defaults = crate::delivery::conf::parse(
            &crate::delivery::conf::default_pairs(&t.headers),
            &mut extra,
        )
        .ok()?;
        let mut out = req.clone();
        out.conf.fill_from(&defaults);
        if extra.header_forward {
            for (k, v) in &req.unforwarded {
                if !out
                    .conf
                    .forward
                    .iter()
                    .any(|(own, _)| own.eq_ignore_ascii_case(k))
                {
                    out.conf.forward.push((k.clone(), v.clone()));
                }
            }
        }
        Some(out)
    }

    /// Publishes to a URL or fans out to a group. Returns one answer item per message.
    pub(super) fn publish_one(
        &mut self,
        req: &PublishReq,
        origin: Origin,
        schedule_id: Option<String>,
    ) -> Result<Value, OpReply> {
        // `context.invoke`: the first invocation of the invoked run carries the invoker's
        // request; the run starts with the payload inside it, and remembers the invoker.
        let unwrapped = unwrap_invoke(req).map_err(bad)?;
        let req = unwrapped.as_ref().unwrap_or(req);
        // A URL group's default headers fill in what the publish leaves out.
        let with_defaults = self.group_defaults(req);
        let req = with_defaults.as_ref().unwrap_or(req);
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
        if let Some(refusal) = self.ended_run_refusal(req) {
            return Err(refusal);
        }
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
                let max = self.d.limits.dedup_entries_max;
                if self.d.dedup_live(self.now_ms) >= max {
                    return Err(too_many(
                        "deduplication ids in their window",
                        max,
                        "--dedup-max",
                    ));
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

/// Callback body (section 7 of the reference): after every attempt to `Upstash-Callback`, and
/// with `dlqId` once retries are exhausted to `Upstash-Failure-Callback`.
pub(super) fn callback_body(
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
pub(super) fn callback_message(
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
