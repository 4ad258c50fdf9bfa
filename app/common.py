"""Small helpers shared by every layer: ids and time."""
import re
import secrets
import string
import time
import unicodedata
from datetime import datetime, timezone

from app.version import VERSION

USER_AGENT = f"entity-monitor/{VERSION}"  # on webhook deliveries and provider requests
# The Content-Security-Policy of every answer outside the dashboard (app.api.http, gunicorn's own refusals)
NOTHING_RUNS = "default-src 'none'; frame-ancestors 'none'"
_ALPHANUMERIC = string.ascii_letters + string.digits
# A fully qualified host name whose last label starts with a letter (so not an IP address)
HOST_NAME = r"([A-Za-z0-9-]{1,63}\.)+[A-Za-z][A-Za-z0-9-]{0,62}"
# C0 and C1 controls (tab and NUL included), DEL, Unicode's line and paragraph separators and its bidirectional
# embeddings, overrides and isolates (which reorder what follows them on a terminal's line); a regular expression
# class that Python and JSON Schema (ECMA-262) read alike
CONTROL_CLASS = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069"
_CONTROL_CHARACTERS = re.compile(f"[{CONTROL_CLASS}]")
# Characters that show nothing: the soft hyphen, the combining grapheme joiner, the Arabic letter mark, Hangul and
# Khmer fillers, Mongolian selectors and vowel separator, zero-width spaces and joiners, the left-to-right and
# right-to-left marks, word joiners, invisible operators and deprecated format controls, the Braille blank, variation
# selectors, the byte order mark. A name may hold them (an emoji sequence needs its joiner), but a name of these and
# spaces alone is blank: it listed as an empty name (API walk, review)
INVISIBLE_CLASS = ("\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2060-\\u2064"
                   "\\u206a-\\u206f\\u2800\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0")
_VISIBLE_CHARACTER = re.compile(f"[^\\s{CONTROL_CLASS}{INVISIBLE_CLASS}]")
NAME_RULE = ("must not be blank (spaces and invisible characters alone) or contain control characters "
             "(U+0000-U+001F, U+007F-U+009F, U+2028, U+2029, U+202A-U+202E, U+2066-U+2069)")
# JSON Schema's statement of `is_plain_name`: one character that is not a space nor invisible, none that is a control
PLAIN_NAME_PATTERN = f"^[^{CONTROL_CLASS}]*[^\\s{CONTROL_CLASS}{INVISIBLE_CLASS}][^{CONTROL_CLASS}]*$"


def composed(text: str) -> str:
    """`text` in Unicode's composed form (NFC): a letter with its accent written as one character or as two is the
    same text (ids, searches and provider text are compared so)."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def new_id(prefix: str) -> str:
    """A prefixed random id, e.g. `sub_3f9a…` (24 hex characters, 96 bits)."""
    return f"{prefix}_{secrets.token_hex(12)}"


def new_sortable_id(prefix: str) -> str:
    """A prefixed id that sorts by creation time: 12 hex digits of milliseconds, then 12 random ones.
    For tables written thousands of rows at a time (events, delivery attempts): new rows land at the end
    of the primary-key index instead of on random pages all over it."""
    return f"{prefix}_{int(time.time() * 1000):012x}{secrets.token_hex(6)}"


def is_plain_name(text: str) -> bool:
    """A name shown on one line (`accounts list`, `keys list`, the dashboard): not blank, no control characters
    (a newline or tab would break the CLI's tab-separated lines; PostgreSQL refuses NUL in text)."""
    return bool(_VISIBLE_CHARACTER.search(text)) and not _CONTROL_CHARACTERS.search(text)


def random_alphanumeric(length: int) -> str:
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(length))


def always() -> bool:
    """The `keep_going` of work that nothing stops early (a command in the foreground, a test)."""
    return True


def utcnow() -> datetime:
    """Naive UTC, the form every timestamp column stores."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def isoformat(moment):
    """ISO 8601 UTC with a `Z` (contract §1); None stays None."""
    if moment is None:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.isoformat(timespec="milliseconds" if moment.microsecond else "seconds") + "Z"


def unix_seconds(moment) -> int:
    return int(moment.replace(tzinfo=timezone.utc).timestamp())
