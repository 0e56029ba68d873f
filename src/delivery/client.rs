//! The delivery thread's HTTP client. Plain `http://` destinations go over hyper's HTTP/1.1
//! connections directly, kept open in a pool of this module's own; `https://` destinations,
//! and every destination when the environment names a proxy (`http_proxy`, `all_proxy`),
//! go through reqwest, which brings rustls, its roots and its proxy support. Redirects are
//! followed here for both, so one rule holds whichever carries the request: 307 and 308 with
//! method and body kept, at most `DELIVERY_REDIRECTS_MAX` of them; any other 3xx is the answer.
//!
//! reqwest's own path costs each request a header map merged into another, a copy for its
//! retry and redirect layers and boxed futures, and the allocations of all of them: at 20,000
//! deliveries a second, going around it took the server's CPU a message from about 77 µs to
//! 66 µs. The destinations a self-hosted server delivers to are mostly plain HTTP on a local
//! network or loopback.
//!
//! Only the delivery thread uses a `Client` (every attempt runs on its runtime), so the pool's
//! lock is never contended.

use crate::config::{
    DELIVERY_IDLE_CONNECTIONS_MAX, DELIVERY_IDLE_CONNECTIONS_PER_HOST_MAX,
    DELIVERY_IDLE_CONNECTION_MS, DELIVERY_REDIRECTS_MAX,
};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderValue};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::timeout_at;

/// What an attempt got back: status, headers and as much of the body as was kept.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Set when the body could not be read to its end (a timeout, a reset).
    pub error: Option<String>,
}

/// A connection to one destination, idle in the pool since `since`.
struct Idle {
    sender: SendRequest<Full<Bytes>>,
    since: Instant,
}

pub struct Client {
    /// Idle plain-HTTP connections by `host:port`.
    idle: Mutex<HashMap<Arc<str>, Vec<Idle>>>,
    /// For `https://` and proxies; never follows a redirect itself.
    reqwest: reqwest::Client,
    /// False when the environment names a proxy: then reqwest carries every request, as it
    /// did before this client had a path of its own.
    direct: bool,
}

/// The proxy variables reqwest reads for plain-HTTP destinations.
const PROXY_VARIABLES: [&str; 4] = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"];

impl Client {
    pub fn new() -> Result<Client, String> {
        let reqwest = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(DELIVERY_IDLE_CONNECTIONS_PER_HOST_MAX)
            .pool_idle_timeout(Duration::from_millis(DELIVERY_IDLE_CONNECTION_MS))
            .build()
            .map_err(|e| format!("cannot build the delivery HTTP client: {e}"))?;
        let direct = !PROXY_VARIABLES
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
        Ok(Client {
            idle: Mutex::new(HashMap::new()),
            reqwest,
            direct,
        })
    }

