//! A delivery record's events as the log holds them (`log-format.md`, kind 4: MessagePack with
//! named fields), written by hand for the two events every message brings, its `Put` and its
//! `Attempt`s, and through rmp-serde for the others. The bytes are rmp-serde's to the last
//! one (a test holds them so over random messages): rmp-serde still reads every record, and
//! writes the rarer events. Through serde a message's record took about 3,900 instructions.

use super::model::{Conf, Event, Message, Outcome, Response};
use crate::config::DELIVERY_PACKED_NESTING_MAX;
use serde::Serialize;

/// Appends `events` (a record's payload).
pub fn encode_events(out: &mut Vec<u8>, events: &[Event]) {
    array_len(out, events.len());
    for e in events {
        let start = out.len();
        let written = match e {
            Event::Put(m) => {
                map_len(out, 1);
                key(out, "Put");
                message(out, m)
            }
            Event::Attempt {
                id,
                retried,
                started_ms,
                response,
                outcome,
            } => {
                map_len(out, 1);
                key(out, "Attempt");
                map_len(out, 5);
                key(out, "id");
                str(out, id);
                key(out, "retried");
                uint(out, u64::from(*retried));
                key(out, "started_ms");
                uint(out, *started_ms);
                key(out, "response");
                self::response(out, response);
                key(out, "outcome");
                self::outcome(out, outcome);
                Some(())
            }
            _ => None,
        };
        if written.is_none() {
            // Another event, or a message nested past what this writer follows.
            out.truncate(start);
            // Writing MessagePack into a Vec cannot fail: the only error source is the writer.
            let _ = e.serialize(&mut rmp_serde::Serializer::new(&mut *out).with_struct_map());
        }
    }
}

fn message(out: &mut Vec<u8>, m: &Message) -> Option<()> {
    map_len(out, 17);
    key(out, "id");
    str(out, &m.id);
    key(out, "url");
    str(out, &m.url);
    key(out, "method");
    key(out, m.method.as_str());
    key(out, "body");
    bin(out, &m.body.0);
    key(out, "created_ms");
    uint(out, m.created_ms);
    key(out, "not_before_ms");
    uint(out, m.not_before_ms);
    key(out, "max_retries");
    uint(out, u64::from(m.max_retries));
    key(out, "conf");
    conf(out, &m.conf, 0)?;
    key(out, "origin");
    // The variant's name, as serde's derive gives it.
    key(out, origin_name(m.origin));
    for (name, v) in [
        ("topic", &m.topic),
        ("endpoint", &m.endpoint),
        ("queue", &m.queue),
        ("schedule_id", &m.schedule_id),
        ("caller_ip", &m.caller_ip),
        ("dedup_key", &m.dedup_key),
        ("source_id", &m.source_id),
        ("holds_queue", &m.holds_queue),
    ] {
        key(out, name);
        opt_str(out, v.as_deref());
    }
    Some(())
}

fn origin_name(o: super::model::Origin) -> &'static str {
    use super::model::Origin::*;
    match o {
        Publish => "Publish",
        Callback => "Callback",
        FailureCallback => "FailureCallback",
        Schedule => "Schedule",
        Notify => "Notify",
        WaitTimeout => "WaitTimeout",
        DlqRetry => "DlqRetry",
    }
}

