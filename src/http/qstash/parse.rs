//! The delivery API's request parsing: destinations, configuration headers into a publish
//! request, bulk filters, batch items, URL-group endpoints, queues, waits and flow-control
//! actions. Pure functions of the request's parts; the routes (`routes.rs`) call them.

use crate::config::{QUEUE_PARALLELISM_MAX, WORKFLOW_WAIT_TIMEOUT_MS_DEFAULT};
use crate::delivery::conf::{self, canonical, check_url, valid_name, Extra};
use crate::delivery::model::QueueConf;
use crate::delivery::ops::{Filter, FlowAction, PublishReq, WaitReq};
use crate::http::request::percent_decode;
use hyper::HeaderMap;
use serde_json::Value;
use std::net::SocketAddr;

/// Query pairs, percent-decoded, in order.
pub(super) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                String::from_utf8_lossy(&percent_decode(k, true)).into_owned(),
                String::from_utf8_lossy(&percent_decode(v, true)).into_owned(),
            )
        })
        .collect()
}

/// A destination taken from the raw path: repairs a slash-merged `https:/host`, and re-attaches
/// the request's own query minus tidepool's parameters.
pub(super) fn destination(raw: &str, query: &[(String, String)]) -> String {
    let mut d = raw.to_string();
    for scheme in ["https:", "http:"] {
        if let Some(rest) = d.strip_prefix(scheme) {
            if !rest.starts_with("//") {
                d = format!("{scheme}//{}", rest.trim_start_matches('/'));
            }
            break;
        }
    }
    if d.contains("://") {
        let kept: Vec<String> = query
            .iter()
            .filter(|(k, _)| {
                let k = k.to_ascii_lowercase();
                k != "qstash_token" && !k.starts_with("upstash-")
            })
            .map(|(k, v)| {
                if v.is_empty() {
                    encode_component(k)
                } else {
                    format!("{}={}", encode_component(k), encode_component(v))
                }
            })
            .collect();
        if !kept.is_empty() {
            d.push(if d.contains('?') { '&' } else { '?' });
            d.push_str(&kept.join("&"));
        }
    }
    d
}

pub(super) fn encode_component(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~:/,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(super) fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// Builds a publish request from headers (or batch-item headers), query, body and destination.
pub(super) fn publish_req(
    dest: String,
    queue: Option<String>,
    pairs: Vec<(String, String)>,
    content_type: Option<String>,
    all_headers: Vec<(String, String)>,
    body: Vec<u8>,
    caller: &SocketAddr,
) -> Result<(PublishReq, Extra), String> {
    let mut extra = Extra::default();
    let mut c = conf::parse(&pairs, &mut extra)?;
    if let Some(ct) = content_type {
        if !c.forward.iter().any(|(k, _)| k == "Content-Type") {
            c.forward.insert(0, ("Content-Type".into(), ct));
        }
    }
    // The request's own headers: forwarded with `Upstash-Header-Forward`, else kept aside in
    // case the URL group it goes to asks for them in its default headers.
    let mut unforwarded = Vec::new();
    for (k, v) in all_headers {
        if is_publish_own(&k) {
            continue;
        }
        if extra.header_forward {
            c.forward.push((canonical(&k), v));
        } else if !is_url(&dest) {
            unforwarded.push((canonical(&k), v));
        }
    }
    if is_url(&dest) {
        check_url(&dest)?;
    } else if !valid_name(&dest) {
        let shown: String = dest.chars().take(64).collect();
        let more = if shown.len() < dest.len() { "..." } else { "" };
        return Err(format!(
            "invalid destination '{shown}{more}': use a URL (http:// or https://) or a URL group name"
        ));
    }
    if let Some(q) = &queue {
        if !valid_name(q) {
            return Err(crate::delivery::conf::invalid_name("queue", q));
        }
        if c.delay_ms.is_some() || c.not_before_ms.is_some() {
            return Err("delay and not-before are not supported for queues".into());
        }
    }
    Ok((
        PublishReq {
            dest,
            queue,
            conf: c,
            body,
            caller_ip: Some(ip_text(caller.ip())),
            unforwarded,
        },
        extra,
    ))
}

/// `ip` as `to_string` writes it, an IPv4 address without the formatting machinery (about
/// 1,100 instructions of every publish, callgrind).
fn ip_text(ip: std::net::IpAddr) -> String {
    let std::net::IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let mut s = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        if octet >= 100 {
            s.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            s.push(char::from(b'0' + octet / 10 % 10));
        }
        s.push(char::from(b'0' + octet % 10));
    }
    s
}

