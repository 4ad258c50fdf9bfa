"""Request helpers for the blueprints: JSON bodies, schema loading, and OpenAPI metadata on views."""
import json

from flask import g, request
from marshmallow import ValidationError

from app.api.errors import validation_failed_from
from app.errors import ValidationFailed


def json_body() -> dict:
    """The request body as a JSON object, or 400 VALIDATION_ERROR (413 past the size limit)."""
    raw = request.get_data(cache=True)
    try:
        data = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError):
        raise ValidationFailed("body", "The request body is not valid JSON.")
    if not isinstance(data, dict):
        raise ValidationFailed("body", "The request body must be a JSON object.")
    return data


def load(schema, data):
    """Validate with a marshmallow schema; the first problem and the full list go into the 400."""
    try:
        return schema.load(data)
    except ValidationError as error:
        raise validation_failed_from(error, data)


def load_body(schema):
    return load(schema, json_body())


def load_query(schema):
    return load(schema, request.args.to_dict())


def account_id() -> str:
    return g.account_id


def spec(summary, *, body=None, query=None, response=None, status=200, auth=True, tag=None, errors=(),
         media_types=("application/json",)):
    """Attach OpenAPI metadata to a view; `app/api/openapi.py` turns it into the document.

    `errors`: the ServiceError classes the view can answer with beyond those every view can
    (401, 429, 500; 400 with a body or query, 413 with a body, 404 with a path parameter)."""
    def decorate(view):
        view.openapi = {"summary": summary, "body": body, "query": query, "response": response,
                        "status": status, "auth": auth, "tag": tag, "errors": errors,
                        "media_types": media_types}
        return view
    return decorate
