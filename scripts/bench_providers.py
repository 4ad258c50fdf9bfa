#!/usr/bin/env python
"""The vendor-limits scenario of issue 10, end to end, against a local fake Coresignal.

N subscriptions (default 10,000) and P check processes (default 2) running the scheduler's check step
against a vendor that allows LIMIT calls per PERIOD seconds (default 300 a minute, answering 429 above
it) and has QUOTA credits (default N/2, so they run out midway: 402). When the pause shows, the script
changes the title of some people already checked, waits a little (no call may reach the vendor), adds
credits and resumes the provider with the operator command (`flask providers resume`); it stops when
every subscription has been checked and every changed person re-checked. It reports:

- the most calls the vendor received in any PERIOD-long window (sliding), and how many it throttled;
- the pause and the resume as seen in provider_status() (what /healthz and GET /account/usage show)
  and in the processes' logs;
- subscriptions marked failed (consecutive_failures > 0): should be none;
- contact.position_changed events per changed person: should be exactly one each.

    python scripts/bench_providers.py [--subscriptions 10000] [--processes 2] [--limit 300] [--period 60]
                                      [--quota N] [--changes 50] [--interval SECONDS]

The database (SQLite in a temporary directory; with DATABASE_URL=postgresql://…, a schema of its own in that
database, `bench_providers`) is deleted afterwards.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POSTGRES_SCHEMA = "bench_providers"
sys.path.insert(0, ROOT)

from bench_checks import insert_subscriptions  # noqa: E402  (scripts/ is on the path)

CHILD = textwrap.dedent("""
    import logging, signal, sys, time
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s pid=%(process)d %(name)s: %(message)s")
    from app import create_app
    from app.worker import checks
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = create_app({"SCHEDULER_ENABLED": False})
    with app.app_context():
        while True:
            if not checks.run_due_checks():
                time.sleep(app.config["SCHEDULER_CHECK_POLL_SECONDS"])
