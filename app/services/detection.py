"""Change detection: compare the stored snapshot with the provider's current one (contract §6).

Pure functions, no database. A value the provider could not see (None, "unknown") is never a
change: the stored snapshot keeps the last known value, so known → unknown → other value is
reported once, as known → other value. Activities are tracked by id.

The stored snapshot holds only what detection needs: the entity's fields of contract §7 (without
`activities`) and `seen_activities` (None while no answer has shown the activities: the first that does is
state, as a first check's), one string of 8-character keys, each 48 bits of BLAKE2b of an activity id. It keeps
the keys of every activity in the provider's last answer plus the most recent others, up to SEEN_ACTIVITIES_KEPT
in all: providers answer with recent activities only, so an activity is only re-reported if it vanishes from the answers
while that many others come and go. A new activity is mistaken for a seen one with odds of at most
SEEN_ACTIVITIES_KEPT / 2**48 (1 in 8.8e12): at 1M subscriptions and 0.3 new activities a day each,
one missed event in about 80,000 years. Snapshots stored before this form (every field, the
activities with their text, `seen_activity_ids`) are read too, and replaced at their next check.
"""
import base64
import hashlib
import json
import re
from dataclasses import dataclass, field

from app.providers.base import COMPANY_FIELDS, CONTACT_FIELDS, clean_text

SEEN_ACTIVITIES_KEPT = 32
SEEN_KEY = "seen_activities"
LEGACY_SEEN_KEY = "seen_activity_ids"
KEY_LENGTH = 8  # base64 characters of a 6-byte digest
_INTEGER_TEXT = re.compile(r"0|-?[1-9][0-9]*")  # a string id that is an integer's JSON text
STATE_FIELDS = {"contact": CONTACT_FIELDS, "company": COMPANY_FIELDS}
ACTIVITY_EVENTS = {
    ("contact", "post"): "contact.post_created",
    ("company", "post"): "company.post_created",
    ("contact", "comment"): "contact.comment_created",
    ("contact", "reaction"): "contact.reaction_added",
}
ACTIVITY_DATA = {
    "post": ("id", "kind", "url", "text", "created_at"),
    "comment": ("id", "kind", "url", "text", "created_at", "target_url"),
    "reaction": ("id", "kind", "url", "text", "created_at", "target_url", "reaction_type"),
}


@dataclass
class Change:
    type: str
    data: dict  # merged into the event's `data` beside `entity`


@dataclass
class Detection:
    snapshot: dict  # what to store: the merged fields plus the keys of activities seen
    changes: list = field(default_factory=list)
    # the activities of the first answer that shows any (the first check's, as a rule), for initial_webhook=all
    present_activities: list = field(default_factory=list)
    initial_state: dict = None  # the first check's `subscription.initial_state` state


def is_unknown(value) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() == "unknown")


def _merge(names, previous: dict, current: dict) -> dict:
    """The current fields, with each unknown one keeping its last known value."""
    return {name: previous.get(name) if is_unknown(current.get(name)) else current.get(name) for name in names}


def _differs(previous, current, name) -> bool:
    before, after = previous.get(name), current.get(name)
    return not is_unknown(before) and not is_unknown(after) and before != after


def _trimmed(value):
    """A stored text as the provider's answers are now read (`clean_text`): a snapshot stored before must neither
    report " Lead" → "Lead" nor send " Lead" on."""
    return clean_text(value) if isinstance(value, str) else value


