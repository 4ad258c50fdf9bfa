"""The provider engine (issue 10): batches, the shared rate budget, provider-wide pauses that keep every
check's place, and the provider's calls and credits in usage."""
import logging
import math
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import limits
import pytest
from limits.errors import StorageError
from sqlalchemy import func, select, update
from sqlalchemy.exc import OperationalError

from app.common import utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import ProviderBudget, ProviderSlot, ProviderState, Subscription
from app.providers import Answers, BaseProvider, EntityUnavailable, ProviderError, QuotaExhausted, load_provider
from app.providers.base import provider_settings
from app.retry_after import parse_retry_after
from app.services import provider_limits
from app.worker import checks as worker


def person(network_id, **fields):
    return {"network_id": network_id, "name": "Jane", "headline": "Engineer", "company": "Acme", "title": "Engineer",
            "location": "Berlin", "activities": [], **fields}


class BatchVendor(BaseProvider):
    """Answers whole batches, in an order of its own; `answers` overrides one key's answer, `stop` the whole
    call's (raised)."""
    name = "batchvendor"
    batch_size = 3

    def __init__(self):
        self.calls = []
        self.answers = {}
        self.stop = None
        self.credits = None

    def fetch_many(self, entity_type, keys):
        self.calls.append((entity_type, list(keys)))
        if self.stop is not None:
            raise self.stop
        return Answers({key: self.answers.get(key, person(key)) for key in reversed(keys)}, credits=self.credits)


@pytest.fixture
def vendor(app):
    provider = BatchVendor()
    app.extensions["provider"] = provider
    return provider


def subscribe(tenant, network_id, entity_type="contact"):
    response = tenant.post("/subscriptions", json={"entity_type": entity_type, "network_id": network_id})
    assert response.status_code == 201, response.json
    return response.json["id"]


def make_due(ids, seconds_ago=1):
    with write_transaction():
        for offset, subscription_id in enumerate(ids):
            db.session.execute(update(Subscription).where(Subscription.id == subscription_id)
                               .values(next_check_at=utcnow() - timedelta(seconds=seconds_ago + offset)))


def row(subscription_id):
    db.session.rollback()
    return db.session.execute(select(Subscription).where(Subscription.id == subscription_id)
                              .execution_options(populate_existing=True)).scalar_one()


def checked(summaries, name="checked"):
    return sum(getattr(summary, name) for summary in summaries)


# --- batches ------------------------------------------------------------------------------------------

def test_a_batch_provider_gets_calls_of_its_batch_size_per_entity_type_and_answers_reach_the_right_ids(
        alice, vendor):
    people = [subscribe(alice, f"p{number}") for number in range(7)]
    firms = [subscribe(alice, f"c{number}", "company") for number in range(2)]
    make_due(people + firms)
    assert checked(worker.run_due()) == 9
    assert sorted(len(keys) for _, keys in vendor.calls) == [1, 2, 3, 3]
    assert {entity_type for entity_type, keys in vendor.calls if keys[0].startswith("c")} == {"company"}
    for number, subscription_id in enumerate(people):
        assert row(subscription_id).snapshot["network_id"] == f"p{number}"


def test_two_accounts_watching_one_entity_share_one_lookup(alice, bob, vendor):
    ids = [subscribe(alice, "jane"), subscribe(bob, "jane")]
    make_due(ids)
    assert checked(worker.run_due()) == 2
    assert vendor.calls == [("contact", ["jane"])]


def test_answers_per_id_unavailable_transient_and_missing(alice, vendor):
    vendor.answers = {"gone": EntityUnavailable("not_found"), "flaky": ProviderError("503"), "odd": ["not", "a dict"]}
    ids = {name: subscribe(alice, name) for name in ("gone", "flaky", "odd")}
    make_due(list(ids.values()))
    summaries = worker.run_due()
    assert (checked(summaries), checked(summaries, "failed")) == (1, 2)
    assert row(ids["gone"]).unavailable_reason == "not_found"
    assert row(ids["flaky"]).consecutive_failures == 1 and row(ids["odd"]).consecutive_failures == 1


def test_a_provider_that_forgets_an_id_fails_that_check_only(alice, app):
    class Forgetful(BatchVendor):
        def fetch_many(self, entity_type, keys):
            return Answers({key: person(key) for key in keys if key != "lost"})
    app.extensions["provider"] = Forgetful()
    ids = [subscribe(alice, "kept"), subscribe(alice, "lost")]
    make_due(ids)
    summaries = worker.run_due()
    assert (checked(summaries), checked(summaries, "failed")) == (1, 1)
    assert row(ids[1]).consecutive_failures == 1


