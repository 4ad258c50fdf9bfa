import re

from flask import current_app
from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from app.errors import ValidationFailed
from app.schemas.base import BodySchema, PageQuerySchema, PaginationSchema, QuerySchema, Timestamp, one_of
from app.services.entities import ENTITY_TYPES, PATH_KIND, network_id_from_url, normalize_network_id

STATUSES = ("active", "paused", "cancelled")
LAST_CHECK_STATUSES = ("pending", "ok", "NETWORK_ERROR")  # the column is NOT NULL: pending until a check
MAX_METADATA_KEYS = 20

EntityType = fields.Str(required=True, validate=validate.OneOf(ENTITY_TYPES),
                        metadata={"description": "`contact` or `company`."})


def _at_most_20_keys(value):
    # A plain function, not validate.Length: apispec would document Length as maxLength of an object.
    if len(value) > MAX_METADATA_KEYS:
        raise ValidationError(f"custom_metadata holds at most {MAX_METADATA_KEYS} keys.")


def _metadata_field(**kwargs):
    return fields.Dict(keys=fields.Str(validate=validate.Length(1, 40)),
                       values=fields.Str(validate=validate.Length(max=500)),
                       validate=_at_most_20_keys,
                       metadata={"description": "Up to 20 string keys (<= 40 chars) to string values "
                                                "(<= 500 chars), copied into every event.",
                                 "maxProperties": MAX_METADATA_KEYS},
                       **kwargs)


# The ids `normalize_network_id` accepts as they are (ASCII); it also accepts non-ASCII letters and their
# percent-encoded UTF-8, which a pattern cannot bound (the 100-character limit counts the encoded form).
NETWORK_ID_PATTERN = r"^[A-Za-z0-9_-]{2,100}$"


def _entity_named(field: str, value: str, entity_type: str) -> str:
    """The id a field or its alias names, compared as `network_id` and `network_url` are with each other (ids
    case-insensitively, URLs by the id they name); a value that cannot be read is that field's error, with its reason
    (review: it was reported as the pair differing)."""
    try:
        if field in ("network_id", "linkedin_id"):
            return normalize_network_id(value, field)
        return network_id_from_url(value, entity_type, current_app.config["NETWORK_DOMAIN"], field)
    except ValidationFailed as error:
        message = error.message.replace(ALIASED[field], field) if field in ALIASED else error.message
        raise ValidationError(message, field) from None


ALIASED = {"linkedin_id": "network_id", "linkedin_url": "network_url"}  # alias: the field it stands for
READ_ORDER = ("network_id", "linkedin_id", "network_url", "linkedin_url")


# What the document's variants leave out, said in words: a client generated from them would refuse it (API walk)
CREATE_BODY_DESCRIPTION = (
    "An entity type and its network_id or its network_url, in the canonical forms the variants state. Also accepted "
    "(contract §3), beyond what these patterns say: both network_id and network_url when they name the same entity; "
    "linkedin_id and linkedin_url as aliases of the two; in an id, letters beyond ASCII or their percent-encoded "
    "UTF-8 (at most 100 characters encoded); in a URL, http://, any letter case in the scheme and host, the "
    "scheme's own port (:443), a country or mobile subdomain (uk., m.) or /mwlite/ before the path, a section or "
    "language after the id (/details/experience/, /en), a query string, a fragment, and spaces around it.")


