//! Many databases in one server: the catalog (which databases exist, their names, their token
//! generations, scratch expiry) and the keyspaces, one per database, with their usage counts.
//!
//! Pure state like the rest of `state`: every change arrives as a logged event and applies the
//! same way live and on replay. Database 0 is the default database, the one a data directory
//! from before there were several holds; it always exists and cannot be deleted.

use super::Db;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A database's number. Never reused: a deleted database's number stays unused, so a token,
/// a script cache entry or a subscriber left over from it can never reach a new one.
pub type DbId = u32;

/// The default database.
pub const DEFAULT_DB: DbId = 0;

/// What the catalog knows of one database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbMeta {
    pub id: DbId,
    pub name: String,
    pub created_ms: u64,
    /// Bumped by every token reset: the database's tokens (and its ACL users' tokens) are
    /// derived from it, so a reset revokes them all at once.
    pub generation: u64,
    /// A scratch database (`POST /start`) not claimed yet: it is deleted at this time.
    pub expires_ms: Option<u64>,
    /// Created by `POST /start` (and maybe claimed since).
    pub scratch: bool,
    /// How long one script or function call may run, if not the default for its kind
    /// ([`DbMeta::script_limit_ms`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_ms: Option<u64>,
    /// The most data the database may hold, if not the default for its kind
    /// ([`DbMeta::data_limit_bytes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_data_bytes: Option<u64>,
    /// The client address a scratch database was created for (`POST /start`): the per-hour
    /// limit per address is counted from the catalog again after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

impl DbMeta {
    /// How long one script or function call may run: as set at creation, else a short limit
    /// for a scratch database (anyone may make one) and `named_ms` (the server's
    /// `--script-time-limit-ms`, Redis's 5 s by default) for the others, whose owners the
    /// operator chose.
    pub fn script_limit_ms(&self, named_ms: u64) -> u64 {
        self.script_ms.unwrap_or(if self.scratch {
            crate::config::SCRATCH_SCRIPT_TIME_LIMIT_MS.min(named_ms)
        } else {
            named_ms
        })
    }

    /// The most data the database may hold: as set at creation, else a small bound for a
    /// scratch database and none for the others (the server's `--max-memory` still holds).
    pub fn data_limit_bytes(&self) -> Option<u64> {
        self.max_data_bytes
            .or(self
                .scratch
                .then_some(crate::config::SCRATCH_DATA_BYTES_MAX))
            .filter(|b| *b > 0)
    }
}

/// Usage of one database on one day (UTC).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayUsage {
    /// HTTP requests (a pipeline or a transaction is one).
    pub requests: u64,
    /// Commands (each command of a pipeline or a transaction counts, as the hosted service
    /// bills them).
    pub commands: u64,
    /// Commands by lowercase name (`get`, `acl|setuser`).
    pub by_command: BTreeMap<String, u64>,
}

impl DayUsage {
    pub fn add(&mut self, other: &DayUsage) {
        self.requests += other.requests;
        self.commands += other.commands;
        for (name, n) in &other.by_command {
            *self.by_command.entry(name.clone()).or_insert(0) += n;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.requests == 0 && self.commands == 0
    }
}

/// One change to the set of databases or their counters: the payload of a logged record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum DbEvent {
    Create {
        id: DbId,
        name: String,
        expires_ms: Option<u64>,
        scratch: bool,
        /// The script time limit set at creation (written only when set, so records and
        /// snapshots from before it read the same).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        script_ms: Option<u64>,
        /// The data-size limit set at creation (0: none; written only when set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_data_bytes: Option<u64>,
        /// The client address that asked for a scratch database (written only when set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_by: Option<String>,
    },
    Delete {
        id: DbId,
    },
    /// New tokens: the old Standard, Read Only and ACL-user tokens answer 401.
    ResetTokens {
        id: DbId,
    },
    /// A scratch database is kept: it no longer expires.
    Claim {
        id: DbId,
    },
    /// Usage counted since the last such event, for `day` (days since the Unix epoch, UTC).
    Usage {
        day: u32,
        counts: Vec<(DbId, DayUsage)>,
    },
}

/// The day (since the Unix epoch, UTC) of a Unix time in milliseconds.
pub fn day_of(ms: u64) -> u32 {
    (ms / 86_400_000) as u32
}

/// Every database: the catalog and the keyspaces.
#[derive(Debug)]
pub struct Databases {
    metas: BTreeMap<DbId, DbMeta>,
    dbs: BTreeMap<DbId, Db>,
    /// Usage per database and day, the newest `USAGE_DAYS_KEPT` days.
    usage: BTreeMap<DbId, BTreeMap<u32, DayUsage>>,
    next_id: DbId,
    /// (expiry, database) of every unclaimed scratch database: derived from `metas`, so that
    /// the periodic check costs the same with any number of databases.
    expiring: BTreeSet<(u64, DbId)>,
    /// Database numbers by name, derived from `metas`.
    names: BTreeMap<String, DbId>,
}

