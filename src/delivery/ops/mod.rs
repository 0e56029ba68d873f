//! API operations against the delivery state, run by the executor: one file per resource
//! (messages, DLQ, URL groups, queues, schedules, workflow runs, flow control, logs), and
//! [`run`], which hands each operation to its resource.
//!
//! An operation reads the state and `emit`s events; `emit` applies each event at once (so a
//! later step of the same operation sees the earlier ones) and collects it for the log record.
//! The executor writes the collected events as one record and answers after it is durable.
//! Nothing here does I/O or reads the clock: `now_ms` and the random source come in.

mod dlq;
mod filter;
mod flow_control;
mod logs;
mod messages;
mod op;
mod queues;
mod schedules;
mod topics;
mod tx;
mod workflow;

pub use messages::attempt_done;
pub use op::*;
pub use schedules::fire_schedules;
pub use tx::Tx;
pub use workflow::expire_waiters;

/// Runs an operation. The caller logs `tx.events` and answers `OpReply` once they are durable.
pub fn run(tx: &mut Tx, op: Op) -> OpReply {
    match op {
        Op::Publish(req) => messages::publish(tx, req),
        Op::Batch(items) => messages::batch(tx, items),
        Op::Trigger { items, single } => messages::trigger(tx, items, single),
        Op::MessageGet(id) => messages::get(tx, id),
        Op::MessageCancel(id) => messages::cancel(tx, id),
        Op::MessagesCancel(f) => messages::cancel_many(tx, f),
        Op::DlqList(f) => dlq::list(tx, f),
        Op::DlqGet(id) => dlq::get(tx, id),
        Op::DlqDelete(id) => dlq::delete(tx, id),
        Op::DlqDeleteMany(f) => dlq::delete_many(tx, f),
        Op::DlqRetry {
            filter,
            single,
            overrides,
        } => dlq::retry(tx, filter, single, overrides),
        Op::RunRecover {
            how,
            filter,
            single,
            overrides,
        } => workflow::recover(tx, how, filter, single, overrides),
        Op::RunFailureCallback(id) => workflow::failure_callback(tx, id),
        Op::RunFailureCallbackCancel(id) => workflow::failure_callback_cancel(tx, id),
        Op::TopicAdd { name, endpoints } => topics::add(tx, name, endpoints),
        Op::TopicRemove { name, endpoints } => topics::remove(tx, name, endpoints),
        Op::TopicGet(name) => topics::get(tx, name),
        Op::TopicHeaders { name, headers } => topics::set_headers(tx, name, headers),
        Op::TopicList => topics::list(tx),
        Op::TopicDelete(name) => topics::delete(tx, name),
        Op::QueueUpsert(q) => queues::upsert(tx, q),
        Op::QueueGet(name) => queues::get(tx, name),
        Op::QueueList => queues::list(tx),
        Op::QueueDelete(name) => queues::delete(tx, name),
        Op::QueuePause(name, paused) => queues::pause(tx, name, paused),
        Op::ScheduleCreate(req) => schedules::create(tx, req),
        Op::ScheduleGet(id) => schedules::get(tx, id),
        Op::ScheduleList => schedules::list(tx),
        Op::ScheduleDelete(id) => schedules::delete(tx, id),
        Op::SchedulePause(id, paused) => schedules::pause(tx, id, paused),
        Op::Wait(w) => workflow::wait(tx, w),
        Op::Notify {
            event_id,
            body,
            run_id,
        } => workflow::notify(tx, &event_id, &body, run_id.as_deref()),
        Op::WorkflowLogs(f) => workflow::logs(tx.d, &f),
        Op::FlowList(search) => flow_control::list(tx, search),
        Op::FlowGet(key) => flow_control::get(tx, key),
        Op::GlobalParallelism => flow_control::global_parallelism(tx),
        Op::FlowAction { key, action } => flow_control::act(tx, key, action),
        Op::RunGet(id) => workflow::run_get(tx, id),
        Op::RunDelete { id, cancel, body } => workflow::run_delete(tx, id, cancel, body),
        Op::RunsCancel(f) => workflow::runs_cancel(tx, f),
        Op::Waiters(event_id) => workflow::waiters(tx, event_id),
        Op::Logs(f) => logs::logs(tx.d, &f),
    }
}
