"""The migrations make the schema the models declare: `flask db migrate` (Alembic's autogenerate, the same
comparison) finds nothing to do but what the migrations make on purpose outside the models."""
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.extensions import db

# pg_trgm's GIN index for the search (migration a7d3f1c9e215): PostgreSQL only, made by the migration's own SQL.
MIGRATION_ONLY_INDEXES = {"ix_subscriptions_network_id_trgm"}


def declared(_object, name, type_, reflected, compare_to):
    """Leave out what only the migrations make: tables the models do not map (SQLite's FTS5 search table and
    its shadow tables, the gram counters' positions) and the indexes above."""
    if type_ == "table":
        return not (reflected and compare_to is None)
    return not (type_ == "index" and name in MIGRATION_ONLY_INDEXES)


def is_compressed_body_on_sqlite(change) -> bool:
    """Event bodies are compressed bytes in a column SQLite knows as TEXT (migration f3c8a1d5e927 left its
    declared type, which SQLite does not enforce)."""
    return (isinstance(change, list) and len(change) == 1 and change[0][0] == "modify_type"
            and change[0][2:4] == ("events", "body") and db.engine.dialect.name == "sqlite")


def test_the_migrations_make_the_schema_the_models_declare(app):
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_object": declared})
        changes = compare_metadata(context, db.metadata)
    assert [change for change in changes if not is_compressed_body_on_sqlite(change)] == []
