"""Event bodies are stored compressed (app/models/compressed_text.py) and read back, sent and signed as the
exact text written; the migration f3c8a1d5e927 compresses the bodies already there, and back."""
import json

import pytest
from flask_migrate import downgrade, upgrade
from sqlalchemy import text

from app.extensions import db
from app.models.compressed_text import compress, decompress
from app.services.transport import sign
from app.worker.deliveries import deliver_due
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, configure, record_events

CHANGES = {"previous_title": "Ingénieure — R&D", "current_title": "CTO 🚀", "note": "\\u00e9 \" \n"}


@pytest.fixture
def app_config():
    return LOCAL_RECEIVER_CONFIG


def _stored(event_id):
    with db.engine.connect() as connection:  # closed after: an open read would block a migration's DDL
        return connection.execute(text("SELECT body FROM events WHERE id = :id"), {"id": event_id}).scalar()


def test_a_body_round_trips_exactly():
    body = json.dumps({"id": "evt_1", "data": {"changes": CHANGES}}, separators=(",", ":"), ensure_ascii=False)
    assert decompress(compress(body)) == body
    assert len(compress(body)) < len(body.encode())


def test_a_body_is_stored_compressed_and_delivered_and_shown_as_written(alice):
    with Receiver() as receiver:
        secret = configure(alice, receiver.url)["secret"]
        [event_id] = record_events(alice.account_id, data={"changes": CHANGES})
        deliver_due()
    stored = bytes(_stored(event_id))
    written = decompress(stored)
    assert len(stored) < len(written.encode())
    [request] = receiver.requests
    assert request.body == written.encode()
    assert request.headers["X-Webhook-Signature"] == sign(secret, int(request.headers["X-Webhook-Timestamp"]),
                                                          written.encode())
    shown = alice.get(f"/events/{event_id}").json
    assert shown["data"] == json.loads(written)["data"] == {"changes": CHANGES}
    assert alice.get("/events").json["data"][0]["data"] == {"changes": CHANGES}


def _counts():
    with db.engine.connect() as connection:
        return [connection.execute(text(f"SELECT count(*) FROM {table}")).scalar()
                for table in ("events", "outbox", "delivery_attempts")]


def test_the_migration_compresses_the_bodies_already_there_and_back_and_keeps_every_other_row(alice):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id, data={"changes": CHANGES})
        deliver_due()
        record_events(alice.account_id)  # still owed
    written = decompress(bytes(_stored(event_id)))
    db.session.remove()
    downgrade(revision="b2d9f4e6a813")
    assert _stored(event_id) == written  # text again
    assert _counts() == [2, 1, 1]
    upgrade()
    assert decompress(bytes(_stored(event_id))) == written
    assert _counts() == [2, 1, 1]
    assert alice.get(f"/events/{event_id}").json["data"] == {"changes": CHANGES}
