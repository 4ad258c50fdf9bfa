"""Delivery from the outbox: success, the retry schedule (time travel), 410, redirects, throttling,
Retry-After, filters, inactive configurations, auto-disable, the delivery log, redelivery, recovery,
the wake-up, and tenant isolation."""
import contextlib
import http.client
import os
import signal
import socket
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import timedelta, timezone
from types import SimpleNamespace

import pytest
import requests
import urllib3
from sqlalchemy import delete, func, select, update

from app.common import always, isoformat, utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import DeliveryAttempt, Event, OutboxDelivery, WebhookConfig
from app.services import health, outbox, webhooks
from app.services.transport import Outcome, Outgoing, Transport, sign
from app.worker import deliveries
from app.worker.deliveries import deliver_due
from scripts.tls_receiver import StaticResolver
from tests.conftest import make_tenant
from tests.webhook_helpers import (LOCAL_RECEIVER_CONFIG, Clock, Dripper, Receiver, Reply,
                                   assert_cut_off_at_the_timeout, configure, drops_every_second_request_of_a_connection,
                                   record_events)

SCHEDULE = [5, 300, 1800, 7200, 18000, 36000, 36000]


@pytest.fixture
def app_config():
    return {**LOCAL_RECEIVER_CONFIG, "WEBHOOK_RETRY_SCHEDULE": SCHEDULE, "WEBHOOK_RETRY_JITTER_FRACTION": 0.0}


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(outbox, "utcnow", clock)
    return clock


def attempts_of(event_id):
    db.session.rollback()
    return db.session.scalars(select(DeliveryAttempt).where(DeliveryAttempt.event_id == event_id)
                              .order_by(DeliveryAttempt.attempt)).all()


def event_row(event_id):
    db.session.rollback()
    return db.session.get(Event, event_id)


def config_row(account_id):
    db.session.rollback()
    return db.session.scalar(select(WebhookConfig).where(WebhookConfig.account_id == account_id))


def delay_after(attempt):
    """The wait the schedule gave after the try ended (to a tenth of a second)."""
    ended = attempt.attempted_at + timedelta(milliseconds=attempt.duration_ms)
    return round((attempt.next_attempt_at - ended).total_seconds(), 1)


def test_a_due_event_is_delivered_once_and_logged(alice):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        assert deliver_due() == 1
        assert deliver_due() == 0
    assert receiver.event_ids == [event_id]
    assert event_row(event_id).delivery_status == "succeeded"
    assert db.session.scalar(select(OutboxDelivery.id)) is None  # nothing is owed any more
    log = alice.get("/webhooks/deliveries").json
    assert log["pagination"] == {"total": 1, "limit": 20, "offset": 0, "has_more": False}
    [item] = log["data"]
    assert item["id"].startswith("dlv_")
    assert {key: item[key] for key in ("event_id", "event_type", "attempt", "status", "response_status",
                                       "error", "next_attempt_at")} == {
        "event_id": event_id, "event_type": "contact.position_changed", "attempt": 1, "status": "succeeded",
        "response_status": 200, "error": None, "next_attempt_at": None}
    assert item["duration_ms"] >= 0 and item["attempted_at"].endswith("Z")
    assert alice.get(f"/events/{event_id}").json["attempts"][0]["id"] == item["id"]


def test_every_attempt_keeps_the_headers_it_was_sent_with_and_never_the_secret(alice):
    with Receiver(Reply(status=500)) as receiver:
        secret = configure(alice, receiver.url)["secret"]
        [event_id] = record_events(alice.account_id)
        deliver_due()
        receiver.reply = Reply(status=200)
        alice.post(f"/events/{event_id}/redeliver")
        deliver_due()
    attempts = attempts_of(event_id)
    assert [attempt.status for attempt in attempts] == ["failed", "succeeded"]
    for attempt, request in zip(attempts, receiver.requests, strict=True):
        kept = attempt.request_headers
        assert kept == {name: request.headers[name] for name in kept}
        assert kept["X-Webhook-Attempt"] == str(attempt.attempt) and kept["X-Webhook-Id"] == event_id
        assert kept["X-Webhook-Signature"] == sign(secret, int(kept["X-Webhook-Timestamp"]), request.body)
        assert secret not in str(kept)
        assert set(attempt.kept_headers) == {"User-Agent", "X-Webhook-Timestamp", "X-Webhook-Signature"}
    shown = alice.get(f"/events/{event_id}").json["attempts"]
    assert [attempt["request_headers"] for attempt in shown] == [attempt.request_headers for attempt in attempts]
    assert alice.get("/webhooks/deliveries").json["data"][0]["request_headers"] == attempts[1].request_headers


def test_an_attempt_that_kept_every_header_reads_the_same(alice):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    sent = attempt.request_headers
    db.session.execute(DeliveryAttempt.__table__.update().values(request_headers=sent))  # as older rows hold them
    db.session.commit()
    db.session.expunge_all()
    [older] = attempts_of(event_id)
    assert older.kept_headers == sent and older.request_headers == sent
    assert list(older.request_headers.items()) == list(sent.items())


def test_a_receiver_down_for_the_whole_schedule_ends_failed_then_redelivery_succeeds(alice, clock):
    with Receiver(Reply(status=503)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        for _ in range(20):  # bounded: the schedule has 8 tries
            deliver_due()
            row = db.session.scalar(select(OutboxDelivery).where(OutboxDelivery.event_id == event_id))
            if row is None:  # the delivery ended
                break
            clock.travel_to(row.next_attempt_at)
        attempts = attempts_of(event_id)
        assert [attempt.attempt for attempt in attempts] == list(range(1, len(SCHEDULE) + 2))
        assert all(attempt.status == "failed" and attempt.response_status == 503 for attempt in attempts)
        assert [delay_after(attempt) for attempt in attempts[:-1]] == SCHEDULE
        assert attempts[-1].next_attempt_at is None
        assert event_row(event_id).delivery_status == "failed"
        assert event_row(event_id).attempt_count == 8
        assert len(receiver.requests) == 8
        assert [request.headers["X-Webhook-Attempt"] for request in receiver.requests] == [str(n) for n in range(1, 9)]
        assert config_row(alice.account_id).is_active is True  # 28 hours of failure is not 5 days

        receiver.reply = Reply(status=200)
        response = alice.post(f"/events/{event_id}/redeliver")
        assert response.status_code == 202
        assert response.json == {"event_id": event_id, "delivery_status": "pending"}
        assert alice.get(f"/events/{event_id}").json["delivery_status"] == "pending"
        assert deliver_due() == 1
    assert receiver.event_ids == [event_id] * 9
    assert receiver.requests[-1].headers["X-Webhook-Attempt"] == "9"
    assert event_row(event_id).delivery_status == "succeeded"
    assert [attempt["attempt"] for attempt in alice.get(f"/events/{event_id}").json["attempts"]] == list(range(1, 10))


def test_a_delivery_whose_schedule_is_spent_leaves_the_outbox_and_stays_recoverable(alice, app):
    app.config["WEBHOOK_RETRY_SCHEDULE"] = []  # the first failure ends the delivery
    with Receiver(Reply(status=503)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        assert deliver_due() == 1
        db.session.rollback()
        assert db.session.scalar(select(OutboxDelivery.id)) is None
        shown = alice.get(f"/events/{event_id}").json
        assert shown["delivery_status"] == "failed" and [a["status"] for a in shown["attempts"]] == ["failed"]
        assert health.outbox_backlog()["pending"] == 0

        receiver.reply = Reply(status=200)
        since = isoformat(utcnow() - timedelta(hours=1))
        assert alice.post("/webhooks/recover", json={"since": since}).json == {"queued": 1}
        assert deliver_due() == 1
    assert receiver.event_ids == [event_id, event_id]
    assert receiver.requests[-1].headers["X-Webhook-Attempt"] == "2"
    assert event_row(event_id).delivery_status == "succeeded" and event_row(event_id).attempt_count == 2
    assert db.session.scalar(select(OutboxDelivery.id)) is None


def test_jitter_spreads_retries_within_twenty_percent(alice, app, clock):
    app.config["WEBHOOK_RETRY_JITTER_FRACTION"] = 0.2
    with Receiver(Reply(status=500)) as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, 30)
        deliver_due()
    delays = [delay_after(attempt) for attempt in db.session.scalars(select(DeliveryAttempt))]
    assert len(delays) == 30
    assert all(4.0 <= delay <= 6.0 for delay in delays)
    assert len(set(delays)) > 1


def test_410_deactivates_the_configuration_at_once(alice, clock):
    with Receiver(Reply(status=410)) as receiver:
        configure(alice, receiver.url)
        [gone] = record_events(alice.account_id)
        assert deliver_due() == 1
        [parked] = record_events(alice.account_id)
        clock.advance(3600)
        assert deliver_due() == 0
    assert config_row(alice.account_id).is_active is False
    configuration = alice.get("/webhooks/configure").json
    assert configuration["is_active"] is False and configuration["updated_at"] > configuration["created_at"]
    [attempt] = attempts_of(gone)
    assert attempt.status == "failed" and attempt.response_status == 410 and attempt.next_attempt_at is None
    assert event_row(gone).delivery_status == "failed"
    assert event_row(parked).delivery_status == "skipped"
    assert receiver.event_ids == [gone]


@pytest.mark.parametrize("status", [410, 500])
def test_a_redelivered_test_event_is_a_probe_like_the_test_send(alice, clock, status):
    """It was sent on the retry schedule, and a 410 answering it deactivated the configuration."""
    with Receiver(Reply(status=status)) as receiver:
        configure(alice, receiver.url)
        test_event = alice.post("/webhooks/test").json["event_id"]
        assert alice.post(f"/events/{test_event}/redeliver").status_code == 202
        assert deliver_due() == 1
        clock.advance(86400)
        assert deliver_due() == 0
    assert [attempt.attempt for attempt in attempts_of(test_event)] == [1, 2]
    assert attempts_of(test_event)[-1].next_attempt_at is None
    assert event_row(test_event).delivery_status == "failed"
    config = config_row(alice.account_id)
    assert config.is_active is True and config.failing_since is None
    assert receiver.event_ids == [test_event, test_event]


def test_a_second_test_send_while_one_waits_for_the_endpoint_is_a_429(app, alice, bob):
    """A test send holds a server thread until the endpoint answers: an account's test sends in parallel could take
    every thread (walk: six at once to a slow endpoint held /healthz 8 s). One at a time per account; another
    account's goes on."""
    with Receiver(Reply(delay=2.5)) as receiver:
        configure(alice, receiver.url)
        configure(bob, receiver.url)
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(make_tenant_client_post, app, alice.key, "/api/v1/webhooks/test")
            deadline = time.monotonic() + 10
            while not receiver.requests and time.monotonic() < deadline:  # the first is on the wire
                time.sleep(0.01)
            time.sleep(1.1)
            second = alice.post("/webhooks/test")
            others = bob.post("/webhooks/test")
            assert first.result().status_code == 200 and first.result().json["delivered"] is True
        assert second.status_code == 429 and second.json["error"] == "RATE_LIMIT_EXCEEDED"
        # Retry-After: when the first must have ended (the timeout after it started), not a whole timeout from now
        assert second.json["details"]["limit"] == 1 and 1 <= int(second.headers["Retry-After"]) <= 10  # 11 from now
        assert others.status_code == 200 and others.json["delivered"] is True
        assert alice.post("/webhooks/test").json["delivered"] is True  # once the first is back
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(Event).where(Event.type == "test")) == 3


def test_a_test_send_past_the_most_a_process_sends_at_once_is_a_429_whatever_the_account(app, alice, bob):
    """The limit of one per account left every thread to a few accounts' test sends: 9 accounts' at once to endpoints
    that never answered held another account's request 9 s (walk)."""
    carol = make_tenant(app, "carol")
    with Receiver(Reply(delay=2.5)) as receiver:
        for tenant in (alice, bob, carol):
            configure(tenant, receiver.url)
        with ThreadPoolExecutor(2) as pool:
            sending = [pool.submit(make_tenant_client_post, app, tenant.key, "/api/v1/webhooks/test")
                       for tenant in (alice, bob)]
            deadline = time.monotonic() + 10
            while len(receiver.requests) < 2 and time.monotonic() < deadline:  # both on the wire
                time.sleep(0.01)
            third = carol.post("/webhooks/test")
            assert [future.result().json["delivered"] for future in sending] == [True, True]
        assert third.status_code == 429 and third.json["error"] == "RATE_LIMIT_EXCEEDED"
        assert third.json["details"]["limit"] == outbox.TEST_SENDS_AT_ONCE == 2
        assert "already waiting on 2 endpoints' answers" in third.json["message"]
        assert 1 <= int(third.headers["Retry-After"]) <= 11
        assert carol.post("/webhooks/test").json["delivered"] is True  # once they are back
    assert len(receiver.requests) == 3


