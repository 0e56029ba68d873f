//! The state machine's one door: the state (every database, the delivery state, the random
//! source, and the last record applied) and the operations everything else uses on it.
//!
//! - [`Machine::apply`]: one log record at its position (sequence, time), checked as the live
//!   path checks a request, or refused with what is wrong;
//! - [`Machine::write_snapshot`] and [`Machine::from_snapshot`]: the state as a snapshot image,
//!   and back;
//! - [`recover`]: a data directory rebuilt up to a point (its end, a sequence number or a
//!   time), from the snapshot asked for and the log after it, with a progress callback.
//!
//! The server's start-up (and `serve --at`), every `tidepool-log` command that rebuilds a state,
//! the tests and the benchmarks recover through [`recover`]; the executor's live path runs
//! commands on [`Machine::parts`] and records each record it logs with [`Machine::logged`].
//! A consensus library's state machine has this shape: apply an entry, build a snapshot,
//! install a snapshot.
//!
//! Replay never draws from the random source: every random choice is logged in the form it took
//! (SPOP as the members it removed, a generated id as the id). The source counts its draws, and
//! [`Machine::replay_draws`] is what a test holds at zero; so every replica and every tool
//! replays a log to the same bytes, whatever the live server's seed.

use crate::command::CommandInfo;
use crate::delivery::Delivery;
use crate::point::Point;
use crate::record::{self, KvScratch, Record};
use crate::rng::Rng;
use crate::snapshot::{self, format::SnapshotHeader};
use crate::state::databases::Databases;
use crate::state::Db;
use crate::wal::{self, reader, WalWriter};
use std::path::{Path, PathBuf};

/// A position in the log: a record's sequence number and its time (0, 0: before the first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    pub seq: u64,
    pub unix_ms: u64,
}

/// What applying one record did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Commands or events the record held.
    pub changes: u64,
    /// Of its commands, those that answered an error on replay (and so changed nothing). A log
    /// a server wrote has none: only commands that changed the state are logged.
    pub errors: u64,
}

/// The state, and the last record applied to it.
pub struct Machine {
    dbs: Databases,
    delivery: Delivery,
    rng: Rng,
    at: Position,
    /// Draws of the random source by replay (see the module's note).
    replay_draws: u64,
    /// Buffers kept between records: the last key-value record's commands as
    /// [`Machine::apply_logged`] decoded them, and their table entries.
    scratch: KvScratch,
    infos: Vec<&'static CommandInfo>,
}

/// The state's sizes (see [`Machine::census`]).
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// Each database: its id, name and keys.
    pub databases: Vec<(crate::state::databases::DbId, String, u64)>,
    pub messages_pending: u64,
    pub messages_in_flight: u64,
    pub dlq_entries: u64,
    pub schedules: u64,
}

/// The parts of the state the live path runs commands and operations on.
pub struct Parts<'a> {
    pub dbs: &'a mut Databases,
    pub delivery: &'a mut Delivery,
    pub rng: &'a mut Rng,
}

/// The seed of the random source until the live server reseeds it: replay draws nothing, so
/// any constant would do; one constant makes every tool alike.
const REPLAY_SEED: u64 = 1;

impl Default for Machine {
    fn default() -> Self {
        Machine::new()
    }
}

impl Machine {
    /// The empty state, before the first record.
    pub fn new() -> Machine {
        Machine {
            dbs: Databases::default(),
            delivery: Delivery::new(),
            rng: Rng::new(REPLAY_SEED),
            at: Position::default(),
            replay_draws: 0,
            scratch: KvScratch::default(),
            infos: Vec::new(),
        }
    }

    /// The state a snapshot holds, at the record it ends at.
    pub fn from_snapshot(loaded: snapshot::Loaded) -> Machine {
        Machine {
            dbs: loaded.dbs,
            delivery: loaded.delivery,
            rng: Rng::new(REPLAY_SEED),
            at: Position {
                seq: loaded.header.seq,
                unix_ms: loaded.header.record_unix_ms,
            },
            replay_draws: 0,
            scratch: KvScratch::default(),
            infos: Vec::new(),
        }
    }

    /// The last record applied (or logged by the live path).
    pub fn position(&self) -> Position {
        self.at
    }

