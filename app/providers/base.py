"""The provider interface and the snapshot shape of contract §7."""
from typing import Protocol

CONTACT_FIELDS = ("network_id", "name", "headline", "company", "title", "location")
COMPANY_FIELDS = ("network_id", "name", "headcount", "description", "industry", "website")
ACTIVITY_FIELDS = ("id", "kind", "url", "text", "created_at", "target_url", "reaction_type")


class ProviderError(Exception):
    """A transient failure (timeout, 5xx, bad answer): retried later, no event."""


class EntityUnavailable(Exception):
    """The entity is private or missing; `reason` is `private` or `not_found`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Provider(Protocol):
    #: how many fetches may run at once (1: call inline)
    concurrency: int

    def fetch(self, entity_type: str, network_id: str) -> dict:
        """The entity's current snapshot (contract §7), or raise EntityUnavailable / ProviderError."""


#: bookkeeping the engine stores beside the state; a provider field of this name is not kept
RESERVED_FIELDS = ("seen_activity_ids",)


def normalize_snapshot(entity_type: str, raw: dict) -> dict:
    """The fields of contract §7 first (missing ones are None), then any unknown fields, which are kept
    (the stored state and `subscription.initial_state` show them) but never compared. Activities
    without a usable id are dropped; `activities` stays None when the provider did not send a list."""
    fields = CONTACT_FIELDS if entity_type == "contact" else COMPANY_FIELDS
    snapshot = {name: raw.get(name) for name in fields}
    activities = raw.get("activities")
    if isinstance(activities, list):
        snapshot["activities"] = [_activity(item) for item in activities if _has_usable_id(item)]
    else:
        snapshot["activities"] = None
    for name, value in raw.items():
        if name not in snapshot and name not in RESERVED_FIELDS:
            snapshot[name] = value
    return snapshot


def _has_usable_id(item) -> bool:
    """An activity is tracked by its id: a string or an integer (anything else cannot be compared)."""
    if not isinstance(item, dict):
        return False
    activity_id = item.get("id")
    return isinstance(activity_id, (str, int)) and not isinstance(activity_id, bool) and activity_id != ""


def _activity(item: dict) -> dict:
    activity = {name: item.get(name) for name in ACTIVITY_FIELDS}
    if not isinstance(activity["kind"], str):
        activity["kind"] = None  # an unreadable kind is reported by no event type
    activity.update((name, value) for name, value in item.items() if name not in activity)  # kept, ignored
    return activity