def test_a_test_send_left_unanswered_pauses_the_accounts_next_for_a_minute(app, alice, bob):
    """Two accounts looping test sends to endpoints that never answer held both places of the process, and every
    other account's test send was a 429 for as long as they kept at it (review)."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 0.5
    with Receiver(Reply(delay=1.5)) as silent, Receiver() as answering:
        configure(alice, silent.url)
        configure(bob, answering.url)
        first = alice.post("/webhooks/test").json
        assert first["delivered"] is False and first["error"].startswith("timeout:")
        paused = alice.post("/webhooks/test")
        assert paused.status_code == 429 and paused.json["error"] == "RATE_LIMIT_EXCEEDED"
        assert "got no answer within 0.5 s: the next may go 60 s after it" in paused.json["message"]
        assert 55 <= int(paused.headers["Retry-After"]) <= 60
        assert bob.post("/webhooks/test").json["delivered"] is True  # another account's go on
        outbox._tests_paused[alice.account_id] -= 60  # a minute on
        configure(alice, answering.url)
        assert alice.post("/webhooks/test").json["delivered"] is True
        assert alice.account_id not in outbox._tests_paused  # answered: no pause left behind


def make_tenant_client_post(app, key, path):
    """A request from another thread: a client of its own (its own application context and session)."""
    return app.test_client().post(path, headers={"X-API-Key": key})


def failing_since_a_first_failure(alice, receiver):
    """Configure the receiver (answering 500) and fail a first delivery: the endpoint is failing since then."""
    configure(alice, receiver.url)
    record_events(alice.account_id)
    deliver_due()
    failing_since = config_row(alice.account_id).failing_since
    assert failing_since is not None
    return failing_since


def test_a_redelivered_test_event_does_not_clear_a_failing_endpoints_record(alice, clock):
    with Receiver(Reply(status=500)) as receiver:
        failing_since = failing_since_a_first_failure(alice, receiver)
        receiver.reply = Reply(status=200)
        test_event = alice.post("/webhooks/test").json["event_id"]
        alice.post(f"/events/{test_event}/redeliver")
        assert deliver_due() == 1
    assert event_row(test_event).delivery_status == "succeeded"
    assert config_row(alice.account_id).failing_since == failing_since


def test_redirects_are_not_followed_and_count_as_failures(alice):
    with Receiver(lambda received: Reply(status=302, headers={"Location": "/elsewhere"})) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    assert [request.path for request in receiver.requests] == ["/hook"]
    [attempt] = attempts_of(event_id)
    assert attempt.status == "failed" and attempt.response_status == 302
    assert "redirect not followed" in attempt.error
    assert delay_after(attempt) == SCHEDULE[0]
    assert event_row(event_id).delivery_status == "pending"


def test_a_huge_answer_is_read_only_up_to_the_cap(alice, app):
    app.config["WEBHOOK_MAX_RESPONSE_BYTES"] = 1024
    with Receiver(Reply(body=b"x" * 100_000, stall_after=4096)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.status == "succeeded" and attempt.duration_ms < 1500  # never waited for the stalled rest


def test_a_timeout_waits_at_least_a_minute_and_keeps_the_headers_it_sent(alice, app):
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 0.3
    with Receiver(Reply(delay=1.0)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.status == "failed" and attempt.response_status is None
    assert attempt.error.startswith("timeout")
    assert attempt.request_headers["X-Webhook-Signature"] == receiver.requests[0].headers["X-Webhook-Signature"]
    assert delay_after(attempt) == 60


@pytest.fixture
def names(monkeypatch):
    fake = StaticResolver(socket.getaddrinfo, {"hooks.internal": "127.0.0.1", "gone.internal": None})
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


def test_an_endpoint_named_by_a_private_name_is_looked_up_within_the_deadline(alice, app, names):
    """With private addresses allowed nothing pins the address before connecting; the connection looks the name up
    within the try's deadline itself (a resolver that did not answer held the sender past it)."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 1.5
    names.table["stuck.internal"] = "127.0.0.1"
    with Receiver() as receiver:
        configure(alice, receiver.url.replace("127.0.0.1", "hooks.internal"))
        names.slow["hooks.internal"] = 0.3
        [slow] = record_events(alice.account_id)
        deliver_due()
        configure(alice, receiver.url.replace("127.0.0.1", "stuck.internal"))
        names.slow["stuck.internal"] = 5.0
        [stuck] = record_events(alice.account_id)
        deliver_due()
    assert [attempt.status for attempt in attempts_of(slow)] == ["succeeded"]
    assert receiver.requests[0].headers["Host"] == f"hooks.internal:{receiver.server.server_address[1]}"
    [attempt] = attempts_of(stuck)
    assert attempt.status == "failed" and attempt.error == "timeout: no answer within 1.5 s"
    assert attempt.duration_ms < 4500 and len(receiver.requests) == 1


@contextlib.contextmanager
def unanswered_port():
    """A port whose connects hang (its listen queue is full: the SYNs are dropped), as a host that drops them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(listener.getsockname())
            fillers.append(filler)
        yield listener.getsockname()[1]
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_the_connect_after_a_slow_lookup_gets_only_the_time_left(alice, app, names):
    """The connect had its full timeout after the lookup: a try took the lookup's time and a whole timeout more
    (review: 1.9 s at a 1 s timeout)."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 1.5
    names.table["blackhole.internal"] = "127.0.0.1"
    with unanswered_port() as port:
        configure(alice, f"http://blackhole.internal:{port}/hook")
        names.slow["blackhole.internal"] = 1.2
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.status == "failed" and attempt.error == "timeout: no answer within 1.5 s"
    assert attempt.duration_ms < 2400  # the lookup's 1.2 s and a whole 1.5 s more before


def test_every_address_of_a_name_is_tried_in_turn(alice, app, names):
    """Only the first was, once the lookup was bounded: a name with one dead address failed every new connection
    (review)."""
    with Receiver() as receiver:
        names.table["two.internal"] = ["127.0.0.2", "127.0.0.1"]  # nothing listens on the first
        configure(alice, receiver.url.replace("127.0.0.1", "two.internal"))
        [event_id] = record_events(alice.account_id)
        deliver_due()
    assert [attempt.status for attempt in attempts_of(event_id)] == ["succeeded"]


def test_an_endpoint_name_with_a_label_too_long_is_a_failed_connection(alice, app):
    configure(alice, f"http://{'a' * 64}.example/hook")
    [event_id] = record_events(alice.account_id)
    deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.error == (f"connection failed: the name cannot be looked up (label empty or too long) "
                             f"({'a' * 64}.example:80)"), attempt.error


def test_an_endpoint_name_that_does_not_resolve_is_a_failed_connection(alice, names):
    configure(alice, "http://gone.internal:9/hook")
    [event_id] = record_events(alice.account_id)
    deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.status == "failed" and attempt.response_status is None
    assert attempt.error.startswith("connection failed: the name does not resolve (") and attempt.error.endswith(
        ") (gone.internal:9)"), attempt.error
    assert delay_after(attempt) == SCHEDULE[0]


def test_a_refused_connection_is_said_in_words_with_the_address_tried(alice):
    """requests' words named our classes and a retry never made: `WatchedHTTPConnectionPool(host=…): Max retries
    exceeded with url: … (Caused by NewConnectionError(…))` (webhook walk)."""
    with Receiver() as receiver:
        url = receiver.url
    configure(alice, url + "?token=secret")
    [event_id] = record_events(alice.account_id)
    deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.error == f"connection failed: connection refused ({url.split('/')[2]})", attempt.error


