"""The in-process APScheduler. Due-ness lives in the database, so the jobs only poll it; a file lock in
`instance/` makes sure one scheduler runs per instance even if gunicorn starts several workers."""
import atexit
import logging
import os
import signal
import threading
from datetime import datetime, timezone

from apscheduler.schedulers.background import BackgroundScheduler
from filelock import FileLock, Timeout

from app.services import usage
from app.worker import checks, deliveries

log = logging.getLogger(__name__)


def scheduled_steps(app):
    """(job id, seconds between runs, step). Each step does one round of work and returns."""
    return [
        ("flush-usage", usage.FLUSH_EVERY_SECONDS, usage.requests.flush),
        ("checks", app.config["SCHEDULER_CHECK_POLL_SECONDS"], checks.run_due_checks),
        (deliveries.JOB_ID, app.config["SCHEDULER_DELIVERY_POLL_SECONDS"], deliveries.run_scheduled_deliveries),
    ]


def build_scheduler(app) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={"max_instances": 1, "coalesce": True})
    for job_id, seconds, step in scheduled_steps(app):
        scheduler.add_job(run_step, "interval", args=(app, step), id=job_id, seconds=seconds,
                          next_run_time=datetime.now(timezone.utc))
    return scheduler


def run_step(app, step):
    """Run one step; an exception is logged and the next run goes on (a loop must never die)."""
    with app.app_context():
        try:
            step()
        except Exception:  # noqa: BLE001
            log.exception("scheduler step %s failed", getattr(step, "__name__", step))


def acquire_instance_lock(app):
    lock = FileLock(os.path.join(app.instance_path, "scheduler.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def start_in_process_scheduler(app):
    if not app.config["SCHEDULER_ENABLED"] or app.config.get("TESTING"):
        return None
    lock = acquire_instance_lock(app)
    if lock is None:
        log.info("another scheduler holds the instance lock; this process serves requests only")
        return None
    scheduler = build_scheduler(app)
    scheduler.start()
    app.extensions["scheduler"] = scheduler
    atexit.register(lambda: (scheduler.shutdown(wait=True), lock.release()))
    log.info("in-process scheduler started: %s", ", ".join(job.id for job in scheduler.get_jobs()))
    return scheduler


def run_forever(app):
    """`flask scheduler run`: the scheduler as its own process, until SIGINT or SIGTERM."""
    lock = acquire_instance_lock(app)
    if lock is None:
        raise RuntimeError("another scheduler already runs for this instance (instance/scheduler.lock)")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    scheduler = build_scheduler(app)
    app.extensions["scheduler"] = scheduler
    try:
        scheduler.start()
        log.info("scheduler running: %s", ", ".join(job.id for job in scheduler.get_jobs()))
        stop.wait()
    finally:
        if scheduler.running:
            scheduler.shutdown(wait=True)
        lock.release()
