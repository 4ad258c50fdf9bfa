"""Loading the application in a serving process: configuration refused with one line, process models that
would silently break (several processes sharing per-process state) refused with the fix, and the scheduler
started. `app.wsgi` calls `load()`; so does the console script for its commands."""
import os
import sys

from sqlalchemy.engine import make_url

from app import create_app
from app.config import ConfigError, parse_whole_number
from app.worker.scheduler import running_one_off_command, start_when_serving

# gunicorn halts (instead of respawning workers forever) when a worker exits with its "app failed to load".
APP_LOAD_ERROR = 4


def load():
    """The application for this process, with its scheduler when it serves; exits with one line on stderr
    when a setting is bad."""
    try:
        app = create_app()
        if not running_one_off_command():
            refuse_unsafe_process_model(app.config, web_process_count())
    except ConfigError as error:
        sys.stderr.write(f"entity-monitor: configuration refused: {error}\n")
        raise SystemExit(APP_LOAD_ERROR) from None
    start_when_serving(app)
    return app


def check_serve_settings(environ=os.environ) -> None:
    """The process settings `entity-monitor serve` hands to gunicorn (app/gunicorn_conf.py), refused like any
    other setting (ConfigError): gunicorn would otherwise listen with no worker (0), or end in a traceback."""
    for name in ("WEB_CONCURRENCY", "GUNICORN_THREADS"):
        raw = environ.get(name, "")
        if raw.strip():
            value = parse_whole_number(name, raw)
            if value < 1:
                raise ConfigError(f"{name}={value} is too small: the smallest accepted value is 1")


def web_process_count():
    """How many worker processes the gunicorn serving this process runs; None under any other server."""
    if "gunicorn.arbiter" not in sys.modules:
        return None
    try:
        from gunicorn.app.wsgiapp import WSGIApplication
        return WSGIApplication().cfg.workers  # gunicorn's own reading of its argv, config file and environment
    except (Exception, SystemExit):  # noqa: BLE001 - an unreadable command line is gunicorn's to report
        return None


def refuse_unsafe_process_model(config, processes) -> None:
    """Several web processes silently break per-process state: refuse them with the fix (ConfigError)."""
    if not processes or processes <= 1:
        return
    if config["RATELIMIT_ENABLED"] and config["RATELIMIT_STORAGE_URI"].startswith("memory"):
        raise ConfigError(f"{processes} worker processes with RATELIMIT_STORAGE_URI=memory:// would multiply every "
                          f"rate limit by {processes}: set RATELIMIT_STORAGE_URI=redis://127.0.0.1:6379, or serve "
                          "with one worker process and threads (gunicorn --threads 8)")
    if make_url(config["SQLALCHEMY_DATABASE_URI"]).get_backend_name() == "sqlite":
        raise ConfigError(f"SQLite takes one web process, not {processes}: serve with one worker process and "
                          "threads (gunicorn --threads 8), or set DATABASE_URL=postgresql://… for several")
