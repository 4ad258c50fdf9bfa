"""Subscriptions from a CRM export (CSV): find the URL or id column, turn each row into a create item,
and send the items in chunks through the bulk-create rules. Re-running is safe: what exists already is
reported as present, not as a failure."""
import codecs
import csv
import io
import re
from dataclasses import dataclass, field, replace
from itertools import islice, zip_longest
from typing import Optional

from flask import current_app

from app.errors import DuplicateSubscription, ServiceError, ValidationFailed
from app.services import subscriptions
from app.services.entities import ENTITY_TYPES, parse_network_url, read_network_url

CHUNK_SIZE = 100  # the bulk-create cap
# Header names (normalised: lower case, runs of other characters as `_`) tried in this order.
ID_HEADERS = ("network_url", "linkedin_url", "profile_url", "linkedin_profile_url", "linkedin_profile",
              "linkedin", "url", "network_id", "linkedin_id")
TYPE_HEADERS = ("entity_type", "type")
DELIMITERS = ",;\t"


class ImportRefused(ServiceError):
    """The file cannot be imported at all (no usable column, unreadable)."""


class NoIdColumn(ImportRefused):
    """No header names a column of profile URLs or ids. What to do depends on where the file came in: the command
    line also has `--column` (`or_else`); the dashboard, which has no such option, was told to use it (walk)."""

    def __init__(self, or_else=""):
        super().__init__(f"No column of profile URLs or ids found (looked for {', '.join(ID_HEADERS)}): rename the "
                         f"header of that column to url{or_else}.")


def header_key(name: str) -> str:
    """A header as it is compared: lower case, every run of other characters than letters and digits (of any
    script: 'Компания' stays itself) one underscore."""
    return re.sub(r"[\W_]+", "_", (name or "").strip().lower()).strip("_")


@dataclass(frozen=True)
class FileForm:
    """How a file was written: its delimiter, whether it starts with a UTF-8 BOM (Excel's *CSV UTF-8*), and whether
    with Excel's `sep=;` line naming the delimiter (so that Excel splits it whatever the system's list separator)."""
    delimiter: str = ","
    bom: bool = False
    sep_line: bool = False


def read_rows(path: str):
    """(header, rows as dicts, FileForm) of a CSV file (`_rows_of_csv`), read as an upload is (`text_of_upload`)."""
    with open(path, "rb") as file:
        return rows_of_upload(file.read())


def rows_of_upload(data: bytes):
    """(header, rows, FileForm) of a file's bytes (`text_of_upload`, `rows_from_text`)."""
    header, rows, form = rows_from_text(text_of_upload(data), uploaded=True)
    return header, rows, replace(form, bom=data.startswith(codecs.BOM_UTF8))


