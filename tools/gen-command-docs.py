#!/usr/bin/env python3
"""Writes src/command/redis-7.0-command-docs.json from a running redis-server 7.0's COMMAND DOCS
reply: every command's documentation with its arguments (names, types, tokens, flags, nested
arguments), its history and its subcommands, so that COMMAND DOCS (and the console's
completion) answers what Redis answers.

    redis-server --port 6399 --save '' --daemonize yes
    python3 tools/gen-command-docs.py 6399 > src/command/redis-7.0-command-docs.json

The reply is kept as it came, typed: a bulk string is a JSON string, an integer a JSON
number, an array a JSON list, and a status reply (RESP2's `+deprecated` in doc_flags and
`+optional` in an argument's flags) is {"status": text}. Commands are keyed by name.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_reply import request  # noqa: E402

port = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
flat = request(port, "COMMAND", "DOCS", status=lambda text: {"status": text})
docs = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
json.dump(dict(sorted(docs.items())), sys.stdout, separators=(",", ":"))
sys.stdout.write("\n")
