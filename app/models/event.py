from datetime import date, datetime
from typing import Optional

from sqlalchemy import JSON, Date, ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.common import utcnow
from app.extensions import db
from app.models.compressed_text import CompressedText
from app.services.transport import row_headers


def only_failed(status_column: str) -> dict:
    """The WHERE of a partial index of the failed rows, on SQLite and PostgreSQL. A query uses it only when its own
    WHERE holds this condition as written, the value a literal (`newest_first_page`'s `inline`). Failures are rare:
    read in the account's date index, a page of them and its total walk every row between them (~1,000 rows a
    failed one when 1 in 1,000 fails)."""
    condition = text(f"{status_column} = 'failed'")
    return {"sqlite_where": condition, "postgresql_where": condition}


class Event(db.Model):
    """The event log. `body` is the envelope serialised once: every delivery sends these exact bytes."""
    __tablename__ = "events"

    id: Mapped[str] = mapped_column(String(50), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    subscription_id: Mapped[Optional[str]] = mapped_column(String(40))
    type: Mapped[str] = mapped_column(String(60))
    body: Mapped[str] = mapped_column(CompressedText)  # stored zlib-compressed, read back exactly
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivery_status: Mapped[str] = mapped_column(String(10), default="skipped")
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (
        Index("ix_events_account_order", "account_id", "created_at", "id"),
        # A subscription's events (its id is unique across accounts, so the account need not lead).
        Index("ix_events_subscription_order", "subscription_id", "created_at", "id"),
        # The event list filtered by type (with the page's whole order, or SQLite walks ix_events_account_order).
        Index("ix_events_account_type_order", "account_id", "type", "created_at", "id"),
        # The event list filtered on delivery_status=failed.
        Index("ix_events_account_failed_order", "account_id", "created_at", "id", **only_failed("delivery_status")),
    )


class EventDayCount(db.Model):
    """How many events of a type an account created on a UTC day (`count`) and how many of them are still kept
    (`kept`): added to in the same transaction as the events are inserted (`events.count_by_day`), so the
    dashboard's chart and the usage report read a row a day and type instead of every event, and the event list's
    exact total a few rows. Retention takes its deletes off `kept` in their transaction and leaves `count`: it
    says what happened."""
    __tablename__ = "event_day_counts"

    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    type: Mapped[str] = mapped_column(String(60), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    kept: Mapped[int] = mapped_column(Integer, server_default="0")


class OutboxDelivery(db.Model):
    """A delivery owed to the endpoint: written with its event, claimed by a sender with a lease, deleted when
    the delivery ends (it succeeded, or its retry schedule is spent); the event's `delivery_status` and the
    delivery attempts keep what happened. At most one per event (a unique index): a redelivery or recovery of
    an event still owed restarts its row."""
    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(ForeignKey("events.id", ondelete="CASCADE"), index=True, unique=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # tries made by this delivery
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    claim_token: Mapped[Optional[str]] = mapped_column(String(40))
    claimed_until: Mapped[Optional[datetime]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    # The claim reads each account's oldest due delivery (`outbox.claim_due`).
    __table_args__ = (Index("ix_outbox_account_due", "account_id", "next_attempt_at"),)


class DeliveryAttempt(db.Model):
    """One HTTP try: the delivery log of contract §5."""
    __tablename__ = "delivery_attempts"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(ForeignKey("events.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(String(60))
    attempt: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(10))  # succeeded|failed
    response_status: Mapped[Optional[int]]
    duration_ms: Mapped[Optional[int]]
    error: Mapped[Optional[str]] = mapped_column(String(500))
    attempted_at: Mapped[datetime] = mapped_column(default=utcnow)
    next_attempt_at: Mapped[Optional[datetime]]
    # The headers of the request as sent (signature included, never a secret) less those the row says anyway
    # (`headers_to_keep`; rows written by earlier versions hold them all); null when the try was refused
    # before a request was made, or was recorded before this column existed. Read them whole from `request_headers`.
    kept_headers: Mapped[Optional[dict]] = mapped_column("request_headers", JSON)

    __table_args__ = (
        Index("ix_delivery_attempts_account_order", "account_id", "attempted_at", "id"),
        # An event's attempts; the delivery log filtered by event (its order too, as above).
        Index("ix_delivery_attempts_event", "event_id", "attempted_at", "id"),
        # The delivery log filtered on status=failed.
        Index("ix_delivery_attempts_account_failed_order", "account_id", "attempted_at", "id", **only_failed("status")),
    )

    @staticmethod
    def headers_to_keep(headers: Optional[dict], event_id: str, attempt: int) -> Optional[dict]:
        """What `kept_headers` stores of the headers a try was sent with."""
        if headers is None:
            return None
        said = row_headers(event_id, attempt)
        return {name: value for name, value in headers.items() if said.get(name) != value}

    @property
    def request_headers(self) -> Optional[dict]:
        """The headers as sent, in the order they were sent."""
        kept = self.kept_headers
        if kept is None:
            return None
        return {"User-Agent": kept["User-Agent"], **row_headers(self.event_id, self.attempt), **kept}


class DeliveryDayCount(db.Model):
    """Delivery attempts of an account per UTC day and status, with their summed duration: added to in the same
    transaction as the attempts are inserted (`outbox.count_attempts_by_day`); retention leaves them."""
    __tablename__ = "delivery_day_counts"

    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    status: Mapped[str] = mapped_column(String(10), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    duration_ms: Mapped[int] = mapped_column(Integer)  # the sum over the attempts that have one
