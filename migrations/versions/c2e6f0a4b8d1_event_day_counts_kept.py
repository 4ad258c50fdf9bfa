"""per-day event counters also count what is kept: the event list's exact total is a sum of a few counter rows
instead of a count of every event of the account (seconds at millions of events)

Revision ID: c2e6f0a4b8d1
Revises: b8e4d2a6c9f3
Create Date: 2026-11-26 07:50:00

`count` says what happened (usage, the overview: retention leaves it); `kept` follows retention's deletes, in the
same transaction. Filled here by one pass over the events kept.
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite


revision = 'c2e6f0a4b8d1'
down_revision = 'b8e4d2a6c9f3'
branch_labels = None
depends_on = None

KEPT = """SELECT account_id, date(created_at) AS day, type, count(*) AS kept FROM events
GROUP BY account_id, date(created_at), type"""


def upgrade():
    with op.batch_alter_table('event_day_counts') as batch_op:
        batch_op.add_column(sa.Column('kept', sa.Integer(), nullable=False, server_default='0'))
    connection = op.get_bind()
    counts = sa.table('event_day_counts', sa.column('account_id'), sa.column('day'), sa.column('type'),
                      sa.column('count'), sa.column('kept'))
    dialect_insert = postgresql.insert if connection.dialect.name == 'postgresql' else sqlite.insert
    rows = [dict(row._mapping) for row in connection.execute(sa.text(KEPT))]
    if rows:  # a day's events with no counter row (none expected) are counted as having happened too
        statement = dialect_insert(counts).values(account_id=sa.bindparam('account_id'), day=sa.bindparam('day'),
                                                  type=sa.bindparam('type'), count=sa.bindparam('kept'),
                                                  kept=sa.bindparam('kept'))
        connection.execute(statement.on_conflict_do_update(index_elements=['account_id', 'day', 'type'],
                                                           set_={'kept': statement.excluded.kept}), rows)


def downgrade():
    with op.batch_alter_table('event_day_counts') as batch_op:
        batch_op.drop_column('kept')
