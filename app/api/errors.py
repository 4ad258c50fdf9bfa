"""The one error shape of contract §2, for every failure the app can produce."""
import logging
from contextlib import contextmanager

from flask import g, jsonify, request
from flask_limiter.errors import RateLimitExceeded
from marshmallow import ValidationError
from werkzeug.exceptions import HTTPException

from app.common import isoformat, utcnow
from app.database import busy_or_unreachable
from app.errors import ECHO_LIMIT, RateLimited, ServiceError, ValidationFailed, cut_echo
from app.extensions import limiter
from app.outage_log import log_outage

log = logging.getLogger(__name__)

UNEXPECTED_MESSAGE = "An unexpected error occurred. Quote the request id to support."
# A database that cannot be reached (or is too busy) answers 503: the PostgreSQL walk saw 500s with a traceback each,
# which a client cannot tell from a bug and which flooded the log
UNAVAILABLE_MESSAGE = "The service cannot use its database right now. Retry later."
UNAVAILABLE_RETRY_SECONDS = 5
_HTTP_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE", 400: "VALIDATION_ERROR",
               500: "INTERNAL_ERROR"}  # (an error in an after-request hook reaches Flask as a 500 HTTPException)


def error_response(status, code, message, details=None, headers=None):
    """The one error shape; what it repeats from the request is cut to ECHO_LIMIT characters (app.errors)."""
    message, details = _cut_echoes(message, details or {}, also=(request.path,))
    if isinstance(details.get("errors"), list):
        details["errors"] = [_cut_item(item) for item in details["errors"]]
    body = {"error": code, "message": message}
    if details:
        body["details"] = details
    body["timestamp"] = isoformat(utcnow())
    body["request_id"] = g.get("request_id")
    response = jsonify(body)
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _cut_echoes(message: str, fields: dict, also=()) -> tuple:
    """(message, fields) with each string of `fields` over ECHO_LIMIT characters cut, and the message cut likewise
    where it repeats one of them or of `also`."""
    echoes = {text for text in (*fields.values(), *also) if isinstance(text, str) and len(text) > ECHO_LIMIT}
    for echo in sorted(echoes, key=len, reverse=True):  # a longer echo first: a shorter one may be part of it
        message = message.replace(echo, cut_echo(echo))
    return message, {name: cut_echo(value) if isinstance(value, str) else value for name, value in fields.items()}


def _cut_item(item, message_key="message", also=()):
    """One item of an error list (a `{field, message}` of `details.errors`, or a bulk call's failed item), its echoes
    cut: its strings (the field's name is one), and its message where it repeats one of them or of `also`."""
    if not isinstance(item, dict) or not isinstance(item.get(message_key), str):
        return item
    fields = {name: value for name, value in item.items() if name != message_key}
    message, fields = _cut_echoes(item[message_key], fields, also)
    return {name: message if name == message_key else fields[name] for name in item}


def cut_failed_items(items: list) -> list:
    """A bulk call's failed items (`error` their message), each cut as an error's echoes are; the message is also cut
    where it repeats a value of the item's `details` (left out of the item's shape), e.g. an unknown field's name."""
    return [_cut_item(item, "error", also=_echoed_values(item.get("details"))) for item in items]


def _echoed_values(value) -> set:
    """The strings a JSON value holds at any depth but under a `message` (the service's own words)."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_echoed_values(item) for name, item in value.items() if name != "message"))
    if isinstance(value, list):
        return set().union(*map(_echoed_values, value))
    return set()


def flatten_messages(messages, prefix=""):
    """marshmallow's nested message dict as a list of {field, message}, in field order."""
    flat = []
    if isinstance(messages, dict):
        for key, value in messages.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if path.endswith("_schema"):
                path = prefix or "body"
            flat.extend(flatten_messages(value, path))
    elif isinstance(messages, list) and messages and all(isinstance(m, str) for m in messages):
        flat.extend({"field": prefix or "body", "message": m} for m in messages)
    elif isinstance(messages, list):
        for item in messages:
            flat.extend(flatten_messages(item, prefix))
    else:
        flat.append({"field": prefix or "body", "message": str(messages)})
    return flat


