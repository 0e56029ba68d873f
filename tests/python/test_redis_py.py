"""redis-py, the most used Redis client, against tidepool's RESP listener: transactions with
WATCH (broken by a REST write), pub/sub, blocking pops woken from REST, RESP3, and the
counts in /metrics."""

import os
import threading
import time
import urllib.request

import pytest
import redis
from upstash_redis import Redis as Rest

TOKEN = "redis-py-token"
TIDEPOOL_FLAGS = ["--token", TOKEN, "--resp-listen", "127.0.0.1:0", "--metrics-open"]
RESP_PORT = None  # set by the fixture


@pytest.fixture
def r(server):
    c = redis.Redis(host="127.0.0.1", port=RESP_PORT, password=TOKEN, decode_responses=True)
    yield c
    c.close()


def test_values_cross_between_the_protocols(server, r):
    rest = Rest(url=server, token=TOKEN)
    rest.set("from-rest", "1")
    assert r.get("from-rest") == "1"
    r.hset("from-resp", mapping={"a": "1", "b": "2"})
    assert rest.hgetall("from-resp") == {"a": "1", "b": "2"}
    assert r.incrbyfloat("f", 1.5) == 1.5
    assert r.ping() is True


def test_watch_is_broken_by_a_rest_write(server, r):
    rest = Rest(url=server, token=TOKEN)
    r.set("balance", 10)

    def spend(pipe):
        current = int(pipe.get("balance"))
        pipe.multi()
        pipe.set("balance", current - 1)

    assert r.transaction(spend, "balance") == [True]
    assert r.get("balance") == "9"
    with r.pipeline() as p:
        p.watch("balance")
        rest.set("balance", 100)
        p.multi()
        p.set("balance", 0)
        with pytest.raises(redis.WatchError):
            p.execute()
    assert r.get("balance") == "100"
    # A plain pipeline: many commands in one write.
    with r.pipeline(transaction=False) as p:
        for i in range(100):
            p.rpush("many", i)
        assert p.execute()[-1] == 100


def test_blocking_pops_are_woken_by_rest_writes(server, r):
    rest = Rest(url=server, token=TOKEN)
    threading.Timer(0.3, lambda: rest.rpush("jobs", "j1")).start()
    started = time.time()
    assert r.blpop(["jobs"], timeout=5) == ("jobs", "j1")
    assert time.time() - started >= 0.2
    assert r.blpop(["jobs"], timeout=0.2) is None
    threading.Timer(0.3, lambda: rest.zadd("prio", {"m": 2})).start()
    assert r.bzpopmin("prio", timeout=5) == ("prio", "m", 2.0)
    xid = None

    def add():
        nonlocal xid
        xid = r2.xadd("events", {"k": "v"})

    r2 = redis.Redis(host="127.0.0.1", port=RESP_PORT, password=TOKEN, decode_responses=True)
    t = threading.Timer(0.3, add)
    t.start()
    got = r.xread({"events": "$"}, block=5000)
    t.join()
    assert got == [["events", [(xid, {"k": "v"})]]]
    r2.close()


def test_pubsub_hears_rest_publishes(server, r):
    rest = Rest(url=server, token=TOKEN)
    p = r.pubsub()
    p.subscribe("news")
    p.psubscribe("n*")
    assert p.get_message(timeout=2)["type"] == "subscribe"
    assert p.get_message(timeout=2)["type"] == "psubscribe"
    # Through a cluster's follower, PUBLISH goes to the leader and counts the leader's own
    # subscribers, as Redis's primary does (docs/replication.md); these hear it all the same.
    want = 0 if os.environ.get("TIDEPOOL_CLUSTER") == "follower" else 2
    assert rest.publish("news", "hello") == want
    got = [p.get_message(timeout=2) for _ in range(2)]
    assert {(m["type"], m["data"]) for m in got} == {("message", "hello"), ("pmessage", "hello")}
    p.close()


def test_resp3(server):
    c = redis.Redis(host="127.0.0.1", port=RESP_PORT, password=TOKEN, protocol=3,
                    decode_responses=True)
    c.hset("h3", mapping={"f": "v"})
    assert c.hgetall("h3") == {"f": "v"}
    c.zadd("z3", {"a": 1.5})
    assert c.zscore("z3", "a") == 1.5
    assert c.zrange("z3", 0, -1, withscores=True) == [["a", 1.5]]
    assert c.smembers("nothing") == set()
    assert c.get("missing") is None
    # XREAD answers a map in RESP3, which redis-py reads as a dict.
    # The same answers redis-server 7.0 gives redis-py in RESP3.
    xid = c.xadd("s3", {"a": "1"})
    assert c.xread({"s3": "0"}) == {"s3": [[(xid, {"a": "1"})]]}
    assert c.zpopmin("z3") == ["a", 1.5]
    assert c.hrandfield("h3", 1, withvalues=True) == [["f", "v"]]
    c.close()


def test_metrics_count_resp_connections_and_commands(server, r):
    r.set("m", 1)
    with urllib.request.urlopen(server + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    opened = [l for l in text.splitlines() if l.startswith("tidepool_resp_connections_opened_total ")]
    commands = [l for l in text.splitlines() if l.startswith("tidepool_resp_commands_total ")]
    assert opened and float(opened[0].split()[1]) >= 1
    assert commands and float(commands[0].split()[1]) >= 1
