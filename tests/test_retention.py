"""Retention (issue 9 point 6): old events go with their outbox rows and attempts, in batches; a pending
delivery never does; `events prune` and the scheduler step."""
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.common import utcnow
from app.extensions import db
from app.models import DeliveryAttempt, Event, OutboxDelivery
from app.services import retention
from app.worker import retention as retention_step
from app.worker.deliveries import deliver_due
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, Reply, configure, record_events


@pytest.fixture
def app_config():
    return {**LOCAL_RECEIVER_CONFIG, "WEBHOOK_RETRY_JITTER_FRACTION": 0.0}


def _age(event_ids, days):
    db.session.execute(update(Event).where(Event.id.in_(event_ids)).values(created_at=utcnow() - timedelta(days=days)))
    db.session.commit()


def _count(model, **equal_to):
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(model).where(
        *[getattr(model, name) == value for name, value in equal_to.items()]))


def _remaining(event_ids):
    db.session.rollback()
    return set(db.session.scalars(select(Event.id).where(Event.id.in_(event_ids))))


@pytest.fixture
def history(alice):
    """Old delivered events, an old event still waiting for a retry, and recent delivered events."""
    replies = iter([Reply(status=200)] * 3 + [Reply(status=503)] + [Reply(status=200)] * 2)
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        old = record_events(alice.account_id, 3)
        deliver_due()
        [waiting] = record_events(alice.account_id)
        deliver_due()
        recent = record_events(alice.account_id, 2)
        deliver_due()
    _age(old + [waiting], 91)
    return {"old": old, "waiting": waiting, "recent": recent}


def test_prune_deletes_old_events_with_their_deliveries_and_keeps_pending_and_recent(history):
    assert _count(DeliveryAttempt) == 6
    pruned = retention.prune()
    assert (pruned.events, pruned.attempts) == (3, 3)
    assert _remaining(history["old"]) == set()
    assert _remaining([history["waiting"], *history["recent"]]) == {history["waiting"], *history["recent"]}
    assert _count(OutboxDelivery, event_id=history["waiting"]) == 1
    assert _count(DeliveryAttempt, event_id=history["waiting"]) == 1
    assert _count(DeliveryAttempt) == 3


def test_the_event_lists_totals_count_what_retention_left(alice, history):
    """The totals are read from the per-day counters of what is kept, which each prune takes its events off."""
    def totals():
        return [alice.get(f"/events{query}").json["pagination"]["total"]
                for query in ("", "?type=contact.position_changed", "?type=company.employee_count_changed")]
    assert totals() == [6, 6, 0]
    retention.prune(batch_size=2)
    assert totals() == [3, 3, 0] == [_count(Event), _count(Event, type="contact.position_changed"), 0]
    assert alice.get("/account/usage").json["month"]["events_created"] == 6  # what happened stays counted


def test_prune_goes_in_batches_and_stops_after_max_batches(history):
    first = retention.prune(batch_size=2, max_batches=1)
    assert first.events == 2 and len(_remaining(history["old"])) == 1
    assert retention.prune(batch_size=2).events == 1
    assert retention.prune().events == 0


def test_an_event_redelivered_during_a_batch_does_not_end_the_prune(alice, history, monkeypatch):
    """A batch whose events were read, then one of them queued for a redelivery before the delete, pruned fewer than
    its size, and the prune stopped there as if nothing older were left: `events prune` exited 0 with old events
    kept (walk)."""
    read = retention._prunable_event_ids

    def read_then_redeliver(cutoff, limit):
        ids = read(cutoff, limit)
        if ids and not redelivered:
            redelivered.append(ids[0])
            assert alice.post(f"/events/{ids[0]}/redeliver").status_code == 202
        return ids
    redelivered = []
    monkeypatch.setattr(retention, "_prunable_event_ids", read_then_redeliver)
    assert retention.prune(batch_size=2).events == 2
    assert _remaining(history["old"]) == set(redelivered)


def test_retention_days_come_from_the_setting_or_the_argument(app, history):
    app.config["EVENT_RETENTION_DAYS"] = 365
    assert retention.prune().events == 0
    assert retention.prune(days=0).events == 5  # old and recent alike; the pending one still stays
    assert _remaining([history["waiting"]]) == {history["waiting"]}


def test_events_prune_command(runner, history):
    result = runner.invoke(args=["events", "prune"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "events=3 attempts=3"
    assert _remaining(history["old"]) == set()
    for days in ("-1", "0"):  # 0 deleted every delivered event at once, where EVENT_RETENTION_DAYS=0 is refused
        refused = runner.invoke(args=["events", "prune", "--days", days])
        assert refused.exit_code == 2 and "--days" in refused.output


@pytest.mark.parametrize("days", ["1000000", "999999999", "1000000000"])
def test_a_retention_past_year_one_keeps_everything(app, runner, history, days):
    result = runner.invoke(args=["events", "prune", "--days", days])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "events=0 attempts=0"
    app.config["EVENT_RETENTION_DAYS"] = int(days)
    assert retention.prune().events == 0


def test_the_retention_step_prunes_a_bounded_amount_per_run(app, history, monkeypatch):
    monkeypatch.setattr(retention_step, "MAX_BATCHES_PER_RUN", 1)
    app.config["RETENTION_BATCH_SIZE"] = 2
    assert retention_step.run_retention() is True
    assert len(_remaining(history["old"])) == 1
    assert retention_step.run_retention() is True
    assert retention_step.run_retention() is False
    assert _remaining(history["old"]) == set()
