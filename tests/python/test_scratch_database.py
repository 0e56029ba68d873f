"""Scratch databases (`POST /start`): created with no credentials, used with the official
Python SDK by running the quickstart the answer's own Markdown holds, expired after the
(shortened) lifetime, and then refused with 401."""

import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

TIDEPOOL_FLAGS = ["--scratch-ttl", "3s", "--start-per-hour", "2"]


def post(url):
    req = urllib.request.Request(url, method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers.get("content-type"), r.read().decode()


def test_scratch_database_from_its_own_quickstart(server):
    status, ctype, doc = post(server + "/start")
    assert status == 201
    assert ctype.startswith("text/markdown")
    assert "expires at" in doc
    url = re.search(r'UPSTASH_REDIS_REST_URL="([^"]+)"', doc).group(1)
    token = re.search(r'UPSTASH_REDIS_REST_TOKEN="([^"]+)"', doc).group(1)
    assert url == server
    # The Python quickstart, exactly as the document gives it.
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "world"

    # The curl line works as written too (same URL and token).
    req = urllib.request.Request(url + "/get/hello", headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.read() == b'{"result":"world"}'

    # Past its lifetime the database is gone and its token answers 401.
    deadline = time.time() + 20
    while True:
        try:
            with urllib.request.urlopen(req, timeout=10):
                pass
        except urllib.error.HTTPError as e:
            assert e.code == 401
            assert "WRONGPASS" in e.read().decode()
            break
        assert time.time() < deadline, "the scratch database never expired"
        time.sleep(0.2)


def test_scratch_databases_are_rate_limited_per_client(server):
    # The first test made one; one more is allowed this hour, then 429.
    assert post(server + "/start")[0] == 201
    try:
        post(server + "/start")
        raise AssertionError("a third scratch database in the hour was allowed")
    except urllib.error.HTTPError as e:
        assert e.code == 429
        assert "per hour" in e.read().decode()
