//! What a command is: Redis's own table entry (`redis-7.0-commands.json`, copied from the
//! reference: arity, flags, key specifications, ACL categories) joined with tidepool's row for
//! it (the handler, how its effect is logged, whether REST carries it, what the limits and the
//! Read Only token make of it). The rows themselves are in `table`; this file is their types,
//! the key finding, and the lookup.

use super::ctx::Ctx;
use crate::reply::Reply;
use serde::Deserialize;
use std::collections::HashMap;

const REDIS_7_0: &str = include_str!("redis-7.0-commands.json");
/// Redis 7.0.15's key specifications, from its `COMMAND` reply (`tools/gen-key-specs.py`).
const REDIS_7_0_KEY_SPECS: &str = include_str!("redis-7.0-key-specs.json");

#[derive(Deserialize)]
struct RawKeySpec {
    flags: Vec<String>,
    begin_search: HashMap<String, HashMap<String, serde_json::Value>>,
    find_keys: HashMap<String, HashMap<String, serde_json::Value>>,
}

/// Where a key specification starts looking (Redis's `begin_search`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginSearch {
    Index(i64),
    /// The argument after the first `keyword` (case-insensitive) from `startfrom` (negative:
    /// searching backwards from the end).
    Keyword {
        keyword: String,
        startfrom: i64,
    },
    /// Only the command's own key-finding knows (SORT's STORE).
    Unknown,
}

/// How a key specification finds its keys from where it starts (Redis's `find_keys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindKeys {
    Range {
        lastkey: i64,
        keystep: i64,
        limit: i64,
    },
    Keynum {
        keynumidx: i64,
        firstkey: i64,
        keystep: i64,
    },
    Unknown,
}

/// One key specification: where its keys are and what the command does with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// The command reads the keys' values (ACCESS): a read permission is needed.
    pub read: bool,
    /// The command changes the keys (INSERT, DELETE, UPDATE): a write permission is needed.
    pub write: bool,
    /// The command stores a value at the keys (INSERT, UPDATE), as opposed to only reading or
    /// deleting them: what the key-size limit checks.
    pub stores: bool,
    /// NOT_KEY: a channel or the like, not a key.
    pub not_key: bool,
    /// The flags as COMMAND GETKEYSANDFLAGS names them, in Redis's order.
    pub flags: Vec<&'static str>,
    pub begin: BeginSearch,
    pub find: FindKeys,
}

/// A key argument with the permissions it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef<'a> {
    pub key: &'a [u8],
    pub read: bool,
    pub write: bool,
    /// A value is stored at the key (not only read or deleted).
    pub stores: bool,
}

impl KeySpec {
    fn from_raw(r: &RawKeySpec) -> KeySpec {
        let has = |f: &str| r.flags.iter().any(|x| x.eq_ignore_ascii_case(f));
        let int = |m: &HashMap<String, serde_json::Value>, k: &str| {
            m.get(k).and_then(serde_json::Value::as_i64).unwrap_or(0)
        };
        let begin = if let Some(m) = r.begin_search.get("index") {
            BeginSearch::Index(int(m, "index"))
        } else if let Some(m) = r.begin_search.get("keyword") {
            BeginSearch::Keyword {
                keyword: m
                    .get("keyword")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                startfrom: int(m, "startfrom"),
            }
        } else {
            BeginSearch::Unknown
        };
        let find = if let Some(m) = r.find_keys.get("range") {
            FindKeys::Range {
                lastkey: int(m, "lastkey"),
                keystep: int(m, "keystep"),
                limit: int(m, "limit"),
            }
        } else if let Some(m) = r.find_keys.get("keynum") {
            FindKeys::Keynum {
                keynumidx: int(m, "keynumidx"),
                firstkey: int(m, "firstkey"),
                keystep: int(m, "keystep"),
            }
        } else {
            FindKeys::Unknown
        };
        // Redis's `addReplyFlagsForKeyArgs`: its order, its spelling.
        const NAMES: [(&str, &str); 11] = [
            ("RO", "RO"),
            ("RW", "RW"),
            ("OW", "OW"),
            ("RM", "RM"),
            ("ACCESS", "access"),
            ("UPDATE", "update"),
            ("INSERT", "insert"),
            ("DELETE", "delete"),
            ("NOT_KEY", "not_key"),
            ("INCOMPLETE", "incomplete"),
            ("VARIABLE_FLAGS", "variable_flags"),
        ];
        KeySpec {
            flags: NAMES
                .iter()
                .filter(|(raw, _)| has(raw))
                .map(|(_, name)| *name)
                .collect(),
            read: has("ACCESS"),
            write: has("INSERT") || has("DELETE") || has("UPDATE"),
            stores: has("INSERT") || has("UPDATE"),
            not_key: has("NOT_KEY"),
            begin,
            find,
        }
    }

