"""Configuration: defaults here, then `instance/config.py`, then environment variables (contract §9).

Every environment variable is parsed strictly and the merged configuration is validated at start-up:
a bad value raises ConfigError, whose message is one line naming the variable and what it accepts.
"""
import importlib.util
import os
import re
import ssl
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from app.common import HOST_NAME

MINUTE = 60
WINDOW = 15 * MINUTE

# Tiers are configuration: cap (None = unlimited), check interval, and per-class rate limits
# ("per 15 minutes" windows, contract §8).
DEFAULT_TIERS = {
    "starter": {"subscription_limit": 100, "check_interval_seconds": 86400,
                "rate_limits": {"read": 1000, "write": 100, "bulk": 10, "default": 100}},
    "growth": {"subscription_limit": 1000, "check_interval_seconds": 86400,
               "rate_limits": {"read": 3000, "write": 300, "bulk": 30, "default": 300}},
    "scale": {"subscription_limit": 10000, "check_interval_seconds": 43200,
              "rate_limits": {"read": 10000, "write": 1000, "bulk": 100, "default": 1000}},
    "enterprise": {"subscription_limit": None, "check_interval_seconds": 21600,
                   "rate_limits": {"read": 30000, "write": 3000, "bulk": 300, "default": 3000}},
}


class Defaults:
    MAX_CONTENT_LENGTH = 1024 * 1024
    SQLITE_BUSY_TIMEOUT_MS = 10000
    # Connections a process keeps open: at least its threads that use the database at once (gunicorn's 8, the
    # scheduler's jobs, the webhook senders). Past it, each extra connection is opened for one transaction and
    # closed again (on SQLite ~10 ms of CPU: the pragmas and parsing the schema).
    DATABASE_POOL_SIZE = 20
    # Requests a serving process runs at once, the rest queued in arrival order (app/admission.py); None: one on
    # SQLite, every thread on PostgreSQL (its round trips leave the interpreter to the other requests); 0: no queue
    REQUEST_CONCURRENCY = None

    RATELIMIT_STORAGE_URI = "memory://"
    # A shared storage (Redis) that goes down: each process counts in its own memory until it answers again,
    # instead of every keyed request failing (walk); its errors come as limits' StorageError
    RATELIMIT_IN_MEMORY_FALLBACK_ENABLED = True
    RATELIMIT_STORAGE_OPTIONS = {"wrap_exceptions": True}
    RATELIMIT_ENABLED = True
    RATELIMIT_WINDOW_SECONDS = WINDOW
    RATELIMIT_UNAUTHENTICATED = 100
    TRUSTED_PROXY_HOPS = 0  # 1 behind one reverse proxy (nginx) whose X-Forwarded-For is trusted
    # The Host names requests may carry (Flask's own setting: any other is a 400); None: any, as before it existed
    TRUSTED_HOSTS = None
    TIERS = DEFAULT_TIERS
    DEFAULT_TIER = "starter"
    TRIAL_DAYS = 14
    MAX_API_KEYS = 25
    API_KEY_MODE = "live"
    KEY_LAST_USED_RESOLUTION_SECONDS = MINUTE

    NETWORK_DOMAIN = "linkedin.com"

    SCHEDULER_ENABLED = True
    SCHEDULER_CHECK_POLL_SECONDS = 2
    SCHEDULER_DELIVERY_POLL_SECONDS = 1
    SCHEDULER_HEARTBEAT_SECONDS = 5
    SCHEDULER_STANDBY_POLL_SECONDS = 10  # a process waiting for the SQLite scheduler lock retries this often
    HEALTH_SCHEDULER_MAX_LAG_SECONDS = 120
    CHECK_BATCH_SIZE = 200
    CHECK_LEASE_SECONDS = 120  # a batch stops fetching after half of it, so a claim never outlives its lease
    CHECK_INITIAL_DELAY_SECONDS = 60
    CHECK_INTERVAL_SECONDS = None  # None: the tier's interval
    CHECK_JITTER_FRACTION = 0.1
    CHECK_RETRY_BASE_SECONDS = 60
    EMPLOYEE_COUNT_MIN_PERCENT = 0.0

    PROVIDER = "simulated"
    PROVIDER_HTTP_URL = None
    PROVIDER_HTTP_TOKEN = None
    PROVIDER_HTTP_TIMEOUT_SECONDS = 10
    PROVIDER_RATE_LIMIT = None  # e.g. "300/minute": the vendor's limit, shared by every scheduler process
    PROVIDER_RATE_LIMIT_STORAGE_URI = None  # None: the budget lives in the database; or redis://…
    PROVIDER_CONCURRENCY = None  # calls in flight across all processes; None: what the provider declares
    PROVIDER_BATCH_SIZE = None  # ids per upstream call, at most what the provider declares
    PROVIDER_MAX_RETRY_AFTER_SECONDS = 3600  # the longest pause a vendor's Retry-After is obeyed for
    SIMULATED_SEED = 1
    SIMULATED_PACE_SECONDS = 86400  # one simulated day per epoch; the quick start sets a fast pace
    SIMULATED_RATES = "realistic"  # or "demo": every change within a few epochs (the quick start)
    SIMULATED_LATENCY_MS = 0
    SIMULATED_FAILURE_PERCENT = 0.0
    SIMULATED_THROTTLE_PERCENT = 0.0
    SIMULATED_RETRY_AFTER_SECONDS = 30.0

    WEBHOOK_ALLOW_HTTP = False
    WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    WEBHOOK_RETRY_SCHEDULE = [5, 300, 1800, 7200, 18000, 36000, 36000]
    WEBHOOK_RETRY_JITTER_FRACTION = 0.2
    WEBHOOK_THROTTLED_MIN_DELAY_SECONDS = 60
    WEBHOOK_TIMEOUT_SECONDS = 10
    WEBHOOK_MAX_RESPONSE_BYTES = 64 * 1024
    WEBHOOK_WORKERS = 8
    WEBHOOK_BATCH_SIZE = 100
    WEBHOOK_LEASE_SECONDS = 120
    WEBHOOK_DISABLE_AFTER_SECONDS = 5 * 86400
    WEBHOOK_SECRET_OVERLAP_SECONDS = 86400
    WEBHOOK_RECOVER_MAX_DAYS = 14
    # Tests and the delivery benchmark only (refused unless TESTING; never read from the environment): trust
    # this CA bundle (PEM) instead of the system's, and let a receiver on a loopback address pass the guards
    WEBHOOK_TEST_CA_BUNDLE = None
    WEBHOOK_TEST_ALLOW_LOOPBACK = False

    LOG_FORMAT = "text"  # or "json": one JSON object per line
    METRICS_ENABLED = True  # GET /metrics

    EVENT_RETENTION_DAYS = 90
    RETENTION_BATCH_SIZE = 500


