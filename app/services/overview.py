"""What the dashboard's overview shows of one account: a few grouped reads, each on an index."""
from datetime import timedelta

from sqlalchemy import func, select

from app.common import utcnow
from app.extensions import db
from app.models import DeliveryAttempt, Event, Subscription
from app.services import accounts, events, health, webhooks

WINDOW_DAYS = 30


def summary(account) -> dict:
    since = utcnow() - timedelta(days=WINDOW_DAYS)
    return {"account": accounts.describe(account), "statuses": _status_counts(account.id),
            "events_per_day": _events_per_day(account.id, since), "deliveries": _delivery_stats(account.id, since),
            "webhook": webhooks.get_or_none(account.id), "scheduler": health.scheduler_heartbeat(),
            "window_days": WINDOW_DAYS}


def _status_counts(account_id) -> dict:
    rows = db.session.execute(select(Subscription.status, func.count()).where(Subscription.account_id == account_id)
                              .group_by(Subscription.status))
    return {"active": 0, "paused": 0, "cancelled": 0, **dict(rows.all())}


def _events_per_day(account_id, since) -> dict:
    """{(ISO day, type): count} over the window."""
    day = func.date(Event.created_at)
    # The type list lets the (account, type, created_at) index serve each type's window, covering the read.
    rows = db.session.execute(select(day, Event.type, func.count()).where(
        Event.account_id == account_id, Event.type.in_(events.EVENT_TYPES), Event.created_at >= since)
        .group_by(Event.type, day))
    return {(str(found_day), event_type): count for found_day, event_type, count in rows}


def _delivery_stats(account_id, since) -> dict:
    rows = dict(db.session.execute(select(DeliveryAttempt.status, func.count()).where(
        DeliveryAttempt.account_id == account_id, DeliveryAttempt.attempted_at >= since)
        .group_by(DeliveryAttempt.status)).all())
    average_ms = db.session.scalar(select(func.avg(DeliveryAttempt.duration_ms)).where(
        DeliveryAttempt.account_id == account_id, DeliveryAttempt.attempted_at >= since,
        DeliveryAttempt.status == "succeeded"))
    total = sum(rows.values())
    return {"attempts": total, "succeeded": rows.get("succeeded", 0), "failed": rows.get("failed", 0),
            "success_rate": None if not total else rows.get("succeeded", 0) / total,
            "average_ms": None if average_ms is None else round(average_ms)}
