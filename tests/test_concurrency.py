"""Threads racing for the same rows: claims, checks, bulk creates and redeliveries, on each database (on
PostgreSQL claims use FOR UPDATE SKIP LOCKED; on SQLite writers queue on the write lock)."""
import threading
from contextlib import nullcontext
from datetime import timedelta

import pytest

from sqlalchemy import func, select, update

from app.common import utcnow
from app.extensions import db
from app.errors import InvalidState, KeyLimitExceeded
from app.models import ApiKey, Event, OutboxDelivery, Subscription, WebhookConfig
from app.services.transport import Outcome
from app.services import accounts, checks, keys, outbox, subscriptions, webhooks
from tests.conftest import make_tenant
from tests.webhook_helpers import configure, record_events


def race(app, count, work):
    """Run `work()` in `count` threads started together, each in an app context with its own session."""
    barrier = threading.Barrier(count)

    def in_context():
        with app.app_context():
            barrier.wait()
            try:
                work()
            finally:
                db.session.remove()

    threads = [threading.Thread(target=in_context) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def _subscribe_many(account_id, count):
    for number in range(count):
        subscriptions.create(account_id, {"entity_type": "contact", "network_id": f"person-{number:04d}",
                                          "network_url": None, "custom_metadata": {}})
    with db.session.begin():
        db.session.execute(update(Subscription).values(next_check_at=utcnow() - timedelta(minutes=1)))


def test_concurrent_claims_never_share_a_subscription(app):
    account, _key = accounts.create_account("Scale", "enterprise")
    _subscribe_many(account.id, 120)
    claimed = []

    def claim_until_none_is_due():
        while batch := checks.claim(checks.new_claim_token(), 7):
            claimed.extend(item.id for item in batch)

    race(app, 4, claim_until_none_is_due)
    assert len(claimed) == 120
    assert len(set(claimed)) == 120


def test_a_check_writes_snapshot_and_initial_event(app):
    account, _key = accounts.create_account("Scale", "enterprise")
    _subscribe_many(account.id, 3)
    token = checks.new_claim_token()
    summary = checks.run_claimed(checks.claim(token, 10), token)
    assert summary.checked == 3
    types = db.session.scalars(select(Event.type)).all()
    assert types == ["subscription.initial_state"] * 3
    assert db.session.scalar(select(func.count()).where(Subscription.snapshot.is_not(None))) == 3


def test_concurrent_bulk_creates_of_the_same_entities_report_duplicates_not_errors(app):
    account, _key = accounts.create_account("Scale", "enterprise")
    items = [{"entity_type": "contact", "network_id": f"dup-{number:03d}"} for number in range(60)]
    results, failures = [], []

    def load(raw):
        return {**raw, "network_url": None, "custom_metadata": {}}

    def bulk():
        try:
            results.append(subscriptions.bulk_create(account.id, items, load))
        except Exception as error:  # noqa: BLE001 - the assertion below names it
            failures.append(error)

    race(app, 3, bulk)
    assert failures == []
    assert sum(len(result.created) for result in results) == 60
    assert {error["code"] for result in results for error in result.errors} <= {"DUPLICATE_SUBSCRIPTION"}
    assert db.session.scalar(select(func.count()).select_from(Subscription)) == 60


def test_concurrent_redeliveries_and_recoveries_of_one_event_leave_one_delivery_owed(app, alice):
    configure(alice, "https://93.184.216.34/")
    [event_id] = record_events(alice.account_id)
    with db.session.begin():  # its delivery ended: nothing is owed, so each thread would add a row
        db.session.execute(update(Event).where(Event.id == event_id).values(delivery_status="failed"))
        db.session.execute(OutboxDelivery.__table__.delete())
    since = utcnow() - timedelta(hours=1)
    works = iter([lambda: outbox.redeliver(alice.account_id, event_id)] * 4
                 + [lambda: outbox.recover(alice.account_id, since, include_pending=True)] * 2)
    lock, errors = threading.Lock(), []

    def one_of_them():
        with lock:
            work = next(works)
        try:
            work()
        except Exception as error:  # e.g. a unique violation a plain INSERT would meet
            errors.append(error)

    race(app, 6, one_of_them)
    assert errors == []
    db.session.rollback()
    [row] = db.session.scalars(select(OutboxDelivery).where(OutboxDelivery.event_id == event_id)).all()
    assert row.attempts == 0 and row.claim_token is None


def _live_keys(account_id):
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.account_id == account_id))


