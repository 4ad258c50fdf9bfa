"""The scheduler: APScheduler runs the checks (with the heartbeat) and the usage flush every few seconds;
a sender thread drains the outbox, woken by an Event when new deliveries are queued. Due-ness lives in the
database, so the jobs only poll it and nothing is lost when a process stops.

It runs in whatever process serves the application (`start_when_serving`, called by `app.wsgi`) or as its
own process (`run_forever`, the `scheduler run` command). On SQLite one runs per database file (a lock
file beside it; a serving process that finds it taken waits on standby and takes over when it is freed);
on PostgreSQL any number share the work through the atomic claims.

Stopping sets one Event: the steps finish the batch in hand, release what they had not started and claim
nothing more; then the lock is freed (the serving process writes its buffered usage counts at exit).
"""
import atexit
import logging
import os
import signal
import threading

import click
from flask.cli import run_command as flask_run_command
from apscheduler.schedulers.background import BackgroundScheduler
from filelock import FileLock, Timeout
from sqlalchemy.engine import make_url

from app.common import utcnow
from app.outage_log import log_loop_failure, log_loop_recovery
from app.services import health, usage
from app.worker import checks, deliveries, retention

log = logging.getLogger(__name__)
SENDER_JOIN_SECONDS = 20


class Scheduler:
    def __init__(self, app, lock=None):
        self.app = app
        self.lock = lock
        self.id = health.new_scheduler_id()
        self.started_at = utcnow()
        self.stopping = threading.Event()
        self._stop_lock, self._stopped, self._stop_done = threading.Lock(), False, threading.Event()
        self.apscheduler = BackgroundScheduler(timezone="UTC", job_defaults={"max_instances": 1, "coalesce": True})
        for job_id, seconds, step in self.steps():
            self.apscheduler.add_job(self.run_step, "interval", args=(step,), id=job_id, seconds=seconds,
                                     next_run_time=utcnow())
        self.sender = threading.Thread(target=deliveries.run_sender_loop, args=(app, self.stopping),
                                       name="webhook-sender-loop", daemon=True)

    def steps(self):
        """(job id, seconds between runs, step). Each step does one round of work and returns: False when the round
        did not use the database (nothing to write), which then tells nothing of an outage's end."""
        return [("flush-usage", usage.FLUSH_EVERY_SECONDS, usage.flush_request_counts),
                ("checks", self.app.config["SCHEDULER_CHECK_POLL_SECONDS"], self.tick_and_check),
                ("retention", retention.INTERVAL_SECONDS, retention.run_retention)]

    def keep_going(self) -> bool:
        return not self.stopping.is_set()

    def tick_and_check(self):
        """The heartbeat is the check loop's own, recorded once a round of checks has run to its end: it stops when
        checking stops, and while every round fails. Recorded before the round, it went on while no check could run
        (the subscriptions locked by an open transaction, each claim giving up at lock_timeout: /healthz said ok for
        as long as it lasted, scale-out walk)."""
        checks.run_due_checks(self.keep_going)
        health.record_tick(self.id, self.started_at)

    def run_step(self, step):
        """Run one step; an exception is logged and the next run goes on (a loop must never die)."""
        if self.stopping.is_set():
            return
        with self.app.app_context():
            name = getattr(step, "__name__", step)
            try:
                used_the_database = step() is not False
            except Exception:  # noqa: BLE001
                log_loop_failure(log, "scheduler step %s failed", name)
            else:
                if used_the_database:
                    log_loop_recovery(log, "scheduler step %s failed", name)

    def start(self):
        """Start the loops; nothing once a stop has begun (a stop signal during start-up or standby: review)."""
        with self._stop_lock:
            if self._stopped or self.stopping.is_set():
                if self.lock is not None and self.lock.is_locked:  # taken from standby as the stop came
                    self.lock.release()
                return
            with self.app.app_context():
                health.forget_stale_schedulers()
            self.apscheduler.start()
            self.sender.start()
        log.info("scheduler %s started (checks every %ss, deliveries woken on demand)", self.id,
                 self.app.config["SCHEDULER_CHECK_POLL_SECONDS"])

    def request_stop(self):
        """Non-blocking: every loop sees it at its next batch boundary."""
        self.stopping.set()
        deliveries.woken.set()

    def stop(self):
        """Stop and wait: work in hand is recorded or released, the lock freed. A second call (the exit's, after the
        stop signal's) waits for the first to be done."""
        with self._stop_lock:
            stopping_already, self._stopped = self._stopped, True
        if stopping_already:
            self._stop_done.wait()
            return
        try:
            self.request_stop()
            if self.apscheduler.running:
                self.apscheduler.shutdown(wait=True)
            if self.sender.is_alive():
                self.sender.join(SENDER_JOIN_SECONDS)
            if self.lock is not None and self.lock.is_locked:
                self.lock.release()
            log.info("scheduler %s stopped", self.id)
        finally:
            self._stop_done.set()

    def start_when_lock_is_free(self):
        """Standby: retry the lock until it is ours (the holder stopped or died), then start. Meanwhile the
        process's buffered request counts are written at each try: it serves requests too, and without a
        scheduler they waited for its next request (walk: 300 for seven minutes)."""
        poll = self.app.config["SCHEDULER_STANDBY_POLL_SECONDS"]
        while not self.stopping.wait(poll):
            if _try_acquire(self.lock):
                self.start()
                return
            self.run_step(usage.flush_request_counts)


