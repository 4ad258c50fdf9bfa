"""Deliveries over TLS to a local receiver (scripts/tls_receiver.py): the certificate is verified against
the test-only CA setting, the address guard and its pinning still run, and neither test setting can
switch verification off or reach a production configuration."""
import shutil
import socket
import time

import pytest
from sqlalchemy import select

from app import create_app
from app.config import ConfigError
from app.extensions import db
from app.models import DeliveryAttempt, Event
from app.services.transport import NOT_PUBLIC_REFUSAL, Transport
from app.worker.deliveries import deliver_due
from scripts.receiver import verify
from scripts.tls_receiver import RECEIVER_HOST, StaticResolver, make_certificates
from tests.conftest import BASE_CONFIG
from tests.webhook_helpers import (Dripper, Receiver, Reply, assert_cut_off_at_the_timeout, configure,
                                   drops_every_second_request_of_a_connection, record_events)

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command makes the test CA")
OTHER_HOST = "other.test"  # also 127.0.0.1, but not the name on the receiver's certificate


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def foreign_certificates(tmp_path_factory):
    """A certificate for the same name from another throw-away CA."""
    return make_certificates(tmp_path_factory.mktemp("tls-foreign"))


@pytest.fixture
def app_config(certificates):
    return {"WEBHOOK_TEST_CA_BUNDLE": certificates.ca_file, "WEBHOOK_TEST_ALLOW_LOOPBACK": True}


@pytest.fixture
def resolver(monkeypatch):
    fake = StaticResolver(socket.getaddrinfo, {RECEIVER_HOST: "127.0.0.1", OTHER_HOST: "127.0.0.1"})
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


def deliver_one(account_id):
    """Record an event, run one delivery step; the event and its attempt as stored."""
    [event_id] = record_events(account_id)
    assert deliver_due() == 1
    db.session.expire_all()
    attempt = db.session.scalar(select(DeliveryAttempt).where(DeliveryAttempt.event_id == event_id))
    return db.session.get(Event, event_id), attempt


def assert_failed_and_retried(event, attempt):
    assert attempt.status == "failed" and attempt.response_status is None
    assert attempt.next_attempt_at is not None and event.delivery_status == "pending"


def test_a_delivery_over_tls_is_verified_with_the_test_ca_and_signed(alice, certificates, resolver):
    with Receiver(certificates=certificates) as receiver:
        secret = configure(alice, receiver.url)["secret"]
        event, attempt = deliver_one(alice.account_id)
    assert attempt.status == "succeeded" and attempt.response_status == 200 and attempt.error is None
    assert event.delivery_status == "succeeded"
    [received] = receiver.requests
    assert received.headers["Host"] == f"{RECEIVER_HOST}:{receiver.port}"
    assert verify(received.headers, received.body, [secret])["id"] == event.id


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def test_the_environments_proxy_variables_are_not_used(alice, certificates, resolver, monkeypatch):
    """A proxy would make the connection to an address the sender never checked: the sender's sessions ignore the
    environment (security walk: held, but nothing pinned it)."""
    with socket.socket() as proxy:
        proxy.bind(("127.0.0.1", 0))
        proxy.listen()
        proxy.setblocking(False)
        for name in PROXY_VARIABLES:
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.getsockname()[1]}")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        with Receiver(certificates=certificates) as receiver:
            configure(alice, receiver.url)
            event, attempt = deliver_one(alice.account_id)
        with pytest.raises(BlockingIOError):  # no connection ever came to the proxy
            proxy.accept()
    assert attempt.status == "succeeded" and [request.headers["X-Webhook-Id"] for request in receiver.requests] == [
        event.id]


def test_deliveries_to_one_endpoint_reuse_the_pinned_tls_connection(alice, certificates, resolver):
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        outcomes = [deliver_one(alice.account_id)[1].status for _ in range(3)]
    assert outcomes == ["succeeded"] * 3 and len(receiver.requests) == 3
    assert receiver.server.handshakes == 1


def test_a_kept_tls_connection_the_endpoint_closed_is_tried_again_on_a_new_one(alice, app, certificates, resolver):
    app.config["WEBHOOK_WORKERS"] = 1
    with Receiver(drops_every_second_request_of_a_connection, certificates=certificates) as receiver:
        configure(alice, receiver.url)
        outcomes = [deliver_one(alice.account_id)[1] for _ in range(2)]
    assert [(attempt.status, attempt.attempt) for attempt in outcomes] == [("succeeded", 1)] * 2
    assert [request.on_connection for request in receiver.requests] == [1, 2, 1]
    assert receiver.server.handshakes == 2


