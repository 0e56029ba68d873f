//! Who syncs the log. With `always`, replies wait until one `fdatasync` covers their batch,
//! and every batch that arrived meanwhile shares that sync (group commit): key-value writes'
//! syncs are made by the runtime's own thread when it parks (`ParkSync`) while the disk is
//! quick, the others by the flusher thread. With `everysec`, the flusher syncs at most a second
//! after a write. Every sync takes the log's one lock. A failed sync is final: the log is
//! poisoned, waiting replies get an error, and the executor refuses further writes.

use crate::config::{self, FsyncMode};
use crate::wal::Progress;
use std::fs::File;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// A call that releases a reply: with the failure text if the sync failed.
pub type ReplyCall = Box<dyn FnOnce(Option<&str>) + Send>;

/// A reply waiting for durability, answered with the failure text if the sync failed: a
/// request's answer, which every key-value request waits as (kept as it is: a boxed call
/// would be an allocation a request), or any other call.
pub enum Pending {
    Answer {
        reply: tokio::sync::oneshot::Sender<super::Answer>,
        replies: Result<Vec<crate::reply::Reply>, String>,
        sync_token: u64,
    },
    Call(ReplyCall),
}

impl Pending {
    pub fn call(f: impl FnOnce(Option<&str>) + Send + 'static) -> Pending {
        Pending::Call(Box::new(f))
    }

    /// Releases the reply: as it is, or as the failure's error.
    pub fn answer(self, failure: Option<&str>) {
        match self {
            Pending::Answer {
                reply,
                replies,
                sync_token,
            } => {
                let replies = match failure {
                    None => replies,
                    Some(e) => Err(e.to_string()),
                };
                let _ = reply.send(super::Answer {
                    replies,
                    sync_token,
                    unauthorized: false,
                    aborted: false,
                });
            }
            Pending::Call(f) => f(failure),
        }
    }
}

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
                r.answer(Some("ERR the log flusher has stopped"));
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
/// `PARK_SYNC_WAIT_MAX_US`, the executor syncs instead.
///
/// While the runtime's thread syncs, nothing else on the runtime runs, health checks
/// included. So it syncs only while the disk is quick (`quick`: the last sync took under
/// `PARK_SYNC_FAST_MAX_US`, and none stalled lately) and no other sync is under way (the
/// flusher's, for the delivery service's records, which it keeps so that no key-value read of
/// durable state waits on this thread for a publish's sync); otherwise the flusher takes the
/// item.
#[derive(Default)]
pub struct ParkSync {
    waiting: AtomicBool,
    /// What waits, and since when.
    item: Mutex<Option<(FlushItem, Instant)>>,
    progress: OnceLock<Arc<Progress>>,
    /// Until `detach`: the flusher stops once every sender is gone.
    flusher: Mutex<Option<mpsc::Sender<FlushItem>>>,
}

impl ParkSync {
    /// The log's progress, which the syncs move, and the flusher that takes the items this
    /// thread should not sync (set once, when the executor starts).
    pub fn attach(&self, progress: Arc<Progress>, flusher: &Flusher) {
        let _ = self.progress.set(progress);
        *self.flusher.lock().unwrap_or_else(PoisonError::into_inner) = Some(flusher.tx.clone());
    }

