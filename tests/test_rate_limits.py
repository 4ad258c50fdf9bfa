"""Rate limits (contract §8, issue 2 point 7): per key, four shared classes, headers, 429 body.

Tiers are configuration, so the tests shrink the starter tier's limits instead of sending 1000 requests."""
import copy
import html
import re
import sqlite3
import threading
import time
from datetime import timedelta

import pytest
from limits.errors import StorageError
from sqlalchemy import func, select

from app.api import limits
from app.common import utcnow
from app.config import DEFAULT_TIERS
from app.extensions import db
from app.models import DashboardSession
from app.services import keys, subscriptions
from conftest import Tenant, make_tenant, raising
from test_rate_limit_storage import closed_port

LIMITS = {"read": 4, "write": 3, "bulk": 2, "default": 3}
LIMITS_UNAUTHENTICATED = 2
WINDOW = 900


@pytest.fixture
def app_config():
    tiers = copy.deepcopy(DEFAULT_TIERS)
    tiers["starter"]["rate_limits"] = dict(LIMITS)
    tiers["growth"]["rate_limits"] = {"read": 7, "write": 6, "bulk": 5, "default": 6}
    return {"TIERS": tiers, "RATELIMIT_UNAUTHENTICATED": LIMITS_UNAUTHENTICATED}


def _spend(tenant, method, path, times, **kwargs):
    responses = [tenant.request(method, path, **kwargs) for _ in range(times)]
    assert all(response.status_code != 429 for response in responses), [r.status_code for r in responses]
    return responses


def _assert_limited(response, limit):
    assert response.status_code == 429
    body = response.get_json()
    assert body["error"] == "RATE_LIMIT_EXCEEDED"
    assert body["request_id"] == response.headers["X-Request-Id"]
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= WINDOW
    assert body["details"] == {"limit": limit, "window_seconds": WINDOW, "retry_after": retry_after}
    assert response.headers["X-RateLimit-Limit"] == str(limit)
    assert response.headers["X-RateLimit-Remaining"] == "0"
    return body


def _bulk_body():
    return {"subscriptions": [{"entity_type": "contact", "network_id": "jane"}]}


def test_keyed_responses_carry_the_three_headers(alice):
    first = alice.get("/subscriptions")
    assert first.headers["X-RateLimit-Limit"] == str(LIMITS["read"])
    assert first.headers["X-RateLimit-Remaining"] == str(LIMITS["read"] - 1)
    reset = int(first.headers["X-RateLimit-Reset"])
    assert time.time() - 5 < reset <= time.time() + WINDOW + 5  # Unix seconds, within the window
    assert "Retry-After" not in first.headers
    second = alice.get("/subscriptions")
    assert second.headers["X-RateLimit-Remaining"] == str(LIMITS["read"] - 2)


def test_error_responses_of_keyed_requests_carry_the_headers_too(alice):
    response = alice.get("/subscriptions?limit=0")
    assert response.status_code == 400
    assert response.headers["X-RateLimit-Limit"] == str(LIMITS["read"])
    missing = alice.get("/subscriptions/sub_nope")
    assert missing.status_code == 404 and missing.headers["X-RateLimit-Remaining"] == str(LIMITS["read"] - 2)


def test_headers_name_the_class_of_the_route(alice):
    assert alice.get("/subscriptions").headers["X-RateLimit-Limit"] == str(LIMITS["read"])
    assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"}) \
        .headers["X-RateLimit-Limit"] == str(LIMITS["write"])
    assert alice.get("/subscriptions/export").headers["X-RateLimit-Limit"] == str(LIMITS["bulk"])
    assert alice.get("/account").headers["X-RateLimit-Limit"] == str(LIMITS["default"])


def test_read_class_429_with_retry_after_and_body(alice):
    _spend(alice, "GET", "/subscriptions", LIMITS["read"])
    _assert_limited(alice.get("/subscriptions"), LIMITS["read"])


def test_read_class_is_shared_by_list_and_get(alice):
    _spend(alice, "GET", "/subscriptions", 2)
    _spend(alice, "GET", "/subscriptions/sub_nope", 2)
    _assert_limited(alice.get("/subscriptions"), LIMITS["read"])
    _assert_limited(alice.get("/subscriptions/sub_other"), LIMITS["read"])


