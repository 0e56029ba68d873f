//! What one log record holds: its kind byte and MessagePack payload.
//!
//! The log (`wal`) frames opaque payloads; this module, above it and above the state it
//! describes, gives them meaning. The frame (see `wal/format.rs`) carries a one-byte kind; the payload is MessagePack written by
//! `rmp-serde`. Kinds 1-15 belong to the key-value store, 16-63 are reserved for the message
//! delivery service (publish, delivery outcome, schedule changes, waiters, notify), so both halves
//! share one log, one sequence and one executor.

use crate::msgpack::Bin;
use crate::state::databases::{DbEvent, DbId};
use serde::Serialize;

/// Kind byte of a record that holds key-value commands.
pub const KIND_KV_COMMANDS: u8 = 1;
/// Kind byte of a record that holds key-value commands of a database other than the default.
pub const KIND_KV_COMMANDS_IN: u8 = 2;
/// Kind byte of a record that changes the set of databases or their usage counts.
pub const KIND_DATABASES: u8 = 3;
/// Kind byte of a record that holds delivery-service events.
pub const KIND_DELIVERY_EVENTS: u8 = 16;
/// First kind byte reserved for the message-delivery service.
pub const KIND_DELIVERY_FIRST: u8 = 16;
/// Last kind byte reserved for the message-delivery service.
pub const KIND_DELIVERY_LAST: u8 = 63;

/// A decoded record payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Commands to apply, in order, atomically, at the frame's timestamp. Each command is in its
    /// deterministic form: relative times are absolute, random choices are explicit.
    KvCommands(Vec<Vec<Vec<u8>>>),
    /// The same, for the database numbered `db` (never the default database, whose commands
    /// keep the shorter kind above).
    KvCommandsIn { db: DbId, cmds: Vec<Vec<Vec<u8>>> },
    /// Changes to the set of databases (create, delete, token reset, claim) and usage counts.
    Databases(Vec<DbEvent>),
    /// Delivery-service events (`delivery::model::Event`), applied in order, atomically, at the
    /// frame's timestamp.
    Delivery(Vec<crate::delivery::model::Event>),
}

/// Why a payload could not be decoded.
#[derive(Debug)]
pub enum RecordError {
    UnknownKind(u8),
    Decode(String),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::UnknownKind(k) => write!(f, "unknown record kind {k}"),
            RecordError::Decode(e) => write!(f, "payload does not decode: {e}"),
        }
    }
}

impl crate::wal::Payload for Record {
    fn kind(&self) -> u8 {
        Record::kind(self)
    }
    fn encode_payload(&self, out: &mut Vec<u8>) {
        Record::encode_payload(self, out)
    }
}

impl Record {
    pub fn kind(&self) -> u8 {
        match self {
            Record::KvCommands(_) => KIND_KV_COMMANDS,
            Record::KvCommandsIn { .. } => KIND_KV_COMMANDS_IN,
            Record::Databases(_) => KIND_DATABASES,
            Record::Delivery(_) => KIND_DELIVERY_EVENTS,
        }
    }

    /// The key-value commands a record holds, with their database; None for other records.
    pub fn kv_commands(&self) -> Option<(DbId, &[Vec<Vec<u8>>])> {
        match self {
            Record::KvCommands(c) => Some((crate::state::databases::DEFAULT_DB, c)),
            Record::KvCommandsIn { db, cmds } => Some((*db, cmds)),
            Record::Databases(_) | Record::Delivery(_) => None,
        }
    }