class ConfigError(Exception):
    """A setting the service cannot start with; the message names the variable and the accepted values."""


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
# limits' storage schemes and the client package each needs
STORAGE_PACKAGES = {"redis": "redis", "rediss": "redis", "redis+sentinel": "redis", "redis+cluster": "redis",
                    "memcached": "pymemcache", "mongodb": "pymongo", "mongodb+srv": "pymongo", "valkey": "valkey",
                    "valkeys": "valkey"}
RATELIMIT_SCHEMES = ("memory", *STORAGE_PACKAGES)


def parse_bool(name, raw):
    word = raw.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ConfigError(f"{name}={raw!r} is not a boolean: use one of {'/'.join(TRUE_WORDS + FALSE_WORDS)}")


def _ascii_number_text(raw: str) -> str:
    """The value stripped, for int() or float(), which read any script's digits (CHECK_INTERVAL_SECONDS=３０ was 30):
    ValueError unless it is ASCII."""
    text = raw.strip()
    if not text.isascii():
        raise ValueError(text)
    return text


def parse_whole_number(name, raw):
    try:
        return int(_ascii_number_text(raw))
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number (digits only, e.g. 30)") from None


def parse_number(name, raw):
    try:
        value = float(_ascii_number_text(raw))
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number (e.g. 2.5)") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{name}={raw!r} is not a finite number")
    return value


def parse_seconds_list(name, raw):
    parts = [part.strip() for part in raw.split(",")]
    if not all(parts):
        raise ConfigError(f"{name}={raw!r} must be comma-separated seconds, e.g. 5,300,1800")
    return [parse_number(name, part) for part in parts]


def parse_text(_name, raw):
    return raw


def parse_names(name, raw):
    parts = [part.strip() for part in raw.split(",")]
    if not all(parts):
        raise ConfigError(f"{name}={raw!r} must be comma-separated names, e.g. monitor.example.com,localhost")
    return parts


