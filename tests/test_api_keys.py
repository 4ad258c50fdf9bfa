"""POST/GET/DELETE /account/api-keys (interface spec, contract §4)."""
import re

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.models import ApiKey
from conftest import Tenant

KEY_FORMAT = re.compile(r"^lwa\.sk_live_[A-Za-z0-9]{32}$")


def _key_count(account_id=None):
    db.session.rollback()
    query = select(func.count()).select_from(ApiKey)
    if account_id:
        query = query.where(ApiKey.account_id == account_id)
    return db.session.scalar(query)


def test_create_returns_the_key_once_with_201_and_location(alice):
    response = alice.post("/account/api-keys", json={"name": "CI pipeline"})
    assert response.status_code == 201
    body = response.get_json()
    assert set(body) == {"id", "name", "key", "key_hint", "created_at", "last_used_at"}
    assert body["id"].startswith("key_")
    assert body["name"] == "CI pipeline"
    assert KEY_FORMAT.match(body["key"])
    assert body["key_hint"] == body["key"][-4:]
    assert body["last_used_at"] is None
    assert body["created_at"].endswith("Z")
    assert response.headers["Location"] == f"/api/v1/account/api-keys/{body['id']}"


def test_created_key_works(alice):
    body = alice.post("/account/api-keys", json={"name": "second"}).get_json()
    second = Tenant(alice.client, alice.account_id, body["key"])
    assert second.get("/account").get_json()["id"] == alice.account_id


def test_keys_are_unique(alice):
    made = {alice.post("/account/api-keys", json={"name": f"k{n}"}).get_json()["key"] for n in range(5)}
    assert len(made) == 5 and alice.key not in made


def test_list_returns_metadata_only_oldest_first(alice):
    created = alice.post("/account/api-keys", json={"name": "second"}).get_json()
    response = alice.get("/account/api-keys")
    assert response.status_code == 200
    listed = response.get_json()["keys"]
    assert [key["name"] for key in listed] == ["Default key", "second"]
    for key in listed:
        assert set(key) == {"id", "name", "last_used_at", "created_at", "key_hint"}
    assert listed[1]["id"] == created["id"]
    assert listed[0]["key_hint"] == alice.key[-4:]
    assert alice.key not in response.get_data(as_text=True)
    assert created["key"] not in response.get_data(as_text=True)


def test_list_never_shows_another_accounts_keys(alice, bob):
    bob.post("/account/api-keys", json={"name": "bob-only"})
    names = [key["name"] for key in alice.get("/account/api-keys").get_json()["keys"]]
    assert names == ["Default key"]


def test_the_created_keys_location_answers_get_with_the_list_items_shape(alice):
    created = alice.post("/account/api-keys", json={"name": "walk2"})
    response = alice.client.get(created.headers["Location"], headers=alice.headers)
    assert response.status_code == 200
    listed = alice.get("/account/api-keys").get_json()["keys"]
    assert response.get_json() == listed[1]
    assert response.get_json()["name"] == "walk2"
    assert "key" not in response.get_json()
    assert created.get_json()["key"] not in response.get_data(as_text=True)


def test_get_one_key_shows_its_last_use(alice):
    first = alice.get("/account/api-keys").get_json()["keys"][0]
    body = alice.get(f"/account/api-keys/{first['id']}").get_json()
    assert body["id"] == first["id"] and body["key_hint"] == alice.key[-4:]
    assert body["last_used_at"] is not None and body["last_used_at"].endswith("Z")


def test_get_another_accounts_or_an_unknown_key_is_404(alice, bob):
    bobs = bob.post("/account/api-keys", json={"name": "bob-second"}).get_json()
    for key_id in (bobs["id"], "key_doesnotexist"):
        response = alice.get(f"/account/api-keys/{key_id}")
        assert response.status_code == 404
        assert response.get_json()["details"] == {"resource": "api_key", "id": key_id}
        assert "bob-second" not in response.get_data(as_text=True)
    assert bob.get(f"/account/api-keys/{bobs['id']}").get_json()["name"] == "bob-second"


def test_get_of_a_deleted_key_is_404(alice):
    created = alice.post("/account/api-keys", json={"name": "temp"}).get_json()
    alice.delete(f"/account/api-keys/{created['id']}")
    assert alice.get(f"/account/api-keys/{created['id']}").status_code == 404