    /// Lets the flusher stop (at shutdown, after the last `run`).
    pub fn detach(&self) {
        self.flusher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(FlushItem, Instant)>> {
        // Nothing panics while the slot is held; should something, what it holds is whole.
        self.item.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a batch's replies to the next sync.
    pub fn add(&self, item: FlushItem) {
        let mut slot = self.slot();
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
        self.slot()
            .as_ref()
            .map(|(_, since)| max.saturating_sub(since.elapsed()))
    }

    /// Whether the disk is quick enough for the runtime's thread to wait for it: the last sync
    /// took under `PARK_SYNC_FAST_MAX_US`, and none stalled (`PARK_SYNC_STALL_US`) in the last
    /// `PARK_SYNC_STALL_PAUSE_MS`.
    pub fn quick(&self) -> bool {
        self.progress.get().is_some_and(|p| {
            p.last_sync_us.load(Ordering::Relaxed) < config::PARK_SYNC_FAST_MAX_US
                && crate::clock::wall_unix_ms()
                    .saturating_sub(p.stalled_at_ms.load(Ordering::Relaxed))
                    >= config::PARK_SYNC_STALL_PAUSE_MS
        })
    }

    /// Syncs what was added, if anything, and releases its replies; or hands it to the
    /// flusher when this thread should not wait for the disk now.
    pub fn run(&self) {
        if !self.waiting.load(Ordering::Acquire) {
            return;
        }
        let Some((item, _)) = ({
            let mut slot = self.slot();
            self.waiting.store(false, Ordering::Release);
            slot.take()
        }) else {
            return;
        };
        let Some(progress) = self.progress.get() else {
            return answer(item.replies, Some("ERR the log flusher has stopped"));
        };
        let tx = self
            .flusher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(tx) = tx else {
            // Detached at shutdown, which syncs everything written: this thread waits its turn.
            let failure = sync(progress, &item.file, item.seq);
            return answer(item.replies, failure.as_deref());
        };
        let one = match progress.sync_lock.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        match one {
            Some(one) if self.quick() => {
                let failure = sync_locked(progress, &item.file, item.seq);
                drop(one);
                answer(item.replies, failure.as_deref());
            }
            _ => {
                if let Err(mpsc::SendError(item)) = tx.send(item) {
                    answer(item.replies, Some("ERR the log flusher has stopped"));
                }
            }
        }
    }
}

fn answer(replies: Vec<Pending>, failure: Option<&str>) {
    for r in replies {
        r.answer(failure);
    }
}

/// One sync of the log up to `seq` (none if it is durable already), after any other; the
/// failure's text, if it failed now or before.
pub fn sync(shared: &Progress, file: &File, seq: u64) -> Option<String> {
    let _one = shared
        .sync_lock
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    sync_locked(shared, file, seq)
}

/// `sync`, with `sync_lock` held by the caller.
fn sync_locked(shared: &Progress, file: &File, seq: u64) -> Option<String> {
    if let Some(why) = shared.fsync_failed.get() {
        return Some(crate::reply::errors::log_failed(why));
    }
    if seq <= shared.durable_seq.load(Ordering::SeqCst) {
        return None;
    }
    let started = Instant::now();
    let done = sync_data(file);
    let took = started.elapsed();
    let took_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    shared.last_sync_us.store(took_us, Ordering::Relaxed);
    if took_us >= config::PARK_SYNC_STALL_US {
        shared
            .stalled_at_ms
            .store(crate::clock::wall_unix_ms(), Ordering::Relaxed);
    }
    match done {
        Ok(()) => {
            shared.sync_seconds.observe(took);
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
        let Some((seq, file)) = newest(&items) else {
            continue;
        };
        let failure = sync(shared, &file, seq);
        for item in items {
            for r in item.replies {
                r.answer(failure.as_deref());
            }
        }
    }
}

/// The last record the items need and its segment. Items may come out of order (one handed
/// over by the runtime's thread after a later batch's, which may be in a newer segment), and
/// every older segment was synced when it was closed.
fn newest(items: &[FlushItem]) -> Option<(u64, Arc<File>)> {
    items
        .iter()
        .max_by_key(|i| i.seq)
        .map(|i| (i.seq, i.file.clone()))
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
                    r.answer(None);
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
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "tidepool-park-sync-{}-{}-{}",
            std::process::id(),
            crate::clock::wall_unix_us(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let f = File::create(&path).expect("temp file");
        (path, Arc::new(f))
    }

    fn reply(into: &Arc<StdMutex<Vec<Option<String>>>>) -> Pending {
        let into = into.clone();
        Pending::call(move |failure: Option<&str>| {
            if let Ok(mut v) = into.lock() {
                v.push(failure.map(str::to_string));
            }
        })
    }

    /// Guards the flusher against items out of order: an item handed over by the runtime's
    /// thread after a later batch's must not make it sync the older segment only, and count
    /// the newer one's records durable.
    #[test]
    fn the_flusher_syncs_the_segment_of_the_newest_record_whatever_the_order() {
        let (old_path, old) = file();
        let (new_path, new) = file();
        let items = vec![
            FlushItem {
                file: new.clone(),
                seq: 101,
                replies: Vec::new(),
            },
            FlushItem {
                file: old.clone(),
                seq: 100,
                replies: Vec::new(),
            },
        ];
        let (seq, file) = newest(&items).expect("items");
        assert_eq!(seq, 101);
        assert!(Arc::ptr_eq(&file, &new));
        assert!(newest(&[]).is_none());
        let _ = std::fs::remove_file(old_path);
        let _ = std::fs::remove_file(new_path);
    }

    /// A reply that notes the name of the thread that released it.
    fn reply_on(into: &Arc<StdMutex<Vec<String>>>) -> Pending {
        let into = into.clone();
        Pending::call(move |_: Option<&str>| {
            if let Ok(mut v) = into.lock() {
                v.push(std::thread::current().name().unwrap_or("").to_string());
            }
        })
    }

    fn released(got: &Arc<StdMutex<Vec<String>>>) -> Vec<String> {
        for _ in 0..500 {
            let now = got.lock().map(|v| v.clone()).unwrap_or_default();
            if !now.is_empty() {
                return now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Vec::new()
    }

    /// Guards the HTTP thread against a slow disk: while another sync is under way, or after a
    /// sync slower than `PARK_SYNC_FAST_MAX_US`, the runtime's thread does not wait for the disk
    /// itself; the flusher syncs the item, and the call returns at once.
    #[test]
    fn a_park_sync_hands_its_item_to_the_flusher_while_a_sync_is_under_way_or_the_disk_is_slow() {
        let (path, f) = file();
        let progress = Arc::new(Progress::default());
        let flusher = Flusher::start(FsyncMode::Always, progress.clone());
        let park = Arc::new(ParkSync::default());
        park.attach(progress.clone(), &flusher);
        // Another sync under way: the flusher waits for it, the hook does not.
        let got = Arc::new(StdMutex::new(Vec::new()));
        let held = progress
            .sync_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        park.add(FlushItem {
            file: f.clone(),
            seq: 1,
            replies: vec![reply_on(&got)],
        });
        park.run();
        std::thread::sleep(Duration::from_millis(50));
        assert!(got.lock().map(|v| v.is_empty()).unwrap_or(false));
        drop(held);
        assert_eq!(released(&got), vec!["flusher".to_string()]);
        assert_eq!(progress.durable_seq.load(Ordering::SeqCst), 1);
        // The last sync was slow: the flusher again.
        let got = Arc::new(StdMutex::new(Vec::new()));
        progress
            .last_sync_us
            .store(config::PARK_SYNC_FAST_MAX_US, Ordering::Relaxed);
        progress.stalled_at_ms.store(0, Ordering::Relaxed);
        assert!(!park.quick());
        park.add(FlushItem {
            file: f.clone(),
            seq: 2,
            replies: vec![reply_on(&got)],
        });
        park.run();
        assert_eq!(released(&got), vec!["flusher".to_string()]);
        // A quick last sync after a stall a moment ago: still the flusher's.
        progress.last_sync_us.store(0, Ordering::Relaxed);
        progress
            .stalled_at_ms
            .store(crate::clock::wall_unix_ms(), Ordering::Relaxed);
        assert!(!park.quick());
        // Quick again, and no stall for a while: on the calling thread.
        let got = Arc::new(StdMutex::new(Vec::new()));
        progress.last_sync_us.store(0, Ordering::Relaxed);
        progress.stalled_at_ms.store(0, Ordering::Relaxed);
        park.add(FlushItem {
            file: f.clone(),
            seq: 3,
            replies: vec![reply_on(&got)],
        });
        let on_runtime = park.clone();
        std::thread::Builder::new()
            .name("runtime".into())
            .spawn(move || on_runtime.run())
            .and_then(|t| t.join().map_err(|_| std::io::Error::other("panicked")))
            .expect("the calling thread");
        assert_eq!(released(&got), vec!["runtime".to_string()]);
        assert_eq!(progress.durable_seq.load(Ordering::SeqCst), 3);
        park.detach();
        flusher.stop();
        let _ = std::fs::remove_file(path);
    }

    /// Guards the runtime's key-value syncs: batches added before a park share one sync, which
    /// moves the durable position to the last of them and releases every reply; nothing is
    /// released before, and the age that the executor's fallback reads starts at the first.
    #[test]
    fn a_park_sync_releases_every_batch_added_since_the_last_one_with_one_sync() {
        let (path, f) = file();
        let progress = Arc::new(Progress::default());
        let flusher = Flusher::start(FsyncMode::Always, progress.clone());
        let park = ParkSync::default();
        park.attach(progress.clone(), &flusher);
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
        park.detach();
        flusher.stop();
        let _ = std::fs::remove_file(path);
    }
}
