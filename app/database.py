"""Database plumbing: SQLite pragmas and the write-transaction helper.

SQLite: every connection gets WAL, foreign keys and a busy timeout. Write transactions begin with
`BEGIN IMMEDIATE`, so a transaction that reads then writes waits for the lock instead of failing
with "database is locked"; the threads of one process first queue on an in-process lock (see
`write_transaction`). On PostgreSQL the same code runs with ordinary transactions.
"""
import threading
import weakref
from contextlib import contextmanager, nullcontext

from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine

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


@contextmanager
def write_transaction():
    """One short write transaction on the scoped session: commit on success, roll back on error.

    Any read transaction the session had open is ended first. Never make a network call inside.
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


def upsert(session, model):
    """An INSERT of `model` that can take `.on_conflict_do_update(...)`, in the session database's dialect."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(model)


def end_read_transaction():
    """Release the snapshot a read took, so no transaction stays open across slow work."""
    db.session.rollback()


def newest_first_page(model, created_column, limit, offset, **equal_to):
    """(rows, total) of `model` whose columns equal the given values (None: no filter), newest first then by
    id, for a paginated list."""
    conditions = [getattr(model, name) == value for name, value in equal_to.items() if value is not None]
    total = db.session.scalar(select(func.count()).select_from(model).where(*conditions))
    rows = db.session.scalars(select(model).where(*conditions)
                              .order_by(created_column.desc(), model.id.desc()).limit(limit).offset(offset)).all()
    return rows, total


def url_with_fresh_schema(url: str, schema: str) -> str:
    """A PostgreSQL `url` whose connections see an emptied schema `schema` first on their search path: the tests'
    xdist workers and the benchmarks each get tables of their own in one shared database."""
    from sqlalchemy import create_engine, text
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