    pub fn dbs(&self) -> &Databases {
        &self.dbs
    }

    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// How many times replay drew from the random source (zero, for a log a server wrote).
    pub fn replay_draws(&self) -> u64 {
        self.replay_draws
    }

    /// For the live path: the state to run commands and operations on, whose changes the
    /// caller logs (and then records with [`Machine::logged`]).
    pub fn parts(&mut self) -> Parts<'_> {
        Parts {
            dbs: &mut self.dbs,
            delivery: &mut self.delivery,
            rng: &mut self.rng,
        }
    }

    /// The live path's random source gets its own seed (replay never draws from it).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }

    /// The live path logged a record at `at`: its changes are in the state already.
    pub fn logged(&mut self, at: Position) {
        self.at = at;
    }

    /// The position the next record the live path logs will have.
    pub fn next_seq(&self) -> u64 {
        self.at.seq + 1
    }

    /// Applies one record at its position: after the last one, checked as the live path checks
    /// a request (`check_record`). An error changes nothing.
    pub fn apply(&mut self, at: Position, record: &Record) -> Result<Applied, String> {
        self.in_order(at)?;
        let changes = match record {
            Record::KvCommands(cmds) => {
                return self.apply_kv(at, None, cmds.iter().map(Vec::as_slice))
            }
            Record::KvCommandsIn { db, cmds } => {
                return self.apply_kv(at, Some(*db), cmds.iter().map(Vec::as_slice))
            }
            Record::Delivery(events) => {
                for e in events {
                    self.delivery.apply(at.seq, at.unix_ms, e);
                }
                events.len()
            }
            Record::Databases(events) => {
                for e in events {
                    self.dbs.apply(at.unix_ms, e);
                }
                events.len()
            }
        };
        self.at = at;
        Ok(Applied {
            changes: changes as u64,
            errors: 0,
        })
    }

    /// [`Machine::apply_frame`] for a caller that does not look at the record (recovery
    /// without an observer, a follower applying entries): a key-value record is decoded into
    /// buffers the machine keeps ([`KvScratch`]) instead of a `Record` of its own; the same
    /// checks, the same apply.
    pub fn apply_logged(
        &mut self,
        at: Position,
        kind: u8,
        payload: &[u8],
    ) -> Result<Applied, String> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let applied = match record::decode_kv_into(kind, payload, &mut scratch) {
            Some(db) => self.in_order(at).and_then(|()| {
                let target = (kind == record::KIND_KV_COMMANDS_IN).then_some(db);
                self.apply_kv(at, target, scratch.commands())
            }),
            None => self.apply_frame(at, kind, payload).map(|(_, a)| a),
        };
        scratch.done();
        self.scratch = scratch;
        applied
    }

    /// Refuses a record that does not come after the last one.
    fn in_order(&self, at: Position) -> Result<(), String> {
        if at.seq <= self.at.seq {
            return Err(format!(
                "record #{} comes after record #{}: records apply in order",
                at.seq, self.at.seq
            ));
        }
        Ok(())
    }

    /// Applies a record's key-value commands, checked whole first (`check_commands`), to
    /// database `db` (None: the default database, kind 1's).
    fn apply_kv<'c>(
        &mut self,
        at: Position,
        db: Option<crate::state::databases::DbId>,
        cmds: impl Iterator<Item = &'c [Vec<u8>]> + Clone,
    ) -> Result<Applied, String> {
        let mut infos = std::mem::take(&mut self.infos);
        let checked = check_commands(cmds.clone(), &mut infos);
        let applied = checked.map(|()| {
            let drawn = self.rng.draws();
            let target = match db {
                None => Some(self.dbs.default_db_mut()),
                Some(id) => self.dbs.get_mut(id),
            };
            let applied = match target {
                Some(d) => apply_commands(d, &mut self.rng, at.unix_ms, cmds, &infos),
                // A record of a database that is not there changes nothing (a correct log
                // never holds one).
                None => Applied {
                    changes: infos.len() as u64,
                    errors: infos.len() as u64,
                },
            };
            self.replay_draws += self.rng.draws() - drawn;
            self.at = at;
            applied
        });
        self.infos = infos;
        applied
    }

    /// [`Machine::apply`] for a record as the log frames it (kind and payload).
    pub fn apply_frame(
        &mut self,
        at: Position,
        kind: u8,
        payload: &[u8],
    ) -> Result<(Record, Applied), String> {
        let record = Record::decode(kind, payload).map_err(|e| e.to_string())?;
        let applied = self.apply(at, &record)?;
        Ok((record, applied))
    }

    /// The snapshot header of the state now, taken at `created_unix_ms`.
    pub fn snapshot_header(&self, created_unix_ms: u64) -> SnapshotHeader {
        SnapshotHeader {
            seq: self.at.seq,
            record_unix_ms: self.at.unix_ms,
            created_unix_ms,
        }
    }

    /// Writes the state as a snapshot image to `out` (see `log-format.md`, "Snapshots").
    pub fn write_snapshot<W: std::io::Write>(
        &self,
        out: &mut W,
        created_unix_ms: u64,
        progress: impl FnMut(u64),
    ) -> std::io::Result<snapshot::Written> {
        snapshot::write(
            out,
            &self.dbs,
            &self.delivery,
            self.snapshot_header(created_unix_ms),
            progress,
        )
    }

    /// Writes the snapshot file of the state now in `data_dir` (not yet published), synced when
    /// `sync` (`snapshot::write_tmp`): its path and what it holds.
    pub fn write_snapshot_tmp(
        &self,
        data_dir: &Path,
        created_unix_ms: u64,
        sync: bool,
    ) -> std::io::Result<(PathBuf, snapshot::Written)> {
        snapshot::write_tmp(
            data_dir,
            &self.dbs,
            &self.delivery,
            self.snapshot_header(created_unix_ms),
            |_| {},
            sync,
        )
    }

    /// Writes, syncs and publishes the snapshot file of the state now in `data_dir`.
    pub fn write_snapshot_file(
        &self,
        data_dir: &Path,
        created_unix_ms: u64,
        progress: impl FnMut(u64),
    ) -> std::io::Result<snapshot::Written> {
        snapshot::write_file(
            data_dir,
            &self.dbs,
            &self.delivery,
            self.snapshot_header(created_unix_ms),
            progress,
        )
    }

    /// Runs a read of database `db` at `ts` outside the log (a tool's look at the state; the
    /// read changes nothing the log determines).
    pub fn read(
        &mut self,
        db: crate::state::databases::DbId,
        ts: u64,
        args: &[&[u8]],
    ) -> crate::reply::Reply {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        match self.dbs.get_mut(db) {
            Some(d) => crate::command::pipeline::replay(d, &mut self.rng, ts, &args),
            None => crate::reply::Reply::Error("ERR no such database".into()),
        }
    }

    /// Bulk mode for a long replay: values change in place without their bytes counted, and
    /// are counted once at the end.
    fn bulk(&mut self, on: bool) {
        if !on {
            for (_, db) in self.dbs.iter_mut() {
                db.recount();
            }
        }
    }

    /// What the state holds, counted, for `GET /metrics`: each database's name and keys, and
    /// the delivery state's sizes.
    pub fn census(&self) -> Census {
        Census {
            databases: self
                .dbs
                .metas()
                .map(|m| {
                    let keys = self.dbs.get(m.id).map_or(0, |d| d.len() as u64);
                    (m.id, m.name.clone(), keys)
                })
                .collect(),
            messages_pending: self.delivery.msgs.len() as u64,
            messages_in_flight: self.delivery.in_flight as u64,
            dlq_entries: self.delivery.dlq.len() as u64,
            schedules: self.delivery.schedules.len() as u64,
        }
    }

    /// Gives the state up (to a test that compares two states, or a tool that writes one).
    pub fn into_parts(self) -> (Databases, Delivery) {
        (self.dbs, self.delivery)
    }
}

