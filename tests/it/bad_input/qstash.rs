//! The delivery API: destinations, configuration headers, batch and JSON bodies, names,
//! schedules, queues, waiters. Each bad request gets a 4xx with a JSON error.

use super::*;

const D: &str = "http://127.0.0.1:9/x";

/// (method, path, headers, body, status)
type Case = (
    &'static str,
    String,
    Vec<(&'static str, String)>,
    Vec<u8>,
    u16,
);

fn cases() -> Vec<Case> {
    let p = |h: &'static str, v: &str| -> Case {
        (
            "POST",
            format!("/v2/publish/{D}"),
            vec![(h, v.to_string())],
            b"x".to_vec(),
            400,
        )
    };
    let dest = |d: &str| -> Case {
        (
            "POST",
            format!("/v2/publish/{d}"),
            vec![],
            b"x".to_vec(),
            400,
        )
    };
    let deep = tidepool::config::RETRY_DELAY_EXPRESSION_DEPTH_MAX * 10;
    vec![
        dest("ftp://x"),
        dest("http://"),
        dest("http://[::1"),
        dest("http://127.0.0.1:99999/x"),
        dest("http://exa%20mple.com/"),
        dest("https://"),
        dest("javascript:alert(1)"),
        p("Upstash-Retries", "many"),
        p("Upstash-Retries", "-1"),
        p("Upstash-Retries", "99999999999999999999"),
        p("Upstash-Retry-Delay", "pow(2,"),
        p("Upstash-Retry-Delay", "retried +"),
        p("Upstash-Retry-Delay", "unknown(1)"),
        p(
            "Upstash-Retry-Delay",
            &("(".repeat(deep) + "1" + &")".repeat(deep)),
        ),
        p("Upstash-Retry-Delay", &("-".repeat(deep) + "1")),
        p("Upstash-Delay", "soon"),
        p("Upstash-Delay", "-5s"),
        p("Upstash-Delay", "99999999999d"),
        p("Upstash-Delay", "5x"),
        p("Upstash-Not-Before", "tomorrow"),
        p("Upstash-Not-Before", "9223372036854775807"),
        p("Upstash-Timeout", "forever"),
        p("Upstash-Method", "BREW"),
        p("Upstash-Callback", "not a url"),
        p("Upstash-Callback", "http://[::1"),
        p("Upstash-Failure-Callback", "ftp://x"),
        p("Upstash-Redact-Fields", "cookies"),
        p("Upstash-Flow-Control-Value", "rate=x"),
        ("POST", "/v2/batch".into(), vec![], b"{".to_vec(), 400),
        (
            "POST",
            "/v2/batch".into(),
            vec![],
            b"{\"a\":1}".to_vec(),
            400,
        ),
        ("POST", "/v2/batch".into(), vec![], b"[1]".to_vec(), 400),
        ("POST", "/v2/publish/".into(), vec![], b"".to_vec(), 400),
        (
            "POST",
            "/v2/publish/no-such-group".into(),
            vec![],
            b"".to_vec(),
            404,
        ),
        ("GET", "/v2/nothing".into(), vec![], b"".to_vec(), 404),
        (
            "GET",
            "/v2/messages/msg_missing".into(),
            vec![],
            b"".to_vec(),
            404,
        ),
        ("DELETE", "/v2/dlq/123-0".into(), vec![], b"".to_vec(), 404),
        (
            "POST",
            "/v2/queues".into(),
            vec![],
            b"{\"queueName\":\"bad name\"}".to_vec(),
            400,
        ),
        ("POST", "/v2/queues".into(), vec![], b"{".to_vec(), 400),
        ("POST", "/v2/wait/e".into(), vec![], b"{}".to_vec(), 400),
        (
            "POST",
            "/v2/wait/e".into(),
            vec![],
            b"{\"url\":\"ftp://x\",\"timeout\":\"1s\"}".to_vec(),
            400,
        ),
        (
            "POST",
            format!("/v2/schedules/{D}"),
            vec![("Upstash-Cron", "not a cron".into())],
            vec![],
            400,
        ),
        (
            "POST",
            format!("/v2/schedules/{D}"),
            vec![("Upstash-Cron", "61 * * * *".into())],
            vec![],
            400,
        ),
        (
            "POST",
            format!("/v2/schedules/{D}"),
            vec![("Upstash-Cron", "CRON_TZ=Nowhere/City * * * * *".into())],
            vec![],
            400,
        ),
        ("POST", format!("/v2/schedules/{D}"), vec![], vec![], 400),
        (
            "POST",
            "/v2/topics/bad%20name/endpoints".into(),
            vec![],
            b"{\"endpoints\":[{\"url\":\"http://x\"}]}".to_vec(),
            400,
        ),
        (
            "POST",
            "/v2/topics/grp/endpoints".into(),
            vec![],
            b"{".to_vec(),
            400,
        ),
        (
            "POST",
            "/v2/topics/grp/endpoints".into(),
            vec![],
            b"{\"endpoints\":[{\"url\":\"ftp://x\"}]}".to_vec(),
            400,
        ),
        (
            "POST",
            format!("/v2/enqueue/q1/{D}"),
            vec![("Upstash-Delay", "10s".into())],
            b"x".to_vec(),
            400,
        ),
    ]
}

pub const CASES_LEN: usize = 48;

#[test]
fn bad_delivery_requests_get_clear_errors() {
    assert_eq!(cases().len(), CASES_LEN);
    let dir = TempDir::new("bad-qstash");
    let server = Server::start_delivery(dir.path());
    for (method, path, headers, body, status) in cases() {
        let mut q = server.qstash();
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = q.request(method, &path, &h, &body);
        let what = format!(
            "{method} {} {:?}",
            &path[..path.len().min(80)],
            h.iter()
                .map(|(k, v)| (k, &v[..v.len().min(40)]))
                .collect::<Vec<_>>()
        );
        // A batch answers per item: each bad item carries its own error.
        let per_item = path == "/v2/batch"
            && r.status == 200
            && r.json()
                .as_array()
                .is_some_and(|items| items.iter().all(|i| i["error"].is_string()));
        if !per_item {
            is_error(&r, status, "", &what);
        }
        still_answers(&server);
    }
}
