//! The one way a command runs. Every caller goes through [`run_checked`]: a REST command, each
//! command of a pipeline, a transaction (through [`run_request`]), `redis.call` and
//! `redis.pcall` from Lua, and the RESP listener to come. It finds the command in the table,
//! refuses what REST cannot carry, checks arity, the token's rights (Read Only profile, ACL
//! commands, keys and channels), a read-only script's writes and the log's health, feeds the
//! monitors, bounds the reply, removes due hash fields, dispatches, and collects what the
//! command changed for the log. Only the wording of a refusal depends on where the command
//! came from, as in Redis.

use super::ctx::{Ctx, Limits, Origin, Perm, Replay};
use super::info::{CommandInfo, Log, Size};
use super::table::{self, Lookup};
use crate::config;
use crate::reply::{errors, Reply};
use crate::state::Db;

/// How a list of commands is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// One command, or a pipeline: each command is checked and run on its own.
    Each,
    /// A transaction: checked as a whole first (any bad command discards all), then run
    /// atomically.
    Multi,
}

/// Runs the commands of one request: a transaction is checked whole first and discarded
/// whole (the `EXECABORT` text) when any command would be refused. The replies of one request
/// together stay under the reply size limit: a reply that would cross it is replaced by an
/// error (its command still ran, writes included).
pub fn run_request(
    ctx: &mut Ctx,
    mut cmds: Vec<Vec<Vec<u8>>>,
    mode: ExecMode,
) -> Result<Vec<Reply>, String> {
    if mode == ExecMode::Multi {
        for args in &cmds {
            match check(args, ctx.perm, ctx.origin) {
                Err(Reply::Error(e)) => {
                    return Err(format!("EXECABORT Transaction discarded because of: {e}"))
                }
                // A command over one of the hosted service's limits discards the transaction
                // whole, with the limit's own text (the spec's rule).
                Ok(info) => {
                    if let Some(Reply::Error(e)) = over_limits(ctx, info, args) {
                        return Err(e);
                    }
                }
                Err(_) => {}
            }
        }
        if ctx
            .limits
            .commands_left
            .is_some_and(|left| left < cmds.len() as u64)
        {
            return Err(errors::DAILY_LIMIT.into());
        }
    }
    let mut replies = Vec::with_capacity(cmds.len());
    let mut reply_bytes = 0usize;
    // A pipeline's keys are brought into the cache ahead of their turn, as replay's are
    // (`machine::apply_commands`): each command's `prefetch_key`, its slot
    // `PREFETCH_SLOTS_AHEAD` commands before its turn and its node `PREFETCH_NODES_AHEAD`
    // before. A hint only: an argument that is no key costs a fetch and changes nothing. One command alone has nothing to overlap with,
    // and a keyspace of fewer than `PIPELINE_PREFETCH_KEYS_MIN` keys stays in the cache, where
    // the fetches' own work (each key hashed twice more) is all they would add.
    let prefetch = cmds.len() > 1 && ctx.db.len() >= config::PIPELINE_PREFETCH_KEYS_MIN;
    if prefetch {
        for i in 0..config::PREFETCH_SLOTS_AHEAD {
            if let Some(k) = key_ahead(&cmds, i) {
                ctx.db.prefetch_slot(k);
            }
        }
        for i in 0..config::PREFETCH_NODES_AHEAD {
            if let Some(k) = key_ahead(&cmds, i) {
                ctx.db.prefetch_node(k);
            }
        }
    }
    for i in 0..cmds.len() {
        if prefetch {
            if let Some(k) = key_ahead(&cmds, i + config::PREFETCH_SLOTS_AHEAD) {
                ctx.db.prefetch_slot(k);
            }
            if let Some(k) = key_ahead(&cmds, i + config::PREFETCH_NODES_AHEAD) {
                ctx.db.prefetch_node(k);
            }
        }
        // Taken out whole (the run may keep it as the logged form), the ones after it left
        // in place for the fetches ahead.
        let args = std::mem::take(&mut cmds[i]);
        let reply = run_checked(ctx, args);
        let size = reply.wire_bytes();
        if reply_bytes + size > config::REPLY_BYTES_MAX {
            replies.push(Reply::err(errors::reply_too_large()));
        } else {
            reply_bytes += size;
            replies.push(reply);
        }
    }
    Ok(replies)
}

