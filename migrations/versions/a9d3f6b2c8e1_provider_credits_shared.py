"""the vendor's credit balance is kept in provider_states, so every process shows it: it lived in the memory of
the process that made the calls (a separate `scheduler run` left /healthz of the web process showing null)

Revision ID: a9d3f6b2c8e1
Revises: c2e6f0a4b8d1
Create Date: 2026-11-26 13:45:00
"""
from alembic import op
import sqlalchemy as sa


revision = 'a9d3f6b2c8e1'
down_revision = 'c2e6f0a4b8d1'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provider_states') as batch_op:
        batch_op.add_column(sa.Column('credits_remaining', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('credits_reported_at', sa.DateTime(), nullable=True))


def downgrade():
    with op.batch_alter_table('provider_states') as batch_op:
        batch_op.drop_column('credits_reported_at')
        batch_op.drop_column('credits_remaining')
