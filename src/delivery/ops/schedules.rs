//! Schedules: create, get, list, delete, pause; and firing the due ones.

use super::op::*;
use super::tx::*;
use crate::delivery::cron::CronSpec;
use crate::delivery::json;
use crate::delivery::model::*;
use crate::msgpack::Bin;
use serde_json::{json, Value};

pub(super) fn create(tx: &mut Tx, req: ScheduleReq) -> OpReply {
    let spec = match CronSpec::parse(&req.cron) {
        Ok(s) => s,
        Err(e) => return bad(e),
    };
    let Some(next_ms) = spec.next_after(tx.now_ms) else {
        return bad(format!("cron '{}' never fires", req.cron));
    };
    let id = match req.id {
        Some(id) => id,
        None => tx.random_id("scd_", 26),
    };
    let (created, paused) = match tx.d.schedules.get(&id) {
        Some(old) => (old.created_ms, old.paused),
        None => (tx.now_ms, false),
    };
    let s = Schedule {
        id: id.clone(),
        cron: req.cron.trim().to_string(),
        destination: req.dest,
        method: req.conf.method.clone().unwrap_or_else(|| "POST".into()),
        body: (!req.body.is_empty()).then_some(Bin(req.body)),
        conf: req.conf,
        queue: req.queue,
        caller_ip: req.caller_ip,
        created_ms: created,
        paused,
        next_ms,
        last_ms: None,
        last_message_id: None,
    };
    tx.emit(Event::Schedule(Box::new(s)));
    ok(json!({ "scheduleId": id }))
}

pub(super) fn get(tx: &mut Tx, id: String) -> OpReply {
    match tx.d.schedules.get(&id) {
        Some(s) => ok(json::schedule(s, tx.d)),
        None => not_found(&format!("schedule {id} not found")),
    }
}

pub(super) fn list(tx: &mut Tx) -> OpReply {
    ok(Value::Array(
        tx.d.schedules
            .values()
            .map(|s| json::schedule(s, tx.d))
            .collect(),
    ))
}

pub(super) fn delete(tx: &mut Tx, id: String) -> OpReply {
    if tx.d.schedules.contains_key(&id) {
        tx.emit(Event::ScheduleDelete { id });
    }
    ok(json!({}))
}

pub(super) fn pause(tx: &mut Tx, id: String, paused: bool) -> OpReply {
    let Some(s) = tx.d.schedules.get(&id) else {
        return not_found(&format!("schedule {id} not found"));
    };
    if s.paused != paused {
        tx.emit(Event::SchedulePause { id, paused });
    }
    ok(json!({}))
}

/// Schedules whose time has come: each moves on to its next time and, unless paused, publishes
/// its message. A server that was down does not catch up missed firings: the next time is
/// computed from now.
pub fn fire_schedules(tx: &mut Tx) {
    for id in tx.d.due_schedules(tx.now_ms) {
        let Some(s) = tx.d.schedules.get(&id).cloned() else {
            continue;
        };
        let next = CronSpec::parse(&s.cron)
            .ok()
            .and_then(|c| c.next_after(tx.now_ms.max(s.next_ms)))
            .unwrap_or(u64::MAX);
        let mut message_id = None;
        if !s.paused {
            let req = PublishReq {
                unforwarded: Vec::new(),
                dest: s.destination.clone(),
                queue: s.queue.clone(),
                conf: s.conf.clone(),
                body: s.body.as_ref().map(|b| b.0.clone()).unwrap_or_default(),
                caller_ip: s.caller_ip.clone(),
            };
            // A group that no longer exists makes the firing publish nothing.
            if let Ok(v) = tx.publish_one(&req, Origin::Schedule, Some(s.id.clone())) {
                message_id = match &v {
                    Value::Array(a) => a.first().and_then(|x| x.get("messageId")),
                    other => other.get("messageId"),
                }
                .and_then(|x| x.as_str())
                .map(str::to_string);
            }
        }
        tx.emit(Event::ScheduleFired {
            id,
            at_ms: s.next_ms,
            next_ms: next,
            message_id,
        });
    }
}
