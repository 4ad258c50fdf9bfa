"""The OpenAPI 3.1 document, built from the views' `@spec` metadata and the marshmallow schemas they use."""
import re

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import current_app

from app.schemas.base import ErrorSchema
from app.version import VERSION

_PATH_PARAMETER = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")
PREFIX = "/api/v1"
ALWAYS = {401: ["UNAUTHORIZED"], 429: ["RATE_LIMIT_EXCEEDED"], 500: ["INTERNAL_ERROR"]}


def _schema_name(schema):
    name = schema.__name__ if isinstance(schema, type) else type(schema).__name__
    return name.removesuffix("Schema")


def build_document(app) -> dict:
    spec = APISpec(title="Entity change monitoring API", version=VERSION, openapi_version="3.1.0",
                   plugins=[MarshmallowPlugin(schema_name_resolver=_schema_name)],
                   info={"description": "Subscriptions to contacts and companies; changes arrive as signed webhooks."},
                   servers=[{"url": PREFIX}])
    spec.components.security_scheme("ApiKey", {"type": "apiKey", "in": "header", "name": "X-API-Key"})
    spec.components.schema("Error", schema=ErrorSchema)
    paths = {}
    for rule in app.url_map.iter_rules():
        view = app.view_functions.get(rule.endpoint)
        meta = getattr(view, "openapi", None)
        if meta is None or not rule.rule.startswith(PREFIX):
            continue
        path = _PATH_PARAMETER.sub(r"{\1}", rule.rule.removeprefix(PREFIX)) or "/"
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            paths.setdefault(path, {})[method.lower()] = _operation(meta, rule)
    for path, operations in sorted(paths.items()):
        spec.path(path=path, operations=operations)
    return spec.to_dict()


def _error_codes(meta, rule) -> dict:
    """{status: [codes]} this operation can answer with."""
    codes = {status: list(names) for status, names in ALWAYS.items()} if meta["auth"] else {500: ["INTERNAL_ERROR"]}
    if meta["body"] is not None or meta["query"] is not None:
        codes.setdefault(400, []).append("VALIDATION_ERROR")
    if meta["body"] is not None:
        codes.setdefault(413, []).append("PAYLOAD_TOO_LARGE")
    if rule.arguments:
        codes.setdefault(404, []).append("NOT_FOUND")
    for error in meta["errors"]:
        if error.code not in codes.setdefault(error.status, []):
            codes[error.status].append(error.code)
    return dict(sorted(codes.items()))


def _operation(meta, rule):
    success = {"description": meta["summary"]}
    if meta["response"] is not None:
        success["content"] = {media_type: {"schema": meta["response"]} for media_type in meta["media_types"]}
    elif meta["media_types"] != ("application/json",):
        success["content"] = {media_type: {"schema": {"type": "string"}} for media_type in meta["media_types"]}
    responses = {str(meta["status"]): success}
    for status, codes in _error_codes(meta, rule).items():
        responses[str(status)] = {"description": " or ".join(codes),
                                  "content": {"application/json": {"schema": "Error"}}}
    operation = {"summary": meta["summary"], "responses": responses,
                 "tags": [meta["tag"]] if meta["tag"] else []}
    parameters = [{"in": "path", "name": name, "required": True, "schema": {"type": "string"}}
                  for name in rule.arguments]
    if meta["query"] is not None:
        parameters.append({"in": "query", "schema": meta["query"]})
    if parameters:
        operation["parameters"] = parameters
    if meta["body"] is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": meta["body"]}}}
    operation["security"] = [{"ApiKey": []}] if meta["auth"] else []
    return operation


def cached_document():
    extension = current_app.extensions
    if "openapi_document" not in extension:
        extension["openapi_document"] = build_document(current_app)
    return extension["openapi_document"]
