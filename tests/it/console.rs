//! Issue 29: the web console's routes. What a browser does with them is in
//! tests/python/test_console.py; here, what the server answers: the safety headers on every
//! console response, the session route for every token kind (and for none, and for a token in
//! the query, which it ignores), nothing but GET, and the flag with its default on a public
//! address.

use crate::common::*;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn admin_token(s: &Server) -> String {
    let creds: serde_json::Value = serde_json::from_slice(
        &std::fs::read(s.data.join("credentials.json")).expect("credentials.json"),
    )
    .expect("credentials JSON");
    creds["admin_token"]
        .as_str()
        .expect("an admin token")
        .to_string()
}

fn session(s: &Server, token: &str) -> Resp {
    Http::connect(&s.addr, token).get("/console/api/session")
}

#[test]
fn the_console_and_its_assets_carry_the_safety_headers() {
    let dir = TempDir::new("console-assets");
    let s = Server::start(dir.path(), &[]);
    let mut anon = Http::connect(&s.addr, "");
    for (path, kind) in [
        ("/console", "text/html; charset=utf-8"),
        ("/console/", "text/html; charset=utf-8"),
        ("/console/app.js", "text/javascript; charset=utf-8"),
        ("/console/style.css", "text/css; charset=utf-8"),
        ("/console/favicon.svg", "image/svg+xml"),
    ] {
        let r = anon.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some(kind), "{path}");
        assert_eq!(r.header("content-security-policy"), Some(CSP), "{path}");
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(r.header("cache-control"), Some("no-store"), "{path}");
    }
    // The page loads only its own files: no inline script or style for the policy to allow.
    let page = anon.get("/console/").text();
    assert!(page.contains(r#"<script type="module" src="/console/app.js"></script>"#));
    assert!(!page.contains("<script>") && !page.contains("<style") && !page.contains("style="));
    // The script builds the page from text, never from HTML.
    let script = anon.get("/console/app.js").text();
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(sink), "app.js uses {sink}");
    }
    let r = anon.get("/console/nope");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"], "ERR no such console page or route");
    assert_eq!(r.header("content-security-policy"), Some(CSP));
}

#[test]
fn the_session_route_says_what_each_token_opens() {
    let dir = TempDir::new("console-session");
    let s = Server::start_delivery(&dir.path().join("data"));
    let std = session(&s, TOKEN);
    assert_eq!(std.status, 200);
    assert_eq!(
        std.json(),
        serde_json::json!({
            "redis": {"access": "standard", "default_database": true},
            "qstash": null,
            "admin": false,
        })
    );
    assert_eq!(session(&s, RO_TOKEN).json()["redis"]["access"], "read-only");
    let q = session(&s, QSTASH_TOKEN).json();
    assert_eq!(q["qstash"], "full");
    assert_eq!(q["redis"], serde_json::Value::Null);
    assert_eq!(session(&s, &admin_token(&s)).json()["admin"], true);
    // An ACL user's token is one the executor checks per command: the route names its kind.
    let mut c = s.client();
    c.cmd_str(&["ACL", "SETUSER", "ann", "on", ">pw", "~*", "+@read"]);
    let Canon::Str(tok) = c.cmd_str(&["ACL", "RESTTOKEN", "ann", "pw"]) else {
        panic!("RESTTOKEN did not answer a token");
    };
    let tok = String::from_utf8(tok).expect("utf-8");
    let user = session(&s, &tok).json();
    assert_eq!(user["redis"]["access"], "user");
    assert_eq!(user["redis"]["user"], "ann");
    // ann may read only: the page will hide its edit controls.
    assert_eq!(user["redis"]["may_edit"], false);
    c.cmd_str(&["ACL", "SETUSER", "bo", "on", ">pw", "~*", "+@all"]);
    let Canon::Str(bo) = c.cmd_str(&["ACL", "RESTTOKEN", "bo", "pw"]) else {
        panic!("RESTTOKEN did not answer a token");
    };
    let bo = session(&s, std::str::from_utf8(&bo).expect("utf-8")).json();
    assert_eq!(bo["redis"]["may_edit"], true);
    // A token shaped as a user's that no user holds, or a user's after the user is gone,
    // opens nothing.
    let forged = format!("{}x", &tok[..tok.len() - 1]);
    assert_eq!(session(&s, &forged).status, 401);
    c.cmd_str(&["ACL", "DELUSER", "ann"]);
    assert_eq!(session(&s, &tok).status, 401);
    // Nothing, a wrong token, and a right one in the query (the console's token travels only
    // in the Authorization header) open nothing.
    for (token, path) in [
        ("", "/console/api/session"),
        ("wrong", "/console/api/session"),
        ("", &*format!("/console/api/session?_token={TOKEN}")),
    ] {
        let r = Http::connect(&s.addr, token).get(path);
        assert_eq!(r.status, 401, "{token:?} {path}");
        assert!(r.json()["error"].is_string());
    }
}

