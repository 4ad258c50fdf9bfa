"""`flask checks run [--all | --due | SUBSCRIPTION_ID]` and `flask scheduler run` (contract §9)."""
import os
import signal
import time
from types import SimpleNamespace
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.common import utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import Event, Subscription
from app.worker import scheduler


class Network:
    concurrency = 1

    def __init__(self):
        self.fetched = []

    def fetch(self, entity_type, network_id):
        self.fetched.append(network_id)
        from app.providers import EntityUnavailable
        if network_id.startswith("private-"):
            raise EntityUnavailable("private")
        return {"network_id": network_id, "name": "X", "headline": "h", "company": "Acme",
                "title": "Engineer", "activities": []}


@pytest.fixture
def network(app):
    app.extensions["provider"] = Network()
    return app.extensions["provider"]


def subscribe(tenant, network_id):
    response = tenant.post("/subscriptions", json={"entity_type": "contact", "network_id": network_id})
    assert response.status_code == 201
    return response.json["id"]


def make_due(*ids):
    with write_transaction():
        db.session.execute(update(Subscription).where(Subscription.id.in_(ids))
                           .values(next_check_at=utcnow() - timedelta(seconds=1)))


def check_counts():
    db.session.rollback()
    rows = db.session.execute(select(Subscription.network_id, Subscription.check_count)).all()
    return dict(rows)


@pytest.fixture
def three(alice, network):
    """due-one is due, later-one is not yet, paused-one is paused (and looks due)."""
    ids = {name: subscribe(alice, name) for name in ("due-one", "later-one", "paused-one")}
    alice.post(f"/subscriptions/{ids['paused-one']}/pause")
    make_due(ids["due-one"], ids["paused-one"])
    return ids


def run(runner, *args):
    return runner.invoke(args=["checks", "run", *args])


def test_checks_run_without_options_runs_the_due_ones(runner, three, network):
    result = run(runner)
    assert result.exit_code == 0, result.output
    assert "checked=1" in result.output
    assert network.fetched == ["due-one"]


def test_checks_run_due(runner, three, network):
    result = run(runner, "--due")
    assert result.exit_code == 0
    assert result.output.strip() == "checked=1 changes=0 unavailable=0 failed=0 skipped=0 deferred=0"
    assert check_counts() == {"due-one": 1, "later-one": 0, "paused-one": 0}


def test_checks_run_all_checks_every_active_one_due_or_not(runner, three, network):
    result = run(runner, "--all")
    assert result.exit_code == 0
    assert "checked=2" in result.output
    assert check_counts() == {"due-one": 1, "later-one": 1, "paused-one": 0}
    assert db.session.scalar(select(Event.type).limit(1)) == "subscription.initial_state"


def test_checks_run_all_says_how_many_active_ones_another_checker_held(runner, three, network):
    """They are being checked elsewhere, so the pass leaves them; it used to say nothing of them."""
    with write_transaction():
        db.session.execute(update(Subscription).where(Subscription.id == three["later-one"])
                           .values(claim_token="claim_elsewhere", claimed_until=utcnow() + timedelta(minutes=2)))
    result = run(runner, "--all")
    assert result.exit_code == 0
    assert result.output.strip() == "checked=1 changes=0 unavailable=0 failed=0 skipped=0 deferred=0 held=1"
    assert check_counts() == {"due-one": 1, "later-one": 0, "paused-one": 0}


def test_checks_run_one_by_id(runner, three, network):
    result = run(runner, three["later-one"])
    assert result.exit_code == 0
    assert "checked=1" in result.output
    assert check_counts() == {"due-one": 0, "later-one": 1, "paused-one": 0}


def test_checks_run_an_unreachable_entity_has_done_its_job(runner, alice, network):
    subscription_id = subscribe(alice, "private-person")
    result = run(runner, subscription_id)
    assert result.exit_code == 0
    assert "checked=1" in result.output and "unavailable=1" in result.output


