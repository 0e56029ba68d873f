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
}
