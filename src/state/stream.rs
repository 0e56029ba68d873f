//! A stream: entries ordered by ID in a B-tree (XRANGE is O(log n + m)), and a model of how
//! Redis packs entries into nodes, because approximate trimming (`MAXLEN ~`) removes whole
//! nodes and so decides what is left.
//!
//! Redis appends to the last node while it holds fewer than `stream-node-max-entries` (100)
//! entries, deleted ones included, and fewer than `stream-node-max-bytes` (4096) bytes. The byte
//! limit is modelled from the entries' field and value lengths; entries with large values may
//! cut nodes at slightly different places than Redis does.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Entries per node (Redis's `stream-node-max-entries` default).
pub const NODE_ENTRIES_MAX: usize = 100;
/// Bytes per node (Redis's `stream-node-max-bytes` default).
pub const NODE_BYTES_MAX: usize = 4096;
/// More bytes than any node holds (a node takes one entry of any size, and keeps the bytes of
/// deleted ones): a loaded node past it is damage.
const NODE_BYTES_LIMIT: usize = 1 << 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub fn text(&self) -> Vec<u8> {
        format!("{}-{}", self.ms, self.seq).into_bytes()
    }

    pub fn next(&self) -> Option<StreamId> {
        if self.seq < u64::MAX {
            Some(StreamId {
                ms: self.ms,
                seq: self.seq + 1,
            })
        } else if self.ms < u64::MAX {
            Some(StreamId {
                ms: self.ms + 1,
                seq: 0,
            })
        } else {
            None
        }
    }

    pub fn prev(&self) -> Option<StreamId> {
        if self.seq > 0 {
            Some(StreamId {
                ms: self.ms,
                seq: self.seq - 1,
            })
        } else if self.ms > 0 {
            Some(StreamId {
                ms: self.ms - 1,
                seq: u64::MAX,
            })
        } else {
            None
        }
    }
}

/// An entry's fields and values, packed in one allocation: each as a length (LEB128) and its
/// bytes. Where an entry was a vector of vectors (a header and an allocation for each field
/// and value, about 250 bytes for two short pairs), it is now one allocation of about 32.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Fields(Box<[u8]>);

impl Fields {
    pub fn new(items: &[Vec<u8>]) -> Fields {
        let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 2).sum());
        for i in items {
            let mut n = i.len();
            loop {
                let b = (n & 0x7f) as u8;
                n >>= 7;
                if n == 0 {
                    out.push(b);
                    break;
                }
                out.push(b | 0x80);
            }
            out.extend_from_slice(i);
        }
        Fields(out.into_boxed_slice())
    }

    /// Each field and value, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let buf = &self.0;
        let mut at = 0usize;
        std::iter::from_fn(move || {
            let mut n = 0usize;
            let mut shift = 0u32;
            loop {
                let b = *buf.get(at)?;
                at += 1;
                n |= usize::from(b & 0x7f).checked_shl(shift)?;
                if b & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
            let item = buf.get(at..at.checked_add(n)?)?;
            at += n;
            Some(item)
        })
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn to_vec(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }
}

impl From<Vec<Vec<u8>>> for Fields {
    fn from(items: Vec<Vec<u8>>) -> Fields {
        Fields::new(&items)
    }
}

impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// One node: the IDs it holds (live or deleted) and its modelled size.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Every entry ever appended to this node, in order, with whether it is deleted.
    pub ids: Vec<(StreamId, bool)>,
    pub live: usize,
    pub bytes: usize,
}

/// A trimming strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    MaxLen(usize),
    MinId(StreamId),
}

