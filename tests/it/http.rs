//! Black-box tests of the REST surface: the real binary on port 0, raw HTTP.

use crate::common::*;
use serde_json::json;

fn server() -> (TempDir, Server) {
    let dir = TempDir::new("http");
    let s = Server::start(&dir.path().join("data"), &["--fsync", "never"]);
    (dir, s)
}

#[test]
fn every_request_form_runs_a_command() {
    let (_d, s) = server();
    let mut c = s.client();
    assert_eq!(c.get("/set/foo/bar").json(), json!({"result": "OK"}));
    assert_eq!(c.get("/GET/foo").json(), json!({"result": "bar"}));
    assert_eq!(c.request("HEAD", "/get/foo", &[], b"").status, 200);
    assert_eq!(
        c.request("PUT", "/get/foo", &[], b"").json(),
        json!({"result": "bar"})
    );
    assert_eq!(
        c.post("/", br#"["SET","n",10,"EX",100]"#).json(),
        json!({"result": "OK"})
    );
    assert_eq!(c.get("/ttl/n").json(), json!({"result": 100}));
    // The body is the last argument, the query string's pairs follow it.
    assert_eq!(
        c.post("/set/k2?EX=50", b"hello world").json(),
        json!({"result": "OK"})
    );
    assert_eq!(c.get("/get/k2").json(), json!({"result": "hello world"}));
    assert_eq!(c.get("/ttl/k2").json(), json!({"result": 50}));
    // Percent-decoded path segments carry slashes and spaces.
    assert_eq!(c.get("/set/a%2Fb/x%20y").json(), json!({"result": "OK"}));
    assert_eq!(c.get("/get/a%2Fb").json(), json!({"result": "x y"}));
    // Doubled leading slashes (the Python SDK's base URL + "/pipeline").
    assert_eq!(
        c.post("//pipeline", br#"[["GET","foo"]]"#).json(),
        json!([{"result": "bar"}])
    );
    // Content-Type is ignored.
    let r = c.request(
        "POST",
        "/",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        br#"["GET","foo"]"#,
    );
    assert_eq!(r.json(), json!({"result": "bar"}));
    // _token works instead of the header.
    let mut anon = Http::connect(&s.addr, "");
    assert_eq!(
        anon.get(&format!("/get/foo?_token={TOKEN}")).json(),
        json!({"result": "bar"})
    );
}

#[test]
fn json_arguments_keep_their_exact_text() {
    let (_d, s) = server();
    let mut c = s.client();
    c.post("/", br#"["SET","big",12345678901234567890]"#);
    assert_eq!(
        c.get("/get/big").json(),
        json!({"result": "12345678901234567890"})
    );
    c.post("/", br#"["SET","f",99.50]"#);
    assert_eq!(c.get("/get/f").json(), json!({"result": "99.50"}));
    c.post("/", br#"["SET","t",true]"#);
    assert_eq!(c.get("/get/t").json(), json!({"result": "true"}));
    c.post("/", br#"["SET","z",null]"#);
    assert_eq!(c.get("/get/z").json(), json!({"result": "null"}));
    let r = c.post("/", br#"["SET","x",["nested"]]"#);
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().starts_with("ERR"));
}

#[test]
fn errors_are_json_with_the_right_status() {
    let (_d, s) = server();
    let mut c = s.client();
    let r = c.get("/incr/foo/bar");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": "ERR wrong number of arguments for 'incr' command"})
    );
    let r = c.get("/nosuch/a");
    assert_eq!(
        r.json(),
        json!({"error": "ERR unknown command 'nosuch', with args beginning with: 'a' "})
    );
    let mut bad = Http::connect(&s.addr, "wrong");
    let r = bad.get("/get/x");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"error": "WRONGPASS invalid or missing auth token"})
    );
    let mut none = Http::connect(&s.addr, "");
    assert_eq!(none.get("/get/x").status, 401);
    let r = c.request("DELETE", "/get/x", &[], b"");
    assert_eq!(r.status, 405);
    assert!(r.json()["error"].is_string());
    let r = c.request("PATCH", "/", &[], b"");
    assert_eq!(r.status, 405);
    let r = c.post("/pipeline/extra", b"[]");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].is_string());
    let r = c.post("/", b"not json");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].is_string());
    for cmd in [
        r#"["WATCH","k"]"#,
        r#"["MULTI"]"#,
        r#"["BLPOP","k",0]"#,
        r#"["CLUSTER","INFO"]"#,
        // CLIENT LIST answers empty, as the hosted service does; KILL needs a connection.
        r#"["CLIENT","KILL","ID","1"]"#,
        r#"["SELECT",1]"#,
        r#"["SUBSCRIBE","ch"]"#,
        r#"["MONITOR"]"#,
    ] {
        let r = c.post("/", cmd.as_bytes());
        assert_eq!(r.status, 400, "{cmd}");
        let e = r.json()["error"].as_str().unwrap().to_string();
        assert!(
            e.starts_with("ERR") && e.contains("not supported over REST"),
            "{cmd}: {e}"
        );
    }
}

