//! The delivery service (`/v2/...`) end to end: the real binary, a local destination server
//! (`common::sink`) on loopback, and the retry backoff shrunk to milliseconds per "second"
//! (`TIDEPOOL_RETRY_BACKOFF_UNIT_MS=1`) so nothing waits minutes.

use crate::common::sink::{Received, Sink};
use crate::common::*;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{KeyInit, Mac};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

fn publish(c: &mut Http, dest: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    c.request("POST", &format!("/v2/publish/{dest}"), headers, body)
}

/// Verifies an `Upstash-Signature` the way the SDKs' Receiver does; returns the claims.
fn verify(sig: &str, key: &str, body: &[u8]) -> Value {
    let parts: Vec<&str> = sig.split('.').collect();
    assert_eq!(parts.len(), 3, "a JWT has three parts");
    let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).expect("key");
    mac.update(format!("{}.{}", parts[0], parts[1]).as_bytes());
    let expected = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    assert_eq!(
        parts[2], expected,
        "signature must verify with the current key"
    );
    let header: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).expect("b64")).expect("json");
    assert_eq!(header, json!({"alg": "HS256", "typ": "JWT"}));
    let claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("b64")).expect("json");
    let hash = URL_SAFE.encode(Sha256::digest(body));
    assert_eq!(
        claims["body"].as_str().map(|s| s.trim_end_matches('=')),
        Some(hash.trim_end_matches('='))
    );
    assert_eq!(claims["iss"], "Upstash");
    for k in ["sub", "exp", "nbf", "iat", "jti"] {
        assert!(claims.get(k).is_some(), "claim {k} missing");
    }
    claims
}

