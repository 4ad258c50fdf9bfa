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


def normalize_snapshot(entity_type: str, raw: dict) -> dict:
    """Keep the fields of contract §7 (missing ones are None) and the activities that have an id.
    Unknown fields are dropped; `activities` stays None when the provider did not send them."""
    fields = CONTACT_FIELDS if entity_type == "contact" else COMPANY_FIELDS
    snapshot = {name: raw.get(name) for name in fields}
    activities = raw.get("activities")
    if isinstance(activities, list):
        snapshot["activities"] = [
            {name: item.get(name) for name in ACTIVITY_FIELDS}
            for item in activities if isinstance(item, dict) and item.get("id") is not None
        ]
    else:
        snapshot["activities"] = None
    return snapshot
