//! Monitor and publish/subscribe fan-out, run on the executor thread so events leave in
//! execution order. Every stream has a bounded buffer; a stream that falls behind is marked
//! lagged and dropped, and its HTTP side tells the client before closing. What goes out is
//! each event's payload (`subscribe,news,1`, a MONITOR line): the wire format of the stream
//! (server-sent events) is the HTTP side's, `http::sse`.

use crate::clock;
use crate::config;
use crate::glob::glob_match;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What the executor hands a stream.
#[derive(Debug, Clone)]
pub enum StreamItem {
    /// One event's payload, shared by every stream that hears it.
    Event(Bytes),
    /// The stream ends, and why (its database's tokens were reset, say).
    End(Arc<str>),
}

impl StreamItem {
    /// The bytes it counts against the stream's buffer.
    pub fn len(&self) -> usize {
        match self {
            StreamItem::Event(b) => b.len(),
            StreamItem::End(_) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub enum SubKind {
    Monitor,
    Channels(Vec<Vec<u8>>),
    Patterns(Vec<Vec<u8>>),
}

/// How a stream's events are written: as the payloads of server-sent events (the HTTP side
/// frames them), or as a RESP connection's push replies (RESP2 arrays, RESP3 pushes; a
/// MONITOR line as a status reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Sse,
    Resp2,
    Resp3,
    /// A RESP connection's SSUBSCRIBE: its messages are `smessage` (RESP2 or RESP3).
    Shard(bool),
}

/// One event (`message`, channel, payload) as `wire` writes it.
fn event(wire: Wire, parts: &[&[u8]]) -> Bytes {
    let (head, parts) = match wire {
        Wire::Sse => return line(parts),
        Wire::Resp2 | Wire::Shard(false) => (b'*', parts),
        Wire::Resp3 | Wire::Shard(true) => (b'>', parts),
    };
    let mut out = Vec::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    out.push(head);
    out.extend_from_slice(parts.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for (i, p) in parts.iter().enumerate() {
        let p: &[u8] = if i == 0 && matches!(wire, Wire::Shard(_)) && *p == b"message" {
            b"smessage"
        } else {
            p
        };
        out.push(b'$');
        out.extend_from_slice(p.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    Bytes::from(out)
}

/// Events written once for each wire that hears them.
#[derive(Default)]
struct Encoded([Option<Bytes>; 5]);

impl Encoded {
    fn get(&mut self, wire: Wire, parts: &[&[u8]]) -> Bytes {
        let i = match wire {
            Wire::Sse => 0,
            Wire::Resp2 => 1,
            Wire::Resp3 => 2,
            Wire::Shard(false) => 3,
            Wire::Shard(true) => 4,
        };
        self.0[i].get_or_insert_with(|| event(wire, parts)).clone()
    }
}

/// One event stream as the executor sees it.
pub struct SubscriberHandle {
    pub id: u64,
    /// The database whose events it hears.
    pub db: crate::state::databases::DbId,
    pub kind: SubKind,
    pub tx: mpsc::Sender<StreamItem>,
    /// Set when the buffer was full and the stream was dropped.
    pub lagged: Arc<AtomicBool>,
    /// Bytes queued and not yet taken by the stream's connection (the body subtracts what it
    /// takes): past SUBSCRIBER_BUFFER_BYTES_MAX the stream is dropped as fallen behind.
    pub queued: Arc<AtomicUsize>,
    /// Told whether the stream opened (None) or why it was refused, before its first event.
    pub opened: Option<tokio::sync::oneshot::Sender<Option<String>>>,
    pub wire: Wire,
}

impl SubscriberHandle {
    /// Queues an event; false when the stream is gone or fell behind (and is now marked so).
    fn deliver(&self, event: Bytes) -> bool {
        let len = event.len();
        let event = StreamItem::Event(event);
        if self.queued.load(Ordering::Acquire) + len > config::SUBSCRIBER_BUFFER_BYTES_MAX {
            self.lagged.store(true, Ordering::SeqCst);
            return false;
        }
        // Counted before it is queued: the body subtracts it once it takes it, which may be
        // at once.
        self.queued.fetch_add(len, Ordering::AcqRel);
        match self.tx.try_send(event) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.queued.fetch_sub(len, Ordering::AcqRel);
                self.lagged.store(true, Ordering::SeqCst);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.queued.fetch_sub(len, Ordering::AcqRel);
                false
            }
        }
    }
}

#[derive(Default)]
pub struct PubSub {
    monitors: Vec<SubscriberHandle>,
    subs: HashMap<u64, SubscriberHandle>,
    channels: HashMap<Vec<u8>, Vec<u64>>,
    /// Shard channels (SSUBSCRIBE): a namespace of their own, which only SPUBLISH reaches.
    shard: HashMap<Vec<u8>, Vec<u64>>,
    patterns: Vec<(Vec<u8>, u64)>,
}

fn line(parts: &[&[u8]]) -> Bytes {
    Bytes::from(parts.join(&b","[..]))
}

impl PubSub {
    pub fn monitor_count(&self) -> usize {
        self.monitors.len()
    }
    pub fn subscriber_count(&self) -> usize {
        self.subs.len()
    }

    pub fn add(&mut self, mut h: SubscriberHandle) {
        if let Some(o) = h.opened.take() {
            let _ = o.send(None);
        }
        // A RESP connection answers its own SUBSCRIBE and MONITOR.
        let confirm = h.wire == Wire::Sse;
        match &h.kind {
            SubKind::Monitor => {
                if !confirm || h.deliver(Bytes::from_static(b"\"OK\"")) {
                    self.monitors.push(h);
                }
            }
            SubKind::Channels(chs) => {
                let map = match h.wire {
                    Wire::Shard(_) => &mut self.shard,
                    _ => &mut self.channels,
                };
                for (i, ch) in chs.iter().enumerate() {
                    if confirm {
                        h.deliver(line(&[b"subscribe", ch, (i + 1).to_string().as_bytes()]));
                    }
                    map.entry(ch.clone()).or_default().push(h.id);
                }
                self.subs.insert(h.id, h);
            }
            SubKind::Patterns(pats) => {
                for (i, p) in pats.iter().enumerate() {
                    if confirm {
                        h.deliver(line(&[b"psubscribe", p, (i + 1).to_string().as_bytes()]));
                    }
                    self.patterns.push((p.clone(), h.id));
                }
                self.subs.insert(h.id, h);
            }
        }
    }

    /// A RESP connection subscribes to more channels or patterns on its stream `id`.
    /// A RESP connection changed protocol (HELLO): its stream `id` writes in the new one.
    pub fn rewire(&mut self, id: u64, resp3: bool) {
        let to = |w: Wire| match w {
            Wire::Shard(_) => Wire::Shard(resp3),
            Wire::Sse => Wire::Sse,
            _ if resp3 => Wire::Resp3,
            _ => Wire::Resp2,
        };
        if let Some(h) = self.subs.get_mut(&id) {
            h.wire = to(h.wire);
        }
        for m in self.monitors.iter_mut().filter(|m| m.id == id) {
            m.wire = to(m.wire);
        }
    }

    pub fn extend(&mut self, id: u64, more: SubKind) {
        let Some(h) = self.subs.get_mut(&id) else {
            return;
        };
        let map = match h.wire {
            Wire::Shard(_) => &mut self.shard,
            _ => &mut self.channels,
        };
        match (&mut h.kind, more) {
            (SubKind::Channels(have), SubKind::Channels(new)) => {
                for ch in new {
                    if !have.contains(&ch) {
                        have.push(ch.clone());
                        map.entry(ch).or_default().push(id);
                    }
                }
            }
            (SubKind::Patterns(have), SubKind::Patterns(new)) => {
                for p in new {
                    if !have.contains(&p) {
                        have.push(p.clone());
                        self.patterns.push((p, id));
                    }
                }
            }
            _ => {}
        }
    }

    /// A RESP connection unsubscribes from some channels or patterns of its stream `id`
    /// (none named: all); a stream left with none is removed.
    pub fn shrink(&mut self, id: u64, less: SubKind) {
        let Some(h) = self.subs.get_mut(&id) else {
            return;
        };
        let (SubKind::Channels(names) | SubKind::Patterns(names)) = less else {
            return;
        };
        let map = match h.wire {
            Wire::Shard(_) => &mut self.shard,
            _ => &mut self.channels,
        };
        let left = match &mut h.kind {
            SubKind::Channels(have) => {
                let gone: Vec<Vec<u8>> = have
                    .iter()
                    .filter(|c| names.is_empty() || names.contains(c))
                    .cloned()
                    .collect();
                have.retain(|c| !gone.contains(c));
                for ch in gone {
                    if let Some(ids) = map.get_mut(&ch) {
                        ids.retain(|x| *x != id);
                        if ids.is_empty() {
                            map.remove(&ch);
                        }
                    }
                }
                have.len()
            }
            SubKind::Patterns(have) => {
                have.retain(|p| !(names.is_empty() || names.contains(p)));
                self.patterns
                    .retain(|(p, x)| *x != id || !(names.is_empty() || names.contains(p)));
                have.len()
            }
            SubKind::Monitor => 1,
        };
        if left == 0 {
            self.subs.remove(&id);
        }
    }

    pub fn remove(&mut self, id: u64) {
        self.monitors.retain(|m| m.id != id);
        if let Some(h) = self.subs.remove(&id) {
            if let SubKind::Channels(chs) = &h.kind {
                let map = match h.wire {
                    Wire::Shard(_) => &mut self.shard,
                    _ => &mut self.channels,
                };
                for ch in chs {
                    if let Some(ids) = map.get_mut(ch) {
                        ids.retain(|x| *x != id);
                        if ids.is_empty() {
                            map.remove(ch);
                        }
                    }
                }
            }
            self.patterns.retain(|(_, x)| *x != id);
        }
    }

    /// Sends `msg` to every subscriber of `channel` and every matching pattern; returns how many
    /// received it.
    pub fn publish(&mut self, channel: &[u8], msg: &[u8]) -> i64 {
        let mut gone = Vec::new();
        let mut n = deliver_message(
            &self.subs,
            self.channels.get(channel),
            channel,
            msg,
            &mut gone,
        );
        for (pat, id) in &self.patterns {
            if glob_match(pat, channel, false) {
                match self.subs.get(id) {
                    Some(h) if h.deliver(event(h.wire, &[b"pmessage", pat, channel, msg])) => {
                        n += 1
                    }
                    _ => gone.push(*id),
                }
            }
        }
        for id in gone {
            self.remove(id);
        }
        n
    }

    /// SPUBLISH: sends `msg` to the subscribers of shard channel `channel` (SSUBSCRIBE) only;
    /// how many received it.
    pub fn publish_shard(&mut self, channel: &[u8], msg: &[u8]) -> i64 {
        let mut gone = Vec::new();
        let n = deliver_message(&self.subs, self.shard.get(channel), channel, msg, &mut gone);
        for id in gone {
            self.remove(id);
        }
        n
    }

    /// The shard channels with at least one subscriber.
    pub fn shard_channels(&self) -> Vec<Vec<u8>> {
        self.shard.keys().cloned().collect()
    }

    pub fn shard_subscribers_of(&self, channel: &[u8]) -> usize {
        self.shard.get(channel).map(|v| v.len()).unwrap_or(0)
    }

    /// Sends one MONITOR line for a command about to run.
    pub fn feed_monitors(&mut self, client: &str, args: &[Vec<u8>]) {
        if self.monitors.is_empty() {
            return;
        }
        let us = clock::wall_unix_us();
        let mut text =
            format!("{}.{:06} [0 {}]", us / 1_000_000, us % 1_000_000, client).into_bytes();
        for a in args {
            text.push(b' ');
            repr(&mut text, a);
        }
        let mut resp = Vec::with_capacity(text.len() + 3);
        resp.push(b'+');
        resp.extend_from_slice(&text);
        resp.extend_from_slice(b"\r\n");
        let (ev, resp) = (Bytes::from(text), Bytes::from(resp));
        self.monitors.retain(|m| {
            m.deliver(match m.wire {
                Wire::Sse => ev.clone(),
                _ => resp.clone(),
            })
        });
    }

    /// Ends every stream, saying why (the HTTP side writes it as a comment a client ignores,
    /// then ends the body): dropping the senders closes the streams.
    pub fn end_all(self, why: &str) {
        let why: Arc<str> = Arc::from(why);
        for h in self.monitors.iter().chain(self.subs.values()) {
            let _ = h.tx.try_send(StreamItem::End(why.clone()));
        }
    }

    /// The channels with at least one subscriber.
    pub fn channels(&self) -> Vec<Vec<u8>> {
        self.channels.keys().cloned().collect()
    }

    pub fn subscribers_of(&self, channel: &[u8]) -> usize {
        self.channels.get(channel).map(|v| v.len()).unwrap_or(0)
    }

    /// Distinct patterns subscribed to.
    pub fn pattern_count(&self) -> usize {
        let mut pats: Vec<&Vec<u8>> = self.patterns.iter().map(|(p, _)| p).collect();
        pats.sort();
        pats.dedup();
        pats.len()
    }
}

/// Sends a channel's message to the streams `ids` name; how many took it (`gone` gets those
/// that are gone or fell behind).
fn deliver_message(
    subs: &HashMap<u64, SubscriberHandle>,
    ids: Option<&Vec<u64>>,
    channel: &[u8],
    msg: &[u8],
    gone: &mut Vec<u64>,
) -> i64 {
    let mut n = 0;
    let mut ev = Encoded::default();
    for id in ids.into_iter().flatten() {
        match subs.get(id) {
            Some(h) if h.deliver(ev.get(h.wire, &[b"message", channel, msg])) => n += 1,
            _ => gone.push(*id),
        }
    }
    n
}

/// Redis's `sdscatrepr`: the quoting MONITOR uses.
pub fn repr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'\\' | b'"' => {
                out.push(b'\\');
                out.push(c);
            }
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(c),
            _ => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}
