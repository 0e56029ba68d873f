//! DUMP payloads: Redis's serialization of one value (`rdbSaveObject` plus the two-byte RDB
//! version and a CRC-64), so that keys move between tidepool and Redis with DUMP and RESTORE.
//!
//! Writing produces what Redis 7.0 writes (RDB version 10) and picks the same encodings Redis
//! would hold the value in: integers and LZF inside strings, listpacks for small hashes and
//! sorted sets, intsets for small sets of integers, quicklist nodes for lists and listpack
//! nodes for streams. For values Redis would have built the same way (no deletions inside a
//! list or stream, small hashes in Redis's field order) the bytes are Redis's own; in every case
//! Redis restores them.
//!
//! Reading takes what Redis 7.0 to 7.4 write for these types (RDB 10 to 12; not 7.4's types
//! for hashes with field TTLs). Every length is checked: a bad payload is refused, never
//! trusted.

pub mod listpack;
pub mod lzf;

use crate::num::{fmt_g17, parse_f64, parse_i64};
use crate::state::hash::Hash;
use crate::state::scanmap::ScanMap;
use crate::state::stream::{Consumer, Group, Nack, Stream, StreamId};
use crate::state::zset::ZSet;
use crate::state::Value;
use listpack::Item;
use std::collections::{BTreeSet, VecDeque};

/// The RDB version DUMP writes: Redis 7.0's.
pub const RDB_VERSION: u16 = 10;
/// The newest RDB version RESTORE reads (Redis 7.4).
pub const RDB_VERSION_READ_MAX: u16 = 12;

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_STREAM_LISTPACKS: u8 = 15;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
const TYPE_STREAM_LISTPACKS_2: u8 = 19;
const TYPE_SET_LISTPACK: u8 = 20;
const TYPE_STREAM_LISTPACKS_3: u8 = 21;

/// Redis's limits for its small encodings (the defaults of `*-max-listpack-*` and
/// `set-max-intset-entries`).
const HASH_LISTPACK_ENTRIES_MAX: usize = 128;
const HASH_LISTPACK_VALUE_MAX: usize = 64;
const SET_INTSET_ENTRIES_MAX: usize = 512;
/// A quicklist node holds at most 8 KiB (`list-max-listpack-size -2`).
const QUICKLIST_NODE_BYTES_MAX: usize = 8192;
const QUICKLIST_NODE_PACKED: u64 = 2;
const QUICKLIST_NODE_PLAIN: u64 = 1;
/// Stream nodes: `stream-node-max-bytes` and `stream-node-max-entries`.
const STREAM_NODE_BYTES_MAX: usize = 4096;
const STREAM_NODE_ENTRIES_MAX: i64 = 100;
const STREAM_ITEM_DELETED: i64 = 1;
const STREAM_ITEM_SAMEFIELDS: i64 = 2;

/// Why a value has no DUMP payload.
pub const NOT_DUMPABLE_JSON: &str =
    "ERR DUMP of a JSON document is not supported: Redis 7.0's format has no type for it";
pub const NOT_DUMPABLE_FIELD_TTLS: &str =
    "ERR DUMP of a hash with field TTLs is not supported: Redis 7.0's format cannot keep them";

