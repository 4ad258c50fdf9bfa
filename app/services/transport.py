"""Sending one webhook try: signing, the HTTP call and the send-time SSRF guard (contract §5).

No database here: the outbox claims and records; this module only turns an `Outgoing` into an
`Outcome`, and never raises, so a batch always gets recorded.
"""
import hashlib
import http.client
import ipaddress
import hmac
import logging
import re
import socket
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from http.cookiejar import DefaultCookiePolicy
from typing import Optional

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests_hardened import Config, HTTPSession
from requests_hardened.ip_filter import EXTRA_BLOCKED_NET_RANGES, InvalidIPAddress
from requests_hardened.ip_filter_adapter import IPFilterAdapter
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from app.common import USER_AGENT
from app.redaction import redact_uri
from app.retry_after import parse_retry_after
from app.services import send_deadline

log = logging.getLogger(__name__)

MAX_SESSIONS = 256
# How long a name's checked address is used for the tries to it before it is looked up again: shorter than the
# names' TTLs commonly are, and never an address that was not checked (a rebinding takes effect after it, refused)
CHECKED_ADDRESS_SECONDS = 10
MAX_ERROR_LENGTH = 500
NOT_PUBLIC_REFUSAL = "refused: the endpoint's address is not a public address (loopback, private, link-local…)"
# What a request on a kept connection meets when the endpoint closed it as the request went out.
CLOSED_UNANSWERED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError)


@dataclass(frozen=True)
class Outgoing:
    """One HTTP try of one event."""
    event_id: str
    url: str
    body: bytes
    attempt: int
    secret: str
    previous_secret: Optional[str] = None


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    status_code: Optional[int]
    duration_ms: int
    error: Optional[str] = None
    throttled: bool = False  # a timeout or a 429: the next try waits at least a minute
    retry_after: Optional[float] = None
    gone: bool = False  # 410: the endpoint asks us to stop
    request_headers: Optional[dict] = None  # as sent; None when refused before any request was made
    attempted_at: Optional[datetime] = None  # when the try began (`outbox.timed_send`); None: when it is recorded


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str  # lower-case, without IPv6 brackets; "" when the URL names none
    port: int
    has_credentials: bool = False  # a user part: `user:password@`, `user@`, an empty `@`


# An empty user part (`https://@host/`): urllib3 reads it as no auth at all
_EMPTY_USER_PART = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:)?//@")


def parse_endpoint(url: str) -> Endpoint:
    """Scheme, host and port as urllib3, which opens the connection, reads them (ValueError when it cannot).
    The configure-time check and the sender both use this: `urlsplit` would read
    `https://127.0.0.1\\@example.com/` as example.com where urllib3 connects to 127.0.0.1."""
    try:
        parts = parse_url(url)
    except LocationParseError as error:
        raise ValueError(str(error)) from None
    if parts.port == 0:
        raise ValueError("port 0 cannot be connected to")
    scheme = parts.scheme or ""
    port = parts.port or (443 if scheme == "https" else 80)
    has_credentials = parts.auth is not None or bool(_EMPTY_USER_PART.match(url))
    return Endpoint(scheme, (parts.host or "").strip("[]").lower(), port, has_credentials)


def is_forbidden_address(address, allow_loopback=False) -> bool:
    """Anything not globally routable (loopback, private, CGNAT, link-local incl. cloud metadata, site-local,
    multicast, reserved, unspecified), looking through IPv4-mapped IPv6 forms. `allow_loopback` is the
    test-only exception (WEBHOOK_TEST_ALLOW_LOOPBACK) for a receiver on this machine."""
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if allow_loopback and address.is_loopback:
        return False
    return (not address.is_global or address.is_multicast or address.is_reserved
            or getattr(address, "is_site_local", False)
            or any(address in network for network in EXTRA_BLOCKED_NET_RANGES))


