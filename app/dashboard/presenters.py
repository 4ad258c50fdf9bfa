"""Turning stored rows into what a page shows: diffs of an event, the events chart as inline SVG, an
import's progress and results, a refusal in the forms' words."""
import dataclasses
import io
import json
import re
from datetime import date, timedelta
from urllib.parse import quote

from markupsafe import Markup, escape

from app.common import utcnow
from app.errors import ServiceError, ValidationFailed
from app.services import importer

CHART_WIDTH, CHART_HEIGHT, CHART_TOP = 720, 160, 10
PALETTE = ("#2f6fdf", "#d9622b", "#2a9d5c", "#8e44ad", "#c0392b", "#16a2b8", "#b8860b", "#6c757d", "#e83e8c",
           "#20c997", "#343a40")


def parse_body(event) -> dict:
    return json.loads(event.body)


def change_rows(envelope: dict) -> list:
    """[(field, before, after)] of an event: `previous_X`/`current_X` pairs of its changes, the fields of an
    initial state (before: nothing), or the new activity."""
    data = envelope.get("data", {})
    if "changes" in data:
        changes = data["changes"]
        names = [key[len("current_"):] for key in changes if key.startswith("current_")]
        return [(name.replace("_", " "), changes.get(f"previous_{name}"), changes.get(f"current_{name}"))
                for name in names]
    if "state" in data:
        return [(name.replace("_", " "), None, value) for name, value in data["state"].items()
                if not isinstance(value, (dict, list))]
    if "activity" in data:
        return [(data["activity"].get("kind", "activity"), None, data["activity"].get("text")
                 or data["activity"].get("url"))]
    if "reason" in data:
        return [("availability", "available", data["reason"])]
    return []


# The API's field names as the dashboard's forms call them: heading a refusal, and within its sentence
FIELD_LABELS = {"custom_metadata": "Custom metadata", "network_url": "Profile URL", "linkedin_url": "Profile URL",
                "network_id": "Profile id", "linkedin_id": "Profile id", "entity_type": "Type",
                "endpoint_url": "Endpoint URL", "events": "Events to send",
                "initial_webhook": "First event of a new subscription", "is_active": "Deliveries on",
                "since": "Since", "until": "Until", "name": "Key name", "search": "Search", "status": "Status",
                "subscription_ids": "Selected subscriptions"}
IN_A_SENTENCE = {"custom_metadata": "custom metadata", "network_url": "profile URL", "linkedin_url": "profile URL",
                 "network_id": "profile id", "linkedin_id": "profile id", "entity_type": "type",
                 "endpoint_url": "endpoint URL", "initial_webhook": "first event", "is_active": "deliveries on",
                 "subscription_ids": "subscription ids"}
API_NAME = re.compile(rf"\b({'|'.join(IN_A_SENTENCE)})\b")


def field_label(path: str):
    """A form's words for an API field path (`custom_metadata.foo.value`: Metadata key 'foo'); None if unknown."""
    parts = path.split(".")
    if parts[0] == "custom_metadata" and len(parts) > 2 and parts[-1] in ("key", "value"):
        return f"Metadata key '{'.'.join(parts[1:-1])}'"
    return FIELD_LABELS.get(parts[0])


def refusal_in_form_words(error: ServiceError) -> str:
    """A refusal's message with the API field path heading it (`custom_metadata.foo.value: ...`, `endpoint_url
    must ...`, marshmallow's whole-body `body: ...`) as the form's label, and the API's names in its sentence in
    the form's words (`Invalid network_url: ...`); the API's JSON keeps them."""
    return reason_in_form_words(error.message, error.field if isinstance(error, ValidationFailed) else None)


def reason_in_form_words(message: str, field) -> str:
    """`refusal_in_form_words` of a refusal's message and field (None: a refusal naming no field, left as it is)."""
    label = (field_label(field) if field != "body" else "") if field else None
    if label is None:
        return message
    head = ""
    for separator in (": ", " "):
        if message.startswith(f"{field}{separator}"):
            rest = message[len(field) + len(separator):]
            head, message = (f"{label}{separator}", rest) if label else ("", rest[:1].upper() + rest[1:])
            break
    return head + _in_form_words(message)


# A quoted value: a quote not inside a word opens it, and one not followed by a letter or digit closes it (so the
# apostrophe in `'owner's network_url'` is part of what was typed)
QUOTED = re.compile(r"""((?<!\w)'(?:[^']|'(?=\w))*'(?!\w)|(?<!\w)"[^"]*"(?!\w))""")


