"""The lock order of `write_transaction` on PostgreSQL: transactions writing the same delivery rows, interleaved
where they meet, both finish. A third connection holds a row the first transaction needs, so that one waits
there holding what it locked so far; the second starts and runs until it waits too; then the row is let go."""
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select, text, update

from app.common import isoformat, utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import DeliveryAttempt, DeliveryDayCount, Event, OutboxDelivery, WebhookConfig
from app.providers.base import normalize_snapshot
from app.services import checks, outbox, retention, webhooks
from app.services.transport import Outcome
from tests.conftest import make_tenant
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, configure, record_events, subscribe

pytestmark = pytest.mark.postgresql_only(reason="row locks of concurrent transactions; SQLite has one writer at a time")


@pytest.fixture
def app_config():
    return LOCAL_RECEIVER_CONFIG


def _waiting_behind(holder_pid) -> int:
    """How many backends wait for a lock `holder_pid` holds, or for one held by a backend waiting behind it (the
    other xdist worker's tests share the database)."""
    with db.engine.connect() as connection:
        waiting = connection.execute(text("SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity "
                                          "WHERE wait_event_type = 'Lock'")).all()
    behind = {holder_pid}
    while more := {pid for pid, blockers in waiting if pid not in behind and behind.intersection(blockers)}:
        behind |= more
    return len(behind) - 1


def _until_waiting(holder_pid, count, thread=None):
    """Until `count` transactions wait behind `holder_pid`, or `thread` has ended without having to."""
    deadline = time.monotonic() + 10
    while _waiting_behind(holder_pid) < count and (thread is None or thread.is_alive()):
        assert time.monotonic() < deadline, f"fewer than {count} transactions came to wait for a lock"
        time.sleep(0.02)


def interleave(app, hold: str, first, second) -> list:
    """Run `first()` until it waits for the row the statement `hold` locks (in a transaction of its own), then
    `second()` until it waits as well (or ends: a race the locks do not order), then let the row go. Returns what
    either raised."""
    errors = []

    def run(work):
        with app.app_context():
            try:
                work()
            except Exception as error:  # a deadlock surfaces here
                errors.append(error)
            finally:
                db.session.remove()

    threads = [threading.Thread(target=run, args=(work,)) for work in (first, second)]
    with db.engine.connect() as holder:
        holder_pid = holder.scalar(text("SELECT pg_backend_pid()"))
        holder.execute(text(hold))
        for number, thread in enumerate(threads, 1):
            thread.start()
            _until_waiting(holder_pid, number, thread)
            assert number > 1 or thread.is_alive(), "the first transaction never waited for the held row"
        holder.rollback()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def _outcome(succeeded):
    return Outcome(succeeded=succeeded, status_code=200 if succeeded else 500, duration_ms=5)


def _the_day_count_of(account_id, status) -> str:
    """A statement that makes `record_results` wait when it counts its attempts: the day's counter row inserted
    and not committed."""
    return (f"INSERT INTO delivery_day_counts (account_id, day, status, count, duration_ms) "
            f"VALUES ('{account_id}', '{utcnow().date()}', '{status}', 0, 0)")


def _the_event_count_of(account_id, event_type) -> str:
    """A statement that makes a check wait when it counts its events: the day's counter row inserted and not
    committed."""
    return (f"INSERT INTO event_day_counts (account_id, day, type, count) "
            f"VALUES ('{account_id}', '{utcnow().date()}', '{event_type}', 0)")


def _statuses(event_ids) -> list:
    db.session.rollback()
    found = dict(db.session.execute(select(Event.id, Event.delivery_status).where(Event.id.in_(event_ids))).all())
    return [found[event_id] for event_id in event_ids]