/// Whether a record holds only what a server logs: key-value commands the live path could
/// have run (`pipeline::replayable`). Start-up refuses a record that does not, with its file,
/// offset and sequence number, and `tidepool-log verify` reports it.
pub fn check_record(record: &Record) -> Result<(), String> {
    match record.kv_commands() {
        Some((_, cmds)) => check_commands(cmds.iter().map(Vec::as_slice), &mut Vec::new()),
        None => Ok(()),
    }
}

/// [`check_record`] of a record's key-value commands: the table entry of each, in order, into
/// `infos` (emptied first), so that applying the record looks none up again.
fn check_commands<'c>(
    cmds: impl Iterator<Item = &'c [Vec<u8>]>,
    infos: &mut Vec<&'static CommandInfo>,
) -> Result<(), String> {
    infos.clear();
    for (i, args) in cmds.enumerate() {
        let info = crate::command::pipeline::replayable(args)
            .map_err(|why| format!("command {} of the record: {why}", i + 1))?;
        infos.push(info);
    }
    Ok(())
}

/// Applies one record's key-value commands to `db`, each with its table entry (`infos`, as
/// [`check_commands`] found them).
fn apply_commands<'c>(
    db: &mut Db,
    rng: &mut Rng,
    ts: u64,
    cmds: impl Iterator<Item = &'c [Vec<u8>]> + Clone,
    infos: &[&'static CommandInfo],
) -> Applied {
    // The commands' keys (`pipeline::prefetch_key`) are brought into the cache ahead of their
    // turn: the slot of the command `PREFETCH_SLOTS_AHEAD` on, and the node of the one
    // `PREFETCH_NODES_AHEAD` on (its slot, fetched before, says where the node is).
    // The lookups of a record's commands are independent, so their misses overlap with the
    // commands before them instead of coming one after another.
    use crate::command::pipeline::prefetch_key;
    use crate::config::{PREFETCH_NODES_AHEAD, PREFETCH_SLOTS_AHEAD};
    let first_keys = || cmds.clone().map(prefetch_key);
    let mut slots_ahead = first_keys();
    let mut nodes_ahead = first_keys();
    for k in slots_ahead.by_ref().take(PREFETCH_SLOTS_AHEAD).flatten() {
        db.prefetch_slot(k);
    }
    for k in nodes_ahead.by_ref().take(PREFETCH_NODES_AHEAD).flatten() {
        db.prefetch_node(k);
    }
    let mut errors = 0;
    for (args, info) in cmds.zip(infos) {
        if let Some(Some(k)) = slots_ahead.next() {
            db.prefetch_slot(k);
        }
        if let Some(Some(k)) = nodes_ahead.next() {
            db.prefetch_node(k);
        }
        if crate::command::pipeline::replay_checked(db, rng, ts, info, args).is_error() {
            errors += 1;
        }
    }
    Applied {
        changes: infos.len() as u64,
        errors,
    }
}

