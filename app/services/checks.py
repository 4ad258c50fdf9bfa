"""Checks: claim subscriptions, ask the provider, and record what changed (contract §7).

A check runs in three steps so no transaction is held across the provider call:
1. `claim` marks a batch with a token and a lease in one atomic UPDATE (two schedulers never
   check the same subscription at once; a crashed one's claims expire and are taken again);
2. `fetch_all` asks the provider, outside any transaction;
3. `record_outcomes` writes snapshots, events and their deliveries in one transaction, skipping any
   subscription whose claim was lost meanwhile (cancelled, paused), so a check racing a cancel emits nothing.
"""
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

from flask import current_app
from sqlalchemy import and_, bindparam, or_, select, update

from app.common import new_id, utcnow
from app.database import write_transaction
from app.models import Account, Subscription
from app.providers import EntityUnavailable, ProviderError
from app.providers.base import normalize_snapshot
from app.services import events, usage
from app.services.detection import detect, public_state
from app.services.scheduling import next_regular_check_at, retry_check_at

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claimed:
    id: str
    entity_type: str
    network_id: str


@dataclass
class Outcome:
    claimed: Claimed
    snapshot: dict = None
    unavailable: str = None  # "private" | "not_found"
    error: str = None  # transient failure


@dataclass
class Summary:
    checked: int = 0
    changes: int = 0
    unavailable: int = 0
    failed: int = 0
    skipped: int = 0  # claim lost to a cancel or pause meanwhile
    released: int = 0  # not fetched (stopping, or the batch's deadline): given back unchecked
    deliveries_queued: bool = False
    events: list = field(default_factory=list)

    @property
    def did_work(self) -> bool:
        return bool(self.checked or self.failed or self.skipped)


def claim(token: str, limit: int, *, due=True, after_id=None, subscription_id=None):
    """Claim up to `limit` active, unclaimed subscriptions: the due ones, those after an id (for
    `--all`), or one by id. Returns them as Claimed, in id order."""
    now = utcnow()
    lease = now + timedelta(seconds=current_app.config["CHECK_LEASE_SECONDS"])
    # Unclaimed: no token (a pause or cancel drops the token but may leave the lease time behind, and
    # a resumed subscription must not wait for it), or a lease that has expired (a crashed checker).
    conditions = [Subscription.status == "active",
                  or_(Subscription.claim_token.is_(None), Subscription.claimed_until.is_(None),
                      Subscription.claimed_until < now)]
    order = Subscription.id
    if subscription_id is not None:
        conditions.append(Subscription.id == subscription_id)
    elif due:
        conditions.append(Subscription.next_check_at <= now)
        order = Subscription.next_check_at
    if after_id is not None:
        conditions.append(Subscription.id > after_id)
    candidates = (select(Subscription.id).where(and_(*conditions)).order_by(order).limit(limit)
                  .with_for_update(skip_locked=True))
    with write_transaction() as session:
        rows = session.execute(
            update(Subscription).where(Subscription.id.in_(candidates.scalar_subquery()))
            .values(claim_token=token, claimed_until=lease)
            .returning(Subscription.id, Subscription.entity_type, Subscription.network_id)
            .execution_options(synchronize_session=False)).all()
    return sorted((Claimed(*row) for row in rows), key=lambda claimed: claimed.id)


def _fetch_one(provider, claimed: Claimed) -> Outcome:
    try:
        raw = provider.fetch(claimed.entity_type, claimed.network_id)
        return Outcome(claimed, snapshot=normalize_snapshot(claimed.entity_type, raw))
    except EntityUnavailable as unavailable:
        return Outcome(claimed, unavailable=unavailable.reason)
    except ProviderError as error:
        log.warning("provider failed on %s: %s", claimed.id, error, extra={"subscription_id": claimed.id})
        return Outcome(claimed, error=str(error)[:200])
    except Exception as error:  # noqa: BLE001 - a provider bug must not stop the loop
        log.exception("provider failed on %s", claimed.id)
        return Outcome(claimed, error=f"{type(error).__name__}: {error}"[:200])