def test_bulk_class_is_shared_by_bulk_create_bulk_cancel_batch_status_and_export(alice):
    assert alice.post("/subscriptions/bulk", json=_bulk_body()).status_code == 200
    assert alice.get("/subscriptions/export").status_code == 200
    _assert_limited(alice.delete("/subscriptions/bulk", json={"subscription_ids": ["sub_x"]}), LIMITS["bulk"])
    _assert_limited(alice.patch("/subscriptions/bulk", json={"subscription_ids": ["sub_x"], "status": "paused"}),
                    LIMITS["bulk"])
    _assert_limited(alice.get("/subscriptions/export?format=json"), LIMITS["bulk"])


def test_a_head_of_the_export_is_a_read_and_leaves_the_bulk_class_unspent(alice):
    """A HEAD of the export spent the bulk class as its GET does (API walk), though it runs no export: it counts in
    the read class, shared with the list, and its headers describe that class."""
    heads = _spend(alice, "HEAD", "/subscriptions/export", LIMITS["bulk"] + 1)  # more than the bulk class holds
    assert heads[-1].headers["X-RateLimit-Limit"] == str(LIMITS["read"])
    assert heads[-1].headers["X-RateLimit-Remaining"] == str(LIMITS["read"] - LIMITS["bulk"] - 1)
    gets = _spend(alice, "GET", "/subscriptions/export", LIMITS["bulk"])
    assert gets[0].headers["X-RateLimit-Limit"] == str(LIMITS["bulk"])
    assert gets[0].headers["X-RateLimit-Remaining"] == str(LIMITS["bulk"] - 1)
    _assert_limited(alice.get("/subscriptions/export"), LIMITS["bulk"])
    _spend(alice, "GET", "/subscriptions", LIMITS["read"] - LIMITS["bulk"] - 1)
    _assert_limited(alice.get("/subscriptions"), LIMITS["read"])
    assert alice.request("HEAD", "/subscriptions/export").status_code == 429


def test_write_class_is_shared_by_create_cancel_pause_resume_and_patch(alice):
    created = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"}).get_json()
    alice.post(f"/subscriptions/{created['id']}/pause")
    alice.post(f"/subscriptions/{created['id']}/resume")
    _assert_limited(alice.patch(f"/subscriptions/{created['id']}", json={"custom_metadata": {}}), LIMITS["write"])
    _assert_limited(alice.delete(f"/subscriptions/{created['id']}"), LIMITS["write"])


def test_default_class_covers_account_and_keys(alice):
    alice.get("/account")
    alice.get("/account/usage")
    alice.get("/account/api-keys")
    _assert_limited(alice.post("/account/api-keys", json={"name": "x"}), LIMITS["default"])


def test_one_key_is_read_in_the_default_class_shared_with_the_list(alice):
    key_id = alice.get("/account/api-keys").get_json()["keys"][0]["id"]
    assert alice.get(f"/account/api-keys/{key_id}").headers["X-RateLimit-Remaining"] == str(LIMITS["default"] - 2)
    alice.get("/account/api-keys")
    _assert_limited(alice.get(f"/account/api-keys/{key_id}"), LIMITS["default"])


def test_classes_are_independent(alice):
    _spend(alice, "POST", "/subscriptions/bulk", LIMITS["bulk"], json=_bulk_body())
    _assert_limited(alice.get("/subscriptions/export"), LIMITS["bulk"])
    assert alice.get("/subscriptions").status_code == 200
    assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "other"}).status_code == 201
    assert alice.get("/account").status_code == 200


def test_both_prefixes_share_one_bucket(alice):
    _spend(alice, "GET", "/subscriptions", LIMITS["read"] - 1)
    alice.prefix = "/v1"
    assert alice.get("/subscriptions").status_code == 200
    _assert_limited(alice.get("/subscriptions"), LIMITS["read"])


def test_a_limited_request_changes_nothing(alice):
    _spend(alice, "POST", "/subscriptions/bulk", LIMITS["bulk"],
           json={"subscriptions": [{"entity_type": "contact", "network_id": "first"}]})
    _assert_limited(alice.post("/subscriptions/bulk", json={"subscriptions": [
        {"entity_type": "contact", "network_id": "never"}]}), LIMITS["bulk"])
    listed = alice.get("/subscriptions").get_json()
    assert [item["network_id"] for item in listed["data"]] == ["first"]


