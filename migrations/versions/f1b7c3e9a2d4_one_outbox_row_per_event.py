"""at most one outbox row per event: the index on outbox.event_id becomes unique (a redelivery or recovery of an
event still owed restarts its row instead of adding a second delivery chain)

Revision ID: f1b7c3e9a2d4
Revises: d7e3a9c1f5b2
Create Date: 2026-11-25 16:20:00

The outbox holds only the deliveries still owed, so the index needs no condition. Events that already hold
several rows (redelivered while a retry was owed, before this release) keep their newest row: the chain the
last redelivery or recovery started. Down again, the index is plain; the rows stay.
"""
from alembic import op


revision = 'f1b7c3e9a2d4'
down_revision = 'd7e3a9c1f5b2'
branch_labels = None
depends_on = None


def upgrade():
    # EXISTS, not NOT IN (SELECT max(id) …): PostgreSQL hashes a NOT IN subquery only while it fits in work_mem,
    # and otherwise rescans it for every row (hours at a million owed rows)
    op.execute("DELETE FROM outbox WHERE EXISTS (SELECT 1 FROM outbox AS newer "
               "WHERE newer.event_id = outbox.event_id AND newer.id > outbox.id)")
    op.drop_index('ix_outbox_event_id', table_name='outbox')
    op.create_index('ix_outbox_event_id', 'outbox', ['event_id'], unique=True)


def downgrade():
    op.drop_index('ix_outbox_event_id', table_name='outbox')
    op.create_index('ix_outbox_event_id', 'outbox', ['event_id'], unique=False)
