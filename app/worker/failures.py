"""A scheduler loop's failure, logged: a database that cannot be used is one line a minute for each loop while the
outage lasts, not a traceback every round (operability walk: a dropped database wrote 15 tracebacks in 10 s, about
5,000 an hour a process, each many lines in a text log). Any other failure keeps its traceback every time."""
import math
import sys
import threading
import time

from app.database import cannot_serve

OUTAGE_LINE_SECONDS = 60

_said_at = {}  # what failed -> time.monotonic() of its last line about an unusable database
_lock = threading.Lock()


def log_loop_failure(log, message: str, *args) -> None:
    """Call from the `except` block of the failure (`message` % `args` names what failed)."""
    problem = cannot_serve(sys.exc_info()[1])
    if problem is None:
        log.exception(message, *args)
        return
    now, what = time.monotonic(), message % args
    with _lock:
        if now - _said_at.get(what, -math.inf) < OUTAGE_LINE_SECONDS:
            return
        _said_at[what] = now
    log.error(message + ": %s (said once a minute while it lasts)", *args, problem)
