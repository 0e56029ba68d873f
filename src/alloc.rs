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

/// Gives the allocator's free memory back to the system when it holds much of it, and says
/// whether it did. glibc returns only the top of its main heap by itself: after a burst of
/// large requests (a bulk load's pipelines, a large reply) the memory they used stayed
/// resident among the data for good, 2-3 MB over 2 MB of data for the memory benchmark's
/// hashes. The executor asks every `HEAP_TRIM_INTERVAL_MS`; it gives back when the free
/// memory is at least `HEAP_TRIM_FREE_BYTES_MIN` and a quarter of what is in use, so that a
/// steady load, which reuses its free memory, is not made to fault it in again.
pub fn give_back() -> bool {
    let free = crate::sys::heap_free();
    if free < crate::config::HEAP_TRIM_FREE_BYTES_MIN || free < sample() / 4 {
        return false;
    }
    crate::sys::trim_heap();
    true
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
