"""`GET /metrics` (no API key): Prometheus text format. Off with METRICS_ENABLED=0; `metrics serve` answers
it on an address of its own instead."""
import re
from functools import lru_cache

from flask import Blueprint, Response, request
from prometheus_client import CONTENT_TYPE_LATEST

from app import metrics
from app.extensions import limiter
from app.logging_setup import when_sent

bp = Blueprint("metrics", __name__)
ROUTE_CONVERTER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")  # <subscription:subscription_id> → <subscription_id>


@bp.get("/metrics")
@limiter.exempt
def scrape():
    return Response(metrics.render(), mimetype=None, content_type=CONTENT_TYPE_LATEST)


def observe_request(response):
    """Requests by route template (never the raw path: ids would make unbounded label values), timed to the end of
    their answer."""
    route = route_template(request.url_rule.rule) if request.url_rule is not None else "unmatched"
    if route != "/metrics":
        status = response.status_code
        when_sent(response, lambda seconds, _complete: metrics.observe_request(route, status, seconds))
    return response


@lru_cache(maxsize=None)  # one entry per rule of the app
def route_template(rule: str) -> str:
    return ROUTE_CONVERTER.sub(r"<\1>", rule)


def metrics_only(app):
    """A WSGI application answering `GET /metrics` and nothing else, for a separate (internal) address."""
    def application(environ, start_response):
        if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"Only GET /metrics is served here.\n"]
        with app.app_context():
            body = metrics.render()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))])
        return [body]
    return application


def register(app):
    """Requests are counted either way: with METRICS_ENABLED=0, `metrics serve` answers for this process."""
    app.after_request(observe_request)
    if app.config["METRICS_ENABLED"]:
        app.register_blueprint(bp)
