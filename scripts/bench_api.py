#!/usr/bin/env python
"""API benchmark (issue 12 point 5): the API's hot paths under the production server, side by side with a
bare Flask view served the same way, measured in the same run.

Usage: `.venv/bin/python scripts/bench_api.py [--rows 1000000] [--seconds 10] [--rounds 3]` from the
checkout; `--rows 10000 --seconds 3 --rounds 1` is a quick smoke run; `--serve` sets up the same servers and
leaves them serving for a load generator of your own. `DATABASE_URL=postgresql://…` runs it
on PostgreSQL (in a schema of its own, `bench_api`, made by the migrations and dropped at the end), else on a
new SQLite file.

The servers are `python -m gunicorn -c python:app.gunicorn_conf …` (one process, GUNICORN_THREADS threads,
default 8, the worker kept to one CPU as WORKER_CPU says; with auto, both to the first CPU it would pick): the
service as `app.wsgi:app`, the bare view as `scripts/bench_hello.py`; a second bare view runs with
WORKER_CPU=off, as a plain `gunicorn --threads 8` would serve it, and the tables give each rate as a fraction of
both. The service runs with
its rate limiter on (RATELIMIT_ENABLED=1, memory://); the run's account is on the `enterprise` tier, whose
limits an instance config raises so that the limiter runs on every request without answering 429. The
scheduler is off (SCHEDULER_ENABLED=0: checks would compete for the CPU); a heartbeat row lets /healthz
answer 200 with its usual queries. The account's rows are inserted directly (`fill_subscriptions`), not
through the API.

Per round, each for --seconds, 8 connections (--connections): GET /hello (bare), GET /healthz,
GET /api/v1/subscriptions?limit=20, GET /api/v1/subscriptions/<random filled id>, then POST
/api/v1/subscriptions with --writers connections, each request a new entity. The table shows medians over
the rounds of requests/s, p50 and p99, and each rate as a fraction of the bare view's. Then the same rounds
again at --light-connections (default 1, for GET and POST alike; 0 skips them), in a second table: with one
process of threads sharing one interpreter, a request under 8 connections waits for the CPU time of the
others, so its latency there is mostly queueing; at one connection it is the request's own.

Load generator: wrk when it is on PATH (scripts/bench_api.lua sets the headers, builds the requests and
reports the latency percentiles). Without wrk, a fallback of one Python client process per connection
(http.client, keep-alive); on a small machine it competes with the server for the CPU and may itself be
the bottleneck, so its rates are a floor (the table says which generator ran).
"""
import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import islice
from typing import Optional
from urllib.parse import urlsplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
LUA_SCRIPT = os.path.join(ROOT, "scripts", "bench_api.lua")
HIGH_LIMIT = 10**9  # per window and class: the limiter runs, and never refuses
POSTGRES_SCHEMA = "bench_api"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args, env):
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def write_instance_config(instance_path):
    """Limits the benchmark never reaches on the enterprise tier; /healthz content with the filler's heartbeat."""
    from app.config import DEFAULT_TIERS
    enterprise = {**DEFAULT_TIERS["enterprise"],
                  "rate_limits": {name: HIGH_LIMIT for name in DEFAULT_TIERS["enterprise"]["rate_limits"]}}
    with open(os.path.join(instance_path, "config.py"), "w") as config:
        config.write(f"TIERS = {({**DEFAULT_TIERS, 'enterprise': enterprise})!r}\n"
                     "HEALTH_SCHEDULER_MAX_LAG_SECONDS = 86400\n")


# --- the servers ------------------------------------------------------------------------------------

class Server:
    """`python -m gunicorn -c python:app.gunicorn_conf <extra> <app>` on a free loopback port, stopped on exit."""

    def __init__(self, name, app_args, ready_path, env, workdir):
        self.name, self.app_args, self.ready_path, self.env = name, app_args, ready_path, env
        self.port = free_port()
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.process = None

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:app.gunicorn_conf", *self.app_args], cwd=ROOT,
            env={**self.env, "BIND": f"127.0.0.1:{self.port}"}, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name}: gunicorn exited early; see {self.log_path}")
            try:
                if request("GET", self.url(self.ready_path))[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"{self.name}: no 200 from {self.ready_path} within 60 s; see {self.log_path}")

    def __exit__(self, *exc):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        self.log.close()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def cpu_seconds(self):
        """CPU time (user + system) the server's processes (gunicorn's arbiter and its worker) have used so far;
        None where /proc cannot tell (not Linux)."""
        try:
            return sum(_process_cpu_seconds(pid) for pid in _process_tree(self.process.pid))
        except OSError:
            return None


