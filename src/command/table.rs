//! The command table: one row per command tidepool runs or knows, and the only place that
//! names commands. A row gives the handler and what the pipeline, ACL, the limits and the log
//! need beyond Redis's own table entry (arity, flags, key specifications, ACL categories),
//! which `info` joins to it; a command newer than Redis 7.0's table gives its entry here too
//! (`Meta`). A new command is its handler plus one row.
//!
//! The defaults, so that most rows are a name and a handler: logged as sent when the table
//! flags the command `write` and it changed the data, carried by REST, the Read Only token's
//! profile (`@read` minus `@dangerous`), its arguments bounding what it may store.

use super::ctx::{Ctx, SnapshotAsk};
use super::info::Log::{AsSent, Effects, Rewritten};
use super::info::Size::{After, Appends, BitField, BitOffset, Range};
pub use super::info::{CommandInfo, CommandTable, KeyRef, Lookup};
use super::info::{Meta, Rest, Row};
use super::zsets::{Direction as Dir, RangeType as Rt, SetOp as Op};
use super::{
    acl, bitmaps, blocking, functions, geo, hash_ttl, hashes, hll, introspect, json, keys, lists,
    scripting, server, sets, sort, stream_groups, streams, strings, zsets,
};
use crate::lua::Interrupt;
use crate::reply::Reply;
use std::sync::OnceLock;

/// The table, built once.
pub fn global() -> &'static CommandTable {
    static TABLE: OnceLock<CommandTable> = OnceLock::new();
    TABLE.get_or_init(|| CommandTable::build(rows()))
}

/// A command newer than Redis 7.0's table, as Redis 8 (or RedisJSON) lists it: one key at
/// position 1 unless `keys` says otherwise; `key_flags` empty for the defaults (`RW ACCESS
/// UPDATE` for a write, `RO ACCESS` for a read).
/// The hash-field expiry commands of Redis 7.4: a write of the fields' expiry, or a read of it.
const fn hash_ttl(arity: i32, write: bool, summary: &'static str) -> Meta {
    let key_flags: &'static [&'static str] = if write { &["RW", "UPDATE"] } else { &[] };
    newer(arity, write, "hash", key_flags, summary)
}

const fn newer(
    arity: i32,
    write: bool,
    group: &'static str,
    key_flags: &'static [&'static str],
    summary: &'static str,
) -> Meta {
    Meta::Newer {
        arity,
        write,
        group,
        keys: (1, 1),
        key_flags,
        denyoom: false,
        summary,
    }
}

/// RedisJSON's commands, with the module's table entries: a read, or a write whose size is
/// measured after it runs (a path may copy a value into every match).
fn json_row(
    name: &'static str,
    run: Handler,
    arity: i32,
    write: bool,
    summary: &'static str,
) -> Row {
    let row = Row::new(name, run).meta(newer(arity, write, "json", &[], summary));
    if write {
        row.size(After)
    } else {
        row
    }
}

use super::info::Handler;

/// What a Redis command that REST cannot carry needs instead.
const TRANSACTION: &str = "send the commands of a transaction together to /multi-exec";
const SUBSCRIBE: &str =
    "open the /subscribe/<channel> or /psubscribe/<pattern> event stream instead";
const NOT_REDIS: &str = "it controls a Redis process, which tidepool is not";
const CONFIGURED: &str = "tidepool is configured by its command-line flags (CONFIG GET reads them)";
const BLOCK: &str = "the BLOCK option needs a connection that HTTP does not keep";
const BLOCKING: &str = "blocking commands need a connection that HTTP does not keep";

