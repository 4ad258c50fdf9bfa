"""Database plumbing: SQLite pragmas and the write-transaction helper.

SQLite: every connection gets WAL, foreign keys and a busy timeout. Write transactions begin with
`BEGIN IMMEDIATE`, so a transaction that reads then writes waits for the lock instead of failing
with "database is locked"; the threads of one process first queue on an in-process lock (see
`write_transaction`). On PostgreSQL the same code runs with ordinary transactions.
"""
import json
import os
import re
import threading
import weakref
from collections import namedtuple
from contextlib import contextmanager, nullcontext

from sqlalchemy import Float, LargeBinary, Numeric, bindparam, event, func, literal, literal_column, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from app.extensions import db

IMMEDIATE = "sqlite_immediate"


class WriterQueue:
    """The writers of one SQLite database in this process, one at a time.

    SQLite's busy handler makes a writer that finds the database locked sleep and retry, with growing
    sleeps: eight threads writing at once waited up to a second for locks held a millisecond. Taking this
    lock before `BEGIN IMMEDIATE` makes them queue and start the moment the previous one ends. Other
    processes still meet SQLite's own lock and busy timeout. A writer that cannot get this lock within the
    busy timeout goes on to BEGIN IMMEDIATE anyway, and fails (or not) exactly as it would without it."""

    def __init__(self, timeout_seconds: float):
        self.lock = threading.RLock()  # reentrant: a nested write_transaction must not hang its own thread
        self.timeout_seconds = timeout_seconds

    @contextmanager
    def turn(self):
        acquired = self.lock.acquire(timeout=self.timeout_seconds)
        try:
            yield
        finally:
            if acquired:
                self.lock.release()


_WRITER_QUEUES = weakref.WeakKeyDictionary()  # SQLite engine -> WriterQueue


