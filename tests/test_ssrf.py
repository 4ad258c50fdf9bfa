"""The SSRF guard: every non-public class refused when configuring and again at send time, against the
address actually connected to (DNS rebinding: the name resolves publicly at configure time, privately
at send time). No test traffic leaves 127.0.0.1: refused sends never connect."""
import json
import logging
import socket

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import DeliveryAttempt
from app.worker.deliveries import deliver_due
from scripts.tls_receiver import StaticResolver
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, configure, record_events

PUBLIC_ADDRESS = "93.184.216.34"
FORBIDDEN = {
    "loopback": "127.0.0.1",
    "loopback-other": "127.8.9.10",
    "private-10": "10.1.2.3",
    "private-172": "172.16.5.4",
    "private-192": "192.168.1.1",
    "cgnat": "100.64.0.1",
    "link-local": "169.254.10.10",
    "cloud-metadata": "169.254.169.254",
    "multicast": "224.0.0.1",
    "reserved": "240.0.0.1",
    "broadcast": "255.255.255.255",
    "unspecified": "0.0.0.0",
    "benchmarking": "198.18.0.1",
    "documentation": "192.0.2.1",
    "ipv6-loopback": "::1",
    "ipv6-unspecified": "::",
    "ipv6-link-local": "fe80::1",
    "ipv6-unique-local": "fc00::1",
    "ipv6-multicast": "ff02::1",
    "ipv4-mapped-loopback": "::ffff:127.0.0.1",
    "ipv4-mapped-private": "::ffff:10.0.0.1",
    "ipv4-mapped-metadata": "::ffff:169.254.169.254",
    "nat64-of-private": "64:ff9b::a00:1",
}


def literal_host(address):
    return f"[{address}]" if ":" in address else address


@pytest.fixture
def dns(monkeypatch):
    fake = StaticResolver(socket.getaddrinfo)  # names pointed anywhere without a network
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


def refused(response):
    return (response.status_code == 400 and response.json["error"] == "VALIDATION_ERROR"
            and response.json["details"]["field"] == "endpoint_url")


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_ip_literals_of_every_non_public_class_are_refused_on_configure(alice, name):
    url = f"https://{literal_host(FORBIDDEN[name])}/hook"
    assert refused(alice.post("/webhooks/configure", json={"endpoint_url": url}))


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_names_resolving_to_every_non_public_class_are_refused_on_configure(alice, dns, name):
    dns.table["hooks.example.com"] = FORBIDDEN[name]
    assert refused(alice.post("/webhooks/configure", json={"endpoint_url": "https://hooks.example.com/hook"}))


@pytest.mark.parametrize("url", ["https://localhost/hook", "https://LOCALHOST./hook", "https://api.localhost/x",
                                 "https://2130706433/hook", "https://0x7f.1/hook", "https://127.1/hook",
                                 "http://example.com/hook"])
def test_localhost_numeric_tricks_and_plain_http_are_refused(alice, url):
    assert refused(alice.post("/webhooks/configure", json={"endpoint_url": url}))


@pytest.mark.parametrize("url,message", [("https://hooks.example.com:0/hook", "not a valid URL"),
                                         ("https://user:secret@hooks.example.com/hook", "credentials"),
                                         ("https://user@hooks.example.com/hook", "credentials"),
                                         ("https://@hooks.example.com/hook", "credentials"),  # an empty user
                                         ("https://:@hooks.example.com/hook", "credentials")])
def test_port_zero_and_credentials_in_the_url_are_refused(alice, dns, url, message):
    """An empty user part (`https://@host/`) was configured: urllib3 reads it as no credentials (API walk)."""
    dns.table["hooks.example.com"] = PUBLIC_ADDRESS
    response = alice.post("/webhooks/configure", json={"endpoint_url": url})
    assert response.status_code == 400 and response.get_json()["details"]["field"] == "endpoint_url"
    assert message in response.get_json()["message"]
    assert alice.get("/webhooks/configure").status_code == 404  # nothing configured


def test_a_name_resolving_to_a_mix_is_refused_if_any_address_is_not_public(alice, dns, monkeypatch):
    real = dns.__call__

    def mixed(host, port, *args, **kwargs):
        if host == "mixed.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC_ADDRESS, 443)),
                    (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", 443))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", mixed)
    assert refused(alice.post("/webhooks/configure", json={"endpoint_url": "https://mixed.example.com/"}))


def test_public_and_not_yet_resolvable_names_are_accepted(alice, dns):
    dns.table["hooks.example.com"] = PUBLIC_ADDRESS
    dns.table["not-yet.example.com"] = None
    for url in ("https://hooks.example.com/hook", f"https://{PUBLIC_ADDRESS}/hook", "https://not-yet.example.com/"):
        assert alice.post("/webhooks/configure", json={"endpoint_url": url}).status_code in (200, 201), url


