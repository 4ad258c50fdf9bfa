"""GET one, cancel, pause/resume and PATCH custom_metadata (interface spec, contract §3)."""
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import Subscription
from app.services import subscriptions


def _create(tenant, network_id="jane-doe", **extra):
    response = tenant.post("/subscriptions", json={"entity_type": "contact", "network_id": network_id, **extra})
    assert response.status_code == 201
    return response.get_json()


def _row(subscription_id):
    db.session.rollback()
    return db.session.scalar(select(Subscription).where(Subscription.id == subscription_id))


def _snapshot(subscription_id):
    row = _row(subscription_id)
    return {column: getattr(row, column) for column in
            ("status", "updated_at", "paused_at", "cancelled_at", "custom_metadata", "next_check_at")}


def _assert_not_found(response, subscription_id):
    assert response.status_code == 404
    body = response.get_json()
    assert body["error"] == "NOT_FOUND"
    assert body["details"] == {"resource": "subscription", "id": subscription_id}


@pytest.fixture
def clock(monkeypatch):
    """Moves the services' clock forward so timestamps of successive steps differ."""
    state = {"now": subscriptions.utcnow()}

    def advance(seconds=1):
        state["now"] += timedelta(seconds=seconds)
        return state["now"]

    monkeypatch.setattr(subscriptions, "utcnow", lambda: state["now"])
    return advance


# --- get -------------------------------------------------------------------------------------------

def test_get_returns_the_full_shape(alice):
    created = _create(alice, custom_metadata={"crm": "7"})
    response = alice.get(f"/subscriptions/{created['id']}")
    assert response.status_code == 200
    body = response.get_json()
    assert set(body) == {"id", "entity_type", "network_id", "network_url", "status", "custom_metadata",
                         "created_at", "updated_at", "last_checked_at", "last_change_at", "last_check_status",
                         "next_check_at", "paused_at", "cancelled_at", "metadata"}
    assert body["metadata"] == {"check_count": 0, "change_count": 0}
    assert body["last_check_status"] == "pending"
    assert body["custom_metadata"] == {"crm": "7"}
    assert body["last_checked_at"] is None and body["last_change_at"] is None
    assert body["paused_at"] is None and body["cancelled_at"] is None


def test_get_answers_exactly_what_the_schema_dumps_of_the_model(alice):
    """The get endpoint builds its answer from plain columns (the hot path); every field, set or not, must be
    what marshmallow makes of the ORM object."""
    from app.schemas.subscriptions import SubscriptionSchema
    created = _create(alice, custom_metadata={"crm": "7", "owner": "Zoë"})
    assert alice.post(f"/subscriptions/{created['id']}/pause").status_code == 200
    moment = subscriptions.utcnow().replace(microsecond=123456)
    db.session.execute(Subscription.__table__.update().where(Subscription.id == created["id"]).values(
        last_checked_at=moment, last_change_at=moment - timedelta(hours=1), last_check_status="NETWORK_ERROR",
        check_count=7, change_count=3, snapshot={"name": "Jane"}))
    db.session.commit()
    body = alice.get(f"/subscriptions/{created['id']}").get_json()
    assert body == SubscriptionSchema().dump(_row(created["id"]))
    assert body["metadata"] == {"check_count": 7, "change_count": 3}
    assert body["paused_at"] is not None and body["last_check_status"] == "NETWORK_ERROR"


def test_get_of_another_accounts_id_is_404_not_403(alice, bob):
    bobs = _create(bob)
    _assert_not_found(alice.get(f"/subscriptions/{bobs['id']}"), bobs["id"])


@pytest.mark.parametrize("subscription_id", ["sub_doesnotexist", "x", "sub_" + "a" * 300, "süb_ünïcode",
                                             "sub_%00", "' or 1=1 --"])
def test_get_of_unknown_ids_is_404(alice, subscription_id):
    response = alice.get(f"/subscriptions/{subscription_id}")
    assert response.status_code == 404
    assert response.get_json()["error"] == "NOT_FOUND"


