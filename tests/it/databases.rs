//! Many databases in one server (issue 17): the admin API and `tidepool db`, isolation through
//! every door, token resets, restarts, `kill -9` and snapshots, a thousand databases, the
//! per-database limits and usage counts.

use crate::common::*;
use serde_json::{json, Value};

const ADMIN: &str = "test-admin-token";

fn start(data: &std::path::Path, extra: &[&str]) -> Server {
    let mut flags = vec!["--admin-token", ADMIN];
    flags.extend_from_slice(extra);
    Server::try_start_env(data, &flags, &[("TIDEPOOL_USAGE_LOG_INTERVAL_MS", "1000")])
        .unwrap_or_else(|e| panic!("tidepool did not start: {e}"))
}

fn admin(server: &Server) -> Http {
    Http::connect(&server.addr, ADMIN)
}

/// Creates database `name`; its description (with tokens).
fn create(server: &Server, name: &str) -> Value {
    let r = admin(server).post(
        "/_admin/databases",
        json!({ "name": name }).to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()
}

fn client_of(server: &Server, db: &Value) -> Http {
    Http::connect(&server.addr, db["token"].as_str().expect("token"))
}

fn s(v: &str) -> Vec<u8> {
    v.as_bytes().to_vec()
}

#[test]
fn the_admin_api_creates_lists_resets_claims_and_deletes() {
    let dir = TempDir::new("dbs-admin");
    let server = start(dir.path(), &[]);
    let mut a = admin(&server);
    // Without the admin token: 401, with any other token too.
    assert_eq!(
        Http::connect(&server.addr, "")
            .get("/_admin/databases")
            .status,
        401
    );
    assert_eq!(server.client().get("/_admin/databases").status, 401);
    let app = create(&server, "app");
    assert_eq!(app["name"], "app");
    assert_eq!(app["rest_url"], format!("http://{}", server.addr));
    assert!(app["token"].as_str().is_some_and(|t| t != TOKEN));
    // Names: unique, and of a safe alphabet.
    let r = a.post("/_admin/databases", br#"{"name":"app"}"#);
    assert_eq!(r.status, 409, "{}", r.text());
    let r = a.post("/_admin/databases", br#"{"name":"no/slash"}"#);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"].as_str().is_some());
    let r = a.post("/_admin/databases", br#"{"name":7}"#);
    assert_eq!(r.status, 400);
    let r = a.post("/_admin/databases", &vec![b' '; 100_000]);
    assert_eq!(r.status, 413, "{}", r.text());
    let r = a.post("/_admin/databases", b"[1,2");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().is_some());
    // No name: one is picked.
    let r = a.post("/_admin/databases", b"");
    assert_eq!(r.status, 201);
    let picked = r.json()["name"].as_str().expect("name").to_string();
    let list = a.get("/_admin/databases").json();
    let names: Vec<&str> = list["databases"]
        .as_array()
        .expect("list")
        .iter()
        .map(|d| d["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, vec!["default", "app", picked.as_str()]);
    assert!(
        list["databases"][0].get("token").is_none(),
        "a list shows no tokens"
    );
    // Get: with tokens; the default database's are the configured ones.
    let d = a.get("/_admin/databases/default").json();
    assert_eq!(d["token"], TOKEN);
    assert_eq!(d["read_only_token"], RO_TOKEN);
    assert_eq!(a.get("/_admin/databases/nope").status, 404);
    // Reset: new tokens, the old ones 401 at once.
    let mut old = client_of(&server, &app);
    assert_eq!(old.cmd_str(&["SET", "k", "v"]), Canon::s("OK"));
    let r = a.post("/_admin/databases/app/reset", b"");
    assert_eq!(r.status, 200);
    let reset = r.json();
    assert_ne!(reset["token"], app["token"]);
    assert_ne!(reset["read_only_token"], app["read_only_token"]);
    assert_eq!(old.get("/get/k").status, 401);
    let mut ro_old = Http::connect(&server.addr, app["read_only_token"].as_str().expect("ro"));
    assert_eq!(ro_old.get("/get/k").status, 401);
    assert_eq!(
        client_of(&server, &reset).cmd_str(&["GET", "k"]),
        Canon::s("v")
    );
    // Claim of a database that does not expire changes nothing; delete removes it.
    assert_eq!(a.post("/_admin/databases/app/claim", b"").status, 200);
    let r = a.request("DELETE", "/_admin/databases/default", &[], b"");
    assert_eq!(r.status, 400, "the default database stays");
    assert_eq!(
        a.request("DELETE", "/_admin/databases/app", &[], b"")
            .status,
        200
    );
    assert_eq!(client_of(&server, &reset).get("/get/k").status, 401);
    assert_eq!(a.get("/_admin/databases/app").status, 404);
    assert_eq!(a.get("/_admin/nothing").status, 404);
}

#[test]
fn one_databases_tokens_reach_nothing_of_another_through_any_door() {
    let dir = TempDir::new("dbs-isolation");
    let server = start(dir.path(), &[]);
    let a = create(&server, "a");
    let b = create(&server, "b");
    let mut ca = client_of(&server, &a);
    let mut cb = client_of(&server, &b);
    let mut cd = server.client();
    for (c, v) in [
        (&mut ca, "in-a"),
        (&mut cb, "in-b"),
        (&mut cd, "in-default"),
    ] {
        assert_eq!(c.cmd_str(&["SET", "k", v]), Canon::s("OK"));
        assert_eq!(
            c.cmd_str(&["SET", &format!("only-{v}"), "1"]),
            Canon::s("OK")
        );
        assert_eq!(c.cmd_str(&["XADD", "x", "1-1", "f", v]), Canon::s("1-1"));
        assert_eq!(c.cmd_str(&["HSET", "h", "f", v]), Canon::Int(1));
    }
    // Every door: b's token sees b's value, never a's.
    for door in DOORS {
        assert_eq!(
            cb.cmd_via(*door, &[s("GET"), s("k")]),
            Canon::s("in-b"),
            "{door:?}"
        );
        assert_eq!(
            cb.cmd_via(*door, &[s("GET"), s("only-in-a")]),
            Canon::Nil,
            "{door:?}"
        );
        assert_eq!(
            cb.cmd_via(*door, &[s("EXISTS"), s("only-in-default")]),
            Canon::Int(0),
            "{door:?}"
        );
    }
    // ?_token= in the query string.
    let mut anon = Http::connect(&server.addr, "");
    let r = anon.get(&format!(
        "/get/k?_token={}",
        b["token"].as_str().expect("t")
    ));
    assert_eq!(r.json()["result"], "in-b");
    // KEYS, SCAN, DBSIZE, RANDOMKEY: only b's keys.
    let keys = cb.cmd_str(&["KEYS", "*"]);
    let Canon::Arr(mut keys) = keys else {
        panic!("{keys:?}")
    };
    keys.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(!keys.contains(&Canon::s("only-in-a")));
    assert_eq!(cb.cmd_str(&["DBSIZE"]), Canon::Int(4));
    // Streams and hashes.
    assert_eq!(
        cb.cmd_str(&["XRANGE", "x", "-", "+"]),
        Canon::Arr(vec![Canon::Arr(vec![
            Canon::s("1-1"),
            Canon::Arr(vec![Canon::s("f"), Canon::s("in-b")])
        ])])
    );
    assert_eq!(cb.cmd_str(&["HGET", "h", "f"]), Canon::s("in-b"));
    // Scripts: a script run with b's token reads b; a's script cache and functions are a's.
    assert_eq!(
        cb.cmd_str(&[
            "EVAL",
            "return redis.call('GET', KEYS[1])",
            "1",
            "only-in-a"
        ]),
        Canon::Nil
    );
    let sha = ca.cmd_str(&["SCRIPT", "LOAD", "return redis.call('GET', 'k')"]);
    let Canon::Str(sha) = sha else {
        panic!("{sha:?}")
    };
    let sha = String::from_utf8(sha).expect("sha");
    assert_eq!(ca.cmd_str(&["EVALSHA", &sha, "0"]), Canon::s("in-a"));
    assert_eq!(
        cb.cmd_str(&["SCRIPT", "EXISTS", &sha]),
        Canon::Arr(vec![Canon::Int(0)])
    );
    assert!(
        cb.cmd_str(&["EVALSHA", &sha, "0"]).is_err(),
        "NOSCRIPT in b"
    );
    let lib = "#!lua name=mylib\nredis.register_function('getk', function(k) return redis.call('GET', 'k') end)";
    assert_eq!(ca.cmd_str(&["FUNCTION", "LOAD", lib]), Canon::s("mylib"));
    assert_eq!(ca.cmd_str(&["FCALL", "getk", "0"]), Canon::s("in-a"));
    assert!(cb.cmd_str(&["FCALL", "getk", "0"]).is_err());
    assert_eq!(cb.cmd_str(&["FUNCTION", "LIST"]), Canon::Arr(vec![]));
    // FLUSHALL empties b only.
    assert_eq!(cb.cmd_str(&["FLUSHALL"]), Canon::s("OK"));
    assert_eq!(cb.cmd_str(&["DBSIZE"]), Canon::Int(0));
    assert_eq!(ca.cmd_str(&["GET", "k"]), Canon::s("in-a"));
    assert_eq!(cd.cmd_str(&["GET", "k"]), Canon::s("in-default"));
    // ACL users are per database, and so are their tokens.
    assert_eq!(
        ca.cmd_str(&["ACL", "SETUSER", "u", "on", ">pw", "~*", "+@all"]),
        Canon::s("OK")
    );
    let t = ca.cmd_str(&["ACL", "RESTTOKEN", "u", "pw"]);
    let Canon::Str(t) = t else { panic!("{t:?}") };
    let t = String::from_utf8(t).expect("token");
    let mut cu = Http::connect(&server.addr, &t);
    assert_eq!(cu.cmd_str(&["GET", "k"]), Canon::s("in-a"));
    // The same token made to name b, or the default database, opens nothing.
    let stem = t.rsplit_once('.').expect("suffix").0;
    for forged in [format!("{stem}.{}", b["id"]), stem.to_string()] {
        let r = Http::connect(&server.addr, &forged).get("/get/k");
        assert_eq!(r.status, 401, "{forged}");
    }
    assert!(
        cb.cmd_str(&["ACL", "RESTTOKEN", "u", "pw"]).is_err(),
        "no user u in b"
    );
    // Read Only token of a: reads a, writes nothing.
    let mut ro = Http::connect(&server.addr, a["read_only_token"].as_str().expect("ro"));
    assert_eq!(ro.cmd_str(&["GET", "k"]), Canon::s("in-a"));
    assert!(ro.cmd_str(&["SET", "k", "x"]).is_err());
    // Snapshots are the operator's.
    assert!(cb.cmd_str(&["BGSAVE"]).is_err());
    // A reset of a revokes its ACL-user token too.
    assert_eq!(
        admin(&server).post("/_admin/databases/a/reset", b"").status,
        200
    );
    assert_eq!(cu.get("/get/k").status, 401);
}

#[test]
fn monitor_subscribe_and_publish_are_per_database() {
    let dir = TempDir::new("dbs-streams");
    let server = start(dir.path(), &[]);
    let a = create(&server, "a");
    let b = create(&server, "b");
    let ta = a["token"].as_str().expect("t");
    let tb = b["token"].as_str().expect("t");
    let mut mon_b = SseReader::open(&server.addr, "/monitor", tb);
    assert_eq!(mon_b.next_data().as_deref(), Some("\"OK\""));
    let mut sub_b = SseReader::open(&server.addr, "/subscribe/ch", tb);
    assert_eq!(sub_b.next_data().as_deref(), Some("subscribe,ch,1"));
    let mut ca = Http::connect(&server.addr, ta);
    let mut cb = Http::connect(&server.addr, tb);
    // a publishes to no one: b's subscriber is b's.
    assert_eq!(ca.cmd_str(&["PUBLISH", "ch", "from-a"]), Canon::Int(0));
    assert_eq!(ca.cmd_str(&["PUBSUB", "CHANNELS"]), Canon::Arr(vec![]));
    assert_eq!(ca.cmd_str(&["SET", "secret", "a"]), Canon::s("OK"));
    assert_eq!(cb.cmd_str(&["PUBLISH", "ch", "from-b"]), Canon::Int(1));
    assert_eq!(sub_b.next_data().as_deref(), Some("message,ch,from-b"));
    // b's monitor saw b's command and none of a's.
    let line = mon_b.next_data().expect("monitor line");
    assert!(line.contains("\"PUBLISH\" \"ch\" \"from-b\""), "{line}");
    // Deleting b ends its streams.
    assert_eq!(
        admin(&server)
            .request("DELETE", "/_admin/databases/b", &[], b"")
            .status,
        200
    );
    assert!(mon_b.ended(), "the monitor did not end");
    assert!(sub_b.ended(), "the subscription did not end");
}

#[test]
fn databases_survive_restart_kill9_and_snapshots() {
    let dir = TempDir::new("dbs-durable");
    let data = dir.path().join("data");
    let server = start(&data, &[]);
    let a = create(&server, "a");
    let b = create(&server, "b");
    let c = create(&server, "c");
    client_of(&server, &a).cmd_str(&["SET", "k", "a1"]);
    client_of(&server, &b).cmd_str(&["SET", "k", "b1"]);
    client_of(&server, &c).cmd_str(&["SET", "k", "c1"]);
    assert_eq!(
        admin(&server).post("/_admin/databases/b/reset", b"").status,
        200
    );
    let b = admin(&server).get("/_admin/databases/b").json();
    server.kill9();
    let server = start(&data, &[]);
    assert_eq!(
        client_of(&server, &a).cmd_str(&["GET", "k"]),
        Canon::s("a1")
    );
    assert_eq!(
        client_of(&server, &b).cmd_str(&["GET", "k"]),
        Canon::s("b1")
    );
    // A snapshot, then more changes after it: deletion of c, a write to a, a new d.
    let mut d0 = server.client();
    assert!(!d0.cmd_str(&["SAVE"]).is_err());
    assert_eq!(
        admin(&server)
            .request("DELETE", "/_admin/databases/c", &[], b"")
            .status,
        200
    );
    client_of(&server, &a).cmd_str(&["SET", "k2", "a2"]);
    let d = create(&server, "d");
    client_of(&server, &d).cmd_str(&["SET", "k", "d1"]);
    assert_eq!(server.terminate(), Some(0));
    let server = start(&data, &[]);
    assert!(server.stderr().is_empty(), "{}", server.stderr());
    assert_eq!(
        client_of(&server, &a).cmd_str(&["GET", "k2"]),
        Canon::s("a2")
    );
    assert_eq!(
        client_of(&server, &b).cmd_str(&["GET", "k"]),
        Canon::s("b1")
    );
    assert_eq!(client_of(&server, &c).get("/get/k").status, 401);
    assert_eq!(
        client_of(&server, &d).cmd_str(&["GET", "k"]),
        Canon::s("d1")
    );
    let names: Vec<String> = admin(&server).get("/_admin/databases").json()["databases"]
        .as_array()
        .expect("list")
        .iter()
        .map(|d| d["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(names, vec!["default", "a", "b", "d"]);
    // A new database never takes a deleted one's number (c's tokens stay dead).
    let e = create(&server, "e");
    assert_ne!(e["id"], c["id"]);
    assert_eq!(client_of(&server, &c).get("/get/k").status, 401);
    // A reset of the default database replaces its configured tokens, across restarts.
    assert_eq!(
        admin(&server)
            .post("/_admin/databases/default/reset", b"")
            .status,
        200
    );
    assert_eq!(server.client().get("/get/k").status, 401);
    let fresh = admin(&server).get("/_admin/databases/default").json();
    server.kill9();
    let server = start(&data, &[]);
    assert_eq!(
        server.client().get("/get/k").status,
        401,
        "the flag's token stays revoked"
    );
    assert_eq!(client_of(&server, &fresh).get("/get/k").status, 200);
}

#[test]
fn a_thousand_databases_stay_intact_and_isolated_across_a_restart() {
    let dir = TempDir::new("dbs-thousand");
    let data = dir.path().join("data");
    let server = start(&data, &["--fsync", "never"]);
    let mut dbs = Vec::new();
    for i in 0..1000 {
        dbs.push(create(&server, &format!("db{i}")));
    }
    for (i, d) in dbs.iter().enumerate() {
        let mut c = client_of(&server, d);
        let r = c.pipeline(&[
            vec![s("SET"), s("mine"), format!("value-{i}").into_bytes()],
            vec![s("SET"), format!("only-{i}").into_bytes(), s("1")],
        ]);
        assert_eq!(r, vec![Canon::s("OK"), Canon::s("OK")]);
    }
    assert_eq!(server.terminate(), Some(0));
    let server = start(&data, &[]);
    for (i, d) in dbs.iter().enumerate() {
        let mut c = client_of(&server, d);
        let other = (i + 1) % dbs.len();
        let r = c.pipeline(&[
            vec![s("GET"), s("mine")],
            vec![s("EXISTS"), format!("only-{other}").into_bytes()],
            vec![s("DBSIZE")],
        ]);
        assert_eq!(
            r,
            vec![
                Canon::s(&format!("value-{i}")),
                Canon::Int(0),
                Canon::Int(2)
            ],
            "db{i}"
        );
    }
}

#[test]
fn tidepool_db_subcommands_talk_to_a_running_server() {
    let dir = TempDir::new("dbs-cli");
    let data = dir.path().join("data");
    let server = start(&data, &[]);
    let url = format!("http://{}", server.addr);
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
            .arg("db")
            .args(args)
            .args(["--url", &url])
            .output()
            .expect("run tidepool db");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The admin token from the flag, or from the data directory.
    let (code, out, err) = run(&["create", "cli", "--admin-token", ADMIN]);
    assert_eq!(code, Some(0), "{err}");
    let created: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(created["name"], "cli");
    let data_arg = data.to_string_lossy().into_owned();
    let (code, out, err) = run(&["list", "--data", &data_arg]);
    // The server was given --admin-token, so the stored one is not the one in use.
    assert_ne!(code, Some(0), "{out}");
    assert!(err.contains("401"), "{err}");
    let (code, out, _) = run(&["get", "cli", "--admin-token", ADMIN]);
    assert_eq!(code, Some(0));
    assert_eq!(
        serde_json::from_str::<Value>(&out).expect("json")["token"],
        created["token"]
    );
    let (code, out, _) = run(&["reset", "cli", "--admin-token", ADMIN]);
    assert_eq!(code, Some(0));
    assert_ne!(
        serde_json::from_str::<Value>(&out).expect("json")["token"],
        created["token"]
    );
    let (code, _, _) = run(&["claim", "cli", "--admin-token", ADMIN]);
    assert_eq!(code, Some(0));
    let (code, _, _) = run(&["delete", "cli", "--admin-token", ADMIN]);
    assert_eq!(code, Some(0));
    let (code, _, err) = run(&["get", "cli", "--admin-token", ADMIN]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("404") && err.contains("no database named 'cli'"),
        "{err}"
    );
    let (code, _, err) = run(&["frobnicate", "--admin-token", ADMIN]);
    assert_eq!(code, Some(2));
    // The argument parser's own wording (issue 26): it names the word and shows the usage.
    assert!(
        err.contains("unrecognized subcommand 'frobnicate'") && err.contains("Usage"),
        "{err}"
    );
}

#[test]
fn a_generated_admin_token_is_kept_and_read_by_tidepool_db() {
    let dir = TempDir::new("dbs-cli-stored");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .args([
            "db",
            "list",
            "--url",
            &format!("http://{}", server.addr),
            "--data",
        ])
        .arg(&data)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["databases"][0]["name"], "default");
}

#[test]
fn daily_request_limit_counts_commands_and_discards_a_transaction_whole() {
    let dir = TempDir::new("dbs-daily");
    let server = start(dir.path(), &["--max-requests-per-day", "5"]);
    let other = create(&server, "other");
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["SET", "a", "1"]), Canon::s("OK"));
    // A pipeline of three: each counts.
    let r = c.pipeline(&[
        vec![s("INCR"), s("a")],
        vec![s("INCR"), s("a")],
        vec![s("INCR"), s("a")],
    ]);
    assert_eq!(r, vec![Canon::Int(2), Canon::Int(3), Canon::Int(4)]);
    // One left: a transaction of two is discarded whole, with one error envelope.
    let r = c.request(
        "POST",
        "/multi-exec",
        &[],
        br#"[["INCR","a"],["INCR","a"]]"#,
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"error": "ERR max daily request limit exceeded"})
    );
    // The last one runs; then every door answers the limit's text.
    assert_eq!(c.cmd_str(&["INCR", "a"]), Canon::Int(5));
    for door in DOORS {
        assert_eq!(
            c.cmd_via(*door, &[s("GET"), s("a")]),
            Canon::Err("ERR max daily request limit exceeded".into()),
            "{door:?}"
        );
    }
    // A pipeline past the limit: each command gets the error.
    let r = c.pipeline(&[vec![s("GET"), s("a")]]);
    assert_eq!(
        r,
        vec![Canon::Err("ERR max daily request limit exceeded".into())]
    );
    // The limit is per database.
    assert_eq!(
        client_of(&server, &other).cmd_str(&["SET", "x", "1"]),
        Canon::s("OK")
    );
}

#[test]
fn max_value_bytes_refuses_large_writes_with_the_hosted_text() {
    let dir = TempDir::new("dbs-value");
    let server = start(dir.path(), &["--max-value-bytes", "10"]);
    let mut c = server.client();
    let err = Canon::Err("ERR max single record size exceeded".into());
    for door in DOORS {
        assert_eq!(
            c.cmd_via(*door, &[s("SET"), s("k"), s("0123456789A")]),
            err,
            "{door:?}"
        );
        assert_eq!(
            c.cmd_via(*door, &[s("SET"), s("k"), s("0123456789")]),
            Canon::s("OK"),
            "{door:?}"
        );
    }
    // A string growing past the limit in place.
    assert_eq!(c.cmd_str(&["APPEND", "k", "x"]), err);
    assert_eq!(c.cmd_str(&["SETRANGE", "k", "10", "x"]), err);
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("0123456789"));
    // Reads and deletes are never refused; keys do not count.
    let long_key = "k".repeat(100);
    assert_eq!(c.cmd_str(&["SET", &long_key, "v"]), Canon::s("OK"));
    assert_eq!(c.cmd_str(&["DEL", &long_key]), Canon::Int(1));
    // From a script, too; and a transaction with one such write is discarded whole.
    assert_eq!(
        c.cmd_str(&[
            "EVAL",
            "return redis.pcall('SET', 'k', ARGV[1])",
            "0",
            "0123456789AB"
        ]),
        err
    );
    let r = c.request(
        "POST",
        "/multi-exec",
        &[],
        br#"[["SET","j","1"],["SET","k","0123456789AB"]]"#,
    );
    assert_eq!(
        r.json(),
        json!({"error": "ERR max single record size exceeded"})
    );
    assert_eq!(c.cmd_str(&["EXISTS", "j"]), Canon::Int(0));
}

#[test]
fn usage_is_counted_per_database_and_kept_across_restarts() {
    let dir = TempDir::new("dbs-usage");
    let data = dir.path().join("data");
    let server = start(&data, &[]);
    let a = create(&server, "a");
    let mut ca = client_of(&server, &a);
    for _ in 0..3 {
        ca.cmd_str(&["SET", "k", "v"]);
    }
    ca.pipeline(&[vec![s("GET"), s("k")], vec![s("GET"), s("k")]]);
    server.client().cmd_str(&["GET", "k"]);
    let stats = |c: &mut Http| match c.cmd_str(&["INFO", "commandstats"]) {
        Canon::Str(b) => String::from_utf8(b).expect("utf8"),
        other => panic!("{other:?}"),
    };
    let text = stats(&mut ca);
    assert!(text.starts_with("# Commandstats\r\n"), "{text}");
    assert!(text.contains("cmdstat_set:calls=3,"), "{text}");
    assert!(text.contains("cmdstat_get:calls=2,"), "{text}");
    // Three SETs, a pipeline of two GETs, and the INFO: five requests, six commands.
    let d = admin(&server).get("/_admin/databases/a").json();
    assert_eq!(d["requests_today"], 5);
    assert_eq!(d["commands_today"], 6);
    // The counts are logged at most a second later: wait for that record in the log (read
    // beside the running server), then a kill -9.
    let d = data.to_str().expect("path");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, out) = log_tool(&["dump", "--kind", "databases", d]);
        if out.contains("Usage") && out.contains("\"set\": 3") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no usage record: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    server.kill9();
    let server = start(&data, &[]);
    let mut ca = client_of(&server, &a);
    let text = stats(&mut ca);
    assert!(text.contains("cmdstat_set:calls=3,"), "{text}");
    // The INFO request itself is counted too.
    assert!(text.contains("cmdstat_info:calls=2,"), "{text}");
    let stats_text = match ca.cmd_str(&["INFO", "stats"]) {
        Canon::Str(b) => String::from_utf8(b).expect("utf8"),
        other => panic!("{other:?}"),
    };
    assert!(
        stats_text.contains("total_commands_processed:"),
        "{stats_text}"
    );
    // The default database's counts are its own.
    let text = stats(&mut server.client());
    assert!(text.contains("cmdstat_get:calls=1,"), "{text}");
    assert!(!text.contains("cmdstat_set"), "{text}");
}