    /// A spec of keys at fixed positions (Redis's legacy triple: `first`, `last`, `step`; a
    /// negative `last` counts from the end) with Redis's flags (`RW`, `ACCESS`, ...), for the
    /// commands newer than Redis 7.0's table.
    fn fixed(first: i32, last: i32, step: i32, flags: &[&str]) -> KeySpec {
        let raw = RawKeySpec {
            flags: flags.iter().map(|f| f.to_string()).collect(),
            begin_search: HashMap::from([(
                "index".to_string(),
                HashMap::from([("index".to_string(), serde_json::json!(first))]),
            )]),
            find_keys: HashMap::from([(
                "range".to_string(),
                HashMap::from([
                    (
                        "lastkey".to_string(),
                        serde_json::json!(if last >= 0 { last - first } else { last }),
                    ),
                    ("keystep".to_string(), serde_json::json!(step)),
                    ("limit".to_string(), serde_json::json!(0)),
                ]),
            )]),
        };
        KeySpec::from_raw(&raw)
    }

    /// The argument positions of this spec's keys, as Redis's `getKeysUsingKeySpecs` finds
    /// them; `None` when the arguments do not fit the spec (Redis then finds no keys, and the
    /// command answers its own syntax error).
    fn positions(&self, args: &[Vec<u8>]) -> Option<Vec<usize>> {
        let argc = args.len() as i64;
        let first = match &self.begin {
            BeginSearch::Index(i) => *i,
            BeginSearch::Keyword { keyword, startfrom } => {
                let found = if *startfrom > 0 {
                    (*startfrom..argc)
                        .find(|&i| args[i as usize].eq_ignore_ascii_case(keyword.as_bytes()))
                } else {
                    (1..=argc + startfrom)
                        .rev()
                        .find(|&i| args[i as usize].eq_ignore_ascii_case(keyword.as_bytes()))
                };
                // Keyword absent: this spec has no keys here (not an error).
                match found {
                    Some(i) => i + 1,
                    None => return Some(Vec::new()),
                }
            }
            BeginSearch::Unknown => return None,
        };
        let (first, last, step) = match &self.find {
            FindKeys::Range {
                lastkey,
                keystep,
                limit,
            } => {
                let last = if *lastkey >= 0 {
                    first + lastkey
                } else if *limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (first, last, *keystep)
            }
            FindKeys::Keynum {
                keynumidx,
                firstkey,
                keystep,
            } => {
                if *keynumidx >= argc - first {
                    return None;
                }
                let n: i64 = std::str::from_utf8(&args[(first + keynumidx) as usize])
                    .ok()?
                    .parse()
                    .ok()
                    .filter(|n| *n >= 0)?;
                let first = first + firstkey;
                (first, first + n - 1, *keystep)
            }
            FindKeys::Unknown => return None,
        };
        // As Redis: a range that ends before it starts (numkeys 0 included) does not fit.
        if last >= argc || last < first || first >= argc || first < 1 || step < 1 {
            return None;
        }
        Some(
            (first..=last)
                .step_by(step as usize)
                .map(|i| i as usize)
                .collect(),
        )
    }
}

#[derive(Deserialize)]
struct RawInfo {
    arity: i32,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    acl_categories: Vec<String>,
    #[serde(default)]
    group: String,
    #[serde(default)]
    first_key: i32,
    #[serde(default)]
    last_key: i32,
    #[serde(default)]
    step: i32,
    #[serde(default)]
    summary: String,
}

/// A command's handler: runs it on the state once the pipeline has checked it.
pub type Handler = fn(&mut Ctx, &[Vec<u8>]) -> Reply;

/// A command's own key finding, where Redis has one (SET, BITFIELD, SORT): each key's argument
/// position with its key flags as COMMAND GETKEYSANDFLAGS names them (`RW`, `access`, ...).
pub type OwnKeys = fn(&[Vec<u8>]) -> Vec<(usize, &'static [&'static str])>;

