"""Webhook configuration: create/replace, read, update, delete, filters, secrets and the test send."""
import socket

import pytest

from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, Reply, configure

PUBLIC_URL = "https://93.184.216.34/hooks"


@pytest.fixture
def app_config():
    return LOCAL_RECEIVER_CONFIG


def test_configure_creates_with_a_secret_then_replaces_with_a_new_one(alice):
    created = alice.post("/webhooks/configure", json={"endpoint_url": PUBLIC_URL, "events": ["*"]})
    assert created.status_code == 201
    assert created.headers["Location"] == "/api/v1/webhooks/configure"
    body = created.json
    assert body["id"].startswith("whc_")
    assert body["secret"].startswith("whsec_") and len(body["secret"]) > 30
    assert body["is_active"] is True
    assert body["events"] == ["*"]
    assert body["initial_webhook"] == "latest"

    replaced = alice.post("/webhooks/configure", json={"endpoint_url": PUBLIC_URL + "/v2",
                                                       "events": ["contact.*"], "initial_webhook": "none"})
    assert replaced.status_code == 200
    assert replaced.json["id"] == body["id"]
    assert replaced.json["secret"] != body["secret"]
    assert replaced.json["endpoint_url"] == PUBLIC_URL + "/v2"
    assert replaced.json["initial_webhook"] == "none"


def test_events_default_to_everything(alice):
    response = alice.post("/webhooks/configure", json={"endpoint_url": PUBLIC_URL})
    assert response.json["events"] == ["*"]


def test_get_returns_the_configuration_without_secret_under_both_paths(alice):
    configure(alice, PUBLIC_URL, ["contact.position_changed"])
    for path in ("/webhooks/configure", "/webhooks/configuration"):
        response = alice.get(path)
        assert response.status_code == 200
        assert "secret" not in response.json
        assert response.json["events"] == ["contact.position_changed"]
        assert response.json["created_at"].endswith("Z")


def test_nothing_configured_is_404_everywhere(alice):
    for method, path in (("GET", "/webhooks/configure"), ("GET", "/webhooks/configuration"),
                         ("PUT", "/webhooks/configure"), ("DELETE", "/webhooks/configure"),
                         ("POST", "/webhooks/test"), ("POST", "/webhooks/rotate-secret")):
        response = alice.request(method, path, json={"is_active": True} if method == "PUT" else None)
        assert response.status_code == 404, path
        assert response.json["error"] == "NOT_FOUND"
        assert response.json["details"]["resource"] == "webhook_configuration"


def test_put_changes_only_what_is_given_and_keeps_the_secret(alice, app):
    secret = configure(alice, PUBLIC_URL)["secret"]
    response = alice.put("/webhooks/configure", json={"events": ["company.*"], "is_active": False})
    assert response.status_code == 200
    assert response.json["events"] == ["company.*"]
    assert response.json["is_active"] is False
    assert response.json["endpoint_url"] == PUBLIC_URL
    assert "secret" not in response.json
    from app.models import WebhookConfig
    from app.extensions import db
    assert db.session.get(WebhookConfig, response.json["id"]).secret == secret


@pytest.mark.parametrize("body", [{}, {"secret": "whsec_mine"}, {"is_active": "maybe"},
                                  {"initial_webhook": "some"}, {"events": []}])
def test_put_rejects_empty_unknown_or_bad_fields(alice, body):
    configure(alice, PUBLIC_URL)
    response = alice.put("/webhooks/configure", json=body)
    assert response.status_code == 400
    assert response.json["error"] == "VALIDATION_ERROR"


def test_delete_removes_the_configuration(alice):
    config_id = configure(alice, PUBLIC_URL)["id"]
    response = alice.delete("/webhooks/configure")
    assert response.status_code == 200
    assert response.json == {"id": config_id, "deleted": True}
    assert alice.get("/webhooks/configure").status_code == 404


@pytest.mark.parametrize("events_filter", [["*"], ["contact.*"], ["company.*", "entity.unavailable"],
                                           ["contact.position_changed"], ["subscription.*"], ["test"]])
def test_known_types_stars_and_families_are_accepted(alice, events_filter):
    assert configure(alice, PUBLIC_URL, events_filter)["events"] == events_filter


@pytest.mark.parametrize("events_filter", [[], ["job_change"], ["bogus.*"], ["contact.post_*"], ["*.*"], [""],
                                           "contact.*", [3]])
def test_unknown_or_malformed_event_filters_are_400(alice, events_filter):
    response = alice.post("/webhooks/configure", json={"endpoint_url": PUBLIC_URL, "events": events_filter})
    assert response.status_code == 400
    assert response.json["error"] == "VALIDATION_ERROR"
    assert response.json["details"]["field"].startswith("events")


def test_duplicate_filters_are_kept_once(alice):
    assert configure(alice, PUBLIC_URL, ["contact.*", "*", "contact.*"])["events"] == ["contact.*", "*"]


@pytest.mark.parametrize("body", [{"endpoint_url": PUBLIC_URL, "initial_webhook": "first"},
                                  {"endpoint_url": PUBLIC_URL, "url": PUBLIC_URL},
                                  {"events": ["*"]}, {"endpoint_url": "not a url"},
                                  {"endpoint_url": "ftp://example.com/x"}, {"endpoint_url": "https:///nohost"}])
