"""An API GET with a key reads in one snapshot (REPEATABLE READ on PostgreSQL), whatever wrote before its view,
and the level goes with the transaction, not with the pooled connection; a GET without a key takes no connection."""
import pytest
from sqlalchemy import event, insert, text
from sqlalchemy.orm import Session

from app.common import new_id, utcnow
from app.extensions import db
from app.models import Event
from app.services import events
from tests.conftest import make_tenant

pytestmark = pytest.mark.postgresql_only("isolation levels")


def _isolation_seen_by_the_view(app, tenant, monkeypatch):
    seen = []
    list_page = events.list_page

    def spy(*args, **kwargs):
        seen.append((db.session.scalar(text("SHOW transaction_isolation")),
                     db.session.scalar(text("SELECT pg_backend_pid()"))))
        return list_page(*args, **kwargs)
    monkeypatch.setattr(events, "list_page", spy)
    assert tenant.get("/events").status_code == 200
    monkeypatch.setattr(events, "list_page", list_page)
    return seen[0]


def test_the_first_get_of_a_key_reads_in_one_snapshot(app, monkeypatch):
    """Recording the key's `last_used_at` (a write transaction, about once a minute per key) ended the snapshot: the
    view read at the default READ COMMITTED (review)."""
    tenant = make_tenant(app, "Fresh key")  # never used: last_used_at is written by this GET
    db.session.remove()
    level, _pid = _isolation_seen_by_the_view(app, tenant, monkeypatch)
    assert level == "repeatable read"


def test_the_level_does_not_stay_on_the_pooled_connection(app, monkeypatch):
    tenant = make_tenant(app, "Pooled")
    tenant.get("/account")  # last_used written
    db.session.remove()
    level, pid = _isolation_seen_by_the_view(app, tenant, monkeypatch)
    assert level == "repeatable read"
    db.session.remove()  # what the end of a request's app context does
    with db.engine.connect() as connection:
        assert connection.scalar(text("SELECT pg_backend_pid()")) == pid  # the same pooled connection
        assert connection.scalar(text("SHOW transaction_isolation")) == "read committed"
    assert db.session.scalar(text("SHOW transaction_isolation")) == "read committed"


def test_two_gets_in_one_app_context_do_not_share_the_first_ones_snapshot(app):
    """Requests made inside one pushed app context (tests) share the session: the second GET read the first one's
    snapshot (review)."""
    tenant = make_tenant(app, "Stale")
    tenant.get("/account")
    db.session.remove()
    assert tenant.get("/events").json["pagination"]["total"] == 0
    with db.engine.begin() as other:  # another process records an event (through the services: counted)
        row = {"id": new_id("evt"), "account_id": tenant.account_id, "type": "test", "body": "{}",
               "created_at": utcnow()}
        other.execute(insert(Event), row)
        with Session(bind=other) as session:
            events.count_by_day(session, [row])
    assert len(tenant.get("/events").json["data"]) == 1


def test_a_get_without_a_key_takes_no_connection(app, anon):
    """A GET without a key (the OpenAPI document, a probe) is answered without the database (review)."""
    checkouts = []
    db.session.remove()
    listener = lambda *args: checkouts.append(1)  # noqa: E731
    event.listen(db.engine, "checkout", listener)
    try:
        assert anon.get("/openapi.json").status_code == 200
    finally:
        event.remove(db.engine, "checkout", listener)
    assert checkouts == []
