"""The official Python SDK (`qstash` on PyPI) against tidepool's delivery service, unchanged but
for the base URL and the credentials. A local destination server in this process records what
tidepool delivers, and the SDK's own `Receiver` verifies every signature.
The server comes from the `server` fixture (conftest.py)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from qstash import QStash, Receiver
from qstash.log import LogState
from qstash.errors import QStashError

# The public dev-server credentials of user 1: a dev-mode client accepts a server that has them.
TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0="
CURRENT = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r"
NEXT = "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs"
# For the `server` fixture (conftest.py); retries back off in milliseconds, not seconds.
TIDEPOOL_FLAGS = ["--qstash-token", TOKEN, "--qstash-current-signing-key", CURRENT,
                  "--qstash-next-signing-key", NEXT]
TIDEPOOL_ENV = {"TIDEPOOL_RETRY_BACKOFF_UNIT_MS": "1"}


class Sink:
    """Records requests (header names lower-case); `/404` answers `404 Not Found`, anything else 200."""

    def __init__(self):
        self.got = []
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with sink.lock:
                    sink.got.append((self.command, self.path,
                                     {k.lower(): v for k, v in self.headers.items()}, body))
                code, text = (404, b"404 Not Found") if self.path.startswith("/404") else (200, b"ok")
                self.send_response(code)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait(self, pred, what, secs=20):
        deadline = time.time() + secs
        while time.time() < deadline:
            with self.lock:
                hits = [g for g in self.got if pred(g)]
            if hits:
                return hits
            time.sleep(0.02)
        raise AssertionError(f"sink: no {what}; got {[(g[0], g[1]) for g in self.got]}")


@pytest.fixture(scope="module")
def sink():
    s = Sink()
    yield s
    s.httpd.shutdown()


@pytest.fixture
def client(server):
    return QStash(TOKEN, base_url=server)


def test_signing_keys_are_the_configured_ones(client):
    k = client.signing_key.get()
    assert (k.current, k.next) == (CURRENT, NEXT)


def test_publish_json_is_delivered_and_verifies_with_the_receiver(client, sink):
    url = f"{sink.base}/hook?src=py"
    res = client.message.publish_json(
        url=url, body={"hello": "world"}, headers={"X-Tenant": "42"}, retries=1,
        label="first")
    assert res.message_id.startswith("msg_")
    (method, path, headers, body), = sink.wait(
        lambda g: g[3] and g[2].get("upstash-message-id") == res.message_id, "the delivery")
    assert method == "POST" and path == "/hook?src=py"
    assert json.loads(body) == {"hello": "world"}
    assert headers["x-tenant"] == "42"
    Receiver(CURRENT, NEXT).verify(
        signature=headers["upstash-signature"], body=body.decode(), url=url)
    # The SDK's log API polls for the DELIVERED state, as the SDK's own tests do.
    deadline = time.time() + 20
    while time.time() < deadline:
        logs = client.log.list(filter={"message_id": res.message_id, "state": LogState.DELIVERED})
        if logs.logs:
            break
        time.sleep(0.05)
    assert logs.logs and logs.logs[0].state == LogState.DELIVERED


def test_a_message_can_be_read_and_cancelled(client, sink):
    res = client.message.publish(url=f"{sink.base}/later", body="x", delay="1h")
    m = client.message.get(res.message_id)
    assert m.message_id == res.message_id
    assert m.not_before >= m.created_at + 3_599_000
    client.message.cancel(res.message_id)
    with pytest.raises(QStashError):
        client.message.get(res.message_id)
    a = client.message.publish(url=f"{sink.base}/later", body="x", delay="1h")
    b = client.message.publish(url=f"{sink.base}/later", body="x", delay="1h")
    assert client.message.cancel_many([a.message_id, b.message_id]) == 2


def test_failures_reach_the_dlq(client, sink):
    res = client.message.publish(url=f"{sink.base}/404", body="doomed", retries=0)
    deadline = time.time() + 20
    entry = None
    while time.time() < deadline and entry is None:
        for d in client.dlq.list().messages:
            if d.message_id == res.message_id:
                entry = d
        time.sleep(0.05)
    assert entry is not None
    assert entry.response_status == 404
    assert entry.response_body == "404 Not Found"
    assert client.dlq.get(entry.dlq_id).message_id == res.message_id
    client.dlq.delete(entry.dlq_id)
    with pytest.raises(QStashError):
        client.dlq.delete(entry.dlq_id)


def test_schedules(client, sink):
    sid = client.schedule.create_json(
        destination=f"{sink.base}/cron", cron="*/10 * * * *", body={"a": 1}, retries=2)
    s = client.schedule.get(sid)
    assert (s.schedule_id, s.cron, s.retries, s.paused) == (sid, "*/10 * * * *", 2, False)
    assert s.destination == f"{sink.base}/cron"
    client.schedule.pause(sid)
    client.schedule.pause(sid)
    assert client.schedule.get(sid).paused is True
    client.schedule.resume(sid)
    assert client.schedule.get(sid).paused is False
    assert sid in [x.schedule_id for x in client.schedule.list()]
    client.schedule.delete(sid)
    assert sid not in [x.schedule_id for x in client.schedule.list()]


def test_url_groups_and_queues(client, sink):
    client.url_group.upsert_endpoints(
        url_group="py-group",
        endpoints=[{"url": f"{sink.base}/g1", "name": "one"}, {"url": f"{sink.base}/g2"}])
    g = client.url_group.get("py-group")
    assert sorted(e.url for e in g.endpoints) == [f"{sink.base}/g1", f"{sink.base}/g2"]
    res = client.message.publish(url_group="py-group", body="fan")
    assert isinstance(res, list) and len(res) == 2
    for path in ("/g1", "/g2"):
        sink.wait(lambda x, p=path: x[1] == p, f"the delivery to {path}")
    client.url_group.delete("py-group")
    assert "py-group" not in [x.name for x in client.url_group.list()]

    client.queue.upsert("py-queue", parallelism=2)
    q = client.queue.get("py-queue")
    assert (q.name, q.parallelism, q.paused) == ("py-queue", 2, False)
    client.queue.pause("py-queue")
    assert client.queue.get("py-queue").paused is True
    client.queue.resume("py-queue")
    r = client.message.enqueue(queue="py-queue", url=f"{sink.base}/queued", body="q")
    sink.wait(lambda x: x[2].get("upstash-message-id") == r.message_id, "the queued delivery")
    client.queue.delete("py-queue")


def test_batch_bulk_dlq_delete_cancel_all_and_flow_control(client, sink):
    res = client.message.batch_json([
        {"url": f"{sink.base}/b1", "body": {"n": 1}},
        {"url": f"{sink.base}/404", "body": {"n": 2}, "retries": 0},
    ])
    assert len(res) == 2 and all(r.message_id.startswith("msg_") for r in res)
    sink.wait(lambda x: x[1] == "/b1", "the first batch item")
    failed = res[1].message_id
    deadline = time.time() + 20
    ids = []
    while time.time() < deadline and not ids:
        ids = [d.dlq_id for d in client.dlq.list().messages if d.message_id == failed]
        time.sleep(0.05)
    assert ids
    assert client.dlq.delete_many(ids) == 1

    for _ in range(3):
        client.message.publish(url=f"{sink.base}/never", body="x", delay="1h")
    assert client.message.cancel_all() >= 3

    r = client.message.publish(
        url=f"{sink.base}/flow", body="x",
        flow_control={"key": "py-key", "parallelism": 2, "rate": 5, "period": 10})
    sink.wait(lambda x: x[2].get("upstash-message-id") == r.message_id, "the flow-controlled delivery")
    info = client.flow_control.get("py-key")
    assert (info.parallelism_max, info.rate_max, info.rate_period) == (2, 5, 10)
    client.flow_control.pause("py-key")
    assert client.flow_control.get("py-key").is_paused is True
    client.flow_control.resume("py-key")
    assert client.flow_control.get("py-key").is_paused is False
    assert client.flow_control.get_global_parallelism().parallelism_max > 0
