//! The web console (`/console`): a page and its script, served from the binary, that work
//! through the same REST, delivery and admin APIs as the SDKs and tools, plus the routes those
//! lack (docs/console.md): what a token opens (`/console/api/session`), time travel
//! (`history`, `at`, `timeline`, rebuilt by `crate::travel` off the executor) and the next runs
//! of a cron expression (`cron`).
//!
//! Safety, for a page that shows whatever a database holds: every value and key name is put
//! in the page as text (the script never writes HTML), the Content-Security-Policy allows no
//! inline script or style and no other origin, the page may not be framed, no console route
//! changes state, and the token travels only in the Authorization header (the session route
//! ignores `?_token=`). The console is on by default only on a loopback address, as
//! `POST /start` is (`--console on` opens it elsewhere).

use super::{admin, request, App, Body};
use crate::command::Perm;
use crate::config;
use crate::executor::{Access, Job};
use crate::point::{rfc3339, Point};
use crate::reply::Reply;
use crate::secret::ct_eq;
use crate::state::databases::DbId;
use bytes::Bytes;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;

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
        "/api/history" => travel(&req, app, Travel::History).await,
        "/api/at" => travel(&req, app, Travel::At).await,
        "/api/timeline" => travel(&req, app, Travel::Timeline).await,
        "/api/cron" => cron(&req, app),
        "/api/usage" => usage(&req, app).await,
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

/// The refusal of a token that opens nothing here.
fn wrongpass() -> Response<Body> {
    refuse(
        StatusCode::UNAUTHORIZED,
        "WRONGPASS invalid or missing auth token",
    )
}

/// The database the presented database token opens and what it may do there now; the
/// refusal when it opens none.
async fn database_rights<B>(req: &Request<B>, app: &App) -> Result<(DbId, Perm), Response<Body>> {
    let (db, access) = super::authenticate(req.headers(), None, app).ok_or_else(wrongpass)?;
    let perm = permissions(app, db, access).await.ok_or_else(wrongpass)?;
    Ok((db, perm))
}

/// What `access` may do in database `db` now, as the executor (which owns the users) says;
/// None when it opens nothing there.
async fn permissions(app: &App, db: DbId, access: Access) -> Option<Perm> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    app.tx
        .send(Job::Permissions { db, access, reply })
        .await
        .ok()?;
    rx.await.ok().flatten()
}

fn refuse(status: StatusCode, text: &str) -> Response<Body> {
    secure(admin::json_response(
        status.as_u16(),
        &serde_json::json!({ "error": text }),
    ))
}

/// Whether a user's rules allow the commands the console's edit controls run (SET, DEL,
/// EXPIRE, PERSIST, RENAME), on some key; if not, the page hides those controls.
fn may_edit(perm: &Perm) -> bool {
    let Perm::User(_, user) = perm else {
        return !matches!(perm, Perm::ReadOnly);
    };
    ["set", "del", "expire", "persist", "rename"]
        .iter()
        .all(
            |name| match crate::command::table::global().lookup(&[name.as_bytes().to_vec()]) {
                crate::command::table::Lookup::Found(info) => {
                    user.allows(&info.name, &info.categories)
                }
                _ => false,
            },
        )
}

