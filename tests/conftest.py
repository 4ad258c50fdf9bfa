"""Fixtures in the healthchecks style: an app on a fresh migrated database per test, and three tenants:
`alice` owns the data, `bob` shares nothing, `anon` has no key.

Every test that uses the `app` fixture runs on SQLite (a copy of a migrated template file) and, when
TEST_POSTGRES_URL names a PostgreSQL database, on PostgreSQL too (a schema per xdist worker, migrated once,
its tables emptied before each test): ids end in `[sqlite]` or `[postgresql]`. A test that is about SQLite
itself carries `@pytest.mark.sqlite_only(reason=...)`."""
import os
import shutil
from dataclasses import dataclass

import pytest
from flask_migrate import upgrade
from sqlalchemy import create_engine, func, select, text

from app import create_app
from app.database import url_with_fresh_schema
from app.extensions import db
from app.models import Subscription
from app.services import accounts, usage

BASE_CONFIG = {
    "TESTING": True,
    "SCHEDULER_ENABLED": False,
    "RATELIMIT_STORAGE_URI": "memory://",
    "CHECK_INITIAL_DELAY_SECONDS": 60,
    "WEBHOOK_ALLOW_HTTP": False,
    "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": False,
}

POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL")
DATABASES = ["sqlite", "postgresql"] if POSTGRES_URL else ["sqlite"]


def pytest_configure(config):
    config.addinivalue_line("markers", "sqlite_only(reason): the test is about SQLite itself; never run on "
                                       "PostgreSQL")
    config.addinivalue_line("markers", "postgresql_only(reason): the test is about PostgreSQL itself (its plans, "
                                       "its locks); runs only when TEST_POSTGRES_URL is set")


def pytest_report_header(config):
    if POSTGRES_URL:
        return "databases: sqlite, postgresql (TEST_POSTGRES_URL)"
    return "databases: sqlite only (TEST_POSTGRES_URL=postgresql://... runs every database test on both)"


def pytest_generate_tests(metafunc):
    """Every test that reaches the `database_url` fixture (through `app`) runs once per database."""
    if "database_url" in metafunc.fixturenames:
        if metafunc.definition.get_closest_marker("sqlite_only"):
            databases = ["sqlite"]
        elif metafunc.definition.get_closest_marker("postgresql_only"):
            databases = [name for name in DATABASES if name == "postgresql"]  # none: skipped, "empty parameter set"
        else:
            databases = DATABASES
        metafunc.parametrize("database_url", databases, indirect=True)


def url_with_own_schema(name: str) -> str:
    """TEST_POSTGRES_URL with an emptied schema of its own (xdist workers, or the processes a test starts, then
    never share tables)."""
    return url_with_fresh_schema(POSTGRES_URL, name)


def _migrate(url):
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        upgrade()
        db.engine.dispose()


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory):
    """The schema is built once, by the Alembic migrations themselves; each test copies the file."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    _migrate(f"sqlite:///{path}")
    return path


class PostgresSchema:
    """This worker's migrated schema; `empty()` brings it back to just-migrated before a test.

    DELETE, child tables first, then the sequences restarted: on tables this small it takes ~10 ms where
    TRUNCATE takes ~400 ms (TRUNCATE makes new files for every table and index)."""

    def __init__(self, url):
        self.url = url
        self.engine = create_engine(url)
        with self.engine.connect() as connection:
            tables = set(connection.scalars(text(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")))
            sequences = connection.scalars(text("SELECT sequence_name FROM information_schema.sequences "
                                                "WHERE sequence_schema = current_schema()")).all()
        tables.discard("alembic_version")
        children_first = [table.name for table in reversed(db.metadata.sorted_tables)]
        assert tables == set(children_first), f"tables the models do not know: {tables - set(children_first)}"
        self.statements = "; ".join([f'DELETE FROM "{name}"' for name in children_first]
                                    + [f'ALTER SEQUENCE "{name}" RESTART' for name in sequences])

    def empty(self):
        with self.engine.begin() as connection:
            connection.exec_driver_sql("SET LOCAL lock_timeout = '20s'")  # a leaked transaction fails, not hangs
            connection.exec_driver_sql(self.statements)


@pytest.fixture(scope="session")
def postgres_schema():
    url = url_with_own_schema(f"test_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    _migrate(url)
    schema = PostgresSchema(url)
    yield schema
    schema.engine.dispose()


@pytest.fixture
def database_url(request, tmp_path):
    """A just-migrated database of the kind the test's parameter names, as a SQLAlchemy URL."""
    if request.param == "sqlite":
        path = tmp_path / "test.db"
        shutil.copy(request.getfixturevalue("migrated_template"), path)
        return f"sqlite:///{path}"
    schema = request.getfixturevalue("postgres_schema")
    schema.empty()
    return schema.url


