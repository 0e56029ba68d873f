//! The body of an event stream, and the wire format of server-sent events: each payload from
//! the executor as a `data:` line, a comment every 15 s so dead peers are noticed, and a notice
//! before closing a stream that fell behind or was ended.

use crate::executor::{Job, StreamItem};
use bytes::Bytes;
use hyper::body::Frame;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// One event as the wire carries it: `data: <payload>` and a blank line.
pub fn event(payload: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(payload.len() + 8);
    v.extend_from_slice(DATA);
    v.extend_from_slice(payload);
    v.extend_from_slice(END);
    Bytes::from(v)
}

const DATA: &[u8] = b"data: ";
const END: &[u8] = b"\n\n";

pub struct SseBody {
    pub rx: mpsc::Receiver<StreamItem>,
    /// The rest of the event being written: its payload, then its end (an event goes out as
    /// three frames, so a payload shared by every subscriber is never copied here).
    pub rest: [Option<Bytes>; 2],
    pub ping: tokio::time::Interval,
    pub lagged: Arc<AtomicBool>,
    /// Bytes the executor queued that this body has not handed to the connection yet.
    pub queued: Arc<AtomicUsize>,
    /// Sent once when the executor dropped this stream for falling behind.
    pub lag_notice: Option<Bytes>,
    /// Tells the executor the stream is gone when the client disconnects.
    pub unsubscribe: Option<(mpsc::Sender<Job>, crate::state::databases::DbId, u64)>,
    pub done: bool,
}

impl Drop for SseBody {
    fn drop(&mut self) {
        if let Some((tx, db, id)) = self.unsubscribe.take() {
            // If the queue is full the executor still notices the closed channel on the next
            // event it sends to this stream.
            let _ = tx.try_send(Job::Unsubscribe { db, id });
        }
    }
}

impl SseBody {
    pub fn poll_event(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        for slot in 0..self.rest.len() {
            if let Some(b) = self.rest[slot].take() {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
        }
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(StreamItem::Event(b))) => {
                self.queued.fetch_sub(b.len(), Ordering::AcqRel);
                self.rest = [Some(b), Some(Bytes::from_static(END))];
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(DATA)))));
            }
            Poll::Ready(Some(StreamItem::End(why))) => {
                self.done = true;
                let notice = format!(": tidepool: {why}; this stream is closed\n\n");
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(notice)))));
            }
            Poll::Ready(None) => {
                self.done = true;
                if self.lagged.load(Ordering::SeqCst) {
                    if let Some(n) = self.lag_notice.take() {
                        return Poll::Ready(Some(Ok(Frame::data(n))));
                    }
                }
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        match Pin::new(&mut self.ping).poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b": ping\n\n"))))),
            Poll::Pending => Poll::Pending,
        }
    }
}
