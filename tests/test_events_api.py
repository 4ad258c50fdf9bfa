"""The event log API (contract §5, §6): GET /events and GET /events/:id."""
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.common import new_id, utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import DeliveryAttempt, Event, Subscription
from app.services import events
from app.worker import checks as worker


class Network:
    concurrency = 1

    def __init__(self):
        self.companies = {}

    def fetch(self, entity_type, network_id):
        if entity_type == "contact":
            return {"network_id": network_id, "name": "X", "headline": "h", "company": "Acme",
                    "title": "Engineer", "activities": []}
        return {"network_id": network_id, "headcount": self.companies.get(network_id, 10), "activities": []}


@pytest.fixture
def network(app):
    app.extensions["provider"] = Network()
    return app.extensions["provider"]


def subscribe(tenant, network_id, entity_type="contact"):
    response = tenant.post("/subscriptions", json={"entity_type": entity_type, "network_id": network_id})
    assert response.status_code == 201
    return response.json["id"]


def record_many(tenant, subscription_id, count, start=None):
    """`count` headcount events, one second apart, oldest first; returns their ids."""
    start = start or utcnow() - timedelta(hours=1)
    ids = []
    with write_transaction() as session:
        subscription = session.get(Subscription, subscription_id)
        for number in range(count):
            event = events.record(session, tenant.account_id, "company.employee_count_changed",
                                  {"entity": events.entity_data(subscription),
                                   "changes": {"previous_employee_count": number,
                                               "current_employee_count": number + 1,
                                               "delta": 1, "delta_percent": None}},
                                  subscription=subscription, now=start + timedelta(seconds=number))
            ids.append(event.id)
    return ids


@pytest.fixture
def history(alice, network):
    """alice: a contact and a company, each checked once (two initial states), and a headcount change."""
    contact = subscribe(alice, "jane-doe")
    company = subscribe(alice, "acme", "company")
    worker.run_one(contact)
    worker.run_one(company)
    network.companies["acme"] = 25
    worker.run_one(company)
    return {"contact": contact, "company": company}


def test_list_is_newest_first_with_full_envelopes(alice, history):
    response = alice.get("/events")
    assert response.status_code == 200
    body = response.json
    assert body["pagination"] == {"total": 3, "limit": 20, "offset": 0, "has_more": False}
    types = [event["type"] for event in body["data"]]
    assert types[0] == "company.employee_count_changed"
    assert sorted(types[1:]) == ["subscription.initial_state", "subscription.initial_state"]
    newest = body["data"][0]
    assert set(newest) == {"id", "type", "created", "data", "metadata", "delivery_status"}
    assert newest["id"].startswith("evt_") and isinstance(newest["created"], int)
    assert newest["data"]["entity"] == {"id": history["company"], "type": "company", "network_id": "acme",
                                        "network_url": "https://www.linkedin.com/company/acme"}
    assert newest["data"]["changes"] == {"previous_employee_count": 10, "current_employee_count": 25,
                                         "delta": 15, "delta_percent": 150.0}
    assert set(newest["metadata"]) == {"subscription_id", "detected_at", "custom_metadata"}
    assert newest["delivery_status"] == "skipped"  # no webhook configuration


def test_filter_by_type(alice, history):
    body = alice.get("/events?type=subscription.initial_state").json
    assert body["pagination"]["total"] == 2
    assert {event["type"] for event in body["data"]} == {"subscription.initial_state"}
    assert alice.get("/events?type=contact.position_changed").json == {
        "data": [], "pagination": {"total": 0, "limit": 20, "offset": 0, "has_more": False}}


def test_filter_by_subscription(alice, history):
    body = alice.get(f"/events?subscription_id={history['company']}").json
    assert body["pagination"]["total"] == 2
    assert {event["metadata"]["subscription_id"] for event in body["data"]} == {history["company"]}
    both = alice.get(f"/events?subscription_id={history['company']}&type=subscription.initial_state").json
    assert [event["type"] for event in both["data"]] == ["subscription.initial_state"]
    assert alice.get("/events?subscription_id=sub_unknown").json["pagination"]["total"] == 0


def test_filter_by_delivery_status(alice, history):
    """The dashboard's event list filters so; the API ignored the parameter as unknown and answered every event
    (contract walk: ?delivery_status=failed gave all of them)."""
    with write_transaction() as session:
        failed = session.scalars(select(Event).where(Event.account_id == alice.account_id)
                                 .order_by(Event.created_at.desc()).limit(1)).one()
        failed.delivery_status = "failed"
    body = alice.get("/events?delivery_status=failed").json
    assert [event["id"] for event in body["data"]] == [failed.id] and body["pagination"]["total"] == 1
    assert body["data"][0]["delivery_status"] == "failed"
    skipped = alice.get(f"/events?delivery_status=skipped&subscription_id={history['company']}").json
    assert skipped["pagination"]["total"] == 1 and failed.id not in [event["id"] for event in skipped["data"]]
    assert alice.get("/events?delivery_status=pending").json["pagination"]["total"] == 0


def test_pagination_is_stable_and_complete(alice, network):
    subscription_id = subscribe(alice, "acme", "company")
    recorded = record_many(alice, subscription_id, 25)
    first = alice.get("/events?limit=10").json
    second = alice.get("/events?limit=10&offset=10").json
    third = alice.get("/events?limit=10&offset=20").json
    assert first["pagination"] == {"total": 25, "limit": 10, "offset": 0, "has_more": True}
    assert second["pagination"]["has_more"] is True
    assert third["pagination"] == {"total": 25, "limit": 10, "offset": 20, "has_more": False}
    listed = [event["id"] for page in (first, second, third) for event in page["data"]]
    assert listed == list(reversed(recorded))
    assert alice.get("/events?offset=100").json["data"] == []


