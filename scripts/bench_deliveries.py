#!/usr/bin/env python3
"""Delivery benchmark through the production send path, against a plain requests.Session loop: same TLS
receiver, same number of threads, same run.

    .venv/bin/python scripts/bench_deliveries.py [--events 2000] [--workers 8] [--rounds 3] [--samples 15]

1. Makes a throw-away CA and a certificate for `receiver.test` (scripts/tls_receiver.py, the openssl
   command) and starts the receiver in its own process: threaded HTTPS on 127.0.0.1 with keep-alive,
   recording when each event id arrived and how many TLS handshakes it served.
2. `receiver.test` resolves to 127.0.0.1 in this process only (a resolver table in place of
   socket.getaddrinfo). The service runs with TESTING and the two test-only settings, and nothing else
   relaxed: WEBHOOK_TEST_CA_BUNDLE (the CA to verify against; verification stays on) and
   WEBHOOK_TEST_ALLOW_LOOPBACK (127.0.0.1 passes the address rule; the name is still resolved, the address
   checked and the connection pinned to it, as requests-hardened does for a public endpoint).
   DATABASE_URL chooses the database (PostgreSQL: the run works in a schema of its own, `bench_deliveries`,
   dropped at the end; SQLite: an empty file); else a fresh SQLite file in a temporary directory.
3. Throughput, alternating for --rounds: N events are queued with events.record (event and outbox row in
   one transaction, as monitoring does) and delivered by `deliver_until_idle()`: claim, sign, send over TLS
   with WEBHOOK_WORKERS threads, record every attempt. Then the same N bodies are POSTed over TLS (verified
   with the same CA) by a plain requests.Session from a pool of as many threads. Rates, their ratio, and
   p50/p99 of each delivery's send time (the production path: Transport.send, i.e. sign, resolve, check,
   POST, read the answer; the plain loop: session.post and reading the answer).
4. Latency: single events committed while the in-process scheduler runs; the time from commit to arrival
   at the receiver, with the wake-up and with the poll alone.
Everything is bounded and the script stops by itself.
"""
import argparse
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler

import requests

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts.tls_receiver import RECEIVER_HOST, StaticResolver, TLSServer, make_certificates  # noqa: E402

WAIT_LIMIT_SECONDS = 120
POSTGRES_SCHEMA = "bench_deliveries"


# --- the receiver, in its own process so it does not share the sender's interpreter lock -----------

def serve_receiver(certificates, port_queue):
    arrivals = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            event_id = self.headers.get("X-Webhook-Id") or self.headers.get("X-Bench-Id")
            with lock:
                arrivals.setdefault(event_id, time.time())
            self._reply(b"{}")

        def do_GET(self):
            with lock:
                if self.path == "/count":
                    body = str(len(arrivals)).encode()
                elif self.path == "/reset":
                    arrivals.clear()
                    body = b"0"
                elif self.path == "/handshakes":
                    body = str(server.handshakes).encode()
                else:
                    body = json.dumps(arrivals.get(self.path.lstrip("/"))).encode()
            self._reply(body)

        def _reply(self, body):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = TLSServer(("127.0.0.1", 0), Handler, certificates)
    port_queue.put(server.server_address[1])
    server.serve_forever()


def verified_session(ca_file) -> requests.Session:
    """A session trusting the test CA. Like the service's, it ignores the environment (REQUESTS_CA_BUNDLE
    would replace `verify`; proxy variables are looked up on every request)."""
    session = requests.Session()
    session.trust_env = False
    session.verify = ca_file
    return session


class ReceiverControl:
    """Asks the receiver what arrived, over its own verified TLS connection."""

    def __init__(self, base, ca_file):
        self.base = base
        self.session = verified_session(ca_file)

    def _get(self, path):
        return self.session.get(self.base + path, timeout=10).text

    def reset(self):
        self._get("/reset")

    def count(self) -> int:
        return int(self._get("/count"))

    def handshakes(self) -> int:
        return int(self._get("/handshakes"))

    def arrival(self, event_id):
        return json.loads(self._get(f"/{event_id}"))

    def wait_for(self, expected):
        deadline = time.monotonic() + WAIT_LIMIT_SECONDS
        while self.count() < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"the receiver got {self.count()} of {expected} within {WAIT_LIMIT_SECONDS} s")
            time.sleep(0.01)