/// What a run of commands (replay's, a pipeline's) fetches ahead for a command: its second
/// argument, where nearly every command names its key, unless longer than
/// `PREFETCH_KEY_BYTES_MAX` (hashing a long one, an `EVAL`'s script say, would cost more than
/// the miss it hides).
pub fn prefetch_key(args: &[Vec<u8>]) -> Option<&[u8]> {
    args.get(1)
        .map(Vec::as_slice)
        .filter(|k| k.len() <= config::PREFETCH_KEY_BYTES_MAX)
}

/// The key command `i` of a request fetches ahead (`prefetch_key`).
fn key_ahead(cmds: &[Vec<Vec<u8>>], i: usize) -> Option<&[u8]> {
    cmds.get(i).and_then(|args| prefetch_key(args))
}

/// Checks and runs one command. What it changed is added to `ctx.logged` in deterministic
/// form (after the HDELs of hash fields whose time passed).
pub fn run_checked(ctx: &mut Ctx, args: Vec<Vec<u8>>) -> Reply {
    let info = match check(&args, ctx.perm, ctx.origin) {
        Ok(i) => i,
        Err(r) => return r,
    };
    if let Some(refusal) = over_limits(ctx, info, &args) {
        return refusal;
    }
    let top_level = ctx.origin.top_level();
    if top_level {
        if let Some(left) = &mut ctx.limits.commands_left {
            if *left == 0 {
                return Reply::err(errors::DAILY_LIMIT);
            }
            *left -= 1;
        }
    }
    // A read that may write a cache (PFCOUNT) is not refused for the log's sake.
    if info.log.writes() && !info.readonly_flag {
        if let Some(refusal) = ctx.server.writes_refused() {
            return Reply::Error(refusal);
        }
    }
    // Redis's `maxmemory` with `noeviction`: a command that may grow memory is refused while
    // the server holds more than it.
    if ctx.limits.memory_full && info.denyoom {
        return Reply::err(errors::OOM);
    }
    // The database's data-size quota, as the hosted service's: while the database holds as
    // much as its limit or more, a write that stores a value is refused; reads and deletes
    // run. (A write may take it past the limit by what it adds; the next one is refused.)
    if info.write
        && ctx
            .limits
            .data_bytes_max
            .is_some_and(|max| ctx.db.data_bytes() >= max)
        && info.key_refs_with(&args, true).iter().any(|r| r.stores)
    {
        return Reply::err(errors::DB_CAPACITY);
    }
    let client = match ctx.origin {
        Origin::Request | Origin::Connection => ctx.client,
        Origin::Script { .. } => "lua",
    };
    if info.unmonitored {
        ctx.server.unmonitored_command_starts(info.id, top_level);
    } else {
        ctx.server.command_starts(client, &args, info.id, top_level);
    }
    if !info.write && read_bytes(ctx.db, info, &args, ctx.now_ms) > config::REPLY_BYTES_MAX {
        return Reply::err(errors::reply_too_large());
    }
    hdel_expired_fields(ctx, info, &args);
    ctx.dirty = false;
    ctx.rewrite = None;
    let guard = if info.write {
        SizeGuard::before(ctx, info, &args)
    } else {
        None
    };
    let reply = table::run(ctx, info, &args);
    // The row says how the command's effect is logged; a handler that logs otherwise is a
    // defect of its row, caught by the tests.
    debug_assert!(
        !ctx.dirty || info.log != Log::Never,
        "{} changed the data, but its row says it is never logged",
        info.name
    );
    debug_assert!(
        ctx.rewrite.is_none() || matches!(info.log, Log::Rewritten | Log::Effects),
        "{} logged a form of its own, but its row says it is logged as sent",
        info.name
    );
    if info.write {
        // What the command wrote is counted into the database's data size: most writes name
        // one key, first, where the table says so without a search.
        if info.first_key == 1 && info.last_key == 1 && !info.movable_keys {
            if let Some(k) = args.get(1) {
                ctx.db.refresh(k);
            }
        } else {
            for r in info.key_refs_with(&args, true) {
                if r.write {
                    ctx.db.refresh(r.key);
                }
            }
        }
    }
    if let Some(refusal) = guard.and_then(|g| g.after(ctx)) {
        return refusal;
    }
    if ctx.dirty {
        match ctx.rewrite.take() {
            Some(rw) => ctx.logged.extend(rw),
            None => ctx.logged.push(args),
        }
    }
    reply
}

