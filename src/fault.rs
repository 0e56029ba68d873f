//! Crash points for tests of crash safety (the `fault-injection` feature; never in a release
//! build). `TIDEPOOL_FAULT_CRASH_AT=<point>` kills the server with SIGKILL when it reaches that
//! point, as `kill -9` would: no destructor runs, no buffer is flushed, what the kernel holds
//! stays. A point reached in a background save's child kills the server with it.
//!
//! The points, in the order a snapshot passes them (`log-format.md`, "Crash safety"):
//! `log-rolled`, `snapshot-partial`, `snapshot-written`, `snapshot-synced`, `snapshot-renamed`,
//! `snapshot-published`, `segment-deleted`. `TIDEPOOL_FAULT_ACK_BEFORE_COMMIT=1` breaks a
//! cluster's promise on purpose (`ack_before_commit`). A leaf.

#[cfg(feature = "fault-injection")]
mod active {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();
    static NO_SPACE_AT: OnceLock<Option<String>> = OnceLock::new();
    static ACK_BEFORE_COMMIT: OnceLock<bool> = OnceLock::new();
    static IN_CHILD: AtomicBool = AtomicBool::new(false);

    /// Reads the setting; called at start-up, before any thread could hold the environment's lock
    /// when a child is forked.
    pub fn init() {
        CRASH_AT.get_or_init(|| std::env::var("TIDEPOOL_FAULT_CRASH_AT").ok());
        NO_SPACE_AT.get_or_init(|| std::env::var("TIDEPOOL_FAULT_NO_SPACE_AT").ok());
        ACK_BEFORE_COMMIT.get_or_init(|| {
            std::env::var("TIDEPOOL_FAULT_ACK_BEFORE_COMMIT").as_deref() == Ok("1")
        });
    }

    /// `TIDEPOOL_FAULT_ACK_BEFORE_COMMIT=1`: a cluster's leader answers a write once it has
    /// proposed it, before a majority has it: the bug the cluster's fault schedules must catch.
    pub fn ack_before_commit() -> bool {
        ACK_BEFORE_COMMIT.get().copied().unwrap_or(false)
    }

    /// `TIDEPOOL_FAULT_NO_SPACE_AT=<point>`: the write at that point fails as on a full disk
    /// (`snapshot-write`: writing a snapshot's temporary file; `segment-create`: creating a
    /// log segment after the first).
    pub fn no_space(name: &str) -> std::io::Result<()> {
        match NO_SPACE_AT.get() {
            Some(Some(at)) if at == name => Err(std::io::Error::from_raw_os_error(libc::ENOSPC)),
            _ => Ok(()),
        }
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
        crate::sys::kill_self(IN_CHILD.load(Ordering::SeqCst));
    }

    /// Gives the allocator's free memory back to the system (glibc's `malloc_trim(0)`), so
    /// that a test reads the memory the server really holds from its resident size, not what
    /// the allocator keeps cached; answers the resident bytes after it.
    pub fn trim_heap() -> u64 {
        crate::sys::trim_heap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

#[cfg(feature = "fault-injection")]
pub use active::{ack_before_commit, in_child, init, no_space, point, trim_heap};

#[cfg(not(feature = "fault-injection"))]
pub fn init() {}

#[cfg(not(feature = "fault-injection"))]
pub fn in_child() {}

/// A leader that answers before commit: never without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn ack_before_commit() -> bool {
    false
}

/// A full disk at a point: never without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn no_space(_name: &str) -> std::io::Result<()> {
    Ok(())
}

/// A crash point: nothing at all without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) {}