/// `GET /console/api/session`: what the presented token opens. `redis`: the database's
/// access (`standard`, `read-only`, or `user` for an ACL user's token, with the user's name;
/// the executor checks the user's rights per command) and whether it is the default
/// database; `qstash`: the delivery API (`full` or `read-only`); `admin`: the admin API.
/// 401 when it opens nothing.
async fn session<B>(req: &Request<B>, app: &App) -> Response<Body> {
    let presented = request::presented_token(req.headers(), None, "_token").unwrap_or_default();
    if presented.is_empty() {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "ERR sign in with a token in the Authorization header (Bearer)",
        );
    }
    let redis = match super::authenticate(req.headers(), None, app) {
        Some((db, Access::Full)) => Some(("standard", db, None)),
        Some((db, Access::ReadOnly)) => Some(("read-only", db, None)),
        // Only the executor, which owns the users, knows whether the token holds.
        Some((db, access)) => match permissions(app, db, access).await {
            Some(Perm::User(name, user)) => {
                let perm = Perm::User(name.clone(), user);
                Some(("user", db, Some((name.to_string(), may_edit(&perm)))))
            }
            _ => None,
        },
        None => None,
    };
    // The delivery API's own check: its token, its read-only token, and with --dev the dev
    // server's other users.
    let qstash = app
        .qstash
        .as_ref()
        .and_then(|q| super::qstash::authorized(req.headers(), None, q))
        .map(|c| match c {
            super::qstash::Caller::ReadOnly => "read-only",
            _ => "full",
        });
    let admin =
        !app.admin_token.is_empty() && ct_eq(presented.as_bytes(), app.admin_token.as_bytes());
    if redis.is_none() && qstash.is_none() && !admin {
        return wrongpass();
    }
    let redis = redis.map(|(access, db, user)| {
        let mut v = serde_json::json!({
            "access": access,
            "default_database": db == crate::state::databases::DEFAULT_DB,
        });
        if let Some((u, edit)) = user {
            v["user"] = serde_json::Value::String(u);
            v["may_edit"] = serde_json::Value::Bool(edit);
        }
        v
    });
    secure(admin::json_response(
        200,
        &serde_json::json!({ "redis": redis, "qstash": qstash, "admin": admin }),
    ))
}

/// `GET /console/api/usage`: the token's own database's usage, as the admin API lists it for
/// the admin token: its keys, data bytes (and limit), requests and commands today. For the
/// database tokens of any kind, which see no server-wide metrics.
async fn usage<B>(req: &Request<B>, app: &App) -> Response<Body> {
    let db = match database_rights(req, app).await {
        Ok((db, _)) => db,
        Err(refused) => return refused,
    };
    let (reply, rx) = tokio::sync::oneshot::channel();
    let op = crate::executor::admin::AdminOp::List;
    if app.tx.send(Job::Admin { op, reply }).await.is_err() {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "ERR the server is shutting down",
        );
    }
    let Ok(listed) = rx.await else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "ERR the server is shutting down",
        );
    };
    let mine = listed.body["databases"].as_array().and_then(|all| {
        all.iter()
            .find(|d| d["id"].as_u64() == Some(u64::from(db)))
            .cloned()
    });
    let Some(d) = mine else {
        return refuse(StatusCode::NOT_FOUND, "ERR the database is gone");
    };
    let fields = [
        "name",
        "keys",
        "data_bytes",
        "max_data_bytes",
        "requests_today",
        "commands_today",
        "created_at",
    ];
    let shown: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), d[*f].clone()))
        .collect();
    secure(admin::json_response(200, &Value::Object(shown)))
}

/// The firings of a cron expression the helper shows.
const CRON_NEXT_RUNS: usize = 5;

/// `GET /console/api/cron?expr=E`: the next five times the schedule expression E fires (the
/// schedules' own parser, `CRON_TZ=` included), for the QStash tokens.
fn cron<B>(req: &Request<B>, app: &App) -> Response<Body> {
    let allowed = app
        .qstash
        .as_ref()
        .is_some_and(|q| super::qstash::authorized(req.headers(), None, q).is_some());
    if !allowed {
        return wrongpass();
    }
    let Some(expr) = param(req.uri().query(), "expr") else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "ERR name a cron expression: ?expr=",
        );
    };
    let spec = match crate::delivery::cron::CronSpec::parse(&String::from_utf8_lossy(&expr)) {
        Ok(s) => s,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e),
    };
    let mut next = Vec::with_capacity(CRON_NEXT_RUNS);
    let mut after = crate::clock::wall_unix_ms();
    while next.len() < CRON_NEXT_RUNS {
        let Some(t) = spec.next_after(after) else {
            break;
        };
        next.push(json!({ "unix_ms": t, "time": rfc3339(t) }));
        after = t;
    }
    secure(admin::json_response(200, &json!({ "next": next })))
}

