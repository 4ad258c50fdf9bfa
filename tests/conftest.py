"""Fixtures in the healthchecks style: an app on a fresh migrated SQLite file per test, and three
tenants: `alice` owns the data, `bob` shares nothing, `anon` has no key."""
import shutil
from dataclasses import dataclass

import pytest
from flask_migrate import upgrade
from sqlalchemy import func, select

from app import create_app
from app.extensions import db
from app.models import Subscription
from app.services import accounts

BASE_CONFIG = {
    "TESTING": True,
    "SCHEDULER_ENABLED": False,
    "RATELIMIT_STORAGE_URI": "memory://",
    "CHECK_INITIAL_DELAY_SECONDS": 60,
    "WEBHOOK_ALLOW_HTTP": False,
    "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": False,
}


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory):
    """The schema is built once, by the Alembic migrations themselves; each test copies the file."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{path}"})
    with app.app_context():
        upgrade()
        from app.extensions import db
        db.engine.dispose()
    return path


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
def app(tmp_path, migrated_template, app_config):
    database = tmp_path / "test.db"
    shutil.copy(migrated_template, database)
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{database}", **app_config})
    with app.app_context():
        yield app
        from app.extensions import db
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
