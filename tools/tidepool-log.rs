//! `tidepool-log`: inspect and repair a tidepool log. It reads with the server's own `wal`
//! module, never a copy of the format.
//!
//! Exit codes: 0 fine, 1 damage found (verify) or repair declined, 2 usage or I/O error.
//! A closed pipe (`tidepool-log dump DIR | head`) ends the program quietly.

use base64::Engine;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use tidepool::machine::{self, Machine, Recover, Step};
use tidepool::point::{rfc3339, Point};
use tidepool::record::Record;
// The keys a logged command names, found as the server's own ACL checks find them.
use tidepool::travel::{keys_of, touches_every_key};
use tidepool::wal::reader::{self, Action, Damage};

/// What DIR and P are, under every command's help.
const AFTER_HELP: &str = "DIR is a data directory (its wal/ and snapshots/ are used) or a wal directory itself. Records
that a snapshot made unnecessary may have been removed (--log-retention): dump, stats and
history then begin at the first record kept, and say so. Every command but verify
and repair also reads the directory of a running server (with ordinary reads, never a map). A point P is a sequence
number, or a time: RFC 3339 (2026-11-24T14:05:00Z) or Unix milliseconds (any number from
100000000000 on is read as a time).";

#[derive(clap::Parser, Debug)]
#[command(
    name = "tidepool-log",
    about = "Inspect, verify, repair and replay a tidepool log and its snapshots.",
    after_help = AFTER_HELP,
    disable_version_flag = true
)]
struct Cli {
    /// Print the version, and the log and snapshot formats it reads
    #[arg(short = 'V', long = "version")]
    version: bool,
    #[command(subcommand)]
    command: Option<LogCmd>,
}

#[derive(clap::Subcommand, Debug)]
enum LogCmd {
    /// Check every segment, record and snapshot; exit 1 and name file and offset on damage
    #[command(after_help = AFTER_HELP)]
    Verify { dir: String },
    /// Print the records (one JSON object per line with --json)
    #[command(after_help = AFTER_HELP)]
    Dump {
        /// One JSON object per record
        #[arg(long)]
        json: bool,
        /// The first record shown (inclusive)
        #[arg(long, value_name = "P")]
        from: Option<String>,
        /// The last record shown (inclusive)
        #[arg(long, value_name = "P")]
        to: Option<String>,
        /// Only records with a command on a key matching this glob (as KEYS takes)
        #[arg(long, value_name = "PATTERN")]
        key: Option<String>,
        /// Only records of this kind
        #[arg(long, value_name = "KIND", value_parser = ["kv-commands", "kv-commands-in", "databases", "delivery-events"])]
        kind: Option<String>,
        dir: String,
    },
    /// Counts of records, segments, bytes, kinds and commands
    #[command(after_help = AFTER_HELP)]
    Stats { dir: String },
    /// Every record that changed KEY: sequence, time, the command as logged
    #[command(after_help = AFTER_HELP)]
    History {
        /// The first record shown (inclusive)
        #[arg(long, value_name = "P")]
        from: Option<String>,
        /// The last record shown (inclusive)
        #[arg(long, value_name = "P")]
        to: Option<String>,
        /// Add the value after each change
        #[arg(long)]
        values: bool,
        dir: String,
        key: String,
    },
    /// Write a new data directory holding the state as of P: `tidepool serve --data NEWDIR`
    #[command(after_help = AFTER_HELP)]
    Replay {
        /// The point: the last record at or before it
        #[arg(long, value_name = "P")]
        to: String,
        /// The new data directory (absent or empty)
        #[arg(long, value_name = "NEWDIR")]
        out: PathBuf,
        dir: String,
    },
    /// The newest segment's last 10 records; then each new one with --follow
    #[command(after_help = AFTER_HELP)]
    Tail {
        /// Print each new record as it is written, until interrupted
        #[arg(short = 'f', long)]
        follow: bool,
        dir: String,
    },
    /// Write a snapshot of the state at the log's end (a stopped server's directory)
    #[command(after_help = AFTER_HELP)]
    Snapshot {
        /// What is kept behind it: 0, a duration such as 7d, or a size such as 10GiB
        #[arg(long, value_name = "R", default_value = tidepool::config::LOG_RETENTION_DEFAULT)]
        log_retention: String,
        dir: String,
    },
    /// Cut the log at the first damage, after confirmation; set aside or rebuild a damaged snapshot
    #[command(after_help = AFTER_HELP)]
    Repair {
        /// Do not ask
        #[arg(long)]
        yes: bool,
        dir: String,
    },
}

enum Failure {
    /// Damage or a declined repair: exit 1, message already printed.
    Found,
    Usage(String),
    Io(String),
}

fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(Failure::Found) => 1,
        Err(Failure::Usage(m)) => {
            eprintln!("tidepool-log: {m}\n\nFor more information, try '--help'.");
            2
        }
        Err(Failure::Io(m)) => {
            eprintln!("tidepool-log: {m}");
            2
        }
    };
    std::process::exit(code);
}

/// The records between two optional points, both ends included.
struct Window {
    from: Option<Point>,
    to: Option<Point>,
}

/// A point flag's value.
fn point(flag: &str, v: Option<&str>) -> Result<Option<Point>, Failure> {
    v.map(|v| Point::parse(v).map_err(|e| Failure::Usage(format!("{flag} {e}"))))
        .transpose()
}