""")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscriptions", type=int, default=10000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--period", type=int, default=60)
    parser.add_argument("--quota", type=int, default=None,
                        help="credits before the 402 (default: half the subscriptions)")
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--interval", type=int, default=None,
                        help="CHECK_INTERVAL_SECONDS (default: two full passes' time)")
    return parser.parse_args()


def environment(database_url, vendor, args, interval):
    return {**os.environ, "DATABASE_URL": database_url, "PROVIDER": "coresignal",
            "PROVIDER_CORESIGNAL_API_KEY": vendor.api_key, "PROVIDER_CORESIGNAL_URL": vendor.url,
            "PROVIDER_RATE_LIMIT": f"{args.limit} per {args.period} second", "CHECK_INTERVAL_SECONDS": str(interval),
            "PYTHONPATH": ROOT}


def counts():
    from sqlalchemy import func, select

    from app.extensions import db
    from app.models import Subscription
    row = db.session.execute(select(func.count().filter(Subscription.check_count >= 1),
                                    func.count().filter(Subscription.consecutive_failures > 0))).one()
    db.session.rollback()
    return row


def already_checked_people(limit):
    from sqlalchemy import select

    from app.extensions import db
    from app.models import Subscription
    rows = db.session.execute(select(Subscription.id, Subscription.network_id).where(
        Subscription.entity_type == "contact", Subscription.check_count >= 1).limit(limit)).all()
    db.session.rollback()
    return rows


def rechecked(ids) -> bool:
    from sqlalchemy import func, select

    from app.extensions import db
    from app.models import Subscription
    done = db.session.scalar(select(func.count()).where(Subscription.id.in_(ids), Subscription.check_count >= 2))
    db.session.rollback()
    return done == len(ids)


def position_events(ids):
    from collections import Counter

    from sqlalchemy import select

    from app.extensions import db
    from app.models import Event
    found = Counter(db.session.scalars(select(Event.subscription_id).where(Event.type == "contact.position_changed")))
    db.session.rollback()
    return [found.get(subscription_id, 0) for subscription_id in ids], sum(found.values())


def main():
    args = parse_args()
    from flask_migrate import upgrade

    from app import create_app
    from app.common import utcnow
    from app.services import accounts
    from app.services.provider_status import provider_status
    from tests.fake_vendors import FakeCoresignal

    quota = args.subscriptions // 2 if args.quota is None else args.quota
    interval = args.interval or max(30, 2 * args.subscriptions * args.period // args.limit)
    workdir = tempfile.mkdtemp(prefix="bench-providers-")
    given = os.environ.get("DATABASE_URL", "").strip()
    postgres = given.startswith("postgresql")
    if postgres:
        from app.database import url_with_fresh_schema
        database_url = url_with_fresh_schema(given, POSTGRES_SCHEMA)
    else:
        database_url = f"sqlite:///{os.path.join(workdir, 'bench.db')}"
    vendor = FakeCoresignal(limit=(args.limit, args.period), credits=quota)
    env = environment(database_url, vendor, args, interval)
    os.environ.update({name: env[name] for name in ("PROVIDER", "PROVIDER_CORESIGNAL_API_KEY",
                                                    "PROVIDER_CORESIGNAL_URL", "PROVIDER_RATE_LIMIT")})
    app = create_app({"SQLALCHEMY_DATABASE_URI": database_url, "SCHEDULER_ENABLED": False})
    children = []
    try:
        with app.app_context():
            upgrade(directory=os.path.join(ROOT, "migrations"))
            account, _key = accounts.create_account("bench", "enterprise")
            insert_subscriptions(args.subscriptions, [account.id], utcnow())
            for number in range(args.subscriptions):
                if number % 3 == 0:
                    vendor.company(f"company-{number}", headcount=100 + number)
                else:
                    vendor.person(f"person-{number}", name=f"Person {number}")
            print(f"{args.subscriptions:,} subscriptions, {args.processes} processes, vendor limit {args.limit} calls "
                  f"per {args.period} s, {quota:,} credits, re-check interval {interval} s; "
                  f"{'PostgreSQL' if postgres else 'SQLite'}")
            started = time.time()
            children = [subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                                         text=True) for _ in range(args.processes)]
            changed, resumed_at, paused_at, calls_during_pause = [], None, None, None
            while True:
                time.sleep(1)
                checked, failed = counts()
                status = provider_status()
                if paused_at is None and status["state"] == "paused":
                    paused_at = time.time()
                    print(f"[{paused_at - started:6.1f} s] paused: {status['reason']} ({status['detail']}); "
                          f"checked {checked:,}, failed {failed}")
                    while counts()[0] != checked:  # let the batches in flight be recorded
                        checked = counts()[0]
                        time.sleep(1)
                    changed = already_checked_people(args.changes)
                    for _subscription_id, network_id in changed:
                        vendor.person(network_id, name=f"Person {network_id}", title="Chief Everything Officer")
                    calls_before = len(vendor.calls)
                    time.sleep(5)
                    calls_during_pause = len(vendor.calls) - calls_before
                    print(f"[{time.time() - started:6.1f} s] status during the pause: {provider_status()['state']}; "
                          f"vendor calls in 5 s of pause: {calls_during_pause}")
                    vendor.credits += 10 * args.subscriptions
                    resume = subprocess.run([sys.executable, "-m", "flask", "--app", "wsgi", "providers", "resume"],
                                            cwd=ROOT, env=env, capture_output=True, text=True)
                    resumed_at = time.time()
                    print(f"[{resumed_at - started:6.1f} s] operator: providers resume -> {resume.stdout.strip()}; "
                          f"status now {provider_status()['state']}; {len(changed)} people changed meanwhile")
                    print("log:", resume.stderr.strip())
                if resumed_at and checked == args.subscriptions and rechecked([row.id for row in changed]):
                    break
                if time.time() - started > 3 * interval + 600:
                    print("giving up: not finished in time")
                    break
            elapsed = time.time() - started
            checked, failed = counts()
            per_person, total_position = position_events([row.id for row in changed])
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        logs = [child.communicate(timeout=30)[1] for child in children]
        vendor.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if postgres:
            from app.database import drop_schema
            from app.extensions import db
            with app.app_context():
                db.session.remove()
                db.engine.dispose()  # no connection of the run left to hold up the drop
            drop_schema(given, POSTGRES_SCHEMA)
    statuses = {status: vendor.statuses.count(status) for status in sorted(set(vendor.statuses))}
    print(f"done in {elapsed:.1f} s: {checked:,} checked, {failed} marked failed")
    print(f"vendor: {len(vendor.calls):,} calls, answers {statuses}; most calls in any {args.period} s window: "
          f"{vendor.calls_per_window(args.period)} (limit {args.limit})")
    print(f"position_changed events per changed person: {sorted(set(per_person))} over {len(per_person)} people; "
          f"{total_position} in all")
    for line in "".join(logs).splitlines():
        if "paused" in line or "resumed" in line:
            print("log:", line)


if __name__ == "__main__":
    main()
