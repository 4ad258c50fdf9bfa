"""provider slots: the declared concurrency shared by every scheduler process

Revision ID: c7e3a9d15f42
Revises: a7d3f1c9e215
Create Date: 2026-11-23 13:40:00

"""
from alembic import op
import sqlalchemy as sa


revision = 'c7e3a9d15f42'
down_revision = 'a7d3f1c9e215'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('provider_slots',
    sa.Column('provider', sa.String(length=40), nullable=False),
    sa.Column('slot', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('holder', sa.String(length=40), nullable=True),
    sa.Column('leased_until', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('provider', 'slot', name=op.f('pk_provider_slots'))
    )


def downgrade():
    op.drop_table('provider_slots')