PARSERS = {
    parse_bool: ("RATELIMIT_ENABLED", "SCHEDULER_ENABLED", "WEBHOOK_ALLOW_HTTP", "WEBHOOK_ALLOW_PRIVATE_ADDRESSES",
                 "METRICS_ENABLED"),
    parse_whole_number: ("DATABASE_POOL_SIZE", "SQLITE_BUSY_TIMEOUT_MS", "RATELIMIT_UNAUTHENTICATED", "TRIAL_DAYS",
                         "TRUSTED_PROXY_HOPS", "CHECK_INITIAL_DELAY_SECONDS",
                         "CHECK_INTERVAL_SECONDS", "CHECK_LEASE_SECONDS", "CHECK_BATCH_SIZE", "SIMULATED_SEED",
                         "SIMULATED_PACE_SECONDS", "WEBHOOK_WORKERS", "WEBHOOK_BATCH_SIZE", "WEBHOOK_LEASE_SECONDS",
                         "HEALTH_SCHEDULER_MAX_LAG_SECONDS", "EVENT_RETENTION_DAYS", "SIMULATED_LATENCY_MS",
                         "PROVIDER_CONCURRENCY", "PROVIDER_BATCH_SIZE", "REQUEST_CONCURRENCY",
                         "PROVIDER_MAX_RETRY_AFTER_SECONDS"),
    parse_number: ("EMPLOYEE_COUNT_MIN_PERCENT", "PROVIDER_HTTP_TIMEOUT_SECONDS", "SIMULATED_FAILURE_PERCENT",
                   "SIMULATED_THROTTLE_PERCENT", "SIMULATED_RETRY_AFTER_SECONDS", "SCHEDULER_STANDBY_POLL_SECONDS"),
    parse_seconds_list: ("WEBHOOK_RETRY_SCHEDULE",),
    parse_names: ("TRUSTED_HOSTS",),
    parse_text: ("RATELIMIT_STORAGE_URI", "PROVIDER", "PROVIDER_HTTP_URL", "PROVIDER_HTTP_TOKEN", "NETWORK_DOMAIN",
                 "API_KEY_MODE", "LOG_FORMAT", "PROVIDER_RATE_LIMIT", "PROVIDER_RATE_LIMIT_STORAGE_URI",
                 "SIMULATED_RATES", "DEFAULT_TIER"),
}

#: whole-number settings and their smallest accepted value
MINIMUMS = {"DATABASE_POOL_SIZE": 1, "SQLITE_BUSY_TIMEOUT_MS": 0, "RATELIMIT_UNAUTHENTICATED": 1, "TRIAL_DAYS": 1,
            "SCHEDULER_STANDBY_POLL_SECONDS": 0.1, "TRUSTED_PROXY_HOPS": 0, "CHECK_INITIAL_DELAY_SECONDS": 0,
            "CHECK_INTERVAL_SECONDS": 1, "CHECK_LEASE_SECONDS": 1, "CHECK_BATCH_SIZE": 1, "SIMULATED_PACE_SECONDS": 1,
            "WEBHOOK_WORKERS": 1,
            "WEBHOOK_BATCH_SIZE": 1, "WEBHOOK_LEASE_SECONDS": 1, "HEALTH_SCHEDULER_MAX_LAG_SECONDS": 1,
            "EVENT_RETENTION_DAYS": 1, "SIMULATED_LATENCY_MS": 0, "PROVIDER_CONCURRENCY": 1,
            "PROVIDER_BATCH_SIZE": 1, "SIMULATED_FAILURE_PERCENT": 0, "SIMULATED_THROTTLE_PERCENT": 0,
            "SIMULATED_RETRY_AFTER_SECONDS": 0, "REQUEST_CONCURRENCY": 0, "PROVIDER_MAX_RETRY_AFTER_SECONDS": 1,
            "EMPLOYEE_COUNT_MIN_PERCENT": 0, "PROVIDER_HTTP_TIMEOUT_SECONDS": 0.1}


#: settings and their largest accepted value (past it a value is a mistake: a time no timestamp holds, a wait
#: that never ends, a percentage of more than all)
MAXIMUMS = {"SIMULATED_FAILURE_PERCENT": 100, "SIMULATED_THROTTLE_PERCENT": 100, "SQLITE_BUSY_TIMEOUT_MS": 600_000,
            "TRIAL_DAYS": 3650, "SCHEDULER_STANDBY_POLL_SECONDS": 3600}


