"""The data migration d4b8e1f2a6c9: stored snapshots lose their activities (and the text), keep the rest;
up and down, on SQLite and (when TEST_POSTGRES_URL is set) PostgreSQL."""
import os

import pytest
from flask_migrate import downgrade, upgrade
from sqlalchemy import select, text

from app import create_app
from app.extensions import db
from app.models import Subscription
from app.services.detection import SEEN_KEY, detect
from tests.conftest import BASE_CONFIG

BEFORE, REVISION = "9c1e5d2a4b70", "d4b8e1f2a6c9"
ACTIVITY = {"id": "p1", "kind": "post", "url": "https://www.linkedin.com/feed/update/p1", "text": "long text",
            "created_at": "2026-11-20T10:00:00Z", "target_url": None, "reaction_type": None}
LEGACY = {"network_id": "jane", "name": "Jane", "headline": "Engineer at Acme", "company": "Acme",
          "title": "Engineer", "location": "Berlin", "activities": [ACTIVITY], "followers": 3,
          "seen_activity_ids": ["p0", "p1"]}
SLIM = {"name": "Jane", "headline": "CTO", "company": "Acme", "title": "CTO", "location": "Berlin",
        SEEN_KEY: "abcdefgh"}


def database_urls():
    urls = [pytest.param("sqlite", id="sqlite")]
    if os.environ.get("TEST_POSTGRES_URL"):
        urls.append(pytest.param("postgresql", id="postgresql"))
    return urls


@pytest.fixture(params=database_urls())
def migration_app(request, tmp_path):
    if request.param == "postgresql":
        from tests.conftest import url_with_own_schema
        url = url_with_own_schema(f"migration_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
    else:
        url = f"sqlite:///{tmp_path / 'migration.db'}"
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        yield app
        db.session.remove()
        db.engine.dispose()


def _insert(snapshots):
    with db.engine.begin() as connection:
        connection.execute(text("INSERT INTO accounts (id, name, tier, created_at) "
                                "VALUES ('acct_1', 'A', 'starter', CURRENT_TIMESTAMP)"))
        for number, snapshot in enumerate(snapshots):
            connection.execute(Subscription.__table__.insert().values(
                id=f"sub_{number}", account_id="acct_1", entity_type="contact", network_id=f"p-{number}",
                network_url=f"https://www.linkedin.com/in/p-{number}", status="active", custom_metadata={},
                created_at=db.func.now(), updated_at=db.func.now(), last_check_status="ok", check_count=1,
                change_count=0, consecutive_failures=0, snapshot=snapshot))


def _snapshots():
    """Read on a connection of its own, closed after: an open read would block the next migration's DDL."""
    with db.engine.connect() as connection:
        return [connection.scalar(select(Subscription.snapshot).where(Subscription.id == f"sub_{number}"))
                for number in range(3)]


def test_the_migration_strips_the_activities_of_stored_snapshots_and_keeps_the_rest(migration_app):
    upgrade(revision=BEFORE)
    _insert([LEGACY, SLIM, None])
    upgrade(revision=REVISION)
    stripped, slim, empty = _snapshots()
    assert stripped == {name: value for name, value in LEGACY.items() if name != "activities"}
    assert slim == SLIM and empty is None
    answer = {**{name: LEGACY[name] for name in ("name", "headline", "company", "title", "location")},
              "activities": [ACTIVITY, {**ACTIVITY, "id": "p2"}]}
    assert [change.data["activity"]["id"] for change in detect("contact", stripped, answer).changes] == ["p2"]
    downgrade(revision=BEFORE)
    assert _snapshots() == [stripped, slim, None]
    upgrade()
