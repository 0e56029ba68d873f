//! Redis's own command table (`redis-7.0-commands.json`, copied from the reference): arity,
//! flags and ACL categories. Arity checks and read-only classification come from here rather
//! than from hand-kept lists.

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::OnceLock;

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

/// What tidepool knows about one command (or `container|subcommand`).
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
    /// One line, for COMMAND DOCS.
    pub summary: String,
    /// Redis 7.0's key specifications; `None` for commands newer than its table.
    pub key_specs: Option<Vec<KeySpec>>,
    /// The entry's place in the table (names in byte order), for counters kept by command
    /// without hashing its name on every call.
    pub id: usize,
}

impl CommandInfo {
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
        let at = |i: usize, read: bool, write: bool| KeyRef {
            key: args[i].as_slice(),
            read,
            write,
            stores: write,
        };
        let has_arg =
            |from: usize, word: &[u8]| args.iter().skip(from).any(|a| a.eq_ignore_ascii_case(word));
        match self.name.as_str() {
            // setGetKeys: GET makes SET a read too, and so do Redis 8.4's conditions (the reply
            // tells whether the value matched).
            "set" if args.len() > 1 => {
                let reads = [&b"get"[..], b"ifeq", b"ifne", b"ifdeq", b"ifdne"]
                    .iter()
                    .any(|w| has_arg(3, w));
                return vec![at(1, reads, true)];
            }
            // bitfieldGetKeys: only GET operations make it a read.
            "bitfield" if args.len() > 1 => {
                let mut read_only = true;
                let mut i = 2;
                while i < args.len() {
                    let op = args[i].to_ascii_lowercase();
                    match op.as_slice() {
                        b"get" => i += 3,
                        b"set" | b"incrby" => {
                            read_only = false;
                            i += 4;
                        }
                        b"overflow" => i += 2,
                        _ => i += 1,
                    }
                }
                return vec![at(1, true, !read_only)];
            }
            // sortGetKeys: the key, and the last STORE's destination (as SORT uses it).
            "sort" | "sort_ro" if args.len() > 1 => {
                let mut store = None;
                let mut i = 2;
                while i < args.len() {
                    let a = args[i].to_ascii_lowercase();
                    match a.as_slice() {
                        b"limit" => i += 2,
                        b"get" | b"by" => i += 1,
                        b"store" if self.name == "sort" && i + 1 < args.len() => {
                            store = Some(i + 1)
                        }
                        _ => {}
                    }
                    i += 1;
                }
                let mut out = vec![at(1, true, false)];
                out.extend(store.map(|i| at(i, false, true)));
                return out;
            }
            _ => {}
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
                    stores: spec.stores,
                    ..at(i, spec.read, spec.write)
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
    /// SORT). None for a command newer than Redis 7.0's table, whose key flags tidepool's
    /// table does not hold.
    pub fn keys_and_flags<'a>(
        &self,
        args: &'a [Vec<u8>],
    ) -> Option<Vec<(&'a [u8], Vec<&'static str>)>> {
        let specs = self.key_specs.as_ref()?;
        let own: Option<Vec<(usize, Vec<&'static str>)>> = match self.name.as_str() {
            // setGetKeys: GET reads the old value; without it SET overwrites.
            "set" => Some(vec![(
                1,
                if args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get")) {
                    vec!["RW", "access", "update"]
                } else {
                    vec!["OW", "update"]
                },
            )]),
            // bitfieldGetKeys and sortGetKeys, through the access key_refs finds.
            "bitfield" | "sort" | "sort_ro" => Some(
                self.key_refs(args)
                    .iter()
                    .map(|r| {
                        let at = args
                            .iter()
                            .position(|a| std::ptr::eq(a.as_slice(), r.key))
                            .unwrap_or(1);
                        let flags = match (self.name.as_str(), r.read, r.write) {
                            ("bitfield", _, false) => vec!["RO", "access"],
                            ("bitfield", _, true) => vec!["RW", "access", "update"],
                            (_, true, _) => vec!["RO", "access"],
                            _ => vec!["OW", "update"],
                        };
                        (at, flags)
                    })
                    .collect(),
            ),
            _ => None,
        };
        if let Some(own) = own {
            return Some(
                own.into_iter()
                    .map(|(i, f)| (args[i].as_slice(), f))
                    .collect(),
            );
        }
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

pub struct CommandTable {
    map: HashMap<String, CommandInfo>,
    top_level: usize,
    /// Every entry's name, in byte order: `names[info.id] == info.name`.
    names: Vec<String>,
}

/// The table, parsed once.
pub fn global() -> &'static CommandTable {
    static TABLE: OnceLock<CommandTable> = OnceLock::new();
    TABLE.get_or_init(CommandTable::load)
}

