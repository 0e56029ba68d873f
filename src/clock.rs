//! Wall-clock time, read in one place. The state machine never calls this: time reaches it in
//! the record (or, for reads, from the executor).

use std::time::{SystemTime, UNIX_EPOCH};

pub fn wall_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn wall_unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}
