"""What every scheduler process must agree on about the provider: its rate budget, its concurrency slots
and its pauses.

All live in the database, so two schedulers (or twenty) share one budget, one set of slots and one pause;
the budget can live in Redis instead (`PROVIDER_RATE_LIMIT_STORAGE_URI`).

The budget is counted in slices of the vendor's period lengthened by a margin M (a tenth of P, at most
half a second): a limit of L calls per period P becomes L // (k+1) calls per slice of (P+M)/k. Any (P+M)-long
stretch of time overlaps at most k+1 slices, so it holds at most L calls taken; and a call reaches the vendor a
little after it was taken (scheduling, the request on the wire), so a window the vendor counts (fixed or sliding,
P long) holds calls taken up to M before it: at most L while that delay stays under M. k wastes the least.
"""
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

import limits.errors
import limits.storage
import limits.strategies
from flask import current_app
from sqlalchemy import bindparam, delete, func, or_, select, type_coerce, update
from sqlalchemy.types import NullType

from app.common import utcnow
from app.config import ConfigError, limits_refusal, without_password
from app.database import PreparedSelect, end_read_transaction, upsert, write_transaction
from app.models import ProviderBudget, ProviderSlot, ProviderState
from app.rate_limit_storage import client_timeouts

log = logging.getLogger(__name__)

MAX_SLICES = 10
MAX_ARRIVAL_DELAY_SECONDS = 0.5
RATE_LIMITED = "rate_limited"
QUOTA_EXHAUSTED = "quota_exhausted"
KEEP_BUDGET_ROWS = timedelta(hours=1)
PAUSE_READ_SECONDS = 1.0  # an unmetered provider's calls see a pause written elsewhere within this


@dataclass(frozen=True)
class Slicing:
    seconds: float
    calls: int


