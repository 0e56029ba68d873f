//! Taking snapshots from the executor: SAVE in place, BGSAVE (and BGREWRITEAOF, and the
//! automatic trigger) in a forked child.
//!
//! A snapshot is always taken between two records: the log is rolled to a new segment (every
//! record so far synced in closed segments), then the state is written as it is at that
//! record. In the background this is Redis's way: `fork()` gives the child a copy-on-write
//! image of the state as of the roll, the child writes `<seq>.snap.tmp` and exits, and the
//! executor goes on serving; the only pause is the fork itself (the page tables are copied)
//! and the copies made when a page is first written while the child lives. A thread of our
//! own waits for the child, then syncs the file (after the child, so that the copies stop a
//! sync's time sooner), publishes the snapshot (rename, directory sync) and compacts the log
//! behind it. The child touches nothing but the state and its own file: no lock, no
//! runtime, no logging (only what is async-signal-tolerant with glibc's fork handlers: memory
//! allocation and plain system calls), and it leaves with `_exit`.

use crate::command::ctx::{SnapshotAsk, SnapshotFacts};
use crate::config::SnapshotPolicy;
use crate::machine::Machine;
use crate::reply::Reply;
use crate::snapshot::{self, format::SnapshotHeader, Written};
use crate::sys;
use crate::wal::WalWriter;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What the waiting thread and the executor share about snapshots.
#[derive(Debug, Default)]
pub struct Status {
    /// A background snapshot: its child's pid, when it started, and its record.
    pub running: Option<(i32, u64, u64)>,
    pub scheduled: bool,
    pub last_save_ms: u64,
    pub last_ok: bool,
    pub last_took_ms: Option<u64>,
    pub saves: u64,
    /// The record the newest snapshot ends at, and its size.
    pub last_seq: u64,
    pub last_bytes: u64,
    pub last_error: Option<String>,
}

pub struct Snapshots {
    pub data_dir: PathBuf,
    pub wal_dir: PathBuf,
    pub policy: SnapshotPolicy,
    pub status: Arc<Mutex<Status>>,
    /// The log's written bytes when the last snapshot was taken (for the automatic trigger).
    base_written: u64,
    /// Bytes of records after the last snapshot that were already in the log at start-up
    /// (replayed, not written by this process): they count toward the trigger too, so that a
    /// server restarted often still takes its snapshots.
    backlog: u64,
    /// Why snapshots are refused (a server at a past point writes nothing).
    refused: Option<String>,
}

impl Snapshots {
    pub fn new(
        data_dir: PathBuf,
        wal_dir: PathBuf,
        policy: SnapshotPolicy,
        last: Option<(u64, u64)>,
        backlog: u64,
        refused: Option<String>,
        now_ms: u64,
    ) -> Snapshots {
        let (last_seq, last_bytes) = last.unwrap_or((0, 0));
        Snapshots {
            data_dir,
            wal_dir,
            policy,
            status: Arc::new(Mutex::new(Status {
                last_save_ms: now_ms,
                last_ok: true,
                last_seq,
                last_bytes,
                ..Status::default()
            })),
            base_written: 0,
            backlog,
            refused,
        }
    }

    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        // A poisoned lock only means a panic elsewhere; the status itself stays usable.
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn running(&self) -> bool {
        self.status().running.is_some()
    }

    /// What a SAVE/BGSAVE/BGREWRITEAOF answers now. `Ok(Some(background))` means: take one
    /// once the request's record is logged.
    pub fn ask(&mut self, ask: SnapshotAsk, log_refusal: Option<String>) -> (Reply, Option<bool>) {
        if let Some(why) = self.refused.clone().or(log_refusal) {
            return (Reply::Error(format!("ERR {why}")), None);
        }
        let running = self.running();
        match ask {
            SnapshotAsk::Save if running => {
                (Reply::err("ERR Background save already in progress"), None)
            }
            SnapshotAsk::Save => (Reply::ok(), Some(false)),
            SnapshotAsk::Background { schedule } if running => {
                if schedule {
                    self.status().scheduled = true;
                    (Reply::Status("Background saving scheduled".into()), None)
                } else {
                    (Reply::err("ERR Background save already in progress"), None)
                }
            }
            SnapshotAsk::Background { .. } => (
                Reply::Status("Background saving started".into()),
                Some(true),
            ),
            SnapshotAsk::Rewrite if running => {
                self.status().scheduled = true;
                (
                    Reply::Status("Background append only file rewriting scheduled".into()),
                    None,
                )
            }
            SnapshotAsk::Rewrite => (
                Reply::Status("Background append only file rewriting started".into()),
                Some(true),
            ),
        }
    }