impl Ctx<'_> {
    /// Runs Lua code (`f`) whose `redis.call` goes through [`run_checked`] as a script's
    /// command: under the same token, at the same time, monitored as `lua`. What the calls
    /// change becomes this command's logged form (scripts are logged by their effects).
    pub fn run_lua<R>(&mut self, f: impl FnOnce(&mut crate::lua::Call) -> R) -> R {
        let mut logged = Vec::new();
        let limits = Limits {
            // A script's own calls are not counted against the daily limit: the request
            // that runs the script was.
            commands_left: None,
            ..self.limits
        };
        let out = {
            let mut call = |argv: Vec<Vec<u8>>, read_only: bool| {
                let mut inner = Ctx::new(
                    &mut *self.db,
                    self.now_ms,
                    &mut *self.rng,
                    self.perm,
                    self.client,
                    &mut *self.server,
                    None,
                    &mut logged,
                );
                inner.origin = Origin::Script { read_only };
                inner.limits = limits;
                let before = inner.logged.len();
                let reply = run_checked(&mut inner, argv);
                if inner.logged.len() != before {
                    inner.server.script_wrote();
                }
                reply
            };
            f(&mut call)
        };
        if !logged.is_empty() {
            self.dirty = true;
            self.rewrite.get_or_insert_with(Vec::new).extend(logged);
        }
        out
    }
}

/// The hosted service's limits that a command's arguments can pass (`--max-key-bytes`,
/// `--max-value-bytes`): the refusal, in the hosted service's words, or None.
fn over_limits(ctx: &Ctx, info: &CommandInfo, args: &[Vec<u8>]) -> Option<Reply> {
    if ctx.limits.key_bytes_max.is_none() && ctx.limits.value_bytes_max.is_none() {
        return None;
    }
    let refs = info.key_refs_with(args, true);
    if let Some(max) = ctx.limits.key_bytes_max {
        // Every key the command stores a value at, destinations found by the key
        // specifications included (SORT ... STORE, GEORADIUS ... STORE). A key that exists
        // from before a lower limit can still be read and deleted.
        let long = refs
            .iter()
            .filter(|r| r.stores)
            .map(|r| r.key.len())
            .max()
            .unwrap_or(0);
        if long > max {
            return Some(Reply::Error(format!(
                "ERR max key size exceeded. Limit: {max} bytes, Actual: {long} bytes"
            )));
        }
    }
    let max = ctx.limits.value_bytes_max?;
    if !info.write {
        return None;
    }
    let keys: usize = refs.iter().map(|r| r.key.len()).sum();
    let all: usize = args.iter().skip(1).map(Vec::len).sum();
    let mut stored = all.saturating_sub(keys);
    // A string that grows in place: what it holds already counts.
    if let [_, key, rest @ ..] = args {
        let held = || match ctx.db.get(key, ctx.now_ms).map(|e| &e.value) {
            Some(crate::state::Value::Str(s)) => s.len(),
            _ => 0,
        };
        match info.size {
            Size::Appends => stored = held() + rest.first().map_or(0, Vec::len),
            Size::Range => {
                let offset = rest
                    .first()
                    .and_then(|o| std::str::from_utf8(o).ok()?.parse::<usize>().ok())
                    .unwrap_or(0);
                let len = rest.get(1).map_or(0, Vec::len);
                stored = held().max(offset.saturating_add(len));
            }
            _ => {}
        }
    }
    (stored > max).then(|| Reply::err(errors::RECORD_SIZE))
}

