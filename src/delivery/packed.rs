//! The form a pending message is kept in while it waits (`Pending`): its fields one after
//! another, integers and lengths in LEB128, and each group of optional fields behind a mask of
//! the ones present, so that a message that sets little costs little. It lives in memory only
//! (the log and snapshots hold the message with named fields), so it may change with the code.
//!
//! A message is packed once when it is put and unpacked at each attempt: written by hand, not
//! through serde, because those two were about a tenth of a message's instructions, published
//! and delivered, through rmp-serde.
//!
//! The id is not in it: the entry keeps it beside.
//!
//! Layout (`str` and `bytes`: a length, then the bytes; `n`: a LEB128 integer):
//! - message: `str` url, a byte for the method, `bytes` body, `n` created, `n` not before,
//!   `n` max retries, a byte for the origin, `n` mask of its optional names (topic, endpoint,
//!   queue, schedule id, caller IP, dedup key, source id, held queue: bits 0-7), each present
//!   one as a `str`, then its configuration;
//! - configuration: `n` mask of the fields that are set (`bit`: bit i for field i of `Conf`),
//!   then each set field in that order: a `str` or `n` for an optional one, `n` count and the
//!   items for a list, nothing for `content_dedup` (its bit is its value), and for a callback
//!   or failure callback its `str` URL and its own configuration, one level down.

use super::model::{Conf, Hook, HttpMethod, Message, Origin};
use crate::config::DELIVERY_PACKED_NESTING_MAX;
use crate::leb128;
use crate::msgpack::Bin;
use std::sync::Arc;

pub(super) const METHODS: [HttpMethod; 7] = [
    HttpMethod::GET,
    HttpMethod::POST,
    HttpMethod::PUT,
    HttpMethod::PATCH,
    HttpMethod::DELETE,
    HttpMethod::HEAD,
    HttpMethod::OPTIONS,
];

pub(super) const ORIGINS: [Origin; 7] = [
    Origin::Publish,
    Origin::Callback,
    Origin::FailureCallback,
    Origin::Schedule,
    Origin::Notify,
    Origin::WaitTimeout,
    Origin::DlqRetry,
];

/// `m` packed, without its id; None only for a configuration nested deeper than
/// `DELIVERY_PACKED_NESTING_MAX` callbacks, which no message the log can hold has.
pub fn pack(m: &Message) -> Option<Box<[u8]>> {
    let mut w = Vec::with_capacity(m.url.len() + m.body.0.len() + 32);
    put_str(&mut w, &m.url);
    w.push(METHODS.iter().position(|x| *x == m.method).unwrap_or(1) as u8);
    put_bytes(&mut w, &m.body.0);
    leb128::put(&mut w, m.created_ms);
    leb128::put(&mut w, m.not_before_ms);
    leb128::put(&mut w, u64::from(m.max_retries));
    w.push(ORIGINS.iter().position(|x| *x == m.origin).unwrap_or(0) as u8);
    let names = names(m);
    let mask = names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.is_some())
        .fold(0u64, |mask, (i, _)| mask | 1 << i);
    leb128::put(&mut w, mask);
    for n in names.into_iter().flatten() {
        put_str(&mut w, n);
    }
    put_conf(&mut w, &m.conf, 0)?;
    Some(w.into_boxed_slice())
}

/// The message `b` (what `pack` gave) holds, with `id`; None if it does not read back.
pub fn unpack(id: Arc<str>, b: &[u8]) -> Option<Message> {
    let mut r = Reader { b, at: 0 };
    let url = r.string()?;
    let method = *METHODS.get(usize::from(r.byte()?))?;
    let body = Bin(r.bytes()?.to_vec());
    let created_ms = r.n()?;
    let not_before_ms = r.n()?;
    let max_retries = u32::try_from(r.n()?).ok()?;
    let origin = *ORIGINS.get(usize::from(r.byte()?))?;
    let mask = r.n()?;
    if mask >> 8 != 0 {
        return None;
    }
    let mut name = |i: u32| -> Option<Option<Box<str>>> {
        if mask & 1 << i == 0 {
            return Some(None);
        }
        Some(Some(r.str()?.into()))
    };
    let topic = name(0)?;
    let endpoint = name(1)?;
    let queue = name(2)?;
    let schedule_id = name(3)?;
    let caller_ip = name(4)?;
    let dedup_key = name(5)?;
    let source_id = name(6)?;
    let holds_queue = name(7)?;
    let conf = r.conf(0)?;
    if r.at != b.len() {
        return None;
    }
    Some(Message {
        id,
        url,
        method,
        body,
        created_ms,
        not_before_ms,
        max_retries,
        conf,
        origin,
        topic,
        endpoint,
        queue,
        schedule_id,
        caller_ip,
        dedup_key,
        source_id,
        holds_queue,
    })
}