/// Redis's CRC-64 (Jones polynomial, reflected, initial value 0).
pub fn crc64(data: &[u8]) -> u64 {
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u64; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0x95ac_9329_ac4b_c9b5
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        t
    });
    data.iter().fold(0u64, |crc, &b| {
        table[((crc ^ b as u64) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// The DUMP payload of `v`, or the error text when Redis's format cannot hold it.
pub fn dump(v: &Value) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::new();
    match v {
        Value::Str(s) => {
            out.push(TYPE_STRING);
            put_string(&mut out, s);
        }
        Value::List(l) => dump_list(&mut out, l),
        Value::Set(s) => dump_set(&mut out, s),
        Value::ZSet(z) => dump_zset(&mut out, z),
        Value::Hash(h) => {
            if h.has_ttls() {
                return Err(NOT_DUMPABLE_FIELD_TTLS);
            }
            dump_hash(&mut out, h)
        }
        Value::Stream(s) => dump_stream(&mut out, s),
        Value::Json(_) => return Err(NOT_DUMPABLE_JSON),
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The opcode before each library in a FUNCTION DUMP payload (Redis 7.0's `RDB_OPCODE_FUNCTION2`;
/// 246 was the pre-GA form).
const OPCODE_FUNCTION2: u8 = 245;
const OPCODE_FUNCTION_PRE_GA: u8 = 246;

/// The FUNCTION DUMP payload of these libraries' code.
pub fn dump_functions<'a>(codes: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OPCODE_FUNCTION2);
        put_string(&mut out, code);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The libraries' code in a FUNCTION DUMP payload, or Redis's error text.
pub fn restore_functions(payload: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    let body =
        verified_body(payload).map_err(|_| "ERR DUMP payload version or checksum are wrong")?;
    let mut r = Reader { b: body, p: 0 };
    let mut codes = Vec::new();
    while r.p < body.len() {
        match r.byte() {
            Some(OPCODE_FUNCTION2) => {}
            Some(OPCODE_FUNCTION_PRE_GA) => return Err("ERR Pre-GA function format not supported"),
            _ => return Err("ERR given type is not a function"),
        }
        codes.push(
            r.string()
                .ok_or("ERR failed loading the given functions payload")?,
        );
    }
    Ok(codes)
}

/// The payload without its footer, once the footer's version and checksum hold.
fn verified_body(payload: &[u8]) -> Result<&[u8], LoadError> {
    if payload.len() < 10 {
        return Err(LoadError::VersionOrChecksum);
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..].try_into().map_err(|_| LoadError::BadFormat)?);
    if version > RDB_VERSION_READ_MAX || crc64(&payload[..payload.len() - 8]) != crc {
        return Err(LoadError::VersionOrChecksum);
    }
    Ok(body)
}

/// Why RESTORE refuses a payload (the two texts Redis answers).
#[derive(Debug, PartialEq, Eq)]
pub enum LoadError {
    /// Too short, a newer RDB version, or a checksum that does not match.
    VersionOrChecksum,
    /// The value inside is malformed or of a type tidepool does not read.
    BadFormat,
}

/// Checks the footer of `payload` and reads the value in it.
pub fn restore(payload: &[u8]) -> Result<Value, LoadError> {
    let body = verified_body(payload)?;
    let mut r = Reader { b: body, p: 0 };
    let v = r.value().ok_or(LoadError::BadFormat)?;
    // Redis ignores bytes after the value; so does this.
    Ok(v)
}

// ---- writing ----

fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(((n >> 8) as u8) | 0x40);
        out.push(n as u8);
    } else if n <= u32::MAX as u64 {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// `rdbSaveRawString`: a small integer as an integer, a long compressible string through LZF,
/// anything else as it is.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = parse_i64(s) {
            if let Ok(b) = i8::try_from(v) {
                out.extend_from_slice(&[0xc0, b as u8]);
                return;
            } else if let Ok(h) = i16::try_from(v) {
                out.push(0xc1);
                out.extend_from_slice(&h.to_le_bytes());
                return;
            } else if let Ok(w) = i32::try_from(v) {
                out.push(0xc2);
                out.extend_from_slice(&w.to_le_bytes());
                return;
            }
        }
    }
    if s.len() > 20 {
        if let Some(c) = lzf::compress(s, s.len() - 4) {
            out.push(0xc3);
            put_len(out, c.len() as u64);
            put_len(out, s.len() as u64);
            out.extend_from_slice(&c);
            return;
        }
    }
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// A list as Redis 7.0 keeps it: quicklist nodes of at most 8 KiB, filled from the head.
fn dump_list(out: &mut Vec<u8>, l: &crate::state::list::List) {
    out.push(TYPE_LIST_QUICKLIST_2);
    let mut nodes: Vec<Vec<u8>> = Vec::new();
    let mut node = listpack::Writer::new();
    for e in l {
        // `_quicklistNodeAllowInsert`: the listpack's size plus the element plus 8 must stay
        // within the node limit.
        if !node.is_empty() && node.len() + e.len() + 8 > QUICKLIST_NODE_BYTES_MAX {
            nodes.push(std::mem::take(&mut node).finish());
        }
        node.push(e);
    }
    if !node.is_empty() {
        nodes.push(node.finish());
    }
    put_len(out, nodes.len() as u64);
    for n in nodes {
        put_len(out, QUICKLIST_NODE_PACKED);
        put_string(out, &n);
    }
}

fn dump_set(out: &mut Vec<u8>, s: &ScanMap<()>) {
    let ints: Option<Vec<i64>> = if s.len() <= SET_INTSET_ENTRIES_MAX {
        s.keys().map(parse_i64).collect()
    } else {
        None
    };
    match ints {
        Some(mut ints) => {
            out.push(TYPE_SET_INTSET);
            put_string(out, &listpack::intset(&mut ints));
        }
        None => {
            out.push(TYPE_SET);
            put_len(out, s.len() as u64);
            for m in s.keys() {
                put_string(out, m);
            }
        }
    }
}

fn dump_zset(out: &mut Vec<u8>, z: &ZSet) {
    if z.is_skiplist() {
        // `rdbSaveObject` walks the skiplist from the tail: highest score first.
        out.push(TYPE_ZSET_2);
        put_len(out, z.len() as u64);
        for (m, s) in z.iter().rev() {
            put_string(out, m);
            out.extend_from_slice(&s.to_le_bytes());
        }
    } else {
        out.push(TYPE_ZSET_LISTPACK);
        let mut w = listpack::Writer::new();
        for (m, s) in z.iter() {
            w.push(m);
            w.push(fmt_g17(s).as_bytes());
        }
        put_string(out, &w.finish());
    }
}

fn dump_hash(out: &mut Vec<u8>, h: &Hash) {
    let small = h.len() <= HASH_LISTPACK_ENTRIES_MAX
        && h.iter()
            .all(|(f, v)| f.len() <= HASH_LISTPACK_VALUE_MAX && v.len() <= HASH_LISTPACK_VALUE_MAX);
    if small {
        out.push(TYPE_HASH_LISTPACK);
        let mut w = listpack::Writer::new();
        for (f, v) in h.iter() {
            w.push(f);
            w.push(v);
        }
        put_string(out, &w.finish());
    } else {
        out.push(TYPE_HASH);
        put_len(out, h.len() as u64);
        for (f, v) in h.iter() {
            put_string(out, f);
            put_string(out, v);
        }
    }
}

/// A stream's entries packed into nodes as `streamAppendItem` packs them.
fn dump_stream(out: &mut Vec<u8>, s: &Stream) {
    out.push(TYPE_STREAM_LISTPACKS_2);
    let mut nodes: Vec<(StreamId, Vec<u8>)> = Vec::new();
    let mut node: Option<StreamNode> = None;
    for (id, fields) in s.iter() {
        let fields = &fields.to_vec();
        let entry_bytes: usize = fields.iter().map(Vec::len).sum();
        if let Some(n) = &node {
            if n.bytes() + entry_bytes >= STREAM_NODE_BYTES_MAX
                || n.count >= STREAM_NODE_ENTRIES_MAX
            {
                if let Some(done) = node.take() {
                    nodes.push(done.finish());
                }
            }
        }
        node.get_or_insert_with(|| StreamNode::new(id, fields))
            .push(id, fields);
    }
    if let Some(done) = node {
        nodes.push(done.finish());
    }
    put_len(out, nodes.len() as u64);
    for (master, lp) in nodes {
        put_string(out, &stream_key(master));
        put_string(out, &lp);
    }
    put_len(out, s.len() as u64);
    put_id(out, s.last_id);
    put_id(out, s.first_id().unwrap_or(StreamId::MIN));
    put_id(out, s.max_deleted_id);
    put_len(out, s.entries_added);
    put_len(out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        put_string(out, name);
        put_id(out, g.last_id);
        // -1 (unknown) is written as the unsigned length it casts to, as Redis does.
        put_len(out, g.entries_read.unwrap_or(u64::MAX));
        put_len(out, g.pel.len() as u64);
        for (id, nack) in &g.pel {
            out.extend_from_slice(&stream_key(*id));
            out.extend_from_slice(&nack.delivery_ms.to_le_bytes());
            put_len(out, nack.count);
        }
        put_len(out, g.consumers.len() as u64);
        for (cname, c) in &g.consumers {
            put_string(out, cname);
            out.extend_from_slice(&c.seen_ms.to_le_bytes());
            put_len(out, c.pel.len() as u64);
            for id in &c.pel {
                out.extend_from_slice(&stream_key(*id));
            }
        }
    }
}

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    put_len(out, id.ms);
    put_len(out, id.seq);
}

/// A stream ID as a radix-tree key: milliseconds and sequence, both big-endian.
fn stream_key(id: StreamId) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&id.ms.to_be_bytes());
    k[8..].copy_from_slice(&id.seq.to_be_bytes());
    k
}

