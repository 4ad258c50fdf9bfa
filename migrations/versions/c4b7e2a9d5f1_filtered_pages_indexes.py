"""the event list by type and the delivery log of one event read in their own indexes: each index gains the
page's order columns, without which SQLite walked the account's whole log in date order and filtered it

Revision ID: c4b7e2a9d5f1
Revises: a8e2c6f4d1b3
Create Date: 2026-11-23 20:15:00

"""
from alembic import op


revision = 'c4b7e2a9d5f1'
down_revision = 'a8e2c6f4d1b3'
branch_labels = None
depends_on = None


def upgrade():
    op.drop_index('ix_events_account_type_order', table_name='events')
    op.create_index('ix_events_account_type_order', 'events', ['account_id', 'type', 'created_at', 'id'])
    op.drop_index('ix_delivery_attempts_event', table_name='delivery_attempts')
    op.create_index('ix_delivery_attempts_event', 'delivery_attempts', ['event_id', 'attempted_at', 'id'])


def downgrade():
    op.drop_index('ix_delivery_attempts_event', table_name='delivery_attempts')
    op.create_index('ix_delivery_attempts_event', 'delivery_attempts', ['event_id'])
    op.drop_index('ix_events_account_type_order', table_name='events')
    op.create_index('ix_events_account_type_order', 'events', ['account_id', 'type', 'created_at'])