#[test]
fn base64_mode_encodes_every_string_at_every_depth() {
    let (_d, s) = server();
    let mut c = s.client();
    c.get("/hset/h/f1/OK");
    let b64 = [("Upstash-Encoding", "base64")];
    assert_eq!(
        c.request("GET", "/set/k/v", &b64, b"").json(),
        json!({"result": "OK"})
    );
    assert_eq!(
        c.request("GET", "/get/k", &b64, b"").json(),
        json!({"result": "dg=="})
    );
    assert_eq!(
        c.request("GET", "/hgetall/h", &b64, b"").json(),
        json!({"result": ["ZjE=", "T0s="]})
    );
    assert_eq!(
        c.request("GET", "/incr/n", &b64, b"").json(),
        json!({"result": 1})
    );
    assert_eq!(
        c.request("GET", "/get/none", &b64, b"").json(),
        json!({"result": null})
    );
    let r = c.request("GET", "/incr/k", &b64, b"");
    assert_eq!(
        r.json(),
        json!({"error": "ERR value is not an integer or out of range"})
    );
    let r = c.request(
        "POST",
        "/pipeline",
        &b64,
        br#"[["SET","a","OK"],["GET","a"],["PING"]]"#,
    );
    assert_eq!(
        r.json(),
        json!([{"result": "OK"}, {"result": "T0s="}, {"result": "UE9ORw=="}])
    );
    // Without base64, invalid UTF-8 becomes U+FFFD.
    c.post("/setrange/bin/0", &[0xff, b'a']);
    assert_eq!(c.get("/get/bin").json(), json!({"result": "\u{fffd}a"}));
    assert_eq!(
        c.request("GET", "/get/bin", &b64, b"").json(),
        json!({"result": "/2E="})
    );
}

#[test]
fn resp2_format_and_its_refusals() {
    let (_d, s) = server();
    let mut c = s.client();
    c.get("/set/k/bar");
    let r = c.request(
        "GET",
        "/get/k",
        &[("Upstash-Response-Format", "resp2")],
        b"",
    );
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.body, b"$3\r\nbar\r\n");
    let r = c.request(
        "GET",
        "/set/k/v",
        &[("Upstash-Reponse-Format", "resp2")],
        b"",
    );
    assert_eq!(r.body, b"+OK\r\n");
    let r = c.request(
        "POST",
        "/pipeline",
        &[("Upstash-Response-Format", "resp2")],
        br#"[["INCR","n"],["GET","nope"]]"#,
    );
    assert_eq!(r.body, b":1\r\n$-1\r\n");
    let r = c.request(
        "POST",
        "/multi-exec",
        &[("Upstash-Response-Format", "resp2")],
        br#"[["INCR","n"]]"#,
    );
    assert_eq!(
        r.json(),
        json!([{"result": 2}]),
        "multi-exec always answers JSON"
    );
    let r = c.request("GET", "/get/k", &[("Upstash-Response-Format", "xml")], b"");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].is_string());
    let r = c.request(
        "GET",
        "/get/k",
        &[
            ("Upstash-Response-Format", "resp2"),
            ("Upstash-Encoding", "base64"),
        ],
        b"",
    );
    assert_eq!(r.status, 400);
}

