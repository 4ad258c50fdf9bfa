"""What HTTP vendors share: a pooled session, and their throttling, quota and key answers read from
status and headers."""
import json
import logging
import math
import re
import threading
import time
from datetime import datetime
from typing import Optional
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter

from app.common import USER_AGENT, utcnow
from app.providers.base import AccessRefused, EntityUnavailable, ProviderError, QuotaExhausted
from app.retry_after import parse_retry_after
from app.services import send_deadline

log = logging.getLogger(__name__)

DEFAULT_THROTTLE_SECONDS = 60.0  # a 429 that does not say how long to wait
# The largest answer read (decoded): a batch of 25 whole profiles is a few MB. Held whole in memory, an endless answer
# from a vendor grew the scheduler until the machine killed it.
MAX_ANSWER_BYTES = 64 * 2 ** 20


_deadlines = send_deadline.Watcher()  # every vendor call's, in this process


class _WatchedAdapter(HTTPAdapter):
    """Connections whose call's deadline is watched, direct or through an HTTP proxy from the environment (a
    SOCKS proxy's connections are its own, and unwatched)."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = send_deadline.WATCHED_POOLS

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = send_deadline.WATCHED_POOLS
        return manager


def pooled_session(pool_size: int, headers: dict) -> requests.Session:
    session = requests.Session()
    adapter = _WatchedAdapter(pool_connections=1, pool_maxsize=max(1, pool_size))
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = USER_AGENT
    session.headers.update(headers)
    return session


def size_pool(session: requests.Session, pool_size: int) -> None:
    """Keep up to `pool_size` connections per host: the session's calls in flight at once, once PROVIDER_CONCURRENCY
    has replaced the provider's own concurrency. A pool sized for the provider's, smaller, threw a connection away at
    every call past it, with a WARNING line each ("Connection pool is full"), and made each such call a new one.
    Each adapter the session has mounted is resized in place (as requests rebuilds an unpickled one): replaced by a
    new one, an adapter of the provider's own (TLS settings, retries, one mounted for the vendor's URL) was lost, or,
    mounted for a longer prefix, kept its small pool."""
    for adapter in {id(adapter): adapter for adapter in session.adapters.values()}.values():
        if isinstance(adapter, HTTPAdapter):
            adapter._pool_maxsize = max(1, pool_size)
            adapter.poolmanager.clear()
            adapter.init_poolmanager(adapter._pool_connections, adapter._pool_maxsize, block=adapter._pool_block)


def send(session, method: str, url: str, timeout: float, **kwargs) -> requests.Response:
    """One request, its answer read whole within `timeout` (the socket timeout bounds each read: an answer dripping
    a byte a second held the checks, their claims and a concurrency slot for as long as it dripped, walk); a network
    failure, an answer not complete in time or one over MAX_ANSWER_BYTES is transient. Redirects are not followed (an
    API never needs one)."""
    deadline = _deadlines.start(timeout)
    try:
        response = session.request(method, url, timeout=timeout, allow_redirects=False, stream=True, **kwargs)
        _read_body(response)
    except (requests.RequestException, urllib3.exceptions.HTTPError) as error:
        if deadline.expired:
            raise ProviderError(f"no complete answer within {timeout:g} s") from error
        raise ProviderError(f"{type(error).__name__}: {error}") from error
    finally:
        _deadlines.end(deadline)
    if deadline.expired:  # an answer read to its close: cut at the deadline, it looks complete
        raise ProviderError(f"no complete answer within {timeout:g} s")
    return response


def _read_body(response) -> None:
    """Read the answer's body (decoded) into `response.content`, as requests does without `stream`, but no more than
    MAX_ANSWER_BYTES."""
    body = bytearray()
    for chunk in response.iter_content(64 * 1024):
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            response.close()
            raise ProviderError(f"provider answer is over {MAX_ANSWER_BYTES:,} bytes")
    response._content, response._content_consumed = bytes(body), True


def json_body(response, expected_type):
    """The answer's JSON, which must be of `expected_type`; anything else is transient.

    Read as UTF-8 whatever charset the answer names (JSON between systems is UTF-8, RFC 8259; requests reads a
    `text/*` answer as Latin-1: "Café" became "CafÃ©", a false change and another back), a byte order mark allowed.
    Read so that what is stored and sent on stays JSON text: NaN, Infinity and numbers beyond a double are
    unknown (None), and a lone surrogate escape (`"\\ud83d"`: an emoji cut in half, common in scraped text) becomes
    U+FFFD. Kept as it was, one such value failed every check batch holding its subscription, at the encoding of
    the event body."""
    try:
        body = json.loads(response.content.decode("utf-8-sig"), parse_constant=lambda _name: None,
                          parse_float=_finite_or_none)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError too; RecursionError: nested past the parser
        raise ProviderError("provider answer is not JSON") from error
    if not isinstance(body, expected_type):
        raise ProviderError(f"provider answer is not a JSON {expected_type.__name__}")
    if _SURROGATE_ESCAPE.search(response.content):  # pairs are one character once read; only lone ones are left
        body = _without_lone_surrogates(body)
    return body


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _finite_or_none(text):
    number = float(text)
    return number if math.isfinite(number) else None


def _without_lone_surrogates(value):
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_lone_surrogates(key): _without_lone_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    return value


def raise_for_limits(response, wait_header: str = "Retry-After", resets_at: Optional[datetime] = None,
                     throttled=(429,)) -> None:
    """401 raises AccessRefused, 402 QuotaExhausted; a `throttled` status (429, and whatever else the vendor
    documents as "too many requests"), or a 5xx carrying the wait header, raises a ProviderError that pauses the
    provider for the time the vendor asked (a minute when it did not say; `Retry-After` when the vendor's own wait
    header cannot be read)."""
    status = response.status_code
    if status == 401:
        raise AccessRefused("provider refused the API key (HTTP 401)")
    if status == 402:
        raise QuotaExhausted(f"provider answered HTTP 402 at {utcnow().isoformat(timespec='seconds')}Z",
                             resets_at=resets_at)
    wait = parse_retry_after(response.headers.get(wait_header))
    if wait is None:
        wait = parse_retry_after(response.headers.get("Retry-After"))
    if status in throttled:
        raise ProviderError(f"provider answered HTTP {status}",
                            retry_after=DEFAULT_THROTTLE_SECONDS if wait is None else wait)
    if status >= 500 and wait is not None:
        raise ProviderError(f"provider answered HTTP {status}", retry_after=wait)


class OccasionalLog:
    """Whether to write a line now: at most once per `seconds`, per provider object. A misconfigured vendor URL met
    at every check wrote a line at the vendor's call rate, burying the rest of the log."""

    def __init__(self, seconds: float = 600.0):
        self.seconds, self._last = seconds, None
        self._lock = threading.Lock()

    def due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < self.seconds:
                return False
            self._last = now
            return True


