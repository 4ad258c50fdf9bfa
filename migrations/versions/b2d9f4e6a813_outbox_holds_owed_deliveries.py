"""the outbox holds only the deliveries still owed: a delivery's row goes when it succeeds or its retry
schedule is spent (the event's delivery_status and the delivery attempts keep what happened), so `status`
and its place in the due index go

Revision ID: b2d9f4e6a813
Revises: e5f1a2b3c4d6
Create Date: 2026-11-23 19:20:00

"""
from alembic import op
import sqlalchemy as sa


revision = 'b2d9f4e6a813'
down_revision = 'e5f1a2b3c4d6'
branch_labels = None
depends_on = None


def upgrade():
    op.execute("DELETE FROM outbox WHERE status <> 'pending'")
    op.drop_index('ix_outbox_due', table_name='outbox')
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.drop_column('status')
    op.create_index('ix_outbox_due', 'outbox', ['next_attempt_at'], unique=False)


def downgrade():
    op.drop_index('ix_outbox_due', table_name='outbox')
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status', sa.String(length=10), nullable=False, server_default='pending'))
    op.create_index('ix_outbox_due', 'outbox', ['status', 'next_attempt_at'], unique=False)
