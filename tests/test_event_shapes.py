"""The OpenAPI document's `webhooks`: each event type's body as an endpoint receives it, its headers, and what its
answer does (README Events and Webhooks). The events the check engine really records must match them."""
import json

import jsonschema_rs
import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import Event
from app.providers import EntityUnavailable
from app.schemas.event_data import DATA, component_name
from app.services import events
from app.services.events import EVENT_TYPES
from app.services.transport import Outgoing, signed_headers
from tests.test_checks import StubNetwork, activity, check, configure_webhook, firm, person, subscribe
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, Reply, configure


@pytest.fixture
def document(anon):
    return anon.client.get("/api/v1/openapi.json").get_json()


@pytest.fixture
def network(app):
    stub = StubNetwork()
    app.extensions["provider"] = stub
    return stub


def violations(document, event_type, body) -> list:
    schema = {"$ref": f"#/components/schemas/{component_name(event_type, 'Event')}",
              "components": document["components"]}
    return [error.message for error in jsonschema_rs.validator_for(schema).iter_errors(body)]


def undocumented_keys(document, schema, value, where="") -> list:
    """Keys of `value` (recursively) that `schema` does not name: the document must describe all that is sent, though
    it leaves objects open for fields added later."""
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in schema:
        return min((undocumented_keys(document, option, value, where) for option in schema["anyOf"]), key=len)
    if isinstance(value, dict) and "properties" in schema:  # (not a map of any keys, as custom_metadata)
        properties = schema["properties"]
        return [f"{where}.{key}" for key in value if key not in properties] + [
            found for key, item in value.items() if key in properties
            for found in undocumented_keys(document, properties[key], item, f"{where}.{key}")]
    if isinstance(value, list) and "items" in schema:
        return [found for item in value for found in undocumented_keys(document, schema["items"], item, where)]
    return []


def recorded_bodies() -> dict:
    """{event type: [the bodies delivered for it]}: the exact text every try sends."""
    db.session.rollback()
    bodies = {}
    for event in db.session.scalars(select(Event)):
        bodies.setdefault(event.type, []).append(json.loads(event.body))
    return bodies


def record_every_type(alice, network) -> dict:
    """One subscription of each entity type through its first check (with initial_webhook=all, its activities
    too) and a change of every kind, then unavailable; and a test event."""
    configure_webhook(alice.account_id, "all")
    network.set("jane-doe", person(activities=[activity("p1"), activity(7, "comment", target_url="https://t/1")],
                                   followers=12))
    network.set("acme", firm(activities=[activity("cp1")]))
    jane, acme = subscribe(alice), subscribe(alice, "acme", "company", custom_metadata={"crm_id": "42"})
    for created in (jane, acme):
        check(created["id"])
    network.set("jane-doe", person(title=None, headline="Founder", activities=[
        activity("p2", text=None), activity("r1", "reaction", target_url="https://t/2", reaction_type="like")]))
    network.set("acme", firm(headcount=300, description="Makes rockets.", activities=[activity("cp2")]))
    for created in (jane, acme):
        check(created["id"])
    network.set("jane-doe", person(company="Globex"))
    network.set("acme", firm(headcount=0))
    for created in (jane, acme):
        check(created["id"])
    network.set("acme", firm(headcount=12))  # from 0: delta_percent null
    check(acme["id"])
    network.set("jane-doe", EntityUnavailable("private"))
    check(jane["id"])
    return recorded_bodies()