/// A write that may take a value past `--max-value-bytes`, or the database's data past its
/// quota or the server's memory past `--max-memory`: what the keys it writes held before it
/// ran, to check what it stored after and put the keys back if it went past a limit. Taken
/// only when a cheap bound (what the command reads, its arguments, what an offset may add)
/// cannot rule that out, so most writes pay nothing; its cost, a copy of the keys written,
/// falls on writes near a limit.
struct SizeGuard {
    /// The keys the command writes, with their entries before it ran.
    before: Vec<(Vec<u8>, Option<crate::state::Entry>)>,
    /// The keys it stores values at, with their values' bytes before.
    stored: Vec<(Vec<u8>, u64)>,
    value_max: Option<u64>,
    /// The database's data size before, and the level it may not grow past, with the refusal.
    data_before: u64,
    cap: Option<(u64, &'static str)>,
}

impl SizeGuard {
    fn before(ctx: &Ctx, info: &CommandInfo, args: &[Vec<u8>]) -> Option<SizeGuard> {
        let value_max = ctx.limits.value_bytes_max.map(|m| m as u64);
        // The lower of the data quota and what memory has left, with its refusal.
        let cap = [
            ctx.limits.data_bytes_max.map(|c| (c, errors::DB_CAPACITY)),
            ctx.limits.memory_cap_data_bytes.map(|c| (c, errors::OOM)),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(c, _)| *c);
        if value_max.is_none() && cap.is_none() {
            return None;
        }
        let refs = info.key_refs_with(args, true);
        // What the command can add at most: its arguments (each may become an element, with a
        // score and an overhead), what it reads (every key it reads but stores nothing at:
        // sources, and keys it moves from, as LMOVE), and the zeros an offset past the end
        // creates (SETBIT, SETRANGE, BITFIELD).
        let read: u64 = refs
            .iter()
            .filter(|r| r.read && !refs.iter().any(|s| s.stores && s.key == r.key))
            .map(|r| ctx.db.value_bytes_of(r.key))
            .fold(0u64, u64::saturating_add);
        let arguments: u64 = args
            .iter()
            .skip(1)
            .map(|a| a.len() as u64 + 16)
            .fold(0u64, u64::saturating_add);
        let grows = read
            .saturating_add(arguments)
            .saturating_add(offset_growth(info, args))
            .saturating_add(64);
        // What the row says no bound holds for is checked after, whatever the bound says.
        let unbounded = info.size == Size::After;
        let stored: Vec<(Vec<u8>, u64)> = refs
            .iter()
            .filter(|r| r.stores)
            .map(|r| (r.key.to_vec(), ctx.db.value_bytes_of(r.key)))
            .collect();
        let data_before = ctx.db.data_bytes();
        let risk = value_max
            .is_some_and(|max| stored.iter().any(|(_, b)| b.saturating_add(grows) > max))
            || cap.is_some_and(|(c, _)| data_before.saturating_add(grows) > c);
        if !(unbounded || risk) || stored.is_empty() {
            return None;
        }
        let mut seen: Vec<&[u8]> = Vec::new();
        let mut before = Vec::new();
        for r in refs.iter().filter(|r| r.write) {
            if !seen.contains(&r.key) {
                seen.push(r.key);
                before.push((r.key.to_vec(), ctx.db.raw().get(r.key).cloned()));
            }
        }
        Some(SizeGuard {
            before,
            stored,
            value_max,
            data_before,
            cap,
        })
    }

