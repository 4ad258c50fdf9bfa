"""slim snapshots: stored snapshots lose the activities (and their text) detection never reads

Snapshots are now written in a slim form (the fields detection compares and short keys of the activities
seen, app/services/detection.py); the next check of each subscription replaces its snapshot. This data
migration takes the bulk away at once from the snapshots stored before: one UPDATE strips `activities`
(87% of a contact's snapshot) and keeps `seen_activity_ids`, which detection still reads. On SQLite the
freed pages are reused by new rows (the file shrinks only with VACUUM).

Downgrade changes nothing; an older release reads the stripped snapshots as before, but not the slim ones
written since: their subscriptions' next check under it reports the activities the provider shows again.

Revision ID: d4b8e1f2a6c9
Revises: 9c1e5d2a4b70
Create Date: 2026-11-23 13:40:00

"""
from alembic import op


revision = 'd4b8e1f2a6c9'
down_revision = '9c1e5d2a4b70'
branch_labels = None
depends_on = None


def upgrade():
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("UPDATE subscriptions SET snapshot = (snapshot::jsonb - 'activities')::json "
                   "WHERE json_typeof(snapshot) = 'object' AND snapshot -> 'activities' IS NOT NULL")
    else:
        op.execute("UPDATE subscriptions SET snapshot = json_remove(snapshot, '$.activities') "
                   "WHERE json_valid(snapshot) AND json_type(snapshot, '$.activities') IS NOT NULL")


def downgrade():
    pass
