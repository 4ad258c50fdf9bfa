"""a subscription's events indexed by (subscription_id, created_at, id): subscription ids are unique across
accounts, so the account id that led the index (about 30 bytes an event) is left out

Revision ID: a8e2c6f4d1b3
Revises: f3c8a1d5e927
Create Date: 2026-11-23 19:45:00

"""
from alembic import op


revision = 'a8e2c6f4d1b3'
down_revision = 'f3c8a1d5e927'
branch_labels = None
depends_on = None


def upgrade():
    op.create_index('ix_events_subscription_order', 'events', ['subscription_id', 'created_at', 'id'], unique=False)
    op.drop_index('ix_events_account_subscription', table_name='events')


def downgrade():
    op.create_index('ix_events_account_subscription', 'events', ['account_id', 'subscription_id', 'created_at', 'id'],
                    unique=False)
    op.drop_index('ix_events_subscription_order', table_name='events')
