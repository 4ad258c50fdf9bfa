"""Checks at scale (issue 12, point 3): every claim is an index search read in the index's order (no sort of
the table), and a batch costs the same few statements whatever its size, the table's size or the number
of accounts in it; `checks run --all` pages through the table by id."""
import re

import pytest
from sqlalchemy import event, update

from app.database import write_transaction
from app.extensions import db
from app.models import Subscription
from app.services import accounts, checks
from app.worker import checks as worker

from test_checks import configure_webhook
from test_scheduler import insert_due_subscriptions


class Statements:
    """The SQL statements the engine sends while recording, with their parameters."""

    def __init__(self):
        self.seen = []

    def __enter__(self):
        event.listen(db.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *_):
        event.remove(db.engine, "before_cursor_execute", self._record)

    def _record(self, _connection, _cursor, statement, parameters, _context, executemany):
        self.seen.append((statement, parameters, executemany))

    def shapes(self) -> list:
        """Each statement with its IN lists and VALUES rows folded and without RETURNING (psycopg's ORM inserts
        return the new id for one row, not for many), so batches of different sizes compare equal."""
        placeholder = r"(?:\?|%\([^)]+\)s(?:::[A-Z ]+)?)"  # SQLite's ? or psycopg's %(name)s (with a cast)
        folded = (re.sub(rf"\({placeholder}(, {placeholder})*\)", "(?…)", statement)
                  for statement, _parameters, _many in self.seen)
        return [re.sub(r"\(\?…\)(, \(\?…\))+", "(?…)", statement.split(" RETURNING ")[0]) for statement in folded]

    def on_subscriptions(self) -> list:
        return [(statement, parameters) for statement, parameters, _many in self.seen
                if re.match(r"\s*(SELECT|UPDATE)\b", statement) and "FROM subscriptions" in statement
                or statement.lstrip().startswith("UPDATE subscriptions")]


BOUNDED_ACCESS = (r"SEARCH subscriptions USING (COVERING )?INDEX (sqlite_autoindex_subscriptions_1 \(id[=>]\?\)"
                  r"|ix_subscriptions_due \(status=\? AND next_check_at<\?\))"
                  r"|SCAN subscriptions USING COVERING INDEX sqlite_autoindex_subscriptions_1")


def query_plan(statement, parameters) -> list:
    with db.engine.connect() as connection:
        return [row[-1] for row in connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)]


@pytest.fixture
def tenants(app):
    """Three accounts, each with an active webhook (so every batch also queues deliveries) and 40 due
    subscriptions interleaved in id order."""
    account_ids = [accounts.create_account(f"Tenant {number}", "growth")[0].id for number in range(3)]
    for account_id in account_ids:
        configure_webhook(account_id, is_active=True)
    for round_number in range(40):
        for account_id in account_ids:
            insert_due_subscriptions(account_id, 1, prefix=f"r{round_number}-{account_id}")
    return account_ids


def test_a_due_batch_takes_the_same_statements_whatever_its_size_and_accounts(app, tenants):
    app.config["CHECK_BATCH_SIZE"] = 1  # one subscription of one account, then 60 of three accounts
    with Statements() as small:
        assert worker.run_due_batch().checked == 1
    app.config["CHECK_BATCH_SIZE"] = 60
    with Statements() as large:
        summary = worker.run_due_batch()
    assert summary.checked == 60 and summary.deliveries_queued
    assert small.shapes() == large.shapes()
    # One claim UPDATE, then the write-back: one executemany UPDATE for the rows with a new snapshot.
    updates = [many for statement, _parameters, many in large.seen if statement.startswith("UPDATE subscriptions")]
    assert updates == [False, True]


def test_pages_of_checks_run_all_take_the_same_statements_from_first_to_last(app, tenants):
    app.config["CHECK_BATCH_SIZE"] = 25
    pages = worker.run_all()
    shapes = []
    while True:
        with Statements() as page:
            summary = next(pages, None)
        if summary is None:
            break
        shapes.append(page.shapes())
        assert summary.checked == 25 or len(shapes) == 5  # 120 rows: four full pages and a last of 20
    assert len(shapes) == 5
    # Only the first page lacks the "after this id" condition; every later page is the same statements.
    assert all(later == shapes[1] for later in shapes[2:])


