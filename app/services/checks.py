"""Checks: claim subscriptions, ask the provider, and record what changed (contract §7).

A check runs in three steps so no transaction is held across the provider call:
1. `claim` marks a batch with a token and a lease in one atomic UPDATE (two schedulers never
   check the same subscription at once; a crashed one's claims expire and are taken again);
2. `fetch_all` asks the provider, outside any transaction;
3. `record_outcomes` writes snapshots, events and their deliveries in one transaction, skipping any
   subscription whose claim was lost meanwhile (cancelled, paused), so a check racing a cancel emits nothing.
"""
import logging
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import timedelta

from flask import current_app
from sqlalchemy import bindparam, func, or_, select, update

from app.common import always, new_id, utcnow
from app.database import end_read_transaction, write_transaction
from app.errors import ValidationFailed
from app.extensions import db
from app.models import Account, Subscription
from app.providers import (Answers, EntityUnavailable, ProviderError, QuotaExhausted, current_provider, fetch_many,
                           traits)
from app.providers.base import is_provider_wide, normalize_snapshot
from app.services import events, provider_limits, usage
from app.services.detection import detect, is_unknown
from app.services.entities import normalize_network_id
from app.services.scheduling import next_regular_check_at, retry_check_at

log = logging.getLogger(__name__)

SLOT_POLL_SECONDS = 0.05  # how often a call waiting for a concurrency slot held elsewhere asks again


@dataclass(frozen=True)
class Claimed:
    id: str
    entity_type: str
    network_id: str
    network_url: str = None


@dataclass
class Outcome:
    claimed: Claimed
    snapshot: dict = None
    unavailable: str = None  # "private" | "not_found"
    error: str = None  # transient failure
    deferred: bool = False  # not asked, or asked while the provider said to stop: released, keeps its place
    pause: object = None  # the answer that pauses the provider (throttled, quota exhausted)
    called: bool = False  # an upstream call was made for it
    credits: float = 0.0  # its share of the call's cost, when the vendor reports it


@dataclass
class Summary:
    checked: int = 0
    changes: int = 0
    unavailable: int = 0
    failed: int = 0
    skipped: int = 0  # claim lost to a cancel or pause meanwhile
    deferred: int = 0  # provider paused or out of budget: released untouched, checked when it resumes
    held: int = 0  # active, but another checker held them (`checks run --all` passes them by)
    deliveries_queued: bool = False
    events: int = 0  # events recorded (a count: `checks run` over a busy table emits millions)
    deferred_ids: list = field(default_factory=list)  # `checks run --all` checks them again
    COUNTS = ("checked", "changes", "unavailable", "failed", "skipped", "deferred", "held")  # no annotation: no field

    @property
    def did_work(self) -> bool:
        return bool(self.checked or self.failed or self.skipped)

    @classmethod
    def merged(cls, summaries) -> "Summary":
        merged = cls()
        for summary in summaries:
            for name in cls.COUNTS:
                setattr(merged, name, getattr(merged, name) + getattr(summary, name))
            merged.deliveries_queued |= summary.deliveries_queued
            merged.events += summary.events
            merged.deferred_ids += summary.deferred_ids
        return merged


def _unclaimed(now):
    """No token (a pause or cancel drops the token but may leave the lease time behind, and a resumed
    subscription must not wait for it), or a lease that has expired (a crashed checker)."""
    return or_(Subscription.claim_token.is_(None), Subscription.claimed_until.is_(None),
               Subscription.claimed_until < now)


def _claim_rows(session, token: str, now, ids, *conditions) -> list:
    """Mark the subscriptions among `ids` (a list) that meet `conditions` as claimed, in one UPDATE … RETURNING;
    returns them as Claimed, in id order (none, without a statement, for no ids)."""
    if not ids:
        return []
    lease = now + timedelta(seconds=current_app.config["CHECK_LEASE_SECONDS"])
    rows = session.execute(
        update(Subscription).where(Subscription.id.in_(ids), *conditions)
        .values(claim_token=token, claimed_until=lease)
        .returning(Subscription.id, Subscription.entity_type, Subscription.network_id, Subscription.network_url)
        .execution_options(synchronize_session=False)).all()
    return sorted((Claimed(*row) for row in rows), key=lambda claimed: claimed.id)


