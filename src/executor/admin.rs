//! Administration of the set of databases: what the admin API (`/admin/...` and
//! `tidepool db ...`) and `POST /start` ask of the executor. Every change is one logged
//! `databases` record, so a restart, a snapshot and a replay keep it.

use super::Executor;
use crate::config;
use crate::state::databases::{DbEvent, DbMeta, DEFAULT_DB};
use serde_json::{json, Value};

/// One administration request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminOp {
    /// A new database. `expires_in_ms`: a scratch database, deleted that long after creation
    /// unless claimed. `name`: None picks one.
    Create {
        name: Option<String>,
        expires_in_ms: Option<u64>,
        /// The script time limit, if not its kind's default.
        script_ms: Option<u64>,
        /// The data-size limit, if not its kind's default (0: none).
        max_data_bytes: Option<u64>,
        /// The client address that asked for a scratch database (`POST /start`).
        created_by: Option<String>,
    },
    List,
    Get(String),
    Delete(String),
    /// New Standard and Read Only tokens; the old ones, and the database's ACL-user tokens,
    /// answer 401 from now on.
    ResetTokens(String),
    /// Keeps a scratch database: it no longer expires.
    Claim(String),
}

impl AdminOp {
    pub fn writes(&self) -> bool {
        !matches!(self, AdminOp::List | AdminOp::Get(_))
    }
}

/// The answer: an HTTP status and a JSON body.
#[derive(Debug, Clone)]
pub struct AdminReply {
    pub status: u16,
    pub body: Value,
}

impl AdminReply {
    pub fn error(status: u16, text: &str) -> AdminReply {
        AdminReply {
            status,
            body: json!({ "error": text }),
        }
    }

    fn ok(body: Value) -> AdminReply {
        AdminReply { status: 200, body }
    }
}

