"""GET /account/usage (contract §4): counts for the current UTC day and month."""
from contextlib import contextmanager
from datetime import date

import pytest

from app.services import usage


def _usage(tenant):
    response = tenant.get("/account/usage")
    assert response.status_code == 200
    return response.get_json()


def test_usage_shape_for_a_new_account(alice):
    body = _usage(alice)
    assert set(body) == {"day", "month", "subscriptions", "provider_status"}
    today = date.today()
    for period in ("day", "month"):
        assert set(body[period]) == {"start", "requests", "checks", "provider_calls", "provider_credits",
                                     "events_created", "deliveries_succeeded", "deliveries_failed"}
        assert body[period]["checks"] == body[period]["provider_calls"] == body[period]["provider_credits"] == 0
        assert body[period]["events_created"] == 0
    assert body["day"]["start"] == usage.utcnow().date().isoformat()
    assert body["month"]["start"] == usage.utcnow().date().replace(day=1).isoformat()
    assert abs((date.fromisoformat(body["day"]["start"]) - today).days) <= 1
    assert body["subscriptions"] == {"active": 0, "paused": 0, "cancelled": 0, "live": 0, "limit": 100}
    assert body["provider_status"] == {"provider": "simulated", "state": "active", "reason": None,
                                       "paused_at": None, "paused_until": None, "detail": None,
                                       "rate_limit": None, "batch_size": 1, "concurrency": 1,
                                       "credits_remaining": None}


def test_requests_are_counted_per_account(alice, bob):
    for _ in range(3):
        alice.get("/account")
    bob.get("/account")
    first = _usage(alice)
    # The three /account calls; the usage call counts after its own answer.
    assert first["day"]["requests"] == 3
    assert first["month"]["requests"] == 3
    assert _usage(alice)["day"]["requests"] == 4
    assert _usage(bob)["day"]["requests"] == 1


def test_unauthenticated_requests_are_not_counted(alice, anon):
    anon.get("/account")
    anon.get("/subscriptions")
    assert _usage(alice)["day"]["requests"] == 0


def test_subscription_counts_by_status(alice):
    ids = [alice.post("/subscriptions", json={"entity_type": "contact", "network_id": f"person-{n}"})
           .get_json()["id"] for n in range(4)]
    alice.post(f"/subscriptions/{ids[0]}/pause")
    alice.delete(f"/subscriptions/{ids[1]}")
    assert _usage(alice)["subscriptions"] == {"active": 2, "paused": 1, "cancelled": 1, "live": 3, "limit": 100}


def test_pending_counts_of_unknown_accounts_do_not_break_the_flush(alice):
    """Counts buffered for an account that no longer exists are dropped, not a 500 for everyone."""
    with alice.client.application.app_context():
        usage.request_counts()._pending[("acct_gone", usage.utcnow().date())] += 5
    alice.get("/account")
    body = _usage(alice)
    assert body["day"]["requests"] == 1


def test_a_failing_flush_never_fails_the_request(alice, monkeypatch):
    def broken():
        raise RuntimeError("database unavailable")

    with alice.client.application.app_context():
        monkeypatch.setattr(usage.request_counts(), "flush", broken)
    monkeypatch.setattr(usage, "FLUSH_EVERY_SECONDS", 0)
    response = alice.get("/account")
    assert response.status_code == 200


def test_counts_whose_write_fails_are_written_at_the_next_flush(alice, monkeypatch):
    """A database down for a moment lost the counts buffered for the failed write."""
    import sqlite3
    from app.services import usage as usage_module
    alice.get("/account")
    alice.get("/account")
    with alice.client.application.app_context():
        counts = usage.request_counts()

        @contextmanager
        def database_down():
            raise sqlite3.OperationalError("unable to open database file")
            yield
        monkeypatch.setattr(usage_module, "write_transaction", database_down)
        with pytest.raises(sqlite3.OperationalError):
            counts.flush()
        monkeypatch.undo()
        assert counts.flush() is True and counts.flush() is False
    assert _usage(alice)["day"]["requests"] == 2


def test_counts_are_written_within_the_interval_without_another_request(alice, monkeypatch):
    """A web worker without a scheduler wrote its counts only at its next request: one that went quiet kept them
    (API walk, scale-out layout)."""
    import time
    from sqlalchemy import select
    from app.extensions import db
    from app.models import UsageCounter

    monkeypatch.setattr(usage, "FLUSH_EVERY_SECONDS", 0.3)
    usage.flush_request_counts()  # the last write: now
    alice.get("/account")

    def written():
        db.session.rollback()
        return db.session.scalar(select(UsageCounter.requests).where(UsageCounter.account_id == alice.account_id))
    assert not written()  # buffered
    deadline = time.monotonic() + 10
    while not written() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert written() == 1


def test_counts_whose_flush_the_database_failed_are_written_later_without_another_request(alice, monkeypatch,
                                                                                          caplog):
    """A failed flush kept its counts only until the worker's next request: one that went quiet kept them (review)."""
    import sqlite3
    import time
    from sqlalchemy import select
    from app import outage_log
    from app.extensions import db
    from app.models import UsageCounter
    from app.services import usage as usage_module
    monkeypatch.setattr(outage_log, "_places", {})
    monkeypatch.setattr(usage, "FLUSH_EVERY_SECONDS", 0.3)
    real_write, calls = usage_module.write_transaction, []

    def down_once():
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("unable to open database file")
        return real_write()
    monkeypatch.setattr(usage_module, "write_transaction", down_once)
    alice.get("/account")
    usage.request_counts()._flush_logged()  # the database fails this one

    def written():
        db.session.rollback()
        return db.session.scalar(select(UsageCounter.requests).where(UsageCounter.account_id == alice.account_id))
    deadline = time.monotonic() + 10
    while not written() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert written() == 1 and len(calls) == 2
    said = [record for record in caplog.records if "flushing request counts failed" in record.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None  # one line, no traceback