def _in_form_words(sentence: str) -> str:
    """The API's field names in a sentence in the form's words, outside what it quotes: that is what the person
    typed (a metadata key `'network_url'`, an event type), shown as typed (review)."""
    parts = QUOTED.split(sentence)  # the quoted ones at odd positions
    return "".join(part if index % 2 else API_NAME.sub(lambda name: IN_A_SENTENCE[name.group(1)], part)
                   for index, part in enumerate(parts))


RESULT_COLUMNS = ("row", "result", "subscription_id", "code", "reason")


def import_steps(chunks, listed: int):
    """What the streamed import page shows after each chunk: its first and last row and the rows it lists
    (past row `listed`, only those not created); a chunk refused as a whole (the trial ended) ends the
    import with why. A row the API's rules refused says why in the forms' words (`Invalid profile URL`, as *add
    one* says it, not `Invalid network_url`); the importer's own reasons name the file's columns, kept as written."""
    try:
        for outcomes in chunks:
            yield {"first": outcomes[0].row, "last": outcomes[-1].row, "error": None,
                   "rows": [dataclasses.replace(outcome, reason=reason_in_form_words(outcome.reason, outcome.field))
                            if outcome.from_api else outcome for outcome in outcomes
                            if outcome.result != "created" or outcome.row <= listed]}
    except ServiceError as error:
        yield {"first": None, "last": None, "rows": [], "error": error.message}


def import_results_href(header, report, form=importer.FileForm()) -> str:
    """Every row done, as read, with its result: a data: URL the page links to for download. Its cells come from
    the uploaded file, and the file is for opening in a spreadsheet: one that would run as a formula is made text.
    In the file's own `form` (delimiter, BOM, `sep=;` line), so that the spreadsheet opens it as it opened the file (it
    came back comma-separated and without the BOM: a `;` file's rows in one column, its UTF-8 read as the system's code
    page)."""
    text = io.StringIO()
    if form.bom:
        text.write("\ufeff")
    importer.write_outcomes(text, header, report.outcomes, RESULT_COLUMNS, formulas_inert=True,
                            delimiter=form.delimiter, sep_line=form.sep_line)
    return "data:text/csv;charset=utf-8," + quote(text.getvalue())


def events_chart(per_day: dict, days: int = 30) -> Markup:
    """Stacked bars, one per UTC day of the window, one colour per event type, with a legend; accessible
    through its title and a text summary."""
    today = utcnow().date()
    day_list = [(today - timedelta(days=offset)).isoformat() for offset in range(days - 1, -1, -1)]
    types = sorted({event_type for _day, event_type in per_day})
    totals = [sum(per_day.get((day, event_type), 0) for event_type in types) for day in day_list]
    peak = max(totals + [1])
    bar_width = CHART_WIDTH / days
    parts = []
    for index, day in enumerate(day_list):
        y = CHART_TOP + CHART_HEIGHT
        for colour, event_type in zip(PALETTE * 2, types):
            count = per_day.get((day, event_type), 0)
            if not count:
                continue
            height = CHART_HEIGHT * count / peak
            y -= height
            parts.append(f'<rect x="{index * bar_width + 1:.1f}" y="{y:.1f}" width="{bar_width - 2:.1f}" '
                         f'height="{height:.1f}" fill="{colour}"><title>{escape(day)}: {count:,} '
                         f'{escape(event_type)}</title></rect>')
    label = f"Events per day over {days} days, {sum(totals):,} in all; busiest day {peak if any(totals) else 0:,}"
    svg = (f'<svg class="chart" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT + CHART_TOP + 20}" role="img" '
           f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
           f'<line x1="0" y1="{CHART_TOP + CHART_HEIGHT}" x2="{CHART_WIDTH}" y2="{CHART_TOP + CHART_HEIGHT}" '
           f'stroke="#999"/>{"".join(parts)}'
           f'<text x="0" y="{CHART_HEIGHT + CHART_TOP + 16}" font-size="12">{_short(day_list[0])}</text>'
           f'<text x="{CHART_WIDTH}" y="{CHART_HEIGHT + CHART_TOP + 16}" font-size="12" text-anchor="end">'
           f'{_short(day_list[-1])}</text><text x="{CHART_WIDTH}" y="{CHART_TOP + 2}" font-size="12" '
           f'text-anchor="end">{f"busiest day {peak:,}" if any(totals) else "no events yet"}</text></svg>')
    legend = "".join(f'<li><svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect width="10" height="10" '
                     f'fill="{colour}"/></svg>{escape(event_type)}</li>'
                     for colour, event_type in zip(PALETTE * 2, types))
    return Markup(svg + (f'<ul class="legend">{legend}</ul>' if types else ""))


def _short(iso_day: str) -> str:
    return date.fromisoformat(iso_day).strftime("%d %b")