def the_attempt_of_one_delivery(tenant, reply: Reply) -> DeliveryAttempt:
    """The attempt recorded for one event sent to an endpoint answering `reply`."""
    with Receiver(reply) as receiver:
        configure(tenant, receiver.url)
        [event_id] = record_events(tenant.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    return attempt


def test_a_body_trickling_past_the_timeout_is_a_timeout_that_keeps_the_status(alice, app):
    """The status the endpoint sent was lost from the record, which said "no answer" (fault walk). The timeout leaves
    time for the status on a loaded machine (0.5 s did not, once in CI)."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 2.0
    attempt = the_attempt_of_one_delivery(alice, Reply(body=b"x" * 1000, stall_after=10))
    assert (attempt.status, attempt.response_status) == ("failed", 200)
    assert attempt.error == "timeout: the answer took over 2 s"
    assert delay_after(attempt) == 60


def test_an_answer_broken_off_in_its_body_is_a_failed_try_that_keeps_the_status(alice):
    attempt = the_attempt_of_one_delivery(alice, Reply(body=b"x" * 1000, cut_after=10))
    assert (attempt.status, attempt.response_status) == ("failed", 200)
    assert attempt.error.startswith("connection failed while reading the answer:"), attempt.error
    assert delay_after(attempt) == SCHEDULE[0]


def test_an_endpoint_that_drips_its_headers_is_cut_off_at_the_timeout(alice, app):
    """The timeout bounded each read, not the try: an endpoint sending a byte every few seconds held a sender for as
    long as it liked (a minute in the fault walk; eight such endpoints stopped every account's deliveries)."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 1.0
    with Dripper() as dripper:
        configure(alice, dripper.url)
        assert_cut_off_at_the_timeout(alice.account_id)


def test_a_kept_connection_the_endpoint_closed_as_the_try_went_out_is_tried_again_on_a_new_one(alice, app):
    """The fault walk: a receiver closing idle keep-alive connections failed some tries with "Remote end closed
    connection without response"; a test event was not retried at all."""
    app.config["WEBHOOK_WORKERS"] = 1
    with Receiver(drops_every_second_request_of_a_connection) as receiver:
        configure(alice, receiver.url)
        [first] = record_events(alice.account_id)
        assert deliver_due() == 1  # leaves a kept connection
        [second] = record_events(alice.account_id)
        assert deliver_due() == 1
    assert receiver.event_ids == [first, second, second]
    assert [request.on_connection for request in receiver.requests] == [1, 2, 1]
    [attempt] = attempts_of(second)
    assert attempt.status == "succeeded" and attempt.attempt == 1 and attempt.error is None
    assert event_row(second).delivery_status == "succeeded"


def test_an_endpoint_that_closes_new_connections_too_gets_one_more_request_not_more(alice, app):
    """The failed try's error was Python's repr without the address (`connection failed: ('Connection aborted.',
    RemoteDisconnected('Remote end closed connection without response'))`: CRM walk); it is said in words."""
    app.config["WEBHOOK_WORKERS"] = 1
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [opening] = record_events(alice.account_id)
        assert deliver_due() == 1  # leaves a kept connection
        receiver.reply = Reply(drop=True)
        [event_id] = record_events(alice.account_id)
        assert deliver_due() == 1
        [fresh] = record_events(alice.account_id)
        assert deliver_due() == 1  # the kept connection went with the last try: only a new one here
    assert receiver.event_ids == [opening, event_id, event_id, fresh]
    for failed in (event_id, fresh):
        [attempt] = attempts_of(failed)
        assert attempt.status == "failed"
        assert attempt.error == ("connection failed: the endpoint closed the connection without an answer "
                                 f"({receiver.url.split('/')[2]})"), attempt.error
        assert delay_after(attempt) == SCHEDULE[0]


def test_an_interim_answer_is_read_past_to_the_final_one_not_left_for_the_next_try(alice, app):
    """http.client skips only 100 Continue: a 103 Early Hints was judged as the answer (a failed try, every try of an
    endpoint behind an early-hints proxy), and the real answer, left on the kept connection, was read as the next
    try's: that try was recorded a success though the endpoint answered it 500 (fault walk), and never retried."""
    app.config["WEBHOOK_WORKERS"] = 1

    def hints_then_ok_first_then_500(received):
        return Reply(early_hints=True, delay=0.3) if received.on_connection == 1 else Reply(status=500)
    with Receiver(hints_then_ok_first_then_500) as receiver:
        configure(alice, receiver.url)
        [hinted] = record_events(alice.account_id)
        assert deliver_due() == 1
        [refused] = record_events(alice.account_id)
        assert deliver_due() == 1
    assert receiver.event_ids == [hinted, refused]
    [attempt] = attempts_of(hinted)
    assert (attempt.status, attempt.response_status, attempt.error) == ("succeeded", 200, None)
    [attempt] = attempts_of(refused)
    assert (attempt.status, attempt.response_status, attempt.error) == ("failed", 500, "HTTP 500")
    assert event_row(refused).delivery_status == "pending"


def test_a_send_again_that_fails_before_taking_a_connection_is_not_taken_for_a_kept_one():
    """The mark of the kept connection that failed stayed on the try: a send again that failed before a connection was
    taken (a reset while connecting) read it, and the try went on sending until its deadline (review)."""
    transport = Transport(workers=1, timeout=5, max_response_bytes=1024, allow_http=True, allow_private=True)
    sends = []

    class Session:
        def post(self, *_args, **_kwargs):
            sends.append(deadline.kept_connection)
            if len(sends) == 1:
                deadline.kept_connection = True  # as the pool marks a kept connection it hands out
                cause = http.client.RemoteDisconnected("Remote end closed connection without response")
            else:
                cause = ConnectionResetError(104, "Connection reset by peer")  # connecting: no connection taken
            raise requests.ConnectionError(urllib3.exceptions.ProtocolError("Connection aborted.", cause))

    deadline = transport._deadlines.start(5)
    try:
        with pytest.raises(requests.ConnectionError):
            transport._post(Session(), Outgoing("evt_x", "http://endpoint.test/", b"{}", 1, "secret"), {}, deadline)
    finally:
        transport._deadlines.end(deadline)
    assert sends == [False, False]


def test_a_final_101_closes_the_connection_the_next_try_takes_a_new_one(alice, app):
    """A 101 left the connection in the pool, though the endpoint speaks another protocol on it now: the next try
    was written on it (review: a timeout)."""
    app.config["WEBHOOK_WORKERS"] = 1
    with Receiver() as receiver:
        receiver.reply = lambda received: Reply(status=101, body=b"") if received is receiver.requests[0] else Reply()
        configure(alice, receiver.url)
        [switched] = record_events(alice.account_id)
        assert deliver_due() == 1
        [after] = record_events(alice.account_id)
        assert deliver_due() == 1
    assert [request.on_connection for request in receiver.requests] == [1, 1]
    assert [(attempt.status, attempt.response_status) for attempt in attempts_of(switched)] == [("failed", 101)]
    assert [(attempt.status, attempt.response_status) for attempt in attempts_of(after)] == [("succeeded", 200)]


def test_a_429_waits_at_least_a_minute(alice):
    with Receiver(Reply(status=429)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.response_status == 429
    assert delay_after(attempt) == 60


@pytest.mark.parametrize("status, retry_after, expected", [
    (429, "90", 90),  # honoured: between the one-minute floor and twice it
    (429, "100000", 120),  # clamped to twice the delay we would have used (60 s after a 429)
    (503, "100000", 10),  # twice the 5 s first step
    (503, "1", 5),  # never sooner than the schedule
    (503, "soon", 5),  # unreadable: ignored
    (503, "\u00b2", 5),  # a superscript two is a digit to str.isdigit, not a number: ignored
    (503, "1e3", 5),
    (429, "9" * 400, 120),  # past what a float holds: clamped like any long wait
])
def test_retry_after_is_honoured_and_clamped(alice, status, retry_after, expected):
    with Receiver(Reply(status=status, headers={"Retry-After": retry_after})) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    assert attempt.response_status == status
    assert delay_after(attempt) == expected


def test_retry_after_as_an_http_date_is_understood(alice):
    moment = utcnow() + timedelta(seconds=8)
    http_date = moment.strftime("%a, %d %b %Y %H:%M:%S GMT")
    with Receiver(Reply(status=503, headers={"Retry-After": http_date})) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [attempt] = attempts_of(event_id)
    assert 5 < delay_after(attempt) <= 10


@pytest.mark.parametrize("events_filter, delivered", [
    (["*"], {"contact.position_changed", "company.employee_count_changed", "entity.unavailable"}),
    (["contact.*"], {"contact.position_changed"}),
    (["company.employee_count_changed"], {"company.employee_count_changed"}),
    (["contact.position_changed", "entity.*"], {"contact.position_changed", "entity.unavailable"}),
])
def test_the_events_filter_decides_what_is_sent(alice, events_filter, delivered):
    with Receiver() as receiver:
        configure(alice, receiver.url, events_filter)
        recorded = {event_type: record_events(alice.account_id, event_type=event_type)[0]
                    for event_type in ("contact.position_changed", "company.employee_count_changed",
                                       "entity.unavailable")}
        deliver_due()
    assert {request.event["type"] for request in receiver.requests} == delivered
    for event_type, event_id in recorded.items():
        assert event_row(event_id).delivery_status == ("succeeded" if event_type in delivered else "skipped")


def test_an_inactive_configuration_records_events_but_sends_nothing_until_reactivated(alice):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [queued_before] = record_events(alice.account_id)
        assert alice.put("/webhooks/configure", json={"is_active": False}).status_code == 200
        [recorded_while_inactive] = record_events(alice.account_id)
        assert deliver_due() == 0
        assert receiver.requests == []
        assert event_row(recorded_while_inactive).delivery_status == "skipped"
        assert event_row(queued_before).delivery_status == "pending"

        assert alice.put("/webhooks/configure", json={"is_active": True}).status_code == 200
        assert deliver_due() == 1
    assert receiver.event_ids == [queued_before]


def test_five_days_of_nothing_but_failures_disables_the_endpoint(alice, clock):
    with Receiver(Reply(status=500)) as receiver:
        failing_since = failing_since_a_first_failure(alice, receiver)
        clock.advance(4 * 86400)
        record_events(alice.account_id)
        deliver_due()
        assert config_row(alice.account_id).is_active is True
        assert config_row(alice.account_id).failing_since == failing_since
        clock.advance(86400)
        record_events(alice.account_id)
        deliver_due()
    assert config_row(alice.account_id).is_active is False


def test_a_success_clears_the_failure_record(alice):
    replies = iter([Reply(status=500), Reply(status=200)])
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id)
        deliver_due()
        assert config_row(alice.account_id).failing_since is not None
        record_events(alice.account_id)
        deliver_due()
    assert config_row(alice.account_id).failing_since is None


def test_a_new_endpoint_url_starts_a_clean_failure_record(alice):
    configure(alice, "https://93.184.216.34/")
    db.session.execute(WebhookConfig.__table__.update().values(failing_since=utcnow() - timedelta(days=4)))
    db.session.commit()
    assert alice.put("/webhooks/configure", json={"events": ["*"]}).json["failing_since"] is not None  # same URL
    response = alice.put("/webhooks/configure", json={"endpoint_url": "https://93.184.216.35/new"})
    assert response.json["failing_since"] is None and response.json["is_active"] is True


@pytest.mark.parametrize("moved_by", ["PUT", "POST"])
@pytest.mark.parametrize("answer", [Outcome(False, 410, 5, "HTTP 410", gone=True), Outcome(False, 500, 5, "HTTP 500")])
def test_a_try_to_the_old_url_says_nothing_of_the_endpoint_the_configuration_was_moved_to(alice, moved_by, answer):
    """A try on the wire to the old endpoint when the configuration was pointed at another one came back and was
    judged as the new one's: the old endpoint's 410 (one being retired says so) deactivated the new configuration at
    once, and every event after it was skipped; a failure started the new one's failure record. The 410 also ended the
    delivery it answered, which the new endpoint then never got."""
    configure(alice, "https://93.184.216.34/old")
    [event_id] = record_events(alice.account_id)
    token = outbox.new_claim_token()
    [claimed] = outbox.claim_due(token, 10)  # sent to the old URL; on the wire while the configuration moves
    new_url = {"endpoint_url": "https://93.184.216.35/new"}
    moved = (alice.put("/webhooks/configure", json=new_url) if moved_by == "PUT"
             else alice.post("/webhooks/configure", json={**new_url, "events": ["*"]}))
    assert moved.status_code == 200
    outbox.record_results(token, [(claimed, answer)])
    config = config_row(alice.account_id)
    assert config.is_active is True and config.failing_since is None
    [attempt] = attempts_of(event_id)
    assert attempt.response_status == answer.status_code  # the try itself is logged as it was
    # and the delivery goes on, at the URL the configuration has now: the old endpoint's 410 ended it (`failed`)
    assert event_row(event_id).delivery_status == "pending" and attempt.next_attempt_at is not None


def test_reactivating_starts_a_clean_failure_record(alice):
    configure(alice, "https://93.184.216.34/")
    db.session.execute(WebhookConfig.__table__.update().values(is_active=False, failing_since=utcnow()))
    db.session.commit()
    response = alice.put("/webhooks/configure", json={"is_active": True})
    assert response.json["is_active"] is True and response.json["failing_since"] is None


def test_the_delivery_log_filters_and_paginates(alice):
    replies = iter([Reply(status=200), Reply(status=500), Reply(status=200)])
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        first, second, third = record_events(alice.account_id, 3)
        deliver_due()
    assert alice.get("/webhooks/deliveries?status=failed").json["pagination"]["total"] == 1
    assert alice.get("/webhooks/deliveries?status=succeeded").json["pagination"]["total"] == 2
    assert [item["event_id"] for item in alice.get(f"/webhooks/deliveries?event_id={second}").json["data"]] == [second]
    page = alice.get("/webhooks/deliveries?limit=2&offset=2").json
    assert page["pagination"] == {"total": 3, "limit": 2, "offset": 2, "has_more": False}
    assert len(page["data"]) == 1
    for query in ("status=pending", "limit=0", "limit=101", "offset=-1"):
        assert alice.get(f"/webhooks/deliveries?{query}").status_code == 400


def test_recover_queues_failed_and_unsent_events_of_the_window(alice, app):
    with Receiver() as receiver:
        [unsent] = record_events(alice.account_id)  # before any configuration: skipped
        configure(alice, receiver.url, ["contact.*"])
        [failed, succeeded] = record_events(alice.account_id, 2)
        [filtered] = record_events(alice.account_id, event_type="company.description_changed")
        db.session.execute(Event.__table__.update().where(Event.id == failed).values(delivery_status="failed"))
        db.session.execute(OutboxDelivery.__table__.delete().where(OutboxDelivery.event_id == failed))
        db.session.commit()
        deliver_due()
        test_event = alice.post("/webhooks/test").json["event_id"]
        receiver.requests.clear()

        since = isoformat(utcnow() - timedelta(hours=1))
        response = alice.post("/webhooks/recover", json={"since": since})
        assert response.status_code == 202
        assert response.json == {"queued": 2}
        deliver_due()
    assert sorted(receiver.event_ids) == sorted([unsent, failed])
    assert {event_row(event_id).delivery_status for event_id in (unsent, failed, succeeded)} == {"succeeded"}
    assert event_row(filtered).delivery_status == "skipped"
    assert event_row(test_event).type == "test"
    assert alice.post("/webhooks/recover", json={"since": since}).json == {"queued": 0}


def test_recover_ignores_events_older_than_fourteen_days_and_checks_its_window(alice):
    configure(alice, "https://93.184.216.34/")
    [old] = record_events(alice.account_id)
    db.session.execute(Event.__table__.update().where(Event.id == old).values(
        created_at=utcnow() - timedelta(days=15), delivery_status="failed"))
    db.session.execute(OutboxDelivery.__table__.delete())
    db.session.commit()
    assert alice.post("/webhooks/recover", json={"since": isoformat(utcnow() - timedelta(days=20))}).json == {
        "queued": 0}
    now = utcnow()
    for body in ({"since": isoformat(now), "until": isoformat(now - timedelta(hours=1))}, {},
                 {"since": "yesterday"}, {"since": isoformat(now), "limit": 3}):
        assert alice.post("/webhooks/recover", json=body).status_code == 400


def test_an_empty_recovery_window_names_the_bound_at_fault(alice):
    configure(alice, "https://93.184.216.34/")
    now = utcnow().replace(microsecond=0)
    tomorrow, in_two_days, yesterday, last_month = (isoformat(now + timedelta(days=days))
                                                    for days in (1, 2, -1, -30))
    unix_tomorrow = int(now.replace(tzinfo=timezone.utc).timestamp()) + 86400
    tomorrow_in_delhi = (now + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S+05:30")
    for body, field, value in [({"since": tomorrow}, "since", tomorrow),
                               ({"since": tomorrow, "until": in_two_days}, "since", tomorrow),
                               ({"since": yesterday, "until": yesterday}, "until", yesterday),
                               ({"since": last_month, "until": last_month}, "until", last_month),
                               # as sent, not as loaded (walk: 1795763244 came back "2026-11-27T07:07:24Z")
                               ({"since": unix_tomorrow}, "since", unix_tomorrow),
                               ({"since": tomorrow_in_delhi}, "since", tomorrow_in_delhi),
                               ({"since": yesterday, "until": unix_tomorrow - 3 * 86400}, "until",
                                unix_tomorrow - 3 * 86400)]:
        response = alice.post("/webhooks/recover", json=body)
        assert response.status_code == 400, body
        details = response.json["details"]
        assert (details["field"], details["value"]) == (field, value), body
        assert details["errors"][0]["field"] == field, body


def test_redelivery_and_recovery_need_an_active_configuration(alice):
    [event_id] = record_events(alice.account_id)
    assert alice.post(f"/events/{event_id}/redeliver").status_code == 404
    configure(alice, "https://93.184.216.34/")
    alice.put("/webhooks/configure", json={"is_active": False})
    response = alice.post(f"/events/{event_id}/redeliver")
    assert response.status_code == 409 and response.json["error"] == "INVALID_STATE"
    since = isoformat(utcnow() - timedelta(hours=1))
    assert alice.post("/webhooks/recover", json={"since": since}).status_code == 409


def test_tenants_cannot_see_or_redeliver_each_others_events(alice, bob):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        configure(bob, receiver.url)
        [alices] = record_events(alice.account_id)
        deliver_due()
        assert bob.post(f"/events/{alices}/redeliver").status_code == 404
        assert bob.get(f"/events/{alices}").status_code == 404
        assert bob.get("/webhooks/deliveries").json["data"] == []
        assert bob.get(f"/webhooks/deliveries?event_id={alices}").json["data"] == []
        assert bob.post("/webhooks/recover", json={"since": isoformat(utcnow() - timedelta(hours=1))}).json == {
            "queued": 0}
        assert deliver_due() == 0
    assert receiver.event_ids == [alices]


def test_deleting_the_configuration_drops_its_queued_deliveries(alice):
    with Receiver(Reply(status=500)) as receiver:
        configure(alice, receiver.url)
        [tried] = record_events(alice.account_id)
        deliver_due()
        [untried] = record_events(alice.account_id)
        alice.delete("/webhooks/configure")
    assert db.session.scalar(select(OutboxDelivery)) is None
    assert event_row(tried).delivery_status == "failed"
    assert event_row(untried).delivery_status == "skipped"


def test_queued_deliveries_wake_the_sender_loop(alice, app):
    configure(alice, "https://93.184.216.34/")
    deliveries.woken.clear()
    record_events(alice.account_id)
    assert deliveries.woken.is_set()


def test_the_cli_sends_what_is_due(alice, runner):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        ids = record_events(alice.account_id, 3)
        once = runner.invoke(args=["deliveries", "run", "--once"])
        assert once.exit_code == 0 and once.output.strip() == "delivered=3 retrying=0 failed=0 released=0"
        again = runner.invoke(args=["deliveries", "run"])
        assert again.exit_code == 0 and again.output.strip() == "delivered=0 retrying=0 failed=0 released=0"
    assert sorted(receiver.event_ids) == sorted(ids)


@pytest.mark.parametrize("once", [False, True])
def test_the_cli_says_what_became_of_its_tries_and_fails_when_none_was_delivered(alice, app, runner, monkeypatch,
                                                                                 once):
    """It printed `sent=N`, failed tries counted as sent, and exited 0 whatever happened (operator walk)."""
    monkeypatch.setitem(app.config, "WEBHOOK_RETRY_SCHEDULE", [600])  # the first run's retry is not due in the second
    run = ["deliveries", "run", *(["--once"] if once else [])]
    replies = iter([Reply(status=200), Reply(status=503), Reply(status=503), Reply(status=410)])  # 410: no retry
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, 2)
        some = runner.invoke(args=run)
        assert some.exit_code == 0 and some.output.strip() == "delivered=1 retrying=1 failed=0 released=0"
        record_events(alice.account_id, 2)
        none = runner.invoke(args=run)
    assert none.exit_code == 1 and none.output.splitlines() == [
        "delivered=0 retrying=1 failed=1 released=0",
        "Error: every try failed (2): 1 will be tried again when due, 1 have no further try (redeliver or recover "
        "them); the log says why for each."]


@pytest.mark.parametrize("once", [False, True])
def test_the_cli_stops_on_a_signal_and_releases_what_it_has_not_sent(alice, app, runner, monkeypatch, once):
    """SIGTERM killed `deliveries run` at once: its claimed batch waited out the lease (two minutes), unsent."""
    monkeypatch.setitem(app.config, "WEBHOOK_WORKERS", 1)

    def stop_on_the_first(received):
        if len(receiver.event_ids) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # as the operator's signal arrives while the first try is out
            time.sleep(0.2)
        return Reply(status=200)

    def ignored(*_):  # the test process's own (without the command's, SIGTERM ended the test run)
        pass
    previous = signal.signal(signal.SIGTERM, ignored)
    try:
        with Receiver(stop_on_the_first) as receiver:
            configure(alice, receiver.url)
            record_events(alice.account_id, 5)
            result = runner.invoke(args=["deliveries", "run", *(["--once"] if once else [])])
        assert signal.getsignal(signal.SIGTERM) is ignored  # put back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.exit_code == 1 and "stopped by SIGTERM" in result.output, result.output
    assert len(receiver.event_ids) < 5  # it stopped starting sends
    db.session.rollback()
    assert db.session.scalar(select(func.count()).where(OutboxDelivery.claim_token.is_not(None))) == 0


def test_recover_with_include_pending_sends_now_what_waits_for_a_retry(alice):
    replies = iter([Reply(status=503), Reply(status=503), Reply(status=200), Reply(status=200)])
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        waiting = record_events(alice.account_id, 2)
        assert deliver_due() == 2  # both failed: next tries 5 s from now
        since = int((utcnow() - timedelta(hours=1)).replace(tzinfo=timezone.utc).timestamp())
        assert alice.post("/webhooks/recover", json={"since": since}).json == {"queued": 0}
        assert deliver_due() == 0
        response = alice.post("/webhooks/recover", json={"since": since, "include_pending": True})
        assert response.status_code == 202 and response.json == {"queued": 2}
        assert deliver_due() == 2
    assert sorted(receiver.event_ids[2:]) == sorted(waiting)
    assert {event_row(event_id).delivery_status for event_id in waiting} == {"succeeded"}
    assert [attempt.attempt for attempt in attempts_of(waiting[0])] == [1, 2]


def test_recover_takes_unix_seconds_and_refuses_impossible_ones(alice):
    configure(alice, "https://93.184.216.34/")
    [unsent] = record_events(alice.account_id)
    db.session.execute(Event.__table__.update().where(Event.id == unsent).values(delivery_status="failed"))
    db.session.execute(OutboxDelivery.__table__.delete())
    db.session.commit()
    now = utcnow().replace(tzinfo=timezone.utc).timestamp()
    assert alice.post("/webhooks/recover", json={"since": now - 60, "until": int(now) + 60}).json == {"queued": 1}
    for body in ({"since": 10 ** 20}, {"since": True}, {"since": now, "until": now - 3600},
                 {"since": now - 60, "include_pending": "maybe"}):
        response = alice.post("/webhooks/recover", json=body)
        assert response.status_code == 400 and response.json["error"] == "VALIDATION_ERROR", body


def test_a_stopping_sender_gives_back_what_it_did_not_send_and_the_attempt_numbers_with_it(alice, app):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        ids = record_events(alice.account_id, 3)
        answers = iter([True])  # go on to claim a batch, then stop before any send starts
        sent = deliveries.deliver_until_idle(keep_going=lambda: next(answers, False))
        assert sent == 0 and receiver.requests == []
        db.session.remove()
        rows = db.session.scalars(select(OutboxDelivery)).all()
        assert len(rows) == 3 and all(row.claim_token is None for row in rows)
        assert all(event_row(event_id).attempt_count == 0 for event_id in ids)
        assert deliver_due() == 3  # released rows are due at once, and their first try is attempt 1
    assert sorted(request.headers["X-Webhook-Attempt"] for request in receiver.requests) == ["1", "1", "1"]


def deliver_until_idle_while(watch, budget=None) -> int:
    """`deliver_until_idle`, with `watch` running in a thread of its own meanwhile."""
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        return deliveries.deliver_until_idle(budget)
    finally:
        watcher.join()


@contextlib.contextmanager
def slow_alice_fast_bob(alice, bob, hold):
    """Receivers for alice, whose endpoint answers once `hold()` returns, and bob, whose answers at once."""
    def alice_reply(received):
        hold()
        return Reply()

    with Receiver(alice_reply) as slow, Receiver() as fast:
        configure(alice, slow.url)
        configure(bob, fast.url)
        yield slow, fast


def test_a_slow_endpoint_holds_back_its_own_batch_not_the_sends_claimed_after_it(app, alice, bob):
    """The sender claimed the next batch only once the one before the last was recorded: one account's endpoint
    answering slowly (up to the 10 s timeout) delayed every other account's deliveries."""
    app.config.update(WEBHOOK_BATCH_SIZE=1, WEBHOOK_WORKERS=4)
    bob_served, release_alice = threading.Event(), threading.Event()
    with slow_alice_fast_bob(alice, bob, lambda: release_alice.wait(30)) as (slow, fast):
        [alices] = record_events(alice.account_id)
        bobs = record_events(bob.account_id, 3)

        def release_once_bob_is_served():
            if _wait_for(lambda: len(fast.requests) == 3):
                bob_served.set()
            release_alice.set()
        assert deliver_until_idle_while(release_once_bob_is_served) == 4
    assert bob_served.is_set(), "bob's deliveries waited for alice's endpoint"
    assert sorted(fast.event_ids) == sorted(bobs) and slow.event_ids == [alices]
    assert all(event_row(event_id).delivery_status == "succeeded" for event_id in [alices, *bobs])


def test_a_claim_shares_the_batch_out_among_the_accounts_with_deliveries_due(app, alice, bob):
    """Oldest due first across accounts: an account with a backlog filled every batch, and another account's
    deliveries due later waited until that backlog was sent."""
    configure(alice, "https://93.184.216.34/")
    configure(bob, "https://93.184.216.35/")
    alices = record_events(alice.account_id, 5)
    bobs = record_events(bob.account_id, 2)
    claimed = outbox.claim_due(outbox.new_claim_token(), 4)
    assert [item.account_id for item in claimed] == [alice.account_id, bob.account_id] * 2
    assert {item.outgoing.event_id for item in claimed} <= {*alices, *bobs}
    assert [item.outgoing.event_id for item in outbox.claim_due(outbox.new_claim_token(), 4, {alice.account_id: 0})] \
        == [], "bob has nothing more due; alice had no room"
    assert [item.account_id for item in outbox.claim_due(outbox.new_claim_token(), 4, {alice.account_id: 2})] \
        == [alice.account_id] * 2


def test_a_claim_takes_the_accounts_whose_endpoint_answers_or_began_failing_last_before_older_failures(app, alice,
                                                                                                       bob):
    """Accounts were taken by their oldest due delivery: endpoints failing for a while (their backlogs due long ago)
    filled every claim of `limit` accounts, and an account whose first try had just failed got its retry only once
    fewer of them had deliveries due (walk: 9 failing endpoints, 8 senders: a sender's worth claimed every second
    while busy left a healthy account's due tries out for up to 4 s)."""
    failing = [make_tenant(app, f"Failing {number}") for number in range(2)]
    for number, tenant in enumerate(failing):
        configure(tenant, f"https://93.184.216.{40 + number}/")
        record_events(tenant.account_id, 3)
    configure(alice, "https://93.184.216.34/")
    configure(bob, "https://93.184.216.35/")
    [alices] = record_events(alice.account_id)  # its retry: its endpoint began failing a moment ago
    [bobs] = record_events(bob.account_id)  # its endpoint answers
    now = utcnow()
    with write_transaction() as session:
        for account_id, since in [(failing[0].account_id, now - timedelta(hours=2)),
                                  (failing[1].account_id, now - timedelta(hours=1)),
                                  (alice.account_id, now - timedelta(seconds=5))]:
            session.execute(update(WebhookConfig).where(WebhookConfig.account_id == account_id)
                            .values(failing_since=since))
    claimed = outbox.claim_due(outbox.new_claim_token(), 3)
    # the one waiting longest keeps the first place (review: without it, endpoints failing for long waited for as
    # long as `limit` others had something due), then bob's that answers, then alice's that began failing last
    assert [item.account_id for item in claimed] == [failing[0].account_id, bob.account_id, alice.account_id]
    assert [item.outgoing.event_id for item in claimed[1:]] == [bobs, alices]
    assert [item.account_id for item in outbox.claim_due(outbox.new_claim_token(), 2)] == [
        failing[0].account_id, failing[1].account_id]


def test_an_endpoint_failing_for_long_is_tried_while_more_accounts_than_a_claim_takes_are_due(app, alice, bob):
    """Review: ordered by failing_since alone, an endpoint failing for hours got no try while `limit` accounts that
    answer (or began failing later) had something due, so it never reached its last retry nor the deactivation."""
    failing = make_tenant(app, "Failing")
    configure(failing, "https://93.184.216.40/")
    [old] = record_events(failing.account_id)
    with write_transaction() as session:
        session.execute(update(WebhookConfig).where(WebhookConfig.account_id == failing.account_id)
                        .values(failing_since=utcnow() - timedelta(hours=2)))
    for tenant, address in ((alice, "34"), (bob, "35")):
        configure(tenant, f"https://93.184.216.{address}/")
        record_events(tenant.account_id, 2)
    assert [item.outgoing.event_id for item in outbox.claim_due(outbox.new_claim_token(), 2)
            if item.account_id == failing.account_id] == [old]


@pytest.mark.parametrize("budget", [None, 0.5])
def test_an_account_whose_slow_endpoint_has_a_backlog_leaves_the_next_free_sender_to_the_others(app, alice, bob,
                                                                                                budget):
    """Claimed tries went to the pool in one queue: another account's deliveries, claimed while a slow endpoint's
    backlog held the senders, waited behind every try of that backlog (minutes, at 10 s a try). And once the
    round's budget was spent nothing was claimed while the backlog's tries ran on (up to a minute, fault walk)."""
    app.config.update(WEBHOOK_BATCH_SIZE=10, WEBHOOK_WORKERS=2)
    alice_may_answer, bob_served = threading.Semaphore(0), threading.Event()
    with slow_alice_fast_bob(alice, bob, lambda: alice_may_answer.acquire(timeout=30)) as (slow, fast):
        alices = record_events(alice.account_id, 6)

        def queue_bobs_then_free_one_sender():
            with app.app_context():
                if _wait_for(lambda: len(slow.requests) == 2):  # both senders held by alice's endpoint
                    time.sleep(budget or 0)  # and, with a budget, past it
                    record_events(bob.account_id, 3)
                    time.sleep(deliveries.SHARE_CLAIM_SECONDS + 0.5)  # the sender claims bob's while busy
                    alice_may_answer.release()  # one sender comes free
                    if _wait_for(lambda: len(fast.requests) == 3, seconds=10):
                        bob_served.set()
            for _ in range(10):
                alice_may_answer.release()
        assert deliver_until_idle_while(queue_bobs_then_free_one_sender, budget) == 9
    assert bob_served.is_set(), "bob's deliveries waited behind alice's backlog"
    assert sorted(slow.event_ids) == sorted(alices) and len(slow.requests) == 6


def test_an_account_whose_endpoint_answers_at_once_gets_the_next_free_sender_however_many_slow_ones_queue():
    """With more accounts holding slow tries than there are senders, the one queued first among those with none
    running took every sender that came free (and a claim's first account took every free sender before the
    others were queued): an account whose endpoint answers at once waited until the slow accounts' queues were sent
    or half the lease had gone by (fault walk: 16 dead endpoints, 8 senders, a healthy account's first delivery
    after 60 s). Now a claim's accounts are queued together and, among equals, the least served goes first."""
    started = []

    def send(outgoing):
        started.append(outgoing.url)  # list.append is atomic
        if outgoing.url != "fast":
            time.sleep(0.3)
        return Outcome(True, 200, 1)

    with ThreadPoolExecutor(max_workers=2) as pool:
        sending = deliveries._Sending(pool, senders=2, batch_size=10, slow_after=5)
        batches = [tries_of(account, 3, send) for account in ("slow-a", "slow-b", "slow-c", "fast")]
        sending.add(batches)  # as one claim queues them
        for each in batches:
            wait(each.futures, timeout=10)
    second_slow_try = min(index for index, url in enumerate(started) if url != "fast" and url in started[:index])
    assert started[:second_slow_try].count("fast") == 3, started


def tries_of(account, count, send, endpoint_failing=False) -> deliveries.InFlight:
    """An account's part of a claim, as `_claim` makes it: `count` tries, each sent by `send(outgoing)`."""
    items = [SimpleNamespace(account_id=account, outgoing=Outgoing("evt_x", account, b"{}", 1, "whsec_x"),
                             endpoint_failing=endpoint_failing, event_type="contact.position_changed")
             for _ in range(count)]
    return deliveries.InFlight("claim_x", items, [Future() for _ in items], send)


def served_while_the_others_hang(sending, fast, hung, gate) -> bool:
    """Queue `fast` (an InFlight) in `sending`: whether all its tries came back (within 5 s) while `gate` held the
    tries of `hung`; then let those go and wait for every try."""
    sending.add([fast])
    served = _wait_for(lambda: all(future.done() for future in fast.futures), 5)
    gate.set()
    for each in (*hung, fast):
        wait(each.futures, timeout=10)
    return served


def test_an_account_claimed_with_its_endpoint_failing_does_not_take_the_last_free_sender_before_a_try_returns():
    """The marks of slow accounts live as long as a round of the sender (30 s): each new round, the dead endpoints'
    next tries took every sender for 10 s again (fault walk re-run: stalls of 20 s every minute, then a healthy
    account's deliveries 60 s late). A configuration whose last try failed marks its account slow from the claim."""
    started, gate = [], threading.Event()

    def send(outgoing):
        started.append(outgoing.url)
        if outgoing.url != "fast":
            gate.wait(10)
        return Outcome(True, 200, 1)

    with ThreadPoolExecutor(max_workers=2) as pool:
        sending = deliveries._Sending(pool, senders=2, batch_size=10, slow_after=0.05)
        dead = [tries_of(account, 2, send, endpoint_failing=True) for account in ("dead-a", "dead-b")]
        sending.add(dead)
        assert served_while_the_others_hang(sending, tries_of("fast", 2, send), dead, gate), started
    assert started[:3] == ["dead-a", "fast", "fast"]


def test_a_claimed_try_says_whether_its_endpoint_was_failing(alice, bob, clock):
    with Receiver(Reply(status=500)) as failing, Receiver() as answering:
        configure(alice, failing.url)
        configure(bob, answering.url)
        record_events(alice.account_id)
        record_events(bob.account_id)
        assert deliver_due() == 2
    record_events(bob.account_id)
    clock.advance(SCHEDULE[0] + 1)  # alice's retry is due
    claimed = outbox.claim_due(outbox.new_claim_token(), 10)
    assert {item.account_id: item.endpoint_failing for item in claimed} == {alice.account_id: True,
                                                                            bob.account_id: False}


def test_the_last_free_sender_is_kept_for_an_account_whose_endpoint_answers():
    """With more dead endpoints than senders, every sender that came free took another 10 s try of one of them, and
    a healthy account's deliveries waited for the next to come free (fault walk: a median of 14 s with 9 dead
    endpoints and 8 senders, 30 s with 16, after the fair share above). An account whose last try took over
    `slow_after` no longer takes the last free sender."""
    started, gate = [], threading.Event()

    def send(outgoing):
        first = outgoing.url not in started
        started.append(outgoing.url)
        if outgoing.url != "fast":
            time.sleep(0.4)  # over slow_after: the account is slow from now on
            if not first:
                gate.wait(10)  # a dead endpoint: held until the test lets go
        return Outcome(True, 200, 1)

    with ThreadPoolExecutor(max_workers=2) as pool:
        sending = deliveries._Sending(pool, senders=2, batch_size=10, slow_after=0.2)
        slow = [tries_of(account, 3, send) for account in ("slow-a", "slow-b")]
        sending.add(slow)
        assert _wait_for(lambda: len(started) >= 3, seconds=5)  # both first tries, and a second
        time.sleep(0.5)  # the other slow account's first try has long returned: its second would take the sender
        assert served_while_the_others_hang(sending, tries_of("fast", 3, send), slow, gate), started
    assert sorted(started) == ["fast"] * 3 + ["slow-a"] * 3 + ["slow-b"] * 3


def test_a_slow_mark_outlives_the_tries_the_account_held_that_round():
    """The mark went with the account's last held try, so the same dead endpoint's next claim (new events, its
    retries) took the last free sender again (review)."""
    started, gate = [], threading.Event()

    def send(outgoing):
        started.append(outgoing.url)
        if outgoing.url != "fast":
            time.sleep(0.4)  # over slow_after
            if started.count(outgoing.url) > 1:
                gate.wait(10)  # dead from now on
        return Outcome(True, 200, 1)

    with ThreadPoolExecutor(max_workers=2) as pool:
        sending = deliveries._Sending(pool, senders=2, batch_size=10, slow_after=0.2)
        first = tries_of("dead", 1, send)
        sending.add([first])
        wait(first.futures, timeout=5)  # slow, and it holds nothing now
        later = tries_of("dead", 2, send)
        sending.add([later])
        assert _wait_for(lambda: len(started) == 2, seconds=5)
        assert served_while_the_others_hang(sending, tries_of("fast", 1, send), [later], gate), started


def hanging_at_dead(started: list, gate: threading.Event, outcome: Outcome):
    """A send that notes each try's URL, answers `outcome`, and hangs at the URL `dead` until `gate` is set."""
    def send(outgoing):
        started.append(outgoing.url)
        if outgoing.url == "dead":
            gate.wait(10)
        return outcome
    return send


def test_an_account_whose_endpoint_was_failing_takes_the_last_sender_again_once_a_try_comes_back_quickly():
    started, gate = [], threading.Event()
    send = hanging_at_dead(started, gate, Outcome(True, 200, 1))

    with ThreadPoolExecutor(max_workers=2) as pool:
        sending = deliveries._Sending(pool, senders=2, batch_size=10, slow_after=0.2)
        recovered = tries_of("recovered", 3, send, endpoint_failing=True)
        dead = tries_of("dead", 2, send, endpoint_failing=True)
        sending.add([recovered, dead])
        recovered_served = _wait_for(lambda: all(future.done() for future in recovered.futures), 5)
        gate.set()
        wait([*recovered.futures, *dead.futures], timeout=10)
    assert recovered_served, started
    assert started[:4] == ["recovered", "dead", "recovered", "recovered"]


def test_an_account_whose_failing_endpoint_answered_at_once_takes_the_last_free_sender_in_later_rounds(app):
    """An account claimed with its endpoint failing was marked slow whenever it started holding tries, though its
    last try had come back at once (a 503), and every round forgot that: with a dead endpoint holding the other
    senders, its first sends and retries waited for one of the dead endpoint's tries to end (walk: 9 failing
    endpoints, one of them dead, 8 senders: a healthy account's first sends a median of 9.7 s late, retries up to
    16 s). What a try showed of its endpoint now outlives the round."""
    app.config.update(WEBHOOK_WORKERS=2)
    started, gate = [], threading.Event()
    send = hanging_at_dead(started, gate, Outcome(False, 503, 1))

    with ThreadPoolExecutor(max_workers=2) as pool:
        answered = tries_of("answers-503", 1, send, endpoint_failing=True)
        deliveries._sending(app, pool).add([answered])
        wait(answered.futures, timeout=5)
        next_round = deliveries._sending(app, pool)
        dead = tries_of("dead", 2, send, endpoint_failing=True)
        next_round.add([dead])
        again = tries_of("answers-503", 1, send, endpoint_failing=True)
        assert served_while_the_others_hang(next_round, again, [dead], gate), started
    assert started[:3] == ["answers-503", "dead", "answers-503"]


def test_slow_marks_that_no_try_renewed_for_twice_the_longest_retry_step_are_dropped(app):
    """The marks were kept for good, one per account ever sent to: a service that sends to many endpoints over
    months grew them without end. An account's mark now goes once no try has renewed it for twice the longest retry
    step (a failing endpoint keeps its mark from one try to the next)."""
    app.config.update(WEBHOOK_WORKERS=2, WEBHOOK_RETRY_SCHEDULE=[5, 60])  # marks kept 120 s
    now = [1000.0]
    marks = app.extensions["webhook_slow_accounts"] = deliveries.SlowMarks(clock=lambda: now[0])
    send = hanging_at_dead([], threading.Event(), Outcome(False, 503, 1))

    with ThreadPoolExecutor(max_workers=2) as pool:
        for account in ("removed", "failing"):
            batch = tries_of(account, 1, send, endpoint_failing=True)
            deliveries._sending(app, pool).add([batch])
            wait(batch.futures, timeout=5)
            now[0] += 100
        assert len(marks) == 2 and not marks.is_slow("failing")  # its try came back at once
        deliveries._sending(app, pool)  # a round 200 s after the first mark, 100 s after the second

    assert len(marks) == 1 and not marks.is_slow("failing")  # the 503 at once is still known


def test_an_account_that_starts_holding_tries_starts_level_with_the_least_served():
    """Not at nothing: an account whose tries came and went would otherwise go ahead of every account holding tries
    for as long as its sender time stayed below theirs."""
    started, gate = [], threading.Event()

    def send(outgoing):
        started.append(outgoing.url)
        if started.count(outgoing.url) == 1:
            time.sleep(0.1)
        else:
            gate.wait(10)
        return Outcome(True, 200, 1)

    with ThreadPoolExecutor(max_workers=2) as pool:
        sending = deliveries._Sending(pool, senders=2, batch_size=10, slow_after=5)
        first = [tries_of("a", 2, send), tries_of("b", 2, send)]
        sending.add(first)
        assert _wait_for(lambda: len(started) == 4, seconds=5)  # the first tries came back, the second hang
        late = tries_of("c", 1, send)
        sending.add([late])
        with sending._lock:
            served = dict(sending._served)
        gate.set()
        wait([future for each in (*first, late) for future in each.futures], timeout=10)
    assert served["c"] == min(served["a"], served["b"]) > 0, served


def test_each_accounts_tries_are_recorded_once_they_return_not_after_another_accounts(app, alice, bob):
    """A batch shared out among accounts was recorded once its last try returned: a slow endpoint's tries held back
    the record of another account's successful ones (for up to the lease), and a crash meanwhile sent them again."""
    app.config.update(WEBHOOK_BATCH_SIZE=10, WEBHOOK_WORKERS=2)
    release_alice, recorded_meanwhile = threading.Event(), threading.Event()
    with slow_alice_fast_bob(alice, bob, lambda: release_alice.wait(30)) as (_slow, fast):
        record_events(alice.account_id, 3)
        bobs = record_events(bob.account_id, 2)

        def watch():
            with app.app_context():
                if _wait_for(lambda: len(fast.requests) == 2) and _wait_for(
                        lambda: len(attempts_of(bobs[0]) + attempts_of(bobs[1])) == 2, seconds=5):
                    recorded_meanwhile.set()
                db.session.remove()
            release_alice.set()
        assert deliver_until_idle_while(watch) == 5
    assert recorded_meanwhile.is_set(), "bob's tries were recorded only after alice's endpoint answered"


def test_while_every_sender_is_busy_the_sender_claims_a_senders_worth_of_the_other_accounts(app, alice):
    """Claiming every second while busy took a whole batch each time: a process whose senders a slow endpoint held
    leased far more than it could send before half the lease (then gave it back), keeping it from other processes."""
    app.config.update(WEBHOOK_BATCH_SIZE=10, WEBHOOK_WORKERS=2)
    release_alice, leased = threading.Event(), []
    others = [make_tenant(app, f"Other {number}") for number in range(6)]

    def alice_reply(received):
        release_alice.wait(30)
        return Reply()

    with Receiver(alice_reply) as slow, Receiver() as fast:
        configure(alice, slow.url)
        for tenant in others:
            configure(tenant, fast.url)
        record_events(alice.account_id, 2)

        def watch():
            with app.app_context():
                if _wait_for(lambda: len(slow.requests) == 2):  # both senders held
                    for tenant in others:
                        record_events(tenant.account_id, 3)
                    time.sleep(2.5 * deliveries.SHARE_CLAIM_SECONDS)
                    leased.append(db.session.scalar(select(func.count()).select_from(OutboxDelivery).where(
                        OutboxDelivery.claim_token.is_not(None), OutboxDelivery.account_id != alice.account_id)))
                db.session.remove()
            release_alice.set()
        assert deliver_until_idle_while(watch) == 2 + 6 * 3
    assert leased and leased[0] <= 3 * 2, leased


def test_a_configuration_deactivated_while_a_claim_chose_its_accounts_gets_nothing_sent(app, alice, monkeypatch):
    """The claim chooses the accounts, then leases their rows; a deactivation committed in between (PostgreSQL
    reads each statement afresh) must not be sent to."""
    configure(alice, "https://93.184.216.34/")
    [event_id] = record_events(alice.account_id)
    monkeypatch.setattr(outbox, "_accounts_due", lambda *args: [alice.account_id])  # chosen while it was active
    with write_transaction() as session:
        session.execute(update(WebhookConfig).where(WebhookConfig.account_id == alice.account_id)
                        .values(is_active=False))
    assert outbox.claim_due(outbox.new_claim_token(), 10) == []
    [row] = owed_rows(event_id)
    assert row.claim_token is None and row.next_attempt_at <= utcnow()


@pytest.mark.parametrize("change", ["is_active", "endpoint_url"])
def test_tries_held_when_the_configuration_changes_are_not_sent_to_what_it_was(app, alice, change):
    """The tries a sender held went out as claimed for up to half the lease (a minute) after the configuration was
    deactivated ("not sent", contract §5) or pointed at another URL (fault walk: 40 and 54 tries)."""
    app.config.update(WEBHOOK_BATCH_SIZE=10, WEBHOOK_WORKERS=1)
    first_may_answer = threading.Event()

    def first_holds(received):
        first_may_answer.wait(30)
        return Reply()

    with Receiver(first_holds) as before, Receiver() as after:
        configure(alice, before.url)
        ids = record_events(alice.account_id, 6)

        def change_then_let_the_first_answer():
            if _wait_for(lambda: len(before.requests) == 1):
                body = {"is_active": False} if change == "is_active" else {"endpoint_url": after.url}
                assert alice.put("/webhooks/configure", json=body).status_code == 200
                time.sleep(deliveries.SHARE_CLAIM_SECONDS + 0.5)  # the sender reads the configuration again
            first_may_answer.set()
        deliver_until_idle_while(change_then_let_the_first_answer)  # the tries given back are due again at once
    assert len(before.requests) == 1
    if change == "is_active":
        unsent = [row for event_id in ids for row in owed_rows(event_id)]
        assert after.requests == [] and len(unsent) == 5 and all(row.claim_token is None for row in unsent)
    else:
        assert sorted(after.event_ids) == sorted(set(ids) - set(before.event_ids))  # claimed again as it is now


def test_tries_held_across_a_secret_rotation_are_signed_with_the_new_secret_and_the_old_one_as_previous(app, alice):
    """A try kept the secrets of its claim: held behind a slow try (for up to half the lease), it went out after a
    rotation signed with the old secret only, which a receiver on the new secret refuses (contract §5: for 24 hours
    after a rotation, deliveries carry both)."""
    app.config.update(WEBHOOK_BATCH_SIZE=10, WEBHOOK_WORKERS=1)
    first_may_answer, secrets = threading.Event(), []

    def first_holds(received):
        first_may_answer.wait(30)
        return Reply()

    with Receiver(first_holds) as receiver:
        secrets.append(configure(alice, receiver.url)["secret"])
        record_events(alice.account_id, 3)

        def rotate_then_let_the_first_answer():
            if _wait_for(lambda: len(receiver.requests) == 1):
                secrets.append(alice.post("/webhooks/rotate-secret").json["secret"])
                time.sleep(deliveries.SHARE_CLAIM_SECONDS + 0.5)  # the sender reads the configuration again
            first_may_answer.set()
        assert deliver_until_idle_while(rotate_then_let_the_first_answer) == 3
    old, new = secrets
    assert [signed_with(request, secrets) for request in receiver.requests] == [(old, None), (new, old), (new, old)]


def signed_with(request, secrets) -> tuple:
    """(the secret of X-Webhook-Signature, that of X-Webhook-Signature-Previous or None), of `secrets`."""
    timestamp = int(request.headers["X-Webhook-Timestamp"])
    by_signature = {sign(secret, timestamp, request.body): secret for secret in secrets}
    return (by_signature.get(request.headers["X-Webhook-Signature"]),
            by_signature.get(request.headers.get("X-Webhook-Signature-Previous")))


def test_the_tries_claimed_with_one_that_got_a_410_are_not_sent(app, alice):
    """A 410 deactivated the configuration when the account's part of the batch was recorded, once its last try had
    returned: every try claimed with the one that got it (up to a batch, 100) went to the endpoint all the same,
    though it had asked to be left alone ("deactivated at once", contract §5). They stay owed, unsent."""
    app.config.update(WEBHOOK_BATCH_SIZE=10, WEBHOOK_WORKERS=1)
    with Receiver(Reply(status=410)) as receiver:
        configure(alice, receiver.url)
        ids = record_events(alice.account_id, 4)
        deliveries.deliver_until_idle()
    assert len(receiver.requests) == 1
    assert config_row(alice.account_id).is_active is False
    unsent = [row for event_id in ids for row in owed_rows(event_id)]
    assert len(unsent) == 3 and all(row.claim_token is None for row in unsent)


def test_a_410_stops_the_accounts_tries_of_every_claim_the_sender_holds_not_only_its_own():
    """An account's tries may sit in several claims' parts at once (a sender fell idle while the account held tries,
    and the next claim took more of them, before or after the 410 came back): only the part of the try answered 410
    was stopped, and each other part still sent its next try to the endpoint that had asked to be left alone (review
    of 6ab96d1: README "the tries the sender holds of it that have not gone out yet are not sent"). The parts are
    taken out together once the tries on the wire are back: released earlier, before the record of the 410, the
    unsent tries would be claimed again at once, and again."""
    sent, queued, on_the_wire = [], threading.Event(), threading.Event()

    def send(outgoing):
        sent.append(outgoing.url)
        (on_the_wire if len(sent) > 1 else queued).wait(10)
        return Outcome(False, 410, 1, gone=True)

    with ThreadPoolExecutor(max_workers=2) as pool:
        sending = deliveries._Sending(pool, senders=2, batch_size=10, slow_after=5)
        first, queued_behind = tries_of("gone", 2, send), tries_of("gone", 2, send)
        sending.add([first])
        sending.add([queued_behind])  # a later claim, its tries queued behind the two on the wire
        queued.set()  # the first answers 410; the second is still on the wire
        wait(queued_behind.futures, timeout=10)
        claimed_after = tries_of("gone", 2, send)  # claimed before the 410 is recorded
        sending.add([claimed_after])
        wait(claimed_after.futures, timeout=10)
        assert sending.finished() == []
        on_the_wire.set()
        wait(first.futures, timeout=10)
        assert sending.finished() == [first, queued_behind, claimed_after]
    assert sent == ["gone", "gone"]
    assert [future.result() for future in queued_behind.futures + claimed_after.futures] == [None] * 4


def test_no_more_tries_of_an_account_are_claimed_after_its_410_while_its_other_tries_are_out(app, alice, monkeypatch):
    """After a 410, while a try of the same account was still on the wire, each sender that fell idle claimed more of
    the account's deliveries (its room counted only the tries it held), marked them gone and skipped them at once,
    and claimed again: the account's whole backlog was leased, numbered and released before the 410's record
    deactivated the configuration (review of 01d2b77). Its room is none until then."""
    app.config.update(WEBHOOK_BATCH_SIZE=2, WEBHOOK_WORKERS=2)
    real, claimed = outbox.claim_due, []

    def counted(token, limit, room=None):
        found = real(token, limit, room)
        claimed.extend(item.outgoing.event_id for item in found)
        return found
    monkeypatch.setattr(outbox, "claim_due", counted)
    answered = []

    def gone_then_slow(_received):  # the first try is answered 410 at once, the other on the wire stays a while
        answered.append(1)
        return Reply(status=410, delay=0 if len(answered) == 1 else 1.5)
    with Receiver(gone_then_slow) as receiver:
        configure(alice, receiver.url)
        ids = record_events(alice.account_id, 8)
        deliveries.deliver_until_idle()
    assert len(receiver.requests) == 2 and config_row(alice.account_id).is_active is False
    assert len(claimed) == 2
    unsent = [row for event_id in ids for row in owed_rows(event_id)]
    assert len(unsent) == 6 and all(row.claim_token is None for row in unsent)


def test_a_redelivery_asked_for_after_a_try_ended_is_sent_though_that_try_is_not_recorded_yet(app, alice):
    """A try that had come back (its record waiting for a slow try of the same account) still held its delivery: a
    redelivery asked for then restarted the held row, and the record ended it as delivered; nothing more was sent
    (fault re-walk: 2 of 3)."""
    app.config.update(WEBHOOK_BATCH_SIZE=10, WEBHOOK_WORKERS=2)
    slow_may_answer, asked = threading.Event(), []

    def slow_for_one(received):
        if received.headers["X-Webhook-Id"] == slow_id:
            slow_may_answer.wait(30)
        return Reply()

    with Receiver(slow_for_one) as receiver:
        configure(alice, receiver.url)
        fast_id, slow_id = record_events(alice.account_id, 2)

        def redeliver_the_fast_one_once_it_returned():
            if _wait_for(lambda: len(receiver.requests) == 2):
                time.sleep(1.0)  # the fast one has come back; its record waits for the slow one
                asked.append(alice.post(f"/events/{fast_id}/redeliver").status_code)
            slow_may_answer.set()
        assert deliver_until_idle_while(redeliver_the_fast_one_once_it_returned) >= 2
        deliveries.deliver_until_idle()
    assert asked == [202]
    assert sorted(receiver.event_ids) == sorted([fast_id, fast_id, slow_id])
    assert [attempt.attempt for attempt in attempts_of(fast_id)] == [1, 2]
    assert event_row(fast_id).delivery_status == "succeeded" and owed_rows(fast_id) == []


def test_a_failed_look_at_the_configurations_leaves_the_tries_as_claimed(app, alice, monkeypatch, caplog):
    configure(alice, "https://93.184.216.34/")
    record_events(alice.account_id, 3)
    sending = deliveries._Sending(deliveries._sender_pool(app), 1, 10, slow_after=5)
    monkeypatch.setattr(sending, "_dispatch", lambda: None)  # the tries stay queued
    [batch] = deliveries._claim(app, always, 10)
    sending.add([batch])

    def database_gone(account_ids):
        raise RuntimeError("the database went away")
    monkeypatch.setattr(outbox, "endpoints_now", database_gone)
    sending.check_endpoints()
    assert sending.endpoints[alice.account_id].url == "https://93.184.216.34/"
    assert "reading the webhook configurations again failed" in caplog.text


def test_a_try_is_logged_at_the_moment_it_was_sent_not_when_its_batch_was_recorded(app, alice, bob):
    """Every try of a batch was stamped with the batch's record, after its slowest try: a fast endpoint's try
    showed up to the 10-second timeout late in the delivery log."""
    app.config.update(WEBHOOK_BATCH_SIZE=2, WEBHOOK_WORKERS=2)
    answered_at = []

    def slow(received):
        time.sleep(1.0)
        answered_at.append(utcnow())
        return Reply()
    with Receiver(slow) as slow_receiver, Receiver() as fast:
        configure(alice, slow_receiver.url)
        configure(bob, fast.url)
        record_events(alice.account_id)
        [bobs] = record_events(bob.account_id)
        assert deliver_due() == 2
    [attempt] = attempts_of(bobs)
    assert attempt.attempted_at < answered_at[0] - timedelta(seconds=0.5)


def failing_calls_of(monkeypatch, name, fails) -> list:
    """`outbox.<name>` raises on the calls `fails(tokens)` picks (the claim tokens it was called with so far)."""
    real, tokens = getattr(outbox, name), []

    def sometimes_failing(token, *args):
        tokens.append(token)
        if fails(tokens):
            raise RuntimeError("the database went away")
        return real(token, *args)
    monkeypatch.setattr(outbox, name, sometimes_failing)
    return tokens


def test_a_batch_whose_record_fails_leaves_the_other_batches_recorded(app, alice, monkeypatch):
    """One failed record left the loop and every other claimed batch went unrecorded until its lease ended."""
    app.config.update(WEBHOOK_BATCH_SIZE=1, WEBHOOK_WORKERS=4)
    monkeypatch.setattr(deliveries, "RECORD_RETRY_SECONDS", 0)
    # the first batch's record fails, and once more
    failing_calls_of(monkeypatch, "record_results", lambda tokens: tokens[-1] == tokens[0] and len(tokens) <= 2)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, 4)
        assert deliveries.deliver_until_idle() == 3
    assert len(receiver.requests) == 4
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(DeliveryAttempt)) == 3
    [left] = db.session.scalars(select(OutboxDelivery)).all()
    assert left.claim_token is not None  # the one whose record failed: sent again after its lease


