"""Authentication by X-API-Key (interface spec "Authentication", contract §4, issue 2 point 4)."""
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import ApiKey
from app.services import keys
from app.services.keys import FORMAT_MESSAGE, INVALID_MESSAGE, MISSING_MESSAGE
from conftest import Tenant, make_tenant

VALID_LOOKING = "lwa.sk_live_" + "A" * 32


def _with_key(app, key):
    return Tenant(app.test_client(), None, key)


def _assert_unauthorized(response, message):
    assert response.status_code == 401
    body = response.get_json()
    assert body["error"] == "UNAUTHORIZED"
    assert body["message"] == message
    assert "details" not in body
    assert body["timestamp"].endswith("Z")
    assert body["request_id"] == response.headers["X-Request-Id"]


def _stored_key(key_id):
    db.session.rollback()
    return db.session.get(ApiKey, key_id)


def _only_key_of(tenant):
    db.session.rollback()
    return db.session.scalars(select(ApiKey).where(ApiKey.account_id == tenant.account_id)).one()


def test_missing_key_names_the_header(anon):
    _assert_unauthorized(anon.get("/account"), MISSING_MESSAGE)
    assert "X-API-Key" in MISSING_MESSAGE


def test_empty_key_counts_as_missing(app):
    _assert_unauthorized(_with_key(app, "").get("/account"), MISSING_MESSAGE)


@pytest.mark.parametrize("header", [
    "sk_live_" + "A" * 32,             # no lwa. prefix
    "Bearer lwa.sk_live_" + "A" * 32,  # the old bearer form pasted into the header
    "lwa.sk_live_" + "A" * 31,         # one character short
    "lwa.sk_live_" + "A" * 33,         # one character long
    "lwa.sk_live_" + "A" * 31 + "-",   # not alphanumeric
    "lwa.pk_live_" + "A" * 32,         # unknown kind
    "lwa.sk_live_" + "é" * 32,         # non-ASCII letters
    " lwa.sk_live_" + "A" * 32,        # stray whitespace
])
def test_malformed_key_gets_the_format_message(app, header):
    _assert_unauthorized(_with_key(app, header).get("/account"), FORMAT_MESSAGE)
    # the whole form, not the prefix alone: a key cut short has the prefix (API walk)
    assert "'lwa.' prefix" in FORMAT_MESSAGE and "32 letters or digits" in FORMAT_MESSAGE
    assert "lwa.sk_live_" in FORMAT_MESSAGE and "lwa.sk_test_ on a test server" in FORMAT_MESSAGE  # either (review)


def test_well_formed_unknown_key_gets_the_invalid_message(app, alice):
    _assert_unauthorized(_with_key(app, VALID_LOOKING).get("/account"), INVALID_MESSAGE)


def test_the_three_messages_are_distinct():
    assert len({MISSING_MESSAGE, INVALID_MESSAGE, FORMAT_MESSAGE}) == 3


def test_bearer_authorization_header_is_not_accepted(app, alice):
    response = app.test_client().get("/api/v1/account", headers={"Authorization": f"Bearer {alice.key}"})
    _assert_unauthorized(response, MISSING_MESSAGE)


def test_valid_key_authenticates_under_both_prefixes(alice):
    assert alice.get("/account").get_json()["id"] == alice.account_id
    alice.prefix = "/v1"
    assert alice.get("/account").get_json()["id"] == alice.account_id


def test_every_keyed_endpoint_refuses_a_missing_key(anon):
    for method, path in [("GET", "/account"), ("GET", "/account/usage"), ("GET", "/account/api-keys"),
                         ("POST", "/account/api-keys"), ("DELETE", "/account/api-keys/key_x"),
                         ("GET", "/subscriptions"), ("POST", "/subscriptions"), ("GET", "/subscriptions/sub_x"),
                         ("DELETE", "/subscriptions/sub_x"), ("PATCH", "/subscriptions/sub_x"),
                         ("POST", "/subscriptions/sub_x/pause"), ("POST", "/subscriptions/sub_x/resume"),
                         ("POST", "/subscriptions/bulk"), ("DELETE", "/subscriptions/bulk"),
                         ("PATCH", "/subscriptions/bulk"), ("GET", "/subscriptions/export")]:
        response = anon.request(method, path, json={})
        assert response.status_code == 401, (method, path)
        assert response.get_json()["error"] == "UNAUTHORIZED"


def test_key_is_checked_before_the_body(anon):
    response = anon.post("/subscriptions", data="not json", content_type="application/json")
    _assert_unauthorized(response, MISSING_MESSAGE)


def test_only_the_hash_of_a_key_is_stored(app, alice):
    stored = _only_key_of(alice)
    assert stored.key_hash == keys.hash_key(alice.key)
    assert stored.key_hash != alice.key
    assert stored.key_hint == alice.key[-4:]
    dump = "\n".join(str(row) for table in db.metadata.sorted_tables
                     for row in db.session.execute(select(table)))  # every stored value, on any database
    assert alice.key not in dump
    assert alice.key[len("lwa.sk_live_"):] not in dump