impl Window {
    fn of(from: Option<&str>, to: Option<&str>) -> Result<Window, Failure> {
        Ok(Window {
            from: point("--from", from)?,
            to: point("--to", to)?,
        })
    }
    fn holds(&self, seq: u64, ts: u64) -> bool {
        self.from.is_none_or(|p| p.at_or_after(seq, ts))
            && self.to.is_none_or(|p| p.at_or_before(seq, ts))
    }
}

fn run() -> Result<(), Failure> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if cli.version {
        println!(
            "tidepool-log {} (reads log format {}, snapshot format {})",
            env!("CARGO_PKG_VERSION"),
            tidepool::wal::format::FORMAT_VERSION,
            tidepool::snapshot::format::SNAPSHOT_VERSION
        );
        return Ok(());
    }
    let Some(cmd) = cli.command else {
        let _ = Cli::command().print_help();
        return Err(Failure::Usage("missing command".into()));
    };
    let (name, dir) = match &cmd {
        LogCmd::Verify { dir } => ("verify", dir),
        LogCmd::Dump { dir, .. } => ("dump", dir),
        LogCmd::Stats { dir } => ("stats", dir),
        LogCmd::History { dir, .. } => ("history", dir),
        LogCmd::Replay { dir, .. } => ("replay", dir),
        LogCmd::Tail { dir, .. } => ("tail", dir),
        LogCmd::Snapshot { dir, .. } => ("snapshot", dir),
        LogCmd::Repair { dir, .. } => ("repair", dir),
    };
    let dir = dir.clone();
    let wal = wal_dir(Path::new(&dir));
    if !wal.is_dir() {
        return Err(Failure::Io(format!("{} is not a directory", wal.display())));
    }
    if let LogCmd::Tail { follow, .. } = cmd {
        // Reads with pread, never through a map, so a running server may write meanwhile.
        return tail(&wal, follow);
    }
    match name {
        "verify" | "repair" | "snapshot" => refuse_if_live(Path::new(&dir))?,
        _ => LIVE.store(
            is_live(Path::new(&dir)),
            std::sync::atomic::Ordering::Relaxed,
        ),
    }
    {
        use std::io::IsTerminal;
        let summary = matches!(name, "verify" | "stats" | "replay" | "snapshot");
        let show = io::stderr().is_terminal() && (summary || !io::stdout().is_terminal());
        PROGRESS.store(show, std::sync::atomic::Ordering::Relaxed);
    }
    let data_dir = data_dir_of(Path::new(&dir));
    match cmd {
        LogCmd::Verify { .. } => {
            let log = verify(&wal);
            let snaps = verify_snapshots(&data_dir, &wal);
            log.and(snaps)
        }
        LogCmd::Snapshot { log_retention, .. } => {
            let retention = tidepool::config::Retention::parse(&log_retention)
                .map_err(|e| Failure::Usage(format!("--log-retention {e}")))?;
            take_snapshot(&data_dir, &wal, retention)
        }
        LogCmd::Dump {
            json,
            from,
            to,
            key,
            kind,
            ..
        } => {
            let filter = DumpFilter {
                window: Window::of(from.as_deref(), to.as_deref())?,
                key: key.map(String::into_bytes),
                kind: kind.as_deref(),
            };
            note_compacted(&wal);
            dump(&wal, json, &filter)
        }
        LogCmd::Stats { .. } => {
            note_compacted(&wal);
            stats(&wal)
        }
        LogCmd::History {
            from,
            to,
            values,
            key,
            ..
        } => history(
            &data_dir,
            &wal,
            key.as_bytes(),
            &Window::of(from.as_deref(), to.as_deref())?,
            values,
        ),
        LogCmd::Replay { to, out, .. } => {
            let to = point("--to", Some(&to))?
                .ok_or_else(|| Failure::Usage("replay needs --to SEQ|TIME".into()))?;
            replay(Path::new(&dir), &wal, to, &out)
        }
        LogCmd::Repair { yes, .. } => {
            repair(&wal, yes)?;
            repair_snapshots(&data_dir, &wal, yes)
        }
        LogCmd::Tail { .. } => Ok(()),
    }
}

