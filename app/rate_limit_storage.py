"""`memory://` rate-limit storage that does not start a thread per request.

limits' MemoryStorage starts a 10 ms timer thread to sweep expired counters whenever the previous timer
has ended: under steady traffic, a thread start (and a wait for it) on almost every request, one of the
largest costs of a request. Expired counters are already dropped when read (`MemoryStorage.get`), so the
sweep only bounds the memory of keys nobody asks about again: once a second is plenty. Registered for the
`memory` scheme when imported (limits keys storages by scheme), before the limiter is bound to the app.

And the fixed window the limiter counts in (`COUNTED_FIXED_WINDOW`, registered the same way), and the timeouts of a
Redis (or Valkey) client, for the API's limits and the provider's budget alike."""
import time
from urllib.parse import urlsplit

from flask import g, has_app_context
from limits.storage import MemoryStorage
from limits.strategies import STRATEGIES, FixedWindowRateLimiter

SWEEP_EVERY_SECONDS = 1.0


class SweepingMemoryStorage(MemoryStorage):
    STORAGE_SCHEME = ["memory"]

    def __init__(self, *args, **kwargs):
        self._next_sweep = 0.0
        super().__init__(*args, **kwargs)

    def _MemoryStorage__schedule_expiry(self) -> None:  # the private hook incr/decr/acquire call
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY_SECONDS
            super()._MemoryStorage__schedule_expiry()


# A Redis that stops answering (a frozen server, a partition dropping packets) held every request that counted a
# limit for as long as it lasted with redis-py 5, which waits without end by default (setup.cfg takes redis>=5), and 5
# s a request with redis-py 8 (scale-out walk); a healthy one answers in well under a millisecond.
CLIENT_TIMEOUT_SECONDS = 1.0
_CLIENT_SCHEMES = ("redis", "rediss", "valkey", "valkeys")


def client_timeouts(storage_uri: str) -> dict:
    """The connect and read timeouts for the client of a Redis or Valkey storage URI (any of its forms: +sentinel,
    +cluster); none for another storage, whose client takes no such options."""
    if urlsplit(storage_uri).scheme.split("+")[0] not in _CLIENT_SCHEMES:
        return {}
    return {"socket_timeout": CLIENT_TIMEOUT_SECONDS, "socket_connect_timeout": CLIENT_TIMEOUT_SECONDS}


class CountedFixedWindow(FixedWindowRateLimiter):
    """limits' fixed window, keeping in the request's `g` the count each hit brought its window to: a request's
    X-RateLimit-Remaining is then what its own hit left (`app.api.limits`). It was read from the window as the answer
    was written, after the hits of the key's requests answered meanwhile in every process: five requests at once all
    said 0, and 100 over five threads gave 57 distinct values (scale-out walk)."""

    def hit(self, item, *identifiers, cost: int = 1) -> bool:
        key = item.key_for(*identifiers)
        count = self.storage.incr(key, item.get_expiry(), amount=cost)
        if has_app_context():
            g.setdefault("rate_limit_counts", {})[key] = count
        return count <= item.amount


COUNTED_FIXED_WINDOW = "counted-fixed-window"
STRATEGIES[COUNTED_FIXED_WINDOW] = CountedFixedWindow


def count_after_hit(item, identifiers):
    """The count this request's hit brought the window of `item` and `identifiers` to; None when it made none."""
    return g.get("rate_limit_counts", {}).get(item.key_for(*identifiers))
