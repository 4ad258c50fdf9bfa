"""The memory:// rate-limit storage counts like limits' own but sweeps expired counters at most once a
second, instead of starting a timer thread on nearly every request (issue 12)."""
import socket
import time

import limits.storage.memory
import pytest
from limits import RateLimitItemPerSecond, parse
from limits.errors import StorageError
from limits.strategies import FixedWindowRateLimiter

from app.api import limits as limits_module
from app.extensions import limiter
from app.rate_limit_storage import SweepingMemoryStorage
from app.services import provider_limits


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


@pytest.mark.parametrize("app_config", [{"RATELIMIT_STORAGE_URI": f"redis://127.0.0.1:{closed_port()}"}])
def test_a_shared_storage_that_is_down_falls_back_to_counting_in_memory(app, alice, anon, app_config):
    """With Redis down every keyed request was a 500 (an HTTP_ERROR, not the contract's INTERNAL_ERROR) while
    /healthz said ok (walk). Now each process counts in its own memory until the storage answers again."""
    first = alice.get("/account")
    assert first.status_code == 200 and first.headers["X-RateLimit-Limit"] == "100"
    assert alice.get("/account").headers["X-RateLimit-Remaining"] == str(int(first.headers["X-RateLimit-Remaining"])
                                                                         - 1)
    assert anon.get("/account").json["error"] == "UNAUTHORIZED"
    assert alice.get("/no-such-route").json["error"] == "NOT_FOUND"
    for _ in range(100):
        last = alice.get("/account")
    assert last.status_code == 429 and last.json["error"] == "RATE_LIMIT_EXCEEDED"  # still limited


def test_requests_without_a_key_stay_limited_while_the_storage_is_down(app, anon, monkeypatch, request):
    """They were let through uncounted until a keyed request switched flask-limiter to its fallback (review):
    guessing keys must stay slow."""
    def unreachable(*_args, **_kwargs):
        raise StorageError(ConnectionError("refused"))
    monkeypatch.setattr(limiter.limiter, "test", unreachable)
    monkeypatch.setattr(limiter.limiter, "hit", unreachable)
    monkeypatch.setitem(app.config, "RATELIMIT_UNAUTHENTICATED", 3)
    limits_module._local_limiter.cache_clear()  # a count of this process's own, empty for each run
    request.addfinalizer(limits_module._local_limiter.cache_clear)
    request.addfinalizer(limits_module._storage_down.clear)
    answers = [anon.get("/account").json["error"] for _ in range(4)]
    assert answers == ["UNAUTHORIZED"] * 3 + ["RATE_LIMIT_EXCEEDED"]


@pytest.fixture
def silent_redis():
    """A Redis address that takes connections and never answers: a frozen server (its kernel still accepts them)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}"


class TestARedisThatDoesNotAnswer:
    """Its client waited without end with redis-py 5 (no timeout of its own: every request that counted a limit hung,
    and every serving thread with it) and 5 s a request with redis-py 8 (scale-out walk). Each wait now ends after
    a second (CLIENT_TIMEOUT_SECONDS): the API then counts in this process's memory, as when Redis is down."""

    @pytest.fixture
    def app_config(self, silent_redis):
        return {"RATELIMIT_STORAGE_URI": silent_redis, "PROVIDER_RATE_LIMIT_STORAGE_URI": silent_redis}

    def test_a_keyed_request_is_answered_and_counted_in_memory(self, app, alice):
        began = time.monotonic()
        answer = alice.get("/account")
        assert answer.status_code == 200 and answer.headers["X-RateLimit-Remaining"] == "99"
        assert time.monotonic() - began < 4  # 5 s with redis-py 8's own timeout

    def test_the_provider_budget_gives_up_on_it(self, app):
        began = time.monotonic()
        with pytest.raises(Exception, match="Timeout"):
            provider_limits.current_budget().try_take("simulated", parse("10/minute"))
        assert time.monotonic() - began < 4


def test_a_request_that_fails_after_another_switched_to_memory_is_counted_there(app, alice, monkeypatch):
    """Redis paused: the requests waiting on it when the first one gave up (and switched flask-limiter to its
    in-memory fallback) had their error re-raised, each a 500 (scale-out walk, `CLIENT PAUSE`). Here the storage
    call fails as another thread has just switched: the request is counted in memory and answered."""
    monkeypatch.setattr(limiter, "_storage_dead", False)

    def paused(*_args, **_kwargs):
        limiter._storage_dead = True  # the other request, which failed first, switched meanwhile
        raise StorageError(TimeoutError("Timeout reading from socket"))
    monkeypatch.setattr(limiter._limiter, "hit", paused)
    monkeypatch.setattr(limiter._storage, "check", lambda: False)  # nor does it answer flask-limiter's probe
    answer = alice.get("/account")
    assert answer.status_code == 200, answer.json
    assert limiter._storage_dead
