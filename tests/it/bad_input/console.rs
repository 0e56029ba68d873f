//! The web console's routes (issue 29): malformed Authorization headers, tokens of every odd
//! shape, long and encoded paths, and methods that are not GET. Each answers a clear JSON
//! error with the console's safety headers, and the server goes on answering.

use super::*;

/// A request (method, path, headers) and the status and error text it must answer.
type Case = (
    &'static str,
    String,
    Vec<(&'static str, String)>,
    u16,
    &'static str,
);

#[test]
fn console_routes_refuse_bad_requests_clearly() {
    let dir = TempDir::new("bad-console");
    let s = Server::start(dir.path(), &[]);
    let long = "x".repeat(60_000);
    let cases: Vec<Case> = vec![
        (
            "GET",
            "/console/api/session".into(),
            vec![("Authorization", "Bearer".into())],
            401,
            "Authorization",
        ),
        (
            "GET",
            "/console/api/session".into(),
            vec![("Authorization", "Basic Zm9vOmJhcg==".into())],
            401,
            "",
        ),
        (
            "GET",
            "/console/api/session".into(),
            vec![("Authorization", "Bearer t\u{e9}".into())],
            401,
            "",
        ),
        (
            "GET",
            "/console/api/session".into(),
            vec![("Authorization", format!("Bearer {long}"))],
            401,
            "",
        ),
        (
            "GET",
            "/console/api/session".into(),
            vec![("Authorization", "Bearer acl_x.y".into())],
            401,
            "",
        ),
        (
            "GET",
            "/console/api/session".into(),
            vec![("Authorization", "Bearer acl_.".into())],
            401,
            "",
        ),
        (
            "GET",
            format!("/console/{long}"),
            vec![],
            404,
            "no such console page",
        ),
        (
            "GET",
            "/console/%2e%2e/%2e%2e/etc/passwd".into(),
            vec![],
            404,
            "no such console page",
        ),
        (
            "GET",
            "/console/api/history".into(),
            vec![("Authorization", format!("Bearer {TOKEN}"))],
            400,
            "name a key",
        ),
        (
            "GET",
            "/console/api/history?key=%".into(),
            vec![("Authorization", format!("Bearer {TOKEN}"))],
            200,
            "",
        ),
        (
            "GET",
            format!("/console/api/at?point={long}"),
            vec![("Authorization", format!("Bearer {TOKEN}"))],
            400,
            "neither a sequence number",
        ),
        (
            "GET",
            "/console/api/at?point=18446744073709551616&key=k".into(),
            vec![("Authorization", format!("Bearer {TOKEN}"))],
            400,
            "neither a sequence number",
        ),
        (
            "GET",
            "/console/api/at?point=%ff%fe".into(),
            vec![("Authorization", format!("Bearer {TOKEN}"))],
            400,
            "neither a sequence number",
        ),
        (
            "HEAD",
            "/console/api/history?key=k".into(),
            vec![("Authorization", format!("Bearer {TOKEN}"))],
            405,
            "",
        ),
        (
            "GET",
            "/console/api/timeline".into(),
            vec![("Authorization", "Bearer wrong".into())],
            401,
            "WRONGPASS",
        ),
        (
            "GET",
            "/console/api/usage".into(),
            vec![("Authorization", "Bearer".into())],
            401,
            "WRONGPASS",
        ),
        (
            "GET",
            format!("/console/api/cron?expr={long}"),
            vec![("Authorization", format!("Bearer {TOKEN}"))],
            401,
            "WRONGPASS",
        ),
        (
            "GET",
            "/console/api/session/extra".into(),
            vec![],
            404,
            "no such console page",
        ),
        (
            "GET",
            "/console//app.js".into(),
            vec![],
            404,
            "no such console page",
        ),
        (
            "DELETE",
            "/console/api/session".into(),
            vec![],
            405,
            "read with GET",
        ),
        ("OPTIONS", "/console/".into(), vec![], 405, "read with GET"),
    ];
    for (method, path, headers, status, needle) in cases {
        let mut h = Http::connect(&s.addr, "");
        let hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = h.request(method, &path, &hs, b"");
        let what = format!(
            "{method} {} {:?}",
            &path[..path.len().min(60)],
            &hs.iter()
                .map(|(k, v)| (k, &v[..v.len().min(30)]))
                .collect::<Vec<_>>()
        );
        assert!(
            r.header("content-security-policy").is_some(),
            "{what}: no safety headers"
        );
        match (status, method) {
            (200, _) => assert_eq!(r.status, 200, "{what}: {}", r.text()),
            // A HEAD answer has no body to hold the error.
            (_, "HEAD") => assert_eq!(r.status, status, "{what}"),
            _ => is_error(&r, status, needle, &what),
        }
        still_answers(&s);
    }
}