/// Every row. Grouped by family, in the order of Redis's documentation.
fn rows() -> Vec<Row> {
    use bitmaps as b;
    use blocking as bl;
    use geo::Form;
    use hash_ttl::TtlKind;
    use hashes as h;
    use keys as k;
    use server as sv;
    use strings as s;
    vec![
        // strings
        Row::new("get", s::get),
        Row::new("set", s::set)
            .log(Rewritten)
            .own_keys(s::set_keys),
        Row::new("setnx", s::setnx),
        Row::new("setex", |c, a| s::setex(c, a, 1000)).log(Rewritten),
        Row::new("psetex", |c, a| s::setex(c, a, 1)).log(Rewritten),
        Row::new("getset", s::getset).log(Rewritten),
        Row::new("getdel", s::getdel).log(Rewritten),
        Row::new("getex", s::getex).log(Rewritten),
        Row::new("mget", s::mget),
        Row::new("mset", s::mset),
        Row::new("msetnx", s::msetnx),
        Row::new("append", s::append).size(Appends),
        Row::new("strlen", s::strlen),
        Row::new("incr", |c, a| s::incrby_const(c, a, 1)),
        Row::new("decr", |c, a| s::incrby_const(c, a, -1)),
        Row::new("incrby", |c, a| s::incrby(c, a, false)),
        Row::new("decrby", |c, a| s::incrby(c, a, true)),
        Row::new("incrbyfloat", s::incrbyfloat).log(Rewritten),
        Row::new("getrange", s::getrange),
        Row::new("substr", s::getrange),
        Row::new("setrange", s::setrange).size(Range),
        Row::new("lcs", s::lcs),
        // Redis 8.4's compare-and-delete and digest.
        Row::new("delex", s::delex).log(Rewritten).meta(newer(
            -2,
            true,
            "string",
            &["RW", "ACCESS", "DELETE"],
            "Conditionally removes the specified key based on value or digest comparison.",
        )),
        Row::new("digest", s::digest).meta(newer(
            2,
            false,
            "string",
            &[],
            "Returns the XXH3 hash of a string value.",
        )),
        // bitmaps
        Row::new("setbit", b::setbit).size(BitOffset),
        Row::new("getbit", b::getbit),
        Row::new("bitcount", b::bitcount),
        Row::new("bitpos", b::bitpos),
        Row::new("bitop", b::bitop),
        Row::new("bitfield", |c, a| b::bitfield(c, a, false))
            .size(BitField)
            .own_keys(b::bitfield_keys),
        Row::new("bitfield_ro", |c, a| b::bitfield(c, a, true)),
        // geo
        Row::new("geoadd", geo::geoadd),
        Row::new("geopos", geo::geopos),
        Row::new("geodist", geo::geodist),
        Row::new("geohash", geo::geohash),
        Row::new("geosearch", |c, a| geo::search(c, a, Form::GEOSEARCH)),
        Row::new("geosearchstore", |c, a| geo::search(c, a, Form::GEOSEARCHSTORE)).size(After),
        Row::new("georadius", |c, a| geo::search(c, a, Form::GEORADIUS)).size(After),
        Row::new("georadius_ro", |c, a| geo::search(c, a, Form::GEORADIUS_RO)),
        Row::new("georadiusbymember", |c, a| {
            geo::search(c, a, Form::GEORADIUSBYMEMBER)
        })
        .size(After),
        Row::new("georadiusbymember_ro", |c, a| {
            geo::search(c, a, Form::GEORADIUSBYMEMBER_RO)
        }),
        // HyperLogLog: a sparse one may turn dense (12 KB) whatever the arguments.
        Row::new("pfadd", hll::pfadd).size(After),
        // PFCOUNT is a read that may store the count it computed in the HyperLogLog's header:
        // logged as sent when it did.
        Row::new("pfcount", hll::pfcount).log(AsSent),
        Row::new("pfmerge", hll::pfmerge).size(After),
        // generic keyspace
        Row::new("del", k::del),
        Row::new("unlink", k::del),
        Row::new("exists", k::exists),
        Row::new("touch", k::touch),
        Row::new("type", k::type_),
        Row::new("expire", |c, a| k::expire(c, a, 1000, true)).log(Rewritten),
        Row::new("pexpire", |c, a| k::expire(c, a, 1, true)).log(Rewritten),
        Row::new("expireat", |c, a| k::expire(c, a, 1000, false)).log(Rewritten),
        Row::new("pexpireat", |c, a| k::expire(c, a, 1, false)).log(Rewritten),
        Row::new("ttl", |c, a| k::ttl(c, a, false, false)),
        Row::new("pttl", |c, a| k::ttl(c, a, true, false)),
        Row::new("expiretime", |c, a| k::ttl(c, a, false, true)),
        Row::new("pexpiretime", |c, a| k::ttl(c, a, true, true)),
        Row::new("persist", k::persist),
        Row::new("rename", |c, a| k::rename(c, a, false)),
        Row::new("renamenx", |c, a| k::rename(c, a, true)),
        Row::new("copy", k::copy),
        Row::new("dump", k::dump),
        // A RESTORE payload is compressed: what it stores is measured after.
        Row::new("restore", k::restore).log(Rewritten).size(After),
        Row::new("move", k::move_),
        // The hosted service's Read Only token names KEYS and the scan family as refused.
        Row::new("keys", k::keys).read_only_token(false),
        Row::new("scan", k::scan).read_only_token(false),
        Row::new("randomkey", k::randomkey),
        Row::new("object|encoding", k::object_encoding),
        Row::new("object|freq", k::object_freq),
        Row::new("object|idletime", k::object_idletime),
        Row::new("object|refcount", k::object_refcount),
        Row::new("object|help", k::object_help),
        // hashes
        Row::new("hset", |c, a| h::hset(c, a, false)),
        Row::new("hmset", |c, a| h::hset(c, a, true)),
        Row::new("hsetnx", h::hsetnx),
        Row::new("hget", h::hget),
        Row::new("hmget", h::hmget),
        Row::new("hdel", h::hdel),
        Row::new("hlen", h::hlen),
        Row::new("hstrlen", h::hstrlen),
        Row::new("hexists", h::hexists),
        Row::new("hkeys", h::hkeys),
        Row::new("hvals", h::hvals),
        Row::new("hgetall", h::hgetall),
        Row::new("hincrby", h::hincrby),
        Row::new("hincrbyfloat", h::hincrbyfloat).log(Rewritten),
        Row::new("hrandfield", h::hrandfield),
        Row::new("hscan", h::hscan).read_only_token(false),
        // Redis 8's hash commands, and 7.4's hash-field expiry.
        Row::new("hgetdel", h::hgetdel).log(Rewritten).meta(newer(-5, true, "hash", &["RW", "ACCESS", "DELETE"], "Returns the value of a field and deletes it from the hash")),
        Row::new("hgetex", hash_ttl::hgetex).log(Rewritten).meta(newer(-5, true, "hash", &[], "Get the value of one or more fields of a given hash key, and optionally set their expiration")),
        Row::new("hsetex", hash_ttl::hsetex)
            .log(Rewritten)
            .meta(hash_ttl(-6, true, "Set the value of one or more fields of a given hash key, and optionally set their expiration"))
            .denyoom(),
        Row::new("hexpire", |c, a| hash_ttl::hexpire(c, a, 1000, false, "hexpire"))
            .log(Rewritten)
            .meta(hash_ttl(-6, true, "Set expiry for hash field using relative time to expire (seconds)")),
        Row::new("hpexpire", |c, a| hash_ttl::hexpire(c, a, 1, false, "hpexpire"))
            .log(Rewritten)
            .meta(hash_ttl(-6, true, "Set expiry for hash field using relative time to expire (milliseconds)")),
        Row::new("hexpireat", |c, a| hash_ttl::hexpire(c, a, 1000, true, "hexpireat"))
            .log(Rewritten)
            .meta(hash_ttl(-6, true, "Set expiry for hash field using an absolute Unix timestamp (seconds)")),
        Row::new("hpexpireat", |c, a| hash_ttl::hexpire(c, a, 1, true, "hpexpireat"))
            .log(Rewritten)
            .meta(hash_ttl(-6, true, "Set expiry for hash field using an absolute Unix timestamp (milliseconds)")),
        Row::new("hpersist", hash_ttl::hpersist).meta(hash_ttl(-5, true, "Removes the expiration time for each specified field")),
        Row::new("httl", |c, a| hash_ttl::httl(c, a, TtlKind::Seconds)).meta(hash_ttl(-5, false, "Returns the TTL in seconds of a hash field.")),
        Row::new("hpttl", |c, a| hash_ttl::httl(c, a, TtlKind::Millis)).meta(hash_ttl(-5, false, "Returns the TTL in milliseconds of a hash field.")),
        Row::new("hexpiretime", |c, a| {
            hash_ttl::httl(c, a, TtlKind::UnixSeconds)
        })
        .meta(hash_ttl(-5, false, "Returns the expiration time of a hash field as a Unix timestamp, in seconds.")),
        Row::new("hpexpiretime", |c, a| {
            hash_ttl::httl(c, a, TtlKind::UnixMillis)
        })
        .meta(hash_ttl(-5, false, "Returns the expiration time of a hash field as a Unix timestamp, in msec.")),
        // lists
        Row::new("lpush", |c, a| lists::push(c, a, true, false)),
        Row::new("rpush", |c, a| lists::push(c, a, false, false)),
        Row::new("lpushx", |c, a| lists::push(c, a, true, true)),
        Row::new("rpushx", |c, a| lists::push(c, a, false, true)),
        Row::new("lpop", |c, a| lists::pop(c, a, true)),
        Row::new("rpop", |c, a| lists::pop(c, a, false)),
        Row::new("llen", lists::llen),
        Row::new("lrange", lists::lrange),
        Row::new("lindex", lists::lindex),
        Row::new("lset", lists::lset),
        Row::new("linsert", lists::linsert),
        Row::new("lrem", lists::lrem),
        Row::new("ltrim", lists::ltrim),
        Row::new("lpos", lists::lpos),
        Row::new("lmove", |c, a| lists::lmove(c, a, None)),
        Row::new("rpoplpush", |c, a| lists::lmove(c, a, Some((false, true)))),
        Row::new("lmpop", lists::lmpop),
        Row::new("blpop", |c, a| bl::bpop(c, a, true))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        Row::new("brpop", |c, a| bl::bpop(c, a, false))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        Row::new("brpoplpush", |c, a| bl::bmove(c, a, true))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        Row::new("blmove", |c, a| bl::bmove(c, a, false))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        Row::new("blmpop", |c, a| bl::bmpop(c, a, false))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        // sets
        Row::new("sadd", sets::sadd),
        Row::new("srem", sets::srem),
        Row::new("smembers", sets::smembers),
        Row::new("sismember", sets::sismember),
        Row::new("smismember", sets::smismember),
        Row::new("scard", sets::scard),
        Row::new("spop", sets::spop).log(Rewritten),
        Row::new("srandmember", sets::srandmember),
        Row::new("smove", sets::smove),
        Row::new("sinter", |c, a| sets::sinter(c, a, false)),
        Row::new("sinterstore", |c, a| sets::sinter(c, a, true)),
        Row::new("sunion", |c, a| sets::sunion(c, a, false)),
        Row::new("sunionstore", |c, a| sets::sunion(c, a, true)),
        Row::new("sdiff", |c, a| sets::sdiff(c, a, false)),
        Row::new("sdiffstore", |c, a| sets::sdiff(c, a, true)),
        Row::new("sintercard", sets::sintercard),
        Row::new("sscan", sets::sscan).read_only_token(false),
        // sorted sets
        Row::new("zadd", |c, a| zsets::zadd(c, a, false)),
        Row::new("zincrby", |c, a| zsets::zadd(c, a, true)),
        Row::new("zrem", zsets::zrem),
        Row::new("zcard", zsets::zcard),
        Row::new("zscore", zsets::zscore),
        Row::new("zmscore", zsets::zmscore),
        Row::new("zrank", |c, a| zsets::zrank(c, a, false)),
        Row::new("zrevrank", |c, a| zsets::zrank(c, a, true)),
        Row::new("zrange", |c, a| {
            zsets::zrange(c, a, 1, false, Rt::Auto, Dir::Auto)
        }),
        Row::new("zrangestore", |c, a| {
            zsets::zrange(c, a, 2, true, Rt::Auto, Dir::Auto)
        })
        .size(After),
        Row::new("zrevrange", |c, a| {
            zsets::zrange(c, a, 1, false, Rt::Rank, Dir::Reverse)
        }),
        Row::new("zrangebyscore", |c, a| {
            zsets::zrange(c, a, 1, false, Rt::Score, Dir::Forward)
        }),
        Row::new("zrevrangebyscore", |c, a| {
            zsets::zrange(c, a, 1, false, Rt::Score, Dir::Reverse)
        }),
        Row::new("zrangebylex", |c, a| {
            zsets::zrange(c, a, 1, false, Rt::Lex, Dir::Forward)
        }),
        Row::new("zrevrangebylex", |c, a| {
            zsets::zrange(c, a, 1, false, Rt::Lex, Dir::Reverse)
        }),
        Row::new("zcount", zsets::zcount),
        Row::new("zlexcount", zsets::zlexcount),
        Row::new("zremrangebyrank", |c, a| zsets::zremrange(c, a, Rt::Rank)),
        Row::new("zremrangebyscore", |c, a| zsets::zremrange(c, a, Rt::Score)),
        Row::new("zremrangebylex", |c, a| zsets::zremrange(c, a, Rt::Lex)),
        Row::new("zpopmin", |c, a| zsets::zpop(c, a, true)),
        Row::new("zpopmax", |c, a| zsets::zpop(c, a, false)),
        Row::new("zmpop", zsets::zmpop),
        Row::new("bzpopmin", |c, a| bl::bzpop(c, a, true))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        Row::new("bzpopmax", |c, a| bl::bzpop(c, a, false))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        Row::new("bzmpop", |c, a| bl::bmpop(c, a, true))
            .log(Rewritten)
            .rest(Rest::No(BLOCKING)),
        Row::new("zrandmember", zsets::zrandmember),
        Row::new("zscan", zsets::zscan).read_only_token(false),
        Row::new("zunion", |c, a| {
            zsets::zsetop(c, a, 1, Op::Union, false, false)
        }),
        Row::new("zinter", |c, a| {
            zsets::zsetop(c, a, 1, Op::Inter, false, false)
        }),
        Row::new("zdiff", |c, a| zsets::zsetop(c, a, 1, Op::Diff, false, false)),
        // A sorted set built from sets adds a score to each member: measured after.
        Row::new("zunionstore", |c, a| {
            zsets::zsetop(c, a, 2, Op::Union, true, false)
        })
        .size(After),
        Row::new("zinterstore", |c, a| {
            zsets::zsetop(c, a, 2, Op::Inter, true, false)
        })
        .size(After),
        Row::new("zdiffstore", |c, a| {
            zsets::zsetop(c, a, 2, Op::Diff, true, false)
        })
        .size(After),
        Row::new("zintercard", |c, a| {
            zsets::zsetop(c, a, 1, Op::Inter, false, true)
        }),
        // SORT's BY and GET read keys its key specifications do not name.
        Row::new("sort", |c, a| sort::sort(c, a, false))
            .size(After)
            .own_keys(sort::sort_keys),
        Row::new("sort_ro", |c, a| sort::sort(c, a, true)).own_keys(sort::sort_ro_keys),
        // streams
        Row::new("xadd", streams::xadd).log(Rewritten),
        Row::new("xlen", streams::xlen),
        Row::new("xrange", |c, a| streams::xrange(c, a, false)),
        Row::new("xrevrange", |c, a| streams::xrange(c, a, true)),
        Row::new("xdel", streams::xdel),
        Row::new("xtrim", streams::xtrim).log(Rewritten),
        Row::new("xread", streams::xread).rest(Rest::NotWith("block", BLOCK)),
        Row::new("xsetid", streams::xsetid),
        Row::new("xinfo|stream", streams::xinfo_stream),
        Row::new("xinfo|groups", stream_groups::xinfo_groups),
        Row::new("xinfo|consumers", stream_groups::xinfo_consumers),
        Row::new("xgroup|create", |c, a| {
            stream_groups::xgroup(c, a, stream_groups::XGroup::Create)
        }),
        Row::new("xgroup|setid", |c, a| {
            stream_groups::xgroup(c, a, stream_groups::XGroup::SetId)
        }),
        Row::new("xgroup|destroy", |c, a| {
            stream_groups::xgroup(c, a, stream_groups::XGroup::Destroy)
        }),
        Row::new("xgroup|createconsumer", |c, a| {
            stream_groups::xgroup(c, a, stream_groups::XGroup::CreateConsumer)
        }),
        Row::new("xgroup|delconsumer", |c, a| {
            stream_groups::xgroup(c, a, stream_groups::XGroup::DelConsumer)
        }),
        Row::new("xreadgroup", stream_groups::xreadgroup)
            .log(Rewritten)
            .rest(Rest::NotWith("block", BLOCK)),
        Row::new("xack", stream_groups::xack),
        Row::new("xpending", stream_groups::xpending),
        Row::new("xclaim", stream_groups::xclaim),
        Row::new("xautoclaim", stream_groups::xautoclaim),
        // Redis 8.2's stream deletion commands the SDKs send.
        Row::new("xackdel", stream_groups::xackdel)
            .log(Rewritten)
            .meta(newer(
                -6,
                true,
                "stream",
                &["RW", "DELETE"],
                "Acknowledges and deletes one or multiple messages for a stream consumer group.",
            )),
        Row::new("xdelex", stream_groups::xdelex).meta(newer(
            -5,
            true,
            "stream",
            &["RW", "DELETE"],
            "Deletes one or multiple entries from the stream.",
        )),
        // JSON documents (RedisJSON's commands and table entries)
        json_row("json.set", json::set, -4, true, "Sets or updates the JSON value at a path")
            .log(Rewritten)
            .denyoom(),
        json_row("json.get", json::get, -2, false, "Gets the value at one or more paths in JSON serialized form"),
        json_row("json.mget", json::mget, -3, false, "Returns the values at a path from one or more keys")
            .keys(-2, 1),
        json_row("json.mset", json::mset, -4, true, "Sets or updates the JSON value of one or more keys")
            .log(Rewritten)
            .denyoom()
            .keys(-1, 3),
        json_row("json.merge", json::merge, -4, true, "Merges a given JSON value into matching paths")
            .log(Rewritten)
            .denyoom(),
        json_row("json.del", json::del, -2, true, "Deletes a value").key_flags(&["RW", "ACCESS", "DELETE"]),
        json_row("json.forget", json::del, -2, true, "Deletes a value").key_flags(&["RW", "ACCESS", "DELETE"]),
        json_row("json.type", json::type_, -2, false, "Returns the type of the JSON value at path"),
        json_row("json.numincrby", |c, a| json::num_op(c, a, json::NumOp::Incr), 4, true, "Increments the numeric value at path by a value"),
        json_row("json.nummultby", |c, a| json::num_op(c, a, json::NumOp::Mult), 4, true, "Multiplies the numeric value at path by a value"),
        json_row("json.toggle", json::toggle, 3, true, "Toggles a boolean value"),
        json_row("json.strappend", json::strappend, -3, true, "Appends a string to a JSON string value at path").denyoom(),
        json_row("json.strlen", json::strlen, -2, false, "Returns the length of the JSON String at path in key"),
        json_row("json.arrappend", json::arrappend, -3, true, "Append one or more JSON values into the array at path after the last element in it").denyoom(),
        json_row("json.arrinsert", json::arrinsert, -5, true, "Inserts the JSON scalar(s) value at the specified index in the array at path").denyoom(),
        json_row("json.arrpop", json::arrpop, -2, true, "Removes and returns the element at the specified index in the array at path"),
        json_row("json.arrtrim", json::arrtrim, 5, true, "Trims the array at path to contain only the specified inclusive range of indices from start to stop"),
        json_row("json.arrindex", json::arrindex, -4, false, "Returns the index of the first occurrence of a JSON scalar value in the array at path"),
        json_row("json.arrlen", json::arrlen, -2, false, "Returns the length of the array at path"),
        json_row("json.objkeys", json::objkeys, -2, false, "Returns the JSON keys of the object at path"),
        json_row("json.objlen", json::objlen, -2, false, "Returns the number of keys of the object at path"),
        json_row("json.clear", json::clear, -2, true, "Clears all values from an array or an object and sets numeric values to `0`"),
        json_row("json.resp", json::resp, -2, false, "Returns the JSON value at path in Redis Serialization Protocol (RESP)"),
        // RedisJSON's JSON.DEBUG (MEMORY key [path], HELP): its key is the third argument.
        Row::new("json.debug", json::debug).meta(Meta::Like {
            from: "json.resp",
            arity: -2,
            summary: "Debugging container command",
            key_at: Some(2),
        }),
        // server
        Row::new("ping", |_, a| sv::ping(a)).read_only_token(true),
        Row::new("echo", |_, a| sv::echo(a)).read_only_token(true),
        Row::new("time", |c, _| sv::time(c)).read_only_token(true),
        Row::new("dbsize", |c, _| sv::dbsize(c)),
        Row::new("flushdb", sv::flush).log(Rewritten),
        Row::new("flushall", sv::flush).log(Rewritten),
        Row::new("lastsave", |c, _| sv::lastsave(c)),
        Row::new("save", |c, a| sv::snapshot(c, SnapshotAsk::Save, a)),
        Row::new("bgsave", |c, a| {
            sv::snapshot(c, SnapshotAsk::Background { schedule: false }, a)
        }),
        Row::new("bgrewriteaof", |c, a| sv::snapshot(c, SnapshotAsk::Rewrite, a)),
        Row::new("wait", |c, a| sv::wait(c, a)),
        Row::new("waitaof", sv::waitaof).meta(Meta::Like {
            from: "wait",
            arity: 4,
            summary: "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.",
            key_at: None,
        }),
        Row::new("info", sv::info),
        Row::new("config|get", sv::config_get),
        Row::refused("config|set", CONFIGURED),
        Row::refused("config|rewrite", CONFIGURED),
        Row::refused("config|resetstat", CONFIGURED),
        Row::new("command", |_, _| introspect::command(global())),
        Row::new("command|count", |_, _| {
            Reply::Int(global().len_top_level() as i64)
        }),
        Row::new("command|info", |_, a| introspect::command_info(global(), a)),
        Row::new("command|docs", |_, a| introspect::command_docs(global(), a)),
        Row::new("command|list", |_, a| introspect::command_list(global(), a)),
        Row::new("command|getkeys", |_, a| {
            introspect::command_getkeys(global(), a)
        }),
        Row::new("command|getkeysandflags", |_, a| {
            introspect::command_getkeysandflags(global(), a)
        }),
        Row::new("memory|usage", introspect::memory_usage),
        Row::new("memory|stats", introspect::memory_stats),
        Row::new("memory|doctor", introspect::memory_doctor),
        Row::refused("shutdown", NOT_REDIS),
        Row::refused("debug", NOT_REDIS),
        Row::refused("sync", NOT_REDIS),
        Row::refused("psync", NOT_REDIS),
        Row::refused("replicaof", NOT_REDIS),
        Row::refused("slaveof", NOT_REDIS),
        Row::refused("failover", NOT_REDIS),
        Row::refused("migrate", "tidepool has no TCP peers to migrate keys to"),
        // connection: what a request without a connection can answer (`server::client`);
        // the other connection commands are refused (`info::default_rest`).
        Row::new("client|setinfo", |c, a| sv::client(c, sv::Client::SetInfo, a)).meta(
            Meta::Like {
                from: "client|setname",
                arity: 4,
                summary: "Sets information specific to the client or connection.",
                key_at: None,
            },
        ),
        Row::new("client|setname", |c, a| sv::client(c, sv::Client::SetName, a)),
        Row::new("client|getname", |c, a| sv::client(c, sv::Client::GetName, a)),
        Row::new("client|list", |c, a| sv::client(c, sv::Client::List, a)),
        Row::new("client|no-evict", |c, a| sv::client(c, sv::Client::Switch, a)),
        Row::new("client|no-touch", |c, a| sv::client(c, sv::Client::Switch, a)).meta(
            Meta::Like {
                from: "client|no-evict",
                arity: 3,
                summary: "Controls whether commands sent by the client affect the LRU/LFU of accessed keys.",
                key_at: None,
            },
        ),
        Row::refused("multi", TRANSACTION),
        Row::refused("exec", TRANSACTION),
        Row::refused("discard", TRANSACTION),
        Row::refused("watch", TRANSACTION),
        Row::refused("unwatch", TRANSACTION),
        // pub/sub
        Row::new("publish", sv::publish).publishes(),
        Row::new("spublish", sv::spublish).publishes(),
        Row::new("pubsub|channels", |c, a| sv::pubsub(c, sv::PubSub::Channels, a)),
        Row::new("pubsub|numsub", |c, a| sv::pubsub(c, sv::PubSub::NumSub, a)),
        Row::new("pubsub|numpat", |c, a| sv::pubsub(c, sv::PubSub::NumPat, a)),
        Row::new("pubsub|shardchannels", |c, a| {
            sv::pubsub(c, sv::PubSub::ShardChannels, a)
        }),
        Row::new("pubsub|shardnumsub", |c, a| {
            sv::pubsub(c, sv::PubSub::ShardNumSub, a)
        }),
        Row::new("pubsub|help", |c, a| sv::pubsub(c, sv::PubSub::Help, a)),
        Row::refused("monitor", "open the /monitor event stream instead"),
        Row::refused("subscribe", SUBSCRIBE),
        Row::refused("psubscribe", SUBSCRIBE),
        Row::refused("ssubscribe", SUBSCRIBE),
        Row::refused("unsubscribe", SUBSCRIBE),
        Row::refused("punsubscribe", SUBSCRIBE),
        Row::refused("sunsubscribe", SUBSCRIBE),
        // scripts and functions: logged by their effects; the read-only forms are the SDKs'
        // read-only helpers, open to the Read Only token (a write inside one is refused).
        Row::new("eval", |c, a| scripting::eval(c, a, false, false)).log(Effects),
        Row::new("evalsha", |c, a| scripting::eval(c, a, true, false)).log(Effects),
        Row::new("eval_ro", |c, a| scripting::eval(c, a, false, true))
            .log(Effects)
            .read_only_token(true),
        Row::new("evalsha_ro", |c, a| scripting::eval(c, a, true, true))
            .log(Effects)
            .read_only_token(true),
        Row::new("fcall", |c, a| scripting::fcall(c, a, false)).log(Effects),
        Row::new("fcall_ro", |c, a| scripting::fcall(c, a, true))
            .log(Effects)
            .read_only_token(true),
        Row::new("script|load", scripting::script_load),
        Row::new("script|exists", scripting::script_exists),
        Row::new("script|flush", scripting::script_flush),
        Row::new("script|kill", |_, _| scripting::kill()).interrupts(Interrupt::Script),
        Row::new("function|kill", |_, _| scripting::kill()).interrupts(Interrupt::Function),
        Row::new("function|list", scripting::function_list),
        Row::new("function|stats", |c, _| scripting::function_stats(c)),
        Row::new("function|load", scripting::function_load),
        Row::new("function|delete", functions::delete),
        Row::new("function|flush", functions::flush).log(Rewritten),
        Row::new("function|dump", |c, _| functions::dump(c)),
        Row::new("function|restore", scripting::function_restore).log(Rewritten),
        // ACL: SETUSER is logged with its passwords hashed; DELUSER as sent.
        Row::new("acl|setuser", |c, a| acl::setuser(c, a, global())).log(Rewritten),
        Row::new("acl|deluser", acl::deluser).log(AsSent),
        Row::new("acl|getuser", acl::getuser),
        Row::new("acl|users", |c, _| acl::users(c)),
        Row::new("acl|list", |c, _| acl::list(c)),
        Row::new("acl|whoami", |c, _| acl::whoami(c)),
        Row::new("acl|cat", |_, a| acl::cat(a, global())),
        Row::new("acl|genpass", |_, a| acl::genpass(a)),
        // Upstash's extensions: a REST token for an ACL user, and a token that is both a
        // password and a REST token.
        Row::new("acl|resttoken", acl::resttoken).meta(Meta::Upstash {
            arity: 4,
            summary: "Upstash: a REST token that carries an ACL user's permissions",
        }),
        Row::new("acl|gentoken", acl::gentoken).meta(Meta::Like {
            from: "acl|resttoken",
            arity: -3,
            summary: "Upstash: a token to set as an ACL user's password, then use as its REST token",
            key_at: None,
        }),
    ]
}

