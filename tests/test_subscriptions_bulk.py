"""Bulk create, bulk cancel and batch status update (interface spec, contract §3)."""
import copy

import pytest
from sqlalchemy import select

from app.config import DEFAULT_TIERS
from app.extensions import db
from app.models import Subscription
from conftest import subscription_count as _count


def _contact(network_id):
    return {"entity_type": "contact", "network_id": network_id}


def _statuses(ids):
    db.session.rollback()
    return dict(db.session.execute(select(Subscription.id, Subscription.status)
                                   .where(Subscription.id.in_(ids))).all())


def _bulk_create(tenant, items):
    response = tenant.post("/subscriptions/bulk", json={"subscriptions": items})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def _create_many(tenant, count, prefix="person"):
    body = _bulk_create(tenant, [_contact(f"{prefix}-{n}") for n in range(count)])
    assert body["failed"] == 0
    return [item["id"] for item in body["subscriptions"]]


def _assert_whole_request_refused(response, field):
    assert response.status_code == 400
    body = response.get_json()
    assert body["error"] == "VALIDATION_ERROR"
    assert body["details"]["field"] == field


# --- bulk create -----------------------------------------------------------------------------------

def test_bulk_create_answers_counts_items_and_errors(alice):
    body = _bulk_create(alice, [_contact("jane"), {"entity_type": "company",
                                                   "network_url": "https://linkedin.com/company/Acme/"}])
    assert body["created"] == 2 and body["failed"] == 0 and body["errors"] == []
    assert [set(item) for item in body["subscriptions"]] == [{"id", "entity_type", "network_id", "status"}] * 2
    assert [(item["entity_type"], item["network_id"], item["status"]) for item in body["subscriptions"]] == \
        [("contact", "jane", "active"), ("company", "acme", "active")]
    assert _count(alice.account_id) == 2


def test_bulk_create_of_100_items_is_accepted(alice):
    assert len(_create_many(alice, 100)) == 100
    assert _count(alice.account_id) == 100


def test_partial_success_reports_failures_in_request_order(alice):
    existing = alice.post("/subscriptions", json=_contact("already-here")).get_json()
    items = [
        _contact("fine-1"),                                           # 0 created
        {"entity_type": "robot", "network_id": "bad-type"},           # 1 validation
        _contact("already-here"),                                     # 2 duplicate of an existing one
        _contact("fine-2"),                                           # 3 created
        {"entity_type": "contact", "network_url": "https://example.com/in/x"},  # 4 bad URL
        _contact("FINE-1"),                                           # 5 duplicate within the batch
        "not an object",                                              # 6
        None,                                                         # 7
        {"entity_type": "contact", "network_id": "ok-3", "bogus": 1},  # 8 unknown field
        {"entity_type": "contact"},                                   # 9 no id or url
        {"entity_type": "contact", "network_id": 12},                 # 10 wrong type
    ]
    body = _bulk_create(alice, items)
    assert body["created"] == 2 and body["failed"] == 9
    assert [item["network_id"] for item in body["subscriptions"]] == ["fine-1", "fine-2"]
    errors = body["errors"]
    assert [error["index"] for error in errors] == [1, 2, 4, 5, 6, 7, 8, 9, 10]
    by_index = {error["index"]: error for error in errors}
    assert all(set(error) == {"index", "network_id", "error", "code"} for index, error in by_index.items()
               if index not in (2, 5))
    assert by_index[1]["code"] == "VALIDATION_ERROR" and by_index[1]["network_id"] == "bad-type"
    # a duplicate names the subscription it duplicates, as the single create's 409 does
    assert by_index[2]["code"] == "DUPLICATE_SUBSCRIPTION" and by_index[2]["network_id"] == "already-here"
    assert by_index[2]["existing_subscription_id"] == existing["id"]
    assert by_index[4]["code"] == "VALIDATION_ERROR" and by_index[4]["network_id"] is None
    assert by_index[5]["code"] == "DUPLICATE_SUBSCRIPTION" and by_index[5]["network_id"] == "fine-1"
    assert by_index[5]["existing_subscription_id"] == body["subscriptions"][0]["id"]  # created by this batch
    for index in (6, 7, 8, 9, 10):
        assert by_index[index]["code"] == "VALIDATION_ERROR"
    assert by_index[6]["error"] == by_index[7]["error"] == \
        "Not a subscription: an item is a JSON object, as POST /subscriptions takes."  # not "body: Invalid input type."
    assert all(error["error"] for error in errors)
    assert _count(alice.account_id) == 3


