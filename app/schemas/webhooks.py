import re
from datetime import datetime, timezone

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from app.schemas.base import BodySchema, PageQuerySchema, PaginationSchema, StrictBool, Timestamp, one_of
from app.schemas.events import ATTEMPT_STATUSES, DeliveryAttemptSchema
from app.services.events import DELIVERY_STATUSES
from app.services.webhooks import (EVENT_PATTERNS, HOST_NAME, INITIAL_WEBHOOK_CHOICES, PORT, URL_PATH,
                                   endpoint_url_problem, unknown_event_pattern)

MAX_EVENT_PATTERNS = 50
MAX_URL_LENGTH = 2048
# What `check_endpoint_url` accepts, less IP literals (public ones are accepted too)
PUBLIC_HTTPS_URL = f"^https://{HOST_NAME}{PORT}{URL_PATH}$"


def _endpoint_url_form(url: str):
    """The URL's form, checked with the rest of the body so that every problem is listed together (contract §2:
    `errors` lists all); the name lookup waits for the service, outside any transaction."""
    if len(url) > MAX_URL_LENGTH:
        raise ValidationError(f"endpoint_url must be at most {MAX_URL_LENGTH} characters.")
    problem = endpoint_url_problem(url)
    if problem:
        raise ValidationError(problem)


def _known_event_pattern(pattern: str):
    if pattern not in EVENT_PATTERNS:
        raise ValidationError(unknown_event_pattern(pattern if len(pattern) <= 100 else f"{pattern[:100]}…"))


def _endpoint_url(**kwargs):
    return fields.Str(validate=_endpoint_url_form,
                      metadata={"description": "HTTPS URL that receives events; must resolve to a public address "
                                               "(an IP literal is accepted when public; the pattern shows names).",
                                "json_schema": {"pattern": PUBLIC_HTTPS_URL, "minLength": 1,
                                                "maxLength": MAX_URL_LENGTH}},
                      **kwargs)


def _event_patterns(**kwargs):
    pattern = fields.Str(validate=_known_event_pattern, metadata={"json_schema": {"enum": EVENT_PATTERNS}})
    return fields.List(pattern, validate=validate.Length(1, MAX_EVENT_PATTERNS, error=(
                           f"events must list 1 to {MAX_EVENT_PATTERNS} event types, or `*`.")),
                       metadata={"description": "Event types to receive: `*`, a family such as `contact.*`, "
                                                "or exact types."}, **kwargs)


def _initial_webhook(**kwargs):
    return fields.Str(validate=validate.OneOf(INITIAL_WEBHOOK_CHOICES),
                      metadata={"description": "`latest` (default), `all` or `none`."}, **kwargs)


# ISO 8601's extended form: a date, then optionally a time (seconds and a fraction optional) and a zone. Python's
# datetime.fromisoformat, which marshmallow uses, reads more than that: any one character before the Z, a NUL
# included, and week dates.
_ISO_8601 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
                       r"(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]{1,9})?)?(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?")


class UtcDateTime(fields.DateTime):
    """ISO 8601 (extended form) or Unix seconds (a number); an offset is converted to UTC, none means UTC. Loads as
    naive UTC (the stored form)."""
    default_error_messages = {"invalid": "Not a valid time: ISO 8601 (2026-11-25T08:00:00Z) or Unix seconds as a "
                                         "JSON number (a string of digits could be either)."}

    def __init__(self, **kwargs):
        # documented as what it reads, a string or a number (`format` constrains only the string): the document said
        # a date-time string only, so a client generated from it could not send the Unix seconds it describes. A
        # caller's own `json_schema` is merged with it, not replaced (its rules and examples were dropped)
        metadata = kwargs.pop("metadata", None) or {}
        json_schema = {"type": ["string", "number"], **metadata.get("json_schema", {})}
        super().__init__(metadata={**metadata, "json_schema": json_schema}, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self._from_unix_seconds(value)
        if isinstance(value, str) and not _ISO_8601.fullmatch(value):
            raise self.make_error("invalid", input=value, obj_type=self.OBJ_TYPE)
        moment = super()._deserialize(value, attr, data, **kwargs)
        try:
            return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment
        except OverflowError:  # 0001-01-01T00:00+14:00 is before year 1 in UTC
            raise self.make_error("invalid", input=value, obj_type=self.OBJ_TYPE) from None

    def _from_unix_seconds(self, seconds):
        try:
            return datetime.fromtimestamp(seconds, timezone.utc).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            raise ValidationError("Not a valid time: Unix seconds out of range.")


class WebhookConfigureSchema(BodySchema):
    endpoint_url = _endpoint_url(required=True)
    events = _event_patterns(load_default=lambda: ["*"])
    initial_webhook = _initial_webhook(load_default="latest")


class WebhookUpdateSchema(BodySchema):
    endpoint_url = _endpoint_url()
    events = _event_patterns()
    initial_webhook = _initial_webhook()
    is_active = StrictBool(metadata={"description": "Set false to pause deliveries, true to resume them."})

    @validates_schema
    def _not_empty(self, data, **kwargs):
        if not data:
            raise ValidationError("Give at least one of endpoint_url, events, is_active, initial_webhook.", "body")

    @staticmethod
    def document_cross_field_rules(generated: dict, config) -> dict:
        return {**generated, "minProperties": 1}


class WebhookConfigSchema(Schema):
    id = fields.Str()
    endpoint_url = fields.Str()
    events = fields.List(fields.Str(metadata=one_of(EVENT_PATTERNS)))
    initial_webhook = fields.Str(metadata=one_of(INITIAL_WEBHOOK_CHOICES))
    is_active = fields.Bool()
    failing_since = Timestamp(allow_none=True, metadata={"description": "First failure of the current run of "
                                                                        "failures; null when healthy."})
    created_at = Timestamp()
    updated_at = Timestamp()


class WebhookConfigWithSecretSchema(WebhookConfigSchema):
    secret = fields.Str(metadata={"description": "`whsec_…`: save it to verify signatures; shown only here "
                                                 "and by rotate-secret."})


class RotatedSecretSchema(Schema):
    id = fields.Str()
    secret = fields.Str()
    rotated_at = Timestamp()


class TestResultSchema(Schema):
    event_id = fields.Str(metadata={"description": "`evt_test_…`"})
    delivered = fields.Bool()
    status_code = fields.Int(allow_none=True)
    duration_ms = fields.Int()
    error = fields.Str(allow_none=True)


class DeliveryListQuerySchema(PageQuerySchema):
    status = fields.Str(validate=validate.OneOf(ATTEMPT_STATUSES))
    event_id = fields.Str(validate=validate.Length(1, 100))


class DeliveryListSchema(Schema):
    data = fields.List(fields.Nested(DeliveryAttemptSchema))
    pagination = fields.Nested(PaginationSchema)


class RecoverSchema(BodySchema):
    since = UtcDateTime(required=True, metadata={"description": "Start of the window (at most 14 days ago): "
                                                 "ISO 8601 or Unix seconds."})
    until = UtcDateTime(metadata={"description": "End of the window; default now. ISO 8601 or Unix seconds."})
    include_pending = StrictBool(load_default=False, metadata={
        "description": "Also send now the events of the window still waiting for their next try."})


class RecoverResultSchema(Schema):
    queued = fields.Int()


class RedeliveredSchema(Schema):
    event_id = fields.Str()
    delivery_status = fields.Str(metadata=one_of(DELIVERY_STATUSES))
