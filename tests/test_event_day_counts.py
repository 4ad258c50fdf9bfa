"""Events per account, UTC day and type (`event_day_counts`): written in the same transaction as the events by
every path that records them, read by the dashboard's chart; filled by its migration from the events kept."""
from collections import Counter
from datetime import timedelta

import pytest
from flask_migrate import downgrade, upgrade
from sqlalchemy import delete, select, update

from app.common import utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import Account, DeliveryAttempt, DeliveryDayCount, Event, EventDayCount, OutboxDelivery
from app.services import events, outbox, overview, retention
from app.services.outbox import attempt_row
from app.services.transport import Outcome
from app.worker import checks as worker
from app.worker.deliveries import deliver_due
from tests.test_checks import activity, make_due, network, person, subscribe  # noqa: F401 (network: a fixture)
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, Reply, configure, record_events


@pytest.fixture
def app_config():
    return {**LOCAL_RECEIVER_CONFIG, "WEBHOOK_RETRY_JITTER_FRACTION": 0.0}


def counted(account_id) -> dict:
    db.session.rollback()
    return {(day.isoformat(), event_type): n for day, event_type, n in db.session.execute(
        select(EventDayCount.day, EventDayCount.type, EventDayCount.count)
        .where(EventDayCount.account_id == account_id)) if n}


def delivery_counted(account_id) -> dict:
    db.session.rollback()
    return {(day.isoformat(), status): (n, duration_ms) for day, status, n, duration_ms in db.session.execute(
        select(DeliveryDayCount.day, DeliveryDayCount.status, DeliveryDayCount.count, DeliveryDayCount.duration_ms)
        .where(DeliveryDayCount.account_id == account_id)) if n}


def session_retries_due():
    with write_transaction() as session:
        session.execute(update(OutboxDelivery).values(next_attempt_at=utcnow() - timedelta(seconds=1)))


def recounted(account_id) -> dict:
    db.session.rollback()
    return dict(Counter((created_at.date().isoformat(), event_type) for created_at, event_type in db.session.execute(
        select(Event.created_at, Event.type).where(Event.account_id == account_id))))


def test_events_recorded_by_checks_are_counted_per_day_and_type(alice, bob, network):
    ids = []
    for number in range(3):
        network.set(f"p-{number}", person(f"p-{number}"))
        ids.append(subscribe(alice, f"p-{number}")["id"])
    network.set("b-0", person("b-0"))
    ids.append(subscribe(bob, "b-0")["id"])
    make_due(*ids)
    worker.run_due()
    network.set("p-0", person("p-0", activities=[activity("a1"), activity("a2")]))
    network.set("p-1", person("p-1", activities=[activity("a3")]))
    make_due(*ids)
    worker.run_due()
    today = utcnow().date().isoformat()
    assert counted(alice.account_id) == recounted(alice.account_id) == {
        (today, "subscription.initial_state"): 3, (today, "contact.post_created"): 3}
    assert counted(bob.account_id) == {(today, "subscription.initial_state"): 1}


def test_a_rolled_back_batch_counts_nothing(alice):
    try:
        with write_transaction() as session:
            events.store(session, [events.build(alice.account_id, "contact.position_changed", {},
                                                subscription=None, config=None, now=utcnow())])
            raise RuntimeError("the batch fails after its events were inserted")
    except RuntimeError:
        pass
    assert counted(alice.account_id) == recounted(alice.account_id) == {}


def test_the_chart_shows_each_day_of_the_window_from_the_counters(alice):
    now = utcnow()
    for days_ago, count in ((0, 2), (3, 1), (29, 4), (30, 5)):
        with write_transaction() as session:
            for _ in range(count):
                events.record(session, alice.account_id, "test", {}, now=now - timedelta(days=days_ago))
    per_day = overview.summary(db.session.get(Account, alice.account_id))["events_per_day"]
    assert per_day == {((now - timedelta(days=days_ago)).date().isoformat(), "test"): count
                       for days_ago, count in ((0, 2), (3, 1), (29, 4))}  # 30 days: today and the 29 before


def test_pruned_events_and_attempts_stay_counted(alice):
    """Usage and the overview count what happened: with a retention under a month, the month's figures shrank."""
    old_day = utcnow() - timedelta(days=100)
    with write_transaction() as session:
        for _ in range(3):
            events.record(session, alice.account_id, "test", {}, now=old_day)
    record_events(alice.account_id, count=1)
    with write_transaction() as session:
        old_ids = session.scalars(select(Event.id).where(Event.created_at < utcnow() - timedelta(days=99))).all()
        outbox.store_attempts(session, [attempt_row(alice.account_id, event_id, "test", 1,
                                                    Outcome(succeeded=True, status_code=200, duration_ms=30), old_day,
                                                    None) for event_id in old_ids])
    assert delivery_counted(alice.account_id) == {(old_day.date().isoformat(), "succeeded"): (3, 90)}
    before = counted(alice.account_id)
    assert before == recounted(alice.account_id) == {(utcnow().date().isoformat(), "contact.position_changed"): 1,
                                                     (old_day.date().isoformat(), "test"): 3}
    retention.prune()
    assert recounted(alice.account_id) == {(utcnow().date().isoformat(), "contact.position_changed"): 1}
    assert counted(alice.account_id) == before
    assert delivery_counted(alice.account_id) == {(old_day.date().isoformat(), "succeeded"): (3, 90)}


def test_usage_of_the_day_stays_after_its_events_are_pruned(app, alice):
    app.config["EVENT_RETENTION_DAYS"] = 0
    record_events(alice.account_id, count=3)
    assert retention.prune().events == 3
    assert alice.get("/events").json["pagination"]["total"] == 0
    assert alice.get("/account/usage").json["day"]["events_created"] == 3
    assert alice.get("/account/usage").json["month"]["events_created"] == 3


def test_deliveries_are_counted_per_day_and_status_for_the_overview_and_usage(alice):
    replies = iter([Reply(status=500), Reply(status=200), Reply(status=200)])
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, count=2)
        deliver_due()
        session_retries_due()
        deliver_due()
    attempts = db.session.execute(select(DeliveryAttempt.status, DeliveryAttempt.duration_ms)
                                  .where(DeliveryAttempt.account_id == alice.account_id)).all()
    assert sorted(status for status, _ in attempts) == ["failed", "succeeded", "succeeded"]
    summary = overview.summary(db.session.get(Account, alice.account_id))["deliveries"]
    succeeded_ms = [duration for status, duration in attempts if status == "succeeded"]
    assert summary == {"attempts": 3, "succeeded": 2, "failed": 1, "success_rate": 2 / 3,
                       "average_ms": round(sum(succeeded_ms) / 2)}
    day = alice.get("/account/usage").get_json()["day"]
    assert (day["events_created"], day["deliveries_succeeded"], day["deliveries_failed"]) == (2, 2, 1)


def test_the_migration_fills_the_counts_from_the_events_already_there(app, alice, bob):
    record_events(alice.account_id, count=3)
    record_events(bob.account_id, count=2, event_type="contact.headline_changed")
    expected = {account_id: recounted(account_id) for account_id in (alice.account_id, bob.account_id)}
    db.session.remove()
    downgrade(revision="c7e3a9d15f42")  # the revision before the counts
    upgrade()
    assert {account_id: counted(account_id) for account_id in expected} == expected


def test_an_account_deleted_takes_its_counts_along(alice):
    record_events(alice.account_id, count=1)
    with write_transaction() as session:
        session.execute(delete(Account).where(Account.id == alice.account_id))
    assert counted(alice.account_id) == {}
