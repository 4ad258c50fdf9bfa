"""Request helpers for the blueprints: JSON bodies, schema loading, and OpenAPI metadata on views."""
import json
import math
import re

from flask import current_app, g, request
from marshmallow import ValidationError
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import BaseConverter

from app.api.errors import validation_failed_from
from app.common import NOTHING_RUNS
from app.errors import ValidationFailed


class PathTextConverter(BaseConverter):
    """The default path parameter, without NUL: no id holds one, and PostgreSQL refuses NUL in text (a 404,
    not a 500)."""
    regex = r"[^/\x00]+"


def id_converter_beside(*siblings: str) -> type:
    """A path parameter that never matches these static siblings of its route (`/subscriptions/bulk` beside
    `/subscriptions/<id>`), so their OPTIONS and 405 answers list only their own methods."""
    return type("IdConverter", (BaseConverter,), {"regex": rf"(?!(?:{'|'.join(siblings)})$)[^/\x00]+"})


FORM_MIMETYPES = ("application/x-www-form-urlencoded", "multipart/form-data")  # the bodies request.form parses


def is_api_request() -> bool:
    """A request to the keyed API (`/api/v1/…`, `/v1/…`), not the dashboard or the health and docs routes."""
    return request.path.startswith(("/api/", "/v1/"))


def never_cache_api_answers(response):
    """`Cache-Control: no-store` on every API answer: they carry an account's data, and some a secret shown once (a new
    key, a webhook's secret) that no browser or proxy cache may keep (API walk). The dashboard's pages say it too."""
    if is_api_request():
        response.headers["Cache-Control"] = "no-store"
    return response


def answer_as_typed(response):
    """`X-Content-Type-Options: nosniff` on every answer, and, on those that set no policy of their own (all but the
    dashboard's pages), one under which nothing runs, loads or frames them. The API's answers repeat what a request
    sent (a 404 its path, a refusal the value, a subscription its metadata): only the dashboard's pages said either,
    so a browser that sniffs took `/api/v1/events/<script>…`'s JSON for a page of this origin (security walk)."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Content-Security-Policy", NOTHING_RUNS)
    return response


def answer_options_with_no_content(response):
    """The API's OPTIONS answer (Flask's, with `Allow`) is a 204 without a body: it was a 200 whose empty body was
    typed text/html (API walk), where every other answer of the API is JSON."""
    if request.method == "OPTIONS" and response.status_code == 200 and is_api_request():
        response.status_code = 204
        response.headers.pop("Content-Type", None)
        response.set_data(b"")
    return response


def refuse_nul_in_query_and_form():
    """A 400 for NUL in a query or form parameter, on every database alike: PostgreSQL cannot compare or store
    it in text. The form is read only when the body is one (reading it otherwise builds an empty parser), and
    never for the API: its bodies are JSON whatever their Content-Type (curl's default is a form type), and
    parsing one as a form would consume it. A keyed view called without a valid key is left to the 401 (or the
    per-address 429) of `require_api_key`, as a body is: the key is checked first."""
    if is_api_request() and not g.get("api_key_id") and _takes_a_key():
        return
    reads_form = request.mimetype in FORM_MIMETYPES and not is_api_request()
    if reads_form:
        whole_body()  # (the form is then parsed from the bytes read)
    sources = (request.args, request.form) if reads_form else (request.args,)
    for source in sources:
        for name, value in source.items(multi=True):
            if "\x00" in name or "\x00" in value:
                raise ValidationFailed(name, f"{name} must not contain the NUL character (U+0000).", value)


def _takes_a_key() -> bool:
    """Whether the request's view is a keyed one (its blueprint answers 401 without a valid key)."""
    described = _view_description()
    return described is not None and described["auth"]


def _view_description():
    """What the request's view's `spec` says of it (its body, whether it takes a key); None for an undescribed one."""
    return getattr(current_app.view_functions.get(request.endpoint), "openapi", None)


def refuse_a_body_where_none_is_taken():
    """Contract: unknown body fields are a 400. A keyed view that takes no body (pause, resume, a single
    cancel, the webhook test…) knows none, so a body with fields, or one that is not a JSON object, is refused
    like any other body's unknown fields; an empty body or `{}` is fine. Requests without a valid key are left
    to the 401 of `require_api_key`."""
    described = _view_description()
    if (described is None or described["body"] is not None or request.method not in BODY_METHODS
            or not g.get("api_key_id") or not whole_body().strip()):
        return
    fields_sent = json_body()
    if fields_sent:
        raise validation_failed_from(ValidationError({name: ["Unknown field."] for name in fields_sent}),
                                     fields_sent)


BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def json_body() -> dict:
    """The request body as a JSON object, or 400 VALIDATION_ERROR (413 past the size limit).

    Decoded as UTF-8 only (RFC 8259): `json.loads` given bytes would guess UTF-16 or UTF-32 instead. A leading byte
    order mark, which RFC 8259 lets a parser ignore and Windows tools write, is ignored."""
    raw = _body_within_limit()
    try:
        data = parse_json_text(raw.decode("utf-8-sig")) if raw else None
    except NestedTooDeeply:
        raise ValidationFailed("body", "The request body nests too deeply.")
    except UnicodeError:
        raise ValidationFailed("body", "The request body must be JSON encoded as UTF-8.")
    except ValueError:
        raise ValidationFailed("body", "The request body is not valid JSON.")
    if not isinstance(data, dict):
        raise ValidationFailed("body", "The request body must be a JSON object.")
    return data


def _body_within_limit() -> bytes:
    """The raw body; 413 past MAX_CONTENT_LENGTH for a streamed (chunked) body too. Werkzeug refuses a
    Content-Length over the limit, but reads a stream only up to the limit and stops there without telling
    whether more followed: the JSON then failed to parse, a 400 instead of the contract's 413."""
    raw = whole_body()
    limit = request.max_content_length
    if request.content_length is None and limit is not None and len(raw) >= limit \
            and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge()
    return raw


def whole_body() -> bytes:
    """The raw body, read once (cached). One that ended before its Content-Length (the client closed its side) is
    incomplete and never acted on (RFC 9112 §6.3): a 400. Cut short, a create was stored, a pause made, a dashboard
    form acted on its first half (API walk, review). gunicorn marks its input as ending where the body does
    (`wsgi.input_terminated`), so Werkzeug does not compare the two."""
    raw = request.get_data(cache=True)
    if request.content_length is not None and len(raw) < request.content_length:
        raise ValidationFailed("body", f"The request body ended after {len(raw)} of the {request.content_length} "
                                       "bytes its Content-Length announced; nothing was done.")
    return raw


# Far below the interpreter's recursion limit, which the parser would otherwise meet: a garbage collection at that
# depth runs finalizers that fail with RecursionError themselves (unraisable, logged, other objects' cleanup lost).
MAX_JSON_DEPTH = 200
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class NestedTooDeeply(ValueError):
    pass


def parse_json_text(text: str):
    """JSON text by RFC 8259's rules, not Python's: NaN and Infinity are no JSON, and a lone surrogate escape
    (`"\\ud800"`) is no text (stored, it failed every later encoding to UTF-8: checks, exports, pages). ValueError
    for what is not JSON (UnicodeError for a lone surrogate, NestedTooDeeply past MAX_JSON_DEPTH); a number beyond
    a double, or a name given twice in one object, is a ValidationFailed of its own."""
    if nests_deeper_than(text, MAX_JSON_DEPTH):
        raise NestedTooDeeply()
    data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                      object_pairs_hook=_object_of_distinct_names)
    json.dumps(data, ensure_ascii=False).encode("utf-8")
    return data