/// The data directory of DIR (DIR itself, or the parent of a wal directory).
fn data_dir_of(dir: &Path) -> PathBuf {
    if dir.join("wal").is_dir() {
        dir.to_path_buf()
    } else {
        dir.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

/// The first record the log still holds, when earlier ones were compacted away.
fn compacted_before(wal: &Path) -> Option<u64> {
    reader::list_segments(wal)
        .ok()?
        .first()
        .map(|s| s.first_seq)
        .filter(|&f| f > 1)
}

fn note_compacted(wal: &Path) {
    if let Some(f) = compacted_before(wal) {
        eprintln!(
            "note: the records before #{f} were removed behind a snapshot (--log-retention); the log begins there"
        );
    }
}

fn confirm(yes: bool) -> Result<bool, Failure> {
    if yes {
        return Ok(true);
    }
    let mut answer = String::new();
    io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::Io(e.to_string()))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Reads every snapshot whole, and checks that start-up has a starting point.
fn verify_snapshots(data_dir: &Path, wal: &Path) -> Result<(), Failure> {
    let snaps = tidepool::snapshot::list(&tidepool::snapshot::snapshot_dir(data_dir))
        .map_err(|e| Failure::Io(e.to_string()))?;
    let mut damaged = false;
    for s in &snaps {
        match tidepool::snapshot::read_file(&s.path, |_| {}) {
            Ok(l) => out(&format!(
                "ok: snapshot {} at record #{} ({}), {} keys",
                s.path.display(),
                l.header.seq,
                rfc3339(l.header.record_unix_ms),
                l.keys
            )),
            Err(d) => {
                damaged = true;
                out(&format!("DAMAGE: snapshot {d}"));
            }
        }
    }
    match tidepool::snapshot::choose(data_dir, wal, |_| true, |_| {}) {
        Ok(start) => {
            if let Some(l) = start.loaded {
                out(&format!(
                    "start-up would load the snapshot at record #{} and replay the log after it",
                    l.header.seq
                ));
            }
        }
        Err(e) => {
            out(&format!("DAMAGE: {e}"));
            damaged = true;
        }
    }
    if damaged {
        Err(Failure::Found)
    } else {
        Ok(())
    }
}

/// The state at the log's end, from the newest snapshot and the log after it.
fn state_at_end(data_dir: &Path, wal: &Path) -> Result<Machine, Failure> {
    let progress = Progress::over(wal, "replaying the log");
    let mut step = |s: Step<'_>| {
        if let Step::Log(path, offset) = s {
            progress.at(path, offset)
        }
    };
    let r = machine::recover(
        data_dir,
        Recover {
            access: machine::Access::Read(read_mode()),
            progress: Some(&mut step),
            ..Recover::read(machine::Start::Newest)
        },
    )
    .map_err(Failure::Io)?;
    let _ = wal;
    for d in &r.skipped {
        eprintln!("warning: the snapshot {d} is damaged; using an older point");
    }
    if let Some(d) = settled_damage(r.damage) {
        eprintln!("DAMAGE: {}", describe(&d));
        return Err(Failure::Found);
    }
    Ok(r.machine)
}

/// `snapshot`: the state at the log's end, written as the server writes it; the log then
/// starts a new segment, and what the retention does not keep goes.
fn take_snapshot(
    data_dir: &Path,
    wal: &Path,
    retention: tidepool::config::Retention,
) -> Result<(), Failure> {
    let machine = state_at_end(data_dir, wal)?;
    let machine::Position { seq, unix_ms: ts } = machine.position();
    let io = |e: io::Error| Failure::Io(e.to_string());
    // A new segment at the next record, so that every record so far is in closed segments.
    let segments = reader::list_segments(wal).map_err(io)?;
    if segments.last().is_none_or(|s| s.first_seq <= seq) {
        let scan = reader::scan(wal, |_, _, _| Ok(())).map_err(|e| Failure::Io(e.to_string()))?;
        let newest = segments.last().map(|s| (s.path.as_path(), scan.end_offset));
        let mut w = tidepool::wal::WalWriter::open(
            wal,
            newest,
            seq + 1,
            ts,
            tidepool::config::SEGMENT_BYTES_MAX,
        )
        .map_err(io)?;
        w.roll().map_err(io)?;
    }
    let bar = PROGRESS
        .load(std::sync::atomic::Ordering::Relaxed)
        .then(|| {
            indicatif::ProgressBar::new(machine.dbs().iter().map(|(_, d)| d.len() as u64).sum())
                .with_style(
                    indicatif::ProgressStyle::with_template(
                        "writing the snapshot [{bar:40}] {pos}/{len} keys",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                )
        });
    let written = machine
        .write_snapshot_file(data_dir, tidepool::clock::wall_unix_ms(), |n| {
            if let Some(b) = &bar {
                b.set_position(n);
            }
        })
        .map_err(io)?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let c = tidepool::snapshot::compact(
        data_dir,
        wal,
        seq,
        retention,
        tidepool::clock::wall_unix_ms(),
    )
    .map_err(io)?;
    out(&format!(
        "wrote the snapshot at record #{seq}: {} keys, {} bytes; removed {} log segments ({} bytes) and {} older snapshots",
        written.keys, written.bytes, c.segments, c.bytes, c.snapshots
    ));
    Ok(())
}

/// `repair` for snapshots: a damaged one is set aside when start-up can do without it, and
/// otherwise rebuilt from its intact chunks.
fn repair_snapshots(data_dir: &Path, wal: &Path, yes: bool) -> Result<(), Failure> {
    let dir = tidepool::snapshot::snapshot_dir(data_dir);
    let snaps = tidepool::snapshot::list(&dir).map_err(|e| Failure::Io(e.to_string()))?;
    for s in snaps.iter().rev() {
        let data =
            fs::read(&s.path).map_err(|e| Failure::Io(format!("{}: {e}", s.path.display())))?;
        let Err(d) = tidepool::snapshot::read(&s.path, &data, |_| {}) else {
            continue;
        };
        out(&format!("DAMAGE: snapshot {d}"));
        let aside = s.path.with_extension("snap.damaged");
        let without = tidepool::snapshot::choose(data_dir, wal, |h| h.seq < s.seq, |_| {});
        let salvage = match without {
            Ok(_) => {
                out(&format!(
                    "An older snapshot and the log can take its place: it will be renamed {} and nothing is lost. Continue? [y/N]",
                    aside.display()
                ));
                None
            }
            Err(_) => {
                let (loaded, lost) = tidepool::snapshot::salvage(&s.path, &data).map_err(|d| {
                    Failure::Io(format!(
                        "{d}: nothing can be rebuilt without its header; restore the directory from a backup"
                    ))
                })?;
                for l in &lost {
                    out(&format!("  lost: {l}"));
                }
                out(&format!(
                    "No other starting point is left. It will be rebuilt from its intact parts ({} keys; the keys of the damaged parts above are lost) and the damaged file renamed {}. Continue? [y/N]",
                    loaded.keys,
                    aside.display()
                ));
                Some(loaded)
            }
        };
        if !confirm(yes)? {
            out("not repaired");
            return Err(Failure::Found);
        }
        fs::rename(&s.path, &aside).map_err(|e| Failure::Io(e.to_string()))?;
        if let Some(l) = salvage {
            tidepool::snapshot::write_file(data_dir, &l.dbs, &l.delivery, l.header, |_| {})
                .map_err(|e| Failure::Io(e.to_string()))?;
        }
        tidepool::wal::writer::sync_dir(&dir).map_err(|e| Failure::Io(e.to_string()))?;
        out("repaired: run `tidepool-log verify` to check, then start the server");
        return Ok(());
    }
    Ok(())
}

fn wal_dir(dir: &Path) -> PathBuf {
    let sub = dir.join("wal");
    if sub.is_dir() {
        sub
    } else {
        dir.to_path_buf()
    }
}

/// Writes a line; a closed pipe ends the program quietly.
fn out(line: &str) {
    let mut o = io::stdout().lock();
    if writeln!(o, "{line}").is_err() {
        std::process::exit(0);
    }
}

fn describe(d: &Damage) -> String {
    let what = match d.action {
        Action::CutTail => "a torn tail: the server cuts it at start-up (or run `tidepool-log repair`)",
        Action::Refuse => "corruption: the server refuses to start; `tidepool-log repair` cuts the log here, dropping every later record",
    };
    format!("{d} ({} bytes in the file)\n  this is {what}", d.file_len)
}

/// A progress bar over the bytes of the log, on stderr, for the long walks (verify, stats,
/// history, replay): shown only on a terminal, and only when what the command prints does not
/// go to that terminal too; quiet when piped.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    /// Each segment's first byte within the whole log.
    starts: BTreeMap<PathBuf, u64>,
}

/// Whether the command's own output leaves the terminal free for a bar (set once in `run`).
static PROGRESS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Progress {
    fn over(wal: &Path, what: &str) -> Progress {
        let mut starts = BTreeMap::new();
        let mut total = 0u64;
        for seg in reader::list_segments(wal).unwrap_or_default() {
            starts.insert(seg.path.clone(), total);
            total += fs::metadata(&seg.path).map(|m| m.len()).unwrap_or(0);
        }
        let bar = PROGRESS
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| {
                let style = indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> ");
                indicatif::ProgressBar::new(total)
                    .with_style(style)
                    .with_message(what.to_string())
            });
        Progress { bar, starts }
    }
    fn at(&self, path: &Path, offset: u64) {
        if let Some(b) = &self.bar {
            b.set_position(self.starts.get(path).copied().unwrap_or(0) + offset);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn scan_decoding<F>(wal: &Path, mut each: F) -> Result<reader::ScanSummary, Failure>
where
    F: FnMut(&Path, u64, u64, u64, u8, Record),
{
    let progress = Progress::over(wal, "reading the log");
    reader::scan_with(wal, read_mode(), |path, offset, frame| {
        progress.at(path, offset);
        let record = Record::decode(frame.kind, frame.payload).map_err(|e| e.to_string())?;
        tidepool::machine::check_record(&record)
            .map_err(|why| format!("record #{}: {why}", frame.seq))?;
        each(
            path,
            offset,
            frame.seq,
            frame.timestamp_unix_ms,
            frame.kind,
            record,
        );
        Ok(())
    })
    .map(settled)
    .map_err(|e| match e {
        reader::ScanError::Io { .. } => Failure::Io(e.to_string()),
        reader::ScanError::Callback { .. } => {
            eprintln!("DAMAGE: {e}\n  this is corruption: the server refuses to start");
            Failure::Found
        }
    })
}

fn verify(wal: &Path) -> Result<(), Failure> {
    let s = scan_decoding(wal, |_, _, _, _, _, _| {})?;
    match &s.damage {
        None => {
            out(&format!(
                "ok: {} records in {} segments ({} bytes), sequence {}..{}",
                s.records,
                s.segments,
                s.bytes,
                s.first_seq.unwrap_or(0),
                s.last_seq.unwrap_or(0)
            ));
            Ok(())
        }
        Some(d) => {
            out(&format!("DAMAGE: {}", describe(d)));
            out(&format!("{} good records before it", s.records));
            Err(Failure::Found)
        }
    }
}

fn quoted(arg: &[u8]) -> String {
    let mut v = Vec::new();
    tidepool::executor::pubsub::repr(&mut v, arg);
    String::from_utf8_lossy(&v).into_owned()
}

fn json_arg(arg: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(arg) {
        Ok(s) => serde_json::Value::String(s.to_string()),
        Err(_) => {
            serde_json::json!({ "base64": base64::engine::general_purpose::STANDARD.encode(arg) })
        }
    }
}

/// What `dump` keeps.
struct DumpFilter<'a> {
    window: Window,
    /// A glob over the keys a record's commands name.
    key: Option<Vec<u8>>,
    kind: Option<&'a str>,
}

impl DumpFilter<'_> {
    fn keeps(&self, seq: u64, ts: u64, kind: u8, record: &Record) -> bool {
        if !self.window.holds(seq, ts) {
            return false;
        }
        if self.kind.is_some_and(|k| k != Record::kind_name(kind)) {
            return false;
        }
        let Some(pattern) = &self.key else {
            return true;
        };
        let Some((_, cmds)) = record.kv_commands() else {
            return false;
        };
        cmds.iter()
            .flat_map(|c| keys_of(c))
            .any(|k| tidepool::glob::glob_match(pattern, k, false))
    }
}

fn dump(wal: &Path, json: bool, filter: &DumpFilter) -> Result<(), Failure> {
    let s = scan_decoding(wal, |path, offset, seq, ts, kind, record| {
        if !filter.keeps(seq, ts, kind, &record) {
            return;
        }
        print_record(path, offset, seq, ts, kind, &record, json);
    })?;
    if let Some(d) = &s.damage {
        eprintln!("DAMAGE: {}", describe(d));
        return Err(Failure::Found);
    }
    Ok(())
}

/// One record as `dump` prints it: a header line and its commands or events, or one JSON object.
fn print_record(
    path: &Path,
    offset: u64,
    seq: u64,
    ts: u64,
    kind: u8,
    record: &Record,
    json: bool,
) {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (db, cmds) = record.kv_commands().unwrap_or((0, &[]));
    let events: Vec<String> = match record {
        Record::Delivery(es) => es.iter().map(|e| e.summary()).collect(),
        Record::Databases(es) => es.iter().map(|e| format!("{e:?}")).collect(),
        Record::KvCommands(_) | Record::KvCommandsIn { .. } => Vec::new(),
    };
    if json {
        let cmds: Vec<Vec<serde_json::Value>> = cmds
            .iter()
            .map(|c| c.iter().map(|a| json_arg(a)).collect())
            .collect();
        let v = serde_json::json!({
            "seq": seq, "timestamp_ms": ts, "kind": kind, "kind_name": Record::kind_name(kind),
            "file": file, "offset": offset, "database": db, "commands": cmds, "events": events,
        });
        out(&v.to_string());
    } else {
        let secs = ts / 1000;
        let in_db = match record {
            Record::KvCommandsIn { db, .. } => format!(" db {db}"),
            _ => String::new(),
        };
        out(&format!(
            "#{seq} {}.{:03} {}{in_db} {file}@{offset}",
            secs,
            ts % 1000,
            Record::kind_name(kind)
        ));
        for c in cmds {
            out(&format!(
                "    {}",
                c.iter().map(|a| quoted(a)).collect::<Vec<_>>().join(" ")
            ));
        }
        for e in &events {
            out(&format!("    {e}"));
        }
    }
}

fn stats(wal: &Path) -> Result<(), Failure> {
    let mut kinds: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut commands: BTreeMap<String, u64> = BTreeMap::new();
    let (mut first_ts, mut last_ts) = (None, None);
    let s = scan_decoding(wal, |_, _, _, ts, kind, record| {
        *kinds.entry(Record::kind_name(kind)).or_default() += 1;
        first_ts.get_or_insert(ts);
        last_ts = Some(ts);
        if let Record::Delivery(es) = &record {
            for e in es {
                *commands
                    .entry(format!("delivery:{}", e.name()))
                    .or_default() += 1;
            }
        }
        let cmds = record.kv_commands().map_or(&[][..], |(_, c)| c);
        for c in cmds {
            let name = c
                .first()
                .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
                .unwrap_or_default();
            *commands.entry(name).or_default() += 1;
        }
    })?;
    out(&format!("segments: {}", s.segments));
    out(&format!("bytes: {}", s.bytes));
    out(&format!("records: {}", s.records));
    out(&format!(
        "sequence: {}..{}",
        s.first_seq.unwrap_or(0),
        s.last_seq.unwrap_or(0)
    ));
    out(&format!(
        "time (unix ms): {}..{}",
        first_ts.unwrap_or(0),
        last_ts.unwrap_or(0)
    ));
    for (k, n) in &kinds {
        out(&format!("kind {k}: {n}"));
    }
    for (c, n) in &commands {
        out(&format!("command {c}: {n}"));
    }
    if let Some(d) = &s.damage {
        out(&format!("DAMAGE: {}", describe(d)));
        return Err(Failure::Found);
    }
    Ok(())
}

/// Whether a running server holds the directory (it writes into its newest segment, over
/// preallocated zeros, meanwhile).
fn is_live(dir: &Path) -> bool {
    let data_dir = if dir.join("wal").is_dir() {
        dir.to_path_buf()
    } else {
        dir.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    File::open(data_dir.join("LOCK"))
        .is_ok_and(|f| matches!(f.try_lock_shared(), Err(fs::TryLockError::WouldBlock)))
}

/// Set when the directory is a running server's: the log is then read with ordinary reads (a
/// copy, never a map), and a torn tail of the newest segment is the record being written, not
/// damage.
static LIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn read_mode() -> reader::ReadMode {
    if LIVE.load(std::sync::atomic::Ordering::Relaxed) {
        reader::ReadMode::Copied
    } else {
        reader::ReadMode::Mapped
    }
}

/// Times a live server's newest segment is read again to tell a record being written from
/// damage, and the pause between two reads.
const LIVE_RECHECKS: u32 = 20;
const LIVE_RECHECK_MS: u64 = 10;

/// Whether damage found in a running server's newest segment was a record caught while being
/// written: a read that runs beside the server's `pwrite` can see part of it (a page of the
/// new bytes and not the next), which looks like a bad CRC with a good frame after it. Read
/// again, such a frame is whole; real damage stays.
fn being_written(d: &Damage) -> bool {
    let newest = reader::list_segments(d.path.parent().unwrap_or(Path::new(".")))
        .ok()
        .and_then(|segs| segs.last().map(|s| s.path.clone()));
    if newest.as_deref() != Some(d.path.as_path()) {
        return false;
    }
    for _ in 0..LIVE_RECHECKS {
        std::thread::sleep(std::time::Duration::from_millis(LIVE_RECHECK_MS));
        if let Ok(data) = fs::read(&d.path) {
            if let tidepool::wal::format::FrameRead::Frame(_) =
                tidepool::wal::format::read_frame(&data, d.offset as usize)
            {
                return true;
            }
        }
    }
    false
}

/// A scan's summary, with a live server's torn tail, or a record caught while being written,
/// taken for the end of what was readable then.
fn settled(mut s: reader::ScanSummary) -> reader::ScanSummary {
    s.damage = settled_damage(s.damage);
    s
}

/// Damage a scan stopped at, unless it is a running server's record being written.
fn settled_damage(damage: Option<Damage>) -> Option<Damage> {
    let live = LIVE.load(std::sync::atomic::Ordering::Relaxed);
    damage.filter(|d| !(live && (d.action == Action::CutTail || being_written(d))))
}

/// Judging damage (verify) or cutting it (repair) needs a log that nobody writes.
fn refuse_if_live(dir: &Path) -> Result<(), Failure> {
    let data_dir = if dir.join("wal").is_dir() {
        dir.to_path_buf()
    } else {
        dir.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    if let Ok(f) = OpenOptions::new().write(true).open(data_dir.join("LOCK")) {
        if let Err(fs::TryLockError::WouldBlock) = f.try_lock() {
            return Err(Failure::Io(format!(
                "{} is in use by a running tidepool; stop it first (or inspect a copy of the directory)",
                data_dir.display()
            )));
        }
    }
    Ok(())
}

fn repair(wal: &Path, yes: bool) -> Result<(), Failure> {
    let s = match reader::scan(wal, |_, _, frame| {
        let record = Record::decode(frame.kind, frame.payload).map_err(|e| e.to_string())?;
        tidepool::machine::check_record(&record)
            .map_err(|why| format!("record #{}: {why}", frame.seq))
    }) {
        Ok(s) => s,
        Err(reader::ScanError::Callback {
            path,
            offset,
            message,
        }) => {
            // An undecodable payload: cut at that frame.
            let file_len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            reader::ScanSummary {
                damage: Some(Damage {
                    path,
                    offset,
                    file_len,
                    finding: reader::Finding::Header(format!(
                        "a record no server writes: {message}"
                    )),
                    action: Action::Refuse,
                }),
                ..Default::default()
            }
        }
        Err(e) => return Err(Failure::Io(e.to_string())),
    };
    let Some(d) = s.damage else {
        out("nothing to repair: the log is intact");
        return Ok(());
    };
    let later: Vec<PathBuf> = reader::list_segments(wal)
        .map_err(|e| Failure::Io(e.to_string()))?
        .into_iter()
        .filter(|seg| seg.path > d.path)
        .map(|seg| seg.path)
        .collect();
    let later_bytes: u64 = later
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    out(&format!("DAMAGE: {}", describe(&d)));
    out(&format!(
        "This will cut {} at offset {}, dropping {} bytes, and remove {} later segment(s) ({} bytes). Continue? [y/N]",
        d.path.display(),
        d.offset,
        d.file_len - d.offset,
        later.len(),
        later_bytes
    ));
    if !yes {
        let mut answer = String::new();
        io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| Failure::Io(e.to_string()))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            out("not repaired");
            return Err(Failure::Found);
        }
    }
    for p in &later {
        fs::remove_file(p).map_err(|e| Failure::Io(format!("{}: {e}", p.display())))?;
    }
    tidepool::wal::cut_tail(&d).map_err(|e| Failure::Io(format!("{}: {e}", d.path.display())))?;
    out("repaired: run `tidepool-log verify` to check, then start the server");
    Ok(())
}

/// A reply as one readable line (strings quoted as MONITOR quotes them).
fn reply_text(r: &tidepool::reply::Reply) -> String {
    use tidepool::reply::Reply;
    match r {
        Reply::Status(s) => s.to_string(),
        Reply::Error(e) => format!("(error) {e}"),
        Reply::Bulk(b) => quoted(b),
        Reply::Nil | Reply::NilArray => "(nil)".into(),
        Reply::Int(n) => n.to_string(),
        Reply::Array(items) => format!(
            "[{}]",
            items.iter().map(reply_text).collect::<Vec<_>>().join(", ")
        ),
        Reply::Typed(t) => reply_text(&t.1),
    }
}

/// The value of `key` (default database) at `ts`, by its type, as one line.
fn value_of(m: &mut Machine, key: &[u8], ts: u64) -> String {
    let db = tidepool::state::databases::DEFAULT_DB;
    match tidepool::travel::value_of(m, db, key, ts, None) {
        (ty, _) if ty == "none" => "(no key)".into(),
        (ty, reply) => format!("{ty} {}", reply_text(&reply)),
    }
}

fn history(
    data_dir: &Path,
    wal: &Path,
    key: &[u8],
    window: &Window,
    values: bool,
) -> Result<(), Failure> {
    let compacted = compacted_before(wal);
    // The records of the window that touch `key`, each with the value after it (`--values`).
    let show = |seq: u64, ts: u64, record: &Record, value: Option<&mut dyn FnMut() -> String>| {
        if !window.holds(seq, ts) {
            return;
        }
        // A key's history is the default database's.
        let Record::KvCommands(cmds) = record else {
            return;
        };
        let touching: Vec<&Vec<Vec<u8>>> = cmds
            .iter()
            .filter(|c| touches_every_key(c) || keys_of(c).contains(&key))
            .collect();
        if touching.is_empty() {
            return;
        }
        out(&format!("#{seq} {}", rfc3339(ts)));
        for c in touching {
            out(&format!(
                "    {}",
                c.iter().map(|a| quoted(a)).collect::<Vec<_>>().join(" ")
            ));
        }
        if let Some(v) = value {
            out(&format!("    = {}", v()));
        }
    };
    let note = |from: u64| {
        eprintln!(
            "note: the records before #{from} were removed behind a snapshot (--log-retention); history begins there"
        )
    };
    if !values {
        if let Some(f) = compacted {
            note(f);
        }
        let s = scan_decoding(wal, |_, _, seq, ts, _, record| show(seq, ts, &record, None))?;
        if let Some(d) = &s.damage {
            eprintln!("DAMAGE: {}", describe(d));
            return Err(Failure::Found);
        }
        return Ok(());
    }
    // Values need the state: from the oldest point the directory can rebuild, every record
    // applied through the state machine, the value read after each one shown.
    let progress = Progress::over(wal, "reading the log");
    let mut step = |s: Step<'_>| {
        if let Step::Log(path, offset) = s {
            progress.at(path, offset)
        }
    };
    let mut noted = compacted.is_none();
    let mut observe = |m: &mut Machine, at: machine::Position, record: &Record| {
        if !noted {
            noted = true;
            note(at.seq);
        }
        show(
            at.seq,
            at.unix_ms,
            record,
            Some(&mut || value_of(m, key, at.unix_ms)),
        );
    };
    let r = machine::recover(
        data_dir,
        Recover {
            access: machine::Access::Read(read_mode()),
            progress: Some(&mut step),
            observe: Some(&mut observe),
            ..Recover::read(machine::Start::Oldest)
        },
    )
    .map_err(Failure::Io)?;
    for d in &r.skipped {
        eprintln!("warning: the snapshot {d} is damaged; trying a newer one");
    }
    if let Some(d) = settled_damage(r.damage) {
        eprintln!("DAMAGE: {}", describe(&d));
        return Err(Failure::Found);
    }
    Ok(())
}

