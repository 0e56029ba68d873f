//! Selecting messages, DLQ entries and runs by the filters the SDKs send (`Filter`): shared by
//! the list, bulk-delete and bulk-cancel operations of every resource.

use super::op::Filter;
use crate::config::DLQ_PAGE_ENTRIES_MAX;
use crate::delivery::model::*;
use crate::delivery::Delivery;

/// A numbered page of a list that is walked newest first: how many items it holds (`count`,
/// or `default`, at most `max`) and how many come before it (the cursor is that number).
pub(super) fn page(f: &Filter, default: usize, max: usize) -> (usize, usize) {
    let count = f.count.unwrap_or(default).clamp(1, max);
    let skip = f
        .cursor
        .as_deref()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (count, skip)
}

pub(super) fn values<'f>(f: &'f Filter, name: &str) -> Option<&'f [String]> {
    f.params
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

pub(super) fn any_eq(f: &Filter, name: &str, have: Option<&str>) -> bool {
    match values(f, name) {
        None => true,
        Some(vs) => have.is_some_and(|h| vs.iter().any(|v| v == h)),
    }
}

pub(super) fn message_matches(m: &Message, time_ms: u64, f: &Filter) -> bool {
    let (host, path) = split_url(&m.url);
    let time_ok = values(f, "fromDate")
        .and_then(|v| v.first())
        .and_then(|v| v.parse::<u64>().ok())
        .is_none_or(|from| time_ms >= from)
        && values(f, "toDate")
            .and_then(|v| v.first())
            .and_then(|v| v.parse::<u64>().ok())
            .is_none_or(|to| time_ms <= to);
    time_ok
        && any_eq(f, "messageId", Some(&m.id))
        && any_eq(f, "url", Some(&m.url))
        && any_eq(f, "host", Some(host))
        && any_eq(f, "path", Some(path))
        && any_eq(f, "topicName", m.topic.as_deref())
        && any_eq(f, "queueName", m.queue.as_deref())
        && any_eq(f, "scheduleId", m.schedule_id.as_deref())
        && any_eq(f, "callerIp", m.caller_ip.as_deref())
        && any_eq(f, "flowControlKey", m.conf.flow_key.as_deref())
        && values(f, "label").is_none_or(|vs| m.conf.labels.iter().any(|l| vs.contains(l)))
}

pub(super) fn split_url(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map(|x| x.1).unwrap_or(url);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    }
}

/// Whether a DLQ entry passes the workflow DLQ's filters (`source=workflow`).
pub(super) fn run_entry_matches(d: &Delivery, e: &DlqEntry, f: &Filter) -> bool {
    let Some(run_id) = e.message.conf.run_id().filter(|_| e.is_run_entry()) else {
        return false;
    };
    let created = d.runs.get(run_id).map(|r| r.created_ms.to_string());
    let state = d.failure_calls.get(&*e.message.id).map(|c| c.state);
    any_eq(f, "workflowRunId", Some(run_id))
        && any_eq(f, "workflowUrl", Some(d.run_url(&e.message)))
        && any_eq(f, "workflowCreatedAt", created.as_deref())
        && any_eq(f, "failureFunctionState", state)
}

/// One page of DLQ ids in order, after the cursor; and the cursor of the next page.
pub(super) fn dlq_page(d: &Delivery, f: &Filter) -> (Vec<String>, Option<String>) {
    let count = f
        .count
        .unwrap_or(DLQ_PAGE_ENTRIES_MAX)
        .clamp(1, DLQ_PAGE_ENTRIES_MAX);
    if !f.ids.is_empty() {
        return (
            f.ids
                .iter()
                .filter(|i| d.dlq.contains_key(*i))
                .cloned()
                .collect(),
            None,
        );
    }
    // A workflow filter selects workflow entries even without `source=workflow`: otherwise
    // it would be ignored, and a bulk delete by run id would take every entry.
    let workflow = values(f, "source").is_some_and(|v| v.iter().any(|s| s == "workflow"))
        || [
            "workflowRunId",
            "workflowUrl",
            "workflowCreatedAt",
            "failureFunctionState",
        ]
        .iter()
        .any(|k| values(f, k).is_some());
    let start = f.cursor.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut more = false;
    for (id, e) in d
        .dlq
        .range::<String, _>((std::ops::Bound::Excluded(start), std::ops::Bound::Unbounded))
    {
        let status = e.response.status.to_string();
        if !message_matches(&e.message, e.failed_ms, f)
            || !any_eq(f, "responseStatus", Some(&status))
            || !any_eq(f, "dlqIds", Some(id))
            || (workflow && !run_entry_matches(d, e, f))
        {
            continue;
        }
        if out.len() == count {
            more = true;
            break;
        }
        out.push(id.clone());
    }
    let cursor = if more { out.last().cloned() } else { None };
    (out, cursor)
}
