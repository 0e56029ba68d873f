//! Bad input, one module per surface: the REST request forms, commands' arguments, Lua,
//! JSON and JSONPath, the delivery API's headers and bodies, RESTORE payloads, the RESP
//! listener's frames, and the log reader. Every case asserts a clear error (the right status
//! and a JSON `{"error": ...}` over HTTP, Redis's protocol error over RESP, Redis's own text
//! where redis-server has the command) and a server that still answers.
//! Where a parser is recursive, one case goes ten times past its depth limit.

mod commands;
mod console;
mod json;
mod log;
mod lua;
mod qstash;
mod resp;
mod rest;
mod restore;

pub use crate::common::*;

/// The server answers a plain command after a case.
pub fn still_answers(server: &Server) {
    let mut c = server.client();
    assert_eq!(
        c.cmd_str(&["PING"]),
        Canon::s("PONG"),
        "the server stopped answering"
    );
}

/// A response is an error envelope with `status` whose text contains `needle`.
pub fn is_error(r: &Resp, status: u16, needle: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", r.text()));
    let e = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no error text: {v}"));
    assert!(!e.is_empty(), "{what}: empty error");
    assert!(e.contains(needle), "{what}: {e:?} lacks {needle:?}");
}

/// The suite promises at least 200 cases; each module's count is its case table's length.
#[test]
fn the_suite_has_at_least_200_cases() {
    let n = rest::CASES_LEN
        + commands::CASES_LEN
        + lua::CASES_LEN
        + json::CASES_LEN
        + qstash::CASES_LEN
        + restore::CASES_LEN
        + log::CASES_LEN
        + resp::CASES_LEN;
    assert!(n >= 200, "{n} cases");
}
