#!/usr/bin/env python3
"""Delivery benchmark: the real outbox path against a plain requests.Session loop, same receiver, same run.

    .venv/bin/python scripts/bench_deliveries.py [--events 2000] [--workers 8] [--rounds 2] [--samples 15]

1. Starts a receiver in its own process (threaded http.server on 127.0.0.1, keep-alive; it records when
   each event id arrived), and the service on a fresh SQLite file in a temporary directory.
2. Throughput, alternating for --rounds: N events are queued with events.record (event and outbox row
   in one transaction, as monitoring does) and delivered by `deliver_until_idle()` - claim, sign, send
   with WEBHOOK_WORKERS threads, record every attempt; then the same N bodies are POSTed by a plain
   requests.Session from a pool of the same number of threads. Reports both rates and their ratio.
3. Latency: single events committed while the in-process scheduler runs; the time from commit to arrival
   at the receiver, with the wake-up and with the poll alone.
Everything is bounded and the script stops by itself.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WAIT_LIMIT_SECONDS = 120


# --- the receiver, in its own process so it does not share the sender's interpreter lock -----------

def serve_receiver(port_queue):
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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.request_queue_size = 128
    port_queue.put(server.server_address[1])
    server.serve_forever()


class ReceiverControl:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.session = requests.Session()

    def reset(self):
        self.session.get(self.base + "/reset")

    def count(self) -> int:
        return int(self.session.get(self.base + "/count").text)

    def arrival(self, event_id):
        return json.loads(self.session.get(f"{self.base}/{event_id}").text)

    def wait_for(self, expected):
        deadline = time.monotonic() + WAIT_LIMIT_SECONDS
        while self.count() < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"the receiver got {self.count()} of {expected} within {WAIT_LIMIT_SECONDS} s")
            time.sleep(0.01)


# --- the service ------------------------------------------------------------------------------------

def build_app(directory, workers):
    os.environ.pop("DATABASE_URL", None)
    from flask_migrate import upgrade

    from app import create_app
    app = create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{directory}/bench.db", "SCHEDULER_ENABLED": False,
                      "RATELIMIT_ENABLED": False, "WEBHOOK_ALLOW_HTTP": True,
                      "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": True, "WEBHOOK_WORKERS": workers})
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


def plain_rate(bodies, url, workers, receiver) -> float:
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=workers))
    payloads = [(f"plain-{number}", body.encode()) for number, body in enumerate(bodies)]
    receiver.reset()

    def post(item):
        bench_id, body = item
        session.post(url, data=body, headers={"Content-Type": "application/json", "X-Bench-Id": bench_id},
                     timeout=(10, 10)).close()

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(post, payloads))
    elapsed = time.perf_counter() - started
    receiver.wait_for(len(bodies))
    session.close()
    return len(bodies) / elapsed


def latency_samples(app, account_id, subscription_id, receiver, samples, wake) -> list:
    """Seconds from the commit of a single event to its arrival, with the in-process scheduler running."""
    from app.services import events
    from app.worker.scheduler import build_scheduler
    scheduler = build_scheduler(app)
    scheduler.start()
    if wake:
        app.extensions["scheduler"] = scheduler
    results = []
    try:
        with app.app_context():
            for _ in range(samples):
                time.sleep(0.15 + 0.35 * (len(results) % 3) / 2)  # land at different points of the poll
                [body] = queue_events(account_id, subscription_id, 1)
                committed = time.time()
                events.notify_new_deliveries()
                event_id = json.loads(body)["id"]
                deadline = time.monotonic() + 10
                while (arrived := receiver.arrival(event_id)) is None and time.monotonic() < deadline:
                    time.sleep(0.001)
                results.append(arrived - committed if arrived else float("inf"))
    finally:
        app.extensions.pop("scheduler", None)
        scheduler.shutdown(wait=True)
    return results


def describe(samples) -> str:
    ordered = sorted(samples)
    return (f"median {statistics.median(ordered) * 1000:.0f} ms, "
            f"p90 {ordered[int(0.9 * (len(ordered) - 1))] * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms")


def main():
    parser = argparse.ArgumentParser(description="Webhook delivery benchmark")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()

    port_queue = multiprocessing.Queue()
    receiver_process = multiprocessing.Process(target=serve_receiver, args=(port_queue,), daemon=True)
    receiver_process.start()
    port = port_queue.get(timeout=10)
    receiver = ReceiverControl(port)
    url = f"http://127.0.0.1:{port}/hook"
    try:
        with tempfile.TemporaryDirectory() as directory:
            app = build_app(directory, args.workers)
            with app.app_context():
                account_id, subscription_id = prepare_account(url)
                bodies = queue_events(account_id, subscription_id, args.events)
                from app.worker.deliveries import deliver_until_idle
                deliver_until_idle()  # warm up: connections, code paths; also empties the outbox
            ours, plain = [], []
            for _ in range(args.rounds):
                plain.append(plain_rate(bodies, url, args.workers, receiver))
                ours.append(outbox_rate(app, account_id, subscription_id, args.events, receiver))
            with_wake = latency_samples(app, account_id, subscription_id, receiver, args.samples, wake=True)
            poll_only = latency_samples(app, account_id, subscription_id, receiver, args.samples, wake=False)
    finally:
        receiver_process.terminate()
        receiver_process.join(timeout=5)

    best_ours, best_plain = max(ours), max(plain)
    print(f"events per round: {args.events}, workers: {args.workers}, rounds: {args.rounds}")
    print(f"plain requests.Session loop: {', '.join(f'{rate:.0f}' for rate in plain)} deliveries/s")
    print(f"outbox (claim, sign, send, record every attempt): {', '.join(f'{rate:.0f}' for rate in ours)} deliveries/s")
    print(f"ratio (best of each): {best_ours / best_plain:.2f}")
    print(f"detection to delivery, with the wake-up: {describe(with_wake)}")
    print(f"detection to delivery, poll only (every second): {describe(poll_only)}")


if __name__ == "__main__":
    main()
