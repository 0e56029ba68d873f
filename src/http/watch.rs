//! A connection's watchdog: closes a connection that stays idle, or that takes too long to
//! send a request's head (one that never sends anything included). Reads and writes only
//! bump counters; the watchdog, one timer per connection, looks at them now and then. hyper's
//! own header-read timer would arm a new timer for every request (measured: about 2% of
//! GET and SET throughput).

use crate::config::{HTTP_HEADER_READ_TIMEOUT_MS, HTTP_IDLE_TIMEOUT_MS};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What the connection's side records.
#[derive(Default)]
pub struct Watch {
    /// Bumped by every read or write that moved bytes.
    io: AtomicU64,
    /// Bumped when a request's head is whole.
    requests: AtomicU64,
    /// Bytes arrived while no request was being answered: a request head is on its way.
    head_pending: AtomicBool,
    /// A request is being answered (its head was read; nothing of its answer is written yet).
    serving: AtomicBool,
}

impl Watch {
    // One task writes these (the connection's: its reads, writes and service calls), so a
    // load and a store do, without a locked instruction.
    fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    fn read(&self) {
        Self::bump(&self.io);
        if !self.serving.load(Ordering::Relaxed) {
            self.head_pending.store(true, Ordering::Relaxed);
        }
    }

    /// An answer is going out (an event stream's head, then its keep-alive comments, count
    /// as traffic): the request is no longer waited on.
    fn wrote(&self) {
        Self::bump(&self.io);
        self.serving.store(false, Ordering::Relaxed);
    }

    /// A request's head was read: hyper hands it to the service.
    pub fn request_started(&self) {
        self.serving.store(true, Ordering::Relaxed);
        self.head_pending.store(false, Ordering::Relaxed);
        Self::bump(&self.requests);
    }
}

/// The watchdog's own view, updated at each look.
#[derive(Default)]
pub struct Dog {
    last_io: u64,
    last_requests: u64,
    /// How long nothing moved while nothing was being answered.
    idle_ms: u64,
    /// How long a request head has been on its way.
    head_ms: u64,
}

impl Dog {
    /// Looks at `w`, `elapsed_ms` after the previous look: whether to close the connection
    /// (idle past [`HTTP_IDLE_TIMEOUT_MS`], or a head on its way past
    /// [`HTTP_HEADER_READ_TIMEOUT_MS`]).
    pub fn expired(&mut self, w: &Watch, elapsed_ms: u64) -> bool {
        let io = w.io.load(Ordering::Relaxed);
        let requests = w.requests.load(Ordering::Relaxed);
        if io != self.last_io || w.serving.load(Ordering::Relaxed) {
            self.idle_ms = 0;
        } else {
            self.idle_ms += elapsed_ms;
        }
        if w.head_pending.load(Ordering::Relaxed) && requests == self.last_requests {
            self.head_ms += elapsed_ms;
        } else {
            self.head_ms = 0;
        }
        self.last_io = io;
        self.last_requests = requests;
        self.idle_ms > HTTP_IDLE_TIMEOUT_MS || self.head_ms > HTTP_HEADER_READ_TIMEOUT_MS
    }
}

/// A stream that tells its [`Watch`] about every read and write.
pub struct Watched<S> {
    pub inner: S,
    pub watch: std::sync::Arc<Watch>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.watch.read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            if *n > 0 {
                me.watch.wrote();
            }
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_slow_heads_expire_and_answers_in_progress_do_not() {
        let step = 1_000;
        let looks = |ms: u64| ms / step + 1;
        // Never a byte: idle.
        let (w, mut d) = (Watch::default(), Dog::default());
        let closed_after = (0..100).position(|_| d.expired(&w, step));
        assert_eq!(closed_after, Some(looks(HTTP_IDLE_TIMEOUT_MS) as usize - 1));
        // A head that trickles in, a byte between looks: closed at the header timeout.
        let (w, mut d) = (Watch::default(), Dog::default());
        let closed_after = (0..100).position(|_| {
            w.read();
            d.expired(&w, step)
        });
        assert_eq!(
            closed_after,
            Some(looks(HTTP_HEADER_READ_TIMEOUT_MS) as usize - 1)
        );
        // A request being answered for long (a script): never; body bytes are no head.
        let (w, mut d) = (Watch::default(), Dog::default());
        w.read();
        w.request_started();
        w.read();
        assert!((0..100).all(|_| !d.expired(&w, step)));
        // Answered, then keep-alive comments of an event stream every 15 s: never.
        w.wrote();
        assert!((0..100).all(|i| {
            if i % 15 == 0 {
                w.wrote();
            }
            !d.expired(&w, step)
        }));
    }
}
