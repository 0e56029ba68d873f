//! JSON.* (RedisJSON). Debian's redis-server has no RedisJSON module to diff against, so these
//! cases come from RedisJSON's own test suite (`tests/pytest/test_multi.py`: the documents,
//! paths and replies of its multi-path and legacy-path tests), run through the real binary
//! over HTTP. Error replies are checked by the fragment RedisJSON's tests check. Where the
//! hosted service answers otherwise and the SDKs' suites assert it (the order of recursive
//! descent's matches, JSON.SET under a missing parent), the replies are the hosted ones.

use crate::common::*;

enum Want {
    Exact(Canon),
    ErrHas(&'static str),
}

fn s(v: &str) -> Want {
    Want::Exact(Canon::s(v))
}
fn i(n: i64) -> Want {
    Want::Exact(Canon::Int(n))
}
fn nil() -> Want {
    Want::Exact(Canon::Nil)
}
fn err(frag: &'static str) -> Want {
    Want::ErrHas(frag)
}
fn arr(items: Vec<Want>) -> Want {
    Want::Exact(Canon::Arr(
        items
            .into_iter()
            .map(|w| match w {
                Want::Exact(c) => c,
                Want::ErrHas(_) => panic!("an error cannot be an array item here"),
            })
            .collect(),
    ))
}
fn ints(v: &[Option<i64>]) -> Want {
    arr(v.iter().map(|x| x.map_or(nil(), i)).collect())
}

fn check(c: &mut Http, cases: Vec<(Vec<&str>, Want)>) {
    for (cmd, want) in cases {
        let got = c.cmd_str(&cmd);
        match want {
            Want::Exact(w) => assert_eq!(got, w, "{cmd:?}"),
            Want::ErrHas(frag) => match &got {
                Canon::Err(e) if e.contains(frag) => {}
                other => panic!("{cmd:?}: expected an error with {frag:?}, got {other:?}"),
            },
        }
    }
}

const NESTED: &str =
    r#"{"a":["foo"], "nested1": {"a": ["hello", null, "world"]}, "nested2": {"a": 31}}"#;

#[test]
fn set_get_del_and_paths() {
    let dir = TempDir::new("json-get");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    check(
        &mut c,
        vec![
            (
                vec![
                    "JSON.SET",
                    "doc1",
                    "$",
                    r#"{"a": 1, "nested": {"a": 2, "b": 3}}"#,
                ],
                s("OK"),
            ),
            (vec!["JSON.DEL", "doc1", "$..a"], i(2)),
            (vec!["JSON.GET", "doc1", "$"], s(r#"[{"nested":{"b":3}}]"#)),
            // The inner match is deleted, then the outer one (2, in the hosted match order);
            // the last member moves into the gap.
            (
                vec![
                    "JSON.SET",
                    "doc2",
                    "$",
                    r#"{"a": {"a": 2, "b": 3}, "b": ["a", "b"], "nested": {"b":[true, "a","b"]}}"#,
                ],
                s("OK"),
            ),
            (vec!["JSON.DEL", "doc2", "$..a"], i(2)),
            (
                vec!["JSON.GET", "doc2", "$"],
                s(r#"[{"nested":{"b":[true,"a","b"]},"b":["a","b"]}]"#),
            ),
            (
                vec![
                    "JSON.SET",
                    "doc3",
                    "$",
                    r#"[{"ciao":["non ancora"],"nested":[{"ciao":[1,"a"]}, {"ciao":[2,"a"]}, {"ciaoc":[3,"non","ciao"]}, {"ciao":[4,"a"]}, {"e":[5,"non","ciao"]}]}]"#,
                ],
                s("OK"),
            ),
            (vec!["JSON.DEL", "doc3", r#"$.[0]["nested"]..ciao"#], i(3)),
            (
                vec!["JSON.GET", "doc3", "$"],
                s(
                    r#"[[{"ciao":["non ancora"],"nested":[{},{},{"ciaoc":[3,"non","ciao"]},{},{"e":[5,"non","ciao"]}]}]]"#,
                ),
            ),
            (vec!["JSON.DEL", "doc3"], i(1)),
            (vec!["JSON.GET", "doc3", "$"], nil()),
            (vec!["JSON.DEL", "non_existing_doc", "..a"], i(0)),
            (vec!["JSON.SET", "doc2", "$", "[1, 2, 3]"], s("OK")),
            (vec!["JSON.DEL", "doc2", "$[2,1,0]"], i(3)),
            (
                vec![
                    "JSON.SET",
                    "doc2",
                    "$",
                    r#"[ true, { "answer": 42}, null ]"#,
                ],
                s("OK"),
            ),
            (vec!["JSON.DEL", "doc2", "[-1]"], i(1)),
            (
                vec!["JSON.GET", "doc2", "$"],
                s(r#"[[true,{"answer":42}]]"#),
            ),
            (vec!["JSON.SET", "doc4", "$", "[[1],[1,2,3]]"], s("OK")),
            // [0][0], [1][0], then [0] itself: three deletions, one by one.
            (vec!["JSON.DEL", "doc4", "$..[0]"], i(3)),
            (vec!["JSON.GET", "doc4", "$"], s("[[[2,3]]]")),
            (vec!["JSON.FORGET", "doc4", "$[0]"], i(1)),
            // SET on existing values, NX and XX, and new members.
            (
                vec![
                    "JSON.SET",
                    "d",
                    "$",
                    r#"{"a":1,"nested":{"a":2,"b":3}}"#,
                    "XX",
                ],
                nil(),
            ),
            (
                vec![
                    "JSON.SET",
                    "d",
                    "$",
                    r#"{"a":1,"nested":{"a":2,"b":3}}"#,
                    "NX",
                ],
                s("OK"),
            ),
            (vec!["JSON.SET", "d", "$", "1", "NX"], nil()),
            (vec!["JSON.SET", "d", "$..a", "4.2"], s("OK")),
            (
                vec!["JSON.GET", "d", "$"],
                s(r#"[{"a":4.2,"nested":{"a":4.2,"b":3}}]"#),
            ),
            (vec!["JSON.SET", "d", "$.c", r#""new""#, "XX"], nil()),
            (vec!["JSON.SET", "d", "$.c", r#""new""#, "NX"], s("OK")),
            (vec!["JSON.SET", "d", "$.nested.z", "[]"], s("OK")),
            (
                vec!["JSON.GET", "d"],
                s(r#"{"a":4.2,"nested":{"a":4.2,"b":3,"z":[]},"c":"new"}"#),
            ),
            // Under a parent that does not exist: an error, as the hosted service answers.
            (
                vec!["JSON.SET", "d", "$.x.y", "1"],
                err("missing key at non-terminal path level"),
            ),
            (vec!["JSON.SET", "d", "$.x.y", "1", "XX"], nil()),
            (vec!["JSON.SET", "d", "$..q", "1"], err("wrong static path")),
            (vec!["JSON.SET", "d", "$", "{bad"], err("line 1 column 2")),
            (
                vec!["JSON.SET", "d", "$", "1", "NX", "XX"],
                err("syntax error"),
            ),
            (
                vec!["JSON.SET", "newkey", "$.a", "1"],
                err("new objects must be created at the root"),
            ),
            // GET: legacy and JSONPath, several paths, formatting.
            (vec!["JSON.GET", "d", ".nested.a"], s("4.2")),
            (
                vec!["JSON.GET", "d", "..a", "..b"],
                s(r#"{"..a":4.2,"..b":3}"#),
            ),
            (
                vec!["JSON.GET", "d", "..a", "$..b"],
                s(r#"{"..a":[4.2,4.2],"$..b":[3]}"#),
            ),
            (vec!["JSON.GET", "d", "$.nowhere"], s("[]")),
            (vec!["JSON.GET", "d", ".nowhere"], err("does not exist")),
            (
                vec!["JSON.GET", "d", ".a", ".nowhere"],
                err("does not exist"),
            ),
            (
                vec![
                    "JSON.GET", "d", "INDENT", "\t", "NEWLINE", "\n", "SPACE", " ", "$..a", "$..a",
                ],
                s("{\n\t\"$..a\": [\n\t\t4.2,\n\t\t4.2\n\t]\n}"),
            ),
            (vec!["JSON.GET", "docX", "..tm", "$..nu"], nil()),
            (vec!["JSON.GET", "d", "$.[bad"], err("JSON Path error")),
            (
                vec!["JSON.TYPE", "d", "$..a"],
                arr(vec![s("number"), s("number")]),
            ),
            (vec!["JSON.TYPE", "d"], s("object")),
            (vec!["JSON.TYPE", "d", ".nested.z"], s("array")),
            (vec!["JSON.TYPE", "nope"], nil()),
            (vec!["TYPE", "d"], Want::Exact(Canon::s("json"))),
            // Filters, slices, unions, wildcards.
            (
                vec![
                    "JSON.SET",
                    "store",
                    "$",
                    r#"{"book":[{"t":"a","price":8.95,"size":[10,20,30,40]},{"t":"b","price":12.99,"size":[50,60,70,80]},{"t":"c","price":8.99,"size":[5,10,20,30]},{"t":"d","price":22.99,"isbn":"x","size":[5,6,7,8]}]}"#,
                ],
                s("OK"),
            ),
            (
                vec!["JSON.GET", "store", "$.book[?(@.price<10)].size"],
                s("[[10,20,30,40],[5,10,20,30]]"),
            ),
            (
                vec!["JSON.ARRINDEX", "store", "$.book[?(@.price<10)].size", "20"],
                ints(&[Some(1), Some(2)]),
            ),
            (
                vec!["JSON.GET", "store", "$.book[?(@.isbn)].t"],
                s(r#"["d"]"#),
            ),
            (
                vec!["JSON.GET", "store", "$.book[?(@.price>9 && @.t!='d')].t"],
                s(r#"["b"]"#),
            ),
            (
                vec!["JSON.GET", "store", "$.book[1:3].t"],
                s(r#"["b","c"]"#),
            ),
            (vec!["JSON.GET", "store", "$.book[-1].t"], s(r#"["d"]"#)),
            (
                vec!["JSON.GET", "store", "$.book[0,2].t"],
                s(r#"["a","c"]"#),
            ),
            (
                vec!["JSON.GET", "store", "$.book[*]['t']"],
                s(r#"["a","b","c","d"]"#),
            ),
        ],
    );
}

#[test]
fn numbers_strings_and_booleans() {
    let dir = TempDir::new("json-num");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    let doc = r#"{"a":"b","b":[{"a":2}, {"a":5.0}, {"a":"c"}]}"#;
    check(
        &mut c,
        vec![
            (vec!["JSON.SET", "doc1", "$", doc], s("OK")),
            (
                vec!["JSON.NUMINCRBY", "doc1", "$..a", "2"],
                s("[4,7.0,null,null]"),
            ),
            (
                vec!["JSON.NUMINCRBY", "doc1", "$..a", "2.5"],
                s("[6.5,9.5,null,null]"),
            ),
            (vec!["JSON.NUMINCRBY", "doc1", "$.b[1].a", "2"], s("[11.5]")),
            (vec!["JSON.NUMINCRBY", "doc1", "$.b[2].a", "2"], s("[null]")),
            (
                vec!["JSON.NUMINCRBY", "doc1", "$.b[1].a", "3.5"],
                s("[15.0]"),
            ),
            (vec!["JSON.SET", "doc1", "$", doc], s("OK")),
            (
                vec!["JSON.NUMMULTBY", "doc1", "$..a", "2"],
                s("[4,10.0,null,null]"),
            ),
            (
                vec!["JSON.NUMMULTBY", "doc1", "$..a", "2.5"],
                s("[10.0,25.0,null,null]"),
            ),
            (vec!["JSON.NUMMULTBY", "doc1", "$.b[1].a", "2"], s("[50.0]")),
            (
                vec!["JSON.NUMINCRBY", "non_existing_doc", "$..a", "2"],
                err("doesn't exist"),
            ),
            (vec!["JSON.SET", "doc1", "$", doc], s("OK")),
            (vec!["JSON.NUMINCRBY", "doc1", ".b[0].a", "3"], s("5")),
            (vec!["JSON.NUMMULTBY", "doc1", ".b[0].a", "3"], s("15")),
            (
                vec!["JSON.NUMINCRBY", "doc1", ".a", "3"],
                err("does not contains a number"),
            ),
            (
                vec!["JSON.NUMINCRBY", "doc1", "$.b[0].a", "9223372036854775807"],
                s("[9.223372036854776e18]"),
            ),
            // Strings.
            (
                vec![
                    "JSON.SET",
                    "s",
                    "$",
                    r#"{"a":"foo", "nested1": {"a": "hello"}, "nested2": {"a": 31}}"#,
                ],
                s("OK"),
            ),
            (
                vec!["JSON.STRAPPEND", "s", "$..a", r#""bar""#],
                ints(&[Some(8), None, Some(6)]),
            ),
            (
                vec!["JSON.STRLEN", "s", "$..a"],
                ints(&[Some(8), None, Some(6)]),
            ),
            (
                vec!["JSON.GET", "s", "$"],
                s(r#"[{"a":"foobar","nested1":{"a":"hellobar"},"nested2":{"a":31}}]"#),
            ),
            (
                vec!["JSON.STRAPPEND", "s", ".nested2.a", r#""x""#],
                err("not a string"),
            ),
            (
                vec!["JSON.STRAPPEND", "non_existing_doc", "$..a", r#""err""#],
                err("doesn't exist"),
            ),
            (
                vec!["JSON.STRLEN", "non_existing_doc", "$..a"],
                err("doesn't exist"),
            ),
            (vec!["JSON.STRLEN", "non_existing_doc", "..a"], nil()),
            // A legacy path answers its first match, in the same order.
            (vec!["JSON.STRLEN", "s", "..a"], i(8)),
            (
                vec!["JSON.STRLEN", "s", ".nested2.a"],
                err("expected string"),
            ),
            (vec!["JSON.SET", "s", "$", r#""abcd""#], s("OK")),
            (vec!["JSON.STRAPPEND", "s", r#""piu""#], i(7)),
            (vec!["JSON.STRLEN", "s"], i(7)),
            // Booleans.
            (
                vec![
                    "JSON.SET",
                    "t",
                    "$",
                    r#"{"a":["foo"], "nested1": {"a": false}, "nested2": {"a": 31}, "nested3": {"a": true}}"#,
                ],
                s("OK"),
            ),
            (
                vec!["JSON.TOGGLE", "t", "$..a"],
                ints(&[Some(1), None, Some(0), None]),
            ),
            (vec!["JSON.TOGGLE", "t", ".nested1.a"], s("false")),
            (vec!["JSON.TOGGLE", "t", ".nested2.a"], err("not a bool")),
            (
                vec!["JSON.TOGGLE", "non_existing_doc", "$..a"],
                err("doesn't exist"),
            ),
            // CLEAR and RESP.
            (
                vec![
                    "JSON.SET",
                    "c",
                    "$",
                    r#"{"nested1": {"a": {"foo": 10, "bar": 20}}, "a":["foo"], "nested2": {"a": "claro"}, "nested3": {"a": {"baz":50}}}"#,
                ],
                s("OK"),
            ),
            (vec!["JSON.CLEAR", "c", "$..a"], i(3)),
            (
                vec!["JSON.GET", "c", "$"],
                s(r#"[{"nested1":{"a":{}},"a":[],"nested2":{"a":"claro"},"nested3":{"a":{}}}]"#),
            ),
            (vec!["JSON.CLEAR", "c", "$..a"], i(0)),
            (vec!["JSON.CLEAR", "c"], i(1)),
            (vec!["JSON.GET", "c", "$"], s("[{}]")),
            (
                vec!["JSON.CLEAR", "non_existing_doc", "$..a"],
                err("doesn't exist"),
            ),
            (vec!["JSON.SET", "r", "$", "[[1],[2]]"], s("OK")),
            (
                vec!["JSON.RESP", "r"],
                arr(vec![
                    s("["),
                    arr(vec![s("["), i(1)]),
                    arr(vec![s("["), i(2)]),
                ]),
            ),
            (
                vec![
                    "JSON.SET",
                    "r",
                    "$",
                    r#"{"a":{"x":-19.5,"y":null,"z":false}}"#,
                ],
                s("OK"),
            ),
            (
                vec!["JSON.RESP", "r", "$.a"],
                arr(vec![arr(vec![
                    s("{"),
                    s("x"),
                    s("-19.5"),
                    s("y"),
                    nil(),
                    s("z"),
                    s("false"),
                ])]),
            ),
            (vec!["JSON.RESP", "r", "$.nowhere"], arr(vec![])),
            (vec!["JSON.RESP", "non_existing_doc", "$..a"], nil()),
        ],
    );
}

#[test]
fn arrays_and_objects() {
    let dir = TempDir::new("json-arr");
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut c = server.client();
    let reset = || (vec!["JSON.SET", "doc1", "$", NESTED], s("OK"));
    check(
        &mut c,
        vec![
            reset(),
            (
                vec!["JSON.ARRAPPEND", "doc1", "$..a", r#""bar""#, r#""racuda""#],
                ints(&[Some(5), None, Some(3)]),
            ),
            (
                vec!["JSON.GET", "doc1", "$"],
                s(
                    r#"[{"a":["foo","bar","racuda"],"nested1":{"a":["hello",null,"world","bar","racuda"]},"nested2":{"a":31}}]"#,
                ),
            ),
            (
                vec!["JSON.ARRAPPEND", "doc1", ".nested1.a", r#""baz""#],
                i(6),
            ),
            (
                vec!["JSON.ARRAPPEND", "non_existing_doc", "$..a", "1"],
                err("doesn't exist"),
            ),
            (
                vec!["JSON.ARRAPPEND", "doc1", "$..a"],
                err("wrong number of arguments"),
            ),
            reset(),
            (
                vec![
                    "JSON.ARRINSERT",
                    "doc1",
                    "$..a",
                    "1",
                    r#""bar""#,
                    r#""racuda""#,
                ],
                ints(&[Some(5), None, Some(3)]),
            ),
            (
                vec!["JSON.ARRINSERT", "doc1", "$.nested1.a", "-2", r#""baz""#],
                ints(&[Some(6)]),
            ),
            (
                vec!["JSON.GET", "doc1", "$"],
                s(
                    r#"[{"a":["foo","bar","racuda"],"nested1":{"a":["hello","bar","racuda","baz",null,"world"]},"nested2":{"a":31}}]"#,
                ),
            ),
            (
                vec!["JSON.ARRINSERT", "doc1", "$.a", "9", "1"],
                err("index out of bounds"),
            ),
            reset(),
            (
                vec!["JSON.ARRLEN", "doc1", "$..a"],
                ints(&[Some(3), None, Some(1)]),
            ),
            (vec!["JSON.ARRLEN", "doc1", ".nested1.a"], i(3)),
            (vec!["JSON.ARRLEN", "non_existing_doc", "..a"], nil()),
            (
                vec!["JSON.ARRLEN", "non_existing_doc", "$..a"],
                err("doesn't exist"),
            ),
            (
                vec!["JSON.ARRLEN", "doc1", ".nested2.a"],
                err("not an array"),
            ),
            (
                vec!["JSON.ARRLEN", "doc1", ".nowhere"],
                err("does not exist"),
            ),
            (
                vec!["JSON.ARRPOP", "doc1", "$..a", "1"],
                arr(vec![s("null"), nil(), s("\"foo\"")]),
            ),
            (
                vec!["JSON.ARRPOP", "doc1", "$..a", "-1"],
                arr(vec![s("\"world\""), nil(), nil()]),
            ),
            (
                vec!["JSON.ARRPOP", "doc1", "$.nested1.a", "-2"],
                arr(vec![s("\"hello\"")]),
            ),
            (
                vec!["JSON.GET", "doc1", "$"],
                s(r#"[{"a":[],"nested1":{"a":[]},"nested2":{"a":31}}]"#),
            ),
            reset(),
            (vec!["JSON.ARRPOP", "doc1", "..a", "1"], s("null")),
            (
                vec!["JSON.ARRPOP", "doc1", ".nested1.a", "-2"],
                s("\"hello\""),
            ),
            (vec!["JSON.SET", "doc1", "$", "[0, 1, 2]"], s("OK")),
            (vec!["JSON.ARRPOP", "doc1"], s("2")),
            (vec!["JSON.ARRPOP", "doc1", "$"], arr(vec![s("1")])),
            (vec!["JSON.ARRPOP", "doc1", "."], s("0")),
            (vec!["JSON.ARRPOP", "doc1", "."], nil()),
            reset(),
            (
                vec!["JSON.ARRTRIM", "doc1", "$..a", "1", "-1"],
                ints(&[Some(2), None, Some(0)]),
            ),
            (
                vec!["JSON.GET", "doc1", "$"],
                s(r#"[{"a":[],"nested1":{"a":[null,"world"]},"nested2":{"a":31}}]"#),
            ),
            (
                vec!["JSON.ARRTRIM", "doc1", "$..a", "1", "1"],
                ints(&[Some(1), None, Some(0)]),
            ),
            (
                vec!["JSON.ARRTRIM", "doc1", "$.nested1.a", "1", "0"],
                ints(&[Some(0)]),
            ),
            (
                vec!["JSON.ARRTRIM", "doc1", ".nested2.a", "0", "1"],
                err("not an array"),
            ),
            // ARRINDEX: integers and floats differ, start/stop as RedisJSON reads them.
            (
                vec![
                    "JSON.SET",
                    "test_num",
                    ".",
                    r#"[{"arr":[0,1,3.0,3,2,1,0,3]},{"nested1_found":{"arr":[5,4,3,2,1,0,1,2,3.0,2,4,5]}},{"nested2_not_found":{"arr":[2,4,6]}},{"nested3_scalar":{"arr":"3"}},[{"nested41_not_arr":{"arr_renamed":[1,2,3]}},{"nested42_empty_arr":{"arr":[]}}]]"#,
                ],
                s("OK"),
            ),
            (
                vec!["JSON.GET", "test_num", "$..arr"],
                s(r#"[[0,1,3.0,3,2,1,0,3],[5,4,3,2,1,0,1,2,3.0,2,4,5],[2,4,6],"3",[]]"#),
            ),
            (
                vec!["JSON.ARRINDEX", "test_num", "$..arr", "3"],
                ints(&[Some(3), Some(2), Some(-1), None, Some(-1)]),
            ),
            (
                vec!["JSON.ARRINDEX", "test_num", "$..arr", "3.0"],
                ints(&[Some(2), Some(8), Some(-1), None, Some(-1)]),
            ),
            (vec!["JSON.ARRINDEX", "test_num", ".[0].arr", "3"], i(3)),
            (vec!["JSON.ARRINDEX", "test_num", ".[0].arr", "9"], i(-1)),
            (
                vec!["JSON.ARRINDEX", "test_num", ".[0].arr_not", "3"],
                err("does not exist"),
            ),
            (
                vec![
                    "JSON.SET",
                    "ts",
                    ".",
                    r#"[{"arr":["bazzz","bar",2,"baz",2,"ba","baz",3]},{"nested1_found":{"arr":[null,"baz2","buzz",2,1,0,1,"2","baz",2,4,5]}}]"#,
                ],
                s("OK"),
            ),
            (
                vec!["JSON.ARRINDEX", "ts", "$..arr", r#""baz""#, "4"],
                ints(&[Some(6), Some(8)]),
            ),
            (
                vec!["JSON.ARRINDEX", "ts", "$..arr", r#""baz""#, "-5"],
                ints(&[Some(3), Some(8)]),
            ),
            (
                vec!["JSON.ARRINDEX", "ts", "$..arr", r#""baz""#, "4", "7"],
                ints(&[Some(6), Some(-1)]),
            ),
            (
                vec!["JSON.ARRINDEX", "ts", "$..arr", r#""baz""#, "4", "-1"],
                ints(&[Some(6), Some(8)]),
            ),
            (
                vec!["JSON.ARRINDEX", "ts", "$..arr", "5", "7", "0"],
                ints(&[Some(-1), Some(11)]),
            ),
            // Objects.
            (
                vec![
                    "JSON.SET",
                    "o",
                    "$",
                    r#"{"nested1": {"a": {"foo": 10, "bar": 20}}, "a":["foo"], "nested2": {"a": {"baz":50}}}"#,
                ],
                s("OK"),
            ),
            (
                vec!["JSON.OBJKEYS", "o", "$..a"],
                arr(vec![
                    arr(vec![s("foo"), s("bar")]),
                    arr(vec![s("baz")]),
                    nil(),
                ]),
            ),
            (vec!["JSON.OBJKEYS", "o", ".nested2.a"], arr(vec![s("baz")])),
            (vec!["JSON.OBJKEYS", "o", "$.nowhere"], arr(vec![])),
            (
                vec!["JSON.OBJKEYS", "o"],
                arr(vec![s("nested1"), s("a"), s("nested2")]),
            ),
            (vec!["JSON.OBJKEYS", "o", ".a"], err("not an object")),
            (vec!["JSON.OBJKEYS", "non_existing_doc", "..a"], nil()),
            (
                vec!["JSON.OBJLEN", "o", "$..a"],
                ints(&[Some(2), Some(1), None]),
            ),
            (vec!["JSON.OBJLEN", "o", ".nested2.a"], i(1)),
            (vec!["JSON.OBJLEN", "o", ".nowhere"], nil()),
            (vec!["JSON.OBJLEN", "o", ".a"], err("expected object")),
            (
                vec!["JSON.OBJLEN", "non_existing_doc", "$..a"],
                err("does not exist"),
            ),
            (vec!["JSON.OBJLEN", "o"], i(3)),
        ],
    );
}

#[test]
fn multi_key_merge_types_tokens_and_replay() {
    let dir = TempDir::new("json-multi");
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--read-only-token", "ro"]);
    let mut c = server.client();
    check(
        &mut c,
        vec![
            (
                vec![
                    "JSON.SET",
                    "{doc}:1",
                    "$",
                    r#"{"a":1, "b": 2, "nested1": {"a": 3}, "c": null, "nested2": {"a": null}}"#,
                ],
                s("OK"),
            ),
            (
                vec![
                    "JSON.SET",
                    "{doc}:2",
                    "$",
                    r#"{"a":4, "b": 5, "nested3": {"a": 6}, "c": null, "nested4": {"a": [null]}}"#,
                ],
                s("OK"),
            ),
            (
                vec!["SET", "{doc}:wrong_key_type", "not a json key"],
                s("OK"),
            ),
            (
                vec![
                    "JSON.MGET",
                    "{doc}:1",
                    "{doc}:wrong_key_type",
                    "{doc}:2",
                    "$..a",
                ],
                arr(vec![s("[3,null,1]"), nil(), s("[6,[null],4]")]),
            ),
            (
                vec![
                    "JSON.MGET",
                    "{doc}:1",
                    "{doc}:2",
                    "{doc}:wrong_key_type",
                    "{doc}:missing",
                    "$.nested1.a",
                ],
                arr(vec![s("[3]"), s("[]"), nil(), nil()]),
            ),
            (
                vec!["JSON.MGET", "{doc}:1", "{doc}:2", "..a"],
                arr(vec![s("3"), s("6")]),
            ),
            (
                vec![
                    "JSON.MGET",
                    "{doc}:1",
                    "{doc}:wrong_key_type",
                    "{doc}:missing2",
                    ".niente",
                ],
                arr(vec![nil(), nil(), nil()]),
            ),
            (
                vec!["JSON.GET", "{doc}:wrong_key_type"],
                err("wrong Redis type"),
            ),
            (
                vec!["JSON.ARRAPPEND", "{doc}:wrong_key_type", "$", "1"],
                err("wrong Redis type"),
            ),
            (
                vec![
                    "JSON.MSET",
                    "m1",
                    "$",
                    r#"{"a":1}"#,
                    "m2",
                    "$",
                    "[1]",
                    "m1",
                    "$.b",
                    "2",
                ],
                s("OK"),
            ),
            (vec!["JSON.GET", "m1"], s(r#"{"a":1,"b":2}"#)),
            (
                vec!["JSON.MSET", "m3", "$", "1", "m4", "$.a", "1"],
                err("new objects must be created at the root"),
            ),
            (vec!["EXISTS", "m3"], i(0)),
            (
                vec!["JSON.MSET", "m3", "$"],
                err("wrong number of arguments"),
            ),
            (
                vec!["JSON.MERGE", "m1", "$", r#"{"a":null,"c":{"d":1},"b":3}"#],
                s("OK"),
            ),
            (vec!["JSON.GET", "m1"], s(r#"{"b":3,"c":{"d":1}}"#)),
            (vec!["JSON.MERGE", "m1", "$.c", r#"{"e":[1]}"#], s("OK")),
            (vec!["JSON.MERGE", "m1", "$.f", "7"], s("OK")),
            (
                vec!["JSON.GET", "m1"],
                s(r#"{"b":3,"c":{"d":1,"e":[1]},"f":7}"#),
            ),
            (
                vec!["JSON.MERGE", "m5", "$.a", "1"],
                err("new objects must be created at the root"),
            ),
            // Generic keyspace commands work on documents.
            (vec!["EXPIRE", "m1", "100"], i(1)),
            (vec!["JSON.SET", "m1", "$.g", "1"], s("OK")),
            (vec!["TTL", "m1"], i(100)),
            (vec!["COPY", "m1", "m1copy"], i(1)),
            (vec!["RENAME", "m1copy", "m1moved"], s("OK")),
            (vec!["JSON.GET", "m1moved", "$.g"], s("[1]")),
            (vec!["GET", "m1"], err("WRONGTYPE")),
            (vec!["SET", "m1mstring", "x"], s("OK")),
            (
                vec!["SCAN", "0", "TYPE", "json", "COUNT", "100", "MATCH", "m1m*"],
                arr(vec![s("0"), arr(vec![s("m1moved")])]),
            ),
        ],
    );
    // The read-only token reads documents and is refused the writes.
    let mut ro = Http::connect(&server.addr, "ro");
    assert_eq!(ro.cmd_str(&["JSON.GET", "m2", "$[0]"]), Canon::s("[1]"));
    assert!(
        matches!(ro.cmd_str(&["JSON.SET", "m2", "$", "2"]), Canon::Err(e) if e.starts_with("NOPERM"))
    );
    // An ACL user limited to the json category and to keys `m*`.
    check(
        &mut c,
        vec![(
            vec!["ACL", "SETUSER", "jo", "on", ">pw", "~m*", "+@json"],
            s("OK"),
        )],
    );
    let Canon::Str(tok) = c.cmd_str(&["ACL", "RESTTOKEN", "jo", "pw"]) else {
        panic!("RESTTOKEN did not answer a string");
    };
    let mut jo = Http::connect(&server.addr, &String::from_utf8(tok).expect("utf8"));
    assert_eq!(jo.cmd_str(&["JSON.GET", "m2", "$[0]"]), Canon::s("[1]"));
    assert!(matches!(jo.cmd_str(&["GET", "m2"]), Canon::Err(e) if e.starts_with("NOPERM")));
    assert!(
        matches!(jo.cmd_str(&["JSON.GET", "{doc}:1"]), Canon::Err(e) if e.starts_with("NOPERM"))
    );
    // Everything comes back from the log after a restart, TTL included.
    let before: Vec<Canon> = ["m1", "m1moved", "m2", "{doc}:1", "{doc}:2"]
        .iter()
        .map(|k| c.cmd_str(&["JSON.GET", k]))
        .collect();
    drop(c);
    server.kill9();
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    let after: Vec<Canon> = ["m1", "m1moved", "m2", "{doc}:1", "{doc}:2"]
        .iter()
        .map(|k| c.cmd_str(&["JSON.GET", k]))
        .collect();
    assert_eq!(before, after);
    assert!(matches!(c.cmd_str(&["TTL", "m1"]), Canon::Int(t) if t > 90));
}

/// The hosted service's order for recursive descent (issue 24): every match found inside a
/// member's value comes before the match at the member's own level; among siblings, document
/// order. Every wildcard command answers per match in that order and changes the matches in
/// it, so where one match lies inside another the inner one changes first. Checked through
/// every door and from Lua, with a fresh document before each.
#[test]
fn descent_order_is_the_hosted_one_through_every_door() {
    let dir = TempDir::new("json-order");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    let doc = r#"{"x":{"a":1,"y":{"a":"s"}},"a":0,"z":[{"a":true}]}"#;
    let set_doc: &[&str] = &["JSON.SET", "d", "$", doc];
    let strs = |v: &[&str]| Canon::Arr(v.iter().map(|t| Canon::s(t)).collect());
    let ints = |v: &[Option<i64>]| {
        Canon::Arr(v.iter().map(|x| x.map_or(Canon::Nil, Canon::Int)).collect())
    };
    // x.y's `a` lies inside x's value, x's inside the root's: deepest first, then siblings in
    // document order, the root's own member last.
    for (cmd, want) in [
        (vec!["JSON.GET", "d", "$..a"], Canon::s(r#"["s",1,true,0]"#)),
        (
            vec!["JSON.TYPE", "d", "$..a"],
            strs(&["string", "integer", "boolean", "integer"]),
        ),
        (
            vec!["JSON.STRLEN", "d", "$..a"],
            ints(&[Some(1), None, None, None]),
        ),
        (
            vec!["JSON.MGET", "d", "$..a"],
            Canon::Arr(vec![Canon::s(r#"["s",1,true,0]"#)]),
        ),
    ] {
        every_door_and_lua(&mut c, &[set_doc], &cmd, &want);
    }

    // One match inside another: `$..a` on {"a":[{"a":[1]},2]} is the inner array, then the
    // outer one, and each command changes them in that order.
    let nested: &[&str] = &["JSON.SET", "n", "$", r#"{"a":[{"a":[1]},2]}"#];
    for (cmd, want, after) in [
        (
            vec!["JSON.ARRAPPEND", "n", "$..a", "9"],
            ints(&[Some(2), Some(3)]),
            r#"{"a":[{"a":[1,9]},2,9]}"#,
        ),
        (
            vec!["JSON.ARRINSERT", "n", "$..a", "0", "0"],
            ints(&[Some(2), Some(3)]),
            r#"{"a":[0,{"a":[0,1]},2]}"#,
        ),
        (
            vec!["JSON.ARRLEN", "n", "$..a"],
            ints(&[Some(1), Some(2)]),
            "",
        ),
        (
            vec!["JSON.ARRINDEX", "n", "$..a", "2"],
            ints(&[Some(-1), Some(1)]),
            "",
        ),
        // The outer pop sees the inner one's change.
        (
            vec!["JSON.ARRPOP", "n", "$..a", "0"],
            strs(&["1", r#"{"a":[]}"#]),
            r#"{"a":[2]}"#,
        ),
        (
            vec!["JSON.ARRTRIM", "n", "$..a", "0", "0"],
            ints(&[Some(1), Some(1)]),
            r#"{"a":[{"a":[1]}]}"#,
        ),
        (vec!["JSON.OBJLEN", "n", "$..a"], ints(&[None, None]), ""),
        (vec!["JSON.TOGGLE", "n", "$..a"], ints(&[None, None]), ""),
    ] {
        every_door_and_lua(&mut c, &[nested], &cmd, &want);
        if !after.is_empty() {
            c.cmd_str(nested);
            c.cmd_str(&cmd);
            assert_eq!(c.cmd_str(&["JSON.GET", "n"]), Canon::s(after), "{cmd:?}");
        }
    }

    // {"a":{"a":1}}: the inner `a`, then the outer one.
    let inner: &[&str] = &["JSON.SET", "i", "$", r#"{"a":{"a":1}}"#];
    for (cmd, want, after) in [
        (
            vec!["JSON.GET", "i", "$..a"],
            Canon::s(r#"[1,{"a":1}]"#),
            r#"{"a":{"a":1}}"#,
        ),
        (
            vec!["JSON.NUMINCRBY", "i", "$..a", "2"],
            Canon::s("[3,null]"),
            r#"{"a":{"a":3}}"#,
        ),
        (
            vec!["JSON.NUMMULTBY", "i", "$..a", "3"],
            Canon::s("[3,null]"),
            r#"{"a":{"a":3}}"#,
        ),
        (
            vec!["JSON.OBJLEN", "i", "$..a"],
            ints(&[None, Some(1)]),
            r#"{"a":{"a":1}}"#,
        ),
        (
            vec!["JSON.STRAPPEND", "i", "$..a", r#""x""#],
            ints(&[None, None]),
            r#"{"a":{"a":1}}"#,
        ),
        (
            vec!["JSON.TYPE", "i", "$..a"],
            strs(&["integer", "object"]),
            r#"{"a":{"a":1}}"#,
        ),
        // Deleted one by one in match order: the inner `a`, then the outer one.
        (vec!["JSON.DEL", "i", "$..a"], Canon::Int(2), "{}"),
        (vec!["JSON.FORGET", "i", "$..a"], Canon::Int(2), "{}"),
        // Set in match order: the inner `a` becomes 5, then the outer one does.
        (
            vec!["JSON.SET", "i", "$..a", "5"],
            Canon::s("OK"),
            r#"{"a":5}"#,
        ),
        (
            vec!["JSON.MSET", "i", "$..a", "5"],
            Canon::s("OK"),
            r#"{"a":5}"#,
        ),
    ] {
        every_door_and_lua(&mut c, &[inner], &cmd, &want);
        c.cmd_str(inner);
        c.cmd_str(&cmd);
        assert_eq!(c.cmd_str(&["JSON.GET", "i"]), Canon::s(after), "{cmd:?}");
    }
}

/// JSON.SET (and MERGE) under a parent that does not exist fails, as the hosted service
/// answers (upstash-redis `test_set_nonexisting_path`), with `$` and legacy paths alike, and
/// changes nothing; with XX it answers nil, as for any path that matches nothing.
#[test]
fn set_under_a_missing_parent_is_an_error() {
    let dir = TempDir::new("json-parent");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    let doc = r#"{"int":1,"x":{"a":1}}"#;
    let set_doc: &[&str] = &["JSON.SET", "d", "$", doc];
    let missing = Canon::Err("ERR missing key at non-terminal path level".into());
    for path in ["$.nonexisting_key.str", ".nope.child", "$.x.nope.child"] {
        every_door_and_lua(
            &mut c,
            &[set_doc],
            &["JSON.SET", "d", path, r#""test""#],
            &missing,
        );
        every_door_and_lua(
            &mut c,
            &[set_doc],
            &["JSON.SET", "d", path, r#""test""#, "NX"],
            &missing,
        );
        every_door_and_lua(
            &mut c,
            &[set_doc],
            &["JSON.SET", "d", path, r#""test""#, "XX"],
            &Canon::Nil,
        );
        every_door_and_lua(
            &mut c,
            &[set_doc],
            &["JSON.MERGE", "d", path, "1"],
            &missing,
        );
    }
    assert_eq!(c.cmd_str(&["JSON.GET", "d"]), Canon::s(doc));
    // A missing last member under an existing parent is still added.
    assert_eq!(c.cmd_str(&["JSON.SET", "d", "$.x.b", "2"]), Canon::s("OK"));
    assert_eq!(
        c.cmd_str(&["JSON.GET", "d", "$.x"]),
        Canon::s(r#"[{"a":1,"b":2}]"#)
    );
}

/// JSON.MSET is atomic, as RedisJSON documents it: a triplet under a missing parent failed
/// while the triplets before it stayed applied (the review of issue 25:
/// `JSON.MSET m $.a 1 m $.x.y 2` answered null and left `{"int":1,"a":1}`). Now the error of
/// the failing triplet is the answer and no key changes, through every door and from Lua.
#[test]
fn mset_under_a_missing_parent_changes_nothing() {
    let dir = TempDir::new("json-mset-atomic");
    let s = Server::start(dir.path(), &[]);
    let mut c = s.client();
    let setup: &[&[&str]] = &[&["JSON.SET", "m", "$", r#"{"int":1}"#], &["DEL", "n"]];
    let missing = Canon::Err("ERR missing key at non-terminal path level".into());
    every_door_and_lua(
        &mut c,
        setup,
        &[
            "JSON.MSET",
            "m",
            "$.a",
            "1",
            "n",
            "$",
            "2",
            "m",
            "$.x.y",
            "2",
        ],
        &missing,
    );
    assert_eq!(c.cmd_str(&["JSON.GET", "m"]), Canon::s(r#"{"int":1}"#));
    assert_eq!(c.cmd_str(&["EXISTS", "n"]), Canon::Int(0));
    // All triplets applying: all are set, a later one seeing an earlier one's change.
    assert_eq!(
        c.cmd_str(&["JSON.MSET", "m", "$.a", "{}", "m", "$.a.b", "2"]),
        Canon::s("OK")
    );
    assert_eq!(
        c.cmd_str(&["JSON.GET", "m"]),
        Canon::s(r#"{"int":1,"a":{"b":2}}"#)
    );
}
