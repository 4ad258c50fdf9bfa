"""The shared rate budget, concurrency slots and provider pauses on each database, with threads (each with its
own session) racing for them."""
import itertools
import time
from datetime import timedelta

import limits
from sqlalchemy import func, select

from app.common import utcnow
from app.extensions import db
from app.models import ProviderSlot
from app.providers.coresignal import CoresignalProvider
from app.services import checks, provider_limits
from tests.fake_vendors import FakeCoresignal
from tests.test_concurrency import race


def test_racing_takers_never_get_more_than_a_slice_allows(app):
    cut = provider_limits.slicing(limits.parse("300/minute"))
    granted = []

    def take_twenty():
        for _ in range(20):
            if provider_limits.try_take_call("pg", cut, 1_000_000.0):
                granted.append(1)

    race(app, 6, take_twenty)
    assert len(granted) == cut.calls


def test_pause_lengthens_lifts_and_resumes(app):
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")
    provider_limits.pause("pg", provider_limits.QUOTA_EXHAUSTED, None, "402")
    assert provider_limits.current_pause("pg").paused_reason == "quota_exhausted"
    assert provider_limits.resume("pg") is True
    assert provider_limits.current_pause("pg") is None
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() - timedelta(seconds=1), "429")
    assert provider_limits.current_pause("pg") is None  # its time has come: lifted


def test_racing_checkers_never_have_more_calls_in_flight_than_the_concurrency(app):
    vendor = FakeCoresignal(delay=0.05)
    provider = CoresignalProvider(vendor.api_key, vendor.url, timeout=5)
    provider.concurrency = 2
    answers, numbers = [], itertools.count()
    checkers = [[checks.Claimed(f"sub-{number}-{item}", "contact", f"p{number}-{item}") for item in range(8)]
                for number in range(3)]
    for item in itertools.chain(*checkers):
        vendor.person(item.network_id)

    def check_mine():
        answers.extend(checks.fetch_all(provider, checkers[next(numbers)], deadline=time.time() + 30))

    try:
        race(app, 3, check_mine)
    finally:
        vendor.close()
    assert len(answers) == 24 and all(outcome.snapshot is not None for outcome in answers)
    assert vendor.most_in_flight == 2  # three checkers with two workers each: six without shared slots


def test_a_slot_is_never_given_twice_and_a_dead_holders_slot_returns_after_its_lease(app, monkeypatch):
    lease, taken, numbers = timedelta(minutes=2), [], itertools.count()

    def take_one():
        slot = provider_limits.try_take_slot("pg", 3, f"holder-{next(numbers)}", lease)
        if slot is not None:
            taken.append(slot)

    race(app, 5, take_one)
    assert sorted(taken) == [0, 1, 2]  # five takers, three slots, each given once
    assert provider_limits.try_take_slot("pg", 3, "late", lease) is None
    later = utcnow() + lease + timedelta(seconds=1)
    monkeypatch.setattr(provider_limits, "utcnow", lambda: later)  # the holders died: their leases ran out
    assert provider_limits.try_take_slot("pg", 3, "late", lease) == 0


def test_takers_churning_slots_each_hold_one_slot_at_most(app):
    # Taking and giving back in a loop: an UPDATE … WHERE slot IN (SELECT … LIMIT 1 FOR UPDATE SKIP LOCKED)
    # sometimes handed one taker two slots on PostgreSQL (MultipleResultsFound, or a vendor over its limit).
    lease, numbers, held_twice, errors = timedelta(minutes=2), itertools.count(), [], []

    def churn():
        try:
            take_and_give_back()
        except Exception as error:  # noqa: BLE001 - a thread's exception would only be printed
            errors.append(repr(error))

    def take_and_give_back():
        for _ in range(25):
            holder = f"holder-{next(numbers)}"
            slot = provider_limits.try_take_slot("churn", 2, holder, lease)
            if slot is None:
                continue
            held = db.session.scalar(select(func.count()).where(ProviderSlot.provider == "churn",
                                                                ProviderSlot.holder == holder))
            db.session.rollback()
            if held != 1:
                held_twice.append((holder, held))
            provider_limits.give_back_slot("churn", slot, holder)

    race(app, 6, churn)
    assert errors == [] and held_twice == []
    assert db.session.scalar(select(func.count()).where(ProviderSlot.provider == "churn",
                                                        ProviderSlot.holder.is_not(None))) == 0


def test_a_shorter_pause_of_the_same_reason_keeps_the_longer_ones_end_and_detail(app):
    later, sooner = utcnow() + timedelta(minutes=30), utcnow() + timedelta(minutes=1)
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, later, "429: Retry-After 1800 s")
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, sooner, "429: Retry-After 60 s")
    pause = provider_limits.current_pause("pg")
    assert (pause.paused_until, pause.detail) == (later, "429: Retry-After 1800 s")
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, None, "429: no Retry-After")  # lengthened: its own
    assert (provider_limits.current_pause("pg").paused_until, provider_limits.current_pause("pg").detail) == (
        None, "429: no Retry-After")
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, later, "429: Retry-After 1800 s")
    assert provider_limits.current_pause("pg").detail == "429: no Retry-After"  # an endless pause stands