# --- the service ------------------------------------------------------------------------------------

def build_app(directory, workers, ca_file):
    from flask_migrate import upgrade

    from app import create_app
    settings = {"TESTING": True, "SCHEDULER_ENABLED": False, "RATELIMIT_ENABLED": False,
                "WEBHOOK_WORKERS": workers, "WEBHOOK_TEST_CA_BUNDLE": ca_file, "WEBHOOK_TEST_ALLOW_LOOPBACK": True}
    database_url = os.environ.get("DATABASE_URL", "").strip()
    if database_url.startswith("postgresql"):
        from app.database import url_with_fresh_schema
        settings["SQLALCHEMY_DATABASE_URI"] = url_with_fresh_schema(database_url, POSTGRES_SCHEMA)
    elif not database_url:
        settings["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{directory}/bench.db"
    app = create_app(settings)
    app.logger.setLevel("WARNING")
    with app.app_context():
        upgrade()
    return app


def prepare_account(receiver_url):
    from app.services import accounts, subscriptions, webhooks
    account, _key = accounts.create_account("Bench")
    webhooks.configure(account.id, {"endpoint_url": receiver_url, "events": ["*"], "initial_webhook": "latest"})
    subscription = subscriptions.create(account.id, {"entity_type": "contact", "network_id": "bench-person",
                                                     "network_url": None, "custom_metadata": {"crm_id": "42"}})
    return account.id, subscription.id


def queue_events(account_id, subscription_id, count, chunk=500) -> list:
    """Events as a check records them; returns their bodies (what the plain loop will send)."""
    from app.database import write_transaction
    from app.models import Subscription
    from app.services import events
    bodies = []
    for start in range(0, count, chunk):
        with write_transaction() as session:
            config = events.webhook_config_for(session, account_id)
            subscription = session.get(Subscription, subscription_id)
            for number in range(start, min(count, start + chunk)):
                data = {"entity": events.entity_data(subscription),
                        "changes": {"previous_company": "Acme", "previous_title": f"Engineer {number}",
                                    "current_company": "Globex", "current_title": "CTO"}}
                bodies.append(events.record(session, account_id, "contact.position_changed", data,
                                            subscription=subscription, config=config).body)
    return bodies


def time_sends(app) -> list:
    """Wrap the app's transport so every send's duration is appended to the returned list."""
    from app.services.transport import transport_for
    transport = transport_for(app)
    durations, send = [], transport.send

    def timed_send(outgoing):
        started = time.perf_counter()
        try:
            return send(outgoing)
        finally:
            durations.append(time.perf_counter() - started)

    transport.send = timed_send
    return durations


def outbox_rate(app, account_id, subscription_id, count, receiver) -> float:
    from app.worker.deliveries import deliver_until_idle
    with app.app_context():
        queue_events(account_id, subscription_id, count)
        receiver.reset()
        started = time.perf_counter()
        sent = deliver_until_idle()
        elapsed = time.perf_counter() - started
    assert sent == count, (sent, count)
    receiver.wait_for(count)
    return count / elapsed


def plain_session(ca_file, workers) -> requests.Session:
    session = verified_session(ca_file)
    session.mount("https://", requests.adapters.HTTPAdapter(pool_maxsize=workers))
    return session


def plain_rate(session, bodies, url, workers, receiver, durations) -> float:
    payloads = [(f"plain-{number}", body.encode()) for number, body in enumerate(bodies)]
    receiver.reset()

    def post(item):
        bench_id, body = item
        started = time.perf_counter()
        session.post(url, data=body, headers={"Content-Type": "application/json", "X-Bench-Id": bench_id},
                     timeout=(10, 10)).close()
        durations.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(post, payloads))
    elapsed = time.perf_counter() - started
    receiver.wait_for(len(bodies))
    return len(bodies) / elapsed