impl Default for Databases {
    fn default() -> Databases {
        Databases::with_default(Db::new())
    }
}

impl Databases {
    /// The default database alone, holding `db` (what a data directory from before several
    /// databases holds).
    pub fn with_default(db: Db) -> Databases {
        let mut metas = BTreeMap::new();
        metas.insert(
            DEFAULT_DB,
            DbMeta {
                id: DEFAULT_DB,
                name: "default".into(),
                created_ms: 0,
                generation: 0,
                expires_ms: None,
                scratch: false,
                script_ms: None,
                max_data_bytes: None,
                created_by: None,
            },
        );
        let mut dbs = BTreeMap::new();
        dbs.insert(DEFAULT_DB, db);
        Databases {
            metas,
            dbs,
            usage: BTreeMap::new(),
            next_id: 1,
            expiring: BTreeSet::new(),
            names: BTreeMap::from([("default".to_string(), DEFAULT_DB)]),
        }
    }

    /// The default database's keyspace.
    pub fn default_db(&self) -> &Db {
        // The default database is created with the catalog and never deleted.
        &self.dbs[&DEFAULT_DB]
    }

    pub fn default_db_mut(&mut self) -> &mut Db {
        self.dbs.entry(DEFAULT_DB).or_default()
    }

    pub fn get(&self, id: DbId) -> Option<&Db> {
        self.dbs.get(&id)
    }

    pub fn get_mut(&mut self, id: DbId) -> Option<&mut Db> {
        self.dbs.get_mut(&id)
    }

    pub fn meta(&self, id: DbId) -> Option<&DbMeta> {
        self.metas.get(&id)
    }

    pub fn by_name(&self, name: &str) -> Option<&DbMeta> {
        self.metas.get(self.names.get(name)?)
    }

    pub fn metas(&self) -> impl Iterator<Item = &DbMeta> {
        self.metas.values()
    }

