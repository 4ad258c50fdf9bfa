"""One-step delivery functions for the scheduler and the `deliveries run` command, and the wake-up
that runs the scheduler's delivery job as soon as a transaction has queued deliveries."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone

from flask import current_app, has_app_context

from app.services import events, outbox
from app.services.transport import transport_for

JOB_ID = "deliveries"
STEP_BUDGET_SECONDS = 30

_draining = threading.Event()  # a drain is running: it will see new rows without being woken
_woken = threading.Event()  # new rows were queued since the drain last looked


@dataclass
class InFlight:
    """A claimed batch whose tries are running in the sender pool."""
    token: str
    batch: list
    futures: list


def _claim_and_send(app, pool) -> InFlight:
    token = outbox.new_claim_token()
    batch = outbox.claim_due(token, app.config["WEBHOOK_BATCH_SIZE"])
    transport = transport_for(app)
    return InFlight(token, batch, [pool.submit(transport.send, claimed.outgoing) for claimed in batch])


def _record(in_flight: InFlight) -> int:
    outbox.record_results(in_flight.token, [(claimed, future.result())
                                            for claimed, future in zip(in_flight.batch, in_flight.futures)])
    return len(in_flight.batch)


def _sender_pool(app) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=app.config["WEBHOOK_WORKERS"], thread_name_prefix="webhook-sender")


def deliver_due() -> int:
    """Claim one batch of due deliveries, send it with a bounded pool of workers outside any transaction,
    and record the results. Returns how many were sent (0: nothing was due)."""
    app = current_app._get_current_object()
    with _sender_pool(app) as pool:
        in_flight = _claim_and_send(app, pool)
        return _record(in_flight) if in_flight.batch else 0


def deliver_until_idle(budget_seconds=None) -> int:
    """Deliver batch after batch until nothing is due (or the budget is spent); returns how many were sent.

    Pipelined: the next batch is claimed and handed to the pool before the previous one is recorded, so
    the senders never wait for the bookkeeping."""
    app = current_app._get_current_object()
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
    sent, previous = 0, None
    _draining.set()
    try:
        with _sender_pool(app) as pool:
            while True:
                _woken.clear()
                within_budget = deadline is None or time.monotonic() < deadline
                current = _claim_and_send(app, pool) if within_budget else None
                if previous is not None:
                    sent += _record(previous)
                if current is None or not (current.batch or _woken.is_set()):
                    return sent
                previous = current if current.batch else None
    finally:
        _draining.clear()


def run_scheduled_deliveries() -> bool:
    """Scheduler step; returns whether any work was done."""
    return bool(deliver_until_idle(STEP_BUDGET_SECONDS))


def wake_sender():
    """Listener of events.on_new_deliveries: run the scheduler's delivery job now rather than at the next
    poll. A drain already running is only flagged, so APScheduler never skips a run it could not start."""
    _woken.set()
    if _draining.is_set() or not has_app_context():
        return
    scheduler = current_app.extensions.get("scheduler")
    if scheduler is not None:
        scheduler.modify_job(JOB_ID, next_run_time=datetime.now(timezone.utc))


events.on_new_deliveries(wake_sender)
