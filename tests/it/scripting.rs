//! Lua scripting (EVAL, EVALSHA, EVAL_RO, SCRIPT ..., FUNCTION, FCALL): replies and error texts
//! against a real redis-server 7.0, and what only tidepool can show: a script is logged by its
//! effects, so a restart rebuilds what it wrote without running Lua again, and function
//! libraries are logged as loaded and come back after a restart.

use crate::common::*;

/// Scripts and commands whose replies must be Redis's exactly, in order, on one keyspace.
const CASES: &[&[&str]] = &[
    &["FLUSHALL"],
    &["SET", "s", "x"],
    &["EVAL", "return redis.call('incr', KEYS[1])", "1", "s"],
    &["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "s"],
    &["EVAL", "\n\nreturn redis.call('incr','s')", "0"],
    &["EVAL", "return redis.error_reply('My Error')", "0"],
    &["EVAL", "return {err='boom'}", "0"],
    &["EVAL", "return redis.status_reply('FINE')", "0"],
    &["EVAL", "return x.y", "0"],
    &["EVAL", "x = 5", "0"],
    &["EVAL", "tostring = nil", "0"],
    &["EVAL", "redis.call = nil", "0"],
    &["EVAL", "string.len = nil", "0"],
    &["EVAL", "KEYS = 1", "0"],
    &["EVAL", "KEYS[1] = 'x' return KEYS[1]", "0"],
    &["EVAL", "local t = redis; t.x = 1", "0"],
    &["EVAL", "return string.len('abc') + #KEYS", "1", "k"],
    &["EVAL", "return ('abc'):upper()", "0"],
    &["EVAL", "return os", "0"],
    &["EVAL", "return (", "0"],
    &["EVAL", "return redis.call('nosuch')", "0"],
    &["EVAL", "return redis.call('get','s','x')", "0"],
    &["EVAL", "return redis.call()", "0"],
    &["EVAL", "return redis.call({})", "0"],
    &["EVAL", "return redis.call('exec')", "0"],
    &["EVAL", "return redis.call('blpop','x','0')", "0"],
    &["EVAL_RO", "return redis.call('set','a','b')", "0"],
    &["EVAL_RO", "return redis.call('get','s')", "0"],
    &["EVAL", "error('custom')", "0"],
    &["EVAL", "error({err='tbl'})", "0"],
    &["EVAL", "return {1,2.9,'a',true,false,nil,5}", "0"],
    &["EVAL", "return 3.99", "0"],
    &["EVAL", "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2]}", "2", "k1", "k2", "a1"],
    &["EVAL", "return redis.call('set', 'n', 3.5)", "0"],
    &["GET", "n"],
    &["EVAL", "return redis.call('set', 'n', 1e20)", "0"],
    &["GET", "n"],
    &["EVAL", "local x = redis.call('get','nope') return x == false", "0"],
    &["EVAL", "return redis.call('type','s')", "0"],
    &["EVAL", "return redis.pcall('type','s')['ok']", "0"],
    &["EVAL", "return redis.call('hgetall', 'nokey')", "0"],
    &["EVAL", "return redis.sha1hex('abc')", "0"],
    &["EVAL", "return tostring(1/0)", "0"],
    &["EVAL", "return math.floor(7.9) + string.len('abc')", "0"],
    &["EVAL", "return table.concat({'a','b'}, ',')", "0"],
    &["EVAL", "return 1", "-1"],
    &["EVAL", "return 1", "2", "a"],
    &["EVAL", "return 1", "x"],
    // A rate limiter in the shape @upstash/ratelimit uses: INCR, then PEXPIRE on the first hit.
    &[
        "EVAL",
        "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return c",
        "1",
        "rl",
        "60000",
    ],
    &["EVAL", "return redis.call('INCR', KEYS[1])", "1", "rl"],
    &["EVALSHA", "abc", "0"],
    &["SCRIPT", "LOAD", "return 1"],
    &["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
    &["SCRIPT", "EXISTS", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "ffff"],
    &["SCRIPT", "LOAD", "return ("],
    &["SCRIPT", "FLUSH", "x"],
    &["SCRIPT", "FLUSH"],
    &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"],
    &["SCRIPT", "KILL"],
    // Redis 7 shebang lines: flags, and line numbers kept.
    &["EVAL", "#!lua\nreturn 1", "0"],
    &["EVAL", "#!lua flags=no-writes\nreturn redis.call('set','a','b')", "0"],
    &["EVAL", "#!lua flags=no-writes\n\nreturn x", "0"],
    &["EVAL", "#!lua flags=bogus\nreturn 1", "0"],
    &["EVAL", "#!python\nreturn 1", "0"],
    &["EVAL", "#!lua foo=bar\nreturn 1", "0"],
    &["EVAL", "#!lua", "0"],
    &["EVAL", "#!lua flags=no-writes,allow-oom\nreturn 2", "0"],
    &["EVAL", "#!lua flags=\nreturn 3", "0"],
    &["EVAL_RO", "#!lua\nreturn 1", "0"],
    &["EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0"],
];

/// Function libraries (FUNCTION, FCALL): replies and error texts must be Redis's.
const FUNCTION_CASES: &[&[&str]] = &[
    &["FUNCTION", "FLUSH"],
    &["FLUSHALL"],
    &["SET", "s", "x"],
    &["FUNCTION", "LOAD", "#!lua name=mylib\nredis.register_function(\"myfunc\", function(keys, args) return redis.call(\"incr\", keys[1]) end)\nredis.register_function{function_name=\"ro\", callback=function(keys, args) return args[1] end, flags={\"no-writes\"}, description=\"d\"}"],
    &["FUNCTION", "LOAD", "#!lua name=mylib\nredis.register_function(\"myfunc\", function(keys, args) return redis.call(\"incr\", keys[1]) end)\nredis.register_function{function_name=\"ro\", callback=function(keys, args) return args[1] end, flags={\"no-writes\"}, description=\"d\"}"],
    &["FUNCTION", "LOAD", "return 1"],
    &["FUNCTION", "LOAD", "#!lua\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name=x\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name=b-d\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name=y\nredis.register_function(\"myfunc\", function() return 1 end)"],
    &["FUNCTION", "LOAD", "#!lua name=z\nredis.call(\"ping\")"],
    &["FUNCTION", "LOAD", "#!lua name=z2 foo=bar\nreturn 1"],
    &["FUNCTION", "LOAD", "#!py name=z3\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name=z4\nredis.register_function(\"a b\", function() return 1 end)"],
    &["FUNCTION", "LOAD", "#!lua name=z5\nredis.register_function(\"f5\", 5)"],
    &["FUNCTION", "LOAD", "#!lua name=z6\nredis.register_function{function_name=\"f6\", callback=function() end, flags={\"bogus\"}}"],
    &["FUNCTION", "LOAD", "#!lua name=z7\nredis.register_function(\"f7\", function() return 1 end)\nredis.register_function(\"f7\", function() return 1 end)"],
    &["FUNCTION", "LOAD", "#!lua name=z8\nerror(\"boom\")"],
    &["FUNCTION", "LOAD", "#!lua name=c1\nreturn ("],
    &["FUNCTION", "LOAD", "#!lua name=c2\nredis.register_function(\"f\", function() return 1 end, 3)"],
    &["FUNCTION", "LOAD", "#!lua name=c3\nredis.register_function{function_name=\"g\", callback=function() return 1 end, bogus=1}"],
    &["FUNCTION", "LOAD", "#!lua name=c4\nredis.register_function{callback=function() return 1 end}"],
    &["FUNCTION", "LOAD", "#!lua name=c5\nredis.register_function()"],
    &["FUNCTION", "LOAD", "FOO", "#!lua name=c8\nredis.register_function(\"c8f\", function() return 1 end)"],
    &["FCALL", "myfunc", "1", "k"],
    &["FCALL", "myfunc", "1", "k"],
    &["FCALL", "ro", "0", "hello"],
    &["FCALL", "nosuch", "0"],
    // FCALL_RO of a function without `no-writes` answers as the hosted service does
    // (tests/it/hosted.rs), not as Redis does.
    &["FCALL_RO", "ro", "0", "x"],
    &["FCALL", "myfunc", "x"],
    &["FCALL", "myfunc", "5", "a"],
    &["FCALL", "myfunc", "-1"],
    &["FUNCTION", "LOAD", "#!lua name=errlib\nredis.register_function(\"bad\", function(keys, args) return redis.call(\"incr\", \"s\") end)\nredis.register_function(\"bad2\", function(keys, args) return x.y end)"],
    &["FCALL", "bad", "0"],
    &["FCALL", "bad2", "0"],
    &["FUNCTION", "LIST", "LIBRARYNAME", "my*"],
    &["FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", "mylib"],
    &["FUNCTION", "LIST", "LIBRARYNAME"],
    &["FUNCTION", "LIST", "foo"],
    &["FUNCTION", "DELETE", "nosuch"],
    &["FUNCTION", "DELETE", "errlib"],
    &["FUNCTION", "STATS"],
    &["FUNCTION", "LOAD", "REPLACE", "#!lua name=mylib\nredis.register_function(\"other\", function() return 9 end)"],
    &["FCALL", "myfunc", "1", "k"],
    &["FCALL", "other", "0"],
    &["FUNCTION", "KILL"],
    &["FUNCTION", "FLUSH", "foo"],
    &["FLUSHALL"],
    &["FCALL", "other", "0"],
    &["FUNCTION", "FLUSH"],
    &["FCALL", "other", "0"],
    // Redis's bundled cjson and bit libraries.
    &["EVAL", r#"return cjson.encode({1, 2.5, 'a"b/c', true, {x = 1}, {}})"#, "0"],
    &["EVAL", "return cjson.encode({[1] = 1, [3] = 3})", "0"],
    &["EVAL", "return cjson.encode({[1] = 1, [30] = 3})", "0"],
    &["EVAL", "return cjson.encode({a = {b = {1e20, 0.1, -0.00001, 123456789012345}}})", "0"],
    &["EVAL", r#"return cjson.encode('line\nbreak\t\1')"#, "0"],
    &["EVAL", "return cjson.encode(cjson.null)", "0"],
    &["EVAL", "return cjson.encode(function() end)", "0"],
    &["EVAL", "return cjson.encode(1/0)", "0"],
    &["EVAL", "return cjson.encode(redis.call('HGETALL', 'nosuch'))", "0"],
    &[
        "EVAL",
        "local t = cjson.decode(ARGV[1]) return {t.a, t.b[2], t.b[3], tostring(t.c == cjson.null), type(t.d), t.e}",
        "0",
        r#"{"a":1,"b":[1,"two",3.5],"c":null,"d":{},"e":"\u00e9"}"#,
    ],
    &["EVAL", "return cjson.decode('[1,2,3]')[3]", "0"],
    &["EVAL", "return cjson.encode(cjson.decode(ARGV[1]))", "0", "[[1,2],[3,[4,[5]]]]"],
    &["EVAL", "cjson.foo = 1", "0"],
    &["EVAL", "return {bit.band(0xff, 0x0f), bit.bor(1, 2, 4), bit.bxor(3, 1), bit.bnot(0), bit.lshift(1, 31), bit.rshift(-1, 28), bit.arshift(-16, 2)}", "0"],
    &["EVAL", "return {bit.tobit(4294967295), bit.tobit(2^32 + 5), bit.rol(1, 33), bit.ror(1, 1), bit.bswap(0x12345678)}", "0"],
    &["EVAL", "return {bit.tohex(255), bit.tohex(-1, -4), bit.tohex(0x1234, 2), bit.tohex(2.5)}", "0"],
    &["EVAL", "bit.band = nil", "0"],
    // Redis's bundled cmsgpack (lua-cmsgpack 0.4.0) and struct libraries: every integer and
    // string width, floats, arrays against maps, the nesting limit, a table holding itself,
    // unpack_one and unpack_limit, truncated and malformed input, each struct option with
    // both byte orders and alignment, and their error texts.
    &["EVAL", r#"return cmsgpack.pack(1, -1, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296, -32, -33, -128, -129, -32768, -32769, -2147483648, -2147483649)"#, "0"],
    &["EVAL", r#"return cmsgpack.pack(0.5, 1.1, 1e300, -0.0, 1/0, -1/0, 2^63, -2^63, 2^53+1)"#, "0"],
    &["EVAL", r#"return cmsgpack.pack('', 'abc', string.rep('x', 31), string.rep('y', 32), string.rep('z', 256), string.rep('w', 65536))"#, "0"],
    &["EVAL", r#"return cmsgpack.pack({1,2,3}, {}, {a=1}, {[1]=1,[3]=3}, {1,{2,{3}}}, true, false, nil)"#, "0"],
    &["EVAL", r#"return cmsgpack.pack({x={y={z={1,2,3}}}, n=5, s='t'})"#, "0"],
    &["EVAL", r#"local t = {} t[1] = t return cmsgpack.pack(t)"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack(cmsgpack.pack(1, 'a', {1,2,{3}}, {k='v'}, true))}"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)}"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)}"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 1)}"#, "0"],
    &["EVAL", r#"return cmsgpack.unpack('\205')"#, "0"],
    &["EVAL", r#"return cmsgpack.unpack('\193')"#, "0"],
    &["EVAL", r#"return cmsgpack.unpack_one('abc', 9)"#, "0"],
    &["EVAL", r#"return cmsgpack.unpack_one('abc', -1)"#, "0"],
    &["EVAL", r#"return cmsgpack.pack()"#, "0"],
    &["EVAL", r#"return cmsgpack.unpack()"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack('\207\255\255\255\255\255\255\255\255', '\211\128\0\0\0\0\0\0\0')}"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack('\202\63\192\0\0\203\63\241\153\153\153\153\153\154')}"#, "0"],
    &["EVAL", r#"return cmsgpack._VERSION"#, "0"],
    &["EVAL", r#"return struct.pack('>i', 1)"#, "0"],
    &["EVAL", r#"return struct.pack('<h H b B l L T', -2, 65535, -1, 255, -3, 7, 9)"#, "0"],
    &["EVAL", r#"return struct.pack('!4 b i b d', 1, 2, 3, 1.5)"#, "0"],
    &["EVAL", r#"return struct.pack('i3 I5 i16', -1, 12345, -5)"#, "0"],
    &["EVAL", r#"return struct.pack('c5 s c0', 'hello', 'zero', 'whole')"#, "0"],
    &["EVAL", r#"return struct.pack('f d', 1.1, 1.1)"#, "0"],
    &["EVAL", r#"return {struct.unpack('>i <h b B', struct.pack('>i <h b B', -7, -300, -1, 200))}"#, "0"],
    &["EVAL", r#"return {struct.unpack('i3 I5 i16', struct.pack('i3 I5 i16', -1, 12345, -5))}"#, "0"],
    &["EVAL", r#"return {struct.unpack('s c3', 'abc\0defgh')}"#, "0"],
    &["EVAL", r#"return {struct.unpack('b c0', struct.pack('b c0', 3, 'xyz'))}"#, "0"],
    &["EVAL", r#"return {struct.unpack('i', struct.pack('i i', 1, 2), 5)}"#, "0"],
    &["EVAL", r#"return {struct.unpack('f d', struct.pack('f d', 1.1, 1.1))}"#, "0"],
    &["EVAL", r#"return struct.size('!8 b d i c3 x')"#, "0"],
    &["EVAL", r#"return struct.size('s')"#, "0"],
    &["EVAL", r#"return struct.size('c0')"#, "0"],
    &["EVAL", r#"return struct.size('bzq')"#, "0"],
    &["EVAL", r#"return struct.pack('z', 1)"#, "0"],
    &["EVAL", r#"return struct.pack('i33', 1)"#, "0"],
    &["EVAL", r#"return struct.pack('!3 i', 1)"#, "0"],
    &["EVAL", r#"return struct.pack('c5', 'abc')"#, "0"],
    &["EVAL", r#"return struct.pack('i', 'x')"#, "0"],
    &["EVAL", r#"return struct.unpack('i', 'ab')"#, "0"],
    &["EVAL", r#"return struct.unpack('s', 'abc')"#, "0"],
    &["EVAL", r#"return struct.unpack('c0', 'abc')"#, "0"],
    &["EVAL", r#"return struct.pack()"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack(cmsgpack.pack({[1]='a',[2]='b',x=1}))}"#, "0"],
    &["EVAL", r#"return cmsgpack.pack({[1.5]=1})"#, "0"],
    &["EVAL", r#"return cmsgpack.pack({[2]=1})"#, "0"],
    &["EVAL", r#"return cmsgpack.pack({[1]=1, [2]=nil, [3]=3})"#, "0"],
    &["EVAL", r#"return cmsgpack.pack(function() end, cjson.null)"#, "0"],
    &["EVAL", r#"return {cmsgpack.unpack(cmsgpack.pack(0.1, 2^40, -2^40))}"#, "0"],
    &["EVAL", r#"return {struct.unpack('>I2 <i8', struct.pack('>I2 <i8', 513, -2))}"#, "0"],
    &["EVAL", r#"return {struct.unpack('!8 b d', struct.pack('!8 b d', 1, 2.5))}"#, "0"],
    &["EVAL", r#"return struct.pack('b', 2^70)"#, "0"],
    &["EVAL", r#"return struct.pack('B', -1)"#, "0"],
    &["EVAL", r#"return {struct.unpack('xxb', '\1\2\3')}"#, "0"],
    &["EVAL", r#"return struct.pack('s', 'a\0b')"#, "0"],
    &["EVAL", r#"return struct.pack('I', 3000000000)"#, "0"],
    &["EVAL", r#"return {struct.unpack('I4', '\255\255\255\255')}"#, "0"],
    // The RESP3 types a script may return, as a RESP2 connection (and REST) reads them;
    // each returned [] before (issue 28's review).
    &["EVAL", "return {double=3.5}", "0"],
    &["EVAL", "return {double=0.1}", "0"],
    &["EVAL", "return {double=3}", "0"],
    &["EVAL", "return {double=1e300}", "0"],
    &["EVAL", "return {double=1/0}", "0"],
    &["EVAL", "return {double=-1/0}", "0"],
    &["EVAL", "return {double=0/0}", "0"],
    &["EVAL", "return {double='1.5'}", "0"],
    &["EVAL", "return {err='x', double=2}", "0"],
    &["EVAL", "return {big_number='123'}", "0"],
    &["EVAL", "return {big_number=12}", "0"],
    &["EVAL", "return {verbatim_string={format='txt',string='hi'}}", "0"],
    &["EVAL", "return {verbatim_string={string='hi'}}", "0"],
    &["EVAL", "return {map={a=1,b='x',c={double=1.5}}}", "0"],
    &["EVAL", "return {map={[1]=2,[2]={1,{map={}}}}}", "0"],
    &["EVAL", "return {map=5}", "0"],
    &["EVAL", "return {set={a=true,b=1,[3]=false}}", "0"],
    &["EVAL", "return {1,{double=2.5},{set={x=true}}}", "0"],
    // redis.setresp(3): redis.call answers in RESP3's Lua types (before, setresp was
    // accepted and did nothing).
    &["ZADD", "z3", "1.5", "m", "2", "n"],
    &["HSET", "h3", "f", "v"],
    &["SADD", "s3", "a"],
    &["EVAL", "redis.setresp(3); return redis.call('hgetall','h3')", "0"],
    &["EVAL", "redis.setresp(3); local r = redis.call('hgetall','h3'); return {type(r.map), r.map.f}", "0"],
    &["EVAL", "redis.setresp(3); local r = redis.call('zscore','z3','m'); return type(r)..tostring(r.double)", "0"],
    &["EVAL", "redis.setresp(3); return type(redis.call('get','nokey'))", "0"],
    &["EVAL", "redis.setresp(3); local r = redis.call('zrange','z3',0,-1,'withscores'); return {type(r[1]), type(r[1][2]), r[1][1], tostring(r[2][2].double)}", "0"],
    &["EVAL", "redis.setresp(3); local r = redis.call('smembers','s3'); return {type(r.set), tostring(r.set.a)}", "0"],
    &["EVAL", "redis.setresp(3); return redis.call('zrange','z3',0,-1,'withscores')", "0"],
    &["EVAL", "redis.setresp(3); return redis.call('mget','nokey','h3')", "0"],
    &["EVAL", "redis.setresp(3); local r = redis.call('set','k3','v'); return {type(r), r.ok}", "0"],
    &["EVAL", "redis.setresp(3); local r = redis.pcall('lpush','h3','x'); return type(r)..tostring(r.err)", "0"],
    &["EVAL", "redis.setresp(3); redis.setresp(2); return type(redis.call('get','nokey'))", "0"],
    &["EVAL", "return type(redis.call('get','nokey'))", "0"],
    &["EVAL", "redis.setresp('3'); return redis.call('zscore','z3','n')", "0"],
    &["EVAL", "redis.setresp(4)", "0"],
    &["EVAL", "redis.setresp()", "0"],
    &["EVAL", "redis.setresp(2, 3)", "0"],
    &["EVAL", "redis.setresp('x')", "0"],
    &["EVAL", "redis.setresp(3) return false", "0"],
    &["EVAL", "redis.setresp(3) return true", "0"],
    &["EVAL", "redis.setresp(3) return {true, false, {map={a=false}}}", "0"],
    &["EVAL", "cmsgpack.pack = nil", "0"],
    &["EVAL", "struct.x = 1", "0"],
];

#[test]
fn scripts_answer_as_redis_does() {
    let Some(mut both) = Both::start("scripting-diff", &[]) else {
        return;
    };
    let Both { t, r, .. } = &mut both;
    for c in CASES.iter().chain(FUNCTION_CASES) {
        assert_eq!(
            functions_sorted(t.cmd_str(c)),
            functions_sorted(r.cmd_str(c)),
            "{c:?}"
        );
    }
}

#[test]
fn function_libraries_survive_a_restart_and_flushall() {
    let dir = TempDir::new("functions-replay");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    let lib = "#!lua name=counter\nredis.register_function('bump', function(keys, args) return redis.call('INCRBY', keys[1], args[1]) end)";
    assert_eq!(c.cmd_str(&["FUNCTION", "LOAD", lib]), Canon::s("counter"));
    assert_eq!(c.cmd_str(&["FCALL", "bump", "1", "n", "5"]), Canon::Int(5));
    // FLUSHALL leaves the libraries, as in Redis.
    c.cmd_str(&["FLUSHALL"]);
    assert_eq!(c.cmd_str(&["FCALL", "bump", "1", "n", "2"]), Canon::Int(2));
    server.kill9();
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd_str(&["GET", "n"]), Canon::s("2"));
    assert_eq!(c.cmd_str(&["FCALL", "bump", "1", "n", "3"]), Canon::Int(5));
    c.cmd_str(&["FUNCTION", "DELETE", "counter"]);
    assert_eq!(server.terminate(), Some(0));
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(
        c.cmd_str(&["FCALL", "bump", "1", "n", "3"]),
        Canon::Err("ERR Function not found".into())
    );
}

#[test]
fn a_script_is_logged_by_its_effects_and_replays() {
    let dir = TempDir::new("scripting-replay");
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    // Writes of all kinds, one of them depending on a random pick and one on time: replay must
    // rebuild what happened, not rerun Lua.
    let script = "redis.call('SET', KEYS[1], ARGV[1], 'EX', 100) \
                  redis.call('SADD', KEYS[2], 'a', 'b', 'c', 'd') \
                  local p = redis.call('SPOP', KEYS[2]) \
                  redis.call('HSET', KEYS[3], 'popped', p, 'time', redis.call('TIME')[1]) \
                  return p";
    let Canon::Str(popped) = c.cmd_str(&["EVAL", script, "3", "k", "set", "h", "v"]) else {
        panic!("the script returns the popped member")
    };
    // A failing script keeps the writes made before the error, as in Redis.
    assert!(c
        .cmd_str(&[
            "EVAL",
            "redis.call('SET', 'before', 1) return redis.call('INCR', KEYS[1])",
            "1",
            "h"
        ])
        .is_err());
    let state = |c: &mut Http| {
        (
            c.cmd_str(&["GET", "k"]),
            c.cmd_str(&["TTL", "k"]),
            c.cmd_str(&["SMEMBERS", "set"]).unordered(),
            c.cmd_str(&["HGETALL", "h"]),
            c.cmd_str(&["GET", "before"]),
        )
    };
    let before = state(&mut c);
    assert_eq!(
        c.cmd_str(&[
            "SISMEMBER",
            "set",
            std::str::from_utf8(&popped).unwrap_or("")
        ]),
        Canon::Int(0)
    );
    assert_eq!(before.4, Canon::s("1"));
    server.kill9();
    let server = Server::start(&data, &[]);
    let mut c = server.client();
    assert_eq!(state(&mut c), before);
    // The script cache is not kept across a restart, as in Redis: NOSCRIPT, then EVAL.
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
    assert_eq!(
        c.cmd_str(&["EVALSHA", sha, "0"]),
        Canon::Err("NOSCRIPT No matching script. Please use EVAL.".into())
    );
}

#[test]
fn tokens_limit_what_scripts_may_do() {
    let dir = TempDir::new("scripting-tokens");
    let server = Server::start(&dir.path().join("data"), &["--script-time-limit-ms", "300"]);
    let mut c = server.client();
    c.cmd_str(&["SET", "k", "v"]);
    let mut ro = Http::connect(&server.addr, RO_TOKEN);
    // The Read Only token runs EVAL_RO (the SDKs' read-only helpers), not EVAL.
    assert_eq!(
        ro.cmd_str(&["EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "k"]),
        Canon::s("v")
    );
    assert!(matches!(
        ro.cmd_str(&["EVAL", "return 1", "0"]),
        Canon::Err(e) if e.starts_with("NOPERM")
    ));
    assert!(matches!(
        ro.cmd_str(&["EVAL_RO", "return redis.call('SET', 'k', 'w')", "0"]),
        Canon::Err(e) if e.contains("commands are not allowed from read-only")
    ));
    // An ACL user's limits hold inside a script too.
    c.cmd_str(&["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all"]);
    let Canon::Str(token) = c.cmd_str(&["ACL", "RESTTOKEN", "app", "pw"]) else {
        panic!("ACL RESTTOKEN answers a token")
    };
    let mut app = Http::connect(&server.addr, std::str::from_utf8(&token).unwrap_or(""));
    assert_eq!(
        app.cmd_str(&["EVAL", "return redis.call('SET', 'app:x', 1)", "0"]),
        Canon::s("OK")
    );
    // In Redis's own words for a refusal inside a script (script.c).
    assert!(matches!(
        app.cmd_str(&["EVAL", "return redis.call('GET', 'k')", "0"]),
        Canon::Err(e) if e.starts_with("ERR The user executing the script can't access at least one of the keys mentioned in the command arguments")
    ));
    // Redis 8's allow-key-locking flag, which @upstash/ratelimit sends, is accepted.
    assert_eq!(
        c.cmd_str(&["EVAL", "#!lua flags=allow-key-locking\nreturn 7", "0"]),
        Canon::Int(7)
    );
    // A script that never ends is stopped at the time limit with an error; the server goes
    // on, and the database's scripts cool down for a while.
    assert!(matches!(
        c.cmd_str(&["EVAL", "while true do end", "0"]),
        Canon::Err(e) if e.contains("stopped the script after 300 ms")
    ));
    assert_eq!(c.cmd_str(&["GET", "k"]), Canon::s("v"));
    assert!(matches!(
        c.cmd_str(&["EVAL", "return 1", "0"]),
        Canon::Err(e) if e.contains("scripts are refused")
    ));
    scripts_cooled(&mut c);
}
