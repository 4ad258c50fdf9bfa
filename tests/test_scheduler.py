"""The scheduler side (contract §7): atomic claims shared by several loops, lease expiry, the instance
lock."""
import os
import threading
import time
from collections import Counter
from datetime import timedelta

import click
import pytest
from types import SimpleNamespace
from sqlalchemy.engine import make_url
from sqlalchemy import func, insert, select, update

from app import create_app
from app.common import new_id, utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import Event, Subscription
from app.providers.simulated import SimulatedProvider
from app.services import checks, health
from app.worker import checks as worker
from app.worker import scheduler

from conftest import BASE_CONFIG


class CountingProvider:
    """The simulated network, counting fetches per id; the first fetch of each of the first `parties` threads
    waits at a barrier so the loops under test are known to run at the same time (a loop's batch blocked there
    cannot start another: the next thread to fetch is the other loop's; calls run in pool threads, a batch's own).
    Local, like the network it wraps: no shared concurrency slot, which would keep the second loop's first fetch
    from ever meeting the first's."""
    concurrency = 1
    local = True

    def __init__(self, parties=1):
        self.inner = SimulatedProvider(1, 3600, "linkedin.com")
        self.fetched = Counter()
        self.by_thread = Counter()
        self.barrier = threading.Barrier(parties, timeout=30)
        self.lock = threading.Lock()

    def fetch(self, entity_type, network_id):
        thread = threading.get_ident()
        with self.lock:
            self.fetched[network_id] += 1
            self.by_thread[thread] += 1
            first = self.by_thread[thread] == 1 and len(self.by_thread) <= self.barrier.parties
        if first:
            self.barrier.wait()
        return self.inner.fetch(entity_type, network_id)


def insert_due_subscriptions(account_id, count, prefix="p"):
    now = utcnow()
    rows = [{"id": new_id("sub"), "account_id": account_id, "entity_type": "contact",
             "network_id": f"{prefix}-{number}",
             "network_url": f"https://www.linkedin.com/in/{prefix}-{number}",
             "status": "active", "custom_metadata": {}, "created_at": now, "updated_at": now,
             "last_check_status": "pending", "next_check_at": now - timedelta(seconds=1),
             "check_count": 0, "change_count": 0, "consecutive_failures": 0} for number in range(count)]
    with write_transaction():
        db.session.execute(insert(Subscription), rows)
    return [item["id"] for item in rows]


def fresh_rows():
    db.session.rollback()
    return db.session.scalars(select(Subscription).execution_options(populate_existing=True)).all()


# --- several loops against one database ----------------------------------------------------------------

