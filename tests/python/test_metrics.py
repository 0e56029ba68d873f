"""`GET /metrics`, read by the OpenMetrics parser of the official Prometheus Python client
(`prometheus_client.openmetrics.parser`), which rejects text that breaks the format: every
family, its type and unit, the `_total` counters and the histograms' buckets are checked as
parsed values, not as strings."""

import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.openmetrics.parser import text_string_to_metric_families
from qstash import QStash
from upstash_redis import Redis

ADMIN = "metrics-admin-token"
TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0="
TIDEPOOL_FLAGS = ["--admin-token", ADMIN, "--token", "metrics-token", "--qstash-token", TOKEN,
                  "--qstash-current-signing-key", "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r",
                  "--qstash-next-signing-key", "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs"]
TIDEPOOL_ENV = {"TIDEPOOL_RETRY_BACKOFF_UNIT_MS": "1"}


def scrape(server, token=ADMIN):
    req = urllib.request.Request(server + "/metrics", headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["content-type"].startswith("application/openmetrics-text")
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families, family, sample, **labels):
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {sample} {labels} in {families[family].samples}")


def test_metrics_parse_and_count_what_happened(server):
    # A database of its own, so the per-database families have two members.
    req = urllib.request.Request(server + "/_admin/databases", method="POST", data=b'{"name":"app"}',
                                 headers={"Authorization": "Bearer " + ADMIN})
    with urllib.request.urlopen(req, timeout=10) as r:
        import json
        app = json.loads(r.read())
    redis = Redis(url=server, token="metrics-token")
    for i in range(5):
        redis.set(f"k{i}", "v")
    redis.get("k1")
    Redis(url=server, token=app["token"]).set("only", "1")

    # One delivered message, to a local destination.
    got = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            got.set()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    QStash(TOKEN, base_url=server).message.publish_json(
        url=f"http://127.0.0.1:{httpd.server_address[1]}/hook", body={"a": 1})
    assert got.wait(20)

    deadline = time.time() + 10
    while True:
        m = scrape(server)
        try:
            assert value(m, "tidepool_delivery_attempts", "tidepool_delivery_attempts_total",
                         outcome="delivered") == 1
            # The state's figures are taken by the executor and the live counters after it:
            # a result applied in between shows in the counter a scrape before the gauge.
            assert value(m, "tidepool_delivery_messages_pending",
                         "tidepool_delivery_messages_pending") == 0
            break
        except (AssertionError, KeyError):
            assert time.time() < deadline
            time.sleep(0.1)

    assert m["tidepool_http_requests"].type == "counter"
    assert value(m, "tidepool_http_requests", "tidepool_http_requests_total",
                 route="command", status="200") >= 7
    assert m["tidepool_commands"].type == "counter"
    assert value(m, "tidepool_commands", "tidepool_commands_total",
                 command="set", database="default") == 5
    assert value(m, "tidepool_commands", "tidepool_commands_total",
                 command="set", database="app") == 1
    assert m["tidepool_keys"].type == "gauge"
    assert value(m, "tidepool_keys", "tidepool_keys", database="default") == 5
    assert value(m, "tidepool_keys", "tidepool_keys", database="app") == 1
    h = m["tidepool_command_duration_seconds"]
    assert h.type == "histogram" and h.unit == "seconds"
    # One command in 16 is timed (config::COMMAND_TIMING_EVERY), the server's first among them.
    assert value(m, "tidepool_command_duration_seconds", "tidepool_command_duration_seconds_count",
                 command="set") >= 1
    assert value(m, "tidepool_log_fsync_duration_seconds",
                 "tidepool_log_fsync_duration_seconds_count") >= 1
    assert value(m, "tidepool_log_appends", "tidepool_log_appends_total") >= 7
    assert m["tidepool_log_size_bytes"].unit == "bytes"
    assert value(m, "tidepool_log_size_bytes", "tidepool_log_size_bytes") > 0
    assert value(m, "tidepool_group_commit_batch_jobs", "tidepool_group_commit_batch_jobs_count") >= 7
    assert value(m, "tidepool_delivery_messages_pending", "tidepool_delivery_messages_pending") == 0
    assert value(m, "tidepool_delivery_dlq_entries", "tidepool_delivery_dlq_entries") == 0
    assert value(m, "tidepool_delivery_schedules", "tidepool_delivery_schedules") == 0
    assert value(m, "tidepool_delivery_lateness_seconds",
                 "tidepool_delivery_lateness_seconds_count") == 1


def test_metrics_need_the_admin_token(server):
    for token in ["", "metrics-token", "nope"]:
        try:
            scrape(server, token)
            raise AssertionError(f"/metrics answered the token {token!r}")
        except urllib.error.HTTPError as e:
            assert e.code == 401
