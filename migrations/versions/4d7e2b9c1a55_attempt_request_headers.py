"""delivery attempts keep the headers they were sent with

Revision ID: 4d7e2b9c1a55
Revises: d4b8e1f2a6c9
Create Date: 2026-11-23 13:45:00

"""
from alembic import op
import sqlalchemy as sa


revision = '4d7e2b9c1a55'
down_revision = 'd4b8e1f2a6c9'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('delivery_attempts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('request_headers', sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table('delivery_attempts', schema=None) as batch_op:
        batch_op.drop_column('request_headers')
