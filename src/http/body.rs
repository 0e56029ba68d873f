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

/// The whole body, at most `max` bytes. A declared length (Content-Length) past `max` is
/// refused before anything is read. The bytes are copied out of each frame as it arrives into
/// one buffer sized by what has arrived: a frame is a slice of the connection's read buffer,
/// and keeping the frames of a body that trickles in a byte at a time would keep a read
/// buffer alive for every byte (4 KB a byte, measured). A body that comes in one frame is kept
/// as it is.
pub async fn read(body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    use hyper::body::Body as _;
    if body.size_hint().lower() > max as u64 {
        return Err(BodyError::TooLarge(max));
    }
    let mut read = std::pin::pin!(gather(body, max));
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
    match quick {
        Some(r) => r,
        None => {
            let timeout = std::time::Duration::from_millis(HTTP_BODY_READ_TIMEOUT_MS);
            tokio::time::timeout(timeout, read)
                .await
                .map_err(|_| BodyError::TooSlow)?
        }
    }
}

/// The frames of `body` joined, at most `max` bytes.
async fn gather(mut body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if data.is_empty() {
            continue;
        }
        let held = first.as_ref().map_or(0, Bytes::len) + joined.len();
        if held + data.len() > max {
            return Err(BodyError::TooLarge(max));
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            Some(f) => {
                joined.reserve(f.len() + data.len());
                joined.extend_from_slice(&f);
                joined.extend_from_slice(&data);
            }
            None => joined.extend_from_slice(&data),
        }
    }
    Ok(match first {
        Some(f) => f,
        None => Bytes::from(joined),
    })
}
