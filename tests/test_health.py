"""GET /healthz (contract §10): the database, the schedulers' heartbeat and the outbox backlog; 503 when the
database is unreachable or no scheduler ticked within HEALTH_SCHEDULER_MAX_LAG_SECONDS."""
from datetime import timedelta

import pytest
from sqlalchemy import insert

from app.common import new_id, utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import Event, OutboxDelivery, SchedulerHeartbeat
from app.services import health
from app.version import VERSION


def get_health(client):
    response = client.get("/healthz")
    return response.status_code, response.get_json()


def test_healthy_when_a_scheduler_ticked_recently(anon, ticking):
    status, body = get_health(anon.client)
    assert status == 200
    assert body["status"] == "ok" and body["database"] == "ok" and body["version"] == VERSION
    assert body["scheduler"]["last_tick_at"].endswith("Z")
    assert 0 <= body["scheduler"]["lag_seconds"] < 60
    assert body["outbox"] == {"pending": 0, "oldest_pending_seconds": None}
    assert "error" not in body


def test_no_scheduler_ever_is_unhealthy_and_says_why(anon):
    status, body = get_health(anon.client)
    assert status == 503
    assert body["status"] == "unavailable" and body["database"] == "ok"
    assert body["scheduler"] == {"last_tick_at": None, "lag_seconds": None}
    assert body["error"] == "UNAVAILABLE" and "No scheduler has ticked" in body["message"]
    assert body["request_id"] and body["timestamp"].endswith("Z")


def test_a_stalled_scheduler_is_unhealthy_after_the_allowed_lag(anon, app):
    health.record_tick("old", utcnow() - timedelta(minutes=10))
    with write_transaction() as session:  # the tick itself is "now": move it back
        session.execute(SchedulerHeartbeat.__table__.update().values(
            last_tick_at=utcnow() - timedelta(seconds=121)))
    status, body = get_health(anon.client)
    assert status == 503 and body["scheduler"]["lag_seconds"] >= 121
    assert "No scheduler has ticked for 121 s (allowed: 120 s)" in body["message"]
    app.config["HEALTH_SCHEDULER_MAX_LAG_SECONDS"] = 300
    assert get_health(anon.client)[0] == 200


def test_the_newest_of_several_schedulers_counts(anon):
    health.record_tick("stalled", utcnow())
    with write_transaction() as session:
        session.execute(SchedulerHeartbeat.__table__.update().values(
            last_tick_at=utcnow() - timedelta(hours=1)))
    health.record_tick("alive", utcnow())
    assert get_health(anon.client)[0] == 200


def test_the_outbox_backlog_counts_pending_deliveries_and_the_oldest_age(anon, alice, ticking):
    now = utcnow()
    with write_transaction() as session:
        for age_seconds in (30, 600):
            event_id = new_id("evt")
            session.execute(insert(Event).values(id=event_id, account_id=alice.account_id, type="test", body="{}",
                                                 created_at=now))
            session.execute(insert(OutboxDelivery).values(event_id=event_id, account_id=alice.account_id,
                                                          created_at=now - timedelta(seconds=age_seconds)))
    status, body = get_health(anon.client)
    assert status == 200  # a backlog is reported, not a failure: the scheduler is draining it
    assert body["outbox"]["pending"] == 2
    assert 600 <= body["outbox"]["oldest_pending_seconds"] < 660


def test_an_unreachable_database_is_503_with_the_error_shape(anon, monkeypatch, ticking):
    def broken(*args, **kwargs):
        raise RuntimeError("database is gone")

    monkeypatch.setattr(db.session, "connection", broken)
    status, body = get_health(anon.client)
    assert status == 503
    assert body["database"] == "unreachable" and body["scheduler"] is None and body["outbox"] is None
    assert body["error"] == "UNAVAILABLE" and body["message"] == "The database is not reachable."


def test_while_a_read_waits_on_a_frozen_database_the_next_reports_say_so_at_once(app, anon, monkeypatch, ticking):
    """A frozen server (its host still acknowledging TCP) held every /healthz as long as it lasted, and it then
    answered 200 (fault walk). The first read still waits; the ones after it answer 503 at once."""
    import threading
    import time

    frozen, waiting = threading.Event(), []
    real = health.scheduler_heartbeat

    def hanging():
        waiting.append(1)
        frozen.wait(10)
        return real()
    monkeypatch.setattr(health, "STUCK_READ_SECONDS", 0.2)
    monkeypatch.setattr(health, "scheduler_heartbeat", hanging)
    first = threading.Thread(target=lambda: app.test_client().get("/healthz"))
    first.start()
    try:
        while not waiting:
            time.sleep(0.01)
        time.sleep(0.3)
        started = time.monotonic()
        status, body = get_health(anon.client)
        assert time.monotonic() - started < 2 and len(waiting) == 1  # answered without a read of its own
        assert status == 503 and body["database"] == "unreachable"
        assert body["message"].startswith("The database has not answered a read for ")
    finally:
        frozen.set()
        first.join(10)
    assert get_health(anon.client)[0] == 200  # it answers again


def test_health_needs_no_key_and_carries_no_rate_limit_headers(anon, ticking):
    response = anon.client.get("/healthz")
    assert response.status_code == 200
    assert "X-RateLimit-Limit" not in response.headers and response.headers["X-Request-Id"]


def test_heartbeats_of_schedulers_gone_for_a_week_are_forgotten(app):
    health.record_tick("gone", utcnow())
    health.record_tick("alive", utcnow())
    with write_transaction() as session:
        table = SchedulerHeartbeat.__table__
        session.execute(table.update().where(table.c.id == "gone").values(last_tick_at=utcnow() - timedelta(days=8)))
    health.forget_stale_schedulers()
    assert [row.id for row in db.session.query(SchedulerHeartbeat)] == ["alive"]


@pytest.mark.parametrize("prefix", ["", "/api/v1"])
def test_health_lives_only_at_the_root(anon, prefix, ticking):
    assert anon.client.get(f"{prefix}/healthz").status_code == (200 if not prefix else 404)


def test_a_paused_provider_is_degraded_but_still_serving(anon, ticking):
    from app.services import provider_limits
    from app.services.provider_status import provider_status
    name = provider_status()["provider"]
    provider_limits.pause(name, provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "HTTP 429")
    status, body = get_health(anon.client)
    assert status == 200 and body["status"] == "degraded"
    assert body["provider"]["state"] == "paused" and body["provider"]["reason"] == "rate_limited"
    assert body["provider"]["paused_until"].endswith("Z")
    provider_limits.resume(name)
    assert get_health(anon.client)[1]["status"] == "ok"


@pytest.mark.postgresql_only("a server ending the connection under a read is PostgreSQL's pg_terminate_backend")
def test_a_connection_the_server_ends_during_the_report_is_503_not_500(app, anon, monkeypatch, ticking):
    """The read failed (the server ended the connection: a restart, a failover, pg_terminate_backend), and so did
    the report's rollback of it, which escaped `report` as a 500 INTERNAL_ERROR with a traceback in the log
    (PostgreSQL walk: 28 of 2,085 probes while backends were terminated)."""
    from sqlalchemy import text
    real = health.scheduler_heartbeat

    def read_on_an_ended_connection():
        pid = db.session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with db.engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        return real()
    monkeypatch.setattr(health, "scheduler_heartbeat", read_on_an_ended_connection)
    status, body = get_health(anon.client)
    assert status == 503
    assert body["database"] == "unreachable" and body["message"] == "The database is not reachable."
    monkeypatch.setattr(health, "scheduler_heartbeat", real)
    assert get_health(anon.client)[0] == 200  # the next report has a connection again