    /// Human name of a kind byte (for the inspection tool).
    pub fn kind_name(kind: u8) -> &'static str {
        match kind {
            KIND_KV_COMMANDS => "kv-commands",
            KIND_KV_COMMANDS_IN => "kv-commands-in",
            KIND_DATABASES => "databases",
            KIND_DELIVERY_EVENTS => "delivery-events",
            17..=KIND_DELIVERY_LAST => "delivery (reserved)",
            _ => "unknown",
        }
    }

    pub fn encode_payload(&self, out: &mut Vec<u8>) {
        match self {
            Record::KvCommands(cmds) => encode_kv_commands(out, cmds),
            Record::KvCommandsIn { db, cmds } => {
                // A two-element array: the database's number, then the commands as in kind 1.
                out.push(0x92);
                let _ = db.serialize(&mut rmp_serde::Serializer::new(&mut *out));
                encode_kv_commands(out, cmds);
            }
            Record::Databases(events) => {
                let _ = events.serialize(&mut rmp_serde::Serializer::new(out).with_struct_map());
            }
            Record::Delivery(events) => crate::delivery::named::encode_events(out, events),
        }
    }

    pub fn decode(kind: u8, payload: &[u8]) -> Result<Record, RecordError> {
        match kind {
            KIND_KV_COMMANDS => {
                let cmds: Vec<Vec<Bin>> = rmp_serde::from_slice(payload)
                    .map_err(|e| RecordError::Decode(e.to_string()))?;
                Ok(Record::KvCommands(
                    cmds.into_iter()
                        .map(|c| c.into_iter().map(|b| b.0).collect())
                        .collect(),
                ))
            }
            KIND_KV_COMMANDS_IN => {
                let (db, cmds): (DbId, Vec<Vec<Bin>>) = rmp_serde::from_slice(payload)
                    .map_err(|e| RecordError::Decode(e.to_string()))?;
                Ok(Record::KvCommandsIn {
                    db,
                    cmds: cmds
                        .into_iter()
                        .map(|c| c.into_iter().map(|b| b.0).collect())
                        .collect(),
                })
            }
            KIND_DATABASES => rmp_serde::from_slice(payload)
                .map(Record::Databases)
                .map_err(|e| RecordError::Decode(e.to_string())),
            KIND_DELIVERY_EVENTS => rmp_serde::from_slice(payload)
                .map(Record::Delivery)
                .map_err(|e| RecordError::Decode(e.to_string())),
            other => Err(RecordError::UnknownKind(other)),
        }
    }
}

/// A record's key-value commands decoded into buffers kept from one record to the next:
/// recovery replays millions of commands, and decoding each record into vectors of its own
/// (a record of 100 SETs is 401 of them) was a third of replay's time, the allocations and
/// frees most of it.
#[derive(Debug, Default)]
pub struct KvScratch {
    /// Each command's argument count and its arguments' buffers (past the count, spares).
    cmds: Vec<(usize, Vec<Vec<u8>>)>,
    /// The commands of the record decoded last.
    len: usize,
    /// The heap bytes the buffers hold (their capacities, and the vectors' own slots).
    held: usize,
}

impl KvScratch {
    /// The commands decoded last, each its arguments.
    pub fn commands(&self) -> impl Iterator<Item = &[Vec<u8>]> + Clone {
        self.cmds[..self.len].iter().map(|(n, args)| &args[..*n])
    }

    /// Once the record decoded last is applied: lets every buffer go when they hold more than
    /// `REPLAY_SCRATCH_KEEP_BYTES` (a large value or a long pipeline in the log), so that what
    /// one record grew does not stay allocated for the rest of the replay, or of the server.
    pub fn done(&mut self) {
        if self.held > crate::config::REPLAY_SCRATCH_KEEP_BYTES {
            *self = KvScratch::default();
        }
    }

    /// The heap bytes the buffers hold.
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// The next command's argument buffers, with room for `argc`.
    fn command(&mut self, argc: usize) -> &mut Vec<Vec<u8>> {
        const SLOT: usize = std::mem::size_of::<Vec<u8>>();
        if self.len == self.cmds.len() {
            self.cmds.push((0, Vec::new()));
            self.held += std::mem::size_of::<(usize, Vec<Vec<u8>>)>();
        }
        let (n, args) = &mut self.cmds[self.len];
        self.len += 1;
        *n = argc;
        if args.len() < argc {
            self.held += (argc - args.len()) * SLOT;
            args.resize_with(argc, Vec::new);
        }
        args
    }
}