def test_checks_run_all_checks_every_one_even_when_half_the_lease_runs_out(runner, app, alice, network,
                                                                           monkeypatch):
    """A page's checks past half the lease were deferred and passed by for good: `--all` said `deferred=150`,
    exited 1 and blamed the provider, which was not paused (fault walk)."""
    ids = [subscribe(alice, f"person-{number}") for number in range(8)]
    app.config["CHECK_LEASE_SECONDS"] = 1.2  # half of it: about two of these calls
    fetch = network.fetch
    monkeypatch.setattr(network, "fetch", lambda *args: time.sleep(0.25) or fetch(*args))
    result = run(runner, "--all")
    assert result.exit_code == 0, result.output
    assert result.output.strip().startswith("checked=8 ") and "deferred=0" in result.output
    assert set(check_counts().values()) == {1} and len(check_counts()) == len(ids)


def test_checks_run_due_counts_as_deferred_only_the_checks_it_left_unmade(runner, app, alice, network, monkeypatch):
    """A batch's checks past half the lease were counted as deferred though the next batch made them: `checks run`
    exited 1 blaming the provider, which was not paused."""
    ids = [subscribe(alice, f"person-{number}") for number in range(8)]
    make_due(*ids)
    app.config["CHECK_LEASE_SECONDS"] = 1.2  # half of it: about two of these calls
    fetch = network.fetch
    monkeypatch.setattr(network, "fetch", lambda *args: time.sleep(0.25) or fetch(*args))
    result = run(runner)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "checked=8 changes=0 unavailable=0 failed=0 skipped=0 deferred=0"
    assert set(check_counts().values()) == {1} and len(check_counts()) == len(ids)


def test_checks_run_due_does_not_count_a_check_that_fell_due_after_its_last_look(runner, alice, network,
                                                                                 monkeypatch):
    """The checks left unmade were counted at the run's end as every due one then: one that fell due after the run's
    last claim found nothing was counted as deferred, and the run exited 1 blaming the provider (a busy table)."""
    from app.services import checks
    due, later = subscribe(alice, "due-one"), subscribe(alice, "later-one")
    make_due(due)
    claim = checks.claim

    def claim_then_one_falls_due(token, limit):
        claimed = claim(token, limit)
        if not claimed:  # the run's last look found none due: later-one falls due just after it
            with write_transaction():
                db.session.execute(update(Subscription).where(Subscription.id == later)
                                   .values(next_check_at=utcnow()))
        return claimed
    monkeypatch.setattr(checks, "claim", claim_then_one_falls_due)
    result = run(runner)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "checked=1 changes=0 unavailable=0 failed=0 skipped=0 deferred=0"


def test_checks_run_all_counts_the_cut_off_checks_another_checker_took_meanwhile_as_held(runner, app, alice,
                                                                                         network, monkeypatch):
    """They were counted nowhere (neither deferred nor held), and the run looked complete (review)."""
    from app.services import checks
    for number in range(8):
        subscribe(alice, f"person-{number}")
    app.config["CHECK_LEASE_SECONDS"] = 1.2
    fetch = network.fetch
    monkeypatch.setattr(network, "fetch", lambda *args: time.sleep(0.25) or fetch(*args))
    monkeypatch.setattr(checks, "claim_ids", lambda token, ids: [])  # as the scheduler's claim takes them first
    result = run(runner, "--all")
    counts = dict(pair.split("=") for pair in result.output.split("\n")[0].split())
    assert int(counts["checked"]) + int(counts["held"]) == 8 and int(counts["held"]) > 0, result.output


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_checks_run_stops_on_a_signal_and_releases_what_it_has_not_started(runner, app, alice, network,
                                                                           monkeypatch, signum):
    """SIGTERM killed it at once, its claims left for the lease (two minutes); SIGINT was ignored until half the
    lease ran out, and then the provider was blamed (fault walk)."""
    ids = [subscribe(alice, f"person-{number}") for number in range(6)]
    fetch, calls = network.fetch, []

    def slow(*args):
        calls.append(args)
        if len(calls) == 1:
            os.kill(os.getpid(), signum)  # as the operator's signal arrives while the first call is out
        time.sleep(0.2)
        return fetch(*args)
    monkeypatch.setattr(network, "fetch", slow)
    result = run(runner, "--all")
    assert result.exit_code == 1, result.output
    assert f"stopped by {signal.Signals(signum).name}" in result.output
    assert len(calls) < len(ids)  # it stopped starting calls
    db.session.rollback()
    assert db.session.scalar(select(func.count()).where(Subscription.claim_token.is_not(None))) == 0
    assert signal.getsignal(signum) not in (None, signal.SIG_IGN)  # the test process's own handler is back