    /// After the command: None when the values it stored stayed within the limits (or did
    /// not grow), else the refusal, with every key it wrote put back as it was (nothing of it
    /// is logged).
    fn after(self, ctx: &mut Ctx) -> Option<Reply> {
        let value_over = self.value_max.is_some_and(|max| {
            self.stored.iter().any(|(k, before)| {
                let now = ctx.db.value_bytes_of(k);
                now > *before && now > max
            })
        });
        let data_now = ctx.db.data_bytes();
        let cap_over = self
            .cap
            .filter(|(c, _)| data_now > self.data_before && data_now > *c)
            .map(|(_, why)| why);
        if !value_over && cap_over.is_none() {
            return None;
        }
        for (k, old) in self.before {
            ctx.db.remove(&k);
            if let Some(e) = old {
                let (access, expire) = (e.access_ms(), e.expire_at_ms());
                ctx.db.insert(&k, e.value, expire, access);
                ctx.db.index_field_ttls(&k);
            }
        }
        ctx.dirty = false;
        ctx.rewrite = None;
        Some(Reply::err(if value_over {
            errors::RECORD_SIZE
        } else {
            cap_over.unwrap_or(errors::OOM)
        }))
    }
}

/// The bytes an offset past a string's end may add: SETBIT's, SETRANGE's and BITFIELD's.
fn offset_growth(info: &CommandInfo, args: &[Vec<u8>]) -> u64 {
    let num = |a: &[u8]| -> u64 {
        std::str::from_utf8(a)
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match info.size {
        Size::BitOffset => args.get(2).map_or(0, |a| num(a) / 8 + 1),
        Size::Range => args.get(2).map_or(0, |a| num(a)),
        Size::BitField => {
            // SET and INCRBY write `width` bits at `offset` (`#n`: n widths).
            let mut most = 0u64;
            let mut i = 2;
            while i < args.len() {
                match args[i].to_ascii_lowercase().as_slice() {
                    b"get" => i += 3,
                    b"overflow" => i += 2,
                    b"set" | b"incrby" if i + 2 < args.len() => {
                        let width = num(args[i + 1].get(1..).unwrap_or_default());
                        let at = &args[i + 2];
                        let offset = match at.strip_prefix(b"#") {
                            Some(n) => num(n).saturating_mul(width),
                            None => num(at),
                        };
                        most = most.max(offset.saturating_add(width) / 8 + 1);
                        i += 4;
                    }
                    _ => i += 1,
                }
            }
            most
        }
        _ => 0,
    }
}

/// Finds `args` in the table and checks it for `perm` coming from `origin`.
pub fn check(args: &[Vec<u8>], perm: &Perm, origin: Origin) -> Result<&'static CommandInfo, Reply> {
    let script = matches!(origin, Origin::Script { .. });
    let info = match table::global().lookup(args) {
        Lookup::Found(i) => i,
        _ if script => return Err(Reply::err("ERR Unknown Redis command called from script")),
        Lookup::Unknown => return Err(unknown_command(args)),
        Lookup::UnknownSubcommand(c) => return Err(unknown_subcommand(c, args)),
    };
    if script {
        if !info.arity_ok(args.len()) {
            return Err(Reply::err(
                "ERR Wrong number of args calling Redis command from script",
            ));
        }
        if info.noscript {
            return Err(Reply::err(
                "ERR This Redis command is not allowed from script",
            ));
        }
        if let Some(why) = info.script_refusal(args) {
            return Err(Reply::Error(why));
        }
        if info.write && origin == (Origin::Script { read_only: true }) {
            return Err(Reply::err(
                "ERR Write commands are not allowed from read-only scripts.",
            ));
        }
    } else {
        let refusal = match origin {
            Origin::Connection => info.connection_refusal(args),
            _ => info.rest_refusal(args),
        };
        if let Some(why) = refusal {
            return Err(Reply::Error(why));
        }
        if !info.arity_ok(args.len()) {
            return Err(arity_error(info));
        }
    }
    match (permitted(info, args, perm), origin) {
        (Ok(()), _) => Ok(info),
        // The Read Only token's refusal reads the same everywhere.
        (Err(Denied::Command), _) if matches!(perm, Perm::ReadOnly) => Err(noperm_command(info)),
        (Err(d), Origin::Request | Origin::Connection) => Err(match d {
            Denied::Command => noperm_command(info),
            Denied::Key => Reply::err(
                "NOPERM this user has no permissions to access one of the keys used as arguments",
            ),
            Denied::Channel => Reply::err(
                "NOPERM this user has no permissions to access one of the channels used as arguments",
            ),
        }),
        // Inside a script Redis words an ACL refusal its own way (script.c).
        (Err(d), Origin::Script { .. }) => Err(Reply::Error(format!(
            "ERR The user executing the script {}",
            match d {
                Denied::Command => "can't run this command or subcommand",
                Denied::Key =>
                    "can't access at least one of the keys mentioned in the command arguments",
                Denied::Channel => "can't publish to the channel mentioned in the command",
            }
        ))),
    }
}

/// A RESP connection's own command (CLIENT, WATCH, SUBSCRIBE, MONITOR, ...), which the
/// connection runs itself: found, of the right arity, and allowed to the token with its keys
/// and channels, as [`check`] holds every other command; only the door's refusal is not
/// asked.
pub fn check_connection(args: &[Vec<u8>], perm: &Perm) -> Result<(), Reply> {
    let info = match table::global().lookup(args) {
        Lookup::Found(i) => i,
        Lookup::Unknown => return Err(unknown_command(args)),
        Lookup::UnknownSubcommand(c) => return Err(unknown_subcommand(c, args)),
    };
    if !info.arity_ok(args.len()) {
        return Err(arity_error(info));
    }
    let denied = match permitted(info, args, perm) {
        Err(d) => Some(d),
        Ok(()) => match (perm, info.name.as_str()) {
            (Perm::User(_, u), "subscribe" | "ssubscribe" | "psubscribe") => {
                let pattern = info.name == "psubscribe";
                args[1..]
                    .iter()
                    .any(|c| !u.channel_allowed(c, pattern))
                    .then_some(Denied::Channel)
            }
            _ => None,
        },
    };
    match denied {
        None => Ok(()),
        Some(Denied::Command) => Err(noperm_command(info)),
        Some(Denied::Key) => Err(Reply::err(
            "NOPERM this user has no permissions to access one of the keys used as arguments",
        )),
        Some(Denied::Channel) => Err(Reply::err(
            "NOPERM this user has no permissions to access one of the channels used as arguments",
        )),
    }
}

fn noperm_command(info: &CommandInfo) -> Reply {
    Reply::Error(format!(
        "NOPERM this user has no permissions to run the '{}' command or its subcommand",
        info.name
    ))
}

/// What a token may not touch.
enum Denied {
    Command,
    Key,
    Channel,
}

/// Whether the token may run this command on these keys and channels.
fn permitted(info: &CommandInfo, args: &[Vec<u8>], perm: &Perm) -> Result<(), Denied> {
    match perm {
        Perm::Full => Ok(()),
        Perm::ReadOnly if info.read_only_token => Ok(()),
        Perm::ReadOnly => Err(Denied::Command),
        Perm::User(_, u) => {
            if !u.allows(&info.name, &info.categories) {
                return Err(Denied::Command);
            }
            if info
                .key_refs(args)
                .iter()
                .any(|k| !u.key_allowed(k.key, k.read, k.write))
            {
                return Err(Denied::Key);
            }
            if info.publishes && !u.channel_allowed(&args[1], false) {
                return Err(Denied::Channel);
            }
            Ok(())
        }
    }
}

/// The bytes of the string values a read names, counting a key each time it is named:
/// `MGET big big big ...` would copy the value once per name into its reply, so it is
/// refused before it runs when the copies would pass the reply size limit.
fn read_bytes(db: &Db, info: &CommandInfo, args: &[Vec<u8>], ts: u64) -> usize {
    // A command of one key copies its value once at most: the check after it bounds
    // that, and GET and its like pay nothing here.
    if args.len() < 3 {
        return 0;
    }
    let keys = info.keys(args);
    if keys.len() < 2 {
        return 0;
    }
    keys.iter()
        .map(|k| match db.get(k, ts).map(|e| &e.value) {
            Some(crate::state::Value::Str(s)) => s.len(),
            _ => 0,
        })
        .sum()
}

/// Hash fields whose time has passed, in the keys a command names, go before the command by a
/// logged HDEL, so the command (a read too) sees them gone and replay removes them at the same
/// point.
fn hdel_expired_fields(ctx: &mut Ctx, info: &CommandInfo, args: &[Vec<u8>]) {
    if !ctx.db.has_field_ttls() {
        return;
    }
    for key in info.keys(args) {
        let fields = ctx.db.expired_fields_of(key, ctx.now_ms);
        if !fields.is_empty() {
            ctx.db.remove_fields(key, &fields);
            ctx.logged.push(hdel(key, fields));
        }
    }
}

/// `HDEL key field ...`: how a field whose time passed leaves the log.
pub fn hdel(key: &[u8], fields: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut cmd = Vec::with_capacity(fields.len() + 2);
    cmd.push(b"HDEL".to_vec());
    cmd.push(key.to_vec());
    cmd.extend(fields);
    cmd
}

/// The error Redis gives for a command it does not know.
pub fn unknown_command(args: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(args.first().map(|a| a.as_slice()).unwrap_or(b""));
    let mut msg = format!(
        "ERR unknown command '{}', with args beginning with: ",
        truncate(&name, 128)
    );
    for a in args.iter().skip(1) {
        if msg.len() > 256 {
            break;
        }
        msg.push_str(&format!(
            "'{}' ",
            truncate(&String::from_utf8_lossy(a), 128)
        ));
    }
    Reply::Error(msg)
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Whether a logged command is one the live path could have run, as replay needs it: a command
/// of the table with an arity it allows. A record holding one that is not cannot come from a
/// server (a faulty disk, a bad copy, a hand-made file): start-up and `tidepool-log verify`
/// refuse it, and no handler ever sees it.
pub fn replayable(args: &[Vec<u8>]) -> Result<&'static CommandInfo, String> {
    let name = || {
        String::from_utf8_lossy(args.first().map_or(&b""[..], |a| a.as_slice()))
            .chars()
            .take(64)
            .collect::<String>()
    };
    let info = match table::global().lookup(args) {
        Lookup::Found(i) => i,
        _ => {
            return Err(format!(
                "the logged command '{}' is not a command tidepool runs",
                name()
            ))
        }
    };
    if !info.arity_ok(args.len()) {
        return Err(format!(
            "the logged command '{}' has {} arguments, which it never takes",
            info.name,
            args.len().saturating_sub(1)
        ));
    }
    Ok(info)
}

/// Redis's refusal of a subcommand its container does not have.
pub fn unknown_subcommand(container: &CommandInfo, args: &[Vec<u8>]) -> Reply {
    Reply::Error(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(args.get(1).map(|a| a.as_slice()).unwrap_or_default()),
        container.name.to_ascii_uppercase()
    ))
}