def slicing(rate) -> Slicing:
    """The slice length and the calls allowed per slice for a `limits` rate."""
    period, amount = rate.get_expiry(), rate.amount
    period += min(period / 10, MAX_ARRIVAL_DELAY_SECONDS)  # the margin M of the module's docstring
    if amount < 2:  # one call per period: slices cannot help; a fixed window of the period itself
        return Slicing(period, amount)
    slices = max(range(1, MAX_SLICES + 1), key=lambda k: (k * (amount // (k + 1)), -k))
    return Slicing(period / slices, amount // (slices + 1))


def _slice_start(now: float, cut: Slicing) -> datetime:
    start = math.floor(now / cut.seconds) * cut.seconds
    return datetime.fromtimestamp(start, timezone.utc).replace(tzinfo=None)


def try_take_call(provider: str, cut: Slicing, now: float) -> bool:
    """Take one call from the current slice's budget, atomically across processes."""
    start = _slice_start(now, cut)
    with write_transaction() as session:
        inserted = session.execute(upsert(session, ProviderBudget)
                                   .values(provider=provider, slice_start=start, used=0)
                                   .on_conflict_do_nothing()).rowcount
        if inserted:  # a new slice: forget the old ones
            session.execute(delete(ProviderBudget).where(ProviderBudget.provider == provider,
                                                         ProviderBudget.slice_start < start - KEEP_BUDGET_ROWS))
        return session.execute(update(ProviderBudget)
                               .where(ProviderBudget.provider == provider, ProviderBudget.slice_start == start,
                                      ProviderBudget.used < cut.calls)
                               .values(used=ProviderBudget.used + 1)).rowcount == 1


class DatabaseBudget:
    """The budget in `provider_budgets` (the default): sliced as the module says."""

    def __init__(self, clock=time.time):
        self.clock = clock

    def try_take(self, provider: str, rate):
        """(taken, when to try again)."""
        cut, now = slicing(rate), self.clock()
        if try_take_call(provider, cut, now):
            return True, now
        return False, (math.floor(now / cut.seconds) + 1) * cut.seconds


class MovingWindowBudget:
    """The budget in a `limits` storage (`PROVIDER_RATE_LIMIT_STORAGE_URI`, e.g. redis://…): a true moving
    window, so all of the limit is usable."""

    def __init__(self, storage_uri: str):
        try:
            storage = limits.storage.storage_from_string(storage_uri, **client_timeouts(storage_uri))
        except limits.errors.ConfigurationError as error:  # its message echoed a password holding `@` in the log
            raise ConfigError(f"PROVIDER_RATE_LIMIT_STORAGE_URI={without_password(storage_uri)!r} cannot be used: "
                              f"{limits_refusal(storage_uri, error)}") from None
        self.limiter = limits.strategies.MovingWindowRateLimiter(storage)

    def try_take(self, provider: str, rate):
        if self.limiter.hit(rate, "provider-budget", provider):
            return True, time.time()
        return False, self.limiter.get_window_stats(rate, "provider-budget", provider).reset_time


def current_budget():
    """The app's budget: in `PROVIDER_RATE_LIMIT_STORAGE_URI` when set (one storage client per app), else in
    the database."""
    storage_uri = current_app.config.get("PROVIDER_RATE_LIMIT_STORAGE_URI")
    if not storage_uri:
        return DatabaseBudget()
    if "provider_budget" not in current_app.extensions:
        current_app.extensions["provider_budget"] = MovingWindowBudget(storage_uri)
    return current_app.extensions["provider_budget"]


def take_call(provider: str, rate, deadline: float, budget=None, clock=time.time, sleep=time.sleep) -> bool:
    """Wait for a call in the shared budget; False when the provider is paused or `deadline` (a `clock`
    time) comes first."""
    budget = budget or DatabaseBudget(clock)
    while True:
        if current_pause(provider) is not None:
            return False
        taken, retry_at = budget.try_take(provider, rate)
        if taken:
            return True
        if retry_at >= deadline:
            return False
        sleep(max(0.0, retry_at - clock()))


def calls_per_claim(rate, batch_size: int, seconds: float) -> Optional[int]:
    """How many subscriptions one process can check within `seconds` at this rate (None: unmetered)."""
    if rate is None:
        return None
    cut = slicing(rate)
    return max(1, cut.calls * max(1, int(seconds // cut.seconds))) * batch_size


# --- concurrency slots ----------------------------------------------------------------------------------

def try_take_slot(provider: str, concurrency: int, holder: str, lease: timedelta) -> Optional[int]:
    """Take a free slot among the provider's first `concurrency` (one whose lease ran out is free: its holder
    died mid-call) for `holder`, atomically across processes; None when all are held. The row lock keeps two
    takers off one slot on PostgreSQL; SQLite's immediate transactions take turns."""
    now = utcnow()
    with write_transaction() as session:
        existing = session.scalar(select(func.count()).where(ProviderSlot.provider == provider,
                                                             ProviderSlot.slot < concurrency))
        if existing < concurrency:  # first use, or a larger concurrency than before
            session.execute(upsert(session, ProviderSlot)
                            .values([{"provider": provider, "slot": number} for number in range(concurrency)])
                            .on_conflict_do_nothing())
        # Locked by its own statement, then updated: an UPDATE … WHERE slot IN (SELECT … LIMIT 1 FOR UPDATE SKIP
        # LOCKED) let PostgreSQL run the subquery again under concurrent takers and update two slots at once.
        slot = session.scalar(select(ProviderSlot.slot)
                              .where(ProviderSlot.provider == provider, ProviderSlot.slot < concurrency,
                                     or_(ProviderSlot.holder.is_(None), ProviderSlot.leased_until <= now))
                              .order_by(ProviderSlot.slot).limit(1).with_for_update(skip_locked=True))
        if slot is None:
            return None
        session.execute(update(ProviderSlot).where(ProviderSlot.provider == provider, ProviderSlot.slot == slot)
                        .values(holder=holder, leased_until=now + lease)
                        .execution_options(synchronize_session=False))
        return slot


def give_back_slot(provider: str, slot: int, holder: str) -> None:
    """Free a slot after its call; a slot whose lease ran out and was taken by another holder stays theirs."""
    with write_transaction() as session:
        session.execute(update(ProviderSlot)
                        .where(ProviderSlot.provider == provider, ProviderSlot.slot == slot,
                               ProviderSlot.holder == holder)
                        .values(holder=None, leased_until=None)
                        .execution_options(synchronize_session=False))


# --- pauses ---------------------------------------------------------------------------------------------

def _is_active(state, now) -> bool:
    return state is not None and state.paused_reason is not None and (
        state.paused_until is None or state.paused_until > now)


def _outlasts(until: Optional[datetime], current: Optional[datetime]) -> bool:
    """Whether a pause until `until` ends after one until `current` (None: never ends)."""
    return current is not None and (until is None or until > current)


def pause(provider: str, reason: str, until: Optional[datetime], detail: str) -> None:
    """Pause `provider` for every process until `until` (None: until an operator resumes). An ongoing
    pause is only ever lengthened; a new one is logged once."""
    now = utcnow()
    with write_transaction() as session:
        session.execute(upsert(session, ProviderState).values(provider=provider).on_conflict_do_nothing())
        state = session.execute(select(ProviderState).where(ProviderState.provider == provider)
                                .with_for_update().execution_options(populate_existing=True)).scalar_one()
        ongoing = _is_active(state, now)
        if ongoing and state.paused_reason != RATE_LIMITED and reason == RATE_LIMITED:
            return  # a quota or key problem outlasts any throttling
        if ongoing and reason == state.paused_reason:
            if not _outlasts(until, state.paused_until):
                return  # the ongoing pause lasts as long: its end and the detail that explains it stand
        else:
            state.paused_at = now
        state.paused_reason, state.paused_until, state.detail = reason, until, detail[:200]
    if not ongoing:
        log.warning("provider %s paused (%s) until %s: %s", provider, reason,
                    until.isoformat() + "Z" if until else "an operator resumes it", detail)


# Prepared once: /healthz reads it on every call. (The balance's Float type cannot make its result processor
# without the driver's type code, which a prepared select does not have; both drivers give a float as it is.)
_STATE = PreparedSelect(select(ProviderState.paused_reason, ProviderState.paused_at, ProviderState.paused_until,
                               ProviderState.detail,
                               type_coerce(ProviderState.credits_remaining, NullType()).label("credits_remaining"))
                        .where(ProviderState.provider == bindparam("provider")))


def current_pause(provider: str):
    """The ongoing pause (a row: paused_reason, paused_at, paused_until, detail), or None. A pause whose
    time has come is lifted here (and logged once)."""
    return pause_and_credits(provider)[0]


def pause_and_credits(provider: str) -> tuple:
    """(the ongoing pause as `current_pause` gives it, the balance the vendor last reported to any process: None
    before it ever did), in one read: /healthz read the row twice, the second through the ORM, a third of its CPU."""
    now = utcnow()
    state = _STATE.first({"provider": provider})
    end_read_transaction()
    if state is None:
        return None, None
    if state.paused_reason is None:
        return None, state.credits_remaining
    if _is_active(state, now):
        return state, state.credits_remaining
    with write_transaction() as session:
        lifted = session.execute(update(ProviderState).where(ProviderState.provider == provider,
                                                             ProviderState.paused_reason.is_not(None),
                                                             ProviderState.paused_until <= now)
                                 .values(paused_reason=None, paused_until=None, paused_at=None, detail=None)).rowcount
    if lifted:
        log.warning("provider %s resumed: its pause (%s) has ended", provider, state.paused_reason)
    return None, state.credits_remaining


class PauseReader:
    """Whether the provider is paused, read from the database at most once per PAUSE_READ_SECONDS: a batch of an
    unmetered provider asked before each call, one query per check. A pause another process writes stops the
    batch's calls within that bound (one this process meets stops them at once: fetch_all's stop)."""

    def __init__(self, provider: str):
        self.provider = provider
        self.read_at, self.was_paused = None, False

    def paused(self) -> bool:
        now = time.monotonic()
        if self.read_at is None or now - self.read_at >= PAUSE_READ_SECONDS:
            self.read_at, self.was_paused = now, current_pause(self.provider) is not None
        return self.was_paused


def note_credits(provider: str, remaining: float) -> None:
    """The vendor's balance as a call just reported it, for every process to show."""
    reported = {"credits_remaining": remaining, "credits_reported_at": utcnow()}
    with write_transaction() as session:
        session.execute(upsert(session, ProviderState).values(provider=provider, **reported)
                        .on_conflict_do_update(index_elements=["provider"], set_=reported))


def resume(provider: str) -> bool:
    """An operator lifts the pause now; False when there was none."""
    with write_transaction() as session:
        lifted = session.execute(update(ProviderState).where(ProviderState.provider == provider,
                                                             ProviderState.paused_reason.is_not(None))
                                 .values(paused_reason=None, paused_until=None, paused_at=None, detail=None)).rowcount
    if lifted:
        log.warning("provider %s resumed by an operator", provider)
    return bool(lifted)