def test_an_early_hints_answer_over_tls_is_read_past_to_the_final_one(alice, certificates, resolver):
    with Receiver(Reply(early_hints=True), certificates=certificates) as receiver:
        configure(alice, receiver.url)
        event, attempt = deliver_one(alice.account_id)
    assert (attempt.status, attempt.response_status) == ("succeeded", 200)
    assert event.delivery_status == "succeeded"


def test_without_the_test_ca_the_certificate_is_refused_and_the_try_retried(app, alice, certificates, resolver):
    app.config["WEBHOOK_TEST_CA_BUNDLE"] = None
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        event, attempt = deliver_one(alice.account_id)
    assert_failed_and_retried(event, attempt)
    assert attempt.error.startswith("connection failed: TLS certificate not accepted: CERTIFICATE_VERIFY_FAILED (")
    assert "(127.0.0.1:" in attempt.error  # the connection went to the pinned address, not to the name
    assert receiver.requests == []


def test_a_certificate_for_another_name_is_refused(alice, certificates, resolver):
    with Receiver(certificates=certificates) as receiver:
        configure(alice, f"https://{OTHER_HOST}:{receiver.port}/hook")
        event, attempt = deliver_one(alice.account_id)
    assert_failed_and_retried(event, attempt)
    assert f"hostname '{OTHER_HOST}' doesn't match '{RECEIVER_HOST}'" in attempt.error
    assert receiver.requests == []


def test_the_test_ca_trusts_only_itself_not_any_certificate(alice, foreign_certificates, resolver):
    with Receiver(certificates=foreign_certificates) as receiver:
        configure(alice, receiver.url)
        event, attempt = deliver_one(alice.account_id)
    assert_failed_and_retried(event, attempt)
    assert "CERTIFICATE_VERIFY_FAILED" in attempt.error
    assert receiver.requests == []


@pytest.mark.parametrize("address", ["10.0.0.1", "169.254.169.254", "100.64.0.1", "::ffff:192.168.1.1"])
def test_pinning_still_refuses_a_name_rebound_to_a_refused_address(alice, certificates, resolver, address):
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        resolver.table[RECEIVER_HOST] = address
        event, attempt = deliver_one(alice.account_id)
    assert_failed_and_retried(event, attempt)
    assert attempt.error == NOT_PUBLIC_REFUSAL
    assert receiver.requests == []


def test_a_name_resolving_to_a_private_address_is_refused_on_configure_with_the_test_settings(alice, resolver):
    resolver.table[RECEIVER_HOST] = "192.168.1.1"
    response = alice.post("/webhooks/configure", json={"endpoint_url": f"https://{RECEIVER_HOST}/hook"})
    assert response.status_code == 400 and response.json["details"]["field"] == "endpoint_url"


def test_without_the_loopback_allowance_the_local_receiver_is_refused(app, alice, certificates, resolver):
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        app.config["WEBHOOK_TEST_ALLOW_LOOPBACK"] = False
        refused = alice.post("/webhooks/configure", json={"endpoint_url": receiver.url})
        event, attempt = deliver_one(alice.account_id)
    assert refused.status_code == 400 and refused.json["details"]["field"] == "endpoint_url"
    assert_failed_and_retried(event, attempt)
    assert attempt.error == NOT_PUBLIC_REFUSAL
    assert receiver.requests == []


def app_with(tmp_path, **settings):
    return create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path}/t.db", **settings})


@pytest.mark.parametrize("name", ["WEBHOOK_TEST_CA_BUNDLE", "WEBHOOK_TEST_ALLOW_LOOPBACK"])
def test_the_test_settings_are_refused_outside_testing(tmp_path, certificates, name):
    value = {"WEBHOOK_TEST_CA_BUNDLE": certificates.ca_file, "WEBHOOK_TEST_ALLOW_LOOPBACK": True}[name]
    with pytest.raises(ConfigError, match=f"{name} is a test setting"):
        app_with(tmp_path, TESTING=False, **{name: value})


def test_the_test_settings_are_not_read_from_the_environment(tmp_path, certificates, monkeypatch):
    monkeypatch.setenv("WEBHOOK_TEST_CA_BUNDLE", certificates.ca_file)
    monkeypatch.setenv("WEBHOOK_TEST_ALLOW_LOOPBACK", "1")
    config = app_with(tmp_path).config
    assert config["WEBHOOK_TEST_CA_BUNDLE"] is None and config["WEBHOOK_TEST_ALLOW_LOOPBACK"] is False