/// A table entry for a command newer than Redis 7.0's table (hash-field TTLs, Redis 8.2
/// streams, RedisJSON), as Redis 8 lists it: its first key at position 1, `keys` the last key
/// and step, `@fast` for the hash and stream commands and `@slow` for JSON, as their modules
/// and Redis 8 declare.
fn newer_entry(
    name: &str,
    arity: i32,
    write: bool,
    group: &str,
    keys: (i32, i32),
    summary: &str,
) -> CommandInfo {
    let speed = if group == "json" { "slow" } else { "fast" };
    let mut flags = vec![if write { "write" } else { "readonly" }.to_string()];
    // The ones that may grow memory, as Redis 8 and RedisJSON flag them (`--max-memory`
    // refuses them past the limit).
    if matches!(
        name,
        "hsetex"
            | "json.set"
            | "json.mset"
            | "json.merge"
            | "json.arrappend"
            | "json.arrinsert"
            | "json.strappend"
    ) {
        flags.push("denyoom".into());
    }
    if speed == "fast" {
        flags.push("fast".into());
    }
    CommandInfo {
        name: name.into(),
        arity,
        write,
        readonly_flag: !write,
        blocking: false,
        movable_keys: false,
        category_read: !write,
        category_dangerous: false,
        group: group.into(),
        has_subcommands: false,
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
            newer_key_flags(name, write),
        )]),
        id: 0,
    }
}

/// The key flags of a command newer than Redis 7.0's table, as Redis 8 (and RedisJSON, whose
/// commands Redis gives read-write access flags) lists them: what ACL, COMMAND
/// GETKEYSANDFLAGS and the key-size limit read.
fn newer_key_flags(name: &str, write: bool) -> &'static [&'static str] {
    match name {
        "hgetdel" | "delex" => &["RW", "ACCESS", "DELETE"],
        "xackdel" | "xdelex" => &["RW", "DELETE"],
        "json.del" | "json.forget" => &["RW", "ACCESS", "DELETE"],
        "hsetex" | "hexpire" | "hpexpire" | "hexpireat" | "hpexpireat" | "hpersist" => {
            &["RW", "UPDATE"]
        }
        _ if write => &["RW", "ACCESS", "UPDATE"],
        _ => &["RO", "ACCESS"],
    }
}

