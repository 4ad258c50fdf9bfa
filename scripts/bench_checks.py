#!/usr/bin/env python
"""Benchmark of a day's checks, deliveries included (issue 12, point 3): the CPU share of one core that
monitoring N subscriptions (default 1,000,000) takes, and the linearity of `checks run --all`.

    python scripts/bench_checks.py [--subscriptions 1000000] [--sample 100000] [--tier growth]
                                   [--batch-size 200] [--profile] [--keep]
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/bench python scripts/bench_checks.py ...

Runs on DATABASE_URL when it is set (PostgreSQL: the schema `bench_checks` in that database is dropped
and created again, and dropped at the end unless --keep; SQLite: that file, kept), else on a throw-away
SQLite file; the schema comes from the Alembic migrations.
1. Creates ACCOUNTS accounts of --tier, each with a webhook to a local receiver (its own process,
   plain HTTP on 127.0.0.1 with WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE_ADDRESSES, which this
   benchmark alone sets; the TLS send path is measured by the delivery benchmark), all event types,
   no initial-state webhooks (an account's first check happens once, not every day).
2. Inserts a tenth of the sample and times one claim pass of `--all` over it, then the rest and times a
   pass over all of it: the two figures per row show whether `--all` stays linear.
3. Round 1, `checks run --all` (app.worker.checks.run_all): every subscription's first check.
4. Round 2, the day measured: the simulated clock moves one epoch (one day at the default pace, with
   the default "realistic" rates), everything is due, and the scheduler's path (`run_due`: claim, fetch,
   record, batch after batch) checks it all; then `deliver_until_idle` sends every event queued to the
   receiver through the real outbox (claim, sign, send, record the attempt).
CPU is time.process_time() of this whole process (all its threads). The simulated provider's own CPU,
measured inside `fetch`, and the receiver's CPU (its own process) are reported apart and not counted:
in production the provider's CPU is the vendor's and the receiver is the customer's. On SQLite the
database work is in this process; on PostgreSQL the server's CPU is not (its own processes, shared
with whatever else uses that server), so the figure there is the application's side. The projection:
CPU per check (checks and deliveries) × checks in a day at N subscriptions (N × 86,400 s / the tier's
interval), as a share of one core (86,400 CPU-seconds a day). With --sample below --subscriptions the
figures measured on the sample are projected to N, and the output says so.

Stops by itself; the SQLite file (or the PostgreSQL schema) is deleted afterwards (unless --keep).
`measure_disk.py` imports ACCOUNTS, insert_subscriptions and make_all_due from here.
"""
import argparse
import cProfile
import json
import multiprocessing
import os
import pstats
import shutil
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ACCOUNTS = 4
AIM_CORE_SHARE = 0.10
DAY_SECONDS = 86400
POSTGRES_SCHEMA = "bench_checks"


class TimedProvider:
    """Wraps a provider, adding up the process CPU time spent inside `fetch`. Its other declarations (`local`,
    `concurrency`, …: app.providers.traits) are the inner provider's, so the engine drives it as it drives that
    one (without `local`, every call took and gave back a shared concurrency slot, two write transactions the
    simulated provider never takes)."""

    def __init__(self, inner):
        self.inner = inner
        self.cpu = 0.0
        self.calls = 0

    def __getattr__(self, name):
        if name == "fetch_many":  # one call per id through `fetch`, where the timing is
            raise AttributeError(name)
        return getattr(self.inner, name)

    def fetch(self, entity_type, network_id):
        start = time.process_time()
        try:
            return self.inner.fetch(entity_type, network_id)
        finally:
            self.cpu += time.process_time() - start
            self.calls += 1


