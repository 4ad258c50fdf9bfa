"""Subscription export in CSV or JSON, as a stream of text chunks: shared by the API and the command line.

The database writes each row's text up to its metadata (the fields joined as they are, the timestamp formatted
in SQL) and hands it over with the metadata's JSON text, CHUNK_ROWS rows at a time through the session's DBAPI
connection: no ORM objects, no Row objects, no per-field Python. One scan of the joined chunk (C-speed string
methods) proves that no field of it needs quoting (CSV) or escaping (JSON); then each row is its head and its
metadata. A chunk that holds such a field is read again as stored values and formatted by the reference
(`format_csv_row`, `format_json_item`: csv.writer and json.dumps' format, which the fast path equals byte for
byte). Most of an export's time used to be those per-field Python calls.

Rows are read oldest first in keyset chunks, each in a read transaction of its own that ends before the chunk
is sent: memory stays bounded and no transaction stays open while a slow client reads."""
import csv
import io
import json
from dataclasses import dataclass
from itertools import chain, repeat

from app.common import isoformat
from app.database import driver_rows
from app.extensions import db
from app.sql_json import ISO_TIMESTAMP_SQL

COLUMNS = ("subscription_id", "entity_type", "network_id", "network_url", "status", "created_at", "custom_metadata")
CHUNK_ROWS = 10_000
_encode_string = json.encoder.encode_basestring_ascii

# --- the reference: one row's stored values to its CSV line or JSON item ----------------------------------------


def iso_created_at(value) -> str:
    """common.isoformat of a stored timestamp: a datetime, or its text as stored ('2026-01-01 12:00:00.123456',
    or without the fraction, or with fewer digits)."""
    if not isinstance(value, str):
        return isoformat(value)
    fraction = value[20:26]
    if not fraction.strip("0"):
        return f"{value[:10]}T{value[11:19]}Z"
    return f"{value[:10]}T{value[11:19]}.{fraction.ljust(3, '0')[:3]}Z"


def _is_empty(metadata) -> bool:
    return not metadata or metadata in ("{}", "null")


def _metadata_csv(metadata) -> str:
    """custom_metadata as one JSON text with non-ASCII characters as they are (the CSV column). Stored text
    without a \\u escape is already that text."""
    if _is_empty(metadata):
        return "{}"
    if isinstance(metadata, str):
        return metadata if "\\u" not in metadata else json.dumps(json.loads(metadata), ensure_ascii=False)
    return json.dumps(metadata, ensure_ascii=False)


def _metadata_json(metadata) -> str:
    """custom_metadata inside the JSON export: stored JSON text is used as it is."""
    if _is_empty(metadata):
        return "{}"
    return metadata if isinstance(metadata, str) else json.dumps(metadata)


def format_csv_row(row) -> str:
    """One line as csv.writer writes it (minimal quoting, CRLF); `custom_metadata` is one JSON column."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow((*row[:5], iso_created_at(row[5]), _metadata_csv(row[6])))
    return buffer.getvalue()


def format_json_item(row) -> str:
    """One item of `data`, as json.dumps of the item's dict would write it."""
    return (f'{{"subscription_id": {_encode_string(row[0])}, "entity_type": {_encode_string(row[1])}, '
            f'"network_id": {_encode_string(row[2])}, "network_url": {_encode_string(row[3])}, '
            f'"status": {_encode_string(row[4])}, "created_at": "{iso_created_at(row[5])}", '
            f'"custom_metadata": {_metadata_json(row[6])}}}')


# --- the fast path: the fixed columns written by the database, checked a chunk at a time ----------------------

@dataclass(frozen=True)
class _Dialect:
    """The SQL pieces that differ between SQLite and PostgreSQL."""
    param: str       # a named parameter in the driver's style, "{}" its name
    created_at: str  # iso_created_at of the column: the stored text on SQLite, a timestamp on PostgreSQL


_DIALECTS = {
    "sqlite": _Dialect(param=":{}", created_at=ISO_TIMESTAMP_SQL["sqlite"].format(column="created_at")),
    "postgresql": _Dialect(param="%({})s", created_at=ISO_TIMESTAMP_SQL["postgresql"].format(column="created_at")),
}
_TEXT_COLUMNS = ("id", "entity_type", "network_id", "network_url", "status")
_METADATA = "CAST(custom_metadata AS TEXT)"  # its JSON text (SQLite gives a number stored as JSON as a number)


def _csv_head(dialect: _Dialect) -> str:
    """A CSV line up to its metadata, each field as it is: 'id,entity_type,…,created_at,'."""
    return " || ',' || ".join((*_TEXT_COLUMNS, dialect.created_at)) + " || ','"


def _json_head(dialect: _Dialect) -> str:
    """A JSON item up to its metadata, each text between quotes as it is: '{"subscription_id": "…", …,
    "custom_metadata": '. The constant text between two fields is one literal (SQLite concatenates each `||`)."""
    parts = []
    for number, (name, value) in enumerate(zip(COLUMNS, (*_TEXT_COLUMNS, dialect.created_at))):
        parts += [f"""'{'{' if number == 0 else '", '}"{name}": "'""", value]
    return " || ".join([*parts, """'", "custom_metadata": '"""])


_CSV_HEAD_COMMAS = len(COLUMNS) - 1
_JSON_HEAD_QUOTES = 4 * (len(COLUMNS) - 1) + 2


def _plain_csv_heads(heads: str, count: int) -> bool:
    """No field of these `count` joined CSV heads needs quoting (csv.writer quotes a delimiter, a quote or a line
    break); a NUL, which SQLite's functions may stop at, is left to the reference as well."""
    return (heads.count(",") == _CSV_HEAD_COMMAS * count
            and not any(character in heads for character in '"\r\n\x00'))