def fetch_all(provider, claimed: list, keep_going=lambda: True) -> list:
    """One outcome per claimed item, in order; None for an item not fetched because `keep_going()` turned
    false first (the scheduler is stopping, or the batch reached its deadline)."""
    def fetch_unless_stopped(item):
        return _fetch_one(provider, item) if keep_going() else None

    if provider.concurrency <= 1 or len(claimed) <= 1:
        return [fetch_unless_stopped(item) for item in claimed]
    with ThreadPoolExecutor(max_workers=min(provider.concurrency, len(claimed))) as pool:
        return list(pool.map(fetch_unless_stopped, claimed))


def release(token: str, subscription_ids: list) -> None:
    """Give back claims that were not worked on: due as they were, for any checker to take at once."""
    if not subscription_ids:
        return
    with write_transaction() as session:
        session.execute(update(Subscription)
                        .where(Subscription.id.in_(subscription_ids), Subscription.claim_token == token)
                        .values(claim_token=None, claimed_until=None)
                        .execution_options(synchronize_session=False))


def _record_event(built, subscription, config, event_type, data, now, summary):
    """Build the event (and its delivery); `record_outcomes` inserts the whole batch's at once."""
    event, delivery = events.build(subscription.account_id, event_type,
                                   {"entity": events.entity_data(subscription), **data},
                                   subscription=subscription, config=config, now=now)
    built.append((event, delivery))
    summary.events.append(event["id"])
    summary.deliveries_queued |= delivery is not None


def _detect(subscription, outcome):
    """The detection for a snapshot outcome; a snapshot detection cannot read becomes a transient failure
    (logged), so one odd answer never rolls back the rest of the batch."""
    try:
        return detect(subscription.entity_type, subscription.snapshot, outcome.snapshot,
                      current_app.config["EMPLOYEE_COUNT_MIN_PERCENT"]), outcome
    except Exception as error:  # noqa: BLE001
        log.exception("change detection failed on %s", subscription.id)
        return None, Outcome(outcome.claimed, error=f"{type(error).__name__}: {error}"[:200])


def _apply_snapshot(built, subscription, detection, config, now, summary):
    if subscription.snapshot is None:
        initial = config.initial_webhook if config is not None else "latest"
        if initial != "none":
            _record_event(built, subscription, config, "subscription.initial_state",
                          {"state": public_state(detection.snapshot)}, now, summary)
        if initial == "all":
            for change in detection.present_activities:
                _record_event(built, subscription, config, change.type, change.data, now, summary)
    for change in detection.changes:
        _record_event(built, subscription, config, change.type, change.data, now, summary)
    if detection.changes:
        subscription.change_count += len(detection.changes)
        subscription.last_change_at = now
        summary.changes += len(detection.changes)
    subscription.snapshot = detection.snapshot
    subscription.last_check_status = "ok"
    subscription.unavailable_reason = None


def _apply_unavailable(built, subscription, outcome, config, now, summary):
    summary.unavailable += 1
    subscription.last_check_status = "NETWORK_ERROR"
    if subscription.unavailable_reason is None:  # once per transition, until reachable again
        _record_event(built, subscription, config, "entity.unavailable", {"reason": outcome.unavailable},
                      now, summary)
        subscription.change_count += 1
        subscription.last_change_at = now
        summary.changes += 1
    subscription.unavailable_reason = outcome.unavailable


def _apply(built, subscription, outcome, config, tier, now, summary):
    subscription.claim_token = None
    subscription.claimed_until = None
    detection = None
    if outcome.error is None and outcome.unavailable is None:
        detection, outcome = _detect(subscription, outcome)
    if outcome.error is not None:
        subscription.consecutive_failures += 1
        subscription.next_check_at = retry_check_at(now, subscription.consecutive_failures, tier)
        summary.failed += 1
        return False
    if outcome.unavailable is not None:
        _apply_unavailable(built, subscription, outcome, config, now, summary)
    else:
        _apply_snapshot(built, subscription, detection, config, now, summary)
    subscription.consecutive_failures = 0
    subscription.check_count += 1
    subscription.last_checked_at = now
    subscription.next_check_at = next_regular_check_at(now, tier)
    summary.checked += 1
    return True