def test_deleting_the_configuration_while_a_sender_records_its_batch(app, alice):
    """The removal marked the events first and then waited for the outbox rows the sender held, while the sender
    waited for those events: PostgreSQL aborted one of them."""
    configure(alice, "http://127.0.0.1:9/hook")
    event_ids = record_events(alice.account_id, 3)
    token = outbox.new_claim_token()
    claimed = outbox.claim_due(token, 2)  # any two: events recorded in one instant are due in no set order
    sent = [item.outgoing.event_id for item in claimed]
    results = [(claimed[0], _outcome(True)), (claimed[1], _outcome(False))]

    errors = interleave(app, _the_day_count_of(alice.account_id, "failed"),
                        lambda: outbox.record_results(token, results), lambda: webhooks.remove(alice.account_id))

    assert errors == []
    assert _statuses([*sent, *(event_id for event_id in event_ids if event_id not in sent)]) == [
        "succeeded", "failed", "skipped"]
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0
    assert db.session.scalar(select(func.count()).select_from(WebhookConfig)) == 0
    assert db.session.scalar(select(func.count()).select_from(DeliveryAttempt)) == 2
    assert dict(db.session.execute(select(DeliveryDayCount.status, DeliveryDayCount.count)).all()) == {
        "succeeded": 1, "failed": 1}


def test_a_sender_recording_its_batch_while_a_removal_waits_for_another_delivery(app, alice):
    """The removal deletes the configuration first, then drops the outbox rows: a sender that locked its rows before
    the configuration would hold rows the removal waits for while it waits for the configuration."""
    configure(alice, "http://127.0.0.1:9/hook")
    [waiting] = record_events(alice.account_id)  # the first event id: the removal meets its row first
    with write_transaction() as session:
        session.execute(update(OutboxDelivery).values(next_attempt_at=utcnow() + timedelta(hours=1)))
    record_events(alice.account_id, 2)
    token = outbox.new_claim_token()
    claimed = outbox.claim_due(token, 2)
    results = [(claimed[0], _outcome(True)), (claimed[1], _outcome(False))]

    errors = interleave(app, f"SELECT id FROM outbox WHERE event_id = '{waiting}' FOR UPDATE",
                        lambda: webhooks.remove(alice.account_id), lambda: outbox.record_results(token, results))

    assert errors == []
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0
    # the removal ended both sent deliveries; the try that reached the endpoint still counts
    assert _statuses([waiting, *(item.outgoing.event_id for item in claimed)]) == ["skipped", "succeeded", "failed"]
    assert db.session.scalar(select(func.count()).select_from(DeliveryAttempt)) == 2


def test_a_redelivery_while_the_sender_records_the_same_delivery(app, alice):
    """The pair first suspected: it met on the outbox row first on the old order as well, and still does."""
    configure(alice, "http://127.0.0.1:9/hook")
    record_events(alice.account_id, 2)
    token = outbox.new_claim_token()
    claimed = outbox.claim_due(token, 2)
    event_ids = [item.outgoing.event_id for item in claimed]
    results = [(claimed[0], _outcome(False)), (claimed[1], _outcome(True))]

    errors = interleave(app, _the_day_count_of(alice.account_id, "failed"),
                        lambda: outbox.record_results(token, results),
                        lambda: outbox.redeliver(alice.account_id, event_ids[0]))

    assert errors == []
    assert _statuses(event_ids) == ["pending", "succeeded"]
    owed = db.session.execute(select(OutboxDelivery.event_id, OutboxDelivery.attempts, OutboxDelivery.claim_token,
                                     OutboxDelivery.next_attempt_at <= utcnow())).all()
    assert owed == [(event_ids[0], 0, None, True)]  # the redelivery restarted the schedule the sender had moved on


def test_a_late_batch_of_a_configuration_deleted_meanwhile_is_still_recorded(app, alice):
    """The sender lost its lease, another one ended the delivery; the configuration goes while the late batch's
    failure is recorded: the endpoint's health is written to the configuration locked, so not to one gone."""
    configure(alice, "http://127.0.0.1:9/hook")
    [event_id] = record_events(alice.account_id)
    token = outbox.new_claim_token()
    claimed = outbox.claim_due(token, 1)
    with write_transaction() as session:  # its lease ran out: another sender claims the try after, and ends it
        session.execute(update(OutboxDelivery).values(claimed_until=utcnow() - timedelta(seconds=1),
                                                      next_attempt_at=utcnow() - timedelta(seconds=1)))
    other_token = outbox.new_claim_token()
    [other] = outbox.claim_due(other_token, 1)
    assert other.outgoing.attempt == claimed[0].outgoing.attempt + 1
    outbox.record_results(other_token, [(other, _outcome(True))])

    hold = f"SELECT id FROM webhook_configs WHERE account_id = '{alice.account_id}' FOR NO KEY UPDATE"
    errors = interleave(app, hold, lambda: webhooks.remove(alice.account_id),
                        lambda: outbox.record_results(token, [(claimed[0], _outcome(False))]))

    assert errors == []
    assert _statuses([event_id]) == ["succeeded"]
    assert db.session.scalar(select(func.count()).select_from(WebhookConfig)) == 0
    assert db.session.scalars(select(DeliveryAttempt.status).order_by(DeliveryAttempt.id)).all() == ["succeeded",
                                                                                                     "failed"]


