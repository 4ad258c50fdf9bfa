"""The OpenAPI 3.1 document, built from the views' `@spec` metadata and the marshmallow schemas they use."""
import re

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import current_app
from marshmallow import fields, validate

from app.api.http import BODY_METHODS
from app.extensions import view_rate_class
from app.schemas import event_data
from app.schemas.base import BodySchema, ErrorSchema, QuerySchema
from app.schemas.events import ENVELOPE_METADATA
from app.version import VERSION

_PATH_PARAMETER = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")
PREFIX = "/api/v1"
NO_NUL_PATTERN = "^[^\\u0000]*$"
ALWAYS = {401: ["UNAUTHORIZED"], 429: ["RATE_LIMIT_EXCEEDED"], 500: ["INTERNAL_ERROR"], 503: ["UNAVAILABLE"]}
UNLESS_LIMITS_ARE_OFF = " Sent unless the operator switched rate limiting off (RATELIMIT_ENABLED=0)."
HEADERS = {  # name: (JSON type, always sent where documented, description)
    "X-Request-Id": ("string", True, "The request's id (also `request_id` in an error): the client's own "
                                     "X-Request-Id when it is sane, else a new one."),
    "X-RateLimit-Limit": ("integer", False, "Requests a key may make in the operation's rate-limit class a window."
                                            + UNLESS_LIMITS_ARE_OFF),
    "X-RateLimit-Remaining": ("integer", False, "Requests left in the current window." + UNLESS_LIMITS_ARE_OFF),
    "X-RateLimit-Reset": ("integer", False, "When the current window ends, in Unix seconds." + UNLESS_LIMITS_ARE_OFF),
    "Retry-After": ("integer", False, "Seconds to wait before trying again."),
    "Location": ("string", True, "The path of what was created; it answers GET."),
    "Content-Disposition": ("string", True, "`attachment` with the file's name."),
}
RATE_LIMIT_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
RETRY_LATER = {429, 503}
WEBHOOK_HEADERS = {  # name: (JSON schema, always sent, description); app/services/transport.py sends them
    "X-Webhook-Id": ({"type": "string"}, True, "The event's id, the same on every try: ignore an id already processed "
                                               "(deliveries are at least once)."),
    "X-Webhook-Attempt": ({"type": "integer", "minimum": 1}, True, "This try's number, from 1."),
    "X-Webhook-Timestamp": ({"type": "integer"}, True, "When this try was signed, in Unix milliseconds: refuse an old "
                                                       "one (a replay)."),
    "X-Webhook-Signature": ({"type": "string", "pattern": "^[0-9a-f]{64}$"}, True,
                            'hex(HMAC_SHA256(key = the whole secret "whsec_…", message = X-Webhook-Timestamp + "." '
                            "+ the raw body)): verify it against the body as received, not re-serialised."),
    "X-Webhook-Signature-Previous": ({"type": "string", "pattern": "^[0-9a-f]{64}$"}, False,
                                     "For 24 hours after POST /webhooks/rotate-secret: the same signature made with "
                                     "the previous secret."),
}


def _free_query_text(field) -> bool:
    return (isinstance(field, fields.String) and isinstance(field.parent, QuerySchema)
            and not any(isinstance(rule, (validate.OneOf, validate.Regexp)) for rule in field.validators))


def _schema_name(schema):
    name = schema.__name__ if isinstance(schema, type) else type(schema).__name__
    return name.removesuffix("Schema")


def _stated_constraints(self, field, **kwargs) -> dict:
    """What apispec leaves out of a field's JSON schema: a Dict's key rules as `propertyNames`, no NUL in a
    query parameter's text (`refuse_nul_in_query_and_form`), and `metadata={"json_schema": {...}}` for rules a
    service function enforces rather than a validator."""
    extra = dict(field.metadata.get("json_schema", {}))
    if isinstance(field, fields.Dict) and field.key_field is not None:
        extra["propertyNames"] = self.field2property(field.key_field)
    if _free_query_text(field) and "pattern" not in extra:
        extra["pattern"] = NO_NUL_PATTERN
    return extra