    /// Sends `body` to `url` with the headers `headers` makes (the delivery's own and the
    /// forwarded ones; `Host`, `Accept` and `Content-Length` are added here), follows 307 and
    /// 308, and reads the answer's body up to `body_max` bytes, all before `deadline`. An error
    /// is an attempt that got no answer. The headers are made again for each redirect, which
    /// is rare, rather than copied for every request in case one comes.
    pub async fn send(
        &self,
        method: hyper::Method,
        mut url: reqwest::Url,
        headers: impl Fn() -> Result<HeaderMap, String>,
        body: Bytes,
        body_max: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Answer, String> {
        let mut hops = 0;
        // What the redirects so far changed: the credentials dropped once the request left
        // their origin, and the URL that sent it on.
        let mut credentials_dropped = false;
        let mut referer: Option<HeaderValue> = None;
        loop {
            let mut h = headers()?;
            if credentials_dropped {
                for name in [
                    hyper::header::AUTHORIZATION,
                    hyper::header::COOKIE,
                    hyper::header::PROXY_AUTHORIZATION,
                    hyper::header::WWW_AUTHENTICATE,
                ] {
                    h.remove(name);
                }
            }
            if !h.contains_key(hyper::header::ACCEPT) {
                // What reqwest sent by default; a destination may route on it.
                h.try_insert(hyper::header::ACCEPT, HeaderValue::from_static("*/*"))
                    .map_err(|_| too_many_headers())?;
            }
            if let Some(r) = &referer {
                h.try_insert(hyper::header::REFERER, r.clone())
                    .map_err(|_| too_many_headers())?;
            }
            let answer = timeout_at(deadline, self.once(method.clone(), &url, h, body.clone()))
                .await
                .map_err(|_| timed_out())??;
            let status = answer.status();
            let next = match answer.location() {
                Some(l) if matches!(status, 307 | 308) && hops < DELIVERY_REDIRECTS_MAX => url
                    .join(l)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https")),
                _ => None,
            };
            let Some(next) = next else {
                return Ok(answer.read(self, body_max, deadline).await);
            };
            // As reqwest did: credentials stay with their origin, and the next request names
            // the one that sent it on (unless that would tell a plain-HTTP host an https URL).
            credentials_dropped |= next.origin() != url.origin();
            referer = None;
            if !(url.scheme() == "https" && next.scheme() == "http") {
                let mut from = url.clone();
                let _ = from.set_username("");
                let _ = from.set_password(None);
                from.set_fragment(None);
                referer = HeaderValue::from_str(from.as_str()).ok();
            }
            hops += 1;
            url = next;
        }
    }

    /// One request, up to its answer's head.
    async fn once(
        &self,
        method: hyper::Method,
        url: &reqwest::Url,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Pending, String> {
        if !(self.direct && url.scheme() == "http") {
            let r = self
                .reqwest
                .request(method, url.clone())
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(|e| describe(&e))?;
            return Ok(Pending::Reqwest(r));
        }
        let target = super::conf::remembered(&TARGETS, url.as_str(), || Target::of(url))?;
        let mut req = hyper::Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = target.uri;
        *req.headers_mut() = headers;
        if req
            .headers_mut()
            .try_insert(hyper::header::HOST, target.host_header)
            .is_err()
        {
            return Err(too_many_headers());
        }
        if let Some(v) = target.authorization {
            // As reqwest did: credentials in the URL become Basic authorization, unless the
            // message forwards an Authorization of its own.
            if !req.headers().contains_key(hyper::header::AUTHORIZATION)
                && req
                    .headers_mut()
                    .try_insert(hyper::header::AUTHORIZATION, v)
                    .is_err()
            {
                return Err(too_many_headers());
            }
        }
        let key = target.key;
        // An idle connection first; one that turns out closed (the destination closed it while
        // it waited, which hyper may see only now) gives the request back, and the next is
        // tried, then a new one. A request is sent again only when it was not sent at all.
        let mut req = req;
        while let Some(mut sender) = self.take_idle(&key) {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(Pending::Direct(resp, Some((key, sender)))),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(sending(url, e.error())),
                },
            }
        }
        let mut sender = self.connect(url, &target.host, target.port).await?;
        sender.ready().await.map_err(|e| sending(url, &e))?;
        match sender.send_request(req).await {
            Ok(resp) => Ok(Pending::Direct(resp, Some((key, sender)))),
            Err(e) => Err(sending(url, &e)),
        }
    }

