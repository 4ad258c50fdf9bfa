"""The event log: building envelopes and recording events with their outbox delivery (contract §5, §6)."""
import json
from collections import Counter

from sqlalchemy import func, insert, select

from app import metrics
from app.common import isoformat, new_sortable_id, unix_seconds, utcnow
from app.database import add_to_counters, newest_first_page
from app.errors import NotFound
from app.extensions import db
from app.models import DeliveryAttempt, Event, EventDayCount, OutboxDelivery, WebhookConfig

EVENT_TYPES = (
    "test",
    "subscription.initial_state",
    "contact.position_changed",
    "contact.headline_changed",
    "company.employee_count_changed",
    "company.description_changed",
    "contact.post_created",
    "company.post_created",
    "contact.comment_created",
    "contact.reaction_added",
    "entity.unavailable",
)

DELIVERY_STATUSES = ("pending", "succeeded", "failed", "skipped")

_new_delivery_listeners = []


def type_matches(patterns, event_type: str) -> bool:
    """`*` matches everything, `contact.*` a prefix, anything else the exact type."""
    for pattern in patterns:
        if pattern == "*" or pattern == event_type:
            return True
        if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
            return True
    return False


def entity_data(subscription) -> dict:
    return {"id": subscription.id, "type": subscription.entity_type,
            "network_id": subscription.network_id, "network_url": subscription.network_url}


def envelope(event_id, event_type, created_at, data, metadata=None) -> dict:
    body = {"id": event_id, "type": event_type, "created": unix_seconds(created_at), "data": data}
    if metadata is not None:
        body["metadata"] = metadata
    return body


def webhook_config_for(session, account_id, keep=False):
    return webhook_configs_for(session, [account_id], keep).get(account_id)


def webhook_configs_for(session, account_ids, keep=False, to_update=False) -> dict:
    """{account_id: its webhook configuration} for those that have one, in one query. A writer that queues
    deliveries by what it read passes `keep`: the configurations stay locked until it commits (FOR KEY SHARE, in id
    order), so a removal waits for its outbox rows, or has committed first and none is read (`webhooks.remove`).
    One that will write them passes `to_update` (FOR NO KEY UPDATE, in id order): a configuration changed or deleted
    meanwhile is not written over, or updated once it is gone."""
    query = select(WebhookConfig).where(WebhookConfig.account_id.in_(account_ids))
    if keep or to_update:
        query = query.order_by(WebhookConfig.id).with_for_update(read=not to_update, key_share=True)
    # populate_existing: the configuration as committed now, not a copy the session kept from earlier.
    configs = session.scalars(query.execution_options(populate_existing=True))
    return {config.account_id: config for config in configs}


def wants_delivery(config, event_type: str) -> bool:
    return config is not None and config.is_active and type_matches(config.events, event_type)


def build(account_id, event_type, data, *, subscription=None, config=None, now=None, id_prefix="evt"):
    """The rows of one event and, when the account's webhook configuration wants this type, of its
    outbox delivery (else None), as plain dicts: `record` stores one; a caller recording many events in
    one transaction (the check engine) builds them and inserts them all at once with `store`."""
    now = now or utcnow()
    event_id = new_sortable_id(id_prefix)
    metadata = None
    if subscription is not None:
        metadata = {"subscription_id": subscription.id, "detected_at": isoformat(now),
                    "custom_metadata": subscription.custom_metadata or {}}
    body = json.dumps(envelope(event_id, event_type, now, data, metadata), separators=(",", ":"),
                      ensure_ascii=False)
    deliver = wants_delivery(config, event_type)
    event = {"id": event_id, "account_id": account_id,
             "subscription_id": subscription.id if subscription else None, "type": event_type, "body": body,
             "created_at": now, "delivery_status": "pending" if deliver else "skipped", "attempt_count": 0}
    delivery = None
    if deliver:
        delivery = {"event_id": event_id, "account_id": account_id, "attempts": 0, "next_attempt_at": now,
                    "created_at": now}
    return event, delivery


