"""The check engine (contract §6, §7): events and their exact envelopes, the first-check rule,
counters and scheduling, the races with cancel and pause, and failures that must not stop the loop."""
import calendar
import copy
import json
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update

from app.common import isoformat, new_id, utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import Event, OutboxDelivery, Subscription, WebhookConfig
from app.providers import EntityUnavailable, ProviderError
from app.services import checks
from app.worker import checks as worker

INTERVAL = 86400  # the starter tier's
JITTER = 0.1


class StubNetwork:
    """A provider whose answers the test sets: a snapshot dict, or an exception to raise."""
    concurrency = 1

    def __init__(self):
        self.answers = {}
        self.calls = []

    def set(self, network_id, answer):
        self.answers[network_id] = answer

    def fetch(self, entity_type, network_id):
        self.calls.append(network_id)
        answer = self.answers[network_id]
        if isinstance(answer, BaseException):
            raise answer
        return copy.deepcopy(answer)


@pytest.fixture
def network(app):
    stub = StubNetwork()
    app.extensions["provider"] = stub
    return stub


def person(network_id="jane-doe", **fields):
    return {"network_id": network_id, "name": "Jane Doe", "headline": "Engineer at Acme", "company": "Acme",
            "title": "Engineer", "location": "Berlin", "activities": [], **fields}


def firm(network_id="acme", **fields):
    return {"network_id": network_id, "name": "Acme", "headcount": 200, "description": "Makes anvils.",
            "industry": "Manufacturing", "website": "https://acme.example", "activities": [], **fields}


def activity(activity_id, kind="post", **extra):
    return {"id": activity_id, "kind": kind, "url": f"https://www.linkedin.com/feed/update/{activity_id}",
            "text": f"about {activity_id}", "created_at": "2026-11-21T08:00:00Z", **extra}


def subscribe(tenant, network_id="jane-doe", entity_type="contact", **extra):
    body = {"entity_type": entity_type, "network_id": network_id, **extra}
    response = tenant.post("/subscriptions", json=body)
    assert response.status_code == 201, response.json
    return response.json


def row(subscription_id) -> Subscription:
    db.session.rollback()
    return db.session.get(Subscription, subscription_id)


def check(subscription_id):
    summary = worker.run_one(subscription_id)
    assert summary is not None
    return summary


def events_of(tenant, subscription_id=None):
    query = f"?limit=100&subscription_id={subscription_id}" if subscription_id else "?limit=100"
    response = tenant.get("/events" + query)
    assert response.status_code == 200
    return list(reversed(response.json["data"]))


def changes_of(tenant, subscription_id=None):
    events = events_of(tenant, subscription_id)
    return [event for event in events if event["type"] != "subscription.initial_state"]


def make_due(*subscription_ids):
    with write_transaction():
        db.session.execute(update(Subscription).where(Subscription.id.in_(subscription_ids))
                           .values(next_check_at=utcnow() - timedelta(seconds=1)))


def configure_webhook(account_id, initial_webhook="latest", events=("*",), is_active=False):
    """Written straight to the table: these tests need the setting, not the webhooks API."""
    with write_transaction():
        db.session.add(WebhookConfig(id=new_id("whc"), account_id=account_id,
                                     endpoint_url="https://hooks.example/x", events=list(events),
                                     initial_webhook=initial_webhook,
                                     secret="whsec_" + "0" * 32, is_active=is_active))


def parse(timestamp):
    return datetime.fromisoformat(timestamp.replace("Z", ""))


# --- envelopes ---------------------------------------------------------------------------------------

def test_initial_state_envelope_is_exact(alice, network):
    network.set("jane-doe", person(activities=[activity("p1")], followers=12))
    created = subscribe(alice, custom_metadata={"crm_id": "42"})
    check(created["id"])

    [event] = events_of(alice)
    assert event["id"].startswith("evt_") and len(event["id"]) > 4
    assert event["type"] == "subscription.initial_state"
    assert isinstance(event["created"], int)
    assert event["metadata"] == {"subscription_id": created["id"],
                                 "detected_at": event["metadata"]["detected_at"],
                                 "custom_metadata": {"crm_id": "42"}}
    assert abs(parse(event["metadata"]["detected_at"]).timestamp() - event["created"]) < 1
    assert event["metadata"]["detected_at"].endswith("Z")
    assert event["data"] == {
        "entity": {"id": created["id"], "type": "contact", "network_id": "jane-doe",
                   "network_url": "https://www.linkedin.com/in/jane-doe"},
        "state": {"network_id": "jane-doe", "name": "Jane Doe", "headline": "Engineer at Acme",
                  "company": "Acme", "title": "Engineer", "location": "Berlin",
                  "activities": [{**activity("p1"), "target_url": None, "reaction_type": None}],
                  "followers": 12},  # unknown fields are kept (but never compared)
    }
    assert event["delivery_status"] == "skipped"
    assert set(event) == {"id", "type", "created", "data", "metadata", "delivery_status"}


