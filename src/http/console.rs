//! The web console (`/console`): a page and its script, served from the binary, that work
//! through the same REST and delivery APIs as the SDKs, plus the one route those APIs lack:
//! `GET /console/api/session`, which says what a token opens.
//!
//! Safety, for a page that shows whatever a database holds: every value and key name is put
//! in the page as text (the script never writes HTML), the Content-Security-Policy allows no
//! inline script or style and no other origin, the page may not be framed, no console route
//! changes state, and the token travels only in the Authorization header (the session route
//! ignores `?_token=`). The console is on by default only on a loopback address, as
//! `POST /start` is (`--console on` opens it elsewhere).

use super::{admin, request, App, Body};
use crate::executor::tenants::{acl_token_db, Role};
use crate::secret::ct_eq;
use bytes::Bytes;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

/// Where the console lives.
pub const PREFIX: &str = "/console";

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/app.js");
const STYLE: &str = include_str!("console/style.css");
const ICON: &str = include_str!("console/favicon.svg");

/// Everything from this server's own origin, nothing inline, nothing framing it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Whether `path` is the console's.
pub fn owns(path: &str) -> bool {
    path.strip_prefix(PREFIX)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

pub async fn handle<B>(req: Request<B>, app: &App) -> Response<Body> {
    let path = req.uri().path();
    let rest = path.strip_prefix(PREFIX).unwrap_or("");
    if !matches!(req.method(), &Method::GET | &Method::HEAD) {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!(
                "ERR HTTP method {} is not allowed here: the console's routes are read with GET",
                req.method()
            ),
        );
    }
    match rest {
        "" | "/" | "/index.html" => asset(INDEX, "text/html; charset=utf-8"),
        "/app.js" => asset(SCRIPT, "text/javascript; charset=utf-8"),
        "/style.css" => asset(STYLE, "text/css; charset=utf-8"),
        "/favicon.svg" => asset(ICON, "image/svg+xml"),
        "/api/session" => session(&req, app).await,
        _ => refuse(StatusCode::NOT_FOUND, "ERR no such console page or route"),
    }
}

fn asset(text: &'static str, kind: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(Bytes::from_static(text.as_bytes()))));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    secure(r)
}

/// The headers every console response carries.
fn secure(mut r: Response<Body>) -> Response<Body> {
    let h = r.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The name of the ACL user whose REST token `token` is, in database `db`; None when it is
/// no live user's token. Only the executor, which owns the users, can say whether a token
/// holds: it runs `ACL WHOAMI` with it (a user whose rules refuse that command still holds).
/// The name is the one the token carries.
async fn user_of(app: &App, db: crate::state::databases::DbId, token: &str) -> Option<String> {
    use base64::Engine;
    let cmd = vec![b"ACL".to_vec(), b"WHOAMI".to_vec()];
    let access = crate::executor::Access::Token(std::sync::Arc::from(token));
    super::execute(
        app,
        db,
        vec![cmd],
        crate::executor::ExecMode::Each,
        access,
        std::sync::Arc::from("console"),
    )
    .await
    .ok()?;
    let encoded = token.strip_prefix("acl_")?.split('.').next()?;
    let name = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()?;
    Some(String::from_utf8_lossy(&name).into_owned())
}

fn refuse(status: StatusCode, text: &str) -> Response<Body> {
    secure(admin::json_response(
        status.as_u16(),
        &serde_json::json!({ "error": text }),
    ))
}

/// `GET /console/api/session`: what the presented token opens. `redis`: the database's
/// access (`standard`, `read-only`, or `user` for an ACL user's token, with the user's name;
/// the executor checks the user's rights per command) and whether it is the default database; `qstash`: the delivery API (`full` or `read-only`);
/// `admin`: the admin API. 401 when it opens nothing.
async fn session<B>(req: &Request<B>, app: &App) -> Response<Body> {
    let presented = request::presented_token(req.headers(), None, "_token").unwrap_or_default();
    if presented.is_empty() {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "ERR sign in with a token in the Authorization header (Bearer)",
        );
    }
    let redis = match app.shared.lookup_token(&presented) {
        Some((db, Role::Standard)) => Some(("standard", db, None)),
        Some((db, Role::ReadOnly)) => Some(("read-only", db, None)),
        None => match acl_token_db(&presented) {
            // Only the executor, which owns the users, knows whether the token holds.
            Some(db) => user_of(app, db, &presented)
                .await
                .map(|user| ("user", db, Some(user))),
            None => None,
        },
    };
    let qstash = app.qstash.as_ref().and_then(|q| {
        if ct_eq(presented.as_bytes(), q.token.as_bytes()) {
            Some("full")
        } else if !q.read_only_token.is_empty()
            && ct_eq(presented.as_bytes(), q.read_only_token.as_bytes())
        {
            Some("read-only")
        } else {
            None
        }
    });
    let admin =
        !app.admin_token.is_empty() && ct_eq(presented.as_bytes(), app.admin_token.as_bytes());
    if redis.is_none() && qstash.is_none() && !admin {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "WRONGPASS invalid or missing auth token",
        );
    }
    let redis = redis.map(|(access, db, user)| {
        let mut v = serde_json::json!({
            "access": access,
            "default_database": db == crate::state::databases::DEFAULT_DB,
        });
        if let Some(u) = user {
            v["user"] = serde_json::Value::String(u);
        }
        v
    });
    secure(admin::json_response(
        200,
        &serde_json::json!({ "redis": redis, "qstash": qstash, "admin": admin }),
    ))
}
