"""GET /account (contract §4) and the tier/trial rules it reports (issue 2 points 3 and 5)."""
from datetime import datetime, timedelta

import pytest

from app.common import isoformat, utcnow
from app.extensions import db
from app.models import Account
from app.services import accounts
from conftest import make_tenant


def _parse(timestamp):
    assert timestamp.endswith("Z")
    return datetime.fromisoformat(timestamp[:-1])


def _subscribe(tenant, network_id, entity_type="contact"):
    response = tenant.post("/subscriptions", json={"entity_type": entity_type, "network_id": network_id})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def test_account_describes_a_new_starter_trial(alice):
    response = alice.get("/account")
    assert response.status_code == 200
    body = response.get_json()
    assert list(body) == ["id", "name", "tier", "subscription_limit", "subscription_count",
                          "trial_ends_at", "created_at"]
    assert body["id"] == alice.account_id and body["id"].startswith("acct_")
    assert body["name"] == "Alice Inc"
    assert body["tier"] == "starter"
    assert body["subscription_limit"] == 100
    assert body["subscription_count"] == 0
    assert _parse(body["trial_ends_at"]) - _parse(body["created_at"]) == timedelta(days=14)


def test_subscription_count_includes_paused_but_not_cancelled(alice):
    first = _subscribe(alice, "first")
    second = _subscribe(alice, "second")
    _subscribe(alice, "third")
    alice.post(f"/subscriptions/{first['id']}/pause")
    alice.delete(f"/subscriptions/{second['id']}")
    assert alice.get("/account").get_json()["subscription_count"] == 2


def test_account_shows_only_the_callers_account(alice, bob):
    _subscribe(bob, "bobs-contact")
    assert alice.get("/account").get_json()["subscription_count"] == 0
    assert bob.get("/account").get_json()["id"] == bob.account_id


def test_unlimited_tier_reports_a_null_limit(app):
    tenant = make_tenant(app, "Big Corp", tier="enterprise")
    body = tenant.get("/account").get_json()
    assert body["tier"] == "enterprise"
    assert body["subscription_limit"] is None


def test_set_tier_ends_the_trial_and_changes_the_cap(alice):
    accounts.set_tier(alice.account_id, "growth")
    body = alice.get("/account").get_json()
    assert body["tier"] == "growth"
    assert body["subscription_limit"] == 1000
    assert body["trial_ends_at"] is None


def test_account_answers_under_the_v1_prefix_too(alice):
    alice.prefix = "/v1"
    assert alice.get("/account").get_json()["id"] == alice.account_id


class TestTrial:
    def _expire_trial(self, tenant):
        db.session.rollback()
        account = db.session.get(Account, tenant.account_id)
        account.trial_ends_at = utcnow() - timedelta(seconds=1)
        db.session.commit()
        return account.trial_ends_at

    def test_expired_trial_refuses_new_subscriptions(self, alice):
        ends = self._expire_trial(alice)
        response = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
        assert response.status_code == 403
        body = response.get_json()
        assert body["error"] == "TRIAL_EXPIRED"
        assert body["details"] == {"trial_ends_at": isoformat(ends)}
        assert alice.get("/subscriptions").get_json()["pagination"]["total"] == 0

    def test_expired_trial_refuses_bulk_create_as_a_whole(self, alice):
        self._expire_trial(alice)
        response = alice.post("/subscriptions/bulk",
                              json={"subscriptions": [{"entity_type": "contact", "network_id": "jane"}]})
        assert response.status_code == 403
        assert response.get_json()["error"] == "TRIAL_EXPIRED"
        assert alice.get("/subscriptions").get_json()["pagination"]["total"] == 0

    def test_expired_trial_still_reads_cancels_and_manages_keys(self, alice):
        created = _subscribe(alice, "before-expiry")
        self._expire_trial(alice)
        assert alice.get("/subscriptions").status_code == 200
        assert alice.get(f"/subscriptions/{created['id']}").status_code == 200
        assert alice.delete(f"/subscriptions/{created['id']}").status_code == 200
        assert alice.post("/account/api-keys", json={"name": "x"}).status_code == 201

    def test_a_plan_chosen_by_the_operator_lifts_the_trial(self, alice):
        self._expire_trial(alice)
        accounts.set_tier(alice.account_id, "starter")
        assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"}).status_code == 201


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_account_only_answers_get(alice, method):
    response = alice.request(method, "/account")
    assert response.status_code == 405
    assert response.get_json()["error"] == "METHOD_NOT_ALLOWED"