fn conf(out: &mut Vec<u8>, c: &Conf, depth: usize) -> Option<()> {
    if depth > DELIVERY_PACKED_NESTING_MAX {
        return None;
    }
    // `signer` is left out when absent (`skip_serializing_if`).
    map_len(out, if c.signer.is_some() { 19 } else { 18 });
    key(out, "method");
    opt_str(out, c.method.as_deref());
    key(out, "retries");
    opt_uint(out, c.retries.map(u64::from));
    key(out, "retry_delay");
    opt_str(out, c.retry_delay.as_deref());
    key(out, "timeout_ms");
    opt_uint(out, c.timeout_ms);
    key(out, "delay_ms");
    opt_uint(out, c.delay_ms);
    key(out, "not_before_ms");
    opt_uint(out, c.not_before_ms);
    key(out, "forward");
    pairs(out, &c.forward);
    for (name, hook) in [
        ("callback", &c.callback),
        ("failure_callback", &c.failure_callback),
    ] {
        key(out, name);
        match hook {
            None => out.push(0xc0),
            Some(h) => {
                map_len(out, 2);
                key(out, "url");
                str(out, &h.url);
                key(out, "conf");
                conf(out, &h.conf, depth + 1)?;
            }
        }
    }
    key(out, "dedup_id");
    opt_str(out, c.dedup_id.as_deref());
    key(out, "content_dedup");
    out.push(if c.content_dedup { 0xc3 } else { 0xc2 });
    key(out, "labels");
    strs(out, &c.labels);
    key(out, "flow_key");
    opt_str(out, c.flow_key.as_deref());
    key(out, "parallelism");
    opt_uint(out, c.parallelism.map(u64::from));
    key(out, "rate");
    opt_uint(out, c.rate.map(u64::from));
    key(out, "period_s");
    opt_uint(out, c.period_s);
    key(out, "workflow");
    pairs(out, &c.workflow);
    key(out, "redact");
    strs(out, &c.redact);
    if let Some(s) = &c.signer {
        key(out, "signer");
        str(out, s);
    }
    Some(())
}

fn response(out: &mut Vec<u8>, r: &Response) {
    map_len(out, 4);
    key(out, "status");
    uint(out, u64::from(r.status));
    key(out, "headers");
    pairs(out, &r.headers);
    key(out, "body");
    bin(out, &r.body.0);
    key(out, "error");
    opt_str(out, r.error.as_deref());
}

fn outcome(out: &mut Vec<u8>, o: &Outcome) {
    match o {
        Outcome::Delivered => key(out, "Delivered"),
        Outcome::Retry { next_ms } => {
            map_len(out, 1);
            key(out, "Retry");
            map_len(out, 1);
            key(out, "next_ms");
            uint(out, *next_ms);
        }
        Outcome::Dead { dlq_id } => {
            map_len(out, 1);
            key(out, "Dead");
            map_len(out, 1);
            key(out, "dlq_id");
            str(out, dlq_id);
        }
    }
}

fn pairs(out: &mut Vec<u8>, p: &[(String, String)]) {
    array_len(out, p.len());
    for (k, v) in p {
        out.push(0x92);
        str(out, k);
        str(out, v);
    }
}

fn strs(out: &mut Vec<u8>, l: &[String]) {
    array_len(out, l.len());
    for s in l {
        str(out, s);
    }
}

/// The shortest headers, as rmp writes them.
#[inline]
fn len_header(out: &mut Vec<u8>, n: usize, fix: Option<(u8, usize)>, tags: [u8; 3]) {
    match fix {
        Some((base, max)) if n <= max => out.push(base | n as u8),
        _ => {
            if let (Ok(n), true) = (u8::try_from(n), tags[0] != 0) {
                out.push(tags[0]);
                out.push(n);
            } else if let Ok(n) = u16::try_from(n) {
                out.push(tags[1]);
                out.extend_from_slice(&n.to_be_bytes());
            } else {
                out.push(tags[2]);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
    }
}

/// A field's or a variant's name: always under 32 bytes, so always a fixstr.
#[inline]
fn key(out: &mut Vec<u8>, name: &'static str) {
    debug_assert!(name.len() < 32);
    out.push(0xa0 | name.len() as u8);
    out.extend_from_slice(name.as_bytes());
}

#[inline]
fn array_len(out: &mut Vec<u8>, n: usize) {
    len_header(out, n, Some((0x90, 15)), [0, 0xdc, 0xdd]);
}

#[inline]
fn map_len(out: &mut Vec<u8>, n: usize) {
    len_header(out, n, Some((0x80, 15)), [0, 0xde, 0xdf]);
}

#[inline]
fn str(out: &mut Vec<u8>, s: &str) {
    len_header(out, s.len(), Some((0xa0, 31)), [0xd9, 0xda, 0xdb]);
    out.extend_from_slice(s.as_bytes());
}

#[inline]
fn opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => str(out, s),
        None => out.push(0xc0),
    }
}