def test_limits_are_per_key_not_per_account(alice):
    second_key = alice.post("/account/api-keys", json={"name": "second"}).get_json()["key"]
    second = Tenant(alice.client, alice.account_id, second_key)
    _spend(alice, "GET", "/subscriptions", LIMITS["read"])
    _assert_limited(alice.get("/subscriptions"), LIMITS["read"])
    response = second.get("/subscriptions")
    assert response.status_code == 200
    assert response.headers["X-RateLimit-Remaining"] == str(LIMITS["read"] - 1)


def test_other_accounts_are_not_affected(alice, bob):
    _spend(alice, "GET", "/subscriptions", LIMITS["read"])
    _assert_limited(alice.get("/subscriptions"), LIMITS["read"])
    assert bob.get("/subscriptions").status_code == 200


def test_limits_follow_the_accounts_tier(app):
    grown = make_tenant(app, "Grown", tier="growth")
    assert grown.get("/subscriptions").headers["X-RateLimit-Limit"] == "7"
    assert grown.get("/subscriptions/export").headers["X-RateLimit-Limit"] == "5"


def test_unauthenticated_requests_are_limited_per_address(app, alice):
    stranger = Tenant(app.test_client(), None, None)
    for _ in range(2):
        assert stranger.get("/subscriptions").status_code == 401
    response = stranger.get("/subscriptions")
    assert response.status_code == 429
    assert response.get_json()["error"] == "RATE_LIMIT_EXCEEDED"
    assert int(response.headers["Retry-After"]) >= 1
    assert "X-RateLimit-Limit" not in response.headers  # only keyed responses carry them
    other_address = app.test_client().get("/api/v1/subscriptions", environ_base={"REMOTE_ADDR": "10.9.8.7"})
    assert other_address.status_code == 401
    assert alice.get("/subscriptions").status_code == 200  # a valid key has its own bucket


def test_an_ipv6_client_is_limited_by_its_64_not_by_each_address(app):
    """Each address of a /64 had a fresh budget, so one host guessed keys without limit (security walk)."""
    def from_address(address):
        return app.test_client().get("/api/v1/subscriptions", environ_base={"REMOTE_ADDR": address}).status_code

    assert [from_address(f"2001:db8:1:1::{number}") for number in (1, 2, 3)] == [401, 401, 429]
    assert from_address("2001:db8:1:1:ffff:ffff:ffff:ffff") == 429
    assert from_address("2001:db8:1:2::1") == 401  # the next /64: another client
    assert [from_address("::ffff:198.51.100.7"), from_address("198.51.100.7")] == [401, 401]
    assert from_address("198.51.100.8") == 401  # IPv4 addresses stay one each; a mapped one is its IPv4 address
    assert from_address("198.51.100.7") == 429


def test_ipv4_clients_seen_through_a_translator_are_limited_one_address_each(app):
    """Behind SIIT or NAT64 every IPv4 client has an address of 64:ff9b::/96: by its /64 they were one bucket, and
    one client guessing keys spent the budget of all of them (review)."""
    def from_address(address):
        return app.test_client().get("/api/v1/subscriptions", environ_base={"REMOTE_ADDR": address}).status_code

    assert [from_address("64:ff9b::198.51.100.7") for _ in range(3)] == [401, 401, 429]
    assert from_address("64:ff9b::198.51.100.8") == 401
    assert from_address("198.51.100.7") == 429  # the same client, however it is seen


def test_made_up_keys_share_the_address_bucket(app):
    for n in range(2):
        Tenant(app.test_client(), None, f"lwa.sk_live_{str(n) * 32}").get("/subscriptions")
    response = Tenant(app.test_client(), None, "lwa.sk_live_" + "9" * 32).get("/subscriptions")
    assert response.status_code == 429


def test_health_and_openapi_are_not_limited(app, ticking):
    client = app.test_client()
    for _ in range(5):
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/v1/openapi.json").status_code == 200


class TestDisabled:
    @pytest.fixture
    def app_config(self):
        tiers = copy.deepcopy(DEFAULT_TIERS)
        tiers["starter"]["rate_limits"] = {"read": 1, "write": 1, "bulk": 1, "default": 1}
        return {"TIERS": tiers, "RATELIMIT_ENABLED": False}

    def test_ratelimit_enabled_0_switches_limits_off(self, alice):
        for _ in range(3):
            response = alice.get("/subscriptions")
            assert response.status_code == 200
            assert "X-RateLimit-Limit" not in response.headers


