"""The whole of a webhook try within WEBHOOK_TIMEOUT_SECONDS (contract §5: "a 2xx within 10 seconds"), and of a
vendor call within its provider's timeout (`app/providers/vendor_http.py`).

The socket timeout urllib3 sets bounds each read, not the try: an endpoint that sends a byte of its status line or
headers every few seconds held a sender for as long as it liked, and eight such tries stopped every account's
deliveries. A try registers its deadline; the pools below tell it which socket it is using (a new connection's as
soon as it is opened, before the TLS handshake; a pooled one's when it is taken), and one watcher thread shuts that
socket down once the deadline passes, which ends whatever read or write the try is blocked in.

The watcher holds a duplicate of the socket's descriptor, so it never acts on a descriptor the try has closed and
the system has handed to another connection meanwhile; a connection given back to its pool is no longer watched.
These connections also read past interim answers (`_FinalAnswer`).

A name lookup has no socket to shut: the system's resolver blocks until it gives up (seconds per server and try), so
a try's lookup runs in a thread of its own and the try waits for it until its deadline (`within_deadline`).
"""
import http.client
import ipaddress
import os
import socket
import threading
import time

import urllib3

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

_current = threading.local()  # the Deadline of the try this thread is making, if any


class Deadline:
    """One try's deadline and the socket it is using."""

    def __init__(self, watcher: "Watcher", at: float):
        self.watcher, self.at = watcher, at
        self.expired = False
        self.kept_connection = False  # the try's connection was open before it (taken from the pool)
        self._socket = None  # a duplicate of the try's socket

    def watch(self, sock, kept: bool) -> None:
        with self.watcher.lock:
            self.kept_connection = kept
            self._forget()
            self._socket = socket.socket(fileno=os.dup(sock.fileno()))
            if self.expired:
                self._shut()

    def unwatch(self) -> None:
        with self.watcher.lock:
            self._forget()

    def expire(self) -> None:
        """The deadline passed (the caller holds the lock)."""
        self.expired = True
        self._shut()

    def _shut(self) -> None:
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:  # not connected yet, or already closed by the endpoint
                pass

    def _forget(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


class Watcher:
    """One thread that ends the tries whose deadline has passed."""

    def __init__(self):
        self.lock = threading.Condition()
        self._deadlines = set()
        self._thread = None

    def start(self, seconds: float) -> Deadline:
        """The current thread's try begins: it must end within `seconds` (`end` when it has)."""
        deadline = Deadline(self, time.monotonic() + seconds)
        with self.lock:
            self._deadlines.add(deadline)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="webhook-deadlines", daemon=True)
                self._thread.start()
            elif len(self._deadlines) == 1:  # it sleeps long; else until a deadline no later than this one
                self.lock.notify()
        _current.deadline = deadline
        return deadline

    def end(self, deadline: Deadline) -> None:
        _current.deadline = None
        with self.lock:
            self._deadlines.discard(deadline)
        deadline.unwatch()

    def _watch(self) -> None:
        with self.lock:
            while True:
                now = time.monotonic()
                for deadline in [deadline for deadline in self._deadlines if deadline.at <= now]:
                    self._deadlines.discard(deadline)
                    deadline.expire()
                self.lock.wait(min((deadline.at for deadline in self._deadlines), default=now + 60) - now)


def within_deadline(lookup):
    """`lookup()`'s answer (or its exception), waited for until the current try's deadline at most; past it, a
    connect timeout and the lookup is left to finish on its own (a daemon thread: it never holds up an exit)."""
    deadline = getattr(_current, "deadline", None)
    if deadline is None:
        return lookup()
    outcome, done = {}, threading.Event()

    def run():
        try:
            outcome["value"] = lookup()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting try as it is
            outcome["error"] = error
        done.set()

    threading.Thread(target=run, name="webhook-lookup", daemon=True).start()
    if not done.wait(max(0.0, deadline.at - time.monotonic())):
        raise urllib3.exceptions.ConnectTimeoutError(None, "the name lookup took past the deadline")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _first_address(host: str, port: int) -> str:
    family = urllib3.util.connection.allowed_gai_family()
    return socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4][0]


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _watch_current(sock, kept: bool) -> None:
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.watch(sock, kept)


class _FinalAnswer(http.client.HTTPResponse):
    """The final answer, read past every interim (1xx) one. http.client skips only 100 Continue: a 103 Early Hints
    was taken for the answer (a failed try), and the real answer, left on the kept connection, was read as the next
    try's. (`_read_status` is what `begin` reads each status line with.)"""

    def _read_status(self):
        while True:
            version, status, reason = super()._read_status()
            if not 101 < status < 200:  # 100: `begin` skips it; 101 switches protocols, which no try asks for
                return version, status, reason
            http.client.parse_headers(self.fp)  # the interim answer's headers, read and dropped

    def begin(self):
        super().begin()
        if self.status == 101:  # the endpoint speaks another protocol on this connection now: never reuse it
            self.will_close = True


class _WatchedConnection:
    """A connection whose socket the current try watches as soon as it is opened (before a TLS handshake)."""
    response_class = _FinalAnswer

    def _new_conn(self):
        sock = self._connect_within_deadline() if getattr(_current, "deadline", None) else super()._new_conn()
        _watch_current(sock, kept=False)
        return sock

    def _connect_within_deadline(self):
        """Connected to the first address of the name, looked up within the deadline (where no adapter has pinned
        the address already: private endpoints allowed); the name is the connection's again for TLS."""
        name = self._dns_host
        if not _is_address(name):
            try:
                self._dns_host = within_deadline(lambda: _first_address(name, self.port))
            except socket.gaierror as error:  # as urllib3's own lookup says it
                raise urllib3.exceptions.NameResolutionError(name, self, error) from error
        try:
            return super()._new_conn()
        finally:
            self._dns_host = name


class _WatchedHTTPConnection(_WatchedConnection, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedConnection, HTTPSConnection):
    pass


class _WatchedPool:
    """A pool whose connections are watched while the current try holds them."""

    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)
        if conn.sock is not None:
            _watch_current(conn.sock, kept=True)
        return conn

    def _put_conn(self, conn):
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.unwatch()
        super()._put_conn(conn)


class WatchedHTTPConnectionPool(_WatchedPool, HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class WatchedHTTPSConnectionPool(_WatchedPool, HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


WATCHED_POOLS = {"http": WatchedHTTPConnectionPool, "https": WatchedHTTPSConnectionPool}
