"""Loading the application in a serving process: configuration refused with one line, process models that
would silently break (several processes sharing per-process state) refused with the fix, and the scheduler
started. `app.wsgi` calls `load()`; so does the console script for its commands."""
import atexit
import contextlib
import gc
import io
import os
import socket
import sys

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from app import cpu_affinity, create_app
from app.admission import QueuedRequests
from app.config import ConfigError, parse_whole_number
from app.database import login_refused, missing_database, missing_schema, unreachable
from app.exits import APP_LOAD_ERROR, WORKER_BOOT_ERROR, stop
from app.extensions import db
from app.metrics import multiprocess_directory
from app.services import usage
from app.worker.scheduler import running_one_off_command, start_when_serving


def load():
    """The application for this process, with its scheduler when it serves; exits with one line on stderr
    when a setting is bad."""
    serving = not running_one_off_command()
    try:
        app = create_app()
        if serving:
            refuse_unsafe_process_model(app.config, gunicorn_settings())
    except ConfigError as error:
        stop(f"configuration refused: {error}", APP_LOAD_ERROR)
    serving_for_real = serving and not app.config.get("TESTING")
    if serving:
        atexit.register(_write_buffered_usage_counts, app)
        queue_requests(app)
        if serving_for_real:
            refuse_a_database_that_cannot_serve(app)
    try:
        start_when_serving(app)
    except DBAPIError as error:
        _stop_in_one_line(error)
    if serving_for_real:
        keep_start_up_objects_out_of_collections()
    return app


def keep_start_up_objects_out_of_collections() -> None:
    """The ~115,000 objects of the loaded application (modules, classes, the app, its caches) are never garbage, yet
    each of Python's full collections walked them all: ~50 ms every half-minute under load, with every request
    queued behind it. Frozen (gc.freeze), a full collection walks what came later: ~1 ms."""
    gc.collect()
    gc.freeze()


def refuse_a_database_that_cannot_serve(app):
    """Before a long-running process starts (`serve`, `scheduler run`): a schema of another release or none stops it
    for good, and so does a SQLite file that is not there (`refuse_a_missing_database`); a database it cannot reach
    stops it to be started again (`_stop_in_one_line`)."""
    refuse_a_missing_database(app)
    try:
        refuse_a_schema_of_another_release(app)
    except DBAPIError as error:
        _stop_in_one_line(error)


def refuse_a_missing_database(app):
    """A SQLite file that is not there (`missing_database`: SQLite would create it empty) stops a long-running process
    for good, as a setting to fix: `serve`, `scheduler run` and `metrics serve`, whose unit would restart it for ever
    on exit 1."""
    problem = missing_database(app.config["SQLALCHEMY_DATABASE_URI"])
    if problem is not None:
        stop(problem, APP_LOAD_ERROR)


def queue_requests(app) -> None:
    """Requests run REQUEST_CONCURRENCY at a time, the rest queued (app/admission.py): by default one at a time on
    SQLite, and no queue on PostgreSQL, where a request waits on the server's answers and others run meanwhile."""
    size = app.config["REQUEST_CONCURRENCY"]
    if size is None:
        size = 1 if make_url(app.config["SQLALCHEMY_DATABASE_URI"]).get_backend_name() == "sqlite" else 0
    if size:
        app.wsgi_app = QueuedRequests(app.wsgi_app, size, app.config["MAX_CONTENT_LENGTH"])


def refuse_a_schema_of_another_release(app):
    """Serve only a database migrated to this release's head: one behind answered 500s wherever a column or a
    constraint was missing. No schema at all, or no database, raises the DBAPIError `_stop_in_one_line` reads."""
    from alembic.script import ScriptDirectory
    with app.app_context():
        needed = set(ScriptDirectory.from_config(app.extensions["migrate"].migrate.get_config()).get_heads())
        found = set(db.session.scalars(text("SELECT version_num FROM alembic_version")))
        db.session.remove()
    if found != needed:
        stop(f"the database's schema is at {', '.join(sorted(found)) or 'no version'}, this release's is "
             f"{', '.join(sorted(needed))}: run `entity-monitor db upgrade` first", APP_LOAD_ERROR)
    refuse_tiers_that_are_gone(app)


def refuse_tiers_that_are_gone(app):
    """Accounts on a tier that TIERS (instance/config.py) no longer has: every request of theirs was a 500 (a KeyError
    in the rate limiter) and their checks failed, the service running on. Stops it for good, naming them."""
    from app.services.accounts import tiers_gone
    with app.app_context():
        gone = tiers_gone(db.session)
        db.session.remove()
    if gone:
        named = "; ".join(f"{tier!r}: {len(ids):,} ({', '.join(ids[:5])}{', …' if len(ids) > 5 else ''})"
                          for tier, ids in gone.items())
        stop(f"configuration refused: accounts are on tiers TIERS does not have ({named}): add the tiers back to TIERS "
             "in instance/config.py, or move the accounts with `entity-monitor accounts set-tier ACCOUNT_ID TIER` "
             "first", APP_LOAD_ERROR)


def _stop_in_one_line(error: DBAPIError):
    """A database without its schema, or that refused the login, stops the service for good (APP_LOAD_ERROR: gunicorn
    halts, systemd does not restart it); one that cannot be reached now stops it to be started again (gunicorn's boot
    error, which systemd restarts: the database may be back by then). Anything else is raised as it is."""
    problem = missing_schema(error) or login_refused(error)
    if problem is not None:
        stop(problem, APP_LOAD_ERROR)
    problem = unreachable(error)
    if problem is not None:
        stop(problem, WORKER_BOOT_ERROR)
    raise error


