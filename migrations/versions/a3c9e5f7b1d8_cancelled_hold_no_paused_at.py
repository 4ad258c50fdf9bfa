"""cancelled subscriptions hold no paused_at (contract: `paused_at` when paused): those cancelled while paused
before the cancel cleared it

Revision ID: a3c9e5f7b1d8
Revises: f1b7c3e9a2d4
Create Date: 2026-11-25 16:35:00

`paused_at` is in no trigger's column list (the counters follow account, type, status and id): nothing else
changes. The downgrade has nothing to restore: when they were paused is not kept elsewhere.
"""
from alembic import op


revision = 'a3c9e5f7b1d8'
down_revision = 'f1b7c3e9a2d4'
branch_labels = None
depends_on = None


def upgrade():
    op.execute("UPDATE subscriptions SET paused_at = NULL WHERE status = 'cancelled' AND paused_at IS NOT NULL")


def downgrade():
    pass