/// One stream node being filled: the master entry's fields and the entries after it.
struct StreamNode {
    master: StreamId,
    master_fields: Vec<Vec<u8>>,
    count: i64,
    entries: listpack::Writer,
}

impl StreamNode {
    fn new(master: StreamId, fields: &[Vec<u8>]) -> StreamNode {
        StreamNode {
            master,
            master_fields: fields.iter().step_by(2).cloned().collect(),
            count: 0,
            entries: listpack::Writer::new(),
        }
    }

    /// The node's listpack size so far, as Redis measures it before adding an entry.
    fn bytes(&self) -> usize {
        let mut head = listpack::Writer::new();
        self.master_entry(&mut head);
        // Both parts carry a 6-byte header and one of them a terminator.
        head.finish().len() + self.entries.len() - 7
    }

    fn master_entry(&self, w: &mut listpack::Writer) {
        w.push_int(self.count);
        w.push_int(0);
        w.push_int(self.master_fields.len() as i64);
        for f in &self.master_fields {
            w.push(f);
        }
        w.push_int(0);
    }

    fn push(&mut self, id: StreamId, fields: &[Vec<u8>]) {
        let n = fields.len() / 2;
        let same = n == self.master_fields.len()
            && fields
                .iter()
                .step_by(2)
                .zip(&self.master_fields)
                .all(|(a, b)| a == b);
        let w = &mut self.entries;
        w.push_int(if same { STREAM_ITEM_SAMEFIELDS } else { 0 });
        w.push_int(id.ms.wrapping_sub(self.master.ms) as i64);
        w.push_int(id.seq.wrapping_sub(self.master.seq) as i64);
        if same {
            for v in fields.iter().skip(1).step_by(2) {
                w.push(v);
            }
        } else {
            w.push_int(n as i64);
            for x in fields {
                w.push(x);
            }
        }
        let pieces = if same { n + 3 } else { 2 * n + 4 };
        w.push_int(pieces as i64);
        self.count += 1;
    }

