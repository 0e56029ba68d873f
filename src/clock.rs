//! Wall-clock time, read in one place. The state machine never calls this: time reaches it in
//! the record (or, for reads, from the executor).
//!
//! Test builds (the `fault-injection` feature) may move this clock forward
//! (`POST /_admin/debug/clock/<ms>`), so a test of expiry waits for no real time; it never goes
//! back, as the log's timestamps may not.

use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(feature = "fault-injection")]
static AHEAD_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Tests only: moves the clock `ms` forward; answers how far ahead of the system's it is now.
#[cfg(feature = "fault-injection")]
pub fn advance(ms: u64) -> u64 {
    use std::sync::atomic::Ordering;
    AHEAD_MS.fetch_add(ms, Ordering::SeqCst).saturating_add(ms)
}

#[inline(always)]
fn ahead_ms() -> u64 {
    #[cfg(feature = "fault-injection")]
    {
        AHEAD_MS.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "fault-injection"))]
    0
}

pub fn wall_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
        .saturating_add(ahead_ms())
}

pub fn wall_unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
        .saturating_add(ahead_ms().saturating_mul(1000))
}