def claim(token: str, limit: int) -> list:
    """Claim up to `limit` due, active, unclaimed subscriptions, the most overdue first: a range of the
    index on (status, next_check_at), read in its order (no sort)."""
    now = utcnow()
    due = (select(Subscription.id)
           .where(Subscription.status == "active", Subscription.next_check_at <= now, _unclaimed(now))
           .order_by(Subscription.next_check_at).limit(limit).with_for_update(skip_locked=True))
    with write_transaction() as session:
        # locked by a statement of its own, as provider_limits.try_take_slot does: PostgreSQL may run an UPDATE's
        # `IN (SELECT … LIMIT … FOR UPDATE SKIP LOCKED)` more than once and claim more than `limit` rows
        return _claim_rows(session, token, now, session.scalars(due).all())


def claim_ids(token: str, subscription_ids: list) -> list:
    """Claim subscriptions by id, due or not, those that are active and unclaimed."""
    now = utcnow()
    with write_transaction() as session:
        return _claim_rows(session, token, now, sorted(subscription_ids), Subscription.status == "active",
                           _unclaimed(now))


def claim_page(token: str, limit: int, after_id: str = None) -> tuple:
    """Claim the active, unclaimed subscriptions among the next `limit` ids after `after_id` (keyset
    pagination on the primary key, for `checks run --all`): each call reads one page of the key's index
    and those rows, so a pass over the table is linear. Returns (claimed, the page's last id, None at the
    end, how many of the page's active subscriptions another checker holds)."""
    now = utcnow()
    page = select(Subscription.id).order_by(Subscription.id).limit(limit)
    if after_id is not None:
        page = page.where(Subscription.id > after_id)
    with write_transaction() as session:
        ids = session.scalars(page).all()
        claimed = _claim_rows(session, token, now, ids, _is_active(), _unclaimed(now))
        held = _active_among(session, set(ids) - {item.id for item in claimed}) if len(claimed) < len(ids) else 0
    return claimed, (ids[-1] if ids else None), held


def _is_active():
    # coalesce(): a status no index serves, so the rows are found by their ids; with `status = …`
    # SQLite (without statistics) prefers the status index and reads every active row per page.
    return func.coalesce(Subscription.status, "") == "active"


def _active_among(session, ids) -> int:
    """How many of `ids` are active: among the ids a claim of active, unclaimed rows left, those another
    checker holds."""
    return session.scalar(select(func.count()).where(Subscription.id.in_(sorted(ids)), _is_active()))


@dataclass
class _Call:
    """One upstream call: up to `batch_size` keys, each serving the subscriptions that look it up."""
    entity_type: str
    targets: dict  # key -> [Claimed]


def _plan_calls(spec, claimed: list) -> list:
    """Group the claimed subscriptions by what the provider is asked (two accounts watching one entity
    share a lookup), then cut each entity type's keys into calls of the provider's batch size."""
    by_key = {}
    for item in claimed:
        key = item.network_url if spec.lookup == "url" else item.network_id
        by_key.setdefault((item.entity_type, key), []).append(item)
    calls = []
    for entity_type in ("contact", "company"):
        keys = [key for kind, key in by_key if kind == entity_type]
        for start in range(0, len(keys), spec.batch_size):
            calls.append(_Call(entity_type, {key: by_key[(entity_type, key)]
                                             for key in keys[start:start + spec.batch_size]}))
    return calls


def _names_another_entity(claimed: Claimed, snapshot: dict) -> bool:
    """Whether an answer's `network_id` names an entity other than the one asked about (one it leaves unknown or empty
    names none): a vendor's mix-up was taken for the asked entity's new state, a position change to another person's."""
    answered = snapshot.get("network_id")
    # an empty id (white space alone, read as "") names no entity: it failed every check, as a mix-up, for good
    return not is_unknown(answered) and answered != "" and not _same_id(answered, claimed.network_id)


def _same_id(answered: str, asked: str) -> bool:
    """In their canonical forms (a stored id of an earlier release, before some rule of the form, is compared so too),
    or as they are when either has none."""
    try:
        return normalize_network_id(answered) == normalize_network_id(asked)
    except ValidationFailed:
        return answered == asked


