#!/usr/bin/env python3
"""Writes src/command/redis-7.0-key-specs.json from a running redis-server 7.0's COMMAND reply:
every command's (and subcommand's) key specifications, as Redis finds keys for ACL checks.

    redis-server --port 6399 --save '' --daemonize yes
    python3 tools/gen-key-specs.py 6399 > src/command/redis-7.0-key-specs.json
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_reply import request  # noqa: E402

port = int(sys.argv[1]) if len(sys.argv) > 1 else 6379


def pairs(items):
    return {items[i]: items[i + 1] for i in range(0, len(items), 2)}


def part(p):
    p = pairs(p)
    spec = p["spec"]
    return {p["type"]: pairs(spec) if isinstance(spec, list) else {}}


def spec(raw):
    d = pairs(raw)
    return {
        "flags": [x.upper() for x in d["flags"]],
        "begin_search": part(d["begin_search"]),
        "find_keys": part(d["find_keys"]),
    }


out = {}


def walk(c):
    out[c[0]] = [spec(x) for x in (c[8] if len(c) > 8 else [])]
    for sub in (c[9] if len(c) > 9 and c[9] else []):
        walk(sub)


for c in request(port, "COMMAND"):
    walk(c)
json.dump(out, sys.stdout, sort_keys=True, separators=(",", ":"))
print()
