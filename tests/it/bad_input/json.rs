//! JSON documents and JSONPath: texts that are not JSON, paths that are not paths, changes
//! of the wrong kind, and nesting ten times past both depth limits.

use super::*;

/// (command, the words its error holds)
const CASES: &[(&[&str], &str)] = &[
    (&["JSON.SET", "j", "$", "{"], "ERR"),
    (&["JSON.SET", "j", "$", ""], "ERR"),
    (&["JSON.SET", "j", "$", "[1,]"], "ERR"),
    (&["JSON.SET", "j", "$", "{\"a\" 1}"], "ERR"),
    (&["JSON.SET", "j", "$", "'single'"], "ERR"),
    (&["JSON.SET", "j", "$", "NaN"], "ERR"),
    (&["JSON.SET", "j", "$", "\"\\ud800\""], "ERR"),
    (&["JSON.SET", "j", "$", "1", "NX", "XX"], "syntax error"),
    (&["JSON.SET", "j", "$", "1", "BOGUS"], "syntax error"),
    (
        &["JSON.SET", "new", "$.a", "1"],
        "new objects must be created at the root",
    ),
    (&["JSON.SET", "d", "$[", "1"], "ERR"),
    (&["JSON.SET", "d", "$..", "1"], "ERR"),
    (&["JSON.SET", "d", "$.a[?(@.b==", "1"], "ERR"),
    (&["JSON.GET", "d", "$[?(@.a =~ \"(\")]"], "ERR"),
    (&["JSON.GET", "d", "INDENT"], "ERR"),
    (&["JSON.GET", "s"], "WRONGTYPE"),
    (&["JSON.NUMINCRBY", "d", "$.s", "x"], "ERR"),
    (&["JSON.NUMINCRBY", "d", ".s", "1"], "ERR"),
    (&["JSON.NUMINCRBY", "d", ".n", "1e400"], "ERR"),
    (&["JSON.NUMMULTBY", "d", ".n", "1e308"], "ERR"),
    (&["JSON.STRAPPEND", "d", ".n", "\"x\""], "ERR"),
    (&["JSON.STRAPPEND", "d", ".s", "x"], "ERR"),
    (&["JSON.ARRAPPEND", "d", ".s", "1"], "ERR"),
    (
        &["JSON.ARRAPPEND", "d", ".arr"],
        "wrong number of arguments",
    ),
    (
        &["JSON.ARRINSERT", "d", ".arr", "99", "1"],
        "index out of bounds",
    ),
    (&["JSON.ARRINSERT", "d", ".arr", "x", "1"], "ERR"),
    (&["JSON.ARRPOP", "d", ".s"], "ERR"),
    (&["JSON.ARRTRIM", "d", ".arr", "x", "1"], "ERR"),
    (&["JSON.ARRINDEX", "d", ".arr", "{"], "ERR"),
    (&["JSON.OBJKEYS", "d", ".arr"], "ERR"),
    (&["JSON.MERGE", "d", "$", "{"], "ERR"),
    (&["JSON.MERGE", "nodoc", "$.a", "1"], "ERR"),
    (&["JSON.MSET", "d", "$"], "wrong number of arguments"),
    (&["JSON.MGET", "d"], "wrong number of arguments"),
    (&["JSON.TOGGLE", "d", ".s"], "ERR"),
    (&["JSON.CLEAR", "d", "$[", "x"], "ERR"),
    (&["JSON.DEL", "d", "$[?("], "ERR"),
    (&["JSON.TYPE", "d", "$["], "ERR"),
];

pub const CASES_LEN: usize = CASES.len() + 4;

#[test]
fn bad_json_and_paths_get_clear_errors() {
    let dir = TempDir::new("bad-json");
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    c.cmd_str(&["SET", "s", "x"]);
    c.cmd_str(&[
        "JSON.SET",
        "d",
        "$",
        r#"{"s":"t","n":1.5e308,"arr":[1,2],"o":{}}"#,
    ]);
    let mut doors = DOORS.iter().cycle();
    for (args, words) in CASES {
        let door = *doors.next().unwrap_or(&Door::JsonBody);
        let a: Vec<Vec<u8>> = args.iter().map(|x| x.as_bytes().to_vec()).collect();
        let got = c.cmd_via(door, &a);
        assert!(
            matches!(&got, Canon::Err(e) if e.contains(words)),
            "{args:?} through {door:?}: {got:?}"
        );
        still_answers(&server);
    }
    // Ten times past the document depth limit: as a value, and as a change that would take
    // a document there; ten times past the path nesting limit.
    let d = tidepool::config::JSON_DEPTH_MAX * 10;
    let deep = "[".repeat(d) + &"]".repeat(d);
    assert!(c.cmd_str(&["JSON.SET", "deep", "$", &deep]).is_err());
    c.cmd_str(&["JSON.SET", "deep", "$", &nest(100)]);
    let path = "$".to_string() + &"[0]".repeat(99);
    assert_eq!(
        c.cmd_str(&["JSON.ARRAPPEND", "deep", &path, &nest(100)]),
        Canon::Err("ERR recursion limit exceeded".into())
    );
    let p = tidepool::config::JSON_PATH_NESTING_MAX * 10;
    let path = "$".to_string() + &"[?(".repeat(p) + "@" + &")]".repeat(p);
    assert!(c.cmd_str(&["JSON.GET", "d", &path]).is_err());
    let path = "$[?(".to_string() + &"!(".repeat(p) + "@.n" + &")".repeat(p) + ")]";
    assert!(c.cmd_str(&["JSON.GET", "d", &path]).is_err());
    still_answers(&server);
}

fn nest(n: usize) -> String {
    "[".repeat(n) + &"]".repeat(n)
}