/// The message's optional names, in the order of their mask bits.
fn names(m: &Message) -> [Option<&str>; 8] {
    [
        m.topic.as_deref(),
        m.endpoint.as_deref(),
        m.queue.as_deref(),
        m.schedule_id.as_deref(),
        m.caller_ip.as_deref(),
        m.dedup_key.as_deref(),
        m.source_id.as_deref(),
        m.holds_queue.as_deref(),
    ]
}

/// A configuration's fields, in the order of their mask bits, which is `Conf`'s.
mod bit {
    pub const METHOD: u64 = 1 << 0;
    pub const RETRIES: u64 = 1 << 1;
    pub const RETRY_DELAY: u64 = 1 << 2;
    pub const TIMEOUT: u64 = 1 << 3;
    pub const DELAY: u64 = 1 << 4;
    pub const NOT_BEFORE: u64 = 1 << 5;
    pub const FORWARD: u64 = 1 << 6;
    pub const CALLBACK: u64 = 1 << 7;
    pub const FAILURE_CALLBACK: u64 = 1 << 8;
    pub const DEDUP_ID: u64 = 1 << 9;
    pub const CONTENT_DEDUP: u64 = 1 << 10;
    pub const LABELS: u64 = 1 << 11;
    pub const FLOW_KEY: u64 = 1 << 12;
    pub const PARALLELISM: u64 = 1 << 13;
    pub const RATE: u64 = 1 << 14;
    pub const PERIOD: u64 = 1 << 15;
    pub const WORKFLOW: u64 = 1 << 16;
    pub const REDACT: u64 = 1 << 17;
    pub const SIGNER: u64 = 1 << 18;
    /// Every bit a configuration's mask may have.
    pub const ALL: u64 = (1 << 19) - 1;
}

fn put_conf(w: &mut Vec<u8>, c: &Conf, depth: usize) -> Option<()> {
    if depth > DELIVERY_PACKED_NESTING_MAX {
        return None;
    }
    let set = |on: bool, b: u64| if on { b } else { 0 };
    let mask = set(c.method.is_some(), bit::METHOD)
        | set(c.retries.is_some(), bit::RETRIES)
        | set(c.retry_delay.is_some(), bit::RETRY_DELAY)
        | set(c.timeout_ms.is_some(), bit::TIMEOUT)
        | set(c.delay_ms.is_some(), bit::DELAY)
        | set(c.not_before_ms.is_some(), bit::NOT_BEFORE)
        | set(!c.forward.is_empty(), bit::FORWARD)
        | set(c.callback.is_some(), bit::CALLBACK)
        | set(c.failure_callback.is_some(), bit::FAILURE_CALLBACK)
        | set(c.dedup_id.is_some(), bit::DEDUP_ID)
        | set(c.content_dedup, bit::CONTENT_DEDUP)
        | set(!c.labels.is_empty(), bit::LABELS)
        | set(c.flow_key.is_some(), bit::FLOW_KEY)
        | set(c.parallelism.is_some(), bit::PARALLELISM)
        | set(c.rate.is_some(), bit::RATE)
        | set(c.period_s.is_some(), bit::PERIOD)
        | set(!c.workflow.is_empty(), bit::WORKFLOW)
        | set(!c.redact.is_empty(), bit::REDACT)
        | set(c.signer.is_some(), bit::SIGNER);
    leb128::put(w, mask);
    if mask == 0 {
        return Some(());
    }
    let opt_str = |w: &mut Vec<u8>, s: &Option<String>| {
        if let Some(s) = s {
            put_str(w, s);
        }
    };
    let opt_n = |w: &mut Vec<u8>, n: Option<u64>| {
        if let Some(n) = n {
            leb128::put(w, n);
        }
    };
    let pairs = |w: &mut Vec<u8>, p: &[(String, String)]| {
        if !p.is_empty() {
            leb128::put(w, p.len() as u64);
            for (k, v) in p {
                put_str(w, k);
                put_str(w, v);
            }
        }
    };
    let strs = |w: &mut Vec<u8>, l: &[String]| {
        if !l.is_empty() {
            leb128::put(w, l.len() as u64);
            for s in l {
                put_str(w, s);
            }
        }
    };
    opt_str(w, &c.method);
    opt_n(w, c.retries.map(u64::from));
    opt_str(w, &c.retry_delay);
    opt_n(w, c.timeout_ms);
    opt_n(w, c.delay_ms);
    opt_n(w, c.not_before_ms);
    pairs(w, &c.forward);
    for hook in [&c.callback, &c.failure_callback].into_iter().flatten() {
        put_str(w, &hook.url);
        put_conf(w, &hook.conf, depth + 1)?;
    }
    opt_str(w, &c.dedup_id);
    strs(w, &c.labels);
    opt_str(w, &c.flow_key);
    opt_n(w, c.parallelism.map(u64::from));
    opt_n(w, c.rate.map(u64::from));
    opt_n(w, c.period_s);
    pairs(w, &c.workflow);
    strs(w, &c.redact);
    opt_str(w, &c.signer);
    Some(())
}