/// How a command's effect reaches the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    /// Never: it changes no data (reads, PUBLISH, the server's own commands).
    Never,
    /// As sent, when it changed the data (most writes).
    AsSent,
    /// In a deterministic form of its own when the form sent would not replay to the same
    /// state (a relative expiry becomes absolute, a random pick names what it picked, a
    /// password becomes its hash): the handler gives it with `Ctx::log_as`.
    Rewritten,
    /// By the effects of the commands it runs, each checked and logged on its own (scripts
    /// and functions: EVAL, FCALL).
    Effects,
}

impl Log {
    /// Whether the command itself writes to the log, and so is refused when the server takes
    /// no writes.
    pub fn writes(self) -> bool {
        matches!(self, Log::AsSent | Log::Rewritten)
    }
}

/// Whether a REST request can carry the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    Yes,
    /// Never, for this reason.
    No(&'static str),
    /// Not with this option (case-insensitive, anywhere after the name), for this reason.
    NotWith(&'static str, &'static str),
}

/// How much a write may store, for `--max-value-bytes`: by default the bytes of its
/// arguments other than the keys, bounded before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Args,
    /// APPEND: what the string holds plus the argument.
    Appends,
    /// SETRANGE: what the string holds, or the offset plus the argument, whichever is more.
    Range,
    /// SETBIT: an offset past the end grows the string with zeros.
    BitOffset,
    /// BITFIELD: each SET and INCRBY may write past the end.
    BitField,
    /// What it stores has no bound from its arguments (what SORT's BY reads, a RESTORE
    /// payload, a union of sets with scores, a dense HyperLogLog, a JSON value copied to every
    /// match of a path): measured after it runs, and undone when it went past the limit.
    After,
}

/// What SCRIPT KILL and FUNCTION KILL stop: they are answered while the executor is busy with
/// the script they stop, so they never wait behind it.
pub use crate::lua::Interrupt;

/// Where a command's table entry comes from when Redis 7.0's table does not hold it.
#[derive(Debug, Clone, Copy)]
pub enum Meta {
    /// Redis 7.0's own entry.
    Redis70,
    /// A command newer than Redis 7.0 (Redis 7.4 and 8's hash-field TTLs, 8.2's streams,
    /// 8.4's compare-and-set, RedisJSON), as Redis 8 lists it: its first key at position 1,
    /// `keys` its last key and step, its key flags as Redis 8 gives them, `@fast` for the hash,
    /// string and stream commands and `@slow` for JSON, and `denyoom` where it may grow memory.
    Newer {
        arity: i32,
        write: bool,
        group: &'static str,
        keys: (i32, i32),
        key_flags: &'static [&'static str],
        denyoom: bool,
        summary: &'static str,
    },
    /// A sibling's entry renamed (Redis 7.2's CLIENT SETINFO and NO-TOUCH, WAITAOF, RedisJSON's
    /// JSON.DEBUG, Upstash's ACL GENTOKEN): its flags and categories, with this arity and
    /// summary, and its keys moved to `key_at` when given.
    Like {
        from: &'static str,
        arity: i32,
        summary: &'static str,
        key_at: Option<i32>,
    },
    /// Upstash's administrative extension (ACL RESTTOKEN): no keys, `@admin @slow @dangerous`.
    Upstash { arity: i32, summary: &'static str },
}

/// One command, as tidepool runs it: its handler and what the pipeline, ACL, the limits and
/// the log need to know of it beyond Redis's table entry (arity, flags, keys, categories),
/// which comes from `meta`. A command is its handler plus one row.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub name: &'static str,
    pub run: Option<Handler>,
    /// `None`: `AsSent` for a command the table flags `write`, `Never` for the others.
    pub log: Option<Log>,
    /// `None`: whether REST carries it follows from its group and flags (cluster, connection
    /// and blocking commands without a handler are refused).
    pub rest: Option<Rest>,
    /// `None`: the Read Only token's profile decides (`@read` minus `@dangerous`).
    pub read_only_token: Option<bool>,
    pub size: Size,
    pub own_keys: Option<OwnKeys>,
    /// Its second argument is a channel it publishes to (an ACL user's channel rules hold).
    pub publishes: bool,
    pub interrupt: Option<Interrupt>,
    pub meta: Meta,
}

impl Row {
    /// A command Redis 7.0's table holds, run by `run`, logged as sent when it writes.
    pub fn new(name: &'static str, run: Handler) -> Row {
        Row {
            name,
            run: Some(run),
            log: None,
            rest: None,
            read_only_token: None,
            size: Size::Args,
            own_keys: None,
            publishes: false,
            interrupt: None,
            meta: Meta::Redis70,
        }
    }

