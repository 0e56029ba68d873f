//! Reading a request body, for both services: bounded in size, and in time once it is slow.

use crate::config::{self, HTTP_BODY_READ_TIMEOUT_MS};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::task::Poll;

/// Why a body could not be read.
pub enum BodyError {
    /// Longer than the limit (bytes).
    TooLarge(usize),
    /// Still arriving after [`HTTP_BODY_READ_TIMEOUT_MS`].
    TooSlow,
    Broken(String),
}

/// The whole body, at most `max` bytes.
pub async fn read(body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    let mut read = std::pin::pin!(http_body_util::Limited::new(body, max).collect());
    // hyper hands a body over from the connection's own task, so its first poll is usually
    // pending even when the bytes have arrived. A body that takes a few wake-ups, as a slow
    // one does, gets the timer; the usual one is read without arming one.
    let mut wakeups = 0;
    let quick = std::future::poll_fn(|cx| match std::future::Future::poll(read.as_mut(), cx) {
        Poll::Ready(r) => Poll::Ready(Some(r)),
        Poll::Pending if wakeups < config::HTTP_BODY_WAKEUPS_BEFORE_TIMER => {
            wakeups += 1;
            Poll::Pending
        }
        Poll::Pending => Poll::Ready(None),
    })
    .await;
    let collected = match quick {
        Some(r) => r,
        None => {
            let timeout = std::time::Duration::from_millis(HTTP_BODY_READ_TIMEOUT_MS);
            tokio::time::timeout(timeout, read)
                .await
                .map_err(|_| BodyError::TooSlow)?
        }
    };
    match collected {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(BodyError::TooLarge(max))
        }
        Err(e) => Err(BodyError::Broken(e.to_string())),
    }
}