def test_put_is_guarded_too(alice, dns):
    dns.table["hooks.example.com"] = PUBLIC_ADDRESS
    configure(alice, "https://hooks.example.com/hook")
    assert refused(alice.put("/webhooks/configure", json={"endpoint_url": "https://169.254.169.254/latest"}))


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_dns_rebinding_to_every_non_public_class_is_refused_at_send_time(alice, dns, name):
    dns.table["hooks.example.com"] = PUBLIC_ADDRESS
    configure(alice, "https://hooks.example.com/hook")
    [event_id] = record_events(alice.account_id)
    dns.table["hooks.example.com"] = FORBIDDEN[name]
    assert deliver_due() == 1
    attempt = db.session.scalar(select(DeliveryAttempt).where(DeliveryAttempt.event_id == event_id))
    assert attempt.status == "failed" and attempt.response_status is None
    assert attempt.error.startswith("refused:") and "not a public address" in attempt.error
    assert attempt.next_attempt_at is not None  # an ordinary failure: retried, then failed
    assert attempt.request_headers is None  # nothing was sent


def test_a_refused_send_does_not_tell_the_account_the_address(alice, dns, caplog):
    """A name of the account's own, pointed after configure (by a CNAME) at an internal name, had the try's error say
    that name's internal address ("refused: 10.1.2.3 is not a public address"): the test send and the delivery log
    read internal DNS out to any account (security walk). The operator's log still names it."""
    dns.table["hooks.example.com"] = PUBLIC_ADDRESS
    configure(alice, "https://hooks.example.com/hook")
    dns.table["hooks.example.com"] = FORBIDDEN["private-10"]
    caplog.set_level(logging.INFO, logger="app.services.transport")
    answer = alice.post("/webhooks/test").json
    deliveries = alice.get("/webhooks/deliveries").json["data"]
    assert answer["delivered"] is False and answer["error"].startswith("refused:") and len(deliveries) == 1
    assert FORBIDDEN["private-10"] not in json.dumps([answer, deliveries])
    assert f"{FORBIDDEN['private-10']}, the address of hooks.example.com" in caplog.text


def test_rebinding_to_a_live_loopback_receiver_never_reaches_it(alice, app, dns):
    app.config["WEBHOOK_ALLOW_HTTP"] = True  # plain HTTP, so only the address guard stands in the way
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        dns.table["hooks.example.com"] = PUBLIC_ADDRESS
        configure(alice, f"http://hooks.example.com:{port}/hook")
        record_events(alice.account_id)
        dns.table["hooks.example.com"] = "127.0.0.1"
        deliver_due()
    assert receiver.requests == []


def test_a_plain_http_url_stored_earlier_is_refused_at_send_time(alice, app):
    app.config["WEBHOOK_ALLOW_HTTP"] = True
    configure(alice, f"http://{PUBLIC_ADDRESS}/hook")
    app.config["WEBHOOK_ALLOW_HTTP"] = False
    app.extensions.pop("webhook_transport", None)
    [event_id] = record_events(alice.account_id)
    deliver_due()
    attempt = db.session.scalar(select(DeliveryAttempt).where(DeliveryAttempt.event_id == event_id))
    assert attempt.error == "refused: http:// endpoints are not allowed" and attempt.request_headers is None


class TestDevelopmentSettings:
    @pytest.fixture
    def app_config(self):
        return LOCAL_RECEIVER_CONFIG

    def test_both_guards_relax_for_a_local_receiver(self, alice):
        with Receiver() as receiver:
            configure(alice, receiver.url)
            [event_id] = record_events(alice.account_id)
            deliver_due()
        assert receiver.event_ids == [event_id]


def test_site_local_ipv6_is_refused_on_configure(alice, dns):
    assert refused(configure_response(alice, "https://[fec0::1]/hook"))
    dns.table["old-site.example.com"] = "fec0::1"
    assert refused(configure_response(alice, "https://old-site.example.com/hook"))


@pytest.mark.parametrize("address", ["fec0::1", "400::1"])
def test_addresses_only_our_guard_knows_are_refused_at_send_time(alice, dns, address):
    """requests-hardened's own check lets site-local and reserved IPv6 through; the pinned address is checked
    with the same rule as on configure."""
    dns.table["hooks.example.com"] = PUBLIC_ADDRESS
    configure(alice, "https://hooks.example.com/hook")
    [event_id] = record_events(alice.account_id)
    dns.table["hooks.example.com"] = address
    assert deliver_due() == 1
    attempt = db.session.scalar(select(DeliveryAttempt).where(DeliveryAttempt.event_id == event_id))
    assert attempt.status == "failed" and attempt.response_status is None
    assert attempt.error.startswith("refused:")


def configure_response(tenant, url):
    return tenant.post("/webhooks/configure", json={"endpoint_url": url, "events": ["*"]})