    /// A command tidepool knows but REST cannot carry, and why.
    pub fn refused(name: &'static str, why: &'static str) -> Row {
        Row {
            run: None,
            rest: Some(Rest::No(why)),
            ..Row::new(name, |_, _| Reply::Nil)
        }
    }

    pub fn log(self, log: Log) -> Row {
        Row {
            log: Some(log),
            ..self
        }
    }

    pub fn rest(self, rest: Rest) -> Row {
        Row {
            rest: Some(rest),
            ..self
        }
    }

    pub fn read_only_token(self, allowed: bool) -> Row {
        Row {
            read_only_token: Some(allowed),
            ..self
        }
    }

    pub fn size(self, size: Size) -> Row {
        Row { size, ..self }
    }

    pub fn own_keys(self, find: OwnKeys) -> Row {
        Row {
            own_keys: Some(find),
            ..self
        }
    }

    pub fn publishes(self) -> Row {
        Row {
            publishes: true,
            ..self
        }
    }

    pub fn interrupts(self, what: Interrupt) -> Row {
        Row {
            interrupt: Some(what),
            ..self
        }
    }

    pub fn meta(self, meta: Meta) -> Row {
        Row { meta, ..self }
    }

    /// A newer command's entry (`Meta::Newer`) that may grow memory: refused past
    /// `--max-memory`.
    pub fn denyoom(mut self) -> Row {
        if let Meta::Newer { denyoom, .. } = &mut self.meta {
            *denyoom = true;
        }
        self
    }

    /// A newer command's keys past the first: the last (negative: from the end) and the step.
    pub fn keys(mut self, last: i32, step: i32) -> Row {
        if let Meta::Newer { keys, .. } = &mut self.meta {
            *keys = (last, step);
        }
        self
    }

    /// A newer command's key flags, as Redis 8 lists them.
    pub fn key_flags(mut self, flags: &'static [&'static str]) -> Row {
        if let Meta::Newer { key_flags, .. } = &mut self.meta {
            *key_flags = flags;
        }
        self
    }
}

/// What tidepool knows about one command (or `container|subcommand`): Redis's table entry
/// and tidepool's row, together.
#[derive(Debug, Clone)]
pub struct CommandInfo {
    /// Lowercase name; subcommands as `object|encoding`.
    pub name: String,
    pub arity: i32,
    pub write: bool,
    pub readonly_flag: bool,
    pub blocking: bool,
    /// The `movablekeys` flag: keys found only by searching the arguments.
    pub movable_keys: bool,
    pub category_read: bool,
    pub category_dangerous: bool,
    pub group: String,
    /// True for containers such as OBJECT, whose second argument names a subcommand.
    pub has_subcommands: bool,
    /// ACL categories, with their `@` (`@read`, `@hash`, ...).
    pub categories: Vec<String>,
    /// Key positions (Redis's legacy triple): first, last (negative counts from the end),
    /// step; first 0 means no keys at fixed positions.
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    /// The table's flags (`write`, `readonly`, `fast`, ...), for COMMAND INFO.
    pub flags: Vec<String>,
    /// The `denyoom` flag: refused while the server is past `--max-memory`.
    pub denyoom: bool,
    /// The `noscript` flag: refused from Lua.
    pub noscript: bool,
    /// Not shown to MONITOR: Redis's `admin` and `skip_monitor` flags, and every ACL
    /// subcommand (their arguments hold passwords), as Redis shows none of them.
    pub unmonitored: bool,
    /// One line, for COMMAND DOCS.
    pub summary: String,
    /// Redis 7.0's key specifications (fixed ones for the commands newer than its table).
    pub key_specs: Option<Vec<KeySpec>>,
    /// The entry's place in the table (names in byte order), for counters kept by command
    /// without hashing its name on every call.
    pub id: usize,
    /// The handler; `None` for a command Redis has and tidepool does not run.
    pub run: Option<Handler>,
    pub log: Log,
    pub rest: Rest,
    /// Whether the Read Only token may run it.
    pub read_only_token: bool,
    pub size: Size,
    pub own_keys: Option<OwnKeys>,
    pub publishes: bool,
    pub interrupt: Option<Interrupt>,
}

/// Key flags as Redis spells them (`RW`, `access`, ...): read, write, stores.
fn access_of(flags: &[&str]) -> (bool, bool, bool) {
    let has = |f: &str| flags.iter().any(|x| x.eq_ignore_ascii_case(f));
    (
        has("access"),
        has("insert") || has("delete") || has("update"),
        has("insert") || has("update"),
    )
}

