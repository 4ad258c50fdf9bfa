"""When a subscription is next checked (contract §7)."""
import random
from datetime import timedelta

from flask import current_app
from sqlalchemy import bindparam, func, select, update

from app.common import utcnow
from app.database import end_read_transaction, write_transaction
from app.extensions import db
from app.models import Account, Subscription
from app.services import account_lock
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


def bring_forward(account_id: str, previous_tier: str, tier: str) -> int:
    """After an account has moved to a tier that checks more often: each active subscription whose next check is
    further off than the new interval (with its jitter) allows has its wait cut in the ratio of the intervals, so
    they keep their spread and order. Without it a move from a daily to a 6-hourly tier left every subscription to
    wait out its daily check first. A page of the key per write transaction, each taking the account's row lock
    first: an account may hold a million subscriptions, and one transaction for all of them held SQLite's write lock
    (every other writer's, past its busy timeout) and the account's row for as long. Stops if the account has moved
    to another tier meanwhile. Each page reads the clock anew: a check recorded since the move plans with the new tier,
    within its interval from that check, so it is not cut again. From a tier TIERS no longer has, the furthest
    next check planned stands for its interval. Returns how many moved."""
    interval = check_interval_seconds(tier)
    longest = timedelta(seconds=interval * (1 + current_app.config["CHECK_JITTER_FRACTION"]))
    if previous_tier in current_app.config["TIERS"]:
        previous = check_interval_seconds(previous_tier)
    else:  # a tier since removed from TIERS (`serve` says to move its accounts): the furthest wait it planned
        previous = _furthest_wait(account_id, longest)  # stands for its interval; none was cut (a weekly tier's)
    if previous is None or interval >= previous:
        return 0
    table = Subscription.__table__
    moved, after = 0, ""
    while True:
        with write_transaction() as session:
            account_lock.lock_account(session, account_id)  # first, as every writer of its subscriptions takes it
            if session.scalar(select(Account.tier).where(Account.id == account_id)) != tier:
                return moved  # moved again meanwhile: that move plans its own
            now = utcnow()
            rows = session.execute(select(table.c.id, table.c.next_check_at)
                                   .where(table.c.account_id == account_id, table.c.status == "active",
                                          table.c.next_check_at > now + longest, table.c.id > after)
                                   .order_by(table.c.id).limit(RESCHEDULE_PAGE)).all()
            if not rows:
                return moved
            session.execute(update(table).where(table.c.id == bindparam("b_id"))
                            .values(next_check_at=bindparam("b_next")),
                            [{"b_id": row_id, "b_next": now + (due - now) * (interval / previous)}
                             for row_id, due in rows])
        moved, after = moved + len(rows), rows[-1].id


def _furthest_wait(account_id: str, longest: timedelta):
    """The seconds to the account's furthest next check, when it is further off than `longest`; else None."""
    now = utcnow()
    furthest = db.session.scalar(select(func.max(Subscription.next_check_at))
                                 .where(Subscription.account_id == account_id, Subscription.status == "active"))
    end_read_transaction()
    if furthest is None or furthest <= now + longest:
        return None
    return (furthest - now).total_seconds()