def test_delete_answers_id_and_deleted_then_404(alice):
    created = alice.post("/account/api-keys", json={"name": "temp"}).get_json()
    response = alice.delete(f"/account/api-keys/{created['id']}")
    assert response.status_code == 200
    assert response.get_json() == {"id": created["id"], "deleted": True}
    assert _key_count(alice.account_id) == 1
    again = alice.delete(f"/account/api-keys/{created['id']}")
    assert again.status_code == 404
    assert again.get_json()["error"] == "NOT_FOUND"
    assert again.get_json()["details"] == {"resource": "api_key", "id": created["id"]}


def test_delete_of_another_accounts_key_is_404_and_keeps_it(alice, bob):
    bobs = bob.post("/account/api-keys", json={"name": "bob-second"}).get_json()
    response = alice.delete(f"/account/api-keys/{bobs['id']}")
    assert response.status_code == 404
    assert response.get_json()["error"] == "NOT_FOUND"
    assert _key_count(bob.account_id) == 2
    assert Tenant(bob.client, bob.account_id, bobs["key"]).get("/account").status_code == 200


def test_delete_unknown_id_is_404(alice):
    response = alice.delete("/account/api-keys/key_doesnotexist")
    assert response.status_code == 404
    assert response.get_json()["details"]["id"] == "key_doesnotexist"


def test_deleting_the_last_key_is_invalid_state(alice):
    only = alice.get("/account/api-keys").get_json()["keys"][0]
    response = alice.delete(f"/account/api-keys/{only['id']}")
    assert response.status_code == 409
    assert response.get_json()["error"] == "INVALID_STATE"
    assert _key_count(alice.account_id) == 1
    assert alice.get("/account").status_code == 200


def test_at_most_25_keys(alice):
    for n in range(24):
        assert alice.post("/account/api-keys", json={"name": f"key {n}"}).status_code == 201
    response = alice.post("/account/api-keys", json={"name": "one too many"})
    assert response.status_code == 403
    body = response.get_json()
    assert body["error"] == "KEY_LIMIT_EXCEEDED"
    assert body["details"] == {"current_count": 25, "limit": 25}
    assert _key_count(alice.account_id) == 25


def test_key_limit_is_configuration(app, alice):
    app.config["MAX_API_KEYS"] = 2
    assert alice.post("/account/api-keys", json={"name": "two"}).status_code == 201
    assert alice.post("/account/api-keys", json={"name": "three"}).get_json()["details"] == \
        {"current_count": 2, "limit": 2}


def test_deleting_a_key_frees_a_slot(app, alice):
    app.config["MAX_API_KEYS"] = 2
    second = alice.post("/account/api-keys", json={"name": "two"}).get_json()
    alice.delete(f"/account/api-keys/{second['id']}")
    assert alice.post("/account/api-keys", json={"name": "two again"}).status_code == 201


@pytest.mark.parametrize("body, field", [
    ({}, "name"),
    ({"name": ""}, "name"),
    ({"name": "x" * 101}, "name"),
    ({"name": 42}, "name"),
    ({"name": None}, "name"),
    ({"name": ["a"]}, "name"),
    ({"name": "ok", "scope": "admin"}, "scope"),
])
def test_bad_create_bodies_are_400_and_create_nothing(alice, body, field):
    response = alice.post("/account/api-keys", json=body)
    assert response.status_code == 400
    error = response.get_json()
    assert error["error"] == "VALIDATION_ERROR"
    assert error["details"]["field"] == field
    assert _key_count(alice.account_id) == 1


@pytest.mark.parametrize("raw", ["", "null", "[]", '"name"', "{bad json", "42"])
def test_non_object_bodies_are_400(alice, raw):
    response = alice.post("/account/api-keys", data=raw, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["error"] == "VALIDATION_ERROR"
    assert response.get_json()["details"]["field"] == "body"
    assert _key_count(alice.account_id) == 1


def test_name_of_100_characters_and_unicode_is_accepted(alice):
    name = "ключ " + "x" * 95
    body = alice.post("/account/api-keys", json={"name": name}).get_json()
    assert body["name"] == name


def test_no_api_answer_may_be_cached(alice, anon):
    """A new key (shown once) and every other API answer carry `Cache-Control: no-store` (API walk: none did)."""
    answers = [alice.post("/account/api-keys", json={"name": "cached?"}), alice.get("/account"),
               alice.get("/subscriptions"), alice.get("/subscriptions/sub_unknown"), anon.get("/account"),
               alice.get("/subscriptions/export?format=csv")]
    assert [answer.status_code for answer in answers] == [201, 200, 200, 404, 401, 200]
    assert all(answer.headers["Cache-Control"] == "no-store" for answer in answers)
