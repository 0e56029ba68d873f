//! Snapshots: the whole state at one log position, so that start-up reads the newest snapshot
//! and replays only the records after it, and the segments before it can go.
//!
//! - `format`: the file's bytes (header, checksummed chunks, the integer encodings).
//! - `keys`: keys and values, function libraries, ACL users.
//! - the delivery state is `delivery::image`, as MessagePack.
//! - here: writing and reading a whole file, choosing the snapshot to start from, publishing
//!   a new one (rename, directory sync) and compaction under the retention setting.
//!
//! A snapshot lives in `DIR/snapshots/<seq>.snap`, where `seq` is the last record it includes.
//! It is written to `<seq>.snap.tmp`, synced, renamed and the directory synced; only then are
//! older snapshots and the segments it makes unnecessary deleted. `log-format.md` has the bytes
//! and the recovery table.

pub mod format;
pub mod keys;

use crate::config::{Retention, SNAPSHOT_CHUNK_BYTES, SNAPSHOT_PREFETCH_KEYS_AHEAD};
use crate::delivery::image::DeliveryImage;
use crate::delivery::Delivery;
use crate::state::databases::{CatalogImage, Databases, DbId, DEFAULT_DB};
use crate::state::Db;
use crate::wal::reader::list_segments;
use crate::wal::writer::sync_dir;
use format::*;
use serde::Serialize;
use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What one snapshot held, for INFO and the tools.
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    pub bytes: u64,
    pub keys: u64,
}

/// Frames chunks onto the output and counts them.
struct Chunks<'w, W: Write> {
    out: &'w mut W,
    frame: Vec<u8>,
    chunks: u64,
    bytes: u64,
}

impl<W: Write> Chunks<'_, W> {
    fn emit(&mut self, kind: u8, payload: &[u8]) -> io::Result<()> {
        self.frame.clear();
        encode_chunk(&mut self.frame, kind, payload);
        self.chunks += 1;
        self.bytes += self.frame.len() as u64;
        self.out.write_all(&self.frame)
    }
}

/// Writes the snapshot of `dbs` and `delivery` at `header`'s position to `out`: header; the
/// default database's ACL, functions and keys (about `SNAPSHOT_CHUNK_BYTES` per chunk); the
/// catalog; for every other database a database chunk and its ACL, functions and keys; the
/// delivery state; the end. `progress` hears how many keys are written so far.
pub fn write<W: Write>(
    out: &mut W,
    dbs: &Databases,
    delivery: &Delivery,
    header: SnapshotHeader,
    mut progress: impl FnMut(u64),
) -> io::Result<Written> {
    let h = header.encode();
    out.write_all(&h)?;
    let mut w = Chunks {
        out,
        frame: Vec::with_capacity(SNAPSHOT_CHUNK_BYTES + 1024),
        chunks: 0,
        bytes: h.len() as u64,
    };
    let mut keys_total = 0u64;
    write_db(&mut w, dbs.default_db(), &mut keys_total, &mut progress)?;
    let mut payload = Vec::new();
    dbs.catalog_image()
        .serialize(&mut rmp_serde::Serializer::new(&mut payload).with_struct_map())
        .map_err(io::Error::other)?;
    w.emit(CHUNK_CATALOG, &payload)?;
    for (id, db) in dbs.iter().filter(|(id, _)| *id != DEFAULT_DB) {
        payload.clear();
        put_uint(&mut payload, u64::from(id));
        w.emit(CHUNK_DATABASE, &payload)?;
        write_db(&mut w, db, &mut keys_total, &mut progress)?;
    }
    progress(keys_total);
    payload.clear();
    delivery
        .image()
        .serialize(&mut rmp_serde::Serializer::new(&mut payload).with_struct_map())
        .map_err(io::Error::other)?;
    w.emit(CHUNK_DELIVERY, &payload)?;
    payload.clear();
    put_u64(&mut payload, keys_total);
    put_u64(&mut payload, w.chunks);
    w.emit(CHUNK_END, &payload)?;
    Ok(Written {
        bytes: w.bytes,
        keys: keys_total,
    })
}