impl CommandInfo {
    /// Whether `argc` arguments (the name included) fit the arity (negative: at least that
    /// many).
    pub fn arity_ok(&self, argc: usize) -> bool {
        let a = self.arity;
        if a >= 0 {
            argc == a as usize
        } else {
            argc >= (-a) as usize
        }
    }

    /// Why a RESP connection cannot run the command: only a command tidepool has no handler
    /// for (the rest REST refuses because HTTP cannot carry them, a connection can).
    pub fn connection_refusal(&self, args: &[Vec<u8>]) -> Option<String> {
        if self.run.is_some() {
            return None;
        }
        self.refusal(args, "")
    }

    /// Why a script cannot run the command: what REST cannot carry, except a blocking
    /// command, which in a script runs once without blocking, as in Redis.
    pub fn script_refusal(&self, args: &[Vec<u8>]) -> Option<String> {
        if self.blocking && self.run.is_some() {
            return None;
        }
        self.rest_refusal(args)
    }

    /// Why REST cannot carry these arguments of the command, if it cannot: Redis's error
    /// text.
    pub fn rest_refusal(&self, args: &[Vec<u8>]) -> Option<String> {
        self.refusal(args, " over REST")
    }

    /// The refusal of a row REST cannot carry, `over` naming the door (or nothing).
    fn refusal(&self, args: &[Vec<u8>], over: &str) -> Option<String> {
        let why = match self.rest {
            Rest::Yes => return None,
            Rest::No(why) => why,
            Rest::NotWith(word, why) => {
                if !args
                    .iter()
                    .skip(1)
                    .any(|a| a.eq_ignore_ascii_case(word.as_bytes()))
                {
                    return None;
                }
                why
            }
        };
        Some(format!(
            "ERR '{}' is not supported{over}: {why}",
            self.name.replace('|', " ").to_ascii_uppercase()
        ))
    }

    /// Every key argument with the access it needs, as Redis's ACL finds them: from the key
    /// specifications (numkeys, keyword-introduced keys such as STREAMS and STORE included),
    /// or the command's own key finding where Redis uses one (SET, BITFIELD, SORT). Commands
    /// newer than Redis 7.0's table take their fixed positions and need read and write when
    /// they write (read alone otherwise).
    pub fn key_refs<'a>(&self, args: &'a [Vec<u8>]) -> Vec<KeyRef<'a>> {
        self.key_refs_with(args, false)
    }

    /// As [`CommandInfo::key_refs`]; with `partial`, a specification the arguments do not fit
    /// gives no keys while the others still give theirs (Redis's GET_KEYSPEC_RETURN_PARTIAL):
    /// `PFMERGE dest` has its destination and no sources. The limits use it.
    pub fn key_refs_with<'a>(&self, args: &'a [Vec<u8>], partial: bool) -> Vec<KeyRef<'a>> {
        if let Some(find) = self.own_keys {
            return find(args)
                .into_iter()
                .filter(|(i, _)| *i < args.len())
                .map(|(i, flags)| {
                    let (read, write, stores) = access_of(flags);
                    KeyRef {
                        key: args[i].as_slice(),
                        read,
                        write,
                        stores,
                    }
                })
                .collect();
        }
        let Some(specs) = &self.key_specs else {
            return self
                .keys(args)
                .into_iter()
                .map(|key| KeyRef {
                    key,
                    read: true,
                    write: self.write,
                    stores: self.write,
                })
                .collect();
        };
        let mut out = Vec::new();
        for spec in specs.iter().filter(|s| !s.not_key) {
            match spec.positions(args) {
                Some(pos) => out.extend(pos.into_iter().map(|i| KeyRef {
                    key: args[i].as_slice(),
                    read: spec.read,
                    write: spec.write,
                    stores: spec.stores,
                })),
                None if partial => {}
                // As Redis: arguments that do not fit a spec give no keys at all; the
                // command then refuses them itself.
                None => return Vec::new(),
            }
        }
        out
    }

    /// Every key argument with its flags, as COMMAND GETKEYSANDFLAGS lists them: from the key
    /// specifications, or the command's own key finding where Redis uses one (SET, BITFIELD,
    /// SORT). None for a command whose table entry holds no key flags.
    pub fn keys_and_flags<'a>(
        &self,
        args: &'a [Vec<u8>],
    ) -> Option<Vec<(&'a [u8], Vec<&'static str>)>> {
        if let Some(find) = self.own_keys {
            return Some(
                find(args)
                    .into_iter()
                    .filter(|(i, _)| *i < args.len())
                    .map(|(i, f)| (args[i].as_slice(), f.to_vec()))
                    .collect(),
            );
        }
        let specs = self.key_specs.as_ref()?;
        let mut out = Vec::new();
        for spec in specs.iter().filter(|s| !s.not_key) {
            match spec.positions(args) {
                Some(pos) => out.extend(
                    pos.into_iter()
                        .map(|i| (args[i].as_slice(), spec.flags.clone())),
                ),
                None => return Some(Vec::new()),
            }
        }
        Some(out)
    }

    /// The arguments that are keys, by the fixed positions of the table.
    pub fn keys<'a>(&self, args: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
        if self.first_key <= 0 || self.step <= 0 {
            return Vec::new();
        }
        let n = args.len() as i32;
        let last = if self.last_key < 0 {
            n + self.last_key
        } else {
            self.last_key.min(n - 1)
        };
        let mut out = Vec::new();
        let mut i = self.first_key;
        while i <= last && i < n {
            out.push(args[i as usize].as_slice());
            i += self.step;
        }
        out
    }
}