/// Whether `name` may name a database: 1 to 64 of ASCII letters, digits, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= config::DATABASE_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Executor {
    /// Runs an administration request.
    pub(super) fn admin(&mut self, op: AdminOp) -> AdminReply {
        if op.writes() {
            if let Some(why) = self.read_only.clone().or_else(|| self.follower_refusal()) {
                return AdminReply::error(403, &why);
            }
        }
        // Reads too, after a failed write or sync: a database whose create record failed
        // must not be listed.
        if self.read_only.is_none() {
            if let Some(why) = self.poisoned() {
                return AdminReply::error(500, &crate::reply::errors::log_failed_text(&why));
            }
        }
        let ts = self.now();
        let find = |ex: &Executor, name: &str| -> Result<DbMeta, AdminReply> {
            ex.machine.dbs().by_name(name).cloned().ok_or_else(|| {
                AdminReply::error(404, &format!("there is no database named '{name}'"))
            })
        };
        let result = match op {
            AdminOp::List => {
                let all: Vec<Value> = self
                    .machine
                    .dbs()
                    .metas()
                    .map(|m| self.describe(m, false))
                    .collect();
                Ok(AdminReply::ok(json!({ "databases": all })))
            }
            AdminOp::Get(name) => {
                find(self, &name).map(|m| AdminReply::ok(self.describe(&m, true)))
            }
            AdminOp::Create {
                name,
                expires_in_ms,
                script_ms,
                max_data_bytes,
                created_by,
            } => self.create(
                ts,
                name,
                expires_in_ms,
                script_ms,
                max_data_bytes,
                created_by,
            ),
            AdminOp::Delete(name) => find(self, &name).and_then(|m| {
                if m.id == DEFAULT_DB {
                    return Err(AdminReply::error(
                        400,
                        "the default database cannot be deleted (FLUSHALL empties it)",
                    ));
                }
                self.catalog_change(ts, vec![DbEvent::Delete { id: m.id }]);
                Ok(AdminReply::ok(json!({ "deleted": m.name })))
            }),
            AdminOp::ResetTokens(name) => find(self, &name).map(|m| {
                self.catalog_change(ts, vec![DbEvent::ResetTokens { id: m.id }]);
                let m = self.machine.dbs().meta(m.id).cloned().unwrap_or(m);
                AdminReply::ok(self.describe(&m, true))
            }),
            AdminOp::Claim(name) => find(self, &name).map(|m| {
                if m.expires_ms.is_some() {
                    self.catalog_change(ts, vec![DbEvent::Claim { id: m.id }]);
                }
                let m = self.machine.dbs().meta(m.id).cloned().unwrap_or(m);
                AdminReply::ok(self.describe(&m, true))
            }),
        };
        result.unwrap_or_else(|e| e)
    }

    fn create(
        &mut self,
        ts: u64,
        name: Option<String>,
        expires_in_ms: Option<u64>,
        script_ms: Option<u64>,
        max_data_bytes: Option<u64>,
        created_by: Option<String>,
    ) -> Result<AdminReply, AdminReply> {
        if script_ms.is_some_and(|ms| ms == 0 || ms > config::SCRIPT_TIME_LIMIT_MS_MAX) {
            return Err(AdminReply::error(
                400,
                &format!(
                    "\"script_time_limit_ms\" must be 1 to {}",
                    config::SCRIPT_TIME_LIMIT_MS_MAX
                ),
            ));
        }
        if self.machine.dbs().len() >= config::DATABASES_MAX {
            return Err(AdminReply::error(
                429,
                &format!(
                    "this server holds {} databases, its most; delete one first",
                    config::DATABASES_MAX
                ),
            ));
        }
        let id = self.machine.dbs().next_id();
        let name = match name {
            Some(n) => n,
            None if expires_in_ms.is_some() => format!("scratch-{id}"),
            None => format!("db-{id}"),
        };
        if !valid_name(&name) {
            return Err(AdminReply::error(
                400,
                &format!(
                    "a database name is 1 to {} ASCII letters, digits, '-' or '_'",
                    config::DATABASE_NAME_BYTES_MAX
                ),
            ));
        }
        if self.machine.dbs().by_name(&name).is_some() {
            return Err(AdminReply::error(
                409,
                &format!("a database named '{name}' exists already"),
            ));
        }
        self.catalog_change(
            ts,
            vec![DbEvent::Create {
                id,
                name,
                expires_ms: expires_in_ms.map(|d| ts.saturating_add(d)),
                scratch: expires_in_ms.is_some(),
                script_ms,
                max_data_bytes,
                created_by,
            }],
        );
        match self.machine.dbs().meta(id).cloned() {
            Some(m) => Ok(AdminReply {
                status: 201,
                body: self.describe(&m, true),
            }),
            None => Err(AdminReply::error(500, "the database was not created")),
        }
    }

    /// A database as the admin API shows it; with its tokens when `tokens`.
    fn describe(&self, m: &DbMeta, tokens: bool) -> Value {
        let keys = self.machine.dbs().get(m.id).map_or(0, |d| d.len());
        let today = self
            .machine
            .dbs()
            .usage_on(m.id, self.usage_day)
            .cloned()
            .unwrap_or_default();
        let pending = self.usage.get(&m.id).cloned().unwrap_or_default();
        let pending = pending.day();
        let mut v = json!({
            "name": m.name,
            "id": m.id,
            "created_at": m.created_ms,
            "scratch": m.scratch,
            "expires_at": m.expires_ms,
            "keys": keys,
            "data_bytes": self.machine.dbs().get(m.id).map_or(0, |d| d.data_bytes()),
            "script_time_limit_ms": m.script_limit_ms(self.script_time_limit_ms),
            "created_by": m.created_by,
            "max_data_bytes": m.data_limit_bytes(),
            "requests_today": today.requests + pending.requests,
            "commands_today": today.commands + pending.commands,
        });
        if tokens {
            let t = self.tokens.tokens(m);
            v["token"] = json!(t.standard);
            v["read_only_token"] = json!(t.read_only);
        }
        v
    }
}