def build_document(app) -> dict:
    plugin = MarshmallowPlugin(schema_name_resolver=_schema_name)
    spec = APISpec(title="Entity change monitoring API", version=VERSION, openapi_version="3.1.0",
                   plugins=[plugin],
                   info={"description": "Subscriptions to contacts and companies; changes arrive as signed webhooks."},
                   servers=[{"url": PREFIX}])
    plugin.converter.add_attribute_function(_stated_constraints)
    spec.components.security_scheme("ApiKey", {"type": "apiKey", "in": "header", "name": "X-API-Key"})
    spec.components.schema("Error", schema=ErrorSchema)
    for name, (json_type, required, description) in HEADERS.items():
        spec.components.header(name, {"description": description, "required": required, "schema": {"type": json_type}})
    for event_type, data in event_data.DATA.items():
        spec.components.schema(event_data.component_name(event_type, "Data"), component=data)
        spec.components.schema(event_data.component_name(event_type, "Event"), component=_envelope(event_type))
    paths, operation_ids, bodies = {}, set(), set()
    for rule in app.url_map.iter_rules():
        view = app.view_functions.get(rule.endpoint)
        meta = getattr(view, "openapi", None)
        if meta is None or not rule.rule.startswith(PREFIX):
            continue
        path = _PATH_PARAMETER.sub(r"{\1}", rule.rule.removeprefix(PREFIX)) or "/"
        for method in sorted(_documented_methods(view, rule)):
            operation = _operation(meta, rule, method)
            name = f"{view.__name__}_head" if method == "HEAD" else view.__name__
            operation["operationId"] = _unique_id(name, path, operation_ids)
            paths.setdefault(path, {})[method.lower()] = operation
        if meta["body"] is not None:
            bodies.add(meta["body"])
    for path, operations in sorted(paths.items()):
        spec.path(path=path, operations=operations)
    document = spec.to_dict()
    document["webhooks"] = {event_type: {"post": _webhook(event_type, app.config)} for event_type in event_data.DATA}
    _require_what_answers_carry(document["components"]["schemas"], plugin.converter.refs)
    for body in bodies:  # rules across fields (JSON Schema combinators) that no field can state
        if hasattr(body, "document_cross_field_rules"):
            schemas = document["components"]["schemas"]
            schemas[_schema_name(body)] = body.document_cross_field_rules(schemas[_schema_name(body)], app.config)
    return document


def _require_what_answers_carry(schemas: dict, refs: dict) -> None:
    """An answer's schema requires every field but those its class lists in `sometimes_absent`: the answers carry
    each field (null when unset), and a client generated from the document otherwise takes every one as optional
    (API walk: no answer's schema but the error's required anything)."""
    for key, name in refs.items():
        schema_class = key[0]
        if not issubclass(schema_class, (BodySchema, QuerySchema)):
            absent = getattr(schema_class, "sometimes_absent", ())
            schemas[name]["required"] = [field for field in schemas[name]["properties"] if field not in absent]


def _documented_methods(view, rule) -> set:
    """The rule's methods but OPTIONS, and but HEAD unless it is an operation of its own: one with a rate-limit class
    apart from its GET's (the export's answers the GET's headers without reading a row, README: Rate limits). Any
    other HEAD is Flask's GET without the body."""
    methods = rule.methods - {"OPTIONS"}
    if view_rate_class(view, "HEAD") == view_rate_class(view, "GET"):
        methods -= {"HEAD"}
    return methods


def _unique_id(name: str, path: str, taken: set) -> str:
    """The view's name; a view served on two paths gets the second path's last segment appended."""
    operation_id = name if name not in taken else f"{name}_{path.rsplit('/', 1)[-1]}"
    taken.add(operation_id)
    return operation_id


def _error_codes(meta, rule, method) -> dict:
    """{status: [codes]} this operation can answer with. Every one refuses a NUL in a query parameter, parameters it
    takes or not (`refuse_nul_in_query_and_form`): a 400 (API walk: the operations without parameters did not list
    it). A keyed operation whose method may carry a body reads it even when it takes none
    (`refuse_a_body_where_none_is_taken`): fields are a 400, a body past the limit a 413."""
    codes = {status: list(names) for status, names in ALWAYS.items()} if meta["auth"] else {500: ["INTERNAL_ERROR"]}
    codes[400] = ["VALIDATION_ERROR"]
    reads_a_body = meta["body"] is not None or (meta["auth"] and method in BODY_METHODS)
    if reads_a_body:
        codes.setdefault(413, []).append("PAYLOAD_TOO_LARGE")
    if rule.arguments:
        codes.setdefault(404, []).append("NOT_FOUND")
    for error in meta["errors"]:
        if error.code not in codes.setdefault(error.status, []):
            codes[error.status].append(error.code)
    return dict(sorted(codes.items()))


def _headers(meta, status: int) -> dict:
    """The headers an answer of this status carries (contract §1 and §8, README's API decisions)."""
    names = ["X-Request-Id"]
    if meta["auth"] and status != 401:  # a 401 has no key, hence no key's window
        names += RATE_LIMIT_HEADERS
    if status in RETRY_LATER:
        names.append("Retry-After")
    if status == 201:
        names.append("Location")
    if status < 300:
        names += meta["headers"]
    return {name: {"$ref": f"#/components/headers/{name}"} for name in names}


