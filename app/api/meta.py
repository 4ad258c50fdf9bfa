"""Endpoints without an API key: health and the OpenAPI document."""
from datetime import datetime

from flask import Blueprint, current_app, g

from app.api.openapi import cached_document
from app.common import isoformat, utcnow
from app.extensions import limiter
from app.services import health
from app.version import VERSION

bp = Blueprint("meta", __name__)
docs_bp = Blueprint("docs", __name__)


@bp.get("/healthz")
@limiter.exempt
def healthz():
    """200 when the database answers and a scheduler ticked recently; else 503 with the same document plus
    the error fields of contract §2, so a load balancer reads the status and a person reads why. A paused
    provider (throttled, out of credits) is `degraded`, still 200: the API serves, checking waits."""
    found = health.report(current_app.config["HEALTH_SCHEDULER_MAX_LAG_SECONDS"])
    problems = found.pop("problems")
    scheduler = found["scheduler"] and {**found["scheduler"],
                                        "last_tick_at": isoformat(found["scheduler"]["last_tick_at"])}
    provider = found["provider"] and {name: isoformat(value) if isinstance(value, datetime) else value
                                      for name, value in found["provider"].items()}
    paused = provider is not None and provider["state"] == "paused"
    status = "unavailable" if problems else ("degraded" if paused else "ok")
    body = {"status": status, **found, "scheduler": scheduler, "provider": provider, "version": VERSION}
    if not problems:
        return body
    body.update(error="UNAVAILABLE", message=" ".join(problems), timestamp=isoformat(utcnow()),
                request_id=g.get("request_id"))
    return body, 503


@docs_bp.get("/openapi.json")
@limiter.exempt
def openapi():
    return cached_document()