/// One database's chunks: ACL, functions, keys.
fn write_db<W: Write>(
    w: &mut Chunks<'_, W>,
    db: &Db,
    keys_total: &mut u64,
    progress: &mut impl FnMut(u64),
) -> io::Result<()> {
    let mut payload = Vec::new();
    keys::put_acl(&mut payload, db);
    w.emit(CHUNK_ACL, &payload)?;
    payload.clear();
    keys::put_functions(&mut payload, db);
    w.emit(CHUNK_FUNCTIONS, &payload)?;
    let mut body = Vec::with_capacity(SNAPSHOT_CHUNK_BYTES + 1024);
    let mut in_chunk = 0u64;
    let mut keys_chunk = |w: &mut Chunks<'_, W>, body: &mut Vec<u8>, n: &mut u64| {
        payload.clear();
        put_uint(&mut payload, *n);
        payload.extend_from_slice(body);
        body.clear();
        *n = 0;
        w.emit(CHUNK_KEYS, &payload)
    };
    for (k, e) in db.raw().iter() {
        keys::put_entry(&mut body, k, e).map_err(|why| {
            io::Error::other(format!("key {:?}: {why}", String::from_utf8_lossy(k)))
        })?;
        in_chunk += 1;
        *keys_total += 1;
        if body.len() >= SNAPSHOT_CHUNK_BYTES || in_chunk >= crate::config::SNAPSHOT_CHUNK_KEYS_MAX
        {
            keys_chunk(w, &mut body, &mut in_chunk)?;
            crate::fault::point("snapshot-partial");
            progress(*keys_total);
        }
    }
    if in_chunk > 0 {
        keys_chunk(w, &mut body, &mut in_chunk)?;
    }
    Ok(())
}

/// A snapshot read back.
pub struct Loaded {
    pub header: SnapshotHeader,
    pub dbs: Databases,
    pub delivery: Delivery,
    pub keys: u64,
}

/// Where a snapshot file is damaged, and how.
#[derive(Debug, Clone)]
pub struct Damage {
    pub path: PathBuf,
    pub offset: u64,
    pub what: String,
}

impl Damage {
    fn at(path: &Path, offset: usize, what: String) -> Damage {
        Damage {
            path: path.to_path_buf(),
            offset: offset as u64,
            what,
        }
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at offset {}: {}",
            self.path.display(),
            self.offset,
            self.what
        )
    }
}

/// The databases being read back: the catalog, and the database whose chunks come now.
struct Filling {
    dbs: Databases,
    /// The database the ACL, functions and keys chunks now belong to, and that database's
    /// keyspace being filled (put into `dbs` when the next database starts, or at the end).
    current: DbId,
    db: Db,
    catalog: bool,
}

impl Filling {
    fn new() -> Filling {
        let db = Db::new();
        Filling {
            dbs: Databases::default(),
            current: DEFAULT_DB,
            db,
            catalog: false,
        }
    }

    fn catalog(&mut self, payload: &[u8]) -> Result<(), String> {
        if self.catalog || self.current != DEFAULT_DB {
            return Err("a second catalog".into());
        }
        let img: CatalogImage = rmp_serde::from_slice(payload).map_err(|e| e.to_string())?;
        self.dbs.restore_catalog(img)?;
        self.catalog = true;
        Ok(())
    }

    /// A database chunk: the chunks after it belong to database `id`.
    fn begin(&mut self, id: DbId) -> Result<(), String> {
        if !self.catalog {
            return Err(format!("database {id} begins before the catalog"));
        }
        if id == DEFAULT_DB || self.dbs.meta(id).is_none() {
            return Err(format!("database {id} is not in the catalog"));
        }
        if id <= self.current {
            return Err(format!("database {id} comes out of order"));
        }
        self.finish_current()?;
        self.current = id;
        Ok(())
    }

