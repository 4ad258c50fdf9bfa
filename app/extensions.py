"""Extensions, created once and bound to the app in `create_app`."""
import ipaddress

from flask import current_app, g, request
from flask_limiter import Limit
from flask_limiter import Limiter as _Limiter
from limits.errors import StorageError
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

from app import rate_limit_storage  # memory:// without a thread per request; the counted fixed window

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


db = SQLAlchemy(model_class=Base, session_options={"expire_on_commit": False})
migrate = Migrate(render_as_batch=True)


def rate_limit_key():
    """The validated API key id; the client address for requests without a valid key (an IPv6 address by its
    /64: one host commonly holds a whole /64, and would otherwise have a fresh budget at every address; an IPv4
    client seen through a translator, ::ffff:a.b.c.d or 64:ff9b::a.b.c.d, by its IPv4 address)."""
    key_id = g.get("api_key_id")
    return f"key:{key_id}" if key_id else f"addr:{_address_bucket(request.remote_addr)}"


def _address_bucket(address):
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:  # no address (a test client, a Unix socket): counted as given
        return address
    if ip.version == 4:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip in _TRANSLATED_IPV4:  # a /64 would put every IPv4 client of a translator (SIIT, NAT64) in one bucket
        return str(ipaddress.IPv4Address(ip.packed[-4:]))
    return str(ipaddress.ip_network(f"{ip}/64", strict=False))


_TRANSLATED_IPV4 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix


def limit_string(rate_class: str) -> str:
    """The keyed caller's tier's limit of a rate-limit class (contract §8), e.g. `1000 per 900 seconds`."""
    config = current_app.config
    return f"{config['TIERS'][g.tier]['rate_limits'][rate_class]} per {config['RATELIMIT_WINDOW_SECONDS']} seconds"


def request_rate_class():
    """The class the view of a keyed request is tagged with (`app.api.limits`); None for a request without a
    valid key (limited apart, per address), an untagged view, or OPTIONS (answered by Flask, never counted)."""
    if not g.get("api_key_id") or request.method == "OPTIONS":
        return None
    return view_rate_class(current_app.view_functions.get(request.endpoint), request.method)


def view_rate_class(view, method: str):
    """The class `view` is tagged with (`app.api.limits.rate_class`) for a request of `method`: a HEAD may have a
    class of its own (the export's is a read); None for an untagged view."""
    return getattr(view, "head_rate_limit_class" if method == "HEAD" else "rate_limit_class", None)


def _class_limit() -> str:
    rate_class = request_rate_class()
    return limit_string(rate_class) if rate_class else ""  # "": no limit applies to this request


class Limiter(_Limiter):
    """flask-limiter, but a request whose shared storage failed after another thread had already switched to the
    in-memory fallback is counted there too. flask-limiter falls back only for the request that finds the storage
    alive and re-raises the error of every other one: with Redis paused, each request that was waiting on it as the
    first one gave up was a 500 (scale-out walk: 4 of 1,000 over a 6 s pause), where the README promises the API
    keeps serving with its limits counted in this process."""

    def _check_request_limit(self, callable_name=None, in_middleware=True) -> None:
        try:
            super()._check_request_limit(callable_name=callable_name, in_middleware=in_middleware)
        except StorageError:
            if not (self._in_memory_fallback_enabled and self._storage_dead):
                raise
            self.context.seen_limits.clear()
            super()._check_request_limit(callable_name=callable_name, in_middleware=in_middleware)


# One shared default limit whose size and bucket follow the request's class: flask-limiter evaluates it once,
# in its before_request hook (route decorators would add a second evaluation per request on top of that hook).
limiter = Limiter(key_func=rate_limit_key, headers_enabled=False, strategy=rate_limit_storage.COUNTED_FIXED_WINDOW,
                  default_limits=[Limit(_class_limit, scope=lambda _endpoint: request_rate_class(), shared=True)])


@limiter.request_filter
def _unclassed_request() -> bool:
    """A request no class limit applies to (no valid key, an untagged view, OPTIONS) skips flask-limiter's
    per-request resolution of limits, which would find none: a sixth of /healthz's CPU."""
    return request_rate_class() is None