def _process_tree(pid):
    children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    return [pid, *(found for child in children for found in _process_tree(int(child)))]


def _process_cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def request(method, url, headers=None, body=None):
    """(status, headers, body) of one request on a new connection."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


# --- filling ----------------------------------------------------------------------------------------

def subscription_rows(account_id, id_prefix, count):
    """`count` subscriptions as the model stores them (its defaults for the monitoring fields), 90% active,
    one second apart; ids are `<id_prefix><n, 15 digits>`."""
    base = datetime(2026, 1, 1)
    for n in range(count):
        moment = base + timedelta(seconds=n)
        kind, path = ("contact", "in") if n % 3 else ("company", "company")
        yield {"id": f"{id_prefix}{n:015d}", "account_id": account_id, "entity_type": kind,
               "network_id": f"entity-{n}", "network_url": f"https://www.linkedin.com/{path}/entity-{n}",
               "status": "active" if n % 10 else "cancelled", "custom_metadata": {}, "created_at": moment,
               "updated_at": moment, "cancelled_at": None if n % 10 else moment,
               "next_check_at": moment if n % 10 else None, "last_check_status": "pending", "check_count": 0,
               "change_count": 0, "consecutive_failures": 0}


def fill_subscriptions(database_url, account_id, id_prefix, count, chunk_size=20_000):
    """Insert the account's rows with Core executemany in chunks, one transaction per chunk, and a fresh
    scheduler heartbeat. Anything the schema derives from the rows (e.g. per-account counters) is filled
    here too, so the service finds the database as its own writes would have left it. The engine is set up
    as the service's: on PostgreSQL a chunk goes out as multi-row INSERTs, so the counters' statement-level
    triggers run once per 1,000 rows (one statement a row updated the same counter rows 20,000 times in a
    transaction: quadratic, minutes a chunk)."""
    from sqlalchemy import create_engine, insert

    from app.common import utcnow
    from app.database import configure_engine
    from app.models import SchedulerHeartbeat, Subscription

    engine = create_engine(database_url)
    configure_engine(engine, busy_timeout_ms=30_000)
    rows = subscription_rows(account_id, id_prefix, count)
    try:
        while chunk := list(islice(rows, chunk_size)):
            with engine.begin() as connection:
                connection.execute(insert(Subscription.__table__), chunk)
        with engine.begin() as connection:
            now = utcnow()
            connection.execute(insert(SchedulerHeartbeat.__table__),
                               {"id": f"bench-{account_id}", "started_at": now, "last_tick_at": now})
    finally:
        engine.dispose()


# --- load generators --------------------------------------------------------------------------------

@dataclass
class Result:
    rate: float  # requests/s
    p50_ms: float
    p99_ms: float
    requests: int
    failed: int  # non-2xx answers and socket errors
    cpu_ms: Optional[float] = None  # the server's CPU time per request (None: unknown)


def with_wrk(url, seconds, connections, mode, key="", prefix="", rows=1) -> Result:
    env = {**os.environ, "BENCH_MODE": mode, "BENCH_KEY": key, "BENCH_PREFIX": prefix, "BENCH_ROWS": str(rows)}
    threads = min(connections, 2)
    output = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s",
                             "--timeout", "10s", "-s", LUA_SCRIPT, url], env=env, capture_output=True,
                            text=True, timeout=seconds + 60)
    line = next((line for line in output.stdout.splitlines() if line.startswith("WRK_RESULT ")), None)
    if line is None:
        raise SystemExit(f"wrk printed no result:\n{output.stdout}\n{output.stderr}")
    found = json.loads(line.split(" ", 1)[1])
    return Result(found["requests"] / (found["duration_us"] / 1e6), found["p50_us"] / 1000, found["p99_us"] / 1000,
                  found["requests"], found["non_2xx"] + found["socket_errors"])


def _python_client(url, seconds, mode, key, prefix, rows, index, results):
    """One connection's loop of the fallback generator: (latencies in seconds, failures)."""
    import random
    parts = urlsplit(url)
    headers = {"X-API-Key": key} if key else {}
    if mode == "post":
        headers["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    latencies, failed, counter = [], 0, 0
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        method, target, body = "GET", parts.path + (f"?{parts.query}" if parts.query else ""), None
        if mode == "byid":
            target = f"/api/v1/subscriptions/{prefix}{random.randrange(rows):015d}"
        elif mode == "post":
            counter += 1
            method = "POST"
            body = json.dumps({"entity_type": "contact", "network_id": f"{prefix}-{index}-{counter}"})
        started = time.perf_counter()
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - started)
        failed += not 200 <= response.status < 300
    connection.close()
    results.put((latencies, failed))