def test_two_scheduler_loops_on_one_database_check_every_due_subscription_exactly_once(app, alice):
    total = 300
    insert_due_subscriptions(alice.account_id, total)
    other = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": app.config["SQLALCHEMY_DATABASE_URI"]})
    provider = CountingProvider(parties=2)
    for instance in (app, other):
        instance.config["CHECK_BATCH_SIZE"] = 7
        instance.extensions["provider"] = provider
    summaries, errors = {}, []

    def loop(instance, name):
        try:
            with instance.app_context():
                summaries[name] = []
                while True:  # the scheduler's own step, batch after batch, until nothing is due
                    summary = worker.run_due_batch()
                    if not summary.did_work:
                        break
                    summaries[name].append(summary)
                db.session.remove()
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=loop, args=(instance, name))
               for instance, name in ((app, "first"), (other, "second"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    with other.app_context():
        db.engine.dispose()

    assert len(provider.fetched) == total and set(provider.fetched.values()) == {1}  # none claimed twice
    assert len(provider.by_thread) >= 2  # both loops did work, concurrently (the barrier)
    checked = {name: sum(summary.checked for summary in items) for name, items in summaries.items()}
    assert checked["first"] > 0 and checked["second"] > 0 and sum(checked.values()) == total
    assert sum(summary.skipped for items in summaries.values() for summary in items) == 0
    rows = fresh_rows()
    assert all(row.check_count == 1 and row.claim_token is None and row.claimed_until is None for row in rows)
    per_subscription = Counter(db.session.scalars(select(Event.subscription_id)
                                                  .where(Event.type == "subscription.initial_state")).all())
    assert len(per_subscription) == total and set(per_subscription.values()) == {1}


def test_concurrent_claims_never_overlap(app, alice):
    insert_due_subscriptions(alice.account_id, 200)
    claimed, errors = [], []
    start = threading.Barrier(4, timeout=30)

    def claimer():
        try:
            with app.app_context():
                start.wait()
                while True:
                    batch = checks.claim(checks.new_claim_token(), 9)
                    if not batch:
                        break
                    claimed.extend(item.id for item in batch)
                db.session.remove()
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert len(claimed) == 200 and len(set(claimed)) == 200


def test_claims_take_the_most_overdue_first(app, alice):
    ids = insert_due_subscriptions(alice.account_id, 5)
    with write_transaction():
        for minutes, subscription_id in enumerate(ids):
            db.session.execute(update(Subscription).where(Subscription.id == subscription_id)
                               .values(next_check_at=utcnow() - timedelta(minutes=10 - minutes)))
    assert [item.id for item in checks.claim(checks.new_claim_token(), 2)] == sorted(ids[:2])


# --- leases ------------------------------------------------------------------------------------------

def test_a_crashed_checkers_claim_is_taken_again_after_the_lease(app, alice, monkeypatch):
    [subscription_id] = insert_due_subscriptions(alice.account_id, 1)
    app.extensions["provider"] = CountingProvider()
    crashed = checks.new_claim_token()
    assert [item.id for item in checks.claim(crashed, 10)] == [subscription_id]  # ...and then it dies

    lease = app.config["CHECK_LEASE_SECONDS"]
    start = utcnow()
    monkeypatch.setattr(checks, "utcnow", lambda: start + timedelta(seconds=lease - 5))
    assert worker.run_due() == []  # still leased

    monkeypatch.setattr(checks, "utcnow", lambda: start + timedelta(seconds=lease + 5))
    [summary] = worker.run_due()
    assert summary.checked == 1
    row = fresh_rows()[0]
    assert row.check_count == 1 and row.claim_token is None


def test_a_checker_that_lost_its_lease_writes_nothing(app, alice, monkeypatch):
    [subscription_id] = insert_due_subscriptions(alice.account_id, 1)
    provider = CountingProvider()
    slow = checks.new_claim_token()
    slow_claim = checks.claim(slow, 10)
    slow_outcomes = checks.fetch_all(provider, slow_claim)  # a very slow provider answer...

    start = utcnow()
    expired = start + timedelta(seconds=app.config["CHECK_LEASE_SECONDS"] + 1)
    monkeypatch.setattr(checks, "utcnow", lambda: expired)
    fast = checks.new_claim_token()
    fast_claim = checks.claim(fast, 10)
    assert [item.id for item in fast_claim] == [subscription_id]
    assert checks.record_outcomes(fast, checks.fetch_all(provider, fast_claim)).checked == 1

    late = checks.record_outcomes(slow, slow_outcomes)  # ...arrives after another checker took over
    assert (late.checked, late.skipped, late.events) == (0, 1, 0)
    assert fresh_rows()[0].check_count == 1
    assert db.session.scalar(select(func.count()).select_from(Event)) == 1


def test_a_claim_sets_a_lease_of_the_configured_length(app, alice):
    [subscription_id] = insert_due_subscriptions(alice.account_id, 1)
    before = utcnow()
    checks.claim(checks.new_claim_token(), 1)
    row = fresh_rows()[0]
    lease = (row.claimed_until - before).total_seconds()
    assert app.config["CHECK_LEASE_SECONDS"] - 5 <= lease <= app.config["CHECK_LEASE_SECONDS"] + 5


# --- the database lock and the APScheduler wiring -------------------------------------------------------

@pytest.mark.sqlite_only(reason="the scheduler lock file exists on SQLite only (PostgreSQL runs any number)")
def test_only_one_scheduler_per_sqlite_database_and_the_lock_lives_beside_it(app):
    database = make_url(app.config["SQLALCHEMY_DATABASE_URI"]).database
    first = scheduler.lock_for(app)
    assert first.lock_file == database + ".scheduler.lock"
    assert scheduler._try_acquire(first)
    assert not scheduler._try_acquire(scheduler.lock_for(app))  # another worker of the same database
    other = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": app.config["SQLALCHEMY_DATABASE_URI"]})
    assert not scheduler._try_acquire(scheduler.lock_for(other))  # another app (or checkout), same database
    first.release()
    again = scheduler.lock_for(app)
    assert scheduler._try_acquire(again)
    again.release()


@pytest.mark.sqlite_only(reason="the scheduler lock file exists on SQLite only (PostgreSQL runs any number)")
def test_a_path_to_the_database_through_a_symbolic_link_takes_the_same_lock(app, tmp_path):
    database = make_url(app.config["SQLALCHEMY_DATABASE_URI"]).database
    (tmp_path / "linked.db").symlink_to(database)
    (tmp_path / "folder").symlink_to(os.path.dirname(database), target_is_directory=True)
    held = scheduler.lock_for(app)
    assert scheduler._try_acquire(held)
    try:
        for path in (tmp_path / "linked.db", tmp_path / "folder" / os.path.basename(database)):
            other = SimpleNamespace(config={"SQLALCHEMY_DATABASE_URI": f"sqlite:///{path}"})
            assert not scheduler._try_acquire(scheduler.lock_for(other))
    finally:
        held.release()


@pytest.mark.sqlite_only(reason="the scheduler lock file exists on SQLite only (PostgreSQL runs any number)")
def test_another_database_has_its_own_lock(app, tmp_path):
    held = scheduler.lock_for(app)
    assert scheduler._try_acquire(held)
    other = scheduler.lock_for(SimpleNamespace(config={"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/b.db"}))
    try:
        assert scheduler._try_acquire(other)
        other.release()
    finally:
        held.release()


@pytest.mark.parametrize("url", ["postgresql://db/monitor", "sqlite://", "sqlite:///:memory:"])
def test_no_lock_where_any_number_of_schedulers_may_run(url):
    assert scheduler.lock_for(SimpleNamespace(config={"SQLALCHEMY_DATABASE_URI": url})) is None


@pytest.mark.sqlite_only(reason="the scheduler lock file exists on SQLite only (PostgreSQL runs any number)")
def test_the_scheduler_stays_off_in_tests_when_disabled_and_in_one_off_commands(app):
    assert scheduler.start_when_serving(app) is None  # TESTING
    app.config.update(TESTING=False, SCHEDULER_ENABLED=False)
    assert scheduler.start_when_serving(app) is None
    app.config.update(SCHEDULER_ENABLED=True)
    with click.Context(click.Command("upgrade")):
        assert scheduler.start_when_serving(app) is None
    assert "scheduler" not in app.extensions
    lock = scheduler.lock_for(app)  # the lock was not taken
    assert scheduler._try_acquire(lock)
    lock.release()


def test_the_scheduler_polls_for_due_checks(app):
    jobs = {job.id: job for job in scheduler.Scheduler(app).apscheduler.get_jobs()}
    assert jobs["checks"].trigger.interval == timedelta(seconds=app.config["SCHEDULER_CHECK_POLL_SECONDS"])
    assert jobs["flush-usage"].trigger.interval == timedelta(seconds=5)
    assert jobs["retention"].trigger.interval == timedelta(seconds=300)


def test_a_failing_step_is_logged_and_the_loop_goes_on(app, caplog):
    def broken():
        raise RuntimeError("database went away")

    scheduler.Scheduler(app).run_step(broken)  # does not raise
    assert "scheduler step broken failed" in caplog.text


def test_a_round_of_checks_that_fails_records_no_heartbeat(app, monkeypatch):
    """The heartbeat was recorded before the round: with every round failing (the subscriptions table locked by an
    operator's open transaction, each claim giving up at lock_timeout), /healthz said ok and the stalled-scheduler
    alert stayed quiet for as long as no check ran (scale-out walk: 135 s, 13 failed rounds a scheduler)."""
    def locked(_keep_going):
        raise RuntimeError("canceling statement due to lock timeout")
    monkeypatch.setattr(worker, "run_due_checks", locked)
    running = scheduler.Scheduler(app)
    running.run_step(running.tick_and_check)
    assert health.scheduler_heartbeat()["last_tick_at"] is None
    db.session.rollback()  # the read's snapshot (SQLite) would not see the tick written next
    monkeypatch.setattr(worker, "run_due_checks", lambda _keep_going: False)
    running.run_step(running.tick_and_check)
    assert health.scheduler_heartbeat()["last_tick_at"] is not None


def test_a_database_outage_is_one_line_a_minute_for_each_step_not_a_traceback_every_round(app, caplog, monkeypatch):
    """A dropped database wrote 15 tracebacks in 10 s, about 5,000 an hour a process (operability walk)."""
    import sqlite3
    from app import outage_log
    monkeypatch.setattr(outage_log, "_places", {})
    clock = {"now": 1000.0}
    monkeypatch.setattr(outage_log.time, "monotonic", lambda: clock["now"])

    def database_gone():
        raise sqlite3.OperationalError("unable to open database file")

    def broken():
        raise RuntimeError("a bug")
    running = scheduler.Scheduler(app)
    for _ in range(5):
        running.run_step(database_gone)
        running.run_step(broken)
    clock["now"] += outage_log.OUTAGE_LINE_SECONDS
    running.run_step(database_gone)
    outage = [record for record in caplog.records if "database_gone" in record.getMessage()]
    assert len(outage) == 2 and all(record.getMessage().startswith(
        "scheduler step database_gone failed: the database (DATABASE_URL) cannot be used: unable to open database "
        "file (") and record.getMessage().endswith(" (said once a minute while it lasts)") for record in outage)
    assert all(record.exc_info is None and record.levelname == "ERROR" for record in outage)
    bugs = [record for record in caplog.records if "step broken" in record.getMessage()]
    assert len(bugs) == 5 and all(record.exc_info for record in bugs)  # anything else: its traceback every time


def test_an_outage_says_at_once_when_its_reason_changes_and_once_when_it_ends(app, caplog, monkeypatch):
    """The outage line was per loop: a database that went from unreachable to schemaless said nothing for a minute,
    and nothing ever said that the loop worked again."""
    import sqlite3
    from app import outage_log
    monkeypatch.setattr(outage_log, "_places", {})
    clock = {"now": 1000.0}
    monkeypatch.setattr(outage_log.time, "monotonic", lambda: clock["now"])
    reason = {"error": sqlite3.OperationalError("unable to open database file")}

    def step():
        if reason["error"]:
            raise reason["error"]
    running = scheduler.Scheduler(app)
    running.run_step(step)
    clock["now"] += 5
    running.run_step(step)  # the same reason within the minute: nothing
    reason["error"] = sqlite3.OperationalError("no such table: subscriptions")
    running.run_step(step)
    clock["now"] += 37
    reason["error"] = None
    running.run_step(step)
    running.run_step(step)  # working on: nothing more
    lines = [record.getMessage() for record in caplog.records if "step step" in record.getMessage()]
    assert len(lines) == 3
    assert "unable to open database file" in lines[0] and "no such table: subscriptions" in lines[1]
    assert lines[2] == ("scheduler step step failed while the database could not be used; it works again "
                        "(after 42 s)")


def test_a_database_failing_every_other_round_writes_two_lines_a_minute_not_two_a_round(app, caplog, monkeypatch):
    """Each round that worked forgot the outage, so the next failure was said at once: a database refusing every other
    connection (too many clients) wrote an ERROR and a WARNING line every two rounds (review)."""
    import sqlite3
    from app import outage_log
    monkeypatch.setattr(outage_log, "_places", {})
    clock = {"now": 1000.0}
    monkeypatch.setattr(outage_log.time, "monotonic", lambda: clock["now"])
    rounds = {"n": 0}

    def flapping():
        rounds["n"] += 1
        if rounds["n"] % 2:
            raise sqlite3.OperationalError(("unable to open database file", "disk I/O error")[rounds["n"] % 4 // 2])
    running = scheduler.Scheduler(app)
    for _ in range(60):  # two minutes, a round every 2 s
        running.run_step(flapping)
        clock["now"] += 2
    lines = [record for record in caplog.records if "step flapping" in record.getMessage()]
    errors = [line for line in lines if line.levelname == "ERROR"]
    recoveries = [line for line in lines if line.levelname == "WARNING"]
    assert len(errors) == 4 and len(recoveries) == 2  # each reason once a minute; the end of an outage once a minute


def test_an_end_said_a_moment_ago_is_said_again_later_so_the_log_never_ends_on_an_outage_that_is_over(app, caplog,
                                                                                                      monkeypatch):
    """An outage that came back within the minute of the last "works again" line and then ended was never said to
    have ended: the log's last word was its ERROR line (review)."""
    import sqlite3
    from app import outage_log
    monkeypatch.setattr(outage_log, "_places", {})
    clock = {"now": 1000.0}
    monkeypatch.setattr(outage_log.time, "monotonic", lambda: clock["now"])
    failing = {"error": None}

    def step():
        if failing["error"]:
            raise failing["error"]
    running = scheduler.Scheduler(app)
    for at, error in ((0, "unable to open database file"), (10, None), (15, "disk I/O error"), (20, None)):
        clock["now"] = 1000.0 + at
        failing["error"] = sqlite3.OperationalError(error) if error else None
        running.run_step(step)
    for at in range(25, 200, 5):  # working on
        clock["now"] = 1000.0 + at
        running.run_step(step)
    lines = [record for record in caplog.records if "step step" in record.getMessage()]
    assert [line.levelname for line in lines] == ["ERROR", "WARNING", "ERROR", "WARNING"]
    assert lines[-1].getMessage().endswith("it works again (after 55 s)")  # from 15 s to the round at 70 s


def test_a_round_that_did_not_use_the_database_does_not_say_it_works_again(app, caplog, monkeypatch):
    """The usage flush with nothing to write touched no database, and said "it works again" 5 s into an outage
    (review)."""
    import sqlite3
    from app import outage_log
    monkeypatch.setattr(outage_log, "_places", {})
    outcome = {"raise": True}

    def flush_like():
        if outcome["raise"]:
            raise sqlite3.OperationalError("unable to open database file")
        return False  # nothing to write
    running = scheduler.Scheduler(app)
    running.run_step(flush_like)
    outcome["raise"] = False
    running.run_step(flush_like)
    assert not [record for record in caplog.records if "works again" in record.getMessage()]


@pytest.mark.sqlite_only(reason="the scheduler lock is SQLite's")
def test_a_stop_made_in_another_thread_frees_the_sqlite_lock(app):
    """The lock was thread-local: a stop begun by the stop signal's thread left it held until the process ended, and
    a standby could not take over meanwhile (review)."""
    lock = scheduler.lock_for(app)
    running = scheduler.Scheduler(app, lock)
    assert scheduler._try_acquire(lock)
    stopping = threading.Thread(target=running.stop)
    stopping.start()
    stopping.join(10)
    assert not lock.is_locked
    assert scheduler._try_acquire(scheduler.lock_for(app))  # another process's lock, as a standby's would


def test_a_scheduler_whose_stop_began_does_not_start(app):
    """A stop signal during start-up or standby: the stop found nothing to stop, then the loops started and nothing
    stopped them (review)."""
    stopped = scheduler.Scheduler(app)
    stopped.stop()
    stopped.start()
    assert not stopped.apscheduler.running and not stopped.sender.is_alive()
    asked = scheduler.Scheduler(app)
    asked.request_stop()
    asked.start()
    assert not asked.apscheduler.running and not asked.sender.is_alive()


def test_the_stop_signal_stops_the_scheduler_once_and_hands_every_signal_to_the_server(monkeypatch):
    """The handler started a thread at each signal: two SIGTERMs are the rule under systemd, and Python 3.12 refuses
    a thread started at shutdown (review). It sets an Event a waiting thread stops on."""
    import os
    import signal
    stops, handed, stopped = [], [], threading.Event()
    fake = SimpleNamespace(stop=lambda: (stops.append(1), stopped.set()))
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: handed.append(signum))
    try:
        scheduler._stop_at_the_servers_stop_signal(fake)
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGTERM)
        assert stopped.wait(5)
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stops == [1] and handed == [signal.SIGTERM, signal.SIGTERM]


def test_the_check_step_ticks_the_heartbeat_and_checks_due_subscriptions(app, alice):
    insert_due_subscriptions(alice.account_id, 3)
    app.extensions["provider"] = CountingProvider()
    db.session.remove()
    running = scheduler.Scheduler(app)
    running.run_step(running.tick_and_check)
    assert all(row.check_count == 1 for row in fresh_rows())
    assert health.scheduler_heartbeat()["lag_seconds"] < 60
    assert worker.run_due_checks() is False  # nothing left to do


def test_a_stopping_scheduler_runs_no_more_steps(app, alice):
    insert_due_subscriptions(alice.account_id, 2)
    app.extensions["provider"] = CountingProvider()
    running = scheduler.Scheduler(app)
    running.request_stop()
    running.run_step(running.tick_and_check)
    assert all(row.check_count == 0 for row in fresh_rows())


def test_a_busy_database_is_one_line_a_minute_for_a_step_not_a_traceback_every_round(app, caplog, monkeypatch):
    """A lock held past the lock timeout (an operator's open transaction on PostgreSQL, SQLite's write lock past its
    busy timeout) wrote a traceback every round of every loop (scale-out walk); requests already said it in a line."""
    import sqlite3
    from app import outage_log
    monkeypatch.setattr(outage_log, "_places", {})

    def database_busy():
        raise sqlite3.OperationalError("database is locked")
    running = scheduler.Scheduler(app)
    for _ in range(3):
        running.run_step(database_busy)
    [line] = [record for record in caplog.records if "database_busy" in record.getMessage()]
    assert line.exc_info is None and line.getMessage().startswith(
        "scheduler step database_busy failed: the database (DATABASE_URL) is busy: database is locked")