/// Where recovery starts.
#[derive(Debug, Clone)]
pub enum Start {
    /// The newest snapshot that reads whole, fits the point and has the log after it (start-up).
    Newest,
    /// The oldest state the directory can rebuild: the log's beginning or, when the log was
    /// compacted, the oldest snapshot the kept log follows (`tidepool-log history --values`).
    Oldest,
    /// This snapshot file.
    File(PathBuf),
    /// The empty state and the log from its beginning.
    Empty,
}

/// What recovery may do to the log.
#[derive(Debug, Clone)]
pub enum Access {
    /// A server that will write: a torn tail is cut, temporary snapshot files are removed, and
    /// the result holds a writer after the last record.
    Write,
    /// A server that shows a past point (`serve --at`): nothing is written; the result holds a
    /// writer that refuses every write with this reason.
    ReadOnlyServer(String),
    /// A tool or a test: nothing is written, damage of any kind is returned to the caller.
    Read(reader::ReadMode),
}

/// One step of a long recovery, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    /// Bytes of the snapshot read so far.
    Snapshot(u64),
    /// The log read up to `offset` of this segment.
    Log(&'a Path, u64),
}

/// Sees the state after each record recovery applies.
pub type Observer<'a> = dyn FnMut(&mut Machine, Position, &Record) + 'a;

/// What to recover and how.
pub struct Recover<'a> {
    pub from: Start,
    /// The last record to apply: the end (None), or the last at or before a point.
    pub upto: Option<Point>,
    pub access: Access,
    pub progress: Option<&'a mut dyn FnMut(Step<'_>)>,
    /// Called after each record is applied, with the state after it.
    pub observe: Option<&'a mut Observer<'a>>,
    /// Recovery gives up past this instant with [`DEADLINE_PASSED`] (a console's rebuild,
    /// which a request waits for).
    pub deadline: Option<std::time::Instant>,
}

/// The error of a recovery that passed its deadline.
pub const DEADLINE_PASSED: &str = "the time allowed for rebuilding the state passed";

