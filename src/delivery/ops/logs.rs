//! `GET /v2/logs` (and `/v2/events`), with the filters the list and bulk operations share.

use super::filter::*;
use super::op::*;
use crate::config::{LOG_PAGE_ENTRIES_DEFAULT, LOG_PAGE_ENTRIES_MAX};
use crate::delivery::json;
use crate::delivery::Delivery;
use serde_json::{json, Map, Value};

pub(super) fn logs(d: &Delivery, f: &Filter) -> OpReply {
    // Newest first; the cursor is how many matching entries were already returned.
    let (count, skip) = page(f, LOG_PAGE_ENTRIES_DEFAULT, LOG_PAGE_ENTRIES_MAX);
    let mut events = Vec::new();
    let mut seen = 0usize;
    let mut more = false;
    for l in d.logs.iter().rev() {
        let time_ok = values(f, "fromDate")
            .and_then(|v| v.first())
            .and_then(|v| v.parse::<u64>().ok())
            .is_none_or(|from| l.time_ms >= from)
            && values(f, "toDate")
                .and_then(|v| v.first())
                .and_then(|v| v.parse::<u64>().ok())
                .is_none_or(|to| l.time_ms <= to);
        let ids_ok = f.ids.is_empty() || f.ids.iter().any(|i| **i == *l.message_id);
        if !(time_ok
            && ids_ok
            && any_eq(f, "messageId", Some(&l.message_id))
            && any_eq(f, "state", Some(l.state))
            && any_eq(f, "url", Some(&l.url))
            && any_eq(f, "host", Some(split_url(&l.url).0))
            && any_eq(f, "path", Some(split_url(&l.url).1))
            && any_eq(f, "topicName", l.topic.as_deref())
            && any_eq(f, "scheduleId", l.schedule_id.as_deref())
            && any_eq(f, "queueName", l.queue.as_deref())
            && any_eq(f, "callerIp", l.caller_ip.as_deref())
            && any_eq(f, "flowControlKey", l.flow_key.as_deref())
            && values(f, "label").is_none_or(|vs| l.labels.iter().any(|x| vs.contains(x))))
        {
            continue;
        }
        seen += 1;
        if seen <= skip {
            continue;
        }
        if events.len() == count {
            more = true;
            break;
        }
        events.push(json::log(l));
    }
    let mut m = Map::new();
    if more {
        m.insert("cursor".into(), json!((skip + count).to_string()));
    }
    m.insert("events".into(), Value::Array(events));
    ok(Value::Object(m))
}