    async fn connect(
        &self,
        url: &reqwest::Url,
        host: &str,
        port: u16,
    ) -> Result<SendRequest<Full<Bytes>>, String> {
        let cannot = |e: &dyn std::fmt::Display| format!("cannot connect: {url}: {e}");
        // An address in the URL is used as it is (tokio parses it without a lookup); a name is
        // looked up, and its addresses are tried in turn.
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| cannot(&e))?
            .collect();
        let mut last = None;
        let mut stream = None;
        for a in addrs {
            match tokio::net::TcpStream::connect(a).await {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match (stream, last) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(cannot(&e)),
            (None, None) => return Err(cannot(&"the host has no address")),
        };
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .map_err(|e| cannot(&e))?;
        // The connection's own task reads and writes; it ends when the destination closes it
        // or its last sender is dropped.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// An idle connection to `key` that has not been closed, if the pool holds one; those
    /// idle longer than `DELIVERY_IDLE_CONNECTION_MS` are closed on the way.
    fn take_idle(&self, key: &str) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        let mut found = None;
        while let Some(c) = list.pop() {
            if c.sender.is_closed() || c.since.elapsed() > idle_timeout() {
                continue;
            }
            found = Some(c.sender);
            break;
        }
        if list.is_empty() {
            idle.remove(key);
        }
        found
    }

