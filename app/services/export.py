"""Subscription export in CSV or JSON, as a stream of text chunks: shared by the API and the command line."""
import csv
import io
import json

from app.common import isoformat
from app.services.subscriptions import EXPORT_COLUMNS, export_rows

CSV_FLUSH_ROWS = 500


def _values(row) -> list:
    return [*row[:5], isoformat(row[5]), row[6] or {}]


def csv_chunks(rows):
    """A header, then one line per row; `custom_metadata` is one JSON column."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_COLUMNS)
    for count, row in enumerate(rows, 1):
        *values, custom_metadata = _values(row)
        writer.writerow([*values, json.dumps(custom_metadata, ensure_ascii=False)])
        if count % CSV_FLUSH_ROWS == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def json_chunks(rows):
    """`{data: [...], total}` written item by item."""
    yield '{"data": ['
    total = 0
    for row in rows:
        yield ("," if total else "") + json.dumps(dict(zip(EXPORT_COLUMNS, _values(row))))
        total += 1
    yield f'], "total": {total}}}'


def export(account_id: str, status: str, export_format: str):
    """(text chunks, media type) of the account's subscriptions in `export_format` (`csv` or `json`)."""
    rows = export_rows(account_id, status)
    if export_format == "json":
        return json_chunks(rows), "application/json"
    return csv_chunks(rows), "text/csv"