def with_python(url, seconds, connections, mode, key="", prefix="", rows=1) -> Result:
    results = multiprocessing.Queue()
    clients = [multiprocessing.Process(target=_python_client,
                                       args=(url, seconds, mode, key, prefix, rows, index, results))
               for index in range(connections)]
    started = time.monotonic()
    for client in clients:
        client.start()
    gathered = [results.get(timeout=seconds + 60) for _ in clients]
    elapsed = time.monotonic() - started
    for client in clients:
        client.join(timeout=10)
    latencies = sorted(latency for found, _failed in gathered for latency in found)
    if not latencies:
        raise SystemExit(f"no answer from {url}")
    return Result(len(latencies) / elapsed, 1000 * latencies[len(latencies) // 2],
                  1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], len(latencies),
                  sum(failed for _found, failed in gathered))


# --- the run ----------------------------------------------------------------------------------------

def measure(generator, label, server, *args, **kwargs) -> Result:
    """One run against `server`, with the server's CPU time per request: unlike rates, it hardly moves when
    other work shares the machine."""
    cpu_before = server.cpu_seconds()
    result = generator(*args, **kwargs)
    if result.failed:
        raise SystemExit(f"{label}: {result.failed} of {result.requests} requests failed")
    # The generator stops with requests still in flight; let the server finish them before the next run
    # (at 1M rows a list page can take seconds, which would land in the next endpoint's figures).
    time.sleep(min(10.0, 1.5 * result.p99_ms / 1000))
    cpu_after = server.cpu_seconds()
    if cpu_before is not None and cpu_after is not None:
        result = replace(result, cpu_ms=1000 * (cpu_after - cpu_before) / result.requests)
    print(f"  {label:44} {result.rate:8.0f} req/s  p50 {result.p50_ms:7.2f} ms  p99 {result.p99_ms:7.2f} ms"
          f"  CPU {_cpu_text(result.cpu_ms)} ms/req", flush=True)
    return result


def _cpu_text(cpu_ms):
    return "   ?" if cpu_ms is None else f"{cpu_ms:4.2f}"


def median_result(results) -> Result:
    cpu = [r.cpu_ms for r in results if r.cpu_ms is not None]
    return Result(statistics.median(r.rate for r in results), statistics.median(r.p50_ms for r in results),
                  statistics.median(r.p99_ms for r in results), sum(r.requests for r in results),
                  sum(r.failed for r in results), statistics.median(cpu) if cpu else None)


def check_limiter_runs(app_server, key):
    status, headers, _ = request("GET", app_server.url("/api/v1/subscriptions?limit=1"), {"X-API-Key": key})
    if status != 200 or headers.get("X-RateLimit-Limit") != str(HIGH_LIMIT):
        raise SystemExit(f"the rate limiter is not running as configured: {status} {headers}")