impl CommandTable {
    fn load() -> CommandTable {
        // The table is compiled in and checked by a unit test, so a parse failure here is a
        // build defect, never input.
        let raw: HashMap<String, RawInfo> = serde_json::from_str(REDIS_7_0).unwrap_or_default();
        let containers: Vec<String> = raw
            .keys()
            .filter_map(|k| k.split_once('|').map(|(c, _)| c.to_string()))
            .collect();
        let mut map = HashMap::with_capacity(raw.len());
        let mut top_level = 0;
        for (name, r) in raw {
            if !name.contains('|') {
                top_level += 1;
            }
            let has = |f: &str| r.flags.iter().any(|x| x == f);
            let cat = |c: &str| r.acl_categories.iter().any(|x| x == c);
            let info = CommandInfo {
                has_subcommands: containers.contains(&name),
                write: has("write"),
                readonly_flag: has("readonly"),
                blocking: has("blocking"),
                movable_keys: has("movablekeys"),
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
                id: 0,
            };
            map.insert(name, info);
        }
        // Commands newer than Redis 7.0 that clients send, with their Redis 8 table entries
        // (name, arity, write): all take one key at position 1 and are @hash @fast.
        for (name, arity, write, summary) in [
            ("hgetdel", -5, true, "Returns the value of a field and deletes it from the hash"),
            ("hgetex", -5, true, "Get the value of one or more fields of a given hash key, and optionally set their expiration"),
            ("hsetex", -6, true, "Set the value of one or more fields of a given hash key, and optionally set their expiration"),
            ("hexpire", -6, true, "Set expiry for hash field using relative time to expire (seconds)"),
            ("hpexpire", -6, true, "Set expiry for hash field using relative time to expire (milliseconds)"),
            ("hexpireat", -6, true, "Set expiry for hash field using an absolute Unix timestamp (seconds)"),
            ("hpexpireat", -6, true, "Set expiry for hash field using an absolute Unix timestamp (milliseconds)"),
            ("hpersist", -5, true, "Removes the expiration time for each specified field"),
            ("httl", -5, false, "Returns the TTL in seconds of a hash field."),
            ("hpttl", -5, false, "Returns the TTL in milliseconds of a hash field."),
            ("hexpiretime", -5, false, "Returns the expiration time of a hash field as a Unix timestamp, in seconds."),
            ("hpexpiretime", -5, false, "Returns the expiration time of a hash field as a Unix timestamp, in msec."),
        ] {
            let info = newer_entry(name, arity, write, "hash", (1, 1), summary);
            map.insert(name.to_string(), info);
        }
        // Redis 8.2's stream commands the SDKs send.
        for (name, arity, summary) in [
            (
                "xackdel",
                -6,
                "Acknowledges and deletes one or multiple messages for a stream consumer group.",
            ),
            (
                "xdelex",
                -5,
                "Deletes one or multiple entries from the stream.",
            ),
        ] {
            let info = newer_entry(name, arity, true, "stream", (1, 1), summary);
            map.insert(name.to_string(), info);
        }
        // Redis 8.4's compare-and-set and compare-and-delete string commands.
        for (name, arity, write, summary) in [
            (
                "delex",
                -2,
                true,
                "Conditionally removes the specified key based on value or digest comparison.",
            ),
            (
                "digest",
                2,
                false,
                "Returns the XXH3 hash of a string value.",
            ),
        ] {
            let info = newer_entry(name, arity, write, "string", (1, 1), summary);
            map.insert(name.to_string(), info);
        }
        // RedisJSON's commands, with the module's own table entries (name, arity, write,
        // first key, last key, key step, summary).
        for (name, arity, write, last_key, step, summary) in [
            ("json.set", -4, true, 1, 1, "Sets or updates the JSON value at a path"),
            ("json.get", -2, false, 1, 1, "Gets the value at one or more paths in JSON serialized form"),
            ("json.mget", -3, false, -2, 1, "Returns the values at a path from one or more keys"),
            ("json.mset", -4, true, -1, 3, "Sets or updates the JSON value of one or more keys"),
            ("json.merge", -4, true, 1, 1, "Merges a given JSON value into matching paths"),
            ("json.del", -2, true, 1, 1, "Deletes a value"),
            ("json.forget", -2, true, 1, 1, "Deletes a value"),
            ("json.type", -2, false, 1, 1, "Returns the type of the JSON value at path"),
            ("json.numincrby", 4, true, 1, 1, "Increments the numeric value at path by a value"),
            ("json.nummultby", 4, true, 1, 1, "Multiplies the numeric value at path by a value"),
            ("json.toggle", 3, true, 1, 1, "Toggles a boolean value"),
            ("json.strappend", -3, true, 1, 1, "Appends a string to a JSON string value at path"),
            ("json.strlen", -2, false, 1, 1, "Returns the length of the JSON String at path in key"),
            ("json.arrappend", -3, true, 1, 1, "Append one or more JSON values into the array at path after the last element in it"),
            ("json.arrinsert", -5, true, 1, 1, "Inserts the JSON scalar(s) value at the specified index in the array at path"),
            ("json.arrpop", -2, true, 1, 1, "Removes and returns the element at the specified index in the array at path"),
            ("json.arrtrim", 5, true, 1, 1, "Trims the array at path to contain only the specified inclusive range of indices from start to stop"),
            ("json.arrindex", -4, false, 1, 1, "Returns the index of the first occurrence of a JSON scalar value in the array at path"),
            ("json.arrlen", -2, false, 1, 1, "Returns the length of the array at path"),
            ("json.objkeys", -2, false, 1, 1, "Returns the JSON keys of the object at path"),
            ("json.objlen", -2, false, 1, 1, "Returns the number of keys of the object at path"),
            ("json.clear", -2, true, 1, 1, "Clears all values from an array or an object and sets numeric values to `0`"),
            ("json.resp", -2, false, 1, 1, "Returns the JSON value at path in Redis Serialization Protocol (RESP)"),
        ] {
            let info = newer_entry(name, arity, write, "json", (last_key, step), summary);
            map.insert(name.to_string(), info);
        }
        // Upstash's extension: a REST token for an ACL user.
        map.insert(
            "acl|resttoken".to_string(),
            CommandInfo {
                name: "acl|resttoken".into(),
                arity: 4,
                write: false,
                readonly_flag: false,
                blocking: false,
                movable_keys: false,
                category_read: false,
                category_dangerous: true,
                group: "server".into(),
                has_subcommands: false,
                categories: vec!["@admin".into(), "@slow".into(), "@dangerous".into()],
                first_key: 0,
                last_key: 0,
                step: 0,
                flags: vec![
                    "admin".into(),
                    "noscript".into(),
                    "loading".into(),
                    "stale".into(),
                ],
                summary: "Upstash: a REST token that carries an ACL user's permissions".into(),
                key_specs: None,
                id: 0,
            },
        );
        // Redis 7.2's CLIENT SETINFO and NO-TOUCH, and WAITAOF, as Redis 7.2 lists them (the
        // 7.0 entries of their siblings, renamed).
        for (from, name, arity, summary) in [
            ("client|setname", "client|setinfo", 4, "Sets information specific to the client or connection."),
            ("client|no-evict", "client|no-touch", 3, "Controls whether commands sent by the client affect the LRU/LFU of accessed keys."),
            ("wait", "waitaof", 4, "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas."),
        ] {
            if let Some(mut e) = map.get(from).cloned() {
                e.name = name.into();
                e.arity = arity;
                e.summary = summary.into();
                map.insert(name.to_string(), e);
            }
        }
        // RedisJSON's JSON.DEBUG (MEMORY key [path], HELP): its key is the third argument.
        if let Some(mut e) = map.get("json.resp").cloned() {
            e.name = "json.debug".into();
            e.arity = -2;
            e.first_key = 2;
            e.last_key = 2;
            e.key_specs = Some(vec![KeySpec::fixed(2, 2, 1, &["RO", "ACCESS"])]);
            e.summary = "Debugging container command".into();
            map.insert("json.debug".to_string(), e);
        }
        // Upstash's extension: a token that is both a password and a REST token.
        let mut gentoken = map.get("acl|resttoken").cloned();
        if let Some(g) = gentoken.as_mut() {
            g.name = "acl|gentoken".into();
            g.arity = -3;
            g.summary =
                "Upstash: a token to set as an ACL user's password, then use as its REST token"
                    .into();
        }
        if let Some(g) = gentoken {
            map.insert("acl|gentoken".to_string(), g);
        }
        let specs: HashMap<String, Vec<RawKeySpec>> =
            serde_json::from_str(REDIS_7_0_KEY_SPECS).unwrap_or_default();
        for (name, raw) in specs {
            if let Some(info) = map.get_mut(&name) {
                info.key_specs = Some(raw.iter().map(KeySpec::from_raw).collect());
            }
        }
        let mut names: Vec<String> = map.keys().cloned().collect();
        names.sort();
        for (id, name) in names.iter().enumerate() {
            if let Some(info) = map.get_mut(name) {
                info.id = id;
            }
        }
        CommandTable {
            map,
            top_level,
            names,
        }
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
        self.map.get(lowercase_name)
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
        let lower_bytes = &mut buf[..first.len()];
        lower_bytes.copy_from_slice(first);
        lower_bytes.make_ascii_lowercase();
        let Ok(lower) = std::str::from_utf8(lower_bytes) else {
            return Lookup::Unknown;
        };
        let Some(info) = self.map.get(lower) else {
            return Lookup::Unknown;
        };
        if !info.has_subcommands || args.len() < 2 {
            return Lookup::Found(info);
        }
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match self.map.get(&format!("{lower}|{sub}")) {
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

#[cfg(test)]
mod tests {
    fn refs(args: &[&str]) -> Vec<Want> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let info = match super::global().lookup(&args) {
            super::Lookup::Found(i) => i,
            _ => panic!("unknown command {:?}", args[0]),
        };
        info.key_refs(&args)
            .into_iter()
            .map(|k| (String::from_utf8_lossy(k.key).into_owned(), k.read, k.write))
            .collect()
    }

    /// A key the test expects: its name, whether a read and a write permission are needed.
    type Want = (String, bool, bool);

    fn k(key: &str, read: bool, write: bool) -> Want {
        (key.to_string(), read, write)
    }

    /// Guards issue 14: keys that are not at fixed positions escaped the ACL key check, 16
    /// ways. Each is found here, with the access Redis's key specifications give it.
    #[test]
    fn every_key_is_found_where_redis_finds_it() {
        let cases: &[(&[&str], Vec<Want>)] = &[
            (
                &["LMPOP", "1", "other:l", "LEFT"],
                vec![k("other:l", true, true)],
            ),
            (
                &["ZMPOP", "2", "a", "b", "MIN"],
                vec![k("a", true, true), k("b", true, true)],
            ),
            (
                &[
                    "GEORADIUS",
                    "app:g",
                    "0",
                    "0",
                    "1",
                    "km",
                    "STORE",
                    "other:gd",
                ],
                vec![k("app:g", true, false), k("other:gd", false, true)],
            ),
            (
                &[
                    "GEORADIUSBYMEMBER",
                    "app:g",
                    "m",
                    "1",
                    "km",
                    "STOREDIST",
                    "other:gd",
                ],
                vec![k("app:g", true, false), k("other:gd", false, true)],
            ),
            (
                &["ZUNION", "2", "app:a", "other:z"],
                vec![k("app:a", true, false), k("other:z", true, false)],
            ),
            (
                &["ZUNIONSTORE", "app:d", "1", "other:z"],
                vec![k("app:d", false, true), k("other:z", true, false)],
            ),
            (&["ZDIFF", "1", "other:z"], vec![k("other:z", true, false)]),
            (
                &["ZINTERCARD", "1", "other:z"],
                vec![k("other:z", true, false)],
            ),
            (
                &["SINTERCARD", "1", "other:s"],
                vec![k("other:s", true, false)],
            ),
            (
                &["XREAD", "STREAMS", "other:x", "0"],
                vec![k("other:x", true, false)],
            ),
            (
                &["XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0"],
                vec![k("a", true, false), k("b", true, false)],
            ),
            (
                &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "other:x", ">"],
                vec![k("other:x", true, false)],
            ),
            (&["GETSET", "w:1", "v"], vec![k("w:1", true, true)]),
            (&["GETDEL", "w:1"], vec![k("w:1", true, true)]),
            (&["SET", "w:1", "v"], vec![k("w:1", false, true)]),
            (&["SET", "w:1", "v", "GET"], vec![k("w:1", true, true)]),
            (
                &["EXISTS", "a", "b"],
                vec![k("a", false, false), k("b", false, false)],
            ),
            (
                &["MSET", "a", "1", "b", "2"],
                vec![k("a", false, true), k("b", false, true)],
            ),
            (
                &["SORT", "l", "BY", "x", "STORE", "d"],
                vec![k("l", true, false), k("d", false, true)],
            ),
            (
                &["BITFIELD", "b", "GET", "u8", "0"],
                vec![k("b", true, false)],
            ),
            (
                &["BITFIELD", "b", "SET", "u8", "0", "1"],
                vec![k("b", true, true)],
            ),
            (
                &["EVAL", "return 1", "2", "a", "b", "x"],
                vec![k("a", true, true), k("b", true, true)],
            ),
            // Arguments that do not fit: no keys, and the command refuses them itself.
            (&["ZUNIONSTORE", "d", "5", "z"], vec![]),
            (&["ZUNIONSTORE", "d", "0", "z"], vec![]),
        ];
        for (args, want) in cases {
            assert_eq!(&refs(args), want, "{args:?}");
        }
    }

    #[test]
    fn table_parses_and_knows_get() {
        let t = super::global();
        assert!(t.len_top_level() > 200);
        let get = t.get("get").expect("get");
        assert_eq!(get.arity, 2);
        assert!(get.readonly_flag && !get.write);
        assert!(t.get("object|encoding").is_some());
        assert!(t.get("object").map(|o| o.has_subcommands).unwrap_or(false));
    }
}