@pytest.fixture(scope="module")
def module_app(tmp_path_factory, migrated_template):
    """One app on its own copy of the migrated database for a whole module (hypothesis tests, whose
    examples share it: each example makes its own account)."""
    database = tmp_path_factory.mktemp("module") / "module.db"
    shutil.copy(migrated_template, database)
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{database}"})
    with app.app_context():
        yield app
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def app_config():
    """Override in a test module (or parametrize) to change settings."""
    return {}


@pytest.fixture
def app(database_url, app_config):
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": database_url, **app_config})
    with app.app_context():
        yield app
        # written now, as a stopping server writes them (which stops the timer first): the timer would open a
        # connection on the disposed engine after the test (on PostgreSQL, one a test, until "too many clients")
        try:
            usage.flush_request_counts()
        except Exception:  # noqa: BLE001 - a test that broke its database on purpose: the timer is stopped anyway
            pass
        db.session.remove()
        db.engine.dispose()


@dataclass
class Tenant:
    client: object
    account_id: str
    key: str
    prefix: str = "/api/v1"

    @property
    def headers(self):
        return {"X-API-Key": self.key} if self.key else {}

    def request(self, method, path, **kwargs):
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return self.client.open(self.prefix + path, method=method, headers=headers, **kwargs)

    def get(self, path, **kwargs):
        return self.request("GET", path, **kwargs)

    def post(self, path, **kwargs):
        return self.request("POST", path, **kwargs)

    def put(self, path, **kwargs):
        return self.request("PUT", path, **kwargs)

    def patch(self, path, **kwargs):
        return self.request("PATCH", path, **kwargs)

    def delete(self, path, **kwargs):
        return self.request("DELETE", path, **kwargs)


def make_tenant(app, name, tier=None):
    account, key = accounts.create_account(name, tier)
    return Tenant(app.test_client(), account.id, key)


@pytest.fixture
def alice(app):
    return make_tenant(app, "Alice Inc")


@pytest.fixture
def bob(app):
    return make_tenant(app, "Bob Ltd")


@pytest.fixture
def anon(app):
    return Tenant(app.test_client(), None, None)


@pytest.fixture
def runner(app):
    return app.test_cli_runner()


def subscription_count(account_id, **filters):
    """Subscriptions of an account in the database now, optionally with column values (status=…)."""
    db.session.rollback()
    query = select(func.count()).select_from(Subscription).where(Subscription.account_id == account_id)
    for name, value in filters.items():
        query = query.where(getattr(Subscription, name) == value)
    return db.session.scalar(query)


@pytest.fixture
def ticking(app):
    """A scheduler has just ticked, so /healthz is healthy."""
    from app.common import utcnow
    from app.services import health
    health.record_tick("test-scheduler", utcnow())


def raising(error_class, *args):
    """A stand-in for a function (monkeypatched in) that raises a new `error_class(*args)` whatever it is called
    with (a new one each time: one instance raised again keeps every earlier traceback, and their frames)."""
    def fail(*_args, **_kwargs):
        raise error_class(*args)
    return fail
