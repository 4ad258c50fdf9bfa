"""The shared rate budget, concurrency slots and provider pauses on PostgreSQL, with threads (each with its
own session) racing for them.

Runs when TEST_POSTGRES_URL names a database it may wipe (see tests/test_postgres.py)."""
import threading
import time
from datetime import timedelta

import limits

from app.common import utcnow
from app.extensions import db
from app.providers.coresignal import CoresignalProvider
from app.services import checks, provider_limits
from tests.fake_vendors import FakeCoresignal
from tests.test_postgres import pg_app, pytestmark  # noqa: F401 - the fixture and the skip marker


def run_threads(count, target):
    threads = [threading.Thread(target=target, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def test_racing_takers_never_get_more_than_a_slice_allows(pg_app):  # noqa: F811
    cut = provider_limits.slicing(limits.parse("300/minute"))
    granted, barrier = [], threading.Barrier(6)

    def taker(_number):
        with pg_app.app_context():
            barrier.wait()
            for _ in range(20):
                if provider_limits.try_take_call("pg", cut, 1_000_000.0):
                    granted.append(1)
            db.session.remove()

    run_threads(6, taker)
    assert len(granted) == cut.calls


def test_pause_lengthens_lifts_and_resumes_on_postgres(pg_app):  # noqa: F811
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")
    provider_limits.pause("pg", provider_limits.QUOTA_EXHAUSTED, None, "402")
    assert provider_limits.current_pause("pg").paused_reason == "quota_exhausted"
    assert provider_limits.resume("pg") is True
    assert provider_limits.current_pause("pg") is None
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() - timedelta(seconds=1), "429")
    assert provider_limits.current_pause("pg") is None  # its time has come: lifted


def test_racing_checkers_never_have_more_calls_in_flight_than_the_concurrency(pg_app):  # noqa: F811
    vendor = FakeCoresignal(delay=0.05)
    provider = CoresignalProvider(vendor.api_key, vendor.url, timeout=5)
    provider.concurrency = 2
    answers, barrier = [], threading.Barrier(3)

    def checker(number):
        with pg_app.app_context():
            people = [checks.Claimed(f"sub-{number}-{item}", "contact", f"p{number}-{item}") for item in range(8)]
            for item in people:
                vendor.person(item.network_id)
            barrier.wait()
            answers.extend(checks.fetch_all(provider, people, deadline=time.time() + 30))
            db.session.remove()

    try:
        run_threads(3, checker)
    finally:
        vendor.close()
    assert len(answers) == 24 and all(outcome.snapshot is not None for outcome in answers)
    assert vendor.most_in_flight == 2  # three checkers with two workers each: six without shared slots


def test_a_slot_is_never_given_twice_and_a_dead_holders_slot_returns_after_its_lease(pg_app, monkeypatch):  # noqa: F811
    lease, taken, barrier = timedelta(minutes=2), [], threading.Barrier(5)

    def taker(number):
        with pg_app.app_context():
            barrier.wait()
            slot = provider_limits.try_take_slot("pg", 3, f"holder-{number}", lease)
            if slot is not None:
                taken.append(slot)
            db.session.remove()

    run_threads(5, taker)
    assert sorted(taken) == [0, 1, 2]  # five takers, three slots, each given once
    assert provider_limits.try_take_slot("pg", 3, "late", lease) is None
    later = utcnow() + lease + timedelta(seconds=1)
    monkeypatch.setattr(provider_limits, "utcnow", lambda: later)  # the holders died: their leases ran out
    assert provider_limits.try_take_slot("pg", 3, "late", lease) == 0
