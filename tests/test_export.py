"""GET /subscriptions/export (interface spec, contract §3): CSV and JSON, status filter, streamed."""
import csv
import io
import json
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import insert, select

from app.common import isoformat
from app.extensions import db
from app.models import Subscription
from app.services import export
from app.services.export import _metadata_csv, format_json_item, iso_created_at

COLUMNS = ["subscription_id", "entity_type", "network_id", "network_url", "status", "created_at",
           "custom_metadata"]


def _create(tenant, network_id, entity_type="contact"):
    response = tenant.post("/subscriptions", json={"entity_type": entity_type, "network_id": network_id})
    assert response.status_code == 201
    return response.get_json()


def _csv_rows(response):
    return list(csv.reader(io.StringIO(response.get_data(as_text=True))))


@pytest.fixture
def three(alice):
    """An active contact, a paused company and a cancelled contact."""
    active = _create(alice, "jane-doe")
    paused = _create(alice, "acme", "company")
    cancelled = _create(alice, "gone-person")
    alice.post(f"/subscriptions/{paused['id']}/pause")
    alice.delete(f"/subscriptions/{cancelled['id']}")
    return {"active": active, "paused": paused, "cancelled": cancelled}


def test_csv_is_the_default_with_header_and_attachment(alice, three):
    response = alice.get("/subscriptions/export")
    assert response.status_code == 200
    assert response.mimetype == "text/csv"
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert response.headers["Content-Disposition"] == 'attachment; filename="subscriptions.csv"'
    rows = _csv_rows(response)
    assert rows[0] == COLUMNS
    assert len(rows) == 4
    by_id = {row[0]: dict(zip(COLUMNS, row)) for row in rows[1:]}
    active = three["active"]
    assert by_id[active["id"]] == {"subscription_id": active["id"], "entity_type": "contact",
                                   "network_id": "jane-doe", "network_url": "https://www.linkedin.com/in/jane-doe",
                                   "status": "active", "created_at": active["created_at"],
                                   "custom_metadata": "{}"}
    assert by_id[three["paused"]["id"]]["status"] == "paused"
    assert by_id[three["cancelled"]["id"]]["status"] == "cancelled"


def test_json_export_has_data_and_total(alice, three):
    response = alice.get("/subscriptions/export?format=json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.headers["Content-Disposition"] == 'attachment; filename="subscriptions.json"'
    body = json.loads(response.get_data(as_text=True))
    assert set(body) == {"data", "total"}
    assert body["total"] == 3 == len(body["data"])
    assert all(list(item) == COLUMNS for item in body["data"])
    assert {item["subscription_id"] for item in body["data"]} == {s["id"] for s in three.values()}


@pytest.mark.parametrize("status, expected", [("active", ["active"]), ("paused", ["paused"]),
                                              ("cancelled", ["cancelled"]),
                                              ("all", ["active", "paused", "cancelled"])])
def test_status_filter(alice, three, status, expected):
    rows = _csv_rows(alice.get(f"/subscriptions/export?status={status}"))
    assert sorted(row[0] for row in rows[1:]) == sorted(three[name]["id"] for name in expected)
    body = json.loads(alice.get(f"/subscriptions/export?format=json&status={status}").get_data(as_text=True))
    assert body["total"] == len(expected)


def test_export_carries_custom_metadata_as_one_json_column(alice):
    metadata = {"crm_id": "42", "owner": "Zoë, sales"}
    created = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane-doe",
                                                 "custom_metadata": metadata}).get_json()
    rows = _csv_rows(alice.get("/subscriptions/export"))
    assert json.loads(dict(zip(COLUMNS, rows[1]))["custom_metadata"]) == metadata
    body = json.loads(alice.get("/subscriptions/export?format=json").get_data(as_text=True))
    assert body["data"][0]["subscription_id"] == created["id"]
    assert body["data"][0]["custom_metadata"] == metadata


def test_empty_export_is_a_header_or_an_empty_list(alice):
    assert _csv_rows(alice.get("/subscriptions/export")) == [COLUMNS]
    assert json.loads(alice.get("/subscriptions/export?format=json").get_data(as_text=True)) == {"data": [],
                                                                                                 "total": 0}


def test_export_holds_only_the_callers_subscriptions(alice, bob):
    _create(bob, "bobs-contact")
    mine = _create(alice, "alices-contact")
    rows = _csv_rows(alice.get("/subscriptions/export"))
    assert [row[0] for row in rows[1:]] == [mine["id"]]


def test_export_walks_every_row_across_chunks_with_equal_created_at(alice, monkeypatch):
    monkeypatch.setattr(export, "CHUNK_ROWS", 4)
    body = alice.post("/subscriptions/bulk", json={"subscriptions": [
        {"entity_type": "contact", "network_id": f"person-{n:02d}"} for n in range(11)]}).get_json()
    ids = [item["id"] for item in body["subscriptions"]]  # one bulk call: one created_at for all
    rows = _csv_rows(alice.get("/subscriptions/export"))
    assert sorted(row[0] for row in rows[1:]) == sorted(ids)
    assert len(rows) == 12
    exported = json.loads(alice.get("/subscriptions/export?format=json").get_data(as_text=True))
    assert exported["total"] == 11 and len({item["subscription_id"] for item in exported["data"]}) == 11


@pytest.mark.parametrize("export_format, content_type", [("csv", "text/csv; charset=utf-8"),
                                                         ("json", "application/json")])
