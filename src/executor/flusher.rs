//! The thread that syncs the log. With `always`, replies wait here until one `fdatasync` covers
//! their batch, and every batch that arrived meanwhile shares that sync (group commit). With
//! `everysec`, it syncs at most a second after a write. A failed sync is final: the log is
//! poisoned, waiting replies get an error, and the executor refuses further writes.

use crate::config::{self, FsyncMode};
use crate::wal::Progress;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A reply waiting for durability; called with the failure text if the sync failed.
pub type Pending = Box<dyn FnOnce(Option<&str>) + Send>;

pub struct FlushItem {
    /// The segment the records went to (rotation syncs finished segments itself).
    pub file: Arc<File>,
    /// The last sequence number the replies depend on.
    pub seq: u64,
    pub replies: Vec<Pending>,
}

pub struct Flusher {
    tx: mpsc::Sender<FlushItem>,
    thread: std::thread::JoinHandle<()>,
}

impl Flusher {
    pub fn start(mode: FsyncMode, shared: Arc<Progress>) -> Flusher {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("flusher".into())
            .spawn(move || match mode {
                FsyncMode::EverySec => every_second(rx, &shared),
                _ => always(rx, &shared),
            })
            .unwrap_or_else(|e| {
                // Without a flusher no write could ever be acknowledged: stop at start-up.
                crate::log::line(&format!("error: cannot start the log flusher thread: {e}"));
                std::process::exit(1)
            });
        Flusher { tx, thread }
    }

    pub fn send(&self, item: FlushItem) {
        if let Err(mpsc::SendError(item)) = self.tx.send(item) {
            for r in item.replies {
                r(Some("ERR the log flusher has stopped"));
            }
        }
    }

    /// Drains what is queued, syncs it, and stops.
    pub fn stop(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

fn sync(shared: &Progress, file: &File, seq: u64) -> Option<String> {
    if let Some(why) = shared.fsync_failed.get() {
        return Some(crate::reply::errors::log_failed(why));
    }
    if seq <= shared.durable_seq.load(Ordering::SeqCst) {
        return None;
    }
    let started = Instant::now();
    match sync_data(file) {
        Ok(()) => {
            shared.sync_seconds.observe(started.elapsed());
            shared.durable_seq.store(seq, Ordering::SeqCst);
            shared.synced.notify_waiters();
            shared.syncs.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(e) => {
            let why = format!("fdatasync failed: {e}");
            crate::log::line(&format!("error: {why}; the log now refuses writes"));
            let _ = shared.fsync_failed.set(why.clone());
            Some(crate::reply::errors::log_failed(&why))
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
fn sync_data(file: &File) -> std::io::Result<()> {
    file.sync_data()
}

/// With the `fault-injection` feature, syncs after the first TIDEPOOL_FAULT_FSYNC_FAIL_AFTER
/// succeed no more, and while the file TIDEPOOL_FAULT_FSYNC_HOLD names exists a sync waits
/// (a slow disk, held as long as a test needs).
#[cfg(feature = "fault-injection")]
fn sync_data(file: &File) -> std::io::Result<()> {
    use std::sync::atomic::AtomicU64;
    if let Some(hold) = std::env::var_os("TIDEPOOL_FAULT_FSYNC_HOLD") {
        while std::path::Path::new(&hold).exists() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    static DONE: AtomicU64 = AtomicU64::new(0);
    let limit = std::env::var("TIDEPOOL_FAULT_FSYNC_FAIL_AFTER")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(limit) = limit {
        if DONE.fetch_add(1, Ordering::SeqCst) >= limit {
            return Err(std::io::Error::other(
                "injected fault: the disk refused the sync",
            ));
        }
    }
    file.sync_data()
}

fn always(rx: mpsc::Receiver<FlushItem>, shared: &Progress) {
    while let Ok(first) = rx.recv() {
        let mut items = vec![first];
        items.extend(rx.try_iter());
        let seq = items.iter().map(|i| i.seq).max().unwrap_or(0);
        let file = items[items.len() - 1].file.clone();
        let failure = sync(shared, &file, seq);
        for item in items {
            for r in item.replies {
                r(failure.as_deref());
            }
        }
    }
}

fn every_second(rx: mpsc::Receiver<FlushItem>, shared: &Progress) {
    let interval = Duration::from_millis(config::EVERYSEC_INTERVAL_MS);
    let mut latest: Option<(Arc<File>, u64)> = None;
    let mut last_sync = Instant::now();
    loop {
        let wait = interval.saturating_sub(last_sync.elapsed());
        let stop = match rx.recv_timeout(wait) {
            Ok(item) => {
                let seq = latest.as_ref().map(|l| l.1).unwrap_or(0).max(item.seq);
                latest = Some((item.file, seq));
                for r in item.replies {
                    r(None);
                }
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        if stop || last_sync.elapsed() >= interval {
            if let Some((file, seq)) = &latest {
                sync(shared, file, *seq);
            }
            last_sync = Instant::now();
        }
        if stop {
            return;
        }
    }
}