#: settings that put a moment that many seconds ahead, and their bound: past it the moment is no timestamp
#: (year 9999), and a bound far below that catches a mistyped value at start-up instead of at the first check
DELAY_SETTINGS = ("CHECK_INITIAL_DELAY_SECONDS", "CHECK_INTERVAL_SECONDS", "CHECK_LEASE_SECONDS",
                  "WEBHOOK_LEASE_SECONDS", "PROVIDER_MAX_RETRY_AFTER_SECONDS")
LONGEST_DELAY_SECONDS = 10 * 365 * 86400  # ten years


def _validate_webhook_lease(config) -> None:
    """A sender starts a claim's tries until half its lease (`WEBHOOK_LEASE_SECONDS`) and records them once they are
    back, each up to WEBHOOK_TIMEOUT_SECONDS: a timeout of half the lease or more outlives the claim (at exactly half,
    a try started at the deadline ends at the lease and is recorded after it). Another sender then claimed the
    delivery again and sent it while the first try was on the wire, or after it had succeeded, and its own failure
    put a delivered event back on the retry schedule. Refused at start-up, as a provider timeout is against
    CHECK_LEASE_SECONDS. The timeout is no environment variable: set as text in `instance/config.py` (or None) it
    failed this comparison with a TypeError, a traceback instead of the one line naming it."""
    timeout, lease = config["WEBHOOK_TIMEOUT_SECONDS"], config["WEBHOOK_LEASE_SECONDS"]
    if not (_is_number(timeout) and 0 < timeout < float("inf")):
        raise ConfigError(f"WEBHOOK_TIMEOUT_SECONDS={timeout!r} in config.py is not a positive number of seconds")
    if timeout >= lease / 2:
        raise ConfigError(f"WEBHOOK_LEASE_SECONDS={lease:g} must be more than twice WEBHOOK_TIMEOUT_SECONDS="
                          f"{timeout:g}: lengthen the lease")


def read_instance_values(config) -> None:
    """The settings of `instance/config.py`: written as text (`SCHEDULER_ENABLED = "0"`, `CHECK_INTERVAL_SECONDS =
    "30"`) they are read as the environment's ("0" was a true value, "30" a string no comparison could take);
    otherwise they must have the type the environment's would have (a float of days made a fractional trial).
    None stands only where it is the default."""
    for parse, names in PARSERS.items():
        for name in names:
            value = config.get(name)
            if value is None and getattr(Defaults, name, None) is None:
                continue
            if parse is not parse_text and isinstance(value, str):
                config[name] = parse(name, value)
            elif not _of_the_type(parse, value):
                raise ConfigError(f"{name}={value!r} in config.py is not {TYPE_NAMES[parse]}")


TYPE_NAMES = {parse_bool: "a boolean (True or False)", parse_whole_number: "a whole number",
              parse_number: "a number", parse_seconds_list: "a list of seconds", parse_names: "a list of names",
              parse_text: "text"}


def _of_the_type(parse, value) -> bool:
    if parse is parse_bool:
        return isinstance(value, bool)
    if parse is parse_whole_number:
        return _is_whole(value)
    if parse is parse_number:
        return _is_number(value)
    if parse is parse_seconds_list:
        return isinstance(value, (list, tuple)) and all(_is_number(item) for item in value)
    if parse is parse_names:
        return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
    return isinstance(value, str)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def settings_from_environment(environ=os.environ):
    """The contract §9 variables that are set (and not empty), converted to their types."""
    found = {}
    for parse, names in PARSERS.items():
        for name in names:
            if environ.get(name, "").strip():
                found[name] = parse(name, environ[name])
    if environ.get("DATABASE_URL", "").strip():
        found["SQLALCHEMY_DATABASE_URI"] = environ["DATABASE_URL"].strip()
    return found


