//! The REST request forms: bodies, paths, headers, methods, tokens.

use super::*;

/// (method, path, headers, body, status, text the error holds)
type Case = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [u8],
    u16,
    &'static str,
);

const CASES: &[Case] = &[
    ("POST", "/", &[], b"", 400, "no command"),
    ("POST", "/", &[], b"{", 400, "JSON array"),
    ("POST", "/", &[], b"{}", 400, "JSON array"),
    ("POST", "/", &[], b"[]", 400, ""),
    ("POST", "/", &[], b"null", 400, "JSON array"),
    ("POST", "/", &[], b"\"GET\"", 400, "JSON array"),
    ("POST", "/", &[], b"[\"GET\",", 400, "JSON array"),
    ("POST", "/", &[], b"[[\"GET\",\"k\"]]", 400, ""),
    ("POST", "/", &[], b"[\"GET\",{\"a\":1}]", 400, ""),
    ("POST", "/", &[], b"[\"GET\",[1]]", 400, ""),
    ("POST", "/", &[], b"[1]", 400, ""),
    ("POST", "/", &[], b"[\"\"]", 400, "unknown command"),
    (
        "POST",
        "/",
        &[],
        b"[\"NOSUCHCOMMAND\"]",
        400,
        "unknown command",
    ),
    ("POST", "/", &[], b"\xff\xfe[\"GET\"]", 400, "UTF-8"),
    ("POST", "/", &[], b"[\"GET\",\"\\ud800\"]", 400, ""),
    ("POST", "/pipeline", &[], b"", 400, "JSON array"),
    (
        "POST",
        "/pipeline",
        &[],
        b"[\"GET\",\"k\"]",
        400,
        "JSON array",
    ),
    ("POST", "/pipeline", &[], b"{\"a\":1}", 400, "JSON array"),
    ("POST", "/pipeline", &[], b"[[\"GET\"],", 400, "JSON array"),
    ("POST", "/pipeline", &[], b"[[]]", 400, ""),
    // Entries of a pipeline answer each on its own: an unknown command is its entry's error.
    ("POST", "/pipeline", &[], b"[[1,2]]", 200, ""),
    (
        "POST",
        "/pipeline/extra",
        &[],
        b"[[\"PING\"]]",
        404,
        "unknown endpoint",
    ),
    ("POST", "/multi-exec", &[], b"[[\"GET\"]]", 400, "EXECABORT"),
    (
        "POST",
        "/multi-exec",
        &[],
        b"[[\"NOSUCH\"]]",
        400,
        "EXECABORT",
    ),
    (
        "POST",
        "/multi-exec",
        &[],
        b"[\"GET\",\"k\"]",
        400,
        "JSON array",
    ),
    (
        "POST",
        "/multi-exec",
        &[],
        b"[[\"MULTI\"]]",
        400,
        "EXECABORT",
    ),
    (
        "POST",
        "/multi-exec/x",
        &[],
        b"[[\"PING\"]]",
        404,
        "unknown endpoint",
    ),
    ("DELETE", "/get/k", &[], b"", 405, "not allowed"),
    ("PATCH", "/", &[], b"[\"PING\"]", 405, "not allowed"),
    ("OPTIONS", "/", &[], b"", 405, "not allowed"),
    ("GET", "/nosuchcommand/k", &[], b"", 400, "unknown command"),
    ("GET", "/get", &[], b"", 400, "wrong number of arguments"),
    (
        "GET",
        "/get/a/b/c",
        &[],
        b"",
        400,
        "wrong number of arguments",
    ),
    ("GET", "/%zz/k", &[], b"", 400, "unknown command"),
    ("GET", "/get/%", &[], b"", 200, ""),
    ("GET", "/multi", &[], b"", 400, "multi-exec"),
    ("GET", "/exec", &[], b"", 400, "multi-exec"),
    (
        "GET",
        "/blpop/k/1",
        &[],
        b"",
        400,
        "not supported over REST",
    ),
    ("GET", "/select/1", &[], b"", 400, "not supported over REST"),
    ("GET", "/shutdown", &[], b"", 400, "not supported over REST"),
    ("GET", "/subscribe", &[], b"", 400, "needs a name"),
    ("GET", "/psubscribe/", &[], b"", 400, "needs a name"),
    (
        "GET",
        "/get/k",
        &[("Authorization", "Bearer wrong")],
        b"",
        401,
        "WRONGPASS",
    ),
    (
        "GET",
        "/get/k",
        &[("Authorization", "Basic dXNlcjpwdw==")],
        b"",
        401,
        "WRONGPASS",
    ),
    (
        "GET",
        "/get/k",
        &[("Authorization", "Bearer ")],
        b"",
        401,
        "WRONGPASS",
    ),
    (
        "GET",
        "/get/k",
        &[("Authorization", "")],
        b"",
        401,
        "WRONGPASS",
    ),
    (
        "GET",
        "/get/k?_token=wrong",
        &[("Authorization", "")],
        b"",
        401,
        "WRONGPASS",
    ),
    (
        "GET",
        "/get/k",
        &[("Authorization", "Bearer acl_.")],
        b"",
        401,
        "WRONGPASS",
    ),
    (
        "GET",
        "/get/k",
        &[("Authorization", "Bearer acl_YQ.%%%")],
        b"",
        401,
        "WRONGPASS",
    ),
    (
        "GET",
        "/get/k",
        &[("Upstash-Response-Format", "xml")],
        b"",
        400,
        "Upstash-Response-Format",
    ),
    (
        "GET",
        "/get/k",
        &[
            ("Upstash-Response-Format", "resp2"),
            ("Upstash-Encoding", "base64"),
        ],
        b"",
        400,
        "cannot be combined",
    ),
];

