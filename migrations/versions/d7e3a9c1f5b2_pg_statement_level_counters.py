"""PostgreSQL: the subscription and id gram counters follow inserts and deletes once per statement, not once
per row

Revision ID: d7e3a9c1f5b2
Revises: b6d2f8a4c1e7
Create Date: 2026-11-25 16:10:00

A row-level trigger upserted some 35 gram counter rows for every subscription inserted or deleted (a bulk
create of 100 spent ~70 of its ~100 ms there), and updated its account's counter row once a row (100 versions of
one row for a bulk create). A statement-level trigger sees the statement's rows as a transition table and adds
each key once with its count. UPDATE stays row-level: PostgreSQL allows no transition table on a trigger with a
column list (`UPDATE OF ...`), and the row-level functions now handle just that. SQLite's triggers are
row-level by design; nothing changes there.
"""
from alembic import op


revision = 'd7e3a9c1f5b2'
down_revision = 'b6d2f8a4c1e7'
branch_labels = None
depends_on = None

# The row-level functions' pieces: an UPDATE moves a row between counter keys (the lower key written first, so
# two writers cannot deadlock); before this migration the same functions also handled INSERT and DELETE.
COUNT_MOVE = """IF (OLD.account_id, OLD.entity_type, OLD.status) < (NEW.account_id, NEW.entity_type, NEW.status) THEN
            PERFORM subscription_count_add(OLD.account_id, OLD.entity_type, OLD.status, -1);
            PERFORM subscription_count_add(NEW.account_id, NEW.entity_type, NEW.status, 1);
        ELSE
            PERFORM subscription_count_add(NEW.account_id, NEW.entity_type, NEW.status, 1);
            PERFORM subscription_count_add(OLD.account_id, OLD.entity_type, OLD.status, -1);
        END IF;"""
GRAMS_OF_OLD_REMOVED = """UPDATE subscription_gram_counts SET count = count - 1
            WHERE account_id = OLD.account_id AND entity_type = OLD.entity_type AND status = OLD.status
            AND gram IN (SELECT subscription_grams(OLD.network_id));"""
GRAMS_OF_NEW_ADDED = """INSERT INTO subscription_gram_counts (account_id, entity_type, status, gram, count)
            SELECT NEW.account_id, NEW.entity_type, NEW.status, gram, 1
            FROM subscription_grams(NEW.network_id) gram
            ON CONFLICT (account_id, entity_type, status, gram)
            DO UPDATE SET count = subscription_gram_counts.count + 1;"""


def _row_function(name: str, body: str) -> str:
    return f"""CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {body}
        RETURN NULL;
    END $$"""


def _row_triggers(table_function: str, prefix: str) -> tuple:
    return tuple(f"""CREATE TRIGGER {prefix}_{event.lower()} AFTER {event} ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION {table_function}()""" for event in ("INSERT", "DELETE"))


def _statement_triggers(prefix: str, inserted: str, deleted: str) -> tuple:
    return (f"""CREATE TRIGGER {prefix}_insert AFTER INSERT ON subscriptions
    REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION {inserted}()""",
            f"""CREATE TRIGGER {prefix}_delete AFTER DELETE ON subscriptions
    REFERENCING OLD TABLE AS deleted_rows FOR EACH STATEMENT EXECUTE FUNCTION {deleted}()""")


def _drop_triggers(prefix: str) -> tuple:
    return tuple(f"DROP TRIGGER {prefix}_{event} ON subscriptions" for event in ("insert", "delete"))


