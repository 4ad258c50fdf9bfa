"""provider engine: shared rate budget, provider-wide pauses, provider calls and credits in usage

Revision ID: 5b1c2d3e4f60
Revises: 3f2a9c1d7b10
Create Date: 2026-11-23 10:50:00

"""
from alembic import op
import sqlalchemy as sa


revision = '5b1c2d3e4f60'
down_revision = '3f2a9c1d7b10'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('provider_states',
    sa.Column('provider', sa.String(length=40), nullable=False),
    sa.Column('paused_reason', sa.String(length=20), nullable=True),
    sa.Column('paused_at', sa.DateTime(), nullable=True),
    sa.Column('paused_until', sa.DateTime(), nullable=True),
    sa.Column('detail', sa.String(length=200), nullable=True),
    sa.PrimaryKeyConstraint('provider', name=op.f('pk_provider_states'))
    )
    op.create_table('provider_budgets',
    sa.Column('provider', sa.String(length=40), nullable=False),
    sa.Column('slice_start', sa.DateTime(), nullable=False),
    sa.Column('used', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('provider', 'slice_start', name=op.f('pk_provider_budgets'))
    )
    with op.batch_alter_table('usage_counters', schema=None) as batch_op:
        batch_op.add_column(sa.Column('provider_calls', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('provider_credits', sa.Float(), server_default='0', nullable=False))


def downgrade():
    with op.batch_alter_table('usage_counters', schema=None) as batch_op:
        batch_op.drop_column('provider_credits')
        batch_op.drop_column('provider_calls')
    op.drop_table('provider_budgets')
    op.drop_table('provider_states')