def test_concurrent_deletes_never_take_an_account_s_last_key(app):
    account_id = accounts.create_account("Keys", "enterprise")[0].id  # a plain value: threads must not load it
    for number in range(3):
        keys.create_key(account_id, f"key {number}")
    key_ids = db.session.scalars(select(ApiKey.id).where(ApiKey.account_id == account_id)).all()
    ids = iter(key_ids)
    lock, refused = threading.Lock(), []

    def delete_one():
        with lock:
            key_id = next(ids)
        try:
            keys.delete_key(account_id, key_id)
        except InvalidState:
            refused.append(key_id)

    race(app, len(key_ids), delete_one)
    assert _live_keys(account_id) == 1 and len(refused) == 1


def test_concurrent_creates_never_pass_the_key_limit(app):
    account_id = accounts.create_account("Keys", "enterprise")[0].id
    limit = app.config["MAX_API_KEYS"]
    for number in range(limit - 3):  # with the default key: two places left
        keys.create_key(account_id, f"key {number}")
    refused = []

    def create_one():
        try:
            keys.create_key(account_id, "racer")
        except KeyLimitExceeded:
            refused.append(1)

    race(app, 4, create_one)
    assert _live_keys(account_id) == limit and len(refused) == 2


def test_concurrent_first_configures_make_one_configuration(app):
    account_id = accounts.create_account("Hooks")[0].id
    created, failures = [], []

    def configure_once():
        try:
            created.append(webhooks.configure(account_id, {"endpoint_url": "https://93.184.216.34/", "events": ["*"],
                                                           "initial_webhook": "latest"})[1])
        except Exception as error:  # noqa: BLE001 - the assertion below names it
            failures.append(error)

    race(app, 6, configure_once)
    assert failures == [] and sorted(created) == [False] * 5 + [True]
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(WebhookConfig)) == 1


def test_concurrent_rotations_each_replace_the_secret_the_one_before_handed_out(app):
    account_id = accounts.create_account("Hooks")[0].id
    first = webhooks.configure(account_id, {"endpoint_url": "https://93.184.216.34/", "events": ["*"],
                                            "initial_webhook": "latest"})[0].secret
    handed_out = []
    race(app, 4, lambda: handed_out.append(webhooks.rotate_secret(account_id)["secret"]))
    db.session.rollback()
    config = db.session.scalars(select(WebhookConfig)).one()
    # one after the other, so the secret still signing beside the last is the one the rotation before handed out
    # (two rotations that both read the first secret left it as the previous one, and lost the other's)
    assert config.secret in handed_out and config.previous_secret in handed_out and first not in handed_out


class _Answering:
    """A transport whose endpoint answers 200 at once."""
    timeout = 1.0

    def send(self, outgoing):
        return Outcome(True, 200, 1)


@pytest.mark.postgresql_only(reason="two processes' writers; on SQLite they queue on the write lock anyway")
def test_a_send_test_form_sent_twice_at_once_to_two_processes_sends_one_test(app, monkeypatch):
    """The form's mark is read under the account's row lock: without it, two server processes each given the same
    form (a double submit) would both read the mark before either recorded its test, and both send one. The guard
    `_one_test_at_a_time` is per process (lifted here); the two reads are made to meet unless the lock keeps one
    waiting."""
    tenant = make_tenant(app, "Race", "growth")
    configure(tenant, "https://93.184.216.34/hook")
    monkeypatch.setattr(outbox, "_one_test_at_a_time", lambda *_args: nullcontext())
    met, read_mark = threading.Barrier(2), outbox.test_mark

    def read_then_meet(account_id, session=None):
        mark = read_mark(account_id, session)
        if session is not None:  # (the send's read, not the page's)
            try:
                met.wait(timeout=2)  # the other one waits for the lock meanwhile, unless there is none
            except threading.BrokenBarrierError:
                pass
        return mark

    monkeypatch.setattr(outbox, "test_mark", read_then_meet)
    results = []
    race(app, 2, lambda: results.append(outbox.send_test(tenant.account_id, _Answering(), "")))
    assert sorted(result is None for result in results) == [False, True], results  # sent, then refused
    tests = db.session.scalar(select(func.count()).where(Event.account_id == tenant.account_id,
                                                         Event.type == "test"))
    assert tests == 1
