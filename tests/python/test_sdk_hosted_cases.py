"""The official upstash-redis suite's own cases where the hosted service answers differently
from Redis (issue 24), run with the SDK against tidepool. Each test is named after the SDK
test it stands for (file, then test) and runs that test's documents, calls and assertions;
the SDK package ships without its tests, so they are written out here.

The JSONPath rule they hold: recursive descent (`$..name`) lists every match found inside a
member's value before the match at the member's own level, members in document order; a
command that changes matches changes them in that order."""

import pytest
from upstash_redis import Redis
from upstash_redis.errors import UpstashError

TOKEN = "py-hosted-token"
# For the `server` fixture (conftest.py).
TIDEPOOL_FLAGS = ["--token", TOKEN]


@pytest.fixture
def redis(server):
    r = Redis(url=server, token=TOKEN, rest_retries=0)
    r.flushdb()
    return r


def setup_pipeline(redis):
    """The suite's conftest.py: the keyspace its SCAN tests run over."""
    strings = [
        "string", "string_for_bitfield_set", "string_for_bitfield_incrby",
        "string_for_bitfield_chained_commands", "string_for_bitfield_overflow",
        "string_as_bitop_source_1", "string_as_bitop_source_2",
        "string_as_copy_destination_with_replace", "string_for_delete_1", "string_for_delete_2",
        "string_for_rename", "string_for_renamenx", "string_for_expire", "string_for_expireat",
        "string_for_pexpire", "string_for_pexpireat", "string_for_expire_dt",
        "string_for_expireat_dt", "string_for_pexpire_dt", "string_for_pexpireat_dt",
        "string_without_expire", "string_for_persist", "string_for_ttl", "string_for_pttl",
        "string_for_unlink_1", "string_for_unlink_2",
    ]
    p = redis.pipeline()
    p.flushdb()
    p.mset({k: "a" for k in strings})
    p.hset("hash", values={"field_1": "test_1", "field_2": "test_2"})
    p.lpush("list", "element_1", "element_2")
    p.sadd("set", "test_set_value_1", "test_set_value_2")
    p.zadd("sorted_set", {"member_1": 1, "member_2": 2})
    p.geoadd("test_geo_index", (13.361389, 38.115556, "Palermo"),
             (15.087269, 37.502669, "Catania"), (43.486391, -35.283347, "random"))
    p.pfadd("hyperloglog", "element_1", "element_2")
    p.pfadd("hyperloglog_for_pfmerge_1", "1", "2", "3", "4")
    p.pfadd("hyperloglog_for_pfmerge_2", "1", "2", "3")
    p.exec()


# --- SCAN: generic/test_scan.py ---------------------------------------------------------------

def test_scan__test(redis):
    setup_pipeline(redis)
    result = redis.scan(cursor=0)
    assert isinstance(result[0], int) and isinstance(result[1], list)


def test_scan__test_with_match(redis):
    setup_pipeline(redis)
    assert tuple(redis.scan(cursor=0, match="hash")) == (0, ["hash"])


def test_scan__test_with_count(redis):
    setup_pipeline(redis)
    assert len(redis.scan(cursor=0, count=1)) == 2


def test_scan__test_with_scan_type(redis):
    setup_pipeline(redis)
    assert redis.scan(cursor=0, type="hash")[1] == ["hash"]


def test_scan__test_scan_multiple_times(redis):
    setup_pipeline(redis)
    cursor, keys = redis.scan(cursor=0, count=1)
    assert cursor != 0
    assert len(keys) == 1
    cursor, keys = redis.scan(cursor=cursor, count=1)
    assert cursor != 0
    assert len(keys) == 1


# --- Approximate trimming: stream/test_xlen.py -------------------------------------------------

def test_xlen__test_xlen_after_trimming(redis):
    for i in range(130):
        redis.xadd("mystream", "*", {"field": f"value{i}"})
    assert redis.xlen("mystream") == 130
    trimmed = redis.xtrim("mystream", maxlen=5)
    assert trimmed >= 0
    assert redis.xlen("mystream") == 5


