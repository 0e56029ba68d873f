//! The thread that syncs the log. With `always`, replies wait here until one `fdatasync` covers
//! their batch, and every batch that arrived meanwhile shares that sync (group commit). With
//! `everysec`, it syncs at most a second after a write. A failed sync is final: the log is
//! poisoned, waiting replies get an error, and the executor refuses further writes.

use crate::config::{self, FsyncMode};
use crate::wal::Progress;
use std::fs::File;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
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

/// Key-value writes' sync with `always`, made by the runtime's own thread when it has nothing
/// else to do (tokio's `on_thread_park`): the layout of redis-server's loop, which syncs in
/// `beforeSleep` and then writes the replies. With the flusher, each sync costs two wake-ups
/// of an idle CPU (the runtime waking the flusher, the flusher waking the runtime); here the
/// replies are released on the thread that writes them, and every batch the executor runs
/// until the runtime runs out of work joins the one sync. Should the runtime stay busy for
/// `PARK_SYNC_WAIT_MAX_US`, the executor syncs instead. The flusher keeps the delivery
/// service's records, so that a key-value read of durable state never waits on this thread
/// for a publish's sync.
#[derive(Default)]
pub struct ParkSync {
    waiting: AtomicBool,
    /// What waits, and since when.
    item: Mutex<Option<(FlushItem, Instant)>>,
    progress: OnceLock<Arc<Progress>>,
}

impl ParkSync {
    /// The log's progress, which the syncs move (set once, when the executor starts).
    pub fn attach(&self, progress: Arc<Progress>) {
        let _ = self.progress.set(progress);
    }

    /// Adds a batch's replies to the next sync.
    pub fn add(&self, item: FlushItem) {
        let Ok(mut slot) = self.item.lock() else {
            // A poisoned lock means a reply panicked while it was held: nothing can be synced
            // here any more, so the replies say so rather than wait.
            for r in item.replies {
                r(Some("ERR the log flusher has stopped"));
            }
            return;
        };
        match slot.as_mut() {
            Some((held, _)) => {
                held.seq = held.seq.max(item.seq);
                held.file = item.file;
                held.replies.extend(item.replies);
            }
            None => *slot = Some((item, Instant::now())),
        }
        self.waiting.store(true, Ordering::Release);
    }

    /// How long until what waits has waited `max` (zero: it has), or None if nothing waits.
    pub fn due_in(&self, max: Duration) -> Option<Duration> {
        if !self.waiting.load(Ordering::Acquire) {
            return None;
        }
        let slot = self.item.lock().ok()?;
        slot.as_ref()
            .map(|(_, since)| max.saturating_sub(since.elapsed()))
    }

    /// Syncs what was added, if anything, and releases its replies.
    pub fn run(&self) {
        if !self.waiting.load(Ordering::Acquire) {
            return;
        }
        let Some((item, _)) = self.item.lock().ok().and_then(|mut slot| {
            self.waiting.store(false, Ordering::Release);
            slot.take()
        }) else {
            return;
        };
        let failure = match self.progress.get() {
            Some(progress) => sync(progress, &item.file, item.seq),
            None => Some("ERR the log flusher has stopped".to_string()),
        };
        for r in item.replies {
            r(failure.as_deref());
        }
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
            // Two threads may sync (the flusher, and the runtime's in `ParkSync`): the
            // position only moves forward.
            shared.durable_seq.fetch_max(seq, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    fn file() -> (std::path::PathBuf, Arc<File>) {
        let path = std::env::temp_dir().join(format!(
            "tidepool-park-sync-{}-{}",
            std::process::id(),
            crate::clock::wall_unix_us()
        ));
        let f = File::create(&path).expect("temp file");
        (path, Arc::new(f))
    }

    fn reply(into: &Arc<StdMutex<Vec<Option<String>>>>) -> Pending {
        let into = into.clone();
        Box::new(move |failure: Option<&str>| {
            if let Ok(mut v) = into.lock() {
                v.push(failure.map(str::to_string));
            }
        })
    }

    /// Guards the runtime's key-value syncs: batches added before a park share one sync, which
    /// moves the durable position to the last of them and releases every reply; nothing is
    /// released before, and the age that the executor's fallback reads starts at the first.
    #[test]
    fn a_park_sync_releases_every_batch_added_since_the_last_one_with_one_sync() {
        let (path, f) = file();
        let progress = Arc::new(Progress::default());
        let park = ParkSync::default();
        park.attach(progress.clone());
        let got = Arc::new(StdMutex::new(Vec::new()));
        assert_eq!(park.due_in(Duration::from_millis(2)), None);
        park.run();
        for seq in [3, 5] {
            park.add(FlushItem {
                file: f.clone(),
                seq,
                replies: vec![reply(&got), reply(&got)],
            });
        }
        assert!(got.lock().map(|v| v.is_empty()).unwrap_or(false));
        assert!(park
            .due_in(Duration::from_secs(60))
            .is_some_and(|d| d > Duration::from_secs(59)));
        assert_eq!(park.due_in(Duration::ZERO), Some(Duration::ZERO));
        park.run();
        assert_eq!(progress.durable_seq.load(Ordering::SeqCst), 5);
        assert_eq!(progress.syncs.load(Ordering::SeqCst), 1);
        assert_eq!(
            got.lock().map(|v| v.clone()).unwrap_or_default(),
            vec![None; 4]
        );
        assert_eq!(park.due_in(Duration::ZERO), None);
        let _ = std::fs::remove_file(path);
    }
}