def test_a_record_that_fails_once_is_made_a_moment_later(app, alice, monkeypatch):
    """A dropped connection lost the batch's record: its deliveries were sent again after the lease, and the
    tries made were never logged."""
    monkeypatch.setattr(deliveries, "RECORD_RETRY_SECONDS", 0)
    calls = failing_calls_of(monkeypatch, "record_results", lambda tokens: len(tokens) == 1)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        assert deliveries.deliver_until_idle() == 1
    assert len(calls) == 2 and [attempt.attempt for attempt in attempts_of(event_id)] == [1]
    assert event_row(event_id).delivery_status == "succeeded" and owed_rows(event_id) == []


def test_a_record_whose_commit_was_done_though_its_answer_was_lost_logs_each_try_once(app, alice, monkeypatch):
    """The record tried once more after a commit whose answer was lost (the connection cut as the answer came back,
    the commit done all the same) logged every try of the batch a second time, and counted it twice in the day's
    delivery counters (/account/usage, the overview's success rate): fault walk, PostgreSQL restarted mid-work."""
    monkeypatch.setattr(deliveries, "RECORD_RETRY_SECONDS", 0)
    real, calls = outbox.record_results, []

    def answer_lost_once(token, results):
        calls.append(token)
        tally = real(token, results)
        if len(calls) == 1:
            raise RuntimeError("consuming input failed: server closed the connection unexpectedly")
        return tally
    monkeypatch.setattr(outbox, "record_results", answer_lost_once)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        event_ids = record_events(alice.account_id, 2)
        assert deliveries.deliver_until_idle() == 2
    assert len(calls) == 2 and len(receiver.requests) == 2
    assert [[attempt.attempt for attempt in attempts_of(event_id)] for event_id in event_ids] == [[1], [1]]
    assert outbox.attempt_totals_since(db.session, alice.account_id, utcnow().date())["succeeded"][0] == 2
    assert all(event_row(event_id).delivery_status == "succeeded" for event_id in event_ids)