/// Records applied between two looks at the deadline (a clock read per record would cost a
/// few percent of replay).
const DEADLINE_CHECK_RECORDS: u64 = 1024;

impl<'a> Recover<'a> {
    /// Recovery from `from` to the end, reading only.
    pub fn read(from: Start) -> Recover<'a> {
        Recover {
            from,
            upto: None,
            access: Access::Read(reader::ReadMode::Mapped),
            progress: None,
            observe: None,
            deadline: None,
        }
    }
}

/// A recovered state, and what recovery found on the way.
pub struct Recovered {
    pub machine: Machine,
    /// For `Access::Write` and `Access::ReadOnlyServer`: the log's writer after the last record.
    pub writer: Option<WalWriter>,
    pub report: wal::RecoveryReport,
    /// The snapshot started from: its sequence number and size in bytes.
    pub snapshot: Option<(u64, u64)>,
    /// Snapshots passed over, with why.
    pub skipped: Vec<snapshot::Damage>,
    /// Bytes of log replayed (frames, headers included).
    pub replayed_bytes: u64,
    /// Commands and events applied (see `Applied::changes`).
    pub changes: u64,
    /// Commands that answered an error on replay (see `Applied::errors`).
    pub errors: u64,
    /// For `Access::Read`: damage the scan stopped at, if any (the caller decides whether a
    /// torn tail is an end or an error).
    pub damage: Option<reader::Damage>,
    /// Temporary snapshot files removed (`Access::Write`).
    pub removed_tmp: usize,
}

impl Recovered {
    /// A cluster node's start: its state from the cluster's snapshot, a detached writer, and
    /// nothing replayed from its own `wal/`.
    pub fn cluster(machine: Machine, writer: WalWriter) -> Recovered {
        let at = machine.position();
        Recovered {
            machine,
            writer: Some(writer),
            report: wal::RecoveryReport {
                records: 0,
                segments: 0,
                last_seq: at.seq,
                cut_tail: None,
                snapshot: None,
            },
            snapshot: None,
            skipped: Vec::new(),
            replayed_bytes: 0,
            changes: 0,
            errors: 0,
            damage: None,
            removed_tmp: 0,
        }
    }
}