def lock_for(app):
    """The lock that keeps one scheduler per SQLite database file: `<database file>.scheduler.lock`, beside the file
    itself (a path through a symbolic link named another lock, and two schedulers ran on one database: walk).
    None where any number may run (PostgreSQL, an in-memory database)."""
    url = make_url(app.config["SQLALCHEMY_DATABASE_URI"])
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    # not thread-local: the stop that frees it may run in another thread than the start that took it (review)
    return FileLock(os.path.realpath(url.database) + ".scheduler.lock", thread_local=False)


def _try_acquire(lock) -> bool:
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    return True


def running_one_off_command() -> bool:
    """A `flask`/`entity-monitor` command other than `run` (the development server) is loading the app."""
    context = click.get_current_context(silent=True)
    return context is not None and context.command is not flask_run_command


def start_when_serving(app):
    """Start the scheduler in this serving process (or put it on standby behind the SQLite lock). Never in
    tests, one-off commands, or with SCHEDULER_ENABLED=0. Returns the Scheduler, or None."""
    if not app.config["SCHEDULER_ENABLED"] or app.config.get("TESTING") or running_one_off_command():
        return None
    lock = lock_for(app)
    scheduler = Scheduler(app, lock)
    app.extensions["scheduler"] = scheduler
    _stop_at_exit(scheduler)
    _stop_at_the_servers_stop_signal(scheduler)
    if lock is None or _try_acquire(lock):
        scheduler.start()
    else:
        log.info("another process runs the scheduler for this database; this one serves requests and stands by")
        threading.Thread(target=scheduler.start_when_lock_is_free, name="scheduler-standby", daemon=True).start()
    return scheduler


def _stop_at_exit(scheduler):
    # Interpreter exit shuts the thread pools down (no new work may be handed to them, APScheduler's
    # included) before it runs atexit: stop the scheduler before that, while its loops can still finish
    # their batch and release the rest. `atexit` is the fallback where that hook does not exist.
    if hasattr(threading, "_register_atexit"):
        threading._register_atexit(scheduler.stop)
    else:
        atexit.register(scheduler.stop)


def _stop_at_the_servers_stop_signal(scheduler):
    """Stop the scheduler as soon as gunicorn's worker is told to stop (SIGTERM), not at its exit: the worker first
    waits for the requests in flight, up to its graceful timeout, and the scheduler went on checking, sending and
    holding claims meanwhile, its stop cut short when the timeout ended the worker (operability walk: a slow export
    kept it working 30 s after SIGTERM, 24 checks left claimed). The handler only sets an Event a waiting thread
    stops on (starting a thread in a handler may deadlock, and Python 3.12 refuses it at shutdown: review), then
    gunicorn's own handler runs."""
    if threading.current_thread() is not threading.main_thread():
        return
    servers_handler = signal.getsignal(signal.SIGTERM)
    if not callable(servers_handler):  # not a server that stops gracefully on SIGTERM (the default ends the process)
        return
    told = threading.Event()

    def stop_when_told():
        told.wait()
        scheduler.stop()
    threading.Thread(target=stop_when_told, name="scheduler-stopper", daemon=True).start()

    def stop_then_let_the_server_stop(signum, frame):
        told.set()
        servers_handler(signum, frame)
    signal.signal(signal.SIGTERM, stop_then_let_the_server_stop)


class AlreadyRunning(RuntimeError):
    pass


def run_forever(app):
    """`scheduler run`: the scheduler as its own process, until SIGINT or SIGTERM."""
    lock = lock_for(app)
    if lock is not None and not _try_acquire(lock):
        raise AlreadyRunning(f"another scheduler already runs for this SQLite database ({lock.lock_file}); "
                             "stop it, or serve the web processes with SCHEDULER_ENABLED=0")
    scheduler = Scheduler(app, lock)
    app.extensions["scheduler"] = scheduler
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: scheduler.request_stop())
    try:
        scheduler.start()
        while not scheduler.stopping.wait(1):
            pass
    finally:
        scheduler.stop()
