"""The OpenAPI 3.1 document (contract §1, issue 2 point 9), generated from the validating schemas."""
import re
import sqlite3
import time

import jsonschema_rs
import pytest
from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from marshmallow import Schema

from app.api.openapi import PREFIX, _stated_constraints
from app.schemas.webhooks import UtcDateTime
from app.services import export as export_service, subscriptions
from conftest import raising
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, configure, record_events

_PARAMETER = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")


@pytest.fixture
def document(anon):
    response = anon.client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    return response.get_json()


def _resolve(document, schema):
    if "$ref" in schema:
        return document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def test_document_is_openapi_3_1_without_a_key(document):
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] and document["info"]["version"]
    assert document["servers"] == [{"url": "/api/v1"}]
    assert document["components"]["securitySchemes"]["ApiKey"] == {"type": "apiKey", "in": "header",
                                                                   "name": "X-API-Key"}


def test_also_served_under_v1(anon, document):
    assert anon.client.get("/v1/openapi.json").get_json() == document


def test_every_api_route_and_method_is_documented(app, document):
    documented = {(path, method) for path, operations in document["paths"].items() for method in operations}
    missing = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(PREFIX + "/") or rule.rule == PREFIX + "/openapi.json":
            continue
        path = _PARAMETER.sub(r"{\1}", rule.rule[len(PREFIX):])
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            if (path, method.lower()) not in documented:
                missing.append((method, path))
    assert missing == []


