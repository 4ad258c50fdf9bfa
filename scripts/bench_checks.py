#!/usr/bin/env python
"""Benchmark of the check engine against the simulated provider (issue 3).

Builds a throw-away SQLite database with the Alembic migrations, inserts N active subscriptions
(default 100,000) spread over a few accounts, makes them all due and runs the real engine
(`app.worker.checks.run_due`: claim → fetch → record_outcomes, batch after batch) twice:

  round 1: every subscription's first check (snapshots written, `subscription.initial_state` events);
  round 2: the simulated clock moved on 24 epochs, everything due again: change detection against the
           stored snapshots on a very busy day, about a dozen events per check;
  round 3: the clock moved on one more epoch (a day at the default pace), everything due again:
           an ordinary day, under one event per check.

It reports wall time and process CPU time (time.process_time) per round, the CPU spent inside
`provider.fetch` (measured by wrapping it), and from rounds 2 and 3 (the steady state) the CPU per
check outside the provider and the projected CPU for a whole day's checks of N subscriptions at the
tier interval (24 h on starter: one check per subscription per day). Aim: under 120 s.

    python scripts/bench_checks.py [--subscriptions 100000] [--batch-size 500] [--profile]

Stops by itself; the database is deleted afterwards (unless --keep).
"""
import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

AIM_CPU_SECONDS = 120
BUSY_EPOCHS = 24
ACCOUNTS = 4


class TimedProvider:
    """Wraps a provider, adding up the process CPU time spent inside `fetch`."""

    def __init__(self, inner):
        self.inner = inner
        self.concurrency = inner.concurrency
        self.cpu = 0.0
        self.calls = 0

    def fetch(self, entity_type, network_id):
        start = time.process_time()
        try:
            return self.inner.fetch(entity_type, network_id)
        finally:
            self.cpu += time.process_time() - start
            self.calls += 1


def insert_subscriptions(count, account_ids, now):
    from sqlalchemy import insert

    from app.common import new_id
    from app.database import write_transaction
    from app.extensions import db
    from app.models import Subscription

    chunk = 5000
    for start in range(0, count, chunk):
        rows = []
        for number in range(start, min(count, start + chunk)):
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


def run_round(name, provider, profile):
    from app.extensions import db
    from app.worker import checks as worker

    provider.cpu, provider.calls = 0.0, 0
    profiler = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    summaries = worker.run_due()
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    db.session.remove()
    checked = sum(summary.checked for summary in summaries)
    events = sum(len(summary.events) for summary in summaries)
    outside = cpu - provider.cpu
    print(f"{name}: {checked:,} checks in {len(summaries)} batches, {events:,} events")
    print(f"  wall {wall:8.2f} s   {checked / wall:10,.0f} checks/s")
    print(f"  cpu  {cpu:8.2f} s   of which in provider.fetch {provider.cpu:.2f} s ({provider.calls:,} calls)")
    print(f"  cpu per check outside the provider: {1e6 * outside / max(checked, 1):,.0f} µs")
    if profiler:
        print(f"--- profile of {name} (top 25 by cumulative time) ---")
        pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_PROFILE_SORT", "cumulative")).print_stats(25)
    return {"checked": checked, "wall": wall, "cpu": cpu, "provider_cpu": provider.cpu, "outside": outside,
            "events": events}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscriptions", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=None, help="CHECK_BATCH_SIZE (default: the app's)")
    parser.add_argument("--profile", action="store_true", help="cProfile both rounds")
    parser.add_argument("--keep", action="store_true", help="keep the database file")
    args = parser.parse_args(argv)

    import logging

    from flask_migrate import upgrade

    from app import create_app
    from app.common import utcnow
    from app.providers.simulated import SimulatedProvider
    from app.services import accounts
    from app.services.scheduling import check_interval_seconds

    directory = tempfile.mkdtemp(prefix="bench-checks-")
    database = os.path.join(directory, "bench.db")
    config = {"SQLALCHEMY_DATABASE_URI": f"sqlite:///{database}", "SCHEDULER_ENABLED": False,
              "RATELIMIT_ENABLED": False, "PROVIDER": "simulated"}
    if args.batch_size:
        config["CHECK_BATCH_SIZE"] = args.batch_size
    app = create_app(config)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        with app.app_context():
            upgrade()
            logging.getLogger().setLevel(logging.WARNING)
            account_ids = [accounts.create_account(f"bench {number}", "enterprise")[0].id
                           for number in range(ACCOUNTS)]
            started = time.perf_counter()
            insert_subscriptions(args.subscriptions, account_ids, utcnow())
            print(f"{args.subscriptions:,} subscriptions over {ACCOUNTS} accounts inserted in "
                  f"{time.perf_counter() - started:.1f} s; batch size {app.config['CHECK_BATCH_SIZE']}; "
                  f"SQLite file {database}")

            moment = [time.time()]
            simulated = SimulatedProvider(app.config["SIMULATED_SEED"], app.config["SIMULATED_PACE_SECONDS"],
                                          app.config["NETWORK_DOMAIN"], clock=lambda: moment[0])
            provider = TimedProvider(simulated)
            app.extensions["provider"] = provider

            run_round("round 1 (first checks)", provider, args.profile)
            pace = app.config["SIMULATED_PACE_SECONDS"]
            moment[0] += BUSY_EPOCHS * pace  # many epochs of changes at once: a very busy day
            make_all_due()
            busy = run_round(f"round 2 (change detection, {BUSY_EPOCHS} simulated epochs later)", provider,
                             args.profile)
            moment[0] += pace  # one epoch later: an ordinary day at the default pace
            make_all_due()
            quiet = run_round("round 3 (change detection, one simulated epoch later)", provider, args.profile)

            interval = check_interval_seconds("starter")
            per_day = args.subscriptions * 86400 / interval
            worst = 0.0
            for name, measured in (("busy", busy), ("quiet", quiet)):
                per_check = measured["outside"] / max(measured["checked"], 1)
                projected = per_check * per_day
                worst = max(worst, projected)
                print(f"{name} day ({measured['events'] / max(measured['checked'], 1):.2f} events per check): "
                      f"{measured['checked'] / measured['wall']:,.0f} checks/s wall, {1e6 * per_check:,.0f} µs CPU "
                      f"per check outside the provider -> a day's {per_day:,.0f} checks "
                      f"({interval // 3600} h interval) take {projected:,.1f} s CPU")
            print(f"projected CPU for a whole day's checks of {args.subscriptions:,} subscriptions, worst case: "
                  f"{worst:,.1f} s (aim: under {AIM_CPU_SECONDS} s) -> {'OK' if worst < AIM_CPU_SECONDS else 'MISSED'}")
            print(f"database size: {os.path.getsize(database) / 1e6:,.0f} MB")
            from app.extensions import db
            db.engine.dispose()
    finally:
        if args.keep:
            print(f"kept {database}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