#[test]
fn pipelines_and_transactions() {
    let (_d, s) = server();
    let mut c = s.client();
    let r = c.post("/pipeline", br#"[["SET","key1","valuex"],["SETEX","key2",13,"valuez"],["INCR","key1"],["HSET","h",11,"item1",22,"item2"]]"#);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!([{"result":"OK"},{"result":"OK"},{"error":"ERR value is not an integer or out of range"},{"result":2}])
    );
    assert_eq!(c.post("/pipeline", b"[]").json(), json!([]));
    // Runtime errors inside a transaction leave the others executed.
    let r = c.post(
        "/multi-exec",
        br#"[["SET","a","1"],["INCR","key1"],["INCR","a"]]"#,
    );
    assert_eq!(
        r.json(),
        json!([{"result":"OK"},{"error":"ERR value is not an integer or out of range"},{"result":2}])
    );
    // An unknown command or a wrong arity discards the whole transaction.
    for body in [
        &br#"[["SET","a","9"],["NOSUCH"]]"#[..],
        br#"[["SET","a","9"],["GET"]]"#,
        br#"[["SET","a","9"],["WATCH","a"]]"#,
    ] {
        let r = c.post("/multi-exec", body);
        assert_eq!(r.status, 400);
        let v = r.json();
        assert!(
            v.as_object().unwrap().len() == 1 && v["error"].is_string(),
            "{v}"
        );
        assert_eq!(
            c.get("/get/a").json(),
            json!({"result": "2"}),
            "nothing of a discarded transaction runs"
        );
    }
    let r = c.post("/multi-exec", br#"[["SET","a"#);
    assert_eq!(r.status, 400);
}

#[test]
fn sync_token_changes_after_every_write() {
    let (_d, s) = server();
    let mut c = s.client();
    let t0 = c
        .get("/get/x")
        .header("upstash-sync-token")
        .unwrap()
        .to_string();
    let t1 = c
        .get("/set/x/1")
        .header("upstash-sync-token")
        .unwrap()
        .to_string();
    let t2 = c
        .post("/pipeline", br#"[["SET","x","2"]]"#)
        .header("upstash-sync-token")
        .unwrap()
        .to_string();
    let t3 = c
        .post("/multi-exec", br#"[["SET","x","3"]]"#)
        .header("upstash-sync-token")
        .unwrap()
        .to_string();
    let t4 = c
        .get("/get/x")
        .header("upstash-sync-token")
        .unwrap()
        .to_string();
    assert!(t0 != t1 && t1 != t2 && t2 != t3, "{t0} {t1} {t2} {t3}");
    assert_eq!(t3, t4, "a read does not move the token");
    assert!(c.get("/nosuch").header("upstash-sync-token").is_some());
    // Concurrent writes get distinct tokens.
    let addr = s.addr.clone();
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut c = Http::connect(&addr, TOKEN);
                c.get(&format!("/set/c{i}/v"))
                    .header("upstash-sync-token")
                    .unwrap()
                    .to_string()
            })
        })
        .collect();
    let mut tokens: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 3);
}