class SubscriptionCreateSchema(BodySchema):
    entity_type = EntityType
    network_id = fields.Str(validate=validate.Length(max=400), metadata={"description": "Username or slug."})
    network_url = fields.Str(validate=validate.Length(max=2048), metadata={"description": "Full profile URL."})
    linkedin_id = fields.Str(validate=validate.Length(max=400), metadata={"description": "Alias of network_id."})
    linkedin_url = fields.Str(validate=validate.Length(max=2048), metadata={"description": "Alias of network_url."})
    custom_metadata = _metadata_field()

    @validates_schema
    def _aliases_agree(self, data, **kwargs):
        if not any(name in data for name in READ_ORDER):
            raise ValidationError("Give network_id or network_url (or both).", "network_id")
        if not any(alias in data for alias in ALIASED):
            return  # the service reads network_id and network_url
        # With an alias sent, every id and URL is read here, the ids first as the service reads them, each under the
        # name sent: folded into the fields they stand for, their errors named fields the client had not sent
        named = {name: _entity_named(name, data[name], data["entity_type"]) for name in READ_ORDER if name in data}
        for alias, field in ALIASED.items():
            if field in named and alias in named and named[field] != named[alias]:  # `JaneDoe`, `janedoe` agree
                raise ValidationError(f"{alias} is an alias of {field}; they differ.", alias)
        kept = [next((name for name in (alias, field) if name in named), None)  # what `_fold_aliases` keeps
                for alias, field in ALIASED.items()]
        if all(kept) and named[kept[0]] != named[kept[1]]:
            raise ValidationError(f"{kept[0]} and {kept[1]} name different entities.", kept[1])

    @post_load
    def _fold_aliases(self, data, **kwargs):
        for alias, field in ALIASED.items():
            data[field] = data.pop(alias, data.get(field))
        data.setdefault("custom_metadata", {})
        return data

    @staticmethod
    def document_cross_field_rules(generated: dict, config) -> dict:
        """The body as JSON Schema can state it: an entity type with either an id or a URL of that type's
        path (both are accepted when they name the same entity, which no schema can state; the
        linkedin_* aliases are accepted and left out)."""
        domain = re.escape(config["NETWORK_DOMAIN"])
        variants = []
        for entity_type in ENTITY_TYPES:
            url = rf"^https://(www\.)?{domain}/{PATH_KIND[entity_type]}/{NETWORK_ID_PATTERN[1:-1]}/?$"
            for name, pattern in (("network_id", NETWORK_ID_PATTERN), ("network_url", url)):
                variants.append({"type": "object", "required": ["entity_type", name], "additionalProperties": False,
                                 "properties": {"entity_type": {"const": entity_type},
                                                name: {**generated["properties"][name], "pattern": pattern},
                                                "custom_metadata": generated["properties"]["custom_metadata"]}})
        return {"description": CREATE_BODY_DESCRIPTION, "oneOf": variants}


class MetadataPatchSchema(BodySchema):
    custom_metadata = _metadata_field(required=True)


class SubscriptionListQuerySchema(PageQuerySchema):
    entity_type = fields.Str(validate=validate.OneOf(ENTITY_TYPES))
    status = fields.Str(validate=validate.OneOf(STATUSES))
    search = fields.Str(validate=validate.Length(1, 200),
                        metadata={"description": "Matches any part of the network id or URL as answers write them, "
                                                 "case-insensitively: a non-ASCII character by its percent-encoded "
                                                 "form (`josé` and `c3` both find `jos%c3%a9`)."})


class ExportQuerySchema(QuerySchema):
    format = fields.Str(load_default="csv", validate=validate.OneOf(("csv", "json")))
    status = fields.Str(load_default="all", validate=validate.OneOf(STATUSES + ("all",)))


class ExportRowSchema(Schema):
    subscription_id = fields.Str()
    entity_type = fields.Str(metadata=one_of(ENTITY_TYPES))
    network_id = fields.Str()
    network_url = fields.Str()
    status = fields.Str(metadata=one_of(STATUSES))
    created_at = fields.Str(metadata={"description": "ISO 8601 UTC."})
    custom_metadata = fields.Dict(metadata={"description": "In CSV: one column holding the JSON object."})


class ExportSchema(Schema):
    data = fields.List(fields.Nested(ExportRowSchema))
    total = fields.Int()


class _SubscriptionCoreSchema(Schema):
    """The fields every subscription shape shares."""
    id = fields.Str()
    entity_type = fields.Str(metadata=one_of(ENTITY_TYPES))
    network_id = fields.Str()
    network_url = fields.Str()
    status = fields.Str(metadata=one_of(STATUSES))
    custom_metadata = fields.Dict()
    created_at = Timestamp()


class SubscriptionCreatedSchema(_SubscriptionCoreSchema):
    updated_at = Timestamp()


class SubscriptionListItemSchema(_SubscriptionCoreSchema):
    last_checked_at = Timestamp(allow_none=True)