def _contact_change(alice, network, **changed):
    network.set("jane-doe", person())
    created = subscribe(alice)
    check(created["id"])
    network.set("jane-doe", person(**changed))
    check(created["id"])
    changes = changes_of(alice, created["id"])
    return created, changes


def test_position_changed_for_a_new_company(alice, network):
    created, [event] = _contact_change(alice, network, company="Globex")
    assert event["type"] == "contact.position_changed"
    assert event["data"] == {
        "entity": {"id": created["id"], "type": "contact", "network_id": "jane-doe",
                   "network_url": "https://www.linkedin.com/in/jane-doe"},
        "changes": {"previous_company": "Acme", "previous_title": "Engineer",
                    "current_company": "Globex", "current_title": "Engineer"}}
    assert event["metadata"]["subscription_id"] == created["id"]
    assert event["metadata"]["custom_metadata"] == {}


def test_position_changed_for_a_new_title(alice, network):
    _, [event] = _contact_change(alice, network, title="Staff Engineer")
    assert event["type"] == "contact.position_changed"
    assert event["data"]["changes"] == {"previous_company": "Acme", "previous_title": "Engineer",
                                        "current_company": "Acme", "current_title": "Staff Engineer"}


def test_headline_changed(alice, network):
    _, [event] = _contact_change(alice, network, headline="Building things")
    assert event["type"] == "contact.headline_changed"
    assert event["data"]["changes"] == {"previous_headline": "Engineer at Acme",
                                        "current_headline": "Building things"}


def test_contact_post_comment_and_reaction(alice, network):
    comment = activity("c1", "comment", target_url="https://www.linkedin.com/feed/update/other")
    reaction = activity("r1", "reaction", target_url="https://www.linkedin.com/feed/update/else",
                        reaction_type="insightful", text=None)
    _, changes = _contact_change(alice, network, activities=[activity("p1"), comment, reaction])
    by_type = {event["type"]: event for event in changes}
    assert set(by_type) == {"contact.post_created", "contact.comment_created", "contact.reaction_added"}
    assert by_type["contact.post_created"]["data"]["activity"] == activity("p1")
    assert by_type["contact.comment_created"]["data"]["activity"] == comment
    assert by_type["contact.reaction_added"]["data"]["activity"] == reaction
    assert by_type["contact.reaction_added"]["data"]["entity"]["type"] == "contact"


def _company_change(alice, network, app_min_percent=None, **changed):
    network.set("acme", firm())
    created = subscribe(alice, "acme", "company")
    check(created["id"])
    network.set("acme", firm(**changed))
    check(created["id"])
    return created, changes_of(alice, created["id"])


def test_employee_count_changed(alice, network):
    created, [event] = _company_change(alice, network, headcount=250)
    assert event["type"] == "company.employee_count_changed"
    assert event["data"] == {
        "entity": {"id": created["id"], "type": "company", "network_id": "acme",
                   "network_url": "https://www.linkedin.com/company/acme"},
        "changes": {"previous_employee_count": 200, "current_employee_count": 250, "delta": 50,
                    "delta_percent": 25.0}}


@pytest.mark.parametrize("app_config", [{"EMPLOYEE_COUNT_MIN_PERCENT": 10.0}])
def test_employee_count_below_the_configured_percentage_is_not_an_event(alice, network):
    created, changes = _company_change(alice, network, headcount=210)
    assert changes == []
    network.set("acme", firm(headcount=180))
    check(created["id"])
    [event] = changes_of(alice, created["id"])
    assert event["data"]["changes"] == {"previous_employee_count": 200, "current_employee_count": 180,
                                        "delta": -20, "delta_percent": -10.0}


def test_description_changed(alice, network):
    _, [event] = _company_change(alice, network, description="Makes rockets.")
    assert event["type"] == "company.description_changed"
    assert event["data"]["changes"] == {"previous_description": "Makes anvils.",
                                        "current_description": "Makes rockets."}


def test_company_post_created(alice, network):
    _, [event] = _company_change(alice, network, activities=[activity("cp1")])
    assert event["type"] == "company.post_created"
    assert event["data"]["activity"] == activity("cp1")
    assert event["data"]["entity"]["type"] == "company"