class PublicOnlyAdapter(IPFilterAdapter):
    """requests-hardened resolves the host, refuses private addresses and pins the connection to the checked
    address (SNI and certificate checks keep the hostname); this applies our stricter definition of
    "not public" to that pinned address too, so configure time and send time refuse the same things. The lookup
    is waited for until the try's deadline at most."""

    def __init__(self, is_https_proto: bool, allow_loopback: bool):
        super().__init__(is_https_proto=is_https_proto, allow_loopback=allow_loopback)
        self.allow_loopback = allow_loopback
        self._checked = {}  # (url's host and port, verify, cert) -> (good until, host params, pool kwargs, Host)

    def build_connection_pool_key_attributes(self, request, verify, cert=None):
        """The pinned, checked address and the pool's TLS settings; a name's for CHECKED_ADDRESS_SECONDS, so a try
        looks it up (in a thread of its own, within its deadline) only as often: a lookup thread for every try cost
        the sender a third of its rate."""
        url = parse_url(request.url)
        key = (url.scheme, url.host, url.port, str(verify), str(cert))
        checked = self._checked.get(key)
        if checked is not None and checked[0] > time.monotonic():
            request.headers = CaseInsensitiveDict(request.headers)  # copied, as requests-hardened does
            request.headers["Host"] = checked[3]
            return dict(checked[1]), dict(checked[2])

        def resolved():
            return super(PublicOnlyAdapter, self).build_connection_pool_key_attributes(request, verify, cert)
        is_address = send_deadline.is_address(url.host or "")
        host_params, pool_kwargs = resolved() if is_address else send_deadline.within_deadline(resolved)
        address = ipaddress.ip_address(host_params["host"].strip("[]"))
        if is_forbidden_address(address, self.allow_loopback):
            raise InvalidIPAddress(address)
        if not is_address:
            self._checked[key] = (time.monotonic() + CHECKED_ADDRESS_SECONDS, dict(host_params), dict(pool_kwargs),
                                  request.headers["Host"])
        return host_params, pool_kwargs


def allowed_schemes(allow_http: bool) -> tuple:
    return ("https", "http") if allow_http else ("https",)


