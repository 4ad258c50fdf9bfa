"""Liveness the operator can see (contract §10): the schedulers' heartbeats and the outbox backlog."""
import os
import socket
import time
from datetime import timedelta

from sqlalchemy import delete, func, select

from app.common import new_id, utcnow
from app.database import PreparedSelect, end_read_quietly, upsert, write_transaction
from app.extensions import db
from app.models import OutboxDelivery, SchedulerHeartbeat
from app.services.provider_status import provider_status

FORGET_AFTER = timedelta(days=7)  # heartbeat rows of schedulers long gone are deleted


def new_scheduler_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('s')[2:10]}"


def record_tick(scheduler_id: str, started_at) -> None:
    """This scheduler is alive now: one small upsert (schedulers tick every few seconds)."""
    now = utcnow()
    with write_transaction() as session:
        statement = upsert(session, SchedulerHeartbeat).values(id=scheduler_id, started_at=started_at,
                                                               last_tick_at=now)
        session.execute(statement.on_conflict_do_update(index_elements=["id"], set_={"last_tick_at": now}))


def forget_stale_schedulers() -> None:
    with write_transaction() as session:
        session.execute(delete(SchedulerHeartbeat).where(SchedulerHeartbeat.last_tick_at < utcnow() - FORGET_AFTER))


# Prepared once: /healthz is polled, and building statements plus SQLAlchemy's execution layers cost far more
# than these indexed reads.
_LAST_TICK = PreparedSelect(select(func.max(SchedulerHeartbeat.last_tick_at)))
_BACKLOG = PreparedSelect(select(func.count(), func.min(OutboxDelivery.created_at)))


def scheduler_heartbeat() -> dict:
    """The newest tick of any scheduler and how long ago it was (None when none ever ticked)."""
    last = _LAST_TICK.first()[0]
    return {"last_tick_at": last, "lag_seconds": None if last is None else _seconds_since(last)}


def outbox_backlog() -> dict:
    """Deliveries still owed (due now or waiting for a retry) and the age of the oldest one."""
    pending, oldest = _BACKLOG.first()
    return {"pending": pending, "oldest_pending_seconds": None if oldest is None else _seconds_since(oldest)}


# When a read of this process has waited on the database this long, the next reports say "not answering" at once
# instead of waiting too: a frozen server (its host still acknowledging TCP) held every /healthz for as long as it
# lasted, and answered 200 afterwards (fault walk). The first read still waits; a load balancer's probe times out.
STUCK_READ_SECONDS = 3.0
_reads_out = {}  # a report being read -> when it began (time.monotonic())


def report(max_scheduler_lag_seconds: float) -> dict:
    """The health document; `problems` lists why it is unhealthy (empty: healthy). Never raises."""
    waited = max((time.monotonic() - began for began in list(_reads_out.values())), default=0.0)
    if waited > STUCK_READ_SECONDS:
        return _database_down(f"The database has not answered a read for {waited:.0f} s.")
    reading = object()
    _reads_out[reading] = time.monotonic()
    try:
        scheduler, outbox, provider = scheduler_heartbeat(), outbox_backlog(), provider_status()
    except Exception:  # noqa: BLE001 - any database failure means "not healthy", whatever the driver raised
        return _database_down("The database is not reachable.")
    finally:
        _reads_out.pop(reading, None)
        end_read_quietly(db.session)
    problems = []
    if scheduler["lag_seconds"] is None:
        problems.append("No scheduler has ticked yet: checks and deliveries are not running.")
    elif scheduler["lag_seconds"] > max_scheduler_lag_seconds:
        problems.append(f"No scheduler has ticked for {scheduler['lag_seconds']:.0f} s "
                        f"(allowed: {max_scheduler_lag_seconds:g} s): checks and deliveries are not running.")
    return {"database": "ok", "scheduler": scheduler, "outbox": outbox, "provider": provider, "problems": problems}


def _database_down(problem: str) -> dict:
    return {"database": "unreachable", "scheduler": None, "outbox": None, "provider": None, "problems": [problem]}


def _seconds_since(moment) -> float:
    return round(max((utcnow() - moment).total_seconds(), 0.0), 3)
