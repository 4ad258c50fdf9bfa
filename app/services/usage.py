"""Usage counters (contract §4). Request counts are buffered in memory and flushed in one write every
few seconds, so serving a request never writes to the database for bookkeeping."""
import logging
import threading
import time
from collections import Counter
from datetime import date

from flask import current_app
from sqlalchemy import func, select

from app.common import utcnow
from app.database import add_to_counters, write_transaction
from app.extensions import db
from app.models import Account, EventDayCount, UsageCounter
from app.outage_log import log_loop_failure
from app.services import outbox, subscription_counts
from app.services.accounts import live_subscription_count, subscription_limit
from app.services.provider_status import provider_status

FLUSH_EVERY_SECONDS = 5
log = logging.getLogger(__name__)


COUNTERS = ("requests", "checks", "provider_calls", "provider_credits")


def add_counts(session, rows):
    """Add {(account_id, day): {"requests": n, "checks": m, …}} (any of COUNTERS) inside the caller's
    transaction, with one statement however many accounts."""
    add_to_counters(session, UsageCounter, ("account_id", "day"),
                    [{"account_id": account_id, "day": day, **{name: counts.get(name, 0) for name in COUNTERS}}
                     for (account_id, day), counts in rows.items()])


class RequestCounter:
    """Request counts buffered in this process for one app, written by the request that finds the last write
    FLUSH_EVERY_SECONDS old, by the scheduler's step, or by a timer the first count after a write starts: a web
    worker without a scheduler that goes quiet used to keep its counts until its next request (API walk)."""

    def __init__(self):
        self._pending = Counter()
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._timer = None

    def add(self, account_id: str) -> None:
        with self._lock:
            self._pending[(account_id, utcnow().date())] += 1
            due = time.monotonic() - self._last_flush >= FLUSH_EVERY_SECONDS
            timer = None if due else self._new_timer()
        if due:
            self._flush_logged()
        elif timer is not None:
            timer.start()

    def _new_timer(self):
        """A timer to flush in FLUSH_EVERY_SECONDS, unless one runs (call holding the lock; start it after)."""
        if self._timer is not None:
            return None
        self._timer = threading.Timer(FLUSH_EVERY_SECONDS, self._flush_later, args=(current_app._get_current_object(),))
        self._timer.daemon = True
        return self._timer

    def _flush_later(self, app) -> None:
        with self._lock:
            self._timer = None
        with app.app_context():
            self._flush_logged()

    def _flush_logged(self) -> None:
        """A flush that never fails the request it counts: a failed one is logged (an outage once a minute), and one
        the database failed is tried again in FLUSH_EVERY_SECONDS, the counts kept (a worker gone quiet kept them
        until its next request: review)."""
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - bookkeeping must never fail the request it counts
            if log_loop_failure(log, "flushing request counts failed; they are written at the next flush"):
                with self._lock:
                    timer = self._new_timer()
                if timer is not None:
                    timer.start()

    def flush(self) -> bool:
        """Writes the counts buffered so far; whether there were any (so the database was used). Counts whose write
        fails are kept for the next flush (they were dropped: a database down for a moment lost them); a commit whose
        answer was lost, done all the same, counts them twice."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
            self._last_flush = time.monotonic()
            if self._timer is not None:  # written now: the timer has nothing left to write
                self._timer.cancel()
                self._timer = None
        if not pending:
            return False
        try:
            with write_transaction() as session:
                # Counts of an account that is gone (or, in one process serving several apps, that lives
                # in another database) are dropped: one stale row must not lose everyone's counts.
                known = set(session.scalars(select(Account.id).where(
                    Account.id.in_({account_id for account_id, _day in pending}))))
                add_counts(session, {key: {"requests": n} for key, n in pending.items() if key[0] in known})
        except Exception:
            with self._lock:
                self._pending.update(pending)
            raise
        return True


def request_counts() -> RequestCounter:
    """This app's buffered request counts: one counter an app, so a write (the timer's too) goes to the database of
    the app whose requests were counted (one counter for the process wrote another app's counts where their
    accounts did not exist, and dropped them: review)."""
    return current_app.extensions.setdefault("request_counts", RequestCounter())


def flush_request_counts() -> bool:
    return request_counts().flush()


def _period_counts(account_id: str, start: date) -> dict:
    session = db.session
    counters = session.execute(select(*(func.coalesce(func.sum(getattr(UsageCounter, name)), 0) for name in COUNTERS))
                               .where(UsageCounter.account_id == account_id, UsageCounter.day >= start)).one()
    events = session.scalar(select(func.coalesce(func.sum(EventDayCount.count), 0)).where(
        EventDayCount.account_id == account_id, EventDayCount.day >= start))
    deliveries = outbox.attempt_totals_since(session, account_id, start)
    return {**dict(zip(COUNTERS, counters)), "events_created": int(events),
            "deliveries_succeeded": deliveries.get("succeeded", (0, 0))[0],
            "deliveries_failed": deliveries.get("failed", (0, 0))[0]}


def report(account) -> dict:
    flush_request_counts()
    today = utcnow().date()
    by_status = subscription_counts.by_status(db.session, account.id)
    return {
        "day": {"start": today, **_period_counts(account.id, today)},
        "month": {"start": today.replace(day=1), **_period_counts(account.id, today.replace(day=1))},
        "subscriptions": {"active": by_status.get("active", 0), "paused": by_status.get("paused", 0),
                          "cancelled": by_status.get("cancelled", 0),
                          "limit": subscription_limit(account),
                          "live": live_subscription_count(db.session, account.id)},
        "provider_status": provider_status(),
    }
