"""A scheduler loop's failure, logged: a database that cannot be used is one line a minute for each loop while the
outage lasts, not a traceback every round (operability walk: a dropped database wrote 15 tracebacks in 10 s, about
5,000 an hour a process, each many lines in a text log), a new line at once when the reason changes, and one line
when the loop works again. Any other failure keeps its traceback every time."""
import math
import sys
import threading
import time

from app.database import cannot_serve

OUTAGE_LINE_SECONDS = 60

_outages = {}  # what failed -> [monotonic time the outage began, of its last line, the reason that line gave]
_lock = threading.Lock()


def log_loop_failure(log, message: str, *args) -> None:
    """Call from the `except` block of the failure (`message` % `args` names what failed)."""
    problem = cannot_serve(sys.exc_info()[1])
    if problem is None:
        log.exception(message, *args)
        return
    now, what = time.monotonic(), message % args
    with _lock:
        began, said_at, said = _outages.get(what, (now, -math.inf, None))
        if problem == said and now - said_at < OUTAGE_LINE_SECONDS:
            return
        _outages[what] = [began, now, problem]
    log.error(message + ": %s (said once a minute while it lasts)", *args, problem)


def log_loop_recovery(log, message: str, *args) -> None:
    """Call when the loop's round worked (`message` and `args` as its `log_loop_failure`): one line if an outage was
    logged, so that an operator reading the log knows it ended."""
    if not _outages:
        return
    with _lock:
        outage = _outages.pop(message % args, None)
    if outage is not None:
        log.warning(message + " while the database could not be used; it works again (after %d s)", *args,
                    time.monotonic() - outage[0])