def text_of_upload(data: bytes) -> str:
    """An uploaded file's text: UTF-8, a BOM skipped, as the CLI reads files. Another encoding is refused, not
    read with U+FFFD in place of every accented letter; the refusal says where (the CLI said a position in the chunk
    it had read: operability walk)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        byte = error.start + 1 + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)  # the BOM's too
        line = len(_LINE_ENDS.findall(error.object[:error.start].decode("utf-8"))) + 1  # CR alone ends one too
        raise ImportRefused(f"The file is not UTF-8 text (byte {byte} is not, on line {line}): save it as CSV UTF-8 "
                            "and choose it again.") from None


def rows_from_text(text: str, uploaded=False):
    """(header, rows, FileForm) of pasted or `uploaded` text, read as a file is (`_rows_of_csv`). It was cut into
    lines first, its blank ones dropped, those inside a quoted cell too (review)."""
    if not text.strip():  # (an empty file was told to paste a list or choose a file: walk)
        raise ImportRefused(EMPTY_FILE if uploaded else "Paste profile URLs (one a line) or a CSV with a header, or "
                                                        "choose a file.")
    return _rows_of_csv(text)


def _rows_of_csv(text: str):
    """(header, rows, FileForm) of a CSV with a header, or of a bare list of profile URLs, one a line (read as a `url`
    column: its first URL was taken for the header, and never imported: operability walk). Blank lines before the header
    are skipped, and so is Excel's `sep=;` line, whose delimiter is then the file's. Lines may end in CR alone (Excel's
    "CSV (Macintosh)"), read as universal newlines are: the csv module refused such a file (walk)."""
    text = _BLANK_LINES_FIRST.sub("", _LINE_ENDS.sub("\n", text))
    first_line = text.split("\n", 1)[0].strip()
    delimiter = None
    if len(first_line) == 5 and first_line.lower().startswith("sep=") and first_line[4] in DELIMITERS:
        delimiter, text = first_line[4], text.split("\n", 1)[1] if "\n" in text else ""
        text = _BLANK_LINES_FIRST.sub("", text)  # blank lines after it too: the file was refused as empty
        first_line = text.split("\n", 1)[0].strip()
    if not first_line:
        raise ImportRefused(EMPTY_FILE)
    if _is_profile_url(first_line) or ("://" in first_line and not any(mark in first_line for mark in DELIMITERS)):
        text = "url\n" + text  # (a URL of another site: a row the import rejects, not a header)
    header, rows, read_with = _parse(io.StringIO(text), delimiter)
    return header, rows, FileForm(read_with, sep_line=delimiter is not None)


EMPTY_FILE = "The file is empty: it has no header line and no rows."
_BLANK_LINES_FIRST = re.compile(r"\A(?:[^\S\n]*\n)+")  # lines of any white space
_LINE_ENDS = re.compile(r"\r\n?|\n")


def _is_profile_url(text: str) -> bool:
    """A profile URL of the network, with or without its scheme (a header such as `LinkedIn/URL` is none: review)."""
    text = text.strip().strip('"')
    try:  # its id read too: `…/in/first,Acme` is a row of two cells, not one URL
        read_network_url(text if "://" in text else "https://" + text, current_app.config["NETWORK_DOMAIN"])
    except ValidationFailed:
        return False
    return True


def _parse(file, delimiter=None):
    dialect = type("Named", (csv.excel,), {"delimiter": delimiter}) if delimiter else _sniffed(file)
    reader = csv.reader(file, dialect=dialect)  # not a DictReader: it skips empty lines uncounted
    rows, where = [], "its header"
    try:
        header = next(reader, [])  # read here: its errors are the header's
        last, last_lines = where, (0, reader.line_num)  # the last record read, and the lines it spans
        where = "row 1"
        for number, cells in enumerate(reader, 1):  # as a spreadsheet numbers them: blank rows too (review)
            last, last_lines = where, (last_lines[1], reader.line_num)
            read = _Row(dict(zip_longest(header, cells[:len(header)])), cells[len(header):], number)
            if not read.is_blank:  # empty, spaces or delimiters alone (it was a row refused as empty: walk)
                rows.append(read)
            where = f"row {number + 1}"
    except csv.Error as error:  # e.g. a field beyond the csv module's 131,072 characters
        raise ImportRefused(f"The file cannot be read as CSV at {where}: {error}.") from None
    if _opens_a_quote_never_closed(file, dialect, *last_lines):
        raise ImportRefused(f"The file cannot be read as CSV: {last} opens a quoted cell (\") that is never closed, "
                            "so every line after it was read into that one cell: close the quote, or remove it.")
    urls = [name for name in header if "://" in (name or "") or _is_profile_url(name or "")]
    if urls:  # a first row of data, which would be lost as the header
        raise ImportRefused(f"The first line holds a URL ({urls[0]}), not the names of the columns: add a first line "
                            "naming them (e.g. url,owner), or give a bare list of URLs, one a line.")
    return header, rows, dialect.delimiter


def _opens_a_quote_never_closed(file, dialect, first: int, end: int) -> bool:
    """Whether the last record, on lines [first, end), runs over a line break to the end of the file inside a quoted
    cell: the csv module reads such a cell to the end of the file and gives it back as one, every row after the
    stray quote in it (they were neither imported nor counted, and the run exited 0: walk)."""
    if end - first < 2:
        return False
    file.seek(0)
    lines = list(islice(file, first, end))
    try:
        for _cells in csv.reader(lines, dialect=dialect, strict=True):
            pass
    except csv.Error as error:
        return "unexpected end of data" in str(error)
    return False


def _sniffed(file):
    sample = file.read(64 * 1024)
    file.seek(0)
    # without its blank lines: a few lines of spaces (no delimiter) made no delimiter's count consistent enough
    sample = "\n".join(line for line in sample.split("\n") if line.strip())
    try:
        return csv.Sniffer().sniff(sample, delimiters=DELIMITERS)
    except csv.Error:
        return csv.excel


class _Row(dict):
    """A row's cells by header name, and the cells past the header's columns, which no name reads: `overflow` as
    read, but for the empty ones it ends with (a trailing delimiter), and `extra_cells`, the filled ones among them.
    `number`: its place under the header, 1 the first."""

    def __init__(self, cells: dict, overflow=(), number=None):
        super().__init__(cells)
        self.number = number
        self.overflow = list(overflow)
        while self.overflow and not self.overflow[-1].strip():
            self.overflow.pop()

    @property
    def extra_cells(self) -> list:
        return [cell for cell in self.overflow if cell.strip()]

    @property
    def is_blank(self) -> bool:
        return not self.overflow and not any((cell or "").strip() for cell in self.values())


def _find(header, wanted: str, what: str):
    if wanted in header:  # as named, before any other header that reads alike
        return wanted
    by_key = {header_key(name): name for name in header}
    if header_key(wanted) not in by_key:
        raise ImportRefused(f"The file has no {what} column '{wanted}'. Its columns: {', '.join(header)}.")
    return by_key[header_key(wanted)]


def find_id_column(header, wanted=None) -> str:
    """The column holding profile URLs or ids: `wanted`, else the first known header name, else the first
    header mentioning `linkedin`, else the first mentioning `url` (taken first, a company's website column before
    the profiles' was imported: walk)."""
    if wanted:
        return _find(header, wanted, "id or URL")
    by_key = {header_key(name): name for name in header}
    for key in ID_HEADERS:
        if key in by_key:
            return by_key[key]
    for mention in ("linkedin", "url"):
        for name in header:
            if mention in header_key(name):
                return name
    raise NoIdColumn()


@dataclass
class Plan:
    """Which columns of the file mean what."""
    id_column: str
    type_column: str = None
    metadata_columns: list = field(default_factory=list)
    # found by the name `type` alone, the column may be the CRM's own (Customer, Prospect…): only contact or company
    # is read from it, and a row with another value takes its type from its URL
    only_entity_types: bool = False

    @classmethod
    def for_header(cls, header, id_column=None, type_column=None, metadata_columns=()):
        by_key = {header_key(name): name for name in header}
        found_type = (_find(header, type_column, "entity_type") if type_column
                      else next((by_key[key] for key in TYPE_HEADERS if key in by_key), None))
        plan = cls(find_id_column(header, id_column), found_type,
                   [_find(header, name, "metadata") for name in metadata_columns],
                   only_entity_types=not type_column and header_key(found_type) == "type")
        named = {id_column, type_column, *metadata_columns}
        for name in (plan.id_column, plan.type_column, *plan.metadata_columns):
            # a row holds one value a name (the last column's); a column found by how it reads, the last alike
            alike = [other for other in header if other == name
                     or (name not in named and name is not None and header_key(other) == header_key(name))]
            if len(alike) > 1:
                raise ImportRefused(f"The file has {len(alike)} columns named like '{name}' ({', '.join(alike)}): "
                                    "rename all but the one to import.")
        return plan


def _cell(row: dict, column) -> str:
    return (row.get(column) or "").strip() if column else ""


class RowRefused(ValidationFailed):
    """A row refused by the importer's own rules, its reason naming the file's columns; any other refusal is by the
    API's rules, in the API's words."""


def item_for_row(row: dict, plan: Plan) -> dict:
    """The bulk-create item a row stands for. A URL without a scheme gets `https://`; the entity type
    comes from the type column, else from the URL's path."""
    extra = getattr(row, "extra_cells", ())
    if extra:  # mostly a delimiter inside a value without quotes: its cells, and maybe the id's, are shifted
        raise RowRefused(plan.id_column, f"The row has {len(extra)} more filled cells than the header has "
                                         "columns: quote a value holding the delimiter.")
    value = _cell(row, plan.id_column)
    if not value:
        raise RowRefused(plan.id_column, f"The {plan.id_column} cell is empty.")
    item = {"custom_metadata": {name: _cell(row, name) for name in plan.metadata_columns if _cell(row, name)}}
    entity_type = _cell(row, plan.type_column).lower()
    if plan.only_entity_types and entity_type not in ENTITY_TYPES:  # (every row was rejected: walk)
        entity_type = ""
    if "/" in value:
        item["network_url"] = value if "://" in value else "https://" + value
        entity_type = entity_type or parse_network_url(item["network_url"], current_app.config["NETWORK_DOMAIN"])[0]
    else:
        item["network_id"] = value
    if not entity_type:
        raise RowRefused("entity_type", "A bare id needs an entity_type column (contact or company).", value)
    item["entity_type"] = entity_type
    return item


@dataclass(frozen=True)
class RowOutcome:
    """What became of one row: `created` (with its new subscription's id, none on a dry run), `present`
    (with the id of the live subscription it duplicates) or `refused` (with the API's error code and why)."""
    row: int  # 1 for the first row under the header (the blank rows read past are counted: `_Row.number`)
    values: dict  # the row as read
    result: str
    subscription_id: str = None
    code: str = None
    reason: str = None
    from_api: bool = False  # refused by the API's rules (its field names in `reason`), not by the importer's own
    field: str = None  # the API field the refusal names (`network_id`), heading `reason` where it is its first word


@dataclass
class ImportReport:
    total: int = 0  # rows to import
    outcomes: list = field(default_factory=list)  # a RowOutcome per row done, in file order

    @property
    def rows(self) -> int:
        return len(self.outcomes)

    @property
    def created(self) -> int:
        return sum(outcome.result == "created" for outcome in self.outcomes)

    @property
    def present(self) -> int:
        return sum(outcome.result == "present" for outcome in self.outcomes)

    @property
    def refused(self) -> list:
        return [outcome for outcome in self.outcomes if outcome.result == "refused"]


def write_outcomes(file, header, outcomes, columns, formulas_inert=False, delimiter=",", sep_line=False) -> None:
    """A CSV of the rows as read, each followed by the outcome's `columns` (RowOutcome fields), named `import_…` where
    the file has a column of that name (a file's own `row` or `code` column was overwritten by the outcome's: walk).
    A row with cells past the header's columns keeps them, before its outcome's: it can be fixed and imported again
    as it was (they were dropped: operator walk).
    With `formulas_inert`, every cell (header names too) a spreadsheet would run as a formula is written as text
    (`formula_inert`). `delimiter`, and `sep_line` (Excel's `sep=;` first): the file's own (`FileForm`), so that it
    opens as it did (without its `sep=;` line, a `;` file opened in one column where the list separator is `,`)."""
    cell = formula_inert if formulas_inert else (lambda value: value)
    writer = csv.writer(file, delimiter=delimiter)
    if sep_line:
        file.write(f"sep={delimiter}{writer.dialect.lineterminator}")
    writer.writerow([cell(name) for name in header] + [_name_apart(name, header) for name in columns])
    for outcome in outcomes:
        writer.writerow([cell(outcome.values.get(name)) for name in header]
                        + [cell(value) for value in getattr(outcome.values, "overflow", ())]
                        + [cell(getattr(outcome, name)) for name in columns])


def _name_apart(name: str, header) -> str:
    while name in header:
        name = f"import_{name}"
    return name


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def formula_inert(value):
    """A cell Excel or LibreOffice would open as a formula (it starts with =, +, -, @, a tab or a carriage return)
    with a single quote before it, which makes it text (OWASP's advice on CSV injection); other values as they are."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def import_chunks(account_id: str, rows: list, plan: Plan, load_item, report: ImportReport, dry_run=False):
    """Import `rows` in chunks of CHUNK_SIZE into `report`, yielding each chunk's outcomes once it is done
    (a page can show progress between chunks). A refusal of a whole chunk (the trial ended) raises. A dry run's
    chunks see what the earlier ones would have created (`subscriptions.DryRun`)."""
    planned = subscriptions.DryRun() if dry_run else None
    for start in range(0, len(rows), CHUNK_SIZE):
        yield _import_chunk(account_id, rows[start:start + CHUNK_SIZE], start + 1, plan, load_item, planned,
                            report)


def import_rows(account_id: str, rows: list, plan: Plan, load_item, dry_run=False,
                on_progress=None) -> ImportReport:
    """Import `rows` in chunks of CHUNK_SIZE; `on_progress(report)` after each chunk."""
    report = ImportReport(total=len(rows))
    for _outcomes in import_chunks(account_id, rows, plan, load_item, report, dry_run):
        if on_progress:
            on_progress(report)
    return report


def _import_chunk(account_id, chunk, first_row, plan, load_item, dry_run: Optional[subscriptions.DryRun],
                  report) -> list:
    """The outcomes of one chunk's rows in file order (added to `report` too), whichever rule decided each."""
    outcomes, items, positions = {}, [], []  # outcomes and positions: by position in the chunk
    numbers = [getattr(row, "number", None) or first_row + position for position, row in enumerate(chunk)]
    for position, row in enumerate(chunk):
        try:
            items.append(item_for_row(row, plan))
            positions.append(position)
        except ServiceError as error:
            outcomes[position] = RowOutcome(numbers[position], row, "refused", code=error.code, reason=error.message,
                                            from_api=not isinstance(error, RowRefused),
                                            field=error.field if isinstance(error, ValidationFailed) else None)
    if items:
        result = subscriptions.bulk_create(account_id, items, load_item, dry_run=dry_run)
        failures = {error["index"]: error for error in result.errors}
        created = iter(result.created)  # in item order, one per item that did not fail
        for index, position in enumerate(positions):
            outcomes[position] = _outcome(numbers[position], chunk[position], failures.get(index), created, dry_run)
    done = [outcomes[position] for position in range(len(chunk))]
    report.outcomes.extend(done)
    return done


def _outcome(row_number, row, failure, created, dry_run) -> RowOutcome:
    if failure is None:
        subscription = next(created)
        return RowOutcome(row_number, row, "created", None if dry_run else subscription.id)
    if failure["code"] == DuplicateSubscription.code:
        return RowOutcome(row_number, row, "present", failure["details"].get("existing_subscription_id"))
    return RowOutcome(row_number, row, "refused", code=failure["code"], reason=failure["error"], from_api=True,
                      field=failure["details"].get("field") if failure["code"] == ValidationFailed.code else None)
