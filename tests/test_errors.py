"""One error shape everywhere (contract §2), HTTP basics (contract §1): 404/405/413/500, bad JSON,
X-Request-Id, /healthz and both prefixes."""
import io
import re

import pytest
from flask import request
from sqlalchemy import func, select

from app.extensions import db
from app.models import Subscription
from app.services import subscriptions

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def _assert_error_shape(response, status, code):
    assert response.status_code == status
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert body["error"] == code
    assert isinstance(body["message"], str) and body["message"]
    assert ISO_Z.match(body["timestamp"])
    assert body["request_id"] == response.headers["X-Request-Id"]
    assert set(body) <= {"error", "message", "details", "timestamp", "request_id"}
    assert "<html" not in response.get_data(as_text=True).lower()
    return body


def _subscription_count():
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(Subscription))


# --- 404 / 405 / 413 / 500 -------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/nope", "/api/v1/nope", "/api/v2/subscriptions", "/v1/subscriptions/a/b/c",
                                  "/api/v1/subscriptions/x/pause/now", "/favicon.ico"])
def test_unknown_routes_are_json_404(anon, path):
    body = _assert_error_shape(anon.client.get(path), 404, "NOT_FOUND")
    assert "details" not in body


def test_unknown_route_with_a_key_is_json_404(alice):
    _assert_error_shape(alice.get("/does-not-exist"), 404, "NOT_FOUND")


@pytest.mark.parametrize("method, path", [("GET", "/api/v1//account"), ("POST", "/api/v1//subscriptions"),
                                          ("GET", "/v1/subscriptions//x"), ("GET", "/api/v1/subscriptions/")])
def test_a_path_with_an_empty_segment_is_json_404_not_a_redirect(alice, method, path):
    """Werkzeug merged the slashes with a 308 in HTML whose Location came from the request's Host header (walk)."""
    response = alice.client.open(path, method=method, headers={"X-API-Key": alice.key, "Host": "evil.example"},
                                 json={"entity_type": "contact", "network_id": "jane"})
    _assert_error_shape(response, 404, "NOT_FOUND")
    assert "Location" not in response.headers and _subscription_count() == 0


def test_an_error_after_the_view_is_a_json_500_internal_error(app, alice, monkeypatch):
    """Flask hands an exception of an after-request hook to the HTTP 500 handler, which answered HTTP_ERROR (walk:
    a rate-limit storage failing there)."""
    monkeypatch.setitem(app.config, "PROPAGATE_EXCEPTIONS", False)  # as served (TESTING raises them)

    @app.after_request
    def fail_once(response):
        if request.path.endswith("/account") and not getattr(fail_once, "failed", False):
            fail_once.failed = True
            raise RuntimeError("after the view")
        return response
    body = _assert_error_shape(alice.get("/account"), 500, "INTERNAL_ERROR")
    assert body["message"] == "An unexpected error occurred. Quote the request id to support."


@pytest.mark.parametrize("method, path", [("PUT", "/subscriptions"), ("DELETE", "/account"),
                                          ("POST", "/subscriptions/export"), ("PUT", "/subscriptions/bulk"),
                                          ("PUT", "/account/api-keys"), ("POST", "/subscriptions/sub_x")])
def test_wrong_method_is_json_405_with_allow(alice, method, path):
    response = alice.request(method, path)
    _assert_error_shape(response, 405, "METHOD_NOT_ALLOWED")
    assert response.headers["Allow"]
    assert method not in response.headers["Allow"].split(", ")


def test_body_over_1_mib_is_413_and_creates_nothing(alice):
    padding = "x" * (1024 * 1024)
    response = alice.post("/subscriptions", data='{"entity_type": "contact", "network_id": "jane", "p": "'
                          + padding + '"}', content_type="application/json")
    body = _assert_error_shape(response, 413, "PAYLOAD_TOO_LARGE")
    assert body["details"] == {"limit_bytes": 1048576}
    assert _subscription_count() == 0


