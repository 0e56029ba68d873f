//! Commands' arguments: wrong counts, numbers that are not numbers or do not fit, options
//! that clash, wrong types. Every reply is an error, with redis-server's own text.

use super::*;

const SETUP: &[&[&str]] = &[
    &["SET", "s", "hello"],
    &["RPUSH", "l", "a", "b"],
    &["HSET", "h", "f", "1"],
    &["SADD", "st", "m"],
    &["ZADD", "z", "1", "m"],
    &["XADD", "x", "1-1", "f", "v"],
    &["SET", "n", "10"],
    &["PFADD", "hll", "a"],
];

const CASES: &[&[&str]] = &[
    &["GET"],
    &["SET", "k"],
    &["SET", "k", "v", "EX"],
    &["SET", "k", "v", "EX", "0"],
    &["SET", "k", "v", "EX", "-1"],
    &["SET", "k", "v", "EX", "abc"],
    &["SET", "k", "v", "EX", "9223372036854775807"],
    &["SET", "k", "v", "PX", "1", "EX", "1"],
    &["SET", "k", "v", "NX", "XX"],
    &["SET", "k", "v", "KEEPTTL", "EX", "1"],
    &["SET", "k", "v", "BOGUS"],
    &["INCR", "s"],
    &["INCRBY", "n", "abc"],
    &["INCRBY", "n", "9223372036854775807"],
    &["DECRBY", "n", "-9223372036854775808"],
    &["INCRBYFLOAT", "n", "nan"],
    &["INCRBYFLOAT", "n", "inf"],
    &["INCRBYFLOAT", "s", "1"],
    &["SETRANGE", "k2", "-1", "x"],
    &["SETRANGE", "k2", "536870912", "x"],
    &["GETRANGE", "s", "a", "b"],
    &["SETBIT", "b", "4294967296", "1"],
    &["SETBIT", "b", "1", "2"],
    &["SETBIT", "b", "-1", "1"],
    &["GETBIT", "b", "x"],
    &["BITCOUNT", "s", "0"],
    &["BITCOUNT", "s", "0", "1", "BOGUS"],
    &["BITPOS", "s", "2"],
    &["BITOP", "NOT", "d", "s", "s"],
    &["BITOP", "BOGUS", "d", "s"],
    &["BITFIELD", "b", "GET", "u64", "0"],
    &["BITFIELD", "b", "GET", "i65", "0"],
    &["BITFIELD", "b", "SET", "u8", "-1", "1"],
    &["BITFIELD", "b", "OVERFLOW", "BOGUS"],
    &["BITFIELD", "b", "INCRBY", "u8", "0"],
    &["EXPIRE", "s", "abc"],
    &["EXPIRE", "s", "9223372036854775807"],
    &["EXPIRE", "s", "10", "NX", "XX"],
    &["EXPIRE", "s", "10", "GT", "LT"],
    &["LPUSH", "s", "x"],
    &["LRANGE", "l", "a", "1"],
    &["LINDEX", "l", "x"],
    &["LSET", "l", "99", "x"],
    &["LSET", "nolist", "0", "x"],
    &["LPOS", "l", "a", "RANK", "0"],
    &["LPOS", "l", "a", "COUNT", "-1"],
    &["LPOS", "l", "a", "MAXLEN", "-1"],
    &["LMPOP", "0", "l", "LEFT"],
    &["LMPOP", "1", "l", "MIDDLE"],
    &["LMPOP", "2", "l", "LEFT"],
    &["LMPOP", "1", "l", "LEFT", "COUNT", "0"],
    &["LINSERT", "l", "SIDEWAYS", "a", "x"],
    &["HSET", "h", "f"],
    &["HINCRBY", "h", "f", "x"],
    &["HINCRBYFLOAT", "h", "f", "nan"],
    &["HRANDFIELD", "h", "-9223372036854775808"],
    &["SADD", "s", "m"],
    &["SRANDMEMBER", "st", "x"],
    &["SPOP", "st", "-1"],
    &["SINTERCARD", "0", "st"],
    &["SINTERCARD", "1", "st", "LIMIT", "-1"],
    &["SMISMEMBER", "st"],
    &["ZADD", "z", "x", "m"],
    &["ZADD", "z", "nan", "m"],
    &["ZADD", "z", "NX", "XX", "1", "m"],
    &["ZADD", "z", "GT", "LT", "1", "m"],
    &["ZADD", "z", "INCR", "1", "a", "2", "b"],
    &["ZADD", "z", "1"],
    &["ZINCRBY", "z", "x", "m"],
    &["ZRANGE", "z", "0", "1", "BYSCORE", "LIMIT", "0"],
    &["ZRANGE", "z", "(x", "1", "BYSCORE"],
    &["ZRANGE", "z", "a", "b", "BYLEX"],
    // ZRANGE by rank takes LIMIT, as the hosted service does (tests/it/hosted.rs); ZREVRANGE not.
    &["ZREVRANGE", "z", "0", "1", "LIMIT", "0", "1"],
    &["ZRANGEBYSCORE", "z", "a", "b"],
    &["ZUNIONSTORE", "d", "0", "z"],
    &["ZUNIONSTORE", "d", "5", "z"],
    &["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "x"],
    &["ZUNIONSTORE", "d", "1", "z", "AGGREGATE", "AVG"],
    &["ZINTERCARD", "-1", "z"],
    &["ZRANDMEMBER", "z", "x"],
    &["ZMPOP", "1", "z", "BOTH"],
    &["XADD", "x", "0-0", "f", "v"],
    &["XADD", "x", "1-1", "f", "v"],
    &["XADD", "x", "abc", "f", "v"],
    &["XADD", "x", "*", "f"],
    &["XADD", "x", "MAXLEN", "-1", "*", "f", "v"],
    &["XRANGE", "x", "a", "b"],
    &["XREAD", "STREAMS", "x"],
    &["XREAD", "COUNT", "x", "STREAMS", "x", "0"],
    &["XGROUP", "CREATE", "x", "g", "bogus"],
    &["XGROUP", "CREATE", "nostream", "g", "$"],
    &["XREADGROUP", "GROUP", "nog", "c", "STREAMS", "x", ">"],
    &["XTRIM", "x", "BOGUS", "1"],
    &["XSETID", "x", "0-1"],
    &["GEOADD", "g", "200", "0", "m"],
    &["GEOADD", "g", "0", "90", "m"],
    &["GEOADD", "g", "x", "0", "m"],
    &["GEOSEARCH", "g", "BYRADIUS", "1", "km"],
    &["GEORADIUS", "g", "0", "0", "-1", "km"],
    &["GEORADIUS", "g", "0", "0", "1", "parsecs"],
    &["PFADD", "s", "a"],
    &["PFCOUNT", "s"],
    &["PFMERGE", "d", "s"],
    &["SORT", "l", "LIMIT", "0"],
    &["SORT", "l", "BOGUS"],
    &["SORT", "l", "LIMIT", "x", "1"],
    &["SCAN", "x"],
    &["SCAN", "0", "COUNT", "0"],
    &["SCAN", "0", "COUNT", "x"],
    &["HSCAN", "h", "0", "COUNT", "-1"],
    &["OBJECT", "BOGUS", "s"],
    &["OBJECT", "ENCODING"],
    &["CONFIG", "BOGUS"],
    &["RENAME", "nokey", "x"],
    &["GETEX", "s", "EX", "0"],
    &["GETEX", "s", "PERSIST", "EX", "1"],
    &["EVAL", "return 1", "-1"],
    &["EVAL", "return 1", "5", "a"],
    &["EVAL", "return 1", "x"],
    &["EVALSHA", "0000000000000000000000000000000000000000", "0"],
    &["FCALL", "nofunction", "0"],
    &["FUNCTION", "LOAD", "return 1"],
    &["FUNCTION", "DELETE", "nolib"],
    &["ACL", "SETUSER", "u", "%X~k"],
    &["ACL", "DELUSER", "default"],
    &["DUMP"],
    &["RESTORE", "k", "0", "garbage"],
    &["RESTORE", "k", "-1", "x"],
];

pub const CASES_LEN: usize = CASES.len();

fn strs(a: &[&str]) -> Vec<Vec<u8>> {
    a.iter().map(|x| x.as_bytes().to_vec()).collect()
}

#[test]
fn bad_arguments_get_redis_error_texts() {
    let Some(mut both) = Both::start("bad-args", &[]) else {
        return;
    };
    let Both {
        t: c, r, server, ..
    } = &mut both;
    r.cmd_str(&["FLUSHALL"]);
    for s in SETUP {
        assert!(!c.cmd(&strs(s)).is_err(), "{s:?}");
        assert!(!r.cmd(&strs(s)).is_err(), "{s:?}");
    }
    let mut doors = DOORS.iter().cycle();
    for case in CASES {
        let args = strs(case);
        let want = r.cmd(&args);
        let Canon::Err(want) = want else {
            panic!("{case:?}: redis-server did not refuse it: {want:?}")
        };
        let door = *doors.next().unwrap_or(&Door::JsonBody);
        let got = c.cmd_via(door, &args);
        // A script error names the script's SHA-1 and line the same way on both.
        assert_eq!(got, Canon::Err(want.clone()), "{case:?} through {door:?}");
        still_answers(server);
    }
}
