"""Change detection: compare the stored snapshot with the provider's current one (contract §6).

Pure functions, no database. A value the provider could not see (None, "unknown") is never a
change: the stored snapshot keeps the last known value, so known → unknown → other value is
reported once, as known → other value. Activities are tracked by id.
"""
from dataclasses import dataclass, field

SEEN_ACTIVITIES_KEPT = 1000
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
    snapshot: dict  # what to store: the merged state plus the ids of activities seen
    changes: list = field(default_factory=list)
    present_activities: list = field(default_factory=list)  # for the first check with initial_webhook=all


def is_unknown(value) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() == "unknown")


def _merge(previous: dict, current: dict) -> dict:
    """The current fields, with each unknown one keeping its last known value."""
    merged = dict(previous)
    for name, value in current.items():
        if not is_unknown(value):
            merged[name] = value
        merged.setdefault(name, None)
    return merged


def _differs(previous, current, name) -> bool:
    before, after = previous.get(name), current.get(name)
    return not is_unknown(before) and not is_unknown(after) and before != after


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


def _state(snapshot: dict) -> dict:
    return {name: value for name, value in snapshot.items() if name != "seen_activity_ids"}


def detect(entity_type: str, stored, current: dict, min_percent: float = 0.0) -> Detection:
    """Compare the stored snapshot (None on the first check) with the provider's normalised one."""
    activities = current.get("activities")
    if stored is None:
        seen = [item["id"] for item in activities or []]
        snapshot = {**_merge({}, current), "seen_activity_ids": seen[-SEEN_ACTIVITIES_KEPT:]}
        present = [change for change in (activity_change(entity_type, item) for item in activities or [])
                   if change]
        return Detection(snapshot, [], present)
    previous = _state(stored)
    merged = _merge(previous, current)
    changes = _field_changes(entity_type, previous, merged, current, min_percent)
    seen = list(stored.get("seen_activity_ids") or [])
    if activities is not None:
        known = set(seen)
        for item in activities:
            if item["id"] in known:
                continue
            known.add(item["id"])
            seen.append(item["id"])
            change = activity_change(entity_type, item)
            if change:
                changes.append(change)
    return Detection({**merged, "seen_activity_ids": seen[-SEEN_ACTIVITIES_KEPT:]}, changes)


def public_state(snapshot: dict) -> dict:
    """The entity's state as `subscription.initial_state` reports it (no bookkeeping fields)."""
    return _state(snapshot)
