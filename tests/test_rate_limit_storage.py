"""The memory:// rate-limit storage counts like limits' own but sweeps expired counters at most once a
second, instead of starting a timer thread on nearly every request (issue 12)."""
import time

import limits.storage.memory
from limits import RateLimitItemPerSecond
from limits.strategies import FixedWindowRateLimiter

from app.extensions import limiter
from app.rate_limit_storage import SweepingMemoryStorage


class CountingTimer(limits.storage.memory.threading.Timer):
    started = 0

    def start(self):
        CountingTimer.started += 1
        super().start()


def test_the_app_limits_with_the_sweeping_storage(app):
    assert isinstance(limiter.storage, SweepingMemoryStorage)


def test_counts_and_refuses_like_the_memory_storage():
    rate_limiter = FixedWindowRateLimiter(SweepingMemoryStorage("memory://"))
    item = RateLimitItemPerSecond(3, 60)
    assert [rate_limiter.hit(item, "key:a") for _ in range(4)] == [True, True, True, False]
    assert rate_limiter.hit(item, "key:b")
    assert rate_limiter.get_window_stats(item, "key:a").remaining == 0


def test_many_hits_start_at_most_one_sweep_a_second(monkeypatch):
    monkeypatch.setattr(limits.storage.memory.threading, "Timer", CountingTimer)
    storage = SweepingMemoryStorage("memory://")
    CountingTimer.started = 0
    for n in range(200):
        storage.incr(f"key:{n % 5}", 60)
        time.sleep(0.001)  # longer than nothing, so limits' own storage would start a new timer each time
    assert CountingTimer.started <= 2


def test_expired_counters_are_still_swept():
    storage = SweepingMemoryStorage("memory://")
    storage.incr("key:gone", 0.05)
    time.sleep(1.1)
    storage.incr("key:other", 60)  # a hit after a second schedules the sweep
    deadline = time.monotonic() + 5
    while "key:gone" in storage.storage and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "key:gone" not in storage.storage
    assert storage.get("key:other") == 1
