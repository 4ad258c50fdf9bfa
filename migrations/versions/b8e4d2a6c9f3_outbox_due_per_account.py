"""the outbox's due index leads with the account: the claim shares a batch out among the accounts with deliveries
due, reading each one's oldest due by the index

Revision ID: b8e4d2a6c9f3
Revises: a3c9e5f7b1d8
Create Date: 2026-11-26 04:10:00

The outbox holds only what is owed (the backlog), so the index is rebuilt in moments. It also serves a removal of
a configuration (its account's rows) and a recovery's "waiting for a later try".
"""
from alembic import op


revision = 'b8e4d2a6c9f3'
down_revision = 'a3c9e5f7b1d8'
branch_labels = None
depends_on = None


def upgrade():
    op.create_index("ix_outbox_account_due", "outbox", ["account_id", "next_attempt_at"])
    op.drop_index("ix_outbox_due", table_name="outbox")


def downgrade():
    op.create_index("ix_outbox_due", "outbox", ["next_attempt_at"])
    op.drop_index("ix_outbox_account_due", table_name="outbox")
