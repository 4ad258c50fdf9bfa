#!/usr/bin/env python
"""API benchmark (issue 2 point 10): starts the server as the README does and reports, in one run,

  1. requests/s of GET /api/v1/subscriptions?limit=20 on an account of 10,000 subscriptions, side by side
     with GET /healthz (the no-op of the same server: one `SELECT 1`, no key, no rate limit);
  2. p50 (and p90) of a 100-item POST /api/v1/subscriptions/bulk;
  3. time and extra worker memory (RSS, from /proc) of a CSV export of 100,000 rows.

Usage: `.venv/bin/python scripts/bench_api.py [--seconds 5] [--threads 4]` from the checkout.

The server is `gunicorn -c python:app.gunicorn_conf wsgi:app` (one process, threads) on a free loopback
port, on a temporary SQLite file, with RATELIMIT_ENABLED=0 and SCHEDULER_ENABLED=0, after
`flask --app wsgi db upgrade` and `flask --app wsgi accounts create --tier enterprise --json` (a tier
without a cap). Rows are filled directly through SQLAlchemy Core (one executemany per 10,000 rows, the
model's own defaults), not through the API: the API path is what is measured, not the filling.
Every loop is bounded; the server is stopped on every exit path.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
LIST_ROWS, EXPORT_ROWS = 10_000, 100_000
BULK_RUNS, BULK_SIZE = 20, 100


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tool(name):
    path = os.path.join(BIN, name)
    return [path] if os.path.exists(path) else [sys.executable, "-m", name]


def run(args, env):
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


# --- the server --------------------------------------------------------------------------------------

class Server:
    def __init__(self, env, port, log_path):
        self.env, self.port, self.log_path = env, port, log_path
        self.process = None

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(tool("gunicorn") + ["-c", "python:app.gunicorn_conf", "wsgi:app"],
                                        cwd=ROOT, env={**self.env, "BIND": f"127.0.0.1:{self.port}"},
                                        stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"gunicorn exited early; see {self.log_path}")
            try:
                if requests.get(self.url("/healthz"), timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise SystemExit("gunicorn did not answer /healthz within 30 s")

    def __exit__(self, *exc):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=25)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        self.log.close()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def worker_pid(self) -> int:
        """The gunicorn worker: the child of the master process."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        with open(f"/proc/{entry}/stat") as stat:
                            fields = stat.read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if int(fields[1]) == self.process.pid:
                        return int(entry)
            time.sleep(0.1)
        raise SystemExit("no gunicorn worker found")


def rss_kib(pid, field="VmRSS") -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# --- filling ---------------------------------------------------------------------------------------

def fill(database_url, account_id, start, count):
    """Insert subscriptions start..start+count-1 through SQLAlchemy Core with the model's defaults."""
    sys.path.insert(0, ROOT)
    from sqlalchemy import insert

    from app import create_app
    from app.extensions import db
    from app.models import Subscription

    app = create_app({"SQLALCHEMY_DATABASE_URI": database_url, "SCHEDULER_ENABLED": False})
    base = datetime(2026, 1, 1)
    with app.app_context():
        for chunk_start in range(start, start + count, 10_000):
            rows = []
            for n in range(chunk_start, min(start + count, chunk_start + 10_000)):
                moment = base + timedelta(seconds=n)
                kind, path = ("contact", "in") if n % 3 else ("company", "company")
                rows.append({"id": f"sub_bench{n:015d}", "account_id": account_id, "entity_type": kind,
                             "network_id": f"entity-{n}",
                             "network_url": f"https://www.linkedin.com/{path}/entity-{n}",
                             "status": "active" if n % 10 else "cancelled", "custom_metadata": {},
                             "created_at": moment, "updated_at": moment, "next_check_at": moment})
            db.session.execute(insert(Subscription), rows)
            db.session.commit()
        db.engine.dispose()


# --- measuring -------------------------------------------------------------------------------------

def throughput(url, headers, seconds, threads, max_requests=200_000):
    """Requests/s from `threads` clients, each a requests.Session, for `seconds` (bounded by count too)."""
    counts, errors = [0] * threads, [0] * threads
    stop_at = time.monotonic() + seconds
    per_thread = max_requests // threads

    def client(index):
        with requests.Session() as session:
            session.headers.update(headers)
            for _ in range(per_thread):
                if time.monotonic() >= stop_at:
                    return
                response = session.get(url, timeout=10)
                if response.status_code == 200:
                    counts[index] += 1
                else:
                    errors[index] += 1

    started = time.monotonic()
    workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=seconds + 30)
    elapsed = time.monotonic() - started
    if sum(errors):
        raise SystemExit(f"{sum(errors)} non-200 answers from {url}")
    return sum(counts) / elapsed


