"""The web console's delivery views in a real browser (see test_console.py for the driver):
a publish to a local sink seen with its attempt in the logs; a failing destination, its DLQ
entry, and a retry from the console; a schedule paused and resumed; a workflow wait notified
from the console; the QStash token together with a database token in one tab."""

import json
import os
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

from test_console import browser, errors_in_console, fresh_page, shot, wait  # noqa: E402,F401

QTOKEN = "console-qstash-token"
QRO_TOKEN = "qro_console-read-only"
DB_TOKEN = "console-db-token"
TIDEPOOL_FLAGS = ["--qstash-token", QTOKEN, "--qstash-read-only-token", QRO_TOKEN, "--token", DB_TOKEN]
TIDEPOOL_ENV = {"TIDEPOOL_RETRY_BACKOFF_UNIT_MS": "1"}


class Sink:
    """Records the paths it is sent to; answers 500 while `failing` holds, else 200."""

    def __init__(self):
        self.got = []
        self.failing = True
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                sink.got.append((self.path, body))
                code = 500 if (self.path.startswith("/fail") and sink.failing) else 200
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for(self, path, count=1, secs=20):
        deadline = time.time() + secs
        while time.time() < deadline:
            if sum(1 for p, _ in self.got if p == path) >= count:
                return
            time.sleep(0.02)
        raise AssertionError(f"sink: {path} not reached {count} times; got {self.got}")


@pytest.fixture(scope="module")
def sink():
    s = Sink()
    yield s
    s.httpd.shutdown()


def q(server, method, path, body=b"", headers=None):
    req = urllib.request.Request(f"{server}/v2/{path}", data=body if method != "GET" else None,
                                 method=method, headers={"Authorization": f"Bearer {QTOKEN}", **(headers or {})})
    with urllib.request.urlopen(req) as r:
        text = r.read()
        return json.loads(text) if text else None


def sign_in_qstash(d, server, second=None, token=QTOKEN):
    fresh_page(d, server)
    wait(d, lambda d: d.find_element(By.ID, "token").is_displayed())
    d.find_element(By.ID, "token").send_keys(token)
    if second:
        d.find_element(By.ID, "token2").send_keys(second)
    d.find_element(By.ID, "signin-button").click()
    wait(d, lambda d: d.find_element(By.ID, "app").is_displayed())


def part(d, name):
    """Opens a part of the messages view, once it is drawn whole (its data fetched)."""
    d.find_element(By.CSS_SELECTOR, f'#msg-nav button[data-part="{name}"]').click()
    wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'#part-{name}[data-loaded="1"]'))


def test_a_publish_is_seen_with_its_attempt_in_the_logs(server, browser, sink):
    d = browser
    r = q(server, "POST", f"publish/{sink.base}/ok", b"hello")
    sink.wait_for("/ok")
    sign_in_qstash(d, server)
    assert "QStash token" in d.find_element(By.ID, "who").text
    # With only a QStash token the messages are what the console opens on.
    part(d, "logs")
    msg = wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-message="{r["messageId"]}"]'))[0]
    wait(d, lambda d: "DELIVERED" in msg.text)
    assert "200" in msg.text and "CREATED" in msg.text and "ACTIVE" in msg.text
    shot(d, "messages-logs")
    assert errors_in_console(d) == []


def test_a_failed_message_is_retried_from_the_dead_letter_queue(server, browser, sink):
    d = browser
    sink.failing = True
    q(server, "POST", f"publish/{sink.base}/fail", b"x", {"Upstash-Retries": "0"})
    sink.wait_for("/fail")
    deadline = time.time() + 20
    while not q(server, "GET", "dlq")["messages"] and time.time() < deadline:
        time.sleep(0.05)
    dlq_id = q(server, "GET", "dlq")["messages"][0]["dlqId"]
    sign_in_qstash(d, server)
    part(d, "dlq")
    row = wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-dlq="{dlq_id}"]'))[0]
    assert "500" in row.text
    shot(d, "messages-dlq")
    sink.failing = False
    row.find_element(By.XPATH, ".//button[text()='Retry']").click()
    sink.wait_for("/fail", count=2)
    wait(d, lambda d: not d.find_elements(By.CSS_SELECTOR, f'[data-dlq="{dlq_id}"]'))
    assert errors_in_console(d) == []


