"""GET /subscriptions (interface spec, contract §3): filters, search, pagination, stable order."""
from datetime import datetime

import pytest
from sqlalchemy import update

from app.extensions import db
from app.models import Subscription


def _create(tenant, network_id, entity_type="contact"):
    response = tenant.post("/subscriptions", json={"entity_type": entity_type, "network_id": network_id})
    assert response.status_code == 201
    return response.get_json()


def _list(tenant, **params):
    response = tenant.get("/subscriptions", query_string=params)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def _ids(page):
    return [item["id"] for item in page["data"]]


def _same_created_at(ids):
    db.session.rollback()
    db.session.execute(update(Subscription).where(Subscription.id.in_(ids))
                       .values(created_at=datetime(2026, 1, 1, 12, 0, 0)))
    db.session.commit()


def test_empty_list(alice):
    assert _list(alice) == {"data": [], "pagination": {"total": 0, "limit": 20, "offset": 0, "has_more": False}}


def test_list_item_shape(alice):
    created = _create(alice, "jane-doe")
    item = _list(alice)["data"][0]
    assert set(item) == {"id", "entity_type", "network_id", "network_url", "status", "custom_metadata",
                         "last_checked_at", "created_at"}
    assert item["id"] == created["id"]
    assert item["last_checked_at"] is None
    assert item["created_at"] == created["created_at"]


def test_newest_first(alice):
    ids = [_create(alice, f"person-{n}")["id"] for n in range(3)]
    assert _ids(_list(alice)) == list(reversed(ids))


def test_only_the_callers_subscriptions(alice, bob):
    _create(alice, "alice-one")
    _create(bob, "bob-one")
    page = _list(alice)
    assert [item["network_id"] for item in page["data"]] == ["alice-one"]
    assert page["pagination"]["total"] == 1


def test_pagination_walks_every_row_once_even_with_equal_created_at(alice):
    ids = [_create(alice, f"person-{n:02d}")["id"] for n in range(25)]
    _same_created_at(ids)
    seen = []
    for offset in range(0, 25, 7):
        page = _list(alice, limit=7, offset=offset)
        assert page["pagination"] == {"total": 25, "limit": 7, "offset": offset, "has_more": offset + 7 < 25}
        seen.extend(_ids(page))
    assert sorted(seen) == sorted(ids)
    assert seen == sorted(ids, reverse=True)  # equal created_at: id descending
    assert _ids(_list(alice, limit=100)) == seen  # the same order on every call


def test_default_and_maximum_limit(alice):
    for n in range(21):
        _create(alice, f"person-{n}")
    page = _list(alice)
    assert len(page["data"]) == 20
    assert page["pagination"]["has_more"] is True
    assert len(_list(alice, limit=100)["data"]) == 21


def test_offset_past_the_end_is_an_empty_page(alice):
    _create(alice, "only-one")
    page = _list(alice, offset=50)
    assert page["data"] == []
    assert page["pagination"] == {"total": 1, "limit": 20, "offset": 50, "has_more": False}


def test_filters(alice):
    contact = _create(alice, "jane", "contact")
    company = _create(alice, "acme", "company")
    paused = _create(alice, "paused-person", "contact")
    cancelled = _create(alice, "gone-person", "contact")
    alice.post(f"/subscriptions/{paused['id']}/pause")
    alice.delete(f"/subscriptions/{cancelled['id']}")
    assert _ids(_list(alice, entity_type="company")) == [company["id"]]
    assert set(_ids(_list(alice, entity_type="contact"))) == {contact["id"], paused["id"], cancelled["id"]}
    assert set(_ids(_list(alice, status="active"))) == {contact["id"], company["id"]}
    assert _ids(_list(alice, status="paused")) == [paused["id"]]
    assert _ids(_list(alice, status="cancelled")) == [cancelled["id"]]
    both = _list(alice, entity_type="contact", status="active")
    assert _ids(both) == [contact["id"]] and both["pagination"]["total"] == 1


def test_search_matches_any_part_of_id_or_url_case_insensitively(alice):
    jane = _create(alice, "jane-doe")
    acme = _create(alice, "acme-corp", "company")
    assert _ids(_list(alice, search="JANE")) == [jane["id"]]
    assert _ids(_list(alice, search="ne-do")) == [jane["id"]]
    assert _ids(_list(alice, search="/Company/")) == [acme["id"]]
    assert _ids(_list(alice, search="linkedin.com/in/")) == [jane["id"]]
    assert set(_ids(_list(alice, search="LinkedIn"))) == {jane["id"], acme["id"]}
    assert _list(alice, search="nobody")["data"] == []


def test_search_treats_like_wildcards_literally(alice):
    _create(alice, "jane_doe")
    _create(alice, "janexdoe")
    assert [item["network_id"] for item in _list(alice, search="e_d")["data"]] == ["jane_doe"]
    assert _list(alice, search="%")["data"] == []


def test_search_finds_unicode_ids_by_their_characters_or_encoding(alice):
    jose = _create(alice, "josé")
    assert _ids(_list(alice, search="JOSÉ")) == [jose["id"]]
    assert _ids(_list(alice, search="%C3%A9")) == [jose["id"]]


def test_search_combines_with_filters_and_pagination(alice):
    for n in range(5):
        _create(alice, f"team-{n}")
    _create(alice, "team-company", "company")
    page = _list(alice, search="team", entity_type="contact", limit=2)
    assert page["pagination"]["total"] == 5 and len(page["data"]) == 2 and page["pagination"]["has_more"]


def test_unknown_query_parameters_are_ignored(alice):
    _create(alice, "jane")
    assert _list(alice, foo="bar")["pagination"]["total"] == 1


@pytest.mark.parametrize("params, field", [
    ({"limit": 0}, "limit"),
    ({"limit": 101}, "limit"),
    ({"limit": -1}, "limit"),
    ({"limit": "abc"}, "limit"),
    ({"limit": "1.5"}, "limit"),
    ({"limit": ""}, "limit"),
    ({"offset": -1}, "offset"),
    ({"offset": "x"}, "offset"),
    ({"status": "deleted"}, "status"),
    ({"status": "ACTIVE"}, "status"),
    ({"entity_type": "person"}, "entity_type"),
    ({"search": "x" * 201}, "search"),
])
def test_bad_query_values_are_400(alice, params, field):
    response = alice.get("/subscriptions", query_string=params)
    assert response.status_code == 400
    body = response.get_json()
    assert body["error"] == "VALIDATION_ERROR"
    assert body["details"]["field"] == field
    sent = str(params[field])
    assert body["details"]["value"] == (sent if len(sent) <= 200 else sent[:200] + "…")  # an echo is cut at 200


def test_list_is_also_served_under_v1(alice):
    _create(alice, "jane")
    alice.prefix = "/v1"
    assert _list(alice)["pagination"]["total"] == 1
