from datetime import datetime
from typing import Optional

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.common import utcnow
from app.extensions import db


class WebhookConfig(db.Model):
    """One per account (contract §5)."""
    __tablename__ = "webhook_configs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), unique=True)
    endpoint_url: Mapped[str] = mapped_column(String(2048))
    events: Mapped[list] = mapped_column(JSON)
    initial_webhook: Mapped[str] = mapped_column(String(10), default="latest")
    secret: Mapped[str] = mapped_column(String(100))
    previous_secret: Mapped[Optional[str]] = mapped_column(String(100))
    rotated_at: Mapped[Optional[datetime]]
    is_active: Mapped[bool] = mapped_column(default=True)
    failing_since: Mapped[Optional[datetime]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