fn put_bytes(w: &mut Vec<u8>, b: &[u8]) {
    leb128::put(w, b.len() as u64);
    w.extend_from_slice(b);
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    put_bytes(w, s.as_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn n(&mut self) -> Option<u64> {
        leb128::read(self.b, &mut self.at)
    }

    fn n32(&mut self) -> Option<u32> {
        u32::try_from(self.n()?).ok()
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.n()?).ok()?;
        let end = self.at.checked_add(len)?;
        let v = self.b.get(self.at..end)?;
        self.at = end;
        Some(v)
    }

    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_string)
    }

    /// A count of items, each at least one byte: never more than the bytes left, so that a
    /// damaged count cannot reserve memory the buffer could not fill.
    fn count(&mut self) -> Option<usize> {
        let n = usize::try_from(self.n()?).ok()?;
        (n <= self.b.len() - self.at.min(self.b.len())).then_some(n)
    }

    fn pairs(&mut self) -> Option<Vec<(String, String)>> {
        let n = self.count()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push((self.string()?, self.string()?));
        }
        Some(out)
    }

    fn strings(&mut self) -> Option<Vec<String>> {
        let n = self.count()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.string()?);
        }
        Some(out)
    }

    fn hook(&mut self, depth: usize) -> Option<Box<Hook>> {
        let url = self.string()?;
        let conf = self.conf(depth + 1)?;
        Some(Box::new(Hook { url, conf }))
    }

    fn conf(&mut self, depth: usize) -> Option<Conf> {
        if depth > DELIVERY_PACKED_NESTING_MAX {
            return None;
        }
        let mask = self.n()?;
        if mask & !bit::ALL != 0 {
            return None;
        }
        let mut c = Conf::default();
        if mask == 0 {
            return Some(c);
        }
        let on = |b: u64| mask & b != 0;
        if on(bit::METHOD) {
            c.method = Some(self.string()?);
        }
        if on(bit::RETRIES) {
            c.retries = Some(self.n32()?);
        }
        if on(bit::RETRY_DELAY) {
            c.retry_delay = Some(self.string()?);
        }
        if on(bit::TIMEOUT) {
            c.timeout_ms = Some(self.n()?);
        }
        if on(bit::DELAY) {
            c.delay_ms = Some(self.n()?);
        }
        if on(bit::NOT_BEFORE) {
            c.not_before_ms = Some(self.n()?);
        }
        if on(bit::FORWARD) {
            c.forward = self.pairs()?;
        }
        if on(bit::CALLBACK) {
            c.callback = Some(self.hook(depth)?);
        }
        if on(bit::FAILURE_CALLBACK) {
            c.failure_callback = Some(self.hook(depth)?);
        }
        if on(bit::DEDUP_ID) {
            c.dedup_id = Some(self.string()?);
        }
        c.content_dedup = on(bit::CONTENT_DEDUP);
        if on(bit::LABELS) {
            c.labels = self.strings()?;
        }
        if on(bit::FLOW_KEY) {
            c.flow_key = Some(self.string()?);
        }
        if on(bit::PARALLELISM) {
            c.parallelism = Some(self.n32()?);
        }
        if on(bit::RATE) {
            c.rate = Some(self.n32()?);
        }
        if on(bit::PERIOD) {
            c.period_s = Some(self.n()?);
        }
        if on(bit::WORKFLOW) {
            c.workflow = self.pairs()?;
        }
        if on(bit::REDACT) {
            c.redact = self.strings()?;
        }
        if on(bit::SIGNER) {
            c.signer = Some(self.string()?);
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testgen::{self, message};
    use super::*;
    use crate::rng::Rng;

    /// Guards the packed form: any message (every field set or not, nested callbacks, long
    /// and multi-byte strings, the largest integers) reads back equal, and every cut of its
    /// bytes, and every single changed byte, reads back as None or as some message, never a
    /// panic.
    #[test]
    fn every_message_reads_back_as_it_was_packed() {
        let mut r = Rng::new(27);
        for i in 0..2_000 {
            let m = message(&mut r);
            let b = pack(&m).expect("packs");
            assert_eq!(unpack(m.id.clone(), &b).as_ref(), Some(&m), "message {i}");
            if i % 200 == 0 {
                for cut in 0..b.len() {
                    assert!(
                        unpack(m.id.clone(), &b[..cut]).is_none(),
                        "{i} cut at {cut}"
                    );
                }
                let mut bad = b.to_vec();
                for at in 0..bad.len() {
                    let was = bad[at];
                    bad[at] = was ^ (1 << r.below(8));
                    let _ = unpack(m.id.clone(), &bad);
                    bad[at] = was;
                }
            }
        }
    }

    /// Every field of `Message` and `Conf` is in the packed form: a message whose every field
    /// is set differs from one whose every field is not, and each reads back equal. (A field
    /// added to either struct without being packed fails to compile in `testgen::full`, whose
    /// literals name every field, and then fails the read back.)
    #[test]
    fn a_full_and_a_bare_message_read_back() {
        let full = testgen::full("msg_full");
        let bare = testgen::bare("msg_bare");
        for m in [&full, &bare] {
            let b = pack(m).expect("packs");
            assert_eq!(unpack(m.id.clone(), &b).as_ref(), Some(m));
        }
        // A bare message is its fixed fields and two empty masks.
        assert_eq!(pack(&bare).expect("packs").len(), 9);
    }

    /// The nesting bound: a configuration at `DELIVERY_PACKED_NESTING_MAX` callbacks packs and
    /// reads back on an 8 MiB stack (the main thread's, where replay runs), one deeper does
    /// not pack, and a crafted one deeper does not read.
    #[test]
    fn nesting_packs_to_the_bound_and_no_deeper() {
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(nesting_at_the_bound)
            .expect("a thread")
            .join()
            .expect("no overflow");
    }

    fn nesting_at_the_bound() {
        let mut m = testgen::bare("i");
        m.conf = testgen::nested(DELIVERY_PACKED_NESTING_MAX);
        let b = pack(&m).expect("at the bound");
        assert!(unpack(m.id.clone(), &b).as_ref() == Some(&m));
        m.conf = testgen::nested(DELIVERY_PACKED_NESTING_MAX + 1);
        assert!(pack(&m).is_none());
        // The same bytes one level deeper, made by hand: the callback bit, its URL, ... .
        let mut deeper = b[..b.len() - 1].to_vec();
        deeper.extend_from_slice(&[0x80, 0x01, 1, b'u', 0]);
        assert!(unpack(m.id.clone(), &deeper).is_none());
        testgen::unnest(std::mem::take(&mut m.conf));
    }
}
