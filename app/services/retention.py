"""Retention (contract §10): events older than EVENT_RETENTION_DAYS go, with their delivery attempts, in small
batches. An event whose delivery is still pending (it has an outbox row) is never pruned.

Each batch picks its event ids with a plain read (no write lock held while scanning), then deletes
them in one short write transaction, so checks and deliveries interleave with a long prune."""
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import delete, exists, select

from app.common import utcnow
from app.database import end_read_transaction, lock_in_order, write_transaction
from app.extensions import db
from app.models import DeliveryAttempt, Event, OutboxDelivery
from app.services import events


@dataclass
class Pruned:
    events: int = 0
    attempts: int = 0
    read: int = 0  # of one batch: the ids its read found (some may have been queued for a delivery meanwhile)

    def add(self, other: "Pruned") -> None:
        self.events += other.events
        self.attempts += other.attempts


def retention_cutoff(days=None):
    """The moment before which events go; a retention reaching back past year 1 keeps everything."""
    try:
        return utcnow() - timedelta(days=current_app.config["EVENT_RETENTION_DAYS"] if days is None else days)
    except OverflowError:
        return datetime.min


def _prunable_event_ids(cutoff, limit) -> list:
    still_pending = exists().where(OutboxDelivery.event_id == Event.id)
    ids = db.session.scalars(select(Event.id).where(Event.created_at < cutoff, ~still_pending).limit(limit)).all()
    end_read_transaction()
    return ids


def _delete_events(session, ids) -> int:
    """Delete the events, and take them off the counters of what is kept (those of what happened keep them)."""
    deleted = session.execute(delete(Event).where(Event.id.in_(ids))
                              .returning(Event.account_id, Event.created_at, Event.type)
                              .execution_options(synchronize_session=False)).all()
    events.uncount_kept(session, [row._mapping for row in deleted])
    return len(deleted)


def prune_batch(cutoff, batch_size) -> Pruned:
    """Delete up to `batch_size` events created before `cutoff`, with their attempts."""
    ids = _prunable_event_ids(cutoff, batch_size)
    if not ids:
        return Pruned()
    read = len(ids)
    with write_transaction() as session:
        lock_in_order(session, Event.id, Event.id.in_(ids))  # before their attempts: `write_transaction`
        # re-checked once they are locked: a redelivery may have queued one of them meanwhile
        kept = set(session.scalars(select(OutboxDelivery.event_id).where(OutboxDelivery.event_id.in_(ids))))
        ids = [event_id for event_id in ids if event_id not in kept]
        attempts = session.execute(delete(DeliveryAttempt).where(DeliveryAttempt.event_id.in_(ids))).rowcount
        pruned = _delete_events(session, ids)
    return Pruned(pruned, attempts, read)


def prune(days=None, batch_size=None, max_batches=None) -> Pruned:
    """Batch after batch until nothing older than the retention is left (or `max_batches` ran)."""
    cutoff = retention_cutoff(days)
    batch_size = batch_size or current_app.config["RETENTION_BATCH_SIZE"]
    total, batches = Pruned(), 0
    while max_batches is None or batches < max_batches:
        pruned = prune_batch(cutoff, batch_size)
        total.add(pruned)
        batches += 1
        if pruned.read < batch_size:  # (by what was pruned, an event redelivered meanwhile ended the prune early)
            return total
    return total