/// Copies the log up to the last record at or before `to` (and the credentials) into a new
/// data directory: the server opens it at that state. Nothing is written into `dir`.
fn replay(dir: &Path, wal: &Path, to: Point, out_dir: &Path) -> Result<(), Failure> {
    let io = |what: &Path, e: io::Error| Failure::Io(format!("{}: {e}", what.display()));
    if out_dir.exists()
        && fs::read_dir(out_dir)
            .map_err(|e| io(out_dir, e))?
            .next()
            .is_some()
    {
        return Err(Failure::Io(format!(
            "{} is not empty: replay writes a new data directory",
            out_dir.display()
        )));
    }
    // The newest snapshot at or before `to` that the log follows, then the last record at or
    // before `to`: its segment, where it ends, its sequence and time.
    let data_dir = data_dir_of(dir);
    let start = tidepool::snapshot::choose(
        &data_dir,
        wal,
        |h| to.at_or_before(h.seq, h.record_unix_ms),
        |_| {},
    )
    .map_err(Failure::Io)?;
    for d in &start.skipped {
        eprintln!("warning: the snapshot {d} is damaged; using an older point");
    }
    let base = start
        .loaded
        .as_ref()
        .map(|l| (l.header.seq, l.header.record_unix_ms));
    let from = base.map_or(0, |b| b.0) + 1;
    let mut last: Option<(PathBuf, u64, u64, u64)> = None;
    let mut records = 0u64;
    let progress = Progress::over(wal, "finding the point");
    let s = reader::scan_from(wal, read_mode(), from, |path, offset, frame| {
        progress.at(path, offset);
        if to.at_or_before(frame.seq, frame.timestamp_unix_ms) {
            let end = offset + frame.encoded_len() as u64;
            last = Some((path.to_path_buf(), end, frame.seq, frame.timestamp_unix_ms));
            records += 1;
        }
        Ok(())
    })
    .map(settled)
    .map_err(|e| Failure::Io(e.to_string()))?;
    if let Some(d) = &s.damage {
        if d.action == Action::Refuse {
            eprintln!("DAMAGE: {}", describe(d));
            return Err(Failure::Found);
        }
    }
    let (seq, ts) = match (&last, base) {
        (Some((_, _, seq, ts)), _) => (*seq, *ts),
        (None, Some(b)) => b,
        (None, None) => {
            return Err(Failure::Io(format!(
                "no record at or before {to}: the log begins later"
            )))
        }
    };
    let new_wal = out_dir.join("wal");
    fs::create_dir_all(&new_wal).map_err(|e| io(&new_wal, e))?;
    let creds = dir.join("credentials.json");
    if creds.is_file() {
        let to = out_dir.join("credentials.json");
        fs::copy(&creds, &to).map_err(|e| io(&to, e))?;
    }
    if let Some(l) = &start.loaded {
        let name = tidepool::snapshot::format::snapshot_file_name(l.header.seq);
        let new_snaps = tidepool::snapshot::snapshot_dir(out_dir);
        fs::create_dir_all(&new_snaps).map_err(|e| io(&new_snaps, e))?;
        let copy = new_snaps.join(&name);
        fs::copy(
            tidepool::snapshot::snapshot_dir(&data_dir).join(&name),
            &copy,
        )
        .map_err(|e| io(&copy, e))?;
        File::open(&copy)
            .and_then(|f| f.sync_all())
            .map_err(|e| io(&copy, e))?;
        tidepool::wal::writer::sync_dir(&new_snaps).map_err(|e| io(&new_snaps, e))?;
    }
    let segments = reader::list_segments(wal).map_err(|e| io(wal, e))?;
    // The segments that hold records after the snapshot, up to the one with the point.
    let wanted = |i: usize| segments.get(i + 1).is_none_or(|next| next.first_seq > from);
    for (i, seg) in segments.iter().enumerate() {
        let Some((last_path, end, _, _)) = &last else {
            break;
        };
        if !wanted(i) || seg.path > *last_path {
            continue;
        }
        let name = seg.path.file_name().unwrap_or_default();
        let copy = new_wal.join(name);
        fs::copy(&seg.path, &copy).map_err(|e| io(&copy, e))?;
        let f = OpenOptions::new()
            .write(true)
            .open(&copy)
            .map_err(|e| io(&copy, e))?;
        if seg.path == *last_path {
            f.set_len(*end).map_err(|e| io(&copy, e))?;
        }
        f.sync_all().map_err(|e| io(&copy, e))?;
    }
    tidepool::wal::writer::sync_dir(&new_wal).map_err(|e| io(&new_wal, e))?;
    tidepool::wal::writer::sync_dir(out_dir).map_err(|e| io(out_dir, e))?;
    out(&format!(
        "wrote {}: the state as of record #{seq} ({}), {}{records} records; open it with `tidepool serve --data {}`",
        out_dir.display(),
        rfc3339(ts),
        match base {
            Some((b, _)) => format!("the snapshot at record #{b} and "),
            None => String::new(),
        },
        out_dir.display()
    ));
    Ok(())
}

