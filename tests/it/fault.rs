//! After a failed sync the log refuses writes and reads keep working; a restart recovers every
//! write acknowledged before the failure. Needs `--features fault-injection` (tools/test.sh
//! passes it); without the feature this file compiles to nothing.
#![cfg(feature = "fault-injection")]

use crate::common::*;

#[test]
fn a_failed_fsync_poisons_the_log_but_reads_keep_working() {
    let dir = TempDir::new("fault");
    let data = dir.path().join("data");
    // In the server's own environment: the other tests of this binary start servers too.
    let server = Server::try_start_env(
        &data,
        &["--fsync", "always"],
        &[("TIDEPOOL_FAULT_FSYNC_FAIL_AFTER", "20")],
    )
    .unwrap_or_else(|e| panic!("tidepool did not start: {e}"));
    let mut c = server.client();
    let mut acked = Vec::new();
    let mut first_error = None;
    for i in 0..100 {
        match c.cmd_str(&["SET", &format!("k{i}"), &format!("v{i}")]) {
            Canon::Str(ok) if ok == b"OK" => acked.push(i),
            Canon::Err(e) => {
                first_error = Some((i, e));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let (failed_at, err) = first_error.expect("the injected sync failure surfaces as an error");
    assert!(err.starts_with("ERR the write-ahead log failed"), "{err}");
    assert!(err.contains("injected fault"), "{err}");
    assert_eq!(acked.len(), failed_at);
    // Every later write is refused; reads still answer.
    let e = c.cmd_str(&["SET", "after", "x"]);
    assert!(
        matches!(&e, Canon::Err(t) if t.contains("writes are refused")),
        "{e:?}"
    );
    assert_eq!(c.cmd_str(&["GET", "k0"]), Canon::s("v0"));
    assert_eq!(c.cmd_str(&["PING"]), Canon::s("PONG"));
    let Canon::Str(info) = c.cmd_str(&["INFO", "persistence"]) else {
        panic!()
    };
    assert!(String::from_utf8_lossy(&info).contains("tidepool_log_writable:0"));
    server.kill9();

    let server = Server::start(&data, &[]);
    let mut c = server.client();
    for i in acked {
        assert_eq!(
            c.cmd_str(&["GET", &format!("k{i}")]),
            Canon::s(&format!("v{i}")),
            "acknowledged write k{i}"
        );
    }
    assert_eq!(
        c.cmd_str(&["SET", "after", "restart"]),
        Canon::s("OK"),
        "a restart clears the poison"
    );
}