/// A MessagePack reader of exactly the forms `encode_kv_commands` and `log-format.md` name.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    /// An `n`-byte big-endian unsigned integer.
    fn be_u64(&mut self, n: usize) -> Option<u64> {
        let b = self.take(n)?;
        Some(b.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b)))
    }

    /// An `n`-byte big-endian length.
    fn big_endian(&mut self, n: usize) -> Option<usize> {
        usize::try_from(self.be_u64(n)?).ok()
    }

    /// An array's length; None for any other marker, or a length the bytes left cannot hold
    /// (each element takes one byte at least).
    fn array(&mut self) -> Option<usize> {
        let n = match self.byte()? {
            m @ 0x90..=0x9f => usize::from(m & 0x0f),
            0xdc => self.big_endian(2)?,
            0xdd => self.big_endian(4)?,
            _ => return None,
        };
        (n <= self.bytes.len()).then_some(n)
    }

    /// A `bin` or `str`'s bytes (MessagePack's str bytes are taken as they are, valid UTF-8
    /// or not, as `msgpack::Bin` takes them).
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = match self.byte()? {
            m @ 0xa0..=0xbf => usize::from(m & 0x1f),
            0xc4 | 0xd9 => self.big_endian(1)?,
            0xc5 | 0xda => self.big_endian(2)?,
            0xc6 | 0xdb => self.big_endian(4)?,
            _ => return None,
        };
        self.take(n)
    }

    /// An unsigned integer in any of its forms.
    fn uint(&mut self) -> Option<u64> {
        match self.byte()? {
            m @ 0x00..=0x7f => Some(u64::from(m)),
            0xcc => self.be_u64(1),
            0xcd => self.be_u64(2),
            0xce => self.be_u64(4),
            0xcf => self.be_u64(8),
            _ => None,
        }
    }
}

/// Decodes a key-value record's payload (kind 1 or 2) into `into`; its database. None when
/// the record is of another kind or its payload is in a form the writer does not write
/// (other markers, bytes after the value, a truncation): `Record::decode` then decides what
/// it holds or why it does not decode, so this path accepts nothing that one refuses and
/// refuses nothing with other words.
pub fn decode_kv_into(kind: u8, payload: &[u8], into: &mut KvScratch) -> Option<DbId> {
    let mut c = Cursor { bytes: payload };
    let db = match kind {
        KIND_KV_COMMANDS => crate::state::databases::DEFAULT_DB,
        KIND_KV_COMMANDS_IN => {
            if c.byte()? != 0x92 {
                return None;
            }
            DbId::try_from(c.uint()?).ok()?
        }
        _ => return None,
    };
    into.len = 0;
    let n = c.array()?;
    for _ in 0..n {
        let argc = c.array()?;
        let mut grew = 0;
        let args = into.command(argc);
        for a in &mut args[..argc] {
            let Some(b) = c.bytes() else {
                into.held += grew;
                return None;
            };
            let before = a.capacity();
            a.clear();
            a.extend_from_slice(b);
            grew += a.capacity() - before;
        }
        into.held += grew;
    }
    c.bytes.is_empty().then_some(db)
}

