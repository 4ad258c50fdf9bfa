"""dashboard sessions; events by account and type

Revision ID: 9c1e5d2a4b70
Revises: 5b1c2d3e4f60
Create Date: 2026-11-23 11:50:00

"""
from alembic import op
import sqlalchemy as sa


revision = '9c1e5d2a4b70'
down_revision = '5b1c2d3e4f60'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('dashboard_sessions',
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('account_id', sa.String(length=40), nullable=False),
    sa.Column('api_key_id', sa.String(length=40), nullable=False),
    sa.Column('csrf_token', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('expires_at', sa.DateTime(), nullable=False),
    sa.Column('notice', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['account_id'], ['accounts.id'], name=op.f('fk_dashboard_sessions_account_id_accounts'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['api_key_id'], ['api_keys.id'], name=op.f('fk_dashboard_sessions_api_key_id_api_keys'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('token_hash', name=op.f('pk_dashboard_sessions'))
    )
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dashboard_sessions_account_id'), ['account_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_dashboard_sessions_api_key_id'), ['api_key_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_dashboard_sessions_expires_at'), ['expires_at'], unique=False)
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_account_type_order', ['account_id', 'type', 'created_at'], unique=False)


def downgrade():
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_account_type_order')
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dashboard_sessions_expires_at'))
        batch_op.drop_index(batch_op.f('ix_dashboard_sessions_api_key_id'))
        batch_op.drop_index(batch_op.f('ix_dashboard_sessions_account_id'))
    op.drop_table('dashboard_sessions')
