"""At least once: a sender killed at any instant loses nothing. Its leased rows become due again when the
lease ends; an event and its delivery row are committed together or not at all."""
import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from app.database import write_transaction
from app.extensions import db
from app.models import Event, OutboxDelivery
from app.services import events, outbox
from app.worker.deliveries import deliver_due
from app.services.transport import Outcome
from tests.webhook_helpers import (LOCAL_RECEIVER_CONFIG, ROOT, Clock, Receiver, Reply, configure,
                                   record_events)

LEASE_SECONDS = 21  # the shortest lease the default 10-s webhook timeout leaves (more than twice it)


@pytest.fixture
def app_config():
    return {**LOCAL_RECEIVER_CONFIG, "WEBHOOK_LEASE_SECONDS": LEASE_SECONDS}


def statuses():
    db.session.rollback()
    return dict(db.session.execute(select(Event.delivery_status, func.count()).group_by(Event.delivery_status)).all())


def run_sender(database_uri, **popen):
    environment = {**os.environ, "DATABASE_URL": database_uri, "SCHEDULER_ENABLED": "0",
                   "WEBHOOK_ALLOW_HTTP": "1", "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "1",
                   "WEBHOOK_LEASE_SECONDS": str(LEASE_SECONDS), "WEBHOOK_BATCH_SIZE": "20", "WEBHOOK_WORKERS": "4"}
    return subprocess.Popen([sys.executable, "-m", "flask", "--app", "wsgi", "deliveries", "run"], cwd=ROOT,
                            env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def test_a_sender_killed_mid_burst_then_restarted_delivers_every_event(alice, app):
    burst = 300
    with Receiver(Reply(delay=0.01)) as receiver:
        configure(alice, receiver.url)
        ids = record_events(alice.account_id, burst)
        database_uri = app.config["SQLALCHEMY_DATABASE_URI"]

        sender = run_sender(database_uri)
        deadline = time.monotonic() + 60
        while len(receiver.requests) < burst // 4 and time.monotonic() < deadline and sender.poll() is None:
            time.sleep(0.01)
        assert sender.poll() is None, "the sender finished before it could be killed mid-burst"
        sender.send_signal(signal.SIGKILL)
        sender.wait(timeout=10)
        arrived_before_restart = set(receiver.event_ids)
        assert 0 < len(arrived_before_restart) < burst
        assert statuses().get("pending", 0) > 0

        time.sleep(LEASE_SECONDS + 0.5)  # the killed sender's leases run out
        restarted = run_sender(database_uri)
        output, errors = restarted.communicate(timeout=120)
        assert restarted.returncode == 0, errors.decode()

    assert set(receiver.event_ids) == set(ids)
    assert statuses() == {"succeeded": burst}
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0  # nothing left owed


def test_a_claimed_batch_whose_sender_died_is_sent_again_after_the_lease(app, alice, monkeypatch):
    # a lease of a minute on the moved clock: the module's lease leaves the sends of a loaded machine little time
    app.config["WEBHOOK_LEASE_SECONDS"] = 60
    clock = Clock()
    monkeypatch.setattr(outbox, "utcnow", clock)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        ids = record_events(alice.account_id, 5)
        assert len(outbox.claim_due(outbox.new_claim_token(), 100)) == 5  # then the sender "dies"
        assert deliver_due() == 0  # leased: nobody else takes them
        clock.advance(60 + 1)
        assert deliver_due() == 5
    assert sorted(receiver.event_ids) == sorted(ids)
    assert statuses() == {"succeeded": 5}


def test_a_sender_dying_between_send_and_record_causes_a_duplicate_never_a_loss(alice, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(outbox, "utcnow", clock)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)

        def crash(*_args):
            raise SystemExit("killed before recording")

        monkeypatch.setattr(outbox, "record_results", crash)
        with pytest.raises(SystemExit):
            deliver_due()
        monkeypatch.undo()
        monkeypatch.setattr(outbox, "utcnow", clock)
        clock.advance(LEASE_SECONDS + 1)
        assert deliver_due() == 1
    assert receiver.event_ids == [event_id, event_id]
    assert statuses() == {"succeeded": 1}


def test_a_late_result_from_a_sender_that_lost_its_lease_does_not_overwrite_the_new_owner(alice, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(outbox, "utcnow", clock)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        slow_token = outbox.new_claim_token()
        [slow] = outbox.claim_due(slow_token, 10)
        clock.advance(LEASE_SECONDS + 1)
        assert deliver_due() == 1  # a second sender takes the expired lease and succeeds
    outbox.record_results(slow_token, [(slow, Outcome(False, 500, 10_000, "HTTP 500"))])
    assert receiver.event_ids == [event_id]
    assert statuses() == {"succeeded": 1}
    assert db.session.scalar(select(OutboxDelivery.id)) is None  # the new owner's success ended the delivery
    assert alice.get("/webhooks/deliveries?status=failed").json["pagination"]["total"] == 1  # still logged


def test_an_event_and_its_delivery_are_committed_together_or_not_at_all(alice):
    configure(alice, "https://93.184.216.34/")
    with pytest.raises(RuntimeError):
        with write_transaction() as session:
            config = events.webhook_config_for(session, alice.account_id)
            events.record(session, alice.account_id, "entity.unavailable", {"reason": "private"}, config=config)
            raise RuntimeError("the check failed after recording")
    assert db.session.scalar(select(func.count()).select_from(Event)) == 0
    assert db.session.scalar(select(func.count()).select_from(OutboxDelivery)) == 0
    [event_id] = record_events(alice.account_id)
    assert db.session.scalar(select(OutboxDelivery.event_id)) == event_id
