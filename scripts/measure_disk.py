#!/usr/bin/env python
"""How much disk a month of monitoring costs (issue 9, retention): N subscriptions (default 10,000)
checked once a day for D simulated days (default 7) against the simulated network at its default pace,
every account with a webhook configuration, every event delivered at the first try (one outbox row and
one delivery-attempt row per event, as in production; no HTTP is sent).

Reports the SQLite size after the first checks (snapshots, initial states) and the growth per day, then
projects a month (30 days) of events, outbox rows and attempts: what EVENT_RETENTION_DAYS keeps per month.

    python scripts/measure_disk.py [--subscriptions 10000] [--days 7]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_checks import ACCOUNTS, insert_subscriptions, make_all_due  # noqa: E402

MONTH_DAYS = 30


def database_bytes(db) -> int:
    """Bytes the tables hold (pages in use, after the WAL is checkpointed into the file)."""
    with db.engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar()
        free = connection.exec_driver_sql("PRAGMA freelist_count").scalar()
        size = connection.exec_driver_sql("PRAGMA page_size").scalar()
    return (pages - free) * size


def deliver_everything_at_once():
    """Every pending delivery succeeds at its first try, recorded exactly as the sender records it."""
    from sqlalchemy import select

    from app.database import write_transaction
    from app.extensions import db
    from app.models import Event, OutboxDelivery
    from app.services import outbox
    from app.services.transport import Outcome, signed_headers

    while True:
        rows = db.session.execute(select(OutboxDelivery.id, OutboxDelivery.event_id, OutboxDelivery.account_id,
                                         Event.type).join(Event, Event.id == OutboxDelivery.event_id)
                                  .where(OutboxDelivery.status == "pending").limit(5000)).all()
        db.session.rollback()
        if not rows:
            return
        token = outbox.new_claim_token()
        with write_transaction() as session:
            session.execute(OutboxDelivery.__table__.update()
                               .where(OutboxDelivery.id.in_([row.id for row in rows])).values(claim_token=token))
        now_ms = int(time.time() * 1000)
        claimed = [outbox.Claimed(row.id, row.account_id, row.type, 0,
                                  outbox.Outgoing(row.event_id, "https://receiver.example/", b"", 1, "s", None))
                   for row in rows]
        outbox.record_results(token, [(item, Outcome(succeeded=True, status_code=200, duration_ms=40,
                                                     request_headers=signed_headers(item.outgoing, now_ms)))
                                      for item in claimed])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args(argv)

    import logging

    from flask_migrate import upgrade
    from sqlalchemy import func, select

    from app import create_app
    from app.common import utcnow
    from app.extensions import db
    from app.models import DeliveryAttempt, Event
    from app.providers.simulated import SimulatedProvider
    from app.services import accounts, webhooks
    from app.worker import checks as worker

    directory = tempfile.mkdtemp(prefix="measure-disk-")
    database = os.path.join(directory, "disk.db")
    app = create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{database}", "SCHEDULER_ENABLED": False,
                      "RATELIMIT_ENABLED": False, "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": True})
    try:
        with app.app_context():
            upgrade()
            logging.getLogger().setLevel(logging.WARNING)
            account_ids = [accounts.create_account(f"disk {number}", "enterprise")[0].id
                           for number in range(ACCOUNTS)]
            for account_id in account_ids:
                webhooks.configure(account_id, {"endpoint_url": "https://93.184.216.34/hook", "events": ["*"],
                                                "initial_webhook": "latest"})
            insert_subscriptions(args.subscriptions, account_ids, utcnow())
            moment = [time.time()]
            app.extensions["provider"] = SimulatedProvider(
                app.config["SIMULATED_SEED"], app.config["SIMULATED_PACE_SECONDS"], app.config["NETWORK_DOMAIN"],
                clock=lambda: moment[0])
            worker.run_due()
            deliver_everything_at_once()
            start = database_bytes(db)
            events_before = db.session.scalar(select(func.count()).select_from(Event))
            print(f"{args.subscriptions:,} subscriptions after their first checks: {start / 1e6:,.1f} MB")
            for _day in range(args.days):
                moment[0] += app.config["SIMULATED_PACE_SECONDS"]
                make_all_due()
                worker.run_due()
                deliver_everything_at_once()
            grown = database_bytes(db) - start
            events = db.session.scalar(select(func.count()).select_from(Event)) - events_before
            attempts = db.session.scalar(select(func.count()).select_from(DeliveryAttempt))
            per_day = grown / args.days
            print(f"{args.days} daily checks: {events:,} events ({events / args.days / args.subscriptions:.2f} per "
                  f"check), {attempts:,} attempts in all; growth {grown / 1e6:,.1f} MB, "
                  f"{grown / max(events, 1):,.0f} bytes per event with its outbox row and attempt")
            print(f"a month ({MONTH_DAYS} days) of events for {args.subscriptions:,} subscriptions checked daily: "
                  f"{per_day * MONTH_DAYS * 10_000 / args.subscriptions / 1e6:,.0f} MB per 10,000 subscriptions")
            db.engine.dispose()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
