"""The provider interface and the snapshot shape of contract §7.

A provider answers, for each id it is asked about, one of: a snapshot (a dict), `EntityUnavailable`
(private or missing), `ProviderError` (transient; with `retry_after` the whole provider is paused for
everyone) or `QuotaExhausted` (credits spent; checking pauses until `resets_at` or an operator resumes).
`fetch_many` returns those answers as values, so a batch never raises for one bad id.
"""
import os
from datetime import datetime
from typing import Optional, Protocol

from app.common import composed

CONTACT_FIELDS = ("network_id", "name", "headline", "company", "title", "location")
COMPANY_FIELDS = ("network_id", "name", "headcount", "description", "industry", "website")
ACTIVITY_FIELDS = ("id", "kind", "url", "text", "created_at", "target_url", "reaction_type")
# A text field is cut to this: the network's longest (a post, an about text) are a few thousand characters, and a
# 2 MB headline from a vendor went out in events that receivers refused as too large, retried until failed (walk).
MAX_TEXT_LENGTH = 10_000


class ProviderError(Exception):
    """A transient failure (timeout, 5xx, bad answer): retried later, no event. With `retry_after`
    (seconds, from a 429 or a `Retry-After`), the provider is paused for every subscription."""

    def __init__(self, message: str = "", retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


class EntityUnavailable(Exception):
    """The entity is private or missing; `reason` is `private` or `not_found`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class QuotaExhausted(Exception):
    """The vendor's credits are spent (e.g. HTTP 402): no more calls until `resets_at` (naive UTC) when
    the vendor tells it, or until an operator resumes the provider."""
    pause_reason = "quota_exhausted"

    def __init__(self, message: str = "quota exhausted", resets_at: Optional[datetime] = None):
        super().__init__(message)
        self.resets_at = resets_at


class AccessRefused(QuotaExhausted):
    """The vendor refused the API key (HTTP 401): every call would fail the same way, so checking pauses
    until an operator fixes the key and resumes the provider."""
    pause_reason = "unauthorized"


ANSWER_ERRORS = (ProviderError, EntityUnavailable, QuotaExhausted)


class Answers(dict):
    """What one upstream call returned: {id: snapshot dict or one of ANSWER_ERRORS}, plus the credits the
    vendor charged for the call when it says so."""

    def __init__(self, answers=(), credits: Optional[float] = None):
        super().__init__(answers)
        self.credits = credits


class Provider(Protocol):
    """Only `fetch` is required; `BaseProvider` supplies the rest. Settings a module reads come from
    `PROVIDER_<NAME>_*` (see `provider_settings`); the engine's `PROVIDER_RATE_LIMIT`,
    `PROVIDER_CONCURRENCY` and `PROVIDER_BATCH_SIZE` override what the provider declares."""
    name: str
    batch_size: int  # ids per upstream call (fetch_many); 1 unless the vendor has a batch call
    rate_limit: Optional[str]  # the vendor's limit, e.g. "30/minute" (limits' notation); None: unmetered
    concurrency: int  # upstream calls in flight at once, across every scheduler process
    lookup: str  # "id": asked by network id; "url": by the stored network URL
    local: bool  # True: no vendor behind it (the simulated network); its concurrency is per process

    def fetch(self, entity_type: str, key: str) -> dict:
        """The entity's current snapshot (contract §7), or raise one of ANSWER_ERRORS."""

    def fetch_many(self, entity_type: str, keys: list) -> Answers:
        """One upstream call for up to `batch_size` keys; every key gets an answer."""


class BaseProvider:
    name = "custom"
    batch_size = 1
    rate_limit = None
    concurrency = 1
    lookup = "id"
    local = False

    def fetch(self, entity_type: str, key: str) -> dict:
        raise NotImplementedError

    def fetch_many(self, entity_type: str, keys: list) -> Answers:
        return fetch_each(self, entity_type, keys)


def fetch_each(provider, entity_type: str, keys: list) -> Answers:
    """`fetch` for each key in turn; once the provider says to stop (throttled, quota spent), the keys not
    yet asked get the same answer instead of another call."""
    answers = Answers()
    stop = None
    for key in keys:
        if stop is not None:
            answers[key] = stop
            continue
        try:
            answers[key] = provider.fetch(entity_type, key)
        except ANSWER_ERRORS as answer:
            answers[key] = answer
            if is_provider_wide(answer):
                stop = answer
    return answers


def is_provider_wide(answer) -> bool:
    """An answer that pauses the whole provider rather than concerning one entity."""
    return isinstance(answer, QuotaExhausted) or (isinstance(answer, ProviderError) and answer.retry_after is not None)


def provider_settings(name: str, config, environ=os.environ) -> dict:
    """A provider's own settings: every `PROVIDER_<NAME>_<KEY>` of the environment, then of the app config
    (which wins), as {"<key>" lower-cased: value}. E.g. PROVIDER_CRUSTDATA_API_KEY -> {"api_key": …}."""
    prefix = f"PROVIDER_{name.upper()}_"
    settings = {}
    for source in (environ, config):
        settings.update((key[len(prefix):].lower(), value) for key, value in source.items()
                        if key.startswith(prefix) and value not in (None, ""))
    return settings


def current_position(positions: list, name: str, started: str, preferred=lambda _position: False):
    """Of several current positions (dicts), the `preferred` one, else the latest `started` (ISO date text), then the
    first by `name`: the same positions in another order name the same employer (they were a position change each
    time: vendor walk). None for none."""
    ordered = sorted(positions, key=lambda position: str(position.get(name)))
    ordered.sort(key=lambda position: (preferred(position), position.get(started)
                                       if isinstance(position.get(started), str) else ""),
                 reverse=True)  # stable: of positions alike so far, the first by name
    return ordered[0] if ordered else None


def clean_secret(setting: str, value) -> str:
    """A key or token as a setting gives it, without the line end of the file it came from; ValueError (which does
    not repeat the value) when white space or a control character is left inside: sent in a header, requests
    refused it with the key in its message, logged at every check."""
    value = (value or "").strip()
    if not value.isprintable() or " " in value:
        raise ValueError(f"{setting} holds white space or control characters inside it: give the key alone")
    return value


def api_settings(name: str, config, default_url: str) -> dict:
    """The settings of a vendor reached with an API key: `api_key` (required: ValueError without it, so a
    misconfiguration fails at start-up), `url` and `timeout_seconds`."""
    settings = provider_settings(name, config)
    api_key = clean_secret(f"PROVIDER_{name.upper()}_API_KEY", settings.get("api_key"))
    if not api_key:
        raise ValueError(f"PROVIDER={name} needs PROVIDER_{name.upper()}_API_KEY")
    timeout_name = f"PROVIDER_{name.upper()}_TIMEOUT_SECONDS"
    try:
        timeout = float(settings.get("timeout_seconds", 30))
    except ValueError:
        raise ValueError(f"{timeout_name}={settings['timeout_seconds']!r} is not a number of seconds") from None
    if not 0 < timeout <= 600:  # NaN and infinity too
        raise ValueError(f"{timeout_name}={timeout} is out of range: give seconds from 0 to 600")
    return {"api_key": api_key, "base_url": settings.get("url", default_url), "timeout": timeout}


#: bookkeeping the engine stores beside the state; a provider field of this name is not kept
RESERVED_FIELDS = ("seen_activity_ids",)


def normalize_snapshot(entity_type: str, raw: dict) -> dict:
    """The fields of contract §7 first (missing ones are None, those of the wrong type too: `readable`), then any
    unknown fields, which are kept (`subscription.initial_state` shows them) but never compared nor stored.
    Activities without a usable id are dropped; `activities` stays None when the provider did not send a list."""
    fields = CONTACT_FIELDS if entity_type == "contact" else COMPANY_FIELDS
    snapshot = {name: readable(name, raw.get(name)) for name in fields}
    activities = raw.get("activities")
    if isinstance(activities, list):
        snapshot["activities"] = [_activity(item) for item in activities if _has_usable_id(item)]
    else:
        snapshot["activities"] = None
    for name, value in raw.items():
        if name not in snapshot and name not in RESERVED_FIELDS:
            snapshot[name] = value
    return snapshot


def readable(name: str, value):
    """A field of contract §7 as detection and the events use it: the headcount a whole number, every other field
    text without surrounding white space. A value of another type (a headcount of 1.5 or "1,200", a title of 123,
    a list) is unknown, as null is: kept, it replaced the last known value without an event and so hid the next
    real change, and went out in webhook payloads whose fields the interface types as strings. Text is read by
    `clean_text`."""
    if name == "headcount":  # from 0 to 2**53 (a 400-digit number failed every check at detection's arithmetic)
        if isinstance(value, float) and value.is_integer() and 0 <= value <= 2 ** 53:  # 1200.0, exactly
            return int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2 ** 53 else None
    return clean_text(value) if isinstance(value, str) else None


def clean_text(text: str) -> str:
    """Text as detection compares it: in Unicode's composed form (a scraped "Café" comes decomposed as often as not:
    the same text, which was a change event), without surrounding white space ("Lead " and "Lead" are one title),
    cut to MAX_TEXT_LENGTH characters."""
    return composed(text).strip()[:MAX_TEXT_LENGTH]


def _has_usable_id(item) -> bool:
    """An activity is tracked by its id: a string or an integer (anything else cannot be compared)."""
    if not isinstance(item, dict):
        return False
    activity_id = item.get("id")
    return isinstance(activity_id, (str, int)) and not isinstance(activity_id, bool) and activity_id != ""


def _activity(item: dict) -> dict:
    # the id as it came (`_has_usable_id`; detection takes 7 and "7" as one); a kind that is not text has no event type
    activity = {name: item.get(name) if name == "id" else readable(name, item.get(name)) for name in ACTIVITY_FIELDS}
    activity.update((name, value) for name, value in item.items() if name not in activity)  # kept, ignored
    return activity
