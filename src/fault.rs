//! Crash points for tests of crash safety (the `fault-injection` feature; never in a release
//! build). `TIDEPOOL_FAULT_CRASH_AT=<point>` kills the server with SIGKILL when it reaches that
//! point, as `kill -9` would: no destructor runs, no buffer is flushed, what the kernel holds
//! stays. A point reached in a background save's child kills the server with it.
//!
//! The points, in the order a snapshot passes them (`log-format.md`, "Crash safety"):
//! `log-rolled`, `snapshot-partial`, `snapshot-written`, `snapshot-synced`, `snapshot-renamed`,
//! `snapshot-published`, `segment-deleted`. A leaf.

#[cfg(feature = "fault-injection")]
mod active {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();
    static IN_CHILD: AtomicBool = AtomicBool::new(false);

    /// Reads the setting; called at start-up, before any thread could hold the environment's lock
    /// when a child is forked.
    pub fn init() {
        CRASH_AT.get_or_init(|| std::env::var("TIDEPOOL_FAULT_CRASH_AT").ok());
    }

    /// Marks this process as a background save's child.
    pub fn in_child() {
        IN_CHILD.store(true, Ordering::SeqCst);
    }

    pub fn point(name: &str) {
        let Some(Some(at)) = CRASH_AT.get() else {
            return;
        };
        if at != name {
            return;
        }
        // SAFETY: kill and getppid take and return integers only.
        unsafe {
            if IN_CHILD.load(Ordering::SeqCst) {
                libc::kill(libc::getppid(), libc::SIGKILL);
            }
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(feature = "fault-injection")]
pub use active::{in_child, init, point};

#[cfg(not(feature = "fault-injection"))]
pub fn init() {}

#[cfg(not(feature = "fault-injection"))]
pub fn in_child() {}

/// A crash point: nothing at all without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) {}
