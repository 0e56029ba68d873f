"""The official Python SDK (`upstash-redis` on PyPI) against tidepool, unchanged but for the
base URL and the token. Base64 mode is the SDK's default, so every reply here went through it.
The server comes from the `server` fixture (conftest.py)."""

import hashlib
import time

import pytest
from upstash_redis import Redis
from upstash_redis.errors import UpstashError

TOKEN = "py-token"
RO_TOKEN = "py-read-only"
# For the `server` fixture (conftest.py).
TIDEPOOL_FLAGS = ["--token", TOKEN, "--read-only-token", RO_TOKEN]


@pytest.fixture
def redis(server):
    r = Redis(url=server, token=TOKEN, rest_retries=0)
    r.flushdb()
    return r


def test_strings(redis):
    assert redis.set("k", "v") is True
    assert redis.get("k") == "v"
    assert redis.set("k", "w", get=True) == "v"
    assert redis.set("k", "x", nx=True) is False  # the SDK maps the nil reply to False
    assert redis.incr("n") == 1
    assert redis.incrby("n", 41) == 42
    assert redis.incrbyfloat("f", 0.1) == pytest.approx(0.1)
    assert redis.incrbyfloat("f", 0.2) == pytest.approx(0.3)
    assert redis.get("f") == "0.3"
    assert redis.mset({"a": "1", "b": "2"}) is True
    assert redis.mget("a", "b", "missing") == ["1", "2", None]
    assert redis.append("a", "23") == 3
    assert redis.getrange("a", 0, 1) == "12"
    assert redis.strlen("a") == 3
    assert redis.getdel("a") == "123"
    assert redis.exists("a") == 0
    assert redis.set("unicode", "héllo ✓") is True
    assert redis.get("unicode") == "héllo ✓"


def test_expiry(redis):
    redis.set("t", "v", ex=100)
    assert redis.ttl("t") == 100
    assert 99_000 < redis.pttl("t") <= 100_000
    assert redis.persist("t") is True
    assert redis.ttl("t") == -1
    assert redis.expire("t", 50) is True
    assert redis.ttl("t") == 50
    redis.set("soon", "v", px=50)
    time.sleep(0.2)
    assert redis.get("soon") is None


def test_hashes(redis):
    assert redis.hset("h", values={"f1": "OK", "f2": "7"}) == 2
    assert redis.hgetall("h") == {"f1": "OK", "f2": "7"}
    assert redis.hget("h", "f1") == "OK"
    assert redis.hincrby("h", "f2", 3) == 10
    assert sorted(redis.hkeys("h")) == ["f1", "f2"]
    assert redis.hlen("h") == 2
    assert redis.hdel("h", "f1") == 1
    assert redis.hexists("h", "f1") is False


def test_hash_field_expiration(redis):
    redis.hset("hf", values={"a": "1", "b": "2", "c": "3"})
    assert redis.hexpire("hf", ["a", "zz"], 100) == [1, -2]
    assert redis.httl("hf", ["a", "b"]) == [100, -1]
    assert redis.hpexpire("hf", "a", 300000, gt=True) == [1]
    assert redis.hpersist("hf", ["a", "b"]) == [1, -1]
    assert redis.hsetex("hf", "d", "4", px=60000) == 1
    assert 0 < redis.hpttl("hf", "d")[0] <= 60000
    assert redis.hgetex("hf", "b", "nope", ex=50) == ["2", None]
    assert redis.httl("hf", "b") == [50]
    assert redis.hsetex("hf", values={"x": "1"}, fxx=True) == 0
    redis.hpexpire("hf", "c", 50)
    time.sleep(0.3)
    assert redis.hget("hf", "c") is None
    assert sorted(redis.hkeys("hf")) == ["a", "b", "d"]


