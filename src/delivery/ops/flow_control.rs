//! Flow control: the keys' state, pause, resume, pin, reset; global parallelism.

use super::op::*;
use super::tx::*;
use crate::delivery::json;
use crate::delivery::model::*;
use serde_json::{json, Value};

pub(super) fn list(tx: &mut Tx, search: Option<String>) -> OpReply {
    let mut keys: Vec<&String> =
        tx.d.flows
            .keys
            .keys()
            .filter(|k| search.as_ref().is_none_or(|s| k.contains(s.as_str())))
            .collect();
    keys.sort();
    ok(Value::Array(
        keys.into_iter()
            .map(|k| json::flow_info(k, &tx.d.flows.keys[k]))
            .collect(),
    ))
}

pub(super) fn get(tx: &mut Tx, key: String) -> OpReply {
    match tx.d.flows.keys.get(&key) {
        Some(f) => ok(json::flow_info(&key, f)),
        None => not_found(&format!("flow control key {key} not found")),
    }
}

pub(super) fn global_parallelism(tx: &mut Tx) -> OpReply {
    ok(json!({
        "parallelismMax": crate::config::DELIVERY_IN_FLIGHT_MAX,
        "parallelismCount": tx.d.in_flight,
    }))
}

pub(super) fn act(tx: &mut Tx, key: String, action: FlowAction) -> OpReply {
    let f = tx.d.flows.get_mut(&key);
    let mut s = f.settings.clone();
    match action {
        FlowAction::Pause => s.paused = true,
        FlowAction::Resume => s.paused = false,
        FlowAction::Pin {
            parallelism,
            rate,
            period_s,
        } => {
            if parallelism.is_some() {
                s.pin_parallelism = parallelism;
            }
            if rate.is_some() {
                s.pin_rate = rate;
            }
            if period_s.is_some() {
                s.pin_period_s = period_s;
            }
            // Pinning starts a new rate window.
            f.window_count = 0;
        }
        FlowAction::Unpin { parallelism, rate } => {
            if parallelism {
                s.pin_parallelism = None;
            }
            if rate {
                s.pin_rate = None;
                s.pin_period_s = None;
            }
        }
        FlowAction::ResetRate => f.window_count = 0,
        FlowAction::Reset => {
            s = Default::default();
            f.window_count = 0;
        }
    }
    if s != tx.d.flows.get_mut(&key).settings {
        tx.emit(Event::FlowControl {
            key: key.clone(),
            paused: s.paused,
            pin_parallelism: s.pin_parallelism,
            pin_rate: s.pin_rate,
            pin_period_s: s.pin_period_s,
        });
    } else {
        tx.d.unpark(&key);
    }
    ok(json!({}))
}