def _outcome(claimed: Claimed, answer, credits: float) -> Outcome:
    made = {"called": True, "credits": credits}
    if isinstance(answer, dict):
        snapshot = normalize_snapshot(claimed.entity_type, answer)
        if not _names_another_entity(claimed, snapshot):
            return Outcome(claimed, snapshot=snapshot, **made)
        answer = ProviderError(f"the provider answered about {snapshot['network_id'][:100]!r}, not the entity asked")
    if isinstance(answer, EntityUnavailable):
        return Outcome(claimed, unavailable=answer.reason, **made)
    if is_provider_wide(answer):
        return Outcome(claimed, deferred=True, pause=answer, **made)
    if isinstance(answer, ProviderError):
        log.warning("provider failed on %s: %s", claimed.id, answer, extra={"subscription_id": claimed.id})
        return Outcome(claimed, error=str(answer)[:200], **made)
    return Outcome(claimed, error="the provider answered neither a snapshot nor an error", **made)


def _call(provider, call: _Call, stop: threading.Event) -> list:
    """Make one upstream call and turn every answer into outcomes; nothing raised escapes."""
    try:
        answers = fetch_many(provider, call.entity_type, list(call.targets))
        if not isinstance(answers, dict):
            raise TypeError(f"fetch_many answered a {type(answers).__name__}, not a mapping of the keys asked")
    except Exception as error:  # noqa: BLE001 - a provider bug must not stop the loop
        log.exception("provider failed on %s", ", ".join(item.id for items in call.targets.values() for item in items))
        answers = Answers({key: ProviderError(f"{type(error).__name__}: {error}") for key in call.targets})
    served = sum(len(items) for items in call.targets.values())
    share = (getattr(answers, "credits", None) or 0) / served  # a plain dict (the conformance kit's) reports none
    outcomes = []
    for key, items in call.targets.items():
        answer = answers.get(key, ProviderError("the provider gave no answer for this id"))
        try:
            outcomes += [_outcome(item, answer, share) for item in items]
        except Exception as error:  # noqa: BLE001
            log.exception("unreadable provider answer for %s", key)
            outcomes += [Outcome(item, error=f"{type(error).__name__}: {error}"[:200], called=True, credits=share)
                         for item in items]
    if any(outcome.pause is not None for outcome in outcomes):
        stop.set()
    return outcomes


def _deferred(calls: list) -> list:
    return [Outcome(item, deferred=True) for call in calls for items in call.targets.values() for item in items]


def _may_call(spec, deadline: float, pauses) -> bool:
    """A call from the shared rate budget, which refuses it while the provider is paused. Unmetered, a call asks
    whether another process has paused the provider meanwhile (a local provider, with no vendor to spare, does not):
    it asked nothing, and a scheduler went on calling a vendor that had told another one to wait. `pauses` answers
    from its last read within PAUSE_READ_SECONDS (a read per call was a query per check)."""
    if spec.rate is None:
        return spec.local or not pauses.paused()
    return provider_limits.take_call(spec.name, spec.rate, deadline, provider_limits.current_budget())


def _pause_for(name: str, answer) -> None:
    if isinstance(answer, QuotaExhausted):
        provider_limits.pause(name, answer.pause_reason, answer.resets_at, str(answer))
        return
    wait, longest = max(1.0, answer.retry_after), current_app.config["PROVIDER_MAX_RETRY_AFTER_SECONDS"]
    detail = str(answer) or "throttled"
    if wait > longest:  # in the pause's detail, so logged once, with the pause
        detail += f" (asked to wait {wait:g} s: cut to PROVIDER_MAX_RETRY_AFTER_SECONDS={longest})"
    provider_limits.pause(name, provider_limits.RATE_LIMITED, utcnow() + timedelta(seconds=min(wait, longest)),
                          detail)


