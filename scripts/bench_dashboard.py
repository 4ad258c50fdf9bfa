#!/usr/bin/env python
"""Dashboard benchmark (issue 11 point 5): server time of every page for an account of 10,000 subscriptions,
100,000 events and 20,000 delivery attempts, against the 100 ms budget.

Usage: `.venv/bin/python scripts/bench_dashboard.py [--runs 20]` from the checkout.

The app runs in-process on a temporary SQLite file built by the migrations (with DATABASE_URL=postgresql://…, in
a schema of its own in that database, `bench_dashboard`, dropped at the end); rows are filled through
SQLAlchemy Core (the filling is not measured). Each page is requested through Flask's test client by a
signed-in session, so the time is the server's alone: routing, queries, templates. Reported: p50, p90 and
max per page; the script exits 1 when a page's p90 is over budget.
"""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flask_migrate import upgrade  # noqa: E402
from sqlalchemy import insert, text  # noqa: E402

from app import create_app  # noqa: E402
from app.common import new_id, utcnow  # noqa: E402
from app.database import drop_schema, url_with_fresh_schema, write_transaction  # noqa: E402
from app.extensions import db  # noqa: E402
from app.models import DeliveryAttempt, Event, Subscription  # noqa: E402
from app.services import events, outbox  # noqa: E402
from app.services import accounts  # noqa: E402
from app.services.transport import Outgoing, signed_headers  # noqa: E402
from tests.dashboard_helpers import Browser  # noqa: E402

SUBSCRIPTIONS, EVENTS, ATTEMPTS = 10_000, 100_000, 20_000
BUDGET_MS = 100
POSTGRES_SCHEMA = "bench_dashboard"
TYPES = ("contact.position_changed", "contact.headline_changed", "contact.post_created")


def sent_headers(event_id) -> dict:
    return signed_headers(Outgoing(event_id, "https://receiver.example/", b"{}", 1, "whsec_bench"),
                          int(time.time() * 1000))


def fill(account_id):
    now = utcnow()
    subscription_rows = [{"id": new_id("sub"), "account_id": account_id, "entity_type": "contact",
                          "network_id": f"person-{index}", "network_url": f"https://www.linkedin.com/in/person-{index}",
                          "status": ("active", "paused", "cancelled")[index % 3], "custom_metadata": {},
                          "created_at": now - timedelta(seconds=index), "updated_at": now}
                         for index in range(SUBSCRIPTIONS)]
    event_rows = []
    for index in range(EVENTS):
        subscription = subscription_rows[index % SUBSCRIPTIONS]
        event_id = f"evt_{index:024x}"
        body = {"id": event_id, "type": TYPES[index % 3], "created": 0, "data": {"changes": {
            "previous_title": "Engineer", "current_title": "CTO"}}}
        event_rows.append({"id": event_id, "account_id": account_id, "subscription_id": subscription["id"],
                           "type": TYPES[index % 3], "body": json.dumps(body),
                           "created_at": now - timedelta(minutes=index % (30 * 24 * 60)),
                           "delivery_status": "succeeded", "attempt_count": 1})
    attempt_rows = [{"id": new_id("att"), "account_id": account_id, "event_id": event_rows[index]["id"],
                     "event_type": event_rows[index]["type"], "attempt": 1,
                     "status": "failed" if index % 10 == 0 else "succeeded", "response_status": 200,
                     "duration_ms": 40, "attempted_at": event_rows[index]["created_at"],
                     "kept_headers": DeliveryAttempt.headers_to_keep(sent_headers(event_rows[index]["id"]),
                                                                     event_rows[index]["id"], 1)}
                    for index in range(ATTEMPTS)]
    with write_transaction() as session:
        for model, rows in ((Subscription, subscription_rows), (Event, event_rows), (DeliveryAttempt, attempt_rows)):
            for start in range(0, len(rows), 10_000):
                session.execute(insert(model), rows[start:start + 10_000])
        events.count_by_day(session, event_rows)  # what events.store and outbox.store_attempts do beside their inserts
        outbox.count_attempts_by_day(session, attempt_rows)
    if db.engine.dialect.name == "postgresql":
        with write_transaction() as session:  # the statistics autovacuum would gather after such a load
            session.execute(text("ANALYZE"))
    return subscription_rows[0]["id"], event_rows[0]["id"]


def measure(browser, path, runs):
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        response = browser.get(path)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    timings.sort()  # p90 by nearest rank: at 2 or 3 runs the slowest (int(0.9 n) - 1 took the fastest at 2)
    return statistics.median(timings), timings[math.ceil(len(timings) * 0.9) - 1], timings[-1]


@contextmanager
def bench_app():
    """The app in-process on a temporary SQLite file built by the migrations (PostgreSQL: a schema of its own in
    DATABASE_URL's database, dropped afterwards), in its context, with an enterprise account (no tier cap):
    yields (app, account id, API key)."""
    given = os.environ.get("DATABASE_URL", "").strip()
    postgres = given.startswith("postgresql")
    with tempfile.TemporaryDirectory() as folder:
        url = url_with_fresh_schema(given, POSTGRES_SCHEMA) if postgres else f"sqlite:///{folder}/bench.db"
        app = create_app({"SQLALCHEMY_DATABASE_URI": url, "SCHEDULER_ENABLED": False, "RATELIMIT_ENABLED": False,
                          "LOG_LEVEL": "WARNING"})
        try:
            with app.app_context():
                upgrade()
                account, key = accounts.create_account("Bench", "enterprise")
                yield app, account.id, key
        finally:
            if postgres:
                with app.app_context():
                    db.session.remove()
                    db.engine.dispose()  # no connection of the run left to hold up the drop
                drop_schema(given, POSTGRES_SCHEMA)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    if runs < 1:
        parser.error("--runs must be at least 1")
    with bench_app() as (app, account_id, key):
        subscription_id, event_id = fill(account_id)
        browser = Browser(app, key)
        print(f"{SUBSCRIPTIONS:,} subscriptions, {EVENTS:,} events, {ATTEMPTS:,} attempts; {runs} runs a page; "
              f"{db.engine.dialect.name}")
        print(f"{'page':48} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}")
        over = []
        for path in ("/", "/subscriptions", "/subscriptions?search=person-99", "/subscriptions?status=paused",
                     "/subscriptions?page=150", f"/subscriptions/{subscription_id}", "/events",
                     "/events?type=contact.post_created", "/events?page=1000", f"/events/{event_id}",
                     "/deliveries", "/deliveries?status=failed", "/webhook", "/keys"):
            p50, p90, worst = measure(browser, path, runs)
            print(f"{path:48} {p50:8.1f} {p90:8.1f} {worst:8.1f}")
            if p90 > BUDGET_MS:
                over.append(path)
        print("over budget: " + (", ".join(over) if over else f"none (p90 under {BUDGET_MS} ms everywhere)"))
        return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
