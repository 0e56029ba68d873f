//! Lines for the operator on stderr. `eprintln!` panics when stderr is closed; a server must
//! not die for want of a reader, so write errors are ignored here.

use std::io::Write;

pub fn line(msg: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(msg.as_bytes()).and_then(|_| e.write_all(b"\n"));
}