def validate(config) -> None:
    """Refuse values the service cannot run with, before anything starts (raises ConfigError)."""
    for name, smallest in MINIMUMS.items():
        value = config.get(name)
        if value is not None and value < smallest:
            raise ConfigError(f"{name}={value} is too small: the smallest accepted value is {smallest}")
    for name, accepted in (("API_KEY_MODE", ("live", "test")), ("LOG_FORMAT", ("text", "json"))):
        if config[name] not in accepted:
            raise ConfigError(f"{name}={config[name]!r} is not accepted: use {' or '.join(accepted)}")
    for name, largest in MAXIMUMS.items():
        if config.get(name) is not None and config[name] > largest:
            raise ConfigError(f"{name}={config[name]} is too large: the largest accepted value is {largest}")
    for name in DELAY_SETTINGS:
        value = config.get(name)
        if value is not None and value > LONGEST_DELAY_SECONDS:
            raise ConfigError(f"{name}={value} is too large: the largest accepted value is {LONGEST_DELAY_SECONDS} "
                              "(ten years)")
    _validate_webhook_lease(config)
    schedule = config["WEBHOOK_RETRY_SCHEDULE"]
    if not schedule or any(delay <= 0 for delay in schedule):
        raise ConfigError("WEBHOOK_RETRY_SCHEDULE must list positive seconds, e.g. 5,300,1800")
    if max(schedule) > LONGEST_DELAY_SECONDS:
        raise ConfigError(f"WEBHOOK_RETRY_SCHEDULE may not wait more than {LONGEST_DELAY_SECONDS} seconds (ten years)")
    _validate_tiers(config["TIERS"])
    if config["DEFAULT_TIER"] not in config["TIERS"]:
        raise ConfigError(f"DEFAULT_TIER={config['DEFAULT_TIER']!r} is not a tier: use one of "
                          f"{', '.join(config['TIERS'])}")
    domain = config["NETWORK_DOMAIN"]
    if not (re.fullmatch(HOST_NAME, domain) and domain == domain.lower() and not domain.startswith("www.")):
        raise ConfigError(f"NETWORK_DOMAIN={domain!r} is not a domain name: give it bare and in lower case, "
                          "e.g. linkedin.com (no scheme, port, path or www.)")
    _validate_database_url(config["SQLALCHEMY_DATABASE_URI"])
    _validate_ratelimit_storage("RATELIMIT_STORAGE_URI", config["RATELIMIT_STORAGE_URI"])
    if config.get("PROVIDER_RATE_LIMIT_STORAGE_URI"):
        _validate_ratelimit_storage("PROVIDER_RATE_LIMIT_STORAGE_URI", config["PROVIDER_RATE_LIMIT_STORAGE_URI"],
                                    moving_window=True)
    _validate_provider(config)
    _validate_webhook_test_settings(config)
    _validate_trusted_hosts(config.get("TRUSTED_HOSTS"))


RATE_CLASSES = ("read", "write", "bulk", "default")
TIER_NAME_MAX = 40  # accounts.tier's length (app/models/account.py): PostgreSQL refused a longer one at each write
TIER_SHAPE = ("TIERS (instance/config.py) must map each tier's name to {'subscription_limit': N or None, "
              "'check_interval_seconds': N, 'rate_limits': {'read': N, 'write': N, 'bulk': N, 'default': N}} "
              "(app/config.py's DEFAULT_TIERS)")


def _validate_tiers(tiers) -> None:
    """TIERS as instance/config.py may set it: a malformed one was a traceback at start-up (`TIERS = 5`), or, a key
    left out, a KeyError in every request or check of an account on that tier (operator walk)."""
    def whole(value, smallest, largest=None) -> bool:
        return _is_whole(value) and value >= smallest and (largest is None or value <= largest)

    if not isinstance(tiers, dict) or not tiers:
        raise ConfigError(f"{TIER_SHAPE}; it is {tiers!r}")
    for name, tier in tiers.items():
        problem = None
        if not isinstance(name, str) or not name or not isinstance(tier, dict):
            problem = "is not a name mapped to a dictionary"
        elif len(name) > TIER_NAME_MAX:
            problem = f"has a name of {len(name)} characters, more than the {TIER_NAME_MAX} an account's tier holds"
        elif "subscription_limit" not in tier:  # left out it is no None (unlimited): a KeyError at each create
            problem = "has no subscription_limit (a whole number >= 0, or None for no cap)"
        elif tier["subscription_limit"] is not None and not whole(tier["subscription_limit"], 0):
            problem = f"has subscription_limit={tier['subscription_limit']!r}, not a whole number >= 0 or None"
        elif not whole(tier.get("check_interval_seconds"), 1, LONGEST_DELAY_SECONDS):
            problem = (f"has check_interval_seconds={tier.get('check_interval_seconds')!r}, not a whole number of "
                       f"seconds from 1 to {LONGEST_DELAY_SECONDS} (ten years)")
        elif not isinstance(tier.get("rate_limits"), dict) or not all(
                whole(tier["rate_limits"].get(rate_class), 1) for rate_class in RATE_CLASSES):
            problem = (f"has rate_limits={tier.get('rate_limits')!r}, not a whole number >= 1 for each of "
                       f"{', '.join(RATE_CLASSES)}")
        if problem:
            raise ConfigError(f"TIERS: the tier {name!r} {problem}. {TIER_SHAPE}")