@pytest.mark.sqlite_only(reason="reads SQLite's EXPLAIN QUERY PLAN; PostgreSQL's plans have their own test")
@pytest.mark.parametrize("claiming", ["due", "page", "page after an id", "one"])
def test_each_claim_searches_an_index_and_sorts_nothing(app, tenants, claiming):
    app.config["CHECK_BATCH_SIZE"] = 10
    first_id = checks.claim_page(checks.new_claim_token(), 1)[1]
    claim = {"due": lambda token: checks.claim(token, 10),
             "page": lambda token: checks.claim_page(token, 10),
             "page after an id": lambda token: checks.claim_page(token, 10, first_id),
             "one": lambda token: checks.claim_ids(token, [first_id])}[claiming]
    with write_transaction():  # the claim above is given back
        db.session.execute(update(Subscription).values(claim_token=None, claimed_until=None))
    with Statements() as claiming_statements:
        claim(checks.new_claim_token())
    on_subscriptions = claiming_statements.on_subscriptions()
    assert on_subscriptions
    for statement, parameters in on_subscriptions:
        plan = query_plan(statement, parameters)
        assert not any("TEMP B-TREE" in step for step in plan), (statement, plan)
        steps = [step for step in plan if " subscriptions " in step + " "]
        # Rows are reached by id (one lookup each), or by the due range of the index on (status,
        # next_check_at); never by `status = 'active'` alone (every active row) nor by a scan of the table.
        # The first page of `--all` reads the primary key's index from its start, in order, up to the limit.
        assert steps and all(re.fullmatch(BOUNDED_ACCESS, step) for step in steps), (statement, plan)


@pytest.mark.sqlite_only(reason="reads SQLite's EXPLAIN QUERY PLAN")
def test_the_due_claim_reads_the_due_index_in_its_order(app, tenants):
    with Statements() as claiming:
        checks.claim(checks.new_claim_token(), 5)
    (statement, parameters), _update = claiming.on_subscriptions()  # the due rows are locked, then updated
    plan = query_plan(statement, parameters)
    assert any("ix_subscriptions_due (status=? AND next_check_at<?)" in step for step in plan), plan


def test_checks_run_all_goes_on_past_a_page_with_nothing_to_check(app, tenants):
    """A page of paused and cancelled subscriptions ends nothing: the pass goes on to the next page."""
    app.config["CHECK_BATCH_SIZE"] = 10
    ids = sorted(checks.claim_page(checks.new_claim_token(), 200)[0], key=lambda claimed: claimed.id)
    ids = [claimed.id for claimed in ids]
    with write_transaction():
        db.session.execute(update(Subscription).values(claim_token=None, claimed_until=None))
        db.session.execute(update(Subscription).where(Subscription.id.in_(ids[:15]))
                           .values(status="paused", next_check_at=None))
        db.session.execute(update(Subscription).where(Subscription.id.in_(ids[15:30]))
                           .values(status="cancelled", next_check_at=None))
    summaries = list(worker.run_all())
    assert sum(summary.checked for summary in summaries) == 120 - 30
    assert [summary.checked for summary in summaries] == [10] * 9  # the three pages of 30 skipped yield none


@pytest.mark.postgresql_only(reason="reads PostgreSQL's EXPLAIN")
@pytest.mark.parametrize("claiming, index", [("due", "ix_subscriptions_due"), ("page", "pk_subscriptions"),
                                             ("page after an id", "pk_subscriptions"), ("one", "pk_subscriptions")])
def test_each_claim_reads_an_index_in_its_order_on_postgres(app, claiming, index):
    """No plan needs a sort: the index gives the order. (A few thousand rows with statistics, and sequential
    scans switched off: on a tiny table the planner would rightly read it all.)"""
    account, _key = accounts.create_account("Scale", "growth")
    insert_due_subscriptions(account.id, 3000)
    with db.engine.begin() as connection:
        connection.exec_driver_sql("ANALYZE subscriptions")
    first_id = checks.claim_page(checks.new_claim_token(), 1)[1]
    with write_transaction():
        db.session.execute(update(Subscription).values(claim_token=None, claimed_until=None))
    claim = {"due": lambda token: checks.claim(token, 10),
             "page": lambda token: checks.claim_page(token, 10),
             "page after an id": lambda token: checks.claim_page(token, 10, first_id),
             "one": lambda token: checks.claim_ids(token, [first_id])}[claiming]
    with Statements() as claiming_statements:
        claim(checks.new_claim_token())
    plans = []
    with db.engine.connect() as connection:
        cursor = connection.connection.cursor()
        cursor.execute("SET enable_seqscan = off")
        for statement, parameters in claiming_statements.on_subscriptions():
            cursor.execute("EXPLAIN " + statement, parameters)
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
        connection.rollback()
    assert plans and all("Sort" not in plan and "Seq Scan" not in plan for plan in plans), plans
    assert any(index in plan for plan in plans), plans
