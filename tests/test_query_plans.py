"""Filtered pages read in the index of their filter (issue 12): without the page's order columns in it, SQLite
preferred the account's date-ordered index and walked the account's whole log to find a page of a rare type or
of one event's attempts."""
import pytest
from sqlalchemy import event

from app.extensions import db
from conftest import make_tenant

pytestmark = pytest.mark.sqlite_only(reason="reads SQLite's EXPLAIN QUERY PLAN")


def plans_of_pages(tenant, path, table):
    """EXPLAIN QUERY PLAN of every ordered page statement on `table` that serving `path` ran."""
    seen = []

    def record(_connection, _cursor, statement, parameters, _context, _many):
        if statement.lstrip().startswith("SELECT") and f"FROM {table}" in statement and "ORDER BY" in statement:
            seen.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        assert tenant.get(path).status_code == 200
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    with db.engine.connect() as connection:
        return [" ".join(row[-1] for row in connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
                for statement, parameters in seen]


def test_the_event_list_of_one_type_reads_the_type_index(app):
    tenant = make_tenant(app, "Plans", "growth")
    plans = plans_of_pages(tenant, "/events?type=contact.position_changed", "events")
    assert plans and all("USING INDEX ix_events_account_type_order (account_id=? AND type=?)" in plan
                         and "TEMP B-TREE" not in plan for plan in plans)


def test_the_delivery_log_of_one_event_reads_the_event_index(app):
    tenant = make_tenant(app, "Plans", "growth")
    plans = plans_of_pages(tenant, "/webhooks/deliveries?event_id=evt_missing", "delivery_attempts")
    assert plans and all("USING INDEX ix_delivery_attempts_event (event_id=?)" in plan
                         and "TEMP B-TREE" not in plan for plan in plans)
