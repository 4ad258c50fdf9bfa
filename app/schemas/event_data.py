"""What an event's `data` holds, type by type (README Events), as JSON schemas: the OpenAPI document gives them to
the events' answers and to the `webhooks` it describes, the POSTs an endpoint receives. Objects stay open: a field
added later must not break a receiver that validates against them."""
from app.providers.base import ACTIVITY_FIELDS, COMPANY_FIELDS, CONTACT_FIELDS
from app.services.detection import ACTIVITY_DATA, ACTIVITY_EVENTS

TEXT = {"type": "string"}
TEXT_OR_NULL = {"type": ["string", "null"]}
ACTIVITY_ID = {"type": ["string", "integer"], "description": "As the provider gave it (7 and \"7\" name one activity)."}
UNAVAILABLE_REASONS = ("private", "not_found")


def _object(properties: dict, description: str = None) -> dict:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {**schema, "description": description} if description else schema


ENTITY = _object({"id": {**TEXT, "description": "The subscription's id."},
                  "type": {"type": "string", "enum": ["contact", "company"]}, "network_id": TEXT, "network_url": TEXT},
                 "The subscription the event is about.")


def _activity(kind: str) -> dict:
    properties = {name: TEXT_OR_NULL for name in ACTIVITY_DATA[kind]}
    return _object({**properties, "id": ACTIVITY_ID, "kind": {"const": kind}},
                   "The new activity; a field the provider gave as anything but text is null.")


def _state(fields: tuple) -> dict:
    """`subscription.initial_state`'s `state`: the provider's answer, each unknown value null, its own extra
    fields (and its activities' ones) kept."""
    properties = {name: {"type": ["integer", "null"]} if name == "headcount" else TEXT_OR_NULL for name in fields}
    activity = _object({name: ACTIVITY_ID if name == "id" else TEXT_OR_NULL for name in ACTIVITY_FIELDS})
    return _object({**properties, "activities": {"type": ["array", "null"], "items": activity}})


def _changes(fields: dict, description: str = None) -> dict:
    return _object({"entity": ENTITY, "changes": _object(fields)}, description)


_ACTIVITY_TYPES = {event_type: _object({"entity": ENTITY, "activity": _activity(kind)})
                   for (_, kind), event_type in ACTIVITY_EVENTS.items()}
DATA = {
    "test": _object({"message": TEXT}, "A test event (POST /webhooks/test) belongs to no subscription."),
    "subscription.initial_state": _object(
        {"entity": ENTITY, "state": {"anyOf": [_state(CONTACT_FIELDS), _state(COMPANY_FIELDS)]}}),
    "contact.position_changed": _changes(
        {"previous_company": TEXT_OR_NULL, "previous_title": TEXT_OR_NULL, "current_company": TEXT_OR_NULL,
         "current_title": TEXT_OR_NULL}, "A company or title that was never known is null on both sides."),
    "contact.headline_changed": _changes({"previous_headline": TEXT, "current_headline": TEXT}),
    "company.employee_count_changed": _changes(
        {"previous_employee_count": {"type": "integer"}, "current_employee_count": {"type": "integer"},
         "delta": {"type": "integer"}, "delta_percent": {"type": ["number", "null"]}},
        "`delta_percent` is null when the previous count was 0."),
    "company.description_changed": _changes({"previous_description": TEXT, "current_description": TEXT}),
    **_ACTIVITY_TYPES,
    "entity.unavailable": _object({"entity": ENTITY, "reason": {"type": "string", "enum": list(UNAVAILABLE_REASONS)}}),
}


def component_name(event_type: str, suffix: str) -> str:
    """`contact.position_changed`, "Data" -> `ContactPositionChangedData`."""
    return "".join(word.capitalize() for word in event_type.replace(".", "_").split("_")) + suffix