def test_a_claim_whose_configuration_is_deleted_before_it_reads_it_leaves_those_rows_unclaimed(app, alice):
    """A removal drops the outbox rows it sees; a delivery queued meanwhile (by a writer that read the configuration
    before the removal committed) is left, and a claim that took it read the configuration afterwards: a KeyError
    in the sender (found by an ad hoc race of every writer of one account)."""
    configure(alice, "http://127.0.0.1:9/hook")
    subscription = subscribe(alice.account_id, "queued-meanwhile")
    [first] = record_events(alice.account_id, subscription=subscription)
    removal = threading.Thread(target=_in_context(app, lambda: webhooks.remove(alice.account_id)))
    with db.engine.connect() as holder:
        holder_pid = holder.scalar(text("SELECT pg_backend_pid()"))
        holder.execute(text(f"SELECT id FROM events WHERE id = '{first}' FOR UPDATE"))
        removal.start()
        _until_waiting(holder_pid, 1)  # its outbox rows deleted, not committed
        [queued] = record_events(alice.account_id, subscription=subscription)

        def removal_commits_first(_connection, _cursor, statement, *_args):
            if statement.lstrip().startswith("SELECT webhook_configs.") and threading.current_thread() is claimer:
                holder.rollback()
                removal.join(timeout=10)

        claimer = threading.current_thread()
        event.listen(db.engine, "before_cursor_execute", removal_commits_first)
        try:
            claimed = outbox.claim_due(outbox.new_claim_token(), 10)
        finally:
            event.remove(db.engine, "before_cursor_execute", removal_commits_first)
    assert not removal.is_alive() and claimed == []
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(WebhookConfig)) == 0
    assert db.session.execute(select(OutboxDelivery.event_id, OutboxDelivery.claim_token)).all() == [(queued, None)]
    assert _statuses([queued]) == ["pending"]


def _first_check_answered(account_id):
    """A claimed first check of a new subscription and its outcome, ready to record: a `subscription.initial_state`
    event."""
    subscription = subscribe(account_id)
    token = checks.new_claim_token()
    [claimed] = checks.claim_ids(token, [subscription.id])
    answer = {"network_id": subscription.network_id, "name": "Jane Doe", "title": "Engineer", "activities": []}
    return token, checks.Outcome(claimed, snapshot=normalize_snapshot("contact", answer), called=True)


def test_a_check_recording_its_events_while_the_configuration_is_deleted(app, alice):
    """The check read the configuration, the removal dropped the outbox rows it saw and committed, then the check
    queued its delivery: an event pending for good, its row never claimed (no configuration), until a later one
    took it up."""
    configure(alice, "http://127.0.0.1:9/hook")
    token, outcome = _first_check_answered(alice.account_id)

    errors = interleave(app, _the_event_count_of(alice.account_id, "subscription.initial_state"),
                        lambda: checks.record_outcomes(token, [outcome]), lambda: webhooks.remove(alice.account_id))

    assert errors == []
    db.session.rollback()
    assert db.session.scalars(select(Event.delivery_status)).all() == ["skipped"]  # dropped by the removal
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0
    assert db.session.scalar(select(func.count()).select_from(WebhookConfig)) == 0


