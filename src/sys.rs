//! The one module with `unsafe` code: every call into the C library (and the two library calls
//! that are `unsafe` by their own contract), each behind a safe function, each with the reason
//! it is sound. Nothing else in the crate writes `unsafe`. A leaf.
//!
//! | function | what for |
//! |---|---|
//! | [`open_files_limit`] | the connection cap leaves descriptors for the log and snapshots |
//! | [`heap_in_use`], [`trim_heap`] | `--max-memory` and `used_memory`; free memory given back after a burst (`alloc::TrimWatch`); a test's resident size |
//! | [`map_file`] | start-up and the log tool read segments through a memory map |
//! | [`fork`], [`die_with_parent`], [`exit_now`], [`wait_for`], [`kill_now`], [`kill_self`] | background snapshots, as Redis's BGSAVE; the crash points of the fault-injection tests |
//! | [`ignore_sigpipe`] | a cluster node whose restart in place failed goes on (`executor::cluster`) |
//! | [`lua_with_debug`] | the Lua state with the debug library, which the prelude removes |

use std::fs::File;
use std::io;

/// The soft limit of open file descriptors (`RLIMIT_NOFILE`), if the system says.
pub fn open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `lim`, which lives for the whole call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    ok.then_some(lim.rlim_cur)
}

/// Bytes the allocator holds in use (glibc's `mallinfo2`: the arenas' and the blocks of their
/// own); 0 where the allocator cannot say.
pub fn heap_in_use() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes nothing and returns a plain struct of counters.
        let m = unsafe { libc::mallinfo2() };
        (m.uordblks + m.hblkhd) as u64
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    0
}

/// Gives the allocator's free memory back to the system (glibc's `malloc_trim(0)`).
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes an integer and only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A read-only memory map of a whole, non-empty file.
///
/// The caller promises that nothing changes the file while the map lives: it is undefined
/// behaviour only if the file shrinks (SIGBUS) or has bytes rewritten underneath it. The log's
/// reader (`wal::mmap`) maps segments only at start-up, before the server writes and while it
/// holds the data directory's lock; `tidepool-log` reads a directory a server holds with
/// ordinary reads, never a map.
pub fn map_file(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: read-only, and the file does not change while mapped (above).
    unsafe { memmap2::Mmap::map(file) }
}

/// Which side of a [`fork`] this is.
pub enum Forked {
    /// The child: it may only write what it inherited and leave through [`exit_now`].
    Child,
    /// The parent, with the child's process id.
    Parent(i32),
}

/// Duplicates this process (for a background snapshot: the child writes the state as it was at
/// the fork, as Redis's BGSAVE does).
pub fn fork() -> io::Result<Forked> {
    // SAFETY: fork() duplicates the process. The child (by the contract of `Forked::Child`)
    // only writes the state it inherited to a file and leaves through `exit_now`: it takes no
    // lock another thread could have held (glibc's fork resets the allocator's), runs no
    // destructor, and touches no runtime.
    match unsafe { libc::fork() } {
        pid if pid < 0 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// Sets the calling thread's nice value (Linux's nice is per thread), so that its work yields
/// the CPU to other threads'. Best effort: a failure leaves the thread as it was.
pub fn lower_thread_priority(nice: i32) {
    // SAFETY: setpriority reads no memory; with `who` 0 it changes only the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, nice);
    }
}

/// This process's id.
pub fn pid() -> i32 {
    // SAFETY: getpid takes nothing and cannot fail.
    unsafe { libc::getpid() }
}

/// In a forked child: die with the parent (an orphaned child would hold its port and data
/// directory); leaves at once if the parent `parent` is already gone.
pub fn die_with_parent(parent: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments; getppid takes none.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(1);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
}

/// Asks the processor to bring the cache line at `p` in, without waiting for it: a hint that
/// changes no state and no result (replay's lookups of a record's keys overlap their misses).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch loads nothing into the program and never faults, whatever the
    // address (SSE is part of x86-64's baseline).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ignores SIGPIPE again (as the Rust runtime set it at start), so a write to a closed socket
/// or pipe is an error and not the process's end. `Command::exec` sets it back to the default
/// before it replaces the process, and leaves it so when the replacement fails.
pub fn ignore_sigpipe() {
    // SAFETY: signal() with a valid signal number and SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Ends the process at once with `code`, without running the parent's exit handlers or any
/// destructor (a forked child's way out).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit ends the process; nothing after it runs.
    unsafe { libc::_exit(code) }
}

/// Waits for the child `pid` to end; its exit code, or None if it did not exit normally.
pub fn wait_for(pid: i32) -> Option<i32> {
    let mut wstatus = 0;
    // SAFETY: waits for our own child; `wstatus` is a valid place for its status.
    let r = unsafe { libc::waitpid(pid, &mut wstatus, 0) };
    (r == pid && libc::WIFEXITED(wstatus)).then(|| libc::WEXITSTATUS(wstatus))
}

/// Sends SIGKILL to the process `pid` (our own child).
pub fn kill_now(pid: i32) {
    // SAFETY: kill takes integers only.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Kills this process with SIGKILL, as `kill -9` would (and first its parent, when `parent_too`:
/// a crash point reached in a background snapshot's child kills the server with it).
pub fn kill_self(parent_too: bool) {
    // SAFETY: kill, getpid and getppid take and return integers only.
    unsafe {
        if parent_too {
            libc::kill(libc::getppid(), libc::SIGKILL);
        }
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// A Lua state with the table, string, math and debug libraries. mlua marks loading the debug
/// library `unsafe`: with it a script could break the VM's invariants. The debug library is
/// needed only by the prelude's error handler (to find the script's line, as Redis does), and
/// the prelude removes it from the globals before any user script runs.
pub fn lua_with_debug() -> mlua::Lua {
    use mlua::{Lua, LuaOptions, StdLib};
    // SAFETY: see above: no user code ever sees the debug library.
    unsafe {
        Lua::unsafe_new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG,
            LuaOptions::default(),
        )
    }
}

#[cfg(test)]
mod tests {
    /// Issue 26: `unsafe` lived in five files. It lives here alone now; this holds it here.
    #[test]
    fn no_other_file_writes_unsafe() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for d in ["src", "tools", "benches"] {
            walk(&root.join(d), &mut files);
        }
        assert!(files.len() > 50, "{files:?}");
        for f in files.iter().filter(|f| !f.ends_with("src/sys.rs")) {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                assert!(
                    !(code.contains("unsafe {")
                        || code.contains("unsafe fn")
                        || code.contains("unsafe impl")),
                    "{}:{}: `unsafe` belongs in src/sys.rs",
                    f.display(),
                    i + 1
                );
            }
        }
    }
}