    /// Whether a snapshot is due by itself: one was scheduled behind a running one, or the log
    /// written since the last has grown past the policy's share of it.
    pub fn due(&self, wal: &WalWriter) -> bool {
        if self.refused.is_some() {
            return false;
        }
        let s = self.status();
        if s.running.is_some() {
            return false;
        }
        if s.scheduled {
            return true;
        }
        let p = self.policy;
        if p.auto_percentage == 0 {
            return false;
        }
        let grown = (wal.written_bytes() + self.backlog).saturating_sub(self.base_written);
        grown >= p.auto_min_bytes && grown >= s.last_bytes.saturating_mul(p.auto_percentage) / 100
    }

    /// What INFO persistence shows.
    pub fn facts(&self, log_last_seq: u64, now_ms: u64) -> SnapshotFacts {
        let s = self.status();
        let log_bytes = crate::wal::reader::list_segments(&self.wal_dir)
            .map(|segs| {
                segs.iter()
                    .filter_map(|seg| std::fs::metadata(&seg.path).ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        SnapshotFacts {
            running_s: s
                .running
                .map(|(_, started, _)| now_ms.saturating_sub(started) / 1000),
            scheduled: s.scheduled,
            last_save_s: s.last_save_ms / 1000,
            last_ok: s.last_ok,
            last_took_s: s.last_took_ms.map(|t| t / 1000),
            last_took_ms: s.last_took_ms,
            saves: s.saves,
            changes_since: log_last_seq.saturating_sub(s.last_seq),
            log_bytes,
            snapshot_bytes: s.last_bytes,
        }
    }

    /// Takes a snapshot at the log's current end: in place (`background` false, SAVE) or in a
    /// forked child. The log is rolled first.
    pub fn take(
        &mut self,
        background: bool,
        wal: &mut WalWriter,
        machine: &Machine,
        now_ms: u64,
    ) -> Result<(), String> {
        // The state is at the log's last record: every record the live path logs moves it.
        if machine.position().seq != wal.last_seq() {
            return Err(format!(
                "the state is at record #{} and the log at #{}: no snapshot taken",
                machine.position().seq,
                wal.last_seq()
            ));
        }
        wal.roll()
            .map_err(|e| format!("rolling the log before the snapshot failed: {e}"))?;
        crate::fault::point("log-rolled");
        self.base_written = wal.written_bytes();
        self.backlog = 0;
        let header = machine.snapshot_header(now_ms);
        {
            let mut s = self.status();
            s.scheduled = false;
        }
        if !background {
            let result = machine
                .write_snapshot_tmp(&self.data_dir, now_ms, true)
                .and_then(|tmp| {
                    snapshot::publish(&self.data_dir, &tmp, header.seq)?;
                    Ok(tmp.1)
                })
                .map_err(|e| e.to_string());
            finish(
                &self.status,
                &self.data_dir,
                &self.wal_dir,
                self.policy,
                header,
                now_ms,
                result.clone(),
            );
            return result.map(|_| ());
        }
        let (mut reader, writer) =
            std::io::pipe().map_err(|e| format!("cannot open a pipe for the snapshot: {e}"))?;
        let parent = sys::pid();
        let forked =
            sys::fork().map_err(|e| format!("cannot fork for a background snapshot: {e}"))?;
        let pid = match forked {
            sys::Forked::Parent(pid) => pid,
            sys::Forked::Child => {
                // Die with the server: an orphaned child would hold its port and data directory.
                sys::die_with_parent(parent);
                crate::fault::in_child();
                drop(reader);
                let mut w = writer;
                // Unsynced: the snapshot thread syncs the file once this child has exited.
                let code = match machine.write_snapshot_tmp(&self.data_dir, now_ms, false) {
                    Ok((_, written)) => {
                        let _ = write!(w, "ok {} {}", written.bytes, written.keys);
                        0
                    }
                    Err(e) => {
                        let _ = write!(w, "error {e}");
                        1
                    }
                };
                drop(w);
                // At once, without the parent's exit handlers or any destructor.
                sys::exit_now(code)
            }
        };
        drop(writer);
        crate::state::pause_access_times(true);
        self.status().running = Some((pid, now_ms, header.seq));
        let status = self.status.clone();
        let (data_dir, wal_dir, policy) =
            (self.data_dir.clone(), self.wal_dir.clone(), self.policy);
        let spawned = std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                let mut said = String::new();
                let _ = reader.read_to_string(&mut said);
                let code = sys::wait_for(pid);
                crate::state::pause_access_times(false);
                let exited_ok = code == Some(0);
                let result = match said.strip_prefix("ok ") {
                    Some(rest) if exited_ok => {
                        let mut it = rest.split(' ').filter_map(|n| n.parse::<u64>().ok());
                        let written = Written {
                            bytes: it.next().unwrap_or(0),
                            keys: it.next().unwrap_or(0),
                        };
                        let tmp = snapshot::tmp_path(&data_dir, header.seq);
                        snapshot::sync_tmp(&tmp)
                            .and_then(|()| {
                                snapshot::publish(&data_dir, &(tmp, written), header.seq)
                            })
                            .map(|_| written)
                            .map_err(|e| e.to_string())
                    }
                    _ => Err(match said.strip_prefix("error ") {
                        Some(e) => e.to_string(),
                        None => match code {
                            Some(c) => format!("the snapshot's child process exited with {c}"),
                            None => "the snapshot's child process was killed".to_string(),
                        },
                    }),
                };
                finish(&status, &data_dir, &wal_dir, policy, header, now_ms, result);
                // Only now may another snapshot start: its compaction must not run beside this
                // one (which removes leftover temporary files).
                status.lock().unwrap_or_else(|p| p.into_inner()).running = None;
            });
        if let Err(e) = spawned {
            // Without a thread to wait for it, the child is stopped and its file left for the
            // next compaction to remove.
            sys::kill_now(pid);
            sys::wait_for(pid);
            crate::state::pause_access_times(false);
            self.status().running = None;
            return Err(format!("cannot start the snapshot thread: {e}"));
        }
        Ok(())
    }

    /// Stops a background snapshot still being written (at shutdown); its file is removed by
    /// the next compaction.
    pub fn stop(&self) {
        if let Some((pid, _, _)) = self.status().running {
            // The waiting thread reaps it.
            sys::kill_now(pid);
        }
    }
}

/// After a snapshot was written (or failed): the status, the operator's line, and compaction.
fn finish(
    status: &Mutex<Status>,
    data_dir: &std::path::Path,
    wal_dir: &std::path::Path,
    policy: SnapshotPolicy,
    header: SnapshotHeader,
    started_ms: u64,
    result: Result<Written, String>,
) {
    let now = crate::clock::wall_unix_ms();
    let took = now.saturating_sub(started_ms);
    let mut s = status.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok(w) => {
            s.last_ok = true;
            s.last_save_ms = now;
            s.last_took_ms = Some(took);
            s.saves += 1;
            s.last_seq = header.seq;
            s.last_bytes = w.bytes;
            s.last_error = None;
            drop(s);
            let compacted = snapshot::compact(data_dir, wal_dir, header.seq, policy.retention, now);
            let tail = match compacted {
                Ok(c) if c.segments > 0 => format!(
                    "; {} log segments ({} bytes) no longer needed were removed",
                    c.segments, c.bytes
                ),
                Ok(_) => String::new(),
                Err(e) => format!("; compacting the log failed: {e}"),
            };
            crate::log::line(&format!(
                "tidepool: snapshot at record #{} written: {} keys, {} bytes in {} ms{tail}",
                header.seq, w.keys, w.bytes, took
            ));
        }
        Err(e) => {
            s.last_ok = false;
            s.last_error = Some(e.clone());
            drop(s);
            crate::log::line(&format!(
                "error: the snapshot at record #{} failed: {e}",
                header.seq
            ));
        }
    }
}