/// FNV-1a, for the table's names: a lookup hashes a name of a few bytes on every command, and
/// the table's keys are fixed (a request can only miss, never add a key), so a keyed hash's
/// protection against chosen collisions buys nothing here and costs a SipHash a command.
#[derive(Default)]
pub struct NameHasher(u64);

impl std::hash::Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// The entries by name, as bytes: a lookup needs no UTF-8 check.
type Names<V> = HashMap<Vec<u8>, V, std::hash::BuildHasherDefault<NameHasher>>;

pub struct CommandTable {
    map: Names<CommandInfo>,
    top_level: usize,
    /// Every entry's name, in byte order: `names[info.id] == info.name`.
    names: Vec<String>,
    stray: Vec<&'static str>,
    /// The commands that interrupt Lua (`container`, `subcommand`, what they stop), found
    /// without a lookup: every request is asked whether it is one.
    interrupters: Vec<(Vec<u8>, Vec<u8>, Interrupt)>,
}

impl CommandTable {
    /// The table: Redis 7.0's entries, the entries `rows` add (commands newer than it and
    /// Upstash's), and each row's handler and attributes on its entry. A row that names no
    /// entry is kept in `stray` (a unit test holds it empty).
    pub fn build(rows: Vec<Row>) -> CommandTable {
        // The table is compiled in and checked by a unit test, so a parse failure here is a
        // build defect, never input.
        let raw: HashMap<String, RawInfo> = serde_json::from_str(REDIS_7_0).unwrap_or_default();
        let containers: Vec<String> = raw
            .keys()
            .filter_map(|k| k.split_once('|').map(|(c, _)| c.to_string()))
            .collect();
        let mut map: HashMap<String, CommandInfo> = HashMap::with_capacity(raw.len() + rows.len());
        // COMMAND COUNT answers Redis 7.0's count, as the differential test holds it to.
        let top_level = raw.keys().filter(|n| !n.contains('|')).count();
        for (name, r) in raw {
            let has = |f: &str| r.flags.iter().any(|x| x == f);
            let cat = |c: &str| r.acl_categories.iter().any(|x| x == c);
            let info = CommandInfo {
                has_subcommands: containers.contains(&name),
                write: has("write"),
                readonly_flag: has("readonly"),
                blocking: has("blocking"),
                movable_keys: has("movablekeys"),
                denyoom: has("denyoom"),
                noscript: has("noscript"),
                unmonitored: has("admin") || has("skip_monitor") || name.starts_with("acl|"),
                category_read: cat("@read"),
                category_dangerous: cat("@dangerous"),
                arity: r.arity,
                group: r.group,
                name: name.clone(),
                categories: r.acl_categories,
                first_key: r.first_key,
                last_key: r.last_key,
                step: r.step,
                flags: r.flags,
                summary: r.summary,
                key_specs: None,
                ..CommandInfo::blank()
            };
            map.insert(name, info);
        }
        let specs: HashMap<String, Vec<RawKeySpec>> =
            serde_json::from_str(REDIS_7_0_KEY_SPECS).unwrap_or_default();
        for (name, raw) in specs {
            if let Some(info) = map.get_mut(&name) {
                info.key_specs = Some(raw.iter().map(KeySpec::from_raw).collect());
            }
        }
        // The entries the rows add: those made from scratch first, then those made like a
        // sibling (which may be one of the first).
        for row in &rows {
            let made = match row.meta {
                Meta::Newer {
                    arity,
                    write,
                    group,
                    keys,
                    key_flags,
                    denyoom,
                    summary,
                } => Some(newer_entry(
                    row.name, arity, write, group, keys, key_flags, denyoom, summary,
                )),
                Meta::Upstash { arity, summary } => Some(upstash_entry(row.name, arity, summary)),
                Meta::Redis70 | Meta::Like { .. } => None,
            };
            if let Some(info) = made {
                map.insert(row.name.to_string(), info);
            }
        }
        for row in &rows {
            if let Meta::Like {
                from,
                arity,
                summary,
                key_at,
            } = row.meta
            {
                if let Some(mut e) = map.get(from).cloned() {
                    e.name = row.name.into();
                    e.arity = arity;
                    e.summary = summary.into();
                    if let Some(k) = key_at {
                        e.first_key = k;
                        e.last_key = k;
                        e.key_specs = Some(vec![KeySpec::fixed(k, k, 1, &["RO", "ACCESS"])]);
                    }
                    map.insert(row.name.to_string(), e);
                }
            }
        }
        // The Read Only token's profile: the `@read` category minus `@dangerous` (rows add
        // PING, ECHO, TIME and the read-only script commands, and take the scan family away).
        for info in map.values_mut() {
            info.read_only_token = info.category_read && !info.category_dangerous;
        }
        let mut stray = Vec::new();
        for row in rows {
            let Some(info) = map.get_mut(row.name) else {
                stray.push(row.name);
                continue;
            };
            info.run = row.run;
            info.log = row
                .log
                .unwrap_or(if info.write { Log::AsSent } else { Log::Never });
            info.rest = row.rest.unwrap_or(Rest::Yes);
            if let Some(ro) = row.read_only_token {
                info.read_only_token = ro;
            }
            info.size = row.size;
            info.own_keys = row.own_keys;
            info.publishes = row.publishes;
            info.interrupt = row.interrupt;
        }
        let mut names: Vec<String> = map.keys().cloned().collect();
        names.sort();
        for (id, name) in names.iter().enumerate() {
            if let Some(info) = map.get_mut(name) {
                info.id = id;
                if info.run.is_none() && info.rest == Rest::Yes {
                    info.rest = default_rest(info);
                }
            }
        }
        let interrupters = map
            .values()
            .filter_map(|i| {
                let (c, sub) = i.name.split_once('|')?;
                Some((c.as_bytes().to_vec(), sub.as_bytes().to_vec(), i.interrupt?))
            })
            .collect();
        let map: Names<CommandInfo> = map
            .into_iter()
            .map(|(name, info)| (name.into_bytes(), info))
            .collect();
        CommandTable {
            map,
            top_level,
            names,
            stray,
            interrupters,
        }
    }

