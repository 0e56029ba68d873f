"""`tidepool serve --dev`: the QStash dev server's four public test users, each answered with
its own keys and its deliveries signed with them (checked by the SDK's own `Receiver`), and
the fixed Redis token, for the official SDKs unchanged."""

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from qstash import QStash, Receiver
from upstash_redis import Redis

TIDEPOOL_FLAGS = ["--dev"]

# qstash-compat.md section 17.2.
USERS = [
    ("eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=",
     "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r", "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs"),
    ("eyJVc2VySUQiOiJ0ZXN0VXNlcjEiLCJQYXNzd29yZCI6InRlc3RQYXNzd29yZCJ9",
     "sig_7GVPjvuwsfqF65iC8fSrs1dfYruM", "sig_5NoELc3EFnZn4DVS5bDs2Nk4b7Ua"),
    ("eyJVc2VySUQiOiJ0ZXN0VXNlcjIiLCJQYXNzd29yZCI6InRlc3RQYXNzd29yZCJ9",
     "sig_6jWGaWRxHsw4vMSPJprXadyvrybF", "sig_7qHbvhmahe5GwfePDiS5Lg3pi6Qx"),
    ("eyJVc2VySUQiOiJ0ZXN0VXNlcjMiLCJQYXNzd29yZCI6InRlc3RQYXNzd29yZCJ9",
     "sig_5T8FcSsynBjn9mMLBsXhpacRovJf", "sig_7GFR4YaDshFcqsxWRZpRB161jguD"),
]


@pytest.fixture(scope="module")
def sink():
    got = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                got.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", got, lock
    httpd.shutdown()


def test_each_dev_user_has_its_keys_and_its_signatures(server, sink):
    base, got, lock = sink
    for i, (token, current, nxt) in enumerate(USERS):
        req = urllib.request.Request(server + "/v2/keys", headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read()) == {"current": current, "next": nxt}
        url = f"{base}/user{i}"
        QStash(token, base_url=server).message.publish_json(url=url, body={"user": i})
        deadline = time.time() + 20
        while True:
            with lock:
                hit = [g for g in got if g[0] == f"/user{i}"]
            if hit:
                break
            assert time.time() < deadline, f"user {i}'s message never arrived"
            time.sleep(0.05)
        _, headers, body = hit[0]
        Receiver(current, nxt).verify(signature=headers["upstash-signature"],
                                      body=body.decode(), url=url)
        if i > 0:
            # Signed with this user's keys, not the first user's.
            with pytest.raises(Exception):
                Receiver(USERS[0][1], USERS[0][2]).verify(
                    signature=headers["upstash-signature"], body=body.decode(), url=url)


def test_dev_mode_has_the_fixed_redis_token(server):
    redis = Redis(url=server, token="dev-token")
    assert redis.set("dev", "yes")
    assert redis.get("dev") == "yes"
    assert Redis(url=server, token="dev-read-only-token").get("dev") == "yes"


def test_the_console_knows_every_dev_user(server):
    """The console's session route answers each dev user's QStash token as the delivery API
    does (and the fixed Redis token)."""
    for token, _, _ in USERS:
        req = urllib.request.Request(f"{server}/console/api/session", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req) as r:
            assert json.loads(r.read())["qstash"] == "full", token
    req = urllib.request.Request(f"{server}/console/api/session", headers={"Authorization": "Bearer dev-token"})
    with urllib.request.urlopen(req) as r:
        assert json.loads(r.read())["redis"]["access"] == "standard"