def test_reads_other_than_subscriptions_use_the_default_class(alice):
    """Contract §8: only reads on subscriptions have the 1000 class; the event log and webhook reads do not."""
    for path in ("/events", "/webhooks/deliveries"):
        assert alice.get(path).headers["X-RateLimit-Limit"] == str(LIMITS["default"])
    assert alice.get("/subscriptions").headers["X-RateLimit-Remaining"] == str(LIMITS["read"] - 1)


def test_keyed_unknown_routes_and_wrong_methods_carry_the_headers_unspent(alice):
    alice.get("/account")
    for response in (alice.get("/nope"), alice.put("/account")):
        assert response.status_code in (404, 405)
        assert response.headers["X-RateLimit-Limit"] == str(LIMITS["default"])
        assert response.headers["X-RateLimit-Remaining"] == str(LIMITS["default"] - 1)
        assert int(response.headers["X-RateLimit-Reset"]) > time.time()


def test_a_forged_x_forwarded_for_does_not_dodge_the_address_limit(app):
    for number in range(3):
        response = app.test_client().get("/api/v1/subscriptions",
                                         headers={"X-Forwarded-For": f"9.9.9.{number}"})
    assert response.status_code == 429


@pytest.mark.parametrize("app_config", [{"TRUSTED_PROXY_HOPS": 1, "RATELIMIT_UNAUTHENTICATED": 2}])
def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(app):
    for _ in range(2):
        app.test_client().get("/api/v1/subscriptions", headers={"X-Forwarded-For": "9.9.9.1"})
    limited = app.test_client().get("/api/v1/subscriptions", headers={"X-Forwarded-For": "9.9.9.1"})
    other = app.test_client().get("/api/v1/subscriptions", headers={"X-Forwarded-For": "9.9.9.2"})
    assert (limited.status_code, other.status_code) == (429, 401)


# --- the dashboard: a session a key opened spends that key's limits -----------------------------------------------

def _dashboard(app, tenant):
    from tests.dashboard_helpers import Browser
    return Browser(app, tenant.key)  # signing in and its first page, the overview, are two of the default class


def _refused_page(response):
    assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 1
    assert "Too many requests with this API key" in response.get_data(as_text=True)


def test_dashboard_actions_and_api_calls_share_the_keys_write_limit(app, alice):
    """The dashboard was not limited at all: a key whose API budget was spent went on through its pages (walk)."""
    browser = _dashboard(app, alice)
    _spend(alice, "POST", "/subscriptions", 2, json={"entity_type": "contact", "network_id": "first"})
    assert browser.post("/subscriptions", data={"url": "https://www.linkedin.com/in/third"}).status_code == 302
    _refused_page(browser.post("/subscriptions", data={"url": "https://www.linkedin.com/in/fourth"}))
    _assert_limited(alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "fifth"}),
                    LIMITS["write"])
    assert {item["network_id"] for item in alice.get("/subscriptions").json["data"]} == {"first", "third"}


