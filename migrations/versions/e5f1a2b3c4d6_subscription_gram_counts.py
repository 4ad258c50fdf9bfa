"""search: counters of the ids' 1- and 2-character grams, for searches too short for a trigram; the account's
order index carries the columns a search tests

Revision ID: e5f1a2b3c4d6
Revises: e5a1c8d3b7f2
Create Date: 2026-11-23 16:30:00

A trigram index cannot serve a needle shorter than 3 characters. For those the exact total of a search comes
from `subscription_gram_counts`: per (account, entity type, status), how many subscriptions hold each 1- and
2-character substring of their network id (`a`, `ab`) and each 1- and 2-character start of it (`^a`, `^ab`).
Kept by triggers in the same transaction as every insert, status change, id change and delete of a
subscription, like `subscription_counts`.

A search whose matches are many (or not indexed) reads the account's newest rows one by one until it has a
page: `ix_subscriptions_account_order` now carries `entity_type` and `network_id`, so SQLite tests them in the
index and reads the table only for the rows of the page (a third of the time per row walked).
"""
import collections

from alembic import op
import sqlalchemy as sa


revision = 'e5f1a2b3c4d6'
down_revision = 'e5a1c8d3b7f2'
branch_labels = None
depends_on = None

MAX_ID = 100  # entities.MAX_ID; a longer id's grams past position 100 would not be counted

# The distinct grams of `{id}`; SQLite numbers the positions from a table of 1..MAX_ID (no CTE in a trigger).
SQLITE_GRAMS = """
    SELECT substr({id}, n, 1) AS gram FROM gram_positions WHERE n <= length({id})
    UNION SELECT substr({id}, n, 2) FROM gram_positions WHERE n < length({id}) AND n < {max_id}
    UNION SELECT '^' || substr({id}, 1, 1) UNION SELECT '^' || substr({id}, 1, 2)"""


def _sqlite_grams(row):
    return SQLITE_GRAMS.format(id=f"{row}.network_id", max_id=MAX_ID)


def _sqlite_add(row):
    return f"""INSERT INTO subscription_gram_counts (account_id, entity_type, status, gram, count)
        SELECT {row}.account_id, {row}.entity_type, {row}.status, gram, 1 FROM ({_sqlite_grams(row)})
        WHERE true ON CONFLICT (account_id, entity_type, status, gram) DO UPDATE SET count = count + 1;"""


def _sqlite_remove(row):
    return f"""UPDATE subscription_gram_counts SET count = count - 1
        WHERE account_id = {row}.account_id AND entity_type = {row}.entity_type AND status = {row}.status
        AND gram IN ({_sqlite_grams(row)});"""


SQLITE_STATEMENTS = (
    "CREATE TABLE gram_positions (n INTEGER PRIMARY KEY)",
    f"INSERT INTO gram_positions (n) VALUES {', '.join(f'({n})' for n in range(1, MAX_ID + 1))}",
    f"""CREATE TRIGGER subscriptions_grams_insert AFTER INSERT ON subscriptions BEGIN
        {_sqlite_add('new')}
    END""",
    f"""CREATE TRIGGER subscriptions_grams_delete AFTER DELETE ON subscriptions BEGIN
        {_sqlite_remove('old')}
    END""",
    f"""CREATE TRIGGER subscriptions_grams_update AFTER UPDATE OF account_id, entity_type, status, network_id
    ON subscriptions WHEN old.account_id IS NOT new.account_id OR old.entity_type IS NOT new.entity_type
         OR old.status IS NOT new.status OR old.network_id IS NOT new.network_id BEGIN
        {_sqlite_remove('old')}
        {_sqlite_add('new')}
    END""",
)
SQLITE_DROPS = ("DROP TRIGGER subscriptions_grams_update", "DROP TRIGGER subscriptions_grams_delete",
                "DROP TRIGGER subscriptions_grams_insert", "DROP TABLE gram_positions")

