"""What the dashboard's overview shows of one account: a few reads of counters, each a row per day or status."""
from datetime import timedelta

from sqlalchemy import select

from app.common import utcnow
from app.extensions import db
from app.models import EventDayCount
from app.services import accounts, health, outbox, subscription_counts, webhooks

WINDOW_DAYS = 30


def summary(account) -> dict:
    first_day = utcnow().date() - timedelta(days=WINDOW_DAYS - 1)  # the window: today and the days before
    return {"account": accounts.describe(account), "trial_ended": accounts.trial_ended(account, utcnow()),
            "statuses": _status_counts(account.id),
            "events_per_day": _events_per_day(account.id, first_day),
            "deliveries": _delivery_stats(account.id, first_day),
            "webhook": webhooks.get_or_none(account.id), "scheduler": health.scheduler_heartbeat(),
            "window_days": WINDOW_DAYS}


def _status_counts(account_id) -> dict:
    return {"active": 0, "paused": 0, "cancelled": 0, **subscription_counts.by_status(db.session, account_id)}


def _events_per_day(account_id, first_day) -> dict:
    """{(ISO day, type): count} from `first_day` (UTC) on, read from the per-day counters."""
    rows = db.session.execute(select(EventDayCount.day, EventDayCount.type, EventDayCount.count).where(
        EventDayCount.account_id == account_id, EventDayCount.day >= first_day))
    return {(found_day.isoformat(), event_type): count for found_day, event_type, count in rows}


def _delivery_stats(account_id, first_day) -> dict:
    totals = outbox.attempt_totals_since(db.session, account_id, first_day)
    counts = {status: count for status, (count, _duration_ms) in totals.items()}
    total, succeeded = sum(counts.values()), counts.get("succeeded", 0)
    return {"attempts": total, "succeeded": succeeded, "failed": counts.get("failed", 0),
            "success_rate": None if not total else succeeded / total,
            "average_ms": round(totals["succeeded"][1] / succeeded) if succeeded else None}
