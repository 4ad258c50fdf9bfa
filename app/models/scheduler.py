from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db


class SchedulerHeartbeat(db.Model):
    """One row per running scheduler (host:pid:nonce), ticked by its check loop: the liveness `/healthz` shows."""
    __tablename__ = "scheduler_heartbeats"

    id: Mapped[str] = mapped_column(String(120), primary_key=True)
    started_at: Mapped[datetime]
    last_tick_at: Mapped[datetime] = mapped_column(index=True)