def latency_samples(app, account_id, subscription_id, receiver, samples, wake) -> list:
    """Seconds from the commit of a single event to its arrival, with the in-process scheduler running."""
    from app.services import events
    from app.worker.scheduler import Scheduler
    scheduler = Scheduler(app)
    scheduler.start()
    results = []
    try:
        with app.app_context():
            for _ in range(samples):
                time.sleep(0.15 + 0.35 * (len(results) % 3) / 2)  # land at different points of the poll
                [body] = queue_events(account_id, subscription_id, 1)
                committed = time.time()
                if wake:
                    events.notify_new_deliveries()
                event_id = json.loads(body)["id"]
                deadline = time.monotonic() + 10
                while (arrived := receiver.arrival(event_id)) is None and time.monotonic() < deadline:
                    time.sleep(0.001)
                results.append(arrived - committed if arrived else float("inf"))
    finally:
        scheduler.stop()
    return results


def describe(seconds) -> str:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms (n={len(ordered)})"


def main():
    parser = argparse.ArgumentParser(description="Webhook delivery benchmark (TLS, production send path)")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")

    with tempfile.TemporaryDirectory() as directory:
        certificates = make_certificates(directory)
        port_queue = multiprocessing.Queue()
        receiver_process = multiprocessing.Process(target=serve_receiver, args=(certificates, port_queue),
                                                   daemon=True)
        receiver_process.start()
        port = port_queue.get(timeout=10)
        socket.getaddrinfo = StaticResolver(socket.getaddrinfo, {RECEIVER_HOST: "127.0.0.1"})
        base = f"https://{RECEIVER_HOST}:{port}"
        receiver, url = ReceiverControl(base, certificates.ca_file), base + "/hook"
        session = plain_session(certificates.ca_file, args.workers)
        app = None
        try:
            app = build_app(directory, args.workers, certificates.ca_file)
            with app.app_context():
                account_id, subscription_id = prepare_account(url)
                bodies = queue_events(account_id, subscription_id, args.events)
                from app.worker.deliveries import deliver_until_idle
                deliver_until_idle()  # warm up both (connections, code paths); this also empties the outbox
            plain_rate(session, bodies, url, args.workers, receiver, [])
            ours, plain, our_sends, plain_sends = [], [], time_sends(app), []
            handshakes_before = receiver.handshakes()
            for _ in range(args.rounds):
                plain.append(plain_rate(session, bodies, url, args.workers, receiver, plain_sends))
                ours.append(outbox_rate(app, account_id, subscription_id, args.events, receiver))
            handshakes = receiver.handshakes() - handshakes_before
            our_sends = our_sends[:]  # the rounds' sends; the scheduler's below are not throughput
            with_wake = latency_samples(app, account_id, subscription_id, receiver, args.samples, wake=True)
            poll_only = latency_samples(app, account_id, subscription_id, receiver, args.samples, wake=False)
        finally:
            session.close()
            receiver_process.terminate()
            receiver_process.join(timeout=5)
            database_url = os.environ.get("DATABASE_URL", "").strip()
            if database_url.startswith("postgresql"):
                from app.database import drop_schema
                if app is not None:
                    with app.app_context():
                        from app.extensions import db
                        db.engine.dispose()  # no connection of the run left to hold up the drop
                drop_schema(database_url, POSTGRES_SCHEMA)

    best_ours, best_plain = max(ours), max(plain)
    from sqlalchemy.engine import make_url
    database = make_url(app.config["SQLALCHEMY_DATABASE_URI"]).get_backend_name()
    print(f"events per round: {args.events}, workers: {args.workers}, rounds: {args.rounds}, database: {database}")
    print(f"plain requests.Session loop over TLS: {', '.join(f'{rate:.0f}' for rate in plain)} deliveries/s; "
          f"per delivery {describe(plain_sends)}")
    print(f"outbox (claim, sign, resolve + check + pin, TLS verified, record every attempt): "
          f"{', '.join(f'{rate:.0f}' for rate in ours)} deliveries/s; per delivery {describe(our_sends)}")
    print(f"ratio (best of each): {best_ours / best_plain:.2f}")
    print(f"TLS handshakes during the rounds: {handshakes} for {2 * args.rounds * args.events} deliveries (keep-alive)")
    print(f"detection to arrival, with the wake-up: {describe(with_wake)}")
    print(f"detection to arrival, poll only (every {app.config['SCHEDULER_DELIVERY_POLL_SECONDS']} s): "
          f"{describe(poll_only)}")
    print(f"load average at end: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
