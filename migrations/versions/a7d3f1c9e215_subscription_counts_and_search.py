"""subscription counters kept by triggers; a trigram index on network ids; status pages in order

Revision ID: a7d3f1c9e215
Revises: 4d7e2b9c1a55
Create Date: 2026-11-23 13:45:00

Counters: one row per (account, entity type, status), changed by triggers in the same transaction as every
insert, status change and delete of a subscription, whatever writes it (the services, Core inserts of the
benchmarks, an operator's SQL). Search: FTS5 with the trigram tokenizer on SQLite (an external-content
table over subscriptions' rowids, kept by triggers), pg_trgm's GIN index on PostgreSQL.
"""
from alembic import op
import sqlalchemy as sa


revision = 'a7d3f1c9e215'
down_revision = '4d7e2b9c1a55'
branch_labels = None
depends_on = None

FILL_COUNTS = """
INSERT INTO subscription_counts (account_id, entity_type, status, count)
SELECT account_id, entity_type, status, count(*) FROM subscriptions GROUP BY account_id, entity_type, status
"""

# Every statement keys the counter row by (account_id, entity_type, status); a delete only decrements (its
# account may be going away in the same cascade, so it must not re-create the row).
SQLITE_STATEMENTS = (
    """CREATE TRIGGER subscriptions_count_insert AFTER INSERT ON subscriptions BEGIN
        INSERT INTO subscription_counts (account_id, entity_type, status, count)
        VALUES (new.account_id, new.entity_type, new.status, 1)
        ON CONFLICT (account_id, entity_type, status) DO UPDATE SET count = count + 1;
    END""",
    """CREATE TRIGGER subscriptions_count_delete AFTER DELETE ON subscriptions BEGIN
        UPDATE subscription_counts SET count = count - 1
        WHERE account_id = old.account_id AND entity_type = old.entity_type AND status = old.status;
    END""",
    """CREATE TRIGGER subscriptions_count_update AFTER UPDATE OF account_id, entity_type, status ON subscriptions
    WHEN old.account_id IS NOT new.account_id OR old.entity_type IS NOT new.entity_type
         OR old.status IS NOT new.status BEGIN
        UPDATE subscription_counts SET count = count - 1
        WHERE account_id = old.account_id AND entity_type = old.entity_type AND status = old.status;
        INSERT INTO subscription_counts (account_id, entity_type, status, count)
        VALUES (new.account_id, new.entity_type, new.status, 1)
        ON CONFLICT (account_id, entity_type, status) DO UPDATE SET count = count + 1;
    END""",
    """CREATE VIRTUAL TABLE subscriptions_search USING fts5(
        network_id, content='subscriptions', content_rowid='rowid', tokenize='trigram')""",
    "INSERT INTO subscriptions_search (subscriptions_search) VALUES ('rebuild')",
    """CREATE TRIGGER subscriptions_search_insert AFTER INSERT ON subscriptions BEGIN
        INSERT INTO subscriptions_search (rowid, network_id) VALUES (new.rowid, new.network_id);
    END""",
    """CREATE TRIGGER subscriptions_search_delete AFTER DELETE ON subscriptions BEGIN
        INSERT INTO subscriptions_search (subscriptions_search, rowid, network_id)
        VALUES ('delete', old.rowid, old.network_id);
    END""",
    """CREATE TRIGGER subscriptions_search_update AFTER UPDATE OF network_id ON subscriptions BEGIN
        INSERT INTO subscriptions_search (subscriptions_search, rowid, network_id)
        VALUES ('delete', old.rowid, old.network_id);
        INSERT INTO subscriptions_search (rowid, network_id) VALUES (new.rowid, new.network_id);
    END""",
)
SQLITE_DROPS = ("DROP TRIGGER subscriptions_search_update", "DROP TRIGGER subscriptions_search_delete",
                "DROP TRIGGER subscriptions_search_insert", "DROP TABLE subscriptions_search",
                "DROP TRIGGER subscriptions_count_update", "DROP TRIGGER subscriptions_count_delete",
                "DROP TRIGGER subscriptions_count_insert")