def serve_until_interrupted(hello, hello_anywhere, service, key, id_prefix, rows):
    """--serve: the run's servers, left up for a load generator of the reader's own (`wrk` lines printed)."""
    lua = os.path.relpath(LUA_SCRIPT)
    print(f"""serving until Ctrl-C (the database and servers go when this stops):
  bare Flask view, same gunicorn   {hello.url("/hello")}
  bare view, WORKER_CPU=off        {hello_anywhere.url("/hello")}
  the service                      {service.url("/api/v1/subscriptions?limit=20")}
  API key                          {key}
for example, side by side:
  wrk -t2 -c8 -d10s --latency {hello.url("/hello")}
  wrk -t2 -c8 -d10s --latency -H 'X-API-Key: {key}' '{service.url("/api/v1/subscriptions?limit=20")}'
  BENCH_MODE=byid BENCH_KEY={key} BENCH_PREFIX={id_prefix} BENCH_ROWS={rows} \\
    wrk -t2 -c8 -d10s -s {lua} {service.url("/api/v1/subscriptions")}""", flush=True)
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # taken by sigwait, so the servers and files go too
    signal.sigwait(stop_signals)


def check_total(app_server, key, expected, in_flight=0):
    """The list's total counts every row: `expected`, plus up to `in_flight` creates wrk did not wait for."""
    _status, _headers, body = request("GET", app_server.url("/api/v1/subscriptions?limit=1"), {"X-API-Key": key})
    total = json.loads(body)["pagination"]["total"]
    if not expected <= total <= expected + in_flight:
        raise SystemExit(f"the list's total is {total}, expected {expected} (+ up to {in_flight})")


def measure_rounds(generator, endpoints, service, key, options, connections, writers, post_prefix):
    """--rounds rounds over the GET endpoints with `connections` connections, then POST with `writers`:
    ({label: [Result per round]}, rows created)."""
    found = {label: [] for label, _server, _path, _extra in endpoints}
    post_label = f"POST /api/v1/subscriptions ({writers} writers)"
    found[post_label] = []
    posted = 0
    for round_number in range(options.rounds):
        print(f"round {round_number + 1}, {connections} connections", flush=True)
        for label, server, path, extra in endpoints:
            extra = dict(extra)
            mode = extra.pop("mode", "static")
            found[label].append(measure(generator, label, server, server.url(path), options.seconds,
                                        connections, mode, **extra))
        result = measure(generator, post_label, service, service.url("/api/v1/subscriptions"), options.seconds,
                         writers, "post", key=key, prefix=f"{post_prefix}{round_number}")
        found[post_label].append(result)
        posted += result.requests
    return found, posted


BARE_ANYWHERE = "GET /hello (bare, WORKER_CPU=off)"


