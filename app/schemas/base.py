import json
import re

from marshmallow import EXCLUDE, RAISE, Schema, fields, validate

from app.common import isoformat
from app.errors import ECHO_CUT, ECHO_LIMIT
from app.sql_json import JSON, TIMESTAMP, VALUE, JsonField

MAX_JSON_KEY_BYTES = 63  # PostgreSQL's longest name: row_to_json takes the keys from column names


class Timestamp(fields.DateTime):
    """ISO 8601 UTC ending in Z (contract §1). `allow_none=True` documents one that is null when the moment has not
    happened (yet); the others (created_at…) are always set."""

    def _serialize(self, value, attr, obj, **kwargs):
        return isoformat(value)


def one_of(values) -> dict:
    """A field's metadata documenting the values an answer's field takes, as an `enum` (dumps run no validator)."""
    return {"json_schema": {"enum": list(values)}}


class BodySchema(Schema):
    """A request body: unknown fields are a 400 (contract §1)."""

    class Meta:
        unknown = RAISE


class QuerySchema(Schema):
    """Query parameters: unrelated parameters are ignored, bad values of known ones are a 400."""

    class Meta:
        unknown = EXCLUDE


class PaginationSchema(Schema):
    total = fields.Int()
    limit = fields.Int()
    offset = fields.Int()
    has_more = fields.Bool()


MAX_OFFSET = 2**31 - 1  # beyond any real table, and inside every database's integer range


class StrictBool(fields.Bool):
    """JSON true or false only: "yes", 1 or "false" are a 400, not a guess."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):  # a set test would take 1 and 0: they equal True and False
            raise self.make_error("invalid", input=value)
        return value


class QueryInt(fields.Int):
    """An integer written in ASCII digits, a minus sign allowed first: Python's int() also reads `5_0`, `+5`, ` 5 `
    and other scripts' digits (`５`), none of which is a number to a client that checks what it sends."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str) and not re.fullmatch(r"-?[0-9]+", value):
            raise self.make_error("invalid", input=value)
        return super()._deserialize(value, attr, data, **kwargs)


class PageQuerySchema(QuerySchema):
    limit = QueryInt(load_default=20, validate=validate.Range(1, 100, error="limit must be between 1 and 100."),
                     metadata={"description": "Results per page."})
    offset = QueryInt(load_default=0,
                      validate=validate.Range(0, MAX_OFFSET, error=f"offset must be between 0 and {MAX_OFFSET}."),
                      metadata={"description": "Items to skip."})


ECHO_RULE = (f"A string repeated from the request (a value, an id, a field name, the path) is cut to at most its "
             f"first {ECHO_LIMIT} characters (fewer where a character's accents would be parted from it) and ends "
             f"in {ECHO_CUT} (U+2026).")


class ErrorSchema(Schema):
    sometimes_absent = ("details", "timestamp", "request_id")  # details when there is nothing to say
    error = fields.Str()
    message = fields.Str(metadata={"description": ECHO_RULE})
    details = fields.Dict(metadata={"description": ECHO_RULE})
    timestamp = Timestamp()
    request_id = fields.Str()


class DeletedSchema(Schema):
    id = fields.Str()
    deleted = fields.Bool()


def flat_dumper(schema: Schema):
    """A fast `dump` for a flat schema of plain fields, for hot paths such as the list and get endpoints.

    It mirrors the schema's own fields (names, `attribute`, `data_key`, Timestamp formatting, `Method`
    fields through the schema's method), so the schema stays the single source of the shape and of the
    OpenAPI document, without marshmallow's per-field machinery (most of those endpoints' time). A schema
    it cannot mirror is refused."""
    plain = (fields.String, fields.Integer, fields.Boolean, fields.Dict)
    getters = []
    for name, field in schema.fields.items():
        attribute = field.attribute or name
        if isinstance(field, Timestamp):
            getter = _attribute_then(attribute, isoformat)
        elif isinstance(field, fields.Method) and type(field) is fields.Method:
            getter = getattr(schema, field.serialize_method_name)
        elif isinstance(field, plain) and type(field).__name__ in ("String", "Integer", "Boolean", "Dict"):
            getter = _attribute_then(attribute, None)
        else:
            raise TypeError(f"flat_dumper cannot mirror {type(field).__name__} field '{name}'")
        getters.append((field.data_key or name, getter))

    def dump(obj) -> dict:
        return {key: getter(obj) for key, getter in getters}

    return dump


def _attribute_then(attribute, convert):
    if convert is None:
        return lambda obj: getattr(obj, attribute, None)
    return lambda obj: convert(getattr(obj, attribute, None))


def json_fields(schema: Schema) -> tuple:
    """The fields of a flat schema as the database writes them (app.sql_json), mirroring the schema like
    `flat_dumper`: strings and integers as they are, Dict fields from their stored JSON, Timestamp fields in
    their ISO form. A schema it cannot mirror is refused (e.g. a boolean, which SQLite stores as 0 or 1)."""
    found = []
    for name, field in schema.fields.items():
        if isinstance(field, Timestamp):
            kind = TIMESTAMP
        elif type(field) is fields.Dict:
            kind = JSON
        elif type(field) in (fields.String, fields.Integer):
            kind = VALUE
        else:
            raise TypeError(f"json_fields cannot mirror {type(field).__name__} field '{name}'")
        key = field.data_key or name
        if len(key.encode()) > MAX_JSON_KEY_BYTES:
            raise TypeError(f"json_fields cannot write the key '{key}': PostgreSQL cuts names at 63 bytes")
        found.append(JsonField(key, field.attribute or name, kind))
    return tuple(found)


def pagination(count, total, limit, offset) -> dict:
    """The pagination object of a page of `count` items."""
    return {"total": total, "limit": limit, "offset": offset, "has_more": offset + count < total}


def page(items, total, limit, offset):
    return {"data": items, "pagination": pagination(len(items), total, limit, offset)}


def page_text(items_json: str, count, total, limit, offset) -> str:
    """`page` as compact JSON text around items the database wrote as one JSON array (app.sql_json), ending in a
    line break as Flask's JSON answers do."""
    numbers = json.dumps(pagination(count, total, limit, offset), separators=(",", ":"))
    return f'{{"data":{items_json},"pagination":{numbers}}}\n'