/// A request header that belongs to the publish itself (its configuration, credentials and
/// framing), never forwarded nor kept for a URL group's defaults; any case.
fn is_publish_own(name: &str) -> bool {
    let prefix = "upstash-";
    (name.len() >= prefix.len()
        && name.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes()))
        || [
            "authorization",
            "host",
            "content-length",
            "content-type",
            "connection",
        ]
        .iter()
        .any(|own| name.eq_ignore_ascii_case(own))
}

/// A publish request's headers that are not its own (`is_publish_own`), copied: those a
/// message may forward. A publish that carries only its own copies nothing.
pub(super) fn header_list(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(k, _)| !is_publish_own(k.as_str()))
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Ids and filters of a bulk request: repeated or comma-separated query values, or a JSON body
/// (`{"messageIds": [...]}` / `{"dlqIds": [...]}` from the Python SDK).
/// The filters a message selection understands (bulk cancel, and the DLQ's beside its own).
pub(super) const MESSAGE_FILTERS: &[&str] = &[
    "messageId",
    "url",
    "host",
    "path",
    "topicName",
    "queueName",
    "scheduleId",
    "callerIp",
    "flowControlKey",
    "label",
    "fromDate",
    "toDate",
];
/// The DLQ's own, beside the message filters.
pub(super) const DLQ_FILTERS: &[&str] = &["responseStatus", "source"];
/// The workflow DLQ's own, beside the DLQ's.
pub(super) const WORKFLOW_DLQ_FILTERS: &[&str] = &[
    "workflowRunId",
    "workflowUrl",
    "workflowCreatedAt",
    "failureFunctionState",
];
/// `GET /v2/logs` and `/v2/events`.
pub(super) const LOG_FILTERS: &[&str] = &[
    "messageId",
    "state",
    "url",
    "host",
    "path",
    "topicName",
    "scheduleId",
    "queueName",
    "label",
    "callerIp",
    "flowControlKey",
    "fromDate",
    "toDate",
];
/// `GET /v2/workflows/events` (and `/logs`).
pub(super) const WORKFLOW_LOG_FILTERS: &[&str] = &[
    "workflowRunId",
    "workflowUrl",
    "state",
    "workflowCreatedAt",
    "label",
    "groupBy",
];
/// `DELETE /v2/workflows/runs`.
pub(super) const RUN_CANCEL_FILTERS: &[&str] = &[
    "workflowUrl",
    "workflowUrlExactMatch",
    "fromDate",
    "toDate",
    "label",
    "callerIp",
    "flowControlKey",
];

/// The selection a list, bulk-delete or bulk-cancel request makes: ids (`ids_key`, in the
/// query or the JSON body) or filters. A filter name outside `known` (lists of names, one of
/// which the route understands) is refused, never ignored: a misspelt filter on a bulk
/// delete must not turn into a delete of everything.
pub(super) fn filter(
    query: &[(String, String)],
    body: &[u8],
    ids_key: &str,
    known: &[&[&str]],
) -> Result<Filter, String> {
    let mut f = Filter::default();
    for (k, v) in query {
        match k.as_str() {
            "count" => {
                f.count = Some(
                    v.parse()
                        .map_err(|_| format!("invalid count '{v}': not a number"))?,
                )
            }
            "cursor" => f.cursor = Some(v.clone()).filter(|c| !c.is_empty()),
            "qstash_token" | "order" | "cancel" => {}
            k if k == ids_key => f.ids.extend(v.split(',').map(str::to_string)),
            "messageIds" if ids_key == "messageIds" => {
                f.ids.extend(v.split(',').map(str::to_string))
            }
            k if !known.iter().any(|names| names.contains(&k)) => {
                let mut names: Vec<&str> = known.iter().flat_map(|n| n.iter().copied()).collect();
                names.push(ids_key);
                return Err(format!(
                    "unknown filter '{k}': this route filters by {}, count and cursor",
                    names.join(", ")
                ));
            }
            _ => {
                let vals: Vec<String> = if k == "url" {
                    vec![v.clone()]
                } else {
                    v.split(',').map(str::to_string).collect()
                };
                match f.params.iter_mut().find(|(n, _)| n == k) {
                    Some((_, existing)) => existing.extend(vals),
                    None => f.params.push((k.clone(), vals)),
                }
            }
        }
    }
    if !body.is_empty() {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
        if let Some(ids) = v.get(ids_key).and_then(Value::as_array) {
            f.ids
                .extend(ids.iter().filter_map(|i| i.as_str().map(str::to_string)));
        }
    }
    f.ids.retain(|i| !i.is_empty());
    Ok(f)
}

