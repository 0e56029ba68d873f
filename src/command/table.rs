//! Redis's own command table (`redis-7.0-commands.json`, copied from the reference): arity,
//! flags and ACL categories. Arity checks and read-only classification come from here rather
//! than from hand-kept lists.

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::OnceLock;

const REDIS_7_0: &str = include_str!("redis-7.0-commands.json");

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
}

impl CommandInfo {
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
    if speed == "fast" {
        flags.push("fast".into());
    }
    CommandInfo {
        name: name.into(),
        arity,
        write,
        readonly_flag: !write,
        blocking: false,
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
            },
        );
        CommandTable { map, top_level }
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
