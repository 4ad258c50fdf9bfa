from datetime import datetime
from typing import Optional

from sqlalchemy import DateTime, Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db


class ProviderState(db.Model):
    """One row per provider that has ever been paused or reported its credits: what every process shares."""
    __tablename__ = "provider_states"

    provider: Mapped[str] = mapped_column(String(40), primary_key=True)
    paused_reason: Mapped[Optional[str]] = mapped_column(String(20))  # rate_limited | quota_exhausted
    paused_at: Mapped[Optional[datetime]]
    paused_until: Mapped[Optional[datetime]]  # None with a reason: until an operator resumes
    detail: Mapped[Optional[str]] = mapped_column(String(200))
    # the vendor's balance as it last reported it, to any process
    credits_remaining: Mapped[Optional[float]] = mapped_column(Float)
    credits_reported_at: Mapped[Optional[datetime]]


class ProviderBudget(db.Model):
    """Upstream calls granted per provider and time slice: the rate budget every process shares."""
    __tablename__ = "provider_budgets"

    provider: Mapped[str] = mapped_column(String(40), primary_key=True)
    slice_start: Mapped[datetime] = mapped_column(DateTime, primary_key=True)
    used: Mapped[int] = mapped_column(Integer, default=0)


class ProviderSlot(db.Model):
    """One row per concurrency slot of a provider: a process holds a slot (`holder`) for each upstream call it
    has in flight, so every process together stays within the declared concurrency. The lease frees the
    slot of a holder that died mid-call."""
    __tablename__ = "provider_slots"

    provider: Mapped[str] = mapped_column(String(40), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    holder: Mapped[Optional[str]] = mapped_column(String(40))
    leased_until: Mapped[Optional[datetime]]
