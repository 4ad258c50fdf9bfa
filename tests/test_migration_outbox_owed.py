"""The migration b2d9f4e6a813: the outbox keeps only the deliveries still owed (pending ones), and loses its
`status` column; down again, what is left is pending. The migrations after it keep what it kept."""
from flask_migrate import downgrade, upgrade
from sqlalchemy import text

from app.extensions import db
from tests.webhook_helpers import configure, record_events

BEFORE = "e5f1a2b3c4d6"


def _outbox(columns):
    with db.engine.connect() as connection:  # closed after: an open read would block the next migration's DDL
        return sorted(connection.execute(text(f"SELECT {columns} FROM outbox")).all())


def test_finished_deliveries_leave_the_outbox_and_the_pending_one_stays(alice):
    configure(alice, "https://93.184.216.34/")
    succeeded, failed, pending = record_events(alice.account_id, 3)
    db.session.remove()
    downgrade(revision=BEFORE)
    with db.engine.begin() as connection:
        for event_id, status in ((succeeded, "succeeded"), (failed, "failed")):
            connection.execute(text("UPDATE outbox SET status = :status WHERE event_id = :event_id"),
                               {"status": status, "event_id": event_id})
    upgrade()
    assert _outbox("event_id") == [(pending,)]
    downgrade(revision=BEFORE)
    assert _outbox("event_id, status") == [(pending, "pending")]
    upgrade()