    fn finish(self) -> (StreamId, Vec<u8>) {
        let mut lp = listpack::Writer::new();
        self.master_entry(&mut lp);
        let head = lp.finish();
        let tail = self.entries.finish();
        let count = u16::from_le_bytes([head[4], head[5]]) as usize
            + u16::from_le_bytes([tail[4], tail[5]]) as usize;
        let mut out = Vec::with_capacity(head.len() + tail.len());
        out.extend_from_slice(&head[..head.len() - 1]);
        out.extend_from_slice(&tail[6..]);
        let total = out.len() as u32;
        out[..4].copy_from_slice(&total.to_le_bytes());
        out[4..6].copy_from_slice(&(count.min(65535) as u16).to_le_bytes());
        (self.master, out)
    }
}

// ---- reading ----

struct Reader<'a> {
    b: &'a [u8],
    p: usize,
}

/// A length, or an encoded string's marker (`11xxxxxx`).
enum Len {
    Plain(u64),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.p.checked_add(n)?;
        let s = self.b.get(self.p..end)?;
        self.p = end;
        Some(s)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }

    fn len_or_encoding(&mut self) -> Option<Len> {
        let b = self.byte()?;
        Some(match b >> 6 {
            0 => Len::Plain((b & 0x3f) as u64),
            1 => Len::Plain((((b & 0x3f) as u64) << 8) | self.byte()? as u64),
            2 => match b {
                0x80 => Len::Plain(u32::from_be_bytes(self.bytes(4)?.try_into().ok()?) as u64),
                0x81 => Len::Plain(u64::from_be_bytes(self.bytes(8)?.try_into().ok()?)),
                _ => return None,
            },
            _ => Len::Encoded(b & 0x3f),
        })
    }

    fn len(&mut self) -> Option<u64> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Some(n),
            Len::Encoded(_) => None,
        }
    }

    /// A count of things that follow, each at least one byte: bounded by what is left.
    fn count(&mut self) -> Option<usize> {
        let n = self.len()?;
        (n <= (self.b.len() - self.p) as u64).then_some(n as usize)
    }

    fn string(&mut self) -> Option<Vec<u8>> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Some(self.bytes(usize::try_from(n).ok()?)?.to_vec()),
            Len::Encoded(0) => Some((self.byte()? as i8).to_string().into_bytes()),
            Len::Encoded(1) => {
                let v = i16::from_le_bytes(self.bytes(2)?.try_into().ok()?);
                Some(v.to_string().into_bytes())
            }
            Len::Encoded(2) => {
                let v = i32::from_le_bytes(self.bytes(4)?.try_into().ok()?);
                Some(v.to_string().into_bytes())
            }
            Len::Encoded(3) => {
                let clen = usize::try_from(self.len()?).ok()?;
                let len = usize::try_from(self.len()?).ok()?;
                let c = self.bytes(clen)?;
                // An LZF expansion is at most about 132x (a 3-byte reference for 264 bytes).
                if len > clen.saturating_mul(132) + 64 {
                    return None;
                }
                lzf::decompress(c, len)
            }
            Len::Encoded(_) => None,
        }
    }

    fn u64_le(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    fn id(&mut self) -> Option<StreamId> {
        Some(StreamId {
            ms: self.len()?,
            seq: self.len()?,
        })
    }

    fn raw_id(&mut self) -> Option<StreamId> {
        let k = self.bytes(16)?;
        Some(StreamId {
            ms: u64::from_be_bytes(k[..8].try_into().ok()?),
            seq: u64::from_be_bytes(k[8..].try_into().ok()?),
        })
    }

    fn value(&mut self) -> Option<Value> {
        let t = self.byte()?;
        let v = match t {
            TYPE_STRING => Value::Str(crate::state::Str::from(self.string()?)),
            TYPE_LIST => {
                let n = self.count()?;
                let mut l = VecDeque::with_capacity(n);
                for _ in 0..n {
                    l.push_back(self.string()?);
                }
                Value::List(l.into())
            }
            TYPE_LIST_QUICKLIST_2 => Value::List(self.quicklist()?.into()),
            TYPE_SET => {
                let n = self.count()?;
                let mut s = ScanMap::new();
                for _ in 0..n {
                    if s.insert(&self.string()?, ()).is_some() {
                        return None;
                    }
                }
                Value::Set(Box::new(s))
            }
            TYPE_SET_INTSET => {
                let mut s = ScanMap::new();
                for v in listpack::read_intset(&self.string()?)? {
                    s.insert(v.to_string().as_bytes(), ());
                }
                Value::Set(Box::new(s))
            }
            TYPE_SET_LISTPACK => {
                let mut s = ScanMap::new();
                for m in listpack::read(&self.string()?)? {
                    if s.insert(&m.into_bytes(), ()).is_some() {
                        return None;
                    }
                }
                Value::Set(Box::new(s))
            }
            TYPE_ZSET | TYPE_ZSET_2 => {
                let n = self.count()?;
                let mut z = ZSet::computed();
                for _ in 0..n {
                    let m = self.string()?;
                    let score = if t == TYPE_ZSET_2 {
                        f64::from_bits(self.u64_le()?)
                    } else {
                        let n = self.byte()?;
                        match n {
                            253 => f64::NAN,
                            254 => f64::INFINITY,
                            255 => f64::NEG_INFINITY,
                            _ => parse_f64(self.bytes(n as usize)?)?,
                        }
                    };
                    if score.is_nan() || z.insert(&m, score).is_some() {
                        return None;
                    }
                }
                Value::ZSet(Box::new(z.into_stored()))
            }
            TYPE_ZSET_LISTPACK => {
                let mut z = ZSet::new();
                for (m, s) in self.listpack_pairs()? {
                    let score = match s {
                        Item::Int(i) => i as f64,
                        Item::Str(s) => parse_f64(&s)?,
                    };
                    if score.is_nan() || z.insert(&m.into_bytes(), score).is_some() {
                        return None;
                    }
                }
                Value::ZSet(Box::new(z))
            }
            TYPE_HASH => {
                let n = self.count()?;
                let mut h = Hash::new();
                for _ in 0..n {
                    let f = self.string()?;
                    if h.insert(&f, self.string()?).is_some() {
                        return None;
                    }
                }
                Value::Hash(Box::new(h))
            }
            TYPE_HASH_LISTPACK => {
                let mut h = Hash::new();
                for (f, v) in self.listpack_pairs()? {
                    if h.insert(&f.into_bytes(), v.into_bytes()).is_some() {
                        return None;
                    }
                }
                Value::Hash(Box::new(h))
            }
            TYPE_STREAM_LISTPACKS | TYPE_STREAM_LISTPACKS_2 | TYPE_STREAM_LISTPACKS_3 => {
                Value::Stream(Box::new(self.stream(t)?))
            }
            _ => return None,
        };
        // Redis refuses empty collections in a payload; a stream may be empty.
        let empty = match &v {
            Value::List(l) => l.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::Hash(h) => h.is_empty(),
            _ => false,
        };
        (!empty).then_some(v)
    }

    /// A listpack of (member, score) or (field, value) pairs.
    fn listpack_pairs(&mut self) -> Option<Vec<(Item, Item)>> {
        let items = listpack::read(&self.string()?)?;
        if items.len() % 2 == 1 {
            return None;
        }
        let mut it = items.into_iter();
        let mut pairs = Vec::new();
        while let (Some(a), Some(b)) = (it.next(), it.next()) {
            pairs.push((a, b));
        }
        Some(pairs)
    }

    fn quicklist(&mut self) -> Option<VecDeque<Vec<u8>>> {
        let nodes = self.count()?;
        let mut l = VecDeque::new();
        for _ in 0..nodes {
            let container = self.len()?;
            let data = self.string()?;
            match container {
                QUICKLIST_NODE_PLAIN => l.push_back(data),
                QUICKLIST_NODE_PACKED => {
                    let items = listpack::read(&data)?;
                    if items.is_empty() {
                        return None;
                    }
                    l.extend(items.into_iter().map(Item::into_bytes));
                }
                _ => return None,
            }
        }
        Some(l)
    }

    fn stream(&mut self, t: u8) -> Option<Stream> {
        let mut s = Stream::new();
        let nodes = self.count()?;
        for _ in 0..nodes {
            let key = self.string()?;
            if key.len() != 16 {
                return None;
            }
            let master = StreamId {
                ms: u64::from_be_bytes(key[..8].try_into().ok()?),
                seq: u64::from_be_bytes(key[8..].try_into().ok()?),
            };
            let items = listpack::read(&self.string()?)?;
            for (id, fields) in stream_node_entries(master, items)? {
                if s.last_id >= id && !s.is_empty() {
                    return None;
                }
                s.append(id, &fields);
            }
        }
        let length = self.len()?;
        let last_id = self.id()?;
        if length != s.len() as u64 || s.last_entry_id().is_some_and(|k| k > last_id) {
            return None;
        }
        s.last_id = last_id;
        if t == TYPE_STREAM_LISTPACKS {
            s.entries_added = length;
        } else {
            let _first_id = self.id()?;
            s.max_deleted_id = self.id()?;
            s.entries_added = self.len()?;
        }
        let groups = self.count()?;
        for _ in 0..groups {
            let name = self.string()?;
            let mut g = Group {
                last_id: self.id()?,
                ..Group::default()
            };
            if t != TYPE_STREAM_LISTPACKS {
                let read = self.len()?;
                g.entries_read = (read != u64::MAX).then_some(read);
            }
            let pel = self.count()?;
            for _ in 0..pel {
                let id = self.raw_id()?;
                let delivery_ms = self.u64_le()?;
                let count = self.len()?;
                let nack = Nack {
                    consumer: Vec::new(),
                    delivery_ms,
                    count,
                };
                if g.pel.insert(id, nack).is_some() {
                    return None;
                }
            }
            let consumers = self.count()?;
            for _ in 0..consumers {
                let cname = self.string()?;
                let seen_ms = self.u64_le()?;
                if t == TYPE_STREAM_LISTPACKS_3 {
                    let _active_ms = self.u64_le()?;
                }
                let mut c = Consumer {
                    seen_ms,
                    pel: BTreeSet::new(),
                };
                let owned = self.count()?;
                for _ in 0..owned {
                    let id = self.raw_id()?;
                    let nack = g.pel.get_mut(&id)?;
                    if !nack.consumer.is_empty() || !c.pel.insert(id) {
                        return None;
                    }
                    nack.consumer = cname.clone();
                }
                if g.consumers.insert(cname, c).is_some() {
                    return None;
                }
            }
            // Every pending entry belongs to a consumer.
            if g.pel.values().any(|n| n.consumer.is_empty()) {
                return None;
            }
            if s.groups.insert(name, g).is_some() {
                return None;
            }
        }
        Some(s)
    }
}

