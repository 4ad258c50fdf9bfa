"""What gunicorn answers itself (app/gunicorn_limits.py): JSON, never HTML, and no secret in its log."""
import json
import socket
from urllib.parse import urlsplit

import pytest
import requests

from app.gunicorn_limits import LIMIT_REQUEST_LINE, json_error
from tests.served import served  # noqa: F401 - the fixture


def raw_request(base, request: bytes) -> tuple:
    """(status, headers text, body) of one hand-written HTTP/1.1 request."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), head.decode("latin-1"), body


def test_a_request_line_past_the_limit_is_a_json_414(served):
    path = "/api/v1/subscriptions/" + "x" * LIMIT_REQUEST_LINE
    status, head, body = raw_request(served.base, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 414 and "Content-Type: application/json" in head
    assert json.loads(body)["error"] == "URI_TOO_LONG"


def test_a_request_line_within_the_limit_reaches_the_app(served):
    path = "/api/v1/subscriptions/" + "x" * 6000  # past gunicorn's default 4094
    response = requests.get(served.base + path, headers={"X-API-Key": served.key})
    assert response.status_code == 404 and response.json()["error"] == "NOT_FOUND"


@pytest.mark.parametrize("headers", ["X-Big: " + "a" * 9000 + "\r\n",
                                     "".join(f"X-H{n}: v\r\n" for n in range(150))])
def test_headers_past_the_limits_are_a_json_error(served, headers):
    request = f"GET /api/v1/account HTTP/1.1\r\nHost: x\r\n{headers}\r\n"
    status, head, body = raw_request(served.base, request.encode())
    assert status in (400, 431) and "Content-Type: application/json" in head
    answer = json.loads(body)
    assert set(answer) == {"error", "message", "timestamp", "request_id"} and "<" not in answer["message"]


def test_a_garbled_request_line_is_a_json_400(served):
    status, head, body = raw_request(served.base, b"GET /a b c d\r\n\r\n")
    assert status == 400 and json.loads(body)["error"] == "BAD_REQUEST"


def test_keys_in_the_url_never_reach_the_access_log(served):
    leaked = [f"/api/v1/account?api_key={served.key}", f"/api/v1/events?x-api-key={served.key}&limit=1",
              f"/api/v1/{served.key}"]
    for path in leaked:
        requests.get(served.base + path, headers={"X-API-Key": served.key})
    too_long = f"/api/v1/account?api_key={served.key}&pad=" + "p" * LIMIT_REQUEST_LINE  # refused by gunicorn
    raw_request(served.base, f"GET {too_long} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    requests.get(served.base + "/api/v1/account", headers={"X-API-Key": served.key})  # flushes the log
    log = served.log()
    assert "/api/v1/account?api_key=[redacted]" in log
    assert served.key not in log and served.key[-32:] not in log


def test_the_json_error_is_a_complete_http_response():
    response = json_error(414, "URI Too Long")
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 URI Too Long\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body)["error"] == "URI_TOO_LONG"
    # contract §1: every response carries X-Request-Id, these too; the same id as the body's
    assert f"X-Request-Id: {json.loads(body)['request_id']}\r\n".encode() in head + b"\r\n"


def test_the_json_error_carries_the_headers_of_every_answer_outside_the_dashboard():
    """README: every answer outside the dashboard says nosniff and a policy under which nothing runs; gunicorn's own
    answers (a request line or headers it refuses) said neither."""
    from app.api.http import NOTHING_RUNS
    head = json_error(431, "Request Header Fields Too Large").partition(b"\r\n\r\n")[0].decode()
    assert "\r\nX-Content-Type-Options: nosniff\r\n" in head
    assert f"\r\nContent-Security-Policy: {NOTHING_RUNS}\r\n" in head