def test_a_check_recording_its_events_while_a_removal_drops_the_outbox_rows(app, alice):
    """The other way round: the removal waits for a sender's outbox row, the check reads the configuration not yet
    deleted and commits its delivery, which the removal's statement did not see."""
    configure(alice, "http://127.0.0.1:9/hook")
    [owed] = record_events(alice.account_id)
    token, outcome = _first_check_answered(alice.account_id)

    errors = interleave(app, f"SELECT id FROM outbox WHERE event_id = '{owed}' FOR UPDATE",
                        lambda: webhooks.remove(alice.account_id), lambda: checks.record_outcomes(token, [outcome]))

    assert errors == []
    db.session.rollback()
    assert db.session.scalars(select(Event.delivery_status)).all() == ["skipped", "skipped"]  # the check's: no config
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0
    assert db.session.scalar(select(func.count()).select_from(WebhookConfig)) == 0


def test_a_redelivery_while_the_configuration_is_deleted(app, alice):
    """The redelivery read the configuration, the removal committed, then the redelivery queued its outbox row: an
    event pending for good, as a check's."""
    [event_id] = record_events(alice.account_id)  # no configuration yet: skipped, nothing owed
    configure(alice, "http://127.0.0.1:9/hook")
    answers = []

    errors = interleave(app, f"SELECT id FROM events WHERE id = '{event_id}' FOR UPDATE",
                        lambda: answers.append(alice.post(f"/events/{event_id}/redeliver")),
                        lambda: webhooks.remove(alice.account_id))

    assert errors == [] and answers[0].status_code == 202
    assert _statuses([event_id]) == ["skipped"]  # queued, then dropped by the removal
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0
    assert db.session.scalar(select(func.count()).select_from(WebhookConfig)) == 0


def _an_attempt_of(event_id, account_id) -> str:
    """A try of the event, and a statement that holds it: retention, having locked its events, waits there."""
    with write_transaction() as session:
        outbox.store_attempts(session, [outbox.attempt_row(account_id, event_id, "contact.position_changed", 1,
                                                           _outcome(False), utcnow(), None)])
    return f"SELECT id FROM delivery_attempts WHERE event_id = '{event_id}' FOR UPDATE"


def test_a_redelivery_of_an_event_that_retention_is_deleting(app, alice):
    """The redelivery's outbox row referred to an event deleted meanwhile: a foreign-key error, answered 500."""
    [event_id] = record_events(alice.account_id)  # no configuration yet: skipped, nothing owed, prunable
    configure(alice, "http://127.0.0.1:9/hook")
    hold = _an_attempt_of(event_id, alice.account_id)
    answers = []

    errors = interleave(app, hold, lambda: retention.prune_batch(utcnow(), 10),
                        lambda: answers.append(alice.post(f"/events/{event_id}/redeliver")))

    assert errors == []
    assert (answers[0].status_code, answers[0].json["error"]) == (404, "NOT_FOUND")
    assert answers[0].json["details"] == {"resource": "event", "id": event_id}
    assert db.session.scalar(select(func.count()).select_from(Event)) == 0
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0


def test_a_recovery_of_events_that_retention_is_deleting(app, alice):
    """Recovery queues what is left of its window: an event deleted meanwhile is not counted (it was a foreign-key
    error, answered 500)."""
    [event_id] = record_events(alice.account_id)  # no configuration yet: skipped, nothing owed, prunable
    configure(alice, "http://127.0.0.1:9/hook")
    since = isoformat(utcnow() - timedelta(hours=1))
    hold = _an_attempt_of(event_id, alice.account_id)
    answers = []

    errors = interleave(app, hold, lambda: retention.prune_batch(utcnow(), 10),
                        lambda: answers.append(alice.post("/webhooks/recover", json={"since": since})))

    assert errors == []
    assert (answers[0].status_code, answers[0].json) == (202, {"queued": 0})
    assert db.session.scalar(select(func.count()).select_from(Event)) == 0
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0