def test_a_batch_answered_as_a_plain_dict_is_read_and_one_answered_as_no_mapping_fails(alice, vendor, monkeypatch):
    """The conformance kit takes any dict from fetch_many; a plain one raised at its missing `credits` out of the call,
    and the batch was never recorded: its checks waited for their lease, every round (walk)."""
    ids = [subscribe(alice, f"p{number}") for number in range(2)]
    fetch = vendor.fetch_many
    monkeypatch.setattr(vendor, "fetch_many", lambda entity_type, keys: dict(fetch(entity_type, keys)))
    make_due(ids)
    assert checked(worker.run_due()) == 2
    monkeypatch.setattr(vendor, "fetch_many", lambda entity_type, keys: [])
    make_due(ids)
    assert checked(worker.run_due(), "failed") == 2
    assert row(ids[0]).consecutive_failures == 1 and row(ids[0]).claim_token is None


def test_a_lookup_made_for_a_check_that_lost_its_claim_is_counted_in_usage(alice, vendor):
    """A subscription paused or cancelled while its lookup was out: the vendor was called and charged, and usage
    counted neither."""
    from app.services import checks
    vendor.credits = 2
    ids = [subscribe(alice, "a1"), subscribe(alice, "a2")]
    make_due(ids)
    token = checks.new_claim_token()
    outcomes = checks.fetch_all(vendor, checks.claim(token, 10))
    assert alice.post(f"/subscriptions/{ids[0]}/pause").status_code == 200
    assert alice.delete(f"/subscriptions/{ids[1]}").status_code == 200
    summary = checks.record_outcomes(token, outcomes)
    assert (summary.skipped, summary.checked) == (2, 0)
    day = alice.get("/account/usage").json["day"]
    assert (day["checks"], day["provider_calls"], day["provider_credits"]) == (0, 2, 2.0)


def test_credits_and_calls_are_counted_in_usage_per_account(alice, bob, vendor):
    vendor.credits = 6
    ids = [subscribe(alice, "a1"), subscribe(alice, "a2"), subscribe(bob, "b1")]
    make_due(ids)
    worker.run_due()
    mine, theirs = alice.get("/account/usage").json, bob.get("/account/usage").json
    assert (mine["day"]["provider_calls"], mine["day"]["provider_credits"]) == (2, 4.0)
    assert (theirs["day"]["provider_calls"], theirs["day"]["provider_credits"]) == (1, 2.0)
    assert mine["month"]["provider_credits"] == 4.0


# --- provider-wide pauses -----------------------------------------------------------------------------

def state_of(subscription_id):
    found = row(subscription_id)
    return found.next_check_at, found.consecutive_failures, found.check_count, found.claim_token


def test_a_429_pauses_the_provider_for_everyone_and_the_checks_keep_their_place(app, alice, bob, vendor, caplog):
    ids = [subscribe(alice, f"p{number}") for number in range(5)] + [subscribe(bob, "bob-person")]
    make_due(ids)
    before = {subscription_id: state_of(subscription_id) for subscription_id in ids}
    vendor.stop = ProviderError("HTTP 429", retry_after=120)
    with caplog.at_level(logging.WARNING):
        summaries = [worker.run_due_batch()]
        assert worker.run_due() == []  # paused: nothing is claimed, nothing called
    assert len(vendor.calls) == 1  # the rest of the batch was not sent once the vendor said stop
    assert checked(summaries, "failed") == 0 and checked(summaries, "deferred") == 6
    assert {subscription_id: state_of(subscription_id) for subscription_id in ids} == before
    status = alice.get("/account/usage").json["provider_status"]
    assert (status["state"], status["reason"]) == ("paused", "rate_limited")
    assert len([record for record in caplog.records if "paused" in record.getMessage()]) == 1
    # The pause ends on its own at the time the vendor gave; the oldest due is checked first.
    vendor.stop = None
    with write_transaction():
        db.session.execute(update(ProviderState).values(paused_until=utcnow() - timedelta(seconds=1)))
    app.config["CHECK_BATCH_SIZE"] = 2
    assert checked([worker.run_due_batch()]) == 2
    assert sorted(vendor.calls[1][1]) == ["bob-person", "p4"]  # the two that were due the longest
    assert checked(worker.run_due()) == 4
    assert bob.get("/account/usage").json["provider_status"]["state"] == "active"


def test_answers_throttled_at_once_pause_the_provider_for_the_longest_wait_they_gave(alice, vendor):
    """The first throttled answer found was taken: answers that told 5 s and 90 s (calls out at once, or one batch)
    paused the provider for 5, and the vendor was called again before the time it had asked (walk)."""
    ids = [subscribe(alice, f"p{number}") for number in range(2)]
    make_due(ids)
    vendor.fetch_many = lambda entity_type, keys: Answers(
        {key: ProviderError("HTTP 429", retry_after=5 if index == 0 else 90) for index, key in enumerate(keys)})
    assert checked([worker.run_due_batch()], "deferred") == 2
    assert provider_limits.current_pause("batchvendor").paused_until > utcnow() + timedelta(seconds=60)