# --- JSONPath wildcards and a missing parent: json/ ----------------------------------------------

WIDE = {"int": 1, "array": [1, 2, 3, 4], "object": {"array": [1, 2, 3]}}


def test_json_arrappend__test_arrappend_wildcard(redis):
    key = "json_arrappend"
    redis.json.set(key, "$", {"int": 1, "array": [], "object": {"array": [1]}})
    assert redis.json.arrappend(key, "$..array", 9) == [2, 1]
    assert redis.json.get(key, "$..array") == [[1, 9], [9]]


def test_json_arrindex__test_arrindex_wildcard(redis):
    key = "json_arrindex"
    redis.json.set(key, "$", {"array": [1, "test", ["a"], 1.5, {"test": 1}], "int": 1,
                              "object": {"array": [0, 1]}})
    assert redis.json.arrindex(key, "$..array", 1) == [1, 0]


def test_json_arrinsert__test_arrinsert_wildcard(redis):
    key = "json_arrinsert"
    redis.json.set(key, "$", {"int": 1, "array": [], "object": {"array": [0]}})
    assert redis.json.arrinsert(key, "$..array", 0, 9) == [2, 1]
    assert redis.json.get(key, "$..array") == [[9, 0], [9]]


def test_json_arrlen__test_arrlen_wildcard(redis):
    key = "json_arrlen"
    redis.json.set(key, "$", {"array": [1, 2, 3, 4], "int": 1, "object": {"array": [1, 2, 3]}})
    assert redis.json.arrlen(key, "$..array") == [3, 4]


def test_json_arrpop__test_arrpop_wildcard(redis):
    key = "json_arrpop"
    redis.json.set(key, "$", {"int": 1, "array": [1, 2, 3, 4], "object": {"array": [5, 6, 7]}})
    assert redis.json.arrpop(key, "$..array", 1) == [6, 2]
    assert redis.json.get(key, "$..array") == [[5, 7], [1, 3, 4]]


def test_json_arrtrim__test_arrtrim_wildcard(redis):
    key = "json_arrtrim"
    redis.json.set(key, "$", {"int": 1, "array": [1, 2, 3, 4], "object": {"array": [5, 6, 7]}})
    assert redis.json.arrtrim(key, "$..array", 0, 1) == [2, 2]
    assert redis.json.get(key, "$..array") == [[5, 6], [1, 2]]


def test_json_clear__test_clear_wildcard(redis):
    key = "json_clear"
    redis.json.set(key, "$", WIDE)
    assert redis.json.clear(key, "$..array") == 2
    assert redis.json.get(key) == [{"int": 1, "object": {"array": []}, "array": []}]


def test_json_delete__test_delete_wildcard(redis):
    key = "json_delete"
    redis.json.set(key, "$", WIDE)
    assert redis.json.delete(key, "$..array") == 2
    assert redis.json.get(key) == [{"int": 1, "object": {}}]


def test_json_forget__test_forget_wildcard(redis):
    key = "json_forget"
    redis.json.set(key, "$", WIDE)
    assert redis.json.forget(key, "$..array") == 2
    assert redis.json.get(key) == [{"int": 1, "object": {}}]


def test_json_get__test_get_wildcard(redis):
    key = "json_get"
    redis.json.set(key, "$", WIDE)
    assert redis.json.get(key, "$..array") == [[1, 2, 3], [1, 2, 3, 4]]


def test_json_merge__test_merge_wildcard(redis):
    key = "json_merge"
    redis.json.set(key, "$", WIDE)
    assert redis.json.merge(key, "$..array", [2, 2, 3, 4]) is True
    assert redis.json.get(key) == [
        {"int": 1, "array": [2, 2, 3, 4], "object": {"array": [2, 2, 3, 4]}}
    ]