def test_the_dashboards_refusal_says_when_the_key_can_be_used_again(app, alice):
    """It said "Retry later." only, and its one link, the overview, was refused too: the team reloaded pages blind
    for up to 15 minutes (browser walk: 100 page views)."""
    browser = _dashboard(app, alice)  # the sign-in and the overview: two of the default class's 3
    for _ in range(LIMITS["default"] - 2):
        assert browser.get("/events").status_code == 200
    refused = browser.get("/events")
    _refused_page(refused)
    minutes = -(-int(refused.headers["Retry-After"]) // 60)
    assert f"can be used again in {minutes} minute" in refused.get_data(as_text=True)


def test_a_form_the_keys_limit_refuses_is_kept_for_its_page_with_when_to_send_it_again(app, alice):
    """The 429 page lost what the form had typed (a pasted list, a new subscription, a webhook URL), where a refusal
    of the form itself shows it again, and its one link, the overview, was no way back to the form (dashboard walk).
    It asks the page's script to keep the form's text for its page (data-keeps-form, browser tests), linked."""
    browser = _dashboard(app, alice)
    _spend(alice, "POST", "/subscriptions", LIMITS["write"], json={})
    view = "/subscriptions?search=jane&page=2"
    refused = browser.post("/subscriptions", data={"url": "https://www.linkedin.com/in/jane"},
                           headers={"Referer": f"http://localhost{view}"})
    _refused_page(refused)
    page = refused.get_data(as_text=True)
    again = re.search(r'data-keeps-form="This key&#39;s rate limit was reached, so nothing was done: send it again '
                      r'from ([0-9]{2}:[0-9]{2}) UTC\."', page).group(1)
    retry = int(refused.headers["Retry-After"])
    assert again in {f"{utcnow() + timedelta(seconds=retry + drift):%H:%M}" for drift in (-60, 0, 60)}
    assert f'<a href="{html.escape(view)}">Open the page again</a>' in page
    for _ in range(LIMITS["default"] - 2):  # a refused page passes the kept form on, and is the page to open again
        browser.get("/events?type=test")
    refused_page = browser.get("/events?type=test")
    _refused_page(refused_page)
    page = refused_page.get_data(as_text=True)
    assert 'data-keeps-form="' in page and '<a href="/events?type=test">Open the page again</a>' in page


def test_signing_in_spends_the_keys_default_limit(app, alice):
    """A sign-in spent nothing: a key signed in without end, each time a session row kept 12 hours (300 sign-ins in
    a row made 300 rows, past the 100 requests of starter's default class)."""
    from tests.dashboard_helpers import sign_in
    _spend(alice, "GET", "/account", LIMITS["default"] - 1)
    client = app.test_client()
    assert sign_in(client, alice.key).status_code == 302
    refused = sign_in(client, alice.key)
    _refused_page(refused)
    assert "from this address" not in refused.get_data(as_text=True)
    assert db.session.scalar(select(func.count()).select_from(DashboardSession)) == 1
    _assert_limited(alice.get("/account"), LIMITS["default"])


def test_a_sign_in_without_a_valid_key_after_one_with_a_key_is_refused_by_address(app, alice):
    """The sign-in's 429 page tells a key's refusal by a mark the valid sign-in leaves on `g`, which an app context
    shared by several requests (this test's) kept: the address's refusal was told as the key's ("This key can be used
    again")."""
    from tests.dashboard_helpers import sign_in
    assert sign_in(app.test_client(), alice.key).status_code == 302
    client = app.test_client()
    answers = [sign_in(client, "lwa.sk_live_" + "x" * 32) for _ in range(LIMITS_UNAUTHENTICATED + 1)]
    assert [answer.status_code for answer in answers] == [401] * LIMITS_UNAUTHENTICATED + [429]
    page = answers[-1].get_data(as_text=True)
    assert "Too many sign-ins without a valid key from this address" in page and "This key" not in page, page


def _tiers_with_a_key_prefix():
    tiers = copy.deepcopy(DEFAULT_TIERS)
    tiers["starter"]["rate_limits"] = dict(LIMITS)
    return {"TIERS": tiers, "RATELIMIT_KEY_PREFIX": "monitor"}


@pytest.mark.parametrize("app_config", [_tiers_with_a_key_prefix()])
def test_with_a_key_prefix_unknown_routes_report_the_default_class_as_spent(alice):
    """Their headers came from a bucket without the prefix, which nothing spends: always full (review)."""
    alice.get("/account")
    assert alice.get("/nope").headers["X-RateLimit-Remaining"] == str(LIMITS["default"] - 1)


@pytest.mark.parametrize("app_config", [_tiers_with_a_key_prefix()])
def test_with_a_key_prefix_the_dashboard_and_the_api_still_share_one_bucket(app, alice):
    """flask-limiter puts RATELIMIT_KEY_PREFIX first in its keys: without it the dashboard had a budget of its own
    (review)."""
    browser = _dashboard(app, alice)
    _spend(alice, "POST", "/subscriptions", LIMITS["write"], json={"entity_type": "contact", "network_id": "first"})
    _refused_page(browser.post("/subscriptions", data={"url": "https://www.linkedin.com/in/second"}))


def test_dashboard_pages_spend_the_keys_read_and_default_limits(app, alice):
    browser = _dashboard(app, alice)  # the sign-in and the overview: two of the default class's 3
    assert [browser.get("/subscriptions").status_code for _ in range(LIMITS["read"])] == [200] * LIMITS["read"]
    _refused_page(browser.get("/subscriptions"))
    _assert_limited(alice.get("/subscriptions"), LIMITS["read"])
    assert browser.get("/keys").status_code == 200
    _refused_page(browser.get("/events"))
    assert alice.get("/account").status_code == 429
    other = make_tenant(app, "Other team")
    assert other.get("/subscriptions").status_code == 200  # another account's key: its own budget


def test_a_dashboard_import_costs_a_bulk_call_per_hundred_rows_and_is_refused_whole(app, alice):
    browser = _dashboard(app, alice)

    def import_rows(count, first):
        rows = "".join(f"https://www.linkedin.com/in/person-{number}\n" for number in range(first, first + count))
        response = browser.post("/subscriptions/import", data={"rows": rows})
        response.get_data()
        return response

    assert import_rows(150, 0).status_code == 200  # two bulk calls: the whole window
    assert alice.get("/subscriptions").json["pagination"]["total"] == 100  # the starter tier's cap
    _refused_page(import_rows(1, 500))
    _assert_limited(alice.post("/subscriptions/bulk", json=_bulk_body()), LIMITS["bulk"])


def test_a_dashboard_import_no_window_could_take_is_refused_with_what_to_do(app, alice):
    """It was a 429 with `Retry-After: 1` for ever (review): three bulk calls' worth against a window of two."""
    browser = _dashboard(app, alice)
    rows = "".join(f"https://www.linkedin.com/in/person-{number}\n" for number in range(250))
    response = browser.post("/subscriptions/import", data={"rows": rows})
    assert response.status_code == 302 and alice.get("/subscriptions").json["pagination"]["total"] == 0
    page = browser.text("/subscriptions")
    assert "250 rows take 3 bulk calls, and this key may make 2 in 15 minutes: import at most 200 rows" in page
    rows = "".join(f"https://www.linkedin.com/in/person-{number}\n" for number in range(50))
    imported = browser.post("/subscriptions/import", data={"rows": rows})  # the refused one counted, as an API
    imported.get_data()  # call refused for its size does: this is the window's second and last
    assert imported.status_code == 200 and alice.get("/subscriptions").json["pagination"]["total"] == 50
    _refused_page(browser.post("/subscriptions/import", data={"rows": rows}))


def test_with_rate_limiting_off_a_large_dashboard_import_is_not_refused(app, alice):
    """It was refused for more bulk calls than the window holds, with no limit on (review)."""
    app.config["RATELIMIT_ENABLED"] = False
    browser = _dashboard(app, alice)
    rows = "".join(f"https://www.linkedin.com/in/person-{number}\n" for number in range(250))
    response = browser.post("/subscriptions/import", data={"rows": rows})
    response.get_data()
    assert response.status_code == 200 and alice.get("/subscriptions").json["pagination"]["total"] == 100


def test_a_dashboard_import_refused_for_its_content_spends_a_bulk_call(app, alice):
    """Refusals came before any count: a key over its limits could have 1 MiB uploads parsed without end (review)."""
    browser = _dashboard(app, alice)
    for _ in range(LIMITS["bulk"]):
        browser.post("/subscriptions/import", data={"rows": ""})
    _refused_page(browser.post("/subscriptions/import", data={"rows": ""}))


def test_the_time_to_send_a_refused_form_again_is_not_before_the_key_can_be_used(app, alice, monkeypatch):
    """The time was cut to its minute: 45 seconds to wait from 12:00:30 said "from 12:01", and a form sent again at
    12:01 was refused again; it is the minute from which the key can be used (rounded up)."""
    import app.dashboard as dashboard
    now = utcnow().replace(second=0, microsecond=500_000)  # any wait in whole seconds ends past a minute's start
    monkeypatch.setattr(dashboard, "utcnow", lambda: now)
    browser = _dashboard(app, alice)
    _spend(alice, "POST", "/subscriptions", LIMITS["write"], json={})
    refused = browser.post("/subscriptions", data={"url": "https://www.linkedin.com/in/jane"})
    _refused_page(refused)
    again = re.search(r"send it again from ([0-9]{2}:[0-9]{2}) UTC", refused.get_data(as_text=True)).group(1)
    usable = now + timedelta(seconds=int(refused.headers["Retry-After"]))
    assert again == f"{usable.replace(second=0, microsecond=0) + timedelta(minutes=1):%H:%M}"


def test_a_refused_pages_link_to_open_it_again_is_its_own_address(app, alice):
    """It was the page's decoded path: `/events/evt_a%3Fb` refused linked to `/events/evt_a?b`, another address."""
    browser = _dashboard(app, alice)
    for _ in range(LIMITS["default"]):
        browser.get("/events/evt_a%3Fb%23c?page=2")
    refused = browser.get("/events/evt_a%3Fb%23c?page=2")
    _refused_page(refused)
    assert '<a href="/events/evt_a%3Fb%23c?page=2">Open the page again</a>' in refused.get_data(as_text=True)


def test_remaining_is_what_each_requests_own_hit_left_when_requests_of_the_key_overlap(app, alice):
    """X-RateLimit-Remaining was read from the window when the answer was written, after the hits of the key's other
    requests answered meanwhile: five requests fired at once across three workers, each with a barrier, all said 0
    (scale-out walk; 100 over five threads gave 57 distinct values for 100 answers). Each now says what its own hit
    left. The barrier holds every request between its hit and its answer, so all have hit before any answers."""
    limit = LIMITS["read"]
    all_hit = threading.Barrier(limit)

    @app.before_request
    def wait_for_the_others_hits():  # registered after flask-limiter's hook, which counts the request
        all_hit.wait(timeout=60)

    answers = []

    def get():
        answers.append(Tenant(app.test_client(), alice.account_id, alice.key).get("/subscriptions"))
    threads = [threading.Thread(target=get) for _ in range(limit)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [answer.status_code for answer in answers] == [200] * limit
    assert sorted(int(answer.headers["X-RateLimit-Remaining"]) for answer in answers) == list(range(limit))


_database_gone = raising(sqlite3.OperationalError, "unable to open database file")


def _rate_limit_headers(answer) -> tuple:
    return tuple(answer.headers.get(f"X-RateLimit-{name}") for name in ("Limit", "Remaining"))


def test_a_keyed_500_or_503_carries_the_headers_of_its_class(alice, monkeypatch):
    """The document and the README said a keyed 500 or 503 carries no X-RateLimit-* (contract §8: every keyed
    answer does); a failure of the view's own is counted, its class's window as any answer's."""
    monkeypatch.setattr(subscriptions, "list_page_json", raising(RuntimeError, "a bug"))
    bug = alice.get("/subscriptions")
    monkeypatch.setattr(subscriptions, "list_page_json", _database_gone)
    gone = alice.get("/subscriptions")
    assert (bug.status_code, gone.status_code, gone.headers["Retry-After"]) == (500, 503, "5")
    assert [_rate_limit_headers(answer) for answer in (bug, gone)] == [
        (str(LIMITS["read"]), str(LIMITS["read"] - 1)), (str(LIMITS["read"]), str(LIMITS["read"] - 2))]
    assert int(gone.headers["X-RateLimit-Reset"]) > time.time()


def test_a_database_gone_once_the_key_is_known_reports_the_requests_class_unspent(alice, monkeypatch):
    """Writing the key's last use failed (a database down or locked between reading the key and the view): the 503
    came before the limiter counted the request, and reported the default class's window as an unknown route does,
    not the class of the request made."""
    monkeypatch.setattr(keys.last_used, "record", _database_gone)
    gone = alice.get("/subscriptions")
    assert gone.status_code == 503 and gone.json["error"] == "UNAVAILABLE"
    assert _rate_limit_headers(gone) == (str(LIMITS["read"]), str(LIMITS["read"]))


@pytest.mark.parametrize("error", [(StorageError, ConnectionError("refused")), (RuntimeError, "a bug")])
def test_a_503_stays_a_503_when_its_headers_cannot_be_computed(alice, monkeypatch, error):
    """The rate-limit storage down as the database is (one host for both, a network cut): the answer is the
    database's 503 to retry, without X-RateLimit-*, never a 500 made while writing them."""
    monkeypatch.setattr(subscriptions, "list_page_json", _database_gone)
    monkeypatch.setattr(limits, "_rate_limit_state", raising(*error))
    gone = alice.get("/subscriptions")
    assert (gone.status_code, gone.json["error"], gone.headers["Retry-After"]) == (503, "UNAVAILABLE", "5")
    assert _rate_limit_headers(gone) == (None, None)


@pytest.mark.parametrize("app_config", [{"RATELIMIT_STORAGE_URI": f"redis://127.0.0.1:{closed_port()}"}])
def test_with_the_storage_and_the_database_down_a_503_carries_the_in_memory_count(alice, monkeypatch, app_config):
    """The shared storage down from the start: flask-limiter counts in this process's memory, and the 503 says so."""
    monkeypatch.setattr(subscriptions, "list_page_json", _database_gone)
    gone = [alice.get("/subscriptions") for _ in range(2)]
    assert [(answer.status_code, answer.headers["Retry-After"]) for answer in gone] == [(503, "5")] * 2
    assert [answer.headers["X-RateLimit-Remaining"] for answer in gone] == ["999", "998"]