def test_errors_name_the_resolved_id_of_url_items(alice):
    alice.post("/subscriptions", json=_contact("jane-doe"))
    existing = alice.get("/subscriptions").json["data"][0]["id"]
    body = _bulk_create(alice, [{"entity_type": "contact", "network_url": "https://www.linkedin.com/in/Jane-Doe"}])
    assert body["errors"] == [{"index": 0, "network_id": "jane-doe", "code": "DUPLICATE_SUBSCRIPTION",
                               "error": body["errors"][0]["error"], "existing_subscription_id": existing}]


def test_same_id_as_contact_and_company_in_one_batch_are_both_created(alice):
    body = _bulk_create(alice, [_contact("acme"), {"entity_type": "company", "network_id": "acme"}])
    assert body["created"] == 2


def test_bulk_create_accepts_aliases_and_metadata(alice):
    body = _bulk_create(alice, [{"entity_type": "contact", "linkedin_id": "alias-one",
                                 "custom_metadata": {"row": "1"}}])
    assert body["created"] == 1
    got = alice.get(f"/subscriptions/{body['subscriptions'][0]['id']}").get_json()
    assert got["custom_metadata"] == {"row": "1"}


def test_a_batch_where_every_item_fails_is_still_200(alice):
    body = _bulk_create(alice, [{"entity_type": "x"}, 5])
    assert body == {"created": 0, "failed": 2, "subscriptions": [], "errors": body["errors"]}
    assert [error["index"] for error in body["errors"]] == [0, 1]
    assert _count(alice.account_id) == 0


@pytest.mark.parametrize("body, field", [
    ({"subscriptions": []}, "subscriptions"),
    ({"subscriptions": [_contact(f"p-{n}") for n in range(101)]}, "subscriptions"),
    ({}, "subscriptions"),
    ({"subscriptions": None}, "subscriptions"),
    ({"subscriptions": {"entity_type": "contact"}}, "subscriptions"),
    ({"subscriptions": "jane"}, "subscriptions"),
    ({"subscriptions": [_contact("jane")], "dry_run": True}, "dry_run"),
])
def test_bad_bulk_create_requests_are_refused_whole(alice, body, field):
    _assert_whole_request_refused(alice.post("/subscriptions/bulk", json=body), field)
    assert _count(alice.account_id) == 0


@pytest.mark.parametrize("raw", ["[]", "null", '"x"', "{oops"])
def test_bulk_create_needs_a_json_object(alice, raw):
    _assert_whole_request_refused(alice.post("/subscriptions/bulk", data=raw, content_type="application/json"),
                                  "body")


class TestCapInBulk:
    @pytest.fixture
    def app_config(self):
        tiers = copy.deepcopy(DEFAULT_TIERS)
        tiers["starter"]["subscription_limit"] = 5
        return {"TIERS": tiers}

    def test_items_past_the_cap_fail_with_tier_limit_exceeded(self, alice):
        _create_many(alice, 3, prefix="old")
        body = _bulk_create(alice, [_contact(f"new-{n}") for n in range(4)])
        assert body["created"] == 2 and body["failed"] == 2
        assert [item["network_id"] for item in body["subscriptions"]] == ["new-0", "new-1"]
        assert [(error["index"], error["network_id"], error["code"]) for error in body["errors"]] == \
            [(2, "new-2", "TIER_LIMIT_EXCEEDED"), (3, "new-3", "TIER_LIMIT_EXCEEDED")]
        assert _count(alice.account_id) == 5

    def test_failed_items_do_not_use_up_the_cap(self, alice):
        _create_many(alice, 4, prefix="old")
        body = _bulk_create(alice, [_contact("old-0"), {"entity_type": "x"}, _contact("last-slot")])
        assert body["created"] == 1 and body["subscriptions"][0]["network_id"] == "last-slot"
        assert [error["code"] for error in body["errors"]] == ["DUPLICATE_SUBSCRIPTION", "VALIDATION_ERROR"]


# --- bulk cancel -----------------------------------------------------------------------------------

def test_bulk_cancel_cancels_and_reports(alice):
    ids = _create_many(alice, 3)
    response = alice.delete("/subscriptions/bulk", json={"subscription_ids": ids[:2]})
    assert response.status_code == 200
    assert response.get_json() == {"cancelled": 2, "failed": 0, "errors": [],
                                   "subscriptions": [{"id": ids[0], "status": "cancelled"},
                                                     {"id": ids[1], "status": "cancelled"}]}
    assert _statuses(ids) == {ids[0]: "cancelled", ids[1]: "cancelled", ids[2]: "active"}


