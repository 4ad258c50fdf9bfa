"""Signatures as the spec states them, checked against an independent HMAC written here from RFC 2104
(no `hmac` module), on the raw bytes the receiver got; rotation overlap headers."""
import hashlib
import http.client
import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.extensions import db
from app.models import Event
from app.services import outbox
from app.worker.deliveries import deliver_due
from app.services.transport import Outgoing, sign, signed_headers
from tests.webhook_helpers import (LOCAL_RECEIVER_CONFIG, ROOT, Clock, Receiver, Reply, configure, load_script,
                                   record_events)


def reference_hmac_sha256_hex(key: bytes, message: bytes) -> str:
    """RFC 2104 by hand: H((K ^ opad) || H((K ^ ipad) || m))."""
    block = 64
    if len(key) > block:
        key = hashlib.sha256(key).digest()
    key = key.ljust(block, b"\0")
    inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in key) + message).digest()
    return hashlib.sha256(bytes(byte ^ 0x5C for byte in key) + inner).hexdigest()


def reference_signature(secret: str, timestamp: str, raw_body: bytes) -> str:
    return reference_hmac_sha256_hex(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + raw_body)


@pytest.fixture
def app_config():
    return LOCAL_RECEIVER_CONFIG


# Inputs checked against the reference implementation above; the first also has a digest from OpenSSL.
VECTORS = [
    ("whsec_test", 1700000000000, b'{"id":"evt_1"}'),
    ("whsec_" + "k" * 80, 1, b""),  # a key longer than the SHA-256 block
    ("whsec_MfKQ9r2LvX", 1767225600123, '{"name":"Zoë Ångström","emoji":"✓"}'.encode("utf-8")),
]


@pytest.mark.parametrize("secret, timestamp, body", VECTORS)
def test_signatures_match_an_independent_implementation(secret, timestamp, body):
    assert sign(secret, timestamp, body) == reference_signature(secret, str(timestamp), body)


def test_a_vector_matches_openssl():
    # printf '%s' '1700000000000.{"id":"evt_1"}' | openssl dgst -sha256 -hmac whsec_test
    expected = "f510dfdb0b01915750c36f3e15401a7895306243fa607a5cba4496ce6c3a0ea3"
    assert sign("whsec_test", 1700000000000, b'{"id":"evt_1"}') == expected
    assert reference_signature("whsec_test", "1700000000000", b'{"id":"evt_1"}') == expected


def test_headers_carry_id_attempt_timestamp_and_both_signatures():
    outgoing = Outgoing("evt_1", "https://example.com", b"{}", 3, "whsec_new", "whsec_old")
    headers = signed_headers(outgoing, 1234)
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Webhook-Id"] == "evt_1"
    assert headers["X-Webhook-Attempt"] == "3"
    assert headers["X-Webhook-Timestamp"] == "1234"
    assert headers["X-Webhook-Signature"] == reference_signature("whsec_new", "1234", b"{}")
    assert headers["X-Webhook-Signature-Previous"] == reference_signature("whsec_old", "1234", b"{}")
    assert "X-Webhook-Signature-Previous" not in signed_headers(
        Outgoing("evt_1", "https://example.com", b"{}", 1, "whsec_new"), 1234)


def test_a_delivery_is_signed_over_the_exact_stored_bytes(alice):
    with Receiver() as receiver:
        secret = configure(alice, receiver.url)["secret"]
        [event_id] = record_events(alice.account_id, data={"note": "Zoë → CTO ✓", "nested": {"b": 1, "a": 2}})
        before_ms = int(time.time() * 1000)
        deliver_due()
    [request] = receiver.requests
    headers = request.headers
    assert headers["X-Webhook-Signature"] == reference_signature(secret, headers["X-Webhook-Timestamp"], request.body)
    assert request.body == db.session.get(Event, event_id).body.encode("utf-8")
    assert before_ms - 1000 <= int(headers["X-Webhook-Timestamp"]) <= int(time.time() * 1000)
    assert headers["X-Webhook-Id"] == event_id == json.loads(request.body)["id"]
    assert headers["X-Webhook-Attempt"] == "1"
    assert headers["Content-Type"] == "application/json"
    assert "X-Webhook-Signature-Previous" not in headers
    envelope = request.event
    assert envelope["type"] == "contact.position_changed" and isinstance(envelope["created"], int)
    assert set(envelope["metadata"]) == {"subscription_id", "detected_at", "custom_metadata"}


