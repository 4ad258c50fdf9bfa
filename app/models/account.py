from datetime import date, datetime
from typing import Optional

from sqlalchemy import Date, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.common import utcnow
from app.config import TIER_NAME_MAX
from app.extensions import db


class Account(db.Model):
    __tablename__ = "accounts"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    tier: Mapped[str] = mapped_column(String(TIER_NAME_MAX))
    trial_ends_at: Mapped[Optional[datetime]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(db.Model):
    """Only the SHA-256 of a key is stored: keys carry 190 bits of entropy, so a slow hash adds nothing."""
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_hint: Mapped[str] = mapped_column(String(4))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[Optional[datetime]]


class UsageCounter(db.Model):
    """Per account and UTC day: counters that have no table of their own to count from."""
    __tablename__ = "usage_counters"

    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    checks: Mapped[int] = mapped_column(Integer, default=0)
    provider_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # lookups made
    provider_credits: Mapped[float] = mapped_column(Float, default=0, server_default="0")  # as the vendor reports

    __table_args__ = (Index("ix_usage_counters_day", "day"),)