def test_checks_run_exits_non_zero_when_every_check_failed(runner, alice, network, monkeypatch):
    """It printed `failed=6` and exited 0, so cron could not see a vendor outage (walk)."""
    from app.providers import ProviderError

    def down(entity_type, network_id):
        raise ProviderError("HTTP 500")
    ids = [subscribe(alice, name) for name in ("one", "two")]
    monkeypatch.setattr(network, "fetch", down)
    result = run(runner, "--all")
    assert result.exit_code == 1 and "failed=2" in result.output
    assert "every check failed (2)" in result.output
    monkeypatch.undo()
    make_due(*ids)
    assert run(runner, "--due").exit_code == 0  # the provider answers again


@pytest.mark.parametrize("which", ["paused-one", "cancelled", "unknown"])
def test_checks_run_a_non_active_id_fails(runner, alice, three, network, which):
    if which == "cancelled":
        subscription_id = three["due-one"]
        alice.delete(f"/subscriptions/{subscription_id}")
    elif which == "unknown":
        subscription_id = "sub_000000000000000000000000"
    else:
        subscription_id = three[which]
    result = run(runner, subscription_id)
    assert result.exit_code != 0
    assert subscription_id in result.output and "not an active subscription" in result.output
    assert network.fetched == []


@pytest.mark.parametrize("args", [["--all", "--due"], ["--all", "sub_x"], ["--due", "sub_x"]])
def test_checks_run_refuses_conflicting_options(runner, three, network, args):
    result = run(runner, *args)
    assert result.exit_code == 2
    assert "Give one of --all, --due or a SUBSCRIPTION_ID" in result.output
    assert network.fetched == []


def test_checks_run_with_nothing_to_do_succeeds(runner, app, network):
    result = run(runner)
    assert result.exit_code == 0
    assert result.output.strip() == "checked=0 changes=0 unavailable=0 failed=0 skipped=0 deferred=0"


@pytest.mark.sqlite_only(reason="the scheduler lock file exists on SQLite only (PostgreSQL runs any number)")
def test_scheduler_run_refuses_when_another_scheduler_holds_the_database_lock(runner, app):
    held = scheduler.lock_for(app)
    held.acquire()
    try:
        result = runner.invoke(args=["scheduler", "run"])
    finally:
        held.release()
    assert result.exit_code != 0
    assert "another scheduler already runs for this SQLite database" in result.output
    assert "SCHEDULER_ENABLED=0" in result.output


@pytest.mark.sqlite_only(reason="the scheduler lock file exists on SQLite only (PostgreSQL runs any number)")
def test_scheduler_run_starts_and_releases_the_lock_when_stopped(runner, app, monkeypatch):
    handlers = {}

    def install(signum, handler):
        handlers[signum] = handler
        handler(signum, None)  # as if the signal arrived at once

    monkeypatch.setattr(scheduler, "signal", SimpleNamespace(SIGINT=signal.SIGINT, SIGTERM=signal.SIGTERM,
                                                             signal=install))
    result = runner.invoke(args=["scheduler", "run"])
    assert result.exit_code == 0, result.output
    assert sorted(handlers) == sorted([signal.SIGINT, signal.SIGTERM])
    lock = scheduler.lock_for(app)
    assert scheduler._try_acquire(lock)  # released on the way out
    lock.release()
