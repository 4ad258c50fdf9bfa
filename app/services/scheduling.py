"""When a subscription is next checked (contract §7)."""
import random
from datetime import timedelta

from flask import current_app
from sqlalchemy import bindparam, select, update

from app.models import Subscription
from app.services.accounts import tier_settings

RESCHEDULE_PAGE = 5000


def first_check_at(now):
    """`CHECK_INITIAL_DELAY_SECONDS` after `now`, never earlier than half of it."""
    delay = current_app.config["CHECK_INITIAL_DELAY_SECONDS"]
    return now + timedelta(seconds=random.uniform(delay / 2, delay))


def check_interval_seconds(tier: str) -> int:
    return current_app.config["CHECK_INTERVAL_SECONDS"] or tier_settings(tier)["check_interval_seconds"]


def next_regular_check_at(now, tier: str):
    """One interval on, spread by ±jitter so checks do not come in waves."""
    interval = check_interval_seconds(tier)
    jitter = current_app.config["CHECK_JITTER_FRACTION"]
    return now + timedelta(seconds=interval * random.uniform(1 - jitter, 1 + jitter))


def retry_check_at(now, failures: int, tier: str):
    """Back off after a transient provider failure: base × 2^(failures-1), capped at the interval."""
    base = current_app.config["CHECK_RETRY_BASE_SECONDS"]
    delay = min(base * 2 ** max(failures - 1, 0), check_interval_seconds(tier))
    return now + timedelta(seconds=delay * random.uniform(0.9, 1.1))


def bring_forward(session, account_id: str, previous_tier: str, tier: str, now) -> int:
    """After an account moves to a tier that checks more often, inside the caller's transaction: each active
    subscription whose next check is further off than the new interval (with its jitter) allows has its wait cut in
    the ratio of the intervals, so they keep their spread and order. Without it a move from a daily to a 6-hourly
    tier left every subscription to wait out its daily check first. Returns how many moved."""
    if previous_tier not in current_app.config["TIERS"]:  # a tier since removed from the configuration
        return 0
    previous, interval = check_interval_seconds(previous_tier), check_interval_seconds(tier)
    if interval >= previous:
        return 0
    latest = now + timedelta(seconds=interval * (1 + current_app.config["CHECK_JITTER_FRACTION"]))
    table = Subscription.__table__
    moved, after = 0, ""
    while True:  # in pages of the primary key: an account may hold a million subscriptions
        rows = session.execute(select(table.c.id, table.c.next_check_at)
                               .where(table.c.account_id == account_id, table.c.status == "active",
                                      table.c.next_check_at > latest, table.c.id > after)
                               .order_by(table.c.id).limit(RESCHEDULE_PAGE)).all()
        if not rows:
            return moved
        session.execute(update(table).where(table.c.id == bindparam("b_id"))
                        .values(next_check_at=bindparam("b_next")),
                        [{"b_id": row_id, "b_next": now + (due - now) * (interval / previous)} for row_id, due in rows])
        moved, after = moved + len(rows), rows[-1].id
