from marshmallow import Schema, fields, validate

from app.schemas.base import PageQuerySchema, PaginationSchema, Timestamp, one_of
from app.schemas.event_data import component_name
from app.services.events import DELIVERY_STATUSES, EVENT_TYPES

ATTEMPT_STATUSES = ("succeeded", "failed")
ENVELOPE_METADATA = {
    "description": "The subscription the event is about, when the change was detected, and the subscription's "
                   "custom_metadata (`{}` when it has none).",
    "required": ["subscription_id", "detected_at", "custom_metadata"],
    "properties": {"subscription_id": {"type": "string"}, "detected_at": {"type": "string", "format": "date-time"},
                   "custom_metadata": {"type": "object", "additionalProperties": {"type": "string"}}}}


class EventListQuerySchema(PageQuerySchema):
    type = fields.Str(validate=validate.OneOf(EVENT_TYPES))
    subscription_id = fields.Str(validate=validate.Length(1, 100))
    delivery_status = fields.Str(validate=validate.OneOf(DELIVERY_STATUSES))


class DeliveryAttemptSchema(Schema):
    id = fields.Str()
    event_id = fields.Str()
    event_type = fields.Str(metadata=one_of(EVENT_TYPES))
    attempt = fields.Int()
    status = fields.Str(metadata=one_of(ATTEMPT_STATUSES))
    response_status = fields.Int(allow_none=True)
    duration_ms = fields.Int(allow_none=True)
    error = fields.Str(allow_none=True)
    attempted_at = Timestamp()
    next_attempt_at = Timestamp(allow_none=True)
    request_headers = fields.Dict(keys=fields.Str(), values=fields.Str(), allow_none=True, metadata={
        "description": "The headers this try was sent with (X-Webhook-Timestamp, X-Webhook-Signature, …); "
                       "null when it was refused before any request was made, or was made before they were "
                       "kept."})


class EventSchema(Schema):
    """The envelope as delivered, plus `delivery_status`."""
    sometimes_absent = ("metadata",)  # a test event has none
    id = fields.Str()
    type = fields.Str(metadata=one_of(EVENT_TYPES))
    created = fields.Int(metadata={"description": "Unix time in seconds."})
    data = fields.Dict(metadata={"json_schema": {
        "description": "What its `type` carries (README Events; the document's `webhooks` give each type's).",
        "anyOf": [{"$ref": f"#/components/schemas/{component_name(event_type, 'Data')}"}
                  for event_type in EVENT_TYPES]}})
    metadata = fields.Dict(metadata={"json_schema": ENVELOPE_METADATA})
    delivery_status = fields.Str(metadata=one_of(DELIVERY_STATUSES))


class EventDetailSchema(EventSchema):
    attempts = fields.List(fields.Nested(DeliveryAttemptSchema))


class EventListSchema(Schema):
    data = fields.List(fields.Nested(EventSchema))
    pagination = fields.Nested(PaginationSchema)