def test_bulk_cancel_reports_unknown_and_foreign_ids_as_not_found(alice, bob):
    mine = _create_many(alice, 1)[0]
    bobs = _create_many(bob, 1)[0]
    body = alice.delete("/subscriptions/bulk", json={"subscription_ids": ["sub_nope", mine, bobs]}).get_json()
    assert body["cancelled"] == 1 and body["failed"] == 2
    assert body["subscriptions"] == [{"id": mine, "status": "cancelled"}]
    assert [(error["id"], error["code"]) for error in body["errors"]] == [("sub_nope", "NOT_FOUND"),
                                                                          (bobs, "NOT_FOUND")]
    assert all(error["error"] for error in body["errors"])
    assert _statuses([bobs]) == {bobs: "active"}


def test_bulk_cancel_is_idempotent_and_keeps_cancelled_at(alice):
    ids = _create_many(alice, 2)
    alice.delete(f"/subscriptions/{ids[0]}")
    cancelled_at = alice.get(f"/subscriptions/{ids[0]}").get_json()["cancelled_at"]
    body = alice.delete("/subscriptions/bulk", json={"subscription_ids": ids}).get_json()
    assert body["cancelled"] == 2 and body["failed"] == 0
    assert alice.get(f"/subscriptions/{ids[0]}").get_json()["cancelled_at"] == cancelled_at


def test_bulk_cancel_counts_a_repeated_id_once(alice):
    ids = _create_many(alice, 1)
    body = alice.delete("/subscriptions/bulk", json={"subscription_ids": [ids[0], ids[0]]}).get_json()
    assert body["cancelled"] == 1 and body["subscriptions"] == [{"id": ids[0], "status": "cancelled"}]


@pytest.mark.parametrize("body, field", [
    ({"subscription_ids": []}, "subscription_ids"),
    ({"subscription_ids": [f"sub_{n}" for n in range(101)]}, "subscription_ids"),
    ({}, "subscription_ids"),
    ({"subscription_ids": "sub_x"}, "subscription_ids"),
    ({"subscription_ids": {"0": "sub_x"}}, "subscription_ids"),
    ({"subscription_ids": None}, "subscription_ids"),
    ({"subscription_ids": "MINE", "force": True}, "force"),
])
def test_bad_bulk_cancel_requests_are_refused_whole_and_cancel_nothing(alice, body, field):
    ids = _create_many(alice, 2)
    if body.get("subscription_ids") == "MINE":  # valid ids of the caller: only the extra field is wrong
        body = {**body, "subscription_ids": ids}
    _assert_whole_request_refused(alice.delete("/subscriptions/bulk", json=body), field)
    assert _count(alice.account_id, status="active") == 2


def _malformed_request(alice, bob):
    """The independent walk's request, and more malformed items: (ids of alice's the request names, the other
    one of alice's (inside an object item), bob's, the request's items)."""
    mine = _create_many(alice, 3)
    bobs = _create_many(bob, 1)[0]
    items = [mine[0], mine[1], "sub_nope", bobs, "", 5, None, "s" * 101, {"id": mine[2]}, [mine[2]], True, 7.5,
             "sub_\x00nul", mine[0]]
    return mine[:2], mine[2], bobs, items


# (index, id, code) of each failed item of `_malformed_request`, in request order; the repeated id counts once
MALFORMED_ERRORS = [(2, "sub_nope", "NOT_FOUND"), (4, "", "NOT_FOUND"), (5, None, "VALIDATION_ERROR"),
                    (6, None, "VALIDATION_ERROR"), (7, "s" * 101, "NOT_FOUND"), (8, None, "VALIDATION_ERROR"),
                    (9, None, "VALIDATION_ERROR"), (10, None, "VALIDATION_ERROR"), (11, None, "VALIDATION_ERROR"),
                    (12, "sub_\x00nul", "NOT_FOUND")]


def _assert_malformed_errors(errors, bobs):
    expected = sorted(MALFORMED_ERRORS + [(3, bobs, "NOT_FOUND")])
    assert [(error["index"], error["id"], error["code"]) for error in errors] == expected
    assert all(error["error"] for error in errors)
    assert [error["error"] for error in errors if error["code"] == "VALIDATION_ERROR"] == \
        ["Not a subscription id: an id is a string."] * 6
    assert errors[0]["error"] == "No subscription with id 'sub_nope' was found."


@pytest.mark.parametrize("method,extra,done,status", [("DELETE", {}, "cancelled", "cancelled"),
                                                      ("PATCH", {"status": "paused"}, "updated", "paused")])