def test_events_with_the_same_timestamp_keep_a_stable_order(alice, network):
    subscription_id = subscribe(alice, "acme", "company")
    moment = utcnow()
    for _ in range(6):
        record_many(alice, subscription_id, 1, start=moment)
    pages = [alice.get(f"/events?limit=2&offset={offset}").json["data"] for offset in (0, 2, 4)]
    listed = [event["id"] for page in pages for event in page]
    assert len(set(listed)) == 6
    assert listed == [event["id"] for event in alice.get("/events?limit=6").json["data"]]


@pytest.mark.parametrize("query, field", [("limit=0", "limit"), ("limit=101", "limit"),
                                          ("limit=ten", "limit"), ("offset=-1", "offset"),
                                          ("type=contact.job_change", "type"),
                                          ("type=", "type"), ("delivery_status=done", "delivery_status")])
def test_bad_query_parameters_are_400(alice, query, field):
    response = alice.get(f"/events?{query}")
    assert response.status_code == 400
    assert response.json["error"] == "VALIDATION_ERROR"
    assert response.json["details"]["field"] == field


def test_limit_100_and_unrelated_parameters_are_accepted(alice):
    response = alice.get("/events?limit=100&utm_source=x")
    assert response.status_code == 200 and response.json["pagination"]["limit"] == 100


def test_another_accounts_events_are_invisible(alice, bob, history):
    assert bob.get("/events").json["pagination"]["total"] == 0
    assert bob.get(f"/events?subscription_id={history['contact']}").json["data"] == []
    event_id = alice.get("/events").json["data"][0]["id"]
    response = bob.get(f"/events/{event_id}")
    assert response.status_code == 404
    assert response.json["error"] == "NOT_FOUND"
    assert response.json["details"] == {"resource": "event", "id": event_id}


def test_unknown_event_is_404(alice):
    response = alice.get("/events/evt_000000000000000000000000")
    assert response.status_code == 404 and response.json["error"] == "NOT_FOUND"


def test_get_one_event_is_the_envelope_with_its_attempts(alice, history):
    listed = alice.get("/events").json["data"][0]
    response = alice.get(f"/events/{listed['id']}")
    assert response.status_code == 200
    assert response.json == {**listed, "attempts": []}


def test_get_one_event_lists_its_delivery_attempts_in_order(alice, history):
    event_id = alice.get("/events").json["data"][0]["id"]
    now = utcnow().replace(microsecond=0)
    with write_transaction():
        db.session.execute(update(Event).where(Event.id == event_id).values(delivery_status="pending"))
        db.session.add_all([
            DeliveryAttempt(id=new_id("dlv"), account_id=alice.account_id, event_id=event_id,
                            event_type="company.employee_count_changed", attempt=2, status="succeeded",
                            response_status=200, duration_ms=12, error=None,
                            attempted_at=now, next_attempt_at=None),
            DeliveryAttempt(id=new_id("dlv"), account_id=alice.account_id, event_id=event_id,
                            event_type="company.employee_count_changed", attempt=1, status="failed",
                            response_status=503, duration_ms=40, error="HTTP 503",
                            attempted_at=now - timedelta(seconds=5), next_attempt_at=now),
        ])
    body = alice.get(f"/events/{event_id}").json
    assert body["delivery_status"] == "pending"
    assert [(item["attempt"], item["status"]) for item in body["attempts"]] == [(1, "failed"),
                                                                                (2, "succeeded")]
    first = body["attempts"][0]
    assert first["id"].startswith("dlv_") and first["event_id"] == event_id
    assert first["event_type"] == "company.employee_count_changed"
    assert (first["response_status"], first["duration_ms"], first["error"]) == (503, 40, "HTTP 503")
    assert first["attempted_at"].endswith("Z") and first["next_attempt_at"].endswith("Z")
    assert body["attempts"][1]["next_attempt_at"] is None


def test_the_event_log_answers_under_both_prefixes_and_needs_a_key(alice, anon, history):
    alice.prefix = "/v1"
    assert alice.get("/events").json["pagination"]["total"] == 3
    assert anon.get("/events").status_code == 401
    event_id = alice.get("/events").json["data"][0]["id"]
    assert anon.get(f"/events/{event_id}").status_code == 401


def test_cancelled_subscriptions_keep_their_events(alice, history):
    alice.delete(f"/subscriptions/{history['contact']}")
    assert alice.get(f"/events?subscription_id={history['contact']}").json["pagination"]["total"] == 1


def test_a_page_and_its_total_come_from_one_snapshot_while_events_are_added(alice, network, monkeypatch):
    """On PostgreSQL each statement of a read saw the rows committed before it: an event committed between the
    total's count and the page's read was on the page but not in the total (walk, with a search: 100 items on a
    page past the total). A read request's statements now share one snapshot, as SQLite's always did."""
    company = subscribe(alice, "acme", "company")
    record_many(alice, company, 3)
    count = db.session.scalar
    added = []

    def count_then_add_an_event(*args, **kwargs):
        total = count(*args, **kwargs)
        if not added:  # another process records an event now (counted, as the services record them)
            with Session(db.engine) as other, other.begin():
                added.append(events.record(other, alice.account_id, "company.employee_count_changed",
                                           {"changes": {}}, subscription=other.get(Subscription, company)).id)
        return total
    monkeypatch.setattr(db.session, "scalar", count_then_add_an_event)
    page = alice.get("/events?limit=20").json
    assert added and page["pagination"]["total"] == 3
    assert len(page["data"]) == 3 and added[0] not in [event["id"] for event in page["data"]]
    assert alice.get("/events?limit=20").json["pagination"]["total"] == 4  # the next read sees it