def test_a_schedule_is_paused_and_resumed(server, browser, sink):
    d = browser
    sid = q(server, "POST", f"schedules/{sink.base}/cron", b"", {"Upstash-Cron": "0 0 1 1 *"})["scheduleId"]
    sign_in_qstash(d, server)
    part(d, "schedules")
    row = lambda d: d.find_element(By.CSS_SELECTOR, f'[data-schedule="{sid}"]')  # noqa: E731
    wait(d, lambda d: "active" in row(d).text)
    row(d).find_element(By.XPATH, ".//button[text()='Pause']").click()
    wait(d, lambda d: "paused" in row(d).text)
    assert q(server, "GET", f"schedules/{sid}")["isPaused"] is True
    shot(d, "schedules")
    row(d).find_element(By.XPATH, ".//button[text()='Resume']").click()
    wait(d, lambda d: "active" in row(d).text)
    assert q(server, "GET", f"schedules/{sid}")["isPaused"] is False
    # The cron helper shows the next five runs as the expression is typed.
    d.find_element(By.ID, "schedule-cron").send_keys("0 0 1 1 *")
    wait(d, lambda d: d.find_element(By.ID, "cron-next").text.count("-01-01T00:00:00.000Z") == 5)
    d.find_element(By.ID, "schedule-cron").send_keys(" *")
    wait(d, lambda d: "five fields" in d.find_element(By.ID, "cron-next").text)
    # That refusal (400) is the one the browser logs.
    assert errors_in_console(d, refusals_expected=True) == []
    assert errors_in_console(d) == []


def test_a_workflow_wait_is_notified_from_the_console(server, browser, sink):
    d = browser
    q(server, "POST", "wait/order-paid", json.dumps({"url": f"{sink.base}/step", "timeout": "1h"}).encode(),
      {"Content-Type": "application/json"})
    sign_in_qstash(d, server)
    part(d, "waits")
    d.find_element(By.ID, "wait-event").send_keys("order-paid")
    d.find_element(By.ID, "wait-look").click()
    wait(d, lambda d: f"{sink.base}/step" in d.find_element(By.ID, "part-waits").text)
    d.find_element(By.ID, "notify-body").send_keys('{"paid":true}')
    d.find_element(By.ID, "notify").click()
    wait(d, lambda d: "1 waiter(s) woken" in d.find_element(By.ID, "notified").text)
    sink.wait_for("/step")
    assert q(server, "GET", "waiters/order-paid") == []
    shot(d, "workflow-notify")
    assert errors_in_console(d) == []


def test_one_tab_holds_a_database_token_and_the_qstash_token(server, browser):
    d = browser
    sign_in_qstash(d, server, second=DB_TOKEN)
    who = d.find_element(By.ID, "who").text
    assert "standard token" in who and "QStash token" in who
    # Both views are there: the data browser first, the messages one click away.
    assert d.find_element(By.ID, "browser").is_displayed()
    d.find_element(By.CSS_SELECTOR, 'nav button[data-view="messages"]').click()
    wait(d, lambda d: d.find_element(By.ID, "messages").is_displayed())
    shot(d, "two-tokens")
    assert errors_in_console(d) == []


def test_the_qstash_read_only_token_sees_no_actions(server, browser, sink):
    d = browser
    q(server, "POST", f"schedules/{sink.base}/ro", b"", {"Upstash-Cron": "0 0 1 1 *"})
    sign_in_qstash(d, server, token=QRO_TOKEN)
    assert "QStash read-only token" in d.find_element(By.ID, "who").text
    part(d, "schedules")
    wait(d, lambda d: f"{sink.base}/ro" in d.find_element(By.ID, "part-schedules").text)
    assert [b for b in d.find_elements(By.CSS_SELECTOR, ".qedit") if b.is_displayed()] == []
    part(d, "dlq")
    assert [b for b in d.find_elements(By.CSS_SELECTOR, ".qedit") if b.is_displayed()] == []
    shot(d, "qstash-read-only")
    assert errors_in_console(d) == []


def test_the_dlq_filters_and_acts_on_selected_entries(server, browser, sink):
    d = browser
    sink.failing = True
    for path in ["/fail-a", "/fail-b", "/fail-c"]:
        q(server, "POST", f"publish/{sink.base}{path}", b"x", {"Upstash-Retries": "0"})
    deadline = time.time() + 20
    while len(q(server, "GET", "dlq")["messages"]) < 3 and time.time() < deadline:
        time.sleep(0.05)
    entries = {m["url"].rsplit("/", 1)[1]: m["dlqId"] for m in q(server, "GET", "dlq")["messages"]}
    sign_in_qstash(d, server)
    part(d, "dlq")
    d.find_element(By.ID, "dlq-url").send_keys(f"{sink.base}/fail-b")
    d.find_element(By.ID, "dlq-filter").click()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-dlq]")) == 1)
    assert d.find_elements(By.CSS_SELECTOR, f'tr[data-dlq="{entries["fail-b"]}"]')
    d.find_element(By.ID, "dlq-url").clear()
    d.find_element(By.ID, "dlq-filter").click()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-dlq]")) >= 3)
    for name in ["fail-a", "fail-c"]:
        d.find_element(By.CSS_SELECTOR, f'input.pick[data-dlq="{entries[name]}"]').click()
    d.find_element(By.ID, "dlq-delete-selected").click()
    d.switch_to.alert.accept()
    wait(d, lambda d: not d.find_elements(By.CSS_SELECTOR, f'tr[data-dlq="{entries["fail-a"]}"]'))
    left = {m["dlqId"] for m in q(server, "GET", "dlq")["messages"]}
    assert entries["fail-b"] in left and entries["fail-a"] not in left and entries["fail-c"] not in left
    shot(d, "dlq-bulk")
    assert errors_in_console(d) == []