class _Flight:
    """This process's calls in flight. Each holds one of the provider's concurrency slots, which every scheduler
    process shares through the database (a local provider's are this process's workers only): taken before the
    call, given back by this thread as soon as the call returns (the workers have no database session). A slot
    is leased for CHECK_LEASE_SECONDS, so the slot of a process killed mid-call frees itself."""

    def __init__(self, spec, lease: timedelta):
        self.spec = spec
        self.lease = lease
        self.holder = new_id("calls")
        self.running = {}  # future -> its slot (None: a local provider's call)
        self.reserved = None
        self.outcomes = []

    def reserve(self, deadline: float, go_on) -> bool:
        """A free worker of this process, then a free shared slot, for the next call. While every slot is held
        (perhaps by this process's own finished calls) it settles finished calls and asks again; False once
        `go_on()` turns false or the deadline would pass first."""
        self.settle(timeout=0)  # the calls that have returned give their slots back now
        while len(self.running) >= self.spec.concurrency:  # a stop is seen while they are out, not after them
            if not go_on():
                return False
            self.settle(SLOT_POLL_SECONDS)
        if self.spec.local:
            return go_on()
        while go_on():
            self.reserved = provider_limits.try_take_slot(self.spec.name, self.spec.concurrency, self.holder,
                                                          self.lease)
            if self.reserved is not None:
                return True
            if time.time() + SLOT_POLL_SECONDS >= deadline:
                return False
            if self.running:
                self.settle(SLOT_POLL_SECONDS)
            else:
                time.sleep(SLOT_POLL_SECONDS)
        return False

    def unreserve(self) -> None:
        if self.reserved is not None:
            provider_limits.give_back_slot(self.spec.name, self.reserved, self.holder)
            self.reserved = None

    def start(self, future: Future) -> None:
        self.running[future] = self.reserved
        self.reserved = None

    def settle(self, timeout: float = None) -> None:
        """Collect the calls that have returned (waiting up to `timeout` for one) and give their slots back."""
        done, _ = wait(list(self.running), timeout=timeout, return_when=FIRST_COMPLETED)
        for future in done:  # its outcomes first: a slot that cannot be given back (left to its lease) loses none
            slot = self.running.pop(future)
            try:
                self.outcomes += future.result()
            finally:
                if slot is not None:
                    provider_limits.give_back_slot(self.spec.name, slot, self.holder)


def fetch_all(provider, claimed: list, deadline: float = None, keep_going=always, release=None) -> list:
    """Ask the provider about every claimed subscription, outside any transaction: in calls of its batch
    size, at most `concurrency` in flight at once across every scheduler process, each call given a free worker,
    then a shared slot, then a call from the shared rate budget (so a call granted is made at once). Once the
    provider is paused (here or by another process), `deadline` (a time.time(); default half the lease)
    passes or `keep_going()` turns false (the scheduler is stopping), the remaining subscriptions are
    deferred: released untouched, so they keep their place (also when taking a call fails: the shared budget's
    Redis or the database not answering; the calls out were thrown away with the batch's claim and slots, held
    until their lease). When the scheduler is stopping, `release(deferred)`
    (if given) releases them at once (true when it did), before the calls in flight return: the process may be
    killed at its graceful timeout while a slow call is out, and they would have waited for the lease."""
    spec = traits(provider)
    calls = _plan_calls(spec, claimed)
    if not calls:
        return []
    pauses = provider_limits.PauseReader(spec.name)
    if pauses.paused():
        return _deferred(calls)
    lease = current_app.config["CHECK_LEASE_SECONDS"]
    deadline = deadline or time.time() + lease / 2
    stop, deferred, failure = threading.Event(), [], None
    flight = _Flight(spec, timedelta(seconds=lease))
    pool = ThreadPoolExecutor(max_workers=spec.concurrency)  # one call too: this thread watches for a stop meanwhile
    try:
        def go_on() -> bool:  # the deadline too: a call started past it could outlive the claim's lease
            return not stop.is_set() and keep_going() and time.time() < deadline

        for index, call in enumerate(calls):
            # go_on once more last: taking the slot and the budget may itself have run past the deadline
            try:
                granted = flight.reserve(deadline, go_on) and _may_call(spec, deadline, pauses) and go_on()
            except Exception as error:  # noqa: BLE001 - the budget's Redis or the database failed: the rest waits
                failure, granted = error, False
            if not granted:
                try:
                    flight.unreserve()
                except Exception as error:  # noqa: BLE001 - the slot waits for its lease; the calls made are kept
                    failure = failure or error
                deferred = _deferred(calls[index:])
                # stopping: released now, not after the calls out (not on a pause: it is written after them)
                if release and not keep_going() and not stop.is_set() and release(deferred):
                    deferred = []
                break
            flight.start(pool.submit(_call, provider, call, stop))
    finally:
        pool.shutdown(wait=True)
    while flight.running:  # each call out is collected, also when giving a slot back fails (the database)
        try:
            flight.settle()
        except Exception as error:  # noqa: BLE001 - recorded with the rest, then the round fails
            failure = failure or error
    outcomes = flight.outcomes + deferred
    pauses = [outcome.pause for outcome in outcomes if outcome.pause is not None]
    if pauses:
        try:
            _pause_for(spec.name, max(pauses, key=_pause_weight))
        except Exception as error:  # noqa: BLE001 - the calls made are recorded, then the round fails
            failure = failure or error
    if failure is not None:
        raise CallsCut(outcomes) from failure
    return outcomes


