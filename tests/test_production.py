"""Production operation (contract §10), black-box: real processes started the ways an operator starts
them, stopped with signals, killed with -9, and refused bad settings with one line."""
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import sqlalchemy
from filelock import FileLock, Timeout

from app import cpu_affinity
from tests.webhook_helpers import Receiver, Reply

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STOP_WITHIN_SECONDS = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def service(tmp_path):
    return Service(tmp_path)


class Service:
    """One database and instance folder; commands and servers run as child processes against it."""

    def __init__(self, folder: Path):
        self.database = folder / "monitor.db"
        self.env = {**os.environ, "DATABASE_URL": f"sqlite:///{self.database}", "INSTANCE_PATH": str(folder),
                    "WEBHOOK_ALLOW_HTTP": "1", "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "1",
                    "CHECK_INITIAL_DELAY_SECONDS": "0", "PATH": f"{BIN}:{os.environ['PATH']}",
                    "WORKER_CPU": "off"}  # parallel tests' servers would all keep to one CPU (the tests of it say auto)
        self.env.pop("TEST_POSTGRES_URL", None)

    def command(self, *args, env=None, check=True):
        done = subprocess.run([str(BIN / "entity-monitor"), *args], cwd=ROOT, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=120)
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def create_account(self) -> str:
        self.command("db", "upgrade")
        return json.loads(self.command("accounts", "create", "--name", "Ops", "--json").stdout)["api_key"]

    def start(self, *argv, env=None):
        return subprocess.Popen(list(argv), cwd=ROOT, env={**self.env, **(env or {})},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def sql(self, query, *params):
        with sqlite3.connect(self.database, timeout=30) as connection:
            return connection.execute(query, params).fetchall()

    def wait_for(self, condition, seconds=60, what="condition"):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    def heartbeats(self) -> int:
        """Schedulers that have ticked, on whichever database DATABASE_URL names."""
        engine = sqlalchemy.create_engine(self.env["DATABASE_URL"])
        try:
            with engine.connect() as connection:
                return connection.exec_driver_sql("SELECT count(*) FROM scheduler_heartbeats").scalar()
        finally:
            engine.dispose()


class Api:
    def __init__(self, port, key):
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self.session = requests.Session()
        self.session.headers["X-API-Key"] = key

    def post(self, path, body=None):
        return self.session.post(self.base + path, json=body, timeout=10)


@contextmanager
def running(process):
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def gunicorn(service, port, *extra, env=None):
    """Plain gunicorn, no config file; without its per-user control socket, which parallel tests would share."""
    return service.start(str(BIN / "gunicorn"), "--bind", f"127.0.0.1:{port}", "--no-control-socket", *extra,
                         "wsgi:app", env=env)


def wait_until_serving(service, process, port):
    def answers():
        assert process.poll() is None, process.stderr.read()
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code in (200, 503)
        except requests.RequestException:  # not listening yet, or too busy starting to answer
            return False
    service.wait_for(answers, what="the server to answer")


# --- the main job runs however the service is started --------------------------------------------------

def test_plain_gunicorn_without_a_config_file_checks_and_delivers(service):
    key = service.create_account()
    port = free_port()
    fast = {"SIMULATED_RATES": "demo", "SIMULATED_PACE_SECONDS": "1", "CHECK_INTERVAL_SECONDS": "1"}
    with Receiver() as receiver, running(gunicorn(service, port, env=fast)) as server:
        wait_until_serving(service, server, port)
        api = Api(port, key)
        assert api.post("/webhooks/configure", {"endpoint_url": receiver.url, "events": ["*"]}).status_code == 201
        assert api.post("/subscriptions", {"entity_type": "contact", "network_id": "jane-doe"}).status_code == 201

        def types():
            return [received.event["type"] for received in list(receiver.requests)]
        service.wait_for(lambda: "subscription.initial_state" in types() and len(set(types())) >= 2, seconds=90,
                         what="the initial state and a later change")
        health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status_code == 200 and health.json()["scheduler"]["lag_seconds"] < 30


def test_one_off_commands_never_start_a_scheduler(service):
    service.create_account()
    service.command("checks", "run", "--all")
    service.command("accounts", "list")
    assert service.heartbeats() == 0


def test_a_second_serving_process_on_one_sqlite_database_stands_by_and_takes_over(service):
    key = service.create_account()
    first_port, second_port = free_port(), free_port()
    standby = {"SCHEDULER_STANDBY_POLL_SECONDS": "1"}
    with running(gunicorn(service, first_port)) as first:
        wait_until_serving(service, first, first_port)
        service.wait_for(lambda: service.heartbeats() == 1, what="the first scheduler")
        with running(gunicorn(service, second_port, env=standby)) as second:
            wait_until_serving(service, second, second_port)
            for _ in range(3):
                assert requests.get(f"http://127.0.0.1:{second_port}/api/v1/account", headers={"X-API-Key": key},
                                    timeout=10).status_code == 200
            # the standby writes its buffered request counts as it waits (they waited for its next request)
            service.wait_for(lambda: service.sql("SELECT sum(requests) FROM usage_counters") == [(3,)], seconds=15,
                             what="the standby's request counts")
            assert service.heartbeats() == 1  # the lock beside the database keeps it to one
            first.send_signal(signal.SIGTERM)
            assert first.wait(STOP_WITHIN_SECONDS) == 0
            service.wait_for(lambda: service.heartbeats() == 2, what="the standby to take over")


# --- clean stop, under load ----------------------------------------------------------------------------

def seed_busy_database(service, receiver_url, subscriptions=3000):
    """Due subscriptions and a configured endpoint, so a scheduler has checks and deliveries to do."""
    key = service.create_account()
    account = service.sql("SELECT account_id FROM api_keys")[0][0]
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - 60))
    rows = [(f"sub_busy{n:06d}", account, "contact", f"person-{n}", f"https://www.linkedin.com/in/person-{n}",
             "active", now, now, now, "pending", 0, 0, 0, "{}") for n in range(subscriptions)]
    with sqlite3.connect(service.database) as connection:
        connection.executemany(
            "INSERT INTO subscriptions (id, account_id, entity_type, network_id, network_url, status, created_at,"
            " updated_at, next_check_at, last_check_status, check_count, change_count, consecutive_failures,"
            " custom_metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return key, receiver_url


@pytest.mark.parametrize("how", ["scheduler run", "gunicorn"])
def test_sigterm_and_sigint_stop_a_busy_scheduler_quickly_every_time(service, how):
    with Receiver(Reply(delay=0.3)) as receiver:  # a slow endpoint keeps the sender busy
        key, _ = seed_busy_database(service, receiver.url)
        port = free_port()
        server = gunicorn(service, port)
        with running(server):
            wait_until_serving(service, server, port)
            assert Api(port, key).post("/webhooks/configure", {"endpoint_url": receiver.url,
                                                               "events": ["*"]}).status_code == 201
            server.send_signal(signal.SIGTERM)
            assert server.wait(STOP_WITHIN_SECONDS) == 0
        fast = {"CHECK_INTERVAL_SECONDS": "1"}
        for attempt in range(10):
            before = service.sql("SELECT sum(check_count) FROM subscriptions")[0][0]
            if how == "gunicorn":
                process = gunicorn(service, free_port(), "--threads", "4", env=fast)
            else:
                process = service.start(str(BIN / "entity-monitor"), "scheduler", "run", env=fast)
            with running(process):
                service.wait_for(lambda: service.sql("SELECT sum(check_count) FROM subscriptions")[0][0] > before,
                                 what="the scheduler to be busy")
                signum = signal.SIGTERM if attempt % 2 == 0 else signal.SIGINT
                started = time.monotonic()
                process.send_signal(signum)
                _, stderr = process.communicate(timeout=STOP_WITHIN_SECONDS)  # a hang is a failure
                assert process.returncode == 0, stderr
                assert time.monotonic() - started < STOP_WITHIN_SECONDS
            # Whatever was in hand was recorded or given back: nothing stays claimed after a clean stop.
            assert service.sql("SELECT count(*) FROM subscriptions WHERE claim_token IS NOT NULL") == [(0,)], stderr
            assert service.sql("SELECT count(*) FROM outbox WHERE claim_token IS NOT NULL") == [(0,)], stderr
        assert len(receiver.requests) > 0


def test_sigterm_stops_the_scheduler_at_once_while_a_request_is_still_in_flight(service):
    """gunicorn's worker waits for its requests in flight before it exits: the scheduler, stopped only at that exit,
    went on checking and sending meanwhile, and a graceful timeout cut its stop short with checks left claimed
    (operability walk: a slow export, 30 s of work after SIGTERM, 24 checks claimed)."""
    with Receiver(Reply(delay=0.3)) as receiver:
        key, _ = seed_busy_database(service, receiver.url)
        port = free_port()
        with running(gunicorn(service, port, env={"CHECK_INTERVAL_SECONDS": "1"})) as server:
            wait_until_serving(service, server, port)
            assert Api(port, key).post("/webhooks/configure", {"endpoint_url": receiver.url,
                                                               "events": ["*"]}).status_code == 201
            service.wait_for(lambda: service.sql("SELECT sum(check_count) FROM subscriptions")[0][0] > 0,
                             what="the scheduler to be busy")
            with socket.create_connection(("127.0.0.1", port)) as slow_client:  # a body that has not all come
                slow_client.sendall(b"POST /api/v1/subscriptions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                    b"application/json\r\nContent-Length: 100\r\nX-API-Key: " + key.encode() +
                                    b"\r\n\r\n{")
                time.sleep(0.5)
                server.send_signal(signal.SIGTERM)

                def checks_and_sends():
                    return service.sql("SELECT sum(check_count), (SELECT count(*) FROM delivery_attempts) FROM "
                                       "subscriptions")[0]
                # its stop frees the lock last, once the batches in hand are recorded or released (not a fixed
                # wait: on a loaded machine finishing them took longer than the 5 s this test once allowed)
                service.wait_for(lambda: scheduler_lock_is_free(service), seconds=STOP_WITHIN_SECONDS,
                                 what="the scheduler to stop")
                settled = checks_and_sends()
                time.sleep(3)
                assert server.poll() is None  # still waiting for the request in flight ...
                assert checks_and_sends() == settled  # ... with no check or send made meanwhile
                assert service.sql("SELECT count(*) FROM subscriptions WHERE claim_token IS NOT NULL") == [(0,)]
                assert service.sql("SELECT count(*) FROM outbox WHERE claim_token IS NOT NULL") == [(0,)]
            assert server.wait(STOP_WITHIN_SECONDS) == 0
            assert "stopped" in server.stderr.read()


def scheduler_lock_is_free(service) -> bool:
    """Whether no process holds the SQLite database's scheduler lock (app.worker.scheduler.lock_for)."""
    lock = FileLock(os.path.realpath(service.database) + ".scheduler.lock", thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    lock.release()
    return True


# --- crash recovery ------------------------------------------------------------------------------------

def snapshot_after(delay):
    """An `http` provider's answer (contract §7) for the id at the end of the path, after `delay()` seconds."""
    def reply(received):
        body = json.dumps({"network_id": received.path.rsplit("/", 1)[-1], "name": "N", "headline": "h",
                           "company": "C", "title": "T", "activities": []}).encode()
        return Reply(delay=delay(), headers={"Content-Type": "application/json"}, body=body)
    return reply


def test_a_scheduler_killed_with_sigkill_leaves_claims_that_return_within_the_configured_lease(service):
    slow = {"seconds": 30}
    with Receiver(snapshot_after(lambda: slow["seconds"])) as upstream:
        seed_busy_database(service, None, subscriptions=50)
        env = {"PROVIDER": "http", "PROVIDER_HTTP_URL": upstream.url.rsplit("/", 1)[0], "CHECK_LEASE_SECONDS": "6",
               "PROVIDER_HTTP_TIMEOUT_SECONDS": "2"}
        process = service.start(str(BIN / "entity-monitor"), "scheduler", "run", env=env)
        with running(process):
            service.wait_for(lambda: service.sql(
                "SELECT count(*) FROM subscriptions WHERE claim_token IS NOT NULL")[0][0] > 0, what="a claim")
            claimed_at = time.time()
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        leases = service.sql("SELECT claimed_until FROM subscriptions WHERE claim_token IS NOT NULL")
        assert leases
        latest = max(time.mktime(time.strptime(value[:19], "%Y-%m-%d %H:%M:%S")) - time.timezone
                     for (value,) in leases)
        assert latest <= claimed_at + 6 + 1  # CHECK_LEASE_SECONDS from the environment, not the default
        slow["seconds"] = 0
        time.sleep(max(0.0, latest - time.time()) + 1)
        done = service.command("checks", "run", "--due", env=env)
        assert "checked=50" in done.stdout
        assert service.sql("SELECT count(*) FROM subscriptions WHERE check_count = 1") == [(50,)]


# --- bad settings and unsafe process models are refused with one line ----------------------------------

@pytest.mark.parametrize("name, value, says", [
    ("CHECK_INTERVAL_SECONDS", "30s", "CHECK_INTERVAL_SECONDS='30s' is not a whole number"),
    ("SCHEDULER_ENABLED", "maybe", "SCHEDULER_ENABLED='maybe' is not a boolean: use one of 1/true/yes/on/0/false"),
    ("API_KEY_MODE", "bogus", "API_KEY_MODE='bogus' is not accepted: use live or test"),
    ("PROVIDER", "simulatd",
     "PROVIDER='simulatd' is not a provider: use one of coresignal, crustdata, http, simulated"),
    ("PROVIDER", "crustdata", "PROVIDER=crustdata needs PROVIDER_CRUSTDATA_API_KEY"),
    ("PROVIDER_RATE_LIMIT", "lots", "PROVIDER_RATE_LIMIT 'lots' is not a rate like '30/minute'"),
    ("WEBHOOK_RETRY_SCHEDULE", "5,,300", "WEBHOOK_RETRY_SCHEDULE='5,,300' must be comma-separated seconds"),
    ("WEBHOOK_RETRY_SCHEDULE", "5,-1", "WEBHOOK_RETRY_SCHEDULE must list positive seconds"),
    ("DATABASE_URL", "mysql://db/x", "DATABASE_URL names 'mysql'"),
    # three were tracebacks (walk); the password is never shown
    ("DATABASE_URL", "postgresql://u:s3cret@127.0.0.1:badport/x",
     "DATABASE_URL='postgresql://…' is not a database URL"),
    ("DATABASE_URL", "postgresql://u:s3cret/x@h@h:bad/x", "DATABASE_URL='postgresql://…' is not a database URL"),
    ("DATABASE_URL", "user:s3cret@db:5432/app", "DATABASE_URL='…' is not a database URL"),
    ("RATELIMIT_STORAGE_URI", "redis://:s3cret@h:bad", "RATELIMIT_STORAGE_URI='redis://…' holds no valid port"),
    ("DATABASE_URL", "postgresql+nodriver://u:s3cret@h/x",
     "DATABASE_URL='postgresql+nodriver://u:***@h/x' cannot be used (Can't load plugin"),
    ("DATABASE_URL", "sqlite://user:s3cret@/x", "DATABASE_URL='sqlite://user:***@/x' cannot be used (Invalid SQLite"),
    # told to install the [postgres] extra, which brings no asyncio driver (operability walk)
    ("DATABASE_URL", "postgresql+asyncpg://u:s3cret@h/x", "DATABASE_URL names the asyncio driver 'asyncpg'"),
    ("DATABASE_URL", "sqlite+aiosqlite:///x.db", "DATABASE_URL names the asyncio driver 'aiosqlite'"),
    ("RATELIMIT_STORAGE_URI", "redis//oops", "RATELIMIT_STORAGE_URI='redis//oops' is not a limits storage URI"),
    ("CHECK_LEASE_SECONDS", "0", "CHECK_LEASE_SECONDS=0 is too small"),
    ("DATABASE_POOL_SIZE", "0", "DATABASE_POOL_SIZE=0 is too small: the smallest accepted value is 1"),
    ("EMPLOYEE_COUNT_MIN_PERCENT", "nan", "EMPLOYEE_COUNT_MIN_PERCENT='nan' is not a finite number"),
])
def test_a_bad_setting_is_refused_with_one_line_naming_it(service, name, value, says):
    done = service.command("accounts", "list", env={name: value}, check=False)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == [f"entity-monitor: configuration refused: {lines[0].split('refused: ', 1)[1]}"]
    assert says in lines[0] and "Traceback" not in done.stderr and "s3cret" not in done.stderr
    assert done.returncode == 4  # a systemd unit does not restart it


@pytest.mark.parametrize("name, value, says", [
    ("WEB_CONCURRENCY", "0", "WEB_CONCURRENCY=0 is too small: the smallest accepted value is 1"),
    ("GUNICORN_THREADS", "0", "GUNICORN_THREADS=0 is too small: the smallest accepted value is 1"),
    ("GUNICORN_THREADS", "eight", "GUNICORN_THREADS='eight' is not a whole number"),
    ("WEB_CONCURRENCY", "2x", "WEB_CONCURRENCY='2x' is not a whole number"),
    ("WORKER_CPU", "fast", "WORKER_CPU='fast' is not a CPU this process may run on"),
    ("BIND", "127.0.0.1:port", "BIND='127.0.0.1:port' is not HOST:PORT"),
    ("BIND", "no-such-host.invalid:8000", "BIND='no-such-host.invalid:8000' names a host this machine cannot"),
])
def test_serve_refuses_a_bad_process_setting_with_one_line_naming_it(service, name, value, says):
    # WEB_CONCURRENCY=0 used to listen forever with no worker to answer; the others ended in a traceback or
    # in "invalid literal for int()" without the variable's name, and never with the documented exit code 4.
    service.create_account()
    env = {**service.env, "BIND": f"127.0.0.1:{free_port()}", name: value}
    done = subprocess.run([str(BIN / "entity-monitor"), "serve"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"entity-monitor: configuration refused: {says}")


def test_serve_takes_an_empty_process_setting_as_unset(service):
    """`WEB_CONCURRENCY=` (set empty in the env file) ended `serve` in gunicorn's traceback, `int('')`, exit 1, which
    the unit restarts for ever; every other setting's empty value is taken as unset (walk)."""
    key = service.create_account()
    port = free_port()
    env = {"BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "", "GUNICORN_THREADS": " "}
    with running(service.start(str(BIN / "entity-monitor"), "serve", env=env)) as server:
        wait_until_serving(service, server, port)
        assert Api(port, key).session.get(f"http://127.0.0.1:{port}/api/v1/account", timeout=10).status_code == 200
        server.send_signal(signal.SIGTERM)
        assert server.wait(STOP_WITHIN_SECONDS) == 0
        assert "Traceback" not in server.stderr.read()


def test_gunicorns_settings_take_an_empty_value_as_unset():
    """An empty BIND listened at no address it named (`Listening at:  `)."""
    probe = "import app.gunicorn_conf as conf; print(conf.bind, conf.workers, conf.threads)"
    env = {**os.environ, "BIND": " ", "WEB_CONCURRENCY": "", "GUNICORN_THREADS": ""}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["127.0.0.1:8000", "1", "8"]


def test_the_http_provider_without_its_url_is_refused_before_anything_is_claimed(service):
    seed_busy_database(service, None, subscriptions=5)
    port = free_port()
    with running(gunicorn(service, port, env={"PROVIDER": "http", "PROVIDER_HTTP_URL": ""})) as server:
        assert server.wait(60) != 0
        stderr = server.stderr.read()
    assert "PROVIDER_HTTP_URL='' must be an http:// or https:// URL" in stderr and "Traceback" not in stderr
    assert service.sql("SELECT count(*) FROM subscriptions WHERE claim_token IS NOT NULL") == [(0,)]


def test_gunicorn_preload_is_refused_with_one_line(service):
    service.create_account()
    with running(gunicorn(service, free_port(), "--preload")) as server:
        assert server.wait(60) != 0
        stderr = server.stderr.read()
    assert "entity-monitor: configuration refused: gunicorn --preload is not supported" in stderr
    assert str(ROOT / "app") not in stderr


def test_help_lists_every_command_under_a_bad_setting(service):
    """Listing the commands loaded the app: with a bad setting `--help` answered only the refusal, the one place
    an operator looks to find the command that would show them more."""
    env = {"WEBHOOK_WORKERS": "abc"}
    listed = service.command("--help", env=env, check=False)
    assert listed.returncode == 0 and listed.stderr == ""
    for command in ("accounts", "checks", "db", "deliveries", "events", "keys", "metrics", "providers", "scheduler",
                    "serve", "subscriptions"):
        assert f"\n  {command} " in listed.stdout, command
    assert "show " in service.command("accounts", "--help", env=env, check=False).stdout
    refused = service.command("accounts", "list", env=env, check=False)
    assert refused.returncode != 0 and "configuration refused: WEBHOOK_WORKERS='abc'" in refused.stderr


@pytest.mark.parametrize("env, says", [
    ({}, "4 worker processes with RATELIMIT_STORAGE_URI=memory:// would multiply every rate limit by 4"),
    ({"RATELIMIT_STORAGE_URI": "redis://127.0.0.1:6379"}, "SQLite takes one web process, not 4"),
    ({"WEB_CONCURRENCY": "4", "GUNICORN_CMD_ARGS": ""}, "would multiply every rate limit by 4"),
])
def test_several_gunicorn_workers_with_per_process_state_are_refused(service, env, says):
    service.create_account()
    extra = () if "WEB_CONCURRENCY" in env else ("-w", "4")
    with running(gunicorn(service, free_port(), *extra, env=env)) as server:
        # gunicorn halts ("App failed to load", 4) instead of respawning workers; when several workers refuse
        # at once its master may instead die on its own HaltServer while halting (exit 1, its traceback).
        assert server.wait(60) in (1, 4)
        stderr = server.stderr.read()
    assert "entity-monitor: configuration refused: " in stderr and says in stderr
    # No traceback of ours (gunicorn's master may print its own HaltServer one when a worker exits early).
    assert str(ROOT / "app") not in stderr


@pytest.mark.parametrize("arguments, env", [(("--workers", "2"), {}), ((), {"WEB_CONCURRENCY": "3"})])
def test_serve_refuses_several_workers_once_before_gunicorn_starts(service, arguments, env):
    """`serve --workers 2` on SQLite started gunicorn, whose two workers each printed the refusal (and its master
    sometimes its own traceback)."""
    service.create_account()
    done = subprocess.run([str(BIN / "entity-monitor"), "serve", *arguments], cwd=ROOT, capture_output=True,
                          env={**service.env, "BIND": f"127.0.0.1:{free_port()}", **env}, text=True, timeout=60)
    assert done.returncode == 4
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("entity-monitor: configuration refused: ") and "worker processes" in line


@pytest.mark.parametrize("scheduler_enabled", ["1", "0"])
def test_one_worker_with_threads_serves_and_writes_buffered_usage_counts_when_stopped(service, scheduler_enabled):
    key = service.create_account()
    port = free_port()
    env = {"SCHEDULER_ENABLED": scheduler_enabled}
    with running(gunicorn(service, port, "-w", "1", "--threads", "4", env=env)) as server:
        wait_until_serving(service, server, port)
        api = Api(port, key)
        for _ in range(3):
            assert api.session.get(f"{api.base}/account", timeout=10).status_code == 200
        server.send_signal(signal.SIGTERM)
        assert server.wait(STOP_WITHIN_SECONDS) == 0
    assert service.sql("SELECT sum(requests) FROM usage_counters") == [(3,)]  # none lost in the buffer


def test_a_serving_process_keeps_its_start_up_objects_out_of_garbage_collections(service):
    """Each full collection walked the loaded application's ~115,000 objects (~50 ms with every request waiting)."""
    service.create_account()
    probe = "import gc, app.wsgi; print(gc.get_freeze_count())"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**service.env, "SCHEDULER_ENABLED": "0"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 50_000


def workers_cpus(server, count, kept=False) -> dict:
    """{worker pid: the CPUs it may run on} once gunicorn runs `count` workers (the arbiter's children) and, with
    `kept`, each keeps to one CPU (a worker just forked has not run its post_fork yet)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = [int(pid) for pid in open(f"/proc/{server.pid}/task/{server.pid}/children").read().split()]
        if len(children) == count:
            try:
                found = {pid: os.sched_getaffinity(pid) for pid in children}
            except ProcessLookupError:  # a worker going away meanwhile
                found = {}
            if found and (not kept or all(len(cpus) == 1 for cpus in found.values())):
                return found
        time.sleep(0.1)
    raise AssertionError(f"gunicorn did not run {count} workers" + (" each kept to one CPU" if kept else ""))


needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="needs a process allowed at least two CPUs")


def test_the_console_script_shows_an_account(service):
    """`entity-monitor accounts show` failed with 'Working outside of application context' for every account: the
    app's `flask` command, which the tests drive, pushed the context itself (walk)."""
    service.create_account()
    [account] = json.loads(service.command("accounts", "list", "--json").stdout)
    shown = json.loads(service.command("accounts", "show", account["id"], "--json").stdout)
    assert (shown["id"], shown["api_keys"], shown["webhook_endpoint"]) == (account["id"], 1, None)
    missing = service.command("accounts", "show", "acct_missing", check=False)
    assert missing.returncode == 1 and "acct_missing" in missing.stderr and "Traceback" not in missing.stderr


@needs_two_cpus
@pytest.mark.parametrize("setting", ["", "auto", "off"])
def test_a_worker_served_with_the_config_file_keeps_to_one_cpu_unless_off(service, setting):
    service.create_account()
    freest = _the_first_cpu_a_new_worker_takes()
    port = free_port()
    server = service.start(str(BIN / "gunicorn"), "-c", "python:app.gunicorn_conf", "app.wsgi:app",
                           env={"BIND": f"127.0.0.1:{port}", "WORKER_CPU": setting, "SCHEDULER_ENABLED": "0"})
    with running(server):
        wait_until_serving(service, server, port)
        [worker_cpus] = workers_cpus(server, 1).values()
    everything = os.sched_getaffinity(0)
    assert worker_cpus == (everything if setting == "off" else {freest})


def _the_first_cpu_a_new_worker_takes():
    """The highest CPU, unless other processes on this host keep to it alone more than to another."""
    elsewhere = _settled_processes_kept_to_one_cpu()
    return min(sorted(os.sched_getaffinity(0), reverse=True), key=lambda cpu: elsewhere[cpu])


def _settled_processes_kept_to_one_cpu():
    """The processes on this host kept to one CPU, once the workers of servers killed before have gone (they notice
    their master's end within a second or so)."""
    deadline = time.monotonic() + 10
    while (kept := cpu_affinity.processes_kept_to_one_cpu()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return kept


@needs_two_cpus
def test_several_workers_keep_to_different_cpus_and_a_replacement_takes_the_cpu_its_predecessor_left(service):
    # The bare view of the benchmark: the service itself refuses several workers on SQLite.
    port = free_port()
    server = service.start(str(BIN / "gunicorn"), "-c", "python:app.gunicorn_conf", "--pythonpath", "scripts",
                           "bench_hello:app", env={"BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "2",
                                                   "WORKER_CPU": "auto"})
    with running(server):
        before = workers_cpus(server, 2, kept=True)
        highest_two = sorted(os.sched_getaffinity(0))[-2:]
        assert sorted(before.values(), key=min) == [{cpu} for cpu in highest_two]
        killed, its_cpus = min(before.items(), key=lambda item: min(item[1]))
        os.kill(killed, signal.SIGKILL)
        service.wait_for(lambda: killed not in workers_cpus(server, 2), what="a replacement worker")
        after = workers_cpus(server, 2, kept=True)
    assert sorted(after.values(), key=min) == sorted(before.values(), key=min)  # still one CPU each, not both on one
    assert [cpus for pid, cpus in after.items() if pid not in before] == [its_cpus]


@needs_two_cpus
def test_a_second_instance_on_the_host_takes_another_cpu(service):
    if _settled_processes_kept_to_one_cpu():
        pytest.skip("other processes on this host keep to one CPU: which CPU is freest is theirs to say")
    service.create_account()

    def instance(port):
        return service.start(str(BIN / "gunicorn"), "-c", "python:app.gunicorn_conf", "app.wsgi:app",
                             env={"BIND": f"127.0.0.1:{port}", "WORKER_CPU": "auto", "SCHEDULER_ENABLED": "0"})
    first_port, second_port = free_port(), free_port()
    with running(instance(first_port)) as first_server:
        wait_until_serving(service, first_server, first_port)
        [first] = workers_cpus(first_server, 1, kept=True).values()
        with running(instance(second_port)) as second_server:
            wait_until_serving(service, second_server, second_port)
            [second] = workers_cpus(second_server, 1, kept=True).values()
    assert len(first) == 1 and len(second) == 1 and second != first


# --- installs like a Python service --------------------------------------------------------------------

def test_a_wheel_installed_in_a_fresh_venv_outside_the_checkout_migrates_creates_an_account_and_serves(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(ROOT)], check=True, capture_output=True, timeout=300)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The dependencies come from the test environment (no network needed); its own .pth files, and so the
    # checkout's editable install, are not processed from a path added this way.
    (site / "dependencies.pth").write_text(next(path for path in sys.path if path.endswith("site-packages")) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--no-index", str(next(wheels.glob("*.whl")))], check=True, timeout=300)
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    port = free_port()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DATABASE_URL", "INSTANCE_PATH", "PYTHONPATH", "TEST_POSTGRES"))}
    env.update(BIND=f"127.0.0.1:{port}", PATH=f"{venv / 'bin'}:/usr/bin:/bin")

    def entity_monitor(*args):
        return subprocess.run(["entity-monitor", *args], cwd=empty, env=env, capture_output=True, text=True,
                              timeout=120)

    assert entity_monitor("--version").stdout.startswith("entity-monitor, version ")
    located = subprocess.run([str(venv / "bin" / "python"), "-c", "import app; print(app.__file__)"], cwd=empty,
                             env=env, capture_output=True, text=True, check=True).stdout
    assert located.startswith(str(venv))  # the installed package, not the checkout
    (empty / "app").mkdir()  # a project of the team's own where the commands run (walk: `serve` imported it)
    (empty / "app" / "__init__.py").write_text("raise SystemExit('imported the app/ folder of the working directory')")
    assert entity_monitor("db", "upgrade").returncode == 0
    created = entity_monitor("accounts", "create", "--name", "Installed", "--json")
    key = json.loads(created.stdout)["api_key"]
    assert (venv / "var" / "app-instance" / "monitor.db").exists()  # Flask's instance folder of an installed app
    server = subprocess.Popen(["entity-monitor", "serve"], cwd=empty, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    with running(server):
        def healthy():
            assert server.poll() is None, server.stderr.read()
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
            except (requests.ConnectionError, requests.Timeout):
                return False
        deadline = time.monotonic() + 60
        while not healthy():
            assert time.monotonic() < deadline, "the installed service never became healthy"
            time.sleep(0.3)
        response = requests.get(f"http://127.0.0.1:{port}/api/v1/account", headers={"X-API-Key": key}, timeout=5)
        assert response.status_code == 200 and response.json()["name"] == "Installed"
        server.send_signal(signal.SIGTERM)
        assert server.wait(STOP_WITHIN_SECONDS) == 0


def test_gunicorns_re_exec_of_serve_runs_this_package_beside_a_folder_named_app(service, tmp_path):
    """gunicorn re-executes itself (USR2) as `python <the module's file> …`: the module imports this package before
    gunicorn puts the working directory first on the import path."""
    service.create_account()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "app").mkdir(parents=True)
    (elsewhere / "app" / "__init__.py").write_text("raise SystemExit('imported the app/ folder of the working "
                                                   "directory')")
    done = subprocess.run([sys.executable, str(ROOT / "app" / "gunicorn_main.py"), "-c", "python:app.gunicorn_conf",
                           "--check-config", "app.wsgi:app"], cwd=elsewhere, env=service.env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def stalled_start_up(folder: Path) -> tuple:
    """Python that marks a file, then waits (a start-up step that takes its time): (its code, the marked file)."""
    marked = folder / "started"
    return f"open({str(marked)!r}, 'w').close()\nimport time\ntime.sleep(60)\n", marked


@pytest.mark.parametrize("where", ["serve", "gunicorn"])
def test_sigterm_while_serve_starts_stops_it_in_one_line(service, tmp_path, where):
    """Before gunicorn was up, SIGTERM ended `serve` with exit 143 and no word (operator walk). Stalled in `serve`
    itself (its settings read, the instance's config.py) or, after its exec, in gunicorn loading its config file."""
    code, marked = stalled_start_up(tmp_path)
    if where == "serve":
        (tmp_path / "config.py").write_text(code)
        argv, env = [str(BIN / "entity-monitor"), "serve"], {"BIND": f"127.0.0.1:{free_port()}"}
    else:
        (tmp_path / "stalled_conf.py").write_text(code)
        argv = [sys.executable, str(ROOT / "app" / "gunicorn_main.py"), "-c", "python:stalled_conf", "app.wsgi:app"]
        env = {"PYTHONPATH": str(tmp_path)}
    process = service.start(*argv, env=env)
    with running(process):
        service.wait_for(marked.exists, what="the start-up to stall")
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0  # as gunicorn exits once up
        assert process.stderr.read() == "entity-monitor: stopped by SIGTERM while starting, before serving\n"


def test_flask_run_serves_with_the_scheduler(service):
    service.create_account()
    port = free_port()
    process = service.start(str(BIN / "flask"), "--app", "wsgi", "run", "--port", str(port))
    with running(process):
        wait_until_serving(service, process, port)
        service.wait_for(lambda: service.heartbeats() == 1, what="the scheduler of `flask run`")
        process.send_signal(signal.SIGINT)
        process.wait(STOP_WITHIN_SECONDS)


@pytest.mark.skipif(not os.environ.get("TEST_POSTGRES_URL"), reason="TEST_POSTGRES_URL is not set")
def test_on_postgresql_hosts_upgrading_the_schema_at_once_all_succeed(service):
    """Each unit runs `db upgrade` before serving: two at once on a new database, one failed on alembic_version's
    key with a traceback (walk). They now take turns; the second finds the head."""
    from tests.conftest import url_with_own_schema
    service.env["DATABASE_URL"] = url_with_own_schema(f"test_upgrades_{os.environ.get('PYTEST_XDIST_WORKER', 'm')}")
    upgrades = [subprocess.Popen([str(BIN / "entity-monitor"), "db", "upgrade"], cwd=ROOT, env=service.env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [(upgrade.wait(120), upgrade.stderr.read()) for upgrade in upgrades]
    assert all(code == 0 for code, _ in results), results
    service.create_account()  # the schema is whole


@pytest.mark.skipif(not os.environ.get("TEST_POSTGRES_URL"), reason="TEST_POSTGRES_URL is not set")
def test_on_postgresql_several_scheduler_processes_run_side_by_side(service):
    from tests.conftest import url_with_own_schema
    service.env["DATABASE_URL"] = url_with_own_schema("test_two_schedulers")
    service.create_account()
    first = service.start(str(BIN / "entity-monitor"), "scheduler", "run")
    second = service.start(str(BIN / "entity-monitor"), "scheduler", "run")
    with running(first), running(second):
        service.wait_for(lambda: service.heartbeats() == 2, what="two schedulers on one PostgreSQL database")
        for process in (first, second):
            assert process.poll() is None  # neither was refused
            process.send_signal(signal.SIGTERM)
            assert process.wait(STOP_WITHIN_SECONDS) == 0


def test_a_second_signal_stops_checks_run_at_once(service, tmp_path):
    """The first one lets the calls out finish, which may take a vendor's whole timeout (minutes): a second one, as
    an operator presses Ctrl-C again, ends it at once (review)."""
    service.command("db", "upgrade")
    account = json.loads(service.command("accounts", "create", "--name", "Ops", "--json").stdout)["account_id"]
    rows = tmp_path / "rows.csv"
    rows.write_text("url\n" + "".join(f"https://www.linkedin.com/in/person-{number}\n" for number in range(6)))
    service.command("subscriptions", "import", str(rows), "--account", account)
    process = service.start(str(BIN / "entity-monitor"), "checks", "run", "--all",
                            env={"SIMULATED_LATENCY_MS": "20000"})
    try:
        claimed = "SELECT count(*) FROM subscriptions WHERE claim_token IS NOT NULL"
        service.wait_for(lambda: service.sql(claimed)[0][0], what="the checks to be claimed")
        time.sleep(0.5)  # the calls under way
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=10)
    finally:
        process.kill()
    assert returncode == 128 + signal.SIGTERM and time.monotonic() - started < 10
    assert "stopped at once by a second SIGTERM" in process.stderr.read()
