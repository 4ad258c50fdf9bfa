"""Endpoints without an API key: health and the OpenAPI document."""
from flask import Blueprint
from sqlalchemy import text

from app.api.errors import error_response
from app.api.openapi import cached_document
from app.extensions import db, limiter

bp = Blueprint("meta", __name__)
docs_bp = Blueprint("docs", __name__)


@bp.get("/healthz")
@limiter.exempt
def healthz():
    try:
        db.session.execute(text("SELECT 1"))
    except Exception:  # noqa: BLE001 - any database failure means "not healthy"
        return error_response(503, "UNAVAILABLE", "The database is not reachable.")
    finally:
        db.session.rollback()
    return {"status": "ok", "database": "ok"}


@docs_bp.get("/openapi.json")
@limiter.exempt
def openapi():
    return cached_document()