CHECK_METADATA = {"type": "object", "additionalProperties": False, "required": ["check_count", "change_count"],
                  "properties": {"check_count": {"type": "integer", "description": "Completed checks."},
                                 "change_count": {"type": "integer", "description": "Change events emitted."}}}


class SubscriptionSchema(SubscriptionCreatedSchema):
    """The get shape (interface spec plus contract §3)."""
    last_checked_at = Timestamp(allow_none=True)
    last_change_at = Timestamp(allow_none=True)
    last_check_status = fields.Str(metadata=one_of(LAST_CHECK_STATUSES))
    next_check_at = Timestamp(allow_none=True)
    paused_at = Timestamp(allow_none=True)
    cancelled_at = Timestamp(allow_none=True)
    metadata = fields.Method("_check_metadata", metadata={"json_schema": CHECK_METADATA})

    def _check_metadata(self, subscription):
        return {"check_count": subscription.check_count, "change_count": subscription.change_count}


class SubscriptionListSchema(Schema):
    data = fields.List(fields.Nested(SubscriptionListItemSchema))
    pagination = fields.Nested(PaginationSchema)


class SubscriptionCancelledSchema(Schema):
    id = fields.Str()
    status = fields.Str(metadata=one_of(("cancelled",)))
    cancelled_at = Timestamp()


class BulkCreateSchema(BodySchema):
    subscriptions = fields.List(fields.Raw(allow_none=True), required=True,
                                validate=validate.Length(1, 100, error="Send 1 to 100 subscriptions."),
                                metadata={"description": "Items shaped like POST /subscriptions bodies."})


class BulkIdsSchema(BodySchema):
    subscription_ids = fields.List(fields.Raw(allow_none=True), required=True,
                                   validate=validate.Length(1, 100, error="Send 1 to 100 subscription ids."),
                                   metadata={"description": "Subscription ids (`sub_…`). An item that is not a "
                                                            "string, or names no subscription of this account, is "
                                                            "reported in `errors`; the others are still processed."})


class BulkStatusSchema(BulkIdsSchema):
    status = fields.Str(required=True, validate=validate.OneOf(("active", "paused")))


class BulkCreatedItemSchema(Schema):
    id = fields.Str()
    entity_type = fields.Str(metadata=one_of(ENTITY_TYPES))
    network_id = fields.Str()
    status = fields.Str(metadata=one_of(STATUSES))


class BulkCreateErrorSchema(Schema):
    sometimes_absent = ("existing_subscription_id",)
    index = fields.Int()
    network_id = fields.Str(allow_none=True)
    error = fields.Str()
    code = fields.Str()
    existing_subscription_id = fields.Str()  # a DUPLICATE_SUBSCRIPTION's only, as the single create's 409 names it


class BulkCreateResultSchema(Schema):
    created = fields.Int()
    failed = fields.Int()
    subscriptions = fields.List(fields.Nested(BulkCreatedItemSchema))
    errors = fields.List(fields.Nested(BulkCreateErrorSchema))


class IdStatusSchema(Schema):
    id = fields.Str()
    status = fields.Str(metadata=one_of(STATUSES))


class BulkIdErrorSchema(Schema):
    index = fields.Int(metadata={"description": "The item's position in `subscription_ids`, from 0 (a repeated id: "
                                                "its first)."})
    id = fields.Str(allow_none=True, metadata={"description": "The item as sent; null when it is not a string."})
    error = fields.Str()
    code = fields.Str(metadata={"description": "`VALIDATION_ERROR` (not a string), `NOT_FOUND` (no subscription of "
                                               "this account has that id) or `INVALID_STATE` (a cancelled one "
                                               "paused or resumed)."})


class BulkCancelResultSchema(Schema):
    cancelled = fields.Int()
    failed = fields.Int()
    subscriptions = fields.List(fields.Nested(IdStatusSchema))
    errors = fields.List(fields.Nested(BulkIdErrorSchema))


class BulkStatusResultSchema(Schema):
    updated = fields.Int()
    failed = fields.Int()
    subscriptions = fields.List(fields.Nested(IdStatusSchema))
    errors = fields.List(fields.Nested(BulkIdErrorSchema))
