"""Operator commands (contract §9, issue 2 point 3): accounts create / list / set-tier."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.models import Account, ApiKey
from app.services import keys
from conftest import DATABASES, Tenant, _migrate, url_with_own_schema


def _accounts():
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(Account))


def _invoke(runner, *args):
    return runner.invoke(args=["accounts", *args])


def test_create_prints_account_and_a_working_key(app, runner):
    result = _invoke(runner, "create", "--name", "Acme")
    assert result.exit_code == 0, result.output
    fields = dict(line.split(": ", 1) for line in result.output.strip().splitlines())
    assert fields["account_id"].startswith("acct_")
    assert fields["tier"] == "starter"
    assert re.match(r"^lwa\.sk_live_[A-Za-z0-9]{32}$", fields["api_key"])
    assert fields["trial_ends_at"].endswith("Z")
    tenant = Tenant(app.test_client(), fields["account_id"], fields["api_key"])
    assert tenant.get("/account").get_json()["name"] == "Acme"


def test_an_account_created_on_a_named_tier_is_a_plan_without_a_trial(app, runner):
    result = _invoke(runner, "create", "--name", "Grow", "--tier", "growth", "--json")
    assert result.exit_code == 0, result.output
    created = json.loads(result.output)
    account = Tenant(app.test_client(), created["account_id"], created["api_key"]).get("/account").get_json()
    assert account["tier"] == "growth" and account["trial_ends_at"] is None
    started = json.loads(_invoke(runner, "create", "--name", "Start", "--tier", "starter", "--json").output)
    account = Tenant(app.test_client(), started["account_id"], started["api_key"]).get("/account").get_json()
    assert account["tier"] == "starter" and account["trial_ends_at"]  # the default tier named: still a trial


def test_create_json_prints_one_object(app, runner):
    result = _invoke(runner, "create", "--name", "Acme", "--json")
    assert result.exit_code == 0
    body = json.loads(result.output)
    assert set(body) == {"account_id", "api_key", "tier", "trial_ends_at"}  # the text output's fields
    assert body["tier"] == "starter" and body["trial_ends_at"].endswith("Z")
    db.session.rollback()
    stored = db.session.scalars(select(ApiKey).where(ApiKey.account_id == body["account_id"])).one()
    assert stored.key_hash == keys.hash_key(body["api_key"])


def test_create_with_a_tier(app, runner):
    body = json.loads(_invoke(runner, "create", "--name", "Big", "--tier", "enterprise", "--json").output)
    assert body["tier"] == "enterprise"
    account = Tenant(app.test_client(), body["account_id"], body["api_key"]).get("/account").get_json()
    assert account["subscription_limit"] is None


@pytest.mark.parametrize("args", [
    ["create", "--name", "Acme", "--tier", "platinum"],
    ["create", "--name", ""],
    ["create", "--name", "   "],
    ["create", "--name", "x" * 201],
    ["create", "--name", "Acme\nacct_forged\tenterprise"],
    ["create", "--name", "Acme\tCo"],
    ["create"],
])
def test_create_errors_exit_non_zero_and_create_nothing(runner, args):
    result = _invoke(runner, *args)
    assert result.exit_code != 0
    assert _accounts() == 0


def test_unknown_tier_names_the_known_ones(runner):
    result = _invoke(runner, "create", "--name", "Acme", "--tier", "platinum")
    assert "VALIDATION_ERROR" in result.output
    for tier in ("starter", "growth", "scale", "enterprise"):
        assert tier in result.output


def test_list_shows_tier_and_live_count(app, runner, alice):
    alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
    result = _invoke(runner, "list")
    assert result.exit_code == 0
    assert result.output.strip() == f"{alice.account_id}\tstarter\t1/100\tAlice Inc"


def test_list_json(runner, alice, bob):
    result = _invoke(runner, "list", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [row["id"] for row in rows] == [alice.account_id, bob.account_id]
    assert set(rows[0]) == {"id", "name", "tier", "subscription_limit", "subscription_count",
                            "trial_ends_at", "created_at"}


def test_list_of_no_accounts_is_empty(runner):
    assert _invoke(runner, "list").output == ""
    assert json.loads(_invoke(runner, "list", "--json").output) == []


def test_set_tier_changes_the_cap_and_ends_the_trial(runner, alice):
    result = _invoke(runner, "set-tier", alice.account_id, "scale")
    assert result.exit_code == 0
    assert "scale" in result.output and "10000" in result.output
    account = alice.get("/account").get_json()
    assert account["tier"] == "scale" and account["trial_ends_at"] is None


@pytest.mark.parametrize("args", [["set-tier", "acct_nope", "growth"], ["set-tier", "ACCOUNT", "platinum"],
                                  ["set-tier", "ACCOUNT"]])
def test_set_tier_errors_exit_non_zero_and_change_nothing(runner, alice, args):
    args = [alice.account_id if arg == "ACCOUNT" else arg for arg in args]
    result = _invoke(runner, *args)
    assert result.exit_code != 0
    db.session.rollback()
    assert db.session.get(Account, alice.account_id).tier == "starter"


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("args", [["accounts", "create", "--name", "Acme"], ["accounts", "list"],
                                  ["keys", "list", "--account", "acct_x"]])
def test_a_database_without_its_schema_is_named_in_one_line(tmp_path, database, args):
    """Before `db upgrade`, a command ended in SQLAlchemy's traceback with the statement and its parameters."""
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'new.db'}"
    else:
        url = url_with_own_schema(f"unmigrated_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    env = {**os.environ, "DATABASE_URL": url, "INSTANCE_PATH": str(tmp_path)}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("entity-monitor: the database has no schema (or an older one): run `entity-monitor db "
                           "upgrade` first (")


@pytest.mark.parametrize("database", DATABASES)
def test_a_database_with_an_older_schema_is_named_in_one_line_too(tmp_path, database):
    """A table is there but a column the code reads is not (a release ahead of `db upgrade`). A schema of its
    own: the other tests' schema must keep its columns."""
    from sqlalchemy import create_engine, text
    if database == "sqlite":
        database_url = f"sqlite:///{tmp_path / 'older.db'}"
    else:
        database_url = url_with_own_schema(f"older_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    _migrate(database_url)
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE accounts DROP COLUMN trial_ends_at"))
    engine.dispose()
    env = {**os.environ, "DATABASE_URL": database_url, "INSTANCE_PATH": str(tmp_path)}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), "accounts", "list"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("entity-monitor: the database has no schema (or an older one): run `entity-monitor db "
                           "upgrade` first (") and "trial_ends_at" in line


@pytest.mark.parametrize("url, problem", [
    ("postgresql://postgres@127.0.0.1:1/nowhere", "the database (DATABASE_URL) cannot be used: connection failed"),
    ("sqlite:////nonexistent/folder/x.db", "the database (DATABASE_URL) cannot be used: unable to open database file"),
])
@pytest.mark.parametrize("args", [["accounts", "list"], ["db", "upgrade"]])
def test_a_database_that_cannot_be_reached_is_named_in_one_line(tmp_path, url, problem, args):
    """A refused connection or an unopenable file ended in a traceback of 150 lines."""
    env = {**os.environ, "DATABASE_URL": url, "INSTANCE_PATH": str(tmp_path)}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    [line] = [line for line in done.stderr.splitlines() if not line.startswith("INFO  [alembic")]
    assert line.startswith(f"entity-monitor: {problem}")


@pytest.mark.parametrize("database", DATABASES)
def test_serve_on_a_database_without_its_schema_stops_with_one_line(tmp_path, database):
    """The worker ended in a traceback, and gunicorn's `Worker failed to boot`."""
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'new.db'}"
    else:
        url = url_with_own_schema(f"unserved_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    env = {**os.environ, "DATABASE_URL": url, "INSTANCE_PATH": str(tmp_path), "BIND": "127.0.0.1:0",
           "WORKER_CPU": "off"}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), "serve"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4  # gunicorn halts: the app failed to load
    assert "entity-monitor: the database has no schema (or an older one): run `entity-monitor db upgrade` first" \
        in done.stderr and "Traceback" not in done.stderr


