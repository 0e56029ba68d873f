"""The web console's databases view in a real browser (see test_console.py for the driver):
the admin token lists the databases with their usage, creates one, opens it in the data
browser, resets its tokens and deletes it, each destructive step confirmed."""

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from test_console import browser, errors_in_console, fresh_page, key_in_tree, shot, wait  # noqa: E402,F401

ADMIN = "console-admin-token"
TIDEPOOL_FLAGS = ["--admin-token", ADMIN]


def admin(server, method, path, body=None):
    req = urllib.request.Request(f"{server}/_admin/{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def row(d, name):
    found = d.find_elements(By.CSS_SELECTOR, f'[data-database="{name}"]')
    return found[0] if found else None


def click(d, name, label):
    """Clicks the button `label` of database `name`'s row, looking the row up again if the
    view was redrawn meanwhile."""
    def go(d):
        r = row(d, name)
        if r is None:
            return False
        r.find_element(By.XPATH, f".//button[text()='{label}']").click()
        return True
    wait(d, go)


def sign_in_admin(d, server):
    fresh_page(d, server)
    d.find_element(By.ID, "token").send_keys(ADMIN)
    d.find_element(By.ID, "signin-button").click()
    wait(d, lambda d: d.find_element(By.ID, "databases").is_displayed())


def test_the_admin_token_manages_the_databases(server, browser):
    d = browser
    sign_in_admin(d, server)
    assert "admin token" in d.find_element(By.ID, "who").text
    wait(d, lambda d: row(d, "default"))
    d.find_element(By.ID, "db-name").send_keys("shop", Keys.ENTER)
    wait(d, lambda d: row(d, "shop"))
    shot(d, "databases")
    # Open it: the data browser works on it with its own token.
    click(d, "shop", "Open")
    wait(d, lambda d: d.find_element(By.ID, "browser").is_displayed())
    d.find_element(By.ID, "newkey-name").send_keys("cart:1")
    d.find_element(By.ID, "newkey-value").send_keys("3 apples", Keys.ENTER)
    key_in_tree(d, "cart:1")
    token = admin(server, "GET", "databases/shop")["token"]
    req = urllib.request.Request(f"{server}/get/cart:1", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req) as r:
        assert json.loads(r.read())["result"] == "3 apples"
    # Reset its tokens (confirmed): the old one stops working.
    d.find_element(By.CSS_SELECTOR, 'nav button[data-view="databases"]').click()
    click(d, "shop", "Reset tokens")
    d.switch_to.alert.accept()
    wait(d, lambda d: admin(server, "GET", "databases/shop")["token"] != token)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 401
    # Delete it (confirmed; dismissing the question keeps it).
    click(d, "shop", "Delete")
    d.switch_to.alert.dismiss()
    assert row(d, "shop") is not None
    click(d, "shop", "Delete")
    d.switch_to.alert.accept()
    wait(d, lambda d: row(d, "shop") is None)
    assert [db["name"] for db in admin(server, "GET", "databases")["databases"]] == ["default"]
    assert errors_in_console(d, refusals_expected=True) == []


def test_the_health_view_charts_the_servers_own_metrics(server, browser):
    d = browser
    sign_in_admin(d, server)
    d.find_element(By.CSS_SELECTOR, 'nav button[data-view="health"]').click()
    chart = lambda d, t: d.find_element(By.CSS_SELECTOR, f'[data-chart="{t}"] .now').text  # noqa: E731
    wait(d, lambda d: chart(d, "log size").endswith("B"))
    # Requests between two scrapes show as a rate.
    token = admin(server, "GET", "databases/default")["token"]
    save = urllib.request.Request(f"{server}/", data=b'["SAVE"]', headers={"Authorization": f"Bearer {token}"})
    urllib.request.urlopen(save).read()
    wait(d, lambda d: chart(d, "snapshots") == "1" and chart(d, "snapshot duration").endswith("ms"))

    def busy(d):
        for _ in range(20):
            req = urllib.request.Request(f"{server}/set/h/1", headers={"Authorization": f"Bearer {token}"})
            urllib.request.urlopen(req).read()
        text = chart(d, "HTTP requests")
        return text.endswith("/s") and float(text.split()[0]) > 0
    wait(d, busy, seconds=15)
    assert len(d.find_elements(By.CSS_SELECTOR, ".chart polyline")) >= 10
    shot(d, "health")
    assert errors_in_console(d) == []
