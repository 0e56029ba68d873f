//! What one log record holds: its kind byte and MessagePack payload.
//!
//! The log (`wal`) frames opaque payloads; this module, above it and above the state it
//! describes, gives them meaning. The frame (see `wal/format.rs`) carries a one-byte kind; the payload is MessagePack written by
//! `rmp-serde`. Kinds 1-15 belong to the key-value store, 16-63 are reserved for the message
//! delivery service (publish, delivery outcome, schedule changes, waiters, notify), so both halves
//! share one log, one sequence and one executor.

use crate::msgpack::Bin;
use crate::state::databases::{DbEvent, DbId};
use serde::{Serialize, Serializer};

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
            Record::Delivery(events) => {
                // Writing MessagePack into a Vec cannot fail: the only error source is the writer.
                let _ = events.serialize(&mut rmp_serde::Serializer::new(out).with_struct_map());
            }
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

/// Encodes `[[bin, ...], ...]` without copying the arguments into wrapper values.
pub fn encode_kv_commands(out: &mut Vec<u8>, cmds: &[Vec<Vec<u8>>]) {
    struct Cmds<'a>(&'a [Vec<Vec<u8>>]);
    struct Args<'a>(&'a [Vec<u8>]);
    struct BinRef<'a>(&'a [u8]);
    impl Serialize for BinRef<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
    impl Serialize for Args<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.iter().map(|a| BinRef(a)))
        }
    }
    impl Serialize for Cmds<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.iter().map(|c| Args(c)))
        }
    }
    // Writing MessagePack into a Vec cannot fail: the only error source is the writer.
    let _ = Cmds(cmds).serialize(&mut rmp_serde::Serializer::new(out));
}