def test_serve_on_a_database_it_cannot_reach_stops_to_be_restarted(tmp_path):
    """Exit 4 (gunicorn's app-failed-to-load, which the units keep systemd from restarting) for a database that
    was only down would have stopped the service for good; it is gunicorn's boot error, 3, instead."""
    env = {**os.environ, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere", "INSTANCE_PATH": str(tmp_path),
           "BIND": "127.0.0.1:0", "WORKER_CPU": "off"}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), "serve"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert "entity-monitor: the database (DATABASE_URL) cannot be used: connection failed" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("statement", ["SELEC 1", "SELECT no_such_function(1)"])
def test_an_error_of_the_sql_itself_is_not_taken_for_an_unusable_database(tmp_path, statement):
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    from app.database import missing_schema, unreachable
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(OperationalError) as raised, engine.connect() as connection:
        connection.execute(text(statement))
    assert missing_schema(raised.value) is None and unreachable(raised.value) is None


@pytest.mark.parametrize("database", DATABASES)
def test_serve_on_a_schema_of_another_release_stops_with_one_line(tmp_path, database):
    """A database one migration behind was served, and answered 500s where a constraint was missing; with
    SCHEDULER_ENABLED=0 not even a missing schema was noticed."""
    from sqlalchemy import create_engine, text
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'behind.db'}"
    else:
        url = url_with_own_schema(f"behind_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    _migrate(url)
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'f1b7c3e9a2d4'"))
    engine.dispose()
    env = {**os.environ, "DATABASE_URL": url, "INSTANCE_PATH": str(tmp_path), "BIND": "127.0.0.1:0",
           "WORKER_CPU": "off", "SCHEDULER_ENABLED": "0"}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), "serve"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4
    assert ("entity-monitor: the database's schema is at f1b7c3e9a2d4, this release's is a3c9e5f7b1d8: run "
            "`entity-monitor db upgrade` first") in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("url, code", [("postgresql://postgres@127.0.0.1:1/nowhere", 3), ("", 4)])
def test_serve_without_a_scheduler_still_checks_its_database(tmp_path, url, code):
    env = {**os.environ, "DATABASE_URL": url or f"sqlite:///{tmp_path / 'empty.db'}", "INSTANCE_PATH": str(tmp_path),
           "BIND": "127.0.0.1:0", "WORKER_CPU": "off", "SCHEDULER_ENABLED": "0"}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), "serve"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code and "Traceback" not in done.stderr
    assert "entity-monitor: the database" in done.stderr


@pytest.mark.parametrize("args", [["checks", "run"], ["providers", "status"]])
def test_commands_that_read_through_the_driver_name_a_missing_schema_in_one_line_too(tmp_path, args):
    """They read with the DBAPI cursor, whose errors SQLAlchemy does not wrap: a traceback of 60 lines."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}", "INSTANCE_PATH": str(tmp_path)}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "run `entity-monitor db upgrade` first" in done.stderr