def test_issue_2_endpoints_are_present(document):
    expected = {
        "/account": {"get"}, "/account/usage": {"get"}, "/account/api-keys": {"get", "post"},
        "/account/api-keys/{key_id}": {"get", "delete"}, "/subscriptions": {"get", "post"},
        "/subscriptions/{subscription_id}": {"get", "delete", "patch"},
        "/subscriptions/{subscription_id}/pause": {"post"}, "/subscriptions/{subscription_id}/resume": {"post"},
        "/subscriptions/bulk": {"post", "delete", "patch"}, "/subscriptions/export": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(document["paths"][path]), path


def test_request_bodies_come_from_the_validating_schemas(document):
    create = document["paths"]["/subscriptions"]["post"]
    body = _resolve(document, create["requestBody"]["content"]["application/json"]["schema"])
    # an entity type with its id or a URL of that type's path: one variant each, unknown fields refused
    variants = {(v["properties"]["entity_type"]["const"], v["required"][1]): v for v in body["oneOf"]}
    assert set(variants) == {(t, name) for t in ("contact", "company") for name in ("network_id", "network_url")}
    assert all(v["additionalProperties"] is False for v in variants.values())
    assert variants["contact", "network_id"]["properties"]["network_id"]["pattern"] == "^[A-Za-z0-9_-]{2,100}$"
    assert "/in/" in variants["contact", "network_url"]["properties"]["network_url"]["pattern"]
    assert "/company/" in variants["company", "network_url"]["properties"]["network_url"]["pattern"]
    metadata = variants["company", "network_id"]["properties"]["custom_metadata"]
    assert metadata["type"] == "object" and metadata["maxProperties"] == 20
    assert metadata["propertyNames"] == {"type": "string", "minLength": 1, "maxLength": 40}
    assert "maxLength" not in metadata
    bulk = _resolve(document, document["paths"]["/subscriptions/bulk"]["post"]["requestBody"]["content"]
                    ["application/json"]["schema"])
    assert bulk["properties"]["subscriptions"]["maxItems"] == 100
    assert bulk["properties"]["subscriptions"]["minItems"] == 1
    key = _resolve(document, document["paths"]["/account/api-keys"]["post"]["requestBody"]["content"]
                   ["application/json"]["schema"])
    assert key["required"] == ["name"] and key["properties"]["name"]["maxLength"] == 100


def test_query_parameters_are_documented(document):
    listed = document["paths"]["/subscriptions"]["get"]["parameters"]
    parameters = {parameter["name"]: parameter for parameter in listed}
    assert {"limit", "offset", "entity_type", "status", "search"} <= set(parameters)
    assert all(parameter["in"] == "query" for parameter in parameters.values())
    assert parameters["limit"]["schema"]["maximum"] == 100 and parameters["limit"]["schema"]["minimum"] == 1
    assert parameters["status"]["schema"]["enum"] == ["active", "paused", "cancelled"]
    export = {parameter["name"] for parameter in document["paths"]["/subscriptions/export"]["get"]["parameters"]}
    assert export == {"format", "status"}


def test_path_parameters_and_security(document):
    get_one = document["paths"]["/subscriptions/{subscription_id}"]["get"]
    assert get_one["parameters"][0] == {"in": "path", "name": "subscription_id", "required": True,
                                        "schema": {"type": "string", "minLength": 1}}
    assert get_one["security"] == [{"ApiKey": []}]


def test_responses_reference_schemas_and_the_error_shape(document):
    create = document["paths"]["/subscriptions"]["post"]["responses"]
    created = _resolve(document, create["201"]["content"]["application/json"]["schema"])
    assert {"id", "entity_type", "network_id", "network_url", "status", "created_at", "updated_at"} <= \
        set(created["properties"])
    error = _resolve(document, create["400"]["content"]["application/json"]["schema"])
    assert error["required"] == ["error", "message"]
    assert document["paths"]["/subscriptions"]["get"]["responses"]["200"]["content"]["application/json"]


def test_each_operation_lists_the_error_codes_it_can_answer(document):
    create = document["paths"]["/subscriptions"]["post"]["responses"]
    assert create["403"]["description"] == "TIER_LIMIT_EXCEEDED or TRIAL_EXPIRED"
    assert create["409"]["description"] == "DUPLICATE_SUBSCRIPTION"
    assert create["413"]["description"] == "PAYLOAD_TOO_LARGE"
    assert {"400", "401", "429", "500"} <= set(create)
    assert "404" not in create  # no path parameter, no NOT_FOUND
    resume = document["paths"]["/subscriptions/{subscription_id}/resume"]["post"]["responses"]
    assert resume["404"]["description"] == "NOT_FOUND" and resume["409"]["description"] == "INVALID_STATE"
    assert document["paths"]["/account/api-keys"]["post"]["responses"]["403"]["description"] == "KEY_LIMIT_EXCEEDED"


@pytest.mark.parametrize("path, method", [("/webhooks/rotate-secret", "post"), ("/webhooks/test", "post"),
                                          ("/webhooks/configure", "delete"), ("/account/api-keys/{key_id}", "delete"),
                                          ("/events/{event_id}/redeliver", "post"),
                                          ("/subscriptions/{subscription_id}/pause", "post")])
def test_operations_that_take_no_body_document_the_answers_to_one(alice, document, path, method):
    """They read a body all the same: fields are a 400, a body past the limit a 413; the document left both out."""
    responses = document["paths"][path][method]["responses"]
    assert responses["400"]["description"].startswith("VALIDATION_ERROR")
    assert responses["413"]["description"] == "PAYLOAD_TOO_LARGE"
    configure(alice, "https://hooks.example.com/in")
    url = path.replace("{key_id}", "key_x").replace("{event_id}", "evt_x").replace("{subscription_id}", "sub_x")
    assert alice.request(method.upper(), url, json={"x": 1}).status_code == 400
    assert alice.request(method.upper(), url, data=b"{" + b" " * (1 << 20) + b"}",
                         headers={"Content-Type": "application/json"}).status_code == 413


def test_only_a_keyed_operation_that_may_carry_a_body_reads_one(document):
    assert "413" not in document["paths"]["/subscriptions"]["get"]["responses"]


def test_every_operation_lists_the_400_of_a_nul_in_its_query(document, alice, anon):
    """`/account?x=%00` answers 400, as every route does, but the operations without parameters did not list it
    (API walk)."""
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation["responses"]["400"]["description"].startswith("VALIDATION_ERROR"), (method, path)
    assert alice.get("/account?x=%00").status_code == 400 and anon.client.get("/healthz?x=%00").status_code == 400


@pytest.mark.parametrize("path, name", [("/subscriptions", "search"), ("/events", "subscription_id"),
                                        ("/webhooks/deliveries", "event_id")])
def test_free_text_query_parameters_state_that_nul_is_refused(alice, document, path, name):
    """schemathesis sent `search=…%00…`, valid by the document, and the API answered 400 (NUL is refused on
    every database alike)."""
    [parameter] = [item for item in document["paths"][path]["get"]["parameters"] if item.get("name") == name]
    assert re.match(parameter["schema"]["pattern"].replace("\\u0000", "\x00"), "a\x00b") is None
    assert re.match(parameter["schema"]["pattern"].replace("\\u0000", "\x00"), "jané-doe") is not None
    assert alice.get(path, query_string={name: "a\x00b"}).status_code == 400


@pytest.mark.parametrize("name", ["CI pipeline", "Zoë 🚀 東京", " padded ", "", " ", "\u3000", "a\x00b", "a\nb", "a\tb",
                                  "a\x85b", "a\u2028b", "a\u202eb", "a\u2066b", "\u200b", " \u200f ", "a\u200db",
                                  "\u3164", "\u2800\ufe0f", "a\u00adb"])
def test_the_documented_key_name_pattern_is_the_rule_the_api_applies(alice, document, name):
    """The name's rule became a function, and the document kept only its length: NUL and line breaks looked valid."""
    pattern = document["components"]["schemas"]["ApiKeyCreate"]["properties"]["name"]["pattern"]
    accepted = alice.post("/account/api-keys", json={"name": name}).status_code == 201
    assert bool(re.match(pattern, name)) == accepted


def test_one_api_key_is_documented_in_the_list_items_shape(document):
    get_one = document["paths"]["/account/api-keys/{key_id}"]["get"]
    assert get_one["responses"]["200"]["content"]["application/json"]["schema"] == \
        document["components"]["schemas"]["ApiKeyList"]["properties"]["keys"]["items"]
    assert get_one["responses"]["404"]["description"] == "NOT_FOUND"


def test_bulk_ids_take_any_item_and_errors_name_its_index(document):
    for method in ("delete", "patch"):
        operation = document["paths"]["/subscriptions/bulk"][method]
        body = _resolve(document, operation["requestBody"]["content"]["application/json"]["schema"])
        ids = body["properties"]["subscription_ids"]
        assert (ids["items"], ids["minItems"], ids["maxItems"]) == ({}, 1, 100)  # a bad item is reported, not a 400
        result = _resolve(document, operation["responses"]["200"]["content"]["application/json"]["schema"])
        error = _resolve(document, result["properties"]["errors"]["items"])["properties"]
        assert error["index"]["type"] == "integer" and error["id"]["type"] == ["string", "null"]


def test_export_documents_both_media_types(document):
    content = document["paths"]["/subscriptions/export"]["get"]["responses"]["200"]["content"]
    assert set(content) == {"text/csv", "application/json"}


def test_every_operation_has_a_unique_operation_id(document):
    ids = [operation["operationId"] for operations in document["paths"].values() for operation in operations.values()]
    assert len(ids) == len(set(ids)) == 30


def test_export_json_is_documented_as_the_object_it_is(document):
    content = document["paths"]["/subscriptions/export"]["get"]["responses"]["200"]["content"]
    exported = _resolve(document, content["application/json"]["schema"])
    assert set(exported["properties"]) == {"data", "total"}
    assert content["text/csv"]["schema"]["type"] == "string"


def test_webhook_bodies_state_the_url_shape_and_the_event_enum(document):
    body = document["components"]["schemas"]["WebhookConfigure"]["properties"]
    assert body["endpoint_url"]["pattern"].startswith("^https://")
    assert {"*", "contact.*", "contact.position_changed"} <= set(body["events"]["items"]["enum"])
    update = document["components"]["schemas"]["WebhookUpdate"]
    assert update["minProperties"] == 1 and update["properties"]["is_active"]["type"] == "boolean"


@pytest.mark.parametrize("url", [
    "https://hooks.example.com:00/", "https://hooks.example.com:0/", "https://a.example:080/",
    "https://hooks.example.com:443/in", "https://hooks.example.com:65535/", "https://hooks.example.com:65536/",
    "https://0.0.0.0.0.0.0.0.0.A:00"])
def test_the_documented_url_shape_agrees_with_the_form_check(app, document, url):
    """schemathesis (seed 41) sent `https://0.0.0.0.0.0.0.0.0.A:00`: port 0 matched the pattern, and is refused."""
    from app.services.webhooks import endpoint_url_problem
    pattern = document["components"]["schemas"]["WebhookConfigure"]["properties"]["endpoint_url"]["pattern"]
    assert bool(re.match(pattern, url)) == (endpoint_url_problem(url) is None)


def test_timestamps_that_may_be_unset_are_nullable(document):
    subscription = document["components"]["schemas"]["Subscription"]["properties"]
    assert "null" in subscription["cancelled_at"]["type"]


def test_configure_documents_both_create_and_replace(document):
    assert {"200", "201"} <= set(document["paths"]["/webhooks/configure"]["post"]["responses"])


def test_an_attempt_keeps_the_contracts_fields_and_adds_the_headers_it_was_sent_with(document):
    attempt = document["components"]["schemas"]["DeliveryAttempt"]["properties"]
    assert {"id", "event_id", "event_type", "attempt", "status", "response_status", "duration_ms", "error",
            "attempted_at", "next_attempt_at"} < set(attempt)
    headers = attempt["request_headers"]
    assert "null" in headers["type"] and headers["additionalProperties"] == {"type": "string"}


def test_recovery_times_are_documented_as_iso_8601_or_unix_seconds(alice, document):
    """API walk: `since` and `until` were documented as date-time strings only, while the API reads Unix seconds as a
    JSON number too (its description said so, its type did not)."""
    properties = _resolve(document, {"$ref": "#/components/schemas/Recover"})["properties"]
    for name in ("since", "until"):
        assert properties[name]["type"] == ["string", "number"] and properties[name]["format"] == "date-time"
    configure(alice, "https://hooks.example.com/in")
    assert alice.post("/webhooks/recover", json={"since": time.time() - 3600, "until": time.time()}).status_code == 202


def test_a_times_own_json_schema_is_documented_beside_its_string_or_number_type():
    """UtcDateTime set its `json_schema` metadata over the caller's: an example or rule given there never reached the
    document."""
    class Window(Schema):
        since = UtcDateTime(metadata={"description": "From when.", "json_schema": {"examples": [1764057600]}})
    plugin = MarshmallowPlugin()
    APISpec(title="t", version="1", openapi_version="3.1.0", plugins=[plugin])
    plugin.converter.add_attribute_function(_stated_constraints)
    assert plugin.converter.field2property(Window().fields["since"]) == {
        "type": ["string", "number"], "format": "date-time", "description": "From when.", "examples": [1764057600]}


def test_every_keyed_operation_documents_the_503_of_a_database_it_cannot_use(document):
    """A database outage answers 503 UNAVAILABLE with Retry-After (PostgreSQL walk: it was an undocumented 500)."""
    keyed = [operation for path in document["paths"].values() for operation in path.values()
             if isinstance(operation, dict) and "401" in operation.get("responses", {})]
    assert keyed and all(operation["responses"]["503"]["description"] == "UNAVAILABLE" for operation in keyed)


def test_the_create_body_says_what_is_accepted_beyond_its_variants(document, alice):
    """Both fields together, the aliases, non-ASCII ids and URLs with a section were accepted but only the canonical
    forms were documented: a client generated from the document refused them (API walk)."""
    described = document["components"]["schemas"]["SubscriptionCreate"]["description"]
    for accepted in ("both network_id and network_url", "linkedin_id and linkedin_url", "percent-encoded",
                     "http://", "/details/experience/", "query string", "letter case", ":443", "m.", "/mwlite/",
                     "/en", "fragment", "spaces around"):
        assert accepted in described, accepted
    for body in ({"network_id": "jane-doe", "network_url": "https://www.linkedin.com/in/jane-doe"},
                 {"linkedin_id": "sam-roe"}, {"network_id": "jos%C3%A9"},
                 {"network_url": "http://uk.linkedin.com/in/kim-poe/details/experience/?trk=1"},
                 {"network_url": " HTTPS://M.LINKEDIN.COM:443/in/lee-moe/en#top "},
                 {"network_url": "https://www.linkedin.com/mwlite/in/ada-lo"}):
        assert alice.post("/subscriptions", json={"entity_type": "contact", **body}).status_code == 201, body


def test_the_get_shapes_metadata_is_documented_as_the_two_counts_it_holds(document, alice):
    """API walk: `metadata` was documented as a bare read-only value (no type), though the interface spec gives it two
    integers, check_count and change_count."""
    metadata = document["components"]["schemas"]["Subscription"]["properties"]["metadata"]
    assert metadata["type"] == "object" and metadata["additionalProperties"] is False
    assert {name: rule["type"] for name, rule in metadata["properties"].items()} == {
        "check_count": "integer", "change_count": "integer"}
    created = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane-doe"}).get_json()
    answered = alice.get(f"/subscriptions/{created['id']}").get_json()["metadata"]
    assert set(answered) == set(metadata["required"]) == set(metadata["properties"])


def _violations(document, name, answer) -> list:
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return [error.message for error in jsonschema_rs.validator_for(schema).iter_errors(answer)]


def _request_body_names(document) -> set:
    return {operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
            for operations in document["paths"].values() for operation in operations.values()
            if "requestBody" in operation}


def _objects_with(value, field: str, where: str):
    """(where, object) for each object schema in `value`, at any depth, that has `field` among its properties."""
    if isinstance(value, dict):
        if field in value.get("properties", {}):
            yield where, value
        for name, item in value.items():
            yield from _objects_with(item, field, f"{where}/{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _objects_with(item, field, f"{where}/{index}")


def test_the_answers_schemas_require_the_fields_every_answer_carries(app, document, alice):
    """API walk: no answer's schema but the error's listed `required`, so a client generated from the document took
    every field of every answer as optional; the fields an answer may leave out are the exceptions. An event's
    `metadata` left out `custom_metadata`, which it always carries (`{}` when the subscription has none), as every
    subscription's shape does."""
    schemas = document["components"]["schemas"]
    answers_schemas = {name: schema for name, schema in schemas.items() if name not in _request_body_names(document)}
    carrying = dict(_objects_with(answers_schemas, "custom_metadata", ""))  # the webhooks' bodies among them
    assert {"/Subscription", "/SubscriptionListItem", "/ExportRow", "/Event/properties/metadata",
            "/ContactPositionChangedEvent/properties/metadata"} <= set(carrying)
    assert [where for where, found in carrying.items() if "custom_metadata" not in found.get("required", [])] == []
    assert {"id", "status", "metadata", "cancelled_at"} <= set(schemas["Subscription"]["required"])
    assert {"id", "type", "created", "data", "delivery_status"} == set(schemas["Event"]["required"])
    assert "existing_subscription_id" not in schemas["BulkCreateError"]["required"]
    assert schemas["Error"]["required"] == ["error", "message"]
    jane = {"entity_type": "contact", "network_id": "jane-doe"}
    bulk = alice.post("/subscriptions/bulk", json={"subscriptions": [jane, jane, 5]}).get_json()
    app.config.update(LOCAL_RECEIVER_CONFIG)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        test_event = alice.post("/webhooks/test").get_json()["event_id"]
    record_events(alice.account_id)
    answers = {"BulkCreateResult": bulk, "EventList": alice.get("/events").get_json(),
               "EventDetail": alice.get(f"/events/{test_event}").get_json(),
               "Subscription": alice.get(f"/subscriptions/{bulk['subscriptions'][0]['id']}").get_json()}
    assert [("metadata" in event) for event in answers["EventList"]["data"]] == [True, False]
    assert {name: _violations(document, name, answer) for name, answer in answers.items()} == {
        name: [] for name in answers}


def _documented_headers(operation, status) -> set:
    return {name for name in operation["responses"][status].get("headers", {})}


def test_answers_document_the_headers_they_carry(document, alice, monkeypatch):
    """API walk: no response listed a header, though the contract promises X-Request-Id on every answer, the
    X-RateLimit-* trio on every keyed one, Location on a create, Retry-After on a 429 and an attachment export. A
    keyed 500 or 503 was documented without the trio, which it carries."""
    rate_limit = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
    create = document["paths"]["/subscriptions"]["post"]
    assert _documented_headers(create, "201") == {"X-Request-Id", "Location"} | rate_limit
    assert _documented_headers(create, "429") == {"X-Request-Id", "Retry-After"} | rate_limit
    assert _documented_headers(create, "401") == {"X-Request-Id"}
    assert _documented_headers(create, "500") == {"X-Request-Id"} | rate_limit
    assert _documented_headers(create, "503") == {"X-Request-Id", "Retry-After"} | rate_limit
    export, export_head = (document["paths"]["/subscriptions/export"][method] for method in ("get", "head"))
    assert _documented_headers(export, "200") == {"X-Request-Id", "Content-Disposition"} | rate_limit
    components = document["components"]["headers"]
    assert components["X-RateLimit-Reset"]["schema"] == {"type": "integer"}
    assert {name for name, header in components.items() if header["required"]} == {
        "X-Request-Id", "Location", "Content-Disposition"}  # no rate-limit headers with rate limiting off
    jane = {"entity_type": "contact", "network_id": "jane-doe"}
    exported = alice.get("/subscriptions/export")
    exported.close()  # a streamed answer holds its request context until it is closed
    answers = [(create, "201", alice.post("/subscriptions", json=jane)),
               (create, "409", alice.post("/subscriptions", json=jane)), (export, "200", exported),
               (export_head, "200", alice.request("HEAD", "/subscriptions/export?format=json")),
               (export_head, "400", alice.request("HEAD", "/subscriptions/export?format=xml"))]
    monkeypatch.setattr(export_service, "export", raising(RuntimeError, "a bug"))
    answers.append((export, "500", alice.get("/subscriptions/export")))
    monkeypatch.setattr(subscriptions, "create", raising(sqlite3.OperationalError, "unable to open database file"))
    answers.append((create, "503", alice.post("/subscriptions", json=jane)))
    for operation, status, answer in answers:
        assert answer.status_code == int(status), status
        assert _documented_headers(operation, status) - {"Retry-After"} <= set(answer.headers.keys()), status


def test_the_exports_head_is_documented_as_the_gets_headers_without_a_body(document):
    """API walk: `HEAD /subscriptions/export` is served (its headers without reading a row, in the read class: README
    Rate limits) but the document left it out. The HEAD of any other GET is that GET without its body: not listed."""
    operations = document["paths"]["/subscriptions/export"]
    head, get = operations["head"], operations["get"]
    assert set(head["responses"]) == set(get["responses"]) and head["operationId"] == "export_subscriptions_head"
    assert all("content" not in answer for answer in head["responses"].values())
    assert head["parameters"] == get["parameters"] and head["security"] == get["security"]
    assert all(_documented_headers(head, status) == _documented_headers(get, status) for status in get["responses"])
    assert "head" not in document["paths"]["/subscriptions"]


def test_the_answers_fields_of_fixed_values_document_them_as_an_enum(document, alice):
    """API walk: a subscription's status and entity type, an event's type and delivery status, an attempt's status
    and a configuration's initial_webhook were documented as any string; a generated client could not check them."""
    schemas = document["components"]["schemas"]
    enums = {(name, field): schemas[name]["properties"][field].get("enum") for name, field in (
        ("Subscription", "status"), ("SubscriptionListItem", "entity_type"), ("SubscriptionCancelled", "status"),
        ("Event", "delivery_status"), ("DeliveryAttempt", "status"), ("WebhookConfig", "initial_webhook"))}
    assert enums == {("Subscription", "status"): ["active", "paused", "cancelled"],
                     ("SubscriptionListItem", "entity_type"): ["contact", "company"],
                     ("SubscriptionCancelled", "status"): ["cancelled"],
                     ("Event", "delivery_status"): ["pending", "succeeded", "failed", "skipped"],
                     ("DeliveryAttempt", "status"): ["succeeded", "failed"],
                     ("WebhookConfig", "initial_webhook"): ["latest", "all", "none"]}
    assert "contact.position_changed" in schemas["Event"]["properties"]["type"]["enum"]
    created = alice.post("/subscriptions", json={"entity_type": "company", "network_id": "acme"}).get_json()
    answers = {"Subscription": alice.post(f"/subscriptions/{created['id']}/pause").get_json(),
               "SubscriptionList": alice.get("/subscriptions").get_json(),
               "SubscriptionCancelled": alice.delete(f"/subscriptions/{created['id']}").get_json()}
    assert {name: _violations(document, name, answer) for name, answer in answers.items()} == {
        name: [] for name in answers}


def test_timestamps_that_are_always_set_are_not_nullable(document):
    """API walk: every timestamp was documented as nullable, created_at and a cancel's cancelled_at included, so a
    generated client had to handle a null that never comes."""
    schemas = document["components"]["schemas"]
    always_set = {(name, field): schemas[name]["properties"][field]["type"] for name, field in (
        ("Subscription", "created_at"), ("SubscriptionCreated", "updated_at"),
        ("SubscriptionCancelled", "cancelled_at"), ("ApiKey", "created_at"), ("DeliveryAttempt", "attempted_at"),
        ("RotatedSecret", "rotated_at"))}
    assert always_set == {key: "string" for key in always_set}
    assert schemas["Subscription"]["properties"]["last_checked_at"]["type"] == ["string", "null"]


def test_an_events_metadata_is_documented_with_its_fields(document, alice):
    """API walk: an event's metadata was any object, though the interface spec names subscription_id and detected_at
    (and the contract custom_metadata) for every change event."""
    metadata = document["components"]["schemas"]["Event"]["properties"]["metadata"]
    assert metadata["required"] == ["subscription_id", "detected_at", "custom_metadata"]
    assert metadata["properties"]["detected_at"] == {"type": "string", "format": "date-time"}
    assert metadata["properties"]["custom_metadata"]["additionalProperties"] == {"type": "string"}
    record_events(alice.account_id)
    recorded = alice.get("/events").get_json()
    assert set(recorded["data"][0]["metadata"]) == set(metadata["properties"])
    assert _violations(document, "EventList", recorded) == []


def test_the_last_checks_status_is_documented_as_never_null(document):
    """It was documented as string or null, null among its enum, though the column is NOT NULL (`pending` until the
    first check): a generated client had to handle a null that never comes, as with the always-set timestamps."""
    status = document["components"]["schemas"]["Subscription"]["properties"]["last_check_status"]
    assert status == {"type": "string", "enum": ["pending", "ok", "NETWORK_ERROR"]}