#[test]
fn read_only_token_reads_only() {
    let (_d, s) = server();
    let mut c = s.client();
    c.get("/set/k/v");
    let mut ro = Http::connect(&s.addr, RO_TOKEN);
    assert_eq!(ro.get("/get/k").json(), json!({"result": "v"}));
    assert_eq!(ro.get("/ping").json(), json!({"result": "PONG"}));
    for (path, name) in [
        ("/set/k/x", "set"),
        ("/scan/0", "scan"),
        ("/keys/*", "keys"),
        ("/flushall", "flushall"),
        ("/info", "info"),
    ] {
        let r = ro.get(path);
        assert_eq!(r.status, 400);
        assert_eq!(
            r.json(),
            json!({"error": format!("NOPERM this user has no permissions to run the '{name}' command or its subcommand")})
        );
    }
    let r = ro.post("/pipeline", br#"[["GET","k"],["DEL","k"]]"#);
    assert_eq!(r.status, 200);
    assert!(r.json()[1]["error"].as_str().unwrap().starts_with("NOPERM"));
    assert_eq!(c.get("/get/k").json(), json!({"result": "v"}));
}

#[test]
fn monitor_streams_commands_in_order() {
    let (_d, s) = server();
    let mut m = SseReader::open(&s.addr, "/monitor", TOKEN);
    assert_eq!(m.status, 200);
    assert_eq!(m.next_data().as_deref(), Some("\"OK\""));
    let mut c = s.client();
    c.get("/set/k/v%22q");
    c.post("/pipeline", br#"[["GET","k"],["INCR","n"]]"#);
    let lines: Vec<String> = (0..3).map(|_| m.next_data().expect("event")).collect();
    assert!(lines[0].ends_with(r#"] "set" "k" "v\"q""#), "{}", lines[0]);
    assert!(lines[1].ends_with(r#"] "GET" "k""#), "{}", lines[1]);
    assert!(lines[2].ends_with(r#"] "INCR" "n""#), "{}", lines[2]);
    // `<seconds>.<micros> [0 <addr>]`
    let (ts, rest) = lines[0].split_once(' ').unwrap();
    assert!(ts
        .split_once('.')
        .is_some_and(|(a, b)| a.parse::<u64>().is_ok() && b.len() == 6));
    assert!(rest.starts_with("[0 127.0.0.1:"));
}

#[test]
fn subscribe_psubscribe_and_publish() {
    let (_d, s) = server();
    let mut sub = SseReader::open(&s.addr, "/subscribe/chat", TOKEN);
    assert_eq!(sub.next_data().as_deref(), Some("subscribe,chat,1"));
    let mut psub = SseReader::open(&s.addr, "/psubscribe/ch*", TOKEN);
    assert_eq!(psub.next_data().as_deref(), Some("psubscribe,ch*,1"));
    let mut c = s.client();
    assert_eq!(
        c.post("/publish/chat/hello", b"").json(),
        json!({"result": 2})
    );
    assert_eq!(
        c.post("/", br#"["PUBLISH","chat","{\"a\":1, \"b\":\"x,y\"}"]"#)
            .json(),
        json!({"result": 2})
    );
    assert_eq!(
        c.post("/", br#"["PUBLISH","nobody","x"]"#).json(),
        json!({"result": 0})
    );
    assert_eq!(sub.next_data().as_deref(), Some("message,chat,hello"));
    assert_eq!(
        sub.next_data().as_deref(),
        Some(r#"message,chat,{"a":1, "b":"x,y"}"#)
    );
    assert_eq!(psub.next_data().as_deref(), Some("pmessage,ch*,chat,hello"));
    assert_eq!(
        c.post("/", br#"["PUBSUB","NUMSUB","chat","x"]"#).json(),
        json!({"result": ["chat", 1, "x", 0]})
    );
    assert_eq!(
        c.post("/", br#"["PUBSUB","NUMPAT"]"#).json(),
        json!({"result": 1})
    );
    // Several channels on one stream count up, as SUBSCRIBE a b does.
    let mut two = SseReader::open(&s.addr, "/subscribe/a/b", TOKEN);
    assert_eq!(two.next_data().as_deref(), Some("subscribe,a,1"));
    assert_eq!(two.next_data().as_deref(), Some("subscribe,b,2"));
    // A subscriber that disconnects is dropped.
    drop(sub);
    let mut n = 2;
    for _ in 0..50 {
        n = c.post("/", br#"["PUBLISH","chat","again"]"#).json()["result"]
            .as_i64()
            .unwrap();
        if n == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(n, 1, "only the pattern subscriber is left");
}

#[test]
fn a_subscriber_that_falls_behind_is_told_and_closed() {
    let (_d, s) = server();
    let mut sub = SseReader::open(&s.addr, "/subscribe/flood", TOKEN);
    assert_eq!(sub.next_data().as_deref(), Some("subscribe,flood,1"));
    let mut c = s.client();
    let msg = "x".repeat(4096);
    let mut receivers = 1;
    let mut sent = 0;
    // The subscriber reads nothing; socket buffers and the stream's bounded queue fill up.
    while receivers == 1 && sent < 100_000 {
        let body = format!(
            "[{}]",
            (0..100)
                .map(|_| format!(r#"["PUBLISH","flood","{msg}"]"#))
                .collect::<Vec<_>>()
                .join(",")
        );
        let r = c.post("/pipeline", body.as_bytes()).json();
        receivers = r.as_array().unwrap().last().unwrap()["result"]
            .as_i64()
            .unwrap();
        sent += 100;
    }
    assert_eq!(
        receivers, 0,
        "the executor dropped the lagging subscriber instead of blocking"
    );
    let mut last = Vec::new();
    while let Some(l) = sub.next_line() {
        if !l.starts_with("data: message") {
            last.push(l);
        }
    }
    assert!(
        last.iter()
            .any(|l| l.contains("fell") && l.starts_with(':')),
        "{last:?}"
    );
    assert_eq!(
        last.last().map(String::as_str),
        Some("data: unsubscribe,flood,0")
    );
}

/// `GET /healthz` and `GET /readyz` answer without a token (issue 17's operator surface);
/// a server at a past point is ready and says it is read-only.
#[test]
fn health_and_readiness_answer_without_a_token() {
    let (dir, s) = server();
    let mut anon = Http::connect(&s.addr, "");
    let h = anon.get("/healthz");
    assert_eq!((h.status, h.json()), (200, json!({"status": "ok"})));
    let r = anon.get("/readyz");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ready");
    assert_eq!(r.json()["writable"], true);
    // Other paths still need the token.
    assert_eq!(anon.get("/dbsize").status, 401);
    s.client().cmd_str(&["SET", "k", "v"]);
    assert_eq!(s.terminate(), Some(0));
    let at = Server::start(&dir.path().join("data"), &["--at", "1"]);
    let r = Http::connect(&at.addr, "").get("/readyz");
    assert_eq!(
        (r.status, r.json()["writable"].clone()),
        (200, json!(false))
    );
}

/// CORS on the REST routes: nothing without `--cors-origin`; with it, a preflight from an
/// allowed origin is answered and every answer to it carries the origin; another origin gets
/// no CORS header; `*` allows any.
#[test]
fn cors_follows_the_cors_origin_flag() {
    let (_d, s) = server();
    let mut c = s.client();
    let origin = [("Origin", "https://app.example.com")];
    let r = c.request("GET", "/get/k", &origin, b"");
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(c.request("OPTIONS", "/get/k", &origin, b"").status, 405);
    drop(s);

    let dir = TempDir::new("cors");
    let s = Server::start(
        &dir.path().join("data"),
        &[
            "--cors-origin",
            "https://app.example.com,https://other.example",
        ],
    );
    let mut anon = Http::connect(&s.addr, "");
    let pre = anon.request(
        "OPTIONS",
        "/pipeline",
        &[
            ("Origin", "https://app.example.com"),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type",
            ),
        ],
        b"",
    );
    assert_eq!(pre.status, 204);
    assert_eq!(
        pre.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert!(pre
        .header("access-control-allow-headers")
        .is_some_and(|h| h.contains("Authorization")));
    assert!(pre
        .header("access-control-allow-methods")
        .is_some_and(|h| h.contains("POST")));
    let mut c = s.client();
    let r = c.request("GET", "/set/k/v", &origin, b"");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("upstash-sync-token")
    );
    // A refusal is readable by the page too (it is the answer to its request).
    let r = anon.request("GET", "/get/k", &origin, b"");
    assert_eq!(r.status, 401);
    assert!(r.header("access-control-allow-origin").is_some());
    let r = c.request("GET", "/get/k", &[("Origin", "https://evil.example")], b"");
    assert_eq!(r.header("access-control-allow-origin"), None);
    drop(s);

    let dir = TempDir::new("cors-any");
    let s = Server::start(&dir.path().join("data"), &["--cors-origin", "*"]);
    let r = s
        .client()
        .request("GET", "/get/k", &[("Origin", "http://localhost:3000")], b"");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let e = Server::try_start(
        &dir.path().join("data2"),
        &["--cors-origin", "app.example.com"],
    )
    .err()
    .expect("refused");
    assert!(e.contains("--cors-origin 'app.example.com'"), "{e}");
}

/// `--max-request-bytes` (issue 17's limits): a request past it is refused whole with the
/// hosted service's text and 413, in every body form; a transaction over it is discarded
/// whole (nothing of it runs), as the spec asks.
#[test]
fn the_max_request_size_flag_refuses_larger_requests_whole() {
    let dir = TempDir::new("maxreq");
    let s = Server::start(&dir.path().join("data"), &["--max-request-bytes", "2000"]);
    let mut c = s.client();
    let big = "x".repeat(3000);
    let over = [
        ("/", json!(["SET", "k", big]).to_string()),
        (
            "/pipeline",
            json!([["SET", "a", "1"], ["SET", "k", big]]).to_string(),
        ),
        (
            "/multi-exec",
            json!([["SET", "a", "1"], ["SET", "k", big]]).to_string(),
        ),
        ("/set/k", big.clone()),
    ];
    for (path, body) in over {
        let r = c.post(path, body.as_bytes());
        assert_eq!(r.status, 413, "{path}");
        assert_eq!(
            r.json(),
            json!({"error": "ERR max request size exceeded"}),
            "{path}"
        );
    }
    assert_eq!(c.cmd_str(&["EXISTS", "a", "k"]), Canon::Int(0));
    let r = c.post(
        "/multi-exec",
        json!([["SET", "a", "1"]]).to_string().as_bytes(),
    );
    assert_eq!(r.status, 200);
    let e = Server::try_start(&dir.path().join("data2"), &["--max-request-bytes", "0"])
        .err()
        .expect("refused");
    assert!(e.contains("--max-request-bytes '0'"), "{e}");
}

/// `--max-key-bytes` (issue 17's limits): a command naming a longer key is refused with the
/// hosted service's text through every door and from Lua; a transaction holding one is
/// discarded whole; keys the log already holds are kept when the limit is lowered.
#[test]
fn the_max_key_size_flag_holds_at_every_door() {
    let dir = TempDir::new("maxkey");
    let data = dir.path().join("data");
    let s = Server::start(&data, &["--max-key-bytes", "10"]);
    let mut c = s.client();
    let long = "k".repeat(11);
    let text = "ERR max key size exceeded. Limit: 10 bytes, Actual: 11 bytes";
    for door in DOORS {
        let r = c.cmd_via(
            *door,
            &[b"SET".to_vec(), long.clone().into_bytes(), b"v".to_vec()],
        );
        assert_eq!(r, Canon::Err(text.into()), "{door:?}");
        let r = c.cmd_via(*door, &[b"SET".to_vec(), b"k".repeat(10), b"v".to_vec()]);
        assert_eq!(r, Canon::s("OK"), "{door:?}");
    }
    // Every key a command names counts, not only the first.
    assert_eq!(
        c.cmd_str(&["MSET", "a", "1", &long, "2"]),
        Canon::Err(text.into())
    );
    let r = c.post(
        "/multi-exec",
        json!([["SET", "a", "1"], ["SET", long, "v"]])
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.json(), json!({"error": text}));
    assert_eq!(
        c.cmd_str(&["EXISTS", "a"]),
        Canon::Int(0),
        "nothing of it ran"
    );
    assert_eq!(
        c.cmd_str(&[
            "EVAL",
            "return redis.pcall('SET', KEYS[1], 'v')",
            "1",
            &long
        ]),
        Canon::Err(text.into())
    );
    // A key the script makes up itself is held to it too, inside the script.
    assert_eq!(
        c.cmd_str(&[
            "EVAL",
            "return redis.pcall('SET', string.rep('k', 11), 'v')",
            "0"
        ]),
        Canon::Err(text.into())
    );
    drop(c);
    assert_eq!(s.terminate(), Some(0));
    let s = Server::start(&data, &["--max-key-bytes", "5"]);
    let mut c = s.client();
    assert_eq!(
        c.cmd_str(&["DBSIZE"]),
        Canon::Int(1),
        "the log's keys are all there"
    );
    // Reads and deletes of a key past the limit are never refused (issue 25): a key kept
    // from an older, higher limit can be read and deleted; writes to it are refused.
    assert!(!c.cmd_str(&["GET", &"k".repeat(10)]).is_err());
    assert!(c.cmd_str(&["SET", &"k".repeat(10), "v"]).is_err());
    assert!(!c.cmd_str(&["DEL", &"k".repeat(10)]).is_err());
}
