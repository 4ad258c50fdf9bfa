from datetime import datetime
from typing import Optional

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.common import utcnow
from app.extensions import db

LIVE_STATUSES = ("active", "paused")


class Subscription(db.Model):
    __tablename__ = "subscriptions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    entity_type: Mapped[str] = mapped_column(String(10))
    network_id: Mapped[str] = mapped_column(String(100))
    network_url: Mapped[str] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(10), default="active")
    custom_metadata: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    paused_at: Mapped[Optional[datetime]]
    cancelled_at: Mapped[Optional[datetime]]

    # Monitoring state (issue: monitoring). `snapshot` is the last known state of the entity.
    last_checked_at: Mapped[Optional[datetime]]
    last_change_at: Mapped[Optional[datetime]]
    last_check_status: Mapped[str] = mapped_column(String(20), default="pending")
    next_check_at: Mapped[Optional[datetime]]
    check_count: Mapped[int] = mapped_column(Integer, default=0)
    change_count: Mapped[int] = mapped_column(Integer, default=0)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    unavailable_reason: Mapped[Optional[str]] = mapped_column(String(20))
    snapshot: Mapped[Optional[dict]] = mapped_column(JSON)
    claim_token: Mapped[Optional[str]] = mapped_column(String(40))
    claimed_until: Mapped[Optional[datetime]]

    __table_args__ = (
        # entity_type and network_id: a search walking the account's newest rows tests them in the index
        Index("ix_subscriptions_account_order", "account_id", "created_at", "id", "entity_type",
              "network_id"),
        Index("ix_subscriptions_account_status_order", "account_id", "status", "created_at", "id"),
        Index("ix_subscriptions_due", "status", "next_check_at"),
        # At most one live (active or paused) subscription per entity and account; a cancelled one
        # does not block a new one. Partial unique indexes work on SQLite and PostgreSQL alike.
        Index("uq_subscriptions_live_entity", "account_id", "entity_type", "network_id", unique=True,
              sqlite_where=text("status IN ('active', 'paused')"),
              postgresql_where=text("status IN ('active', 'paused')")),
    )


class SubscriptionCount(db.Model):
    """How many subscriptions an account has per entity type and status. Kept by database triggers (migration
    a7d3f1c9e215) in the same transaction as every insert, status change and delete of a subscription, so
    list totals and the tier cap never count rows."""
    __tablename__ = "subscription_counts"

    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True)
    entity_type: Mapped[str] = mapped_column(String(10), primary_key=True)
    status: Mapped[str] = mapped_column(String(10), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)


class SubscriptionGramCount(db.Model):
    """How many subscriptions of an account, entity type and status hold a 1- or 2-character substring `gram`
    of their network id, or start with one (`gram` = `^` and the start). Kept by database triggers (migration
    e5f1a2b3c4d6) like SubscriptionCount; a search too short for the trigram index takes its total from it."""
    __tablename__ = "subscription_gram_counts"

    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True)
    entity_type: Mapped[str] = mapped_column(String(10), primary_key=True)
    status: Mapped[str] = mapped_column(String(10), primary_key=True)
    gram: Mapped[str] = mapped_column(String(3), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