def test_bulk_cancel_and_status_report_malformed_items_per_item_and_move_the_valid_ones(alice, bob, method,
                                                                                        extra, done, status):
    named, other, bobs, items = _malformed_request(alice, bob)
    response = alice.request(method, "/subscriptions/bulk", json={"subscription_ids": items, **extra})
    assert response.status_code == 200
    body = response.get_json()
    assert body[done] == 2 and body["failed"] == 11
    assert body["subscriptions"] == [{"id": named[0], "status": status}, {"id": named[1], "status": status}]
    _assert_malformed_errors(body["errors"], bobs)
    assert _statuses([*named, other, bobs]) == {named[0]: status, named[1]: status, other: "active",
                                                bobs: "active"}


def test_bulk_cancel_of_only_malformed_items_is_200_and_cancels_nothing(alice):
    ids = _create_many(alice, 2)
    body = alice.delete("/subscriptions/bulk", json={"subscription_ids": [None, "", 5, None]}).get_json()
    assert (body["cancelled"], body["failed"], body["subscriptions"]) == (0, 4, [])
    assert [(error["index"], error["code"]) for error in body["errors"]] == [
        (0, "VALIDATION_ERROR"), (1, "NOT_FOUND"), (2, "VALIDATION_ERROR"), (3, "VALIDATION_ERROR")]
    assert _count(alice.account_id, status="active") == 2 and set(_statuses(ids).values()) == {"active"}


# --- batch status update ---------------------------------------------------------------------------

def test_batch_pause_and_resume(alice):
    ids = _create_many(alice, 3)
    paused = alice.patch("/subscriptions/bulk", json={"subscription_ids": ids[:2], "status": "paused"})
    assert paused.status_code == 200
    assert paused.get_json() == {"updated": 2, "failed": 0, "errors": [],
                                 "subscriptions": [{"id": ids[0], "status": "paused"},
                                                   {"id": ids[1], "status": "paused"}]}
    assert _statuses(ids) == {ids[0]: "paused", ids[1]: "paused", ids[2]: "active"}
    resumed = alice.patch("/subscriptions/bulk", json={"subscription_ids": ids, "status": "active"}).get_json()
    assert resumed["updated"] == 3
    assert set(_statuses(ids).values()) == {"active"}


def test_batch_status_reports_cancelled_and_unknown_ids(alice, bob):
    ids = _create_many(alice, 2)
    alice.delete(f"/subscriptions/{ids[1]}")
    bobs = _create_many(bob, 1)[0]
    body = alice.patch("/subscriptions/bulk", json={"subscription_ids": [ids[0], ids[1], "sub_nope", bobs],
                                                    "status": "paused"}).get_json()
    assert body["updated"] == 1 and body["failed"] == 3
    assert body["subscriptions"] == [{"id": ids[0], "status": "paused"}]
    assert [(error["id"], error["code"]) for error in body["errors"]] == [
        (ids[1], "INVALID_STATE"), ("sub_nope", "NOT_FOUND"), (bobs, "NOT_FOUND")]
    assert _statuses([ids[1], bobs]) == {ids[1]: "cancelled", bobs: "active"}


def test_batch_status_lists_refused_moves_and_malformed_items_by_index(alice):
    ids = _create_many(alice, 2)
    alice.delete(f"/subscriptions/{ids[1]}")
    body = alice.patch("/subscriptions/bulk", json={"subscription_ids": [7, ids[1], "", ids[0]],
                                                    "status": "paused"}).get_json()
    assert body["subscriptions"] == [{"id": ids[0], "status": "paused"}]
    assert [(error["index"], error["id"], error["code"]) for error in body["errors"]] == [
        (0, None, "VALIDATION_ERROR"), (1, ids[1], "INVALID_STATE"), (2, "", "NOT_FOUND")]


@pytest.mark.parametrize("status", ["cancelled", "deleted", "", None, 1])
def test_batch_status_accepts_only_paused_or_active(alice, status):
    ids = _create_many(alice, 1)
    response = alice.patch("/subscriptions/bulk", json={"subscription_ids": ids, "status": status})
    _assert_whole_request_refused(response, "status")
    assert _statuses(ids) == {ids[0]: "active"}


def test_batch_status_needs_a_status_and_at_most_100_ids(alice):
    _assert_whole_request_refused(alice.patch("/subscriptions/bulk", json={"subscription_ids": ["sub_x"]}),
                                  "status")
    _assert_whole_request_refused(alice.patch("/subscriptions/bulk", json={
        "subscription_ids": [f"sub_{n}" for n in range(101)], "status": "paused"}), "subscription_ids")
