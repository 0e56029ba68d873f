//! The heap the process holds, counted: a global allocator around the system's that adds
//! and subtracts every allocation's size. `--max-memory` (Redis's `maxmemory`) and
//! `INFO memory`'s `used_memory` read it. The `tidepool` binary installs it; a program that
//! does not (the log tool, the benchmark) reads 0. One of the crate's few `unsafe` blocks:
//! it only forwards to the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The counting allocator.
pub struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);

/// Bytes allocated and not yet freed (what Redis calls `used_memory`).
pub fn in_use() -> usize {
    IN_USE.load(Ordering::Relaxed)
}

// SAFETY: every method forwards to `System` with the same arguments and only counts sizes;
// the pointers returned are the system allocator's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            IN_USE.fetch_add(new_size, Ordering::Relaxed);
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}