def _value_at(data, path):
    """The value the field path names in the request's data; a path ending in marshmallow's `value` or `key` (a
    dict field's value or key was refused) names that value or key."""
    parts = path.split(".")
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        elif last and part == "value":
            break
        elif last and part == "key" and index:
            data = parts[index - 1]
            break
        else:
            return None
    return data if isinstance(data, (str, int, float, bool)) or data is None else None


@contextmanager
def echoing_as_sent(data):
    """A service's refusal of a field it was given loaded (a time made UTC) names the value as the client sent it, as
    a schema's refusal does (README Hardening): a recovery's `since` sent as 1795763244 was answered
    "2026-11-27T07:07:24Z"."""
    try:
        yield
    except ValidationFailed as error:
        error.details["value"] = _value_at(data, error.field)
        raise


def validation_failed_from(error: ValidationError, data) -> ValidationFailed:
    errors = flatten_messages(error.messages)
    first = errors[0] if errors else {"field": "body", "message": "Invalid input."}
    field, problem = first["field"], first["message"]
    message = problem if problem.startswith(f"{field} ") else f"{field}: {problem}"  # not "name: name must…"
    return ValidationFailed(first["field"], message, _value_at(data, first["field"]), errors)


def register_error_handlers(app):
    @app.errorhandler(ServiceError)
    def _service_error(error):
        return error_response(error.status, error.code, error.message, error.details,
                              getattr(error, "headers", None))

    @app.errorhandler(RateLimitExceeded)
    def _rate_limited(error):
        current = limiter.current_limit
        limited = RateLimited(current.limit.amount, int(current.limit.get_expiry()),
                              current.window.reset_time)
        return _service_error(limited)

    @app.errorhandler(HTTPException)
    def _http_error(error):
        if error.code in (404, 405) and _a_browser_outside_the_api():  # `/nope`, `/subscriptions/`: walk
            from app.dashboard import page_for_a_browser
            return page_for_a_browser(error)
        code = _HTTP_CODES.get(error.code, "HTTP_ERROR")
        details, headers = None, None
        message = error.description
        if error.code == 404:
            message = f"No route matches {request.method} {request.path}."
        elif error.code == 405:
            message = f"Method {request.method} is not allowed on {request.path}."
            headers = {"Allow": ", ".join(error.valid_methods or ())}
        elif error.code == 500:
            message = UNEXPECTED_MESSAGE
        elif error.code == 413:
            message = "The request body is larger than the 1 MiB limit."
            details = {"limit_bytes": app.config["MAX_CONTENT_LENGTH"]}
        return error_response(error.code, code, message, details, headers)

    @app.errorhandler(Exception)
    def _unexpected(error):
        status, code, message, headers = unexpected_error(error)
        return error_response(status, code, message, None, headers)


def _a_browser_outside_the_api() -> bool:
    """A request outside the API from a browser (one that prefers HTML to JSON): an address that matches no route is
    the dashboard's page to it, not the API's JSON."""
    from app.api.http import is_api_request  # (it imports this module)
    return (not is_api_request()
            and request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html")


def unexpected_error(error: Exception) -> tuple:
    """(status, code, message, headers) of an error no handler knows, logged (the API's answer, the dashboard's page).
    A database that cannot be reached, or is too busy to answer, now: not the request's fault, a 503 to retry, said
    once a minute without a traceback. Anything else is a 500 with its traceback, a missing table or column included:
    serving refuses a schema of another release, so at request time it is a bug (review)."""
    if log_outage(log, error, "requests failed", problem_of=busy_or_unreachable):
        return 503, "UNAVAILABLE", UNAVAILABLE_MESSAGE, {"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)}
    log.exception("unhandled error (request_id=%s)", g.get("request_id"))
    return 500, "INTERNAL_ERROR", UNEXPECTED_MESSAGE, None