    /// Every database's keyspace, by number.
    pub fn iter(&self) -> impl Iterator<Item = (DbId, &Db)> {
        self.dbs.iter().map(|(id, db)| (*id, db))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (DbId, &mut Db)> {
        self.dbs.iter_mut().map(|(id, db)| (*id, db))
    }

    pub fn len(&self) -> usize {
        self.metas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// The number the next created database gets.
    pub fn next_id(&self) -> DbId {
        self.next_id
    }

    /// Usage of `id` per day, oldest first.
    pub fn usage(&self, id: DbId) -> Option<&BTreeMap<u32, DayUsage>> {
        self.usage.get(&id)
    }

    /// The keyspace of `id` to change, beside its usage per day to read.
    pub fn split_mut(&mut self, id: DbId) -> Option<(&mut Db, Option<&BTreeMap<u32, DayUsage>>)> {
        let db = self.dbs.get_mut(&id)?;
        Some((db, self.usage.get(&id)))
    }

    /// Usage of `id` on `day`.
    pub fn usage_on(&self, id: DbId, day: u32) -> Option<&DayUsage> {
        self.usage.get(&id)?.get(&day)
    }

    /// Applies one logged event. Events that name a database that does not exist (or, for a
    /// create, one that does) change nothing: they cannot come from a correct log, and a
    /// replay must never fail on them.
    pub fn apply(&mut self, ts: u64, e: &DbEvent) {
        match e {
            DbEvent::Create {
                id,
                name,
                expires_ms,
                scratch,
                script_ms,
                max_data_bytes,
                created_by,
            } => {
                if self.metas.contains_key(id) {
                    return;
                }
                self.metas.insert(
                    *id,
                    DbMeta {
                        id: *id,
                        name: name.clone(),
                        created_ms: ts,
                        generation: 0,
                        expires_ms: *expires_ms,
                        scratch: *scratch,
                        script_ms: *script_ms,
                        max_data_bytes: *max_data_bytes,
                        created_by: created_by.clone(),
                    },
                );
                self.dbs.insert(*id, Db::new());
                self.next_id = self.next_id.max(id.saturating_add(1));
                if let Some(t) = expires_ms {
                    self.expiring.insert((*t, *id));
                }
                self.names.entry(name.clone()).or_insert(*id);
            }
            DbEvent::Delete { id } => {
                if *id == DEFAULT_DB {
                    return;
                }
                if let Some(m) = self.metas.remove(id) {
                    if let Some(t) = m.expires_ms {
                        self.expiring.remove(&(t, *id));
                    }
                    if self.names.get(&m.name) == Some(id) {
                        self.names.remove(&m.name);
                    }
                }
                self.dbs.remove(id);
                self.usage.remove(id);
            }
            DbEvent::ResetTokens { id } => {
                if let Some(m) = self.metas.get_mut(id) {
                    m.generation += 1;
                }
            }
            DbEvent::Claim { id } => {
                if let Some(t) = self.metas.get_mut(id).and_then(|m| m.expires_ms.take()) {
                    self.expiring.remove(&(t, *id));
                }
            }
            DbEvent::Usage { day, counts } => {
                for (id, u) in counts {
                    if !self.metas.contains_key(id) {
                        continue;
                    }
                    let days = self.usage.entry(*id).or_default();
                    days.entry(*day).or_default().add(u);
                    while days.len() > crate::config::USAGE_DAYS_KEPT {
                        days.pop_first();
                    }
                }
            }
        }
    }

    /// Scratch databases whose time has come at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> Vec<DbId> {
        self.expiring
            .range(..=(now_ms, DbId::MAX))
            .map(|(_, id)| *id)
            .collect()
    }

    /// The whole catalog and the usage counts, for a snapshot.
    pub fn catalog_image(&self) -> CatalogImage {
        CatalogImage {
            metas: self.metas.values().cloned().collect(),
            usage: self
                .usage
                .iter()
                .map(|(id, days)| (*id, days.iter().map(|(d, u)| (*d, u.clone())).collect()))
                .collect(),
            next_id: self.next_id,
        }
    }

    /// The catalog a snapshot kept, with empty keyspaces to fill (the default database's is
    /// kept as it is).
    pub fn restore_catalog(&mut self, img: CatalogImage) -> Result<(), String> {
        if !img.metas.iter().any(|m| m.id == DEFAULT_DB) {
            return Err("the catalog has no default database".into());
        }
        let default = self.dbs.remove(&DEFAULT_DB).unwrap_or_default();
        self.metas.clear();
        self.dbs.clear();
        for m in img.metas {
            if m.id >= img.next_id && m.id != DEFAULT_DB {
                return Err(format!(
                    "database {} is numbered past the next number {}",
                    m.id, img.next_id
                ));
            }
            self.dbs.insert(m.id, Db::new());
            self.metas.insert(m.id, m);
        }
        self.dbs.insert(DEFAULT_DB, default);
        self.expiring = self
            .metas
            .values()
            .filter_map(|m| Some((m.expires_ms?, m.id)))
            .collect();
        self.names = BTreeMap::new();
        for m in self.metas.values() {
            self.names.entry(m.name.clone()).or_insert(m.id);
        }
        self.usage = img
            .usage
            .into_iter()
            .map(|(id, days)| (id, days.into_iter().collect()))
            .collect();
        self.next_id = img.next_id.max(1);
        Ok(())
    }

    /// Replaces the keyspace of an existing database (a snapshot's).
    pub fn put(&mut self, id: DbId, db: Db) -> Result<(), String> {
        match self.dbs.get_mut(&id) {
            Some(slot) => {
                *slot = db;
                Ok(())
            }
            None => Err(format!("database {id} is not in the catalog")),
        }
    }

    /// The first difference between two sets of databases (catalog, usage, each keyspace,
    /// ACL and functions), or None when they hold the same.
    pub fn difference(&self, other: &Databases) -> Option<String> {
        if self.metas != other.metas || self.next_id != other.next_id {
            return Some(format!(
                "the catalogs differ: {:?} / {:?}",
                self.metas, other.metas
            ));
        }
        if self.usage != other.usage {
            return Some(format!(
                "the usage counts differ: {:?} / {:?}",
                self.usage, other.usage
            ));
        }
        for (id, db) in &self.dbs {
            let Some(theirs) = other.dbs.get(id) else {
                return Some(format!("database {id} is missing"));
            };
            if let Some(d) = db.difference(theirs) {
                return Some(format!("database {id}: {d}"));
            }
        }
        None
    }
}

/// The catalog as a snapshot keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CatalogImage {
    pub metas: Vec<DbMeta>,
    pub usage: Vec<(DbId, Vec<(u32, DayUsage)>)>,
    pub next_id: DbId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_that_name_no_database_change_nothing() {
        let mut d = Databases::default();
        d.apply(5, &DbEvent::Delete { id: 0 });
        d.apply(5, &DbEvent::Delete { id: 9 });
        d.apply(5, &DbEvent::ResetTokens { id: 9 });
        assert_eq!(d.len(), 1);
        d.apply(
            6,
            &DbEvent::Create {
                id: 3,
                name: "a".into(),
                expires_ms: Some(10),
                scratch: true,
                script_ms: None,
                max_data_bytes: None,
                created_by: None,
            },
        );
        assert_eq!(d.next_id(), 4);
        assert_eq!(d.expired(10), vec![3]);
        d.apply(7, &DbEvent::Claim { id: 3 });
        assert!(d.expired(u64::MAX).is_empty());
    }
}