/// How often `tail --follow` looks for new records.
const TAIL_POLL_MS: u64 = 100;
/// Bytes `tail` reads at once.
const TAIL_READ_BYTES: usize = 4 << 20;

/// A record `tail` holds back: offset, sequence, time, kind, payload.
type Kept = (u64, u64, u64, u8, Record);

/// Records `tail` shows before it follows.
const TAIL_RECORDS: usize = 10;

/// Prints the newest segment's last records, then (with `follow`, until interrupted) each new
/// one. It reads with `pread` from where it got to: a frame still being written (a partial
/// one, or the zeros ahead of the writer) is waited for, and a new segment is moved to once
/// the current one holds nothing more.
fn tail(wal: &Path, follow: bool) -> Result<(), Failure> {
    use std::os::unix::fs::FileExt;
    use tidepool::wal::format::{self, FrameRead, SEGMENT_HEADER_BYTES};
    let newer = |than: &Path| -> Result<Option<PathBuf>, Failure> {
        let segs = reader::list_segments(wal).map_err(|e| Failure::Io(e.to_string()))?;
        Ok(segs
            .into_iter()
            .map(|s| s.path)
            .find(|p| p.as_path() > than))
    };
    let last_segment = || -> Result<Option<PathBuf>, Failure> {
        let segs = reader::list_segments(wal).map_err(|e| Failure::Io(e.to_string()))?;
        Ok(segs.into_iter().map(|s| s.path).next_back())
    };
    let Some(mut seg) = last_segment()? else {
        return Err(Failure::Io(format!(
            "{} holds no log segment",
            wal.display()
        )));
    };
    let mut offset = SEGMENT_HEADER_BYTES as u64;
    // The first pass keeps the last few records; later ones print as they come.
    let mut first: Option<std::collections::VecDeque<Kept>> = Some(Default::default());
    let mut buf = vec![0u8; TAIL_READ_BYTES];
    loop {
        let file =
            fs::File::open(&seg).map_err(|e| Failure::Io(format!("{}: {e}", seg.display())))?;
        let n = file
            .read_at(&mut buf, offset)
            .map_err(|e| Failure::Io(format!("{}: {e}", seg.display())))?;
        let data = &buf[..n];
        let mut at = 0usize;
        let mut progressed = false;
        while let FrameRead::Frame(frame) = format::read_frame(data, at) {
            if let Ok(record) = Record::decode(frame.kind, frame.payload) {
                let at_offset = offset + at as u64;
                match first.as_mut() {
                    Some(kept) => {
                        if kept.len() == TAIL_RECORDS {
                            kept.pop_front();
                        }
                        kept.push_back((
                            at_offset,
                            frame.seq,
                            frame.timestamp_unix_ms,
                            frame.kind,
                            record,
                        ));
                    }
                    None => print_record(
                        &seg,
                        at_offset,
                        frame.seq,
                        frame.timestamp_unix_ms,
                        frame.kind,
                        &record,
                        false,
                    ),
                }
            }
            at += frame.encoded_len();
            progressed = true;
        }
        // A record larger than the buffer (a big value): make room for the whole of it, once
        // its declared length says how much (never more than a record may be).
        if let FrameRead::Damaged(format::FrameDamage::Incomplete { needed, .. }) =
            format::read_frame(data, at)
        {
            if at == 0 && n == buf.len() && needed > buf.len() {
                buf.resize(needed, 0);
                continue;
            }
        }
        offset += at as u64;
        if progressed && n == buf.len() {
            // The read was cut short by the buffer: read on at once.
            continue;
        }
        if let Some(kept) = first.take() {
            for (o, seq, ts, kind, record) in kept {
                print_record(&seg, o, seq, ts, kind, &record, false);
            }
        }
        // Nothing more in this segment for now: a newer segment means it is closed.
        if let Some(next) = newer(&seg)? {
            if !progressed {
                seg = next;
                offset = SEGMENT_HEADER_BYTES as u64;
                continue;
            }
        }
        if !follow {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(TAIL_POLL_MS));
    }
}
