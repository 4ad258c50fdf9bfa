"""`GET /metrics` (no API key): Prometheus text format. Off with METRICS_ENABLED=0."""
from flask import Blueprint, Response, request
from prometheus_client import CONTENT_TYPE_LATEST

from app import metrics
from app.extensions import limiter
from app.logging_setup import elapsed_seconds

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
@limiter.exempt
def scrape():
    return Response(metrics.render(), mimetype=None, content_type=CONTENT_TYPE_LATEST)


def observe_request(response):
    """Requests by route template (never the raw path: ids would make unbounded label values)."""
    route = request.url_rule.rule if request.url_rule is not None else "unmatched"
    if route != "/metrics":
        metrics.observe_request(route, response.status_code, elapsed_seconds())
    return response


def register(app):
    if not app.config["METRICS_ENABLED"]:
        return
    app.register_blueprint(bp)
    app.after_request(observe_request)