class CallsCut(Exception):
    """Taking a call failed: `outcomes` (the calls made, the rest deferred) are to be recorded, then the failure
    raised, so the round fails as before (no heartbeat while, say, the budget's Redis is down: /healthz tells)."""

    def __init__(self, outcomes: list):
        super().__init__("taking a call from the provider's budget or slots (or giving a slot back) failed")
        self.outcomes = outcomes


def _pause_weight(answer) -> tuple:
    """Of the answers that pause the provider, a spent quota or refused key first (it outlasts any throttling), then
    the longest wait asked: the first found was taken, so calls out at once that asked 5 s and 90 s paused for 5."""
    return isinstance(answer, QuotaExhausted), getattr(answer, "retry_after", None) or 0


def _record_event(built, subscription, config, event_type, data, now, summary):
    """Build the event (and its delivery); `record_outcomes` inserts the whole batch's at once."""
    event, delivery = events.build(subscription.account_id, event_type,
                                   {"entity": events.entity_data(subscription), **data},
                                   subscription=subscription, config=config, now=now)
    built.append((event, delivery))
    summary.events += 1
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
    initial = config.initial_webhook if config is not None else "latest"
    if subscription.snapshot is None and initial != "none":
        _record_event(built, subscription, config, "subscription.initial_state",
                      {"state": detection.initial_state}, now, summary)
    if initial == "all":  # the first check's activities, or those of the first answer that shows any
        for change in detection.present_activities:
            _record_event(built, subscription, config, change.type, change.data, now, summary)
    for change in detection.changes:
        _record_event(built, subscription, config, change.type, change.data, now, summary)
    if detection.changes:
        subscription.change_count += len(detection.changes)
        subscription.last_change_at = now
        summary.changes += len(detection.changes)
    if detection.snapshot != subscription.snapshot:  # an unchanged snapshot is not written back
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
    if outcome.deferred:
        summary.deferred += 1
        summary.deferred_ids.append(subscription.id)
        return False
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
        query = (select(*(table.c[name] for name in _LOADED)).where(table.c.id.in_(ids))
                 .order_by(table.c.id).with_for_update())  # in id order, as a bulk change of subscriptions
        loaded = {mapping["id"]: _Checked(mapping) for mapping in session.execute(query).mappings()}
        account_ids = {subscription.account_id for subscription in loaded.values()}
        configs = events.webhook_configs_for(session, account_ids, keep=True)
        tiers = dict(session.execute(select(Account.id, Account.tier).where(Account.id.in_(account_ids))).all())
        counts, built, written = defaultdict(Counter), [], []
        for outcome in outcomes:
            subscription = loaded.get(outcome.claimed.id)
            if subscription is None:
                summary.skipped += 1
                continue
            account_id = subscription.account_id
            # the lookup was made (and paid) for the account whether or not its claim still holds
            counts[account_id]["provider_calls"] += outcome.called
            counts[account_id]["provider_credits"] += outcome.credits
            if subscription.status != "active" or subscription.claim_token != token:
                summary.skipped += 1
                continue
            if _apply(built, subscription, outcome, configs.get(account_id), tiers[account_id], now, summary):
                counts[account_id]["checks"] += 1
            written.append(subscription)
        _write_back(session, token, written)
        events.store(session, built)
        usage.add_counts(session, {(account_id, now.date()): dict(account_counts)
                                   for account_id, account_counts in counts.items()})
    if summary.deliveries_queued:
        events.notify_new_deliveries()
    return summary