def test_a_claim_that_fails_leaves_the_batches_in_flight_recorded(app, alice, monkeypatch):
    app.config.update(WEBHOOK_BATCH_SIZE=1, WEBHOOK_WORKERS=4)
    failing_calls_of(monkeypatch, "claim_due", lambda tokens: len(tokens) == 3)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, 4)
        with pytest.raises(RuntimeError):
            deliveries.deliver_until_idle()
    db.session.rollback()
    assert db.session.scalar(select(func.count()).select_from(DeliveryAttempt)) == len(receiver.requests) == 2


def test_a_round_whose_budget_ran_out_with_more_due_wakes_the_next_round(alice):
    """The sender then slept a whole poll interval although deliveries were due."""
    configure(alice, "https://93.184.216.34/")
    record_events(alice.account_id)
    deliveries.woken.clear()
    assert deliveries.deliver_until_idle(budget_seconds=0) == 0
    assert deliveries.woken.is_set()
    deliveries.woken.clear()
    with write_transaction() as session:
        session.execute(delete(OutboxDelivery))
    assert deliveries.deliver_until_idle() == 0 and not deliveries.woken.is_set()  # nothing due: it may sleep


def _wait_for(condition, seconds=20) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_batch_the_pool_refuses_is_given_back(alice, app):
    """Every try of it, more than there are senders too (the ones queued past the senders never came back, and
    recording the batch waited for ever)."""
    configure(alice, "https://93.184.216.34/")
    record_events(alice.account_id, 7)
    pool = deliveries._sender_pool(app)
    pool.shutdown()
    [batch] = deliveries._claim(app, always, 10)
    sending = deliveries._Sending(pool, 2, 100, slow_after=5)
    sending.add([batch])
    assert all(future.done() for future in batch.futures) and sending.idle()
    outcomes = Counter()
    assert deliveries._record(batch, outcomes) == 0 and outcomes == {"released": 7}
    db.session.remove()
    rows = db.session.scalars(select(OutboxDelivery)).all()
    assert len(rows) == 7 and all(row.claim_token is None for row in rows)


