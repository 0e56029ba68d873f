//! Issue 14's reproductions, one test each, named after what it guards: requests that used to
//! crash, hang or stall the server, or that it accepted when it should have refused them.
//! Every test ends by checking that the server still answers.

use crate::common::*;
use std::time::Duration;

fn ro(server: &Server) -> Http {
    Http::connect(&server.addr, RO_TOKEN)
}

/// The server is alive and serving after whatever the test did.
fn still_answers(server: &Server) {
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["SET", "alive", "yes"]), Canon::s("OK"));
    assert_eq!(c.cmd_str(&["GET", "alive"]), Canon::s("yes"));
}

fn err_text(c: Canon) -> String {
    match c {
        Canon::Err(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Defect 1: `pcall` caught the time limit's error, so a loop of pcalls ran forever.
#[test]
fn pcall_cannot_swallow_the_script_time_limit() {
    let dir = TempDir::new("pcallhang");
    let server = Server::start(dir.path(), &["--script-time-limit-ms", "300"]);
    let mut c = ro(&server);
    let e = err_text(c.cmd_str(&[
        "EVAL_RO",
        "while true do pcall(function() while true do end end) end",
        "0",
    ]));
    assert!(e.contains(SCRIPT_STOPPED), "{e}");
    scripts_cooled(&mut c);
    // xpcall with a handler, nested protected calls: the same.
    let e = err_text(c.cmd_str(&[
        "EVAL_RO",
        "while true do xpcall(function() pcall(function() while true do end end) end, function(e) return e end) end",
        "0",
    ]));
    assert!(e.contains(SCRIPT_STOPPED), "{e}");
    still_answers(&server);
}

/// Defect 1: loading a library ran its top level with no limit at all.
#[test]
fn function_load_is_held_to_the_script_time_limit() {
    let dir = TempDir::new("loadhang");
    let server = Server::start(dir.path(), &["--script-time-limit-ms", "300"]);
    let mut c = server.client();
    let e = err_text(c.cmd_str(&["FUNCTION", "LOAD", "#!lua name=inf\nwhile true do end"]));
    assert!(e.contains(SCRIPT_STOPPED), "{e}");
    scripts_cooled(&mut c);
    let e = err_text(c.cmd_str(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=inf\nlocal function f() while true do end end\nf()",
    ]));
    assert!(e.contains(SCRIPT_STOPPED), "{e}");
    assert_eq!(c.cmd_str(&["FUNCTION", "LIST"]), Canon::Arr(vec![]));
    still_answers(&server);
}

/// Defect 1: SCRIPT KILL is answered while a script keeps the executor busy, and stops it.
#[test]
fn script_kill_stops_a_busy_script() {
    let dir = TempDir::new("scriptkill");
    let server = Server::start(dir.path(), &[]);
    let addr = server.addr.clone();
    let runner = std::thread::spawn(move || {
        let mut c = Http::connect(&addr, TOKEN);
        c.cmd_str(&["EVAL", "while true do pcall(function() end) end", "0"])
    });
    let mut c = server.client();
    // Ask until the script is running (NOTBUSY before it starts).
    let mut answered = Canon::Nil;
    while !runner.is_finished() {
        answered = c.cmd_str(&["SCRIPT", "KILL"]);
        if answered == Canon::s("OK") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(answered, Canon::s("OK"));
    // Stopped by the kill (its words), not by the time limit.
    let e = err_text(runner.join().expect("runner"));
    assert!(e.contains("killed by user"), "{e}");
    assert!(err_text(c.cmd_str(&["SCRIPT", "KILL"])).starts_with("NOTBUSY"));
    still_answers(&server);
}

/// Defect 2: converting a deeply nested table into a reply overflowed the stack.
#[test]
fn deeply_nested_script_reply_ends_in_an_error_not_a_crash() {
    let dir = TempDir::new("luadeep");
    let server = Server::start(dir.path(), &[]);
    let mut c = ro(&server);
    let body = r#"["EVAL_RO","local t={} local c=t for i=1,10000 do local n={} c[1]=n c=n end return t","0"]"#;
    let r = c.post("/", body.as_bytes());
    assert_eq!(r.status, 200);
    // Nested arrays down to the limit, then Redis's error as the innermost element (read as
    // text: it is deeper than a JSON parser's own default limit).
    let text = r.text();
    let depth = tidepool::config::LUA_REPLY_DEPTH_MAX;
    let expected = format!(
        "{{\"result\":{}\"ERR reached lua stack limit\"{}}}",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    assert_eq!(text, expected);
    // A shallow one is unchanged.
    let r = c.cmd_str(&["EVAL_RO", "return {1,{2,{3}}}", "0"]);
    assert_eq!(
        r,
        Canon::Arr(vec![
            Canon::Int(1),
            Canon::Arr(vec![Canon::Int(2), Canon::Arr(vec![Canon::Int(3)])])
        ])
    );
    still_answers(&server);
}

/// Defect 7: Lua's memory was uncapped (`string.rep` of 1 GiB took 3.6 GB and 18 s).
#[test]
fn lua_memory_is_bounded() {
    let dir = TempDir::new("luamem");
    let server = Server::start(dir.path(), &[]);
    let mut c = ro(&server);
    let e = err_text(c.cmd_str(&["EVAL_RO", "return #string.rep('x', 2^30)", "0"]));
    assert!(e.contains("not enough memory"), "{e}");
    let e = err_text(c.cmd_str(&[
        "EVAL_RO",
        "local t = {} for i = 1, 1e9 do t[i] = i end return #t",
        "0",
    ]));
    assert!(e.contains("not enough memory"), "{e}");
    // Memory is given back: an ordinary script runs after.
    assert_eq!(
        c.cmd_str(&["EVAL_RO", "return #string.rep('x', 1000)", "0"]),
        Canon::Int(1000)
    );
    still_answers(&server);
}

/// Defect 7: a small request could make the server build a reply of any size.
#[test]
fn reply_size_is_bounded() {
    let dir = TempDir::new("bigreply");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let big = vec![b'x'; 50 * 1024 * 1024];
    let r = c.request("POST", "/set/big", &[], &big);
    assert_eq!(r.status, 200, "{}", r.text());
    let limit = tidepool::config::REPLY_BYTES_MAX;
    let copies = limit / big.len() + 1;
    // One MGET naming the value more times than the limit holds: refused before it runs.
    let mut cmd = vec!["MGET"];
    cmd.extend(std::iter::repeat_n("big", copies));
    let mut ro = ro(&server);
    let e = err_text(ro.cmd_str(&cmd));
    assert!(e.contains("reply size limit"), "{e}");
    // A pipeline of MGETs that pass the limit together: the ones past it are errors.
    let body = format!("[{}]", [r#"["MGET","big","big","big"]"#; 10].join(","));
    let r = ro.request("POST", "/pipeline", &[], body.as_bytes());
    assert_eq!(r.status, 200);
    let replies = r.json();
    let replies = replies.as_array().expect("array");
    let refused = replies
        .iter()
        .filter(|e| {
            e["error"]
                .as_str()
                .is_some_and(|t| t.contains("reply size limit"))
        })
        .count();
    assert!(refused > 0 && refused < 10, "{refused} refused");
    // One GET of the value still works.
    let r = ro.get("/strlen/big");
    assert_eq!(r.json()["result"], 50 * 1024 * 1024);
    still_answers(&server);
}

/// Defect 3: `Upstash-Retry-Delay` with 20,000 `-` or 50,000 `(` overflowed the stack.
#[test]
fn deep_retry_delay_expression_is_refused() {
    let dir = TempDir::new("retrydeep");
    let server = Server::start_delivery(dir.path());
    let mut q = server.qstash();
    for expr in [
        "-".repeat(20_000) + "1",
        // (A request head holds at most HTTP_CONNECTION_BUFFER_BYTES_MAX, 64 KiB: a deeper
        // one is answered 431 before any parser sees it.)
        "(".repeat(25_000) + "1" + &")".repeat(25_000),
    ] {
        let r = q.request(
            "POST",
            "/v2/publish/http://127.0.0.1:9/x",
            &[("Upstash-Retry-Delay", &expr)],
            b"hi",
        );
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.json()["error"].as_str().unwrap_or("").contains("nested"));
        // The same through a batch item's headers.
        let item = serde_json::json!([{
            "destination": "http://127.0.0.1:9/x",
            "headers": {"Upstash-Retry-Delay": expr},
            "body": "hi"
        }]);
        let r = q.request("POST", "/v2/batch", &[], item.to_string().as_bytes());
        assert!(
            r.status == 400
                || r.json()[0]["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("nested")),
            "{}",
            r.text()
        );
    }
    still_answers(&server);
}

/// Defect 10: malformed destinations and out-of-range delays were accepted.
#[test]
fn loose_qstash_input_is_refused() {
    let dir = TempDir::new("qstashloose");
    let server = Server::start_delivery(dir.path());
    let mut q = server.qstash();
    for (dest, headers) in [
        ("http://[::1", vec![]),
        ("http://127.0.0.1:99999/x", vec![]),
        (
            "http://127.0.0.1:9/x",
            vec![("Upstash-Delay", "99999999999d")],
        ),
        (
            "http://127.0.0.1:9/x",
            vec![("Upstash-Not-Before", "9223372036854775807")],
        ),
        (
            "http://127.0.0.1:9/x",
            vec![("Upstash-Callback", "http://[::1")],
        ),
    ] {
        let r = q.request("POST", &format!("/v2/publish/{dest}"), &headers, b"x");
        assert_eq!(r.status, 400, "{dest} {headers:?}: {}", r.text());
        assert!(r.json()["error"].is_string());
    }
    // Within range: accepted, and the notBefore a client reads is a safe JavaScript integer.
    let r = q.request(
        "POST",
        "/v2/publish/http://127.0.0.1:9/x",
        &[("Upstash-Delay", "3650d")],
        b"x",
    );
    assert!(r.status < 300, "{}", r.text());
    let id = r.json()["messageId"].as_str().unwrap_or("").to_string();
    let m = q.get(&format!("/v2/messages/{id}")).json();
    let nb = m["notBefore"].as_u64().expect("notBefore");
    assert!(nb < (1 << 53), "{nb}");
    still_answers(&server);
}

/// Defect 4: JSON.SET into a path grew a document past any depth; readers then crashed.
#[test]
fn json_document_depth_holds_for_the_resulting_document() {
    let dir = TempDir::new("jsondeep");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let max = tidepool::config::JSON_DEPTH_MAX;
    let nest = |n: usize| "[".repeat(n) + &"]".repeat(n);
    assert_eq!(
        c.cmd_str(&["JSON.SET", "jd", "$", &nest(100)]),
        Canon::s("OK")
    );
    // 100 levels down, another 100: refused with RedisJSON's text.
    let path = "$".to_string() + &"[0]".repeat(99);
    let e = err_text(c.cmd_str(&["JSON.SET", "jd", &path, &nest(100)]));
    assert_eq!(e, "ERR recursion limit exceeded");
    let e = err_text(c.cmd_str(&["JSON.ARRAPPEND", "jd", &path, &nest(100)]));
    assert_eq!(e, "ERR recursion limit exceeded");
    let e = err_text(c.cmd_str(&["JSON.ARRINSERT", "jd", &path, "0", &nest(100)]));
    assert_eq!(e, "ERR recursion limit exceeded");
    let e = err_text(c.cmd_str(&["JSON.MSET", "jd", &path, &nest(100)]));
    assert_eq!(e, "ERR recursion limit exceeded");
    c.cmd_str(&[
        "JSON.SET",
        "jo",
        "$",
        &("{\"a\":".repeat(50) + "{}" + &"}".repeat(50)),
    ]);
    let deep = "$".to_string() + &".a".repeat(50);
    let e = err_text(c.cmd_str(&["JSON.SET", "jo", &(deep.clone() + ".b"), &nest(100)]));
    assert_eq!(e, "ERR recursion limit exceeded");
    let patch = "{\"b\":".repeat(100) + "1" + &"}".repeat(100);
    let e = err_text(c.cmd_str(&["JSON.MERGE", "jo", &deep, &patch]));
    assert_eq!(e, "ERR recursion limit exceeded");
    // Up to the limit is fine: depth `max` exactly.
    let path = "$".to_string() + &"[0]".repeat(99);
    assert_eq!(
        c.cmd_str(&["JSON.SET", "jd", &path, &nest(max - 99)]),
        Canon::s("OK")
    );
    // Readers of the deepest document allowed, Read Only token included.
    let mut r = ro(&server);
    assert!(matches!(r.cmd_str(&["JSON.GET", "jd"]), Canon::Str(_)));
    assert!(matches!(
        r.cmd_str(&["JSON.TYPE", "jd", "$..*"]),
        Canon::Arr(_)
    ));
    assert_eq!(c.cmd_str(&["COPY", "jd", "jd2"]), Canon::Int(1));
    still_answers(&server);
    // A restart replays it.
    server.terminate();
    let server = Server::start(dir.path(), &[]);
    assert!(matches!(
        server.client().cmd_str(&["JSON.GET", "jd2"]),
        Canon::Str(_)
    ));
}

/// Defect 8: idle connections that never sent a byte were held forever.
#[test]
fn idle_connections_are_closed() {
    use std::io::Read;
    let dir = TempDir::new("idle");
    let server = Server::start(dir.path(), &[]);
    let mut idle = std::net::TcpStream::connect(&server.addr).expect("connect");
    // Long enough for the idle timeout to pass; a connection still open then fails the read
    // with a timeout error instead of reaching the end of the stream.
    idle.set_read_timeout(Some(Duration::from_millis(
        tidepool::config::HTTP_IDLE_TIMEOUT_MS + 30_000,
    )))
    .ok();
    let mut buf = [0u8; 256];
    loop {
        match idle.read(&mut buf) {
            Ok(0) => break,
            // hyper may answer 408 before it closes.
            Ok(_) => continue,
            Err(e) => panic!("the idle connection was not closed: {e}"),
        }
    }
    still_answers(&server);
}

/// Defect 8: a client that sends its request head a byte at a time is closed once the head
/// takes longer than the header-read timeout, though bytes keep arriving.
#[test]
fn slow_request_heads_are_closed() {
    use std::io::{Read, Write};
    let dir = TempDir::new("slowhead");
    let server = Server::start(dir.path(), &[]);
    let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
    s.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .expect("write");
    let mut reader = s.try_clone().expect("clone");
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = closed.clone();
    let watcher = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        // EOF or a reset: either way the server let go.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    // One byte every half second, for well past the timeout (a bound on the test, not a
    // measurement: the server must have closed by then).
    let bound = (tidepool::config::HTTP_HEADER_READ_TIMEOUT_MS + 30_000) / 500;
    let mut let_go = false;
    for _ in 0..bound {
        if closed.load(std::sync::atomic::Ordering::SeqCst) || s.write_all(b"a").is_err() {
            let_go = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // Unblocks the watcher either way; the verdict was taken before.
    let _ = s.shutdown(std::net::Shutdown::Both);
    watcher.join().expect("watcher");
    assert!(let_go, "a trickled request head held its connection");
    still_answers(&server);
}

/// Defect 8: past the connection cap a new connection gets a clear 503 and the server goes
/// on serving the others; with a low descriptor limit the cap follows it.
#[test]
fn connections_past_the_cap_are_refused_clearly() {
    use std::io::Read;
    let dir = TempDir::new("cap");
    let server = Server::try_start_under(
        &["prlimit", "--nofile=128:128", "--"],
        &dir.path().join("d"),
        &[],
        &[],
    )
    .expect("start under prlimit");
    let addr = server.addr.clone();
    let cap = 128 - tidepool::config::HTTP_DESCRIPTORS_RESERVED;
    let mut held = Vec::new();
    for _ in 0..cap + 20 {
        match std::net::TcpStream::connect(&addr) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    // The last ones were answered 503 and closed.
    let mut refused = 0;
    for s in held.iter_mut().rev().take(10) {
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        if text.starts_with("HTTP/1.1 503") && text.contains("max number of clients") {
            refused += 1;
        }
    }
    assert!(refused >= 10, "{refused} refused");
    // Freeing connections lets new ones in.
    held.clear();
    std::thread::sleep(Duration::from_millis(300));
    still_answers(&server);
}

/// Defect 9: every command name longer than ten characters failed in the path form.
#[test]
fn long_command_names_work_in_the_path_form() {
    let dir = TempDir::new("longpath");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let r = c.get("/incrbyfloat/k/1.5");
    assert_eq!(r.json()["result"], "1.5", "{}", r.text());
    c.get("/zadd/z/1/a/2/b");
    let r = c.get("/zremrangebyscore/z/0/1");
    assert_eq!(r.json()["result"], 1, "{}", r.text());
    let r = c.get("/georadiusbymember_ro/nokey/m/1/km");
    assert_eq!(r.json()["result"], serde_json::json!([]), "{}", r.text());
    let r = c.get("/hrandfield/nokey");
    assert_eq!(r.json()["result"], serde_json::Value::Null);
    still_answers(&server);
}

/// Defect 9's kind: every command name of the table (and every subcommand) reaches the same
/// command in the path form as in a JSON body. Names the REST paths reserve for streams are
/// left out (`monitor`, `subscribe`, `psubscribe` open event streams there).
#[test]
fn every_command_of_the_table_works_in_the_path_form() {
    let table: serde_json::Value =
        serde_json::from_str(include_str!("../../src/command/redis-7.0-commands.json"))
            .expect("table");
    let names: Vec<String> = table
        .as_object()
        .expect("object")
        .keys()
        .filter(|n| !matches!(n.as_str(), "monitor" | "subscribe" | "psubscribe"))
        .cloned()
        .collect();
    assert!(names.len() > 300);
    let dir = TempDir::new("tablepath");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let mut checked = 0;
    for name in &names {
        // `object|encoding` is `OBJECT ENCODING`; an argument that no command takes as valid
        // keeps side effects away (SHUTDOWN, FLUSHALL ... answer a syntax or arity error).
        let mut args: Vec<Vec<u8>> = name.split('|').map(|p| p.as_bytes().to_vec()).collect();
        args.push(b"no-such-argument".to_vec());
        let by_body = c.cmd_via(Door::JsonBody, &args);
        let by_path = c.cmd_via(Door::Path, &args);
        let unknown = |r: &Canon| matches!(r, Canon::Err(e) if e.starts_with("ERR unknown command") || e.starts_with("ERR no command"));
        assert_eq!(
            unknown(&by_path),
            unknown(&by_body),
            "{name}: path {by_path:?}, body {by_body:?}"
        );
        if let (Canon::Err(p), Canon::Err(b)) = (&by_path, &by_body) {
            assert_eq!(p, b, "{name}");
        }
        // The upper-case name in the path reaches it too.
        let mut upper = args.clone();
        upper[0] = upper[0].to_ascii_uppercase();
        assert_eq!(
            unknown(&c.cmd_via(Door::Path, &upper)),
            unknown(&by_body),
            "{name} in upper case"
        );
        checked += 1;
    }
    assert_eq!(checked, names.len());
    still_answers(&server);
}

/// Found by the bad-input suite: `cjson.encode` of a table nested past its limit (1,000
/// levels) overflowed the 2 MiB stack of a runtime thread before it reached the limit.
#[test]
fn cjson_encode_of_a_deep_table_is_an_error_not_a_crash() {
    let dir = TempDir::new("cjsondeep");
    let server = Server::start(dir.path(), &[]);
    let mut c = ro(&server);
    let e = err_text(c.cmd_str(&[
        "EVAL_RO",
        "local t={} local c=t for i=1,10010 do local n={} c[1]=n c=n end return cjson.encode(t)",
        "0",
    ]));
    assert!(e.contains("excessive nesting"), "{e}");
    // Just under the limit encodes.
    let r = c.cmd_str(&[
        "EVAL_RO",
        "local t={} local c=t for i=1,998 do local n={} c[1]=n c=n end return #cjson.encode(t)",
        "0",
    ]);
    assert_eq!(r, Canon::Int(2 * 999));
    still_answers(&server);
}

/// `cmsgpack.unpack` and `struct.unpack` read bytes a script was given: random and crafted
/// input gets a value or an error, never a crash, and nesting deeper than
/// LUA_CMSGPACK_DECODE_DEPTH_MAX is refused with the C library's text instead of recursing.
#[test]
fn msgpack_and_struct_decoders_survive_any_input() {
    let dir = TempDir::new("luapacking");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let mut r = TestRng(0x5eed_c0de);
    for i in 0..600 {
        let len = r.below(40);
        let data: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        let fmt: String = (0..r.below(8))
            .map(|_| {
                *r.pick(&[
                    'b', 'B', 'h', 'i', 'I', 'l', 'c', 's', 'f', 'd', 'x', '<', '>', '!', '0', '3',
                    '9', 'z',
                ])
            })
            .collect();
        let script = if i % 2 == 0 {
            "return {cmsgpack.unpack(ARGV[1])}"
        } else {
            "return {struct.unpack(ARGV[2], ARGV[1])}"
        };
        let reply = c.cmd(&[
            b"EVAL".to_vec(),
            script.as_bytes().to_vec(),
            b"0".to_vec(),
            data,
            fmt.into_bytes(),
        ]);
        if let Canon::Err(e) = &reply {
            assert!(e.starts_with("ERR user_script:1: "), "{e}");
        }
    }
    let deep = [vec![0x91u8; 100_000], vec![0xc0]].concat();
    match c.cmd(&[
        b"EVAL".to_vec(),
        b"return type(cmsgpack.unpack(ARGV[1]))".to_vec(),
        b"0".to_vec(),
        deep,
    ]) {
        Canon::Err(e) => assert!(e.contains("too many return values at once"), "{e}"),
        other => panic!("{other:?}"),
    }
    still_answers(&server);
}

/// A script's reply whose table holds itself in two places doubles at each level of nesting
/// (2^1000 elements at the depth bound): its conversion, which runs after the script's time
/// limit, ran for ever and held the executor (every database) while its memory grew. It is
/// now refused past `LUA_REPLY_ELEMENTS_MAX` elements, and the server answers on.
#[test]
fn a_script_reply_that_doubles_at_each_level_is_refused_not_built() {
    let dir = TempDir::new("lua-reply-doubling");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    for script in [
        "local t={} t[1]=t t[2]=t return t",
        "local t={} t.map={} t.map[t]=t return t",
    ] {
        let reply = c.cmd_str(&["EVAL", script, "0"]);
        assert!(
            matches!(&reply, Canon::Err(e) if e.contains("elements")),
            "{script}: {reply:?}"
        );
        still_answers(&server);
    }
}