    fn finish_current(&mut self) -> Result<(), String> {
        let mut db = std::mem::take(&mut self.db);
        // The first database with keys was made room for every database's.
        db.fit_keys();
        self.dbs.put(self.current, db)?;
        Ok(())
    }

    fn done(mut self) -> Result<Databases, String> {
        self.finish_current()?;
        Ok(self.dbs)
    }
}

/// The keys a snapshot's end chunk declares, when the file ends with one whose checksum holds;
/// 0 otherwise. Only a hint for the keyspace's size: the reader still counts the keys, and it
/// is bounded by what the file can hold (`keys::ENTRY_BYTES_MIN` a key), so a damaged count
/// cannot make the reader reserve memory the file does not account for.
fn declared_keys(data: &[u8]) -> u64 {
    let Some(at) = data.len().checked_sub(CHUNK_HEADER_BYTES + 16) else {
        return 0;
    };
    let Ok(chunk) = read_chunk(data, at) else {
        return 0;
    };
    if chunk.kind != CHUNK_END {
        return 0;
    }
    let keys = Cursor::new(chunk.payload).u64().unwrap_or(0);
    keys.min((data.len() / keys::ENTRY_BYTES_MIN) as u64)
}

/// Reads a whole snapshot; any damage (a bad checksum, a short file, a payload that does not
/// decode, a missing part) is an error naming the offset.
pub fn read(path: &Path, data: &[u8], mut progress: impl FnMut(u64)) -> Result<Loaded, Damage> {
    let damage = |offset: usize, what: String| Damage::at(path, offset, what);
    let header = SnapshotHeader::decode(data).map_err(|e| damage(0, e))?;
    let mut fill = Filling::new();
    let mut delivery = None;
    // Whether the current database's ACL and functions chunks were read.
    let (mut acl, mut functions) = (false, false);
    let mut keys_total = 0u64;
    let mut chunks = 0u64;
    let mut offset = SNAPSHOT_HEADER_BYTES;
    // The end chunk says how many keys come: the first database with keys (the default one,
    // where a single-database server keeps them all) is made room for all of them before its
    // first key, not grown on the way, and fitted back to its own when it ends. Once a file:
    // room for the keys still to come at each of many databases would be quadratic.
    let mut declared = Some(declared_keys(data));
    loop {
        let chunk = read_chunk(data, offset).map_err(|e| damage(offset, e))?;
        let in_chunk = |e: String| damage(offset, format!("{} chunk: {e}", chunk_name(chunk.kind)));
        let mut c = Cursor::new(chunk.payload);
        match chunk.kind {
            CHUNK_ACL if !acl => {
                keys::read_acl(&mut c, &mut fill.db).map_err(in_chunk)?;
                acl = true;
            }
            CHUNK_FUNCTIONS if !functions => {
                keys::read_functions(&mut c, &mut fill.db).map_err(in_chunk)?;
                functions = true;
            }
            CHUNK_KEYS => {
                let n = c.count().map_err(in_chunk)?;
                if let Some(all) = declared.take() {
                    fill.db.reserve_keys(usize::try_from(all).unwrap_or(0));
                }
                // Each key's slot is fetched when the key is read, a few keys before its
                // insert: the inserts land at random places of a large table, and a miss waited
                // for at each was most of the load's time.
                let mut ahead = VecDeque::with_capacity(SNAPSHOT_PREFETCH_KEYS_AHEAD);
                let mut read = 0;
                loop {
                    while read < n && ahead.len() < SNAPSHOT_PREFETCH_KEYS_AHEAD {
                        let (k, e) = keys::read_entry(&mut c).map_err(in_chunk)?;
                        fill.db.prefetch_slot(&k);
                        ahead.push_back((k, e));
                        read += 1;
                    }
                    let Some((k, e)) = ahead.pop_front() else {
                        break;
                    };
                    if fill.db.raw().contains_key(&k) {
                        return Err(in_chunk(format!(
                            "key {:?} appears twice",
                            String::from_utf8_lossy(&k)
                        )));
                    }
                    let (expire, access) = (e.expire_at_ms(), e.access_ms());
                    fill.db.insert(&k, e.value, expire, access);
                }
                keys_total += n as u64;
                progress(keys_total);
            }
            CHUNK_CATALOG => {
                fill.catalog(chunk.payload).map_err(in_chunk)?;
                c = Cursor::new(&[]);
            }
            CHUNK_DATABASE => {
                if !(acl && functions) {
                    return Err(in_chunk("the ACL or functions chunk is missing".into()));
                }
                let id = c.uint().map_err(in_chunk)?;
                let id = DbId::try_from(id).map_err(|_| in_chunk(format!("database {id}")))?;
                fill.begin(id).map_err(in_chunk)?;
                (acl, functions) = (false, false);
            }
            CHUNK_DELIVERY if delivery.is_none() => {
                let img: DeliveryImage =
                    rmp_serde::from_slice(chunk.payload).map_err(|e| in_chunk(e.to_string()))?;
                delivery = Some(Delivery::from_image(img).map_err(in_chunk)?);
                c = Cursor::new(&[]);
            }
            CHUNK_END => {
                let (keys, count) = (c.u64().map_err(in_chunk)?, c.u64().map_err(in_chunk)?);
                if keys != keys_total || count != chunks {
                    return Err(in_chunk(format!(
                        "the end says {keys} keys in {count} chunks, the file holds {keys_total} in {chunks}"
                    )));
                }
                let end = offset + CHUNK_HEADER_BYTES + chunk.payload.len();
                if end != data.len() {
                    return Err(damage(
                        end,
                        format!("{} bytes after the end chunk", data.len() - end),
                    ));
                }
                if !(acl && functions) {
                    return Err(in_chunk("the ACL or functions chunk is missing".into()));
                }
                let Some(delivery) = delivery else {
                    return Err(in_chunk("the delivery chunk is missing".into()));
                };
                return Ok(Loaded {
                    header,
                    dbs: fill.done().map_err(in_chunk)?,
                    delivery,
                    keys: keys_total,
                });
            }
            k => return Err(in_chunk(format!("unexpected chunk kind {k}"))),
        }
        if !c.is_empty() {
            return Err(in_chunk(format!(
                "{} bytes left over after its contents",
                chunk.payload.len() - c.pos()
            )));
        }
        chunks += 1;
        offset += CHUNK_HEADER_BYTES + chunk.payload.len();
    }
}