pub(super) fn flow_action(action: &str, query: &[(String, String)]) -> Result<FlowAction, String> {
    let q = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let num = |k: &str| -> Result<Option<u32>, String> {
        q(k).filter(|v| !v.is_empty())
            .map(|v| v.parse().map_err(|_| format!("invalid {k} '{v}'")))
            .transpose()
    };
    Ok(match action {
        "pause" => FlowAction::Pause,
        "resume" => FlowAction::Resume,
        "resetRate" => FlowAction::ResetRate,
        "reset" => FlowAction::Reset,
        "pin" => FlowAction::Pin {
            parallelism: num("parallelism")?,
            rate: num("rate")?,
            period_s: q("period")
                .filter(|v| !v.is_empty())
                .map(|v| conf::duration_ms(v).map(|ms| (ms / 1000).max(1)))
                .transpose()?,
        },
        "unpin" => FlowAction::Unpin {
            parallelism: q("parallelism") == Some("true"),
            rate: q("rate") == Some("true"),
        },
        other => return Err(format!("unknown flow control action '{other}'")),
    })
}

/// The `UserID` inside a token (base64 of `{"UserID":...,"Password":...}`).
pub(super) fn user_id(token: &str) -> Option<String> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    v.get("UserID")?.as_str().map(str::to_string)
}

/// The headers with which the workflow SDK's trigger publishes a run's first invocation
/// (`workflow-requests.ts`), as `Upstash-*` pairs without their prefix; the run id is the
/// given one or a new `wfr_` id.
pub(super) fn trigger_pairs(
    given_run_id: Option<&str>,
    url: &str,
) -> Result<Vec<(String, String)>, String> {
    let run_id = match given_run_id.filter(|r| !r.is_empty()) {
        Some(r) => r.to_string(),
        None => format!("wfr_{}", crate::secret::random_token()?),
    };
    Ok(vec![
        ("workflow-init".into(), "true".into()),
        ("workflow-runid".into(), run_id),
        ("workflow-url".into(), url.into()),
        (
            "feature-set".into(),
            "LazyFetch,InitialBody,WF_DetectTrigger,WF_TriggerOnConfig".into(),
        ),
        ("workflow-sdk-version".into(), "1".into()),
        ("forward-upstash-workflow-sdk-version".into(), "1".into()),
    ])
}

/// The body of `POST /v2/batch/trigger`: `[{destination, body, headers}]`, each made the
/// first invocation of a run (its `Upstash-Workflow-RunId` header, or a new id).
pub(super) fn batch_trigger(
    body: &[u8],
    peer: &SocketAddr,
) -> Result<Vec<Result<PublishReq, String>>, String> {
    let mut v: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid batch body: {e}"))?;
    let items = v
        .as_array_mut()
        .ok_or("invalid batch body: expected a JSON array of workflow runs")?;
    for item in items.iter_mut() {
        let Some(obj) = item.as_object_mut() else {
            continue;
        };
        let dest = obj
            .get("destination")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let headers = obj
            .entry("headers")
            .or_insert_with(|| Value::Object(Default::default()));
        let Some(headers) = headers.as_object_mut() else {
            continue;
        };
        let given = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("upstash-workflow-runid"))
            .and_then(|(_, v)| v.as_str())
            .map(str::to_string);
        headers.retain(|k, _| !k.eq_ignore_ascii_case("upstash-workflow-runid"));
        for (k, val) in trigger_pairs(given.as_deref(), &dest)? {
            headers.insert(format!("Upstash-{k}"), Value::String(val));
        }
    }
    batch(v.to_string().as_bytes(), peer)
}