def insert_subscriptions(count, account_ids, now, first=0):
    """`count` active, due subscriptions spread over the accounts, numbered from `first`."""
    from sqlalchemy import insert

    from app.common import new_id
    from app.database import write_transaction
    from app.extensions import db
    from app.models import Subscription

    chunk = 5000
    for start in range(first, first + count, chunk):
        rows = []
        for number in range(start, min(first + count, start + chunk)):
            company = number % 3 == 0
            network_id = f"{'company' if company else 'person'}-{number}"
            rows.append({
                "id": new_id("sub"), "account_id": account_ids[number % len(account_ids)],
                "entity_type": "company" if company else "contact", "network_id": network_id,
                "network_url": f"https://www.linkedin.com/{'company' if company else 'in'}/{network_id}",
                "status": "active", "custom_metadata": {"row": str(number)} if number % 10 == 0 else {},
                "created_at": now, "updated_at": now, "last_check_status": "pending",
                "next_check_at": now - timedelta(seconds=1), "check_count": 0, "change_count": 0,
                "consecutive_failures": 0})
        with write_transaction() as session:
            session.execute(insert(Subscription), rows)
    db.session.remove()


def make_all_due():
    from sqlalchemy import update

    from app.common import utcnow
    from app.database import write_transaction
    from app.extensions import db
    from app.models import Subscription

    with write_transaction() as session:
        session.execute(update(Subscription).where(Subscription.status == "active")
                        .values(next_check_at=utcnow() - timedelta(seconds=1)))
    db.session.remove()


# --- the receiver, in its own process so its CPU is not this one's --------------------------------

def serve_receiver(port_queue):
    """Answer every POST with 200 (keep-alive) and count it; GET /stats: the count and this process's CPU."""
    received = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received[0] += 1  # one increment under the GIL; exact enough for a count checked at the end
            self._reply(b"{}")

        def do_GET(self):
            self._reply(json.dumps({"received": received[0], "cpu": time.process_time()}).encode())

        def _reply(self, body):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port_queue.put(server.server_address[1])
    server.serve_forever()


def start_receiver():
    ports = multiprocessing.Queue()
    process = multiprocessing.Process(target=serve_receiver, args=(ports,), daemon=True)
    process.start()
    return process, f"http://127.0.0.1:{ports.get(timeout=30)}/hook"


def receiver_stats(url) -> dict:
    with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/stats", timeout=10) as response:
        return json.loads(response.read())


# --- the database ------------------------------------------------------------------------------------