/// A pending entry: delivered to a consumer of the group and not acknowledged yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Nack {
    pub consumer: Vec<u8>,
    pub delivery_ms: u64,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Consumer {
    pub seen_ms: u64,
    pub pel: BTreeSet<StreamId>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Group {
    pub last_id: StreamId,
    /// Logical count of entries the group has read; `None` when unknown (Redis's -1).
    pub entries_read: Option<u64>,
    pub pel: BTreeMap<StreamId, Nack>,
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stream {
    pub entries: BTreeMap<StreamId, Fields>,
    pub last_id: StreamId,
    pub max_deleted_id: StreamId,
    pub entries_added: u64,
    nodes: VecDeque<Node>,
    pub groups: BTreeMap<Vec<u8>, Group>,
    /// The bytes of the entries (16 for an ID, and their fields and values) together, kept by
    /// `append`, `delete` and `trim`; `recount` after filling `entries` directly.
    data_bytes: usize,
}

/// An entry's bytes for the value-size and data-size limits.
fn data_bytes_of(fields: &Fields) -> usize {
    16 + fields.iter().map(<[u8]>::len).sum::<usize>()
}

fn entry_bytes(fields: &Fields) -> usize {
    // A listpack entry: each string with a small header, plus flags, ID deltas and a backlen.
    fields.iter().map(|f| f.len() + 2).sum::<usize>() + 6
}

impl Stream {
    pub fn new() -> Stream {
        Stream::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes of the entries together.
    pub fn data_bytes(&self) -> usize {
        self.data_bytes
    }

    /// The bytes of the consumer groups: each group's name and position (24), each pending
    /// entry (an ID, a delivery count and time: 32), each consumer's name and times (16) and
    /// its pending IDs (16 each). Walked, not kept: a stream has few groups and consumers, and
    /// the pending entries are counted by their maps' lengths.
    pub fn groups_bytes(&self) -> usize {
        self.groups
            .iter()
            .map(|(name, g)| {
                name.len()
                    + 24
                    + 32 * g.pel.len()
                    + g.consumers
                        .iter()
                        .map(|(c, consumer)| c.len() + 16 + 16 * consumer.pel.len())
                        .sum::<usize>()
            })
            .sum()
    }

    /// Counts the entries' bytes again (after a loader filled `entries` directly).
    pub fn recount(&mut self) {
        self.data_bytes = self.entries.values().map(data_bytes_of).sum();
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The modelled nodes, deleted entries included (a snapshot keeps them: approximate
    /// trimming and XINFO depend on them).
    pub fn nodes(&self) -> &VecDeque<Node> {
        &self.nodes
    }

    /// Puts back the nodes a snapshot kept, with the entries already in place.
    pub fn set_nodes(&mut self, nodes: VecDeque<Node>) {
        self.nodes = nodes;
    }

    /// Whether the parts agree (a loaded stream is checked before use): each node counts its
    /// live entries and holds at most `NODE_ENTRIES_MAX`; the nodes' live IDs, in order, are
    /// the entries' IDs; the last ID is at or after every entry; every pending entry belongs
    /// to a consumer that lists it, and every consumer's entry is pending under its name.
    pub fn check(&self) -> Result<(), String> {
        let mut entries = self.entries.keys();
        for (i, n) in self.nodes.iter().enumerate() {
            let live = n.ids.iter().filter(|(_, gone)| !*gone).count();
            if live != n.live {
                return Err(format!(
                    "stream node {i} says {} live entries and holds {live}",
                    n.live
                ));
            }
            if n.ids.len() > NODE_ENTRIES_MAX || n.bytes > NODE_BYTES_LIMIT {
                return Err(format!("stream node {i} is larger than a node can be"));
            }
            for (id, _) in n.ids.iter().filter(|(_, gone)| !*gone) {
                if entries.next() != Some(id) {
                    return Err(format!(
                        "stream node {i} lists entry {id}, which is not the next entry"
                    ));
                }
            }
        }
        if let Some(id) = entries.next() {
            return Err(format!("the stream entry {id} is in no node"));
        }
        if self
            .entries
            .keys()
            .next_back()
            .is_some_and(|id| *id > self.last_id)
        {
            return Err(format!(
                "the stream's last ID {} is before its last entry",
                self.last_id
            ));
        }
        if self.entries_added < self.entries.len() as u64 {
            return Err("the stream counts fewer entries added than it holds".into());
        }
        for (name, g) in &self.groups {
            let group = String::from_utf8_lossy(name);
            for (id, nack) in &g.pel {
                if !g
                    .consumers
                    .get(&nack.consumer)
                    .is_some_and(|c| c.pel.contains(id))
                {
                    return Err(format!(
                        "group {group:?}: the pending entry {id} is not its consumer's"
                    ));
                }
            }
            for (consumer, c) in &g.consumers {
                if let Some(id) = c
                    .pel
                    .iter()
                    .find(|id| g.pel.get(id).is_none_or(|n| &n.consumer != consumer))
                {
                    return Err(format!(
                        "group {group:?}: consumer {:?} lists {id}, which is not pending under its name",
                        String::from_utf8_lossy(consumer)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Appends an entry whose ID is known to be greater than `last_id`.
    pub fn append(&mut self, id: StreamId, fields: Vec<Vec<u8>>) {
        let fields = Fields::new(&fields);
        let bytes = entry_bytes(&fields);
        let fits = self
            .nodes
            .back()
            .is_some_and(|n| n.ids.len() < NODE_ENTRIES_MAX && n.bytes + bytes <= NODE_BYTES_MAX);
        if !fits {
            self.nodes.push_back(Node {
                ids: Vec::new(),
                live: 0,
                bytes: 0,
            });
        }
        if let Some(n) = self.nodes.back_mut() {
            n.ids.push((id, false));
            n.live += 1;
            n.bytes += bytes;
        }
        self.data_bytes += data_bytes_of(&fields);
        if let Some(old) = self.entries.insert(id, fields) {
            self.data_bytes -= data_bytes_of(&old);
        }
        self.last_id = id;
        self.entries_added += 1;
    }

    /// Deletes one entry (XDEL): marked deleted in its node; an emptied node goes away.
    pub fn delete(&mut self, id: StreamId) -> bool {
        match self.entries.remove(&id) {
            None => return false,
            Some(old) => self.data_bytes -= data_bytes_of(&old),
        }
        // XSETID can move the last ID back, so an ID deleted from one node can be added again
        // to a later one: look for the live copy, node by node from the first that may hold it.
        let mut idx = self
            .nodes
            .partition_point(|n| n.ids.last().is_some_and(|(last, _)| *last < id));
        while let Some(n) = self.nodes.get_mut(idx) {
            if let Some(slot) = n.ids.iter_mut().find(|(i, d)| *i == id && !*d) {
                slot.1 = true;
                n.live -= 1;
                if n.live == 0 {
                    self.nodes.remove(idx);
                }
                break;
            }
            if n.ids.first().is_none_or(|(first, _)| *first > id) {
                break;
            }
            idx += 1;
        }
        if id > self.max_deleted_id {
            self.max_deleted_id = id;
        }
        true
    }

    /// Trims from the head exactly as Redis's `streamTrim` does: whole nodes while that keeps
    /// the stream at the threshold (MAXLEN) or the node's last ID is below it (MINID); then,
    /// unless `approx`, single entries of the next node. `limit` (0: none) caps the entries
    /// removed, checked a node at a time. Returns how many entries went.
    pub fn trim(&mut self, how: Trim, approx: bool, limit: usize) -> usize {
        let mut deleted = 0;
        loop {
            if let Trim::MaxLen(m) = how {
                if self.entries.len() <= m {
                    break;
                }
            }
            let Some(node) = self.nodes.front() else {
                break;
            };
            let live = node.live;
            if limit > 0 && deleted + live > limit {
                break;
            }
            let remove_node = match how {
                Trim::MaxLen(m) => self.entries.len() - live >= m,
                // The node's last ID, deleted entries included (as Redis reads it).
                Trim::MinId(min) => node.ids.last().is_some_and(|(last, _)| *last < min),
            };
            if remove_node {
                if let Some(node) = self.nodes.pop_front() {
                    for (id, gone) in node.ids {
                        if !gone {
                            if let Some(old) = self.entries.remove(&id) {
                                self.data_bytes -= data_bytes_of(&old);
                            }
                        }
                    }
                }
                deleted += live;
                continue;
            }
            if approx {
                break;
            }
            let ids: Vec<StreamId> = node
                .ids
                .iter()
                .filter(|(_, gone)| !*gone)
                .map(|(i, _)| *i)
                .collect();
            for id in ids {
                let stop = match how {
                    Trim::MaxLen(m) => self.entries.len() <= m,
                    Trim::MinId(min) => id >= min,
                };
                if stop {
                    break;
                }
                if let Some(old) = self.entries.remove(&id) {
                    self.data_bytes -= data_bytes_of(&old);
                }
                if let Some(n) = self.nodes.front_mut() {
                    if let Some(slot) = n.ids.iter_mut().find(|(i, d)| *i == id && !*d) {
                        slot.1 = true;
                    }
                    n.live -= 1;
                }
                deleted += 1;
            }
            break;
        }
        deleted
    }

    /// How many entries the hosted service's approximate trim (`~`) removes: it trims to the
    /// threshold, not to a node's edge, removing at most `limit` entries (0: no limit).
    pub fn hosted_trim_count(&self, how: Trim, limit: usize) -> usize {
        let cap = if limit == 0 { usize::MAX } else { limit };
        match how {
            Trim::MaxLen(m) => self.entries.len().saturating_sub(m).min(cap),
            Trim::MinId(min) => self.entries.range(..min).take(cap).count(),
        }
    }

    pub fn first_id(&self) -> Option<StreamId> {
        self.entries.keys().next().copied()
    }

    /// Whether the deleted range may hold a tombstone at or after `start` (Redis's
    /// `streamRangeHasTombstones` with no end).
    pub fn has_tombstones_from(&self, start: StreamId) -> bool {
        let Some(first) = self.first_id() else {
            return false;
        };
        if self.max_deleted_id == StreamId::MIN || first > self.max_deleted_id {
            return false;
        }
        start <= self.max_deleted_id
    }

    /// Redis's `streamEstimateDistanceFromFirstEverEntry`: the logical position of `id`, when
    /// it can be known.
    pub fn estimate_distance(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.entries.is_empty() && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        }
        if id > self.last_id {
            return None;
        }
        let first = self.first_id().unwrap_or(StreamId::MIN);
        if self.max_deleted_id == StreamId::MIN || self.max_deleted_id < first {
            if id < first {
                return Some(self.entries_added - self.entries.len() as u64);
            }
            if id == first {
                return Some(self.entries_added - self.entries.len() as u64 + 1);
            }
        }
        None
    }

    /// A group's lag (XINFO GROUPS), when it can be known. Signed, as Redis computes it: a
    /// group told (ENTRIESREAD) it read more than was ever added shows a negative lag.
    pub fn lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        let added = self.entries_added as i64;
        if let Some(read) = g.entries_read {
            if !self.has_tombstones_from(g.last_id) {
                return Some(added - read as i64);
            }
        }
        self.estimate_distance(g.last_id)
            .map(|read| added - read as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed fields give back what they were given: empty ones, and lengths past one byte of
    /// LEB128.
    #[test]
    fn packed_fields_read_back() {
        let items = vec![
            b"sensor".to_vec(),
            b"".to_vec(),
            vec![b'x'; 300],
            vec![b'y'; 20_000],
        ];
        let f = Fields::new(&items);
        assert_eq!(f.to_vec(), items);
        assert_eq!(f.len(), 4);
        assert!(Fields::new(&[]).is_empty());
        assert_eq!(Fields::from(items.clone()), f);
    }
}
