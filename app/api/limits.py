"""The four rate-limit classes of contract §8, shared across their endpoints, sized by the caller's tier;
and the per-address limit of requests refused for want of a valid key."""
import logging
import threading
from functools import lru_cache
from typing import Optional

from flask import current_app, g
from limits import RateLimitItemPerSecond, parse
from limits.errors import StorageError
from limits.strategies import FixedWindowRateLimiter

from app.errors import RateLimited
from app.extensions import limit_string, limiter, rate_limit_key, request_rate_class
from app.rate_limit_storage import SweepingMemoryStorage, count_after_hit

log = logging.getLogger(__name__)
_storage_down = threading.Event()


def rate_class(name: str, head: Optional[str] = None):
    """Tags a view with its rate-limit class; the limiter's one default limit (app.extensions) sizes and
    buckets each keyed request by it, so the class is shared by every view tagged with it. `head`: the class a
    HEAD of the view spends instead (`view_rate_class`)."""
    def tag(view):
        view.rate_limit_class = name
        view.head_rate_limit_class = head or name
        return view
    return tag


read_limit = rate_class("read")
write_limit = rate_class("write")
bulk_limit = rate_class("bulk")
default_limit = rate_class("default")
# The export: its GET reads every row, a bulk call; its HEAD answers the same headers without reading one, a read
export_limit = rate_class("bulk", head="read")


def limit_unauthenticated():
    """Requests refused for want of a valid key (missing, malformed, unknown) are limited per client
    address, one bucket for every route: it bounds an address's bad-key noise. A valid key from that address is
    still served (no lock-out of the clients behind one NAT); a key of 32 random characters is not guessed anyway.

    flask-limiter's class limit applies only to keyed requests; hence this explicit check, made just before
    the 401."""
    config = current_app.config
    if not config.get("RATELIMIT_ENABLED", True):
        return
    window = config["RATELIMIT_WINDOW_SECONDS"]
    item = RateLimitItemPerSecond(config["RATELIMIT_UNAUTHENTICATED"], window)
    reset_time = _refused_until(item, 1, "unauthenticated", rate_limit_key())
    if reset_time is not None:
        raise RateLimited(item.amount, window, reset_time,
                          "Too many requests without a valid API key from this address. Retry later.")


def spend_as_key(key_id: str, rate_class: str, cost: int = 1) -> None:
    """Counts `cost` requests of `rate_class` (sized by `g.tier`) in the bucket the key's API requests of that class
    spend, as flask-limiter's shared limit keys it: the dashboard's pages and actions, made with a session the key
    opened, share the key's limits. RateLimited, counting nothing, when the window has no room for all of them."""
    if not current_app.config.get("RATELIMIT_ENABLED", True):
        return
    item = parse(limit_string(rate_class))
    reset_time = _refused_until(item, cost, *_class_bucket(f"key:{key_id}", rate_class))
    if reset_time is not None:
        raise RateLimited(item.amount, current_app.config["RATELIMIT_WINDOW_SECONDS"], reset_time,
                          "Too many requests with this API key in this window (its pages here and its API calls "
                          "share one limit). Retry later.")


def _class_bucket(key: str, rate_class: str) -> tuple:
    """The identifiers of a class's bucket as flask-limiter's shared limit keys it: RATELIMIT_KEY_PREFIX first when
    set (flask-limiter keeps it across init_app), then the key, then the class."""
    prefix = limiter._key_prefix
    return (prefix, key, rate_class) if prefix else (key, rate_class)


def class_size(rate_class: str) -> int:
    """How many requests of `rate_class` the caller's tier (`g.tier`) allows in a window."""
    return parse(limit_string(rate_class)).amount


def _refused_until(item, cost: int, *identifiers):
    """Counts the request in its bucket: None when it is allowed, else when the window resets. While the shared
    storage is down, counted in this process (an address's bad keys stay bounded; a tenant within its limits)."""
    try:
        reset_time = _count(limiter.limiter, item, cost, identifiers)
        _storage_down.clear()
        return reset_time
    except StorageError as error:
        if not _storage_down.is_set():  # once an outage, not once a request
            _storage_down.set()
            log.warning("rate limit storage unreachable (%s): requests it limits are counted in this process until "
                        "it answers", error)
        return _count(_local_limiter(), item, cost, identifiers)


def _count(rate_limiter, item, cost: int, identifiers):
    if rate_limiter.test(item, *identifiers, cost=cost) and rate_limiter.hit(item, *identifiers, cost=cost):
        return None
    return rate_limiter.get_window_stats(item, *identifiers).reset_time


@lru_cache(maxsize=1)
def _local_limiter():
    """This process's own count of requests without a valid key, for while the shared storage is down."""
    return FixedWindowRateLimiter(SweepingMemoryStorage("memory://"))


def _rate_limit_state():
    """(limit, remaining, reset at) of the request's class."""
    current = limiter.current_limit
    if current is not None:
        count = count_after_hit(current.limit, current.request_args)
        remaining = current.remaining if count is None else current.limit.amount - count
        return current.limit.amount, remaining, current.reset_at
    # Not counted: the request failed before the limiter's check (the database gone as the key's use was written),
    # or no limited view runs (an unknown route, a wrong method: the default class). Its class's window, unspent.
    rate_class = request_rate_class() or "default"
    item = parse(limit_string(rate_class))
    reset_time, remaining = limiter.limiter.get_window_stats(item, *_class_bucket(rate_limit_key(), rate_class))
    return item.amount, remaining, int(reset_time + 1)


def add_rate_limit_headers(response):
    """X-RateLimit-* on every keyed response (Retry-After only on 429, set by the error handler)."""
    if not g.get("api_key_id") or not current_app.config.get("RATELIMIT_ENABLED", True):
        return response
    try:
        amount, remaining, reset_at = _rate_limit_state()
    except StorageError:  # the storage went down after this request was checked: no figures to give
        return response
    except Exception:  # noqa: BLE001 - a failure's answer (a 503 to retry) goes out as it is, not as a new 500
        if response.status_code < 500:
            raise
        log.exception("X-RateLimit-* could not be computed for a %s answer", response.status_code)
        return response
    response.headers["X-RateLimit-Limit"] = str(amount)
    response.headers["X-RateLimit-Remaining"] = str(max(0, remaining))
    response.headers["X-RateLimit-Reset"] = str(reset_at)
    return response