def test_configure_rejects_bad_bodies(alice, body):
    response = alice.post("/webhooks/configure", json=body)
    assert response.status_code == 400
    assert response.json["error"] == "VALIDATION_ERROR"


def test_configure_requires_an_api_key(anon):
    assert anon.post("/webhooks/configure", json={"endpoint_url": PUBLIC_URL}).status_code == 401


def test_tenants_see_only_their_own_configuration(alice, bob):
    configure(alice, PUBLIC_URL)
    assert bob.get("/webhooks/configure").status_code == 404
    assert bob.post("/webhooks/rotate-secret").status_code == 404


def test_rotate_secret_returns_the_new_secret(alice):
    first = configure(alice, PUBLIC_URL)
    response = alice.post("/webhooks/rotate-secret")
    assert response.status_code == 200
    assert set(response.json) == {"id", "secret", "rotated_at"}
    assert response.json["id"] == first["id"]
    assert response.json["secret"].startswith("whsec_") and response.json["secret"] != first["secret"]
    assert response.json["rotated_at"].endswith("Z")


def test_test_send_delivers_a_signed_test_event_and_reports_it(alice):
    with Receiver() as receiver:
        configure(alice, receiver.url, ["contact.*"])  # the filter does not apply to the test send
        response = alice.post("/webhooks/test")
    assert response.status_code == 200
    result = response.json
    assert result["event_id"].startswith("evt_test_")
    assert result["delivered"] is True and result["status_code"] == 200 and result["error"] is None
    assert result["duration_ms"] >= 0
    assert receiver.requests[0].event == {**receiver.requests[0].event, "id": result["event_id"], "type": "test"}
    assert "message" in receiver.requests[0].event["data"]
    logged = alice.get(f"/events/{result['event_id']}").json
    assert logged["delivery_status"] == "succeeded"
    assert [attempt["attempt"] for attempt in logged["attempts"]] == [1]


def test_test_send_reports_a_failing_endpoint(alice):
    with Receiver(Reply(status=500)) as receiver:
        configure(alice, receiver.url)
        result = alice.post("/webhooks/test").json
    assert result["delivered"] is False
    assert result["status_code"] == 500
    assert result["error"] == "HTTP 500"
    assert alice.get(f"/events/{result['event_id']}").json["delivery_status"] == "failed"


def test_test_send_reports_an_unreachable_endpoint(alice):
    with Receiver() as receiver:
        url = receiver.url
    configure(alice, url)
    result = alice.post("/webhooks/test").json
    assert result["delivered"] is False
    assert result["status_code"] is None
    assert result["error"].startswith("connection failed")


def test_webhook_routes_are_in_the_openapi_document(anon):
    paths = anon.get("/openapi.json").json["paths"]
    assert {"post", "get", "put", "delete"} <= set(paths["/webhooks/configure"])
    for path in ("/webhooks/test", "/webhooks/rotate-secret", "/webhooks/recover", "/events/{event_id}/redeliver"):
        assert "post" in paths[path]
    assert "get" in paths["/webhooks/deliveries"]


def test_every_problem_of_a_configuration_is_listed_once_and_nothing_is_stored(app, alice):
    """The URL and event checks ran after the schema, so a body's problems came in two rounds; then each check
    ran beside a Length rule and a problem could be listed twice."""
    app.config.update(WEBHOOK_ALLOW_HTTP=False, WEBHOOK_ALLOW_PRIVATE_ADDRESSES=False)
    response = alice.post("/webhooks/configure", json={"endpoint_url": "http://hooks.example.com/in",
                                                       "events": ["*", "bogus"], "initial_webhook": "x", "extra": 1})
    details = response.json["details"]
    assert [error["field"] for error in details["errors"]] == ["endpoint_url", "events.1", "initial_webhook", "extra"]
    assert details["field"] == "endpoint_url" and details["value"] == "http://hooks.example.com/in"
    assert response.json["message"] == "endpoint_url must be an https:// URL."
    empty = alice.post("/webhooks/configure", json={"endpoint_url": "", "events": []}).json["details"]["errors"]
    assert [error["field"] for error in empty] == ["endpoint_url", "events"]
    assert alice.get("/webhooks/configure").status_code == 404


def test_an_unknown_event_type_is_the_value_named(alice):
    response = alice.put("/webhooks/configure", json={"events": ["contact.*", "bogus"]})
    details = response.json["details"]
    assert (details["field"], details["value"]) == ("events.1", "bogus")
    assert "Unknown event type 'bogus'" in response.json["message"]


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_the_endpoints_name_is_looked_up_once_and_outside_any_transaction(app, alice, monkeypatch, method):
    """It was looked up twice (a schema check, then the service's), both times with the request's read
    transaction still open: on PostgreSQL, a connection idle in transaction across two DNS lookups."""
    from app.extensions import db
    app.config.update(WEBHOOK_ALLOW_HTTP=False, WEBHOOK_ALLOW_PRIVATE_ADDRESSES=False)
    configure(alice, "https://93.184.216.34/in")
    lookups = []

    def resolve(host, port, *args, **kwargs):
        lookups.append((host, db.session().in_transaction()))
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port or 443))]
    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    response = alice.request(method, "/webhooks/configure", json={"endpoint_url": "https://hooks.example.com/in"})
    assert response.status_code == 200
    assert lookups == [("hooks.example.com", False)]