enum Travel {
    History,
    At,
    Timeline,
}

/// A query parameter, percent-decoded (the first of its name).
fn param(query: Option<&str>, name: &str) -> Option<Vec<u8>> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (request::percent_decode(k, true) == name.as_bytes())
            .then(|| request::percent_decode(v, true))
    })
}

fn text(b: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(b).into_owned())
}

/// A reply as the REST API's JSON shows it (an error as `{"error": ...}`). The replies here
/// are those of the console's own reads (at most three levels: XRANGE's); nesting past
/// `LUA_REPLY_DEPTH_MAX`, the deepest reply any command makes, shows as an error.
fn reply_json(r: &Reply) -> Value {
    reply_json_at(r, 0)
}

fn reply_json_at(r: &Reply, depth: usize) -> Value {
    match r {
        Reply::Status(s) => Value::String(s.to_string()),
        Reply::Error(e) => json!({ "error": e }),
        Reply::Bulk(b) => text(b),
        Reply::Nil | Reply::NilArray => Value::Null,
        Reply::Int(n) => json!(n),
        Reply::Array(_) if depth >= config::LUA_REPLY_DEPTH_MAX => {
            json!({ "error": "ERR reply nested too deeply" })
        }
        Reply::Array(items) => {
            Value::Array(items.iter().map(|i| reply_json_at(i, depth + 1)).collect())
        }
        Reply::Typed(t) => reply_json_at(&t.1, depth),
    }
}

fn position(at: crate::machine::Position) -> Value {
    json!({ "seq": at.seq, "time": rfc3339(at.unix_ms), "unix_ms": at.unix_ms })
}

/// Whether `perm` may read `key` (the user's key patterns; the tokens read every key).
fn may_read(perm: &Perm, key: &[u8]) -> bool {
    match perm {
        Perm::Full | Perm::ReadOnly => true,
        Perm::User(_, user) => user.key_allowed(key, true, false),
    }
}

/// At most `CONSOLE_REPLAYS_MAX` rebuilds at once, server-wide. A permit is held by the
/// rebuild itself, so a client that goes away does not free it while the work goes on.
fn replays() -> &'static Arc<tokio::sync::Semaphore> {
    static REPLAYS: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    REPLAYS.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(config::CONSOLE_REPLAYS_MAX)))
}

/// The REST API's answer to `args` for `perm` before it runs: the rights a console read needs
/// are those of the command that would read the same over REST.
fn rights(args: &[&[u8]], perm: &Perm) -> Result<(), String> {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
    crate::command::pipeline::check_connection(&args, perm).map_err(|r| match r {
        Reply::Error(e) => e,
        _ => "NOPERM".to_string(),
    })
}