def _operation(meta, rule, method):
    bodiless = method == "HEAD"
    success = {"description": meta["summary"]}
    response = None if bodiless else meta["response"]
    if isinstance(response, dict):
        success["content"] = {media_type: {"schema": schema} for media_type, schema in response.items()}
    elif response is not None:
        success["content"] = {"application/json": {"schema": response}}
    statuses = meta["status"] if isinstance(meta["status"], tuple) else (meta["status"],)
    responses = {str(status): {**success, "headers": _headers(meta, status)} for status in statuses}
    for status, codes in _error_codes(meta, rule, method).items():
        responses[str(status)] = {"description": " or ".join(codes), "headers": _headers(meta, status)}
        if not bodiless:
            responses[str(status)]["content"] = {"application/json": {"schema": "Error"}}
    summary = f"The headers of: {meta['summary']}; no body" if bodiless else meta["summary"]
    operation = {"summary": summary, "responses": responses,
                 "tags": [meta["tag"]] if meta["tag"] else []}
    parameters = [{"in": "path", "name": name, "required": True, "schema": {"type": "string", "minLength": 1}}
                  for name in rule.arguments]
    if meta["query"] is not None:
        parameters.append({"in": "query", "schema": meta["query"]})
    if parameters:
        operation["parameters"] = parameters
    if meta["body"] is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": meta["body"]}}}
    operation["security"] = [{"ApiKey": []}] if meta["auth"] else []
    return operation


def _envelope(event_type: str) -> dict:
    """The body an endpoint receives for an event of `event_type` (README Events)."""
    properties = {"id": {"type": "string"}, "type": {"const": event_type},
                  "created": {"type": "integer", "description": "Unix time in seconds."},
                  "data": {"$ref": f"#/components/schemas/{event_data.component_name(event_type, 'Data')}"},
                  "metadata": {"type": "object", **ENVELOPE_METADATA}}
    if event_type == "test":  # it belongs to no subscription
        del properties["metadata"]
    return {"type": "object", "properties": properties, "required": list(properties)}


def _answers(event_type: str, config) -> dict:
    """What an endpoint's answer does (README Webhooks), with this service's timeout and retry settings: to a change
    event's delivery, or to a test event, a probe (POST /webhooks/test, or redelivered: contract §5)."""
    timeout = f"within {config['WEBHOOK_TIMEOUT_SECONDS']:g} seconds"
    if event_type == "test":
        return {"2XX": {"description": f"Received, {timeout}: the test send answers `delivered: true`."},
                "default": {"description": f"Any other answer (a 410 included), none {timeout} or a redirect: the try "
                                           "failed (`delivered: false`). A test event is tried once and changes "
                                           "nothing: no retry, and the configuration stays as it is."}}
    schedule = ", ".join(f"{step:g}" for step in config["WEBHOOK_RETRY_SCHEDULE"])
    return {"2XX": {"description": f"Received, {timeout}: the delivery succeeded."},
            "410": {"description": "Gone: the configuration is deactivated at once."},
            "default": {"description": f"Any other answer, none {timeout} or a redirect: the try failed, and the next "
                                       f"follows WEBHOOK_RETRY_SCHEDULE ({schedule} s, each "
                                       f"±{config['WEBHOOK_RETRY_JITTER_FRACTION']:.0%}), at least "
                                       f"{config['WEBHOOK_THROTTLED_MIN_DELAY_SECONDS']:g} s after a timeout or a 429, "
                                       "honouring Retry-After up to twice the delay it would otherwise wait; after the "
                                       "last try the delivery is failed."}}


def _webhook(event_type: str, config) -> dict:
    """What the service POSTs to the configured endpoint for an event of `event_type`, and what it makes of the
    answer (README Webhooks)."""
    headers = [{"in": "header", "name": name, "required": required, "schema": schema, "description": description}
               for name, (schema, required, description) in WEBHOOK_HEADERS.items()]
    schema = {"$ref": f"#/components/schemas/{event_data.component_name(event_type, 'Event')}"}
    return {"summary": f"A `{event_type}` event, signed", "operationId": f"receive_{event_type.replace('.', '_')}",
            "parameters": headers,
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
            "responses": _answers(event_type, config)}


def cached_document():
    extension = current_app.extensions
    if "openapi_document" not in extension:
        extension["openapi_document"] = build_document(current_app)
    return extension["openapi_document"]