# The statement-level functions write counter rows in key order, so two writers of one account cannot deadlock
# on them (the services lock the account row first anyway).
UPGRADE = (
    *_drop_triggers("subscriptions_count"),
    """CREATE FUNCTION subscription_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO subscription_counts (account_id, entity_type, status, count)
        SELECT account_id, entity_type, status, count(*) FROM inserted_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (account_id, entity_type, status) DO UPDATE SET count = subscription_counts.count + excluded.count;
        RETURN NULL;
    END $$""",
    """CREATE FUNCTION subscription_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        WITH removed AS (
            SELECT account_id, entity_type, status, count(*) AS n FROM deleted_rows GROUP BY 1, 2, 3),
        locked AS (
            SELECT counter.account_id, counter.entity_type, counter.status, removed.n
            FROM subscription_counts counter JOIN removed USING (account_id, entity_type, status)
            ORDER BY 1, 2, 3 FOR UPDATE OF counter)
        UPDATE subscription_counts counter SET count = counter.count - locked.n FROM locked
        WHERE (counter.account_id, counter.entity_type, counter.status)
              = (locked.account_id, locked.entity_type, locked.status);
        RETURN NULL;
    END $$""",
    *_statement_triggers("subscriptions_count", "subscription_counts_inserted", "subscription_counts_deleted"),
    _row_function("subscription_counts_track", COUNT_MOVE),
    *_drop_triggers("subscriptions_grams"),
    """CREATE FUNCTION subscription_grams_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO subscription_gram_counts (account_id, entity_type, status, gram, count)
        SELECT account_id, entity_type, status, gram, count(*)
        FROM inserted_rows, subscription_grams(inserted_rows.network_id) gram
        GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (account_id, entity_type, status, gram)
        DO UPDATE SET count = subscription_gram_counts.count + excluded.count;
        RETURN NULL;
    END $$""",
    """CREATE FUNCTION subscription_grams_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        WITH removed AS (
            SELECT account_id, entity_type, status, gram, count(*) AS n
            FROM deleted_rows, subscription_grams(deleted_rows.network_id) gram
            GROUP BY 1, 2, 3, 4),
        locked AS (
            SELECT counter.account_id, counter.entity_type, counter.status, counter.gram, removed.n
            FROM subscription_gram_counts counter JOIN removed USING (account_id, entity_type, status, gram)
            ORDER BY 1, 2, 3, 4 FOR UPDATE OF counter)
        UPDATE subscription_gram_counts counter SET count = counter.count - locked.n FROM locked
        WHERE (counter.account_id, counter.entity_type, counter.status, counter.gram)
              = (locked.account_id, locked.entity_type, locked.status, locked.gram);
        RETURN NULL;
    END $$""",
    *_statement_triggers("subscriptions_grams", "subscription_grams_inserted", "subscription_grams_deleted"),
    _row_function("subscription_grams_track", f"{GRAMS_OF_OLD_REMOVED}\n        {GRAMS_OF_NEW_ADDED}"),
)

# The row-level triggers of a7d3f1c9e215 and e5f1a2b3c4d6, doing what they did.
DOWNGRADE = (
    *_drop_triggers("subscriptions_grams"),
    "DROP FUNCTION subscription_grams_deleted()",
    "DROP FUNCTION subscription_grams_inserted()",
    _row_function("subscription_grams_track", f"""IF TG_OP IN ('DELETE', 'UPDATE') THEN
            {GRAMS_OF_OLD_REMOVED}
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            {GRAMS_OF_NEW_ADDED}
        END IF;"""),
    *_row_triggers("subscription_grams_track", "subscriptions_grams"),
    *_drop_triggers("subscriptions_count"),
    "DROP FUNCTION subscription_counts_deleted()",
    "DROP FUNCTION subscription_counts_inserted()",
    _row_function("subscription_counts_track", f"""IF TG_OP = 'INSERT' THEN
            PERFORM subscription_count_add(NEW.account_id, NEW.entity_type, NEW.status, 1);
        ELSIF TG_OP = 'DELETE' THEN
            UPDATE subscription_counts SET count = count - 1
            WHERE account_id = OLD.account_id AND entity_type = OLD.entity_type AND status = OLD.status;
        ELSE
            {COUNT_MOVE}
        END IF;"""),
    *_row_triggers("subscription_counts_track", "subscriptions_count"),
)


def _run_on_postgresql(statements):
    if op.get_bind().dialect.name == 'postgresql':
        for statement in statements:
            op.execute(statement)


def upgrade():
    _run_on_postgresql(UPGRADE)


def downgrade():
    _run_on_postgresql(DOWNGRADE)