def test_past_its_budget_a_round_claims_no_new_batch_of_a_backlog(app, alice):
    """Once the once-a-second look went on past the budget, an idle moment claimed a whole batch again, and a round
    with a backlog never ended."""
    app.config.update(WEBHOOK_BATCH_SIZE=4, WEBHOOK_WORKERS=2)
    answered = []

    def every_fourth_slow(received):
        answered.append(received)
        return Reply(delay=1.0 if len(answered) % 4 == 0 else 0)

    with Receiver(every_fourth_slow) as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, 16)
        sent = deliveries.deliver_until_idle(budget_seconds=0.5)
    assert 0 < sent < 16 and len(answered) == sent
    assert deliveries.woken.is_set()  # the next round starts at once


def owed_rows(event_id):
    db.session.rollback()
    return db.session.scalars(select(OutboxDelivery).where(OutboxDelivery.event_id == event_id)).all()


def attempt_headers(receiver):
    return [request.headers["X-Webhook-Attempt"] for request in receiver.requests]


def test_a_redelivery_while_a_retry_is_owed_restarts_that_delivery_instead_of_adding_one(alice):
    replies = iter([Reply(status=429, headers={"Retry-After": "100"}), Reply(status=500)])
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        assert deliver_due() == 1  # a try is owed 100 s from now
        assert alice.post(f"/events/{event_id}/redeliver").status_code == 202
        [row] = owed_rows(event_id)
        assert row.next_attempt_at <= utcnow() and row.attempts == 0  # due now, the schedule from its start
        # the first try's record says so too: it announced the old schedule's try, 100 s on (webhook walk)
        assert attempts_of(event_id)[0].next_attempt_at == row.next_attempt_at
        assert deliver_due() == 1
        assert deliver_due() == 0
    assert attempt_headers(receiver) == ["1", "2"]
    [row] = owed_rows(event_id)
    assert row.attempts == 1
    assert delay_after(attempts_of(event_id)[-1]) == SCHEDULE[0]  # the restarted schedule's first step


