"""The application factory."""
import logging
import os

from flask import Flask
from limits.errors import ConfigurationError as LimitsConfigurationError
from sqlalchemy.engine import make_url
from werkzeug.middleware.proxy_fix import ProxyFix

from app import config as config_module
from app.extensions import db, limiter, migrate
from app.logging_setup import configure_logging
from app.rate_limit_storage import client_timeouts
from app.redaction import RedactSecretsFromRequestLine

# An empty PROMETHEUS_MULTIPROC_DIR is unset, as every setting's empty value is, before prometheus-client is imported
# (it decides then): it took `PROMETHEUS_MULTIPROC_DIR=` for a directory, the working one, so every process, one-off
# commands too, wrote its counter files wherever it was started and /metrics showed none of them (operator walk).
for _name in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
    if _name in os.environ and not os.environ[_name].strip():
        del os.environ[_name]

API_PREFIXES = ("/api/v1", "/v1")
MAX_REMEMBERED_FUNCTIONS = 1000  # the app has ~110 views and hooks


class MonitorFlask(Flask):
    """Flask deciding once per function, not on every call, whether a view or hook is async: `ensure_sync`
    inspects the function each time, and a request runs about 16 of them (2% of a list request)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._as_sync = {}

    def ensure_sync(self, func):
        found = self._as_sync.get(func)
        if found is None:
            found = super().ensure_sync(func)
            if len(self._as_sync) < MAX_REMEMBERED_FUNCTIONS:  # functions made per request must not pile up
                self._as_sync[func] = found
        return found


def create_app(test_config=None):
    """The application, configured and validated (ConfigError names a bad setting); it starts no threads."""
    app = MonitorFlask(__name__, instance_relative_config=True, instance_path=_instance_path())
    app.json.sort_keys = False
    # `/api/v1//account` is an unknown route (404 in JSON), not an HTML redirect to a Location built from the Host
    app.url_map.merge_slashes = False
    _configure(app, test_config)
    configure_logging(app)
    hops = app.config["TRUSTED_PROXY_HOPS"]
    if hops:  # behind nginx: trust its X-Forwarded-For, or per-address limits could be dodged by any client
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)
    app.wsgi_app = RedactSecretsFromRequestLine(app.wsgi_app)
    if app.config["TRUSTED_HOSTS"]:
        app.wsgi_app = _host_in_lower_case(app.wsgi_app)

    from app import models  # noqa: F401 - registers the tables with the metadata
    from app.database import configure_engine
    db.init_app(app)
    app.teardown_appcontext(_end_the_session)  # runs before Flask-SQLAlchemy's own (teardowns run in reverse)
    migrate.init_app(app, db, directory=os.path.join(app.root_path, "migrations"))
    with app.app_context():
        configure_engine(db.engine, app.config["SQLITE_BUSY_TIMEOUT_MS"])

    _register_request_hooks(app)
    _register_blueprints(app)
    from app.api.errors import register_error_handlers
    register_error_handlers(app)

    from app.cli import register_commands
    register_commands(app)
    return app


def make_instance_folder(app) -> None:
    """The instance folder, made by `db upgrade` as it creates the database there: every command made it, and one
    that only reads left it behind, empty, where no database was (operator walk)."""
    try:
        os.makedirs(app.instance_path, exist_ok=True)
    except OSError as error:  # a file there, no permission, a read-only file system
        raise config_module.ConfigError(f"INSTANCE_PATH={app.instance_path!r} cannot be used as a folder: "
                                        f"{error.strerror}") from None


def _end_the_session(_error=None):
    """End the request's session before Flask-SQLAlchemy removes it. A connection the server ended once the answer
    was made (a restart, a failover, pg_terminate_backend) fails the rollback of the request's read, after SQLAlchemy
    has let it go: raised from the teardown, that turned the answer made (a write already committed too) into a 500
    with a traceback (PostgreSQL walk). Said in one line; the next request opens another connection."""
    from sqlalchemy.exc import DBAPIError
    from app.database import first_line
    try:
        db.session.close()
    except DBAPIError as error:
        logging.getLogger(__name__).warning("the request's database connection was lost as it ended: %s",
                                            first_line(error))


def _configure(app, test_config):
    app.config.from_object(config_module.Defaults)
    app.config["SQLALCHEMY_DATABASE_URI"] = "sqlite:///" + os.path.join(app.instance_path, "monitor.db")
    try:
        app.config.from_pyfile("config.py", silent=True)
    except Exception as error:  # noqa: BLE001 - any error of the file's own code: one line, not a traceback
        raise config_module.ConfigError(f"{os.path.join(app.instance_path, 'config.py')} cannot be read: "
                                        f"{type(error).__name__}: {error}") from None
    config_module.read_instance_values(app.config)  # "0" or "30" as the environment writes them; else its types
    app.config.update(config_module.settings_from_environment())
    if test_config:
        app.config.update(test_config)
    config_module.validate(app.config)
    app.config.setdefault("SQLALCHEMY_ENGINE_OPTIONS", _engine_options(app.config))
    app.config["RATELIMIT_STORAGE_OPTIONS"] = {**client_timeouts(app.config["RATELIMIT_STORAGE_URI"]),
                                               **app.config["RATELIMIT_STORAGE_OPTIONS"]}


def _host_in_lower_case(wsgi_app):
    """Werkzeug compares the Host header with TRUSTED_HOSTS as sent, while a host name is case-insensitive (RFC 9110):
    `Host: Monitor.Example.com` was refused (review)."""
    def with_the_host_in_lower_case(environ, start_response):
        if "HTTP_HOST" in environ:
            environ["HTTP_HOST"] = environ["HTTP_HOST"].lower()
        return wsgi_app(environ, start_response)
    return with_the_host_in_lower_case


def _engine_options(config):
    """A pool as large as DATABASE_POOL_SIZE (SQLAlchemy's default of 5 made 8 serving threads open and close
    a connection every ~17 requests). Ping pooled connections before use where they can go stale (a server
    restarts, a proxy drops idle ones); a SQLite file's connection cannot, and the ping would be one more
    statement per request. An in-memory SQLite database has a single connection and takes no pool size. A failed
    statement's error never shows its values: logged, they held webhook secrets and key hashes (walk)."""
    database_url = config["SQLALCHEMY_DATABASE_URI"]
    options = {"pool_pre_ping": not database_url.startswith("sqlite"), "hide_parameters": True}
    if not _in_memory_sqlite(database_url):
        options["pool_size"] = config["DATABASE_POOL_SIZE"]
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":  # what the URL's own query sets is kept
        options["connect_args"] = {name: value for name, value in POSTGRESQL_CONNECTION.items()
                                   if name not in url.query}
    return options


