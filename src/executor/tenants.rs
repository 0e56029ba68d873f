//! The credentials of many databases: which token opens which database, and the secret each
//! database's ACL tokens are keyed with.
//!
//! No database token is ever stored or logged. A database's Standard and Read Only tokens are
//! derived from the server's secret (`credentials.json`), the database's number and its token
//! generation; a reset bumps the generation (a logged event), so the old tokens stop matching
//! at once and after any restart. The default database keeps the tokens it was configured with
//! (flags or `credentials.json`) until its first reset, so an existing data directory works
//! unchanged. ACL-user tokens of a database are keyed by a secret derived the same way and
//! carry the database's number, so they open that database only and die with a reset too.

use crate::state::databases::{Databases, DbId, DbMeta, DEFAULT_DB};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{KeyInit, Mac};
use sha2::Sha256;
use std::collections::HashMap;

/// What a database token lets a request do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Standard,
    ReadOnly,
}

/// A database's two tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbTokens {
    pub standard: String,
    pub read_only: String,
}

/// Where tokens come from: the server's secret and the default database's configured tokens.
#[derive(Clone)]
pub struct TokenSource {
    secret: Vec<u8>,
    default: DbTokens,
}

fn mac(secret: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    match <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(secret) {
        Ok(mut m) => {
            for p in parts {
                m.update(p);
                m.update(&[0]);
            }
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

impl TokenSource {
    pub fn new(secret: Vec<u8>, default: DbTokens) -> TokenSource {
        TokenSource { secret, default }
    }

    /// The tokens of database `meta` now.
    pub fn tokens(&self, meta: &DbMeta) -> DbTokens {
        if meta.id == DEFAULT_DB && meta.generation == 0 {
            return self.default.clone();
        }
        let derive = |role: &[u8]| {
            let m = mac(
                &self.secret,
                &[
                    b"database-token",
                    &meta.id.to_le_bytes(),
                    &meta.generation.to_le_bytes(),
                    role,
                ],
            );
            format!("tp{}_{}", meta.id, URL_SAFE_NO_PAD.encode(m))
        };
        DbTokens {
            standard: derive(b"standard"),
            read_only: derive(b"read-only"),
        }
    }

    /// The secret that keys the ACL-user tokens of database `meta`, and the suffix those
    /// tokens carry (the database's number; none for the default database).
    pub fn acl_secret(&self, meta: &DbMeta) -> (Vec<u8>, String) {
        let suffix = if meta.id == DEFAULT_DB {
            String::new()
        } else {
            format!(".{}", meta.id)
        };
        if meta.id == DEFAULT_DB && meta.generation == 0 {
            // What ACL tokens were keyed with before there were several databases.
            return (self.secret.clone(), suffix);
        }
        let secret = mac(
            &self.secret,
            &[
                b"acl-token",
                &meta.id.to_le_bytes(),
                &meta.generation.to_le_bytes(),
            ],
        );
        (secret, suffix)
    }
}

/// Which token opens which database: read by every request on the HTTP side, rebuilt by the
/// executor whenever the set of databases or their generations change.
#[derive(Default)]
pub struct TokenTable {
    by_token: HashMap<String, (DbId, Role)>,
    by_db: HashMap<DbId, DbTokens>,
}

impl TokenTable {
    pub fn build(source: &TokenSource, dbs: &Databases) -> TokenTable {
        let mut t = TokenTable::default();
        for m in dbs.metas() {
            t.set(source, m);
        }
        t
    }

    /// Database `meta`'s tokens as they are now (its old ones, if any, no longer open it).
    pub fn set(&mut self, source: &TokenSource, meta: &DbMeta) {
        self.remove(meta.id);
        let tokens = source.tokens(meta);
        self.by_token
            .insert(tokens.standard.clone(), (meta.id, Role::Standard));
        self.by_token
            .insert(tokens.read_only.clone(), (meta.id, Role::ReadOnly));
        self.by_db.insert(meta.id, tokens);
    }

    /// Database `id` has no tokens any more.
    pub fn remove(&mut self, id: DbId) {
        if let Some(old) = self.by_db.remove(&id) {
            self.by_token.remove(&old.standard);
            self.by_token.remove(&old.read_only);
        }
    }

    /// The database and role `token` opens. The table is keyed by a hash with a random seed,
    /// so a lookup's time says nothing useful about how near a guess came.
    pub fn lookup(&self, token: &str) -> Option<(DbId, Role)> {
        self.by_token.get(token).copied()
    }

    pub fn of(&self, db: DbId) -> Option<&DbTokens> {
        self.by_db.get(&db)
    }
}

/// The database an ACL-user token names: `acl_<user>.<mac>` (the default database) or
/// `acl_<user>.<mac>.<number>`.
pub fn acl_token_db(token: &str) -> Option<DbId> {
    let rest = token.strip_prefix("acl_")?;
    let mut parts = rest.split('.');
    let (_, _) = (parts.next()?, parts.next()?);
    match parts.next() {
        None => Some(DEFAULT_DB),
        Some(n) if parts.next().is_none() => n.parse().ok(),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::databases::DbEvent;

    /// A token source whose default database has the tokens "s" and "r".
    fn source() -> TokenSource {
        TokenSource::new(
            b"secret".to_vec(),
            DbTokens {
                standard: "s".into(),
                read_only: "r".into(),
            },
        )
    }

    #[test]
    fn a_reset_changes_every_token_of_that_database_only() {
        let src = source();
        let mut dbs = Databases::default();
        for id in 1..=2 {
            dbs.apply(
                1,
                &DbEvent::Create {
                    id,
                    name: format!("d{id}"),
                    expires_ms: None,
                    scratch: false,
                    script_ms: None,
                    max_data_bytes: None,
                    created_by: None,
                },
            );
        }
        let before = TokenTable::build(&src, &dbs);
        assert_eq!(before.lookup("s"), Some((0, Role::Standard)));
        let t1 = before.of(1).cloned().expect("db 1");
        let t2 = before.of(2).cloned().expect("db 2");
        assert_ne!(t1, t2);
        dbs.apply(2, &DbEvent::ResetTokens { id: 1 });
        let after = TokenTable::build(&src, &dbs);
        assert_eq!(after.lookup(&t1.standard), None);
        assert_eq!(after.lookup(&t1.read_only), None);
        assert_eq!(after.lookup(&t2.standard), Some((2, Role::Standard)));
        assert_eq!(after.lookup("s"), Some((0, Role::Standard)));
        dbs.apply(3, &DbEvent::ResetTokens { id: 0 });
        assert_eq!(TokenTable::build(&src, &dbs).lookup("s"), None);
    }

    #[test]
    fn changing_one_database_leaves_the_table_as_a_rebuild_would() {
        let src = source();
        let mut dbs = Databases::default();
        let mut table = TokenTable::build(&src, &dbs);
        let events = [
            DbEvent::Create {
                id: 1,
                name: "a".into(),
                expires_ms: None,
                scratch: false,
                script_ms: None,
                max_data_bytes: None,
                created_by: None,
            },
            DbEvent::Create {
                id: 2,
                name: "b".into(),
                expires_ms: None,
                scratch: false,
                script_ms: None,
                max_data_bytes: None,
                created_by: None,
            },
            DbEvent::ResetTokens { id: 1 },
            DbEvent::ResetTokens { id: 0 },
            DbEvent::Delete { id: 2 },
            DbEvent::Delete { id: 0 },
        ];
        for (i, e) in events.iter().enumerate() {
            dbs.apply(i as u64, e);
            for id in 0..3 {
                match dbs.meta(id) {
                    Some(m) => table.set(&src, m),
                    None => table.remove(id),
                }
            }
            let rebuilt = TokenTable::build(&src, &dbs);
            assert_eq!(table.by_token, rebuilt.by_token, "after {e:?}");
            assert_eq!(table.by_db, rebuilt.by_db, "after {e:?}");
        }
    }

    #[test]
    fn acl_tokens_name_their_database() {
        assert_eq!(acl_token_db("acl_dXNlcg.bWFj"), Some(0));
        assert_eq!(acl_token_db("acl_dXNlcg.bWFj.17"), Some(17));
        assert_eq!(acl_token_db("acl_dXNlcg.bWFj.x"), None);
        assert_eq!(acl_token_db("acl_dXNlcg"), None);
        assert_eq!(acl_token_db("tp1_abc"), None);
    }
}