pub fn arity_error(info: &CommandInfo) -> Reply {
    Reply::Error(errors::wrong_arity(&info.name))
}

/// Applies one logged command during replay: it was checked when it ran, and it runs no Lua
/// (scripts are logged by their effects). An error here means the log holds a command that
/// changed nothing, which a correct log never does. The log tool also reads replayed state
/// through it (`tidepool-log history --values`).
pub fn replay(db: &mut Db, rng: &mut crate::rng::Rng, ts: u64, args: &[Vec<u8>]) -> Reply {
    // What the live path checks before a command runs, and every handler relies on: a record
    // that fails it never came from a server (start-up refuses it before this; see
    // `replayable`), and must not reach a handler.
    match replayable(args) {
        Ok(info) => replay_checked(db, rng, ts, info, args),
        Err(why) => Reply::Error(format!("ERR {why}")),
    }
}

/// [`replay`] for a command `replayable` has already found (`info`), as recovery applies a
/// record it has checked whole.
pub fn replay_checked(
    db: &mut Db,
    rng: &mut crate::rng::Rng,
    ts: u64,
    info: &CommandInfo,
    args: &[Vec<u8>],
) -> Reply {
    let mut server = Replay;
    let mut logged = Vec::new();
    let ctx = &mut Ctx::new(db, ts, rng, &Perm::Full, "", &mut server, None, &mut logged);
    ctx.replaying = true;
    table::run(ctx, info, args)
}
