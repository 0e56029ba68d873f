//! The ceiling of an HTTP server on this machine: bare hyper, on the same runtime tidepool
//! uses (tokio, as many HTTP threads as tidepool takes by default), answering every request
//! with a constant `{"result":"value"}`. What tidepool's GET and SET spend beyond it is theirs;
//! issue 27 holds them to a share of it.
//!
//!     target/release/tidepool-bench --ceiling-server PORT    (the load form starts it itself)

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use std::convert::Infallible;

async fn answer(_: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"{\"result\":\"value\"}")));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

/// Serves on `port` until killed.
pub fn serve(port: u16) -> Result<(), String> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get().saturating_sub(1).max(1))
        .unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, hyper::service::service_fn(answer))
                    .await;
            });
        }
    })
}
