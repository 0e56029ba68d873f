//! The dead-letter queue: list, get, delete, retry.

use super::filter::*;
use super::op::*;
use super::tx::*;
use crate::delivery::json;
use crate::delivery::model::*;
use serde_json::{json, Map, Value};

pub(super) fn list(tx: &mut Tx, f: Filter) -> OpReply {
    let (page, cursor) = dlq_page(tx.d, &f);
    let messages: Vec<Value> = page
        .iter()
        .map(|id| json::dlq_entry(tx.d, &tx.d.dlq[id]))
        .collect();
    let mut m = Map::new();
    m.insert("messages".into(), Value::Array(messages));
    if let Some(c) = cursor {
        m.insert("cursor".into(), json!(c));
    }
    ok(Value::Object(m))
}

pub(super) fn get(tx: &mut Tx, id: String) -> OpReply {
    match tx.d.dlq.get(&id) {
        Some(e) => ok(json::dlq_entry(tx.d, e)),
        None => not_found(&format!("dlq message {id} not found")),
    }
}

pub(super) fn delete(tx: &mut Tx, id: String) -> OpReply {
    if !tx.d.dlq.contains_key(&id) {
        return not_found(&format!("dlq message {id} not found"));
    }
    tx.emit(Event::DlqRemove { ids: vec![id] });
    ok(json!({"deleted": 1}))
}

pub(super) fn delete_many(tx: &mut Tx, f: Filter) -> OpReply {
    let (ids, cursor) = dlq_page(tx.d, &f);
    let n = ids.len();
    if n > 0 {
        tx.emit(Event::DlqRemove { ids });
    }
    let mut m = Map::new();
    m.insert("deleted".into(), json!(n));
    if let Some(c) = cursor {
        m.insert("cursor".into(), json!(c));
    }
    ok(Value::Object(m))
}

pub(super) fn retry(tx: &mut Tx, filter: Filter, single: bool, overrides: Conf) -> OpReply {
    let (ids, cursor) = dlq_page(tx.d, &filter);
    if single && ids.is_empty() {
        return not_found("dlq message not found");
    }
    let mut responses = Vec::new();
    for id in &ids {
        let Some(e) = tx.d.dlq.get(id) else { continue };
        let old = e.message.clone();
        let mut c = old.conf.clone();
        c.delay_ms = None;
        c.not_before_ms = None;
        override_conf(&mut c, &overrides);
        let mut m = tx.message(
            &old.url,
            &c,
            old.body.0.clone(),
            Origin::DlqRetry,
            old.topic
                .as_deref()
                .map(|t| (t, old.endpoint.as_deref().map(str::to_string))),
            None,
            old.schedule_id.as_deref().map(str::to_string),
            old.caller_ip.as_deref().map(str::to_string),
        );
        m.method = overrides
            .method
            .as_deref()
            .and_then(HttpMethod::parse)
            .unwrap_or(old.method);
        responses.push(json!({"messageId": m.id}));
        tx.emit(Event::Put(Box::new(m)));
    }
    if !ids.is_empty() {
        tx.emit(Event::DlqRemove { ids });
    }
    if single {
        return ok(responses.pop().unwrap_or(Value::Null));
    }
    ok(json!({"cursor": cursor.unwrap_or_default(), "responses": responses}))
}
