"""One-step delivery functions for the scheduler and the `deliveries run` command, and the wake-up that
lets the scheduler's sender loop start as soon as a transaction has queued deliveries."""
import logging
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable

from flask import current_app

from app.common import always
from app.outage_log import log_loop_failure, log_loop_recovery
from app.services import events, outbox
from app.services.transport import transport_for

STEP_BUDGET_SECONDS = 30
RECHECK_SECONDS = 0.2  # while tries run: how soon a wake-up (new deliveries queued) is noticed
RECORD_RETRY_SECONDS = 1.0
SHARE_CLAIM_SECONDS = 1.0  # while batches are in flight: how often to look for other accounts' deliveries due, and
# at the configurations of the accounts whose tries it holds
log = logging.getLogger(__name__)

woken = threading.Event()  # new rows were queued since the sender last looked


@dataclass
class InFlight:
    """One account's part of a claimed batch (`_claim`): recorded as soon as its own tries have returned, not
    after another account's slow ones. Its tries wait in the sender's queues, then run in its pool; each try's
    outcome lands in its future (None: not sent, as the sender was stopping or half the lease had gone by;
    `_record` releases it)."""
    token: str
    batch: list
    futures: list
    send: Callable  # Outgoing -> its Outcome, or None
    gone: bool = False  # a try of its account got a 410: the rest are not sent (a record deactivates the configuration)


def _claim(app, keep_going, limit: int, room=None) -> list:
    """Claim a batch (`outbox.claim_due`; `room`: how many more deliveries each account may take), one InFlight
    per account."""
    token = outbox.new_claim_token()
    claimed = outbox.claim_due(token, limit, room)
    transport = transport_for(app)
    deadline = time.monotonic() + app.config["WEBHOOK_LEASE_SECONDS"] / 2

    def send_unless_stopped(outgoing):
        return outbox.timed_send(transport, outgoing) if keep_going() and time.monotonic() < deadline else None
    by_account = {}
    for item in claimed:
        by_account.setdefault(item.account_id, []).append(item)
    return [InFlight(token, batch, [Future() for _ in batch], send_unless_stopped) for batch in by_account.values()]


def _record(in_flight: InFlight, outcomes: Counter) -> int:
    """Record the tries made, release the ones skipped; returns how many were sent, and counts in `outcomes` what
    became of them (`outbox.record_results`) and how many were `released` unsent."""
    results = [(claimed, future.result()) for claimed, future in zip(in_flight.batch, in_flight.futures)]
    sent = [(claimed, outcome) for claimed, outcome in results if outcome is not None]
    outcomes.update(_once_more_if_it_fails(outbox.record_results, in_flight.token, sent))
    unsent = [claimed for claimed, outcome in results if outcome is None]
    _once_more_if_it_fails(outbox.release, in_flight.token, unsent)
    outcomes["released"] += len(unsent)
    if unsent:
        woken.set()  # due again now: the next claim need not wait for the poll
    return len(sent)


def _once_more_if_it_fails(write, *args):
    """A write transaction, tried again a second later when it fails (a connection dropped, a lock timed out):
    a try's record is worth more than the delivery it would otherwise cost again after the lease. Returns what
    `write` returns."""
    try:
        return write(*args)
    except Exception:  # noqa: BLE001 - the second failure is raised
        log.warning("writing a delivery batch failed; trying once more", exc_info=True)
        time.sleep(RECORD_RETRY_SECONDS)
        return write(*args)


def _sender_pool(app) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=app.config["WEBHOOK_WORKERS"], thread_name_prefix="webhook-sender")