/// Rebuilds the state of `data_dir` as `how` says: the starting snapshot, then every record of
/// the log after it up to the point, each through [`Machine::apply`]. A record the live path
/// would have refused, or one that does not decode, stops recovery with an error that names
/// the file, the offset, the record and `tidepool-log verify` and `repair`.
pub fn recover(data_dir: &Path, mut how: Recover<'_>) -> Result<Recovered, String> {
    let wal_dir = data_dir.join("wal");
    let removed_tmp = match how.access {
        // Temporary files of snapshots a crash interrupted take space the log may need: a
        // server that writes removes them (`serve --at` and the tools change no byte).
        Access::Write => snapshot::remove_stale_tmp(data_dir),
        _ => 0,
    };
    let mut progress = how.progress.take();
    let mut snapshot_progress = |n: u64| {
        if let Some(p) = progress.as_mut() {
            p(Step::Snapshot(n))
        }
    };
    let upto = how.upto;
    let fits = |h: &SnapshotHeader| upto.is_none_or(|p| p.at_or_before(h.seq, h.record_unix_ms));
    let (loaded, skipped) = match &how.from {
        Start::Newest => {
            let s = snapshot::choose(data_dir, &wal_dir, fits, &mut snapshot_progress)?;
            (s.loaded, s.skipped)
        }
        Start::Oldest => oldest(data_dir, &wal_dir, &mut snapshot_progress)?,
        Start::File(p) => (
            Some(snapshot::read_file(p, &mut snapshot_progress).map_err(|d| d.to_string())?),
            Vec::new(),
        ),
        Start::Empty => (None, Vec::new()),
    };
    let snapshot = loaded.as_ref().map(|l| {
        let bytes = std::fs::metadata(
            snapshot::snapshot_dir(data_dir)
                .join(snapshot::format::snapshot_file_name(l.header.seq)),
        )
        .map_or(0, |m| m.len());
        (l.header.seq, bytes)
    });
    let mut machine = loaded.map_or_else(Machine::new, Machine::from_snapshot);
    let base = wal::Base {
        seq: machine.at.seq,
        timestamp_unix_ms: machine.at.unix_ms,
    };
    let mut observe = how.observe.take();
    // Bulk mode when nobody looks at the state between records.
    let bulk = observe.is_none();
    if bulk {
        machine.bulk(true);
    }
    let (mut replayed_bytes, mut changes, mut errors) = (0u64, 0u64, 0u64);
    let deadline = how.deadline;
    let mut applied_records = 0u64;
    let mut apply = |path: &Path, offset: u64, f: &wal::format::Frame<'_>| {
        if let Some(d) = deadline {
            applied_records += 1;
            if applied_records.is_multiple_of(DEADLINE_CHECK_RECORDS)
                && std::time::Instant::now() >= d
            {
                return Err(DEADLINE_PASSED.to_string());
            }
        }
        if let Some(p) = progress.as_mut() {
            p(Step::Log(path, offset));
        }
        replayed_bytes += f.encoded_len() as u64;
        let at = Position {
            seq: f.seq,
            unix_ms: f.timestamp_unix_ms,
        };
        let refused = |why: String| {
            format!(
                "record #{}: {why} (no server logs that: a damaged disk or a bad copy). \
                     `tidepool-log repair` cuts the log at this record",
                f.seq
            )
        };
        let applied = match observe.as_mut() {
            Some(o) => {
                let (record, applied) = machine
                    .apply_frame(at, f.kind, f.payload)
                    .map_err(refused)?;
                o(&mut machine, at, &record);
                applied
            }
            None => machine
                .apply_logged(at, f.kind, f.payload)
                .map_err(refused)?,
        };
        errors += applied.errors;
        changes += applied.changes;
        Ok(())
    };
    let (writer, report, damage) = match &how.access {
        Access::Write => {
            let (w, r) =
                wal::recover(&wal_dir, crate::config::SEGMENT_BYTES_MAX, base, &mut apply)?;
            (Some(w), r, None)
        }
        Access::ReadOnlyServer(why) => {
            let point = upto.unwrap_or(Point::Seq(u64::MAX));
            let (w, r) = wal::replay_to(&wal_dir, point, base, why.clone(), &mut apply)?;
            (Some(w), r, None)
        }
        Access::Read(mode) => {
            let mut records = 0u64;
            let summary = reader::scan_from(&wal_dir, *mode, base.seq + 1, |path, offset, f| {
                if upto.is_some_and(|p| !p.at_or_before(f.seq, f.timestamp_unix_ms)) {
                    return Ok(());
                }
                records += 1;
                apply(path, offset, f)
            })
            .map_err(|e| e.to_string())?;
            let report = wal::RecoveryReport {
                records,
                segments: summary.segments,
                last_seq: summary.last_seq.unwrap_or(0),
                cut_tail: None,
                snapshot: None,
            };
            (None, report, summary.damage)
        }
    };
    if bulk {
        machine.bulk(false);
    }
    // Replay's decoding buffers are not the live server's to keep.
    machine.scratch = KvScratch::default();
    let mut report = report;
    report.snapshot = snapshot.map(|(seq, _)| seq);
    Ok(Recovered {
        machine,
        writer,
        report,
        snapshot,
        skipped,
        replayed_bytes,
        changes,
        errors,
        damage,
        removed_tmp,
    })
}

type Chosen = (Option<snapshot::Loaded>, Vec<snapshot::Damage>);

/// The oldest starting point: the log's beginning, or when the log was compacted, the oldest
/// snapshot the kept log follows that reads whole.
fn oldest(
    data_dir: &Path,
    wal_dir: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<Chosen, String> {
    let first = reader::list_segments(wal_dir)
        .map_err(|e| format!("cannot list {}: {e}", wal_dir.display()))?
        .first()
        .map(|s| s.first_seq)
        .filter(|&f| f > 1);
    let Some(first) = first else {
        return Ok((None, Vec::new()));
    };
    let dir = snapshot::snapshot_dir(data_dir);
    let snaps = snapshot::list(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut skipped = Vec::new();
    for s in snaps.iter().filter(|s| s.seq + 1 >= first) {
        match snapshot::read_file(&s.path, &mut *progress) {
            Ok(l) => return Ok((Some(l), skipped)),
            Err(d) => skipped.push(d),
        }
    }
    Err(format!(
        "the log begins at record #{first} and no snapshot it follows can be read: the state \
         before it cannot be rebuilt"
    ))
}
