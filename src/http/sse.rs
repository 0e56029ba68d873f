//! The body of an event stream: events from the executor, a comment every 15 s so dead peers
//! are noticed, and a notice before closing a stream that fell behind.

use crate::executor::Job;
use bytes::Bytes;
use hyper::body::Frame;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

pub struct SseBody {
    pub rx: mpsc::Receiver<Bytes>,
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
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => {
                self.queued.fetch_sub(b.len(), Ordering::AcqRel);
                return Poll::Ready(Some(Ok(Frame::data(b))));
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