# Counter rows are written in gram order, so two writers of one account cannot deadlock on them (the
# services lock the account row first anyway).
POSTGRESQL_STATEMENTS = (
    f"""CREATE FUNCTION subscription_grams(network_id text) RETURNS SETOF text LANGUAGE sql IMMUTABLE AS $$
        SELECT substr(network_id, n, 1) FROM generate_series(1, least(length(network_id), {MAX_ID})) n
        UNION SELECT substr(network_id, n, 2)
        FROM generate_series(1, least(length(network_id), {MAX_ID}) - 1) n
        UNION SELECT '^' || substr(network_id, 1, 1) UNION SELECT '^' || substr(network_id, 1, 2)
        ORDER BY 1
    $$""",
    """CREATE FUNCTION subscription_grams_track() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP IN ('DELETE', 'UPDATE') THEN
            UPDATE subscription_gram_counts SET count = count - 1
            WHERE account_id = OLD.account_id AND entity_type = OLD.entity_type AND status = OLD.status
            AND gram IN (SELECT subscription_grams(OLD.network_id));
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            INSERT INTO subscription_gram_counts (account_id, entity_type, status, gram, count)
            SELECT NEW.account_id, NEW.entity_type, NEW.status, gram, 1
            FROM subscription_grams(NEW.network_id) gram
            ON CONFLICT (account_id, entity_type, status, gram)
            DO UPDATE SET count = subscription_gram_counts.count + 1;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER subscriptions_grams_insert AFTER INSERT ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION subscription_grams_track()""",
    """CREATE TRIGGER subscriptions_grams_delete AFTER DELETE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION subscription_grams_track()""",
    """CREATE TRIGGER subscriptions_grams_update AFTER UPDATE OF account_id, entity_type, status, network_id
    ON subscriptions FOR EACH ROW
    WHEN ((OLD.account_id, OLD.entity_type, OLD.status, OLD.network_id)
          IS DISTINCT FROM (NEW.account_id, NEW.entity_type, NEW.status, NEW.network_id))
    EXECUTE FUNCTION subscription_grams_track()""",
)
POSTGRESQL_DROPS = ("DROP TRIGGER subscriptions_grams_update ON subscriptions",
                    "DROP TRIGGER subscriptions_grams_delete ON subscriptions",
                    "DROP TRIGGER subscriptions_grams_insert ON subscriptions",
                    "DROP FUNCTION subscription_grams_track()", "DROP FUNCTION subscription_grams(text)")


def _grams(network_id: str) -> set:
    """The grams the triggers count, in Python: the rows already there are counted in one pass (a SQL GROUP BY
    over some 35 grams a row sorts tens of millions of rows at 1,000,000 subscriptions)."""
    network_id = network_id[:MAX_ID]
    return ({network_id[n:n + size] for size in (1, 2) for n in range(len(network_id) - size + 1)}
            | {"^" + network_id[:1], "^" + network_id[:2]})


def _count_existing_rows():
    counts = collections.Counter()
    query = sa.text("SELECT account_id, entity_type, status, network_id FROM subscriptions")
    rows = op.get_bind().execute(query.execution_options(yield_per=10_000))
    for account_id, entity_type, status, network_id in rows:
        counts.update((account_id, entity_type, status, gram) for gram in _grams(network_id))
    if counts:
        op.get_bind().execute(
            sa.text("INSERT INTO subscription_gram_counts (account_id, entity_type, status, gram, count) "
                    "VALUES (:account_id, :entity_type, :status, :gram, :count)"),
            [dict(zip(("account_id", "entity_type", "status", "gram"), key), count=n)
             for key, n in counts.items()])


def _postgresql() -> bool:
    return op.get_bind().dialect.name == 'postgresql'


def upgrade():
    op.create_table('subscription_gram_counts',
    sa.Column('account_id', sa.String(length=40), nullable=False),
    sa.Column('entity_type', sa.String(length=10), nullable=False),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('gram', sa.String(length=3), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['account_id'], ['accounts.id'], name=op.f('fk_subscription_gram_counts_account_id_accounts'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('account_id', 'entity_type', 'status', 'gram', name=op.f('pk_subscription_gram_counts'))
    )
    for statement in POSTGRESQL_STATEMENTS if _postgresql() else SQLITE_STATEMENTS:
        op.execute(statement)
    _count_existing_rows()
    op.drop_index('ix_subscriptions_account_order', table_name='subscriptions')
    op.create_index('ix_subscriptions_account_order', 'subscriptions',
                    ['account_id', 'created_at', 'id', 'entity_type', 'network_id'], unique=False)


def downgrade():
    op.drop_index('ix_subscriptions_account_order', table_name='subscriptions')
    op.create_index('ix_subscriptions_account_order', 'subscriptions', ['account_id', 'created_at', 'id'],
                    unique=False)
    for statement in POSTGRESQL_DROPS if _postgresql() else SQLITE_DROPS:
        op.execute(statement)
    op.drop_table('subscription_gram_counts')