def print_table(rows, generator_name, options, database, connections, writers, worker_cpu):
    """Each rate as a fraction of the bare view's under the same settings (x bare) and of the bare view's on a
    worker left to the kernel, as a plain `gunicorn --threads 8` serves it (x off)."""
    bare, anywhere = rows[0][1].rate, dict(rows)[BARE_ANYWHERE].rate
    print(f"\n{database}, {options.rows:,} subscriptions in one account; gunicorn gthread, 1 process x "
          f"{os.environ.get('GUNICORN_THREADS', '8')} threads, WORKER_CPU={worker_cpu}; "
          f"load: {generator_name}, {connections} "
          f"connections ({writers} for POST), {options.rounds} x {options.seconds:g} s, medians")
    print(f"{'endpoint':46} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'x bare':>7} {'x off':>6} {'CPU ms/req':>11}")
    for label, result in rows:
        print(f"{label:46} {result.rate:8.0f} {result.p50_ms:8.2f} {result.p99_ms:8.2f} {result.rate / bare:7.2f} "
              f"{result.rate / anywhere:6.2f} {_cpu_text(result.cpu_ms):>11}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="subscriptions in the account")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every endpoint (medians reported)")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections of the GET runs")
    parser.add_argument("--writers", type=int, default=8, help="concurrent connections of the POST run")
    parser.add_argument("--light-connections", type=int, default=1,
                        help="then the same rounds at this load, every endpoint and POST (0: skip): the "
                             "latency of a request that does not queue behind others")
    parser.add_argument("--python-client", action="store_true", help="use the Python fallback even with wrk")
    parser.add_argument("--serve", action="store_true",
                        help="fill and start the servers as for a run, print their URLs, the key and wrk commands, "
                             "and keep serving until Ctrl-C: the same setup measured with your own load generator")
    options = parser.parse_args()

    use_wrk = shutil.which("wrk") and not options.python_client
    generator, generator_name = (with_wrk, "wrk") if use_wrk else (with_python, "Python clients (fallback)")
    workdir = tempfile.mkdtemp(prefix="bench-api-")
    given_url = os.environ.get("DATABASE_URL", "").strip()
    postgres = given_url.startswith("postgresql")
    if postgres:
        from app.database import url_with_fresh_schema
        database_url = url_with_fresh_schema(given_url, POSTGRES_SCHEMA)
    else:
        database_url = given_url or f"sqlite:///{os.path.join(workdir, 'bench.db')}"
    env = {**os.environ, "DATABASE_URL": database_url, "INSTANCE_PATH": workdir, "RATELIMIT_ENABLED": "1",
           "RATELIMIT_STORAGE_URI": "memory://", "SCHEDULER_ENABLED": "0", "WEB_CONCURRENCY": "1"}
    from app.cpu_affinity import cpu_for_new_worker, processes_kept_to_one_cpu, worker_cpus
    cpus = worker_cpus(os.environ)
    if cpus:  # both servers on one CPU: with auto, the one started second would count the first's worker and move
        env["WORKER_CPU"] = str(cpu_for_new_worker(cpus, [], processes_kept_to_one_cpu()))
    try:
        write_instance_config(workdir)
        flask = [sys.executable, "-m", "flask", "--app", "wsgi"]
        run(flask + ["db", "upgrade"], env)
        account = json.loads(run(flask + ["accounts", "create", "--name", "bench", "--tier", "enterprise",
                                          "--json"], env))
        key, id_prefix = account["api_key"], f"sub_{account['account_id'][-8:]}_"
        started = time.monotonic()
        fill_subscriptions(database_url, account["account_id"], id_prefix, options.rows)
        print(f"filled {options.rows:,} rows in {time.monotonic() - started:.1f} s", flush=True)

        hello = Server("bare", ["--pythonpath", "scripts", "bench_hello:app"], "/hello", env, workdir)
        # what a plain `gunicorn --threads 8` does: the worker left to the kernel (app/cpu_affinity.py)
        hello_anywhere = Server("bare-anywhere", ["--pythonpath", "scripts", "bench_hello:app"], "/hello",
                                {**env, "WORKER_CPU": "off"}, workdir)
        service = Server("service", ["app.wsgi:app"], "/healthz", env, workdir)
        with hello, hello_anywhere, service:
            check_limiter_runs(service, key)
            check_total(service, key, options.rows)
            if options.serve:
                serve_until_interrupted(hello, hello_anywhere, service, key, id_prefix, options.rows)
                return
            endpoints = [
                ("GET /hello (bare Flask, same gunicorn)", hello, "/hello", {}),
                (BARE_ANYWHERE, hello_anywhere, "/hello", {}),
                ("GET /healthz", service, "/healthz", {}),
                ("GET /api/v1/subscriptions?limit=20", service, "/api/v1/subscriptions?limit=20", {"key": key}),
                ("GET /api/v1/subscriptions/<id>", service, "/api/v1/subscriptions",
                 {"mode": "byid", "key": key, "prefix": id_prefix, "rows": options.rows}),
            ]
            for label, server, path, extra in endpoints[:4]:  # warm-up: imports, caches, connections
                generator(server.url(path), 1, options.connections, extra.get("mode", "static"), **{
                    name: value for name, value in extra.items() if name != "mode"})
            loads = [(options.connections, options.writers)]
            if options.light_connections:
                loads.append((options.light_connections, options.light_connections))
            tables, posted, unanswered = [], 0, 0
            for connections, writers in loads:
                found, posted_now = measure_rounds(generator, endpoints, service, key, options, connections,
                                                   writers, f"post{len(tables)}-")
                tables.append((found, connections, writers))
                posted, unanswered = posted + posted_now, unanswered + writers * options.rounds
                check_total(service, key, options.rows + posted, unanswered)
        database = "PostgreSQL" if database_url.startswith("postgresql") else "SQLite"
        for found, connections, writers in tables:
            print_table([(label, median_result(results)) for label, results in found.items()], generator_name,
                        options, database, connections, writers, env.get("WORKER_CPU") or "auto")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if postgres:
            from app.database import drop_schema
            drop_schema(given_url, POSTGRES_SCHEMA)


if __name__ == "__main__":
    main()
