"""Prometheus metrics (contract §10), correct across processes.

Counters and histograms live in the process that does the work (web workers, the scheduler). With
`PROMETHEUS_MULTIPROC_DIR` set in the environment of every process (before start), prometheus-client
writes them to files there and a scrape of any web worker adds up all processes, dead ones included.
Without it (one process), they are read from this process's registry. Gauges that describe the
database (outbox, subscriptions, the scheduler's last tick) are read from the database at scrape time,
so every process answers the same."""
import logging
import os
import threading
from collections import Counter as Tally
from functools import lru_cache

from flask import current_app
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily

from app.common import unix_seconds
from app.database import end_read_quietly
from app.exits import APP_LOAD_ERROR, stop
from app.extensions import db

PREFIX = "entity_monitor"
log = logging.getLogger(__name__)


def _refuse_a_missing_multiprocess_directory():
    """prometheus-client writes to PROMETHEUS_MULTIPROC_DIR from the first metric on, as this module is imported
    (before the configuration is read): a path that is no directory is refused here, in one line, with the exit
    code of a refused setting, instead of a FileNotFoundError's traceback."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path and not (os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)):
        stop(f"configuration refused: PROMETHEUS_MULTIPROC_DIR={path!r} is not a directory this process can write "
             "in: create it (empty) before the service starts", APP_LOAD_ERROR)


_refuse_a_missing_multiprocess_directory()
PROCESS_REGISTRY = CollectorRegistry()
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LATENCY_BUCKETS = (0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 7200, 36000, 86400)

CHECKS = Counter(f"{PREFIX}_checks", "Checks by outcome (ok, unavailable, failed, skipped).", ["outcome"],
                 registry=PROCESS_REGISTRY)
EVENTS = Counter(f"{PREFIX}_events", "Events recorded, by type.", ["type"], registry=PROCESS_REGISTRY)
DELIVERIES = Counter(f"{PREFIX}_deliveries", "Webhook delivery attempts by outcome (succeeded, failed).",
                     ["outcome"], registry=PROCESS_REGISTRY)
DELIVERY_DURATION = Histogram(f"{PREFIX}_delivery_duration_seconds", "Duration of one webhook delivery attempt.",
                              buckets=SECONDS_BUCKETS, registry=PROCESS_REGISTRY)
DETECTION_TO_DELIVERY = Histogram(f"{PREFIX}_detection_to_delivery_seconds",
                                  "From an event's detection to its successful delivery.",
                                  buckets=LATENCY_BUCKETS, registry=PROCESS_REGISTRY)
HTTP_REQUESTS = Counter(f"{PREFIX}_http_requests", "HTTP requests by route template and status.",
                        ["route", "status"], registry=PROCESS_REGISTRY)
HTTP_DURATION = Histogram(f"{PREFIX}_http_request_duration_seconds", "HTTP request latency by route template.",
                          ["route"], buckets=SECONDS_BUCKETS, registry=PROCESS_REGISTRY)


# --- recording ----------------------------------------------------------------------------------

def count_checks(summary) -> None:
    """One check batch's outcomes, from the summary the engine returns."""
    for outcome, count in (("ok", summary.checked - summary.unavailable), ("unavailable", summary.unavailable),
                           ("failed", summary.failed), ("skipped", summary.skipped)):
        if count:
            CHECKS.labels(outcome).inc(count)


def count_events(event_types) -> None:
    for event_type, count in Tally(event_types).items():
        EVENTS.labels(event_type).inc(count)


def observe_deliveries(results, now) -> None:
    """A recorded batch of [(Claimed, Outcome)]."""
    for claimed, outcome in results:
        DELIVERIES.labels("succeeded" if outcome.succeeded else "failed").inc()
        DELIVERY_DURATION.observe(outcome.duration_ms / 1000)
        if outcome.succeeded and claimed.event_created_at is not None:
            DETECTION_TO_DELIVERY.observe(max((now - claimed.event_created_at).total_seconds(), 0.0))


def observe_request(route: str, status: int, seconds: float) -> None:
    _request_counter(route, status).inc()
    _request_histogram(route).observe(seconds)