def _write_buffered_usage_counts(app):
    """Request counts wait in memory for a few seconds (app/services/usage.py): a stopping server writes them."""
    with app.app_context():
        usage.flush_request_counts()


SERVE_SETTINGS = ("BIND", "WEB_CONCURRENCY", "GUNICORN_THREADS")


def forget_empty_serve_settings(environ=os.environ) -> None:
    """A serve setting set empty (`WEB_CONCURRENCY=` in the env file) is unset, as every other setting's empty value
    is: gunicorn read it as it was imported, `int('')`, and `serve` ended in its traceback, exit 1 (restarted by the
    unit for ever); an empty BIND listened on no address it named (`Listening at:  `) (operator walk)."""
    for name in SERVE_SETTINGS:
        if name in environ and not environ[name].strip():
            del environ[name]


def check_serve_settings(environ=os.environ) -> None:
    """The process settings `entity-monitor serve` hands to gunicorn (app/gunicorn_conf.py), refused like any
    other setting (ConfigError): gunicorn would otherwise listen with no worker (0), or end in a traceback."""
    for name in ("WEB_CONCURRENCY", "GUNICORN_THREADS"):
        raw = environ.get(name, "")
        if raw.strip():
            value = parse_whole_number(name, raw)
            if value < 1:
                raise ConfigError(f"{name}={value} is too small: the smallest accepted value is 1")
    _check_bind(environ.get("BIND", "").strip())
    cpu_affinity.worker_cpus(environ)


def _gunicorn_reads(bind: str) -> bool:
    """Whether gunicorn can read BIND: an IPv6 address without its brackets (`::1:8000`) passed the check above,
    then gunicorn stopped on "'' is not a valid port number" with exit 1, which the unit restarts."""
    from gunicorn.util import parse_address
    try:
        parse_address(bind)
    except RuntimeError:
        return False
    return True


def _check_bind(bind: str) -> None:
    """BIND as gunicorn reads it (HOST:PORT, [IPv6]:PORT, unix:PATH, fd://N): one gunicorn cannot read or
    resolve answered five retries of its own, then an exit that systemd restarts for ever. A host without its port
    is refused too: gunicorn took port 8000 without a word (operator walk)."""
    if not bind or bind.startswith(("unix:", "fd://")):
        return
    if bind.endswith("]") or ":" not in bind:  # gunicorn would listen on its default port, 8000, unsaid
        raise ConfigError(f"BIND={bind!r} has no port: write HOST:PORT (e.g. {bind}:8000) or [IPv6]:PORT")
    host, _, port = bind.rpartition(":")
    if not (port.isdigit() and int(port) <= 65535 and _gunicorn_reads(bind)):
        raise ConfigError(f"BIND={bind!r} is not HOST:PORT (e.g. 127.0.0.1:8000), [IPv6]:PORT or unix:PATH")
    try:
        socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise ConfigError(f"BIND={bind!r} names a host this machine cannot resolve ({error})") from None


def gunicorn_settings(argv=None):
    """The settings of the gunicorn serving this process, or of one started with `argv` (its own reading of its
    command line, config file and environment); None under any other server."""
    if argv is None and "gunicorn.arbiter" not in sys.modules:
        return None
    saved, sys.argv = sys.argv, argv or sys.argv
    try:  # quiet: gunicorn started next says what is wrong with its command line (its usage was printed twice)
        from gunicorn.app.wsgiapp import WSGIApplication
        with contextlib.redirect_stderr(io.StringIO()):
            return WSGIApplication().cfg
    except (Exception, SystemExit):  # noqa: BLE001 - an unreadable command line is gunicorn's to report
        return None
    finally:
        sys.argv = saved


def refuse_unsafe_process_model(config, gunicorn) -> None:
    """`--preload` (the scheduler would start in gunicorn's master, before the fork) and several web processes
    sharing per-process state silently break: refuse them with the fix (ConfigError). The metrics: each worker answered
    a scrape with its own counters (three workers, 300 requests: 63, 110 and 127 in turn), which Prometheus reads as
    counters going back and forth (scale-out walk)."""
    if gunicorn is None:
        return
    if gunicorn.preload_app:
        raise ConfigError("gunicorn --preload is not supported: the scheduler would start in gunicorn's master "
                          "process; serve without --preload")
    processes = gunicorn.workers
    if processes <= 1:
        return
    if config["RATELIMIT_ENABLED"] and config["RATELIMIT_STORAGE_URI"].startswith("memory"):
        raise ConfigError(f"{processes} worker processes with RATELIMIT_STORAGE_URI=memory:// would multiply every "
                          f"rate limit by {processes}: set RATELIMIT_STORAGE_URI=redis://127.0.0.1:6379, or serve "
                          "with one worker process and threads (gunicorn --threads 8)")
    if make_url(config["SQLALCHEMY_DATABASE_URI"]).get_backend_name() == "sqlite":
        raise ConfigError(f"SQLite takes one web process, not {processes}: serve with one worker process and "
                          "threads (gunicorn --threads 8), or set DATABASE_URL=postgresql://… for several")
    if config["METRICS_ENABLED"] and not multiprocess_directory():
        raise ConfigError(f"{processes} worker processes without PROMETHEUS_MULTIPROC_DIR would each answer /metrics "
                          "with their own counts only: set it to an empty directory every worker and scheduler "
                          "shares (e.g. /run/entity-monitor/metrics), or serve with one worker process and threads")
