"""What gunicorn answers itself, before the app sees a request: its limits, its error answers in the
contract's JSON shape instead of an HTML page, and a log that never holds a secret.

Used by `app/gunicorn_conf.py` (`entity-monitor serve`). Without that file (`gunicorn wsgi:app`) the limits are
gunicorn's defaults and a request line or header past them gets gunicorn's HTML page; everything the app sees
answers JSON either way, and the app itself keeps secrets out of the access log's request line."""
import json
import os
import uuid
from datetime import datetime, timezone

from gunicorn import glogging, util

from app.common import NOTHING_RUNS
from app.redaction import redact_environ, redact_uri

# gunicorn's maximum request line, so every URL nginx passes reaches the app (which answers 404 JSON)
LIMIT_REQUEST_LINE = 8190
LIMIT_REQUEST_FIELDS = 100
LIMIT_REQUEST_FIELD_SIZE = 8190
ERROR_CODES = {400: "BAD_REQUEST", 403: "FORBIDDEN", 414: "URI_TOO_LONG", 431: "HEADERS_TOO_LARGE",
               500: "INTERNAL_ERROR"}
MESSAGES = {414: f"The request line is longer than {LIMIT_REQUEST_LINE} bytes.",
            431: "The request headers are too many or too large."}


def json_error(status: int, reason: str) -> bytes:
    """The whole HTTP response gunicorn writes for a request it refused (the contract's error shape)."""
    request_id = f"req_{uuid.uuid4().hex[:24]}"
    body = json.dumps({
        "error": ERROR_CODES.get(status, "HTTP_ERROR"),
        "message": MESSAGES.get(status, f"{reason}: the request could not be read."),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "request_id": request_id,
    }).encode()
    # with the headers of every other answer outside the dashboard (app.api.http.answer_as_typed)
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"X-Content-Type-Options: nosniff\r\nContent-Security-Policy: {NOTHING_RUNS}\r\n"
            f"X-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def write_json_error(sock, status_int, reason, mesg):
    """Drop-in for `gunicorn.util.write_error`; `mesg` (which may echo the request) is not sent back."""
    util.write_nonblock(sock, json_error(int(status_int), reason))


def answer_errors_in_json():
    """gunicorn's workers call `util.write_error` for the requests they refuse; answer those in JSON."""
    util.write_error = write_json_error


GUNICORN_JSON_FORMAT = "%(levelname)s %(name)s %(message)s %(process)d"  # gunicorn's text line names the process


class RedactingLogger(glogging.Logger):
    """gunicorn's logger with secrets removed: the access line of a request gunicorn refused (it never
    reached the app) and its "Invalid request" / "Error handling request" lines echo the raw request."""

    def setup(self, cfg):
        """gunicorn's own lines (starting, a worker booted or timed out, a signal handled) in LOG_FORMAT's form: with
        `json` they were text lines in the JSON stream, which a log shipper parsing it rejects (operator walk).
        LOG_FORMAT as `serve` resolved it (environment or instance/config.py), else as the environment says."""
        super().setup(cfg)
        if os.environ.get("LOG_FORMAT", "").strip() == "json":
            from app.logging_setup import json_formatter
            formatter = json_formatter(GUNICORN_JSON_FORMAT)
            for handler in self.error_log.handlers:
                handler.setFormatter(formatter)

    def access(self, resp, req, environ, request_time):
        redact_environ(environ)
        super().access(resp, req, environ, request_time)

    def warning(self, msg, *args, **kwargs):
        super().warning(_redacted(msg, args), **kwargs)

    def error(self, msg, *args, **kwargs):
        super().error(_redacted(msg, args), **kwargs)

    def exception(self, msg, *args, **kwargs):
        super().exception(_redacted(msg, args), **kwargs)


def _redacted(msg, args) -> str:
    return redact_uri(str(msg) % args if args else str(msg))