# --- cancel ----------------------------------------------------------------------------------------

def test_cancel_is_a_soft_delete(alice, clock):
    created = _create(alice)
    moment = clock(5)
    response = alice.delete(f"/subscriptions/{created['id']}")
    assert response.status_code == 200
    body = response.get_json()
    assert body == {"id": created["id"], "status": "cancelled", "cancelled_at": body["cancelled_at"]}
    row = _row(created["id"])
    assert row is not None and row.status == "cancelled"
    assert row.cancelled_at == moment and row.updated_at == moment
    assert row.next_check_at is None  # monitoring stops at once
    assert alice.get(f"/subscriptions/{created['id']}").get_json()["cancelled_at"] == body["cancelled_at"]


def test_cancel_is_idempotent_with_the_same_cancelled_at(alice, clock):
    created = _create(alice)
    clock(1)
    first = alice.delete(f"/subscriptions/{created['id']}").get_json()
    clock(60)
    second = alice.delete(f"/subscriptions/{created['id']}")
    assert second.status_code == 200
    assert second.get_json() == first


def test_cancel_works_from_paused(alice):
    created = _create(alice)
    alice.post(f"/subscriptions/{created['id']}/pause")
    body = alice.delete(f"/subscriptions/{created['id']}").get_json()
    assert body["status"] == "cancelled"
    after = alice.get(f"/subscriptions/{created['id']}").get_json()
    assert after["cancelled_at"] == body["cancelled_at"] and after["paused_at"] is None  # paused_at: when paused


def test_cancel_of_another_accounts_id_is_404_and_changes_nothing(alice, bob):
    bobs = _create(bob)
    before = _snapshot(bobs["id"])
    _assert_not_found(alice.delete(f"/subscriptions/{bobs['id']}"), bobs["id"])
    assert _snapshot(bobs["id"]) == before


def test_cancelled_subscription_still_lists(alice):
    created = _create(alice)
    alice.delete(f"/subscriptions/{created['id']}")
    listed = alice.get("/subscriptions").get_json()["data"]
    assert [(item["id"], item["status"]) for item in listed] == [(created["id"], "cancelled")]


# --- pause and resume ------------------------------------------------------------------------------

def test_pause_answers_the_get_shape_and_stops_checks(alice, clock):
    created = _create(alice)
    moment = clock(3)
    response = alice.post(f"/subscriptions/{created['id']}/pause")
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "paused"
    assert body["paused_at"] is not None and body["metadata"] == {"check_count": 0, "change_count": 0}
    row = _row(created["id"])
    assert row.paused_at == moment and row.next_check_at is None


def test_resume_reactivates_and_schedules_a_check(alice, clock):
    created = _create(alice)
    alice.post(f"/subscriptions/{created['id']}/pause")
    moment = clock(10)
    body = alice.post(f"/subscriptions/{created['id']}/resume").get_json()
    assert body["status"] == "active"
    assert body["paused_at"] is None
    row = _row(created["id"])
    assert row.next_check_at > moment and row.updated_at == moment


def test_pause_twice_is_a_no_op(alice, clock):
    created = _create(alice)
    clock(1)
    first = alice.post(f"/subscriptions/{created['id']}/pause").get_json()
    clock(30)
    second = alice.post(f"/subscriptions/{created['id']}/pause")
    assert second.status_code == 200
    assert second.get_json()["paused_at"] == first["paused_at"]
    assert second.get_json()["updated_at"] == first["updated_at"]


def test_resume_of_an_active_one_is_a_no_op(alice):
    created = _create(alice)
    before = _snapshot(created["id"])
    assert alice.post(f"/subscriptions/{created['id']}/resume").get_json()["status"] == "active"
    assert _snapshot(created["id"]) == before