def raise_for_not_found(response, url_setting: str, says_no_such_profile, occasionally: OccasionalLog) -> None:
    """A 404 that `says_no_such_profile` (the vendor's documented answer for a profile it does not have) raises
    EntityUnavailable("not_found"); any other 404 is a web server's for a route it does not have (a wrong base URL
    or path), which said nothing of the entity: taken for not found, it marked every subscription so. It is a failed
    check, logged for the operator (`occasionally`)."""
    if response.status_code != 404:
        return
    if says_no_such_profile(response):
        raise EntityUnavailable("not_found")
    content_type = response.headers.get("Content-Type", "") or "no content type"
    if occasionally.due():
        log.error("HTTP 404 (%s) from %s is not the vendor's answer for a missing profile but a web server's for an "
                  "unknown route: is %s right? (said at most every %g s)", content_type, _where(response), url_setting,
                  occasionally.seconds)
    raise ProviderError(f"HTTP 404 ({content_type}) for the route, not a profile's answer: check {url_setting}")


def warn_of_a_page_read_as_not_found(response, url_setting: str, occasionally: OccasionalLog) -> None:
    """A 404 answered as an HTML page is still not found (contract §7 for `http`: a service of the team's own may
    answer its 404s so, as Flask's `abort(404)` does), but it is also what a web server answers at a wrong base URL,
    where every subscription would read not found: the operator is told (`occasionally`)."""
    if response.headers.get("Content-Type", "").lower().startswith("text/html") and occasionally.due():
        log.warning("HTTP 404 from %s answered as an HTML page, read as not found (contract §7); if every check reads "
                    "not found, is %s right? (said at most every %g s)", _where(response), url_setting,
                    occasionally.seconds)


def _where(response) -> str:
    parts = urlsplit(response.url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"  # user info and query may hold secrets


def is_json_object(response) -> bool:
    """Whether the answer is a JSON object, as a vendor's API answers its errors, whatever type it names (as
    `json_body` reads its other answers: a web server's page, HTML or text, is none)."""
    try:
        json_body(response, dict)
    except ProviderError:
        return False
    return True
