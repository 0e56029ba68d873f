//! Random delivery-model values for tests: every field set or not, nested callbacks, empty,
//! short and long strings with multi-byte characters, the largest integers.

use super::model::{Conf, Hook, HttpMethod, Message, Origin, Outcome, Response};
use super::packed::{METHODS, ORIGINS};
use crate::msgpack::Bin;
use crate::rng::Rng;

pub fn text(r: &mut Rng) -> String {
    // Empty, short, and past one LEB128 byte of length; ASCII and multi-byte characters.
    let len = [0, 1, 5, 127, 128, 300][r.below(6)];
    (0..len)
        .map(|_| ['a', 'Z', '-', 'é', '😀'][r.below(5)])
        .collect()
}

pub fn number(r: &mut Rng) -> u64 {
    [0, 1, 127, 128, 1 << 32, u64::MAX][r.below(6)]
}

pub fn maybe<T>(r: &mut Rng, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
    (r.below(2) == 0).then(|| f(r))
}

pub fn pairs(r: &mut Rng) -> Vec<(String, String)> {
    (0..r.below(3)).map(|_| (text(r), text(r))).collect()
}

pub fn conf(r: &mut Rng, depth: usize) -> Conf {
    let hook = |r: &mut Rng| {
        (depth < 3 && r.below(2) == 0).then(|| {
            Box::new(Hook {
                url: text(r),
                conf: conf(r, depth + 1),
            })
        })
    };
    Conf {
        method: maybe(r, text),
        retries: maybe(r, |r| number(r) as u32),
        retry_delay: maybe(r, text),
        timeout_ms: maybe(r, number),
        delay_ms: maybe(r, number),
        not_before_ms: maybe(r, number),
        forward: pairs(r),
        callback: hook(r),
        failure_callback: hook(r),
        dedup_id: maybe(r, text),
        content_dedup: r.below(2) == 0,
        labels: (0..r.below(3)).map(|_| text(r)).collect(),
        flow_key: maybe(r, text),
        parallelism: maybe(r, |r| number(r) as u32),
        rate: maybe(r, |r| number(r) as u32),
        period_s: maybe(r, number),
        workflow: pairs(r),
        redact: (0..r.below(3)).map(|_| text(r)).collect(),
        signer: maybe(r, text),
    }
}

pub fn message(r: &mut Rng) -> Message {
    let name = |r: &mut Rng| maybe(r, |r| text(r).into_boxed_str());
    Message {
        id: text(r).into(),
        url: text(r),
        method: METHODS[r.below(METHODS.len())],
        body: Bin((0..[0, 3, 200][r.below(3)]).map(|i| i as u8).collect()),
        created_ms: number(r),
        not_before_ms: number(r),
        max_retries: number(r) as u32,
        conf: conf(r, 0),
        origin: ORIGINS[r.below(ORIGINS.len())],
        topic: name(r),
        endpoint: name(r),
        queue: name(r),
        schedule_id: name(r),
        caller_ip: name(r),
        dedup_key: name(r),
        source_id: name(r),
        holds_queue: name(r),
    }
}

pub fn response(r: &mut Rng) -> Response {
    Response {
        status: [0u16, 200, 489, 65535][r.below(4)],
        headers: pairs(r),
        body: Bin((0..[0, 3, 300][r.below(3)]).map(|i| i as u8).collect()),
        error: maybe(r, text),
    }
}

pub fn outcome(r: &mut Rng) -> Outcome {
    match r.below(3) {
        0 => Outcome::Delivered,
        1 => Outcome::Retry { next_ms: number(r) },
        _ => Outcome::Dead { dlq_id: text(r) },
    }
}

/// A configuration with every field set, and its two hooks `hook` (None: no hooks).
pub fn full_conf(hook: Option<Box<Hook>>) -> Conf {
    Conf {
        method: Some("PUT".into()),
        retries: Some(1),
        retry_delay: Some("1000".into()),
        timeout_ms: Some(2),
        delay_ms: Some(3),
        not_before_ms: Some(4),
        forward: vec![("A".into(), "b".into())],
        callback: hook.clone(),
        failure_callback: hook,
        dedup_id: Some("d".into()),
        content_dedup: true,
        labels: vec!["l".into()],
        flow_key: Some("f".into()),
        parallelism: Some(5),
        rate: Some(6),
        period_s: Some(7),
        workflow: vec![("Upstash-Workflow-Runid".into(), "r".into())],
        redact: vec!["body".into()],
        signer: Some("s".into()),
    }
}

/// A message with every field set, its configuration's hooks each fully configured. (The
/// literals name every field: a field added to `Message` or `Conf` fails to compile here.)
pub fn full(id: &str) -> Message {
    let hook = Box::new(Hook {
        url: "http://h".into(),
        conf: full_conf(None),
    });
    Message {
        id: id.into(),
        url: "http://x".into(),
        method: HttpMethod::OPTIONS,
        body: Bin(vec![0, 255]),
        created_ms: 1,
        not_before_ms: 2,
        max_retries: 3,
        conf: full_conf(Some(hook)),
        origin: Origin::DlqRetry,
        topic: Some("t".into()),
        endpoint: Some("e".into()),
        queue: Some("q".into()),
        schedule_id: Some("s".into()),
        caller_ip: Some("127.0.0.1".into()),
        dedup_key: Some("k".into()),
        source_id: Some("src".into()),
        holds_queue: Some("hq".into()),
    }
}

/// A message with nothing set: empty strings, zeros, no options.
pub fn bare(id: &str) -> Message {
    Message {
        id: id.into(),
        url: String::new(),
        method: HttpMethod::GET,
        body: Bin(Vec::new()),
        created_ms: 0,
        not_before_ms: 0,
        max_retries: 0,
        conf: Conf::default(),
        origin: Origin::Publish,
        topic: None,
        endpoint: None,
        queue: None,
        schedule_id: None,
        caller_ip: None,
        dedup_key: None,
        source_id: None,
        holds_queue: None,
    }
}

/// A configuration whose callbacks nest `levels` deep, each with the URL `u`.
pub fn nested(levels: usize) -> Conf {
    let mut c = Conf::default();
    for _ in 0..levels {
        c = Conf {
            callback: Some(Box::new(Hook {
                url: "u".into(),
                conf: c,
            })),
            ..Conf::default()
        };
    }
    c
}

/// Lets a deeply nested configuration go level by level (dropping it whole recurses).
pub fn unnest(mut c: Conf) {
    while let Some(h) = c.callback.take() {
        c = h.conf;
    }
}