/// Runs a command the pipeline has checked (or replay has found replayable): its row's
/// handler, or the error for a command Redis has and tidepool does not run.
pub fn run(ctx: &mut Ctx, info: &CommandInfo, args: &[Vec<u8>]) -> Reply {
    match info.run {
        Some(run) => run(ctx, args),
        None => Reply::Error(format!(
            "ERR '{}' is known to Redis but not implemented by tidepool yet",
            info.name.replace('|', " ")
        )),
    }
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

    /// Every row names an entry: a row for a misspelt name, or a newer command without its
    /// entry, would leave its handler unreachable.
    #[test]
    fn every_row_lands_on_an_entry() {
        assert_eq!(super::global().stray(), &[] as &[&str]);
    }

    /// The rows keep the refusals REST had before they were rows: each names its reason,
    /// the connection and blocking ones without a row follow from Redis's table.
    #[test]
    fn rest_refusals_follow_the_rows_and_the_table() {
        let refusal = |args: &[&str]| {
            let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            match super::global().lookup(&args) {
                super::Lookup::Found(i) => i.rest_refusal(&args),
                _ => panic!("unknown command {:?}", args[0]),
            }
        };
        for (args, has) in [
            (&["MULTI"][..], Some("/multi-exec")),
            (&["SUBSCRIBE", "c"], Some("/subscribe/")),
            (&["BLPOP", "l", "0"], Some("blocking commands")),
            (&["SELECT", "0"], Some("a request has no connection state")),
            (&["CLUSTER", "INFO"], Some("not a cluster")),
            (
                &["XREAD", "BLOCK", "0", "STREAMS", "s", "0"],
                Some("BLOCK option"),
            ),
            (&["XREAD", "STREAMS", "s", "0"], None),
            (&["PING"], None),
            (&["CLIENT", "SETNAME", "x"], None),
            (&["CONFIG", "SET", "a", "b"], Some("command-line flags")),
        ] {
            let got = refusal(args);
            match has {
                None => assert_eq!(got, None, "{args:?}"),
                Some(h) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(h)),
                    "{args:?}: {got:?}"
                ),
            }
        }
    }

    /// SCRIPT KILL and FUNCTION KILL are found by their rows, in any case, and nothing else
    /// is: they are answered while a script holds the executor.
    #[test]
    fn the_kill_commands_are_found_without_a_lookup() {
        use crate::lua::Interrupt;
        let t = super::global();
        let of = |a: &[&str]| {
            let a: Vec<Vec<u8>> = a.iter().map(|x| x.as_bytes().to_vec()).collect();
            t.interrupt_of(&a)
        };
        assert_eq!(of(&["SCRIPT", "KILL"]), Some(Interrupt::Script));
        assert_eq!(of(&["function", "kill"]), Some(Interrupt::Function));
        assert_eq!(of(&["SCRIPT", "FLUSH"]), None);
        assert_eq!(of(&["GET", "kill"]), None);
        assert_eq!(of(&["SCRIPT", "KILL", "x"]), None);
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