#[inline]
fn bin(out: &mut Vec<u8>, b: &[u8]) {
    len_header(out, b.len(), None, [0xc4, 0xc5, 0xc6]);
    out.extend_from_slice(b);
}

#[inline]
fn uint(out: &mut Vec<u8>, v: u64) {
    if v < 128 {
        out.push(v as u8);
    } else if let Ok(v) = u8::try_from(v) {
        out.extend_from_slice(&[0xcc, v]);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(0xcd);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(0xce);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

#[inline]
fn opt_uint(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => uint(out, v),
        None => out.push(0xc0),
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::Event;
    use super::super::testgen;
    use super::*;
    use crate::msgpack::Bin;
    use crate::rng::Rng;

    /// rmp-serde's bytes for the same events, what the log held before they were written by
    /// hand (log-format.md's).
    fn by_rmp_serde(events: &[Event]) -> Vec<u8> {
        let mut out = Vec::new();
        events
            .serialize(&mut rmp_serde::Serializer::new(&mut out).with_struct_map())
            .expect("encodes");
        out
    }

    fn ours(events: &[Event]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_events(&mut out, events);
        out
    }

    /// Guards the hand-written record: random messages and attempt results (every field set
    /// or not, nested callbacks, multi-byte strings, the largest integers), beside an event
    /// rmp-serde writes, give rmp-serde's bytes, and read back.
    #[test]
    fn a_records_events_are_written_as_rmp_serde_writes_them() {
        let mut r = Rng::new(4);
        for i in 0..2_000 {
            let events = vec![
                Event::Put(Box::new(testgen::message(&mut r))),
                Event::Attempt {
                    id: testgen::text(&mut r),
                    retried: testgen::number(&mut r) as u32,
                    started_ms: testgen::number(&mut r),
                    response: testgen::response(&mut r),
                    outcome: testgen::outcome(&mut r),
                },
                Event::Cancel {
                    ids: vec![testgen::text(&mut r)],
                },
            ];
            let b = ours(&events);
            assert_eq!(b, by_rmp_serde(&events), "record {i}");
            let back: Vec<Event> = rmp_serde::from_slice(&b).expect("reads back");
            assert_eq!(back, events);
        }
    }

    /// The longer headers: strings, byte strings, lists and records past every short form
    /// (16 and 65,536 items, 32, 256 and 65,536 bytes).
    #[test]
    fn long_values_take_rmp_serdes_longer_headers() {
        let mut r = Rng::new(5);
        let mut m = testgen::message(&mut r);
        for len in [31, 32, 255, 256, 65_535, 65_536] {
            m.url = "u".repeat(len);
            m.body = Bin(vec![7; len]);
            m.conf.labels = vec!["l".into(); len.min(70_000) / 16];
            m.conf.forward = vec![("k".into(), "v".into()); 16];
            let events = vec![Event::Put(Box::new(m.clone())); 16];
            assert_eq!(ours(&events), by_rmp_serde(&events), "{len}");
        }
        let many = vec![
            Event::Cancel {
                ids: vec!["i".into()]
            };
            65_536
        ];
        assert_eq!(ours(&many), by_rmp_serde(&many));
    }

    /// A message nested past `DELIVERY_PACKED_NESTING_MAX` callbacks (none a log can hold) is
    /// written by rmp-serde, with the same bytes.
    #[test]
    fn a_message_nested_past_the_bound_is_written_by_rmp_serde() {
        std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(|| {
                let mut r = Rng::new(6);
                let mut m = testgen::message(&mut r);
                m.conf = testgen::nested(DELIVERY_PACKED_NESTING_MAX + 2);
                let events = vec![Event::Put(Box::new(m))];
                assert_eq!(ours(&events), by_rmp_serde(&events));
                if let Some(Event::Put(mut m)) = events.into_iter().next() {
                    testgen::unnest(std::mem::take(&mut m.conf));
                }
            })
            .expect("a thread")
            .join()
            .expect("no overflow");
    }
}