def test_json_mget__test_mget_wildcard(redis):
    redis.json.set("json_mget_1", "$",
                   {"int": 1, "array": [1, 2, 3, 4], "object": {"array": [1, 2, 3]}})
    redis.json.set("json_mget_2", "$",
                   {"int": 2, "array": [2, 2, 3, 4], "object": {"array": [2, 2, 3]}})
    assert redis.json.mget(["json_mget_1", "json_mget_2"], "$..array") == [
        [[1, 2, 3], [1, 2, 3, 4]],
        [[2, 2, 3], [2, 2, 3, 4]],
    ]


def test_json_numincrby__test_numincrby_wildcard(redis):
    key = "json_numincrby"
    redis.json.set(key, "$", {"int": 1, "str": "test", "object": {"int": 2}})
    assert redis.json.numincrby(key, "$..int", 1) == [3, 2]
    assert redis.json.get(key, "$..int") == [3, 2]


def test_json_nummultby__test_nummultby_wildcard(redis):
    key = "json_nummultby"
    redis.json.set(key, "$", {"int": 2, "str": "test", "object": {"int": 3}})
    assert redis.json.nummultby(key, "$..int", 3) == [9, 6]
    assert redis.json.get(key, "$..int") == [9, 6]


OBJECTS = {"int": 2, "str": "test", "object": {"int": 3},
           "second_object": {"object": {"str": "test", "int": 2}}}


def test_json_objkeys__test_objkeys_wildcard(redis):
    key = "json_objkeys"
    redis.json.set(key, "$", OBJECTS)
    response = redis.json.objkeys(key, "$..object")
    for i in response:
        assert i is not None
        i.sort()
    response.sort()
    assert response == [["int"], ["int", "str"]]


def test_json_objlen__test_objlen_wildcard(redis):
    key = "json_objlen"
    redis.json.set(key, "$", OBJECTS)
    assert redis.json.objlen(key, "$..object") == [2, 1]


def test_json_set__test_set_nonexisting_path(redis):
    key = "json_set"
    assert redis.json.set(key, "$", {"int": 1}) is True
    assert redis.json.get(key) == [{"int": 1}]
    with pytest.raises(UpstashError):
        redis.json.set(key, "$.nonexisting_key.str", "test")


def test_json_set__test_set_wildcard(redis):
    key = "json_set"
    assert redis.json.set(key, "$", {"int": 1, "obj": {"int": 3}}) is True
    assert redis.json.get(key) == [{"int": 1, "obj": {"int": 3}}]
    assert redis.json.set(key, "$..int", 2) is True
    assert redis.json.get(key) == [{"int": 2, "obj": {"int": 2}}]


def test_json_strappend__test_strappend_wildcard(redis):
    key = "json_strappend"
    redis.json.set(key, "$", {"str": "test", "obj": {"str": "test_1"}})
    assert redis.json.strappend(key, "$..str", "_append") == [13, 11]
    assert redis.json.get(key, "$..str") == ["test_1_append", "test_append"]


def test_json_strlen__test_strlen_wildcard(redis):
    key = "json_strlen"
    redis.json.set(key, "$", {"str": "test", "obj": {"str": "test_1"}})
    assert redis.json.strlen(key, "$..str") == [6, 4]


def test_json_toggle__test_toggle_wildcard(redis):
    key = "json_toggle"
    redis.json.set(key, "$", {"bool": True, "obj": {"bool": False}})
    assert redis.json.toggle(key, "$..bool") == [True, False]
    assert redis.json.get(key, "$..bool") == [True, False]
    assert redis.json.toggle(key, "$..bool") == [False, True]
    assert redis.json.get(key, "$..bool") == [False, True]


def test_json_type__test_type_wildcard(redis):
    key = "json_type"
    redis.json.set(key, "$", {"number": 1, "array": [1, 2, 3, 4], "object": {"number": 3.1415},
                              "str": "test", "bool": True, "null": None})
    assert redis.json.type(key, "$..number") == ["number", "integer"]