def test_workflow_runs_show_their_steps_and_can_be_cancelled(server, browser, sink):
    d = browser
    run = q(server, "POST", f"trigger/{sink.base}/wf", b'{"order":7}', {"Content-Type": "application/json"})
    run_id = run["workflowRunId"]
    sign_in_qstash(d, server)
    part(d, "runs")
    box = wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-run="{run_id}"]'))[0]
    assert "RUN_STARTED" in box.text and "init" in box.text and '{"order":7}' in box.text
    shot(d, "workflow-runs")
    box.find_element(By.XPATH, ".//button[text()='Cancel']").click()
    d.switch_to.alert.accept()
    wait(d, lambda d: "RUN_STARTED" not in d.find_element(By.ID, "part-runs").text)
    assert errors_in_console(d) == []


def test_the_signing_keys_rotate_from_the_console(server, browser):
    d = browser
    before = q(server, "GET", "keys")
    sign_in_qstash(d, server)
    part(d, "keys")
    wait(d, lambda d: before["next"] in d.find_element(By.ID, "part-keys").text)
    d.find_element(By.ID, "rotate-keys").click()
    d.switch_to.alert.accept()
    after = wait(d, lambda d: (lambda k: k if k["current"] == before["next"] else False)(q(server, "GET", "keys")))
    wait(d, lambda d: after["next"] in d.find_element(By.ID, "part-keys").text)
    shot(d, "signing-keys")
    assert errors_in_console(d) == []


def test_url_groups_and_queues_are_edited_from_the_console(server, browser, sink):
    d = browser
    sign_in_qstash(d, server)
    part(d, "groups")
    d.find_element(By.ID, "group-name").send_keys("team")
    d.find_element(By.ID, "group-url").send_keys(f"{sink.base}/a")
    d.find_element(By.ID, "group-add").click()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-group="team"]')) == 1)
    d.find_element(By.ID, "group-name").send_keys("team")
    d.find_element(By.ID, "group-url").send_keys(f"{sink.base}/b")
    d.find_element(By.ID, "group-add").click()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-group="team"]')) == 2)
    assert sorted(e["url"] for e in q(server, "GET", "topics/team")["endpoints"]) == [f"{sink.base}/a", f"{sink.base}/b"]
    d.find_elements(By.CSS_SELECTOR, '[data-group="team"]')[0].find_element(By.XPATH, ".//button[text()='Remove']").click()
    d.switch_to.alert.accept()
    wait(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-group="team"]')) == 1)
    part(d, "queues")
    d.find_element(By.ID, "queue-name").send_keys("jobs")
    d.find_element(By.ID, "queue-parallelism").clear()
    d.find_element(By.ID, "queue-parallelism").send_keys("3")
    d.find_element(By.ID, "queue-create").click()
    row = lambda d: d.find_element(By.CSS_SELECTOR, '[data-queue="jobs"]')  # noqa: E731
    wait(d, lambda d: "3" in row(d).text)
    assert q(server, "GET", "queues/jobs")["parallelism"] == 3
    box = row(d).find_element(By.CSS_SELECTOR, ".queue-parallelism")
    box.clear()
    box.send_keys("5")
    row(d).find_element(By.XPATH, ".//button[text()='Set parallelism']").click()
    wait(d, lambda d: q(server, "GET", "queues/jobs")["parallelism"] == 5)
    shot(d, "queues")
    assert errors_in_console(d) == []


def test_waiting_messages_are_listed_and_cancelled(server, browser, sink):
    d = browser
    later = q(server, "POST", f"publish/{sink.base}/later", b"x", {"Upstash-Delay": "1h"})["messageId"]
    now = q(server, "POST", f"publish/{sink.base}/now", b"x")["messageId"]
    sink.wait_for("/now")
    sign_in_qstash(d, server)
    part(d, "logs")
    wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-message="{now}"]'))
    d.find_element(By.ID, "logs-pending").click()
    wait(d, lambda d: not d.find_elements(By.CSS_SELECTOR, f'[data-message="{now}"]'))
    box = wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-message="{later}"]'))[0]
    assert "CREATED" in box.text
    box.find_element(By.XPATH, ".//button[text()='Cancel']").click()
    d.switch_to.alert.accept()
    wait(d, lambda d: not d.find_elements(By.CSS_SELECTOR, f'[data-message="{later}"]'))
    shot(d, "waiting-messages")
    assert errors_in_console(d) == []
