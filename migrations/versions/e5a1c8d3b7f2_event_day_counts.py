"""per-day counters of events (by type) and delivery attempts (by status), for the overview and usage

Revision ID: e5a1c8d3b7f2
Revises: c7e3a9d15f42
Create Date: 2026-11-23 16:40:00

Changed by the services in the same transaction as the events and attempts are inserted or pruned; filled
here from the rows kept. The subscription timeline's index gains the order columns.
"""
from alembic import op
import sqlalchemy as sa


revision = 'e5a1c8d3b7f2'
down_revision = 'c7e3a9d15f42'
branch_labels = None
depends_on = None

FILL_EVENTS = """
INSERT INTO event_day_counts (account_id, day, type, count)
SELECT account_id, date(created_at), type, count(*) FROM events GROUP BY account_id, date(created_at), type
"""
FILL_ATTEMPTS = """
INSERT INTO delivery_day_counts (account_id, day, status, count, duration_ms)
SELECT account_id, date(attempted_at), status, count(*), coalesce(sum(duration_ms), 0) FROM delivery_attempts
GROUP BY account_id, date(attempted_at), status
"""


def upgrade():
    op.create_table('event_day_counts',
    sa.Column('account_id', sa.String(length=40), nullable=False),
    sa.Column('day', sa.Date(), nullable=False),
    sa.Column('type', sa.String(length=60), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['account_id'], ['accounts.id'], name=op.f('fk_event_day_counts_account_id_accounts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('account_id', 'day', 'type', name=op.f('pk_event_day_counts'))
    )
    op.create_table('delivery_day_counts',
    sa.Column('account_id', sa.String(length=40), nullable=False),
    sa.Column('day', sa.Date(), nullable=False),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('duration_ms', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['account_id'], ['accounts.id'], name=op.f('fk_delivery_day_counts_account_id_accounts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('account_id', 'day', 'status', name=op.f('pk_delivery_day_counts'))
    )
    op.execute(FILL_EVENTS)
    op.execute(FILL_ATTEMPTS)
    # The timeline of one subscription, newest first, read in order from the index (without the order
    # columns SQLite walked the account's whole event log by date and filtered it).
    op.drop_index('ix_events_account_subscription', table_name='events')
    op.create_index('ix_events_account_subscription', 'events', ['account_id', 'subscription_id', 'created_at', 'id'],
                    unique=False)


def downgrade():
    op.drop_index('ix_events_account_subscription', table_name='events')
    op.create_index('ix_events_account_subscription', 'events', ['account_id', 'subscription_id'], unique=False)
    op.drop_table('delivery_day_counts')
    op.drop_table('event_day_counts')