pub const CASES_LEN: usize = CASES.len() + 3;

#[test]
fn rest_forms_refuse_bad_requests_clearly() {
    let dir = TempDir::new("bad-rest");
    let server = Server::start(dir.path(), &[]);
    for (i, (method, path, headers, body, status, needle)) in CASES.iter().enumerate() {
        let mut c = server.client();
        let r = c.request(method, path, headers, body);
        let what = format!(
            "case {i}: {method} {path} {}",
            String::from_utf8_lossy(body)
        );
        if *status == 200 {
            assert_eq!(r.status, 200, "{what}: {}", r.text());
        } else {
            is_error(&r, *status, needle, &what);
        }
        still_answers(&server);
    }
    // A body over the request size limit: 413, and the server goes on. A declared length
    // past it is refused before the body is read (issue 25); a chunked body when it passes.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .ok();
    let head = format!(
        "POST /set/k HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        tidepool::config::REQUEST_BYTES_MAX + 1
    );
    s.write_all(head.as_bytes()).expect("head");
    let text = read_raw_response(&mut s);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("max request size"), "{text}");
    let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .ok();
    let head = format!(
        "POST /set/k HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("head");
    let chunk = vec![b'x'; 1 << 20];
    let mut answered = String::new();
    for _ in 0..(tidepool::config::REQUEST_BYTES_MAX >> 20) + 2 {
        let mut c = format!("{:x}\r\n", chunk.len()).into_bytes();
        c.extend_from_slice(&chunk);
        c.extend_from_slice(b"\r\n");
        if s.write_all(&c).is_err() {
            break;
        }
    }
    let _ = s.read_to_string(&mut answered);
    assert!(answered.starts_with("HTTP/1.1 413"), "{answered}");
    still_answers(&server);
    // A header section past hyper's limit: the connection gets an HTTP error, not a crash.
    let mut c = server.client();
    let long = "x".repeat(512 * 1024);
    let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
    let _ =
        s.write_all(format!("GET /ping HTTP/1.1\r\nHost: x\r\nX-Long: {long}\r\n\r\n").as_bytes());
    let mut buf = Vec::new();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok();
    let _ = s.read_to_end(&mut buf);
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 431") || buf.is_empty());
    assert_eq!(c.cmd_str(&["PING"]), Canon::s("PONG"));
    // A JSON body nested ten times past any parser's depth.
    let deep = "[".repeat(1280) + &"]".repeat(1280);
    let r = c.request("POST", "/", &[], deep.as_bytes());
    is_error(&r, 400, "", "deep JSON body");
    let r = c.request("POST", "/pipeline", &[], deep.as_bytes());
    is_error(&r, 400, "", "deep JSON pipeline");
    still_answers(&server);
}
