"""The scale-out path: the same migrations, claims and checks on PostgreSQL.

Runs when TEST_POSTGRES_URL names a database it may write schemas into (CI sets it when a server is running)."""
import os
import threading

import pytest
from flask_migrate import upgrade
from sqlalchemy import func, select, text, update

from app import create_app
from app.extensions import db
from app.models import Event, Subscription
from app.services import accounts, checks, subscriptions
from tests.conftest import BASE_CONFIG

POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="TEST_POSTGRES_URL is not set")


def url_with_own_schema(name: str) -> str:
    """TEST_POSTGRES_URL with a schema of its own first on the search path (test modules on other xdist
    workers, or the processes a test starts, then never share tables); the schema is emptied first."""
    from sqlalchemy import create_engine
    engine = create_engine(POSTGRES_URL)
    with engine.begin() as connection:
        connection.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        connection.execute(text(f'CREATE SCHEMA "{name}"'))
    engine.dispose()
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}options=-csearch_path%3D{name}"


@pytest.fixture
def pg_app():
    schema = f"test_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": url_with_own_schema(schema)})
    with app.app_context():
        upgrade()
        yield app
        db.session.remove()
        db.engine.dispose()


def _subscribe_many(account_id, count):
    for number in range(count):
        subscriptions.create(account_id, {"entity_type": "contact", "network_id": f"person-{number:04d}",
                                          "network_url": None, "custom_metadata": {}})
    with db.session.begin():
        db.session.execute(update(Subscription).values(next_check_at=func.now() - text("interval '1 minute'")))


def test_concurrent_claims_never_share_a_subscription(pg_app):
    account, _key = accounts.create_account("Scale", "enterprise")
    _subscribe_many(account.id, 120)
    claimed, barrier = [], threading.Barrier(4)

    def claimer():
        with pg_app.app_context():
            barrier.wait()
            while batch := checks.claim(checks.new_claim_token(), 7):
                claimed.extend(item.id for item in batch)
            db.session.remove()

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(claimed) == 120
    assert len(set(claimed)) == 120


def test_a_check_writes_snapshot_and_initial_event_on_postgres(pg_app):
    account, _key = accounts.create_account("Scale", "enterprise")
    _subscribe_many(account.id, 3)
    token = checks.new_claim_token()
    summary = checks.run_claimed(checks.claim(token, 10), token)
    assert summary.checked == 3
    types = db.session.scalars(select(Event.type)).all()
    assert types == ["subscription.initial_state"] * 3
    assert db.session.scalar(select(func.count()).where(Subscription.snapshot.is_not(None))) == 3


def test_concurrent_bulk_creates_of_the_same_entities_report_duplicates_not_errors(pg_app):
    account, _key = accounts.create_account("Scale", "enterprise")
    items = [{"entity_type": "contact", "network_id": f"dup-{number:03d}"} for number in range(60)]
    results, failures, barrier = [], [], threading.Barrier(3)

    def load(raw):
        return {**raw, "network_url": None, "custom_metadata": {}}

    def bulk():
        with pg_app.app_context():
            barrier.wait()
            try:
                results.append(subscriptions.bulk_create(account.id, items, load))
            except Exception as error:  # noqa: BLE001 - the assertion below names it
                failures.append(error)
            db.session.remove()

    threads = [threading.Thread(target=bulk) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert sum(len(result.created) for result in results) == 60
    assert {error["code"] for result in results for error in result.errors} <= {"DUPLICATE_SUBSCRIPTION"}
    assert db.session.scalar(select(func.count()).select_from(Subscription)) == 60


def test_the_api_hot_paths_answer_the_same_on_postgres(pg_app):
    """Key lookup, create with its duplicate check, get and list as served, and a deleted key refused on its
    next request."""
    from app.schemas.subscriptions import SubscriptionSchema
    account, key = accounts.create_account("Hot Paths", "enterprise")
    client, headers = pg_app.test_client(), {"X-API-Key": key}
    body = {"entity_type": "contact", "network_id": "jane-doe", "custom_metadata": {"crm": "7"}}
    created = client.post("/api/v1/subscriptions", json=body, headers=headers)
    assert created.status_code == 201
    duplicate = client.post("/api/v1/subscriptions", json=body, headers=headers)
    assert duplicate.status_code == 409
    assert duplicate.get_json()["details"]["existing_subscription_id"] == created.get_json()["id"]
    got = client.get(f"/api/v1/subscriptions/{created.get_json()['id']}", headers=headers).get_json()
    db.session.rollback()
    assert got == SubscriptionSchema().dump(db.session.get(Subscription, got["id"]))
    listed = client.get("/api/v1/subscriptions?limit=5", headers=headers).get_json()
    assert [item["id"] for item in listed["data"]] == [got["id"]] and listed["pagination"]["total"] == 1
    other = client.post("/api/v1/account/api-keys", json={"name": "second"}, headers=headers).get_json()
    assert client.delete(f"/api/v1/account/api-keys/{other['id']}", headers=headers).status_code == 200
    assert client.get("/api/v1/subscriptions", headers={"X-API-Key": other["key"]}).status_code == 401
