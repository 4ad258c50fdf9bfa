"""Configuration: defaults here, then `instance/config.py`, then environment variables (contract §9)."""
import os

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
    SQLALCHEMY_ENGINE_OPTIONS = {"pool_pre_ping": True}
    SQLITE_BUSY_TIMEOUT_MS = 10000

    RATELIMIT_STORAGE_URI = "memory://"
    RATELIMIT_ENABLED = True
    RATELIMIT_WINDOW_SECONDS = WINDOW
    RATELIMIT_UNAUTHENTICATED = 100
    TRUSTED_PROXY_HOPS = 0  # 1 behind one reverse proxy (nginx) whose X-Forwarded-For is trusted
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
    CHECK_BATCH_SIZE = 200
    CHECK_LEASE_SECONDS = 300
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
    PROVIDER_CONCURRENCY = None  # upstream calls in flight per process; None: what the provider declares
    PROVIDER_BATCH_SIZE = None  # ids per upstream call, at most what the provider declares
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


BOOL_SETTINGS = ("RATELIMIT_ENABLED", "SCHEDULER_ENABLED", "WEBHOOK_ALLOW_HTTP",
                 "WEBHOOK_ALLOW_PRIVATE_ADDRESSES")
INT_SETTINGS = ("TRUSTED_PROXY_HOPS", "CHECK_INITIAL_DELAY_SECONDS", "CHECK_INTERVAL_SECONDS", "SIMULATED_SEED",
                "SIMULATED_PACE_SECONDS", "SIMULATED_LATENCY_MS", "PROVIDER_CONCURRENCY", "PROVIDER_BATCH_SIZE",
                "WEBHOOK_WORKERS", "WEBHOOK_BATCH_SIZE", "WEBHOOK_LEASE_SECONDS")
FLOAT_SETTINGS = ("EMPLOYEE_COUNT_MIN_PERCENT", "PROVIDER_HTTP_TIMEOUT_SECONDS", "SIMULATED_FAILURE_PERCENT",
                  "SIMULATED_THROTTLE_PERCENT", "SIMULATED_RETRY_AFTER_SECONDS")
STRING_SETTINGS = ("RATELIMIT_STORAGE_URI", "PROVIDER", "PROVIDER_HTTP_URL", "PROVIDER_HTTP_TOKEN",
                   "PROVIDER_RATE_LIMIT", "PROVIDER_RATE_LIMIT_STORAGE_URI", "SIMULATED_RATES", "NETWORK_DOMAIN",
                   "API_KEY_MODE")


def _parse_bool(raw):
    return raw.strip().lower() in ("1", "true", "yes", "on")


def settings_from_environment(environ=os.environ):
    """The contract §9 variables that are set, converted to their types."""
    found = {}
    for name in BOOL_SETTINGS:
        if name in environ:
            found[name] = _parse_bool(environ[name])
    for name in INT_SETTINGS:
        if environ.get(name):
            found[name] = int(environ[name])
    for name in FLOAT_SETTINGS:
        if environ.get(name):
            found[name] = float(environ[name])
    for name in STRING_SETTINGS:
        if environ.get(name):
            found[name] = environ[name]
    if environ.get("DATABASE_URL"):
        found["SQLALCHEMY_DATABASE_URI"] = environ["DATABASE_URL"]
    if environ.get("WEBHOOK_RETRY_SCHEDULE"):
        found["WEBHOOK_RETRY_SCHEDULE"] = [float(part) for part in environ["WEBHOOK_RETRY_SCHEDULE"].split(",")
                                           if part.strip()]
    return found