def test_each_try_gets_a_fresh_timestamp_and_the_same_event_id(alice, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(outbox, "utcnow", clock)
    replies = iter([Reply(status=500), Reply(status=200)])
    with Receiver(lambda received: next(replies)) as receiver:
        secret = configure(alice, receiver.url)["secret"]
        record_events(alice.account_id)
        deliver_due()
        time.sleep(0.005)  # milliseconds must differ between the two tries
        clock.advance(10)
        deliver_due()
    first, second = receiver.requests
    assert first.headers["X-Webhook-Id"] == second.headers["X-Webhook-Id"]
    assert first.body == second.body
    assert [first.headers["X-Webhook-Attempt"], second.headers["X-Webhook-Attempt"]] == ["1", "2"]
    assert first.headers["X-Webhook-Timestamp"] != second.headers["X-Webhook-Timestamp"]
    for request in (first, second):
        assert request.headers["X-Webhook-Signature"] == reference_signature(
            secret, request.headers["X-Webhook-Timestamp"], request.body)


def test_rotation_signs_with_both_secrets_for_24_hours_then_only_the_new_one(alice, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(outbox, "utcnow", clock)
    with Receiver() as receiver:
        old_secret = configure(alice, receiver.url)["secret"]
        new_secret = alice.post("/webhooks/rotate-secret").json["secret"]
        record_events(alice.account_id)
        deliver_due()
        clock.advance(23 * 3600)
        record_events(alice.account_id)
        deliver_due()
        clock.advance(3600 + 1)
        record_events(alice.account_id)
        deliver_due()
    within, near_end, after = receiver.requests
    for request in (within, near_end):
        timestamp = request.headers["X-Webhook-Timestamp"]
        assert request.headers["X-Webhook-Signature"] == reference_signature(new_secret, timestamp, request.body)
        assert request.headers["X-Webhook-Signature-Previous"] == reference_signature(old_secret, timestamp,
                                                                                      request.body)
    assert after.headers["X-Webhook-Signature"] == reference_signature(
        new_secret, after.headers["X-Webhook-Timestamp"], after.body)
    assert "X-Webhook-Signature-Previous" not in after.headers


def test_the_test_send_is_signed_too(alice):
    with Receiver() as receiver:
        secret = configure(alice, receiver.url)["secret"]
        alice.post("/webhooks/test")
    [request] = receiver.requests
    assert request.headers["X-Webhook-Signature"] == reference_signature(
        secret, request.headers["X-Webhook-Timestamp"], request.body)
    assert request.headers["X-Webhook-Id"].startswith("evt_test_")
    assert set(request.event) == {"id", "type", "created", "data"} and set(request.event["data"]) == {"message"}


def test_the_receiver_script_accepts_fresh_signed_bodies_and_rejects_the_rest():
    receiver = load_script("receiver")
    body, now_ms = b'{"id":"evt_1","type":"test"}', 1_800_000_000_000

    def headers(timestamp, secret="whsec_a", name="X-Webhook-Signature"):
        return {"X-Webhook-Timestamp": str(timestamp), name: reference_signature(secret, str(timestamp), body)}

    assert receiver.verify(headers(now_ms), body, ["whsec_a"], now_ms)["id"] == "evt_1"
    assert receiver.verify(headers(now_ms - 299_000), body, ["whsec_a"], now_ms)["type"] == "test"
    assert receiver.verify(headers(now_ms, "whsec_old", "X-Webhook-Signature-Previous"), body,
                           ["whsec_new", "whsec_old"], now_ms)
    for bad, status in ((headers(now_ms - 301_000), 400), (headers(now_ms, "whsec_b"), 401),
                        ({"X-Webhook-Signature": "00"}, 400)):
        with pytest.raises(receiver.Rejected) as rejected:
            receiver.verify(bad, body, ["whsec_a"], now_ms)
        assert rejected.value.status == status
    with pytest.raises(receiver.Rejected):  # a re-serialised body no longer matches
        receiver.verify(headers(now_ms), json.dumps(json.loads(body)).encode(), ["whsec_a"], now_ms)


@pytest.mark.parametrize("timestamp, signature, status",
                         [("\u00b2", "00", 400), ("1" * 5000, "00", 400), ("1800000000000", "\u00e9", 401)])
def test_the_receiver_script_refuses_headers_it_cannot_read(timestamp, signature, status):
    """A timestamp of `²` or of 5,000 digits (str.isdigit takes them, int() does not) or a signature of `é`
    (compare_digest refuses text beyond ASCII) raised in the handler: a traceback and the connection closed without
    an answer (security walk)."""
    receiver = load_script("receiver")
    headers = {"X-Webhook-Timestamp": timestamp, "X-Webhook-Signature": signature}
    with pytest.raises(receiver.Rejected) as rejected:
        receiver.verify(headers, b'{"id":"evt_1"}', ["whsec_a"], 1_800_000_000_000)
    assert rejected.value.status == status


@pytest.mark.parametrize("body", [b"[1]", b'"evt_1"', b"{}", b'{"id": 1}'])
def test_the_receiver_script_refuses_a_signed_body_that_is_not_an_event(body):
    """A signed JSON body that was not an object (`[1]`) raised AttributeError in the handler: a traceback and the
    connection closed without an answer; one without an id was remembered as the id None (CRM walk)."""
    receiver = load_script("receiver")
    now_ms = 1_800_000_000_000
    headers = {"X-Webhook-Timestamp": str(now_ms), "X-Webhook-Signature": reference_signature("whsec_a", str(now_ms),
                                                                                              body)}
    with pytest.raises(receiver.Rejected) as rejected:
        receiver.verify(headers, body, ["whsec_a"], now_ms)
    assert rejected.value.status == 400


def test_the_receiver_script_prints_one_whole_line_per_event_under_concurrent_deliveries():
    """print() wrote the line and its newline apart: two threads' events came out as one line (webhook walk)."""
    receiver = load_script("receiver")

    class SlowOutput(io.StringIO):
        def write(self, text):
            time.sleep(0.001)  # a thread switch between the writes, as a busy terminal or pipe makes
            return super().write(text)
    out, secret = SlowOutput(), "whsec_a"
    server = receiver.Server(("127.0.0.1", 0), receiver.handler_for([secret], receiver.SeenIds(), out))
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def post(number):
        body, timestamp = json.dumps({"id": f"evt_{number}", "type": "test"}).encode(), str(int(time.time() * 1000))
        connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        connection.request("POST", "/", body, {"X-Webhook-Timestamp": timestamp, "Content-Type": "application/json",
                                               "X-Webhook-Signature": reference_signature(secret, timestamp, body)})
        assert connection.getresponse().status == 200
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(post, range(64)))
    finally:
        server.shutdown()
        server.server_close()
    printed = [json.loads(line) for line in out.getvalue().splitlines()]
    assert sorted(event["id"] for event in printed) == sorted(f"evt_{number}" for number in range(64))


def test_the_receiver_script_prints_each_event_once(alice):
    configure(alice, "http://127.0.0.1:9/placeholder")
    secret = alice.post("/webhooks/rotate-secret").json["secret"]
    script = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "receiver.py"), "--port", "0",
                               "--secret", secret], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = re.search(r":(\d+)/", script.stderr.readline()).group(1)
        alice.put("/webhooks/configure", json={"endpoint_url": f"http://127.0.0.1:{port}/webhooks"})
        [event_id] = record_events(alice.account_id)
        deliver_due()
        alice.post(f"/events/{event_id}/redeliver")
        deliver_due()
        assert alice.post("/webhooks/test").json["delivered"] is True
    finally:
        script.terminate()
        output = script.communicate(timeout=10)[0]
    printed = [json.loads(line) for line in output.splitlines()]
    assert [event["id"] for event in printed[:1]] == [event_id]
    assert [event["type"] for event in printed] == ["contact.position_changed", "test"]
    assert db.session.get(Event, event_id).attempt_count == 2


@pytest.mark.parametrize("length", ["abc", "-1", b"\xb2"])
def test_the_receiver_script_answers_a_malformed_content_length_with_400(length):
    """int() raised on `abc` (a traceback, the connection dropped unanswered); `-1` read until the client closed."""
    receiver = load_script("receiver")
    server = receiver.Server(("127.0.0.1", 0), receiver.handler_for(["whsec_a"], receiver.SeenIds(), io.StringIO()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        connection.putrequest("POST", "/")
        connection.putheader("Content-Length", length)
        connection.endheaders()
        assert connection.getresponse().status == 400
    finally:
        server.shutdown()
        server.server_close()


def test_the_receiver_script_says_in_one_line_that_it_cannot_listen():
    """A port in use (the quick start's 9000, say) printed a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        script = subprocess.run([sys.executable, str(ROOT / "scripts" / "receiver.py"), "--secret", "whsec_a",
                                 "--port", str(taken.getsockname()[1])], capture_output=True, text=True, timeout=30)
    assert script.returncode == 1
    assert script.stderr.startswith("receiver.py: cannot listen on 127.0.0.1:") and "Traceback" not in script.stderr
    assert len(script.stderr.splitlines()) == 1