def nests_deeper_than(text: str, limit: int) -> bool:
    """Whether arrays and objects nest deeper than `limit` (brackets inside strings do not count). Only a body
    with that many opening brackets at all is scanned."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


def _object_of_distinct_names(pairs: list) -> dict:
    """An object whose names are distinct: RFC 8259 leaves a repeated name's meaning to the parser (Python keeps the
    last, others the first), so `{"network_id": "a", "network_id": "b"}` would name whichever entity one chose."""
    data = dict(pairs)
    if len(data) < len(pairs):
        seen = set()
        repeated = next(name for name, _ in pairs if name in seen or seen.add(name))
        shown = repeated if len(repeated) <= 40 else repeated[:39] + "…"
        raise ValidationFailed("body", f"The JSON names '{shown}' more than once in one object.")
    return data


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")  # Python's json reads NaN and Infinity; RFC 8259 does not


def _finite_float(text):
    """A JSON number with a fraction or exponent, as a float; 400 past a double's range (`1e999` would be read
    as infinity, which no field takes and which a 400 echoing it back would write as the non-JSON `Infinity`)."""
    number = float(text)
    if not math.isfinite(number):
        raise ValidationFailed("body", "The request body holds a number too large for a double (about ±1.8e308).")
    return number


def load(schema, data):
    """Validate with a marshmallow schema; the first problem and the full list go into the 400."""
    try:
        return schema.load(data)
    except ValidationError as error:
        raise validation_failed_from(error, data)


def load_body(schema):
    return load(schema, json_body())


def load_query(schema):
    """Query parameters through a schema; a parameter the schema knows given twice is a 400, not a guess."""
    for name, values in request.args.lists():
        if len(values) > 1 and name in schema.load_fields:
            raise ValidationFailed(name, f"{name} may be given only once.", values[0])
    return load(schema, request.args.to_dict())


def account_id() -> str:
    return g.account_id


def spec(summary, *, body=None, query=None, response=None, status=200, auth=True, tag=None, errors=(), headers=()):
    """Attach OpenAPI metadata to a view; `app/api/openapi.py` turns it into the document.

    `status`: the success status, or a tuple of them; `response`: a schema, or {media type: schema} for a
    view answering in several formats.
    `errors`: the ServiceError classes the view can answer with beyond those every view can
    (401, 429, 500; 400 with a body or query, 413 with a body, 404 with a path parameter).
    `headers`: the headers its success answers carry beyond those every answer does (`app.api.openapi.HEADERS`)."""
    def decorate(view):
        view.openapi = {"summary": summary, "body": body, "query": query, "response": response,
                        "status": status, "auth": auth, "tag": tag, "errors": errors, "headers": headers}
        return view
    return decorate
