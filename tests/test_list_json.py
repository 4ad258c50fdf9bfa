"""The list page written by the database (app.sql_json): the same items, byte for byte in meaning, as the
list item schema's dump of the same rows, on SQLite and PostgreSQL."""
import json
from datetime import datetime

import pytest
from sqlalchemy import update

from app.extensions import db
from app.models import Subscription
from app.schemas.base import flat_dumper, json_fields
from app.schemas.subscriptions import SubscriptionListItemSchema
from app.services import subscriptions

FIELDS = json_fields(SubscriptionListItemSchema())
reference_item = flat_dumper(SubscriptionListItemSchema())

# Written to the rows directly: the API takes string values only, the database's JSON path must not care.
METADATA = [
    {},
    {"name": "Zoë \u2028 \"quoted\" back\\slash\nnew line \u0000 \U0001F600", "tags": ["a", {"b": None}]},
    {"big": 12345678901234567890123, "negative": -7, "float": 1.5e300, "small": 1e-07, "true": True},
    {"nested": {"deeper": {"deepest": [1, [2, [3]]]}}, "empty": {}, "list": []},
]
MOMENTS = [  # (created_at, last_checked_at): no fraction, under a millisecond, milliseconds, microseconds
    (datetime(2026, 1, 1, 12, 0, 0), None),
    (datetime(2026, 1, 1, 12, 0, 0, 500), datetime(2026, 2, 3, 4, 5, 6)),
    (datetime(2026, 1, 1, 12, 0, 1, 120000), datetime(2026, 2, 3, 4, 5, 6, 999999)),
    (datetime(2026, 1, 1, 12, 0, 2, 123456), datetime(2026, 2, 3, 4, 5, 6, 1000)),
]


@pytest.fixture
def varied(alice):
    """Subscriptions of both types and three statuses, with odd metadata and timestamps."""
    ids = []
    for number in range(12):
        kind = "company" if number % 3 == 0 else "contact"
        response = alice.post("/subscriptions", json={"entity_type": kind, "network_id": f"z%C3%B6e-{number}"})
        assert response.status_code == 201, response.get_json()
        ids.append(response.get_json()["id"])
    for number, subscription_id in enumerate(ids):
        created_at, last_checked_at = MOMENTS[number % len(MOMENTS)]
        db.session.execute(update(Subscription).where(Subscription.id == subscription_id).values(
            created_at=created_at.replace(day=1 + number), last_checked_at=last_checked_at,
            custom_metadata=METADATA[number % len(METADATA)],
            status=("active", "paused", "cancelled")[number % 3]))
    db.session.commit()
    return alice


QUERIES = [
    {}, {"limit": 5}, {"limit": 5, "offset": 10}, {"offset": 12}, {"offset": 50}, {"status": "paused"},
    {"entity_type": "company"}, {"entity_type": "contact", "status": "active", "limit": 2, "offset": 1},
    {"search": "zöe"}, {"search": "e-1"}, {"search": "company/"}, {"search": "-1", "limit": 2},
    {"search": "nothing-like-it"}, {"search": "zöe", "offset": 40},
]


@pytest.mark.parametrize("query", QUERIES, ids=[json.dumps(query) for query in QUERIES])
def test_the_items_are_the_schemas_dump_of_the_same_rows(varied, query):
    rows, total = subscriptions.list_page(varied.account_id, **{"limit": 20, "offset": 0, **query})
    items, count, json_total = subscriptions.list_page_json(varied.account_id, FIELDS,
                                                            **{"limit": 20, "offset": 0, **query})
    assert json.loads(items) == [reference_item(row) for row in rows]
    assert (count, json_total) == (len(rows), total)
    assert list(json.loads(items)[0]) == list(reference_item(rows[0])) if rows else items == "[]"


def test_the_answer_is_the_page_with_its_pagination(varied):
    rows, total = subscriptions.list_page(varied.account_id, 5, 5)
    response = varied.get("/subscriptions", query_string={"limit": 5, "offset": 5})
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_data(as_text=True).endswith("}\n")  # as every other JSON answer (Flask's)
    assert response.get_json() == {"data": [reference_item(row) for row in rows],
                                   "pagination": {"total": 12, "limit": 5, "offset": 5, "has_more": True}}
    assert total == 12


def test_an_empty_account_answers_an_empty_page(alice):
    assert subscriptions.list_page_json(alice.account_id, FIELDS, 20, 0) == ("[]", 0, 0)
    assert alice.get("/subscriptions").get_json() == {
        "data": [], "pagination": {"total": 0, "limit": 20, "offset": 0, "has_more": False}}


def test_a_schema_the_database_cannot_write_is_refused():
    from marshmallow import Schema, fields

    class WithBoolean(Schema):
        flag = fields.Bool()

    with pytest.raises(TypeError, match="flag"):
        json_fields(WithBoolean())


def test_a_key_postgresql_would_cut_is_refused():
    from marshmallow import Schema, fields

    class LongKey(Schema):
        name = fields.Str(data_key="k" * 64)

    with pytest.raises(TypeError, match="63 bytes"):
        json_fields(LongKey())