def _headcount(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _field_changes(entity_type, previous, merged, current, min_percent):
    changes = []
    if entity_type == "contact":
        if _differs(previous, current, "company") or _differs(previous, current, "title"):
            changes.append(Change("contact.position_changed", {"changes": {
                "previous_company": previous.get("company"), "previous_title": previous.get("title"),
                "current_company": merged.get("company"), "current_title": merged.get("title")}}))
        if _differs(previous, current, "headline"):
            changes.append(Change("contact.headline_changed", {"changes": {
                "previous_headline": previous["headline"], "current_headline": current["headline"]}}))
        return changes
    before, after = _headcount(previous.get("headcount")), _headcount(current.get("headcount"))
    if before is not None and after is not None and before != after:
        delta = after - before
        percent = round(100.0 * delta / before, 2) if before else None
        if percent is None or abs(100.0 * delta / before) >= min_percent:
            changes.append(Change("company.employee_count_changed", {"changes": {
                "previous_employee_count": before, "current_employee_count": after,
                "delta": delta, "delta_percent": percent}}))
        else:
            # Below the threshold: keep the last reported count as the baseline, so a slow drift
            # is reported once it adds up to the threshold instead of never.
            merged["headcount"] = before
    if _differs(previous, current, "description"):
        changes.append(Change("company.description_changed", {"changes": {
            "previous_description": previous["description"], "current_description": current["description"]}}))
    return changes


def activity_change(entity_type, activity):
    """The event for one activity, or None for kinds this entity type does not report."""
    event_type = ACTIVITY_EVENTS.get((entity_type, activity.get("kind")))
    if event_type is None:
        return None
    return Change(event_type, {"activity": {name: activity.get(name) for name in ACTIVITY_DATA[activity["kind"]]}})


def _key(text: str) -> str:
    digest = hashlib.blake2b(text.encode(), digest_size=KEY_LENGTH * 3 // 4).digest()
    return base64.b64encode(digest).decode()


def activity_key(activity_id) -> str:
    """The stored key of an activity id (of its JSON text: a string and an integer of the same digits differ)."""
    return _key(json.dumps(activity_id))


def _same_id_keys(activity_id) -> list:
    """The key of an activity id, then the key of the same id in JSON's other type: 7 and "7" are one activity (a
    vendor that began sending its ids as strings re-reported every recent activity as new: provider walk)."""
    text = json.dumps(activity_id)
    if isinstance(activity_id, int):
        return [_key(text), _key(json.dumps(text))]
    return [_key(text), _key(activity_id)] if _INTEGER_TEXT.fullmatch(activity_id) else [_key(text)]


def _seen_keys(stored: dict) -> list:
    """The keys of the activities a stored snapshot has seen, oldest first, in either stored form."""
    if LEGACY_SEEN_KEY in stored:
        return [activity_key(activity_id) for activity_id in stored[LEGACY_SEEN_KEY] or []]
    packed = stored.get(SEEN_KEY) or ""
    return [packed[start:start + KEY_LENGTH] for start in range(0, len(packed), KEY_LENGTH)]


def _remember(seen: list, present: list) -> str:
    """The keys to store: the older ones first, then every key of the current answer (never dropped)."""
    present = list(dict.fromkeys(present))
    current = set(present)
    kept = [key for key in seen if key not in current] + present
    return "".join(kept[-max(SEEN_ACTIVITIES_KEPT, len(present)):])


def detect(entity_type: str, stored, current: dict, min_percent: float = 0.0) -> Detection:
    """Compare the stored snapshot (None on the first check) with the provider's normalised one."""
    names = STATE_FIELDS[entity_type]
    activities = current.get("activities")
    if stored is None:
        keys, present = _new_activities(entity_type, activities or [], [])
        seen_now = None if activities is None else _remember([], keys)  # None: the activities are not known yet
        snapshot = {**_merge(names, {}, current), SEEN_KEY: seen_now}
        return Detection(snapshot, [], present, public_state(current))
    previous = {name: _trimmed(stored.get(name)) for name in names}
    merged = _merge(names, previous, current)
    changes = _field_changes(entity_type, previous, merged, current, min_percent)
    never_seen = SEEN_KEY in stored and stored[SEEN_KEY] is None and LEGACY_SEEN_KEY not in stored
    if activities is None:
        return Detection({**merged, SEEN_KEY: None if never_seen else "".join(_seen_keys(stored))}, changes)
    seen = _seen_keys(stored)
    keys, new = _new_activities(entity_type, activities, seen)
    if never_seen:  # the first answer that shows them: state, as at a first check, not new activities
        return Detection({**merged, SEEN_KEY: _remember(seen, keys)}, changes, new)
    return Detection({**merged, SEEN_KEY: _remember(seen, keys)}, changes + new)


def _new_activities(entity_type: str, activities: list, seen: list) -> tuple:
    """(the key of each activity of the answer, the events of those not seen before), an activity listed twice in
    one answer (its id repeated, or as 7 and "7") counted once: on a first check with `initial_webhook: all` each
    listing was an event of its own."""
    known = set(seen)
    keys, changes = [], []
    for item in activities:
        same_id = _same_id_keys(item["id"])
        seen_as = next((key for key in same_id if key in known), None)
        if seen_as is not None:  # kept as it was stored, whatever the id's type now
            keys.append(seen_as)
            continue
        keys.append(same_id[0])  # its own key (`activity_key`)
        known.add(same_id[0])
        change = activity_change(entity_type, item)
        if change:
            changes.append(change)
    return keys, changes


def public_state(current: dict) -> dict:
    """The entity's state as `subscription.initial_state` reports it: the provider's answer (every field,
    the activities, unknown fields too), each unknown value as null."""
    return {name: None if is_unknown(value) else value for name, value in current.items()}
