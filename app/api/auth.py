"""Authentication by `X-API-Key`.

`identify_caller` runs before the rate limiter (so limits key on the validated key id) and only
records the outcome; `require_api_key`, a blueprint hook that runs after the limiter, refuses.
"""
import re

from flask import g, request

from app.common import new_id
from app.database import end_read_transaction, read_in_a_new_snapshot, read_in_one_snapshot
from app.api.http import is_api_request
from app.api.limits import limit_unauthenticated
from app.errors import Unauthorized
from app.services import keys, usage

_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def assign_request_id():
    sent = request.headers.get("X-Request-Id", "")
    g.request_id = sent if _SANE_REQUEST_ID.match(sent) else new_id("req")


def identify_caller():
    # `g` lives on the application context, which a caller (a test, a CLI command) may share across
    # requests: never let one request's identity leak into the next.
    for name in ("api_key_id", "account_id", "tier", "auth_error"):
        g.pop(name, None)
    if not is_api_request():
        return
    reading = request.method in ("GET", "HEAD") and bool(request.headers.get("X-API-Key"))
    if reading:  # (a request without a key is refused without the database)
        read_in_a_new_snapshot()
    try:
        key, g.tier = keys.authenticate(request.headers.get("X-API-Key"))
    except Unauthorized as error:
        end_read_transaction()
        g.auth_error = error
        return
    # The read transaction stays open into the view: one BEGIN per read request, one snapshot for the
    # key and the data (a write ends it first: see `write_transaction`).
    g.api_key_id = key.id
    g.account_id = key.account_id
    keys.last_used.record(key)
    if reading:
        read_in_one_snapshot()  # again when recording `last_used_at` (a write transaction) ended the first


def require_api_key():
    if request.method == "OPTIONS":  # Flask answers it with the Allow header; it reveals nothing
        return
    if not g.get("api_key_id"):
        limit_unauthenticated()
        raise g.get("auth_error") or Unauthorized(keys.MISSING_MESSAGE)


def count_request(response):
    if g.get("account_id"):
        usage.request_counts().add(g.account_id)
    return response


def set_request_id_header(response):
    response.headers["X-Request-Id"] = g.get("request_id") or new_id("req")
    return response