# A status change moves one unit between two counter rows; they are locked in key order (lowest first) so
# a pause and a resume racing in one account cannot deadlock.
POSTGRESQL_STATEMENTS = (
    """CREATE FUNCTION subscription_count_add(a varchar, t varchar, s varchar, d integer) RETURNS void
    LANGUAGE sql AS $$
        INSERT INTO subscription_counts (account_id, entity_type, status, count) VALUES (a, t, s, d)
        ON CONFLICT (account_id, entity_type, status)
        DO UPDATE SET count = subscription_counts.count + excluded.count
    $$""",
    """CREATE FUNCTION subscription_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            PERFORM subscription_count_add(NEW.account_id, NEW.entity_type, NEW.status, 1);
        ELSIF TG_OP = 'DELETE' THEN
            UPDATE subscription_counts SET count = count - 1
            WHERE account_id = OLD.account_id AND entity_type = OLD.entity_type AND status = OLD.status;
        ELSIF (OLD.account_id, OLD.entity_type, OLD.status) < (NEW.account_id, NEW.entity_type, NEW.status) THEN
            PERFORM subscription_count_add(OLD.account_id, OLD.entity_type, OLD.status, -1);
            PERFORM subscription_count_add(NEW.account_id, NEW.entity_type, NEW.status, 1);
        ELSE
            PERFORM subscription_count_add(NEW.account_id, NEW.entity_type, NEW.status, 1);
            PERFORM subscription_count_add(OLD.account_id, OLD.entity_type, OLD.status, -1);
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER subscriptions_count_insert AFTER INSERT ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION subscription_counts_track()""",
    """CREATE TRIGGER subscriptions_count_delete AFTER DELETE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION subscription_counts_track()""",
    """CREATE TRIGGER subscriptions_count_update AFTER UPDATE OF account_id, entity_type, status ON subscriptions
    FOR EACH ROW WHEN ((OLD.account_id, OLD.entity_type, OLD.status)
                       IS DISTINCT FROM (NEW.account_id, NEW.entity_type, NEW.status))
    EXECUTE FUNCTION subscription_counts_track()""",
    # In `public`, not the first schema on the search path: a schema-per-tenant (or per-test-worker) layout
    # would otherwise tie the extension to one schema, and dropping that schema would drop every other
    # schema's trigram index with it.
    "CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public",
)
# The operator class named in the extension's own schema: it need not be on the search path.
TRIGRAM_INDEX = """
DO $$ BEGIN
    EXECUTE format('CREATE INDEX ix_subscriptions_network_id_trgm ON subscriptions USING gin (network_id %I.gin_trgm_ops)',
                   (SELECT nspname FROM pg_namespace JOIN pg_extension ON extnamespace = pg_namespace.oid
                    WHERE extname = 'pg_trgm'));
END $$"""
POSTGRESQL_DROPS = ("DROP INDEX ix_subscriptions_network_id_trgm",
                    "DROP TRIGGER subscriptions_count_update ON subscriptions",
                    "DROP TRIGGER subscriptions_count_delete ON subscriptions",
                    "DROP TRIGGER subscriptions_count_insert ON subscriptions",
                    "DROP FUNCTION subscription_counts_track()",
                    "DROP FUNCTION subscription_count_add(varchar, varchar, varchar, integer)")


def _postgresql() -> bool:
    return op.get_bind().dialect.name == 'postgresql'


def upgrade():
    op.create_table('subscription_counts',
    sa.Column('account_id', sa.String(length=40), nullable=False),
    sa.Column('entity_type', sa.String(length=10), nullable=False),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['account_id'], ['accounts.id'], name=op.f('fk_subscription_counts_account_id_accounts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('account_id', 'entity_type', 'status', name=op.f('pk_subscription_counts'))
    )
    op.execute(FILL_COUNTS)
    # A status-filtered page reads its rows in order from this index (it was a scan of the whole account
    # when few rows had that status); the counters took over the counting the old index served.
    op.drop_index('ix_subscriptions_account_status', table_name='subscriptions')
    op.create_index('ix_subscriptions_account_status_order', 'subscriptions',
                    ['account_id', 'status', 'created_at', 'id'], unique=False)
    for statement in (*POSTGRESQL_STATEMENTS, TRIGRAM_INDEX) if _postgresql() else SQLITE_STATEMENTS:
        op.execute(statement)


def downgrade():
    for statement in POSTGRESQL_DROPS if _postgresql() else SQLITE_DROPS:
        op.execute(statement)
    op.drop_index('ix_subscriptions_account_status_order', table_name='subscriptions')
    op.create_index('ix_subscriptions_account_status', 'subscriptions', ['account_id', 'status'], unique=False)
    op.drop_table('subscription_counts')
