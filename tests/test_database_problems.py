"""A database that cannot serve as it is (no schema, another release's schema, unreachable, unopenable) is one
line for every command and for `serve`, never a traceback; `serve` exits 4 (not restarted) for the schema and 3
(restarted by the units) for a database that may be back in a moment."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from app.database import missing_schema, unreachable
from conftest import DATABASES, _migrate, url_with_own_schema

RELEASE_HEAD = ScriptDirectory(str(Path(__file__).parents[1] / "app" / "migrations")).get_current_head()

ENTITY_MONITOR = str(Path(sys.executable).parent / "entity-monitor")
SERVING = {"BIND": "127.0.0.1:0", "WORKER_CPU": "off"}
NO_SCHEMA = "entity-monitor: the database has no schema (or an older one): run `entity-monitor db upgrade` first"
UNREACHABLE_POSTGRESQL = "postgresql://postgres@127.0.0.1:1/nowhere"


def entity_monitor(tmp_path, url, *args, **env):
    return subprocess.run([ENTITY_MONITOR, *args], env={**os.environ, "DATABASE_URL": url,
                                                        "INSTANCE_PATH": str(tmp_path), **env},
                          capture_output=True, text=True, timeout=120)


def own_database(tmp_path, database, name, change=None) -> str:
    """A database of the test's own (never the worker's shared schema): empty, or migrated then `change`d."""
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / f'{name}.db'}"
        (tmp_path / f"{name}.db").touch()  # there, without a schema (SQLite's empty file)
    else:
        url = url_with_own_schema(f"{name}_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    if change:
        _migrate(url)
        engine = create_engine(url)
        with engine.begin() as connection:
            connection.execute(text(change))
        engine.dispose()
    return url


def only_line(done) -> str:
    [line] = [line for line in done.stderr.splitlines() if not line.startswith("INFO  [alembic")]
    return line


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("args", [["accounts", "create", "--name", "Acme"], ["accounts", "list"],
                                  ["keys", "list", "--account", "acct_x"], ["checks", "run"],
                                  ["providers", "status"]])
def test_a_database_without_its_schema_is_named_in_one_line(tmp_path, database, args):
    """Before `db upgrade`, a command ended in SQLAlchemy's traceback with the statement and its parameters
    (and `checks run`, `providers status`, which read through the driver's cursor, in the driver's)."""
    done = entity_monitor(tmp_path, own_database(tmp_path, database, "unmigrated"), *args)
    assert done.returncode == 1 and done.stdout == "" and only_line(done).startswith(f"{NO_SCHEMA} (")


@pytest.mark.parametrize("url", ["unmigrated", UNREACHABLE_POSTGRESQL])
@pytest.mark.parametrize("args", [["accounts", "list"], ["keys", "list", "--account", "acct_x"],
                                  ["subscriptions", "export", "--account", "acct_x"]])
def test_the_flask_command_line_names_it_in_one_line_too(tmp_path, url, args):
    """`flask --app wsgi …` (contract §9's command line) ended in a traceback of ~60 lines (operability walk)."""
    url = own_database(tmp_path, "sqlite", url) if url == "unmigrated" else url
    done = subprocess.run([str(Path(sys.executable).parent / "flask"), "--app", "wsgi", *args],
                          cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DATABASE_URL": url, "INSTANCE_PATH": str(tmp_path)})
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    assert only_line(done).startswith((f"{NO_SCHEMA} (", "entity-monitor: the database (DATABASE_URL) cannot be used"))


@pytest.mark.parametrize("database", DATABASES)
def test_a_database_with_an_older_schema_is_named_in_one_line_too(tmp_path, database):
    """A table is there but a column the code reads is not (a release ahead of `db upgrade`)."""
    url = own_database(tmp_path, database, "older", "ALTER TABLE accounts DROP COLUMN trial_ends_at")
    done = entity_monitor(tmp_path, url, "accounts", "list")
    assert done.returncode == 1 and done.stdout == ""
    assert only_line(done).startswith(f"{NO_SCHEMA} (") and "trial_ends_at" in only_line(done)


@pytest.mark.parametrize("url, problem, args", [
    (UNREACHABLE_POSTGRESQL, "the database (DATABASE_URL) cannot be used: connection failed", ["accounts", "list"]),
    (UNREACHABLE_POSTGRESQL, "the database (DATABASE_URL) cannot be used: connection failed", ["db", "upgrade"]),
    ("sqlite:////nonexistent/folder/x.db", "the database (DATABASE_URL) cannot be used: unable to open database file",
     ["db", "upgrade"]),
])
def test_a_database_that_cannot_be_reached_is_named_in_one_line(tmp_path, url, problem, args):
    """A refused connection or an unopenable file ended in a traceback of 150 lines."""
    done = entity_monitor(tmp_path, url, *args)
    assert done.returncode == 1 and done.stdout == "" and only_line(done).startswith(f"entity-monitor: {problem}")
    if url.startswith("sqlite"):  # it named neither the file nor why (operability walk)
        assert only_line(done).endswith("(the file and its folder must exist and be writable by this user: SQLite "
                                        "writes its -wal and -shm files beside the database)")


def files_under(folder) -> list:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.mark.parametrize("args, code", [
    (["accounts", "list"], 1), (["accounts", "show", "acct_x"], 1), (["accounts", "create", "--name", "Acme"], 1),
    (["keys", "list", "--account", "acct_x"], 1), (["checks", "run"], 1), (["deliveries", "run"], 1),
    (["providers", "status"], 1), (["events", "prune"], 1), (["scheduler", "run"], 4), (["serve"], 4),
    (["metrics", "serve", "--bind", "127.0.0.1:0"], 4),
])
@pytest.mark.parametrize("where", ["instance", "url"])
def test_a_command_on_a_database_that_is_not_there_says_so_and_creates_nothing(tmp_path, args, code, where):
    """SQLite created the file, empty, and the instance folder with it: a command that only reads left an empty
    database behind (operator walk), and said `no such table` (`serve`, `scheduler run`: no schema) of a database
    that was never there. `db upgrade` creates it; the long-running commands exit 4, not restarted (`metrics serve`
    exited 1, as a one-off command does)."""
    instance = tmp_path / "instance"
    url = f"sqlite:///{tmp_path / 'gone.db'}" if where == "url" else ""  # "": the instance folder's monitor.db
    database = tmp_path / "gone.db" if where == "url" else instance / "monitor.db"
    done = entity_monitor(tmp_path, url, *args, INSTANCE_PATH=str(instance), **SERVING)
    assert done.returncode == code and done.stdout == "" and "Traceback" not in done.stderr
    assert (f"entity-monitor: there is no database at {database}: create it with `entity-monitor db upgrade`, or "
            "point DATABASE_URL (or INSTANCE_PATH) at the one in use") in done.stderr.splitlines()
    assert files_under(tmp_path) == []
    assert entity_monitor(tmp_path, url, "db", "upgrade", INSTANCE_PATH=str(instance)).returncode == 0
    assert entity_monitor(tmp_path, url, "accounts", "list", INSTANCE_PATH=str(instance)).returncode == 0


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("scheduler", ["1", "0"])
def test_serve_on_a_database_without_its_schema_stops_with_one_line(tmp_path, database, scheduler):
    """The worker ended in a traceback and gunicorn's `Worker failed to boot`; with SCHEDULER_ENABLED=0 it
    served, and answered 500s."""
    done = entity_monitor(tmp_path, own_database(tmp_path, database, "unserved"), "serve", **SERVING,
                          SCHEDULER_ENABLED=scheduler)
    assert done.returncode == 4  # gunicorn halts: the app failed to load
    assert NO_SCHEMA in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("database", DATABASES)
def test_scheduler_run_exits_as_serve_does_on_a_schema_it_cannot_run_on_or_a_database_it_cannot_reach(tmp_path,
                                                                                                      database):
    """It exited 1 where serve exits 4, so its unit (RestartPreventExitStatus=4) restarted it for ever; and it logged
    "scheduler … stopped" for a scheduler that never started (operability walk)."""
    done = entity_monitor(tmp_path, own_database(tmp_path, database, "unscheduled"), "scheduler", "run")
    assert done.returncode == 4 and NO_SCHEMA in done.stderr and "stopped" not in done.stderr
    done = entity_monitor(tmp_path, UNREACHABLE_POSTGRESQL, "scheduler", "run")
    assert done.returncode == 3 and "Traceback" not in done.stderr


@pytest.mark.parametrize("scheduler", ["1", "0"])
def test_serve_on_a_database_it_cannot_reach_stops_to_be_restarted(tmp_path, scheduler):
    """Exit 4 (gunicorn's app-failed-to-load, which the units keep systemd from restarting) for a database that
    was only down would have stopped the service for good; it is gunicorn's boot error, 3, instead."""
    done = entity_monitor(tmp_path, UNREACHABLE_POSTGRESQL, "serve", **SERVING, SCHEDULER_ENABLED=scheduler)
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "entity-monitor: the database (DATABASE_URL) cannot be used: connection failed" in done.stderr


@pytest.mark.parametrize("query, reason", [("connect_timeout=abc", "bad value for connect_timeout: 'abc'"),
                                           ("conect_timeout=3", 'invalid connection option "conect_timeout"')])
@pytest.mark.parametrize("args", [["serve"], ["db", "upgrade"], ["scheduler", "run"]])
def test_a_bad_setting_in_the_postgresql_urls_query_is_refused_as_configuration(tmp_path, query, reason, args):
    """psycopg refused it as it connected: a traceback, exit 1 (operability walk). It is read before connecting now,
    refused as every bad setting is, with exit 4 (not restarted); the password never shown."""
    done = entity_monitor(tmp_path, f"postgresql://u:s3cret@127.0.0.1:1/x?{query}", *args, **SERVING)
    assert done.returncode == 4 and "Traceback" not in done.stderr and "s3cret" not in done.stderr
    assert only_line(done) == (f"entity-monitor: configuration refused: DATABASE_URL='postgresql://u:***@127.0.0.1:1/x?"
                               f"{query}' cannot be used ({reason}): its query takes libpq's connection settings, "
                               "e.g. ?connect_timeout=10 (whole seconds)")


@pytest.mark.parametrize("database", DATABASES)
def test_serve_on_a_schema_of_another_release_stops_with_one_line(tmp_path, database):
    """A database one migration behind was served, and answered 500s where a constraint was missing."""
    url = own_database(tmp_path, database, "behind", "UPDATE alembic_version SET version_num = 'f1b7c3e9a2d4'")
    done = entity_monitor(tmp_path, url, "serve", **SERVING, SCHEDULER_ENABLED="0")
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert ("entity-monitor: the database's schema is at f1b7c3e9a2d4, this release's is "
            f"{RELEASE_HEAD}: run `entity-monitor db upgrade` first") in done.stderr


@pytest.mark.parametrize("database", DATABASES)
def test_accounts_on_a_tier_gone_from_tiers_stop_serve_naming_them(tmp_path, database):
    """TIERS in instance/config.py without a tier accounts are on: the service started, and every request of those
    accounts was a 500 (a KeyError in the rate limiter), `accounts list` a traceback (walk)."""
    url = own_database(tmp_path, database, "tiers", "INSERT INTO accounts (id, name, tier, created_at) VALUES "
                                                    "('acct_gone', 'Gone', 'growth', CURRENT_TIMESTAMP)")
    (tmp_path / "config.py").write_text(
        "TIERS = {'starter': {'subscription_limit': 5, 'check_interval_seconds': 3600,\n"
        "                     'rate_limits': {'read': 9, 'write': 9, 'bulk': 9, 'default': 9}}}\n")
    done = entity_monitor(tmp_path, url, "serve", **SERVING, SCHEDULER_ENABLED="0")
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert ("entity-monitor: configuration refused: accounts are on tiers TIERS does not have ('growth': 1 "
            "(acct_gone)): add the tiers back") in done.stderr
    listed = entity_monitor(tmp_path, url, "accounts", "list")
    assert listed.returncode == 1 and "Traceback" not in listed.stderr
    assert only_line(listed).startswith("Error: INVALID_STATE: The tier 'growth' is not in TIERS (it has starter)")
    moved = entity_monitor(tmp_path, url, "accounts", "set-tier", "acct_gone", "starter")
    assert moved.returncode == 0, moved.stderr
    assert entity_monitor(tmp_path, url, "accounts", "list").stdout.startswith("acct_gone\tstarter\t0/5\tGone")


def test_db_upgrade_writes_its_lines_in_the_log_format(tmp_path):
    """With LOG_FORMAT=json, the migrations' `INFO  [alembic.runtime.migration] …` lines were text in the service's JSON
    stream (the unit runs `db upgrade` before each start)."""
    import json
    done = entity_monitor(tmp_path, f"sqlite:///{tmp_path / 'fresh.db'}", "db", "upgrade", LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert {line["logger"] for line in lines} == {"alembic.runtime.migration"} and len(lines) > 3
    assert lines[-1]["message"].startswith("Running upgrade ") and lines[-1]["level"] == "INFO"


@pytest.mark.parametrize("statement", ["SELEC 1", "SELECT no_such_function(1)"])
def test_an_error_of_the_sql_itself_is_not_taken_for_an_unusable_database(tmp_path, statement):
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(OperationalError) as raised, engine.connect() as connection:
        connection.execute(text(statement))
    assert missing_schema(raised.value) is None and unreachable(raised.value) is None


@pytest.mark.postgresql_only("a server ending the connection of a request is PostgreSQL's pg_terminate_backend")
def test_a_connection_the_server_ends_once_the_answer_is_made_leaves_the_answer_alone(app, alice, caplog):
    """The answer was made; then the server ended the request's connection (a restart, a failover,
    pg_terminate_backend) before the request's end rolled its read back. That rollback failed in Flask-SQLAlchemy's
    teardown, the exception left the app, and gunicorn answered 500 with a traceback instead of the 200 (PostgreSQL
    walk: `Error handling request GET /api/v1/subscriptions…` while backends were terminated). A write had already
    committed: its client was told 500 for a subscription that was created."""
    from flask import request

    from app.extensions import db

    @app.after_request
    def end_the_connection(response):
        if request.path.endswith("/account"):
            pid = db.session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with db.engine.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        return response

    def in_a_thread_of_its_own(method, path, **kwargs):
        """As a server's thread runs a request: in an application context of its own, ended with the request."""
        answers = []
        thread = threading.Thread(target=lambda: answers.append(alice.request(method, path, **kwargs)))
        thread.start()
        thread.join(30)
        return answers[0] if answers else None  # none: the request raised

    response = in_a_thread_of_its_own("GET", "/account")
    assert response is not None and response.status_code == 200 and response.get_json()["id"] == alice.account_id
    assert "the request's database connection was lost as it ended" in caplog.text
    created = in_a_thread_of_its_own("POST", "/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
    assert created.status_code == 201  # the next request has a connection again


@pytest.mark.postgresql_only("a server ending a connection mid-transaction is PostgreSQL's pg_terminate_backend")
def test_a_connection_the_server_ends_mid_request_is_a_503_to_retry(app, alice, caplog, monkeypatch):
    """A restart, a failover or pg_terminate_backend ending a request's connection mid-transaction raises psycopg's
    AdminShutdown (SQLSTATE 57P01), a subclass of its OperationalError, which the check took by its class name for
    another error: the create answered 500 INTERNAL_ERROR with a traceback, not the 503 to retry (fault walk: 8
    creates in 40 terminations and restarts), and the scheduler's loops logged a traceback a time."""
    from sqlalchemy import event

    from app import outage_log
    from app.extensions import db
    monkeypatch.setattr(outage_log, "_places", {})
    ended = []

    def end_the_connection_first(_connection, cursor, statement, *_args):
        if statement.startswith("INSERT INTO subscriptions") and not ended:
            ended.append(cursor.connection.info.backend_pid)
            with db.engine.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": ended[0]})
    event.listen(db.engine, "before_cursor_execute", end_the_connection_first)
    try:
        answer = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
    finally:
        event.remove(db.engine, "before_cursor_execute", end_the_connection_first)
    assert ended and answer.status_code == 503
    assert answer.json["error"] == "UNAVAILABLE" and answer.headers["Retry-After"] == "5"
    assert answer.headers["X-RateLimit-Remaining"] == str(int(answer.headers["X-RateLimit-Limit"]) - 1)  # a keyed one
    [line] = [record for record in caplog.records if record.name == "app.api.errors"]
    assert line.exc_info is None and "terminating connection due to administrator command" in line.getMessage()
    assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"}).status_code == 201


@pytest.mark.parametrize("error, said", [
    ("unable to open database file", "requests failed: the database (DATABASE_URL) cannot be used: unable to open "
                                     "database file"),
    ("database is locked", "requests failed: the database (DATABASE_URL) is busy: database is locked (another "
                           "process held its write lock past SQLITE_BUSY_TIMEOUT_MS)"),
])
def test_a_request_while_the_database_cannot_be_used_is_a_503_to_retry_said_once(app, alice, caplog, monkeypatch,
                                                                                 error, said):
    """Every request of a PostgreSQL outage answered 500 INTERNAL_ERROR with a traceback each: a client could not
    tell "retry later" from a bug, and the log flooded (PostgreSQL walk)."""
    import sqlite3
    from app.services import keys
    from app import outage_log
    monkeypatch.setattr(outage_log, "_places", {})

    def database_gone(*_args, **_kwargs):
        raise sqlite3.OperationalError(error)
    monkeypatch.setattr(keys._BY_HASH, "first", database_gone)
    answers = [alice.get("/account"), alice.get("/subscriptions"), alice.post("/subscriptions", json={})]
    assert [answer.status_code for answer in answers] == [503] * 3
    assert all(answer.json["error"] == "UNAVAILABLE" and answer.headers["Retry-After"] == "5" for answer in answers)
    assert answers[0].json["message"] == "The service cannot use its database right now. Retry later."
    lines = [record for record in caplog.records if record.name == "app.api.errors"]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert lines[0].getMessage().startswith(said)


@pytest.mark.postgresql_only("a row lock another session holds meets PostgreSQL's lock_timeout (SQLite's: above)")
def test_a_lock_held_past_the_lock_timeout_is_a_503_to_retry(app, alice, caplog, monkeypatch):
    """Another session held the account's row (a host cut off mid-transaction, an operator's open transaction): its
    creates waited as long as the lock was held, eight of them took every serving thread, and /healthz and every other
    account waited too (fault walk). A lock wait past POSTGRESQL_LOCK_TIMEOUT_MS is now a busy database, a 503."""
    from app import database, outage_log
    from app.extensions import db
    monkeypatch.setattr(outage_log, "_places", {})
    monkeypatch.setattr(database, "POSTGRESQL_LOCK_TIMEOUT_MS", 300)
    db.engine.dispose()  # connections made from here on take the short timeout
    holder = db.engine.connect()
    try:
        holder.execute(text("SET LOCAL idle_in_transaction_session_timeout = 5000"))  # the lock's end, without the fix
        holder.execute(text("SELECT id FROM accounts WHERE id = :id FOR UPDATE"), {"id": alice.account_id})
        answer = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
    finally:
        holder.rollback()
        holder.close()
    assert answer.status_code == 503 and answer.json["error"] == "UNAVAILABLE" and answer.headers["Retry-After"] == "5"
    [line] = [record for record in caplog.records if record.name == "app.api.errors"]
    assert line.exc_info is None and "is busy: canceling statement due to lock timeout" in line.getMessage()
    assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"}).status_code == 201


@pytest.mark.skipif("postgresql" not in DATABASES, reason="needs a PostgreSQL server (TEST_POSTGRES_URL)")
def test_db_upgrade_waits_past_the_lock_timeout_for_its_turn(tmp_path):
    """`db upgrade` waits for another host's upgrade (the advisory lock) and the service's locks as long as they are
    held: the requests' lock_timeout is not its own."""
    from app.database import POSTGRESQL_LOCK_TIMEOUT_MS
    holder = create_engine(os.environ["TEST_POSTGRES_URL"]).connect()
    held_ms = POSTGRESQL_LOCK_TIMEOUT_MS + 1500
    holder.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {held_ms}"))  # then the server ends it
    holder.execute(text("SELECT pg_advisory_xact_lock(7305111002)"))
    done = entity_monitor(tmp_path, own_database(tmp_path, "postgresql", "turns"), "db", "upgrade")
    assert done.returncode == 0, done.stderr
    holder.invalidate()


def test_a_missing_table_met_by_a_request_is_a_500_with_its_traceback_not_a_503(app, alice, caplog, monkeypatch):
    """Serving refuses a schema of another release, so a missing table or column met by a request is a bug of the SQL:
    as a 503 "retry later" it was hidden, with a line that blamed the schema (review)."""
    import sqlite3
    from app.services import keys

    def bug(*_args, **_kwargs):
        raise sqlite3.OperationalError("no such column: api_keys.no_such_column")
    monkeypatch.setattr(keys._BY_HASH, "first", bug)
    answer = alice.get("/account")
    assert answer.status_code == 500 and answer.json["error"] == "INTERNAL_ERROR"
    assert [record.exc_info is not None for record in caplog.records if record.name == "app.api.errors"] == [True]


def test_a_lost_connection_whose_error_has_no_text_is_still_one_line(app, caplog, monkeypatch):
    """The teardown took the first line of the driver's text: an empty one raised IndexError out of it (review)."""
    import sqlite3
    from app import _end_the_session
    from app.extensions import db

    def lost():
        raise OperationalError("ROLLBACK", {}, sqlite3.OperationalError(""))
    monkeypatch.setattr(db.session, "close", lost)
    _end_the_session()
    assert "the request's database connection was lost as it ended: OperationalError" in caplog.text


def test_no_free_connection_in_the_pool_is_a_busy_database_to_retry():
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError
    from app.database import busy_or_unreachable
    said = busy_or_unreachable(PoolTimeoutError("QueuePool limit of size 20 overflow 0 reached"))
    assert said.startswith("the database (DATABASE_URL) is busy: no connection was free (QueuePool limit")


@pytest.mark.skipif("postgresql" not in DATABASES, reason="needs a PostgreSQL server (TEST_POSTGRES_URL)")
@pytest.mark.parametrize("command", [("serve",), ("scheduler", "run")])
def test_a_login_postgresql_refuses_stops_the_service_for_good_with_one_line(tmp_path, command):
    """An unknown role or database exited 3, "may be back in a moment", and the units restarted it for ever
    (PostgreSQL walk): it is a setting to fix."""
    host = os.environ["TEST_POSTGRES_URL"].split("@", 1)[1].split("/", 1)[0]
    for url, says in ((f"postgresql://no_such_role_here@{host}/postgres", 'role "no_such_role_here" does not exist'),
                      (f"postgresql://postgres@{host}/no_such_database_here",
                       'database "no_such_database_here" does not exist')):
        done = entity_monitor(tmp_path, url, *command, **SERVING)
        assert done.returncode == 4 and "Traceback" not in done.stderr, done.stderr
        assert f"entity-monitor: the database (DATABASE_URL) refused this login: FATAL:  {says}" in done.stderr
