"""the event list filtered on delivery_status=failed and the delivery log filtered on status=failed read partial
indexes of just the failed rows, in the page's order: with failures rare, the account's date index walked ~1,000
rows for every failed one, for the page and again for its exact total

Revision ID: b6d2f8a4c1e7
Revises: c4b7e2a9d5f1
Create Date: 2026-11-25 15:45:00

"""
from alembic import op
import sqlalchemy as sa


revision = 'b6d2f8a4c1e7'
down_revision = 'c4b7e2a9d5f1'
branch_labels = None
depends_on = None

EVENTS_FAILED = sa.text("delivery_status = 'failed'")
ATTEMPTS_FAILED = sa.text("status = 'failed'")


def upgrade():
    op.create_index('ix_events_account_failed_order', 'events', ['account_id', 'created_at', 'id'],
                    sqlite_where=EVENTS_FAILED, postgresql_where=EVENTS_FAILED)
    op.create_index('ix_delivery_attempts_account_failed_order', 'delivery_attempts',
                    ['account_id', 'attempted_at', 'id'], sqlite_where=ATTEMPTS_FAILED,
                    postgresql_where=ATTEMPTS_FAILED)


def downgrade():
    op.drop_index('ix_delivery_attempts_account_failed_order', table_name='delivery_attempts')
    op.drop_index('ix_events_account_failed_order', table_name='events')