/// `GET /console/api/timeline`: the token's database's records per minute (coarser when the
/// log spans more than `CONSOLE_TIMELINE_BUCKETS_MAX` minutes), read from the log's frames.
/// `GET /console/api/history?key=K`: the changes of K in the token's database, newest
/// `CONSOLE_HISTORY_CHANGES_MAX`, each with its commands and the value after it.
/// `GET /console/api/at?point=P&key=K`: K's type and value at P (a record's sequence number
/// or a time: RFC 3339 or Unix ms). `GET /console/api/at?point=P[&match=M]`: the keys then
/// (at most `CONSOLE_TRAVEL_KEYS_MAX`). The last three rebuild the state from the data
/// directory off the executor; all four run at most `CONSOLE_REPLAYS_MAX` at once. Each needs
/// the rights of the REST read it stands for (TYPE of the key; SCAN for the keys and the
/// timeline), and shows only what the token may read: a command of a history that names
/// another key outside an ACL user's patterns shows only its name and the key asked about.
async fn travel<B>(req: &Request<B>, app: &App, what: Travel) -> Response<Body> {
    if req.method() != Method::GET {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "ERR the console's time travel is read with GET",
        );
    }
    let (db, perm) = match database_rights(req, app).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let query = req.uri().query();
    let key = param(query, "key");
    let pattern = param(query, "match");
    let point = match (&what, param(query, "point")) {
        (Travel::History | Travel::Timeline, _) => None,
        (Travel::At, None) => return refuse(
            StatusCode::BAD_REQUEST,
            "ERR name a point: ?point= a record's sequence number, or a time (RFC 3339 or Unix ms)",
        ),
        (Travel::At, Some(p)) => match Point::parse(&String::from_utf8_lossy(&p)) {
            Ok(p) => Some(p),
            Err(e) => return refuse(StatusCode::BAD_REQUEST, &format!("ERR {e}")),
        },
    };
    let checked = match (&what, &key) {
        (Travel::History, None) => return refuse(StatusCode::BAD_REQUEST, "ERR name a key: ?key="),
        (Travel::Timeline, _) | (Travel::At, None) => match &pattern {
            Some(p) => rights(&[b"SCAN", b"0", b"MATCH", p], &perm),
            None => rights(&[b"SCAN", b"0"], &perm),
        },
        (_, Some(k)) => rights(&[b"TYPE", k], &perm),
    };
    if let Err(refused) = checked {
        return refuse(StatusCode::FORBIDDEN, &refused);
    }
    let Ok(permit) = replays().clone().try_acquire_owned() else {
        let mut r = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "ERR the console is already rebuilding a past state; try again in a moment",
        );
        r.headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    // A rebuild holds about a copy of the state beside the live one.
    let live = crate::alloc::in_use();
    if live > config::CONSOLE_REBUILD_HEAP_BYTES_MAX {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "ERR time travel rebuilds a copy of the state, and this server holds {} MiB (more than the {} MiB CONSOLE_REBUILD_HEAP_BYTES_MAX allows): use tidepool-log history or serve --at on a copy",
                live >> 20,
                config::CONSOLE_REBUILD_HEAP_BYTES_MAX >> 20
            ),
        );
    }
    let rebuild_ms = app.console_rebuild_ms;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(rebuild_ms);
    let data_dir = app.data_dir.clone();
    let work = tokio::task::spawn_blocking(move || -> Result<Value, String> {
        let _permit = permit;
        match (what, point, key) {
            (Travel::Timeline, _, _) => {
                let (size, buckets) = crate::travel::timeline(
                    &data_dir.join("wal"),
                    db,
                    config::CONSOLE_TIMELINE_BUCKET_MS,
                    config::CONSOLE_TIMELINE_BUCKETS_MAX,
                )?;
                let buckets: Vec<Value> = buckets
                    .iter()
                    .map(|b| json!({ "start_ms": b.start_ms, "records": b.records, "last_seq": b.last_seq }))
                    .collect();
                Ok(json!({ "bucket_ms": size, "buckets": buckets }))
            }
            (_, None, Some(key)) => {
                let h = crate::travel::key_history(
                    &data_dir,
                    db,
                    &key,
                    config::CONSOLE_HISTORY_CHANGES_MAX,
                    Some(config::CONSOLE_TRAVEL_ITEMS_MAX),
                    Some(deadline),
                )?;
                let changes: Vec<Value> = h
                    .changes
                    .iter()
                    .map(|c| {
                        let shown = c.commands.len().min(config::CONSOLE_HISTORY_COMMANDS_MAX);
                        let commands: Vec<Value> = c.commands[..shown]
                            .iter()
                            .map(|cmd| shown_command(cmd, &key, &perm))
                            .collect();
                        json!({
                            "at": position(c.at),
                            "commands": commands,
                            "more_commands": c.commands.len() - shown,
                            "type": c.ty,
                            "value": value_json(&c.ty, &c.value),
                        })
                    })
                    .collect();
                let from = h.from_snapshot.map(|(at, ty, value)| {
                    json!({ "at": position(at), "type": ty, "value": value_json(&ty, &value) })
                });
                Ok(json!({
                    "key": text(&key),
                    "from_snapshot": from,
                    "dropped": h.dropped,
                    "changes": changes,
                    "cut_at": h.cut_at.map(position),
                }))
            }
            (_, Some(point), Some(key)) => {
                let (at, (ty, value)) =
                    crate::travel::at(&data_dir, point, Some(deadline), |m, ts| {
                        crate::travel::value_of(
                            m,
                            db,
                            &key,
                            ts,
                            Some(config::CONSOLE_TRAVEL_ITEMS_MAX),
                        )
                    })?;
                Ok(json!({
                    "at": position(at),
                    "key": text(&key),
                    "type": ty,
                    "value": value_json(&ty, &value),
                }))
            }
            (_, Some(point), None) => {
                let (at, (keys, more)) =
                    crate::travel::at(&data_dir, point, Some(deadline), |m, ts| {
                        crate::travel::keys(
                            m,
                            db,
                            ts,
                            pattern.as_deref(),
                            |k| may_read(&perm, k),
                            config::CONSOLE_TRAVEL_KEYS_MAX,
                        )
                    })?;
                let keys: Vec<Value> = keys.iter().map(|k| text(k)).collect();
                Ok(json!({ "at": position(at), "keys": keys, "more": more }))
            }
            (_, None, None) => Err("ERR name a key: ?key=".into()),
        }
    });
    match work.await {
        Ok(Ok(v)) => secure(admin::json_response(200, &v)),
        Ok(Err(e)) => rebuild_failed(&e, rebuild_ms),
        Err(e) => rebuild_failed(&e.to_string(), rebuild_ms),
    }
}

