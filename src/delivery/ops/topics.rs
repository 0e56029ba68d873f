//! URL groups (topics): endpoints added and removed, get, list, delete.

use super::op::*;
use super::tx::*;
use crate::delivery::json;
use crate::delivery::model::*;
use serde_json::{json, Value};

pub(super) fn add(tx: &mut Tx, name: String, endpoints: Vec<Endpoint>) -> OpReply {
    let mut t = tx.d.topics.get(&name).cloned().unwrap_or(Topic {
        name: name.clone(),
        created_ms: tx.now_ms,
        updated_ms: tx.now_ms,
        endpoints: Vec::new(),
        headers: Vec::new(),
    });
    for e in endpoints {
        t.endpoints
            .retain(|x| !(x.url == e.url || (e.name.is_some() && x.name == e.name)));
        t.endpoints.push(e);
    }
    t.updated_ms = tx.now_ms;
    tx.emit(Event::Topic(t));
    ok(json!({}))
}

pub(super) fn remove(
    tx: &mut Tx,
    name: String,
    endpoints: Vec<(Option<String>, Option<String>)>,
) -> OpReply {
    let Some(mut t) = tx.d.topics.get(&name).cloned() else {
        return not_found(&format!("topic {name} not found"));
    };
    t.endpoints.retain(|x| {
        !endpoints.iter().any(|(url, n)| {
            url.as_ref().is_some_and(|u| *u == x.url) || (n.is_some() && *n == x.name)
        })
    });
    t.updated_ms = tx.now_ms;
    if t.endpoints.is_empty() {
        tx.emit(Event::TopicDelete { name });
    } else {
        tx.emit(Event::Topic(t));
    }
    ok(json!({}))
}

pub(super) fn get(tx: &mut Tx, name: String) -> OpReply {
    match tx.d.topics.get(&name) {
        Some(t) => ok(json::topic(t)),
        None => not_found(&format!("topic {name} not found")),
    }
}

pub(super) fn list(tx: &mut Tx) -> OpReply {
    ok(Value::Array(
        tx.d.topics.values().map(json::topic).collect(),
    ))
}

/// `DELETE /v2/topics/<name>`: idempotent, as the hosted service is (the SDKs' own flows
/// delete a URL group before they create it, and expect success): a group that does not
/// exist answers 200 too, and nothing is logged.
pub(super) fn delete(tx: &mut Tx, name: String) -> OpReply {
    if tx.d.topics.contains_key(&name) {
        tx.emit(Event::TopicDelete { name });
    }
    ok(json!({}))
}

/// `PATCH /v2/topics/<name>` with `{"headers": {...}}`: replaces the group's default headers
/// (checked as a publish's would be; an empty map clears them).
pub(super) fn set_headers(tx: &mut Tx, name: String, headers: Vec<(String, String)>) -> OpReply {
    let Some(t) = tx.d.topics.get(&name) else {
        return not_found(&format!("topic {name} not found"));
    };
    let mut t = t.clone();
    t.headers = headers;
    t.updated_ms = tx.now_ms;
    tx.emit(Event::Topic(t.clone()));
    ok(json::topic(&t))
}
