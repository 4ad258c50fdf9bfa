#!/usr/bin/env python
"""List totals, search and export at N subscriptions in one account (issue 12), on SQLite or PostgreSQL.

Fills a database (the migrations, one enterprise account, N subscriptions inserted with Core executemany in
chunks of 10,000: the triggers keep the counters and the search index as they would for the API), then, in a
fresh child process so its memory is the measurement's own, times in-process (no HTTP server: the request
pipeline is scripts/bench_api.py's business):

  list     `subscriptions.list_page(limit=20)` (page and exact total), unfiltered and status-filtered;
  search   a rare needle (one row), a common one (a first name, about 0.5% of rows), one inside every URL
           ("linkedin"), one that runs from the URL into the id ("in/" and 2 characters), one found nowhere,
           and needles of 1 and 2 characters (no trigram: gram counters, then a LIKE over the newest rows):
           common, rare (in one last name: about 1 id in 1,000), in one id, and found nowhere;
  export   `GET /api/v1/subscriptions/export` (CSV, then JSON) through the app's WSGI callable as a server
           calls it (API key, rate limiter and streaming as in production), its byte chunks drained and
           discarded: rows/s of wall time and of the process's CPU time (the fair figure on a busy
           machine), and the process's RSS before and at its peak (flat: it must not grow with the rows).

Each timing is p50/p99 over --runs calls (a read transaction ended between calls, as a request does);
`--only search` skips the others.

    python scripts/bench_list_export.py [--subscriptions 1000000] [--database-url URL] [--keep PATH]
                                        [--only list|search|export]

Without --database-url a throw-away SQLite file is used (or the one at --keep, reused when it exists).
With a PostgreSQL URL, the script empties the schema `bench_list_export` in that database, works there and
drops it at the end (with --keep, a file naming the account; the schema is kept, and reused while that file
exists).
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SYLLABLES = ["an", "bel", "cor", "dan", "el", "fio", "gra", "han", "is", "jo", "ka", "lu", "mar", "ni", "ol",
             "pe", "ra", "sa", "ti", "vi", "wen", "xa", "yo", "zu"]
PARTS = ("list", "search", "export")
POSTGRES_SCHEMA = "bench_list_export"
CONFIG = {"SCHEDULER_ENABLED": False, "TESTING": True}


def names(count, seed):
    chooser, made = random.Random(seed), set()
    while len(made) < count:
        made.add("".join(chooser.choice(SYLLABLES) for _ in range(chooser.randint(2, 3))))
    return sorted(made)


FIRST, LAST = names(200, 1), names(1000, 2)


def network_id(n):
    return f"{FIRST[n % len(FIRST)]}-{LAST[(n * 7919) % len(LAST)]}-{n:x}"


def app_for(database_url):
    from app import create_app
    return create_app({**CONFIG, "SQLALCHEMY_DATABASE_URI": database_url})


def fill(database_url, count):
    """Migrate, make the account, insert `count` subscriptions (1 in 10 cancelled, 1 in 10 paused, a third
    companies). Returns (account id, API key)."""
    from flask_migrate import upgrade
    from sqlalchemy import insert, text

    from app.extensions import db
    from app.models import Subscription
    from app.services import accounts

    app = app_for(database_url)
    base = datetime(2025, 1, 1)
    with app.app_context():
        upgrade()
        account, key = accounts.create_account("Bench", "enterprise")
        started = time.perf_counter()
        for chunk_start in range(0, count, 10_000):
            rows = []
            for n in range(chunk_start, min(count, chunk_start + 10_000)):
                moment = base + timedelta(seconds=n)
                kind, path = ("contact", "in") if n % 3 else ("company", "company")
                rows.append({"id": f"sub_{n:024x}", "account_id": account.id, "entity_type": kind,
                             "network_id": network_id(n),
                             "network_url": f"https://www.linkedin.com/{path}/{network_id(n)}",
                             "status": ("cancelled", "paused")[n // 10 % 2] if n % 10 == 0 else "active",
                             "custom_metadata": {"row": n} if n % 5 == 0 else {},
                             "created_at": moment, "updated_at": moment, "next_check_at": moment})
            db.session.execute(insert(Subscription), rows)
            db.session.commit()
        if db.engine.dialect.name == "postgresql":
            # the statistics autovacuum would gather after such a load; without them the planner walks
            # whole indexes (a status-filtered list page took seconds)
            db.session.execute(text("ANALYZE subscriptions"))
            db.session.commit()
        print(f"filled {count:,} subscriptions in {time.perf_counter() - started:.0f} s", flush=True)
        db.engine.dispose()
    return account.id, key


def timed(call, runs):
    """(the last result, p50 and p99 of wall-clock ms, p50 of this process's CPU ms: on SQLite the whole cost,
    and the fair figure on a busy machine)."""
    from app.extensions import db
    times, cpu_times = [], []
    for _ in range(runs):
        started, cpu = time.perf_counter(), time.process_time()
        result = call()
        times.append((time.perf_counter() - started) * 1000)
        cpu_times.append((time.process_time() - cpu) * 1000)
        db.session.rollback()
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return result, statistics.median(times), p99, statistics.median(cpu_times)


def rss_kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def pairs(text):
    return {text[i:i + 2] for i in range(len(text) - 1)}


def rare_pair():
    """2 characters found in one last name only, and in no first name: in about 1 id in 1,000 (and in no hex
    number: it holds a letter past `f`)."""
    in_first = set().union(*map(pairs, FIRST))
    candidates = sorted(pair for pair in set().union(*map(pairs, LAST)) - in_first
                        if set(pair) & set("ghijklmnopqrstuvwxyz"))
    return min(candidates, key=lambda pair: sum(pair in last for last in LAST))


def cases(count, parts):
    rare = network_id(count // 2 + 1).rsplit("-", 1)[1]
    listed = [("list limit=20", {}), ("list status=active", {"status": "active"}),
              ("list entity_type=company status=paused", {"entity_type": "company", "status": "paused"})]
    searched = [(f"search rare {rare!r}", rare), (f"search common {FIRST[7]!r}", FIRST[7]),
                ("search in every URL 'linkedin'", "linkedin"), (f"search URL into id 'in/{FIRST[3][:2]}'",
                                                                 f"in/{FIRST[3][:2]}"),
                ("search no match 'qqqq'", "qqqq"), (f"search 2 characters {FIRST[3][:2]!r}", FIRST[3][:2]),
                (f"search 2 characters, rare {rare_pair()!r}", rare_pair()),
                ("search 2 characters, in 1 id '-0'", "-0"),
                ("search 2 characters, no match 'qq'", "qq"), ("search 1 character 'j'", "j")]
    return ((listed if "list" in parts else [])
            + ([(label, {"search": needle}) for label, needle in searched] if "search" in parts else []))


def measure(database_url, account_id, key, count, runs, parts):
    from app.services import subscriptions

    app = app_for(database_url)
    with app.app_context():
        print(f"{'what':48} {'total':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU p50 ms':>10}")
        for label, filters in cases(count, parts):
            (_rows, total), p50, p99, cpu = timed(
                lambda: subscriptions.list_page(account_id, 20, 0, **filters), runs)
            print(f"{label:48} {total:>9,} {p50:>8.2f} {p99:>8.2f} {cpu:>10.2f}", flush=True)
    if "export" in parts:
        measure_export(app, key, count)


def wsgi_get(app, path, key):
    """(status line, byte chunks) of a GET through the app's WSGI callable, as gunicorn calls it."""
    from werkzeug.test import EnvironBuilder
    status = []
    environ = EnvironBuilder(path=path, headers={"X-API-Key": key}).get_environ()
    body = app(environ, lambda status_line, headers, exc_info=None: status.append(status_line))
    return status, body


