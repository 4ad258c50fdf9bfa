"""A database outage, logged where it is met (the scheduler's loops, the usage flush, the API): one ERROR line a minute
for each place and reason while it lasts, not a traceback every round (operability walk: a dropped database wrote 15
tracebacks in 10 s, about 5,000 an hour a process, each many lines in a text log); a new reason is said at once. A
loop's end of an outage is said by a round that used the database and worked, once a minute at most, and a later
working round says it if it was owed then (a database that fails every other round, e.g. too many clients, would
otherwise write two lines a round, and a log could end on an ERROR for an outage that was over: reviews). Any other
failure keeps its traceback every time."""
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from app.database import busy_or_unreachable, cannot_serve

OUTAGE_LINE_SECONDS = 60


@dataclass
class _Place:
    down_since: Optional[float] = None  # monotonic time the outage began; None once its end is said
    said_at: dict = field(default_factory=dict)  # reason -> monotonic time of its last line
    recovery_said_at: float = -math.inf


_places = {}  # what failed -> _Place
_lock = threading.Lock()


def log_loop_failure(log, message: str, *args) -> bool:
    """Call from the `except` block of the failure (`message` % `args` names what failed); whether it was an outage."""
    if log_outage(log, sys.exc_info()[1], message, *args, problem_of=_loop_problem):
        return True
    log.exception(message, *args)
    return False


def _loop_problem(error: Exception):
    """Why a loop's round could not use the database: unusable as `cannot_serve` says, or busy (a lock another
    session held past PostgreSQL's lock_timeout, SQLite's write lock past its busy timeout, no free connection), as a
    request's 503 says. A busy database wrote a traceback every round, one every 10 s a loop while an operator's
    transaction held a table (scale-out walk)."""
    return cannot_serve(error) or busy_or_unreachable(error)


def log_outage(log, error: Exception, message: str, *args, problem_of=cannot_serve) -> bool:
    """Whether `error` is the database being unusable (`problem_of` names why, or None); if so it is said as above,
    once a minute for `message` % `args` and the reason."""
    problem = problem_of(error)
    if problem is None:
        return False
    now = time.monotonic()
    with _lock:
        place = _places.setdefault(message % args, _Place())
        if place.down_since is None:
            place.down_since = now
        if now - place.said_at.get(problem, -math.inf) < OUTAGE_LINE_SECONDS:
            return True
        place.said_at[problem] = now
    log.error(message + ": %s (said once a minute while it lasts)", *args, problem)
    return True


def log_loop_recovery(log, message: str, *args) -> None:
    """Call when a round of the loop used the database and worked (`message` and `args` as its `log_loop_failure`):
    one line when an outage was logged, so that an operator reading the log knows it ended."""
    if not _places:
        return
    now = time.monotonic()
    with _lock:
        place = _places.get(message % args)
        if place is None or place.down_since is None or now - place.recovery_said_at < OUTAGE_LINE_SECONDS:
            return  # nothing to say, or said a moment ago: a later working round says it
        down_since, place.down_since, place.recovery_said_at = place.down_since, None, now
    log.warning(message + " while the database could not be used; it works again (after %d s)", *args,
                now - down_since)