def test_a_late_success_while_a_recovery_queues_the_same_event_again(app, alice):
    """A removal dropped the delivery on the wire; a recovery queues its event again and waits on a later event
    holding the first; the sender's 200 then arrives. The event is owed again, so it stays pending (the UPDATE that
    waited for it checked the outbox against the snapshot it began with, and marked it succeeded)."""
    configure(alice, "http://127.0.0.1:9/hook")
    sent, later = record_events(alice.account_id, 2)
    token = outbox.new_claim_token()
    [on_the_wire] = [item for item in outbox.claim_due(token, 2) if item.outgoing.event_id == sent]
    webhooks.remove(alice.account_id)
    configure(alice, "http://127.0.0.1:9/hook")
    since = utcnow() - timedelta(hours=1)

    errors = interleave(app, f"SELECT id FROM events WHERE id = '{later}' FOR NO KEY UPDATE",
                        lambda: outbox.recover(alice.account_id, since),
                        lambda: outbox.record_results(token, [(on_the_wire, _outcome(True))]))

    assert errors == []
    assert _statuses([sent, later]) == ["pending", "pending"]
    assert sorted(db.session.scalars(select(OutboxDelivery.event_id))) == [sent, later]


def test_a_sender_giving_back_tries_while_another_records_them_late(app, alice, bob):
    """Review of f448936: `outbox.release` updated the events of the rows it gave back, then those of the deliveries
    dropped meanwhile, two passes each in key order but not one: it held a later event while it waited for an earlier
    one, which a late record of the same two events (their first sender's, its lease run out) held while it waited
    for the later. PostgreSQL aborted one of them."""
    configure(alice, "http://127.0.0.1:9/hook")
    configure(bob, "http://127.0.0.1:9/hook")
    [dropped] = record_events(alice.account_id)
    [given_back] = record_events(bob.account_id)
    assert dropped < given_back
    late_token = outbox.new_claim_token()
    late = outbox.claim_due(late_token, 2)
    with write_transaction() as session:  # the first sender's lease ran out
        session.execute(update(OutboxDelivery).values(next_attempt_at=utcnow() - timedelta(seconds=1)))
    token = outbox.new_claim_token()
    held = outbox.claim_due(token, 2)
    webhooks.remove(alice.account_id)

    errors = interleave(app, f"SELECT id FROM events WHERE id = '{given_back}' FOR NO KEY UPDATE",
                        lambda: outbox.release(token, held),
                        lambda: outbox.record_results(late_token, [(item, _outcome(True)) for item in late]))

    assert errors == []
    assert _statuses([dropped, given_back]) == ["succeeded", "pending"]


def _in_context(app, work):
    def run():
        with app.app_context():
            try:
                work()
            finally:
                db.session.remove()
    return run


def test_a_claim_passes_over_the_rows_another_sender_is_claiming(alice):
    """Two senders claiming at once: the deliveries were chosen by a plain read and locked afterwards, skipping the
    ones the other had locked, so the second sender came back empty (and slept) while a backlog was due."""
    configure(alice, "https://93.184.216.34/")
    record_events(alice.account_id, 8)
    db.session.commit()
    with db.engine.connect() as other:
        other.begin()
        taken = other.execute(select(OutboxDelivery.id).order_by(OutboxDelivery.next_attempt_at, OutboxDelivery.id)
                              .limit(4).with_for_update(skip_locked=True)).scalars().all()
        claimed = outbox.claim_due(outbox.new_claim_token(), 4)
        other.rollback()
    assert len(claimed) == 4 and not {item.delivery_id for item in claimed} & set(taken)


def test_a_claim_passes_over_the_accounts_whose_rows_another_sender_is_claiming(app):
    """The accounts were chosen without regard to locks: with another sender's claim holding the oldest due
    account's rows, a claim of as many tried those accounts only and came back empty, though others had some due."""
    tenants = [make_tenant(app, f"Fan-out {number}") for number in range(6)]
    for tenant in tenants:
        configure(tenant, "https://93.184.216.34/")
        record_events(tenant.account_id)
    db.session.commit()
    with db.engine.connect() as other:
        other.begin()
        taken = other.execute(select(OutboxDelivery.id).order_by(OutboxDelivery.next_attempt_at, OutboxDelivery.id)
                              .limit(4).with_for_update()).scalars().all()
        claimed = outbox.claim_due(outbox.new_claim_token(), 4)
        other.rollback()
    assert len(claimed) == 2 and not {item.delivery_id for item in claimed} & set(taken)