@pytest.mark.parametrize("size", [1024 * 1024 + 1, 1024 * 1024])
def test_a_streamed_body_is_held_to_the_same_1_mib(alice, size):
    """Transfer-Encoding: chunked, no Content-Length: Werkzeug reads such a body only up to the limit."""
    head = '{"entity_type": "contact", "network_id": "streamed", "custom_metadata": {"k": "'
    body = (head + "x" * (size - len(head) - 3) + '"}}').encode()
    assert len(body) == size
    response = alice.client.post("/api/v1/subscriptions", input_stream=io.BytesIO(body),
                                 headers={**alice.headers, "Content-Type": "application/json",
                                          "Transfer-Encoding": "chunked"},
                                 environ_overrides={"wsgi.input_terminated": True})  # as gunicorn says of chunked
    if size > 1024 * 1024:
        assert _assert_error_shape(response, 413, "PAYLOAD_TOO_LARGE")["details"] == {"limit_bytes": 1048576}
        assert _subscription_count() == 0
    else:  # exactly at the limit: read whole, then refused by the metadata rules, not by its size
        assert response.status_code == 400 and response.get_json()["error"] == "VALIDATION_ERROR"
        assert response.get_json()["details"]["field"].startswith("custom_metadata")


def test_bulk_body_over_1_mib_is_413(alice):
    items = [{"entity_type": "contact", "network_id": f"p{n}", "custom_metadata": {"k": "v" * 500}}
             for n in range(100)]
    items[0]["custom_metadata"] = {f"k{n}": "v" * 500 for n in range(20)}
    big = {"subscriptions": items, "pad": "x" * (1024 * 1024)}
    _assert_error_shape(alice.post("/subscriptions/bulk", json=big), 413, "PAYLOAD_TOO_LARGE")


def test_body_just_under_the_limit_is_read(alice):
    body = '{"entity_type": "contact", "network_id": "jane", "p": "' + "x" * (1024 * 1024 - 100) + '"}'
    response = alice.post("/subscriptions", data=body, content_type="application/json")
    assert _assert_error_shape(response, 400, "VALIDATION_ERROR")["details"]["field"] == "p"


def test_unexpected_errors_are_500_without_a_stack_trace(alice, monkeypatch, caplog):
    def explode(*args, **kwargs):
        raise RuntimeError("secret internal detail /work/main/app/services/subscriptions.py")

    monkeypatch.setattr(subscriptions, "list_page_json", explode)
    response = alice.get("/subscriptions")
    body = _assert_error_shape(response, 500, "INTERNAL_ERROR")
    assert "details" not in body
    text = response.get_data(as_text=True)
    assert "Traceback" not in text and "secret internal detail" not in text and "RuntimeError" not in text
    assert body["request_id"] in caplog.text  # logged with the request id for support


def test_500_in_a_write_changes_nothing(alice, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(subscriptions, "first_check_at", explode)
    _assert_error_shape(alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"}),
                        500, "INTERNAL_ERROR")
    assert _subscription_count() == 0


# --- bad JSON --------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, content_type", [
    ("{", "application/json"),
    ("{'single': 'quotes'}", "application/json"),
    ("", "application/json"),
    ("null", "application/json"),
    ("[1, 2]", "application/json"),
    ('"a string"', "application/json"),
    ("3.14", "application/json"),
    ("NaN", "application/json"),
    (b"\x80\x81", "application/json"),
    ("entity_type=contact&network_id=jane", "application/x-www-form-urlencoded"),
])
def test_bodies_that_are_not_a_json_object_are_validation_errors(alice, raw, content_type):
    response = alice.post("/subscriptions", data=raw, content_type=content_type)
    body = _assert_error_shape(response, 400, "VALIDATION_ERROR")
    assert body["details"]["field"] == "body"
    assert body["details"]["errors"] == [{"field": "body", "message": body["message"]}]
    assert _subscription_count() == 0


def _bodyless_subscription(tenant):
    return tenant.post("/subscriptions", json={"entity_type": "contact", "network_id": "bodyless"}).json["id"]


@pytest.mark.parametrize("data", ['{"force": true}', "not json", "[1]"])
def test_a_view_that_takes_no_body_refuses_one_with_fields_and_changes_nothing(alice, data):
    subscription_id = _bodyless_subscription(alice)
    for method, path in [("POST", f"/subscriptions/{subscription_id}/pause"),
                         ("DELETE", f"/subscriptions/{subscription_id}")]:
        response = alice.request(method, path, data=data, content_type="application/json")
        body = _assert_error_shape(response, 400, "VALIDATION_ERROR")
        assert body["details"]["field"] == ("force" if data.startswith("{") else "body")
    assert alice.get(f"/subscriptions/{subscription_id}").json["status"] == "active"