#[test]
fn scratch_expiry_and_claims_hold_across_kill9() {
    let dir = TempDir::new("dbs-scratch");
    let data = dir.path().join("data");
    let server = start(&data, &["--scratch-ttl", "3s"]);
    let mut anon = Http::connect(&server.addr, "");
    let doc = |r: Resp| {
        assert_eq!(r.status, 201, "{}", r.text());
        let text = r.text();
        let token = text
            .split("UPSTASH_REDIS_REST_TOKEN=\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .expect("token in the quickstart")
            .to_string();
        let name = text
            .split("scratch database: `")
            .nth(1)
            .and_then(|t| t.split('`').next())
            .expect("name")
            .to_string();
        (name, token)
    };
    let (kept, kept_token) = doc(anon.post("/start", b""));
    let (gone, gone_token) = doc(anon.post("/start", b""));
    assert_ne!(kept, gone);
    let r = admin(&server).post(&format!("/_admin/databases/{kept}/claim"), b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["expires_at"], Value::Null);
    Http::connect(&server.addr, &kept_token).cmd_str(&["SET", "k", "kept"]);
    Http::connect(&server.addr, &gone_token).cmd_str(&["SET", "k", "gone"]);
    server.kill9();
    // After the restart, the unclaimed one still expires on time; the claimed one stays.
    let server = start(&data, &["--scratch-ttl", "3s"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while Http::connect(&server.addr, &gone_token)
        .get("/get/k")
        .status
        != 401
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the scratch database never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        Http::connect(&server.addr, &kept_token).cmd_str(&["GET", "k"]),
        Canon::s("kept")
    );
    server.kill9();
    let server = start(&data, &[]);
    assert_eq!(
        Http::connect(&server.addr, &gone_token)
            .get("/get/k")
            .status,
        401
    );
    assert_eq!(
        admin(&server)
            .get(&format!("/_admin/databases/{gone}"))
            .status,
        404
    );
    // Switched off, the path is a command path like any other (and needs a token).
    let server2 = start(&dir.path().join("off"), &["--start-path", "off"]);
    assert_eq!(
        Http::connect(&server2.addr, "").post("/start", b"").status,
        401
    );
}
