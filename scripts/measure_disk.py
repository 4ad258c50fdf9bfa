#!/usr/bin/env python
"""How big the database gets (issue 12, point 2): measure a sample, project to 1,000,000 subscriptions after
30 days of daily checks.

What it measures: N subscriptions (default 100,000; two thirds contacts, one third companies, over a few
enterprise accounts, each with a webhook configuration for every event type) checked once a day for D
simulated days (default 3) against the simulated network at its default pace and rates (SIMULATED_RATES,
`realistic`: a day per epoch), after their first check. Every event is delivered at its first try, recorded
exactly as the sender records it (one delivery-attempt row per event, its outbox row deleted; no HTTP is sent).
Sizes are the pages each table and its indexes hold: SQLite's dbstat (after a WAL checkpoint), or on
PostgreSQL pg_total_relation_size (table, indexes and TOAST, after VACUUM).

How it projects, linearly, to P subscriptions (default 1,000,000) after T days (default 30):
  subscriptions  = P x (bytes per subscription after the D days + 8 bytes per new activity over the T - D
                   days left, at most SEEN_ACTIVITIES_KEPT of them): the subscriptions table and its indexes;
                   a snapshot grows only by the 8-character keys of the activities it has seen, up to a bound
                   (change events per subscription-day count as new activities: an upper bound)
  initial states = P x bytes per `subscription.initial_state` event, with its attempt
                   (kept while T < EVENT_RETENTION_DAYS)
  change events  = P x events per subscription-day x min(T, EVENT_RETENTION_DAYS) x bytes per change event,
                   with its attempt
Other tables (accounts, keys, usage counters…) do not grow with subscriptions and are left out.

    python scripts/measure_disk.py [--subscriptions 100000] [--days 3] [--project-subscriptions 1000000]
                                   [--project-days 30]

With DATABASE_URL set it measures that database: on PostgreSQL in a schema of its own, `measure_disk`, made
by the migrations and dropped at the end (e.g. DATABASE_URL=postgresql://postgres@127.0.0.1:5432/measure); a
SQLite file must be empty. Otherwise a temporary SQLite file, deleted afterwards. `--subscriptions 1000000
--days 30` measures the real thing instead of projecting it.
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

SUBSCRIPTION_TABLES = ("subscriptions",)
EVENT_TABLES = ("events", "outbox", "delivery_attempts")
POSTGRES_SCHEMA = "measure_disk"


def object_bytes(db) -> dict:
    """{(table, table or index name): bytes} for every table and index, and the whole database under
    (None, None): pages in use (SQLite's dbstat after a WAL checkpoint; PostgreSQL's relation sizes after
    VACUUM, a table's TOAST counted with it, and for the whole, every relation of the run's schema)."""
    db.session.remove()  # no open snapshot keeps dead rows from VACUUM
    with db.engine.connect() as connection:
        if db.engine.dialect.name == "postgresql":
            connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM")
            rows = connection.exec_driver_sql(
                "SELECT coalesce(t.relname, c.relname), c.relname, "
                "CASE WHEN c.relkind = 'r' THEN pg_table_size(c.oid) ELSE pg_relation_size(c.oid) END "
                "FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid "
                "LEFT JOIN pg_class t ON t.oid = i.indrelid "
                "WHERE c.relkind IN ('r', 'i') AND c.relnamespace = to_regnamespace(current_schema())").all()
            sizes = {(table, name): size for table, name, size in rows}
            sizes[None, None] = sum(sizes.values())
            return sizes
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        owners = dict(connection.exec_driver_sql(
            "SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')").all())
        sizes = {(owners.get(name, name), name): size
                 for name, size in connection.exec_driver_sql("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")}
        page_size = connection.exec_driver_sql("PRAGMA page_size").scalar()
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar()
        free = connection.exec_driver_sql("PRAGMA freelist_count").scalar()
        sizes[None, None] = (pages - free) * page_size
        return sizes


def part(sizes: dict, tables) -> int:
    """Bytes of these tables with their indexes."""
    return sum(size for (table, _name), size in sizes.items() if table in tables)


def deliver_everything_at_once():
    """Every delivery owed succeeds at its first try, recorded exactly as the sender records it."""
    from sqlalchemy import select

    from app.database import write_transaction
    from app.extensions import db
    from app.models import Event, OutboxDelivery
    from app.services import outbox
    from app.services.transport import Outcome, signed_headers

    while True:
        rows = db.session.execute(select(OutboxDelivery.id, OutboxDelivery.event_id, OutboxDelivery.account_id,
                                         Event.type).join(Event, Event.id == OutboxDelivery.event_id)
                                  .limit(5000)).all()
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


def event_count(db) -> int:
    from sqlalchemy import func, select

    from app.models import Event
    count = db.session.scalar(select(func.count()).select_from(Event))
    db.session.rollback()
    return count


def print_breakdown(sizes: dict, rows: dict):
    print(f"  {'table / index':<44}      MB  bytes/row")
    for table in SUBSCRIPTION_TABLES + EVENT_TABLES:
        for (owner, name), size in sorted(sizes.items(), key=lambda item: (item[0][1] != table, str(item[0][1]))):
            if owner == table:
                label = name if name == table else f"  {name}"
                per_row = f"{size / rows[table]:8,.0f}" if rows[table] else "       -"
                print(f"  {label:<44}{size / 1e6:8,.1f}  {per_row}")
    print(f"  {'whole database':<44}{sizes[None, None] / 1e6:8,.1f}")


def row_counts(db) -> dict:
    from sqlalchemy import text
    counts = {table: db.session.scalar(text(f"SELECT count(*) FROM {table}"))
              for table in SUBSCRIPTION_TABLES + EVENT_TABLES}
    db.session.rollback()
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscriptions", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=3, help="daily checks after the first one")
    parser.add_argument("--project-subscriptions", type=int, default=1_000_000)
    parser.add_argument("--project-days", type=int, default=30)
    args = parser.parse_args(argv)
    if args.subscriptions < 1 or args.days < 1:  # with no day measured, the projection held no change event at all
        parser.error("--subscriptions and --days must be at least 1")

    import logging

    from flask_migrate import upgrade

    from app import create_app
    from app.common import utcnow
    from app.extensions import db
    from app.providers.simulated import SimulatedProvider
    from app.services import accounts, webhooks
    from app.worker import checks as worker

    directory = None
    given = url = os.environ.get("DATABASE_URL")
    if url and url.startswith("postgresql"):
        from app.database import url_with_fresh_schema
        url = url_with_fresh_schema(url, POSTGRES_SCHEMA)
    if not url:
        directory = tempfile.mkdtemp(prefix="measure-disk-")
        url = f"sqlite:///{os.path.join(directory, 'disk.db')}"
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "SCHEDULER_ENABLED": False, "RATELIMIT_ENABLED": False,
                      "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": True})
    config = app.config
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
                config["SIMULATED_SEED"], config["SIMULATED_PACE_SECONDS"], config["NETWORK_DOMAIN"],
                clock=lambda: moment[0], rates=config["SIMULATED_RATES"])
            print(f"measuring {args.subscriptions:,} subscriptions on {db.engine.dialect.name}, simulated network "
                  f"at {config['SIMULATED_PACE_SECONDS']} s per epoch, {config['SIMULATED_RATES']} rates; "
                  f"EVENT_RETENTION_DAYS={config['EVENT_RETENTION_DAYS']}")
            started = time.perf_counter()
            worker.run_due()
            deliver_everything_at_once()
            first, initial_events = object_bytes(db), event_count(db)
            print(f"after the first checks ({time.perf_counter() - started:,.0f} s): {initial_events:,} events")
            print_breakdown(first, row_counts(db))
            for day in range(args.days):
                started = time.perf_counter()
                moment[0] += config["SIMULATED_PACE_SECONDS"]
                make_all_due()
                worker.run_due()
                deliver_everything_at_once()
                print(f"day {day + 1} checked and delivered in {time.perf_counter() - started:,.0f} s")
            last, change_events = object_bytes(db), event_count(db) - initial_events
            print(f"after {args.days} daily checks: {change_events:,} more events")
            print_breakdown(last, row_counts(db))
            project(args, config["EVENT_RETENTION_DAYS"], first, last, initial_events, change_events)
            db.engine.dispose()
    finally:
        if directory:
            shutil.rmtree(directory, ignore_errors=True)
        if url.startswith("postgresql"):
            with app.app_context():
                db.engine.dispose()  # no connection of the run left to hold up the drop
            from app.database import drop_schema
            drop_schema(given, POSTGRES_SCHEMA)
    return 0


def project(args, retention_days, first, last, initial_events, change_events):
    from app.services.detection import KEY_LENGTH, SEEN_ACTIVITIES_KEPT

    count, days = args.subscriptions, max(args.days, 1)
    per_subscription = part(last, SUBSCRIPTION_TABLES) / count
    per_initial = part(first, EVENT_TABLES) / max(initial_events, 1)
    per_change = (part(last, EVENT_TABLES) - part(first, EVENT_TABLES)) / max(change_events, 1)
    rate = change_events / count / days
    target, horizon = args.project_subscriptions, args.project_days
    kept_days = min(horizon, retention_days)
    growth = min(rate * max(horizon - args.days, 0), SEEN_ACTIVITIES_KEPT) * KEY_LENGTH
    subscriptions = target * (per_subscription + growth)
    initial = target * per_initial if horizon < retention_days else 0
    changes = target * rate * kept_days * per_change
    total = subscriptions + initial + changes
    print(f"measured: {part(first, SUBSCRIPTION_TABLES) / count:,.0f} bytes per subscription after its first "
          f"check, {per_subscription:,.0f} after {args.days} days (+ at most {growth:,.0f} by day {horizon}); "
          f"{per_initial:,.0f} bytes per initial_state event and {per_change:,.0f} per change event (each with "
          f"its delivery attempt); {rate:.3f} change events per subscription-day")
    print(f"projected for {target:,} subscriptions after {horizon} days of daily checks "
          f"({kept_days} days of events kept):")
    print(f"  subscriptions  {subscriptions / 1e9:8.2f} GB")
    print(f"  initial states {initial / 1e9:8.2f} GB")
    print(f"  change events  {changes / 1e9:8.2f} GB ({target * rate * kept_days:,.0f} events)")
    print(f"  total          {total / 1e9:8.2f} GB")


if __name__ == "__main__":
    sys.exit(main())
