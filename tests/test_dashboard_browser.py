"""The dashboard in a real browser (Playwright driving Debian's Chromium) against the service started as the
README starts it (`entity-monitor serve`, scheduler included). Screenshots of each page go to
tests/screenshots/ for a reviewer. Skipped where Chromium or the playwright package is missing."""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.served import _free_port, _wait_until_serving
from tests.webhook_helpers import Receiver, Reply

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "tests" / "screenshots"
BIN = Path(sys.executable).parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _cli(env, *args) -> str:
    return subprocess.run([str(BIN / "entity-monitor"), *args], env=env, cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def server(tmp_path, migrated_template):
    """`entity-monitor serve` on a fresh database, the development relaxations on (a local receiver)."""
    database = tmp_path / "monitor.db"
    shutil.copy(migrated_template, database)
    port = _free_port()
    env = {**os.environ, "INSTANCE_PATH": str(tmp_path / "instance"), "DATABASE_URL": f"sqlite:///{database}",
           "BIND": f"127.0.0.1:{port}", "WEBHOOK_ALLOW_HTTP": "1", "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "1",
           "CHECK_INITIAL_DELAY_SECONDS": "3600", "WEBHOOK_RETRY_SCHEDULE": "3600",
           "WORKER_CPU": "off"}  # as every test server outside test_production's, whose CPU tests it would sway
    log = open(tmp_path / "serve.log", "w")
    process = subprocess.Popen([str(BIN / "entity-monitor"), "serve"], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(base, process)
        yield base, env
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture
def page():
    SCREENSHOTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(60_000)
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        refused = []  # what the pages' Content-Security-Policy blocked: the pages must need nothing it forbids
        page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text
                else None)
        yield page
        browser.close()
        assert refused == []


def shot(page, name):
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def reload_until(page, text, deadline_seconds=60):
    """Reload until `text` shows (the scheduler works in the background); fails with the page when it never does."""
    deadline = time.monotonic() + deadline_seconds
    while text not in page.content():
        assert time.monotonic() < deadline, f"{text!r} never appeared on {page.url}"
        time.sleep(0.5)
        page.reload()


def new_account(env, name):
    created = json.loads(_cli(env, "accounts", "create", "--name", name, "--json"))
    return created["api_key"]


def test_find_why_an_event_was_not_delivered_and_fix_it(server, page):
    base, env = server
    key = new_account(env, "Sales Ops")
    with Receiver() as receiver:
        page.goto(base + "/")
        assert "/login" in page.url
        shot(page, "01-sign-in")
        page.get_by_label("API key").fill(key)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()  # the form's answer page, loaded before it is read
        assert "Get started" in page.content()
        shot(page, "02-overview-new-account")

        page.get_by_role("link", name="Set your webhook endpoint").click()
        page.get_by_label("Endpoint URL").fill(receiver.url)
        page.get_by_role("button", name="Save and show the secret").click()
        page.wait_for_load_state()  # the form's answer page, loaded before it is read
        assert page.locator("#secret").inner_text().startswith("whsec_")
        shot(page, "03-webhook-secret-shown-once")

        page.get_by_role("link", name="Subscriptions").click()
        page.get_by_label("Profile URL or id").fill("https://www.linkedin.com/in/jane-doe")
        page.get_by_role("button", name="Subscribe").click()
        page.wait_for_load_state()  # the form's answer page, loaded before it is read
        subscription_id = page.url.rsplit("/", 1)[1]
        assert "No events yet" in page.content()

        _cli(env, "checks", "run", subscription_id)
        page.reload()
        assert "subscription.initial_state" in page.content()
        shot(page, "04-subscription-timeline")
        reload_until(page, "succeeded")  # the scheduler delivered the initial state
        assert len(receiver.requests) == 1

        receiver.reply = Reply(status=500)  # the receiver breaks
        page.get_by_role("link", name="subscription.initial_state").click()
        event_url = page.url
        page.get_by_role("button", name="Redeliver now").click()
        reload_until(page, "<td>500</td>")
        sent = receiver.requests[1].headers  # the failed try's headers are shown as the receiver got them
        headers_shown = page.get_by_label("Headers of try 2").inner_text()
        for name in ("X-Webhook-Attempt", "X-Webhook-Timestamp", "X-Webhook-Signature"):
            assert f"{name}: {sent[name]}" in headers_shown
        shot(page, "05-event-failed-attempt")
        page.get_by_role("link", name="Deliveries").click()
        page.get_by_label("Result").select_option("failed")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_load_state()  # the form's answer page, loaded before it is read
        assert "1 attempt," in page.content() and "500" in page.content()
        shot(page, "06-deliveries-failed")

        receiver.reply = Reply(status=200)  # fixed: send it again
        page.goto(event_url)
        page.get_by_role("button", name="Redeliver now").click()
        reload_until(page, "<td>3</td>")
        assert page.locator("tbody tr").last.inner_text().split("\t")[1].strip() == "succeeded"
        assert len(receiver.requests) == 3

        page.get_by_role("link", name="Webhook").click()
        page.get_by_role("button", name="Send test").click()
        page.wait_for_load_state()  # the form's answer page, loaded before it is read
        assert "Delivered: your endpoint answered 200" in page.content() and len(receiver.requests) == 4
        page.reload()  # sends the form again: no second test event (it sent one: browser walk)
        assert len(receiver.requests) == 4 and "A test event was sent since this form was shown" in page.content()
        page.get_by_role("button", name="Rotate secret").click()
        page.wait_for_load_state()  # the form's answer page, loaded before it is read
        assert "New signing secret" in page.content() and "hmac.compare_digest" in page.content()
        shot(page, "07-webhook-rotated")

        for name, path in (("08-overview", "/"), ("09-subscriptions", "/subscriptions"), ("10-events", "/events"),
                           ("11-keys", "/keys")):
            page.goto(base + path)
            shot(page, name)
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(base + "/")
        shot(page, "12-overview-phone")

        refused = page.request.post(f"{base}/subscriptions/{subscription_id}/cancel", max_redirects=0)
        assert refused.status == 403  # no CSRF token
        page.goto(f"{base}/subscriptions/{subscription_id}")
        assert "Cancel" in page.content() and ">active<" in page.content()

        other_key = new_account(env, "Other team")
        theirs = requests.post(f"{base}/api/v1/subscriptions", headers={"X-API-Key": other_key}, timeout=10,
                               json={"entity_type": "company", "network_id": "acme"}).json()["id"]
        response = page.goto(f"{base}/subscriptions/{theirs}")
        assert response.status == 404 and "acme" not in page.content()

        page.get_by_role("button", name="Sign out").click()
        assert "You are signed out" in page.content()
        assert "/login" in page.goto(base + "/subscriptions").url


def test_import_a_csv_shows_every_rows_outcome_and_the_progress_reaching_100(server, page, tmp_path):
    base, env = server
    key = new_account(env, "Data team")
    requests.post(f"{base}/api/v1/subscriptions", headers={"X-API-Key": key}, timeout=10,
                  json={"entity_type": "contact", "network_id": "already"}).raise_for_status()
    export = tmp_path / "crm.csv"
    export.write_text("Name,LinkedIn URL\nJane,https://www.linkedin.com/in/jane\nAl,linkedin.com/in/already\n"
                      "Bad,https://example.com/x\nJane again,https://www.linkedin.com/in/jane\n")
    page.goto(base + "/subscriptions")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()  # back on the subscriptions page, signed in
    page.get_by_label("upload a CSV export").set_input_files(str(export))
    page.get_by_role("button", name="Import").click()
    page.wait_for_load_state()  # the streamed result page, loaded to its end
    progress = page.get_by_label("Rows imported")
    assert progress.is_visible() and progress.get_attribute("value") == progress.get_attribute("max") == "4"
    assert "4 of 4 rows (100%)" in page.content()
    rows = page.locator(".import-log tbody tr")
    assert [rows.nth(index).locator("td").nth(2).inner_text() for index in range(rows.count())] == [
        "subscribed", "already present", "refused", "already present"]
    assert "example.com/x" in rows.nth(2).inner_text() and "VALIDATION_ERROR" in rows.nth(2).inner_text()
    with page.expect_download() as download:  # a data: link, which the pages' policy leaves alone
        page.get_by_role("link", name="Download every row's result (CSV)").click()
    assert download.value.suggested_filename == "import-results.csv"
    header = Path(download.value.path()).read_text().splitlines()[0]
    assert header == "Name,LinkedIn URL,row,result,subscription_id,code,reason"
    shot(page, "13-import-result")


def test_a_timeline_change_holding_a_long_url_fits_a_phone(page):
    """A reaction's URL in a subscription's timeline widened the whole page to 648 px at 390 (browser walk)."""
    page.set_viewport_size({"width": 390, "height": 844})
    url = "https://www.linkedin.com/feed/update/act_1a9cf0eab696ed30"
    page.set_content(f"""<main><section class="card"><ol class="timeline"><li><table class="diff"><thead><tr>
        <th>Field</th><th>Before</th><th>After</th></tr></thead><tbody><tr><td>reaction</td><td class="before">—</td>
        <td class="after">{url}</td></tr></tbody></table></li></ol></section></main>""")
    page.add_style_tag(path=str(ROOT / "app" / "dashboard" / "static" / "dashboard.css"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert url in page.inner_text("td.after")


def test_a_delivery_error_reads_in_whole_lines_on_a_phone(server, page):
    """Squeezed into a phone's width, a try's error took a column of 47 px, a few letters a line ("connectio / n
    refus / ed"), 300 px a row, on Deliveries and on the event's page (browser walk at 390 px)."""
    base, env = server
    key = new_account(env, "Phone team")
    api = {"headers": {"X-API-Key": key}, "timeout": 10}
    requests.post(f"{base}/api/v1/webhooks/configure", json={"endpoint_url": "http://127.0.0.1:9/hook"},
                  **api).raise_for_status()  # (nothing listens on port 9: the connection is refused)
    subscription_id = requests.post(f"{base}/api/v1/subscriptions", json={"entity_type": "company",
                                                                          "network_id": "acme"}, **api).json()["id"]
    _cli(env, "checks", "run", subscription_id)
    page.set_viewport_size({"width": 390, "height": 844})
    _sign_in_at(page, f"{base}/deliveries", key)
    reload_until(page, "connection refused")
    shot(page, "16-deliveries-phone")
    error = page.locator("td.wrap").first
    lines = error.evaluate("""cell => {  // the text's own lines (the cell is as tall as its row)
        const text = document.createRange();
        text.selectNodeContents(cell);
        return Math.round(text.getBoundingClientRect().height / parseFloat(getComputedStyle(cell).lineHeight));
    }""")
    assert "connection refused" in error.inner_text() and lines <= 4, lines
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # the table scrolls in its box, not the page


def test_a_filters_label_is_beside_its_control_on_a_phone(server, page):
    """Wrapped as they came, the list's filters put "Type" at the end of the status list's line and its own list on
    the next, beside the Filter button (browser walk at 390 px)."""
    base, env = server
    page.set_viewport_size({"width": 390, "height": 844})
    _sign_in_at(page, f"{base}/subscriptions", new_account(env, "Phone team"))
    for control in ("search", "status", "type"):
        label, field = (page.locator(selector).bounding_box() for selector in (f"label[for={control}]", f"#{control}"))
        middle = label["y"] + label["height"] / 2
        assert field["y"] < middle < field["y"] + field["height"] and label["x"] + label["width"] <= field["x"], control
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_cancelling_asks_first_and_a_no_cancels_nothing(server, page):
    """Cancel (which cannot be undone) went at once, for one subscription and for every one selected, beside Pause
    and Resume; only revoking a key and rotating the secret asked (browser walk)."""
    base, env = server
    key = new_account(env, "Careful team")
    subscription_id = requests.post(f"{base}/api/v1/subscriptions", headers={"X-API-Key": key}, timeout=10,
                                    json={"entity_type": "company", "network_id": "acme"}).json()["id"]
    asking = page.context.new_page()  # without the fixture's page accepting every dialog
    questions = []
    asking.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
    asking.goto(base + "/subscriptions")
    asking.get_by_label("API key").fill(key)
    asking.get_by_role("button", name="Sign in").click()
    asking.wait_for_load_state()
    asking.get_by_label("Select all on this page").check()
    asking.get_by_role("button", name="Pause").click()
    asking.wait_for_load_state()  # pausing does not ask
    assert questions == [] and "Pause: 1 done." in asking.content()
    asking.get_by_label("Select all on this page").check()
    asking.get_by_role("button", name="Cancel").click()
    asking.goto(f"{base}/subscriptions/{subscription_id}")
    asking.get_by_role("button", name="Cancel").click()
    asking.goto(f"{base}/subscriptions/{subscription_id}")
    assert len(questions) == 2 and all("cannot be resumed" in question for question in questions)
    assert ">paused<" in asking.content()


def test_what_was_typed_when_the_session_had_ended_is_back_after_signing_in_again(server, page):
    """Metadata typed on a page whose session had ended (after 12 hours) was lost: the save reached the sign-in page,
    which led back to the subscription's page with the box as stored (walk)."""
    base, env = server
    key = new_account(env, "Late team")
    api = {"headers": {"X-API-Key": key}, "timeout": 10}
    subscription_id = requests.post(f"{base}/api/v1/subscriptions", json={"entity_type": "company",
                                                                          "network_id": "acme"}, **api).json()["id"]
    page.goto(f"{base}/subscriptions/{subscription_id}")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///")) as database:  # the session ends
        database.execute("UPDATE dashboard_sessions SET expires_at = '2000-01-01 00:00:00.000000'")
    typed = '{"owner": "sam"}'
    box = page.get_by_label("JSON object, sent with every event")
    box.fill(typed)
    page.get_by_role("button", name="Save metadata").click()
    page.wait_for_load_state()
    assert "/login" in page.url
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    assert page.url == f"{base}/subscriptions/{subscription_id}" and box.input_value() == typed
    assert "Your session had ended, so nothing was done." in page.content()
    shot(page, "14-typed-text-back-after-signing-in")
    page.get_by_role("button", name="Save metadata").click()
    page.wait_for_load_state()
    assert "Custom metadata saved." in page.content() and "Your session had ended" not in page.content()
    assert requests.get(f"{base}/api/v1/subscriptions/{subscription_id}", **api).json()["custom_metadata"] == {
        "owner": "sam"}
    page.reload()
    assert "Your session had ended" not in page.content()
    # the "Add one" form's action is every account's: text kept for one is not given to another signing in (review)
    page.goto(f"{base}/subscriptions")
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///")) as database:
        database.execute("UPDATE dashboard_sessions SET expires_at = '2000-01-01 00:00:00.000000'")
    page.get_by_label("Profile URL or id").fill("https://www.linkedin.com/in/late-team-lead")
    page.get_by_role("button", name="Subscribe", exact=True).click()
    page.wait_for_load_state()
    page.get_by_label("API key").fill(new_account(env, "Other team"))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    assert page.url == f"{base}/subscriptions" and page.get_by_label("Profile URL or id").input_value() == ""
    assert "Your session had ended" not in page.content() and "late-team-lead" not in page.content()


def test_a_bulk_action_sent_when_the_session_had_ended_is_back_selected_on_its_list_view(server, page):
    """A pause of the selected sent once the session had ended led, after signing in, to page 1 of the whole list
    without a word: nothing was done, and nothing said so (dashboard walk). It comes back to the list's view with the
    selection and why; each button keeps its own action (kept, the three of one name took the last one's value)."""
    base, env = server
    key = new_account(env, "Bulk team")
    api = {"headers": {"X-API-Key": key}, "timeout": 10}
    ids = [requests.post(f"{base}/api/v1/subscriptions", json={"entity_type": "company", "network_id": name},
                         **api).json()["id"] for name in ("acme", "globex", "initech")]
    view = f"{base}/subscriptions?search=e&entity_type=company"
    page.goto(view)
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///")) as database:  # the session ends
        database.execute("UPDATE dashboard_sessions SET expires_at = '2000-01-01 00:00:00.000000'")
    page.get_by_label("Select globex").check()
    page.get_by_role("button", name="Pause", exact=True).click()
    page.wait_for_load_state()
    assert "/login" in page.url
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    assert page.url == view and "Your session had ended, so nothing was done." in page.content()
    assert page.get_by_label("Select globex").is_checked() and not page.get_by_label("Select acme").is_checked()
    assert requests.get(f"{base}/api/v1/subscriptions/{ids[1]}", **api).json()["status"] == "active"
    page.get_by_role("button", name="Pause", exact=True).click()
    page.wait_for_load_state()
    assert "Pause: 1 done." in page.content() and page.url == view
    assert [requests.get(f"{base}/api/v1/subscriptions/{id_}", **api).json()["status"] for id_ in ids] == [
        "active", "paused", "active"]


def test_what_was_typed_in_a_tab_opened_before_signing_in_again_is_back_on_its_page(server, page):
    """Signing in again in another tab refused the older tab's form with a dead end, and what it had typed was lost
    (dashboard walk)."""
    base, env = server
    key = new_account(env, "Two tabs team")
    subscription_id = requests.post(f"{base}/api/v1/subscriptions", json={"entity_type": "company",
                                    "network_id": "acme"}, headers={"X-API-Key": key}, timeout=10).json()["id"]
    page.goto(f"{base}/subscriptions/{subscription_id}")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    other_tab = page.context.new_page()
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///")) as database:  # the session ends
        database.execute("UPDATE dashboard_sessions SET expires_at = '2000-01-01 00:00:00.000000'")
    other_tab.goto(f"{base}/subscriptions")
    other_tab.get_by_label("API key").fill(key)
    other_tab.get_by_role("button", name="Sign in").click()
    other_tab.wait_for_load_state()
    typed = '{"owner": "kim"}'
    page.get_by_label("JSON object, sent with every event").fill(typed)
    page.get_by_role("button", name="Save metadata").click()
    page.wait_for_load_state()
    assert "security token is not this session" in page.content()
    page.get_by_role("link", name="Open the page again").click()
    page.wait_for_load_state()
    assert page.url == f"{base}/subscriptions/{subscription_id}"
    assert page.get_by_label("JSON object, sent with every event").input_value() == typed
    assert "What you typed is back: send it again." in page.content()


def _sign_in_at(page, url, key):
    page.goto(url)
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def test_what_was_typed_in_a_form_the_keys_rate_limit_refused_is_back_on_its_page(server, page):
    """The 429 page lost the new subscription's fields (as a pasted list or a webhook URL), and its one link led to
    the overview (dashboard walk)."""
    base, env = server
    key = new_account(env, "Busy team")
    view = f"{base}/subscriptions?search=jane&status=active"
    _sign_in_at(page, view, key)
    with requests.Session() as api:  # the key's writes spent through the API: the dashboard's share that limit
        for _ in range(100):  # (the starter tier's writes in a window)
            assert api.post(f"{base}/api/v1/subscriptions", json={}, headers={"X-API-Key": key}).status_code == 400
    page.get_by_label("Profile URL or id").fill("jane-doe")
    page.locator("#entity_type").select_option("contact")
    page.get_by_role("button", name="Subscribe", exact=True).click()
    page.wait_for_load_state()
    assert "This key can be used again in 15 minutes." in page.content()
    page.get_by_role("link", name="Open the page again").click()
    page.wait_for_load_state()
    assert page.url == view and page.get_by_label("Profile URL or id").input_value() == "jane-doe"
    assert page.locator("#entity_type").input_value() == "contact"
    assert re.search(r"This key's rate limit was reached, so nothing was done: send it again from [0-9:]{5} UTC\. "
                     r"What you typed is back: send it again\.", page.content())
    shot(page, "15-typed-text-back-after-the-rate-limit")


def test_a_form_refused_after_a_file_was_chosen_asks_for_the_file_again(server, page, tmp_path):
    """No page may put a chosen file back in its input: the note said "What you typed is back: send it again", and an
    import sent again so went without its file (dashboard walk)."""
    base, env = server
    key = new_account(env, "Upload team")
    _sign_in_at(page, f"{base}/subscriptions", key)
    with requests.Session() as api:  # the key's bulk calls spent through the API (the starter tier's 10 a window)
        for _ in range(10):
            assert api.post(f"{base}/api/v1/subscriptions/bulk", json={},
                            headers={"X-API-Key": key}).status_code == 400
    export = tmp_path / "crm.csv"
    export.write_text("LinkedIn URL\nhttps://www.linkedin.com/in/jane\n")
    page.get_by_label("upload a CSV export").set_input_files(str(export))
    page.get_by_role("button", name="Import").click()
    page.wait_for_load_state()
    assert "This key can be used again in 15 minutes." in page.content()
    page.get_by_role("link", name="Open the page again").click()
    page.wait_for_load_state()
    assert "What you typed is back, but not the file you chose: choose it again, then send." in page.content()


def test_a_webhook_forms_event_boxes_are_kept_as_ticked(server, page):
    """Kept by name alone, the event boxes (one name, a box a value) came back as the page had them: a refused form
    left every event ticked where the team had chosen one family (dashboard walk)."""
    base, env = server
    key = new_account(env, "Webhook team")
    _sign_in_at(page, f"{base}/webhook", key)
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///")) as database:  # the session ends
        database.execute("UPDATE dashboard_sessions SET expires_at = '2000-01-01 00:00:00.000000'")
    page.get_by_label("Endpoint URL").fill("https://crm.example.com/hooks")
    page.get_by_label("all", exact=True).uncheck()
    page.get_by_label("every contact event").check()
    page.get_by_role("button", name="Save and show the secret").click()
    page.wait_for_load_state()
    _sign_in_at(page, page.url, key)  # the sign-in page, which leads back to the webhook's
    assert page.url == f"{base}/webhook" and page.get_by_label("Endpoint URL").input_value() == (
        "https://crm.example.com/hooks")
    assert not page.get_by_label("all", exact=True).is_checked()
    assert page.get_by_label("every contact event").is_checked()
    assert "Your session had ended, so nothing was done." in page.content()


def test_the_page_script_runs_where_the_browser_refuses_its_storage(server, page):
    """Reading the tab's storage threw where the browser refuses it (a privacy setting): the rest of the script
    stopped, and an import showed no progress bar (review)."""
    base, env = server
    page.add_init_script("Object.defineProperty(window, 'sessionStorage', {get() {"
                         " throw new DOMException('The operation is insecure.', 'SecurityError'); }})")
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{base}/subscriptions")
    page.get_by_label("API key").fill(new_account(env, "Private team"))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    shows_progress = page.evaluate("""() => {
        const form = document.querySelector("form[data-progress]");
        form.dispatchEvent(new Event("submit", {cancelable: true}));  // (an event only: nothing is sent)
        return !form.querySelector("progress").hidden;
    }""")
    assert shows_progress and not errors, errors


def _contrast(first, second):
    def luminance(rgb):
        linear = [value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4
                  for value in (channel / 255 for channel in rgb)]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    lighter, darker = sorted((luminance(first), luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def test_the_focus_ring_stands_out_from_the_page_and_the_cards(page):
    """The ring was #8fb3ff: 2.1:1 on a card's white and 1.95:1 on the page, under WCAG's 3:1 for what shows focus,
    so a keyboard user lost track of where they were (browser walk, keyboard only)."""
    page.set_content('<main><section class="card"><input id="field" aria-label="x"><a href="#x">link</a></section>'
                     '<button>Go</button></main>')
    page.add_style_tag(path=str(ROOT / "app" / "dashboard" / "static" / "dashboard.css"))
    for selector in ("#field", "a", "button"):
        page.focus(selector)
        ring = page.eval_on_selector(selector, "element => getComputedStyle(element).outlineColor")
        rgb = [int(part) for part in ring[ring.index("(") + 1:ring.index(")")].split(",")[:3]]
        for background in ((255, 255, 255), (0xf5, 0xf7, 0xfa)):
            assert _contrast(rgb, background) >= 3, (selector, ring, background)


def test_a_page_the_keys_limit_refuses_after_a_form_was_done_does_not_keep_it_as_not_done(server, page):
    """A page refused by the key's rate limit passed on the form sent just before it as refused ("so nothing was
    done: send it again"), though that form had been done: its answer led to this page, refused on its own (a read
    spent, the write not). Sent again, an add or an import is refused as a duplicate; only a form refused itself, or
    one kept from an earlier refusal, is passed on."""
    base, env = server
    key = new_account(env, "Busy team")
    api = {"headers": {"X-API-Key": key}, "timeout": 10}
    subscription_id = requests.post(f"{base}/api/v1/subscriptions", json={"entity_type": "contact",
                                                                          "network_id": "jane-doe"}, **api).json()["id"]
    _sign_in_at(page, f"{base}/subscriptions/{subscription_id}", key)
    with requests.Session() as reads:  # the key's reads spent: the page the saved form leads to is refused
        while reads.get(f"{base}/api/v1/subscriptions", **api).status_code != 429:
            pass
    page.get_by_label("JSON object, sent with every event").fill('{"owner": "sam"}')
    page.get_by_role("button", name="Save metadata").click()
    page.wait_for_load_state()
    assert "This key can be used again in" in page.content()
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///")) as database:
        assert json.loads(database.execute("SELECT custom_metadata FROM subscriptions").fetchone()[0]) == {
            "owner": "sam"}  # done
    assert page.evaluate("window.sessionStorage.getItem('kept-form')") is None


def test_what_was_typed_on_a_subscriptions_page_opened_from_a_list_is_back_after_signing_in(server, page):
    """A subscription's page opened from a filtered list carries `list=` in its forms' actions; a form sent once the
    session had ended came back, after signing in, to the page without it (the form's URL leads to its page, its
    query dropped), whose form's action was then not the kept one's: what was typed was lost, and the page's
    *← Subscriptions* led to the whole list."""
    base, env = server
    key = new_account(env, "Sales Ops")
    subscription_id = requests.post(f"{base}/api/v1/subscriptions", json={"entity_type": "contact",
                                                                          "network_id": "jane-doe"},
                                    headers={"X-API-Key": key}, timeout=10).json()["id"]
    _sign_in_at(page, f"{base}/subscriptions?search=jane&status=active", key)
    page.get_by_role("link", name="jane-doe").click()
    page.wait_for_load_state()
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///")) as database:  # the session ends
        database.execute("UPDATE dashboard_sessions SET expires_at = '2000-01-01 00:00:00.000000'")
    page.get_by_label("JSON object, sent with every event").fill('{"owner": "sam"}')
    page.get_by_role("button", name="Save metadata").click()
    page.wait_for_load_state()
    _sign_in_at(page, page.url, key)
    assert page.url.startswith(f"{base}/subscriptions/{subscription_id}?list=")
    assert page.get_by_label("JSON object, sent with every event").input_value() == '{"owner": "sam"}'
    assert "Your session had ended, so nothing was done." in page.content()
    assert page.get_by_role("link", name="← Subscriptions").get_attribute("href") == (
        "/subscriptions?search=jane&status=active")
