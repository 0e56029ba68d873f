//! Lua: compile and runtime errors, sandbox escapes, limits (time, memory, reply depth,
//! cjson nesting), and every way a script can call a command wrongly. Errors that
//! redis-server 7.0 words are compared with its text.

use super::*;

/// Scripts whose error text must be redis-server's (the same SHA-1 and line in both).
const SAME_AS_REDIS: &[&str] = &[
    "return (",
    "x = ",
    "return nosuchglobal",
    "nosuch()",
    "return redis.call()",
    "return redis.call('nosuchcommand')",
    "return redis.call('get')",
    "return redis.call('get', {})",
    "return redis.call('get', nil)",
    "return redis.call('set', 'k')",
    "return redis.call('incr', 's')",
    "return redis.pcall('incr', 's')",
    "return redis.call('subscribe', 'c')",
    "return redis.call('eval', 'return 1', '0')",
    "return redis.error_reply(1)",
    "return redis.status_reply()",
    "error('boom')",
    "error({err='custom'})",
    "local t = setmetatable({}, {__index = function() error('deep') end}) return t.x",
    "redis = nil",
    "_G.x = 1",
    "string.rep = nil",
    "return cjson.encode(function() end)",
    "return bit.band('x')",
    "return bit.band()",
    "return bit.tohex(1, {})",
    "return bit.lshift(1)",
    "return bit.tobit(nil)",
    "return bit.bor(1, true)",
    "return dofile('/etc/passwd')",
    "return os.exit()",
    "return io.open('/etc/passwd')",
    "return require('os')",
    "local function f() return f() + 1 end return f()",
    "return string.format('%d', 'x')",
    "return ('x'):bad()",
    "return #nil",
    "return 1 < 'x'",
    "return math.floor()",
];

/// Scripts only tidepool bounds (Redis has no such limits, or a larger one): an error whose
/// text holds the given words.
const LIMITS: &[(&str, &str)] = &[
    // redis-server 7.0.15 itself dies on this one (an error table without `err`).
    ("error({})", "ERR"),
    // cjson.decode refuses these as Redis does, in words of its own (its decoder is
    // serde_json's, not lua-cjson's tokenizer: see docs/compatibility.md's differences).
    ("return cjson.decode('{')", "invalid token"),
    ("return cjson.decode('[1,2')", "invalid token"),
    (
        "return cjson.decode(string.rep('[', 1100) .. string.rep(']', 1100))",
        "invalid token",
    ),
    ("while true do end", SCRIPT_STOPPED),
    (
        "while true do pcall(function() while true do end end) end",
        SCRIPT_STOPPED,
    ),
    ("return string.rep('x', 2^30)", "not enough memory"),
    (
        "local s = 'x' while true do s = s .. s end",
        "not enough memory",
    ),
    (
        "local t={} local c=t for i=1,10010 do local n={} c[1]=n c=n end return cjson.encode(t)",
        "excessive nesting",
    ),
];

pub const CASES_LEN: usize = SAME_AS_REDIS.len() + LIMITS.len() + 4;

fn strs(a: &[&str]) -> Vec<Vec<u8>> {
    a.iter().map(|x| x.as_bytes().to_vec()).collect()
}

#[test]
fn bad_scripts_get_clear_errors() {
    let Some(mut both) = Both::start("bad-lua", &["--script-time-limit-ms", "300"]) else {
        return;
    };
    let Both {
        t: c, r, server, ..
    } = &mut both;
    r.cmd_str(&["SET", "s", "text"]);
    c.cmd_str(&["SET", "s", "text"]);
    for script in SAME_AS_REDIS {
        let args = strs(&["EVAL", script, "0"]);
        let want = r.cmd(&args);
        let got = c.cmd(&args);
        assert!(got.is_err(), "{script}: {got:?}");
        assert_eq!(got, want, "{script}");
        still_answers(server);
    }
    for (script, words) in LIMITS {
        // A script stopped at its time limit makes the next ones wait out a cooling period.
        // On a loaded machine a script may also be stopped by the clock while the executor's
        // thread was not running, which starts another one: then wait again.
        let mut got = Canon::Nil;
        for _ in 0..5 {
            scripts_cooled(c);
            got = c.cmd(&strs(&["EVAL", script, "0"]));
            if !matches!(&got, Canon::Err(e) if e.contains("scripts are refused")) {
                break;
            }
        }
        assert!(
            matches!(&got, Canon::Err(e) if e.contains(words)),
            "{script}: {got:?}"
        );
        still_answers(server);
    }
    // A reply nested ten times past the reply depth limit; a library that never finishes
    // loading; a shebang that is not Lua's; a function library with no functions.
    let depth = tidepool::config::LUA_REPLY_DEPTH_MAX * 10;
    let r = c.post(
        "/",
        format!(
            r#"["EVAL","local t={{}} local c=t for i=1,{depth} do local n={{}} c[1]=n c=n end return t","0"]"#
        )
        .as_bytes(),
    );
    assert!(r.text().contains("reached lua stack limit"));
    for (args, words) in [
        (
            vec!["FUNCTION", "LOAD", "#!lua name=l\nwhile true do end"],
            SCRIPT_STOPPED,
        ),
        (vec!["EVAL", "#!python\nreturn 1", "0"], "Unexpected engine"),
        (
            vec!["FUNCTION", "LOAD", "#!lua name=l\nlocal x = 1"],
            "No functions registered",
        ),
    ] {
        scripts_cooled(c);
        let got = c.cmd_str(&args);
        assert!(
            matches!(&got, Canon::Err(e) if e.contains(words)),
            "{args:?}: {got:?}"
        );
        still_answers(server);
    }
}
