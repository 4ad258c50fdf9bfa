"""Subscriptions from a CRM export (CSV): find the URL or id column, turn each row into a create item,
and send the items in chunks through the bulk-create rules. Re-running is safe: what exists already is
reported as present, not as a failure."""
import csv
import io
import re
from dataclasses import dataclass, field
from itertools import islice

from flask import current_app

from app.errors import DuplicateSubscription, ServiceError, ValidationFailed
from app.services import subscriptions
from app.services.entities import parse_network_url

CHUNK_SIZE = 100  # the bulk-create cap
# Header names (normalised: lower case, runs of other characters as `_`) tried in this order.
ID_HEADERS = ("network_url", "linkedin_url", "profile_url", "linkedin_profile_url", "linkedin_profile",
              "linkedin", "url", "network_id", "linkedin_id")
TYPE_HEADERS = ("entity_type", "type")
DELIMITERS = ",;\t"


class ImportRefused(ServiceError):
    """The file cannot be imported at all (no usable column, unreadable)."""


def header_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", (name or "").strip().lower()).strip("_")


def read_rows(path: str):
    """(header, rows as dicts) of a CSV file; the delimiter (`,`, `;` or tab) is detected, a BOM skipped."""
    with open(path, newline="", encoding="utf-8-sig") as file:
        return _parse(file)


def rows_from_text(text: str):
    """(header, rows) of pasted or uploaded text: a CSV with a header, or a bare list of profile URLs or ids,
    one a line (read as a `url` column)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ImportRefused("Paste profile URLs (one a line) or a CSV with a header, or choose a file.")
    if _looks_like_profile(lines[0]):
        lines.insert(0, "url")
    return _parse(io.StringIO("\n".join(lines)))


def _looks_like_profile(line: str) -> bool:
    return "/" in line and not any(delimiter in line for delimiter in DELIMITERS)


def _parse(file):
    sample = file.read(64 * 1024)
    file.seek(0)
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=DELIMITERS)
    except csv.Error:
        dialect = csv.excel
    reader = csv.DictReader(file, dialect=dialect)
    rows = list(reader)
    return reader.fieldnames or [], rows


def _find(header, wanted: str, what: str):
    by_key = {header_key(name): name for name in header}
    if header_key(wanted) not in by_key:
        raise ImportRefused(f"The file has no {what} column '{wanted}'. Its columns: {', '.join(header)}.")
    return by_key[header_key(wanted)]


def find_id_column(header, wanted=None) -> str:
    """The column holding profile URLs or ids: `wanted`, else the first known header name, else the first
    header mentioning `linkedin` or `url`."""
    if wanted:
        return _find(header, wanted, "id or URL")
    by_key = {header_key(name): name for name in header}
    for key in ID_HEADERS:
        if key in by_key:
            return by_key[key]
    for name in header:
        if "linkedin" in header_key(name) or "url" in header_key(name):
            return name
    raise ImportRefused(f"No column of profile URLs or ids found (looked for {', '.join(ID_HEADERS)}); "
                        "name it with --column.")


@dataclass
class Plan:
    """Which columns of the file mean what."""
    id_column: str
    type_column: str = None
    metadata_columns: list = field(default_factory=list)

    @classmethod
    def for_header(cls, header, id_column=None, type_column=None, metadata_columns=()):
        by_key = {header_key(name): name for name in header}
        found_type = (_find(header, type_column, "entity_type") if type_column
                      else next((by_key[key] for key in TYPE_HEADERS if key in by_key), None))
        return cls(find_id_column(header, id_column), found_type,
                   [_find(header, name, "metadata") for name in metadata_columns])


def _cell(row: dict, column) -> str:
    return (row.get(column) or "").strip() if column else ""


def item_for_row(row: dict, plan: Plan) -> dict:
    """The bulk-create item a row stands for. A URL without a scheme gets `https://`; the entity type
    comes from the type column, else from the URL's path."""
    value = _cell(row, plan.id_column)
    if not value:
        raise ValidationFailed(plan.id_column, f"The {plan.id_column} cell is empty.")
    item = {"custom_metadata": {name: _cell(row, name) for name in plan.metadata_columns if _cell(row, name)}}
    entity_type = _cell(row, plan.type_column).lower()
    if "/" in value:
        item["network_url"] = value if "://" in value else "https://" + value
        entity_type = entity_type or parse_network_url(item["network_url"], current_app.config["NETWORK_DOMAIN"])[0]
    else:
        item["network_id"] = value
    if not entity_type:
        raise ValidationFailed("entity_type", "A bare id needs an entity_type column (contact or company).", value)
    item["entity_type"] = entity_type
    return item


@dataclass
class ImportReport:
    rows: int = 0
    created: int = 0
    present: int = 0
    rejected: list = field(default_factory=list)  # (row, reason)


def _chunks(rows, size):
    iterator = iter(rows)
    while chunk := list(islice(iterator, size)):
        yield chunk


def import_rows(account_id: str, rows, plan: Plan, load_item, dry_run=False, on_progress=None) -> ImportReport:
    """Import `rows` in chunks of CHUNK_SIZE; `on_progress(report)` after each chunk."""
    report = ImportReport()
    for chunk in _chunks(rows, CHUNK_SIZE):
        _import_chunk(account_id, chunk, plan, load_item, dry_run, report)
        if on_progress:
            on_progress(report)
    return report


def _import_chunk(account_id, chunk, plan, load_item, dry_run, report):
    items, sources, rejected = [], [], []  # sources and rejected: (position in the chunk, row)
    for position, row in enumerate(chunk):
        try:
            items.append(item_for_row(row, plan))
            sources.append((position, row))
        except ServiceError as error:
            rejected.append((position, row, error.message))
    report.rows += len(chunk)
    if items:
        result = subscriptions.bulk_create(account_id, items, load_item, dry_run=dry_run)
        report.created += len(result.created)
        for error in result.errors:
            if error["code"] == DuplicateSubscription.code:
                report.present += 1
            else:
                rejected.append((*sources[error["index"]], error["error"]))
    # in the order of the file, whichever rule refused each row
    report.rejected.extend((row, reason) for _, row, reason in sorted(rejected, key=lambda entry: entry[0]))
