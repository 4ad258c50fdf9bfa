"""A serving process runs REQUEST_CONCURRENCY requests at once (one on SQLite); the others wait their turn in the
order they came.

gunicorn's threads share one interpreter lock, which Python's sqlite3 gives up around every step of a statement.
With eight requests running at once, each got it back in no order: under 8 connections one list request in a
hundred took 40-60 ms where its own work takes 0.5 ms. Queued first come, first served, the same requests take
7-12 ms at the p99, at the same rate (README, *Request queue*).

The queue must never stall the service: the body is read before a request queues (a slow client holds a thread,
not the turn); a request waiting longer than MAX_WAIT_SECONDS goes ahead anyway (a turn held up by a lock another
process holds, a database or rate-limit storage that does not answer, delays the others by that at most); a view's
network call steps out of its turn (`stepped_out`); a streamed response is written after its turn ends."""
import io
import threading
import time
from collections import deque
from contextlib import contextmanager

MAX_WAIT_SECONDS = 0.1
ARRIVED = "entity_monitor.arrived"  # environ key: time.perf_counter() when the request reached the queue

_turn = threading.local()  # .queue: the RequestQueue whose turn this thread holds, if any


class RequestQueue:
    """At most `size` turns held at once; a turn given up passes straight to the longest waiting thread (a plain
    semaphore lets a thread that just arrived take it first, and a waiter can lose its turn again and again)."""

    def __init__(self, size: int):
        self._lock = threading.Lock()
        self._free = size
        self._waiting = deque()  # one locked lock per waiting thread, released to hand it the turn

    def take_turn(self, timeout: float) -> bool:
        """True with a turn held (give it back with `end_turn`); False when none came within `timeout`."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            handover = threading.Lock()
            handover.acquire()
            self._waiting.append(handover)
        if handover.acquire(timeout=timeout):
            return True
        with self._lock:
            if handover in self._waiting:
                self._waiting.remove(handover)
                return False
        return True  # handed over between the timeout and the lock

    def end_turn(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._free += 1


class QueuedRequests:
    """WSGI middleware: each request runs in a turn of `queue`."""

    def __init__(self, wsgi_app, size: int, max_body_bytes: int):
        self.wsgi_app = wsgi_app
        self.queue = RequestQueue(size)
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ, start_response):
        environ[ARRIVED] = time.perf_counter()  # the access line and the metrics count the wait for a turn too
        self._read_body_first(environ)
        outer = getattr(_turn, "queue", None)
        _turn.queue = self.queue if self.queue.take_turn(MAX_WAIT_SECONDS) else None
        try:
            return self.wsgi_app(environ, start_response)
        finally:
            if _turn.queue is not None:  # held by this call (again, after a step out)
                _turn.queue.end_turn()
            _turn.queue = outer

    def _read_body_first(self, environ) -> None:
        """A body the app may read, up to its limit: of a declared length within it (over it, the app refuses the
        body unread), or chunked (one byte more than the limit, so that the app still refuses it as too large)."""
        stream = environ["wsgi.input"]
        if environ.get("CONTENT_LENGTH"):
            try:
                length = int(environ["CONTENT_LENGTH"])
            except ValueError:
                return
            if 0 < length <= self.max_body_bytes:
                environ["wsgi.input"] = io.BytesIO(stream.read(length))
        elif environ.get("wsgi.input_terminated") and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            environ["wsgi.input"] = io.BytesIO(_read_up_to(stream, self.max_body_bytes + 1))


def _read_up_to(stream, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = stream.read(min(left, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@contextmanager
def stepped_out():
    """Gives this thread's turn up for a network call and queues for one again after it; nothing where the thread
    holds none (a request that went ahead without one, the scheduler, a test client)."""
    queue = getattr(_turn, "queue", None)
    if queue is None:
        yield
        return
    _turn.queue = None
    queue.end_turn()
    try:
        yield
    finally:
        if queue.take_turn(MAX_WAIT_SECONDS):
            _turn.queue = queue