def _validate_database_url(url):
    """A URL SQLAlchemy can connect with, to SQLite or PostgreSQL with its driver installed; refused in one line
    (a port that is no number, an unknown driver or a SQLite URL with a user were tracebacks, walk), its password
    never shown."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ConfigError(f"DATABASE_URL={without_password(url)!r} is not a database URL: use sqlite:///PATH or "
                          "postgresql://USER@HOST/DB") from None
    shown = _shown(parsed)
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigError(f"DATABASE_URL names {parsed.get_backend_name()!r}: use sqlite:///PATH or "
                          "postgresql://USER@HOST/DB")
    try:
        dialect = parsed.get_dialect()
        if dialect.is_async:  # installing the [postgres] extra, as the refusal below says, brings no asyncio driver
            raise ConfigError(f"DATABASE_URL names the asyncio driver {parsed.get_driver_name()!r}, which this service "
                              "cannot use: write postgresql://USER@HOST/DB (psycopg)")
        dialect.import_dbapi()
        _args, settings = dialect().create_connect_args(parsed)
    except ImportError as error:
        raise ConfigError(f"DATABASE_URL names {parsed.get_backend_name()} but its driver is not installed ({error}): "
                          "pip install 'entity-monitor[postgres]'") from None
    except ArgumentError as error:  # an unknown driver, a SQLite URL with a host or user
        reason = str(error).splitlines()[0]
        raise ConfigError(f"DATABASE_URL={shown!r} cannot be used ({reason}): use sqlite:///PATH or "
                          "postgresql://USER@HOST/DB") from None
    if dialect.driver == "psycopg":
        _validate_connection_settings(shown, settings)


def _validate_connection_settings(shown, settings):
    """The URL's query as psycopg reads it before it connects: a setting libpq does not know (`?conect_timeout=3`) or
    a connect_timeout that is no number (`?connect_timeout=abc`) were a traceback at start-up, of serve, db upgrade
    and scheduler run alike."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict, make_conninfo, timeout_from_conninfo
    try:
        read = conninfo_to_dict(make_conninfo(**settings))
        if "connect_timeout" in read:  # (not PGCONNECT_TIMEOUT's: the service sets its own unless the URL does)
            timeout_from_conninfo(read)
    except ProgrammingError as error:
        reason = str(error).strip().splitlines()[0]
        raise ConfigError(f"DATABASE_URL={shown!r} cannot be used ({reason}): its query takes libpq's connection "
                          "settings, e.g. ?connect_timeout=10 (whole seconds)") from None


# libpq takes a password in the URL's query too
QUERY_SECRETS = ("password", "sslpassword")


def _shown(parsed) -> str:
    """A parsed database URL as a refusal shows it: its passwords hidden, before the host (`***`) or in the query."""
    hidden = {name: "hidden" for name in parsed.query if name.lower() in QUERY_SECRETS}
    return parsed.update_query_dict(hidden).render_as_string(hide_password=True)


def without_password(url: str) -> str:
    """A URL shown in a refusal without what may be its user and password: only its scheme when it holds an `@`
    (a password may hold `/` and `@` unescaped, so where it ends cannot be told), nothing of it without one; and
    without its query, which may hold one too (`?password=`: review)."""
    if "@" not in url:
        address, separator, _query = url.partition("?")
        return f"{address}?…" if separator else url
    scheme, separator, _rest = url.partition("://")
    return f"{scheme}://…" if separator else "…"


# What a message of the limits package echoes of a storage URI: a location of it (after its first `@`), or all of it
_LIMITS_ECHO = re.compile(r"(in location |storage uri |storage scheme : ).*", re.S)


def limits_refusal(uri: str, error: Exception) -> str:
    """The limits package's refusal of a storage URI, without what it echoes of the URI when that may hold a password
    (`without_password` hides some of it): limits cuts the user and password off at the first `@`, so a password
    holding one was shown from there on ("Missing host or port in location ss@sentinel" for `:p@ss@sentinel`)."""
    text = str(error)
    return text if without_password(uri) == uri else _LIMITS_ECHO.sub(r"\1…", text.replace(uri, without_password(uri)))