pub(super) fn batch(
    body: &[u8],
    peer: &SocketAddr,
) -> Result<Vec<Result<PublishReq, String>>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid batch body: {e}"))?;
    let items = v
        .as_array()
        .ok_or("invalid batch body: expected a JSON array of messages")?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(dest) = item.get("destination").and_then(Value::as_str) else {
            out.push(Err("every batch item needs a destination".to_string()));
            continue;
        };
        let conf::JsonHeaders {
            pairs,
            content_type,
            all,
        } = conf::json_headers(item.get("headers").and_then(Value::as_object));
        let body = conf::json_body(item.get("body"));
        let queue = item
            .get("queue")
            .and_then(Value::as_str)
            .map(str::to_string);
        let dest = destination(dest, &[]);
        out.push(publish_req(dest, queue, pairs, content_type, all, body, peer).map(|(r, _)| r));
    }
    Ok(out)
}

/// The body of `PATCH /v2/topics/<name>`: `{"headers": {"Upstash-Retries": "3", ...}}`,
/// names canonical, each value a string (or an array of strings, joined by commas). The
/// headers are checked as a publish's would be.
pub(super) fn topic_headers(body: &[u8]) -> Result<Vec<(String, String)>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let map = v
        .get("headers")
        .and_then(Value::as_object)
        .ok_or("expected {\"headers\": {\"Upstash-...\": \"...\"}}")?;
    let mut out = Vec::new();
    for (k, val) in map {
        if let Some(val) = conf::header_value(val) {
            out.push((canonical(k), val));
        }
    }
    conf::parse(&conf::default_pairs(&out), &mut Extra::default())?;
    Ok(out)
}

#[allow(clippy::type_complexity)]
pub(super) fn endpoints(body: &[u8]) -> Result<Vec<(Option<String>, Option<String>)>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let list = v
        .get("endpoints")
        .and_then(Value::as_array)
        .ok_or("expected {\"endpoints\": [{\"url\": ..., \"name\": ...}]}")?;
    Ok(list
        .iter()
        .map(|e| {
            let s = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            (s("url"), s("name"))
        })
        .collect())
}

pub(super) fn queue_upsert(body: &[u8]) -> Result<QueueConf, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let name = v
        .get("queueName")
        .and_then(Value::as_str)
        .ok_or("expected {\"queueName\": ..., \"parallelism\": n}")?;
    if !valid_name(name) {
        return Err(crate::delivery::conf::invalid_name("queue", name));
    }
    let parallelism = match v.get("parallelism") {
        None | Some(Value::Null) => 1,
        Some(p) => p
            .as_u64()
            .filter(|p| (1..=QUEUE_PARALLELISM_MAX).contains(p))
            .ok_or_else(|| {
                format!("parallelism must be a whole number from 1 to {QUEUE_PARALLELISM_MAX}")
            })? as u32,
    };
    Ok(QueueConf {
        name: name.to_string(),
        parallelism,
        paused: v.get("paused").and_then(Value::as_bool).unwrap_or(false),
    })
}

pub(super) fn header_map_pairs(v: Option<&Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(Value::Object(m)) = v {
        for (k, val) in m {
            match val {
                Value::Array(a) => {
                    for x in a.iter().filter_map(Value::as_str) {
                        out.push((k.clone(), x.to_string()));
                    }
                }
                Value::String(s) => out.push((k.clone(), s.clone())),
                _ => {}
            }
        }
    }
    // The workflow SDK sends both RunId and Runid spellings; keep one of each name.
    let mut seen = std::collections::HashSet::new();
    out.retain(|(k, _)| {
        seen.insert(k.to_ascii_lowercase()) || !k.eq_ignore_ascii_case("upstash-workflow-runid")
    });
    out
}