def test_every_event_type_is_a_documented_webhook(document):
    assert list(document["webhooks"]) == list(EVENT_TYPES)
    for event_type, webhook in document["webhooks"].items():
        body = webhook["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        envelope = document["components"]["schemas"][body.rsplit("/", 1)[-1]]
        assert envelope["properties"]["type"] == {"const": event_type}
        assert envelope["properties"]["data"] == {"$ref": f"#/components/schemas/{component_name(event_type, 'Data')}"}
        assert ("metadata" in envelope["required"]) is (event_type != "test")  # a test event has none
        if event_type != "test":
            assert set(webhook["post"]["responses"]) == {"2XX", "410", "default"}


def test_the_webhooks_answers_state_the_timeout_and_retry_schedule_configured(app, anon):
    app.config.update(WEBHOOK_RETRY_SCHEDULE=[5, 90], WEBHOOK_TIMEOUT_SECONDS=7)
    app.extensions.pop("openapi_document", None)  # built once per app, from its configuration
    answers = anon.client.get("/api/v1/openapi.json").get_json()["webhooks"]["contact.post_created"]["post"][
        "responses"]
    assert answers["2XX"]["description"].startswith("Received, within 7 seconds")
    assert "WEBHOOK_RETRY_SCHEDULE (5, 90 s, each ±20%), at least 60 s after" in answers["default"]["description"]


@pytest.mark.parametrize("status", [410, 500])
def test_the_test_webhook_documents_a_probe_as_it_behaves(app, alice, document, status):
    """API walk: the `test` webhook said, as every type's, that a 410 deactivates the configuration and that a failed
    try is retried on WEBHOOK_RETRY_SCHEDULE; a test send is tried once and changes nothing (contract §5)."""
    answers = document["webhooks"]["test"]["post"]["responses"]
    assert set(answers) == {"2XX", "default"}
    assert "tried once and changes nothing" in answers["default"]["description"]
    assert "WEBHOOK_RETRY_SCHEDULE" not in answers["default"]["description"]
    app.config.update(LOCAL_RECEIVER_CONFIG)
    with Receiver(Reply(status=status)) as receiver:
        configure(alice, receiver.url)
        sent = alice.post("/webhooks/test").json
    assert sent["delivered"] is False and sent["status_code"] == status
    [attempt] = alice.get(f"/webhooks/deliveries?event_id={sent['event_id']}").json["data"]
    assert attempt["next_attempt_at"] is None
    assert alice.get("/webhooks/configure").json["is_active"] is True
    assert receiver.event_ids == [sent["event_id"]]


def test_the_documented_headers_are_those_a_delivery_sends(document):
    """Every header of a try (app.services.transport) but the two any HTTP POST has, and only those."""
    outgoing = Outgoing("evt_x", "https://hooks.example/x", b"{}", 3, "whsec_" + "0" * 32, "whsec_" + "1" * 32)
    sent = signed_headers(outgoing, 1_764_201_600_000)
    documented = {parameter["name"]: parameter for parameter in document["webhooks"]["test"]["post"]["parameters"]}
    assert set(documented) == set(sent) - {"Content-Type", "User-Agent"}
    assert [name for name, parameter in documented.items() if not parameter["required"]] == [
        "X-Webhook-Signature-Previous"]  # only while a rotation's overlap lasts
    for name, parameter in documented.items():
        value = sent[name]
        if parameter["schema"]["type"] == "integer":
            value = int(value)
        assert jsonschema_rs.validator_for(parameter["schema"]).is_valid(value), name


def test_the_events_answers_document_data_as_one_of_the_types_shapes(document):
    data = document["components"]["schemas"]["Event"]["properties"]["data"]
    assert data["anyOf"] == [{"$ref": f"#/components/schemas/{component_name(event_type, 'Data')}"}
                             for event_type in EVENT_TYPES]


def test_every_recorded_event_matches_its_types_webhook_and_sends_nothing_undocumented(app, alice, network, document):
    """API walk: an event's data was any object, and a receiver generated from the document had no type for it."""
    bodies = record_every_type(alice, network)
    app.config.update(LOCAL_RECEIVER_CONFIG)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        assert alice.post("/webhooks/test").status_code == 200  # sent before it answers
        bodies["test"] = [request.event for request in receiver.requests]
    assert set(bodies) == set(EVENT_TYPES)
    for event_type, sent in bodies.items():
        for body in sent:
            assert violations(document, event_type, body) == [], (event_type, body)
            extras = undocumented_keys(document, document["components"]["schemas"][
                component_name(event_type, "Event")], body)
            allowed = {".data.state.followers"}  # the provider's own fields: state keeps them, as documented
            assert set(extras) <= allowed, (event_type, extras)
    nulls = [body["data"]["changes"]["delta_percent"] for body in bodies["company.employee_count_changed"]]
    assert None in nulls and any(isinstance(value, float) for value in nulls)


@pytest.mark.parametrize("event_type, data", [
    ("contact.headline_changed", {"changes": {"previous_headline": None, "current_headline": "x"}}),
    ("contact.post_created", {"activity": {"id": True, "kind": "post", "url": None, "text": None,
                                           "created_at": None}}),
    ("contact.comment_created", {"activity": {"id": "c", "kind": "post", "url": None, "text": None,
                                              "created_at": None, "target_url": None}}),
    ("entity.unavailable", {"reason": "gone"}),
    ("company.employee_count_changed", {"changes": {"previous_employee_count": 1, "current_employee_count": "2",
                                                    "delta": 1, "delta_percent": 100.0}}),
])
def test_the_shapes_refuse_what_the_engine_never_sends(document, event_type, data):
    body = events.envelope("evt_x", event_type, events.utcnow(), {
        "entity": {"id": "sub_x", "type": "contact", "network_id": "n", "network_url": "u"}, **data},
        {"subscription_id": "sub_x", "detected_at": "2026-11-27T00:00:00Z", "custom_metadata": {}})
    assert violations(document, event_type, body) != []


def test_every_type_has_its_data_described():
    assert set(DATA) == set(EVENT_TYPES)
