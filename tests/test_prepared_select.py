"""PreparedSelect (app/database.py): the hot reads' statements, run on the driver with the statement's own
bind and result processing; `one_fetch` pages reach Python from SQLite in one step, as the same rows."""
from datetime import datetime

import pytest
from sqlalchemy import Float, LargeBinary, Numeric, bindparam, cast, literal, select

from app import database
from app.database import PreparedSelect
from app.extensions import db
from app.models import Event, Subscription
from conftest import make_tenant

ODD_METADATA = {"quote": 'say "hi"\\', "unicode": "Zoë 東京 🚀", "nested": {"list": [1, 2.5, None, True]},
                "big": 2**63 - 1}


def _add_subscriptions(account_id, count):
    for n in range(count):
        moment = datetime(2026, 1, 1, 12, 0, n % 60, 123456)  # twos share a second: the id breaks the tie
        db.session.add(Subscription(
            id=f"sub_prepared_{n:03d}", account_id=account_id, entity_type="contact", network_id=f"person-{n}",
            network_url=f"https://www.linkedin.com/in/person-{n}", status="active",
            custom_metadata=ODD_METADATA if n % 2 else {}, created_at=moment, updated_at=moment,
            last_checked_at=None if n % 3 else moment, next_check_at=moment))
    db.session.commit()


def _page_statement():
    return (select(Subscription.id, Subscription.network_id, Subscription.custom_metadata,
                   Subscription.last_checked_at, Subscription.created_at, Subscription.check_count)
            .where(Subscription.account_id == bindparam("account_id"))
            .order_by(Subscription.created_at.desc(), Subscription.id.desc())
            .limit(bindparam("limit")).offset(bindparam("offset")))


@pytest.mark.parametrize("limit,offset", [(20, 0), (7, 13), (100, 0), (5, 200)])
def test_one_fetch_pages_are_the_rows_of_the_plain_statement_in_order(app, limit, offset):
    tenant = make_tenant(app, "Prepared")
    _add_subscriptions(tenant.account_id, 70)
    parameters = {"account_id": tenant.account_id, "limit": limit, "offset": offset}
    plain = PreparedSelect(_page_statement()).rows(parameters)
    in_one_fetch = PreparedSelect(_page_statement(), one_fetch=True).rows(parameters)
    orm = db.session.execute(_page_statement(), parameters).all()

    assert in_one_fetch == plain == [tuple(row) for row in orm]
    assert len(in_one_fetch) == max(0, min(limit, 70 - offset))
    if in_one_fetch:
        first = in_one_fetch[0]
        assert isinstance(first.created_at, datetime) and first.check_count == 0
        assert {row.custom_metadata["unicode"] for row in in_one_fetch if row.custom_metadata} <= {"Zoë 東京 🚀"}


@pytest.mark.sqlite_only(reason="the one-step fetch is SQLite's; other drivers hand a result over at once")
def test_a_one_fetch_page_reaches_python_as_one_row(app, monkeypatch):
    tenant = make_tenant(app, "Prepared")
    _add_subscriptions(tenant.account_id, 30)
    fetched = []
    real_driver_rows = database.driver_rows

    def counting(connection, sql, parameters):
        found = real_driver_rows(connection, sql, parameters)
        fetched.append(len(found))
        return found

    monkeypatch.setattr(database, "driver_rows", counting)
    rows = PreparedSelect(_page_statement(), one_fetch=True).rows(
        {"account_id": tenant.account_id, "limit": 20, "offset": 0})
    assert len(rows) == 20 and fetched == [1]


@pytest.mark.sqlite_only(reason="SQLite's JSON writes REAL with 15 digits and has no BLOB")
@pytest.mark.parametrize("column", [cast(literal(0.1), Float).label("ratio"),
                                    cast(literal(0.1), Numeric(10, 4)).label("amount"),
                                    cast(literal(b"\x00"), LargeBinary).label("raw"),
                                    Event.body])  # compressed: a TypeDecorator over LargeBinary
def test_one_fetch_refuses_columns_sqlite_json_would_change(app, column):
    with pytest.raises(ValueError, match="REAL or BLOB"):
        PreparedSelect(select(Subscription.id, column), one_fetch=True).rows()
