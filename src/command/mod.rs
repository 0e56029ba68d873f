//! Commands: the table that says what each one is, the one place that dispatches on a name,
//! and one file per family that parses arguments and applies them to the state.
//!
//! Every command runs as `fn(&mut Ctx, &[Vec<u8>]) -> Reply`. A write that changed the data set
//! sets `ctx.dirty`; when the command as sent would not replay to the same state (a relative
//! expiry, a random pick) it also sets `ctx.rewrite` to the deterministic form that is logged.

pub mod acl;
pub mod args;
pub mod bitmaps;
pub mod functions;
pub mod geo;
pub mod hash_ttl;
pub mod hashes;
pub mod hll;
pub mod introspect;
pub mod json;
pub mod keys;
pub mod lists;
pub mod longdouble;
pub mod server;
pub mod sets;
pub mod sort;
pub mod stream_groups;
pub mod streams;
pub mod strings;
pub mod table;
pub mod typed;
pub mod zsets;

use crate::reply::{errors, Reply};
use crate::state::Db;
pub use table::{CommandInfo, CommandTable};

/// A small deterministic generator: the executor seeds it, the state machine never does.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// What a command runs against.
pub struct Ctx<'a> {
    pub db: &'a mut Db,
    /// The time this command runs at: the record's timestamp, Unix milliseconds.
    pub now_ms: u64,
    pub rng: &'a mut Rng,
    /// Set by a write that changed the data set; only such commands are logged.
    pub dirty: bool,
    /// The deterministic form(s) to log instead of the command as sent.
    pub rewrite: Option<Vec<Vec<Vec<u8>>>>,
    /// True while replaying the log (no side effects beyond the state).
    pub replaying: bool,
    /// The ACL user a token stands for (`None`: the default user).
    pub user: Option<std::sync::Arc<str>>,
}

impl<'a> Ctx<'a> {
    pub fn new(db: &'a mut Db, now_ms: u64, rng: &'a mut Rng) -> Ctx<'a> {
        Ctx {
            db,
            now_ms,
            rng,
            dirty: false,
            rewrite: None,
            replaying: false,
            user: None,
        }
    }

    /// Replaces `key` with `value` (no expiry), or deletes it when `value` is None: what every
    /// STORE form does with its destination. Marks the change when there was one.
    pub fn store_or_delete(&mut self, key: &[u8], value: Option<crate::state::Value>) {
        let existed = self.db.get_mut(key, self.now_ms).is_some();
        self.db.remove(key);
        let stored = value.is_some();
        if let Some(v) = value {
            self.db.insert(key, v, None, self.now_ms);
        }
        if stored || existed {
            self.dirty = true;
        }
    }

    /// Logs `cmd` in place of the command as sent (adds to the list: one command may need
    /// several deterministic commands).
    pub fn log_as(&mut self, cmd: Vec<Vec<u8>>) {
        self.rewrite.get_or_insert_with(Vec::new).push(cmd);
    }
}