pub(super) fn wait_req(
    event_id: String,
    body: &[u8],
    headers: &HeaderMap,
) -> Result<WaitReq, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid wait body: {e}"))?;
    let url = v
        .get("url")
        .and_then(Value::as_str)
        .ok_or("the wait body needs a url")?
        .to_string();
    check_url(&url)?;
    let timeout_ms = match v.get("timeout") {
        None | Some(Value::Null) => WORKFLOW_WAIT_TIMEOUT_MS_DEFAULT,
        Some(Value::Number(n)) => n.as_u64().ok_or("invalid timeout")?.saturating_mul(1000),
        Some(Value::String(s)) => conf::duration_ms(s)?,
        Some(_) => return Err("invalid timeout".into()),
    };
    let timeout_url = v
        .get("timeoutUrl")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(u) = &timeout_url {
        check_url(u)?;
    }
    let timeout_body = v.get("timeoutBody").and_then(|b| match b {
        Value::Null => None,
        Value::String(s) => Some(s.clone().into_bytes()),
        other => Some(other.to_string().into_bytes()),
    });
    let own: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| {
            let k = k.as_str();
            k.starts_with("upstash-") || k == "content-type"
        })
        .map(|(k, v)| {
            (
                canonical(k.as_str()),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let timeout_headers = header_map_pairs(v.get("timeoutHeaders"));
    // Both are parsed again as a message's configuration when the wait ends: what would not
    // parse then (callbacks nested past the bound, a bad retry delay) is refused now.
    for pairs in [&own, &timeout_headers] {
        conf::parse(&conf::default_pairs(pairs), &mut Extra::default())?;
    }
    Ok(WaitReq {
        event_id,
        url,
        timeout_ms,
        timeout_url,
        timeout_body,
        timeout_headers,
        headers: own,
        step: v.get("step").cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the publish path's header filter, which copies only the headers a message may
    /// forward: the publish's own are left out in any case, every other one is kept as sent.
    #[test]
    fn a_publish_copies_only_the_headers_it_may_forward() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer t"),
            ("host", "x"),
            ("content-length", "1"),
            ("content-type", "text/plain"),
            ("connection", "keep-alive"),
            ("upstash-retries", "2"),
            ("upstash-forward-a", "1"),
            ("x-kept", "yes"),
            ("upstash", "not a prefix"),
        ] {
            h.append(
                hyper::header::HeaderName::from_static(k),
                hyper::header::HeaderValue::from_static(v),
            );
        }
        assert_eq!(
            header_list(&h),
            vec![
                ("x-kept".to_string(), "yes".to_string()),
                ("upstash".to_string(), "not a prefix".to_string())
            ]
        );
        // A batch item's headers keep the case they were given in.
        for own in [
            "Upstash-Retries",
            "UPSTASH-DELAY",
            "Authorization",
            "Content-Type",
        ] {
            assert!(is_publish_own(own), "{own}");
        }
        for other in [
            "Upstash",
            "X-Upstash-Retries",
            "Hostname",
            "Ümlaut-Upstash-",
        ] {
            assert!(!is_publish_own(other), "{other}");
        }
    }

    #[test]
    fn a_callers_address_reads_as_to_string_writes_it() {
        let mut ips: Vec<std::net::IpAddr> = ["::1", "::ffff:127.0.0.1", "2001:db8::7"]
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect();
        for o in [
            0u8, 1, 9, 10, 11, 99, 100, 101, 109, 110, 199, 200, 249, 250, 255,
        ] {
            ips.push(std::net::Ipv4Addr::new(o, 255 - o, o / 2, 7).into());
        }
        assert_eq!(ips.len(), 18);
        for ip in ips {
            assert_eq!(ip_text(ip), ip.to_string());
        }
    }

    #[test]
    fn destinations() {
        let q = vec![
            ("x".to_string(), "1".to_string()),
            ("upstash-retries".to_string(), "2".to_string()),
            ("qstash_token".to_string(), "t".to_string()),
        ];
        assert_eq!(destination("https://h/a", &q), "https://h/a?x=1");
        assert_eq!(destination("https:/h/a", &[]), "https://h/a");
        assert_eq!(destination("group", &q), "group");
    }
}