def test_entity_unavailable_once_per_transition(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    check(created["id"])

    network.set("jane-doe", EntityUnavailable("private"))
    check(created["id"])
    check(created["id"])  # still private: no second event
    assert row(created["id"]).last_check_status == "NETWORK_ERROR"

    network.set("jane-doe", person())
    check(created["id"])  # reachable again, unchanged: no event
    assert row(created["id"]).last_check_status == "ok"

    network.set("jane-doe", EntityUnavailable("not_found"))
    check(created["id"])
    check(created["id"])

    unavailable = [event for event in events_of(alice, created["id"]) if event["type"] == "entity.unavailable"]
    assert [event["data"] for event in unavailable] == [
        {"entity": {"id": created["id"], "type": "contact", "network_id": "jane-doe",
                    "network_url": "https://www.linkedin.com/in/jane-doe"}, "reason": "private"},
        {"entity": {"id": created["id"], "type": "contact", "network_id": "jane-doe",
                    "network_url": "https://www.linkedin.com/in/jane-doe"}, "reason": "not_found"},
    ]
    assert len(events_of(alice, created["id"])) == 3  # initial state and the two transitions
    subscription = row(created["id"])
    assert subscription.check_count == 6 and subscription.change_count == 2


def test_unavailable_at_the_first_check_then_reachable_sends_the_initial_state(alice, network):
    network.set("private-jane", EntityUnavailable("private"))
    created = subscribe(alice, "private-jane")
    check(created["id"])
    network.set("private-jane", person("private-jane"))
    check(created["id"])
    assert [event["type"] for event in events_of(alice, created["id"])] == ["entity.unavailable",
                                                                            "subscription.initial_state"]


def test_unknown_values_through_the_engine(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    check(created["id"])
    for answer in (person(title=None, company="unknown", headline=None),  # known → unknown
                   person(title="unknown"),
                   {"network_id": "jane-doe", "name": "Jane Doe"},  # fields and activities missing
                   person(title="CTO", favourite_colour="blue")):  # unknown → other value
        network.set("jane-doe", answer)
        check(created["id"])
    changes = changes_of(alice, created["id"])
    assert [(event["type"], event["data"]["changes"]) for event in changes] == [
        ("contact.position_changed", {"previous_company": "Acme", "previous_title": "Engineer",
                                      "current_company": "Acme", "current_title": "CTO"})]


def test_unknown_at_the_first_check_then_known_emits_nothing(alice, network):
    network.set("jane-doe", person(title=None, headline="unknown"))
    created = subscribe(alice)
    check(created["id"])
    network.set("jane-doe", person())
    check(created["id"])
    assert [event["type"] for event in events_of(alice, created["id"])] == ["subscription.initial_state"]


# --- the first-check rule ----------------------------------------------------------------------------

def test_activities_present_at_the_first_check_are_state_not_events(alice, network):
    network.set("jane-doe", person(activities=[activity("p1"), activity("c1", "comment", target_url="x")]))
    created = subscribe(alice)
    check(created["id"])
    network.set("jane-doe", person(activities=[activity("p1"), activity("c1", "comment", target_url="x"),
                                               activity("p2")]))
    check(created["id"])
    events = events_of(alice, created["id"])
    assert [event["type"] for event in events] == ["subscription.initial_state", "contact.post_created"]
    assert events[1]["data"]["activity"]["id"] == "p2"


def test_initial_webhook_all_also_sends_one_event_per_present_activity(alice, network):
    configure_webhook(alice.account_id, "all")
    reaction = activity("r1", "reaction", target_url="t", reaction_type="like", text=None)
    network.set("jane-doe", person(activities=[activity("p1"), reaction]))
    created = subscribe(alice)
    summary = check(created["id"])
    events = events_of(alice, created["id"])
    assert sorted(event["type"] for event in events) == ["contact.post_created", "contact.reaction_added",
                                                         "subscription.initial_state"]
    activities = [event["data"]["activity"]["id"] for event in events if "activity" in event["data"]]
    assert sorted(activities) == ["p1", "r1"]
    assert summary.changes == 0  # present activities are the initial state, not changes
    assert row(created["id"]).change_count == 0
    check(created["id"])
    assert len(events_of(alice, created["id"])) == 3  # and they are not reported again


def test_initial_webhook_all_sends_one_event_for_an_activity_the_first_answer_lists_twice(alice, network):
    configure_webhook(alice.account_id, "all")
    network.set("jane-doe", person(activities=[activity("p1"), activity("p1"), activity(7), activity("7")]))
    created = subscribe(alice)
    check(created["id"])
    activities = [event["data"]["activity"]["id"] for event in events_of(alice, created["id"])
                  if "activity" in event["data"]]
    assert sorted(map(str, activities)) == ["7", "p1"]
    network.set("jane-doe", person(activities=[activity("7"), activity("p1"), activity("p2")]))
    check(created["id"])
    assert [event["data"]["activity"]["id"] for event in changes_of(alice, created["id"])][2:] == ["p2"]


@pytest.mark.parametrize("initial_webhook", ["latest", "all"])
def test_activities_unknown_at_the_first_check_are_state_when_first_shown(alice, network, initial_webhook):
    configure_webhook(alice.account_id, initial_webhook)
    network.set("jane-doe", person(activities=None))
    created = subscribe(alice)
    check(created["id"])
    network.set("jane-doe", person(activities=[activity("p1"), activity("p2")]))
    check(created["id"])
    network.set("jane-doe", person(activities=[activity("p1"), activity("p2"), activity("p3")]))
    check(created["id"])
    activities = [event["data"]["activity"]["id"] for event in changes_of(alice, created["id"])]
    assert sorted(activities) == (["p1", "p2", "p3"] if initial_webhook == "all" else ["p3"])
    assert activities[-1] == "p3"  # (the events of one check share `created`: p1 and p2 in either order)
    assert row(created["id"]).change_count == 1  # the activities first shown are the state, not changes


def test_initial_webhook_none_sends_nothing_at_first_but_later_changes(alice, network):
    configure_webhook(alice.account_id, "none")
    network.set("jane-doe", person(activities=[activity("p1")]))
    created = subscribe(alice)
    check(created["id"])
    assert events_of(alice, created["id"]) == []
    assert row(created["id"]).snapshot is not None
    network.set("jane-doe", person(title="CTO", activities=[activity("p1")]))
    check(created["id"])
    assert [event["type"] for event in events_of(alice, created["id"])] == ["contact.position_changed"]


@pytest.mark.parametrize("configured", [False, True])
def test_latest_and_no_configuration_send_only_the_initial_state(alice, network, configured):
    if configured:
        configure_webhook(alice.account_id, "latest")
    network.set("jane-doe", person(activities=[activity("p1"), activity("p2")]))
    created = subscribe(alice)
    check(created["id"])
    assert [event["type"] for event in events_of(alice, created["id"])] == ["subscription.initial_state"]


def test_initial_state_only_once(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    for _ in range(3):
        check(created["id"])
    assert [event["type"] for event in events_of(alice, created["id"])] == ["subscription.initial_state"]


def test_the_stored_snapshot_keeps_the_fields_and_activity_keys_not_the_activities(alice, network):
    network.set("jane-doe", person(activities=[activity("p1"), activity("c1", "comment")], followers=12))
    created = subscribe(alice)
    check(created["id"])
    stored = row(created["id"]).snapshot
    assert set(stored) == {"network_id", "name", "headline", "company", "title", "location", "seen_activities"}
    assert "about p1" not in json.dumps(stored) and len(stored["seen_activities"]) == 16


def test_a_snapshot_stored_in_the_old_full_form_is_read_and_replaced_at_the_next_check(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    legacy = {**person(activities=[activity("p1")]), "followers": 3, "seen_activity_ids": ["p0", "p1"]}
    with write_transaction():
        db.session.execute(update(Subscription).where(Subscription.id == created["id"])
                           .values(snapshot=legacy, check_count=1))
    network.set("jane-doe", person(title="CTO", activities=[activity("p0"), activity("p1"), activity("p2")]))
    check(created["id"])
    assert sorted((event["type"], event["data"].get("activity", {}).get("id", "")) for event in events_of(alice)) == [
        ("contact.position_changed", ""), ("contact.post_created", "p2")]  # one batch: no order between them
    assert "activities" not in row(created["id"]).snapshot and "seen_activity_ids" not in row(created["id"]).snapshot


# --- the event log and deliveries ---------------------------------------------------------------------

def test_every_event_is_recorded_skipped_without_a_configuration(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    check(created["id"])
    network.set("jane-doe", person(company="Globex"))
    check(created["id"])
    assert [event["delivery_status"] for event in events_of(alice)] == ["skipped", "skipped"]
    assert db.session.scalar(select(OutboxDelivery.id)) is None


def test_events_the_configuration_wants_are_queued_others_skipped(alice, network):
    configure_webhook(alice.account_id, "latest", events=["contact.*"], is_active=True)
    network.set("jane-doe", person())
    created = subscribe(alice)
    summary = check(created["id"])
    assert summary.deliveries_queued is False  # subscription.initial_state does not match contact.*
    network.set("jane-doe", person(company="Globex"))
    summary = check(created["id"])
    assert summary.deliveries_queued is True
    statuses = {event["type"]: event["delivery_status"] for event in events_of(alice)}
    assert statuses == {"subscription.initial_state": "skipped", "contact.position_changed": "pending"}
    queued = db.session.scalars(select(OutboxDelivery.event_id)).all()
    assert queued == [event["id"] for event in changes_of(alice)]


def test_inactive_configuration_records_events_as_skipped(alice, network):
    configure_webhook(alice.account_id, "latest", is_active=False)
    network.set("jane-doe", person())
    check(subscribe(alice)["id"])
    assert [event["delivery_status"] for event in events_of(alice)] == ["skipped"]


def test_the_stored_body_is_the_envelope_served_by_the_api(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    check(created["id"])
    event = db.session.scalars(select(Event)).one()
    served = alice.get(f"/events/{event.id}").json
    assert json.loads(event.body) == {name: served[name]
                                      for name in ("id", "type", "created", "data", "metadata")}


# --- counters and scheduling -------------------------------------------------------------------------

def test_counters_through_ok_error_and_ok_again(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    fresh = alice.get(f"/subscriptions/{created['id']}").json
    assert fresh["last_check_status"] == "pending"
    assert fresh["metadata"] == {"check_count": 0, "change_count": 0}
    assert fresh["last_checked_at"] is None and fresh["last_change_at"] is None

    check(created["id"])
    first = alice.get(f"/subscriptions/{created['id']}").json
    assert first["last_check_status"] == "ok"
    assert first["metadata"] == {"check_count": 1, "change_count": 0}  # the initial state is not a change
    assert first["last_checked_at"] is not None and first["last_change_at"] is None

    network.set("jane-doe", person(company="Globex", headline="New"))
    check(created["id"])
    second = alice.get(f"/subscriptions/{created['id']}").json
    assert second["metadata"] == {"check_count": 2, "change_count": 2}
    assert second["last_change_at"] == second["last_checked_at"]

    network.set("jane-doe", ProviderError("HTTP 503"))
    check(created["id"])
    failed = alice.get(f"/subscriptions/{created['id']}").json
    assert failed["metadata"] == {"check_count": 2, "change_count": 2}  # a transient failure is no check
    assert failed["last_check_status"] == "ok" and failed["last_checked_at"] == second["last_checked_at"]

    network.set("jane-doe", EntityUnavailable("private"))
    check(created["id"])
    unavailable = alice.get(f"/subscriptions/{created['id']}").json
    assert unavailable["last_check_status"] == "NETWORK_ERROR"
    assert unavailable["metadata"] == {"check_count": 3, "change_count": 3}
    assert unavailable["last_change_at"] == unavailable["last_checked_at"]

    network.set("jane-doe", person(company="Globex", headline="New"))
    check(created["id"])
    recovered = alice.get(f"/subscriptions/{created['id']}").json
    assert recovered["last_check_status"] == "ok"
    assert recovered["metadata"] == {"check_count": 4, "change_count": 3}
    assert recovered["last_change_at"] == unavailable["last_change_at"]
    assert parse(recovered["last_checked_at"]) > parse(unavailable["last_checked_at"])
    assert row(created["id"]).consecutive_failures == 0


def test_first_check_is_due_within_the_initial_delay_never_before_half(alice, network):
    before = utcnow()
    created = [subscribe(alice, f"person-{number}")["id"] for number in range(20)]
    after = utcnow()
    for subscription_id in created:
        due = row(subscription_id).next_check_at
        assert before + timedelta(seconds=30) <= due <= after + timedelta(seconds=60)
        assert parse(alice.get(f"/subscriptions/{subscription_id}").json["next_check_at"]) == \
            due.replace(microsecond=due.microsecond // 1000 * 1000)


def test_a_new_subscription_is_not_checked_before_it_is_due(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    assert worker.run_due() == []
    assert network.calls == [] and row(created["id"]).check_count == 0


@pytest.mark.parametrize("app_config", [{"CHECK_INITIAL_DELAY_SECONDS": 10}])
def test_initial_delay_is_configurable(alice, network):
    created = subscribe(alice)
    assert row(created["id"]).next_check_at <= utcnow() + timedelta(seconds=10)


def _checked_people(tenant, network, count: int) -> list:
    """The ids of `count` subscriptions to people the network knows, each due now."""
    ids = []
    for number in range(count):
        network.set(f"person-{number}", person(f"person-{number}"))
        ids.append(subscribe(tenant, f"person-{number}")["id"])
    make_due(*ids)
    return ids


def test_next_check_is_one_tier_interval_on_with_jitter(alice, network):
    ids = _checked_people(alice, network, 30)
    [summary] = worker.run_due()
    assert summary.checked == 30
    delays = []
    for subscription_id in ids:
        subscription = row(subscription_id)
        delay = (subscription.next_check_at - subscription.last_checked_at).total_seconds()
        assert INTERVAL * (1 - JITTER) <= delay <= INTERVAL * (1 + JITTER)
        delays.append(delay)
    assert len(set(delays)) > 1  # spread, not a wave


def test_a_move_to_a_tier_that_checks_more_often_brings_the_next_checks_forward(alice, network):
    """starter checks daily, enterprise every 6 h: the subscriptions waited out their daily check first."""
    from app.services import accounts
    ids = _checked_people(alice, network, 5)
    worker.run_due()
    alice.post(f"/subscriptions/{ids[4]}/pause")
    before = {subscription_id: row(subscription_id).next_check_at for subscription_id in ids}
    accounts.set_tier(alice.account_id, "enterprise")
    now, after = utcnow(), {subscription_id: row(subscription_id).next_check_at for subscription_id in ids}
    for subscription_id in ids[:4]:
        assert now < after[subscription_id] <= now + timedelta(seconds=21600 * (1 + JITTER))
    assert sorted(ids[:4], key=before.get) == sorted(ids[:4], key=after.get)  # the spread is kept
    assert after[ids[4]] is None  # a paused one is not scheduled
    accounts.set_tier(alice.account_id, "starter")  # less often: the checks already planned stand
    assert {subscription_id: row(subscription_id).next_check_at for subscription_id in ids} == after


def test_a_move_off_a_tier_gone_from_tiers_brings_the_next_checks_forward(app, alice, network):
    """Accounts on a tier TIERS no longer has stop `serve`, which says to move them with `accounts set-tier`: the
    removed tier's interval unknown, nothing was brought forward, and a weekly tier's subscriptions waited out their
    week on a 6-hourly one (the README: the new interval holds from now). The furthest wait planned stands for it."""
    from app.models import Account
    from app.services import accounts
    ids = [subscribe(alice, f"person-{number}")["id"] for number in range(4)]
    with write_transaction():
        db.session.execute(update(Account).where(Account.id == alice.account_id).values(tier="weekly"))
        for number, subscription_id in enumerate(ids):
            db.session.execute(update(Subscription).where(Subscription.id == subscription_id)
                               .values(next_check_at=utcnow() + timedelta(days=1 + number)))
    before = {subscription_id: row(subscription_id).next_check_at for subscription_id in ids}
    accounts.set_tier(alice.account_id, "enterprise")
    now, after = utcnow(), {subscription_id: row(subscription_id).next_check_at for subscription_id in ids}
    assert all(now < after[subscription_id] <= now + timedelta(seconds=21600 * (1 + JITTER)) for subscription_id in ids)
    assert sorted(ids, key=before.get) == sorted(ids, key=after.get)  # the spread is kept


def test_a_tier_move_brings_the_next_checks_forward_a_page_per_transaction(alice, network, monkeypatch):
    """One write transaction moved every subscription of the account: at a million, SQLite's write lock (every other
    writer's, past its busy timeout) and the account's row were held for as long."""
    from sqlalchemy import event

    from app.services import accounts, scheduling
    ids = [subscribe(alice, f"person-{number}")["id"] for number in range(5)]
    with write_transaction():
        db.session.execute(update(Subscription).where(Subscription.id.in_(ids))
                           .values(next_check_at=utcnow() + timedelta(hours=20)))
    monkeypatch.setattr(scheduling, "RESCHEDULE_PAGE", 2)
    moved, per_transaction = [0], []

    def count_moves(_conn, _cursor, statement, parameters, _context, executemany):
        if statement.startswith("UPDATE subscriptions SET next_check_at"):
            moved[0] += len(parameters) if executemany else 1

    def end_transaction(_conn):
        per_transaction.append(moved[0])
        moved[0] = 0
    event.listen(db.engine, "after_cursor_execute", count_moves)
    event.listen(db.engine, "commit", end_transaction)
    try:
        accounts.set_tier(alice.account_id, "enterprise")
    finally:
        event.remove(db.engine, "after_cursor_execute", count_moves)
        event.remove(db.engine, "commit", end_transaction)
    assert sum(per_transaction) == 5 and max(per_transaction) == 2
    latest = utcnow() + timedelta(seconds=21600 * (1 + JITTER))
    assert all(row(subscription_id).next_check_at <= latest for subscription_id in ids)


@pytest.mark.parametrize("app_config", [{"CHECK_INTERVAL_SECONDS": 600}])
def test_check_interval_setting_overrides_the_tier(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    check(created["id"])
    subscription = row(created["id"])
    assert 540 <= (subscription.next_check_at - subscription.last_checked_at).total_seconds() <= 660


def test_transient_failures_back_off_per_subscription(alice, network, monkeypatch):
    network.set("jane-doe", ProviderError("timeout"))
    created = subscribe(alice)
    delays = []
    for failures in range(1, 6):
        now = utcnow()
        check(created["id"])
        subscription = row(created["id"])
        assert subscription.consecutive_failures == failures
        delays.append((subscription.next_check_at - now).total_seconds())
    for failures, delay in enumerate(delays, start=1):
        base = 60 * 2 ** (failures - 1)
        assert base * 0.9 - 1 <= delay <= base * 1.1 + 1
    assert row(created["id"]).check_count == 0 and events_of(alice) == []


def test_backoff_is_capped_at_the_check_interval(alice, network):
    network.set("jane-doe", ProviderError("timeout"))
    created = subscribe(alice)
    with write_transaction():
        db.session.get(Subscription, created["id"]).consecutive_failures = 40
    now = utcnow()
    check(created["id"])
    assert (row(created["id"]).next_check_at - now).total_seconds() <= INTERVAL * 1.1 + 1


def test_usage_counts_completed_checks(alice, network):
    network.set("jane-doe", person())
    network.set("john-roe", ProviderError("timeout"))
    first, second = subscribe(alice)["id"], subscribe(alice, "john-roe")["id"]
    make_due(first, second)
    worker.run_due()
    usage = alice.get("/account/usage").json
    assert usage["day"]["checks"] == 1
    assert usage["day"]["events_created"] == 1


# --- races, paused and cancelled -----------------------------------------------------------------------

def test_a_check_racing_a_cancel_emits_nothing(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    make_due(created["id"])
    token = checks.new_claim_token()
    claimed = checks.claim(token, 10)
    assert [item.id for item in claimed] == [created["id"]]
    outcomes = checks.fetch_all(network, claimed)  # the provider answered...
    assert alice.delete(f"/subscriptions/{created['id']}").status_code == 200  # ...and then a cancel
    summary = checks.record_outcomes(token, outcomes)
    assert summary.skipped == 1 and summary.checked == 0 and summary.events == 0
    subscription = row(created["id"])
    assert subscription.status == "cancelled"
    assert (subscription.check_count, subscription.change_count, subscription.last_checked_at) == (0, 0, None)
    assert subscription.snapshot is None and subscription.last_check_status == "pending"
    assert events_of(alice) == []


def test_a_check_racing_a_pause_emits_nothing_and_resume_checks_afresh(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    make_due(created["id"])
    token = checks.new_claim_token()
    claimed = checks.claim(token, 10)
    outcomes = checks.fetch_all(network, claimed)
    assert alice.post(f"/subscriptions/{created['id']}/pause").json["status"] == "paused"
    assert alice.post(f"/subscriptions/{created['id']}/resume").json["status"] == "active"
    summary = checks.record_outcomes(token, outcomes)  # the claim was lost with the pause
    assert summary.skipped == 1 and summary.events == 0
    assert row(created["id"]).check_count == 0 and events_of(alice) == []
    check(created["id"])
    assert [event["type"] for event in events_of(alice)] == ["subscription.initial_state"]


def test_a_check_racing_a_cancel_keeps_the_rest_of_the_batch(alice, network):
    ids = []
    for name in ("ann", "ben", "cat"):
        network.set(name, person(name))
        ids.append(subscribe(alice, name)["id"])
    make_due(*ids)
    token = checks.new_claim_token()
    outcomes = checks.fetch_all(network, checks.claim(token, 10))
    alice.delete(f"/subscriptions/{ids[1]}")
    summary = checks.record_outcomes(token, outcomes)
    assert (summary.checked, summary.skipped) == (2, 1)
    assert {event["metadata"]["subscription_id"] for event in events_of(alice)} == {ids[0], ids[2]}


@pytest.mark.parametrize("status", ["paused", "cancelled"])
def test_paused_and_cancelled_are_never_checked(alice, network, runner, status):
    network.set("jane-doe", person())
    created = subscribe(alice)
    if status == "paused":
        alice.post(f"/subscriptions/{created['id']}/pause")
    else:
        alice.delete(f"/subscriptions/{created['id']}")
    with write_transaction():  # even if it looked due
        db.session.execute(update(Subscription).values(next_check_at=utcnow() - timedelta(hours=1)))
    assert worker.run_due() == []
    assert list(worker.run_all()) == []
    assert worker.run_one(created["id"]) is None
    assert network.calls == []
    assert row(created["id"]).check_count == 0 and events_of(alice) == []


def test_another_accounts_subscriptions_are_checked_with_their_own_configuration(alice, bob, network):
    configure_webhook(bob.account_id, "none")
    network.set("jane-doe", person())
    first, second = subscribe(alice)["id"], subscribe(bob)["id"]
    make_due(first, second)
    worker.run_due()
    assert [event["type"] for event in events_of(alice)] == ["subscription.initial_state"]
    assert events_of(bob) == []
    assert row(second).check_count == 1


# --- failures never stop the loop ---------------------------------------------------------------------

class Boom(Exception):
    pass


def test_an_unexpected_provider_exception_does_not_stop_the_batch(alice, network):
    ids = []
    for name, answer in (("ann", person("ann")), ("ben", Boom("provider bug")), ("cat", person("cat")),
                         ("dan", ProviderError("HTTP 500")), ("eve", EntityUnavailable("not_found"))):
        network.set(name, answer)
        ids.append(subscribe(alice, name)["id"])
    make_due(*ids)
    summaries = worker.run_due()
    assert sum(summary.checked for summary in summaries) == 3
    assert sum(summary.failed for summary in summaries) == 2
    assert sum(summary.unavailable for summary in summaries) == 1
    assert sorted(network.calls) == ["ann", "ben", "cat", "dan", "eve"]
    assert row(ids[1]).check_count == 0 and row(ids[1]).consecutive_failures == 1
    assert row(ids[1]).next_check_at > utcnow()
    assert row(ids[0]).check_count == 1 and row(ids[2]).check_count == 1
    assert worker.run_due() == []  # the failed ones wait for their backoff


def test_an_answer_detection_cannot_read_is_a_transient_failure_not_a_lost_batch(alice, network, monkeypatch):
    network.set("ann", person("ann"))
    network.set("ben", person("ben"))
    ids = [subscribe(alice, "ann")["id"], subscribe(alice, "ben")["id"]]
    make_due(*ids)
    real_detect = checks.detect

    def flaky_detect(entity_type, stored, current, min_percent):
        if current["network_id"] == "ben":
            raise KeyError("unreadable")
        return real_detect(entity_type, stored, current, min_percent)

    monkeypatch.setattr(checks, "detect", flaky_detect)
    [summary] = worker.run_due()
    assert (summary.checked, summary.failed) == (1, 1)
    assert row(ids[0]).check_count == 1
    assert row(ids[1]).consecutive_failures == 1 and row(ids[1]).snapshot is None


def test_run_due_checks_every_due_subscription_across_batches(alice, network, app):
    app.config["CHECK_BATCH_SIZE"] = 3
    ids = []
    for number in range(10):
        network.set(f"p-{number}", person(f"p-{number}"))
        ids.append(subscribe(alice, f"p-{number}")["id"])
    make_due(*ids)
    summaries = worker.run_due()
    assert [summary.checked for summary in summaries] == [3, 3, 3, 1]
    assert sorted(network.calls) == sorted(f"p-{number}" for number in range(10))
    assert all(row(subscription_id).claim_token is None for subscription_id in ids)


def test_run_all_checks_every_active_subscription_due_or_not(alice, bob, network, app):
    app.config["CHECK_BATCH_SIZE"] = 2
    ids = []
    for number in range(5):
        network.set(f"p-{number}", person(f"p-{number}"))
        ids.append(subscribe(alice if number % 2 else bob, f"p-{number}")["id"])
    alice.post(f"/subscriptions/{ids[1]}/pause")
    summaries = list(worker.run_all())
    assert sum(summary.checked for summary in summaries) == 4
    assert sorted(network.calls) == ["p-0", "p-2", "p-3", "p-4"]
    # the initial states, counted: a summary held every event's id, so a long run grew by each event (walk: 600 MB)
    assert sum(summary.events for summary in summaries) == 4


def test_run_one_of_an_unknown_id_is_none(app, network):
    assert worker.run_one("sub_doesnotexist") is None


def test_a_subscription_claimed_by_another_checker_is_not_checked_again(alice, network):
    network.set("jane-doe", person())
    created = subscribe(alice)
    make_due(created["id"])
    assert len(checks.claim(checks.new_claim_token(), 10)) == 1  # another checker holds it
    assert worker.run_due() == []
    assert worker.run_one(created["id"]) is None
    assert network.calls == []


def test_detected_at_is_the_check_time(alice, network, monkeypatch):
    moment = datetime(2026, 11, 22, 5, 3, 24)
    monkeypatch.setattr(checks, "utcnow", lambda: moment)
    network.set("jane-doe", person())
    created = subscribe(alice)
    make_due(created["id"])
    monkeypatch.setattr(checks, "utcnow", lambda: moment + timedelta(days=1))
    check(created["id"])
    [event] = events_of(alice)
    assert event["metadata"]["detected_at"] == "2026-11-23T05:03:24Z"
    assert event["created"] == calendar.timegm((2026, 11, 23, 5, 3, 24))
    assert isoformat(row(created["id"]).last_checked_at) == "2026-11-23T05:03:24Z"


def test_a_claim_takes_at_most_its_limit(alice):
    """The due subscriptions are locked by a statement of their own (see the outbox's claim)."""
    for number in range(5):
        assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": f"due-{number}"}
                          ).status_code == 201
    db.session.execute(update(Subscription).values(next_check_at=utcnow() - timedelta(minutes=1)))
    db.session.commit()
    for _ in range(2):
        token = new_id("claim")
        claimed = checks.claim(token, 2)
        db.session.rollback()
        leased = db.session.scalars(select(Subscription.id).where(Subscription.claim_token == token)).all()
        assert len(claimed) == 2 and sorted(leased) == sorted(item.id for item in claimed)


def test_an_outcome_that_cannot_be_written_holds_up_none_of_its_batch(alice, bob, network, monkeypatch, caplog):
    """A batch is written in one transaction: one row that could not be written (a lone surrogate stored through
    the dashboard did that) rolled back every check of the batch, other accounts' included, at every poll. The
    batch is now written one check at a time when it fails, and a check that cannot be written counts as failed."""
    ids = [subscribe(alice, "poisoned")["id"], subscribe(alice, "fine")["id"], subscribe(bob, "other")["id"]]
    for network_id in ("poisoned", "fine", "other"):
        network.set(network_id, person(network_id))
    real_apply = checks._apply

    def apply(built, subscription, outcome, *rest):
        if subscription.id == ids[0] and outcome.snapshot is not None:
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return real_apply(built, subscription, outcome, *rest)
    monkeypatch.setattr(checks, "_apply", apply)
    make_due(*ids)

    summary = worker.run_due_batch()

    assert (summary.checked, summary.failed) == (2, 1)
    assert [(row(id).last_check_status, row(id).consecutive_failures) for id in ids] == [
        ("pending", 1), ("ok", 0), ("ok", 0)]  # a failed check: retried on the failure schedule
    assert [row(id).claim_token for id in ids] == [None, None, None]
    assert [event["metadata"]["subscription_id"] for event in events_of(alice) + events_of(bob)] == ids[1:]
    assert "recording a batch of 3 checks failed" in caplog.text
