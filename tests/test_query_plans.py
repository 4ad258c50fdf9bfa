"""Filtered pages read in the index of their filter (issue 12): without the page's order columns in it, SQLite
preferred the account's date-ordered index and walked the account's whole log to find a page of a rare type or
of one event's attempts. Failed rows, rare, have partial indexes of their own: the page and its exact total read
only them, on SQLite and PostgreSQL."""
from datetime import timedelta

import pytest
from sqlalchemy import event, insert

from app.common import utcnow
from app.dashboard.views import PAGE_SIZE
from app.extensions import db
from app.models import DeliveryAttempt, Event
from app.services import outbox
from conftest import make_tenant
from dashboard_helpers import Browser
from webhook_helpers import record_events

READS_SQLITE_PLANS = pytest.mark.sqlite_only(reason="reads SQLite's EXPLAIN QUERY PLAN")


def plans_of(client, path, table, kind="ORDER BY"):
    """(statement, plan) of every SELECT on `table` holding `kind` (a page's "ORDER BY", a total's "count(") that
    serving `path` ran; the plan is SQLite's EXPLAIN QUERY PLAN, or PostgreSQL's EXPLAIN with sequential and bitmap
    scans off."""
    return plans_while(lambda: client.get(path).status_code == 200, table, kind)


def plans_while(action, table, kind):
    """`plans_of` for the queries that `action()` (which must return true) ran."""
    seen = []

    def record(_connection, _cursor, statement, parameters, _context, _many):
        if statement.lstrip().startswith(("SELECT", "WITH")) and f"FROM {table}" in statement and kind in statement:
            seen.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        assert action()
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    with db.engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            explain, step = "EXPLAIN QUERY PLAN ", -1
        else:
            # (on tables of a few rows the planner would rightly read them all, or pick any index for a bitmap, or
            # another index and a sort of its few rows: CI, once; a page that no index gives in order still sorts)
            connection.exec_driver_sql("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; "
                                       "SET LOCAL enable_sort = off")
            explain, step = "EXPLAIN ", 0
        return [(statement, " ".join(row[step] for row in connection.exec_driver_sql(explain + statement, parameters)))
                for statement, parameters in seen]


def walk_of(plan):
    """The part of a page's plan that walks the index to the page: SQLite materialises the page's ids and times
    first, then reads their rows by id and sorts those few (at most `limit`); PostgreSQL's nested loop keeps the
    walk's order (its plan is checked whole)."""
    return plan.split(" SCAN page")[0]


@pytest.mark.parametrize("path, table, index", [
    ("/events?offset=5", "events", "ix_events_account_order"),
    ("/events?type=contact.position_changed&offset=5", "events", "ix_events_account_type_order"),
    ("/webhooks/deliveries?offset=5", "delivery_attempts", "ix_delivery_attempts_account_order")])
def test_a_pages_offset_is_walked_in_the_index_alone(app, path, table, index):
    """Walked over whole rows, every skipped row was read from the table too (PostgreSQL walk: 10 s at offset 2M)."""
    tenant = make_tenant(app, "Plans", "growth")
    [(_, plan)] = plans_of(tenant, path, table)
    walk = walk_of(plan)
    assert (f"USING COVERING INDEX {index} " in walk if db.engine.dialect.name == "sqlite"
            else f"Index Only Scan Backward using {index} " in walk), plan
    assert "TEMP B-TREE" not in walk and "Sort" not in walk, plan


@READS_SQLITE_PLANS
def test_the_event_list_of_one_type_reads_the_type_index(app):
    tenant = make_tenant(app, "Plans", "growth")
    plans = plans_of(tenant, "/events?type=contact.position_changed", "events")
    assert plans and all("USING COVERING INDEX ix_events_account_type_order (account_id=? AND type=?)" in plan
                         and "TEMP B-TREE" not in walk_of(plan) for _, plan in plans)


@pytest.mark.parametrize("query, counted", [("", False), ("?type=contact.position_changed", False),
                                            ("?subscription_id=sub_x", True)])
def test_the_event_lists_total_is_read_from_counters_unless_filtered_by_subscription(app, query, counted):
    """A count of the account's events on every page took seconds at millions (PostgreSQL walk: 3.6 s at 5.7M)."""
    tenant = make_tenant(app, "Totals", "growth")
    record_events(tenant.account_id, 2)
    counts = plans_while(lambda: tenant.get(f"/events{query}").status_code == 200, "events", "count(")
    assert bool(counts) == counted, counts


@READS_SQLITE_PLANS
def test_the_delivery_log_of_one_event_reads_the_event_index(app):
    tenant = make_tenant(app, "Plans", "growth")
    plans = plans_of(tenant, "/webhooks/deliveries?event_id=evt_missing", "delivery_attempts")
    assert plans and all("INDEX ix_delivery_attempts_event (event_id=?)" in plan
                         and "TEMP B-TREE" not in walk_of(plan) for _, plan in plans)


def insert_rare_failures(account_id, count=3000, every=1000):
    """`count` events of the account, each with one attempt; one in `every` failed (the rest succeeded). PostgreSQL
    gets the statistics autovacuum would gather; SQLite none, as in service (nothing runs its ANALYZE)."""
    start = utcnow() - timedelta(seconds=count)
    events, attempts = [], []
    for n in range(count):
        status, moment = "failed" if n % every == 0 else "succeeded", start + timedelta(seconds=n)
        events.append({"id": f"evt_{n:026x}", "account_id": account_id, "type": "contact.position_changed",
                       "body": "{}", "created_at": moment, "delivery_status": status, "attempt_count": 1})
        attempts.append({"id": f"dlv_{n:026x}", "account_id": account_id, "event_id": f"evt_{n:026x}",
                         "event_type": "contact.position_changed", "attempt": 1, "status": status,
                         "attempted_at": moment})
    db.session.execute(insert(Event), events)
    db.session.execute(insert(DeliveryAttempt), attempts)
    db.session.commit()
    if db.engine.dialect.name == "postgresql":
        with db.engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE events; ANALYZE delivery_attempts")


