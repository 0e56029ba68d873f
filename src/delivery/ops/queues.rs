//! Queues: upsert, get, list, delete, pause.

use super::op::*;
use super::tx::*;
use crate::delivery::json;
use crate::delivery::model::*;
use serde_json::{json, Value};

pub(super) fn upsert(tx: &mut Tx, q: QueueConf) -> OpReply {
    tx.emit(Event::Queue(q));
    ok(json!({}))
}

pub(super) fn get(tx: &mut Tx, name: String) -> OpReply {
    match tx.d.queues.get(&name) {
        Some(q) => ok(json::queue(q)),
        None => not_found(&format!("queue {name} not found")),
    }
}

pub(super) fn list(tx: &mut Tx) -> OpReply {
    ok(Value::Array(
        tx.d.queues.values().map(json::queue).collect(),
    ))
}

pub(super) fn delete(tx: &mut Tx, name: String) -> OpReply {
    if !tx.d.queues.contains_key(&name) {
        return not_found(&format!("queue {name} not found"));
    }
    tx.emit(Event::QueueDelete { name });
    ok(json!({}))
}

pub(super) fn pause(tx: &mut Tx, name: String, paused: bool) -> OpReply {
    let Some(q) = tx.d.queues.get(&name) else {
        return not_found(&format!("queue {name} not found"));
    };
    let mut c = q.conf.clone();
    if c.paused != paused {
        c.paused = paused;
        tx.emit(Event::Queue(c));
    }
    ok(json!({}))
}