/// What can be kept of a damaged snapshot (`tidepool-log repair`): the header must hold (it
/// says which record the snapshot ends at); then every chunk whose checksum holds is read,
/// and a damaged one is skipped to the next offset where a whole chunk of a known kind starts.
/// Returns the state so rebuilt and each damage passed over (whose keys are lost). A
/// missing delivery chunk leaves the delivery state empty; a missing catalog, the default
/// database alone. After a damaged chunk, the ACL, functions and keys chunks are passed over
/// until the next database chunk, since the damaged one may have been the chunk that said
/// which database they belong to.
pub fn salvage(path: &Path, data: &[u8]) -> Result<(Loaded, Vec<Damage>), Damage> {
    let damage = |offset: usize, what: String| Damage::at(path, offset, what);
    let header = SnapshotHeader::decode(data).map_err(|e| damage(0, e))?;
    let mut fill = Filling::new();
    let mut delivery = None;
    let mut keys_total = 0u64;
    let mut lost = Vec::new();
    // Chunks of a database whose beginning was lost have no home: they are passed over.
    let mut homeless = false;
    let mut offset = SNAPSHOT_HEADER_BYTES;
    let known = |k: u8| {
        matches!(
            k,
            CHUNK_KEYS
                | CHUNK_FUNCTIONS
                | CHUNK_ACL
                | CHUNK_DELIVERY
                | CHUNK_CATALOG
                | CHUNK_DATABASE
                | CHUNK_END
        )
    };
    while offset < data.len() {
        let chunk = match read_chunk(data, offset) {
            Ok(c) if known(c.kind) => c,
            Ok(c) => {
                lost.push(damage(offset, format!("unknown chunk kind {}", c.kind)));
                offset += CHUNK_HEADER_BYTES + c.payload.len();
                continue;
            }
            Err(e) => {
                lost.push(damage(offset, e));
                let next = (offset + 1..data.len())
                    .find(|&o| read_chunk(data, o).is_ok_and(|c| known(c.kind)));
                match next {
                    Some(o) => {
                        // What follows may belong to a database whose chunk was the damaged
                        // one: only a database chunk says for sure where keys belong again.
                        homeless = fill.catalog;
                        offset = o;
                        continue;
                    }
                    None => break,
                }
            }
        };
        let mut c = Cursor::new(chunk.payload);
        let homeless_chunk =
            homeless && matches!(chunk.kind, CHUNK_ACL | CHUNK_FUNCTIONS | CHUNK_KEYS);
        let decoded = match chunk.kind {
            _ if homeless_chunk => Err("it belongs to a database whose beginning is lost".into()),
            CHUNK_ACL => keys::read_acl(&mut c, &mut fill.db),
            CHUNK_FUNCTIONS => keys::read_functions(&mut c, &mut fill.db),
            CHUNK_KEYS => (|| {
                let n = c.count()?;
                for _ in 0..n {
                    let (k, e) = keys::read_entry(&mut c)?;
                    let (expire, access) = (e.expire_at_ms(), e.access_ms());
                    fill.db.insert(&k, e.value, expire, access);
                    keys_total += 1;
                }
                Ok(())
            })(),
            CHUNK_CATALOG => fill.catalog(chunk.payload),
            CHUNK_DATABASE => c
                .uint()
                .and_then(|id| DbId::try_from(id).map_err(|_| format!("database {id}")))
                .and_then(|id| fill.begin(id))
                .map(|()| homeless = false),
            CHUNK_DELIVERY => rmp_serde::from_slice::<DeliveryImage>(chunk.payload)
                .map_err(|e| e.to_string())
                .and_then(Delivery::from_image)
                .map(|d| delivery = Some(d)),
            _ => break, // the end
        };
        if let Err(e) = decoded {
            lost.push(damage(
                offset,
                format!("{} chunk: {e}", chunk_name(chunk.kind)),
            ));
        }
        offset += CHUNK_HEADER_BYTES + chunk.payload.len();
    }
    if delivery.is_none() {
        lost.push(damage(
            offset,
            "no readable delivery chunk: the delivery state is empty".into(),
        ));
    }
    let dbs = fill.done().map_err(|e| damage(offset, e))?;
    Ok((
        Loaded {
            header,
            dbs,
            delivery: delivery.unwrap_or_default(),
            keys: keys_total,
        },
        lost,
    ))
}

