"""The web console (/console) in a real browser: Debian's chromium, driven by Selenium through
Debian's chromedriver (neither is downloaded). Each flow saves a screenshot under
target/console-screenshots/, and the browser's console must show no errors.

Flows: sign in with each database token kind; keys of every type in the tree and the viewer;
a TTL edited; a command run in the command line; a Read Only token that sees no edit
controls; a key named as an HTML tag shown as text, running nothing; a key's history and the
database before a delete; the monitor and a channel followed live."""

import json
import os
import shutil
import urllib.request

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOKEN = "console-token"
READ_ONLY = "console-read-only"
TIDEPOOL_FLAGS = ["--token", TOKEN, "--read-only-token", READ_ONLY]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOTS = os.path.join(ROOT, "target", "console-screenshots")
XSS = "<img src=x onerror=alert(1)>"


def rest(server, *args, token=TOKEN):
    req = urllib.request.Request(
        server + "/", data=json.dumps(list(args)).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())["result"]


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.fail("chromium and chromium-driver are needed: apt-get install -y chromium chromium-driver")
    os.makedirs(SHOTS, exist_ok=True)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
              "--disable-gpu", "--no-first-run", "--disable-extensions"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=driver_path)
    d = webdriver.Chrome(options=opts, service=service)
    yield d
    d.quit()


def errors_in_console(d, refusals_expected=False):
    """The browser console's errors since the last look. A request the server refuses on
    purpose (a flow that checks a refusal) is logged by the browser as a failed load; those
    are allowed only where the flow expects them."""
    out = []
    for e in d.get_log("browser"):
        if e["level"] != "SEVERE":
            continue
        if refusals_expected and "the server responded with a status of 4" in e["message"]:
            continue
        out.append(e)
    return out


def wait(d, cond, seconds=30):
    # The viewer is rebuilt after each action: an element read while it is replaced is
    # looked up again.
    return WebDriverWait(d, seconds, ignored_exceptions=[StaleElementReferenceException]).until(cond)