#[test]
fn no_console_route_takes_anything_but_get() {
    let dir = TempDir::new("console-methods");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    for path in ["/console/", "/console/api/session", "/console/app.js"] {
        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            let r = c.request(method, path, &[], b"[\"FLUSHALL\"]");
            assert_eq!(r.status, 405, "{method} {path}");
            assert!(r.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains("read with GET")));
        }
    }
}

#[test]
fn the_console_is_off_on_a_public_address_unless_asked_for() {
    let dir = TempDir::new("console-flag");
    // Off on loopback when asked: /console is then an ordinary REST path (a command named
    // "console"), refused as one.
    let s = Server::start(&dir.path().join("off"), &["--console", "off"]);
    let r = s.client().get("/console/");
    assert_ne!(r.header("content-security-policy"), Some(CSP));
    assert_eq!(r.status, 400);
    drop(s);
    // The default on a public address is off; `--console on` opens it there.
    for (flags, on) in [(vec![], false), (vec!["--console", "on"], true)] {
        let data = dir.path().join(format!("public-{on}"));
        let mut args = vec!["serve", "--listen", "0.0.0.0:0", "--data"];
        let data_s = data.to_str().expect("utf-8 path").to_string();
        args.push(&data_s);
        args.extend(flags.iter().copied());
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start");
        let out = child.stdout.take().expect("stdout");
        let banner: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(out))
            .map_while(Result::ok)
            .take_while(|l| !l.contains("admin token"))
            .collect();
        let port = banner[0]
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .expect("the port in the banner");
        let r = Http::connect(&format!("127.0.0.1:{port}"), "").get("/console/");
        assert_eq!(
            r.header("content-security-policy") == Some(CSP),
            on,
            "{flags:?}"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args(["serve", "--console", "maybe", "--data"])
        .arg(dir.path().join("bad"))
        .output()
        .expect("run");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--console 'maybe' must be on or off"));
}

/// A key's history and the keyspace at a point, through the console's routes: every change
/// with the value after it; a past point's keys and values; and, for an ACL user, only what
/// its patterns allow (another key a command names shows as `(hidden)`).
#[test]
fn time_travel_shows_the_past_as_the_token_may_see_it() {
    let dir = TempDir::new("console-travel");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    // Each write in a millisecond of its own, so that a time names one of them.
    for cmd in [
        &["SET", "app:k", "1"][..],
        &["SET", "app:k", "2"],
        &["RENAME", "app:k", "secret:k"],
        &["RENAME", "secret:k", "app:k"],
        &["SET", "secret:other", "x"],
        &["DEL", "app:k"],
    ] {
        c.cmd_str(cmd);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut std = Http::connect(&s.addr, TOKEN);
    let h = std.get("/console/api/history?key=app%3Ak").json();
    let changes = h["changes"].as_array().expect("changes");
    let seen: Vec<(String, serde_json::Value)> = changes
        .iter()
        .map(|c| {
            (
                c["commands"][0][0].as_str().unwrap_or("").to_string(),
                c["value"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("SET".into(), serde_json::json!("1")),
            ("SET".into(), serde_json::json!("2")),
            ("RENAME".into(), serde_json::Value::Null),
            ("RENAME".into(), serde_json::json!("2")),
            ("DEL".into(), serde_json::Value::Null),
        ]
    );
    assert_eq!(
        changes[2]["commands"][0],
        serde_json::json!(["RENAME", "app:k", "secret:k"])
    );
    // The point before the delete: the key and its value as they were.
    let before = changes[3]["at"]["seq"].as_u64().expect("seq");
    let at = std
        .get(&format!("/console/api/at?point={before}&key=app:k"))
        .json();
    assert_eq!(
        (at["type"].as_str(), at["value"].as_str()),
        (Some("string"), Some("2"))
    );
    let keys = std.get(&format!("/console/api/at?point={before}")).json();
    assert_eq!(keys["keys"], serde_json::json!(["app:k"]));
    // A time works as a point too.
    let ms = changes[3]["at"]["unix_ms"].as_u64().expect("ms");
    let at = std
        .get(&format!("/console/api/at?point={ms}&key=app:k"))
        .json();
    assert_eq!(at["value"], "2");
    // The Read Only token reads the past as it reads the present.
    let ro = Http::connect(&s.addr, RO_TOKEN).get("/console/api/history?key=app:k");
    assert_eq!(ro.status, 200);

    // An ACL user who may read app:* only.
    c.cmd_str(&["ACL", "SETUSER", "ann", "on", ">pw", "~app:*", "+@all"]);
    let Canon::Str(tok) = c.cmd_str(&["ACL", "RESTTOKEN", "ann", "pw"]) else {
        panic!("no token");
    };
    let mut ann = Http::connect(&s.addr, &String::from_utf8(tok).expect("utf-8"));
    let h = ann.get("/console/api/history?key=app:k").json();
    assert_eq!(
        h["changes"][2]["commands"][0],
        serde_json::json!(["RENAME", "app:k", "(hidden)"])
    );
    let last = h["changes"][4]["at"]["seq"].as_u64().expect("seq");
    let keys = ann.get(&format!("/console/api/at?point={last}")).json();
    assert_eq!(
        keys["keys"],
        serde_json::json!([]),
        "secret:other is not ann's"
    );
    for path in [
        "/console/api/history?key=secret:k".to_string(),
        format!("/console/api/at?point={before}&key=secret:other"),
    ] {
        let r = ann.get(&path);
        assert_eq!(r.status, 403, "{path}");
        assert!(r.json()["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("NOPERM")));
    }
}

/// The time-travel routes' bad requests: no key, a point that is not one, no token.
#[test]
fn time_travel_refuses_bad_requests_clearly() {
    let dir = TempDir::new("console-travel-bad");
    let s = Server::start(dir.path(), &[]);
    let mut c = Http::connect(&s.addr, TOKEN);
    for (path, status, needle) in [
        ("/console/api/history", 400, "name a key"),
        ("/console/api/at", 400, "name a point"),
        (
            "/console/api/at?point=yesterday",
            400,
            "neither a sequence number",
        ),
        (
            "/console/api/at?point=-1&key=k",
            400,
            "neither a sequence number",
        ),
        ("/console/api/history?key=%ZZ", 200, ""),
    ] {
        let r = c.get(path);
        assert_eq!(r.status, status, "{path}: {}", r.text());
        if status != 200 {
            assert!(
                r.json()["error"]
                    .as_str()
                    .is_some_and(|e| e.contains(needle)),
                "{path}"
            );
        }
    }
    let r = Http::connect(&s.addr, "").get("/console/api/history?key=k");
    assert_eq!(r.status, 401);
    let r = Http::connect(&s.addr, "").get(&format!("/console/api/history?key=k&_token={TOKEN}"));
    assert_eq!(r.status, 401, "a token in the query is not the console's");
}

/// The log's timeline counts the token's own database's records only, per minute, and each
/// bar names its last record.
#[test]
fn the_timeline_counts_the_tokens_own_records() {
    let dir = TempDir::new("console-timeline");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    for i in 0..5 {
        c.cmd_str(&["SET", &format!("k{i}"), "v"]);
    }
    // Another database's writes are not this one's.
    let admin = admin_token(&s);
    let mut a = Http::connect(&s.addr, &admin);
    let created = a.post("/_admin/databases", br#"{"name":"other"}"#).json();
    let mut other = Http::connect(&s.addr, created["token"].as_str().expect("token"));
    for i in 0..3 {
        other.cmd_str(&["SET", &format!("o{i}"), "v"]);
    }
    let t = Http::connect(&s.addr, TOKEN)
        .get("/console/api/timeline")
        .json();
    assert_eq!(t["bucket_ms"], 60_000);
    let buckets = t["buckets"].as_array().expect("buckets");
    let total: u64 = buckets.iter().filter_map(|b| b["records"].as_u64()).sum();
    assert_eq!(total, 5, "{t}");
    let o = other.get("/console/api/timeline").json();
    let total: u64 = o["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .filter_map(|b| b["records"].as_u64())
        .sum();
    assert_eq!(total, 3, "{o}");
    let last = buckets.last().expect("a bar")["last_seq"]
        .as_u64()
        .expect("seq");
    let keys = Http::connect(&s.addr, TOKEN)
        .get(&format!("/console/api/at?point={last}"))
        .json();
    assert_eq!(keys["keys"].as_array().map(Vec::len), Some(5));
}

/// The cron helper answers with the schedules' own parser: the next five runs, for the
/// QStash tokens only, and the parser's error for a bad expression.
#[test]
fn the_cron_helper_uses_the_schedules_parser() {
    let dir = TempDir::new("console-cron");
    let s = Server::start_delivery(&dir.path().join("data"));
    let mut q = s.qstash();
    let r = q.get("/console/api/cron?expr=CRON_TZ%3DEurope%2FParis%200%209%20*%20*%201");
    assert_eq!(r.status, 200, "{}", r.text());
    let next = r.json()["next"].as_array().cloned().expect("next");
    assert_eq!(next.len(), 5);
    // 09:00 in Paris is 07:00 or 08:00 UTC, on Mondays, a week apart.
    let ms: Vec<u64> = next.iter().filter_map(|n| n["unix_ms"].as_u64()).collect();
    assert!(ms.windows(2).all(|w| w[1] - w[0] == 7 * 86_400_000
        || w[1] - w[0] == 7 * 86_400_000 + 3_600_000
        || w[1] - w[0] + 3_600_000 == 7 * 86_400_000));
    for (path, status, needle) in [
        ("/console/api/cron", 400, "name a cron expression"),
        ("/console/api/cron?expr=*%20*%20*", 400, "five fields"),
        (
            "/console/api/cron?expr=61%20*%20*%20*%20*",
            400,
            "invalid cron",
        ),
        (
            "/console/api/cron?expr=CRON_TZ%3DMars%2FBase%20*%20*%20*%20*%20*",
            400,
            "unknown time zone",
        ),
    ] {
        let r = q.get(path);
        assert_eq!(r.status, status, "{path}");
        assert!(
            r.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains(needle)),
            "{path}: {}",
            r.text()
        );
    }
    assert_eq!(
        s.client()
            .get("/console/api/cron?expr=*%20*%20*%20*%20*")
            .status,
        401
    );
}

/// The review of issue 29's time travel, each finding held here:
/// - MSET's values of another key are not shown to a user who may not read that key;
/// - keys are found as the ACL finds them (ZUNIONSTORE's sources, SORT's STORE), and FLUSHDB
///   is a change of every key;
/// - the rights are those of the REST read (TYPE; SCAN for the keys at a point), so a user
///   who may only SET, and the Read Only token's listing, are refused;
/// - the keys at a point are filtered before they are counted;
/// - a command's long argument is cut.
#[test]
fn time_travel_holds_what_its_review_found() {
    let dir = TempDir::new("console-travel-review");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    let big = "b".repeat(2000);
    for cmd in [
        vec!["MSET", "app:m", "x", "secret:m", "MSETSECRET"],
        vec!["ZADD", "secret:z", "1", "zs"],
        vec!["ZUNIONSTORE", "app:z2", "1", "secret:z"],
        vec!["RPUSH", "app:list", "3", "1", "2"],
        vec!["SORT", "app:list", "STORE", "app:out"],
        vec!["SET", "app:big", &big],
        vec!["SET", "app:gone", "1"],
        vec!["FLUSHDB"],
    ] {
        assert!(!c.cmd_str(&cmd).is_err(), "{cmd:?}");
    }
    c.cmd_str(&["ACL", "SETUSER", "ann", "on", ">pw", "~app:*", "+@all"]);
    c.cmd_str(&[
        "ACL", "SETUSER", "wo", "on", ">pw", "~app:*", "-@all", "+set",
    ]);
    let token = |c: &mut Http, u: &str| match c.cmd_str(&["ACL", "RESTTOKEN", u, "pw"]) {
        Canon::Str(t) => String::from_utf8(t).expect("utf-8"),
        other => panic!("{other:?}"),
    };
    let mut ann = Http::connect(&s.addr, &token(&mut c, "ann"));
    let mut wo = Http::connect(&s.addr, &token(&mut c, "wo"));
    let first = |h: &serde_json::Value| h["changes"][0]["commands"][0].clone();
    let m = ann.get("/console/api/history?key=app:m").json();
    assert_eq!(
        first(&m),
        serde_json::json!(["MSET", "app:m", "(hidden)", "(hidden)", "(hidden)"])
    );
    assert!(!m.to_string().contains("MSETSECRET"));
    let z = ann.get("/console/api/history?key=app:z2").json();
    assert!(!z.to_string().contains("secret:z"), "{z}");
    let out = Http::connect(&s.addr, TOKEN)
        .get("/console/api/history?key=app:out")
        .json();
    assert_eq!(first(&out)[0], "SORT", "{out}");
    let gone = Http::connect(&s.addr, TOKEN)
        .get("/console/api/history?key=app:gone")
        .json();
    let changes = gone["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 2, "{gone}");
    // FLUSHDB is logged as its effect, FLUSHALL of the database.
    assert_eq!(changes[1]["commands"][0], serde_json::json!(["FLUSHALL"]));
    assert_eq!(changes[1]["value"], serde_json::Value::Null);
    let b = Http::connect(&s.addr, TOKEN)
        .get("/console/api/history?key=app:big")
        .json();
    let arg = first(&b)[2].as_str().unwrap_or("").to_string();
    assert!(arg.len() < 300 && arg.ends_with("(2000 bytes)"), "{arg}");
    // Rights: TYPE for a key, SCAN for the keys at a point.
    for path in [
        "/console/api/history?key=app:m",
        "/console/api/at?point=1&key=app:m",
        "/console/api/at?point=1",
        "/console/api/timeline",
    ] {
        let r = wo.get(path);
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert!(r.json()["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("NOPERM")));
    }
    let mut ro = Http::connect(&s.addr, RO_TOKEN);
    assert_eq!(ro.get("/console/api/at?point=1").status, 403);
    assert_eq!(ro.get("/console/api/history?key=app:m").status, 200);
    // The keys at a point: ann's, however many others come first.
    let mut mset = vec!["MSET".to_string()];
    for i in 0..1500 {
        mset.extend([format!("zz:{i}"), "v".into()]);
    }
    c.cmd_str(&mset.iter().map(String::as_str).collect::<Vec<_>>());
    for i in 0..3 {
        c.cmd_str(&["SET", &format!("app:k{i}"), "v"]);
    }
    let keys = ann.get("/console/api/at?point=99999999").json();
    let mut names: Vec<&str> = keys["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .filter_map(|k| k.as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["app:k0", "app:k1", "app:k2"]);
    assert_eq!(keys["more"], false);
}

/// A point older than the log kept answers 400 without naming the data directory, and a
/// history that starts at a snapshot (the log before it compacted) begins with the key there.
#[test]
fn time_travel_before_the_kept_log_is_refused_and_a_history_begins_at_its_snapshot() {
    let dir = TempDir::new("console-travel-compacted");
    let data = dir.path().join("data");
    let s = Server::start(&data, &["--log-retention", "0"]);
    let mut c = s.client();
    for v in ["1", "2", "3"] {
        c.cmd_str(&["SET", "k", v]);
    }
    assert_eq!(c.cmd_str(&["SAVE"]), Canon::s("OK"));
    let mut t = Http::connect(&s.addr, TOKEN);
    let r = t.get("/console/api/at?point=1&key=k");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("older than the log")));
    assert!(!r.text().contains(data.to_str().expect("utf-8")));
    let h = t.get("/console/api/history?key=k").json();
    assert_eq!(h["from_snapshot"]["value"], "3", "{h}");
    assert_eq!(h["changes"], serde_json::json!([]));
}

/// A rebuild is bounded in time: past `TIDEPOOL_CONSOLE_REBUILD_MS` (here 0: the first look
/// at the clock, after 1,024 records) a history ends where the replay got to and says so, and
/// a point answers 503.
#[test]
fn a_rebuild_that_takes_too_long_ends_or_is_refused() {
    let dir = TempDir::new("console-deadline");
    let s = Server::try_start_env(dir.path(), &[], &[("TIDEPOOL_CONSOLE_REBUILD_MS", "0")])
        .unwrap_or_else(|e| panic!("tidepool did not start: {e}"));
    let mut c = s.client();
    for i in 0..3000 {
        c.cmd_str(&["SET", "k", &i.to_string()]);
    }
    let mut t = Http::connect(&s.addr, TOKEN);
    let h = t.get("/console/api/history?key=k").json();
    let cut = h["cut_at"]["seq"].as_u64().expect("cut_at");
    let last = h["changes"]
        .as_array()
        .and_then(|c| c.last())
        .expect("changes")["at"]["seq"]
        .as_u64()
        .expect("seq");
    assert!(last <= cut && cut < 3000, "{cut} {last}");
    let r = t.get("/console/api/at?point=99999999&key=k");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.json()["error"]
        .as_str()
        .is_some_and(|e| e.contains("took longer than")));
}

/// A database token's usage route shows its own database only, as the admin API counts it.
#[test]
fn the_usage_route_shows_the_tokens_own_database() {
    let dir = TempDir::new("console-usage");
    let s = Server::start(dir.path(), &[]);
    let mut a = Http::connect(&s.addr, &admin_token(&s));
    let created = a.post("/_admin/databases", br#"{"name":"shop"}"#).json();
    let mut shop = Http::connect(&s.addr, created["token"].as_str().expect("token"));
    for i in 0..4 {
        shop.cmd_str(&["SET", &format!("k{i}"), "v"]);
    }
    s.client().cmd_str(&["SET", "x", "v"]);
    let u = shop.get("/console/api/usage").json();
    assert_eq!(u["name"], "shop");
    assert_eq!(u["keys"], 4);
    assert!(u.get("token").is_none() && u.get("read_only_token").is_none());
    let d = Http::connect(&s.addr, RO_TOKEN)
        .get("/console/api/usage")
        .json();
    assert_eq!(
        (d["name"].as_str(), d["keys"].as_u64()),
        (Some("default"), Some(1))
    );
    assert_eq!(
        Http::connect(&s.addr, "").get("/console/api/usage").status,
        401
    );
}