fn poll(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn publish_delivers_body_headers_and_a_verifiable_signature() {
    let dir = TempDir::new("dl-publish");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let dest = sink.url("/hook?src=x");
    let r = publish(
        &mut c,
        &dest,
        &[
            ("Content-Type", "application/json"),
            ("Upstash-Forward-X-Tenant", "42"),
            ("Upstash-Method", "PUT"),
            ("Upstash-Telemetry-Sdk", "test"),
        ],
        br#"{"hello":"world"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let id = v["messageId"].as_str().expect("messageId").to_string();
    assert!(id.starts_with("msg_"));
    assert_eq!(v["url"], dest);
    let got = sink.wait_for(10, "the delivery", |g| !g.is_empty());
    let d = &got[0];
    assert_eq!(d.method, "PUT");
    assert_eq!(d.target, "/hook?src=x");
    assert_eq!(d.body, br#"{"hello":"world"}"#);
    assert_eq!(d.header("x-tenant"), Some("42"));
    assert_eq!(d.header("content-type"), Some("application/json"));
    assert_eq!(d.header("upstash-message-id"), Some(id.as_str()));
    assert_eq!(d.header("upstash-retried"), Some("0"));
    assert_eq!(d.header("user-agent"), Some("Upstash-QStash"));
    assert!(d.header("upstash-caller-ip").is_some());
    assert_eq!(
        d.header("upstash-telemetry-sdk"),
        None,
        "telemetry is never forwarded"
    );
    let claims = verify(
        d.header("upstash-signature").expect("signature"),
        QSTASH_CURRENT,
        &d.body,
    );
    assert_eq!(claims["sub"], dest);
    // Delivered messages leave the pending set; the log shows the lifecycle.
    poll(10, "the DELIVERED log entry", || {
        let l = c.get(&format!("/v2/events?messageId={id}")).json();
        l["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|x| x["state"] == "DELIVERED"))
    });
    let logs = c.get(&format!("/v2/events?messageId={id}")).json();
    let states: Vec<&str> = logs["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["state"].as_str())
        .collect();
    assert_eq!(states, ["DELIVERED", "ACTIVE", "CREATED"], "newest first");
    assert!(logs.get("cursor").is_none(), "no cursor on the last page");
    assert_eq!(c.get(&format!("/v2/messages/{id}")).status, 404);
}

#[test]
fn auth_routes_and_bad_input_answer_json_errors() {
    let dir = TempDir::new("dl-auth");
    let s = Server::start_delivery(dir.path());
    let mut anon = Http::connect(&s.addr, "wrong");
    let r = anon.get("/v2/keys");
    assert_eq!(r.status, 401);
    assert!(r.json()["error"].is_string());
    // The key-value token is not the delivery token.
    let r = s.client().get("/v2/keys");
    assert_eq!(r.status, 401);
    let mut c = s.qstash();
    let r = c.get(&format!("/v2/keys?qstash_token={QSTASH_TOKEN}"));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"current": QSTASH_CURRENT, "next": QSTASH_NEXT})
    );
    for (method, path, body, status) in [
        ("POST", "/v2/publish/ftp://x", &b""[..], 400),
        ("POST", "/v2/publish/no-such-group", b"", 404),
        ("POST", "/v2/publish/", b"", 400),
        ("GET", "/v2/nothing", b"", 404),
        ("DELETE", "/v2/dlq/123-0", b"", 404),
        ("GET", "/v2/messages/msg_missing", b"", 404),
        ("DELETE", "/v2/messages/msg_missing", b"", 404),
        ("POST", "/v2/batch", b"{", 400),
        ("POST", "/v2/queues", b"{\"queueName\":\"bad name\"}", 400),
        ("POST", "/v2/wait/e", b"{}", 400),
    ] {
        let r = c.request(method, path, &[], body);
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        assert!(
            r.json()["error"].is_string(),
            "{method} {path}: {}",
            r.text()
        );
    }
    let r = c.request(
        "POST",
        "/v2/publish/http://127.0.0.1:9/x",
        &[("Upstash-Retries", "many")],
        b"",
    );
    assert_eq!(r.status, 400);
    let r = c.request(
        "POST",
        "/v2/publish/http://127.0.0.1:9/x",
        &[("Upstash-Retry-Delay", "pow(2,")],
        b"",
    );
    assert_eq!(r.status, 400);
    let r = c.request(
        "POST",
        "/v2/enqueue/q1/http://127.0.0.1:9/x",
        &[("Upstash-Delay", "10s")],
        b"",
    );
    assert_eq!(r.status, 400, "delay is refused on enqueue");
}

#[test]
fn retries_exhaust_into_the_dlq_with_callbacks() {
    let dir = TempDir::new("dl-retry");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let cb = sink.url("/cb");
    let fcb = sink.url("/fcb");
    let r = publish(
        &mut c,
        &sink.url("/status/500"),
        &[
            ("Upstash-Retries", "2"),
            ("Upstash-Callback", &cb),
            ("Upstash-Failure-Callback", &fcb),
            ("Upstash-Failure-Callback-Forward-X-Why", "failed"),
            ("Content-Type", "text/plain"),
        ],
        b"payload",
    );
    assert_eq!(r.status, 200);
    let id = r.json()["messageId"].as_str().expect("id").to_string();
    let got = sink.wait_for(30, "the failure callback", |g| {
        g.iter().any(|r| r.target == "/fcb")
    });
    let attempts: Vec<&Received> = got.iter().filter(|r| r.target == "/status/500").collect();
    assert_eq!(attempts.len(), 3, "1 + Upstash-Retries attempts");
    let retried: Vec<&str> = attempts
        .iter()
        .filter_map(|a| a.header("upstash-retried"))
        .collect();
    assert_eq!(retried, ["0", "1", "2"]);
    let f = got.iter().find(|r| r.target == "/fcb").expect("fcb");
    assert_eq!(f.header("x-why"), Some("failed"));
    verify(
        f.header("upstash-signature").expect("sig"),
        QSTASH_CURRENT,
        &f.body,
    );
    let fb = f.json();
    assert_eq!(fb["status"], 500);
    assert_eq!(fb["retried"], 2);
    assert_eq!(fb["maxRetries"], 2);
    assert_eq!(fb["sourceMessageId"], id.as_str());
    assert_eq!(fb["url"], sink.url("/status/500"));
    assert_eq!(fb["method"], "POST");
    assert_eq!(
        STANDARD
            .decode(fb["body"].as_str().expect("body"))
            .expect("b64"),
        b"500 Internal Server Error"
    );
    assert_eq!(
        STANDARD
            .decode(fb["sourceBody"].as_str().expect("sb"))
            .expect("b64"),
        b"payload"
    );
    assert_eq!(fb["sourceHeader"]["Content-Type"], json!(["text/plain"]));
    assert!(fb["notBefore"].is_string() && fb["createdAt"].is_string());
    assert_eq!(fb["header"]["X-Sink"], json!(["yes"]));
    let dlq_id = fb["dlqId"].as_str().expect("dlqId").to_string();
    // The success callback fired after every attempt; the last says retried == maxRetries.
    let cbs = sink.wait_for(10, "three callbacks", |g| {
        g.iter().filter(|r| r.target == "/cb").count() == 3
    });
    let last = cbs.iter().rfind(|r| r.target == "/cb").expect("cb").json();
    assert_eq!(last["retried"], last["maxRetries"]);
    // The DLQ holds the message with the last response.
    let e = c.get(&format!("/v2/dlq/{dlq_id}"));
    assert_eq!(e.status, 200, "{}", e.text());
    let e = e.json();
    assert_eq!(e["messageId"], id.as_str());
    assert_eq!(e["responseStatus"], 500);
    assert_eq!(e["responseBody"], "500 Internal Server Error");
    assert_eq!(e["maxRetries"], 2);
    for k in ["url", "method", "notBefore", "createdAt"] {
        assert!(e.get(k).is_some(), "{k} missing from the DLQ message");
    }
    let list = c.get("/v2/dlq").json();
    assert_eq!(list["messages"].as_array().map(Vec::len), Some(1));
    assert!(list.get("cursor").is_none());
    let failed = c
        .get(&format!("/v2/events?messageId={id}&state=FAILED"))
        .json();
    assert_eq!(failed["events"].as_array().map(Vec::len), Some(1));
    // Retry from the DLQ: a new message, the entry gone; then delete answers 404.
    let r = c.request(
        "POST",
        &format!("/v2/dlq/retry?dlqIds={dlq_id}"),
        &[("Upstash-Retries", "0")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["cursor"], "");
    let new_id = v["responses"][0]["messageId"].as_str().expect("new id");
    assert_ne!(new_id, id);
    assert_eq!(
        c.request("DELETE", &format!("/v2/dlq/{dlq_id}"), &[], b"")
            .status,
        404
    );
    sink.wait_for(10, "the retried attempt", |g| {
        g.iter()
            .any(|r| r.header("upstash-message-id") == Some(new_id))
    });
}

#[test]
fn non_retryable_489_fails_at_once_and_retry_after_is_honoured() {
    let dir = TempDir::new("dl-489");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let r = publish(
        &mut c,
        &sink.url("/nonretryable"),
        &[("Upstash-Retries", "5")],
        b"x",
    );
    assert_eq!(r.status, 200);
    poll(10, "the DLQ entry", || {
        c.get("/v2/dlq").json()["messages"]
            .as_array()
            .is_some_and(|m| m.len() == 1)
    });
    assert_eq!(
        sink.at("/nonretryable").len(),
        1,
        "489 + header is never retried"
    );
    // A huge retry-delay expression is overridden by the destination's Retry-After: 0.
    let r = publish(
        &mut c,
        &sink.url("/status/503?retry_after=0"),
        &[("Upstash-Retries", "1"), ("Upstash-Retry-Delay", "3600000")],
        b"x",
    );
    assert_eq!(r.status, 200);
    sink.wait_for(10, "the second attempt", |g| {
        g.iter()
            .filter(|r| r.target.starts_with("/status/503"))
            .count()
            == 2
    });
    // A flaky destination succeeds on the second attempt, after the (shrunk) backoff.
    let r = publish(&mut c, &sink.url("/flaky/1/a"), &[], b"x");
    let id = r.json()["messageId"].as_str().expect("id").to_string();
    sink.wait_for(10, "the flaky success", |g| {
        g.iter().filter(|r| r.target == "/flaky/1/a").count() == 2
    });
    poll(10, "DELIVERED", || {
        c.get(&format!("/v2/events?messageId={id}&state=DELIVERED"))
            .json()["events"]
            .as_array()
            .is_some_and(|e| e.len() == 1)
    });
    let retry = c
        .get(&format!("/v2/events?messageId={id}&state=RETRY"))
        .json();
    assert!(retry["events"][0]["nextDeliveryTime"].is_u64());
}

#[test]
fn deduplication_by_id_and_by_content() {
    let dir = TempDir::new("dl-dedup");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let dest = sink.url("/d");
    let a = publish(&mut c, &dest, &[("Upstash-Deduplication-Id", "abc")], b"1");
    let b = publish(&mut c, &dest, &[("Upstash-Deduplication-Id", "abc")], b"2");
    assert_eq!(a.status, 200);
    assert_eq!(b.status, 202);
    assert_eq!(b.json()["messageId"], a.json()["messageId"]);
    assert_eq!(b.json()["deduplicated"], true);
    let h = [("Upstash-Content-Based-Deduplication", "True")];
    let x = publish(&mut c, &dest, &h, b"same");
    let y = publish(&mut c, &dest, &h, b"same");
    let z = publish(&mut c, &dest, &h, b"other");
    assert_eq!((x.status, y.status, z.status), (200, 202, 200));
    sink.wait_for(10, "three deliveries", |g| g.len() >= 3);
    // No fourth can come: the log of the service holds three messages, each delivered (not a
    // sleep that passes whether or not a duplicate is on its way, as this test had before).
    let created = c.get("/v2/events?state=CREATED").json();
    assert_eq!(
        created["events"].as_array().map(Vec::len),
        Some(3),
        "{created}"
    );
    for m in [&a, &x, &z] {
        let id = m.json()["messageId"].as_str().expect("id").to_string();
        wait_until(10, "its delivery in the log", || {
            c.get(&format!("/v2/events?messageId={id}&state=DELIVERED"))
                .json()["events"]
                .as_array()
                .is_some_and(|e| e.len() == 1)
        });
    }
    assert_eq!(sink.received().len(), 3);
}

#[test]
fn url_groups_fan_out_and_queues_keep_order() {
    let dir = TempDir::new("dl-groups");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let body =
        json!({"endpoints": [{"url": sink.url("/g1"), "name": "one"}, {"url": sink.url("/g2")}]});
    let r = c.post("/v2/topics/grp/endpoints", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let t = c.get("/v2/topics/grp").json();
    assert_eq!(
        t["endpoints"],
        json!([{"name": "one", "url": sink.url("/g1")}, {"url": sink.url("/g2")}])
    );
    for k in ["createdAt", "updatedAt"] {
        assert!(t[k].is_u64());
    }
    let r = publish(&mut c, "grp", &[], b"fan");
    assert_eq!(r.status, 200);
    let items = r.json();
    assert_eq!(
        items.as_array().map(Vec::len),
        Some(2),
        "a group answers an array"
    );
    let got = sink.wait_for(10, "both endpoints", |g| g.len() == 2);
    assert!(got
        .iter()
        .all(|r| r.header("upstash-topic-name") == Some("grp")));
    let m = c.get("/v2/topics").json();
    assert_eq!(m.as_array().map(Vec::len), Some(1));
    // Removing the last endpoints deletes the group.
    let rm = json!({"endpoints": [{"name": "one"}, {"url": sink.url("/g2")}]});
    assert_eq!(
        c.request(
            "DELETE",
            "/v2/topics/grp/endpoints",
            &[],
            rm.to_string().as_bytes()
        )
        .status,
        200
    );
    assert_eq!(c.get("/v2/topics/grp").status, 404);
    // Deleting a group that does not exist succeeds, as on the hosted service (the SDKs
    // delete before they create): twice, and it stays absent (issue 18).
    for _ in 0..2 {
        let r = c.request("DELETE", "/v2/topics/grp", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(c.get("/v2/topics/grp").status, 404);

    // A queue with parallelism 1 delivers in order, one at a time.
    let mut ids = Vec::new();
    for i in 0..6 {
        let r = c.request(
            "POST",
            &format!(
                "/v2/enqueue/ordered/{}",
                sink.url(&format!("/sleep/30/q{i}"))
            ),
            &[],
            format!("{i}").as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(r.json()["messageId"].as_str().expect("id").to_string());
    }
    let q = c.get("/v2/queues/ordered").json();
    assert_eq!(q["parallelism"], 1);
    for k in ["name", "createdAt", "updatedAt", "lag", "paused"] {
        assert!(q.get(k).is_some(), "queue field {k}");
    }
    let got = sink.wait_for(20, "six queued deliveries", |g| {
        g.iter()
            .filter(|r| r.target.starts_with("/sleep/30/q"))
            .count()
            == 6
    });
    let order: Vec<String> = got
        .iter()
        .filter(|r| r.target.starts_with("/sleep/30/q"))
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert_eq!(order, ["0", "1", "2", "3", "4", "5"]);
    // A paused queue accepts but does not deliver until resumed.
    assert_eq!(c.post("/v2/queues/ordered/pause", b"").status, 200);
    let r = c.request(
        "POST",
        &format!("/v2/enqueue/ordered/{}", sink.url("/paused")),
        &[],
        b"p",
    );
    assert_eq!(r.status, 200);
    // A message published after it, outside the queue, is delivered: the dispatcher has passed
    // the paused one (a fixed sleep proved nothing on a slow machine).
    publish(&mut c, &sink.url("/after-paused"), &[], b"a");
    sink.wait_for(10, "the message after the paused one", |g| {
        g.iter().any(|r| r.target == "/after-paused")
    });
    assert!(sink.at("/paused").is_empty());
    assert_eq!(c.get("/v2/queues/ordered").json()["lag"], 1);
    assert_eq!(c.post("/v2/queues/ordered/resume", b"").status, 200);
    sink.wait_for(10, "the resumed delivery", |g| {
        g.iter().any(|r| r.target == "/paused")
    });
}

#[test]
fn delay_not_before_and_cancel() {
    let dir = TempDir::new("dl-delay");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let t0 = Instant::now();
    let r = publish(&mut c, &sink.url("/late"), &[("Upstash-Delay", "1s")], b"x");
    assert_eq!(r.status, 200);
    let id = r.json()["messageId"].as_str().expect("id").to_string();
    let m = c.get(&format!("/v2/messages/{id}")).json();
    assert!(m["notBefore"].as_u64() >= m["createdAt"].as_u64().map(|c| c + 999));
    for k in [
        "messageId",
        "url",
        "method",
        "maxRetries",
        "notBefore",
        "createdAt",
    ] {
        assert!(m.get(k).is_some(), "message field {k}");
    }
    let got = sink.wait_for(10, "the delayed delivery", |g| !g.is_empty());
    assert!(got[0].at.duration_since(t0) >= Duration::from_millis(900));
    // Not-before in the future, then cancelled: never delivered.
    let future = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 3600)
        .to_string();
    let r = publish(
        &mut c,
        &sink.url("/never"),
        &[("Upstash-Not-Before", &future)],
        b"x",
    );
    let id = r.json()["messageId"].as_str().expect("id").to_string();
    let r = c.request("DELETE", &format!("/v2/messages/{id}"), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"cancelled": 1}));
    assert_eq!(
        c.request("DELETE", &format!("/v2/messages/{id}"), &[], b"")
            .status,
        404
    );
    let l = c
        .get(&format!("/v2/events?messageId={id}&state=CANCELED"))
        .json();
    assert_eq!(l["events"].as_array().map(Vec::len), Some(1));
    // Bulk cancel, in the JSON-body form the Python SDK sends.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = publish(
            &mut c,
            &sink.url("/never"),
            &[("Upstash-Delay", "1h")],
            b"x",
        );
        ids.push(r.json()["messageId"].as_str().expect("id").to_string());
    }
    let body = json!({"messageIds": [ids[0], ids[1]]}).to_string();
    let r = c.request("DELETE", "/v2/messages", &[], body.as_bytes());
    assert_eq!(r.json(), json!({"cancelled": 2}));
    let r = c.request(
        "DELETE",
        &format!("/v2/messages?messageIds={}", ids[2]),
        &[],
        b"",
    );
    assert_eq!(r.json(), json!({"cancelled": 1}));
}

#[test]
fn batch_publishes_each_item() {
    let dir = TempDir::new("dl-batch");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let body = json!([
        {"destination": sink.url("/b1"), "headers": {"upstash-method": "POST", "content-type": "text/plain", "upstash-forward-x-a": "1"}, "body": "one"},
        {"destination": sink.url("/b2"), "headers": {}, "body": null, "queue": null},
        {"destination": "ftp://bad", "headers": {}},
    ]);
    let r = c.post("/v2/batch", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v[0]["messageId"].is_string());
    assert!(v[1]["messageId"].is_string());
    assert!(v[2]["error"].is_string(), "a bad item fails alone");
    let got = sink.wait_for(10, "two deliveries", |g| g.len() == 2);
    let b1 = got.iter().find(|r| r.target == "/b1").expect("b1");
    assert_eq!(b1.body, b"one");
    assert_eq!(b1.header("x-a"), Some("1"));
    assert_eq!(b1.header("content-type"), Some("text/plain"));
}

#[test]
fn wait_notify_and_waiter_timeout() {
    let dir = TempDir::new("dl-wait");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let wait = json!({
        "url": sink.url("/wf"),
        "timeout": "10s",
        "timeoutUrl": sink.url("/wf-timeout"),
        "timeoutHeaders": {"Upstash-Workflow-RunId": ["wfr_1"], "Upstash-Workflow-Runid": ["wfr_1"]},
        "step": {"stepId": 4, "stepType": "Wait", "stepName": "await-payment", "concurrent": 1}
    });
    let r = c.request(
        "POST",
        "/v2/wait/payment",
        &[
            ("Upstash-Workflow-RunId", "wfr_1"),
            ("Upstash-Forward-Upstash-Workflow-Sdk-Version", "1"),
        ],
        wait.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let w = c.get("/v2/waiters/payment").json();
    assert_eq!(w.as_array().map(Vec::len), Some(1));
    assert_eq!(w[0]["url"], sink.url("/wf"));
    assert!(w[0]["deadline"].is_u64());
    let r = c.post("/v2/notify/payment", b"{\"paid\":true}");
    assert_eq!(r.status, 200);
    let items = r.json();
    assert_eq!(items.as_array().map(Vec::len), Some(1));
    assert!(items[0]["messageId"]
        .as_str()
        .is_some_and(|m| m.starts_with("msg_")));
    assert_eq!(items[0]["workflowRunId"], "wfr_1");
    let got = sink.wait_for(10, "the woken step", |g| {
        g.iter().any(|r| r.target == "/wf")
    });
    let d = got.iter().find(|r| r.target == "/wf").expect("wf");
    assert_eq!(d.header("upstash-workflow-sdk-version"), Some("1"));
    assert_eq!(d.header("upstash-workflow-runid"), Some("wfr_1"));
    // A message of a workflow run is delivered as the run's history (RawSteps) up to itself;
    // the woken step is the last entry.
    let history = d.json();
    let last = history
        .as_array()
        .and_then(|a| a.last())
        .expect("a RawStep array");
    let step: Value = serde_json::from_slice(
        &STANDARD
            .decode(last["body"].as_str().expect("body"))
            .expect("b64"),
    )
    .expect("step JSON");
    assert_eq!(step["stepId"], 4);
    assert_eq!(step["waitEventId"], "payment");
    assert_eq!(step["waitTimeout"], false);
    assert_eq!(
        STANDARD
            .decode(step["out"].as_str().expect("out"))
            .expect("b64"),
        b"{\"paid\":true}"
    );
    assert_eq!(c.get("/v2/waiters/payment").json(), json!([]));
    assert_eq!(c.post("/v2/notify/payment", b"again").json(), json!([]));
    // A waiter that nobody notifies times out to its timeoutUrl.
    let short = json!({"url": sink.url("/wf"), "timeout": "1s", "timeoutUrl": sink.url("/wf-timeout"),
        "step": {"stepId": 5, "stepType": "Wait", "stepName": "s", "concurrent": 1}});
    assert_eq!(
        c.post("/v2/wait/never", short.to_string().as_bytes())
            .status,
        200
    );
    let got = sink.wait_for(10, "the timeout", |g| {
        g.iter().any(|r| r.target == "/wf-timeout")
    });
    let t = got
        .iter()
        .find(|r| r.target == "/wf-timeout")
        .expect("timeout")
        .json();
    assert_eq!(t["waitTimeout"], true);
    assert!(t.get("out").is_none());
    assert_eq!(c.get("/v2/waiters/never").json(), json!([]));
}

#[test]
fn schedules_fire_pause_and_route_carefully() {
    let dir = TempDir::new("dl-sched");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let r = c.request(
        "POST",
        &format!("/v2/schedules/{}", sink.url("/tick")),
        &[
            ("Upstash-Cron", "* * * * * "),
            ("Upstash-Forward-X-S", "1"),
            ("Upstash-Retries", "1"),
        ],
        b"tick",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let live = r.json()["scheduleId"].as_str().expect("id").to_string();
    assert!(live.starts_with("scd_"));
    let r = c.request(
        "POST",
        &format!("/v2/schedules/{}", sink.url("/paused")),
        &[
            ("Upstash-Cron", "* * * * *"),
            ("Upstash-Schedule-Id", "my.sched"),
        ],
        b"",
    );
    assert_eq!(r.json()["scheduleId"], "my.sched");
    // Pausing twice is fine, by PATCH and by POST.
    assert_eq!(
        c.request("PATCH", "/v2/schedules/my.sched/pause", &[], b"")
            .status,
        200
    );
    assert_eq!(
        c.request("POST", "/v2/schedules/my.sched/pause", &[], b"")
            .status,
        200
    );
    let g = c.get("/v2/schedules/my.sched").json();
    assert_eq!(g["isPaused"], true);
    assert!(g.get("body").is_none(), "no body, no field");
    let next = g["nextScheduleTime"].as_u64().expect("next");
    let sg = c.get(&format!("/v2/schedules/{live}")).json();
    assert_eq!(sg["cron"], "* * * * *", "stored trimmed");
    assert_eq!(sg["destination"], sink.url("/tick"));
    assert_eq!(sg["retries"], 1);
    assert_eq!(sg["method"], "POST");
    assert_eq!(sg["header"]["X-S"], json!(["1"]));
    assert!(sg["createdAt"].is_u64());
    // Routing: a URL ending in /pause is a creation, not a pause.
    let r = c.request(
        "POST",
        &format!("/v2/schedules/{}", sink.url("/x/pause")),
        &[("Upstash-Cron", "0 0 1 1 *")],
        b"",
    );
    assert_eq!(r.status, 200);
    let made = r.json()["scheduleId"].as_str().expect("id").to_string();
    assert_eq!(
        c.get(&format!("/v2/schedules/{made}")).json()["destination"],
        sink.url("/x/pause")
    );
    assert_eq!(
        c.get("/v2/schedules").json().as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(
        c.request("DELETE", &format!("/v2/schedules/{made}"), &[], b"")
            .status,
        200
    );
    assert_eq!(c.get(&format!("/v2/schedules/{made}")).status, 404);
    let r = c.request(
        "POST",
        &format!("/v2/schedules/{}", sink.url("/x")),
        &[("Upstash-Cron", "not a cron")],
        b"",
    );
    assert_eq!(r.status, 400);
    // The live schedule fires at the next minute; the paused one skips it but moves on.
    let got = sink.wait_for(75, "a schedule firing", |g| {
        g.iter().any(|r| r.target == "/tick")
    });
    let d = got.iter().find(|r| r.target == "/tick").expect("tick");
    assert_eq!(d.header("upstash-schedule-id"), Some(live.as_str()));
    assert_eq!(d.header("x-s"), Some("1"));
    assert_eq!(d.body, b"tick");
    poll(10, "the paused schedule to move on", || {
        c.get("/v2/schedules/my.sched").json()["nextScheduleTime"].as_u64() > Some(next)
    });
    assert!(
        sink.at("/paused").is_empty(),
        "a paused schedule delivers nothing"
    );
    let states = c.get(&format!("/v2/schedules/{live}")).json()["lastScheduleStates"].clone();
    let (mid, state) = states
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("lastScheduleStates after a firing");
    assert_eq!(Some(mid.as_str()), d.header("upstash-message-id"));
    assert!(state == "SUCCESS" || state == "IN_PROGRESS", "{state}");
    assert!(c.get(&format!("/v2/schedules/{live}")).json()["lastScheduleTime"].is_u64());
    assert_eq!(
        c.request("PATCH", "/v2/schedules/my.sched/resume", &[], b"")
            .status,
        200
    );
    assert_eq!(c.get("/v2/schedules/my.sched").json()["isPaused"], false);
}

#[test]
fn state_replays_after_restart_and_keys_rotate() {
    let dir = TempDir::new("dl-replay");
    let sink = Sink::start();
    let data = dir.path().join("d");
    let snapshot = |c: &mut Http| -> Vec<Value> {
        [
            "/v2/dlq",
            "/v2/topics",
            "/v2/queues",
            "/v2/schedules",
            "/v2/waiters/ev",
        ]
        .iter()
        .map(|p| c.get(p).json())
        .collect()
    };
    let (before, pending_id) = {
        let s = Server::start_delivery(&data);
        let mut c = s.qstash();
        publish(
            &mut c,
            &sink.url("/status/404"),
            &[("Upstash-Retries", "0")],
            b"dead",
        );
        c.post(
            "/v2/topics/t/endpoints",
            json!({"endpoints": [{"url": sink.url("/t")}]})
                .to_string()
                .as_bytes(),
        );
        c.post(
            "/v2/queues",
            br#"{"queueName":"q","parallelism":2,"paused":true}"#,
        );
        c.request(
            "POST",
            &format!("/v2/schedules/{}", sink.url("/s")),
            &[("Upstash-Cron", "0 0 1 1 *")],
            b"",
        );
        c.post(
            "/v2/wait/ev",
            json!({"url": sink.url("/w"), "timeout": "1h"})
                .to_string()
                .as_bytes(),
        );
        let r = publish(
            &mut c,
            &sink.url("/later"),
            &[("Upstash-Delay", "1h")],
            b"later",
        );
        let pending = r.json()["messageId"].as_str().expect("id").to_string();
        poll(10, "the DLQ entry", || {
            c.get("/v2/dlq").json()["messages"]
                .as_array()
                .is_some_and(|m| m.len() == 1)
        });
        let snap = snapshot(&mut c);
        assert_eq!(s.terminate(), Some(0));
        (snap, pending)
    };
    let s = Server::start_delivery(&data);
    let mut c = s.qstash();
    assert_eq!(snapshot(&mut c), before);
    assert_eq!(c.get(&format!("/v2/messages/{pending_id}")).status, 200);
    drop(s);

    // Keys generated on first start are kept, rotated on request, and the rotation persists.
    let kd = dir.path().join("k");
    let s = Server::start(&kd, &[]);
    let creds: Value =
        serde_json::from_slice(&std::fs::read(kd.join("credentials.json")).expect("creds"))
            .expect("json");
    let token = creds["qstash_token"].as_str().expect("token").to_string();
    let decoded: Value =
        serde_json::from_slice(&STANDARD.decode(&token).expect("b64")).expect("json");
    assert!(decoded["UserID"].is_string() && decoded["Password"].is_string());
    let mut c = Http::connect(&s.addr, &token);
    let k1 = c.get("/v2/keys").json();
    assert!(k1["current"]
        .as_str()
        .is_some_and(|k| k.starts_with("sig_")));
    let k2 = c.post("/v2/keys/rotate", b"").json();
    assert_eq!(k2["current"], k1["next"]);
    assert_ne!(k2["next"], k1["next"]);
    drop(s);
    let s = Server::start(&kd, &[]);
    let mut c = Http::connect(&s.addr, &token);
    assert_eq!(c.get("/v2/keys").json(), k2);
}

/// Waits (up to 60 s) until the sink has received every message of `ids`; what it received.
fn all_delivered(sink: &Sink, ids: &[String], what: &str) -> Vec<Received> {
    sink.wait_for(60, what, |g| {
        let seen: std::collections::HashSet<&str> = g
            .iter()
            .filter_map(|r| r.header("upstash-message-id"))
            .collect();
        ids.iter().all(|i| seen.contains(i.as_str()))
    })
}

#[test]
fn kill_9_loses_no_message() {
    let dir = TempDir::new("dl-crash");
    let sink = Sink::start();
    let data = dir.path().join("d");
    let s = Server::start_delivery(&data);
    let mut c = s.qstash();
    let mut ids = Vec::new();
    let t0 = Instant::now();
    // Immediate ones to a slow destination (many in flight at the kill), and delayed ones.
    for i in 0..1000 {
        let (path, headers): (String, Vec<(&str, &str)>) = if i % 2 == 0 {
            (format!("/sleep/200/{i}"), vec![])
        } else {
            (format!("/d/{i}"), vec![("Upstash-Delay", "2s")])
        };
        let r = publish(&mut c, &sink.url(&path), &headers, b"m");
        assert_eq!(r.status, 200);
        ids.push(r.json()["messageId"].as_str().expect("id").to_string());
    }
    s.kill9();
    let before = sink.received().len();
    let s = Server::start_delivery(&data);
    let got = all_delivered(&sink, &ids, "every message delivered");
    assert!(
        before < 1000,
        "the kill came before everything was delivered ({before})"
    );
    // Delayed messages still respect their time across the restart: none came early.
    for r in got.iter().filter(|r| r.target.starts_with("/d/")) {
        assert!(
            r.at >= t0 + Duration::from_millis(1900),
            "{} came early",
            r.target
        );
    }
    drop(s);
}

#[test]
fn workflow_runs_history_lookback_and_end() {
    let dir = TempDir::new("dl-runs");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let wf = sink.url("/wf");
    let run_headers = |init: &'static str| {
        vec![
            ("Upstash-Workflow-RunId", "wfr_t1"),
            ("Upstash-Workflow-Init", init),
            ("Upstash-Forward-Upstash-Workflow-Sdk-Version", "1"),
        ]
    };
    let r = publish(&mut c, &wf, &run_headers("true"), b"{\"start\":1}");
    assert_eq!(r.status, 200, "{}", r.text());
    let first = r.json()["messageId"].as_str().expect("id").to_string();
    // The same run id again is a duplicate, not a second run.
    let again = publish(&mut c, &wf, &run_headers("true"), b"{}");
    assert_eq!(again.status, 202);
    assert_eq!(again.json()["deduplicated"], true);
    // The delivery carries the history up to itself (the initial payload) and the run headers.
    let got = sink.wait_for(10, "the first step", |g| !g.is_empty());
    let steps = got[0].json();
    assert_eq!(steps[0]["messageId"], first.as_str());
    assert_eq!(steps[0]["callType"], "step");
    assert_eq!(
        STANDARD
            .decode(steps[0]["body"].as_str().expect("b"))
            .expect("b64"),
        b"{\"start\":1}"
    );
    assert_eq!(got[0].header("upstash-workflow-runid"), Some("wfr_t1"));
    assert!(got[0].header("upstash-workflow-createdat").is_some());
    assert_eq!(got[0].header("upstash-workflow-sdk-version"), Some("1"));
    // A second step: the next delivery has both entries; the run's history is served too.
    let step = br#"{"stepId":1,"stepName":"a","stepType":"Run","out":"1","concurrent":1}"#;
    publish(&mut c, &wf, &run_headers("false"), step);
    let got = sink.wait_for(10, "the second step", |g| g.len() == 2);
    assert_eq!(got[1].json().as_array().map(Vec::len), Some(2));
    let history = c.get("/v2/workflows/runs/wfr_t1");
    assert_eq!(history.status, 200);
    assert_eq!(history.json().as_array().map(Vec::len), Some(2));
    // Lookback notify: nobody waits yet, so the run's next wait is woken at once.
    assert_eq!(
        c.post("/v2/notify/wfr_t1/late-event", b"early").json(),
        json!([])
    );
    let wait = json!({"url": wf, "timeout": "1h", "step": {"stepId": 2, "stepType": "Wait", "stepName": "w", "concurrent": 1}});
    let r = c.request(
        "POST",
        "/v2/wait/late-event",
        &[
            ("Upstash-Workflow-RunId", "wfr_t1"),
            ("Upstash-Forward-Upstash-Workflow-Sdk-Version", "1"),
        ],
        wait.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/v2/waiters/late-event").json(), json!([]));
    let got = sink.wait_for(10, "the woken wait", |g| g.len() == 3);
    let steps = got[2].json();
    let last = STANDARD
        .decode(steps[2]["body"].as_str().expect("b"))
        .expect("b64");
    let last: Value = serde_json::from_slice(&last).expect("step json");
    assert_eq!(
        STANDARD
            .decode(last["out"].as_str().expect("out"))
            .expect("b64"),
        b"early"
    );
    // Finish: the run answers 404, and publishing into it is refused with 400.
    let r = c.request(
        "DELETE",
        "/v2/workflows/runs/wfr_t1?cancel=false",
        &[],
        b"\"result\"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/v2/workflows/runs/wfr_t1").status, 404);
    assert_eq!(
        publish(&mut c, &wf, &run_headers("false"), step).status,
        400
    );
    // Finishing again (the SDK does, when its last step's delivery is retried) answers as
    // the first time; cancelling a finished run is refused.
    let again = |c: &mut Http, cancel: &str| {
        c.request(
            "DELETE",
            &format!("/v2/workflows/runs/wfr_t1?cancel={cancel}"),
            &[],
            b"\"result\"",
        )
        .status
    };
    assert_eq!(again(&mut c, "false"), 200);
    assert_eq!(again(&mut c, "true"), 404);
    // A batch holding a step of the finished run fails as a whole with 400 (the workflow SDK
    // then reports "workflow was finished"), and publishes none of its other messages.
    let batch = json!([
        {"destination": sink.url("/other"), "body": "x"},
        {"destination": wf, "headers": {"Upstash-Workflow-RunId": "wfr_t1", "Upstash-Workflow-Init": "false"}, "body": "y"},
    ]);
    let r = c.post("/v2/batch", batch.to_string().as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("wfr_t1 has finished")));
    let logs = c.get("/v2/logs").json();
    assert!(
        !logs.to_string().contains("/other"),
        "nothing of the batch was published: {logs}"
    );
    // Bulk cancel counts live runs only.
    let h2 = [
        ("Upstash-Workflow-RunId", "wfr_t2"),
        ("Upstash-Workflow-Init", "true"),
        ("Upstash-Delay", "1h"),
    ];
    publish(&mut c, &wf, &h2, b"{}");
    let r = c.request(
        "DELETE",
        "/v2/workflows/runs?workflowRunIds=wfr_t2",
        &[],
        b"",
    );
    assert_eq!(r.json(), json!({"cancelled": 1}));
    let r = c.request(
        "DELETE",
        "/v2/workflows/runs?workflowRunIds=wfr_t2",
        &[],
        b"",
    );
    assert_eq!(r.json(), json!({"cancelled": 0}));
}

#[test]
fn flow_control_limits_parallelism_and_rate() {
    let dir = TempDir::new("dl-flow");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    // Parallelism 1: each delivery starts only after the previous one answered (100 ms each).
    for i in 0..4 {
        let h = [
            ("Upstash-Flow-Control-Key", "one"),
            ("Upstash-Flow-Control-Value", "parallelism=1"),
        ];
        let r = publish(&mut c, &sink.url(&format!("/sleep/100/p{i}")), &h, b"x");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let got = sink.wait_for(20, "four deliveries", |g| g.len() == 4);
    for w in got.windows(2) {
        assert!(
            w[1].at.duration_since(w[0].at) >= Duration::from_millis(95),
            "{} started before {} finished",
            w[1].target,
            w[0].target
        );
    }
    let info = c.get("/v2/flowControl/one").json();
    assert_eq!(info["parallelismMax"], 1);
    for k in [
        "flowControlKey",
        "waitListSize",
        "parallelismCount",
        "rateMax",
        "rateCount",
        "ratePeriod",
        "ratePeriodStart",
        "isPaused",
        "isPinnedParallelism",
        "isPinnedRate",
    ] {
        assert!(info.get(k).is_some(), "flow control field {k}");
    }
    // Rate 2 per second: six messages need three windows.
    for i in 0..6 {
        let h = [
            ("Upstash-Flow-Control-Key", "two"),
            ("Upstash-Flow-Control-Value", "rate=2, period=1s"),
        ];
        publish(&mut c, &sink.url(&format!("/r{i}")), &h, b"x");
    }
    let got = sink.wait_for(20, "six rate-limited deliveries", |g| {
        g.iter().filter(|r| r.target.starts_with("/r")).count() == 6
    });
    let r: Vec<&Received> = got.iter().filter(|r| r.target.starts_with("/r")).collect();
    assert!(r[5].at.duration_since(r[0].at) >= Duration::from_millis(1900));
    // A paused key holds its messages; resume lets them go.
    assert_eq!(c.post("/v2/flowControl/three/pause", b"").status, 200);
    let h = [
        ("Upstash-Flow-Control-Key", "three"),
        ("Upstash-Flow-Control-Value", "parallelism=5"),
    ];
    publish(&mut c, &sink.url("/held"), &h, b"x");
    // A message published after it, with no key, is delivered: the dispatcher has passed the
    // held one.
    publish(&mut c, &sink.url("/after-held"), &[], b"a");
    sink.wait_for(10, "the message after the held one", |g| {
        g.iter().any(|r| r.target == "/after-held")
    });
    assert!(sink.at("/held").is_empty());
    let info = c.get("/v2/flowControl/three").json();
    assert_eq!(
        (info["isPaused"].clone(), info["waitListSize"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(c.post("/v2/flowControl/three/resume", b"").status, 200);
    sink.wait_for(10, "the resumed delivery", |g| {
        g.iter().any(|r| r.target == "/held")
    });
    // Pinning overrides the messages' values.
    assert_eq!(
        c.post(
            "/v2/flowControl/three/pin?parallelism=7&rate=3&period=1m",
            b""
        )
        .status,
        200
    );
    let info = c.get("/v2/flowControl/three").json();
    assert_eq!(
        (
            info["parallelismMax"].clone(),
            info["rateMax"].clone(),
            info["ratePeriod"].clone()
        ),
        (json!(7), json!(3), json!(60))
    );
    assert_eq!(info["isPinnedRate"], true);
    assert_eq!(
        c.post(
            "/v2/flowControl/three/unpin?parallelism=true&rate=true",
            b""
        )
        .status,
        200
    );
    assert_eq!(c.get("/v2/flowControl/three").json()["parallelismMax"], 5);
    let list = c.get("/v2/flowControl").json();
    assert_eq!(list.as_array().map(Vec::len), Some(3));
    let g = c.get("/v2/globalParallelism").json();
    assert!(g["parallelismMax"].is_u64() && g["parallelismCount"].is_u64());
    assert_eq!(c.post("/v2/flowControl/three/bogus", b"").status, 400);
}

#[test]
fn webhooks_notify_their_run_without_credentials() {
    let dir = TempDir::new("dl-hook");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    // The dev token's UserID is defaultUser; the caller is a third party with no token.
    let mut anon = Http::connect(&s.addr, "");
    let r = anon.request(
        "PUT",
        "/v2/workflows/hooks/defaultUser/wfr_h/evt_1?x=1",
        &[("Content-Type", "text/plain")],
        b"from outside",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        anon.post("/v2/workflows/hooks/someoneElse/wfr_h/evt_1", b"")
            .status,
        404
    );
    let mut c = s.qstash();
    let wait = json!({"url": sink.url("/wf"), "timeout": "1h", "step": {"stepId": 1, "stepType": "WaitForWebhook", "stepName": "hook", "concurrent": 1}});
    let r = c.request(
        "POST",
        "/v2/wait/evt_1",
        &[("Upstash-Workflow-RunId", "wfr_h")],
        wait.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200);
    let got = sink.wait_for(10, "the webhook step", |g| !g.is_empty());
    let history = got[0].json();
    let last = history.as_array().and_then(|a| a.last()).expect("history");
    let step: Value = serde_json::from_slice(
        &STANDARD
            .decode(last["body"].as_str().expect("b"))
            .expect("b64"),
    )
    .expect("json");
    let out: Value = serde_json::from_slice(
        &STANDARD
            .decode(step["out"].as_str().expect("out"))
            .expect("b64"),
    )
    .expect("json");
    assert_eq!(out["method"], "PUT");
    assert_eq!(
        out["url"],
        "/v2/workflows/hooks/defaultUser/wfr_h/evt_1?x=1"
    );
    assert_eq!(
        STANDARD
            .decode(out["body"].as_str().expect("body"))
            .expect("b64"),
        b"from outside"
    );
    assert_eq!(out["header"]["Content-Type"], json!(["text/plain"]));
}

#[test]
fn a_queue_waits_for_callbacks_and_redacted_fields_stay_hidden() {
    let dir = TempDir::new("dl-qcb");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    // The first message's callback takes 300 ms; the queue's next message waits for it.
    let cb = sink.url("/sleep/300/cb");
    let r = c.request(
        "POST",
        &format!("/v2/enqueue/cbq/{}", sink.url("/q1")),
        &[("Upstash-Callback", &cb)],
        b"1",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    c.request(
        "POST",
        &format!("/v2/enqueue/cbq/{}", sink.url("/q2")),
        &[],
        b"2",
    );
    let got = sink.wait_for(10, "the second queued message", |g| {
        g.iter().any(|r| r.target == "/q2")
    });
    let cb_at = got
        .iter()
        .find(|r| r.target == "/sleep/300/cb")
        .expect("callback")
        .at;
    let q2_at = got.iter().find(|r| r.target == "/q2").expect("q2").at;
    assert!(
        q2_at >= cb_at + Duration::from_millis(290),
        "the queue let the next message out before the callback finished"
    );

    // Redaction: the API shows a hash, the destination gets the real values.
    let r = publish(
        &mut c,
        &sink.url("/secret"),
        &[
            ("Upstash-Redact-Fields", "body, header[X-Secret]"),
            ("Upstash-Forward-X-Secret", "hunter2"),
            ("Upstash-Forward-X-Plain", "visible"),
            ("Upstash-Delay", "1s"),
        ],
        b"card=4111",
    );
    let id = r.json()["messageId"].as_str().expect("id").to_string();
    let m = c.get(&format!("/v2/messages/{id}")).json();
    let hash = |v: &[u8]| -> String {
        Sha256::digest(v)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    assert_eq!(m["body"], format!("REDACTED:{}", hash(b"card=4111")));
    assert_eq!(
        m["header"]["X-Secret"],
        json!([format!("REDACTED:{}", hash(b"hunter2"))])
    );
    assert_eq!(m["header"]["X-Plain"], json!(["visible"]));
    let got = sink.wait_for(10, "the redacted message", |g| {
        g.iter().any(|r| r.target == "/secret")
    });
    let d = got.iter().find(|r| r.target == "/secret").expect("secret");
    assert_eq!(d.body, b"card=4111");
    assert_eq!(d.header("x-secret"), Some("hunter2"));
    let r = publish(
        &mut c,
        &sink.url("/x"),
        &[("Upstash-Redact-Fields", "everything")],
        b"",
    );
    assert_eq!(r.status, 400);
}

#[test]
fn the_maximum_message_size_bounds_bodies_and_cuts_responses() {
    let dir = TempDir::new("dl-max");
    let sink = Sink::start();
    let s = Server::try_start_env(
        dir.path(),
        &[
            "--qstash-token",
            QSTASH_TOKEN,
            "--max-message-bytes",
            "1000",
        ],
        &[],
    )
    .expect("start");
    let mut c = s.qstash();
    let r = publish(&mut c, &sink.url("/x"), &[], &[b'a'; 2000]);
    assert_eq!(r.status, 413);
    assert!(r.json()["error"].is_string());
    // A 5,000-byte answer reaches the callback cut to the maximum message size.
    let cb = sink.url("/cb");
    let r = publish(
        &mut c,
        &sink.url("/big/5000"),
        &[("Upstash-Callback", &cb)],
        b"small",
    );
    assert_eq!(r.status, 200);
    let got = sink.wait_for(10, "the callback", |g| g.iter().any(|r| r.target == "/cb"));
    let body = got.iter().find(|r| r.target == "/cb").expect("cb").json();
    let response = STANDARD
        .decode(body["body"].as_str().expect("body"))
        .expect("b64");
    assert_eq!(response.len(), 1000);
}

#[test]
fn workflow_dlq_lists_resumes_restarts_and_calls_the_failure_function_again() {
    let dir = TempDir::new("dl-wfdlq");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let wf = sink.url("/wf");
    let fail = sink.url("/status/500");
    let fcb = sink.url("/status/502");
    let step_headers = |init: &'static str| {
        vec![
            ("Upstash-Workflow-RunId", "wfr_d1"),
            ("Upstash-Workflow-Init", init),
            ("Upstash-Workflow-Url", wf.as_str()),
            ("Upstash-Forward-Upstash-Workflow-Sdk-Version", "1"),
            ("Upstash-Retries", "0"),
            ("Upstash-Failure-Callback", fcb.as_str()),
            ("Upstash-Failure-Callback-Retries", "0"),
            ("Upstash-Label", "nightly"),
        ]
    };
    // The run's first step is delivered; its second fails for good and enters the DLQ.
    let r = publish(&mut c, &wf, &step_headers("true"), b"{\"start\":1}");
    assert_eq!(r.status, 200, "{}", r.text());
    sink.wait_for(10, "the first step", |g| {
        g.iter().any(|r| r.target == "/wf")
    });
    let step = br#"{"stepId":1,"stepName":"a","stepType":"Run","out":"1","concurrent":1}"#;
    let r = publish(&mut c, &fail, &step_headers("false"), step);
    let failed_id = r.json()["messageId"].as_str().expect("id").to_string();
    // A message outside any run fails too: the workflow view leaves it out.
    publish(&mut c, &fail, &[("Upstash-Retries", "0")], b"plain");
    // Three entries: the step, the plain message, and the failure function's call.
    poll(10, "all three failures in the DLQ", || {
        c.get("/v2/dlq").json()["messages"].as_array().map(Vec::len) == Some(3)
    });
    poll(10, "the failure function to fail", || {
        c.get("/v2/dlq?source=workflow").json()["messages"][0]["failureCallbackInfo"]["state"]
            == "CALLBACK_FAIL"
    });
    let list = c.get("/v2/dlq?source=workflow").json();
    let entries = list["messages"].as_array().expect("messages");
    assert_eq!(entries.len(), 1, "{list}");
    let e = &entries[0];
    assert_eq!(e["messageId"], failed_id.as_str());
    assert_eq!(e["workflowRunId"], "wfr_d1");
    assert_eq!(e["workflowUrl"], wf.as_str());
    assert!(e["workflowCreatedAt"].as_u64().is_some(), "{e}");
    assert_eq!(e["failureCallback"], fcb.as_str());
    assert_eq!(e["failureCallbackInfo"]["responseStatus"], 502);
    assert_eq!(e["label"], "nightly");
    assert_eq!(e["responseStatus"], 500);
    let dlq_id = e["dlqId"].as_str().expect("dlqId").to_string();
    // The same list through the workflow routes, and its filters.
    assert_eq!(
        c.get("/v2/workflows/dlq").json()["messages"],
        list["messages"]
    );
    let none = c.get("/v2/dlq?source=workflow&workflowRunId=other").json();
    assert_eq!(none["messages"], json!([]));
    let by_state = c.get("/v2/dlq?source=workflow&failureFunctionState=CALLBACK_FAIL");
    assert_eq!(
        by_state.json()["messages"].as_array().map(Vec::len),
        Some(1)
    );
    // The run shows as failed, with its DLQ entry and the failed step.
    let logs = c.get("/v2/workflows/events?workflowRunId=wfr_d1").json();
    let run = &logs["runs"][0];
    assert_eq!(run["workflowState"], "RUN_FAILED", "{logs}");
    assert_eq!(run["dlqId"], dlq_id.as_str());
    assert_eq!(
        run["steps"][1]["steps"][0]["state"], "STEP_FAILED",
        "{logs}"
    );

    // The failure function again: one more call with the run's ids in its body.
    let r = c.post(&format!("/v2/workflows/dlq/callback/{dlq_id}"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["workflowRunId"], "wfr_d1");
    let got = sink.wait_for(10, "the second failure call", |g| {
        g.iter().filter(|r| r.target == "/status/502").count() == 2
    });
    let call = got
        .iter()
        .rev()
        .find(|r| r.target == "/status/502")
        .expect("fcb");
    assert_eq!(call.json()["dlqId"], dlq_id.as_str());
    assert_eq!(call.json()["workflowRunId"], "wfr_d1");
    assert_eq!(
        STANDARD
            .decode(call.json()["sourceBody"].as_str().expect("sourceBody"))
            .expect("b64"),
        b"{\"start\":1}"
    );

    // Unknown ids and wrong routes are refused with JSON errors.
    let r = c.post("/v2/workflows/dlq/resume?dlqIds=nope", b"");
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.json()["error"].is_string());
    assert_eq!(c.post("/v2/workflows/dlq/nope/x", b"").status, 404);
    assert_eq!(c.request("PUT", "/v2/workflows/dlq", &[], b"").status, 405);

    // Resume: the same run id from the failed step, with the steps before it kept.
    let before = Instant::now();
    let r = c.request(
        "POST",
        &format!("/v2/workflows/dlq/resume?dlqIds={dlq_id}"),
        &[("Upstash-Retries", "0")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let resumed = r.json();
    assert_eq!(resumed["cursor"], "");
    assert_eq!(resumed["workflowRuns"][0]["workflowRunId"], "wfr_d1");
    let created = resumed["workflowRuns"][0]["workflowCreatedAt"]
        .as_u64()
        .expect("createdAt");
    let got = sink.wait_for(10, "the resumed step", |g| {
        g.iter()
            .filter(|r| r.target == "/status/500" && r.at > before)
            .count()
            == 1
    });
    let again = got
        .iter()
        .find(|r| r.target == "/status/500" && r.at > before)
        .expect("resumed");
    assert_eq!(again.header("upstash-workflow-runid"), Some("wfr_d1"));
    assert_eq!(
        again.header("upstash-workflow-createdat"),
        Some(created.to_string().as_str())
    );
    let history = again.json();
    let history = history.as_array().expect("history");
    assert_eq!(history.len(), 2, "the initial payload and the failed step");
    let body = |h: &Value| {
        STANDARD
            .decode(h["body"].as_str().expect("b"))
            .expect("b64")
    };
    assert_eq!(body(&history[0]), b"{\"start\":1}");
    assert_eq!(body(&history[1]), step);
    // The old entry is gone; the resumed step failed again into a new one.
    let new_id = {
        let mut id = String::new();
        poll(10, "the resumed step's DLQ entry", || {
            let l = c.get("/v2/workflows/dlq").json();
            id = l["messages"][0]["dlqId"].as_str().unwrap_or("").to_string();
            l["messages"].as_array().map(Vec::len) == Some(1) && id != dlq_id
        });
        id
    };
    assert_eq!(c.get(&format!("/v2/dlq/{dlq_id}")).status, 404);

    // Restart under a new id: the initial payload to the workflow URL, nothing else.
    let before = Instant::now();
    let r = c.request(
        "POST",
        &format!("/v2/workflows/dlq/restart/{new_id}"),
        &[("Upstash-Workflow-RunId", "wfr_d2")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["workflowRunId"], "wfr_d2");
    let got = sink.wait_for(10, "the restarted run", |g| {
        g.iter().any(|r| r.target == "/wf" && r.at > before)
    });
    let fresh = got
        .iter()
        .find(|r| r.target == "/wf" && r.at > before)
        .expect("restart");
    assert_eq!(fresh.header("upstash-workflow-runid"), Some("wfr_d2"));
    assert_eq!(fresh.header("upstash-workflow-sdk-version"), Some("1"));
    let history = fresh.json();
    assert_eq!(history.as_array().map(Vec::len), Some(1));
    assert_eq!(body(&history[0]), b"{\"start\":1}");
    assert_eq!(c.get("/v2/workflows/dlq").json()["messages"], json!([]));
    // A taken id is refused, and changes nothing.
    publish(&mut c, &fail, &step_headers("false"), step);
    let mut last = String::new();
    poll(10, "another failure", || {
        let l = c.get("/v2/workflows/dlq").json();
        last = l["messages"][0]["dlqId"].as_str().unwrap_or("").to_string();
        !last.is_empty()
    });
    let r = c.request(
        "POST",
        &format!("/v2/workflows/dlq/resume/{last}"),
        &[("Upstash-Workflow-RunId", "wfr_d2")],
        b"",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(c.get(&format!("/v2/dlq/{last}")).status, 200);
    let r = c.request(
        "DELETE",
        &format!("/v2/workflows/dlq?dlqIds={last}"),
        &[],
        b"",
    );
    assert_eq!(r.json()["deleted"], 1);

    // All of it replays: the restarted run keeps its history after a restart.
    drop(c);
    drop(s);
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let logs = c.get("/v2/workflows/events?workflowRunId=wfr_d2").json();
    assert_eq!(logs["runs"][0]["workflowState"], "RUN_STARTED", "{logs}");
    assert_eq!(
        c.get("/v2/workflows/runs/wfr_d2")
            .json()
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(c.get("/v2/workflows/dlq").json()["messages"], json!([]));
}

/// Issue 15: the delivery state that grows with use has bounds. A full DLQ lets its oldest
/// entry go (by a logged removal, so a restart agrees); waits, lookback notifications and
/// deduplication ids past their bound are refused with 429 and a text that names the setting.
#[test]
fn the_delivery_state_is_bounded() {
    let dir = TempDir::new("dl-bounds");
    let sink = Sink::start();
    let bounds = [
        "--dlq-max",
        "2",
        "--waiters-max",
        "1",
        "--notifications-max",
        "1",
        "--dedup-max",
        "1",
    ];
    let s = Server::start_delivery_with(dir.path(), &bounds);
    let mut c = s.qstash();
    // DLQ: three failures, two entries, the first one gone.
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = publish(
            &mut c,
            &sink.url("/status/500"),
            &[("Upstash-Retries", "0")],
            format!("fail {i}").as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(r.json()["messageId"].as_str().expect("id").to_string());
        let want = i + 1;
        poll(10, "the failure to reach the DLQ", || {
            let all = c.get("/v2/dlq").json()["messages"].clone();
            let listed: Vec<String> = all
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["messageId"].as_str().map(str::to_string))
                .collect();
            listed.contains(&ids[i]) && listed.len() == want.min(2)
        });
    }
    let in_dlq = |c: &mut Http| -> Vec<String> {
        let all = c.get("/v2/dlq").json()["messages"].clone();
        let mut v: Vec<String> = all
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["messageId"].as_str().map(str::to_string))
            .collect();
        v.sort();
        v
    };
    let mut newest = ids[1..].to_vec();
    newest.sort();
    assert_eq!(in_dlq(&mut c), newest, "the oldest entry left");

    // Waits: one open at most.
    let wait = |c: &mut Http, event: &str| {
        let body = json!({"url": sink.url("/wf"), "timeout": "1h"}).to_string();
        c.request("POST", &format!("/v2/wait/{event}"), &[], body.as_bytes())
    };
    assert_eq!(wait(&mut c, "a").status, 200);
    let r = wait(&mut c, "b");
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        r.json()["error"],
        "too many open waits: this server holds at most 1 (its --waiters-max setting)"
    );

    // Lookback notifications: one kept at most; the same one again replaces it.
    assert_eq!(c.post("/v2/notify/wfr_1/e", b"1").status, 200);
    assert_eq!(c.post("/v2/notify/wfr_1/e", b"2").status, 200);
    let r = c.post("/v2/notify/wfr_2/e", b"3");
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("--notifications-max")));

    // Deduplication ids: one in its window at most; a repeat is still answered as such.
    let dedup = |c: &mut Http, id: &str| {
        publish(
            c,
            &sink.url("/ok"),
            &[("Upstash-Deduplication-Id", id), ("Upstash-Delay", "1h")],
            b"x",
        )
    };
    assert_eq!(dedup(&mut c, "one").status, 200);
    assert_eq!(dedup(&mut c, "one").status, 202, "a repeat is deduplicated");
    let r = dedup(&mut c, "two");
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("--dedup-max")));

    // The DLQ removal was logged: a restart (with the bounds lifted) shows the same entries.
    drop(c);
    s.terminate();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    assert_eq!(in_dlq(&mut c), newest, "replay keeps the removal");
}

/// A misspelt filter on a list, bulk delete or bulk cancel is refused with 400, never ignored:
/// `DELETE /v2/dlq?labeel=x` used to delete the whole DLQ (issue 18).
#[test]
fn unknown_filters_are_refused_never_ignored() {
    let dir = TempDir::new("dl-filters");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    for i in 0..2 {
        let r = publish(
            &mut c,
            &sink.url(&format!("/nonretryable/{i}")),
            &[("Upstash-Label", "keep")],
            b"x",
        );
        assert_eq!(r.status, 200);
    }
    let delayed = publish(
        &mut c,
        &sink.url("/later"),
        &[("Upstash-Delay", "1h")],
        b"y",
    );
    assert_eq!(delayed.status, 200);
    poll(10, "two DLQ entries", || {
        c.get("/v2/dlq").json()["messages"]
            .as_array()
            .is_some_and(|m| m.len() == 2)
    });
    for (method, path) in [
        ("DELETE", "/v2/dlq?labeel=keep"),
        ("GET", "/v2/dlq?topicNam=x"),
        ("POST", "/v2/dlq/retry?urll=x"),
        ("DELETE", "/v2/messages?topicNme=x"),
        ("GET", "/v2/logs?hots=x"),
        ("GET", "/v2/events?stat=DELIVERED"),
        ("GET", "/v2/workflows/events?workflowRunID=x"),
        ("DELETE", "/v2/workflows/runs?lable=x"),
        ("DELETE", "/v2/workflows/dlq?workflowRunIdd=x"),
    ] {
        let r = c.request(method, path, &[], b"");
        assert_eq!(r.status, 400, "{method} {path}: {}", r.text());
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.starts_with("unknown filter '"), "{method} {path}: {e}");
    }
    // Nothing was deleted or cancelled by the refused requests.
    assert_eq!(
        c.get("/v2/dlq").json()["messages"].as_array().map(Vec::len),
        Some(2)
    );
    let id = delayed.json()["messageId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(c.get(&format!("/v2/messages/{id}")).status, 200);
    // The names the SDKs send still work: the DLQ by label, the logs by host and path.
    let r = c.get("/v2/dlq?label=keep&count=1");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["messages"].as_array().map(Vec::len), Some(1));
    let host = sink
        .url("/")
        .split("://")
        .nth(1)
        .and_then(|h| h.split('/').next())
        .unwrap_or_default()
        .to_string();
    let events = c
        .get(&format!("/v2/events?host={host}&path=/nonretryable/0"))
        .json();
    let events = events["events"].as_array().cloned().unwrap_or_default();
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e["url"]
        .as_str()
        .is_some_and(|u| u.ends_with("/nonretryable/0"))));
    assert_eq!(
        c.get("/v2/events?host=elsewhere.example").json()["events"]
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    // The logs by caller and flow-control key; entries show both.
    let keyed = publish(
        &mut c,
        &sink.url("/keyed"),
        &[
            ("Upstash-Flow-Control-Key", "fk1"),
            ("Upstash-Flow-Control-Value", "parallelism=1"),
            ("Upstash-Delay", "1h"),
        ],
        b"z",
    );
    assert_eq!(keyed.status, 200, "{}", keyed.text());
    let by_key = c.get("/v2/logs?flowControlKey=fk1").json();
    let by_key = by_key["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(by_key.len(), 1, "{by_key:?}");
    assert_eq!(by_key[0]["flowControlKey"], "fk1");
    assert_eq!(by_key[0]["callerIP"], "127.0.0.1");
    let by_ip = c.get("/v2/logs?callerIp=127.0.0.1").json()["events"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    assert!(by_ip > 1);
    assert_eq!(
        c.get("/v2/logs?callerIp=10.9.9.9").json()["events"]
            .as_array()
            .map(Vec::len),
        Some(0)
    );
}

/// Workflow runs by label: the run logs, and bulk cancel by label, caller and flow-control
/// key (issue 18); `count` caps a bulk cancel.
#[test]
fn workflow_runs_filter_by_label_caller_and_flow_key() {
    let dir = TempDir::new("dl-run-filters");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let wf = sink.url("/wf");
    for (id, label, key) in [
        ("wfr_a", "blue", "k1"),
        ("wfr_b", "blue", "k2"),
        ("wfr_c", "green", "k1"),
        ("wfr_d", "green", "k2"),
    ] {
        let r = publish(
            &mut c,
            &wf,
            &[
                ("Upstash-Workflow-RunId", id),
                ("Upstash-Workflow-Init", "true"),
                ("Upstash-Label", label),
                ("Upstash-Flow-Control-Key", key),
                ("Upstash-Flow-Control-Value", "parallelism=1"),
                ("Upstash-Delay", "1h"),
            ],
            b"{}",
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let ids = |v: &Value| -> Vec<String> {
        let mut ids: Vec<String> = v["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["workflowRunId"].as_str().map(str::to_string))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(&c.get("/v2/workflows/events?label=blue").json()),
        ["wfr_a", "wfr_b"]
    );
    let cancel = |c: &mut Http, q: &str| {
        c.request("DELETE", &format!("/v2/workflows/runs?{q}"), &[], b"")
            .json()
    };
    assert_eq!(
        cancel(&mut c, "label=green&flowControlKey=k2"),
        json!({"cancelled": 1})
    );
    assert_eq!(cancel(&mut c, "callerIp=10.0.0.1"), json!({"cancelled": 0}));
    assert_eq!(
        cancel(&mut c, "callerIp=127.0.0.1&count=2"),
        json!({"cancelled": 2})
    );
    assert_eq!(cancel(&mut c, "label=blue"), json!({"cancelled": 0}));
    // The label filter still finds the runs after they ended.
    assert_eq!(
        ids(&c.get("/v2/workflows/events?label=green").json()),
        ["wfr_c", "wfr_d"]
    );
}

/// The hosted service's LLM routes (issue 18): `/v2/publish/api/llm` and the OpenAI-style
/// `/llm/v1/chat/completions` answer 501 with what to do instead, and publish nothing.
#[test]
fn llm_routes_answer_501_with_what_to_do_instead() {
    let dir = TempDir::new("dl-llm");
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    for path in ["/v2/publish/api/llm", "/llm/v1/chat/completions"] {
        let r = c.post(path, br#"{"model":"m","messages":[]}"#);
        assert_eq!(r.status, 501, "{path}");
        let e = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(
            e.contains("publish to your model provider's URL"),
            "{path}: {e}"
        );
    }
    assert_eq!(c.get("/v2/logs").json()["events"], serde_json::json!([]));
}

/// `POST /v2/trigger/<url>` and `POST /v2/batch/trigger` (issue 18) start a run as the
/// workflow SDK's trigger does: the workflow URL gets the run's first step, with its run id
/// (given, or a new `wfr_` one) and the initial payload; a known run id is a duplicate.
/// tests/node/workflow.mjs runs such runs to their end through the SDK's `serve`.
#[test]
fn trigger_routes_start_workflow_runs() {
    let dir = TempDir::new("dl-trigger");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let wf = sink.url("/wf");
    let r = c.request(
        "POST",
        &format!("/v2/trigger/{wf}"),
        &[("Upstash-Workflow-RunId", "wfr_given")],
        b"{\"n\":1}",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["workflowRunId"], "wfr_given");
    assert!(r.json()["workflowCreatedAt"]
        .as_u64()
        .is_some_and(|t| t > 0));
    let got = sink.wait_for(10, "the first step", |g| !g.is_empty());
    assert_eq!(got[0].header("upstash-workflow-runid"), Some("wfr_given"));
    assert_eq!(got[0].header("upstash-workflow-sdk-version"), Some("1"));
    let steps = got[0].json();
    assert_eq!(
        STANDARD
            .decode(steps[0]["body"].as_str().expect("body"))
            .expect("b64"),
        b"{\"n\":1}"
    );
    let batch = json!([
        {"destination": wf, "body": "{}"},
        {"destination": wf, "body": "{}", "headers": {"Upstash-Workflow-RunId": "wfr_given"}},
        {"body": "{}"},
    ]);
    let r = c.post("/v2/batch/trigger", batch.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let items = r.json();
    assert!(items[0]["workflowRunId"]
        .as_str()
        .is_some_and(|id| id.starts_with("wfr_") && id != "wfr_given"));
    assert_eq!(items[1]["workflowRunId"], "wfr_given");
    assert_eq!(items[1]["deduplicated"], true);
    assert!(items[2]["error"].as_str().is_some());
    for (method, path, status) in [
        ("POST", "/v2/trigger/", 400),
        ("POST", "/v2/trigger/not-a-url", 400),
        ("GET", &*format!("/v2/trigger/{wf}"), 405),
    ] {
        assert_eq!(
            c.request(method, path, &[], b"").status,
            status,
            "{method} {path}"
        );
    }
}

/// The delivery API's read-only token (issue 18; `--qstash-read-only-token`, else generated
/// and printed): GET routes answer, anything else is 403 and changes nothing, and it cannot
/// read the signing keys.
#[test]
fn read_only_token_reads_and_nothing_more() {
    let dir = TempDir::new("dl-readonly");
    let sink = Sink::start();
    let s = Server::start_delivery_with(dir.path(), &["--qstash-read-only-token", "qro-test"]);
    let mut owner = s.qstash();
    let r = publish(
        &mut owner,
        &sink.url("/later"),
        &[("Upstash-Delay", "1h")],
        b"x",
    );
    let id = r.json()["messageId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut ro = Http::connect(&s.addr, "qro-test");
    assert_eq!(ro.get(&format!("/v2/messages/{id}")).status, 200);
    assert_eq!(ro.get("/v2/logs").status, 200);
    assert_eq!(ro.get("/v2/dlq").status, 200);
    for (method, path) in [
        ("DELETE", format!("/v2/messages/{id}")),
        ("POST", format!("/v2/publish/{}", sink.url("/x"))),
        ("DELETE", "/v2/dlq".to_string()),
        ("PATCH", "/v2/topics/g".to_string()),
        ("GET", "/v2/keys".to_string()),
        ("POST", "/v2/keys/rotate".to_string()),
    ] {
        let r = ro.request(method, &path, &[], b"");
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
        assert!(r.json()["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("forbidden")));
    }
    assert_eq!(
        owner.get(&format!("/v2/messages/{id}")).status,
        200,
        "still pending"
    );
    // A token that is neither is 401 as before; the two tokens must differ.
    assert_eq!(Http::connect(&s.addr, "nope").get("/v2/logs").status, 401);

    let other = TempDir::new("dl-readonly-same");
    let same = Server::try_start_env(
        other.path(),
        &["--qstash-token", "same", "--qstash-read-only-token", "same"],
        &[],
    );
    assert!(same.is_err_and(|e| e.contains("must differ")));
}

/// `DELETE /v2/workflows/dlq/callback/<dlqId>` (issue 18) cancels a failure callback while it
/// is in progress: it shows as failed then, can be called again, and a second cancel (nothing
/// in progress) is 400.
#[test]
fn a_failure_callback_in_progress_can_be_cancelled() {
    let dir = TempDir::new("dl-fcb-cancel");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let wf = sink.url("/wf");
    let fcb = sink.url("/status/502");
    let headers = |init: &'static str| {
        vec![
            ("Upstash-Workflow-RunId", "wfr_fc"),
            ("Upstash-Workflow-Init", init),
            ("Upstash-Forward-Upstash-Workflow-Sdk-Version", "1"),
            ("Upstash-Retries", "0"),
            ("Upstash-Failure-Callback", fcb.as_str()),
            // The failure call fails once, then waits an hour for its next attempt.
            ("Upstash-Failure-Callback-Retries", "3"),
            ("Upstash-Failure-Callback-Retry-Delay", "3600000"),
        ]
    };
    publish(&mut c, &wf, &headers("true"), b"{}");
    let step = br#"{"stepId":1,"stepName":"a","stepType":"Run","out":"1","concurrent":1}"#;
    publish(&mut c, &sink.url("/status/500"), &headers("false"), step);
    let state = |c: &mut Http| {
        c.get("/v2/workflows/dlq").json()["messages"][0]["failureCallbackInfo"]["state"].clone()
    };
    poll(10, "the failure call to be retrying", || {
        state(&mut c) == "CALLBACK_INPROGRESS"
            && sink.received().iter().any(|r| r.target == "/status/502")
    });
    let dlq_id = c.get("/v2/workflows/dlq").json()["messages"][0]["dlqId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let path = format!("/v2/workflows/dlq/callback/{dlq_id}");
    let r = c.request("DELETE", &path, &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(state(&mut c), "CALLBACK_FAIL");
    let again = c.request("DELETE", &path, &[], b"");
    assert_eq!(again.status, 400, "{}", again.text());
    assert_eq!(
        c.request("DELETE", "/v2/workflows/dlq/callback/nope", &[], b"")
            .status,
        404
    );
    // Called again, it is in progress again.
    assert_eq!(c.post(&path, b"").status, 200);
    assert_eq!(state(&mut c), "CALLBACK_INPROGRESS");
}

/// `context.invoke` (issue 18): a publish with `Upstash-Workflow-Invoke: true` starts the
/// invoked run with the payload inside the invoker's request, and when that run is cancelled
/// or fails for good the invoker's run gets the Invoke step with `out` = `{"body", "isFailed",
/// "isCanceled"}`, delivered to the invoker's URL. (tests/node/workflow.mjs runs a finishing
/// invoke through the SDK.) A publisher cannot plant an invoker of its own.
#[test]
fn invoked_runs_answer_their_invoker() {
    let dir = TempDir::new("dl-invoke");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let parent = sink.url("/p");
    let r = publish(
        &mut c,
        &parent,
        &[
            ("Upstash-Workflow-RunId", "wfr_p"),
            ("Upstash-Workflow-Init", "true"),
        ],
        b"{}",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let invoke = |c: &mut Http, child: &str, url: &str, step_id: u32| {
        let request = json!({
            "body": "{\"x\":1}",
            "headers": {
                "Upstash-Workflow-Runid": ["wfr_p"],
                "Upstash-Forward-Upstash-Workflow-Sdk-Version": ["1"],
            },
            "workflowRunId": "wfr_p",
            "workflowRunCreatedAt": 1,
            "workflowUrl": parent,
            "step": {"stepId": step_id, "stepName": "call", "stepType": "Invoke", "concurrent": 1},
        });
        publish(
            c,
            url,
            &[
                ("Upstash-Workflow-RunId", child),
                ("Upstash-Workflow-Init", "true"),
                ("Upstash-Workflow-Invoke", "true"),
                ("Upstash-Retries", "0"),
            ],
            request.to_string().as_bytes(),
        )
    };
    let child_url = sink.url("/child");
    assert_eq!(invoke(&mut c, "wfr_c1", &child_url, 1).status, 200);
    let got = sink.wait_for(10, "the invoked run's first step", |g| {
        g.iter().any(|r| r.target == "/child")
    });
    let first = got.iter().find(|r| r.target == "/child").expect("child");
    let payload = STANDARD
        .decode(first.json()[0]["body"].as_str().expect("body"))
        .expect("b64");
    assert_eq!(
        payload, b"{\"x\":1}",
        "the invoked run starts with the inner payload"
    );
    // Cancelled: the invoker gets isCanceled.
    let r = c.request("DELETE", "/v2/workflows/runs/wfr_c1?cancel=true", &[], b"");
    assert_eq!(r.status, 200);
    let out_of = |g: &[Received], step: u32| {
        g.iter()
            .filter(|r| r.target == "/p")
            .flat_map(|r| r.json().as_array().cloned().unwrap_or_default())
            .filter_map(|s| {
                let b = STANDARD.decode(s["body"].as_str()?).ok()?;
                let v: Value = serde_json::from_slice(&b).ok()?;
                (v["stepId"] == step && v["stepType"] == "Invoke").then(|| v["out"].clone())
            })
            .next_back()
    };
    let got = sink.wait_for(10, "the invoker's cancelled result", |g| {
        out_of(g, 1).is_some()
    });
    let out: Value =
        serde_json::from_str(out_of(&got, 1).expect("out").as_str().expect("s")).expect("out json");
    assert_eq!(out, json!({"body": null, "isCanceled": true}));
    // Failed for good: the invoker gets isFailed with the failing answer's body.
    assert_eq!(invoke(&mut c, "wfr_c2", &child_url, 2).status, 200);
    let step = br#"{"stepId":1,"stepName":"s","stepType":"Run","out":"1","concurrent":1}"#;
    publish(
        &mut c,
        &sink.url("/status/500"),
        &[
            ("Upstash-Workflow-RunId", "wfr_c2"),
            ("Upstash-Retries", "0"),
        ],
        step,
    );
    let got = sink.wait_for(10, "the invoker's failed result", |g| {
        out_of(g, 2).is_some()
    });
    let out: Value =
        serde_json::from_str(out_of(&got, 2).expect("out").as_str().expect("s")).expect("out json");
    assert_eq!(out["isFailed"], true, "{out}");
    // An invoke whose body is no invoker's request is refused; a planted invoker is dropped.
    let r = publish(
        &mut c,
        &child_url,
        &[
            ("Upstash-Workflow-RunId", "wfr_bad"),
            ("Upstash-Workflow-Init", "true"),
            ("Upstash-Workflow-Invoke", "true"),
        ],
        b"not json",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let planted = json!({"workflowRunId": "wfr_p", "workflowUrl": parent, "headers": {}, "step": {"stepId": 9}});
    publish(
        &mut c,
        &child_url,
        &[
            ("Upstash-Workflow-RunId", "wfr_plain"),
            ("Upstash-Workflow-Init", "true"),
            ("Upstash-Workflow-Invoker", &planted.to_string()),
        ],
        b"{}",
    );
    c.request(
        "DELETE",
        "/v2/workflows/runs/wfr_plain?cancel=true",
        &[],
        b"",
    );
    let history = c.get("/v2/workflows/runs/wfr_p").json();
    let steps: Vec<Value> = history
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let b = STANDARD.decode(s["body"].as_str()?).ok()?;
            serde_json::from_slice(&b).ok()
        })
        .collect();
    assert!(
        steps.iter().any(|v| v["stepId"] == 2),
        "the check can see steps: {steps:?}"
    );
    assert!(
        !steps.iter().any(|v| v["stepId"] == 9),
        "no result for a planted invoker: {steps:?}"
    );
}

/// `--region` (issue 18): every delivery carries `Upstash-Region`, which the SDKs' receivers
/// in multi-region mode (`QSTASH_REGION`) pick their signing keys by; without it the header is
/// left out, as a single-region server should. Only the regions the SDKs know are taken.
#[test]
fn deliveries_carry_the_configured_region() {
    let dir = TempDir::new("dl-region");
    let sink = Sink::start();
    let s = Server::start_delivery_with(dir.path(), &["--region", "eu_central_1"]);
    let mut c = s.qstash();
    assert_eq!(publish(&mut c, &sink.url("/r"), &[], b"x").status, 200);
    let got = sink.wait_for(10, "the delivery", |g| !g.is_empty());
    assert_eq!(got[0].header("upstash-region"), Some("EU-CENTRAL-1"));
    drop(s);
    let other = TempDir::new("dl-noregion");
    let s = Server::start_delivery(other.path());
    let mut c = s.qstash();
    let sink = Sink::start();
    publish(&mut c, &sink.url("/r"), &[], b"x");
    let got = sink.wait_for(10, "the delivery", |g| !g.is_empty());
    assert_eq!(got[0].header("upstash-region"), None);
    let bad = TempDir::new("dl-badregion");
    let r = Server::try_start_env(bad.path(), &["--region", "mars-1"], &[]);
    assert!(r.is_err_and(|e| e.contains("invalid --region 'mars-1'")));
}

/// `PATCH /v2/topics/<name>` (issue 18): a URL group's default headers fill in what a publish
/// to the group leaves out (its own headers win), `Upstash-Header-Forward` among them; they
/// are checked as a publish's are, shown by GET, and kept across a restart.
#[test]
fn url_group_default_headers_fill_in_what_a_publish_leaves_out() {
    let dir = TempDir::new("dl-topic-headers");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let r = c.post(
        "/v2/topics/g/endpoints",
        json!({"endpoints": [{"url": sink.url("/g")}]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let defaults = json!({"headers": {
        "Upstash-Forward-Team": "blue",
        "Upstash-Header-Forward": "true",
        "Upstash-Retries": "0",
    }});
    let r = c.request(
        "PATCH",
        "/v2/topics/g",
        &[],
        defaults.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        c.get("/v2/topics/g").json()["headers"]["Upstash-Forward-Team"],
        "blue"
    );
    // The group's default, then the publish's own value.
    publish(&mut c, "g", &[("X-Req", "1")], b"one");
    publish(&mut c, "g", &[("Upstash-Forward-Team", "red")], b"two");
    let got = sink.wait_for(10, "both deliveries", |g| g.len() == 2);
    let by_body = |b: &[u8]| got.iter().find(|r| r.body == b).expect("delivery");
    assert_eq!(by_body(b"one").header("team"), Some("blue"));
    assert_eq!(
        by_body(b"one").header("x-req"),
        Some("1"),
        "Header-Forward from the group"
    );
    assert_eq!(by_body(b"two").header("team"), Some("red"));
    // Checked as a publish's, for a group that exists.
    let bad = json!({"headers": {"Upstash-Retries": "many"}});
    let r = c.request("PATCH", "/v2/topics/g", &[], bad.to_string().as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    let r = c.request(
        "PATCH",
        "/v2/topics/none",
        &[],
        defaults.to_string().as_bytes(),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(c.request("PATCH", "/v2/topics/g", &[], b"[]").status, 400);
    // Kept across a restart.
    drop(c);
    assert_eq!(s.terminate(), Some(0));
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    assert_eq!(
        c.get("/v2/topics/g").json()["headers"]["Upstash-Retries"],
        "0"
    );
}

/// Polls `ok` until it holds, for at most `secs` seconds.
fn wait_until(secs: u64, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Guards a panic on the delivery thread: an HTTP header map holds at most 32,768 entries and
/// panics past that, and a batch item may forward more (its headers are bounded by the
/// message's size only). The attempt panicked, no result came back, and the message stayed
/// in flight for good, holding one of the in-flight slots every delivery shares.
#[test]
fn a_message_forwarding_more_headers_than_a_request_holds_fails_and_the_others_go_on() {
    let dir = TempDir::new("dl-many-headers");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let mut headers: serde_json::Map<String, Value> = (0..33_000)
        .map(|i| (format!("Upstash-Forward-X-H{i}"), json!("v")))
        .collect();
    headers.insert("Upstash-Retries".into(), json!("0"));
    let body = json!([
        {"destination": sink.url("/many"), "headers": headers, "body": "x"},
        {"destination": sink.url("/fine"), "headers": {}, "body": "y"},
    ]);
    let r = c.post("/v2/batch", body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()[0]["messageId"]
        .as_str()
        .expect("the first item's id")
        .to_string();
    sink.wait_for(10, "the other message", |g| {
        g.iter().any(|r| r.target == "/fine")
    });
    let mut failed = Value::Null;
    poll(10, "the message to fail", || {
        failed = c
            .get(&format!("/v2/events?messageId={id}&state=FAILED"))
            .json();
        failed["events"].as_array().is_some_and(|e| e.len() == 1)
    });
    let error = failed["events"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("more headers"), "{failed}");
    assert!(sink.received().iter().all(|r| r.target != "/many"));
}

/// The error of message `id`'s failed attempt, once its FAILED event is there.
fn failure_of(c: &mut Http, id: &str) -> String {
    let mut failed = Value::Null;
    poll(15, "the message to fail", || {
        failed = c
            .get(&format!("/v2/events?messageId={id}&state=FAILED"))
            .json();
        failed["events"].as_array().is_some_and(|e| !e.is_empty())
    });
    failed["events"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Waits for message `id`'s DELIVERED event.
fn delivered(c: &mut Http, id: &str) {
    poll(15, "the message's delivery", || {
        let v = c
            .get(&format!("/v2/events?messageId={id}&state=DELIVERED"))
            .json();
        v["events"].as_array().is_some_and(|e| !e.is_empty())
    });
}

fn message_id(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["messageId"]
        .as_str()
        .expect("a message id")
        .to_string()
}

/// Guards the delivery client's redirects: 307 and 308 are followed with the method and the
/// body kept (and a Referer, as reqwest sent), credentials only within their origin, at most
/// `DELIVERY_REDIRECTS_MAX` times; any other 3xx is the destination's answer, a failed
/// attempt.
#[test]
fn a_307_or_308_is_followed_with_its_method_and_body_and_other_redirects_fail() {
    let dir = TempDir::new("dl-redirects");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let once = [("Upstash-Retries", "0"), ("Upstash-Method", "PUT")];
    message_id(&publish(
        &mut c,
        &sink.url("/status/307?location=/after307"),
        &once,
        b"b307",
    ));
    message_id(&publish(
        &mut c,
        &sink.url("/status/308?location=/after308"),
        &once,
        b"b308",
    ));
    let got = sink.wait_for(10, "both redirects followed", |g| {
        ["/after307", "/after308"]
            .iter()
            .all(|p| g.iter().any(|r| r.target == *p))
    });
    for (path, body, from) in [
        ("/after307", "b307", "/status/307?location=/after307"),
        ("/after308", "b308", "/status/308?location=/after308"),
    ] {
        let r = got.iter().find(|r| r.target == path).expect("followed");
        assert_eq!(r.method, "PUT");
        assert_eq!(r.body, body.as_bytes());
        assert_eq!(r.header("referer"), Some(sink.url(from).as_str()));
        assert!(r.header("upstash-signature").is_some());
    }

    // Credentials stay with their origin: kept on a redirect to the same host and port,
    // dropped on one to another.
    let other = Sink::start();
    let secret = [
        ("Upstash-Retries", "0"),
        ("Upstash-Forward-Authorization", "Bearer secret"),
    ];
    let away = format!("/status/307?location={}", other.url("/away"));
    message_id(&publish(&mut c, &sink.url(&away), &secret, b"x"));
    let home = "/status/307?location=/home";
    message_id(&publish(&mut c, &sink.url(home), &secret, b"x"));
    let away = other.wait_for(10, "the cross-origin redirect", |g| !g.is_empty());
    assert_eq!(away[0].header("authorization"), None);
    let got = sink.wait_for(10, "the same-origin redirect", |g| {
        g.iter().any(|r| r.target == "/home")
    });
    let home = got.iter().find(|r| r.target == "/home").expect("followed");
    assert_eq!(home.header("authorization"), Some("Bearer secret"));

    // The error of a message sent once to `path`.
    let failing = |c: &mut Http, path: &str| {
        let id = message_id(&publish(c, &sink.url(path), &once, b"x"));
        failure_of(c, &id)
    };
    assert!(failing(&mut c, "/status/302?location=/after302").contains("302"));
    assert!(sink.at("/after302").is_empty(), "a 302 is not followed");

    // A destination that redirects to itself for good: the first request and five more.
    assert!(failing(&mut c, "/status/308/loop?location=self").contains("308"));
    assert_eq!(sink.at("/status/308/loop").len(), 6);
}

/// Guards the delivery client's pool: one connection carries a series of deliveries to the
/// same destination; a destination that closes its connections, with `Connection: close` or
/// without a word between two requests, still gets each message once, at its first attempt.
#[test]
fn delivery_connections_are_reused_and_a_closed_one_is_replaced() {
    let dir = TempDir::new("dl-pool");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    // Each message's delivery is logged after its connection went back to the pool, so the
    // next message finds it there.
    let deliver = |c: &mut Http, path: &str, n: usize| {
        let id = message_id(&publish(
            c,
            &sink.url(path),
            &[("Upstash-Retries", "0")],
            b"x",
        ));
        delivered(c, &id);
        assert_eq!(sink.at(path).len(), n);
    };
    for i in 0..10 {
        deliver(&mut c, "/kept", i + 1);
    }
    assert_eq!(
        sink.connections(),
        1,
        "ten deliveries in a row, one connection"
    );

    for i in 0..3 {
        deliver(&mut c, "/close/a", i + 1);
    }
    // The first goes on the kept connection; each closes the one it came on.
    assert_eq!(
        sink.connections(),
        3,
        "after each Connection: close, a new connection"
    );

    for i in 0..3 {
        deliver(&mut c, "/hangup/a", i + 1);
        // The close reaches the pooled connection before the next message is due.
        std::thread::sleep(Duration::from_millis(200));
    }
    deliver(&mut c, "/kept", 11);
    assert_eq!(
        sink.connections(),
        7,
        "after each hang-up, a new connection"
    );
    for r in sink.received() {
        assert_eq!(r.header("upstash-retried"), Some("0"), "{}", r.target);
    }
}

/// Guards the delivery client's errors: a destination that answers after the message's
/// `Upstash-Timeout` is a timed-out attempt, one that refuses the connection says so, and a
/// body past the maximum is cut and the connection not reused (the next delivery opens one).
#[test]
fn a_slow_or_refusing_destination_fails_its_attempt_with_the_reason() {
    let dir = TempDir::new("dl-errors");
    let sink = Sink::start();
    let s = Server::start_delivery_with(dir.path(), &["--max-message-bytes", "100000"]);
    let mut c = s.qstash();
    let id = message_id(&publish(
        &mut c,
        &sink.url("/sleep/3000/slow"),
        &[("Upstash-Retries", "0"), ("Upstash-Timeout", "1s")],
        b"x",
    ));
    let t = Instant::now();
    assert!(failure_of(&mut c, &id).contains("timed out"));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "failed before the answer came"
    );

    let refused = format!("http://127.0.0.1:{}/x", free_port());
    let id = message_id(&publish(
        &mut c,
        &refused,
        &[("Upstash-Retries", "0")],
        b"x",
    ));
    let error = failure_of(&mut c, &id);
    assert!(error.starts_with("cannot connect"), "{error}");

    let id = message_id(&publish(
        &mut c,
        &sink.url("/big/500000"),
        &[("Upstash-Retries", "0")],
        b"x",
    ));
    delivered(&mut c, &id);
    let before = sink.connections();
    message_id(&publish(&mut c, &sink.url("/after-big"), &[], b"x"));
    sink.wait_for(10, "the next delivery", |g| {
        g.iter().any(|r| r.target == "/after-big")
    });
    assert_eq!(sink.connections(), before + 1);
}

/// Guards the executor's batches that hold both key-value requests and delivery work (attempts'
/// results, publishes, due messages): the key-value requests are answered first and the
/// delivery work runs after them, as a second part of the batch with its own log write. Across
/// a `kill -9`, every acknowledged write and every acknowledged publish survives, a read on
/// the writer's own connection always shows the write just acknowledged, and no message is
/// lost.
#[test]
fn kill_9_while_key_value_requests_and_deliveries_share_batches_loses_nothing_acknowledged() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = TempDir::new("dl-mixed");
    let sink = Sink::start();
    let data = dir.path().join("d");
    let s = Server::start_delivery(&data);
    let stop = Arc::new(AtomicBool::new(false));
    let writes: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let published: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut threads = Vec::new();
    for w in 0..3 {
        let (addr, stop, writes) = (s.addr.clone(), stop.clone(), writes.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = Http::connect(&addr, TOKEN);
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let (k, v) = (format!("w{w}k{i}"), format!("v{w}-{i}"));
                // A killed server shows up as a panic inside the client: stop quietly.
                let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let set = c.cmd_str(&["SET", &k, &v]);
                    if set != Canon::Str(b"OK".to_vec()) {
                        return Err(format!("SET answered {set:?}"));
                    }
                    let got = c.cmd_str(&["GET", &k]);
                    if got != Canon::Str(v.as_bytes().to_vec()) {
                        return Err(format!("GET {k} after SET {v} answered {got:?}"));
                    }
                    Ok(())
                }));
                match ok {
                    Ok(Ok(())) => writes.lock().unwrap().push((k, v)),
                    Ok(Err(e)) => panic!("{e}"),
                    Err(_) => return,
                }
                i += 1;
            }
        }));
    }
    for p in 0..2 {
        let (addr, stop, published, dest) = (
            s.addr.clone(),
            stop.clone(),
            published.clone(),
            sink.url(&format!("/m{p}")),
        );
        threads.push(std::thread::spawn(move || {
            let mut c = Http::connect(&addr, QSTASH_TOKEN);
            while !stop.load(Ordering::SeqCst) {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    publish(&mut c, &dest, &[], b"m")
                }));
                match r {
                    Ok(r) if r.status == 200 => {
                        let id = r.json()["messageId"].as_str().map(str::to_string);
                        published.lock().unwrap().push(id.expect("a message id"));
                    }
                    Ok(r) => panic!("publish answered {}: {}", r.status, r.text()),
                    Err(_) => return,
                }
            }
        }));
    }
    // Until deliveries and key-value requests have both gone on for a while.
    let t0 = Instant::now();
    while (sink.received().len() < 100
        || published.lock().unwrap().len() < 300
        || writes.lock().unwrap().len() < 300)
        && t0.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    s.kill9();
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("a client thread failed");
    }
    let (writes, published) = (
        writes.lock().unwrap().clone(),
        published.lock().unwrap().clone(),
    );
    assert!(
        writes.len() >= 300 && published.len() >= 300,
        "both loads ran"
    );
    let s = Server::start_delivery(&data);
    let mut c = s.client();
    for (k, v) in &writes {
        assert_eq!(
            c.cmd_str(&["GET", k]),
            Canon::Str(v.as_bytes().to_vec()),
            "acknowledged write of {k} lost"
        );
    }
    all_delivered(&sink, &published, "every acknowledged message delivered");
    drop(s);
}

/// Guards the publish path's header filter (which copies only the headers a message may
/// forward) through the path form and a batch item, whose names keep the case they were given
/// in: with `Upstash-Header-Forward` the caller's other headers reach the destination, never
/// its credentials, its framing or its `Upstash-*` configuration; without it none do.
#[test]
fn header_forward_passes_the_callers_headers_and_never_its_own() {
    let dir = TempDir::new("dl-header-forward");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let r = publish(
        &mut c,
        &sink.url("/path"),
        &[
            ("Upstash-Header-Forward", "true"),
            ("X-Custom", "c"),
            ("Content-Type", "text/plain"),
        ],
        b"by path",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = publish(
        &mut c,
        &sink.url("/plain"),
        &[("X-Custom", "c")],
        b"not forwarded",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let batch = json!([{
        "destination": sink.url("/batch"),
        "headers": {
            "Upstash-Header-Forward": "true",
            "X-Mixed-Case": "m",
            "AUTHORIZATION": "Bearer leak",
            "HOST": "elsewhere",
            "CONTENT-LENGTH": "999",
            "UPSTASH-RETRIES": "0",
        },
        "body": "by batch",
    }]);
    let r = c.post("/v2/batch", batch.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let got = sink.wait_for(10, "three deliveries", |g| g.len() == 3);
    let by_body = |b: &[u8]| got.iter().find(|r| r.body == b).expect("delivery");
    let path = by_body(b"by path");
    assert_eq!(path.header("x-custom"), Some("c"));
    assert_eq!(path.header("content-type"), Some("text/plain"));
    assert_eq!(
        path.header("authorization"),
        None,
        "the publish's credentials"
    );
    assert_eq!(path.header("upstash-header-forward"), None);
    assert_eq!(by_body(b"not forwarded").header("x-custom"), None);
    let batch = by_body(b"by batch");
    assert_eq!(batch.header("x-mixed-case"), Some("m"));
    assert_eq!(
        batch.header("authorization"),
        None,
        "the item's credentials"
    );
    assert_ne!(batch.header("host"), Some("elsewhere"));
    assert_eq!(batch.header("content-length"), Some("8"));
    assert_eq!(batch.header("upstash-retries"), None);
    drop(s);
}

/// Guards the callback nesting bound (`DELIVERY_CALLBACK_NESTING_MAX`, 8). A batch item's
/// headers could nest callbacks a thousand deep (`Upstash-Callback-Callback-...`, a few MB);
/// it was accepted, and its log record then stopped the restart: the log's reader refused it as
/// damaged, past its decoding depth. Now every door that takes a message's configuration
/// refuses it with 400 (a wait's and an invoke's headers too, which configure a message only
/// when the wait or the invoked run ends), and a message at the bound is kept across a restart.
#[test]
fn callbacks_nested_past_the_bound_are_refused_at_every_door() {
    let dir = TempDir::new("dl-nesting");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let max = 8;
    let r = c.post(
        "/v2/topics/g/endpoints",
        json!({"endpoints": [{"url": sink.url("/g")}]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // `Upstash-Callback`, `Upstash-Callback-Callback`, ... `levels` deep.
    let chain = |levels: usize| -> Vec<(String, String)> {
        (1..=levels)
            .map(|d| {
                (
                    format!("Upstash-{}Callback", "Callback-".repeat(d - 1)),
                    sink.url(&format!("/cb{d}")),
                )
            })
            .collect()
    };
    let check = |r: &Resp, door: &str, levels: usize| {
        if levels <= max {
            assert_eq!(r.status, 200, "{door} at {levels}: {}", r.text());
        } else {
            assert_eq!(r.status, 400, "{door} at {levels}: {}", r.text());
            let why = r.json()["error"].as_str().unwrap_or_default().to_string();
            assert!(why.contains("nest at most 8"), "{door}: {why}");
        }
    };
    // Headers: one past the bound (200 deep would pass hyper's limit on a request's head).
    for levels in [max, max + 1] {
        let h = chain(levels);
        let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let delayed = [hs.clone(), vec![("Upstash-Delay", "1h")]].concat();
        let r = publish(&mut c, &sink.url("/m"), &delayed, b"x");
        check(&r, "publish", levels);
        let r = c.request(
            "POST",
            &format!("/v2/enqueue/q/{}", sink.url("/m")),
            &hs,
            b"x",
        );
        check(&r, "enqueue", levels);
        let cron = [hs.clone(), vec![("Upstash-Cron", "0 0 1 1 *")]].concat();
        let r = c.request(
            "POST",
            &format!("/v2/schedules/{}", sink.url("/s")),
            &cron,
            b"",
        );
        check(&r, "schedule", levels);
        let wait = json!({"url": sink.url("/w")}).to_string();
        let r = c.request("POST", "/v2/wait/ev", &hs, wait.as_bytes());
        check(&r, "wait", levels);
    }
    // JSON: one past the bound and far past it (the thousand-deep case, smaller).
    for levels in [max, max + 1, 200] {
        let headers: serde_json::Map<String, Value> = chain(levels)
            .into_iter()
            .map(|(k, v)| (k, json!(v)))
            .chain([("Upstash-Delay".to_string(), json!("1h"))])
            .collect();
        let r = c.post(
            "/v2/batch",
            json!([{"destination": sink.url("/m"), "headers": headers}])
                .to_string()
                .as_bytes(),
        );
        assert_eq!(r.status, 200, "batch: {}", r.text());
        let item = &r.json()[0];
        if levels <= max {
            assert!(item["messageId"].is_string(), "batch: {item}");
        } else {
            let why = item["error"].as_str().unwrap_or_default();
            assert!(why.contains("nest at most 8"), "batch at {levels}: {item}");
        }
        let r = c.request(
            "PATCH",
            "/v2/topics/g",
            &[],
            json!({ "headers": headers }).to_string().as_bytes(),
        );
        check(&r, "URL group defaults", levels);
        let wait =
            json!({"url": sink.url("/w"), "timeoutUrl": sink.url("/t"), "timeoutHeaders": headers});
        let r = c.post("/v2/wait/ev2", wait.to_string().as_bytes());
        check(&r, "wait's timeout headers", levels);
    }
    // `context.invoke`: the invoker's headers configure the answer to it, when the invoked run
    // ends; they are refused at the invoke, not then.
    for levels in [max, max + 1] {
        let headers: serde_json::Map<String, Value> = chain(levels)
            .into_iter()
            .map(|(k, v)| (k, json!([v])))
            .collect();
        let request = json!({
            "body": "{}",
            "headers": headers,
            "workflowRunId": "wfr_p",
            "workflowRunCreatedAt": 1,
            "workflowUrl": sink.url("/p"),
            "step": {"stepId": 1, "stepName": "call", "stepType": "Invoke", "concurrent": 1},
        });
        let r = publish(
            &mut c,
            &sink.url("/child"),
            &[
                ("Upstash-Workflow-RunId", &format!("wfr_c{levels}")),
                ("Upstash-Workflow-Init", "true"),
                ("Upstash-Workflow-Invoke", "true"),
                ("Upstash-Delay", "1h"),
            ],
            request.to_string().as_bytes(),
        );
        check(&r, "invoke", levels);
    }
    // The message at the bound, with all its callbacks, is kept across a restart.
    let h = chain(max);
    let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let delayed = [hs, vec![("Upstash-Delay", "1h")]].concat();
    let id = message_id(&publish(&mut c, &sink.url("/kept"), &delayed, b"x"));
    drop(c);
    assert_eq!(s.terminate(), Some(0));
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let r = c.get(&format!("/v2/messages/{id}"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["callback"], sink.url("/cb1"), "{}", r.text());
}

/// Guards the delivery client's per-destination request parts (made once per URL and kept):
/// credentials in a destination URL become Basic authorization (percent-decoded), at every
/// attempt to it, not only the first; a message that forwards an Authorization of its own
/// keeps it; the Host header names the URL's port, and the path keeps its query.
#[test]
fn credentials_in_a_destination_url_become_basic_authorization_every_time() {
    let dir = TempDir::new("dl-basic");
    let sink = Sink::start();
    let s = Server::start_delivery(dir.path());
    let mut c = s.qstash();
    let with_user = sink
        .url("/auth?x=1")
        .replacen("http://", "http://ann:p%40ss@", 1);
    let plain = sink.url("/plain");
    for body in [&b"one"[..], b"two", b"three"] {
        message_id(&publish(&mut c, &with_user, &[], body));
    }
    message_id(&publish(
        &mut c,
        &with_user,
        &[("Upstash-Forward-Authorization", "Bearer own")],
        b"own",
    ));
    message_id(&publish(&mut c, &plain, &[], b"plain"));
    let got = sink.wait_for(10, "five deliveries", |g| g.len() == 5);
    let basic = format!("Basic {}", STANDARD.encode("ann:p@ss"));
    for r in &got {
        let port = plain
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        assert_eq!(r.header("host"), Some(port.as_str()), "{:?}", r.body);
        match &r.body[..] {
            b"own" => assert_eq!(r.header("authorization"), Some("Bearer own")),
            b"plain" => {
                assert_eq!(r.header("authorization"), None);
                assert_eq!(r.target, "/plain");
            }
            _ => {
                assert_eq!(
                    r.header("authorization"),
                    Some(basic.as_str()),
                    "{:?}",
                    r.body
                );
                assert_eq!(r.target, "/auth?x=1");
            }
        }
    }
}
