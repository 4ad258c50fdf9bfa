"""Logging: text lines (the default) or one JSON object per line (`LOG_FORMAT=json`), for application
and access logs alike. Every line carries the request id and account id of the request it belongs to;
callers add `subscription_id`, `event_id`, `delivery_id` or `webhook_id` with `extra=`."""
import logging
import time

from flask import g, has_request_context, request
from pythonjsonlogger.json import JsonFormatter

from app.admission import ARRIVED
from app.redaction import REDACTED, SECRET_VALUE, redact_uri

LOG_FORMATS = ("text", "json")
CONTEXT_FIELDS = ("request_id", "account_id", "subscription_id", "event_id", "delivery_id", "webhook_id")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JSON_FORMAT = "%(levelname)s %(name)s %(message)s"
HANDLER_NAME = "entity-monitor"
access_log = logging.getLogger("app.access")


class RequestContextFilter(logging.Filter):
    """Adds the current request's id and account id to every record logged while serving it."""

    def filter(self, record):
        if has_request_context():
            for name in ("request_id", "account_id"):
                if getattr(record, name, None) is None and g.get(name):
                    setattr(record, name, g.get(name))
        return True


# Control characters a message may carry from a request (a path's decoded `%0a`) or a remote answer, written
# visibly: a line break in one would start a forged line of the text log, and a NUL makes grep call it binary.
# A backslash is doubled, so a `\n` the sender wrote reads apart from a line break written visibly.
_VISIBLE_CONTROLS = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
                     for code in [*range(0x20), 0x7f, 0x85, 0x2028, 0x2029] if code != 0x09}
_VISIBLE_CONTROLS.update({0x0a: "\\n", 0x0d: "\\r", 0x5c: "\\\\"})


class WithoutSecrets:
    """A formatter whose lines hold none of our secret formats (an API key, a webhook secret), wherever they came
    from: a client's request id, an endpoint URL in a connection error, a database error's text."""

    def format(self, record):
        return SECRET_VALUE.sub(REDACTED, super().format(record))


class TextFormatter(logging.Formatter):
    """The classic line, then the ids the record carries: `… message [request_id=req_… event_id=evt_…]`. The
    message is one line whatever it holds (a traceback, appended after it, keeps its lines)."""

    def formatMessage(self, record):
        record.message = record.message.translate(_VISIBLE_CONTROLS)
        return super().formatMessage(record)

    def format(self, record):
        line = super().format(record)
        context = " ".join(f"{name}={getattr(record, name)}" for name in CONTEXT_FIELDS
                           if getattr(record, name, None))
        return f"{line} [{context}]" if context else line


class SafeTextFormatter(WithoutSecrets, TextFormatter):
    pass


class SafeJsonFormatter(WithoutSecrets, JsonFormatter):
    pass


def _formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return json_formatter()
    return SafeTextFormatter(TEXT_FORMAT)


def json_formatter(fmt: str = JSON_FORMAT) -> logging.Formatter:
    """LOG_FORMAT=json's formatter (gunicorn's own lines take it too: app/gunicorn_limits.py)."""
    return SafeJsonFormatter(fmt, timestamp="time", rename_fields={"levelname": "level", "name": "logger"})


def configure_logging(app) -> None:
    """One handler on the root logger (replaced, not added again, when another app is created)."""
    log_format = app.config["LOG_FORMAT"]
    if log_format not in LOG_FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    handler = logging.StreamHandler()
    handler.set_name(HANDLER_NAME)
    handler.addFilter(RequestContextFilter())
    handler.setFormatter(_formatter(log_format))
    root = logging.getLogger()
    for existing in [existing for existing in root.handlers if existing.get_name() == HANDLER_NAME]:
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # one line per job run is noise, and so are its warnings: a check loop outlasting its 2 s poll ("maximum
    # number of running instances reached"), a coalesced run ("was missed by"); a job that raises is an ERROR
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    # an endpoint's malformed header line is urllib3's warning with a traceback, at every try; the answer's status
    # still decides the try, which is logged (webhook walk)
    logging.getLogger("urllib3.connection").setLevel(logging.ERROR)
    app.before_request(_start_clock)
    app.after_request(_log_access)


def _start_clock():
    """From the request's arrival at the serving process's queue (app/admission.py) where it went through one: a
    request's time includes its wait for a turn."""
    g.request_started = request.environ.get(ARRIVED) or time.perf_counter()


def when_sent(response, callback) -> None:
    """Calls `callback(seconds, complete)` once the answer is sent: now for a whole body; for a streamed one (an
    export) when the server closes it, `complete` false if it stopped before its end (the client left, or the
    body failed midway). Taken at the request's end, a streamed answer's time was how long the view took to return
    its generator: a few ms for a minute's download. (Behind nginx, which buffers answers, "sent" is handed to
    nginx.)"""
    started = g.get("request_started", time.perf_counter())
    if not response.is_streamed or response.direct_passthrough:  # a file is handed on as it is, never closed here
        callback(time.perf_counter() - started, True)
        return
    if not isinstance(response.response, _SentToTheEnd):
        bodiless = request.method == "HEAD" or response.status_code < 200 or response.status_code in (204, 304)
        response.response = _SentToTheEnd(response.response, bodiless)  # Werkzeug sends no body for these
    body = response.response
    response.call_on_close(lambda: callback(time.perf_counter() - started, body.complete))


class _SentToTheEnd:
    """A streamed body that knows whether the server took all of it (an answer sent without a body is complete)."""

    def __init__(self, chunks, bodiless: bool):
        self.chunks, self.complete = chunks, bodiless

    def __iter__(self):
        yield from self.chunks
        self.complete = True

    def close(self):
        if hasattr(self.chunks, "close"):
            self.chunks.close()


def _log_access(response):
    """The access line, once the answer is sent (`when_sent`)."""
    query = request.query_string.decode("latin-1")
    path = redact_uri(f"{request.path}?{query}" if query else request.path)  # a key pasted anywhere in it
    fields = {"method": request.method, "path": path, "status": response.status_code,
              "remote_addr": request.remote_addr, "request_id": g.get("request_id"), "account_id": g.get("account_id")}
    when_sent(response, lambda seconds, complete: _write_access_line(fields, seconds, complete))
    return response


def _write_access_line(fields: dict, seconds: float, complete: bool) -> None:
    duration_ms = round(1000 * seconds, 1)
    message, extra = "%s %s %s %s ms", {**fields, "duration_ms": duration_ms}
    if not complete:
        message, extra["complete"] = message + ", stopped before the end of its body", False
    access_log.info(message, fields["method"], fields["path"], fields["status"], duration_ms, extra=extra)