def _plain_json_heads(heads: str, count: int) -> bool:
    """No text of these `count` joined JSON heads needs escaping: printable ASCII without '"' or '\\'
    (encode_basestring_ascii escapes everything else)."""
    return (heads.isascii() and heads.isprintable() and "\\" not in heads
            and heads.count('"') == _JSON_HEAD_QUOTES * count)


def _csv_metadata_field(metadata) -> str:
    """The CSV field of stored metadata that is not '{}', quoted as csv.writer quotes it."""
    field = _metadata_csv(metadata)
    if '"' in field or "," in field or "\n" in field or "\r" in field:
        return '"' + field.replace('"', '""') + '"'
    return field


def _csv_text(heads, metadata) -> str:
    """The chunk's lines, each its head, its metadata field and CRLF, joined without a string per line."""
    fields = [value if value == "{}" else _csv_metadata_field(value) for value in metadata]
    return "".join(chain.from_iterable(zip(heads, fields, repeat("\r\n"))))


_EMPTY_METADATA = frozenset((None, "", "{}", "null"))  # _is_empty of stored JSON text


def _json_text(heads, metadata) -> str:
    """The chunk's items, each its head, its metadata and '}', joined by ','."""
    values = ["{}" if value in _EMPTY_METADATA else value for value in metadata]
    return "".join(chain.from_iterable(zip(heads, values, repeat("},"))))[:-1]


@dataclass(frozen=True)
class _Format:
    head: object       # dialect -> SQL of the row's text up to its metadata
    plain: object      # (joined heads, count) -> whether every head is exactly the reference's
    text: object       # (heads, stored metadata) -> the chunk's text
    first_id: object   # a plain head -> the subscription id in it
    reference: object  # stored row -> its text (a CSV line, a JSON item)
    separator: str     # between two rows' texts


_FORMATS = {
    "csv": _Format(_csv_head, _plain_csv_heads, _csv_text, lambda head: head[:head.index(",")], format_csv_row, ""),
    "json": _Format(_json_head, _plain_json_heads, _json_text, lambda head: head[21:head.index('"', 21)],
                    format_json_item, ","),
}


def _window_sql(dialect: _Dialect, columns: str, status: str, after) -> str:
    """The next CHUNK_ROWS rows of the account after `after` (created_at, id), oldest first. A row-value
    comparison, so the index range starts right after the last row (an OR of the two cases made SQLite rescan
    the account from its first row for every chunk)."""
    conditions = [f"account_id = {dialect.param.format('account_id')}"]
    if status != "all":
        conditions.append(f"status = {dialect.param.format('status')}")
    if after is not None:
        conditions.append(f"(created_at, id) > ({dialect.param.format('after_created_at')}, "
                          f"{dialect.param.format('after_id')})")
    return (f"SELECT {columns} FROM subscriptions WHERE {' AND '.join(conditions)} "
            f"ORDER BY created_at, id LIMIT {CHUNK_ROWS}")


def _fetch(sql: str, params: dict) -> list:
    """Plain tuples from the session's own DBAPI connection (its transaction): no Row objects."""
    return driver_rows(db.session.connection(), sql, params)


def _formatted_chunks(account_id: str, status: str, export_format: str):
    """(text, row count) of each chunk of the account's subscriptions matching `status` (CSV lines or JSON items
    joined by ','), oldest first, CHUNK_ROWS rows at a time, each chunk read in a transaction of its own."""
    dialect, form = _DIALECTS[db.session.get_bind().dialect.name], _FORMATS[export_format]
    after = None
    while True:
        text, count, last_id = _formatted_chunk(dialect, form, account_id, status, after)
        if count:
            stored_created_at = _fetch(f"SELECT created_at FROM subscriptions WHERE id = {dialect.param.format('id')}",
                                       {"id": last_id})[0][0]
        db.session.rollback()
        if not count:
            return
        yield text, count
        if count < CHUNK_ROWS:
            return
        after = (stored_created_at, last_id)


def _formatted_chunk(dialect: _Dialect, form: _Format, account_id: str, status: str, after):
    """(text, row count, id of the last row) of the next chunk after `after`. When a head is not plain, the
    chunk is read again as stored values and formatted by the reference."""
    params = {"account_id": account_id, "status": status,
              **({"after_created_at": after[0], "after_id": after[1]} if after else {})}
    rows = _fetch(_window_sql(dialect, f"{form.head(dialect)}, {_METADATA}", status, after), params)
    if not rows:
        return "", 0, None
    heads, metadata = zip(*rows)
    if form.plain("".join(heads), len(heads)):
        return form.text(heads, metadata), len(heads), form.first_id(heads[-1])
    stored = ", ".join((*_TEXT_COLUMNS, "created_at", _METADATA))
    rows = _fetch(_window_sql(dialect, stored, status, after), params)
    return form.separator.join(map(form.reference, rows)), len(rows), rows[-1][0] if rows else None


def csv_chunks(account_id: str, status: str):
    """A header, then one line per subscription."""
    yield ",".join(COLUMNS) + "\r\n"
    for text, _count in _formatted_chunks(account_id, status, "csv"):
        yield text


def json_chunks(account_id: str, status: str):
    """`{data: [...], total}` written a chunk of items at a time."""
    yield '{"data": ['
    total = 0
    for text, count in _formatted_chunks(account_id, status, "json"):
        yield ("," if total else "") + text
        total += count
    yield f'], "total": {total}}}'


def export(account_id: str, status: str, export_format: str):
    """(text chunks, media type) of the account's subscriptions in `export_format` (`csv` or `json`)."""
    if export_format == "json":
        return json_chunks(account_id, status), "application/json"
    return csv_chunks(account_id, status), "text/csv"
