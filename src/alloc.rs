//! The heap the process holds, as the allocator reports it (glibc's `mallinfo2`: bytes in
//! use in the arenas and in blocks of their own), sampled by the executor's tick (every
//! `EXPIRE_CYCLE_INTERVAL_MS`) rather than counted on every allocation, which cost 2-3 % of a
//! request's instructions. `--max-memory` (Redis's `maxmemory`) and `INFO memory`'s
//! `used_memory` read it. The allocator's report comes through `sys`.

use std::sync::atomic::{AtomicU64, Ordering};

static IN_USE: AtomicU64 = AtomicU64::new(0);

/// Bytes allocated and not freed, as of the last sample (what Redis calls `used_memory`).
pub fn in_use() -> u64 {
    IN_USE.load(Ordering::Relaxed)
}

/// Asks the allocator now, keeps the answer for `in_use`, and answers it.
pub fn sample() -> u64 {
    let bytes = crate::sys::heap_in_use();
    IN_USE.store(bytes, Ordering::Relaxed);
    bytes
}

/// When to give the allocator's free memory back to the system. glibc returns only the top of
/// its main heap by itself: after a burst of large requests (a bulk load's pipelines) or of
/// deletions, the memory freed among live data stayed resident for good (2-3 MB over 2 MB of
/// data for the memory benchmark's 1,000 hashes). A look at the allocator (`mallinfo2`) or a
/// trim (`malloc_trim`) walks every free chunk, 10-20 ms on a heap of a million keys with half
/// of them deleted, so neither is made on a schedule: the executor tells this watch, every
/// `HEAP_TRIM_INTERVAL_MS`, the bytes the log has taken and the data's size, and the heap is
/// trimmed once after a burst that wrote or freed at least `HEAP_TRIM_MOVED_BYTES_MIN`, at the
/// first look that finds the log still. A steady load, which reuses its free memory, is never
/// trimmed. Redis's jemalloc gives dirty pages back on its own (they decay).
#[derive(Default)]
pub struct TrimWatch {
    log_bytes: u64,
    data_bytes: u64,
    moved: u64,
}

impl TrimWatch {
    /// A watch for a server that has just read `bytes` of snapshot and log at start-up. That
    /// reading is a burst like any other: its buffers were freed among the data it built, and
    /// stayed resident (0.9 MB over the 2.7 MB of the memory benchmark's 1,000 hashes after a
    /// restart, a third of the process's growth that `used_memory` did not count).
    pub fn after_start(bytes: u64) -> TrimWatch {
        TrimWatch {
            moved: bytes,
            ..TrimWatch::default()
        }
    }

    /// Counts what moved since the last look; says whether to trim now.
    pub fn look(&mut self, log_bytes: u64, data_bytes: u64) -> bool {
        let wrote = log_bytes.saturating_sub(self.log_bytes);
        let freed = self.data_bytes.saturating_sub(data_bytes);
        self.moved = self.moved.saturating_add(wrote).saturating_add(freed);
        self.log_bytes = log_bytes;
        self.data_bytes = data_bytes;
        if wrote == 0 && self.moved >= crate::config::HEAP_TRIM_MOVED_BYTES_MIN {
            self.moved = 0;
            return true;
        }
        false
    }
}

/// The bytes the allocator takes for a request of `n` bytes: glibc's chunk, `n` and an 8-byte
/// header rounded up to 16, at least 32 (0 for no request). What the estimates of `MEMORY
/// USAGE` count each allocation as, so that they add up to what the process holds.
pub fn chunk(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        ((n + 8 + 15) & !15).max(32)
    }
}

#[cfg(test)]
mod tests {
    use super::TrimWatch;
    use crate::config::HEAP_TRIM_MOVED_BYTES_MIN as MIN;

    /// Guards when the heap is trimmed: once after a burst that wrote or freed enough, at the
    /// first quiet look; never during a steady load, however long; never for a small burst.
    #[test]
    fn the_heap_is_trimmed_once_after_a_burst_and_never_under_a_steady_load() {
        let mut w = TrimWatch::default();
        // A steady load: the log grows at every look.
        let looks: Vec<bool> = (1..=100).map(|i| w.look(i * MIN, 0)).collect();
        assert!(looks.iter().all(|t| !t));
        // It stops: one trim, then none while nothing moves.
        assert!(w.look(100 * MIN, 0));
        assert!(!w.look(100 * MIN, 0));
        // A small burst is not worth a trim.
        assert!(!w.look(100 * MIN + MIN / 2, 0));
        assert!(!w.look(100 * MIN + MIN / 2, 0));
        // Data freed (deletions write little to the log) counts, data added does not.
        assert!(!w.look(100 * MIN + MIN / 2, 10 * MIN));
        assert!(!w.look(100 * MIN + MIN / 2 + 10, 2 * MIN));
        assert!(w.look(100 * MIN + MIN / 2 + 10, 2 * MIN));
    }

    /// Guards the trim after a restart: a start-up that read a log or snapshot of at least
    /// the burst's size trims at the first quiet look, as after a load; a small one does not.
    #[test]
    fn a_restart_that_read_enough_trims_at_the_first_quiet_look() {
        let mut w = TrimWatch::after_start(2 * MIN);
        assert!(!w.look(MIN / 2, 0), "writes came first: not yet");
        assert!(w.look(MIN / 2, 0));
        assert!(!w.look(MIN / 2, 0));
        let mut small = TrimWatch::after_start(MIN / 4);
        assert!(!small.look(0, 0));
    }
}