@pytest.mark.parametrize("value", [False, "", "0", "false", "none", "/nonexistent/ca.pem", "EMPTY", "DIRECTORY"])
def test_the_ca_setting_cannot_switch_verification_off(tmp_path, value):
    (tmp_path / "empty.pem").write_text("")
    value = {"EMPTY": str(tmp_path / "empty.pem"), "DIRECTORY": str(tmp_path)}.get(value, value)
    with pytest.raises(ConfigError, match="WEBHOOK_TEST_CA_BUNDLE="):
        app_with(tmp_path, WEBHOOK_TEST_CA_BUNDLE=value)


def test_the_sender_verifies_with_the_system_cas_or_the_test_bundle_never_without(tmp_path, certificates):
    assert Transport.from_config(app_with(tmp_path).config).verify is True
    bundled = app_with(tmp_path, WEBHOOK_TEST_CA_BUNDLE=certificates.ca_file).config
    assert Transport.from_config(bundled).verify == certificates.ca_file


def test_an_endpoint_that_drips_its_headers_over_tls_is_cut_off_at_the_timeout(alice, app, certificates, resolver):
    """Over TLS each read is bounded by the socket timeout too, not the try (the handshake, on the other hand, is
    bounded as a whole by Python's ssl module)."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 1.0
    with Dripper(certificates) as dripper:
        configure(alice, dripper.url)
        assert_cut_off_at_the_timeout(alice.account_id)


def test_a_connection_back_in_its_pool_outlives_the_deadline_of_the_try_that_used_it(alice, app, certificates,
                                                                                     resolver):
    """The deadline's watcher stops watching a connection once its try gives it back: kept alive, the next try
    uses it (one handshake), instead of finding it shut at the first try's deadline."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 1.0  # a handshake's time on a loaded machine
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        first = deliver_one(alice.account_id)[1].status
        time.sleep(1.5)
        second = deliver_one(alice.account_id)[1].status
    assert [first, second] == ["succeeded", "succeeded"] and receiver.server.handshakes == 1


def test_a_slow_name_lookup_is_waited_for_within_the_deadline(alice, app, certificates, resolver):
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 5.0
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        resolver.slow[RECEIVER_HOST] = 0.3
        event, attempt = deliver_one(alice.account_id)
    assert attempt.status == "succeeded" and event.delivery_status == "succeeded"
    assert receiver.requests[0].headers["Host"] == f"{RECEIVER_HOST}:{receiver.port}"


def test_a_name_lookup_past_the_deadline_ends_the_try_at_the_deadline(alice, app, certificates, resolver):
    """The lookup was outside the try's deadline: a resolver that does not answer held a sender for its own timeouts
    (seconds a server and try) on top of the try's."""
    app.config["WEBHOOK_TIMEOUT_SECONDS"] = 0.5
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        resolver.slow[RECEIVER_HOST] = 5.0
        event, attempt = deliver_one(alice.account_id)
    assert_failed_and_retried(event, attempt)
    assert attempt.error == "timeout: no answer within 0.5 s" and attempt.duration_ms < 4000
    assert receiver.requests == []


def test_a_names_checked_address_serves_the_tries_of_a_few_seconds_then_is_looked_up_again(alice, app, certificates,
                                                                                           resolver, monkeypatch):
    """A lookup, in a thread of its own, for every try cost the sender a third of its rate (bench_deliveries): the
    checked address serves CHECKED_ADDRESS_SECONDS of tries; then the name is looked up, and checked, again."""
    from app.services import transport
    lookups = []
    real = resolver.__call__
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda host, *args, **kwargs: lookups.append(host) or real(host, *args, **kwargs))
    with Receiver(certificates=certificates) as receiver:
        configure(alice, receiver.url)
        lookups.clear()
        outcomes = [deliver_one(alice.account_id)[1].status for _ in range(3)]
        assert outcomes == ["succeeded"] * 3 and lookups.count(RECEIVER_HOST) == 1
        for session in transport.transport_for(app)._sessions.values():  # its time is up
            for adapter in session.adapters.values():
                adapter._checked = {key: (0, *rest) for key, (_until, *rest) in adapter._checked.items()}
        resolver.table[RECEIVER_HOST] = "10.0.0.7"  # and the name now points at a private address
        event, attempt = deliver_one(alice.account_id)
    assert_failed_and_retried(event, attempt)
    assert attempt.error == NOT_PUBLIC_REFUSAL