def test_stream_deletion_policies(redis):
    for i in (1, 2, 3):
        redis.xadd("xs", f"{i}-0", {"f": str(i)})
    redis.xgroup_create("xs", "g", "0")
    redis.xreadgroup("g", "c", {"xs": ">"}, count=2)
    # 3-0 is not pending (never read): deleted all the same, as the hosted service does.
    assert redis.xackdel("xs", "g", "1-0", "3-0", "9-0") == [1, 1, -1]
    assert redis.xdelex("xs", "2-0", option="ACKED") == [2]
    assert redis.xdelex("xs", "2-0", option="DELREF") == [1]
    assert redis.xlen("xs") == 0


def test_scripts(redis):
    script = "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return c"
    assert redis.eval(script, keys=["hits"], args=["60000"]) == 1
    sha = redis.script_load(script)
    assert sha == hashlib.sha1(script.encode()).hexdigest()
    assert redis.script_exists(sha, "0" * 40) == [1, 0]
    assert redis.evalsha(sha, keys=["hits"], args=["60000"]) == 2
    assert redis.eval_ro("return redis.call('GET', KEYS[1])", keys=["hits"]) == "2"
    with pytest.raises(Exception, match="NOSCRIPT"):
        redis.evalsha("f" * 40)


def test_json_documents(redis):
    doc = {"name": "ada", "langs": ["en"], "stats": {"visits": 1, "score": 2.5}, "active": True}
    assert redis.json.set("user:1", "$", doc) is True
    assert redis.json.get("user:1") == [doc]
    assert redis.json.get("user:1", "$.stats.visits", "$.name") == {
        "$.stats.visits": [1], "$.name": ["ada"]}
    # Under a missing parent: an error, as the hosted service answers (the SDK suite's
    # test_set_nonexisting_path); RedisJSON would answer nil.
    with pytest.raises(UpstashError, match="missing key at non-terminal path level"):
        redis.json.set("user:1", "$.missing.deep", 1)
    assert redis.json.set("user:1", "$.missing", 1, xx=True) is False  # the nil reply
    assert redis.json.numincrby("user:1", "$.stats.visits", 2) == [3]
    assert redis.json.nummultby("user:1", "$.stats.score", 2) == [5.0]
    assert redis.json.strappend("user:1", "$.name", " lovelace") == [12]
    assert redis.json.strlen("user:1", "$.name") == [12]
    assert redis.json.arrappend("user:1", "$.langs", "fr", 7) == [3]
    assert redis.json.arrinsert("user:1", "$.langs", 0, "de") == [4]
    assert redis.json.arrindex("user:1", "$.langs", "fr") == [2]
    assert redis.json.arrlen("user:1", "$.langs") == [4]
    assert redis.json.arrpop("user:1", "$.langs") == [7]
    assert redis.json.arrtrim("user:1", "$.langs", 0, 1) == [2]
    assert redis.json.toggle("user:1", "$.active") == [False]
    assert redis.json.type("user:1", "$.stats") == ["object"]
    assert redis.json.objkeys("user:1", "$.stats") == [["visits", "score"]]
    assert redis.json.objlen("user:1", "$") == [4]
    assert redis.json.merge("user:1", "$", {"active": None, "tags": ["x"]}) is True
    assert redis.json.mset([("user:2", "$", {"name": "bob"}), ("user:1", "$.age", 36)]) is True
    assert redis.json.mget(["user:1", "user:2", "nobody"], "$.name") == [
        ["ada lovelace"], ["bob"], None]
    assert redis.json.clear("user:1", "$.stats") == 1
    assert redis.json.delete("user:1", "$.tags") == 1
    assert redis.json.forget("user:2") == 1
    assert redis.json.get("user:1") == [
        {"name": "ada lovelace", "langs": ["de", "en"], "stats": {}, "age": 36}]
    assert redis.type("user:1") == "json"
    with pytest.raises(UpstashError, match="new objects must be created at the root"):
        redis.json.set("user:3", "$.name", "x")
    redis.set("plain", "v")
    with pytest.raises(UpstashError, match="WRONGTYPE"):
        redis.json.get("plain")
    pipe = redis.pipeline()
    pipe.json.set("p", "$", [1, 2])
    pipe.json.arrappend("p", "$", 3)
    pipe.json.get("p")
    assert pipe.exec() == [True, [3], [[1, 2, 3]]]


