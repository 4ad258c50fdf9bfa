"""scheduler heartbeats

Revision ID: 3f2a9c1d7b10
Revises: 801079c102de
Create Date: 2026-11-23 11:05:00

"""
from alembic import op
import sqlalchemy as sa


revision = '3f2a9c1d7b10'
down_revision = '801079c102de'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('scheduler_heartbeats',
    sa.Column('id', sa.String(length=120), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=False),
    sa.Column('last_tick_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_scheduler_heartbeats'))
    )
    with op.batch_alter_table('scheduler_heartbeats', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_scheduler_heartbeats_last_tick_at'), ['last_tick_at'], unique=False)


def downgrade():
    with op.batch_alter_table('scheduler_heartbeats', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_scheduler_heartbeats_last_tick_at'))
    op.drop_table('scheduler_heartbeats')
