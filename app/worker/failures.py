"""A scheduler loop's failure (or the API's, `log_outage`), logged: a database that cannot be used is one ERROR line a
minute for each loop and reason while the outage lasts, not a traceback every round (operability walk: a dropped
database wrote 15 tracebacks in 10 s, about 5,000 an hour a process, each many lines in a text log); a new reason is
said at once, and the first round that uses the database again says the outage ended, once a minute at most (a
database that fails every other round, e.g. too many clients, would otherwise write two lines a round: review). Any
other failure keeps its traceback every time."""
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from app.database import cannot_serve

OUTAGE_LINE_SECONDS = 60


@dataclass
class _Loop:
    down_since: Optional[float] = None  # monotonic time the outage began; None while the loop works
    said_at: dict = field(default_factory=dict)  # reason -> monotonic time of its last line
    recovery_said_at: float = -math.inf


_loops = {}  # what failed -> _Loop
_lock = threading.Lock()


def log_loop_failure(log, message: str, *args) -> None:
    """Call from the `except` block of the failure (`message` % `args` names what failed)."""
    if not log_outage(log, sys.exc_info()[1], message, *args):
        log.exception(message, *args)


def log_outage(log, error: Exception, message: str, *args) -> bool:
    """Whether `error` is the database being unusable (`cannot_serve`); if so it is said as above, once a minute for
    `message` % `args` and the reason."""
    problem = cannot_serve(error)
    if problem is None:
        return False
    now = time.monotonic()
    with _lock:
        loop = _loops.setdefault(message % args, _Loop())
        if loop.down_since is None:
            loop.down_since = now
        if now - loop.said_at.get(problem, -math.inf) < OUTAGE_LINE_SECONDS:
            return True
        loop.said_at[problem] = now
    log.error(message + ": %s (said once a minute while it lasts)", *args, problem)
    return True


def log_loop_recovery(log, message: str, *args) -> None:
    """Call when a round of the loop used the database and worked (`message` and `args` as its `log_loop_failure`):
    one line when an outage was logged, so that an operator reading the log knows it ended."""
    if not _loops:
        return
    now = time.monotonic()
    with _lock:
        loop = _loops.get(message % args)
        if loop is None or loop.down_since is None:
            return
        down_since, loop.down_since = loop.down_since, None
        if now - loop.recovery_said_at < OUTAGE_LINE_SECONDS:
            return
        loop.recovery_said_at = now
    log.warning(message + " while the database could not be used; it works again (after %d s)", *args,
                now - down_since)