/// A rebuild that failed: the tenant learns what it may do about it, the server's log the
/// details (which name the data directory and the repair tools, an operator's business).
fn rebuild_failed(why: &str, rebuild_ms: u64) -> Response<Body> {
    crate::log::line(&format!(
        "console: a past state could not be rebuilt: {why}"
    ));
    if why.contains(crate::machine::DEADLINE_PASSED) {
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "ERR rebuilding that point took longer than {rebuild_ms} ms (CONSOLE_REBUILD_MS_MAX): pick one nearer a snapshot, or use serve --at"
            ),
        )
    } else if why.contains("compacted") {
        refuse(
            StatusCode::BAD_REQUEST,
            "ERR that point is older than the log this server keeps (it was compacted behind a snapshot, see --log-retention): pick a later one",
        )
    } else {
        refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ERR the past state could not be rebuilt; the server's log says why",
        )
    }
}

/// A value of the past as JSON: null for no key.
fn value_json(ty: &str, value: &Reply) -> Value {
    if ty == "none" {
        Value::Null
    } else {
        reply_json(value)
    }
}

/// A command of a key's history as the token may see it. One that names another key outside
/// an ACL user's patterns shows only its name and the key asked about (its other arguments
/// may be that key's values: MSET). Long arguments are cut at
/// `CONSOLE_HISTORY_ARGUMENT_BYTES_MAX` with their length.
fn shown_command(cmd: &[Vec<u8>], key: &[u8], perm: &Perm) -> Value {
    let keys = crate::travel::keys_of(cmd);
    let hides = keys.iter().any(|k| *k != key && !may_read(perm, k));
    let cap = config::CONSOLE_HISTORY_ARGUMENT_BYTES_MAX;
    Value::Array(
        cmd.iter()
            .enumerate()
            .map(|(i, a)| {
                if hides && i > 0 && a.as_slice() != key {
                    Value::String("(hidden)".into())
                } else if a.len() > cap {
                    Value::String(format!(
                        "{}… ({} bytes)",
                        String::from_utf8_lossy(&a[..cap]),
                        a.len()
                    ))
                } else {
                    text(a)
                }
            })
            .collect(),
    )
}