class SlowMarks:
    """Per account: whether its last try to come back took over the sender's `slow_after`, kept from round to round
    (`_Sending`). A mark no try has renewed for `keep_for` seconds is dropped (`prune`): the accounts a service sends
    to over months (configurations removed, accounts closed) would otherwise each keep one for good."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._marks = {}  # account id -> (slow, the clock's time the mark was set)
        self._lock = threading.Lock()  # the senders of a round, and rounds that overlap (`deliver_due`), share them

    def __len__(self) -> int:
        return len(self._marks)

    def is_slow(self, account_id) -> bool:
        mark = self._marks.get(account_id)
        return mark is not None and mark[0]

    def mark(self, account_id, slow: bool) -> None:
        with self._lock:
            self._marks[account_id] = (slow, self._clock())

    def presume_slow(self, account_id) -> None:
        """Slow unless a try of the account has said otherwise."""
        with self._lock:
            self._marks.setdefault(account_id, (True, self._clock()))

    def prune(self, keep_for: float) -> None:
        with self._lock:
            oldest = self._clock() - keep_for
            self._marks = {account_id: mark for account_id, mark in self._marks.items() if mark[1] >= oldest}


def _sending(app, pool) -> "_Sending":
    """A try that takes over half the timeout marks its account slow (a dead endpoint takes all of it); the marks
    outlive the round, in the application, for twice the longest retry step (a failing endpoint's mark lasts from
    one of its tries to the next)."""
    marks = app.extensions.setdefault("webhook_slow_accounts", SlowMarks())
    marks.prune(2 * max(app.config["WEBHOOK_RETRY_SCHEDULE"], default=0))
    return _Sending(pool, app.config["WEBHOOK_WORKERS"], app.config["WEBHOOK_BATCH_SIZE"],
                    slow_after=app.config["WEBHOOK_TIMEOUT_SECONDS"] / 2, slow=marks)


def deliver_due(keep_going=always, outcomes=None) -> int:
    """Claim one batch of due deliveries, send it with a bounded pool of workers outside any transaction,
    and record the results (the tries not started once `keep_going` says stop are released). Returns how many were
    sent (0: nothing was due); counts what became of them in `outcomes`, a Counter, when given (`_record`)."""
    app = current_app._get_current_object()
    outcomes = Counter() if outcomes is None else outcomes
    with _sender_pool(app) as pool:
        sending = _sending(app, pool)
        batches = _claim(app, keep_going, app.config["WEBHOOK_BATCH_SIZE"])
        sending.add(batches)
        return sum(_record_or_leave(batch, outcomes) for batch in batches)


class _Sending:
    """The claimed batches of a sender, and the pool that sends their tries. Tries wait in a queue per account; a
    sender that falls idle takes the next try of the account with the fewest tries running and, among those, the
    one that has had the least sender time (fair queuing: an account that starts holding tries starts level with
    the least served of those holding some), so an endpoint that answers slowly occupies at most the senders the
    other accounts leave, and a batch claimed later does not wait behind another account's queue. The last free
    sender is kept from accounts whose last try took over `slow_after` seconds (a dead endpoint takes the whole
    timeout), or whose endpoint was failing when claimed and none of whose tries has come back here, until one of
    their tries comes back quickly: however many of them queue, an account whose endpoint answers (if only with a
    5xx) gets a sender at once. A returning try
    wakes the sender loop when that matters: its batch's last try has returned (record the batch) or a sender fell
    idle (claim more)."""

    def __init__(self, pool, senders: int, batch_size: int, slow_after: float, slow: SlowMarks = None):
        self.pool, self.senders, self.most, self.slow_after = pool, senders, max(senders, batch_size), slow_after
        self._slow = SlowMarks() if slow is None else slow
        self.batches = []
        self.changed = threading.Event()
        self._lock = threading.Lock()
        self._queued = {}  # account id -> deque of (batch, index) waiting for a sender, in the order first queued
        self._running = Counter()  # account id -> tries in the pool
        self._held = Counter()  # account id -> tries queued or running
        self._served = {}  # account id -> seconds its returned tries took, while it holds tries
        self._left = {}  # id of an InFlight -> its tries not returned yet
        self.endpoints = {}  # account id -> its outbox.Destination as last read (None: inactive or gone)
        self._gone = set()  # accounts a try of which got a 410, until their claims holding it are taken out

    def add(self, batches: list) -> None:
        """A claim's batches, queued together before any is handed to a sender (one at a time, the first account's
        tries took every free sender)."""
        with self._lock:
            for batch in batches:
                self.endpoints[batch.batch[0].account_id] = outbox.Destination.of(batch.batch[0].outgoing)
                batch.gone = batch.batch[0].account_id in self._gone  # claimed after a 410 not recorded yet
                self._left[id(batch)] = len(batch.batch)
                for index, claimed in enumerate(batch.batch):
                    if not self._held[claimed.account_id]:
                        self._served[claimed.account_id] = min(self._served.values(), default=0.0)
                        if claimed.endpoint_failing:  # slow until a try shows otherwise: a dead one often is
                            self._slow.presume_slow(claimed.account_id)
                    self._queued.setdefault(claimed.account_id, deque()).append((batch, index))
                    self._held[claimed.account_id] += 1
                self.batches.append(batch)
            self._dispatch()

    def _dispatch(self) -> None:
        """Hand queued tries to the senders that are free (the caller holds the lock)."""
        refused = []
        while self._queued:
            busy = sum(self._running.values())
            if not refused and busy >= self.senders:
                break
            account_id = self._next_account(last_free=not refused and self.senders > 1 and busy == self.senders - 1)
            if account_id is None:  # the last free sender waits for an account whose endpoint answers
                break
            queue = self._queued[account_id]
            batch, index = queue.popleft()
            if not queue:
                del self._queued[account_id]
            self._running[account_id] += 1
            try:
                self.pool.submit(self._send, account_id, batch, index)
            except RuntimeError:  # the pool refuses work (the interpreter is exiting): none of the queue is sent
                refused.append((account_id, batch, index))  # (released), and the loop goes on until it is empty
        for account_id, batch, index in refused:
            self._returned(account_id, batch, index, None, dispatch=False)

    def _next_account(self, last_free: bool):
        """The account whose queued try the next free sender takes; of the last free one, none that is slow (None:
        keep it free)."""
        queued = [account_id for account_id in self._queued if not last_free or not self._slow.is_slow(account_id)]
        return min(queued, key=lambda account_id: (self._running[account_id], self._served[account_id]), default=None)

    def check_endpoints(self) -> None:
        """Read again where the accounts it holds tries of send them, and with which secrets (`_as_configured_now`),
        instead of sending as claimed for up to half the lease."""
        accounts = list(self.room())
        if not accounts:
            return
        try:
            self.endpoints = {**self.endpoints, **outbox.endpoints_now(accounts)}
        except Exception:  # noqa: BLE001 - the tries go on as claimed; the next look tries again
            log.warning("reading the webhook configurations again failed", exc_info=True)

    def _send(self, account_id: str, batch: InFlight, index: int) -> None:
        if batch.futures[index].done():  # refused by the pool, which ran it all the same
            return
        outgoing = self._as_configured_now(account_id, batch.batch[index].outgoing)
        began = time.monotonic()
        try:
            outcome = batch.send(outgoing) if outgoing and not batch.gone else None
        except BaseException as error:  # noqa: BLE001 - handed to whoever reads the future
            with self._lock:
                self._returned(account_id, batch, index, None, error=error, spent=time.monotonic() - began)
            return
        with self._lock:
            self._returned(account_id, batch, index, outcome, spent=time.monotonic() - began)

    def _as_configured_now(self, account_id, outgoing):
        """The try as the account's configuration was last read: None when that has been deactivated, removed or
        pointed elsewhere since the claim (the try is given back, and claimed again as it is now); else signed with
        the secrets it has now (after a rotation: the new one, and the old one for X-Webhook-Signature-Previous)."""
        destination = self.endpoints[account_id]
        if destination is None or destination.url != outgoing.url:
            return None
        return replace(outgoing, secret=destination.secret, previous_secret=destination.previous_secret)

    def _returned(self, account_id, batch, index, outcome, error=None, dispatch=True, spent=0.0) -> None:
        """A try came back after `spent` seconds of a sender (the caller holds the lock): its outcome to its future,
        its sender to the next try."""
        future = batch.futures[index]
        if future.done():  # its refusal was handled already
            return
        if outcome is not None and outcome.gone and not outbox.is_probe(batch.batch[index]):
            self._gone.add(account_id)  # its tries of every claim held, not only this one's, and of those to come
            for held in self.batches:
                if held.batch[0].account_id == account_id:
                    held.gone = True
        if error is None:
            future.set_result(outcome)
        else:
            future.set_exception(error)
        self._running[account_id] -= 1
        self._held[account_id] -= 1
        self._served[account_id] += spent
        if spent > self.slow_after:
            self._slow.mark(account_id, True)
        elif outcome is not None:  # a try not sent says nothing of the endpoint
            self._slow.mark(account_id, False)
        if not self._held[account_id]:  # its slow mark stays: its next tries are likely as slow
            del self._held[account_id], self._served[account_id]
        self._left[id(batch)] -= 1
        if dispatch:
            self._dispatch()
        if not self._left[id(batch)] or self._idle():
            self.changed.set()

    def _idle(self) -> bool:
        return not self._queued and sum(self._running.values()) < self.senders

    def idle(self) -> bool:
        with self._lock:
            return self._idle()

    def room(self) -> dict:
        """{account id: how many more tries it may have queued or running}, for the accounts that have some: as
        many as a batch or the senders, whichever is more. An account that takes longer to send than others does
        not fill the queues, so the sender keeps claiming (and sending) the others' deliveries. An account a try of
        which got a 410 has none until its record deactivates the configuration (each idle sender claimed more of its
        tries, skipped them at once and claimed again: its whole backlog leased, then released)."""
        with self._lock:
            return {**{account_id: self.most - count for account_id, count in self._held.items() if count},
                    **dict.fromkeys(self._gone, 0)}

    def finished(self) -> list:
        """The batches whose every try has returned, taken out."""
        with self._lock:
            sending = {batch.batch[0].account_id for batch in self.batches if self._left[id(batch)]}
            # a 410's account: its claims all at once, once the 410 is back too (released before its record has
            # deactivated the configuration, its unsent tries would be claimed again at once, and again)
            done = [batch for batch in self.batches
                    if not self._left[id(batch)] and not (batch.gone and batch.batch[0].account_id in sending)]
            for batch in done:
                del self._left[id(batch)]
            self.batches = [batch for batch in self.batches if batch not in done]
            self._gone &= sending  # the others' records, next and before any claim, deactivate their configurations
        return done


def deliver_until_idle(budget_seconds=None, keep_going=always, outcomes=None) -> int:
    """Deliver batch after batch until nothing is due (or the budget is spent); returns how many were sent, and
    counts what became of them in `outcomes`, a Counter, when given (`_record`).

    A batch is claimed whenever a sender is idle, and every SHARE_CLAIM_SECONDS while batches are in flight, so an
    account that has deliveries due while another's slow endpoint occupies the senders gets the next one free
    (`_Sending`). Each account's part of a batch is recorded once its last try has returned: an endpoint that
    answers slowly (up to WEBHOOK_TIMEOUT_SECONDS a try) holds back its own tries' record, no one else's."""
    app = current_app._get_current_object()
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
    sent, due, last_look = 0, True, time.monotonic()
    outcomes = Counter() if outcomes is None else outcomes
    with _sender_pool(app) as pool:
        sending = _sending(app, pool)
        try:
            while True:
                sending.changed.clear()
                stopping, in_budget = not keep_going(), deadline is None or time.monotonic() < deadline
                due = due or woken.is_set()
                idle, looked_lately = sending.idle(), time.monotonic() - last_look < SHARE_CLAIM_SECONDS
                if sending.batches and not looked_lately:
                    last_look = time.monotonic()
                    sending.check_endpoints()
                # Past the budget no new round of claims starts, but the look for other accounts' deliveries goes
                # on while batches are in flight (a slow endpoint's queued tries run until half their lease).
                if not stopping and (due and idle and in_budget or sending.batches and not looked_lately):
                    woken.clear()
                    last_look = time.monotonic()
                    room = sending.room()
                    if idle and in_budget:
                        claimed = _claim(app, keep_going, app.config["WEBHOOK_BATCH_SIZE"], room)
                        due = bool(claimed)  # an empty claim: nothing is due until something wakes the sender
                    else:  # senders busy, or past the budget: a sender's worth, of the accounts it holds nothing of
                        claimed = _claim(app, keep_going, sending.senders, dict.fromkeys(room, 0))
                    sending.add(claimed)
                    if claimed:
                        continue
                for batch in sending.finished():
                    sent += _record_or_leave(batch, outcomes)
                if not sending.batches and (stopping or not in_budget or not (due or woken.is_set())):
                    if due and not stopping:  # the budget ran out with more due: the next round starts at once
                        woken.set()
                    return sent
                sending.changed.wait(RECHECK_SECONDS)
        finally:  # a claim failed (the database went away): the batches already sent are still recorded
            for batch in sending.batches:
                _record_or_leave(batch, outcomes)


def _record_or_leave(batch: InFlight, outcomes: Counter) -> int:
    """`_record`; a batch whose record fails is left to its lease (logged), and the other batches still go on."""
    try:
        return _record(batch, outcomes)
    except Exception:  # noqa: BLE001 - one batch's failure must not drop the others' records
        log_loop_failure(log, "recording a batch of %s deliveries failed: they are sent again once their lease ends",
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
                log_loop_failure(log, "delivery round failed")
            else:
                log_loop_recovery(log, "delivery round failed")
            woken.wait(poll)


def wake_sender():
    """Listener of events.on_new_deliveries: the sender loop starts its next round now, not at the next poll."""
    woken.set()


events.on_new_deliveries(wake_sender)