def fresh_page(d, server):
    """The console signed out: the tab's storage cleared, and what the previous flow's
    session logged (it signs in again on load) left behind."""
    # Cleared on a page of the same origin that runs no console script: cleared on the
    # console itself, the previous flow's sign-in (it signs in again on load) could write its
    # tokens back before the reload, and the console would open signed in.
    d.get(server + "/healthz")
    d.execute_script("sessionStorage.clear()")
    d.get(server + "/console/")
    # The script is a module, run after the page is shown: a click before it has wired the
    # form would submit nothing.
    wait(d, lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    # Drained only now: the first load signs in again with the previous flow's tokens, and
    # its answer (a 401 for a token that flow revoked) may be logged after the storage is
    # cleared (one CI run in five saw it land in the next flow's errors).
    d.get_log("browser")


def sign_in(d, server, token):
    fresh_page(d, server)
    box = wait(d, EC.visibility_of_element_located((By.ID, "token")))
    box.send_keys(token)
    d.find_element(By.ID, "signin-button").click()
    wait(d, EC.visibility_of_element_located((By.ID, "app")))


def opened(d, key):
    """Waits until the viewer has drawn `key` whole (its value fetched, its editor added)."""
    wait(d, lambda d: d.find_element(By.ID, "viewer").get_attribute("data-loaded") == key)


def key_in_tree(d, key):
    return wait(d, lambda d: next(
        (e for e in d.find_elements(By.CSS_SELECTOR, "#tree .key") if e.get_attribute("data-key") == key),
        False))


def shot(d, name):
    d.save_screenshot(os.path.join(SHOTS, f"{name}.png"))


def test_the_console_is_served_with_its_safety_headers(server):
    with urllib.request.urlopen(server + "/console/") as r:
        csp = r.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert "script-src 'self'" in csp
        assert r.headers["X-Frame-Options"] == "DENY"
        assert b'src="/console/app.js"' in r.read()


def test_keys_of_every_type_in_the_tree_and_the_viewer(server, browser):
    d = browser
    rest(server, "SET", "user:1:name", "Ada")
    rest(server, "HSET", "user:1:profile", "lang", "en", "city", "Paris")
    rest(server, "RPUSH", "queue:jobs", "a", "b", "c")
    rest(server, "SADD", "tags", "x", "y")
    rest(server, "ZADD", "board", "10", "alice", "20", "bob")
    rest(server, "XADD", "events", "1-1", "kind", "click")
    rest(server, "JSON.SET", "doc", "$", '{"a":[1,2]}')
    sign_in(d, server, TOKEN)
    assert "standard token" in d.find_element(By.ID, "who").text
    expect = {
        "user:1:name": ("string", "Ada"),
        "user:1:profile": ("hash", "Paris"),
        "queue:jobs": ("list", "c"),
        "tags": ("set", "y"),
        "board": ("zset", "bob"),
        "events": ("stream", "kind=click"),
        "doc": ("json", '"a"'),
    }
    for key, (ty, shown) in expect.items():
        key_in_tree(d, key).click()
        opened(d, key)
        wait(d, lambda d: shown in d.find_element(By.ID, "value").text)
        assert d.find_element(By.ID, "viewer-type").text == ty
    # The namespaces group the keys, with counts.
    labels = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#tree .ns > .label")]
    assert "user: (2)" in labels and "1: (2)" in labels
    shot(d, "data-browser")
    assert errors_in_console(d) == []


def test_a_ttl_is_edited_and_removed(server, browser):
    d = browser
    rest(server, "SET", "session:abc", "v")
    sign_in(d, server, TOKEN)
    key_in_tree(d, "session:abc").click()
    wait(d, lambda d: d.find_element(By.ID, "viewer-ttl").text == "no TTL")
    d.find_element(By.ID, "ttl-input").send_keys("300")
    d.find_element(By.ID, "ttl-set").click()
    wait(d, lambda d: d.find_element(By.ID, "viewer-ttl").text.startswith("expires in"))
    ttl = rest(server, "TTL", "session:abc")
    assert 290 <= ttl <= 300
    shot(d, "ttl")
    d.find_element(By.ID, "ttl-persist").click()
    wait(d, lambda d: d.find_element(By.ID, "viewer-ttl").text == "no TTL")
    assert rest(server, "TTL", "session:abc") == -1
    assert errors_in_console(d) == []


def test_a_command_runs_in_the_command_line(server, browser):
    d = browser
    rest(server, "DEL", "cli:list")
    rest(server, "RPUSH", "cli:list", "a", "b", "c")
    sign_in(d, server, TOKEN)
    d.find_element(By.CSS_SELECTOR, 'nav button[data-view="cli"]').click()
    line = d.find_element(By.ID, "cli-in")
    line.send_keys('SET greeting "hello world"', Keys.ENTER)
    wait(d, lambda d: '"OK"' in d.find_element(By.ID, "cli-out").text)
    line.send_keys("LRANGE cli:list 0 -1", Keys.ENTER)
    wait(d, lambda d: '3) "c"' in d.find_element(By.ID, "cli-out").text)
    line.send_keys("NOSUCHCOMMAND", Keys.ENTER)
    wait(d, lambda d: "(error) ERR unknown command" in d.find_element(By.ID, "cli-out").text)
    # The history walks back.
    line.send_keys(Keys.ARROW_UP)
    assert line.get_attribute("value") == "NOSUCHCOMMAND"
    # Tab completes a name from COMMAND DOCS, and the arguments show as Redis documents them.
    line.clear()
    line.send_keys("zad", Keys.TAB)
    assert line.get_attribute("value") == "ZADD "
    wait(d, lambda d: d.find_element(By.ID, "cli-help").text.startswith(
        "ZADD key [NX | XX] [GT | LT] [CH] [INCR] score member [score member ...]"))
    assert "Add one or more members" in d.find_element(By.ID, "cli-help").text
    assert rest(server, "GET", "greeting") == "hello world"
    shot(d, "command-line")
    assert errors_in_console(d, refusals_expected=True) == []


def test_a_read_only_token_sees_no_edit_controls(server, browser):
    d = browser
    rest(server, "SET", "ro:seen", "1")
    rest(server, "HSET", "ro:hash", "f", "v")
    sign_in(d, server, READ_ONLY)
    assert "read-only token" in d.find_element(By.ID, "who").text
    # The hosted service refuses SCAN to a Read Only token: keys are opened by name.
    wait(d, lambda d: "may not list keys" in d.find_element(By.ID, "scan-status").text)
    d.find_element(By.ID, "open-key").send_keys("ro:hash", Keys.ENTER)
    wait(d, lambda d: "v" in d.find_element(By.ID, "value").text)
    d.find_element(By.ID, "open-key").clear()
    d.find_element(By.ID, "open-key").send_keys("ro:seen", Keys.ENTER)
    opened(d, "ro:seen")
    edits = [e for e in d.find_elements(By.CSS_SELECTOR, ".edit") if e.is_displayed()]
    assert edits == []
    # The server refuses anyway: a write typed in the command line.
    d.find_element(By.CSS_SELECTOR, 'nav button[data-view="cli"]').click()
    d.find_element(By.ID, "cli-in").send_keys("SET ro:seen 2", Keys.ENTER)
    wait(d, lambda d: "(error) NOPERM" in d.find_element(By.ID, "cli-out").text)
    assert rest(server, "GET", "ro:seen") == "1"
    shot(d, "read-only")
    assert errors_in_console(d, refusals_expected=True) == []


def test_a_key_named_as_html_shows_as_text_and_runs_nothing(server, browser):
    d = browser
    rest(server, "SET", XSS, XSS)
    sign_in(d, server, TOKEN)
    key_in_tree(d, XSS).click()
    opened(d, XSS)
    assert d.find_element(By.ID, "string-value").text == XSS
    assert d.find_elements(By.CSS_SELECTOR, "#tree img, #viewer img") == []
    with pytest.raises(NoAlertPresentException):
        d.switch_to.alert.text
    shot(d, "html-key-as-text")
    assert errors_in_console(d) == []


def test_a_wrong_token_is_refused_with_the_servers_error(server, browser):
    d = browser
    fresh_page(d, server)
    wait(d, EC.visibility_of_element_located((By.ID, "token"))).send_keys("not-a-token")
    d.find_element(By.ID, "signin-button").click()
    wait(d, lambda d: "WRONGPASS" in d.find_element(By.ID, "signin-error").text)
    assert not d.find_element(By.ID, "app").is_displayed()
    shot(d, "wrong-token")
    assert errors_in_console(d, refusals_expected=True) == []


def test_an_acl_users_token_signs_in_as_that_user(server, browser):
    d = browser
    rest(server, "ACL", "SETUSER", "ann", "on", ">pw", "~app:*", "+@read", "+@write", "+@keyspace")
    token = rest(server, "ACL", "RESTTOKEN", "ann", "pw")
    rest(server, "SET", "app:one", "1")
    sign_in(d, server, token)
    assert "ACL user ann" in d.find_element(By.ID, "who").text
    # The user's key patterns hold in the console as anywhere: its keys open, others do not.
    d.find_element(By.ID, "open-key").send_keys("app:one", Keys.ENTER)
    opened(d, "app:one")
    d.find_element(By.ID, "open-key").clear()
    d.find_element(By.ID, "open-key").send_keys("user:1:name", Keys.ENTER)
    wait(d, lambda d: "NOPERM" in d.find_element(By.ID, "viewer").text)
    shot(d, "acl-user")
    assert errors_in_console(d, refusals_expected=True) == []
    # A user whose rules allow no edit sees no edit controls.
    rest(server, "ACL", "SETUSER", "reader", "on", ">pw", "~app:*", "+@read")
    sign_in(d, server, rest(server, "ACL", "RESTTOKEN", "reader", "pw"))
    assert "ACL user reader" in d.find_element(By.ID, "who").text
    d.find_element(By.ID, "open-key").send_keys("app:one", Keys.ENTER)
    opened(d, "app:one")
    assert [e for e in d.find_elements(By.CSS_SELECTOR, ".edit") if e.is_displayed()] == []
    assert errors_in_console(d, refusals_expected=True) == []


def history_entries(d):
    return d.find_elements(By.CSS_SELECTOR, "#history > li")


def test_a_keys_history_shows_each_change_and_its_value(server, browser):
    d = browser
    for color in ["red", "green", "blue"]:
        rest(server, "SET", "color", color)
    sign_in(d, server, TOKEN)
    key_in_tree(d, "color").click()
    opened(d, "color")
    d.find_element(By.ID, "history-button").click()
    wait(d, lambda d: len(history_entries(d)) == 3)
    texts = [e.text for e in history_entries(d)]
    # Newest first, each with its command and the value after it.
    for text, color in zip(texts, ["blue", "green", "red"]):
        assert f"SET color {color}" in text and f"→ {color}" in text, text
    shot(d, "history")
    assert errors_in_console(d) == []


def test_a_deleted_key_is_seen_by_travelling_to_before_the_delete(server, browser):
    d = browser
    rest(server, "SET", "doomed", "still here")
    rest(server, "DEL", "doomed")
    sign_in(d, server, TOKEN)
    d.find_element(By.ID, "open-key").send_keys("doomed", Keys.ENTER)
    wait(d, lambda d: d.find_element(By.ID, "viewer-type").text == "none")
    d.find_element(By.ID, "history-button").click()
    wait(d, lambda d: len(history_entries(d)) == 2)
    newest, before = history_entries(d)
    assert "DEL doomed" in newest.text and "(no key)" in newest.text
    before.find_element(By.CSS_SELECTOR, ".travel-here").click()
    wait(d, lambda d: d.find_element(By.ID, "travel-banner").is_displayed())
    assert "read-only" in d.find_element(By.ID, "travel-text").text
    # No edit control while the past is shown.
    assert [e for e in d.find_elements(By.CSS_SELECTOR, ".edit") if e.is_displayed()] == []
    key_in_tree(d, "doomed").click()
    wait(d, lambda d: d.find_element(By.ID, "past-value").text == "still here")
    shot(d, "time-travel")
    d.find_element(By.ID, "travel-back").click()
    wait(d, lambda d: not d.find_element(By.ID, "travel-banner").is_displayed())
    # The timeline's last bar shows the database as of its last record: doomed is gone.
    d.find_element(By.ID, "timeline-button").click()
    bars = wait(d, lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline-chart rect"))
    bars[-1].click()
    wait(d, lambda d: d.find_element(By.ID, "travel-banner").is_displayed())
    assert not any(e.get_attribute("data-key") == "doomed" for e in d.find_elements(By.CSS_SELECTOR, "#tree .key"))
    shot(d, "timeline")
    assert errors_in_console(d) == []


def test_the_live_view_follows_the_monitor_and_a_channel(server, browser):
    d = browser
    sign_in(d, server, TOKEN)
    d.find_element(By.CSS_SELECTOR, 'nav button[data-view="live"]').click()
    d.find_element(By.ID, "monitor-toggle").click()
    # The monitor's stream opens in the background: write until the monitor shows a write.
    def shown(d):
        rest(server, "SET", "live:k", "v")
        return '"SET" "live:k" "v"' in d.find_element(By.ID, "monitor-out").text
    wait(d, shown)
    d.find_element(By.ID, "subscribe-channel").send_keys("news", Keys.ENTER)
    wait(d, lambda d: "subscribe,news,1" in d.find_element(By.ID, "subscribe-out").text)
    d.find_element(By.ID, "publish-channel").send_keys("news")
    d.find_element(By.ID, "publish-message").send_keys("<b>hello</b>", Keys.ENTER)
    wait(d, lambda d: "message,news,<b>hello</b>" in d.find_element(By.ID, "subscribe-out").text)
    assert d.find_elements(By.CSS_SELECTOR, "#subscribe-out b") == []
    # A pattern subscription replaces the channel's.
    d.find_element(By.ID, "subscribe-channel").clear()
    d.find_element(By.ID, "subscribe-channel").send_keys("alerts.*")
    d.find_element(By.ID, "subscribe-pattern").click()
    d.find_element(By.ID, "subscribe-button").click()
    wait(d, lambda d: "psubscribe,alerts.*,1" in d.find_element(By.ID, "subscribe-out").text)
    rest(server, "PUBLISH", "alerts.disk", "full")
    wait(d, lambda d: "pmessage,alerts.*,alerts.disk,full" in d.find_element(By.ID, "subscribe-out").text)
    shot(d, "live")
    d.find_element(By.ID, "monitor-toggle").click()
    assert d.find_element(By.ID, "monitor-toggle").text == "Start the monitor"
    assert errors_in_console(d) == []


def test_a_key_of_every_type_is_created_from_the_console(server, browser):
    d = browser
    from selenium.webdriver.support.ui import Select
    sign_in(d, server, TOKEN)
    made = [
        ("string", "new:string", None, "hi", "hi"),
        ("hash", "new:hash", "colour", "teal", "teal"),
        ("list", "new:list", None, "first", "first"),
        ("set", "new:set", None, "member", "member"),
        ("zset", "new:zset", "2.5", "player", "2.5"),
        ("stream", "new:stream", "kind", "click", "kind=click"),
        ("json", "new:json", None, '{"n":1}', '"n": 1'),
    ]
    for ty, name, field, value, shown in made:
        Select(d.find_element(By.ID, "newkey-type")).select_by_visible_text(ty)
        d.find_element(By.ID, "newkey-name").send_keys(name)
        if field is not None:
            d.find_element(By.ID, "newkey-field").send_keys(field)
        d.find_element(By.ID, "newkey-value").send_keys(value, Keys.ENTER)
        opened(d, name)
        wait(d, lambda d: shown in d.find_element(By.ID, "value").text)
        assert d.find_element(By.ID, "viewer-type").text == ty
        key_in_tree(d, name)
        assert rest(server, "TYPE", name) == ty
    shot(d, "every-type")
    assert errors_in_console(d) == []


def test_a_database_token_sees_its_own_usage(server, browser):
    d = browser
    sign_in(d, server, TOKEN)
    d.find_element(By.CSS_SELECTOR, 'nav button[data-view="health"]').click()
    chart = lambda d, t: d.find_element(By.CSS_SELECTOR, f'[data-chart="{t}"] .now').text  # noqa: E731
    wait(d, lambda d: chart(d, "keys") != "")
    assert int(chart(d, "keys")) == rest(server, "DBSIZE")

    def busy(d):
        for _ in range(10):
            rest(server, "SET", "usage:k", "v")
        text = chart(d, "commands")
        return text.endswith("/s") and float(text.split()[0]) > 0
    wait(d, busy, seconds=15)
    # No server-wide metric is shown to a database token.
    assert not d.find_elements(By.CSS_SELECTOR, '[data-chart="log size"]')
    shot(d, "usage")
    assert errors_in_console(d) == []


def test_geo_positions_and_a_streams_consumers_and_pending_entries(server, browser):
    d = browser
    rest(server, "GEOADD", "places", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania")
    rest(server, "XADD", "jobs", "1-1", "task", "a")
    rest(server, "XADD", "jobs", "1-2", "task", "b")
    rest(server, "XGROUP", "CREATE", "jobs", "workers", "0")
    rest(server, "XREADGROUP", "GROUP", "workers", "w1", "COUNT", "1", "STREAMS", "jobs", ">")
    sign_in(d, server, TOKEN)
    key_in_tree(d, "places").click()
    opened(d, "places")
    d.find_element(By.ID, "geo-positions").click()
    wait(d, lambda d: "13.36138" in d.find_element(By.ID, "value").text)
    assert "Catania" in d.find_element(By.ID, "value").text
    key_in_tree(d, "jobs").click()
    wait(d, lambda d: "group workers" in d.find_element(By.ID, "value").text)
    text = d.find_element(By.ID, "value").text
    assert "w1" in text and "1-1" in text
    shot(d, "stream-groups")
    assert errors_in_console(d) == []


def test_a_collection_is_edited_in_the_viewer(server, browser):
    d = browser
    rest(server, "DEL", "edit:h", "edit:z")
    rest(server, "HSET", "edit:h", "a", "1")
    rest(server, "ZADD", "edit:z", "1", "one")
    sign_in(d, server, TOKEN)
    d.find_element(By.ID, "open-key").send_keys("edit:h", Keys.ENTER)
    opened(d, "edit:h")
    field, value = d.find_elements(By.CSS_SELECTOR, "#value-editor .edit-add")
    field.send_keys("b")
    value.send_keys("2")
    d.find_element(By.ID, "value-add").click()
    wait(d, lambda d: rest(server, "HGET", "edit:h", "b") == "2")
    wait(d, lambda d: "2 fields" in d.find_element(By.ID, "value").text)
    d.find_element(By.ID, "value-remove-which").send_keys("a")
    d.find_element(By.ID, "value-remove").click()
    d.switch_to.alert.accept()
    wait(d, lambda d: rest(server, "HEXISTS", "edit:h", "a") == 0)
    d.find_element(By.ID, "open-key").clear()
    d.find_element(By.ID, "open-key").send_keys("edit:z", Keys.ENTER)
    opened(d, "edit:z")
    score, member = d.find_elements(By.CSS_SELECTOR, "#value-editor .edit-add")
    score.send_keys("2.5")
    member.send_keys("two")
    d.find_element(By.ID, "value-add").click()
    wait(d, lambda d: rest(server, "ZSCORE", "edit:z", "two") == "2.5")
    shot(d, "collection-edit")
    assert errors_in_console(d) == []