/// Runs one command whose name, arity and permissions were already checked. The single
/// dispatch on command names.
pub fn execute(ctx: &mut Ctx, info: &CommandInfo, args: &[Vec<u8>]) -> Reply {
    use hashes as h;
    use keys as k;
    use server as sv;
    use strings as s;
    use zsets::{Direction as Dir, RangeType as Rt, SetOp as Op};
    match info.name.as_str() {
        // strings
        "get" => s::get(ctx, args),
        "set" => s::set(ctx, args),
        "setnx" => s::setnx(ctx, args),
        "setex" => s::setex(ctx, args, 1000),
        "psetex" => s::setex(ctx, args, 1),
        "getset" => s::getset(ctx, args),
        "getdel" => s::getdel(ctx, args),
        "getex" => s::getex(ctx, args),
        "mget" => s::mget(ctx, args),
        "mset" => s::mset(ctx, args),
        "msetnx" => s::msetnx(ctx, args),
        "append" => s::append(ctx, args),
        "strlen" => s::strlen(ctx, args),
        "incr" => s::incrby_const(ctx, args, 1),
        "decr" => s::incrby_const(ctx, args, -1),
        "incrby" => s::incrby(ctx, args, false),
        "decrby" => s::incrby(ctx, args, true),
        "incrbyfloat" => s::incrbyfloat(ctx, args),
        "getrange" | "substr" => s::getrange(ctx, args),
        "setrange" => s::setrange(ctx, args),
        "lcs" => s::lcs(ctx, args),
        // bitmaps
        "setbit" => bitmaps::setbit(ctx, args),
        "getbit" => bitmaps::getbit(ctx, args),
        "bitcount" => bitmaps::bitcount(ctx, args),
        "bitpos" => bitmaps::bitpos(ctx, args),
        "bitop" => bitmaps::bitop(ctx, args),
        "bitfield" => bitmaps::bitfield(ctx, args, false),
        "bitfield_ro" => bitmaps::bitfield(ctx, args, true),
        // geo
        "geoadd" => geo::geoadd(ctx, args),
        "geopos" => geo::geopos(ctx, args),
        "geodist" => geo::geodist(ctx, args),
        "geohash" => geo::geohash(ctx, args),
        "geosearch"
        | "geosearchstore"
        | "georadius"
        | "georadius_ro"
        | "georadiusbymember"
        | "georadiusbymember_ro" => geo::search(ctx, args, info.name.as_str()),
        // HyperLogLog
        "pfadd" => hll::pfadd(ctx, args),
        "pfcount" => hll::pfcount(ctx, args),
        "pfmerge" => hll::pfmerge(ctx, args),
        // generic keyspace
        "del" | "unlink" => k::del(ctx, args),
        "exists" => k::exists(ctx, args),
        "touch" => k::touch(ctx, args),
        "type" => k::type_(ctx, args),
        "expire" => k::expire(ctx, args, 1000, true),
        "pexpire" => k::expire(ctx, args, 1, true),
        "expireat" => k::expire(ctx, args, 1000, false),
        "pexpireat" => k::expire(ctx, args, 1, false),
        "ttl" => k::ttl(ctx, args, false, false),
        "pttl" => k::ttl(ctx, args, true, false),
        "expiretime" => k::ttl(ctx, args, false, true),
        "pexpiretime" => k::ttl(ctx, args, true, true),
        "persist" => k::persist(ctx, args),
        "rename" => k::rename(ctx, args, false),
        "renamenx" => k::rename(ctx, args, true),
        "copy" => k::copy(ctx, args),
        "dump" => k::dump(ctx, args),
        "restore" => k::restore(ctx, args),
        "move" => k::move_(ctx, args),
        "keys" => k::keys(ctx, args),
        "scan" => k::scan(ctx, args),
        "randomkey" => k::randomkey(ctx, args),
        "object|encoding" => k::object_encoding(ctx, args),
        "object|freq" => k::object_freq(ctx, args),
        "object|idletime" => k::object_idletime(ctx, args),
        "object|refcount" => k::object_refcount(ctx, args),
        "object|help" => k::object_help(ctx, args),
        // hashes
        "hset" | "hmset" => h::hset(ctx, args, info.name == "hmset"),
        "hsetnx" => h::hsetnx(ctx, args),
        "hget" => h::hget(ctx, args),
        "hmget" => h::hmget(ctx, args),
        "hdel" => h::hdel(ctx, args),
        "hgetdel" => h::hgetdel(ctx, args),
        "hexpire" => hash_ttl::hexpire(ctx, args, 1000, false, "hexpire"),
        "hpexpire" => hash_ttl::hexpire(ctx, args, 1, false, "hpexpire"),
        "hexpireat" => hash_ttl::hexpire(ctx, args, 1000, true, "hexpireat"),
        "hpexpireat" => hash_ttl::hexpire(ctx, args, 1, true, "hpexpireat"),
        "httl" => hash_ttl::httl(ctx, args, hash_ttl::TtlKind::Seconds),
        "hpttl" => hash_ttl::httl(ctx, args, hash_ttl::TtlKind::Millis),
        "hexpiretime" => hash_ttl::httl(ctx, args, hash_ttl::TtlKind::UnixSeconds),
        "hpexpiretime" => hash_ttl::httl(ctx, args, hash_ttl::TtlKind::UnixMillis),
        "hpersist" => hash_ttl::hpersist(ctx, args),
        "hgetex" => hash_ttl::hgetex(ctx, args),
        "hsetex" => hash_ttl::hsetex(ctx, args),
        "hlen" => h::hlen(ctx, args),
        "hstrlen" => h::hstrlen(ctx, args),
        "hexists" => h::hexists(ctx, args),
        "hkeys" => h::hkeys(ctx, args),
        "hvals" => h::hvals(ctx, args),
        "hgetall" => h::hgetall(ctx, args),
        "hincrby" => h::hincrby(ctx, args),
        "hincrbyfloat" => h::hincrbyfloat(ctx, args),
        "hrandfield" => h::hrandfield(ctx, args),
        "hscan" => h::hscan(ctx, args),
        // lists
        "lpush" => lists::push(ctx, args, true, false),
        "rpush" => lists::push(ctx, args, false, false),
        "lpushx" => lists::push(ctx, args, true, true),
        "rpushx" => lists::push(ctx, args, false, true),
        "lpop" => lists::pop(ctx, args, true),
        "rpop" => lists::pop(ctx, args, false),
        "llen" => lists::llen(ctx, args),
        "lrange" => lists::lrange(ctx, args),
        "lindex" => lists::lindex(ctx, args),
        "lset" => lists::lset(ctx, args),
        "linsert" => lists::linsert(ctx, args),
        "lrem" => lists::lrem(ctx, args),
        "ltrim" => lists::ltrim(ctx, args),
        "lpos" => lists::lpos(ctx, args),
        "lmove" => lists::lmove(ctx, args, None),
        "rpoplpush" => lists::lmove(ctx, args, Some((false, true))),
        "lmpop" => lists::lmpop(ctx, args),
        // sets
        "sadd" => sets::sadd(ctx, args),
        "srem" => sets::srem(ctx, args),
        "smembers" => sets::smembers(ctx, args),
        "sismember" => sets::sismember(ctx, args),
        "smismember" => sets::smismember(ctx, args),
        "scard" => sets::scard(ctx, args),
        "spop" => sets::spop(ctx, args),
        "srandmember" => sets::srandmember(ctx, args),
        "smove" => sets::smove(ctx, args),
        "sinter" => sets::sinter(ctx, args, false),
        "sinterstore" => sets::sinter(ctx, args, true),
        "sunion" => sets::sunion(ctx, args, false),
        "sunionstore" => sets::sunion(ctx, args, true),
        "sdiff" => sets::sdiff(ctx, args, false),
        "sdiffstore" => sets::sdiff(ctx, args, true),
        "sintercard" => sets::sintercard(ctx, args),
        "sscan" => sets::sscan(ctx, args),
        // sorted sets
        "zadd" => zsets::zadd(ctx, args, false),
        "zincrby" => zsets::zadd(ctx, args, true),
        "zrem" => zsets::zrem(ctx, args),
        "zcard" => zsets::zcard(ctx, args),
        "zscore" => zsets::zscore(ctx, args),
        "zmscore" => zsets::zmscore(ctx, args),
        "zrank" => zsets::zrank(ctx, args, false),
        "zrevrank" => zsets::zrank(ctx, args, true),
        "zrange" => zsets::zrange(ctx, args, 1, false, Rt::Auto, Dir::Auto),
        "zrangestore" => zsets::zrange(ctx, args, 2, true, Rt::Auto, Dir::Auto),
        "zrevrange" => zsets::zrange(ctx, args, 1, false, Rt::Rank, Dir::Reverse),
        "zrangebyscore" => zsets::zrange(ctx, args, 1, false, Rt::Score, Dir::Forward),
        "zrevrangebyscore" => zsets::zrange(ctx, args, 1, false, Rt::Score, Dir::Reverse),
        "zrangebylex" => zsets::zrange(ctx, args, 1, false, Rt::Lex, Dir::Forward),
        "zrevrangebylex" => zsets::zrange(ctx, args, 1, false, Rt::Lex, Dir::Reverse),
        "zcount" => zsets::zcount(ctx, args),
        "zlexcount" => zsets::zlexcount(ctx, args),
        "zremrangebyrank" => zsets::zremrange(ctx, args, Rt::Rank),
        "zremrangebyscore" => zsets::zremrange(ctx, args, Rt::Score),
        "zremrangebylex" => zsets::zremrange(ctx, args, Rt::Lex),
        "zpopmin" => zsets::zpop(ctx, args, true),
        "zpopmax" => zsets::zpop(ctx, args, false),
        "zmpop" => zsets::zmpop(ctx, args),
        "zrandmember" => zsets::zrandmember(ctx, args),
        "zscan" => zsets::zscan(ctx, args),
        "zunion" => zsets::zsetop(ctx, args, 1, Op::Union, false, false),
        "zinter" => zsets::zsetop(ctx, args, 1, Op::Inter, false, false),
        "zdiff" => zsets::zsetop(ctx, args, 1, Op::Diff, false, false),
        "zunionstore" => zsets::zsetop(ctx, args, 2, Op::Union, true, false),
        "zinterstore" => zsets::zsetop(ctx, args, 2, Op::Inter, true, false),
        "zdiffstore" => zsets::zsetop(ctx, args, 2, Op::Diff, true, false),
        "zintercard" => zsets::zsetop(ctx, args, 1, Op::Inter, false, true),
        "sort" => sort::sort(ctx, args, false),
        "sort_ro" => sort::sort(ctx, args, true),
        // server and connection
        "ping" => sv::ping(args),
        "echo" => Reply::Bulk(args[1].clone()),
        "dbsize" => Reply::Int(ctx.db.len() as i64),
        "flushdb" | "flushall" => sv::flush(ctx, args),
        "time" => sv::time(ctx),
        "lastsave" => Reply::Int((ctx.now_ms / 1000) as i64),
        // No replicas: every write is already as replicated as it will be (as a standalone
        // Redis answers).
        "wait" => match (args::int_arg(&args[1]), args::int_arg(&args[2])) {
            (Ok(_), Ok(t)) if t >= 0 => Reply::Int(0),
            (Ok(_), Ok(_)) => Reply::err("ERR timeout is negative"),
            (Err(e), _) | (_, Err(e)) => e,
        },
        "command|count" => Reply::Int(table::global().len_top_level() as i64),
        "function|load" => functions::load(ctx, args),
        "function|delete" => functions::delete(ctx, args),
        "function|flush" => functions::flush(ctx, args),
        "function|dump" => functions::dump(ctx),
        "function|restore" => functions::restore(ctx, args),
        "command" => introspect::command(ctx, args),
        "command|info" => introspect::command_info(ctx, args),
        "command|docs" => introspect::command_docs(ctx, args),
        "command|list" => introspect::command_list(ctx, args),
        "command|getkeys" => introspect::command_getkeys(ctx, args),
        "memory|usage" => introspect::memory_usage(ctx, args),
        // streams
        "xadd" => streams::xadd(ctx, args),
        "xlen" => streams::xlen(ctx, args),
        "xrange" => streams::xrange(ctx, args, false),
        "xrevrange" => streams::xrange(ctx, args, true),
        "xdel" => streams::xdel(ctx, args),
        "xtrim" => streams::xtrim(ctx, args),
        "xread" => streams::xread(ctx, args),
        "xsetid" => streams::xsetid(ctx, args),
        "xinfo|stream" => streams::xinfo_stream(ctx, args),
        "xinfo|groups" => stream_groups::xinfo_groups(ctx, args),
        "xinfo|consumers" => stream_groups::xinfo_consumers(ctx, args),
        "xgroup|create" => stream_groups::xgroup(ctx, args, "create"),
        "xgroup|setid" => stream_groups::xgroup(ctx, args, "setid"),
        "xgroup|destroy" => stream_groups::xgroup(ctx, args, "destroy"),
        "xgroup|createconsumer" => stream_groups::xgroup(ctx, args, "createconsumer"),
        "xgroup|delconsumer" => stream_groups::xgroup(ctx, args, "delconsumer"),
        "xreadgroup" => stream_groups::xreadgroup(ctx, args),
        "xack" => stream_groups::xack(ctx, args),
        "xackdel" => stream_groups::xackdel(ctx, args),
        "xdelex" => stream_groups::xdelex(ctx, args),
        // JSON documents
        "json.set" => json::set(ctx, args),
        "json.get" => json::get(ctx, args),
        "json.mget" => json::mget(ctx, args),
        "json.mset" => json::mset(ctx, args),
        "json.merge" => json::merge(ctx, args),
        "json.del" | "json.forget" => json::del(ctx, args),
        "json.type" => json::type_(ctx, args),
        "json.numincrby" => json::num_op(ctx, args, json::NumOp::Incr),
        "json.nummultby" => json::num_op(ctx, args, json::NumOp::Mult),
        "json.toggle" => json::toggle(ctx, args),
        "json.strappend" => json::strappend(ctx, args),
        "json.strlen" => json::strlen(ctx, args),
        "json.arrappend" => json::arrappend(ctx, args),
        "json.arrinsert" => json::arrinsert(ctx, args),
        "json.arrpop" => json::arrpop(ctx, args),
        "json.arrtrim" => json::arrtrim(ctx, args),
        "json.arrindex" => json::arrindex(ctx, args),
        "json.arrlen" => json::arrlen(ctx, args),
        "json.objkeys" => json::objkeys(ctx, args),
        "json.objlen" => json::objlen(ctx, args),
        "json.clear" => json::clear(ctx, args),
        "json.resp" => json::resp(ctx, args),
        "xpending" => stream_groups::xpending(ctx, args),
        "xclaim" => stream_groups::xclaim(ctx, args),
        "xautoclaim" => stream_groups::xautoclaim(ctx, args),
        "acl|setuser" => acl::setuser(ctx, args),
        "acl|deluser" => acl::deluser(ctx, args),
        "acl|getuser" => acl::getuser(ctx, args),
        "acl|users" => acl::users(ctx),
        "acl|list" => acl::list(ctx),
        "acl|whoami" => acl::whoami(ctx),
        "acl|cat" => acl::cat(args),
        "acl|resttoken" => acl::resttoken(ctx, args),
        _ => Reply::Error(format!(
            "ERR '{}' is known to Redis but not implemented by tidepool yet",
            info.name.replace('|', " ")
        )),
    }
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

/// Whether `args` has the arity `info` requires (negative arity: at least that many).
pub fn arity_ok(info: &CommandInfo, argc: usize) -> bool {
    let a = info.arity;
    if a >= 0 {
        argc == a as usize
    } else {
        argc >= (-a) as usize
    }
}

pub fn arity_error(info: &CommandInfo) -> Reply {
    Reply::Error(errors::wrong_arity(&info.name))
}