# libpq's settings: a connect to a server that does not answer gives up after 10 s (the system's default is minutes),
# and a connection whose server vanished (a partition, a host gone) is found dead within about a minute, by TCP
# keepalives while it waits for an answer and by tcp_user_timeout while what it sent is unacknowledged: every
# serving thread used to wait on such a connection for as long as the outage lasted, /healthz included (fault walk).
POSTGRESQL_CONNECTION = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                         "keepalives_count": 3, "tcp_user_timeout": 30_000}


def _in_memory_sqlite(database_url) -> bool:
    url = make_url(database_url)
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _instance_path():
    """`INSTANCE_PATH` (an installed service keeps its state there, e.g. /var/lib/entity-monitor); else the
    checkout's `instance/` folder, or Flask's default for an installed package (<venv>/var/app-instance)."""
    configured = os.environ.get("INSTANCE_PATH", "").strip()
    if configured:
        return os.path.abspath(configured)
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(checkout, "instance") if os.path.exists(os.path.join(checkout, "setup.cfg")) else None


def _register_request_hooks(app):
    from app.api.auth import assign_request_id, count_request, identify_caller, set_request_id_header
    from app.api.http import (answer_as_typed, answer_options_with_no_content, never_cache_api_answers,
                              refuse_a_body_where_none_is_taken, refuse_nul_in_query_and_form)
    from app.api.limits import add_rate_limit_headers
    # Order matters: the caller is identified before flask-limiter's own before_request hook, which init_app
    # registers next, so limits key on the validated API key; a request refused for NUL spends no limit.
    app.before_request(assign_request_id)
    app.before_request(identify_caller)
    app.before_request(refuse_nul_in_query_and_form)
    try:
        limiter.init_app(app)
    except LimitsConfigurationError as error:  # e.g. redis+sentinel:// without its service name
        uri = app.config["RATELIMIT_STORAGE_URI"]  # shown without its password (it was shown whole: walk), and
        shown, why = config_module.without_password(uri), config_module.limits_refusal(uri, error)  # so is limits' echo
        raise config_module.ConfigError(f"RATELIMIT_STORAGE_URI={shown!r} cannot be used: {why}") from None
    app.before_request(refuse_a_body_where_none_is_taken)  # after the limiter: a refused request spends one
    app.after_request(add_rate_limit_headers)
    app.after_request(count_request)
    app.after_request(set_request_id_header)
    app.after_request(never_cache_api_answers)
    app.after_request(answer_options_with_no_content)
    app.after_request(answer_as_typed)


def _register_blueprints(app):
    from app.api import account, events, keys, meta, metrics, subscriptions, webhooks
    from app.api.http import PathTextConverter, id_converter_beside
    from app.dashboard import bp as dashboard_bp
    app.url_map.converters["default"] = PathTextConverter
    app.url_map.converters["subscription"] = id_converter_beside("bulk", "export")  # the API's
    app.url_map.converters["dashboard_subscription"] = id_converter_beside("bulk", "import")
    app.register_blueprint(meta.bp)
    app.register_blueprint(dashboard_bp)
    metrics.register(app)
    keyed = [account.bp, keys.bp, subscriptions.bp, events.bp, webhooks.bp]
    for prefix in API_PREFIXES:
        suffix = prefix.strip("/").replace("/", "_")
        app.register_blueprint(meta.docs_bp, url_prefix=prefix, name=f"docs_{suffix}")
        for blueprint in keyed:
            app.register_blueprint(blueprint, url_prefix=prefix, name=f"{blueprint.name}_{suffix}")
