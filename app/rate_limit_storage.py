"""`memory://` rate-limit storage that does not start a thread per request.

limits' MemoryStorage starts a 10 ms timer thread to sweep expired counters whenever the previous timer
has ended: under steady traffic, a thread start (and a wait for it) on almost every request, one of the
largest costs of a request. Expired counters are already dropped when read (`MemoryStorage.get`), so the
sweep only bounds the memory of keys nobody asks about again: once a second is plenty. Registered for the
`memory` scheme when imported (limits keys storages by scheme), before the limiter is bound to the app."""
import time

from limits.storage import MemoryStorage

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