def configure_engine(engine: Engine, busy_timeout_ms: int) -> None:
    if engine.dialect.name == "postgresql":
        # An executemany INSERT (a bulk create's rows) as multi-row INSERT statements, as SQLAlchemy does for
        # psycopg2, rather than psycopg 3's pipeline of one statement per row: the statement-level triggers
        # (the subscription and id gram counters, migration d7e3a9c1f5b2) then run once for the batch.
        engine.dialect.use_insertmanyvalues_wo_returning = True
        event.listen(engine, "connect", _limit_lock_waits)
    if engine.dialect.name != "sqlite":
        return
    _WRITER_QUEUES[engine] = WriterQueue(busy_timeout_ms / 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA cache_size = -32768")  # 32 MiB page cache per connection: big tables stay fast
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        immediate = connection.get_execution_options().get(IMMEDIATE)
        # on the driver's connection: every request begins a transaction, and SQLAlchemy's execution layer
        # costs more than the BEGIN itself
        connection.connection.driver_connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")


# PostgreSQL's lock_timeout, SQLite's busy timeout: a statement that waits this long for a lock fails (a 503 to retry).
# Without it, requests waited as long as a row lock was held (a stuck session, a host cut off mid-transaction):
# eight writes of one account took every serving thread, and /healthz and every other account waited too (fault walk).
POSTGRESQL_LOCK_TIMEOUT_MS = 10_000


def _limit_lock_waits(dbapi_connection, _record):
    dbapi_connection.execute(f"SET lock_timeout = {POSTGRESQL_LOCK_TIMEOUT_MS}")
    dbapi_connection.commit()


@contextmanager
def write_transaction():
    """One short write transaction on the scoped session: commit on success, roll back on error.

    Any read transaction the session had open is ended first. Never make a network call inside.

    The lock order of the delivery rows, which PostgreSQL's concurrent writers must all follow or deadlock:
    the account's row when it is taken (`account_lock`: first, by the API's writers only), then webhook
    configurations (a removal deletes its one before it drops the outbox rows; a sender locks its batch's before
    their outbox rows), then outbox rows (a sender finds its work through them), then events, then the day
    counters; within a table in key order (configurations by id, outbox rows and events by event id, counters by
    key: `add_to_counters`); delivery attempts are updated or deleted only by a transaction holding their event (a
    removal, retention), and otherwise only inserted. A multi-row UPDATE or DELETE follows it through
    `in_lock_order` (or `lock_in_order` first); a claim takes only outbox rows no one holds (SKIP LOCKED); rows a
    transaction inserts are no one else's yet. FOR KEY SHARE (only a DELETE, FOR UPDATE or an UPDATE of a key
    waits for it) keeps a row from going while a transaction relies on it, out of this order as a foreign key's
    check takes it: a writer queueing deliveries holds its configurations so (`events.webhook_configs_for`; a check
    after its subscription rows), a redelivery its events before their outbox rows. Their deleters wait for nothing
    such a holder may hold: a removal holds only the account row when it deletes the configuration; retention,
    holding its events, waits only for their delivery attempts.
    """
    session = db.session
    session.rollback()
    session.expire_all()  # expire_on_commit is off: never act on a copy loaded before this transaction
    queue = _WRITER_QUEUES.get(session.get_bind())
    with queue.turn() if queue is not None else nullcontext():
        session.connection(execution_options={IMMEDIATE: True})
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


class PreparedSelect:
    """A SELECT that requests run all the time, compiled once per dialect and run on the DBAPI cursor of the
    session's connection (so inside its transaction), with the statement's own bind and result processing
    (e.g. SQLite's text timestamps and JSON). For indexed reads of a few rows, SQLAlchemy's execution layer
    (an execution context and result objects per call) costs many times what the database spends. Rows have
    attribute access by column key, like SQLAlchemy's. No expanding or literal-execute parameters. SQLAlchemy's
    cursor events and echo do not see these statements.

    `one_fetch=True` (for pages of many rows) makes SQLite hand the rows over in one step, as one JSON array:
    Python's sqlite3 releases the GIL for every row it steps to, and with the other serving threads waiting
    for it each release was a hand-over and back (two context switches a row, a third of a list page's CPU
    under load). Its columns must survive JSON as SQLite writes it: no BLOB, no REAL (15 digits)."""

    def __init__(self, statement, one_fetch=False):
        self.statement = statement
        self.one_fetch = one_fetch
        self._by_dialect = {}

    def rows(self, parameters=None) -> list:
        connection = db.session.connection()
        compiled, order, binds, make_row, in_one_step = self._by_dialect.get(connection.dialect.name) or \
            self._prepare(connection.dialect)
        values = compiled.construct_params(parameters)
        for name, process in binds:
            values[name] = process(values[name])
        raw_rows = driver_rows(connection, compiled.string,
                               [values[name] for name in order] if order is not None else values)
        if in_one_step:
            raw_rows = json.loads(raw_rows[0][0])
        return [make_row(raw) for raw in raw_rows]

    def first(self, parameters=None):
        found = self.rows(parameters)
        return found[0] if found else None

    def _prepare(self, dialect):
        in_one_step = self.one_fetch and dialect.name == "sqlite"
        compiled = (self._in_one_step() if in_one_step else self.statement).compile(dialect=dialect)
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("PreparedSelect cannot run expanding or literal-execute parameters")
        order = list(compiled.positiontup) if compiled.positional else None
        binds = [(name, process) for name, process in
                 ((name, bind.type.dialect_impl(dialect).bind_processor(dialect))
                  for bind, name in compiled.bind_names.items()) if process is not None]
        columns = list(self.statement.selected_columns)
        Row = namedtuple("Row", [column.key for column in columns], rename=True)
        processors = [column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns]
        if any(processors):
            steps = [process or _same for process in processors]

            def make_row(raw):
                return Row._make([step(value) for step, value in zip(steps, raw)])
        else:
            make_row = Row._make
        prepared = self._by_dialect[dialect.name] = (compiled, order, binds, make_row, in_one_step)
        return prepared

    def _in_one_step(self):
        """The statement's rows as one JSON array of arrays, for SQLite."""
        stored_as = [getattr(column.type, "impl_instance", column.type)  # a TypeDecorator: what it stores
                     for column in self.statement.selected_columns]
        if any(isinstance(type_, (Float, Numeric, LargeBinary)) for type_ in stored_as):
            raise ValueError("one_fetch cannot carry REAL or BLOB columns through SQLite's JSON")
        # A subquery with a LIMIT is never flattened into an aggregate query: the array keeps its ORDER BY.
        rows = self.statement.subquery()
        return select(func.json_group_array(func.json_array(*rows.c)))


def _same(value):
    return value


def driver_rows(connection, sql: str, parameters) -> list:
    """Plain tuples of `sql` (in the driver's parameter style) run on the DBAPI connection under a SQLAlchemy
    `connection`, so inside its transaction: no execution context, no Row objects."""
    cursor = connection.connection.cursor()
    try:
        cursor.execute(sql, parameters)
        return cursor.fetchall()
    finally:
        cursor.close()


def upsert(session, model):
    """An INSERT of `model` that can take `.on_conflict_do_update(...)`, in the session database's dialect."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(model)


def add_to_counters(session, model, key_names, rows):
    """Add `rows` (dicts of the key columns and the counted ones) to a counter table inside the caller's
    transaction: one upsert, in key order, so transactions adding to the same keys lock them in the same order."""
    if not rows:
        return
    statement = upsert(session, model).values({name: bindparam(name) for name in rows[0]})
    statement = statement.on_conflict_do_update(
        index_elements=list(key_names),
        set_={name: getattr(model, name) + getattr(statement.excluded, name)
              for name in rows[0] if name not in key_names})
    session.execute(statement, sorted(rows, key=lambda row: tuple(row[name] for name in key_names)))


def in_lock_order(key, *conditions):
    """`key IN (…)` for a multi-row UPDATE or DELETE of the rows meeting `conditions`: on PostgreSQL they are
    locked first, in `key` order (the lock order of `write_transaction`), where the statement alone locks them in
    whatever order its plan reads them. FOR NO KEY UPDATE, as an UPDATE takes: inserts of rows referring to them
    go on (a DELETE makes it FOR UPDATE, which only rows that other tables refer to must wait for)."""
    return key.in_(select(key).where(*conditions).order_by(key).with_for_update(key_share=True).scalar_subquery())


def lock_in_order(session, key, *conditions, key_share=False):
    """Lock the rows meeting `conditions` in `key` order (PostgreSQL), as a DELETE will (FOR UPDATE), or an UPDATE
    of other columns than keys (`key_share`: FOR NO KEY UPDATE), before they are read: see `in_lock_order`."""
    session.execute(select(key).where(*conditions).order_by(key).with_for_update(key_share=key_share))


# What a database that cannot be reached or opened answers (anything else, a deadlock or a bug, is not that)
_SQLITE_FILE_PROBLEMS = ("unable to open database file", "attempt to write a readonly database")
_SQLITE_UNUSABLE = (*_SQLITE_FILE_PROBLEMS, "disk I/O error")
_POSTGRESQL_UNUSABLE = ("57P01", "57P02", "57P03", "53300")  # shut down, cannot connect now, too many clients


def missing_schema(error: Exception):
    """One line for an operator when a table or column the code expects is not there (SQLite's `no such table`/
    `no such column`, PostgreSQL's SQLSTATE 42P01 and 42703); None for any other error."""
    orig = _driver_error(error)
    if orig is not None and (_first_line(orig).startswith(("no such table", "no such column"))
                             or getattr(orig, "sqlstate", None) in ("42P01", "42703")):
        return ("the database has no schema (or an older one): run `entity-monitor db upgrade` first "
                f"({_first_line(orig)})")
    return None


def unreachable(error: Exception):
    """One line for an operator when the database cannot be reached or opened now (refused, unknown host, shut
    down, a file that cannot be opened or written); None for any other error."""
    orig = _driver_error(error)
    if not _operational(orig):
        return None
    sqlstate = getattr(orig, "sqlstate", "")
    if _first_line(orig).startswith(_SQLITE_FILE_PROBLEMS):  # the folder, more often than the file (operability walk)
        return (f"the database (DATABASE_URL) cannot be used: {_first_line(orig)} (the file and its folder must exist "
                "and be writable by this user: SQLite writes its -wal and -shm files beside the database)")
    if (_first_line(orig).startswith(_SQLITE_UNUSABLE) or sqlstate is None  # psycopg: no answer from a server
            or str(sqlstate).startswith("08") or sqlstate in _POSTGRESQL_UNUSABLE):
        return f"the database (DATABASE_URL) cannot be used: {_first_line(orig)}"
    return None


def login_refused(error: Exception):
    """One line for an operator when PostgreSQL refused the login DATABASE_URL names (an unknown role or database, a
    wrong password, no pg_hba.conf entry): a setting to fix, which retrying will not (it read as unreachable, and the
    units restarted the service for ever: PostgreSQL walk); None for any other error."""
    orig = _driver_error(error)
    refused = _LOGIN_REFUSED.search(_first_line(orig)) if _operational(orig) else None
    if refused is None:
        return None
    return (f"the database (DATABASE_URL) refused this login: {refused.group(0)} (check the URL's user, password and "
            "database name)")


# psycopg gives a refused login no SQLSTATE: the server's words (in English, its default lc_messages) tell it apart
_LOGIN_REFUSED = re.compile(r'FATAL:\s+(role ".*" does not exist|database ".*" does not exist|password authentication '
                            r"failed.*|no pg_hba\.conf entry.*)")


def busy_or_unreachable(error: Exception):
    """`unreachable`, or one line when the database is too busy to answer now: SQLite's write lock held by another
    process past SQLITE_BUSY_TIMEOUT_MS, no connection free in the pool within its timeout. None for any other
    error. What a request should be told to retry (503), not a bug of its own."""
    if isinstance(error, PoolTimeoutError):
        return f"the database (DATABASE_URL) is busy: no connection was free ({error})"
    orig = _driver_error(error)
    if orig is not None and _first_line(orig).startswith(("database is locked", "database table is locked")):
        return (f"the database (DATABASE_URL) is busy: {_first_line(orig)} (another process held its write lock "
                "past SQLITE_BUSY_TIMEOUT_MS)")
    if getattr(orig, "sqlstate", None) == "55P03":  # lock_not_available: POSTGRESQL_LOCK_TIMEOUT_MS passed
        return (f"the database (DATABASE_URL) is busy: {_first_line(orig)} (another session held a lock this "
                f"statement needed for {POSTGRESQL_LOCK_TIMEOUT_MS // 1000} s)")
    return unreachable(error)


def missing_database(url: str):
    """One line for an operator when the database is a SQLite file that is not there (SQLite would create it empty,
    and a command that only reads made one: operator walk); None for any other database."""
    parsed = make_url(url)
    if (parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:")
            or parsed.query.get("uri") or os.path.exists(parsed.database)):  # a URI's file name is SQLite's to read
        return None
    return (f"there is no database at {os.path.abspath(parsed.database)}: create it with `entity-monitor db upgrade`, "
            "or point DATABASE_URL (or INSTANCE_PATH) at the one in use")


def cannot_serve(error: Exception):
    """One line for an operator when the database cannot serve as it is (`missing_schema`, `unreachable`); None for
    any other error."""
    return missing_schema(error) or unreachable(error)


def _driver_error(error: Exception):
    """The driver's own exception of a database error: under SQLAlchemy's wrapper, or raised as it is where
    `driver_rows` runs SQL on the DBAPI connection. None for any other exception."""
    if isinstance(error, DBAPIError):
        return error.orig
    module = type(error).__module__
    return error if module == "sqlite3" or module.startswith("psycopg") else None


def _operational(orig) -> bool:
    """Whether a driver's error is its OperationalError or one of its kinds: psycopg raises a subclass per SQLSTATE
    (AdminShutdown for 57P01, a connection the server ended mid-transaction), which its class name alone missed."""
    return any(kind.__name__ == "OperationalError" for kind in type(orig).__mro__)


def _first_line(orig: Exception) -> str:
    text = str(orig).strip()
    return text.splitlines()[0] if text else type(orig).__name__


def read_in_one_snapshot():
    """Begin the session's transaction so that every read in it sees one snapshot, as SQLite's read transactions
    do: PostgreSQL's default (READ COMMITTED) gives each statement its own, so a page and its total, read by two
    statements, disagreed while rows were added (100 items on a search page past its total, PostgreSQL walk).
    For read-only requests: a write under REPEATABLE READ may fail to serialise. Nothing when a transaction is
    already open (its level is set)."""
    session = db.session()
    if not session.in_transaction() and session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def read_in_a_new_snapshot():
    """`read_in_one_snapshot` for a request: first end any transaction left open (by an earlier request sharing
    this app context, in tests), which holds an old snapshot at an unknown level."""
    end_read_transaction()
    read_in_one_snapshot()


def end_read_transaction():
    """Release the snapshot a read took, so no transaction stays open across slow work."""
    db.session.rollback()


def end_read_quietly(session) -> None:
    """End a read whose connection the server may have ended under it (a restart, a failover, an outage): the rollback
    fails too, after SQLAlchemy has let the connection go (the next read opens another), and must not escape a report
    that promises an answer (/healthz, /metrics: PostgreSQL walk)."""
    try:
        session.rollback()
    except Exception:  # noqa: BLE001 - the connection is gone; nothing of the read is left to end
        pass


def first_line(error: Exception) -> str:
    """The first line of a database error's text (the driver's, under SQLAlchemy's wrapper), for a log line."""
    return _first_line(_driver_error(error) or error)


def newest_first_page(model, created_column, limit, offset, inline=(), total_query=None, narrowed_by=None,
                      **equal_to):
    """(rows, total) of `model` whose columns equal the given values (None: no filter), newest first then by
    id, for a paginated list; `total_query`: a statement that reads the total (from counters) instead of counting
    the rows. The values of the columns named in `inline` (a status, from a closed set) are written
    into the SQL as literals, so that a partial index of one value (`status = 'failed'`, `models.event.only_failed`)
    serves the page and its total: PostgreSQL cannot use it in the generic plan of a prepared `status = $1`, and
    SQLite matches a bound value to it only by preparing the statement again at every run. The offset is walked
    over the page's order and ids, then the page's rows are read by id: walking whole rows read every skipped row
    from the table (PostgreSQL walk: 10 s at offset 2M). Where the index also holds the filter's columns (an
    account's list, of one type, of its failures) the walk reads the index alone; a subscription's events and an
    event's attempts are read in indexes without the account, row by row, as they are few.

    `narrowed_by`: a column whose own index serves a filter on it best (a subscription's events, an event's attempts).
    Filtered on it, SQLite is kept off the indexes of the other conditions: without statistics it counted a
    subscription's events in the account's index, walking every event of the account (benchmark walk: 116 ms)."""
    narrowed = narrowed_by is not None and equal_to.get(narrowed_by) is not None
    unindexed = narrowed and db.session.get_bind().dialect.name == "sqlite"
    conditions = [_equal(model, name, value, name in inline, unindexed and name != narrowed_by)
                  for name, value in equal_to.items() if value is not None]
    counted = select(func.count()).select_from(model).where(*conditions)
    total = db.session.scalar(counted if total_query is None else total_query)
    page = (select(model.id, created_column.label("created")).where(*conditions)
            .order_by(created_column.desc(), model.id.desc()).limit(limit).offset(offset).subquery("page"))
    rows = db.session.scalars(select(model).join(page, model.id == page.c.id)
                              .order_by(page.c.created.desc(), page.c.id.desc())).all()
    return rows, total


def _equal(model, name, value, inline: bool, unindexed: bool):
    """`model.name = value`; `inline`: the value written as a literal; `unindexed`: as SQLite's `+column`, which no
    index may serve (https://sqlite.org/optoverview.html#disqualifying_where_clause_terms_using_unary_)."""
    column = getattr(model, name).expression
    if unindexed:  # (the table's and the column's own names: an attribute may be named otherwise)
        column = literal_column(f"+{column.table.name}.{column.name}", column.type)
    return column == (literal(value, literal_execute=True) if inline else value)


def url_with_fresh_schema(url: str, schema: str) -> str:
    """A PostgreSQL `url` whose connections see an emptied schema `schema` first on their search path: the tests'
    xdist workers and the benchmarks each get tables of their own in one shared database."""
    _run_once(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', f'CREATE SCHEMA "{schema}"')
    return url_with_schema(url, schema)


def drop_schema(url: str, schema: str) -> None:
    """Drop the schema `schema` and its tables from the PostgreSQL database at `url` (a benchmark's, at its end)."""
    _run_once(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _run_once(url: str, *statements: str) -> None:
    """`statements` in one transaction of a connection of their own to `url`."""
    from sqlalchemy import create_engine, text
    engine = create_engine(url)
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))
    engine.dispose()


def url_with_schema(url: str, schema: str) -> str:
    """A PostgreSQL `url` whose connections see the schema `schema` first on their search path."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
