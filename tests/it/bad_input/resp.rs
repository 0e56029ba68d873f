//! Bad input on the RESP listener: malformed frames get Redis's protocol error and a closed
//! connection (or, for a frame that never ends, the request timeout), never a panic and never
//! an allocation of what a length merely claims; random bytes leave a server that answers.

use super::*;
use std::io::{Read, Write};
use std::time::Duration;

/// (what is sent after AUTH, the error reply wanted; None: no reply, the frame is unfinished)
const CASES: &[(&[u8], Option<&str>)] = &[
    (
        b"*1\r\n$-5\r\n",
        Some("ERR Protocol error: invalid bulk length"),
    ),
    (
        b"*1\r\n$abc\r\n",
        Some("ERR Protocol error: invalid bulk length"),
    ),
    (
        b"*1\r\n$99999999999999999999\r\n",
        Some("ERR Protocol error: invalid bulk length"),
    ),
    (
        b"*1\r\n$600000000\r\n",
        Some("ERR Protocol error: invalid bulk length"),
    ),
    (
        b"*x\r\n",
        Some("ERR Protocol error: invalid multibulk length"),
    ),
    (
        b"*-\r\n",
        Some("ERR Protocol error: invalid multibulk length"),
    ),
    (
        b"*3000000000\r\n",
        Some("ERR Protocol error: invalid multibulk length"),
    ),
    (
        b"*1\r\n*1\r\n*1\r\n*1\r\n",
        Some("ERR Protocol error: expected '$', got '*'"),
    ),
    (
        b"*2\r\n:1\r\n",
        Some("ERR Protocol error: expected '$', got ':'"),
    ),
    (
        b"SET a \"b\r\n",
        Some("ERR Protocol error: unbalanced quotes in request"),
    ),
    (
        b"SET a 'b\r\n",
        Some("ERR Protocol error: unbalanced quotes in request"),
    ),
    (b"*1\r\n$3\r\nGE", None),
    (b"*2\r\n$3\r\nGET\r\n", None),
    (b"*100000\r\n", None),
    (b"*1\r\n$10000000\r\n", None),
    (
        b"*1\r\n$100000000\r\n",
        Some("ERR max request size exceeded"),
    ),
];

pub const CASES_LEN: usize = CASES.len() + 1;

fn authed(addr: &str) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{TOKEN}\r\n", TOKEN.len()).as_bytes())
        .expect("auth");
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).expect("auth reply");
    assert_eq!(&ok, b"+OK\r\n");
    s
}

#[test]
fn malformed_resp_gets_the_protocol_error_and_a_closed_connection() {
    let dir = TempDir::new("bad-resp");
    let server = Server::start(dir.path(), &[]);
    let addr = server.resp_addr.clone().expect("RESP");
    for (bytes, want) in CASES {
        let mut s = authed(&addr);
        s.write_all(bytes).expect("send");
        match want {
            Some(text) => {
                let mut got = Vec::new();
                // The reply, then the close.
                let _ = s.read_to_end(&mut got);
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    format!("-{text}\r\n"),
                    "{:?}",
                    String::from_utf8_lossy(bytes)
                );
            }
            None => {
                // Unfinished: nothing is answered yet, and the server goes on.
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .expect("timeout");
                let mut b = [0u8; 1];
                assert!(
                    !matches!(s.read(&mut b), Ok(n) if n > 0),
                    "{:?} was answered",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
        still_answers(&server);
    }
    // Random bytes, from a fixed seed: whatever they are, the server answers after them.
    let mut rng = TestRng(0x5eed_4e5b);
    for _ in 0..300 {
        let mut s = authed(&addr);
        let n = 1 + rng.below(64);
        let mut bytes: Vec<u8> = (0..n)
            .map(|_| *rng.pick(b"*$\r\n0123456789-+:abcSETGET \"'\\x"))
            .collect();
        if rng.chance(50) {
            bytes.splice(0..0, b"*2\r\n".iter().copied());
        }
        let _ = s.write_all(&bytes);
        s.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        let mut sink = [0u8; 4096];
        let _ = s.read(&mut sink);
    }
    still_answers(&server);
    let mut r = Redis::connect_addr(&addr);
    assert_eq!(r.cmd_str(&["AUTH", TOKEN]), Canon::s("OK"));
    assert_eq!(r.cmd_str(&["PING"]), Canon::s("PONG"));
}

/// A request whose bytes trickle in is closed when it has not ended within the request
/// timeout, however often a byte arrives (`RESP_REQUEST_TIMEOUT_MS`, 10 s): a slow client
/// cannot hold a connection for ever with one request.
#[test]
fn a_request_that_trickles_in_is_closed_at_its_deadline() {
    let dir = TempDir::new("bad-resp-slow");
    let server = Server::start(dir.path(), &[]);
    let addr = server.resp_addr.clone().expect("RESP");
    let mut s = authed(&addr);
    let started = std::time::Instant::now();
    let body = b"*2\r\n$3\r\nGET\r\n$100\r\n";
    let _ = s.write_all(body);
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(500));
        if s.write_all(b"x").is_err() {
            closed = true;
            break;
        }
        s.set_read_timeout(Some(Duration::from_millis(1)))
            .expect("timeout");
        let mut b = [0u8; 1];
        if matches!(s.read(&mut b), Ok(0)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickling request was kept open for 20 s");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(9), "closed after {waited:?}");
    still_answers(&server);
}
