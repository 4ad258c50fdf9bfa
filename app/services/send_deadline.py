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
            elif deadline.at <= min(other.at for other in self._deadlines):  # it sleeps until a later one
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
    left = _time_left(deadline)
    outcome, done = {}, threading.Event()

    def run():
        try:
            outcome["value"] = lookup()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting try as it is
            outcome["error"] = error
        done.set()

    threading.Thread(target=run, name="name-lookup", daemon=True).start()
    if not done.wait(left):
        raise urllib3.exceptions.ConnectTimeoutError(None, "the name lookup took past the deadline")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _time_left(deadline: Deadline) -> float:
    left = deadline.at - time.monotonic()
    if left <= 0:
        raise urllib3.exceptions.ConnectTimeoutError(None, "the deadline passed before connecting")
    return left


def _addresses(host: str, port: int) -> list:
    """Every address of `host`, in the resolver's order, as urllib3 would try them."""
    family = urllib3.util.connection.allowed_gai_family()
    found = [info[4][0] for info in socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)]
    return list(dict.fromkeys(found))


def is_address(host: str) -> bool:
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
        deadline = getattr(_current, "deadline", None)
        sock = super()._new_conn() if deadline is None else self._connect_within(deadline)
        _watch_current(sock, kept=False)
        return sock

    def _connect_within(self, deadline: Deadline):
        """Connected within the deadline: the name looked up within it (unless an adapter pinned an address
        already), then each of its addresses tried in turn as urllib3 does, each connect given the time left; the
        name and timeout are the connection's again afterwards (TLS checks the name)."""
        name, timeout = self._dns_host, self.timeout
        addresses = [name] if is_address(name) else self._look_up(name)
        try:
            for number, address in enumerate(addresses, start=1):
                left = _time_left(deadline)
                self._dns_host = address
                self.timeout = left if not isinstance(timeout, (int, float)) else min(timeout, left)
                try:
                    return super()._new_conn()
                except urllib3.exceptions.NewConnectionError:  # refused, unreachable: the next address, if any
                    if number == len(addresses):
                        raise
        finally:
            self._dns_host, self.timeout = name, timeout

    def _look_up(self, name: str) -> list:
        try:
            return within_deadline(lambda: _addresses(name, self.port))
        except (socket.gaierror, UnicodeError) as error:  # as urllib3's own lookup says it (an over-long label too)
            raise urllib3.exceptions.NameResolutionError(name, self, error) from error


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
