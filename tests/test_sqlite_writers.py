"""SQLite writers of one process queue on an in-process lock before BEGIN IMMEDIATE (issue 12): they
start the moment the previous writer ends instead of sleeping in SQLite's busy handler."""
import threading

import pytest

from sqlalchemy import event, update

from app.database import IMMEDIATE, write_transaction
from app.extensions import db
from app.models import Account
from conftest import make_tenant, subscription_count

WRITERS = 8


def test_eight_threads_creating_at_once_all_succeed_and_every_row_is_counted(app):
    tenant = make_tenant(app, "Many Writers", "enterprise")
    start = threading.Barrier(WRITERS)
    statuses = [None] * WRITERS

    def create(index):
        client = app.test_client()
        start.wait(timeout=10)
        for n in range(5):
            response = client.post("/api/v1/subscriptions", headers=tenant.headers,
                                   json={"entity_type": "contact", "network_id": f"writer-{index}-{n}"})
            statuses[index] = (statuses[index] or []) + [response.status_code]

    threads = [threading.Thread(target=create, args=(index,)) for index in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert statuses == [[201] * 5] * WRITERS
    assert subscription_count(tenant.account_id) == WRITERS * 5
    listed = tenant.get("/subscriptions?limit=1").get_json()
    assert listed["pagination"]["total"] == WRITERS * 5


def _count_immediate_begins(app):
    begins = []

    @event.listens_for(db.engine, "begin")
    def _seen(connection):
        if connection.get_execution_options().get(IMMEDIATE):
            begins.append(threading.current_thread().name)
    return begins


@pytest.mark.sqlite_only(reason="the in-process writer lock exists for SQLite only")
def test_a_second_writer_waits_in_the_process_before_asking_sqlite_for_the_lock(app):
    account_id = make_tenant(app, "Queue").account_id
    begins = _count_immediate_begins(app)
    first_inside, release_first, second_done = threading.Event(), threading.Event(), threading.Event()

    def writer(name, inside=None, hold=None, done=None):
        with app.app_context():
            with write_transaction() as session:
                session.execute(update(Account).where(Account.id == account_id).values(name=name))
                if inside:
                    inside.set()
                    hold.wait(timeout=10)
            if done:
                done.set()

    first = threading.Thread(target=writer, args=("first", first_inside, release_first), name="first")
    first.start()
    assert first_inside.wait(timeout=10)
    second = threading.Thread(target=writer, args=("second",), kwargs={"done": second_done}, name="second")
    second.start()
    assert not second_done.wait(timeout=0.3)
    assert begins == ["first"]  # the second has not begun a transaction: it queues in the process
    release_first.set()
    first.join(timeout=10)
    assert second_done.wait(timeout=10)
    second.join(timeout=10)
    assert begins == ["first", "second"]
    db.session.rollback()
    assert db.session.get(Account, account_id).name == "second"


def test_a_failing_writer_lets_the_next_one_in(app):
    account_id = make_tenant(app, "Failing").account_id
    try:
        with write_transaction() as session:
            session.execute(update(Account).where(Account.id == account_id).values(name="never"))
            raise RuntimeError("refused")
    except RuntimeError:
        pass
    done = threading.Event()

    def writer():
        with app.app_context():
            with write_transaction() as session:
                session.execute(update(Account).where(Account.id == account_id).values(name="later"))
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert done.wait(timeout=10)
    thread.join(timeout=10)
    db.session.rollback()
    assert db.session.get(Account, account_id).name == "later"


def test_eight_threads_serving_at_once_reuse_their_pooled_connections(app):
    # SQLAlchemy's default pool of 5 made 8 serving threads open and close a connection every ~17 requests
    # (on SQLite ~10 ms of CPU each: pragmas and the schema parsed again).
    tenant = make_tenant(app, "Busy Readers", "enterprise")
    opened = []
    event.listen(db.engine, "connect", lambda *_args: opened.append(threading.current_thread().name))

    def serve_in_threads():
        start = threading.Barrier(WRITERS)

        def read():
            client = app.test_client()
            start.wait(timeout=10)
            for _ in range(20):
                assert client.get("/api/v1/subscriptions?limit=5", headers=tenant.headers).status_code == 200
        threads = [threading.Thread(target=read) for _ in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    serve_in_threads()
    assert len(opened) <= WRITERS
    opened.clear()
    serve_in_threads()
    assert opened == []
