"""One-step delivery functions for the scheduler and the `deliveries run` command, and the wake-up that
lets the scheduler's sender loop start as soon as a transaction has queued deliveries."""
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from flask import current_app

from app.common import always
from app.services import events, outbox
from app.services.transport import transport_for

STEP_BUDGET_SECONDS = 30
RECHECK_SECONDS = 0.2  # while tries run: how soon a wake-up (new deliveries queued) is noticed
RECORD_RETRY_SECONDS = 1.0
log = logging.getLogger(__name__)

woken = threading.Event()  # new rows were queued since the sender last looked


@dataclass
class InFlight:
    """A claimed batch whose tries are running in the sender pool."""
    token: str
    batch: list
    futures: list


def _claim_and_send(app, pool, keep_going) -> InFlight:
    """Claim a batch and hand its sends to the pool. A send that has not started when `keep_going()` turns
    false (stopping, or half the lease gone) is skipped; `_record` releases it."""
    token = outbox.new_claim_token()
    batch = outbox.claim_due(token, app.config["WEBHOOK_BATCH_SIZE"])
    transport = transport_for(app)
    deadline = time.monotonic() + app.config["WEBHOOK_LEASE_SECONDS"] / 2

    def send_unless_stopped(outgoing):
        return outbox.timed_send(transport, outgoing) if keep_going() and time.monotonic() < deadline else None

    try:
        return InFlight(token, batch, [pool.submit(send_unless_stopped, claimed.outgoing) for claimed in batch])
    except RuntimeError:  # the pool refuses new work (the interpreter is exiting): give the batch back
        outbox.release(token, [claimed.delivery_id for claimed in batch])
        raise


def _record(in_flight: InFlight) -> int:
    """Record the tries made, release the ones skipped; returns how many were sent."""
    results = [(claimed, future.result()) for claimed, future in zip(in_flight.batch, in_flight.futures)]
    sent = [(claimed, outcome) for claimed, outcome in results if outcome is not None]
    _once_more_if_it_fails(outbox.record_results, in_flight.token, sent)
    _once_more_if_it_fails(outbox.release, in_flight.token,
                           [claimed.delivery_id for claimed, outcome in results if outcome is None])
    return len(sent)


def _once_more_if_it_fails(write, *args):
    """A write transaction, tried again a second later when it fails (a connection dropped, a lock timed out):
    a try's record is worth more than the delivery it would otherwise cost again after the lease."""
    try:
        write(*args)
    except Exception:  # noqa: BLE001 - the second failure is raised
        log.warning("writing a delivery batch failed; trying once more", exc_info=True)
        time.sleep(RECORD_RETRY_SECONDS)
        write(*args)


def _sender_pool(app) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=app.config["WEBHOOK_WORKERS"], thread_name_prefix="webhook-sender")


def deliver_due() -> int:
    """Claim one batch of due deliveries, send it with a bounded pool of workers outside any transaction,
    and record the results. Returns how many were sent (0: nothing was due)."""
    app = current_app._get_current_object()
    with _sender_pool(app) as pool:
        in_flight = _claim_and_send(app, pool, always)
        return _record(in_flight) if in_flight.batch else 0


class _Sending:
    """The claimed batches whose tries are in the sender pool. A try returning wakes the sender loop only when it
    matters: its batch's last try has returned (record the batch) or a sender fell idle (claim another)."""

    def __init__(self, senders: int):
        self.senders = senders
        self.batches = []
        self.changed = threading.Event()
        self._lock = threading.Lock()
        self._running = 0
        self._left = {}  # claim token -> tries of that batch not returned yet

    def add(self, batch: InFlight) -> None:
        with self._lock:
            self._running += len(batch.futures)
            self._left[batch.token] = len(batch.futures)
        self.batches.append(batch)
        for future in batch.futures:
            future.add_done_callback(lambda _future, token=batch.token: self._returned(token))

    def _returned(self, token: str) -> None:
        with self._lock:
            self._running -= 1
            self._left[token] -= 1
            if not self._left[token] or self._running < self.senders:
                self.changed.set()

    def idle(self) -> bool:
        with self._lock:
            return self._running < self.senders

    def finished(self) -> list:
        """The batches whose every try has returned, taken out."""
        with self._lock:
            done = [batch for batch in self.batches if not self._left[batch.token]]
            for batch in done:
                del self._left[batch.token]
        self.batches = [batch for batch in self.batches if batch not in done]
        return done


def deliver_until_idle(budget_seconds=None, keep_going=always) -> int:
    """Deliver batch after batch until nothing is due (or the budget is spent); returns how many were sent.

    A batch is claimed whenever a sender is idle, and each batch is recorded once its last try has returned: an
    endpoint that answers slowly (up to WEBHOOK_TIMEOUT_SECONDS a try) holds back its own batch's record, not
    the sends of the batches claimed after it (other accounts' endpoints among them)."""
    app = current_app._get_current_object()
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
    sent, sending, due = 0, _Sending(app.config["WEBHOOK_WORKERS"]), True
    with _sender_pool(app) as pool:
        try:
            while True:
                sending.changed.clear()
                claiming = keep_going() and (deadline is None or time.monotonic() < deadline)
                due = due or woken.is_set()
                if claiming and due and sending.idle():
                    woken.clear()
                    current = _claim_and_send(app, pool, keep_going)
                    due = bool(current.batch)  # an empty claim: nothing is due until something wakes the sender
                    if current.batch:
                        sending.add(current)
                        continue
                for batch in sending.finished():
                    sent += _record_or_leave(batch)
                if not sending.batches and not (claiming and (due or woken.is_set())):
                    if due and keep_going():  # the budget ran out with more due: the next round starts at once
                        woken.set()
                    return sent
                sending.changed.wait(RECHECK_SECONDS)
        finally:  # a claim failed (the database went away): the batches already sent are still recorded
            for batch in sending.batches:
                _record_or_leave(batch)


def _record_or_leave(batch: InFlight) -> int:
    """`_record`; a batch whose record fails is left to its lease (logged), and the other batches still go on."""
    try:
        return _record(batch)
    except Exception:  # noqa: BLE001 - one batch's failure must not drop the others' records
        log.exception("recording a batch of %s deliveries failed: they are sent again once their lease ends",
                      len(batch.batch))
        return 0


def run_sender_loop(app, stopping: threading.Event) -> None:
    """The scheduler's sender: drain what is due, then sleep until woken by new deliveries or the poll
    interval passes; returns once `stopping` is set, after recording (or releasing) the batch in hand."""
    poll = app.config["SCHEDULER_DELIVERY_POLL_SECONDS"]
    with app.app_context():
        while not stopping.is_set():
            try:
                deliver_until_idle(STEP_BUDGET_SECONDS, lambda: not stopping.is_set())
            except Exception:  # noqa: BLE001 - the loop must never die; the next round tries again
                log.exception("delivery round failed")
            woken.wait(poll)


def wake_sender():
    """Listener of events.on_new_deliveries: the sender loop starts its next round now, not at the next poll."""
    woken.set()


events.on_new_deliveries(wake_sender)
