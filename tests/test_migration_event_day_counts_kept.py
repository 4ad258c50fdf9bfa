"""The migration c2e6f0a4b8d1: the per-day event counters gain `kept`, filled from the events kept (retention had
left `count` as it was), so the event list's total can be read from them; `count` is untouched."""
from flask_migrate import downgrade, upgrade
from sqlalchemy import text

from app.extensions import db
from tests.webhook_helpers import record_events

BEFORE = "b8e4d2a6c9f3"


def _counts():
    with db.engine.connect() as connection:  # closed after: an open read would block the next migration's DDL
        return connection.execute(text("SELECT type, sum(count), sum(kept) FROM event_day_counts GROUP BY type")).all()


def test_kept_is_what_retention_left_and_count_what_happened(alice):
    pruned, _kept, _also_kept = record_events(alice.account_id, 3)
    [other] = record_events(alice.account_id, event_type="company.employee_count_changed")
    db.session.remove()
    downgrade(revision=BEFORE)
    with db.engine.begin() as connection:  # as retention did before: the counter left as it was
        connection.execute(text("DELETE FROM events WHERE id IN (:pruned, :other)"), {"pruned": pruned, "other": other})
    upgrade()
    assert sorted(_counts()) == [("company.employee_count_changed", 1, 0), ("contact.position_changed", 3, 2)]
    assert alice.get("/events").json["pagination"]["total"] == 2