/// Reads the snapshot file at `path`.
pub fn read_file(path: &Path, progress: impl FnMut(u64)) -> Result<Loaded, Damage> {
    let data =
        std::fs::read(path).map_err(|e| Damage::at(path, 0, format!("cannot read it: {e}")))?;
    read(path, &data, progress)
}

/// A snapshot file in the directory.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    pub path: PathBuf,
    pub seq: u64,
}

/// `DIR/snapshots`.
pub fn snapshot_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("snapshots")
}

/// The snapshots in `dir` (a `snapshots` directory), oldest first. A missing directory has none.
pub fn list(dir: &Path) -> io::Result<Vec<SnapshotFile>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if let Some(seq) = entry
            .file_name()
            .to_str()
            .and_then(parse_snapshot_file_name)
        {
            out.push(SnapshotFile {
                path: entry.path(),
                seq,
            });
        }
    }
    out.sort_by_key(|s| s.seq);
    Ok(out)
}

/// Writes a snapshot file for `seq` through a temporary name: written, synced, renamed, and the
/// directory synced. Used by the offline tool; SAVE and BGSAVE write through `write_tmp`.
pub fn write_file(
    data_dir: &Path,
    dbs: &Databases,
    delivery: &Delivery,
    header: SnapshotHeader,
    progress: impl FnMut(u64),
) -> io::Result<Written> {
    let tmp = write_tmp(data_dir, dbs, delivery, header, progress, true)?;
    publish(data_dir, &tmp, header.seq)?;
    Ok(tmp.1)
}