def test_a_pause_written_by_another_process_stops_an_unmetered_providers_batch_within_the_bound(
        app, alice, vendor, monkeypatch):
    """Only a metered provider's calls looked at the shared pause, in the rate budget: with no rate (the http
    provider's default), a scheduler went on calling a vendor that had told another one to wait, for the rest of
    its batch (walk). It now sees the pause within PAUSE_READ_SECONDS: no call starts later than that after it."""
    # The reader's clock moves a second a call, whatever the machine's load: the calls at 0, 1 and 2 s go out on the
    # read before the pause, the read at 3 s sees it (a loaded CI machine made a bound in wall-clock time flaky).
    monkeypatch.setattr(provider_limits, "PAUSE_READ_SECONDS", 3)
    clock = [0]
    monkeypatch.setattr(provider_limits, "time", SimpleNamespace(time=time.time, monotonic=lambda: clock[0]))
    ids = [subscribe(alice, f"p{number}") for number in range(8)]
    make_due(ids)
    fetch, started = vendor.fetch_many, []

    def throttled_elsewhere():
        with app.app_context():
            provider_limits.pause("batchvendor", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")

    def fetch_many(entity_type, keys):
        started.append(clock[0])
        if len(started) == 1:  # another scheduler's call is answered 429 meanwhile
            other = threading.Thread(target=throttled_elsewhere)
            other.start()
            other.join()
        clock[0] += 1
        return fetch(entity_type, keys)
    vendor.fetch_many, vendor.batch_size = fetch_many, 1
    summary = worker.run_due_batch()
    assert started == [0, 1, 2]
    assert summary.checked == len(vendor.calls) == 3 and summary.deferred == 5


def test_an_unmetered_providers_batch_reads_the_pause_at_most_once_per_bound(alice, vendor, monkeypatch):
    """Each call of an unmetered provider read the pause: one query per check, for a pause that is rarely there."""
    ids = [subscribe(alice, f"p{number}") for number in range(10)]
    make_due(ids)
    reads, read = [], provider_limits.current_pause
    monkeypatch.setattr(provider_limits, "current_pause", lambda name: reads.append(name) or read(name))
    vendor.batch_size = 1
    assert worker.run_due_batch().checked == 10
    assert len(reads) <= 3  # before claiming, at the batch's start, and once more on a slow machine


def test_a_paused_provider_is_not_called_by_check_one_either(alice, vendor):
    subscription_id = subscribe(alice, "jane")
    provider_limits.pause("batchvendor", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")
    summary = worker.run_one(subscription_id)
    assert (summary.checked, summary.failed, summary.deferred) == (0, 0, 1)
    assert vendor.calls == []
    assert row(subscription_id).claim_token is None


def test_checks_run_says_and_fails_when_a_pause_deferred_its_checks(alice, vendor, runner):
    subscription_id = subscribe(alice, "jane")
    provider_limits.pause("batchvendor", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")
    result = runner.invoke(args=["checks", "run", subscription_id])
    assert result.exit_code == 1
    assert "checked=0" in result.output and "deferred=1" in result.output
    assert "1 checks were deferred" in result.output and "providers status" in result.output
    assert vendor.calls == [] and row(subscription_id).check_count == 0


@pytest.mark.parametrize("wait", [999_999_999, parse_retry_after("Fri, 01 Jan 2100 00:00:00 GMT"), 1e12, math.inf],
                         ids=["seconds", "http-date", "1e12", "infinite"])
def test_a_huge_retry_after_pauses_for_the_longest_wait_configured_and_logs_it_once(
        app, alice, vendor, caplog, wait):
    """A vendor's Retry-After of years (a bug, a misread date) paused the provider for as long: nothing checked
    again until an operator noticed. Past PROVIDER_MAX_RETRY_AFTER_SECONDS the pause is that long, and logged so."""
    app.config["PROVIDER_MAX_RETRY_AFTER_SECONDS"] = 600
    ids = [subscribe(alice, f"p{number}") for number in range(2)]
    make_due(ids)
    vendor.stop, vendor.batch_size = ProviderError("HTTP 429", retry_after=wait), 1
    with caplog.at_level(logging.WARNING):
        assert checked([worker.run_due_batch()], "deferred") == 2
    status = alice.get("/account/usage").json["provider_status"]
    assert (status["state"], status["reason"]) == ("paused", "rate_limited")
    until = provider_limits.current_pause("batchvendor").paused_until
    assert utcnow() + timedelta(seconds=590) < until <= utcnow() + timedelta(seconds=600)
    lines = [record.getMessage() for record in caplog.records if "PROVIDER_MAX_RETRY_AFTER_SECONDS" in
             record.getMessage()]
    assert len(lines) == 1 and "paused" in lines[0] and "cut to PROVIDER_MAX_RETRY_AFTER_SECONDS=600" in lines[0]
    assert all(row(subscription_id).claim_token is None for subscription_id in ids)


def test_a_retry_after_within_the_longest_wait_is_obeyed_as_given(app, alice, vendor, caplog):
    make_due([subscribe(alice, "jane")])
    vendor.stop = ProviderError("HTTP 429", retry_after=3000)
    with caplog.at_level(logging.WARNING):
        worker.run_due_batch()
    until = provider_limits.current_pause("batchvendor").paused_until
    assert utcnow() + timedelta(seconds=2990) < until <= utcnow() + timedelta(seconds=3000)
    assert not [record for record in caplog.records if "PROVIDER_MAX_RETRY_AFTER" in record.getMessage()]


def test_quota_exhausted_pauses_until_an_operator_resumes(alice, vendor, runner, caplog):
    ids = [subscribe(alice, f"p{number}") for number in range(4)]
    make_due(ids)
    vendor.stop = QuotaExhausted("HTTP 402")
    with caplog.at_level(logging.WARNING):
        worker.run_due()
        worker.run_due()
    status = alice.get("/account/usage").json["provider_status"]
    assert (status["state"], status["reason"], status["paused_until"]) == ("paused", "quota_exhausted", None)
    assert len([record for record in caplog.records if "paused" in record.getMessage()]) == 1
    assert all(row(subscription_id).consecutive_failures == 0 for subscription_id in ids)
    assert "state=paused" in runner.invoke(args=["providers", "status"]).output
    vendor.stop = None
    result = runner.invoke(args=["providers", "resume"])
    assert result.exit_code == 0 and result.output.strip() == "resumed"
    assert runner.invoke(args=["providers", "resume"]).output.strip() == "the provider was not paused"
    assert checked(worker.run_due()) == 4
    assert alice.get("/account/usage").json["provider_status"]["state"] == "active"


def test_quota_with_a_reset_time_resumes_by_itself(alice, vendor):
    vendor.stop = QuotaExhausted("HTTP 402", resets_at=utcnow() + timedelta(hours=1))
    subscribe(alice, "jane")
    make_due([subscribe(alice, "ann")])
    worker.run_due()
    state = db.session.get(ProviderState, "batchvendor")
    assert state.paused_reason == "quota_exhausted" and state.paused_until is not None


def test_a_shorter_retry_after_never_shortens_an_ongoing_pause(app):
    later = utcnow() + timedelta(minutes=10)
    provider_limits.pause("x", provider_limits.RATE_LIMITED, later, "429")
    provider_limits.pause("x", provider_limits.RATE_LIMITED, utcnow() + timedelta(seconds=5), "429")
    assert provider_limits.current_pause("x").paused_until == later
    provider_limits.pause("x", provider_limits.QUOTA_EXHAUSTED, None, "402")
    provider_limits.pause("x", provider_limits.RATE_LIMITED, utcnow() + timedelta(seconds=5), "429")
    assert provider_limits.current_pause("x").paused_reason == "quota_exhausted"


# --- the shared rate budget ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["300/minute", "30/minute", "15/minute", "2/second", "18/second", "1/second"])
def test_the_budget_never_lets_any_window_of_the_period_exceed_the_limit(app, text):
    """Greedy takers at every tenth of a slice: no window of one period, wherever it starts, sees more."""
    rate = limits.parse(text)
    cut = provider_limits.slicing(rate)
    granted, moment, step = [], 1_000_000.0, cut.seconds / 10
    while moment < 1_000_000.0 + 3 * rate.get_expiry():
        while provider_limits.try_take_call(f"budget-{text}", cut, moment):
            granted.append(moment)
        moment += step
    period, limit = rate.get_expiry(), rate.amount
    allowed = limit if limit >= 2 else 2 * limit  # one call per period cannot be sliced
    assert max(sum(1 for other in granted if start <= other < start + period) for start in granted) <= allowed
    assert len(granted) >= 0.5 * 3 * limit  # and most of the budget is usable
    # Calls reach the vendor a little after they are taken, so what the vendor counts in a window was taken in a
    # stretch as long as the period plus that delay: the slices such a stretch overlaps hold no more than allowed.
    stretch = period + min(period / 10, provider_limits.MAX_ARRIVAL_DELAY_SECONDS)
    assert (math.ceil(round(stretch / cut.seconds, 9)) + 1) * cut.calls <= allowed


def test_take_call_waits_for_the_next_slice_and_gives_up_at_the_deadline(app):
    rate = limits.parse("2/second")
    cut = provider_limits.slicing(rate)
    clock = [5000.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds

    taken = [provider_limits.take_call("w", rate, clock[0] + 10, clock=lambda: clock[0], sleep=sleep)
             for _ in range(3)]
    assert taken == [True, True, True] and slept  # one of them waited for the next slice
    while provider_limits.try_take_call("w", cut, clock[0]):
        pass  # the current slice is spent: with no time left, no call
    assert provider_limits.take_call("w", rate, clock[0] + 0.001, clock=lambda: clock[0], sleep=sleep) is False
    provider_limits.pause("w", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=1), "429")
    assert provider_limits.take_call("w", rate, clock[0] + 10, clock=lambda: clock[0], sleep=sleep) is False


def test_claims_are_sized_to_what_the_budget_allows(alice, app, vendor):
    vendor.rate_limit = "6/minute"
    vendor.batch_size = 2
    ids = [subscribe(alice, f"p{number}") for number in range(30)]
    make_due(ids)
    summary = worker.run_due_batch()
    cut = provider_limits.slicing(limits.parse("6/minute"))
    assert summary.checked == cut.calls * int(worker.STEP_BUDGET_SECONDS // cut.seconds) * 2 < 30


# --- settings -----------------------------------------------------------------------------------------

def test_provider_settings_come_from_the_environment_then_the_config():
    environ = {"PROVIDER_ACME_API_KEY": "from-env", "PROVIDER_ACME_REGION": "eu", "PROVIDER_OTHER_API_KEY": "x"}
    assert provider_settings("acme", {"PROVIDER_ACME_API_KEY": "from-config"}, environ) == {
        "api_key": "from-config", "region": "eu"}


def test_operator_settings_override_the_provider_declarations():
    config = {"PROVIDER": "simulated", "SIMULATED_SEED": 1, "SIMULATED_PACE_SECONDS": 60, "NETWORK_DOMAIN": "x.com",
              "PROVIDER_RATE_LIMIT": "300/minute", "PROVIDER_CONCURRENCY": 4, "PROVIDER_BATCH_SIZE": 50}
    provider = load_provider(config)
    assert (provider.rate_limit, provider.concurrency, provider.batch_size) == ("300/minute", 4, 1)


def test_a_bad_rate_limit_fails_at_load_time():
    with pytest.raises(ValueError, match="PROVIDER_RATE_LIMIT"):
        load_provider({"PROVIDER": "simulated", "SIMULATED_SEED": 1, "SIMULATED_PACE_SECONDS": 60,
                       "NETWORK_DOMAIN": "x.com", "PROVIDER_RATE_LIMIT": "lots"})


def test_calls_the_budget_cannot_grant_before_the_deadline_are_deferred_untouched(alice, vendor):
    from app.services import checks
    vendor.rate_limit, vendor.batch_size = "2/minute", 1
    ids = [subscribe(alice, f"p{number}") for number in range(3)]
    make_due(ids)
    before = {subscription_id: state_of(subscription_id) for subscription_id in ids}
    token = checks.new_claim_token()
    claimed = checks.claim(token, 10)
    summary = checks.record_outcomes(token, checks.fetch_all(vendor, claimed, deadline=time.time() + 0.5))
    cut = provider_limits.slicing(limits.parse("2/minute"))
    assert (summary.checked, summary.deferred, summary.failed) == (cut.calls, 3 - cut.calls, 0)
    assert len(vendor.calls) == cut.calls
    deferred = [subscription_id for subscription_id in ids if row(subscription_id).check_count == 0]
    assert all(state_of(subscription_id) == before[subscription_id] for subscription_id in deferred)


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("concurrency", [1, 2])
def test_no_call_starts_past_the_deadline_however_free_the_provider(alice, vendor, local, concurrency):
    """A slow provider with slots and budget to spare started every call of the claim: past half the lease, past
    the lease itself, and another process re-claimed the batch and threw its results away, over and over."""
    from app.services import checks
    starts = []

    def slow_fetch(entity_type, keys, fetch=vendor.fetch_many):
        starts.append(time.time())
        time.sleep(0.15)
        return fetch(entity_type, keys)
    vendor.fetch_many, vendor.batch_size, vendor.local, vendor.concurrency = slow_fetch, 1, local, concurrency
    ids = [subscribe(alice, f"p{number}") for number in range(12)]
    make_due(ids)
    token = checks.new_claim_token()
    claimed = checks.claim(token, 20)
    # from the claim on: set before it, a loaded machine's claim (PostgreSQL) could outlast it and start no call
    deadline = time.time() + 0.6  # 12 calls of 0.15 s, two at a time at most: not all of them
    summary = checks.record_outcomes(token, checks.fetch_all(vendor, claimed, deadline=deadline))
    assert starts and all(start < deadline + 0.1 for start in starts)  # 0.1 s: a pool thread's own start
    assert (summary.checked, summary.deferred) == (len(starts), 12 - len(starts)) and len(starts) < 12


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_stopping_scheduler_releases_the_checks_not_started_before_the_calls_out_return(alice, vendor,
                                                                                          monkeypatch, concurrency):
    """They were released with the batch, after its slow calls: a process killed at its graceful timeout while a
    call was out left them claimed until the lease ran out (walk: 150 checks waited two minutes). Then only once a
    call returned, and never with one call at a time (Crustdata's), made by the loop itself (vendor walk)."""
    from app.services import checks
    out, stopping, recorded, returned, returned_by_then = [], threading.Event(), [], [], []

    def slow_fetch(entity_type, keys, fetch=vendor.fetch_many):
        out.append(keys)
        if len(out) == concurrency:
            stopping.set()  # SIGTERM while every worker has a call out
        time.sleep(0.5)
        out.remove(keys)
        returned.append(keys)
        return fetch(entity_type, keys)
    vendor.fetch_many, vendor.batch_size, vendor.concurrency = slow_fetch, 1, concurrency
    record = checks.record_outcomes
    monkeypatch.setattr(checks, "record_outcomes", lambda token, outcomes: returned_by_then.append(len(returned))
                        or recorded.append((len(out), sorted(outcome.claimed.id for outcome in outcomes)))
                        or record(token, outcomes))
    ids = [subscribe(alice, f"p{number}") for number in range(6)]
    make_due(ids)
    token = checks.new_claim_token()
    summary = checks.run_claimed(checks.claim(token, 10), token, keep_going=lambda: not stopping.is_set())
    (calls_out, released), (_, fetched) = recorded
    assert calls_out > 0 and returned_by_then[0] == 0  # released while the calls were out, before any returned
    assert summary.deferred == len(released) > 0 and len(fetched) == 6 - len(released)
    assert all(row(subscription_id).claim_token is None for subscription_id in ids)


def test_checks_deferred_by_the_budget_are_released_with_their_batch(app, alice, vendor, monkeypatch):
    """Only a stop releases early: checks deferred by the deadline or a pause go with the batch, after the pause
    is written (released early, other schedulers could call a throttled vendor before it is: review)."""
    from app.services import checks
    vendor.rate_limit, vendor.batch_size = "2/minute", 1
    ids = [subscribe(alice, f"p{number}") for number in range(3)]
    make_due(ids)
    record, recorded = checks.record_outcomes, []
    monkeypatch.setattr(checks, "record_outcomes", lambda token, outcomes: recorded.append(len(outcomes))
                        or record(token, outcomes))
    monkeypatch.setitem(app.config, "CHECK_LEASE_SECONDS", 1)  # the deadline: half of it
    token = checks.new_claim_token()
    summary = checks.run_claimed(checks.claim(token, 10), token)
    assert summary.deferred > 0 and recorded == [3]


@pytest.mark.parametrize("stopped_after", [None, 1])
def test_a_check_that_cannot_be_recorded_counts_as_failed_and_the_others_are_recorded(alice, vendor, monkeypatch,
                                                                                      stopped_after):
    """A batch that cannot be written is written one check at a time; one that still cannot be is a failed check,
    its claim cleared (here every fetched one). A lone fetched check (the others released early by a stop)
    re-raised instead, and kept its claim for the lease (review)."""
    from app.services import checks
    calls = []

    def counted_fetch(entity_type, keys, fetch=vendor.fetch_many):
        calls.append(keys)
        return fetch(entity_type, keys)
    vendor.fetch_many, vendor.batch_size = counted_fetch, 1
    record = checks.record_outcomes

    def poisoned(token, outcomes):
        if any(outcome.snapshot is not None for outcome in outcomes):  # every fetched check: never writable
            raise RuntimeError("poison")
        return record(token, outcomes)
    monkeypatch.setattr(checks, "record_outcomes", poisoned)
    ids = [subscribe(alice, f"p{number}") for number in range(3)]
    make_due(ids)
    token = checks.new_claim_token()
    summary = checks.run_claimed(checks.claim(token, 10), token,
                                 keep_going=lambda: stopped_after is None or len(calls) < stopped_after)
    fetched = 1 if stopped_after else 3
    assert (summary.failed, summary.deferred, summary.checked) == (fetched, 3 - fetched, 0)
    assert all(row(subscription_id).claim_token is None for subscription_id in ids)


# --- concurrency slots shared by every process ----------------------------------------------------------

DIES_HOLDING_A_SLOT = textwrap.dedent("""
    import os, signal, sys
    from datetime import timedelta
    from app import create_app
    from app.services import provider_limits
    app = create_app({"SQLALCHEMY_DATABASE_URI": sys.argv[1], "SCHEDULER_ENABLED": False, "TESTING": True})
    with app.app_context():
        print(provider_limits.try_take_slot("batchvendor", 1, "doomed", timedelta(seconds=120)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # mid-call, never giving the slot back
""")


def test_a_call_waits_for_a_slot_held_elsewhere_and_a_killed_holders_slot_is_taken_after_its_lease(
        app, alice, vendor, monkeypatch):
    from app.services import checks
    vendor.batch_size = 1  # concurrency 1: one slot, for every process
    ids = [subscribe(alice, f"p{number}") for number in range(2)]
    make_due(ids)
    child = subprocess.run([sys.executable, "-c", DIES_HOLDING_A_SLOT, app.config["SQLALCHEMY_DATABASE_URI"]],
                           cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == "0", child.stderr  # it took slot 0, then was killed

    token = checks.new_claim_token()
    summary = checks.record_outcomes(token, checks.fetch_all(vendor, checks.claim(token, 10),
                                                             deadline=time.time() + 0.3))
    assert (summary.checked, summary.deferred, summary.failed) == (0, 2, 0)  # waited, then kept their place
    assert vendor.calls == []

    later = utcnow() + timedelta(seconds=app.config["CHECK_LEASE_SECONDS"] + 1)
    monkeypatch.setattr(provider_limits, "utcnow", lambda: later)  # the dead holder's lease has run out
    token = checks.new_claim_token()
    summary = checks.record_outcomes(token, checks.fetch_all(vendor, checks.claim(token, 10)))
    assert (summary.checked, summary.deferred) == (2, 0)
    assert db.session.scalar(select(ProviderSlot.holder).where(ProviderSlot.provider == "batchvendor")) is None


def test_providers_commands_report_a_misconfigured_provider_clearly(app, runner):
    app.config["PROVIDER"] = "crustdata"
    app.extensions.pop("provider", None)
    for command in ("status", "resume"):
        result = runner.invoke(args=["providers", command])
        assert result.exit_code == 1
        assert "PROVIDER=crustdata needs PROVIDER_CRUSTDATA_API_KEY" in result.output


def test_a_moving_window_budget_in_a_limits_storage_grants_the_whole_limit(app, alice, vendor):
    """PROVIDER_RATE_LIMIT_STORAGE_URI (redis://… in production; memory:// here, one process)."""
    from app.services import checks
    app.config["PROVIDER_RATE_LIMIT_STORAGE_URI"] = "memory://"
    vendor.rate_limit, vendor.batch_size = "3/minute", 1
    ids = [subscribe(alice, f"p{number}") for number in range(5)]
    make_due(ids)
    token = checks.new_claim_token()
    summary = checks.record_outcomes(token, checks.fetch_all(vendor, checks.claim(token, 10),
                                                             deadline=time.time() + 0.5))
    assert (summary.checked, summary.deferred, summary.failed) == (3, 2, 0)
    assert len(vendor.calls) == 3
    assert db.session.scalar(select(func.count()).select_from(ProviderBudget)) == 0  # not in the database


@pytest.mark.parametrize("pause_before_the_run", [True, False], ids=["paused-before", "paused-by-the-first-call"])
def test_checks_run_due_says_and_fails_when_a_pause_left_the_due_checks_unmade(alice, vendor, runner,
                                                                               pause_before_the_run):
    """A pause met before the run claimed nothing, and one the first batch met deferred all of it: `checks run`
    printed deferred=0 and exited 0, as if nothing were due (`--all` and one id said deferred and exited 1)."""
    ids = [subscribe(alice, f"p{number}") for number in range(4)]
    make_due(ids)
    if pause_before_the_run:
        provider_limits.pause("batchvendor", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")
    else:
        vendor.stop = ProviderError("HTTP 429", retry_after=300)
    result = runner.invoke(args=["checks", "run"])
    assert result.exit_code == 1, result.output
    assert "checked=0" in result.output and "deferred=4" in result.output
    assert "4 checks were deferred" in result.output
    assert all(row(subscription_id).check_count == 0 for subscription_id in ids)


def _three_due_with_a_budget_failing_after_one_call(tenant, vendor, monkeypatch) -> list:
    """Three due subscriptions of a metered vendor whose shared budget grants one call, then fails as a paused Redis
    does (StorageError)."""
    vendor.rate_limit, vendor.batch_size = "100/minute", 1
    ids = [subscribe(tenant, f"p{number}") for number in range(3)]
    make_due(ids)
    taken = []

    def take_call(*_args, **_kwargs):
        taken.append(1)
        if len(taken) > 1:
            raise StorageError(TimeoutError("Timeout reading from socket"))
        return True
    monkeypatch.setattr(provider_limits, "take_call", take_call)
    return ids


def test_a_budget_that_fails_mid_batch_defers_the_rest_and_records_the_calls_made(alice, vendor, monkeypatch):
    """The shared budget's Redis paused (or the database gone) as a call was taken: the error left the batch, the
    calls already made were thrown away and the whole batch stayed claimed for the lease (scale-out walk: 74 checks
    held 2 minutes by a `CLIENT PAUSE` of 5 s). The calls made are recorded, the rest released untouched, and then
    the error fails the round as before (no heartbeat while the budget cannot be used)."""
    from app import metrics
    ids = _three_due_with_a_budget_failing_after_one_call(alice, vendor, monkeypatch)
    counted = metrics.CHECKS.labels("ok")._value.get()
    with pytest.raises(StorageError):
        worker.run_due_batch()
    assert len(vendor.calls) == 1 and metrics.CHECKS.labels("ok")._value.get() - counted == 1  # /metrics too
    assert all(row(subscription_id).claim_token is None for subscription_id in ids)
    assert sorted(row(subscription_id).check_count for subscription_id in ids) == [0, 0, 1]


def _refused_by_the_database(monkeypatch, function: str, statement: str) -> None:
    """provider_limits.`function` fails as a statement waiting on a lock past the lock timeout does."""
    busy = OperationalError(statement, {}, Exception("canceling statement due to lock timeout"))

    def refused(*_args):
        raise busy
    monkeypatch.setattr(provider_limits, function, refused)


@pytest.mark.parametrize("subscriptions", [3, 1])
def test_a_slot_that_cannot_be_given_back_loses_no_call_made(alice, vendor, monkeypatch, subscriptions):
    """The database refused to give a returned call's slot back (a lock held on provider_slots past the lock
    timeout): the call's answers were dropped with it, as the next call was taken (3) or as the calls out were
    collected after the last (1), their checks left claimed until the lease and the vendor's call uncounted. They
    are recorded, the rest released, and the error fails the round; the slot waits for its lease."""
    from app.services import checks
    vendor.batch_size = 1
    ids = [subscribe(alice, f"p{number}") for number in range(subscriptions)]
    make_due(ids)
    _refused_by_the_database(monkeypatch, "give_back_slot", "UPDATE provider_slots")
    token = checks.new_claim_token()
    with pytest.raises(OperationalError):
        checks.run_claimed(checks.claim(token, 10), token)
    assert len(vendor.calls) == 1
    assert all(row(subscription_id).claim_token is None for subscription_id in ids)
    assert sorted(row(subscription_id).check_count for subscription_id in ids) == [0] * (subscriptions - 1) + [1]


def test_a_pause_that_cannot_be_written_loses_no_call_made(alice, vendor, monkeypatch):
    """The vendor said 429 and the database refused the pause (a lock held past the lock timeout): the error left
    fetch_all raw, the batch's outcomes with it, its checks claimed until the lease. They are released, keeping their
    place, and the error fails the round."""
    from app.services import checks
    ids = [subscribe(alice, f"p{number}") for number in range(2)]
    make_due(ids)
    before = {subscription_id: state_of(subscription_id) for subscription_id in ids}
    vendor.stop = ProviderError("HTTP 429", retry_after=120)
    _refused_by_the_database(monkeypatch, "pause", "UPDATE provider_states")
    token = checks.new_claim_token()
    with pytest.raises(OperationalError):
        checks.run_claimed(checks.claim(token, 10), token)
    assert len(vendor.calls) == 1
    assert {subscription_id: state_of(subscription_id) for subscription_id in ids} == before


@pytest.mark.parametrize("how", ["--due", "--all"])
@pytest.mark.parametrize("batch_size, deferred", [(10, 2), (1, 1)], ids=["one-batch", "in-the-second-batch"])
def test_checks_run_says_in_a_line_what_it_made_when_taking_a_call_fails(app, alice, vendor, runner, monkeypatch, how,
                                                                         batch_size, deferred):
    """The budget's Redis failing as a call is taken fails the round once the calls made are recorded (the scheduler
    must not write its heartbeat): `checks run` ended in the storage's traceback, the checks it had made and recorded
    (in that batch or an earlier one) unsaid. It prints its line and exits 1 saying what failed."""
    app.config["CHECK_BATCH_SIZE"] = batch_size
    ids = _three_due_with_a_budget_failing_after_one_call(alice, vendor, monkeypatch)
    result = runner.invoke(args=["checks", "run", how])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert f"checked=1 changes=0 unavailable=0 failed=0 skipped=0 deferred={deferred}" in result.output, result.output
    assert "Timeout reading from socket" in result.output and "the checks made were recorded" in result.output
    assert sorted(row(subscription_id).check_count for subscription_id in ids) == [0, 0, 1]
    assert all(row(subscription_id).claim_token is None for subscription_id in ids)
