"""Answers written by the database: a timestamp in the API's form (common.isoformat) and the rows of a page as one
JSON array of objects, in SQL for SQLite and PostgreSQL.

For pages read on every request (the subscription list): reading the rows into Python, parsing their timestamps
and metadata, formatting them again and encoding the JSON was most of a list request's work (1.9 M of its 4.8 M
instructions; the database writing the same text: 0.6 M)."""
from dataclasses import dataclass

from sqlalchemy import Text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

# common.isoformat of a timestamp column `{column}`: ISO 8601 with milliseconds (truncated), or without a
# fraction when it is zero, and a Z; NULL stays NULL.
ISO_TIMESTAMP_SQL = {
    # The text SQLAlchemy stores has six fraction digits; other forms (none, fewer) take the general expression.
    "sqlite": "substr({column}, 1, 10) || 'T' || substr({column}, 12, 8) || CASE "
              "WHEN substr({column}, 20) = '.000000' THEN '' "
              "WHEN length({column}) = 26 THEN substr({column}, 20, 4) "
              "WHEN rtrim(substr({column}, 21, 6), '0') = '' THEN '' "
              "ELSE '.' || substr(substr({column}, 21, 6) || '000', 1, 3) END || 'Z'",
    # to_char's MS truncates, as isoformat does.
    "postgresql": "to_char({column}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE "
                  "WHEN date_trunc('second', {column}) = {column} THEN '' "
                  "ELSE to_char({column}, '.MS') END || 'Z'",
}

VALUE, JSON, TIMESTAMP = "value", "json", "timestamp"  # how a field's column becomes its JSON value


@dataclass(frozen=True)
class JsonField:
    key: str        # the key in each object
    attribute: str  # the column it is read from
    kind: str       # VALUE (text or integer as it is), JSON (stored JSON text), TIMESTAMP (ISO_TIMESTAMP_SQL)


class JsonArray(ColumnElement):
    """Aggregate: the rows of the FROM subquery as one JSON array text of objects, one per row, keys in the
    order of `fields` (values from `columns`, the subquery's columns by attribute), rows in `order_by`; '[]' for
    no row. The objects are compact; a JSON field's value is minified by json() on SQLite and embedded as stored
    on PostgreSQL (the `json` column's text verbatim, spaces included). On SQLite the rows keep the subquery's
    order, which must have a LIMIT (a subquery with a LIMIT is never flattened into the aggregate); on PostgreSQL
    `order_by` orders them."""
    inherit_cache = True
    type = Text()
    _traverse_internals = [("fields", InternalTraversal.dp_plain_obj),
                           ("columns", InternalTraversal.dp_clauseelement_list),
                           ("order_by", InternalTraversal.dp_clauseelement_list)]

    def __init__(self, fields, columns, order_by):
        self.fields = tuple(fields)
        self.columns = [columns[field.attribute] for field in self.fields]
        self.order_by = list(order_by)


def _value(compiler, column, kind, dialect_name, **kw) -> str:
    sql = compiler.process(column, **kw)
    if kind == TIMESTAMP:
        return ISO_TIMESTAMP_SQL[dialect_name].format(column=sql)
    if kind == JSON and dialect_name == "sqlite":
        return f"json({sql})"  # embedded as JSON, not as a string holding it
    return sql


def _key_literal(key: str) -> str:
    return "'" + key.replace("'", "''") + "'"


@compiles(JsonArray, "sqlite")
def _sqlite_array(element, compiler, **kw):
    pairs = ", ".join(f"{_key_literal(field.key)}, {_value(compiler, column, field.kind, 'sqlite', **kw)}"
                      for field, column in zip(element.fields, element.columns))
    return f"json_group_array(json_object({pairs}))"


@compiles(JsonArray, "postgresql")
def _postgresql_array(element, compiler, **kw):
    # row_to_json of a one-row subquery: compact objects with the keys in order (json_build_object spaces them,
    # jsonb reorders them)
    values = ", ".join(f"{_value(compiler, column, field.kind, 'postgresql', **kw)} AS "
                       f"{compiler.preparer.quote_identifier(field.key)}"
                       for field, column in zip(element.fields, element.columns))
    order = ", ".join(compiler.process(clause, **kw) for clause in element.order_by)
    return (f"coalesce('[' || string_agg((SELECT row_to_json(item) FROM (SELECT {values}) AS item)::text, ',' "
            f"ORDER BY {order}) || ']', '[]')")