/// The temporary file of the snapshot at record `seq`.
pub fn tmp_path(data_dir: &Path, seq: u64) -> PathBuf {
    snapshot_dir(data_dir).join(format!("{}.tmp", snapshot_file_name(seq)))
}

/// Syncs a temporary snapshot file another process wrote ([`write_tmp`] without `sync`); on failure
/// the file is removed, as a failed [`write_tmp`] removes it.
pub fn sync_tmp(tmp: &Path) -> io::Result<()> {
    let synced = std::fs::OpenOptions::new()
        .write(true)
        .open(tmp)
        .and_then(|f| f.sync_all());
    match synced {
        Ok(()) => crate::fault::point("snapshot-synced"),
        Err(_) => {
            let _ = std::fs::remove_file(tmp);
        }
    }
    synced
}

/// Writes `<seq>.snap.tmp`, and syncs it when `sync` (a background snapshot's child does not:
/// the server syncs the file once the child has exited, [`sync_tmp`], so that the child, and
/// with it every page the server copies on its first write, lives the sync's time less);
/// returns its path and what it holds.
pub fn write_tmp(
    data_dir: &Path,
    dbs: &Databases,
    delivery: &Delivery,
    header: SnapshotHeader,
    progress: impl FnMut(u64),
    sync: bool,
) -> io::Result<(PathBuf, Written)> {
    let dir = snapshot_dir(data_dir);
    std::fs::create_dir_all(&dir)?;
    let tmp = tmp_path(data_dir, header.seq);
    let file = std::fs::File::create(&tmp)?;
    let written = (|| {
        let mut out = io::BufWriter::with_capacity(1 << 20, file);
        let written = write(&mut out, dbs, delivery, header, progress)?;
        crate::fault::no_space("snapshot-write")?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        crate::fault::point("snapshot-written");
        if sync {
            file.sync_all()?;
            crate::fault::point("snapshot-synced");
        }
        Ok(written)
    })();
    match written {
        Ok(w) => Ok((tmp, w)),
        // A failed snapshot (a full disk, most often) leaves no temporary file to take the
        // space the log needs.
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Renames a synced temporary snapshot to its name and syncs the directory: from here on the
/// snapshot is what start-up uses.
pub fn publish(data_dir: &Path, tmp: &(PathBuf, Written), seq: u64) -> io::Result<()> {
    let dir = snapshot_dir(data_dir);
    if let Err(e) = std::fs::rename(&tmp.0, dir.join(snapshot_file_name(seq))) {
        let _ = std::fs::remove_file(&tmp.0);
        return Err(e);
    }
    crate::fault::point("snapshot-renamed");
    sync_dir(&dir)?;
    crate::fault::point("snapshot-published");
    Ok(())
}

/// What compaction removed.
#[derive(Debug, Default)]
pub struct Compacted {
    pub segments: usize,
    pub bytes: u64,
    pub snapshots: usize,
}

/// After the snapshot at `seq` is published: deletes the segments it makes unnecessary that the
/// retention does not keep, oldest first (so what remains is always a contiguous stretch of the
/// log), then the older snapshots whose log is no longer whole behind them; temporary files
/// left by an interrupted save go too. Segments that hold records after `seq` are never touched.
pub fn compact(
    data_dir: &Path,
    wal_dir: &Path,
    seq: u64,
    retention: Retention,
    now_ms: u64,
) -> io::Result<Compacted> {
    let mut done = Compacted::default();
    let segments = list_segments(wal_dir)?;
    // A segment is closed before the snapshot when the next one starts at or before seq + 1.
    let closed: Vec<usize> = (0..segments.len().saturating_sub(1))
        .filter(|&i| segments[i + 1].first_seq <= seq + 1)
        .collect();
    let mut keep_bytes = 0u64;
    let mut delete_upto = 0; // segments [0, delete_upto) go
    for &i in closed.iter().rev() {
        let len = std::fs::metadata(&segments[i].path)?.len();
        let keep = match retention {
            Retention::Nothing => false,
            Retention::Bytes(b) => keep_bytes + len <= b,
            Retention::Millis(ms) => {
                // The next segment was created when this one closed: its last record is no
                // later than that.
                let closed_at = crate::wal::reader::segment_created_ms(&segments[i + 1].path)?;
                closed_at.saturating_add(ms) > now_ms
            }
        };
        if !keep {
            delete_upto = i + 1;
            break;
        }
        keep_bytes += len;
    }
    for (n, seg) in segments[..delete_upto].iter().enumerate() {
        let len = std::fs::metadata(&seg.path)?.len();
        std::fs::remove_file(&seg.path)?;
        done.segments += 1;
        done.bytes += len;
        if n == 0 {
            crate::fault::point("segment-deleted");
        }
    }
    if done.segments > 0 {
        sync_dir(wal_dir)?;
    }
    // Older snapshots stay only while the log behind them is whole (a fallback if the newest is
    // found damaged); at most one is kept.
    let first_seq = segments.get(delete_upto).map(|s| s.first_seq);
    let dir = snapshot_dir(data_dir);
    let older: Vec<SnapshotFile> = list(&dir)?.into_iter().filter(|s| s.seq < seq).collect();
    for (i, s) in older.iter().enumerate().rev() {
        let usable = first_seq.is_some_and(|f| f <= s.seq + 1);
        if !usable || i + 1 < older.len() {
            std::fs::remove_file(&s.path)?;
            done.snapshots += 1;
        }
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".snap.tmp") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    if done.snapshots > 0 {
        sync_dir(&dir)?;
    }
    Ok(done)
}

/// Removes the temporary files (`<seq>.snap.tmp`) of snapshots that never finished; answers
/// how many. For start-up, before anything else runs: no snapshot is being written then.
pub fn remove_stale_tmp(data_dir: &Path) -> usize {
    let dir = snapshot_dir(data_dir);
    let mut removed = 0;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(".snap.tmp")
                && std::fs::remove_file(e.path()).is_ok()
            {
                removed += 1;
            }
        }
    }
    if removed > 0 {
        let _ = sync_dir(&dir);
    }
    removed
}