def _validate_ratelimit_storage(name, uri, moving_window=False):
    """A `limits` storage URI whose client package is installed; not built here (a cluster client would connect)."""
    parts, shown = urlsplit(uri), without_password(uri)
    if parts.scheme not in RATELIMIT_SCHEMES:
        raise ConfigError(f"{name}={shown!r} is not a limits storage URI: use memory:// or redis://HOST:6379")
    if moving_window and parts.scheme == "memcached":
        raise ConfigError(f"{name}={shown!r}: memcached keeps no moving window; use redis://HOST:6379")
    try:  # each host's: a sentinel's or a cluster's URI names several, `host1:26379,host2:26379` (as one, refused)
        for location in parts.netloc.rpartition("@")[2].split(","):
            urlsplit(f"//{location}").port
    except ValueError:
        raise ConfigError(f"{name}={shown!r} holds no valid port") from None
    package = STORAGE_PACKAGES.get(parts.scheme)
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(f"{name}={shown!r} needs the {package} package: pip install {package}"
                          + (" (or 'entity-monitor[redis]')" if package == "redis" else ""))
    if moving_window and parts.scheme in _BUILT_WITHOUT_CONNECTING:
        _refuse_what_limits_refuses(name, uri)


# Storages whose client connects only when used: the provider's budget is built at its first call, so a URI limits
# refuses (a sentinel's without its service name or a host's port) failed every round of checks while serving went
# on, once a sentinel's several hosts were taken; RATELIMIT_STORAGE_URI's is built as the app is (`create_app`).
_BUILT_WITHOUT_CONNECTING = ("redis", "rediss", "redis+sentinel", "valkey", "valkeys")


def _refuse_what_limits_refuses(name, uri) -> None:
    import limits.errors
    import limits.storage
    from app.rate_limit_storage import client_timeouts
    try:
        limits.storage.storage_from_string(uri, **client_timeouts(uri))
    except limits.errors.ConfigurationError as error:
        raise ConfigError(f"{name}={without_password(uri)!r} cannot be used: {limits_refusal(uri, error)}") from None


def _validate_provider(config):
    from app.providers import load_provider
    try:
        load_provider(config)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _validate_webhook_test_settings(config):
    """The test-only settings exist for a local receiver with a throw-away CA: refused in a service that is
    not under test, and the bundle must hold a certificate (it chooses what to trust, never whether to verify)."""
    bundle, loopback = config["WEBHOOK_TEST_CA_BUNDLE"], config["WEBHOOK_TEST_ALLOW_LOOPBACK"]
    for name, value in (("WEBHOOK_TEST_CA_BUNDLE", bundle is not None), ("WEBHOOK_TEST_ALLOW_LOOPBACK", loopback)):
        if value and not config.get("TESTING"):
            raise ConfigError(f"{name} is a test setting: it is refused unless TESTING is on")
    if not isinstance(loopback, bool):
        raise ConfigError(f"WEBHOOK_TEST_ALLOW_LOOPBACK={loopback!r} is not a boolean")
    if bundle is None:
        return
    if not isinstance(bundle, str) or not os.path.isfile(bundle):
        raise ConfigError(f"WEBHOOK_TEST_CA_BUNDLE={bundle!r} is not the path of a CA certificate file (PEM)")
    try:
        ssl.create_default_context(cafile=bundle)
    except ssl.SSLError:
        raise ConfigError(f"WEBHOOK_TEST_CA_BUNDLE={bundle!r} holds no CA certificate (PEM)") from None


# A name or IPv4 address as a Host header carries it, in lower case and without its port; a leading dot takes the
# name's subdomains too (Werkzeug's matching, which cuts an IPv6 address at its first colon: none is accepted)
_TRUSTED_HOST = re.compile(r"\.?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")


def _validate_trusted_hosts(hosts):
    """None serves any Host; an empty list would too (Werkzeug reads it as no list), so it is refused as a mistake."""
    if hosts is None:
        return
    wrong = [host for host in hosts if not _TRUSTED_HOST.fullmatch(host)]
    if wrong or not hosts:
        raise ConfigError(f"TRUSTED_HOSTS={','.join(hosts)!r} must list the names clients reach the service by, "
                          "bare and in lower case (no scheme, port or IPv6 address), e.g. monitor.example.com,localhost"
                          + (f": {wrong[0]!r} is not one" if wrong else ""))