@pytest.mark.parametrize("data", ["", "{}", "  "])
def test_a_view_that_takes_no_body_accepts_an_empty_one(alice, data):
    response = alice.post(f"/subscriptions/{_bodyless_subscription(alice)}/pause", data=data,
                          content_type="application/json")
    assert response.status_code == 200 and response.json["status"] == "paused"


def test_a_body_without_a_valid_key_is_a_401_first(anon):
    response = anon.post("/subscriptions/sub_x/pause", json={"force": True})
    _assert_error_shape(response, 401, "UNAUTHORIZED")


def test_validation_error_details_carry_field_value_and_all_errors(alice):
    response = alice.post("/subscriptions", json={"entity_type": "robot", "network_id": "ok-id", "x": 1})
    body = _assert_error_shape(response, 400, "VALIDATION_ERROR")
    assert body["details"]["field"] == "entity_type"
    assert body["details"]["value"] == "robot"
    assert {"field": "x", "message": "Unknown field."} in body["details"]["errors"]
    assert all(set(error) == {"field", "message"} for error in body["details"]["errors"])


def test_json_with_a_charset_is_accepted(alice):
    response = alice.post("/subscriptions", data='{"entity_type": "contact", "network_id": "jané"}'.encode(),
                          content_type="application/json; charset=utf-8")
    assert response.status_code == 201


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "text/plain", None])
def test_a_json_body_is_read_whatever_its_content_type(alice, content_type):
    """curl -d sends a form Content-Type: the body is still the JSON it holds (README, API decisions)."""
    headers = {"Content-Type": content_type} if content_type else {}
    response = alice.post("/subscriptions", data='{"entity_type": "contact", "network_id": "form-typed"}',
                          headers=headers)
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["network_id"] == "form-typed" and _subscription_count() == 1


# --- X-Request-Id ----------------------------------------------------------------------------------

def test_every_response_carries_a_generated_request_id(alice, anon):
    ids = {alice.get("/account").headers["X-Request-Id"], anon.get("/account").headers["X-Request-Id"],
           anon.client.get("/healthz").headers["X-Request-Id"], anon.client.get("/nope").headers["X-Request-Id"],
           anon.client.get("/api/v1/openapi.json").headers["X-Request-Id"]}
    assert len(ids) == 5 and all(ids)


def test_a_sane_client_request_id_is_echoed(alice):
    response = alice.get("/account", headers={"X-Request-Id": "client-123.abc:XYZ_9"})
    assert response.headers["X-Request-Id"] == "client-123.abc:XYZ_9"
    failed = alice.get("/subscriptions/sub_nope", headers={"X-Request-Id": "trace-42"})
    assert failed.headers["X-Request-Id"] == "trace-42" == failed.get_json()["request_id"]


@pytest.mark.parametrize("sent", ["x" * 129, "has space", "new\\nline", "<script>", "", "ünï"])
def test_an_insane_client_request_id_is_replaced(alice, sent):
    response = alice.get("/account", headers={"X-Request-Id": sent})
    assert response.headers["X-Request-Id"] != sent
    assert response.headers["X-Request-Id"].startswith("req_")


# --- prefixes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["/api/v1", "/v1"])
def test_both_prefixes_serve_the_same_routes(alice, prefix):
    alice.prefix = prefix
    created = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "prefixed"})
    assert created.status_code == 201
    assert alice.get(f"/subscriptions/{created.get_json()['id']}").status_code == 200
    assert alice.get("/account/api-keys").status_code == 200
    assert alice.client.get(f"{prefix}/openapi.json").status_code == 200


def test_timestamps_are_utc_with_z(alice):
    created = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"}).get_json()
    assert ISO_Z.match(created["created_at"]) and ISO_Z.match(created["updated_at"])
    account = alice.get("/account").get_json()
    assert ISO_Z.match(account["created_at"]) and ISO_Z.match(account["trial_ends_at"])


def test_options_answers_the_allowed_methods_without_a_key(anon):
    """With no content: it was a 200 whose empty body was typed text/html (API walk)."""
    response = anon.request("OPTIONS", "/subscriptions")
    assert response.status_code == 204 and response.get_data() == b""
    assert "Content-Type" not in response.headers
    assert {"GET", "POST"} <= set(response.headers["Allow"].split(", "))