    /// What `args` stops if it is a command that interrupts Lua (SCRIPT KILL, FUNCTION KILL),
    /// as its row says; a few byte comparisons, no lookup.
    pub fn interrupt_of(&self, args: &[Vec<u8>]) -> Option<Interrupt> {
        let [name, sub] = args else {
            return None;
        };
        self.interrupters
            .iter()
            .find(|(c, s, _)| name.eq_ignore_ascii_case(c) && sub.eq_ignore_ascii_case(s))
            .map(|(_, _, what)| *what)
    }

    /// The rows that named no entry of the table: a defect of the rows.
    pub fn stray(&self) -> &[&'static str] {
        &self.stray
    }

    /// How many entries (commands and subcommands) the table holds: ids are below it.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The name of the entry numbered `id`.
    pub fn name_of(&self, id: usize) -> Option<&str> {
        self.names.get(id).map(String::as_str)
    }

    pub fn len_top_level(&self) -> usize {
        self.top_level
    }

    pub fn get(&self, lowercase_name: &str) -> Option<&CommandInfo> {
        self.map.get(lowercase_name.as_bytes())
    }

    /// Every command (and subcommand) entry.
    pub fn all(&self) -> impl Iterator<Item = &CommandInfo> {
        self.map.values()
    }

    /// Looks up the command `args` names. For a container with a subcommand argument, returns
    /// the subcommand's entry; `Err(container)` when that subcommand does not exist.
    pub fn lookup(&self, args: &[Vec<u8>]) -> Lookup<'_> {
        let Some(first) = args.first() else {
            return Lookup::Unknown;
        };
        // Command names are short: lowercase them on the stack.
        let mut buf = [0u8; 32];
        if first.len() > buf.len() {
            return Lookup::Unknown;
        }
        let lower = &mut buf[..first.len()];
        lower.copy_from_slice(first);
        lower.make_ascii_lowercase();
        let Some(info) = self.map.get(&lower[..]) else {
            return Lookup::Unknown;
        };
        if !info.has_subcommands || args.len() < 2 {
            return Lookup::Found(info);
        }
        let mut name = Vec::with_capacity(lower.len() + 1 + args[1].len());
        name.extend_from_slice(lower);
        name.push(b'|');
        name.extend(args[1].iter().map(u8::to_ascii_lowercase));
        match self.map.get(&name) {
            Some(s) => Lookup::Found(s),
            None => Lookup::UnknownSubcommand(info),
        }
    }
}