/// Encodes `[[bin, ...], ...]` as MessagePack, written out by hand: the bytes rmp-serde
/// writes for it (the shortest array and bin headers), which `kv_commands_encode_as_rmp_serde_does`
/// holds, at about a fifth of its instructions (this runs for every key-value write).
pub fn encode_kv_commands(out: &mut Vec<u8>, cmds: &[Vec<Vec<u8>>]) {
    fn array_len(out: &mut Vec<u8>, n: usize) {
        if n < 16 {
            out.push(0x90 | n as u8);
        } else if let Ok(n) = u16::try_from(n) {
            out.push(0xdc);
            out.extend_from_slice(&n.to_be_bytes());
        } else {
            out.push(0xdd);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
    }
    array_len(out, cmds.len());
    for args in cmds {
        array_len(out, args.len());
        for a in args {
            if let Ok(n) = u8::try_from(a.len()) {
                out.push(0xc4);
                out.push(n);
            } else if let Ok(n) = u16::try_from(a.len()) {
                out.push(0xc5);
                out.extend_from_slice(&n.to_be_bytes());
            } else {
                out.push(0xc6);
                out.extend_from_slice(&(a.len() as u32).to_be_bytes());
            }
            out.extend_from_slice(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rmp-serde's encoding of the same value, the one the log held before it was written out
    /// by hand (log-format.md's bytes).
    fn by_rmp_serde(cmds: &[Vec<Vec<u8>>]) -> Vec<u8> {
        let wrapped: Vec<Vec<Bin>> = cmds
            .iter()
            .map(|c| c.iter().map(|a| Bin(a.clone())).collect())
            .collect();
        let mut out = Vec::new();
        let _ = wrapped.serialize(&mut rmp_serde::Serializer::new(&mut out));
        out
    }

    #[test]
    fn kv_commands_encode_as_rmp_serde_does() {
        let arg = |n: usize| vec![b'x'; n];
        let cases: Vec<Vec<Vec<Vec<u8>>>> = vec![
            vec![],
            vec![vec![]],
            vec![vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]],
            vec![vec![arg(0), arg(255), arg(256), arg(65_535), arg(65_536)]],
            (0..15).map(|_| vec![arg(1)]).collect(),
            (0..16).map(|_| vec![arg(1); 16]).collect(),
            (0..65_536).map(|_| vec![]).collect(),
            vec![vec![arg(2); 65_535]],
        ];
        for cmds in cases {
            let mut out = Vec::new();
            encode_kv_commands(&mut out, &cmds);
            assert_eq!(out, by_rmp_serde(&cmds), "{} commands", cmds.len());
            let back = Record::decode(KIND_KV_COMMANDS, &out).ok();
            assert_eq!(back, Some(Record::KvCommands(cmds)));
        }
    }

    /// What `decode_kv_into` left in `scratch`, as a record of `kind`.
    fn scratch_record(kind: u8, db: DbId, scratch: &KvScratch) -> Record {
        let cmds = scratch.commands().map(<[Vec<u8>]>::to_vec).collect();
        if kind == KIND_KV_COMMANDS {
            Record::KvCommands(cmds)
        } else {
            Record::KvCommandsIn { db, cmds }
        }
    }

    /// Guards replay's decoding into kept buffers: every payload it takes decodes as
    /// `Record::decode` decodes it, and it takes every payload the writer writes.
    #[test]
    fn kv_scratch_decodes_what_record_decode_does() {
        let arg = |n: usize| vec![b'x'; n];
        let mut payloads: Vec<(u8, Vec<u8>)> = Vec::new();
        let cases: Vec<Vec<Vec<Vec<u8>>>> = vec![
            vec![],
            vec![vec![]],
            vec![vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]],
            vec![vec![arg(0), arg(255), arg(256), arg(70_000)], vec![arg(3)]],
            (0..17).map(|i| vec![arg(i); i % 5]).collect(),
        ];
        for cmds in &cases {
            let rec = Record::KvCommands(cmds.clone());
            let mut out = Vec::new();
            rec.encode_payload(&mut out);
            payloads.push((KIND_KV_COMMANDS, out));
            for db in [1, 127, 128, 65_535, 65_536, u32::MAX] {
                let rec = Record::KvCommandsIn {
                    db,
                    cmds: cmds.clone(),
                };
                let mut out = Vec::new();
                rec.encode_payload(&mut out);
                payloads.push((KIND_KV_COMMANDS_IN, out));
            }
        }
        let mut scratch = KvScratch::default();
        // The writer's own payloads, each after the others (the buffers are reused).
        for (i, (kind, p)) in payloads.iter().enumerate() {
            let db = decode_kv_into(*kind, p, &mut scratch).expect("the writer's form");
            let expected = Record::decode(*kind, p).expect("decodes");
            assert!(
                scratch_record(*kind, db, &scratch) == expected,
                "payload {i}"
            );
            scratch.done();
        }
        // Other forms: str for bin, arrays of integers for bin, a signed database number,
        // bytes after the value, every truncation, a database number past u32. Where the
        // kept buffers take the payload they read what `Record::decode` reads; where they do
        // not, `Record::decode` decides.
        let mut odd: Vec<(u8, Vec<u8>)> = vec![
            (1, vec![0x91, 0x92, 0xa3, b'G', b'E', b'T', 0xd9, 1, b'k']),
            (1, vec![0x91, 0x91, 0xdb, 0, 0, 0, 2, 0xff, 0xfe]),
            (1, vec![0x91, 0x91, 0x92, 0x01, 0x02]),
            (1, vec![0x90, 0x00]),
            (2, vec![0x92, 0xd0, 0x05, 0x90]),
            (2, vec![0x92, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0, 0x90]),
            (2, vec![0x92, 0xcc, 0x07, 0x91, 0x91, 0xc4, 0x01, b'x']),
            (3, vec![0x90]),
            (1, vec![0xdd, 0xff, 0xff, 0xff, 0xff]),
        ];
        for (kind, p) in payloads.iter().take(12) {
            for cut in 0..p.len() {
                odd.push((*kind, p[..cut].to_vec()));
            }
        }
        for (kind, p) in &odd {
            if let Some(db) = decode_kv_into(*kind, p, &mut scratch) {
                let expected = Record::decode(*kind, p).map_err(|e| e.to_string());
                assert!(
                    Ok(scratch_record(*kind, db, &scratch)) == expected,
                    "kind {kind}, {} bytes: {:02x?}",
                    p.len(),
                    &p[..p.len().min(16)]
                );
            }
            scratch.done();
        }
        assert!(decode_kv_into(
            1,
            &[0x91, 0x92, 0xa3, b'G', b'E', b'T', 0xd9, 1, b'k'],
            &mut scratch
        )
        .is_some());
    }

    /// Guards the kept buffers' size: past `REPLAY_SCRATCH_KEEP_BYTES` they are all let go
    /// once their record is applied, and a smaller record after a larger one holds only its
    /// own commands.
    #[test]
    fn kv_scratch_lets_large_buffers_go() {
        let big = vec![b'v'; crate::config::REPLAY_SCRATCH_KEEP_BYTES + 1];
        let rec = Record::KvCommands(vec![
            vec![b"SET".to_vec(), b"a".to_vec(), big],
            vec![b"DEL".to_vec(), b"b".to_vec()],
        ]);
        let mut out = Vec::new();
        rec.encode_payload(&mut out);
        let mut scratch = KvScratch::default();
        assert_eq!(
            decode_kv_into(KIND_KV_COMMANDS, &out, &mut scratch),
            Some(0)
        );
        assert_eq!(scratch_record(KIND_KV_COMMANDS, 0, &scratch), rec);
        assert!(scratch.held_bytes() > crate::config::REPLAY_SCRATCH_KEEP_BYTES);
        scratch.done();
        assert_eq!((scratch.cmds.len(), scratch.held_bytes()), (0, 0));
        // Many small commands past the budget are let go the same way.
        let many = Record::KvCommands(vec![vec![b"DEL".to_vec(), b"k".to_vec()]; 20_000]);
        let mut out = Vec::new();
        many.encode_payload(&mut out);
        assert_eq!(
            decode_kv_into(KIND_KV_COMMANDS, &out, &mut scratch),
            Some(0)
        );
        assert!(scratch.held_bytes() > crate::config::REPLAY_SCRATCH_KEEP_BYTES);
        scratch.done();
        assert_eq!(scratch.held_bytes(), 0);
        let small = Record::KvCommands(vec![vec![b"GET".to_vec()]]);
        let mut out = Vec::new();
        small.encode_payload(&mut out);
        assert_eq!(
            decode_kv_into(KIND_KV_COMMANDS, &out, &mut scratch),
            Some(0)
        );
        assert_eq!(scratch_record(KIND_KV_COMMANDS, 0, &scratch), small);
        let held = scratch.held_bytes();
        scratch.done();
        assert_eq!(
            scratch.held_bytes(),
            held,
            "a small record's buffers are kept"
        );
    }
}