    /// Keeps `sender`'s connection for the next request to `key`, if there is room.
    fn put_idle(&self, key: Arc<str>, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let total: usize = idle.values().map(Vec::len).sum();
        if total >= DELIVERY_IDLE_CONNECTIONS_MAX {
            return;
        }
        let list = idle.entry(key).or_default();
        if list.len() < DELIVERY_IDLE_CONNECTIONS_PER_HOST_MAX {
            list.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// Closes the connections idle longer than `DELIVERY_IDLE_CONNECTION_MS` (the delivery
    /// thread calls it now and then, so that a destination no longer used is let go).
    pub fn close_stale(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|_, list| {
            list.retain(|c| !c.sender.is_closed() && c.since.elapsed() <= idle_timeout());
            !list.is_empty()
        });
    }
}

/// What a plain-HTTP request to one destination URL needs besides its headers and body,
/// made once per URL: each attempt made it anew, two strings formatted and a request target
/// and a header parsed, about 3,000 instructions.
#[derive(Clone)]
struct Target {
    /// The pool's key, `host:port`.
    key: Arc<str>,
    /// The host as the URL names it (an IPv6 address in brackets), and the port.
    host: Arc<str>,
    port: u16,
    /// The request target: path and query.
    uri: hyper::Uri,
    /// `Host`: the host, and the port when the URL names one.
    host_header: HeaderValue,
    /// Basic authorization from the URL's user and password.
    authorization: Option<HeaderValue>,
}

impl Target {
    fn of(url: &reqwest::Url) -> Result<Target, String> {
        let Some(host) = url.host_str() else {
            return Err(format!("the destination {url} names no host"));
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let target = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        Ok(Target {
            key: format!("{host}:{port}").into(),
            host: host.into(),
            port,
            uri: target
                .parse()
                .map_err(|e| format!("the destination {url} is not a request target: {e}"))?,
            host_header: HeaderValue::from_str(&authority)
                .map_err(|_| format!("the destination {url} names a host no header can carry"))?,
            authorization: basic_auth(url),
        })
    }
}

thread_local! {
    /// The delivery thread's `Target`s of recent destinations (`conf::remembered`).
    static TARGETS: std::cell::RefCell<HashMap<Box<str>, Target>> =
        std::cell::RefCell::new(HashMap::new());
}

fn idle_timeout() -> Duration {
    Duration::from_millis(DELIVERY_IDLE_CONNECTION_MS)
}

/// `Basic` authorization from the user and password a URL names (percent-decoded), if any.
fn basic_auth(url: &reqwest::Url) -> Option<HeaderValue> {
    use base64::Engine;
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let mut plain = percent_decoded(url.username());
    plain.push(b':');
    plain.extend(percent_decoded(url.password().unwrap_or("")));
    let encoded = base64::engine::general_purpose::STANDARD.encode(plain);
    let mut v = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

fn percent_decoded(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if let (b'%', Some(h), Some(l)) = (
            b[i],
            b.get(i + 1).and_then(|c| hex(*c)),
            b.get(i + 2).and_then(|c| hex(*c)),
        ) {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// A request that failed once under way (the connection reset or closed before the answer).
fn sending(url: &reqwest::Url, e: &hyper::Error) -> String {
    format!("error sending request for url ({url}): {e}")
}

fn timed_out() -> String {
    "attempt timed out".to_string()
}

fn too_many_headers() -> String {
    "the message forwards more headers than one request can carry".to_string()
}

/// An answer whose head has come and whose body has not been read.
enum Pending {
    /// With the connection to give back to the pool once the body has been read to its end.
    Direct(
        hyper::Response<hyper::body::Incoming>,
        Option<(Arc<str>, SendRequest<Full<Bytes>>)>,
    ),
    Reqwest(reqwest::Response),
}

impl Pending {
    fn status(&self) -> u16 {
        match self {
            Pending::Direct(r, _) => r.status().as_u16(),
            Pending::Reqwest(r) => r.status().as_u16(),
        }
    }

    fn headers(&self) -> &HeaderMap {
        match self {
            Pending::Direct(r, _) => r.headers(),
            Pending::Reqwest(r) => r.headers(),
        }
    }

    fn location(&self) -> Option<&str> {
        self.headers()
            .get(hyper::header::LOCATION)
            .and_then(|v| v.to_str().ok())
    }

    /// Reads the body, keeping at most `max` bytes; a direct connection read to its end goes
    /// back to `client`'s pool.
    async fn read(self, client: &Client, max: usize, deadline: tokio::time::Instant) -> Answer {
        let status = self.status();
        let headers = self
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    super::conf::canonical(k.as_str()),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = Vec::new();
        let mut error = None;
        match self {
            Pending::Direct(resp, back) => {
                let mut incoming = resp.into_body();
                let mut ended = false;
                loop {
                    match timeout_at(deadline, incoming.frame()).await {
                        Err(_) => {
                            error = Some(timed_out());
                            break;
                        }
                        Ok(None) => {
                            ended = true;
                            break;
                        }
                        Ok(Some(Err(e))) => {
                            error = Some(format!("error reading the answer's body: {e}"));
                            break;
                        }
                        Ok(Some(Ok(frame))) => {
                            let Ok(c) = frame.into_data() else { continue };
                            if keep(&mut body, &c, max) {
                                // Cut: the rest stays unread, so the connection is not reused.
                                break;
                            }
                        }
                    }
                }
                if let (true, Some((key, sender))) = (ended, back) {
                    client.put_idle(key, sender);
                }
            }
            Pending::Reqwest(mut r) => loop {
                match timeout_at(deadline, r.chunk()).await {
                    Err(_) => {
                        error = Some(timed_out());
                        break;
                    }
                    Ok(Ok(Some(c))) => {
                        if keep(&mut body, &c, max) {
                            break;
                        }
                    }
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => {
                        error = Some(describe(&e));
                        break;
                    }
                }
            },
        }
        Answer {
            status,
            headers,
            body,
            error,
        }
    }
}

/// Adds `chunk` to `body`, up to `max` bytes in all; true when the body is full (the answer
/// is cut there).
fn keep(body: &mut Vec<u8>, chunk: &[u8], max: usize) -> bool {
    let room = max.saturating_sub(body.len());
    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
    room <= chunk.len()
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        timed_out()
    } else if e.is_connect() {
        format!("cannot connect: {e}")
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_a_url_become_basic_authorization() {
        let url = reqwest::Url::parse("http://us%20er:p%3Ass@h/x").expect("url");
        let v = basic_auth(&url).expect("credentials");
        // "us er:p:ss"
        assert_eq!(v.to_str().ok(), Some("Basic dXMgZXI6cDpzcw=="));
        assert!(v.is_sensitive());
        let none = reqwest::Url::parse("http://h/x").expect("url");
        assert!(basic_auth(&none).is_none());
        assert_eq!(percent_decoded("a%zz%4"), b"a%zz%4");
    }
}