def database_uri(directory) -> str:
    """DATABASE_URL with the benchmark's own PostgreSQL schema first on the search path, else a SQLite file."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        return f"sqlite:///{os.path.join(directory, 'bench.db')}"
    if not url.startswith("postgresql"):
        return url  # a SQLite file of the caller's: DROP SCHEMA is no SQLite statement
    from app.database import url_with_fresh_schema
    return url_with_fresh_schema(url, POSTGRES_SCHEMA)


def database_size(db) -> str:
    if db.engine.dialect.name == "sqlite":
        return f"{os.path.getsize(db.engine.url.database) / 1e6:,.0f} MB (SQLite file, WAL aside)"
    with db.engine.connect() as connection:
        size = connection.exec_driver_sql(
            "SELECT sum(pg_total_relation_size(quote_ident(schemaname) || '.' || quote_ident(tablename))) "
            f"FROM pg_tables WHERE schemaname = '{POSTGRES_SCHEMA}'").scalar()
    return f"{float(size) / 1e6:,.0f} MB (PostgreSQL schema {POSTGRES_SCHEMA}, indexes included)"


# --- the measurements --------------------------------------------------------------------------------

def time_claim_pass() -> dict:
    """One pass of `--all`'s claims over the whole table (no checks), then every claim given back."""
    from sqlalchemy import update

    from app.database import write_transaction
    from app.extensions import db
    from app.models import Subscription
    from app.services import checks
    from flask import current_app

    token, after, claimed = checks.new_claim_token(), None, 0
    wall, cpu = time.perf_counter(), time.process_time()
    while True:
        batch, after, _held = checks.claim_page(token, current_app.config["CHECK_BATCH_SIZE"], after)
        if after is None:
            break
        claimed += len(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    with write_transaction() as session:
        session.execute(update(Subscription).where(Subscription.claim_token == token)
                        .values(claim_token=None, claimed_until=None))
    db.session.remove()
    return {"rows": claimed, "wall": wall, "cpu": cpu}


def print_claim_pass(measured):
    print(f"  --all claim pass over {measured['rows']:,} rows: wall {measured['wall']:.2f} s, cpu "
          f"{measured['cpu']:.2f} s = {1e6 * measured['cpu'] / max(measured['rows'], 1):,.1f} µs CPU per row")


def measured_run(name, provider, step, profile=False) -> dict:
    """Run `step()` (a list of check summaries), timing the whole process and the provider apart."""
    from app.extensions import db

    provider.cpu, provider.calls = 0.0, 0
    profiler = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    summaries = step()
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    db.session.remove()
    checked = sum(summary.checked for summary in summaries)
    events = sum(summary.events for summary in summaries)
    print(f"{name}: {checked:,} checks in {len(summaries):,} batches, {events:,} events")
    print(f"  wall {wall:8.2f} s   {checked / wall:10,.0f} checks/s")
    print(f"  cpu  {cpu:8.2f} s   of which in the simulated provider's fetch {provider.cpu:.2f} s "
          f"({provider.calls:,} calls)")
    print(f"  cpu per check, the provider's aside: {1e6 * (cpu - provider.cpu) / max(checked, 1):,.0f} µs")
    if profiler:
        print(f"--- profile of {name} (top 25) ---")
        pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_PROFILE_SORT", "cumulative")).print_stats(25)
    return {"checked": checked, "wall": wall, "cpu": cpu - provider.cpu, "provider_cpu": provider.cpu,
            "events": events}


def measured_deliveries(receiver_url) -> dict:
    from app.extensions import db
    from app.worker import deliveries

    before = receiver_stats(receiver_url)
    wall, cpu = time.perf_counter(), time.process_time()
    sent = deliveries.deliver_until_idle()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    db.session.remove()
    after = receiver_stats(receiver_url)
    received = after["received"] - before["received"]
    print(f"deliveries: {sent:,} sent, {received:,} received, wall {wall:.2f} s ({sent / max(wall, 1e-9):,.0f}/s), "
          f"cpu {cpu:.2f} s = {1e6 * cpu / max(sent, 1):,.0f} µs per delivery; "
          f"the receiver's own cpu {after['cpu'] - before['cpu']:.2f} s (not counted)")
    return {"sent": sent, "received": received, "wall": wall, "cpu": cpu}


def print_day(args, interval, day, sent):
    per_check = (day["cpu"] + sent["cpu"]) / max(day["checked"], 1)
    checks_a_day = args.subscriptions * DAY_SECONDS / interval
    day_cpu = per_check * checks_a_day
    share = day_cpu / DAY_SECONDS
    sample = ("" if args.sample == args.subscriptions
              else f" (measured on a sample of {args.sample:,}, projected to {args.subscriptions:,})")
    print(f"a day at {args.subscriptions:,} subscriptions, tier {args.tier} ({interval / 3600:g} h interval): "
          f"{checks_a_day:,.0f} checks with {sent['sent'] / max(day['checked'], 1):.2f} deliveries per check"
          f"{sample}")
    print(f"  {1e3 * per_check:.2f} ms CPU per check, deliveries included (aim: under "
          f"{1e3 * AIM_CORE_SHARE * DAY_SECONDS / checks_a_day:.2f} ms) -> {day_cpu:,.0f} CPU-seconds a day = "
          f"{100 * share:.1f}% of one core (aim: under {100 * AIM_CORE_SHARE:.0f}%) -> "
          f"{'OK' if share < AIM_CORE_SHARE else 'MISSED'}")
    print(f"  the simulated provider's own CPU aside: {1e3 * day['provider_cpu'] / max(day['checked'], 1):.2f} ms "
          "per check")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscriptions", type=int, default=1_000_000, help="the size projected to")
    parser.add_argument("--sample", type=int, default=None,
                        help="how many subscriptions are created and checked (default: --subscriptions)")
    parser.add_argument("--tier", default="growth", help="the accounts' tier; its interval sets the checks a day")
    parser.add_argument("--batch-size", type=int, default=None, help="CHECK_BATCH_SIZE (default: the app's)")
    parser.add_argument("--profile", action="store_true", help="cProfile the measured day")
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file (PostgreSQL: the schema)")
    args = parser.parse_args(argv)
    args.sample = min(args.sample or args.subscriptions, args.subscriptions)

    import logging

    from flask_migrate import upgrade

    from app import create_app
    from app.common import utcnow
    from app.extensions import db
    from app.providers import simulated
    from app.services import accounts, webhooks
    from app.services.scheduling import check_interval_seconds
    from app.worker import checks as worker

    receiver, receiver_url = start_receiver()
    directory = tempfile.mkdtemp(prefix="bench-checks-")
    config = {"SQLALCHEMY_DATABASE_URI": database_uri(directory), "SCHEDULER_ENABLED": False,
              "RATELIMIT_ENABLED": False, "PROVIDER": "simulated", "CHECK_INTERVAL_SECONDS": None,
              "WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": True}
    if args.batch_size:
        config["CHECK_BATCH_SIZE"] = args.batch_size
    app = create_app(config)
    try:
        with app.app_context():
            upgrade()
            logging.getLogger().setLevel(logging.WARNING)
            interval = check_interval_seconds(args.tier)
            account_ids = [accounts.create_account(f"bench {number}", args.tier)[0].id for number in range(ACCOUNTS)]
            for account_id in account_ids:
                webhooks.configure(account_id, {"endpoint_url": receiver_url, "events": ["*"],
                                                "initial_webhook": "none"})
            print(f"{db.engine.dialect.name}; {ACCOUNTS} {args.tier} accounts with a webhook to {receiver_url}; "
                  f"batch size {app.config['CHECK_BATCH_SIZE']}")

            tenth = max(1, args.sample // 10)
            for first, count in ((0, tenth), (tenth, args.sample - tenth)):
                started = time.perf_counter()
                insert_subscriptions(count, account_ids, utcnow(), first)
                print(f"{count:,} subscriptions inserted in {time.perf_counter() - started:.1f} s")
                print_claim_pass(time_claim_pass())

            moment = [time.time()]
            inner = simulated.create(app.config)
            inner.clock = lambda: moment[0]
            provider = app.extensions["provider"] = TimedProvider(inner)

            measured_run("round 1, checks run --all (first checks)", provider, lambda: list(worker.run_all()))
            moment[0] += app.config["SIMULATED_PACE_SECONDS"]
            make_all_due()
            day = measured_run("round 2, the day (scheduler path: run_due, one simulated epoch later)", provider,
                               worker.run_due, args.profile)
            sent = measured_deliveries(receiver_url)
            print_day(args, interval, day, sent)
            print(f"database size: {database_size(db)}")
            db.engine.dispose()
    finally:
        receiver.terminate()
        postgres_url = os.environ.get("DATABASE_URL", "")
        postgres_url = postgres_url if postgres_url.startswith("postgresql") else None
        if args.keep:
            print(f"kept {directory}" + (f" and the schema {POSTGRES_SCHEMA}" if postgres_url else ""))
        else:
            shutil.rmtree(directory, ignore_errors=True)
            if postgres_url:
                with app.app_context():
                    db.engine.dispose()  # no connection of the run left to hold up the drop
                from app.database import drop_schema
                drop_schema(postgres_url, POSTGRES_SCHEMA)
    return 0


if __name__ == "__main__":
    sys.exit(main())