@pytest.mark.parametrize("move", ["pause", "resume"])
def test_moving_a_cancelled_one_is_invalid_state(alice, move):
    created = _create(alice)
    alice.delete(f"/subscriptions/{created['id']}")
    before = _snapshot(created["id"])
    response = alice.post(f"/subscriptions/{created['id']}/{move}")
    assert response.status_code == 409
    body = response.get_json()
    assert body["error"] == "INVALID_STATE"
    assert body["details"] == {"status": "cancelled"}
    assert _snapshot(created["id"]) == before


@pytest.mark.parametrize("move", ["pause", "resume"])
def test_moving_another_accounts_subscription_is_404(alice, bob, move):
    bobs = _create(bob)
    _assert_not_found(alice.post(f"/subscriptions/{bobs['id']}/{move}"), bobs["id"])
    assert _row(bobs["id"]).status == "active"


def test_pause_takes_no_method_but_post(alice):
    created = _create(alice)
    response = alice.get(f"/subscriptions/{created['id']}/pause")
    assert response.status_code == 405
    assert response.get_json()["error"] == "METHOD_NOT_ALLOWED"


# --- PATCH custom_metadata -------------------------------------------------------------------------

def test_patch_replaces_custom_metadata(alice, clock):
    created = _create(alice, custom_metadata={"a": "1", "b": "2"})
    moment = clock(2)
    response = alice.patch(f"/subscriptions/{created['id']}", json={"custom_metadata": {"c": "3"}})
    assert response.status_code == 200
    assert response.get_json()["custom_metadata"] == {"c": "3"}
    assert _row(created["id"]).custom_metadata == {"c": "3"}
    assert _row(created["id"]).updated_at == moment
    listed = alice.get("/subscriptions").get_json()["data"][0]
    assert listed["custom_metadata"] == {"c": "3"}


def test_patch_with_an_empty_object_clears_it(alice):
    created = _create(alice, custom_metadata={"a": "1"})
    assert alice.patch(f"/subscriptions/{created['id']}", json={"custom_metadata": {}}).get_json()[
        "custom_metadata"] == {}


def test_patch_of_a_paused_or_cancelled_subscription_is_allowed(alice):
    created = _create(alice)
    alice.delete(f"/subscriptions/{created['id']}")
    response = alice.patch(f"/subscriptions/{created['id']}", json={"custom_metadata": {"note": "churned"}})
    assert response.status_code == 200
    assert response.get_json()["status"] == "cancelled"


@pytest.mark.parametrize("body, field", [
    ({}, "custom_metadata"),
    ({"custom_metadata": None}, "custom_metadata"),
    ({"custom_metadata": ["a"]}, "custom_metadata"),
    ({"custom_metadata": {"k": 5}}, "custom_metadata.k.value"),
    ({"custom_metadata": {"k": "v" * 501}}, "custom_metadata.k.value"),
    ({"custom_metadata": {"": "v"}}, "custom_metadata..key"),
    ({"custom_metadata": {f"k{n}": "v" for n in range(21)}}, "custom_metadata"),
    ({"custom_metadata": {}, "status": "paused"}, "status"),
    ({"custom_metadata": {}, "network_id": "other"}, "network_id"),
])
def test_bad_patch_bodies_are_400_and_change_nothing(alice, body, field):
    created = _create(alice, custom_metadata={"keep": "me"})
    before = _snapshot(created["id"])
    response = alice.patch(f"/subscriptions/{created['id']}", json=body)
    assert response.status_code == 400
    assert response.get_json()["error"] == "VALIDATION_ERROR"
    assert response.get_json()["details"]["field"] == field
    assert _snapshot(created["id"]) == before


def test_patch_of_another_accounts_subscription_is_404_and_changes_nothing(alice, bob):
    bobs = _create(bob, custom_metadata={"owner": "bob"})
    response = alice.patch(f"/subscriptions/{bobs['id']}", json={"custom_metadata": {"owner": "alice"}})
    _assert_not_found(response, bobs["id"])
    assert _row(bobs["id"]).custom_metadata == {"owner": "bob"}