# The labelled children, looked up once per route and status (bounded: the app's routes, the statuses it
# answers); `labels()` validates and locks on every call.
@lru_cache(maxsize=None)
def _request_counter(route: str, status: int):
    return HTTP_REQUESTS.labels(route, str(status))


@lru_cache(maxsize=None)
def _request_histogram(route: str):
    return HTTP_DURATION.labels(route)


# --- the scrape -----------------------------------------------------------------------------------

class DatabaseCollector:
    """Gauges read from the database at scrape time (the same answer from every process), and whether it answered
    within DATABASE_SCRAPE_SECONDS: while it does not, the scrape still exports every counter in time (it was a 500,
    or waited as long as the connect did, past Prometheus's scrape timeout, and the alerts went blind for the
    outage: fault walk, review) with `database_up` 0 and these gauges left out."""

    def collect(self):
        app = current_app._get_current_object()
        read = app.extensions.setdefault("metrics_database_gauges", _DatabaseGauges()).read(app)
        if read is None:
            yield _gauge("database_up", DATABASE_UP, 0)
            return
        backlog, heartbeat, by_status = read
        yield _gauge("database_up", DATABASE_UP, 1)
        yield _gauge("outbox_pending", "Deliveries owed (due or waiting for a retry).", backlog["pending"])
        yield _gauge("outbox_oldest_pending_seconds", "Age of the oldest delivery still owed (0: none).",
                     backlog["oldest_pending_seconds"] or 0)
        subscriptions = GaugeMetricFamily(f"{PREFIX}_subscriptions", "Subscriptions by status.", labels=["status"])
        for status in ("active", "paused", "cancelled"):
            subscriptions.add_metric([status], by_status.get(status, 0))
        yield subscriptions
        last_tick = heartbeat["last_tick_at"]
        yield _gauge("scheduler_last_tick_timestamp_seconds", "Unix time of the newest scheduler tick (0: never).",
                     unix_seconds(last_tick) if last_tick else 0)


DATABASE_UP = "1 when the database answered this scrape; 0 when not, and its gauges are left out."
DATABASE_SCRAPE_SECONDS = 3.0  # well within Prometheus's default scrape timeout of 10 s


class _DatabaseGauges:
    """The database's figures, read in a thread of their own so a scrape waits DATABASE_SCRAPE_SECONDS at most; one
    read at a time (a scrape while one is out waits for that one), so a database that never answers holds one
    thread, not one a scrape."""

    def __init__(self):
        self._lock = threading.Lock()
        self._thread, self._answer = None, None

    def read(self, app):
        """(backlog, heartbeat, subscriptions by status), or None when the database did not answer in time."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._answer = {}
                self._thread = threading.Thread(target=self._read, args=(app, self._answer), daemon=True,
                                                name="metrics-database")
                self._thread.start()
            thread, answer = self._thread, self._answer
        thread.join(DATABASE_SCRAPE_SECONDS)
        if "value" not in answer:
            log.warning("metrics: the database did not answer within %g s (%s); its gauges are left out of this "
                        "scrape", DATABASE_SCRAPE_SECONDS, answer.get("error", "still waiting"))
        return answer.get("value")

    @staticmethod
    def _read(app, answer):
        from app.services import health, subscription_counts  # the heartbeat, backlog and counter readers
        with app.app_context():
            try:
                answer["value"] = (health.outbox_backlog(), health.scheduler_heartbeat(),
                                   subscription_counts.by_status(db.session))
            except Exception as error:  # noqa: BLE001 - whatever the driver raised: the database did not answer
                answer["error"] = type(error).__name__
            finally:
                end_read_quietly(db.session)


def _gauge(name, documentation, value):
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


def multiprocess_directory():
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


def render() -> bytes:
    """The text exposition of every process's counters and histograms, then the database gauges."""
    if multiprocess_directory():
        processes = CollectorRegistry()
        multiprocess.MultiProcessCollector(processes)
    else:
        processes = PROCESS_REGISTRY
    database = CollectorRegistry()
    database.register(DatabaseCollector())
    return generate_latest(processes) + generate_latest(database)