def test_recover_with_include_pending_announces_the_restarted_try_on_the_last_one(alice):
    """It changed nothing: by then the events were pending and their deliveries due, so the update's conditions
    matched none (review)."""
    with Receiver(Reply(status=429, headers={"Retry-After": "100"})) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        assert deliver_due() == 1  # a try is owed 100 s from now
        since = isoformat(utcnow() - timedelta(hours=1))
        assert alice.post("/webhooks/recover", json={"since": since, "include_pending": True}).json == {"queued": 1}
    [row] = owed_rows(event_id)
    assert row.next_attempt_at <= utcnow()
    assert attempts_of(event_id)[0].next_attempt_at == row.next_attempt_at


def test_recover_with_include_pending_counts_and_sends_a_redelivered_event_once(alice):
    replies = iter([Reply(status=429, headers={"Retry-After": "100"}), Reply(status=503), Reply(status=200)])
    with Receiver(lambda received: next(replies)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        assert deliver_due() == 1  # 429: the next try in 100 s
        alice.post(f"/events/{event_id}/redeliver")
        assert deliver_due() == 1  # 503: the next try in 5 s
        since = isoformat(utcnow() - timedelta(hours=1))
        response = alice.post("/webhooks/recover", json={"since": since, "include_pending": True})
        assert response.json == {"queued": 1}
        assert len(owed_rows(event_id)) == 1
        assert deliver_due() == 1
        assert deliver_due() == 0
    assert attempt_headers(receiver) == ["1", "2", "3"]
    assert event_row(event_id).delivery_status == "succeeded" and owed_rows(event_id) == []


def test_recover_with_include_pending_restarts_the_schedule_of_what_waits(alice, clock):
    with Receiver(Reply(status=503)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        for _ in range(3):  # three tries: the next one is the schedule's third step away
            deliver_due()
            clock.travel_to(owed_rows(event_id)[0].next_attempt_at)
        assert owed_rows(event_id)[0].attempts == 3
        since = isoformat(utcnow() - timedelta(hours=1))
        clock.advance(-1)  # not due yet
        assert alice.post("/webhooks/recover", json={"since": since, "include_pending": True}).json == {"queued": 1}
        assert deliver_due() == 1
    assert len(receiver.requests) == 4
    assert delay_after(attempts_of(event_id)[-1]) == SCHEDULE[0]


def test_a_redelivery_while_a_send_is_in_flight_lets_it_finish_then_restarts_the_schedule(alice, clock):
    with Receiver(Reply(status=503)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()  # one failed try: the next failure would wait the schedule's second step
        clock.travel_to(owed_rows(event_id)[0].next_attempt_at)
        token = outbox.new_claim_token()
        [in_flight] = outbox.claim_due(token, 10)  # a sender has its second try on the wire
        assert in_flight.tries == 1
        assert alice.post(f"/events/{event_id}/redeliver").status_code == 202
        assert deliver_due() == 0  # nobody sends it a second time meanwhile
        assert len(receiver.requests) == 1
    [row] = owed_rows(event_id)
    assert row.claim_token == token and row.attempts == 0
    outbox.record_results(token, [(in_flight, Outcome(False, 503, 10))])
    [row] = owed_rows(event_id)
    assert row.claim_token is None and row.attempts == 1
    # the restarted schedule (the row's tries, read when the result is recorded), not the claimed chain's 2nd step
    assert delay_after(attempts_of(event_id)[-1]) == SCHEDULE[0]
    assert event_row(event_id).delivery_status == "pending"


def test_a_try_that_succeeded_while_the_configuration_was_removed_leaves_its_event_succeeded(alice):
    """The removal drops the delivery on the wire and marks its event failed; the endpoint's 200 arrives after."""
    configure(alice, "http://127.0.0.1:9/hook")
    sent_ok, sent_failing, never_sent = record_events(alice.account_id, 3)
    token = outbox.new_claim_token()
    claimed = {item.outgoing.event_id: item for item in outbox.claim_due(token, 3)}
    in_flight = {sent_ok: claimed[sent_ok], sent_failing: claimed[sent_failing]}
    outbox.release(token, [claimed[never_sent]])
    assert alice.delete("/webhooks/configure").status_code == 200
    assert [event_row(event_id).delivery_status for event_id in (sent_ok, sent_failing, never_sent)] == [
        "failed", "failed", "skipped"]

    outbox.record_results(token, [(in_flight[sent_ok], Outcome(True, 200, 10)),
                                  (in_flight[sent_failing], Outcome(False, 500, 10))])

    assert [event_row(event_id).delivery_status for event_id in (sent_ok, sent_failing, never_sent)] == [
        "succeeded", "failed", "skipped"]
    assert [attempt.status for attempt in attempts_of(sent_ok)] == ["succeeded"]
    assert [attempt.next_attempt_at for attempt in attempts_of(sent_failing)] == [None]  # no try will follow
    assert alice.get(f"/events/{sent_ok}").json["delivery_status"] == "succeeded"
    assert owed_rows(sent_ok) == [] and owed_rows(sent_failing) == []


def test_removing_the_configuration_leaves_no_next_attempt_announced_in_the_delivery_log(alice):
    with Receiver(Reply(status=503)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
    [logged] = alice.get("/webhooks/deliveries").json["data"]
    assert logged["next_attempt_at"] is not None and event_row(event_id).delivery_status == "pending"

    assert alice.delete("/webhooks/configure").status_code == 200

    [logged] = alice.get("/webhooks/deliveries").json["data"]
    assert logged["status"] == "failed" and logged["next_attempt_at"] is None
    assert alice.get(f"/events/{event_id}").json["attempts"][0]["next_attempt_at"] is None
    assert event_row(event_id).delivery_status == "failed"


def test_removing_the_configuration_keeps_the_next_attempt_the_earlier_tries_announced(alice, clock):
    """Contract walk: every try of a dropped delivery lost its `next_attempt_at`, the earlier ones too, whose next try
    had been made: the log then said no try followed attempt 1, above attempt 2. Only the last try's is unmade."""
    with Receiver(Reply(status=503)) as receiver:
        configure(alice, receiver.url)
        [event_id] = record_events(alice.account_id)
        deliver_due()
        clock.travel_to(owed_rows(event_id)[0].next_attempt_at)
        deliver_due()
    before = [attempt["next_attempt_at"] for attempt in alice.get(f"/events/{event_id}").json["attempts"]]
    assert len(before) == 2 and None not in before

    assert alice.delete("/webhooks/configure").status_code == 200

    after = alice.get(f"/events/{event_id}").json["attempts"]
    assert [(attempt["attempt"], attempt["next_attempt_at"]) for attempt in after] == [(1, before[0]), (2, None)]
    assert [logged["next_attempt_at"] for logged in alice.get("/webhooks/deliveries").json["data"]] == [None, before[0]]


def _second_try_claimed(alice, clock, receiver):
    """An event whose first try failed (its next try announced) and whose second a sender has just claimed."""
    configure(alice, receiver.url)
    [event_id] = record_events(alice.account_id)
    deliver_due()
    clock.travel_to(owed_rows(event_id)[0].next_attempt_at)
    token = outbox.new_claim_token()
    [in_flight] = outbox.claim_due(token, 1)
    return event_id, token, in_flight


def test_removing_the_configuration_while_a_try_is_in_flight_keeps_the_earlier_try_announcing_it(alice, clock):
    """Review: the removal cleared the last *recorded* try's `next_attempt_at`, attempt 1's while attempt 2 was on the
    wire; attempt 2 was then logged below an attempt 1 that said no try would follow it."""
    with Receiver(Reply(status=503)) as receiver:
        event_id, token, in_flight = _second_try_claimed(alice, clock, receiver)
    [announced] = [attempt.next_attempt_at for attempt in attempts_of(event_id)]
    assert announced is not None

    assert alice.delete("/webhooks/configure").status_code == 200
    assert [attempt.next_attempt_at for attempt in attempts_of(event_id)] == [announced]
    outbox.record_results(token, [(in_flight, Outcome(False, 503, 10))])

    after = alice.get(f"/events/{event_id}").json["attempts"]
    assert [(attempt["attempt"], attempt["next_attempt_at"]) for attempt in after] == [
        (1, isoformat(announced)), (2, None)]
    assert event_row(event_id).delivery_status == "failed"


def test_a_try_held_when_the_configuration_was_removed_and_given_back_unsent_is_announced_by_no_earlier_try(
        alice, clock):
    """Review: the removal keeps the announcement of a try a sender holds, as it may be on the wire; but the sender
    sends none of the tries it holds once it reads the configuration gone (`_as_configured_now`), and gives them back
    unsent: attempt 1 announced a try that was never made, on an event `failed` for good."""
    with Receiver(Reply(status=503)) as receiver:
        event_id, token, in_flight = _second_try_claimed(alice, clock, receiver)
    assert alice.delete("/webhooks/configure").status_code == 200

    outbox.release(token, [in_flight])

    assert [attempt.next_attempt_at for attempt in attempts_of(event_id)] == [None]
    assert [attempt["next_attempt_at"] for attempt in alice.get(f"/events/{event_id}").json["attempts"]] == [None]


def test_a_first_try_held_when_the_configuration_was_removed_and_given_back_unsent_leaves_its_event_skipped(alice):
    """Review: the removal marks an event failed by the attempt number its held first try took (attempt_count 1), and
    the sender gives that try back unsent: the event read failed, after 1 attempt, with none in its log. It was never
    sent: skipped, with no attempt counted."""
    configure(alice, "http://127.0.0.1:9/hook")
    [event_id] = record_events(alice.account_id)
    token = outbox.new_claim_token()
    [held] = outbox.claim_due(token, 1)
    assert alice.delete("/webhooks/configure").status_code == 200

    outbox.release(token, [held])

    got = alice.get(f"/events/{event_id}").json
    assert (got["delivery_status"], got["attempts"]) == ("skipped", [])
    assert event_row(event_id).attempt_count == 0


def test_a_later_try_held_when_the_configuration_was_removed_and_given_back_unsent_is_not_counted(alice, clock):
    """Its event stays failed (a try was made) and counts the one try in its log, not the one handed back."""
    with Receiver(Reply(status=503)) as receiver:
        event_id, token, in_flight = _second_try_claimed(alice, clock, receiver)
    assert alice.delete("/webhooks/configure").status_code == 200

    outbox.release(token, [in_flight])

    assert (event_row(event_id).delivery_status, event_row(event_id).attempt_count) == ("failed", 1)
    assert [attempt.attempt for attempt in attempts_of(event_id)] == [1]


def test_a_try_given_back_after_its_lease_ran_out_leaves_the_next_senders_try_counted(alice, app, clock):
    """Review of f448936: a sender's lease on a first try ran out, another sender claimed the event's next try (attempt
    2) and was sending it when the configuration was removed; the first sender then gave its try back unsent. The
    release counted only the recorded tries (none) and marked the event skipped with attempt_count 0, below the number
    the live claim held: the event read skipped, never sent, with attempt 2's failure in its log."""
    configure(alice, "http://127.0.0.1:9/hook")
    [event_id] = record_events(alice.account_id)
    first = outbox.new_claim_token()
    [stale] = outbox.claim_due(first, 1)
    clock.advance(app.config["WEBHOOK_LEASE_SECONDS"] + 1)
    second = outbox.new_claim_token()
    [sending] = outbox.claim_due(second, 1)
    assert (stale.outgoing.attempt, sending.outgoing.attempt) == (1, 2)
    assert alice.delete("/webhooks/configure").status_code == 200

    outbox.release(first, [stale])
    assert (event_row(event_id).delivery_status, event_row(event_id).attempt_count) == ("failed", 2)
    outbox.record_results(second, [(sending, Outcome(False, 503, 10))])

    assert (event_row(event_id).delivery_status, event_row(event_id).attempt_count) == ("failed", 2)
    assert [attempt.attempt for attempt in attempts_of(event_id)] == [2]


def test_a_try_given_back_after_its_lease_ran_out_keeps_the_earlier_try_announcing_the_next_senders(
        alice, app, clock):
    """Nor did the try before it announce no further try while the next sender's (attempt 3) was on the wire."""
    with Receiver(Reply(status=503)) as receiver:
        event_id, stale_token, stale = _second_try_claimed(alice, clock, receiver)
    clock.advance(app.config["WEBHOOK_LEASE_SECONDS"] + 1)
    token = outbox.new_claim_token()
    [sending] = outbox.claim_due(token, 1)
    [announced] = [attempt.next_attempt_at for attempt in attempts_of(event_id)]
    assert alice.delete("/webhooks/configure").status_code == 200

    outbox.release(stale_token, [stale])
    assert [attempt.next_attempt_at for attempt in attempts_of(event_id)] == [announced]
    outbox.record_results(token, [(sending, Outcome(False, 503, 10))])

    assert [attempt.attempt for attempt in attempts_of(event_id)] == [1, 3]
    assert (event_row(event_id).delivery_status, event_row(event_id).attempt_count) == ("failed", 3)


def test_removing_the_configuration_after_a_sender_died_with_a_try_clears_the_last_recorded_tries_next(
        alice, clock, monkeypatch):
    """A claim whose lease ran out is no try in flight (its sender died before recording it; a live one records within
    the lease): nothing follows attempt 1 in the log, and it says so."""
    monkeypatch.setattr(webhooks, "utcnow", clock)
    with Receiver(Reply(status=503)) as receiver:
        event_id, _token, _claimed = _second_try_claimed(alice, clock, receiver)
    clock.travel_to(owed_rows(event_id)[0].next_attempt_at)  # the lease's end

    assert alice.delete("/webhooks/configure").status_code == 200

    assert [attempt.next_attempt_at for attempt in attempts_of(event_id)] == [None]


def test_a_late_success_leaves_a_delivery_another_sender_holds_to_that_sender(alice, clock):
    """The first sender's lease ran out and a second claimed the delivery: the late 200 does not end it."""
    configure(alice, "http://127.0.0.1:9/hook")
    [event_id] = record_events(alice.account_id)
    late_token = outbox.new_claim_token()
    [late] = outbox.claim_due(late_token, 1)
    clock.travel_to(owed_rows(event_id)[0].next_attempt_at)
    token = outbox.new_claim_token()
    [current] = outbox.claim_due(token, 1)

    outbox.record_results(late_token, [(late, Outcome(True, 200, 10))])

    assert event_row(event_id).delivery_status == "pending"
    [row] = owed_rows(event_id)
    assert row.claim_token == token
    outbox.record_results(token, [(current, Outcome(True, 200, 10))])
    assert event_row(event_id).delivery_status == "succeeded" and owed_rows(event_id) == []
    assert [attempt.attempt for attempt in attempts_of(event_id)] == [1, 2]


def test_the_tries_of_an_event_deleted_while_they_were_sent_go_with_it(alice):
    """Dropped by a removal, the delivery no longer kept its event from retention; the batch is still recorded."""
    configure(alice, "http://127.0.0.1:9/hook")
    kept, deleted = record_events(alice.account_id, 2)
    token = outbox.new_claim_token()
    claimed = outbox.claim_due(token, 2)
    assert alice.delete("/webhooks/configure").status_code == 200
    with write_transaction() as session:
        session.execute(delete(Event).where(Event.id == deleted))

    outbox.record_results(token, [(item, Outcome(True, 200, 10)) for item in claimed])

    assert event_row(kept).delivery_status == "succeeded"
    assert [attempt.event_id for attempt in attempts_of(kept) + attempts_of(deleted)] == [kept]


def test_a_claim_takes_at_most_its_limit(app, alice):
    """The due rows are locked by a statement of their own: PostgreSQL may run an UPDATE's `IN (SELECT … LIMIT …
    FOR UPDATE SKIP LOCKED)` more than once and lease more rows than asked (a lock-order test saw a third)."""
    configure(alice, "http://127.0.0.1:9/hook")
    record_events(alice.account_id, 7)
    for _ in range(3):
        token = outbox.new_claim_token()
        claimed = outbox.claim_due(token, 2)
        db.session.rollback()
        leased = db.session.scalars(select(OutboxDelivery.event_id).where(OutboxDelivery.claim_token == token)).all()
        assert len(claimed) == 2 and sorted(leased) == sorted(item.outgoing.event_id for item in claimed)