EARLY_CHUNKS = 10  # the export's first chunks (10,000 rows each): the peak RSS then and at the end show it is flat


def measure_export(app, key, count):
    """Each format's export of the account's rows through the WSGI callable: rows/s and peak RSS."""
    for export_format in ("csv", "json"):
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")  # the peak RSS starts again from here
        except OSError:
            pass
        before = rss_kib("VmRSS")
        started, cpu = time.perf_counter(), time.process_time()
        status, body = wsgi_get(app, f"/api/v1/subscriptions/export?format={export_format}", key)
        size, early = 0, None
        try:
            for number, chunk in enumerate(body):
                size += len(chunk)
                if number == EARLY_CHUNKS:
                    early = rss_kib("VmHWM")
        finally:
            body.close()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert status == ["200 OK"], status
        print(f"export {export_format}: {count:,} rows, {size / 1e6:.0f} MB in {seconds:.2f} s = "
              f"{count / seconds:,.0f} rows/s ({count / cpu:,.0f} per CPU second); RSS {before / 1024:.0f} MiB "
              f"before, peak {f'{early / 1024:.0f} MiB after {EARLY_CHUNKS} chunks, ' if early else ''}"
              f"{rss_kib('VmHWM') / 1024:.0f} MiB at the end", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscriptions", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--keep", help="fill once and reuse: the SQLite file (with PostgreSQL: the schema "
                                       "is kept, the file keeps the account)")
    parser.add_argument("--only", choices=PARTS, action="append", help="measure only this part (repeatable)")
    parser.add_argument("--measure", nargs=3, metavar=("URL", "ACCOUNT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    parts = args.only or PARTS
    if args.measure:
        return measure(*args.measure, args.subscriptions, args.runs, parts)
    workdir = tempfile.mkdtemp(prefix="bench_list_export_")
    path = args.keep or os.path.join(workdir, "bench.db")
    state = path + ".account.json"
    kept = bool(args.keep) and os.path.exists(state)
    postgres = bool(args.database_url) and args.database_url.startswith("postgresql")
    try:
        if postgres:
            from app.database import url_with_fresh_schema, url_with_schema
            url = (url_with_schema if kept else url_with_fresh_schema)(args.database_url, POSTGRES_SCHEMA)
        else:
            url = f"sqlite:///{os.path.abspath(path)}"
        if kept:
            account_id, key = json.load(open(state))
        else:
            account_id, key = fill(url, args.subscriptions)
            if args.keep:
                json.dump([account_id, key], open(state, "w"))
        subprocess.run([sys.executable, __file__, "--subscriptions", str(args.subscriptions), "--runs",
                        str(args.runs), *(f"--only={part}" for part in parts), "--measure", url, account_id, key],
                       check=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the SQLite file and its -wal and -shm (--keep: elsewhere)
        if postgres and not args.keep:
            from app.database import drop_schema
            drop_schema(args.database_url, POSTGRES_SCHEMA)


if __name__ == "__main__":
    main()