def new_claim_token() -> str:
    return new_id("claim")


def run_claimed(claimed: list, token: str, keep_going=always) -> Summary:
    """Fetch and record a claimed batch; what was not fetched (stopping, half the lease gone, the provider
    paused) is recorded as deferred: released untouched, so a claim never outlives its lease."""
    released = []

    def release(deferred) -> bool:
        try:
            released.append(record_outcomes(token, deferred))
        except Exception:  # recorded with the rest of the batch instead
            log.exception("releasing %s deferred checks failed", len(deferred))
            return False
        return True
    provider = current_provider()
    try:
        outcomes, failure = fetch_all(provider, claimed, keep_going=keep_going, release=release), None
    except CallsCut as cut:
        outcomes, failure = cut.outcomes, cut.__cause__
    _share_credits(provider)
    try:
        summary = Summary.merged([*released, record_outcomes(token, outcomes)])
    except Exception:  # (one alone too: the checks released early may have left it by itself)
        log.exception("recording a batch of %s checks failed; recording them one at a time", len(outcomes))
        summary = Summary.merged([*released, *(_record_alone(token, outcome) for outcome in outcomes)])
    if failure is not None:  # recorded and released: now the round fails, as it did when the batch was lost
        failure.recorded = summary  # what was recorded, for /metrics (`recorded_before`)
        raise failure
    return summary


def recorded_before(error: Exception):
    """The Summary of what a round recorded before it raised `error` (`run_claimed`: taking a call failed); None for
    any other error."""
    recorded = getattr(error, "recorded", None)
    return recorded if isinstance(recorded, Summary) else None


def _share_credits(provider) -> None:
    """The balance the vendor reported to this batch's calls, written where every process reads it (`/healthz` of
    a web process whose checks run in `scheduler run`), when it changed; a failure to write it is only logged."""
    name, remaining = traits(provider).name, getattr(provider, "credits_remaining", None)
    shared = current_app.extensions.setdefault("provider_credits_shared", {})  # name -> the balance last written
    if remaining is None or shared.get(name) == remaining:
        return
    try:
        provider_limits.note_credits(name, remaining)
    except Exception:  # noqa: BLE001 - the batch's outcomes are what must be recorded
        log.exception("the provider's credit balance could not be written")
        return
    shared[name] = remaining


def _record_alone(token: str, outcome: Outcome) -> Summary:
    """One check's outcome in a transaction of its own (contract §7: each check is one); one that cannot be
    written is recorded as a failed check, so it neither holds up the others nor comes back every lease."""
    try:
        return record_outcomes(token, [outcome])
    except Exception as error:
        log.exception("the check of %s could not be recorded; it counts as failed", outcome.claimed.id,
                      extra={"subscription_id": outcome.claimed.id})
        return record_outcomes(token, [Outcome(outcome.claimed, error=f"not recorded: {type(error).__name__}",
                                               called=outcome.called, credits=outcome.credits)])


def provider_paused() -> bool:
    return provider_limits.current_pause(traits(current_provider()).name) is not None


def due_unclaimed(due_by) -> int:
    """How many active subscriptions were due by `due_by` and are held by no checker now (at the end of `checks run`:
    the checks it could not make; `due_by` is when it last looked for due ones, so one that fell due after its last
    claim found none is not counted: a run over a busy table exited 1 now and then, the provider blamed)."""
    now = utcnow()
    count = db.session.scalar(select(func.count()).where(Subscription.status == "active",
                                                         Subscription.next_check_at <= due_by, _unclaimed(now)))
    end_read_transaction()
    return count


def due_batch_size(seconds: float) -> int:
    """How many due subscriptions to claim: none while the provider is paused, and no more than the rate
    budget lets one process check within `seconds` (claims are not held waiting for budget)."""
    spec = traits(current_provider())
    if provider_paused():
        return 0
    budgeted = provider_limits.calls_per_claim(spec.rate, spec.batch_size, seconds)
    return min(current_app.config["CHECK_BATCH_SIZE"], budgeted or current_app.config["CHECK_BATCH_SIZE"])