/// Where start-up begins: the newest snapshot that reads whole and whose log follows it.
pub struct Start {
    pub loaded: Option<Loaded>,
    /// Snapshots passed over, with why (damage), for the start-up warnings.
    pub skipped: Vec<Damage>,
}

/// Reads only a snapshot's header.
pub fn read_header(path: &Path) -> Result<SnapshotHeader, String> {
    use std::io::Read;
    let mut b = [0u8; SNAPSHOT_HEADER_BYTES];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("cannot read it: {e}"))?;
    SnapshotHeader::decode(&b)
}

/// Chooses the snapshot to start from: the newest that `fits` (every one, at start-up; those at
/// or before the point, for a past point), reads whole, and has the log after it. A damaged
/// snapshot is passed over (and reported) when an older one, or the log from its beginning,
/// can take its place; when none can, the error says which file is damaged where, and what
/// to do.
pub fn choose(
    data_dir: &Path,
    wal_dir: &Path,
    fits: impl Fn(&SnapshotHeader) -> bool,
    mut progress: impl FnMut(u64),
) -> Result<Start, String> {
    let dir = snapshot_dir(data_dir);
    let snaps = list(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let segments =
        list_segments(wal_dir).map_err(|e| format!("cannot list {}: {e}", wal_dir.display()))?;
    let log_first = segments.first().map(|s| s.first_seq);
    // Records 1..=seq are covered by a snapshot at seq; the log must hold seq + 1 onward.
    let follows = |seq: u64| log_first.is_none_or(|f| f <= seq + 1);
    let mut skipped = Vec::new();
    for s in snaps.iter().rev() {
        if !follows(s.seq) {
            continue;
        }
        match read_header(&s.path) {
            Ok(h) if !fits(&h) => continue,
            Ok(_) => {}
            Err(what) => {
                skipped.push(Damage::at(&s.path, 0, what));
                continue;
            }
        }
        match read_file(&s.path, &mut progress) {
            Ok(loaded) if loaded.header.seq == s.seq => {
                return Ok(Start {
                    loaded: Some(loaded),
                    skipped,
                })
            }
            Ok(loaded) => skipped.push(Damage::at(
                &s.path,
                12,
                format!(
                    "the header says record {}, the file name says {}",
                    loaded.header.seq, s.seq
                ),
            )),
            Err(d) => skipped.push(d),
        }
    }
    if follows(0) && (skipped.is_empty() || log_first.is_some()) {
        return Ok(Start {
            loaded: None,
            skipped,
        });
    }
    let first = log_first.unwrap_or(0);
    let why = match skipped.first() {
        Some(d) => format!("the snapshot {d}"),
        None => format!(
            "no snapshot that fits covers the records before {first}, and the log before them \
             was compacted away (--log-retention)"
        ),
    };
    Err(format!(
        "cannot rebuild the state: {why}; and the log before record {first} is gone, so no older \
         starting point is left. Nothing was changed. Inspect the directory with `tidepool-log \
         verify {dir}`; `tidepool-log repair {dir}` can rebuild a snapshot from a damaged one's \
         intact parts, dropping the keys of its damaged chunks (back up the directory first).",
        dir = data_dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_keys() -> Vec<u8> {
        let mut db = Db::new();
        db.insert(
            b"a",
            crate::state::Value::Str(b"1".as_slice().into()),
            None,
            0,
        );
        db.insert(
            b"b",
            crate::state::Value::Str(b"2".as_slice().into()),
            None,
            0,
        );
        let header = SnapshotHeader {
            seq: 1,
            record_unix_ms: 0,
            created_unix_ms: 0,
        };
        let mut bytes = Vec::new();
        write(
            &mut bytes,
            &Databases::with_default(db),
            &Delivery::new(),
            header,
            |_| {},
        )
        .expect("write");
        bytes
    }

    /// Guards the keyspace's sizing on a load: the count comes from an end chunk whose
    /// checksum holds, and a count the file cannot hold (a damaged or made-up end chunk) is
    /// cut to what it can, so it never reserves memory the file does not account for.
    #[test]
    fn the_declared_key_count_is_read_from_the_end_and_bounded_by_the_file() {
        let bytes = two_keys();
        assert_eq!(declared_keys(&bytes), 2);
        assert_eq!(declared_keys(&bytes[..bytes.len() - 1]), 0, "no end chunk");
        assert_eq!(declared_keys(&[]), 0);
        let end = bytes.len() - CHUNK_HEADER_BYTES - 16;
        let mut claims = bytes[..end].to_vec();
        let mut payload = Vec::new();
        put_u64(&mut payload, 1 << 60);
        put_u64(&mut payload, 4);
        encode_chunk(&mut claims, CHUNK_END, &payload);
        assert_eq!(claims.len(), bytes.len());
        assert_eq!(
            declared_keys(&claims),
            (claims.len() / keys::ENTRY_BYTES_MIN) as u64
        );
        // Such a file is still refused by the count check, with its place.
        assert!(read(Path::new("mem"), &claims, |_| {}).is_err());
        let loaded = read(Path::new("mem"), &bytes, |_| {}).expect("read");
        assert_eq!(loaded.keys, 2);
    }
}