/// The live entries of one stream node: (ID, field, value, field, value ...).
fn stream_node_entries(
    master: StreamId,
    items: Vec<Item>,
) -> Option<Vec<(StreamId, Vec<Vec<u8>>)>> {
    let mut it = items.into_iter();
    let int = |it: &mut std::vec::IntoIter<Item>| it.next()?.int();
    let count = int(&mut it)?;
    let deleted = int(&mut it)?;
    let nfields = usize::try_from(int(&mut it)?).ok()?;
    let mut master_fields = Vec::new();
    for _ in 0..nfields {
        master_fields.push(it.next()?.into_bytes());
    }
    if int(&mut it)? != 0 || count < 0 || deleted < 0 || count.checked_add(deleted)? == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut seen = 0i64;
    while let Some(flags) = it.next() {
        let flags = flags.int()?;
        let ms = master.ms.wrapping_add(int(&mut it)? as u64);
        let seq = master.seq.wrapping_add(int(&mut it)? as u64);
        let mut fields = Vec::new();
        let pieces = if flags & STREAM_ITEM_SAMEFIELDS != 0 {
            for f in &master_fields {
                fields.push(f.clone());
                fields.push(it.next()?.into_bytes());
            }
            master_fields.len() + 3
        } else {
            let n = usize::try_from(int(&mut it)?).ok()?;
            if n == 0 || n > 1 << 30 {
                return None;
            }
            for _ in 0..2 * n {
                fields.push(it.next()?.into_bytes());
            }
            2 * n + 4
        };
        if int(&mut it)? != pieces as i64 {
            return None;
        }
        seen += 1;
        if flags & STREAM_ITEM_DELETED == 0 {
            out.push((StreamId { ms, seq }, fields));
        }
    }
    (Some(seen) == count.checked_add(deleted) && out.len() as i64 == count).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_check_value() {
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn string_payload_is_redis_bytes() {
        // Redis 7.0: SET k hello; DUMP k
        let want = b"\x00\x05hello\x0a\x00".to_vec();
        let got = dump(&Value::Str(crate::state::Str::from(b"hello".to_vec()))).expect("dumpable");
        assert_eq!(&got[..want.len()], &want[..]);
        assert_eq!(
            restore(&got),
            Ok(Value::Str(crate::state::Str::from(b"hello".to_vec())))
        );
    }

    #[test]
    fn refuses_damage() {
        let good = dump(&Value::Str(crate::state::Str::from(
            b"hello world, hello world, hello".to_vec(),
        )))
        .expect("ok");
        let mut bad = good.clone();
        bad[3] ^= 1;
        assert_eq!(restore(&bad), Err(LoadError::VersionOrChecksum));
        assert_eq!(restore(&good[..5]), Err(LoadError::VersionOrChecksum));
        let mut newer = good.clone();
        let n = newer.len();
        newer[n - 10] = 13;
        let crc = crc64(&newer[..n - 8]);
        newer[n - 8..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(restore(&newer), Err(LoadError::VersionOrChecksum));
    }

    /// One value of every type and encoding, with a consumer group holding pending entries.
    fn samples() -> Vec<Value> {
        let mut out = vec![
            Value::Str(crate::state::Str::from(b"123".to_vec())),
            Value::Str(crate::state::Str::from(
                b"abcabcabcabcabcabcabcabcabcabc".to_vec(),
            )),
        ];
        let list: VecDeque<Vec<u8>> = (0..300)
            .map(|i| format!("item{}", i % 7).into_bytes())
            .collect();
        out.push(Value::List(list.into()));
        for members in [vec!["1", "2", "-300"], vec!["a", "b", "c"]] {
            let mut s = ScanMap::new();
            for m in members {
                s.insert(m.as_bytes(), ());
            }
            out.push(Value::Set(Box::new(s)));
        }
        for n in [3, 200] {
            let mut z = ZSet::new();
            for i in 0..n {
                z.insert(format!("m{i}").as_bytes(), i as f64 / 3.0);
            }
            out.push(Value::ZSet(Box::new(z)));
        }
        let mut h = Hash::new();
        h.insert(b"f", b"v".to_vec());
        h.insert(b"n", b"12".to_vec());
        out.push(Value::Hash(Box::new(h)));
        let mut st = Stream::new();
        for i in 1..40u64 {
            st.append(
                StreamId { ms: i, seq: 0 },
                &[b"f".to_vec(), i.to_string().into_bytes()],
            );
        }
        let mut g = Group::default();
        let id = StreamId { ms: 3, seq: 0 };
        g.pel.insert(
            id,
            Nack {
                consumer: b"c".to_vec(),
                delivery_ms: 5,
                count: 1,
            },
        );
        let mut c = Consumer::default();
        c.pel.insert(id);
        g.consumers.insert(b"c".to_vec(), c);
        st.groups.insert(b"g".to_vec(), g);
        out.push(Value::Stream(Box::new(st)));
        out
    }

    #[test]
    fn every_sample_round_trips() {
        for v in samples() {
            let p = dump(&v).expect("dumpable");
            assert_eq!(restore(&p).as_ref(), Ok(&v));
        }
    }

    /// Damaged payloads with a correct checksum reach the parser: it must refuse them or read
    /// something, never panic.
    #[test]
    fn damaged_payloads_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for v in samples() {
            let p = dump(&v).expect("dumpable");
            let body = &p[..p.len() - 10];
            for _ in 0..3000 {
                let mut b = body.to_vec();
                match next() % 4 {
                    0 => {
                        let i = (next() as usize) % b.len();
                        b[i] = next() as u8;
                    }
                    1 => b.truncate((next() as usize) % b.len()),
                    2 => {
                        let i = (next() as usize) % b.len();
                        b[i] ^= 1 << (next() % 8);
                    }
                    _ => {
                        let i = (next() as usize) % b.len();
                        b.insert(i, next() as u8);
                    }
                }
                b.extend_from_slice(&RDB_VERSION.to_le_bytes());
                let crc = crc64(&b);
                b.extend_from_slice(&crc.to_le_bytes());
                let _ = restore(&b);
                let _ = restore_functions(&b);
            }
        }
    }
}