pub enum Lookup<'a> {
    Found(&'a CommandInfo),
    UnknownSubcommand(&'a CommandInfo),
    Unknown,
}

/// Why REST cannot carry a command tidepool has no handler or row for, by what Redis's table
/// says of it: the cluster, connection and blocking commands need what a request does not have.
/// Any other such command answers that tidepool does not run it.
fn default_rest(info: &CommandInfo) -> Rest {
    match info.group.as_str() {
        "cluster" => Rest::No("tidepool is a single node, not a cluster"),
        "connection" => Rest::No(
            "only PING and ECHO are supported over REST; a request has no connection state",
        ),
        _ if info.blocking => {
            Rest::No("blocking commands need a connection that HTTP does not keep")
        }
        _ => Rest::Yes,
    }
}

impl CommandInfo {
    /// An entry with nothing in it, to fill in.
    fn blank() -> CommandInfo {
        CommandInfo {
            name: String::new(),
            arity: 0,
            write: false,
            readonly_flag: false,
            blocking: false,
            movable_keys: false,
            category_read: false,
            category_dangerous: false,
            group: String::new(),
            has_subcommands: false,
            categories: Vec::new(),
            first_key: 0,
            last_key: 0,
            step: 0,
            flags: Vec::new(),
            denyoom: false,
            noscript: false,
            unmonitored: false,
            summary: String::new(),
            key_specs: None,
            id: 0,
            run: None,
            log: Log::Never,
            rest: Rest::Yes,
            read_only_token: false,
            size: Size::Args,
            own_keys: None,
            publishes: false,
            interrupt: None,
        }
    }
}

/// The entry of a command newer than Redis 7.0's table (see [`Meta::Newer`]).
#[allow(clippy::too_many_arguments)]
fn newer_entry(
    name: &str,
    arity: i32,
    write: bool,
    group: &str,
    keys: (i32, i32),
    key_flags: &[&str],
    denyoom: bool,
    summary: &str,
) -> CommandInfo {
    let speed = if group == "json" { "slow" } else { "fast" };
    let mut flags = vec![if write { "write" } else { "readonly" }.to_string()];
    if denyoom {
        flags.push("denyoom".into());
    }
    if speed == "fast" {
        flags.push("fast".into());
    }
    let default_flags: &[&str] = if write {
        &["RW", "ACCESS", "UPDATE"]
    } else {
        &["RO", "ACCESS"]
    };
    CommandInfo {
        name: name.into(),
        arity,
        write,
        readonly_flag: !write,
        category_read: !write,
        denyoom,
        group: group.into(),
        categories: vec![
            if write { "@write" } else { "@read" }.into(),
            format!("@{group}"),
            format!("@{speed}"),
        ],
        first_key: 1,
        last_key: keys.0,
        step: keys.1,
        flags,
        summary: summary.into(),
        key_specs: Some(vec![KeySpec::fixed(
            1,
            keys.0,
            keys.1,
            if key_flags.is_empty() {
                default_flags
            } else {
                key_flags
            },
        )]),
        ..CommandInfo::blank()
    }
}

/// The entry of Upstash's administrative extension (see [`Meta::Upstash`]).
fn upstash_entry(name: &str, arity: i32, summary: &str) -> CommandInfo {
    CommandInfo {
        name: name.into(),
        arity,
        category_dangerous: true,
        group: "server".into(),
        categories: vec!["@admin".into(), "@slow".into(), "@dangerous".into()],
        flags: vec![
            "admin".into(),
            "noscript".into(),
            "loading".into(),
            "stale".into(),
        ],
        noscript: true,
        unmonitored: true,
        summary: summary.into(),
        ..CommandInfo::blank()
    }
}