def test_keyspace(redis):
    redis.mset({"a1": "x", "a2": "y", "b1": "z"})
    assert sorted(redis.keys("a*")) == ["a1", "a2"]
    cursor, keys = redis.scan(0, match="*1", count=100)
    assert cursor == 0 and sorted(keys) == ["a1", "b1"]
    assert redis.type("a1") == "string"
    assert redis.rename("a1", "c1") is True
    assert redis.dbsize() == 3
    assert redis.delete("a2", "b1", "nope") == 2


def test_where_the_hosted_service_differs_from_redis(redis):
    """Issue 18: answers the SDK's own test suite holds the hosted service to."""
    # A MATCH over a small keyspace answers in one call (the SDK suite's `scan(0, match="hash")`):
    # COUNT bounds the keys answered, not the keys examined (issue 24).
    redis.mset({f"k{i}": "v" for i in range(30)})
    redis.hset("hash", "f", "v")
    assert tuple(redis.scan(0, match="hash")) == (0, ["hash"])
    assert tuple(redis.scan(0, type="hash")) == (0, ["hash"])
    # COPY onto itself is "not copied", not an error.
    assert redis.copy("hash", "hash") is False
    # ZRANGE by rank pages with offset and count.
    redis.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert redis.zrange("z", 0, -1, offset=1, count=1) == ["b"]


def test_streams_where_the_hosted_service_differs_from_redis(redis):
    """Issue 18: the SDK suite's stream tests, as the hosted service answers them."""
    first = redis.xadd("s", "*", {"f": "1"})
    redis.xadd("s", "*", {"f": "2"})
    redis.xgroup_create("s", "g", "0")
    # A group that does not exist has no consumers (Redis: NOGROUP).
    assert redis.xinfo_consumers("s", "nosuch") == []
    # NOACK leaves nothing pending.
    redis.xreadgroup("g", "c", {"s": ">"}, count=1, noack=True)
    assert redis.xpending("s", "g")[0] == 0
    # XACKDEL of an entry already acknowledged deletes it (Redis: -1, kept).
    redis.xack("s", "g", first)
    assert redis.xackdel("s", "g", first) == [1]
    assert redis.xlen("s") == 1
    # HEXPIREAT with milliseconds where seconds are meant is accepted.
    redis.hset("h", values={"f": "v"})
    assert redis.hexpireat("h", "f", int(time.time() * 1000) + 1000) == [1]
    assert redis.hget("h", "f") == "v"


def test_pipeline_and_transaction(redis):
    p = redis.pipeline()
    p.set("p", "1")
    p.incr("p")
    p.get("p")
    assert p.exec() == [True, 2, "2"]
    tx = redis.multi()
    tx.set("t", "a")
    tx.append("t", "b")
    tx.get("t")
    assert tx.exec() == [True, 2, "ab"]


def test_errors_raise(redis):
    redis.set("s", "text")
    with pytest.raises(UpstashError, match="ERR value is not an integer or out of range"):
        redis.incr("s")
    with pytest.raises(UpstashError, match="WRONGTYPE"):
        redis.hget("s", "f")


def test_read_your_writes_token_moves(redis):
    before = redis._sync_token
    redis.set("ryw", "1")
    after = redis._sync_token
    assert after and after != before


def test_read_only_token(server, redis):
    redis.set("ro", "v")
    ro = Redis(url=server, token=RO_TOKEN, rest_retries=0)
    assert ro.get("ro") == "v"
    with pytest.raises(UpstashError, match="NOPERM"):
        ro.set("ro", "w")


def test_wrong_token_is_a_clean_error(server):
    bad = Redis(url=server, token="nope", rest_retries=0)
    with pytest.raises(UpstashError, match="WRONGPASS"):
        bad.get("x")
