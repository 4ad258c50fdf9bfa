from flask import Blueprint

from app.api.auth import require_api_key
from app.api.http import account_id, load_query, spec
from app.api.limits import default_limit
from app.schemas.base import page
from app.schemas.events import EventDetailSchema, EventListQuerySchema, EventListSchema
from app.schemas.webhooks import RedeliveredSchema
from app.errors import InvalidState
from app.services import events, outbox

bp = Blueprint("events", __name__)
bp.before_request(require_api_key)
list_query_schema = EventListQuerySchema()
list_schema = EventListSchema()
detail_schema = EventDetailSchema()
redelivered_schema = RedeliveredSchema()


@bp.get("/events")
@default_limit
@spec("The event log, newest first", query=EventListQuerySchema, response=EventListSchema, tag="events")
def list_events():
    query = load_query(list_query_schema)
    rows, total = events.list_page(account_id(), query["limit"], query["offset"],
                                   query.get("type"), query.get("subscription_id"), query.get("delivery_status"))
    return list_schema.dump(page([events.as_dict(row) for row in rows], total, query["limit"], query["offset"]))


@bp.get("/events/<event_id>")
@default_limit
@spec("One event with its delivery attempts", response=EventDetailSchema, tag="events")
def get_event(event_id):
    event = events.get(account_id(), event_id)
    return detail_schema.dump(events.as_dict(event, events.attempts_of(event.id)))


@bp.post("/events/<event_id>/redeliver")
@default_limit
@spec("Deliver an event once more, whatever its status (a delivery still owed is restarted, not doubled)",
      response=RedeliveredSchema, status=202, tag="events", errors=(InvalidState,))
def redeliver_event(event_id):
    return redelivered_schema.dump(outbox.redeliver(account_id(), event_id)), 202