def sign(secret: str, timestamp_ms: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of `<timestamp>.<body>` keyed by the whole secret string (spec "Webhook signature")."""
    return hmac.new(secret.encode(), str(timestamp_ms).encode() + b"." + body, hashlib.sha256).hexdigest()


def row_headers(event_id: str, attempt: int) -> dict:
    """The headers of a try that its delivery attempt's row says anyway: the attempt does not store them twice."""
    return {"Content-Type": "application/json", "X-Webhook-Id": event_id, "X-Webhook-Attempt": str(attempt)}


def signed_headers(outgoing: Outgoing, timestamp_ms: int) -> dict:
    """Every header a try sets (what its attempt records)."""
    headers = {
        "User-Agent": USER_AGENT,
        **row_headers(outgoing.event_id, outgoing.attempt),
        "X-Webhook-Timestamp": str(timestamp_ms),
        "X-Webhook-Signature": sign(outgoing.secret, timestamp_ms, outgoing.body),
    }
    if outgoing.previous_secret:
        headers["X-Webhook-Signature-Previous"] = sign(outgoing.previous_secret, timestamp_ms, outgoing.body)
    return headers


def _closed_unanswered(error: BaseException) -> bool:
    """The endpoint closed the connection before any answer."""
    return any(isinstance(cause, CLOSED_UNANSWERED) for cause in _causes(error))


def _causes(error: BaseException):
    """The error, then what it wraps, to the innermost (requests and urllib3 wrap the cause in `args`, or raise their
    own error from it)."""
    seen = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = next((arg for arg in reversed(error.args) if isinstance(arg, BaseException)), error.__cause__)


def _connection_failure(error: BaseException, endpoint: Endpoint) -> str:
    """A connection that failed, in words, with the address tried: `connection refused (203.0.113.7:443)`. As
    requests words it, it named our classes and a retry never made (`WatchedHTTPConnectionPool(host=…): Max retries
    exceeded with url: … (Caused by NewConnectionError(…))`: webhook walk); it stays so for a cause not named here.
    An error that names no connection pool (a connection closed or reset once the request went out) is the
    endpoint's address: it was said without one."""
    chain = list(_causes(error))
    reason = _reason(chain[-1])
    if reason is None:
        return _error_text(f"connection failed: {error}")
    pool = next((cause.pool for cause in chain if getattr(cause, "pool", None) is not None), endpoint)
    host = f"[{pool.host}]" if ":" in pool.host else pool.host  # an IPv6 address, as in a URL
    return _error_text(f"connection failed: {reason} ({host}:{pool.port})")


def _reason(cause: BaseException) -> Optional[str]:
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"TLS certificate not accepted: {cause.reason} ({cause.verify_message})"
    if isinstance(cause, ssl.SSLError):
        return f"TLS failed: {cause.reason or cause.strerror}"
    if isinstance(cause, socket.gaierror):
        return f"the name does not resolve ({cause.strerror})"
    if isinstance(cause, UnicodeError):  # the name cannot be encoded for a lookup (a label over 63 characters)
        return f"the name cannot be looked up ({cause})"
    if isinstance(cause, http.client.RemoteDisconnected):  # an OSError without strerror: it was said as a repr
        return "the endpoint closed the connection without an answer"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror[:1].lower() + cause.strerror[1:]
    return None


def _error_text(message: str) -> str:
    """A failure as the attempt keeps it (shown in the API and logged): at most MAX_ERROR_LENGTH characters, and the
    URL urllib3 names (`… with url: /hook?token=…`) with every query value redacted: an endpoint's query carries its
    credentials under any name (`sig`, `jwt`, `code`…), which a list of names missed (walk)."""
    message = _URL_IN_ERROR.sub(lambda found: found.group(1) + redact_uri(found.group(2), every_value=True), message)
    return message if len(message) <= MAX_ERROR_LENGTH else message[:MAX_ERROR_LENGTH - 1] + "…"


_URL_IN_ERROR = re.compile(r"(with url: )(\S+)")


class Transport:
    """Sends tries over one pooled session per endpoint host, with the SSRF guard pinned per connection."""

    def __init__(self, *, workers: int, timeout: float, max_response_bytes: int, allow_http: bool,
                 allow_private: bool, allow_loopback: bool = False, ca_bundle: Optional[str] = None):
        self.workers = workers
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.schemes = allowed_schemes(allow_http)
        self.allow_private = allow_private
        self.allow_loopback = allow_loopback
        self.verify = ca_bundle or True  # a bundle replaces the trusted CAs; certificates are always verified
        self._sessions = OrderedDict()
        self._lock = threading.Lock()
        self._deadlines = send_deadline.Watcher()

    @classmethod
    def from_config(cls, config) -> "Transport":
        return cls(workers=config["WEBHOOK_WORKERS"], timeout=config["WEBHOOK_TIMEOUT_SECONDS"],
                   max_response_bytes=config["WEBHOOK_MAX_RESPONSE_BYTES"],
                   allow_http=config["WEBHOOK_ALLOW_HTTP"],
                   allow_private=config["WEBHOOK_ALLOW_PRIVATE_ADDRESSES"],
                   allow_loopback=config["WEBHOOK_TEST_ALLOW_LOOPBACK"], ca_bundle=config["WEBHOOK_TEST_CA_BUNDLE"])

    def send(self, outgoing: Outgoing) -> Outcome:
        started = time.monotonic()
        try:
            return self._send(outgoing, started)
        except Exception as error:  # noqa: BLE001 - an unexpected failure is a failed try, never a lost batch
            log.exception("webhook send of %s failed unexpectedly", outgoing.event_id)
            return self._failure(started, f"internal error: {type(error).__name__}")

    def _send(self, outgoing: Outgoing, started: float) -> Outcome:
        try:
            endpoint = parse_endpoint(outgoing.url)
        except ValueError:
            return self._failure(started, "refused: the endpoint URL cannot be parsed")
        if endpoint.scheme not in self.schemes:
            return self._failure(started, f"refused: {endpoint.scheme}:// endpoints are not allowed")
        headers = signed_headers(outgoing, int(time.time() * 1000))
        deadline = self._deadlines.start(self.timeout - (time.monotonic() - started))
        try:
            response = self._post(self._session_for(endpoint), outgoing, headers, deadline)
            with response:
                outcome = self._answered(response, started, deadline)
        except InvalidIPAddress as error:
            # the address goes to the operator's log alone: the try's error is the account's to read, and a name the
            # account points (by a CNAME) at an internal one would have it say that name's internal address
            log.info("webhook send of %s refused: %s, the address of %s, is not public", outgoing.event_id, error,
                     endpoint.host)
            return self._failure(started, NOT_PUBLIC_REFUSAL)
        except (requests.RequestException, urllib3.exceptions.HTTPError) as error:
            if deadline.expired or isinstance(error, (requests.Timeout, urllib3.exceptions.TimeoutError)):
                outcome = self._failure(started, f"timeout: no answer within {self.timeout:g} s", throttled=True)
            else:
                outcome = self._failure(started, _connection_failure(error, endpoint))
        finally:
            self._deadlines.end(deadline)
        return replace(outcome, request_headers=headers)

    def _post(self, session, outgoing: Outgoing, headers: dict, deadline: send_deadline.Deadline):
        """The request, sent again on a new connection when the endpoint closed a kept one as it went out (its
        keep-alive ran out at that moment: no answer, nothing to judge), within the try's deadline. urllib3 gives
        the failed connection's place back to its (last in, first out) pool empty, so the request goes again on a
        new connection, and a new connection that fails is the try's end: once, unless another sender gives a
        kept connection back meanwhile (the deadline bounds that)."""
        while True:
            deadline.kept_connection = False  # until a connection is taken (a lookup or connect may fail first)
            try:
                return session.post(outgoing.url, data=outgoing.body, headers=headers,
                                    timeout=(self.timeout, self.timeout), allow_redirects=False, stream=True,
                                    verify=self.verify)
            except requests.ConnectionError as error:
                if not deadline.kept_connection or deadline.expired or not _closed_unanswered(error):
                    raise
                log.info("webhook send of %s: the endpoint closed a kept connection; sent again on a new one",
                         outgoing.event_id)

    def _answered(self, response, started, deadline: send_deadline.Deadline) -> Outcome:
        """A try the endpoint answered: judged by its status once the body is read, keeping the status when the body
        runs past the deadline or breaks off (it used to be "no answer", with no status)."""
        try:
            overran = self._drain(response, started) or deadline.expired
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as error:
            if not deadline.expired:
                return Outcome(False, response.status_code, int((time.monotonic() - started) * 1000),
                               _error_text(f"connection failed while reading the answer: {error}"))
            overran = True
        return self._judge(response, started, overran)

    def _drain(self, response, started) -> bool:
        """Read and drop the body, at most the cap and within the total deadline (True when it ran out).
        read1 returns whatever has arrived, so a trickling body cannot hold a worker; raw bytes, so a
        compressed body cannot expand; a body read to its end lets the connection back into the pool."""
        read = 0
        while read < self.max_response_bytes:
            chunk = response.raw.read1(min(8192, self.max_response_bytes - read), decode_content=False)
            if not chunk:
                return False
            read += len(chunk)
            if time.monotonic() - started > self.timeout:
                return True
        return False

    def _judge(self, response, started, overran) -> Outcome:
        status = response.status_code
        duration_ms = int((time.monotonic() - started) * 1000)
        if overran:
            return Outcome(False, status, duration_ms, f"timeout: the answer took over {self.timeout:g} s",
                           throttled=True)
        if 200 <= status < 300:
            return Outcome(True, status, duration_ms)
        if 300 <= status < 400:
            error = f"redirect not followed (HTTP {status})"
        else:
            error = f"HTTP {status}"
        return Outcome(False, status, duration_ms, error, throttled=status == 429,
                       retry_after=parse_retry_after(response.headers.get("Retry-After")), gone=status == 410)

    @staticmethod
    def _failure(started, error, throttled=False) -> Outcome:
        return Outcome(False, None, int((time.monotonic() - started) * 1000), error, throttled=throttled)

    def _session_for(self, endpoint: Endpoint):
        key = (endpoint.scheme, endpoint.host, endpoint.port)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = self._new_session()
                if len(self._sessions) > MAX_SESSIONS:
                    self._sessions.popitem(last=False)[1].close()
            else:
                self._sessions.move_to_end(key)
            return session

    def _new_session(self):
        session = HTTPSession(Config(ip_filter_enable=False, ip_filter_allow_loopback_ips=False,
                                     never_redirect=True, default_timeout=(self.timeout, self.timeout),
                                     user_agent_override=USER_AGENT))
        session.trust_env = False  # an environment proxy would connect to an address we never checked
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # no state shared between accounts
        for scheme in ("http://", "https://"):
            session.mount(scheme, self._adapter(https=scheme == "https://"))
        return session

    def _adapter(self, https: bool):
        if self.allow_private:
            adapter = HTTPAdapter(pool_connections=4, pool_maxsize=self.workers)
        else:
            # The address checked is the address connected to, so DNS rebinding cannot slip between check and use.
            adapter = PublicOnlyAdapter(is_https_proto=https, allow_loopback=self.allow_loopback)
            adapter.init_poolmanager(4, self.workers)
        adapter.poolmanager.pool_classes_by_scheme = send_deadline.WATCHED_POOLS
        return adapter


def transport_for(app) -> Transport:
    """The app's transport, built once: its sessions and their connection pools live as long as the app."""
    if "webhook_transport" not in app.extensions:
        app.extensions["webhook_transport"] = Transport.from_config(app.config)
    return app.extensions["webhook_transport"]