def assert_failed_rows_read_in(index, client, path, table):
    """The page and its total hold `status = 'failed'` as written, and read `index` in the page's order: the
    partial index serves a query only then (SQLite also matches a bound value, but by preparing the statement
    again at every run; PostgreSQL's generic plan of a prepared statement never does)."""
    plans = plans_of(client, path, table) + plans_of(client, path, table, kind="count(")
    assert len(plans) == 2, plans
    for statement, plan in plans:
        assert "status = 'failed'" in statement and index in plan, (statement, plan)
        assert "TEMP B-TREE" not in walk_of(plan) and "Sort" not in plan, plan


def test_the_delivery_log_of_failed_attempts_reads_their_index(app):
    tenant = make_tenant(app, "Plans", "growth")
    insert_rare_failures(tenant.account_id)
    assert_failed_rows_read_in("ix_delivery_attempts_account_failed_order", tenant,
                               "/webhooks/deliveries?status=failed", "delivery_attempts")
    assert tenant.get("/webhooks/deliveries?status=failed").json["pagination"]["total"] == 3


def test_the_event_list_of_failed_deliveries_reads_their_index(app):
    tenant = make_tenant(app, "Plans", "growth")
    insert_rare_failures(tenant.account_id)
    browser = Browser(app, tenant.key)
    assert_failed_rows_read_in("ix_events_account_failed_order", browser, "/events?status=failed", "events")
    assert "3 events." in browser.text("/events?status=failed")


@READS_SQLITE_PLANS
def test_the_claim_reads_each_accounts_oldest_due_delivery_by_the_index(app):
    """The claim shares a batch out among the accounts (`outbox._shared_out`): the accounts owed something, each
    one's oldest due and its next due ones are seeks in the account's due index, not a scan of the outbox or of
    every configuration."""
    tenant = make_tenant(app, "Plans", "growth")
    assert tenant.post("/webhooks/configure", json={"endpoint_url": "https://93.184.216.34/", "events": ["*"]})\
        .status_code == 201
    record_events(tenant.account_id, 2)
    plans = plans_while(lambda: len(outbox.claim_due(outbox.new_claim_token(), 10)) == 2, "outbox", "next_attempt_at")
    [(_, accounts), (_, turn)] = plans
    assert "SEARCH outbox USING COVERING INDEX ix_outbox_account_due (account_id>?)" in accounts  # the next account
    assert "SEARCH outbox USING COVERING INDEX ix_outbox_account_due (account_id=?)" in accounts  # its oldest due
    assert "SEARCH webhook_configs USING INDEX" in accounts
    assert "SEARCH outbox USING COVERING INDEX ix_outbox_account_due (account_id=? AND next_attempt_at<?)" in turn
    assert not any("SCAN outbox" in plan or "SCAN webhook_configs" in plan for _, plan in plans)


def test_a_later_page_of_a_subscriptions_timeline_is_walked_in_its_index(app):
    """The subscription page's timeline pages (`?page=`): the offset is walked in the timeline's index, in order."""
    tenant = make_tenant(app, "Plans", "growth")
    [event_id] = record_events(tenant.account_id)
    subscription_id = db.session.get(Event, event_id).subscription_id
    insert_rare_failures(tenant.account_id)  # the account's other events (of no subscription): the index is chosen
    offsets = []

    def record(_connection, _cursor, statement, parameters, _context, _many):
        if "FROM events" in statement and "OFFSET" in statement:
            offsets.append(list(parameters.values() if isinstance(parameters, dict) else parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        plans = plans_of(Browser(app, tenant.key), f"/subscriptions/{subscription_id}?page=3", "events")
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    assert plans and all("OFFSET" in statement for statement, _ in plans), plans
    assert offsets and all(2 * PAGE_SIZE in values for values in offsets), offsets  # page 3's, not page 1's (review)
    for _, plan in plans:
        assert "ix_events_subscription_order" in plan, plan
        assert "TEMP B-TREE" not in walk_of(plan) and "Sort" not in walk_of(plan), plan


def a_subscriptions_events(tenant):
    [event_id] = record_events(tenant.account_id)
    return f"/events?subscription_id={db.session.get(Event, event_id).subscription_id}"


def an_events_attempts(_tenant):
    return "/webhooks/deliveries?event_id=evt_missing"


@READS_SQLITE_PLANS
@pytest.mark.parametrize("list_path, query, table, index", [
    *[(a_subscriptions_events, query, "events", "ix_events_subscription_order (subscription_id=?)")
      for query in ("", "&type=contact.position_changed", "&delivery_status=failed")],
    *[(an_events_attempts, query, "delivery_attempts", "ix_delivery_attempts_event (event_id=?)")
      for query in ("", "&status=failed")]])
def test_a_subscriptions_events_and_an_events_attempts_are_paged_and_counted_in_their_index(
        app, list_path, query, table, index):
    """Without statistics SQLite counted a subscription's events in the account's indexes (the account's and the
    type's, or the failed ones), walking every event of the account: the dashboard's subscription page took 116 ms
    and more (benchmark walk); an event's failed attempts likewise in the account's failed ones."""
    tenant = make_tenant(app, "Plans", "growth")
    path = list_path(tenant) + query
    plans = plans_of(tenant, path, table) + plans_of(tenant, path, table, kind="count(")
    assert len(plans) == 2, plans
    for _, plan in plans:
        assert f"INDEX {index}" in plan and "TEMP B-TREE" not in walk_of(plan), plan