def bulk_create_latencies(server, headers, runs, size, offset):
    latencies = []
    with requests.Session() as session:
        session.headers.update(headers)
        for run_index in range(runs):
            items = [{"entity_type": "contact", "network_id": f"bulk-{offset}-{run_index}-{n}"}
                     for n in range(size)]
            started = time.perf_counter()
            response = session.post(server.url("/api/v1/subscriptions/bulk"), json={"subscriptions": items},
                                    timeout=60)
            latencies.append(time.perf_counter() - started)
            body = response.json()
            if response.status_code != 200 or body["created"] != size:
                raise SystemExit(f"bulk create failed: {response.status_code} {body}")
    return latencies


def export_csv(server, headers, pid):
    """(seconds, rows, bytes, peak extra RSS in MiB) of one streamed CSV export."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear:  # reset the peak (VmHWM) to the current RSS
        clear.write("5")
    before = rss_kib(pid)
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss_kib(pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    lines = size = 0
    try:
        with requests.get(server.url("/api/v1/subscriptions/export?format=csv"), headers=headers,
                          stream=True, timeout=120) as response:
            response.raise_for_status()
            for chunk in response.iter_content(chunk_size=65536):
                size += len(chunk)
                lines += chunk.count(b"\n")
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join(timeout=5)
    peak_kib = max(peak[0], rss_kib(pid, "VmHWM"))
    return elapsed, lines - 1, size, (peak_kib - before) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    parser.add_argument("--threads", type=int, default=4, help="concurrent client threads")
    parser.add_argument("--rounds", type=int, default=2, help="alternating list/no-op rounds")
    parser.add_argument("--exports", type=int, default=2, help="export runs (the first reads a cold cache)")
    options = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="bench-api-")
    database_url = f"sqlite:///{os.path.join(workdir, 'bench.db')}"
    env = {**os.environ, "DATABASE_URL": database_url, "RATELIMIT_ENABLED": "0", "SCHEDULER_ENABLED": "0",
           "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    env.pop("BIND", None)
    try:
        run(tool("flask") + ["--app", "wsgi", "db", "upgrade"], env)
        account = json.loads(run(tool("flask") + ["--app", "wsgi", "accounts", "create", "--name", "bench",
                                                  "--tier", "enterprise", "--json"], env))
        headers = {"X-API-Key": account["api_key"]}
        fill(database_url, account["account_id"], 0, LIST_ROWS)

        with Server(env, free_port(), os.path.join(workdir, "gunicorn.log")) as server:
            pid = server.worker_pid()
            for path in ("/healthz", "/api/v1/subscriptions?limit=20"):  # warm up
                throughput(server.url(path), headers, 1.0, options.threads)
            total = requests.get(server.url("/api/v1/subscriptions?limit=1"), headers=headers,
                                 timeout=10).json()
            assert total["pagination"]["total"] == LIST_ROWS, total["pagination"]
            noop_rates, list_rates = [], []
            for _ in range(options.rounds):
                noop_rates.append(throughput(server.url("/healthz"), {}, options.seconds, options.threads))
                list_rates.append(throughput(server.url("/api/v1/subscriptions?limit=20"), headers,
                                             options.seconds, options.threads))
            latencies = bulk_create_latencies(server, headers, BULK_RUNS, BULK_SIZE, offset=0)

            have = LIST_ROWS + BULK_RUNS * BULK_SIZE
            fill(database_url, account["account_id"], LIST_ROWS, EXPORT_ROWS - have)
            exports = [export_csv(server, headers, pid) for _ in range(options.exports)]
            for _seconds, rows, _size, _extra in exports:
                if rows != EXPORT_ROWS:
                    raise SystemExit(f"export returned {rows} rows, expected {EXPORT_ROWS}")
            worker_rss = rss_kib(pid) / 1024

        noop, listed = statistics.median(noop_rates), statistics.median(list_rates)
        print(f"server: gunicorn gthread, 1 worker x {os.environ.get('GUNICORN_THREADS', '8')} threads; "
              f"clients: {options.threads} threads, {options.rounds} x {options.seconds:.0f} s per endpoint")
        print(f"{'GET /healthz (no-op)':40} {noop:8.0f} req/s")
        print(f"{'GET /api/v1/subscriptions?limit=20':40} {listed:8.0f} req/s   "
              f"({listed / noop:.0%} of no-op; account of {LIST_ROWS:,} subscriptions)")
        p50 = statistics.median(latencies) * 1000
        print(f"{'POST /subscriptions/bulk (100 items)':40} p50 {p50:6.1f} ms   "
              f"p90 {statistics.quantiles(latencies, n=10)[-1] * 1000:6.1f} ms ({BULK_RUNS} runs)")
        for number, (export_seconds, rows, size, extra_mib) in enumerate(exports, 1):
            label = f"GET /subscriptions/export (CSV) #{number}"
            print(f"{label:40} {export_seconds:6.2f} s for {rows:,} rows "
                  f"({size / 1e6:.1f} MB), worker peak RSS +{extra_mib:.1f} MiB")
        print(f"worker RSS after the exports: {worker_rss:.0f} MiB")
        print("rows were inserted through SQLAlchemy Core, not the API")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
