//! `tidepool-log`: inspect and repair a tidepool log. It reads with the server's own `wal`
//! module, never a copy of the format.
//!
//! Exit codes: 0 fine, 1 damage found (verify) or repair declined, 2 usage or I/O error.
//! A closed pipe (`tidepool-log dump DIR | head`) ends the program quietly.

use base64::Engine;
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use tidepool::record::Record;
use tidepool::wal::reader::{self, Action, Damage};

const USAGE: &str = "usage: tidepool-log <command> DIR
  verify DIR          check every segment and record; exit 1 and name file and offset on damage
  dump [--json] DIR   print every record (--json: one JSON object per line)
  stats DIR           counts of records, segments, bytes, kinds and commands
  repair [--yes] DIR  cut the log at the first damage, after confirmation
DIR is a data directory (its wal/ is used) or a wal directory itself.";

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
            eprintln!("tidepool-log: {m}\n{USAGE}");
            2
        }
        Err(Failure::Io(m)) => {
            eprintln!("tidepool-log: {m}");
            2
        }
    };
    std::process::exit(code);
}

fn run() -> Result<(), Failure> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = args
        .first()
        .ok_or_else(|| Failure::Usage("missing command".into()))?;
    if cmd == "-h" || cmd == "--help" {
        println!("{USAGE}");
        return Ok(());
    }
    let flags: Vec<&str> = args[1..]
        .iter()
        .filter(|a| a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let dirs: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with("--")).collect();
    let [dir] = dirs.as_slice() else {
        return Err(Failure::Usage("expected exactly one DIR".into()));
    };
    let wal = wal_dir(Path::new(dir));
    if !wal.is_dir() {
        return Err(Failure::Io(format!("{} is not a directory", wal.display())));
    }
    refuse_if_live(Path::new(dir))?;
    let known = |allowed: &[&str]| {
        flags
            .iter()
            .find(|f| !allowed.contains(f))
            .map_or(Ok(()), |f| Err(Failure::Usage(format!("unknown flag {f}"))))
    };
    match cmd.as_str() {
        "verify" => {
            known(&[])?;
            verify(&wal)
        }
        "dump" => {
            known(&["--json"])?;
            dump(&wal, flags.contains(&"--json"))
        }
        "stats" => {
            known(&[])?;
            stats(&wal)
        }
        "repair" => {
            known(&["--yes"])?;
            repair(&wal, flags.contains(&"--yes"))
        }
        other => Err(Failure::Usage(format!("unknown command '{other}'"))),
    }
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

fn scan_decoding<F>(wal: &Path, mut each: F) -> Result<reader::ScanSummary, Failure>
where
    F: FnMut(&Path, u64, u64, u64, u8, Record),
{
    reader::scan(wal, |path, offset, frame| {
        let record = Record::decode(frame.kind, frame.payload).map_err(|e| e.to_string())?;
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

fn dump(wal: &Path, json: bool) -> Result<(), Failure> {
    let s = scan_decoding(wal, |path, offset, seq, ts, kind, record| {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cmds: &[Vec<Vec<u8>>] = match &record {
            Record::KvCommands(c) => c,
            Record::Delivery(_) => &[],
        };
        let events: Vec<String> = match &record {
            Record::Delivery(es) => es.iter().map(|e| e.summary()).collect(),
            Record::KvCommands(_) => Vec::new(),
        };
        if json {
            let cmds: Vec<Vec<serde_json::Value>> = cmds
                .iter()
                .map(|c| c.iter().map(|a| json_arg(a)).collect())
                .collect();
            let v = serde_json::json!({
                "seq": seq, "timestamp_ms": ts, "kind": kind, "kind_name": Record::kind_name(kind),
                "file": file, "offset": offset, "commands": cmds, "events": events,
            });
            out(&v.to_string());
        } else {
            let secs = ts / 1000;
            out(&format!(
                "#{seq} {}.{:03} {} {file}@{offset}",
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
    })?;
    if let Some(d) = &s.damage {
        eprintln!("DAMAGE: {}", describe(d));
        return Err(Failure::Found);
    }
    Ok(())
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
        let cmds: &[Vec<Vec<u8>>] = match &record {
            Record::KvCommands(c) => c,
            Record::Delivery(_) => &[],
        };
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

/// A running server writes into its newest segment (over preallocated zeros), so reading it
/// through a memory map, let alone cutting it, is only safe when no server holds the lock.
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
        Record::decode(frame.kind, frame.payload)
            .map(|_| ())
            .map_err(|e| e.to_string())
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
                    finding: reader::Finding::Header(format!("payload does not decode: {message}")),
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