_LOADED = ("id", "account_id", "entity_type", "network_id", "network_url", "status", "custom_metadata",
           "snapshot", "claim_token", "check_count", "change_count", "consecutive_failures",
           "unavailable_reason", "last_checked_at", "last_change_at", "last_check_status", "next_check_at")
_STATE = ("claim_token", "claimed_until", "consecutive_failures", "next_check_at", "check_count",
          "change_count", "last_checked_at", "last_change_at", "last_check_status", "unavailable_reason")


class _Checked:
    """A subscription row being checked: plain attributes, written back with one UPDATE per batch."""

    def __init__(self, mapping):
        self.__dict__.update(mapping)
        self.claimed_until = None
        self.original_snapshot = self.snapshot


def _write_back(session, token, rows):
    """One executemany UPDATE for the rows whose snapshot changed, one for the others; each row only
    while the claim is still ours (the rows are locked: belt and braces)."""
    table = Subscription.__table__
    for with_snapshot in (True, False):
        names = _STATE + (("snapshot",) if with_snapshot else ())
        params = [{**{name: getattr(row, name) for name in names}, "b_id": row.id, "b_token": token}
                  for row in rows if (row.snapshot is not row.original_snapshot) == with_snapshot]
        if params:
            session.execute(update(table).where(table.c.id == bindparam("b_id"),
                                                table.c.claim_token == bindparam("b_token"))
                            .values({name: bindparam(name) for name in names}), params)


def record_outcomes(token: str, outcomes: list) -> Summary:
    """Write every outcome of a claimed batch in one transaction: the subscriptions' new state, the
    events and their deliveries, with a few multi-row statements (no ORM unit of work per row)."""
    summary = Summary()
    if not outcomes:
        return summary
    with write_transaction() as session:
        now = utcnow()
        ids = [outcome.claimed.id for outcome in outcomes]
        table = Subscription.__table__
        # Read through Core, so what is read is what is committed now (the claim was written with a Core
        # UPDATE; an ORM copy kept by the session would be stale, as expire_on_commit is off).
        query = select(*(table.c[name] for name in _LOADED)).where(table.c.id.in_(ids)).with_for_update()
        loaded = {mapping["id"]: _Checked(mapping) for mapping in session.execute(query).mappings()}
        configs, tiers, checks_per_account = {}, {}, Counter()
        built, written = [], []
        for outcome in outcomes:
            subscription = loaded.get(outcome.claimed.id)
            if subscription is None or subscription.status != "active" or subscription.claim_token != token:
                summary.skipped += 1
                continue
            account_id = subscription.account_id
            if account_id not in configs:
                configs[account_id] = events.webhook_config_for(session, account_id)
                tiers[account_id] = session.scalar(select(Account.tier).where(Account.id == account_id))
            if _apply(built, subscription, outcome, configs[account_id], tiers[account_id], now, summary):
                checks_per_account[account_id] += 1
            written.append(subscription)
        _write_back(session, token, written)
        events.store(session, built)
        usage.add_counts(session, {(account_id, now.date()): {"checks": count}
                                   for account_id, count in checks_per_account.items()})
    if summary.deliveries_queued:
        events.notify_new_deliveries()
    return summary


def new_claim_token() -> str:
    return new_id("claim")


def provider_for(app):
    """The configured provider, built once per app."""
    if "provider" not in app.extensions:
        from app.providers import load_provider
        app.extensions["provider"] = load_provider(app.config)
    return app.extensions["provider"]


def run_claimed(claimed: list, token: str, keep_going=lambda: True) -> Summary:
    """Fetch and record a claimed batch. Fetching stops at half the lease (or when `keep_going()` turns
    false), and what was not fetched by then is released, so a claim never outlives its lease."""
    app = current_app._get_current_object()
    deadline = time.monotonic() + app.config["CHECK_LEASE_SECONDS"] / 2
    outcomes = fetch_all(provider_for(app), claimed, lambda: keep_going() and time.monotonic() < deadline)
    release(token, [item.id for item, outcome in zip(claimed, outcomes) if outcome is None])
    summary = record_outcomes(token, [outcome for outcome in outcomes if outcome is not None])
    summary.released = outcomes.count(None)
    return summary
