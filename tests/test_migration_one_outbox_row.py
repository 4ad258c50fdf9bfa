"""The migration f1b7c3e9a2d4: at most one outbox row per event. An event that holds several rows (redelivered
while a retry was owed, before it) keeps its newest; down again, the index allows duplicates."""
from flask_migrate import downgrade, upgrade
from sqlalchemy import text

from app.extensions import db
from tests.webhook_helpers import configure, record_events

BEFORE = "d7e3a9c1f5b2"
DUPLICATE = ("INSERT INTO outbox (event_id, account_id, attempts, next_attempt_at, created_at) "
             "SELECT event_id, account_id, 0, next_attempt_at, created_at FROM outbox WHERE event_id = :event_id")


def _outbox():
    with db.engine.connect() as connection:  # closed after: an open read would block the next migration's DDL
        return sorted(connection.execute(text("SELECT event_id, id FROM outbox")).all())


def test_an_event_with_two_owed_rows_keeps_its_newest(alice):
    configure(alice, "https://93.184.216.34/")
    twice, once = record_events(alice.account_id, 2)
    db.session.remove()
    downgrade(revision=BEFORE)
    with db.engine.begin() as connection:
        connection.execute(text(DUPLICATE), {"event_id": twice})
    before = _outbox()
    upgrade()
    newest = max(row_id for event_id, row_id in before if event_id == twice)
    assert _outbox() == sorted([(twice, newest), *[row for row in before if row[0] == once]])
    downgrade(revision=BEFORE)
    with db.engine.begin() as connection:
        connection.execute(text(DUPLICATE), {"event_id": once})
    assert len(_outbox()) == 3
    upgrade()
    assert len(_outbox()) == 2