def record(session, account_id, event_type, data, *, subscription=None, config=None, now=None,
           id_prefix="evt"):
    """Store an event inside the caller's transaction, and its outbox delivery when the account's
    webhook configuration (passed in, read in the same transaction) wants this type."""
    event_row, delivery_row = build(account_id, event_type, data, subscription=subscription, config=config,
                                    now=now, id_prefix=id_prefix)
    event = Event(**event_row)
    session.add(event)
    if delivery_row is not None:
        session.add(OutboxDelivery(**delivery_row))
    count_by_day(session, [event_row])
    metrics.count_events([event_type])
    return event


def store(session, built):
    """Insert many `build` results inside the caller's transaction: two multi-row statements instead
    of one ORM object per row (the check engine records thousands of events per batch)."""
    event_rows = [event for event, _ in built]
    delivery_rows = [delivery for _, delivery in built if delivery is not None]
    if event_rows:
        session.execute(insert(Event.__table__), event_rows)
        count_by_day(session, event_rows)
        metrics.count_events(event["type"] for event in event_rows)
    if delivery_rows:
        session.execute(insert(OutboxDelivery.__table__), delivery_rows)


def count_by_day(session, event_rows):
    """Add event rows to `event_day_counts` (as happened and as kept), inside the caller's transaction."""
    _add_by_day(session, event_rows, happened=1, kept=1)


def uncount_kept(session, event_rows):
    """Take deleted event rows off what `event_day_counts` says is kept, inside the caller's transaction
    (retention: they still happened)."""
    _add_by_day(session, event_rows, happened=0, kept=-1)


def _add_by_day(session, event_rows, happened: int, kept: int):
    counts = Counter((row["account_id"], row["created_at"].date(), row["type"]) for row in event_rows)
    add_to_counters(session, EventDayCount, ("account_id", "day", "type"),
                    [{"account_id": account_id, "day": day, "type": event_type, "count": happened * count,
                      "kept": kept * count}
                     for (account_id, day, event_type), count in counts.items()])


def on_new_deliveries(listener):
    """Register a callable run after a transaction that queued deliveries has committed."""
    _new_delivery_listeners.append(listener)


def notify_new_deliveries():
    for listener in _new_delivery_listeners:
        listener()


def list_page(account_id, limit, offset, event_type=None, subscription_id=None, delivery_status=None):
    """(rows, total). The total of the account's events, all or of one type, is the sum of its counters of what is
    kept (a row a day and type): counting the rows took seconds at millions of events (PostgreSQL walk: 3.6 s a
    page at 5.7M). Filtered by subscription or on failures, the rows are counted in their own indexes."""
    kept = None
    if subscription_id is None and delivery_status is None:
        of_type = [EventDayCount.type == event_type] if event_type else []
        kept = select(func.coalesce(func.sum(EventDayCount.kept), 0)).where(EventDayCount.account_id == account_id,
                                                                            *of_type)
    return newest_first_page(Event, Event.created_at, limit, offset, inline=("delivery_status",), total_query=kept,
                             narrowed_by="subscription_id", account_id=account_id, type=event_type,
                             subscription_id=subscription_id, delivery_status=delivery_status)


def get(account_id, event_id) -> Event:
    event = db.session.scalar(select(Event).where(Event.id == event_id, Event.account_id == account_id))
    if event is None:
        raise NotFound("event", event_id)
    return event


def attempts_of(event_id):
    return db.session.scalars(select(DeliveryAttempt).where(DeliveryAttempt.event_id == event_id)
                              .order_by(DeliveryAttempt.attempt, DeliveryAttempt.attempted_at)).all()


def as_dict(event: Event, attempts=None) -> dict:
    """The stored envelope plus `delivery_status` (and the attempts, when given)."""
    item = json.loads(event.body)
    item["delivery_status"] = event.delivery_status
    if attempts is not None:
        item["attempts"] = attempts
    return item