def test_deleted_key_fails_on_its_very_next_request(alice):
    created = alice.post("/account/api-keys", json={"name": "second"}).get_json()
    second = Tenant(alice.client, alice.account_id, created["key"])
    assert second.get("/account").status_code == 200
    assert alice.delete(f"/account/api-keys/{created['id']}").status_code == 200
    _assert_unauthorized(second.get("/account"), INVALID_MESSAGE)
    assert alice.get("/account").status_code == 200


def test_a_key_can_delete_itself_and_then_stops_working(alice):
    other = alice.post("/account/api-keys", json={"name": "spare"}).get_json()
    own_id = _only_key_of_name(alice, "Default key").id
    assert alice.delete(f"/account/api-keys/{own_id}").status_code == 200
    _assert_unauthorized(alice.get("/account"), INVALID_MESSAGE)
    spare = Tenant(alice.client, alice.account_id, other["key"])
    assert spare.get("/account").status_code == 200


def _only_key_of_name(tenant, name):
    db.session.rollback()
    return db.session.scalars(select(ApiKey).where(ApiKey.account_id == tenant.account_id,
                                                   ApiKey.name == name)).one()


class TestKeyMode:
    @pytest.fixture
    def app_config(self):
        return {"API_KEY_MODE": "test"}

    def test_test_mode_issues_test_keys_and_accepts_them(self, alice):
        assert alice.key.startswith("lwa.sk_test_")
        assert alice.get("/account").status_code == 200
        created = alice.post("/account/api-keys", json={"name": "ci"}).get_json()
        assert created["key"].startswith("lwa.sk_test_")

    def test_live_key_is_rejected_in_test_mode(self, app, alice):
        live = "lwa.sk_live_" + alice.key[len("lwa.sk_test_"):]
        _assert_unauthorized(_with_key(app, live).get("/account"), INVALID_MESSAGE)


def test_test_key_is_rejected_in_live_mode(app, alice):
    assert alice.key.startswith("lwa.sk_live_")
    test_key = "lwa.sk_test_" + alice.key[len("lwa.sk_live_"):]
    _assert_unauthorized(_with_key(app, test_key).get("/account"), INVALID_MESSAGE)


def test_test_key_is_rejected_in_live_mode_even_if_its_hash_is_stored(app):
    """A key minted by a test-mode server never opens a live server, even with the same database."""
    app.config["API_KEY_MODE"] = "test"
    tenant = make_tenant(app, "Test mode tenant")
    app.config["API_KEY_MODE"] = "live"
    _assert_unauthorized(tenant.get("/account"), INVALID_MESSAGE)


class TestLastUsed:
    """last_used_at: written on first use, then at most once a minute per key (no write per request)."""

    @pytest.fixture
    def clock(self, monkeypatch):
        moments = {"wall": keys.utcnow(), "mono": 1_000_000.0}

        def advance(seconds):
            moments["wall"] += timedelta(seconds=seconds)
            moments["mono"] += seconds

        monkeypatch.setattr(keys, "utcnow", lambda: moments["wall"])
        monkeypatch.setattr(keys.time, "monotonic", lambda: moments["mono"])
        advance.now = lambda: moments["wall"]
        return advance

    @pytest.fixture
    def writes(self, monkeypatch):
        """Counts the last_used_at write transactions."""
        count = {"n": 0}
        original = keys.write_transaction

        def counting():
            count["n"] += 1
            return original()

        monkeypatch.setattr(keys, "write_transaction", counting)
        return count

    def test_new_key_was_never_used(self, alice):
        listed = alice.get("/account/api-keys").get_json()["keys"]
        # The listing request itself is the first use of the only key.
        assert listed[0]["last_used_at"] is not None
        created = alice.post("/account/api-keys", json={"name": "unused"}).get_json()
        assert created["last_used_at"] is None
        by_id = {key["id"]: key for key in alice.get("/account/api-keys").get_json()["keys"]}
        assert by_id[created["id"]]["last_used_at"] is None

    def test_first_use_is_recorded(self, alice, clock):
        key_id = _only_key_of(alice).id
        assert _stored_key(key_id).last_used_at is None
        alice.get("/account")
        assert _stored_key(key_id).last_used_at == clock.now()

    def test_written_at_most_once_a_minute(self, alice, clock, writes):
        key_id = _only_key_of(alice).id
        alice.get("/account")
        first = _stored_key(key_id).last_used_at
        assert writes["n"] == 1
        for _ in range(5):
            clock(10)
            alice.get("/account")
        assert writes["n"] == 1
        assert _stored_key(key_id).last_used_at == first
        clock(11)  # 61 s after the first write
        alice.get("/account")
        assert writes["n"] == 2
        assert _stored_key(key_id).last_used_at == clock.now()

    def test_a_fresh_process_does_not_rewrite_a_recent_value(self, alice, clock, writes, monkeypatch):
        alice.get("/account")
        monkeypatch.setattr(keys, "last_used", keys.LastUsedRecorder())  # as after a restart
        clock(20)
        alice.get("/account")
        assert writes["n"] == 1

    def test_failed_authentication_writes_nothing(self, app, alice, writes):
        _with_key(app, VALID_LOOKING).get("/account")
        _with_key(app, "garbage").get("/account")
        assert writes["n"] == 0