def test_head_answers_the_get_s_headers_without_reading_a_row(alice, three, monkeypatch, export_format, content_type):
    """A HEAD runs no export (contract §8's bulk class is for the GET, README: Rate limits)."""
    reads = []
    monkeypatch.setattr(export, "_fetch", lambda *args: reads.append(args))
    path = f"/subscriptions/export?format={export_format}"
    head = alice.request("HEAD", path)
    assert head.status_code == 200 and head.data == b"" and reads == []
    assert head.headers["Content-Type"] == content_type
    assert head.headers["Content-Disposition"] == f'attachment; filename="subscriptions.{export_format}"'
    assert alice.request("HEAD", "/subscriptions/export?format=xml").status_code == 400  # as the GET answers


def test_export_is_streamed(alice, three):
    response = alice.get("/subscriptions/export", buffered=False)
    assert response.is_streamed
    response.close()


def test_csv_quotes_nothing_dangerous_out_of_ids(alice):
    """Ids can only hold letters, digits, '-', '_' and %-escapes, so no cell can start a formula."""
    response = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "=cmd|' /C calc'!A0"})
    assert response.status_code == 400
    rows = _csv_rows(alice.get("/subscriptions/export"))
    assert rows == [COLUMNS]


@pytest.mark.parametrize("query, field", [("format=xml", "format"), ("format=CSV", "format"),
                                          ("status=deleted", "status"), ("status=", "status")])
def test_bad_export_parameters_are_400(alice, query, field):
    response = alice.get(f"/subscriptions/export?{query}")
    assert response.status_code == 400
    assert response.get_json()["error"] == "VALIDATION_ERROR"
    assert response.get_json()["details"]["field"] == field


# --- the fast formatting equals the plain one ------------------------------------------------------

AWKWARD_TEXTS = ["plain-id", "with,comma", 'with"quote', "with\nnewline", "with\rreturn", "zoë-ünïcode", "日本",
                 "back\\slash", "control\x01char", "tab\there", "", "😀"]
AWKWARD_METADATA = [{}, None, {"crm_id": "42"}, {"owner": "Zoë, sales"}, {"note": 'say "hi"\non two lines'},
                    {"escaped": "\\u00e9 as text"}, {"control": "\x1f"}, {"nested": {"list": [1, "ü", None]}}, [1, 2],
                    "text", 5]


def _reference_export(account_id):
    """The export as csv.writer and json.dumps write it from the stored subscriptions, oldest first."""
    stored = db.session.scalars(select(Subscription).where(Subscription.account_id == account_id)
                                .order_by(Subscription.created_at, Subscription.id)).all()
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    items = []
    for row in stored:
        fields = [row.id, row.entity_type, row.network_id, row.network_url, row.status, isoformat(row.created_at)]
        metadata = row.custom_metadata or {}
        writer.writerow([*fields, json.dumps(metadata, ensure_ascii=False)])
        items.append(json.dumps(dict(zip(COLUMNS, [*fields, metadata]))))
    return buffer.getvalue(), f'{{"data": [{",".join(items)}], "total": {len(items)}}}'


def test_export_bytes_equal_csv_writer_and_json_dumps_with_awkward_values(alice, monkeypatch):
    """Every field may hold what CSV quotes or JSON escapes (rows written past the API's validation), chunks mix
    plain rows and such rows, timestamps have all their fraction forms."""
    monkeypatch.setattr(export, "CHUNK_ROWS", 5)
    start = datetime(2026, 3, 1, 12, 0, 0)
    fractions = [0, 123456, 999999, 500, 1000]
    rows = []
    for n in range(60):
        row = {"id": f"sub_{n:04d}", "account_id": alice.account_id, "entity_type": "contact",
               "network_id": f"person-{n}", "network_url": f"https://www.linkedin.com/in/person-{n}",
               "status": ("active", "paused", "cancelled")[n % 3], "custom_metadata": AWKWARD_METADATA[n % 11],
               "created_at": start + timedelta(seconds=n // 2, microseconds=fractions[n % 5])}
        if n % 4 == 0:  # every other chunk keeps its fields plain
            awkward = AWKWARD_TEXTS[n // 4 % len(AWKWARD_TEXTS)]
            field = ("network_id", "network_url", "entity_type", "status", "id")[n // 4 % 5]
            row[field] = f"{row[field]}{awkward}" if field in ("id", "network_id") else awkward[:10]  # varchar(10)
        rows.append({**row, "updated_at": row["created_at"]})
    db.session.execute(insert(Subscription), rows)
    db.session.commit()
    expected_csv, expected_json = _reference_export(alice.account_id)
    assert alice.get("/subscriptions/export").get_data(as_text=True) == expected_csv
    assert alice.get("/subscriptions/export?format=json").get_data(as_text=True) == expected_json
    assert json.loads(expected_json)["total"] == 60 == len(_csv_rows(alice.get("/subscriptions/export"))) - 1


moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1))


@given(moments)
def test_created_at_is_formatted_from_any_stored_form_like_isoformat(moment):
    expected = isoformat(moment)
    assert iso_created_at(moment) == expected                                  # PostgreSQL: a datetime
    assert iso_created_at(moment.strftime("%Y-%m-%d %H:%M:%S.%f")) == expected  # SQLAlchemy's SQLite text
    postgres_text = str(moment)  # no fraction when zero, else six digits
    assert iso_created_at(postgres_text.rstrip("0") if "." in postgres_text else postgres_text) == expected


metadata = st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3)


@given(st.lists(st.text(max_size=12), min_size=5, max_size=5), moments, metadata)
def test_json_items_and_csv_metadata_equal_json_dumps(texts, moment, custom_metadata):
    expected = dict(zip(COLUMNS, [*texts, isoformat(moment), custom_metadata]))
    for stored_metadata in (custom_metadata, json.dumps(custom_metadata)):  # parsed (PostgreSQL) or text
        row = (*texts, moment, stored_metadata)
        assert json.loads(format_json_item(row)) == expected
        assert format_json_item(row) == json.dumps(expected)
        assert json.loads(_metadata_csv(stored_metadata)) == custom_metadata
