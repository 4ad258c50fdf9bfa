#!/usr/bin/env python
"""Dashboard import benchmark: how long a pasted list of N profile URLs (default 10,000) takes to import
through the dashboard's streamed result page, and when each chunk's progress reaches the browser.

Usage: `.venv/bin/python scripts/bench_import.py [--rows 10000]` from the checkout.

The app runs in-process on a temporary SQLite file built by the migrations (DATABASE_URL=postgresql://…: a
schema of its own in that database, dropped at the end), for an enterprise account (no tier cap); the page is
read through Flask's test client as it streams, so the time is the server's alone.
Reported: the time to the first and the last progress bar, the page's size, and rows per second.
"""
import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_dashboard import bench_app  # noqa: E402
from app.extensions import db  # noqa: E402
from tests.dashboard_helpers import Browser  # noqa: E402

PROGRESS = re.compile(rb'<progress value="(\d+)"')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    rows = parser.parse_args().rows
    if rows < 1:
        parser.error("--rows must be at least 1")
    with bench_app() as (app, _account_id, key):
        browser = Browser(app, key)
        pasted = "\n".join(f"https://www.linkedin.com/in/person-{number}" for number in range(rows))
        started = time.perf_counter()
        response = browser.post("/subscriptions/import", data={"rows": pasted})
        arrivals, size = [], 0
        for piece in response.response:
            size += len(piece)
            arrivals += [time.perf_counter() - started for _ in PROGRESS.findall(piece)]
        total = time.perf_counter() - started
        response.close()
        database = db.engine.dialect.name
    print(f"{database}, {rows:,} rows: first progress after {arrivals[0]:.2f} s, {len(arrivals)} progress updates, "
          f"last after {arrivals[-1]:.2f} s; page done after {total:.2f} s, {size / 1e6:.1f} MB "
          f"({rows / total:,.0f} rows/s)")


if __name__ == "__main__":
    main()
