"""POST /subscriptions (interface spec, contract §3): identity, URL canonicalisation, duplicates, caps."""
import copy

import pytest

from app.config import DEFAULT_TIERS
from conftest import subscription_count as _count

CONTACT_URL = "https://www.linkedin.com/in/{}"
COMPANY_URL = "https://www.linkedin.com/company/{}"


def _create(tenant, **body):
    return tenant.post("/subscriptions", json=body)


def _assert_validation_error(response, field):
    assert response.status_code == 400, response.get_json()
    body = response.get_json()
    assert body["error"] == "VALIDATION_ERROR"
    assert body["details"]["field"] == field
    assert body["details"]["errors"][0]["field"] == field
    assert body["message"]
    return body


# --- the happy paths -------------------------------------------------------------------------------

def test_create_by_id_answers_201_with_the_create_shape(alice):
    response = _create(alice, entity_type="contact", network_id="jane-doe")
    assert response.status_code == 201
    body = response.get_json()
    assert body["id"].startswith("sub_")
    assert body["entity_type"] == "contact"
    assert body["network_id"] == "jane-doe"
    assert body["network_url"] == "https://www.linkedin.com/in/jane-doe"
    assert body["status"] == "active"
    assert body["created_at"].endswith("Z") and body["updated_at"] == body["created_at"]
    assert body["custom_metadata"] == {}
    assert response.headers["Location"] == f"/api/v1/subscriptions/{body['id']}"
    assert _count(alice.account_id) == 1


def test_create_by_url_alone(alice):
    body = _create(alice, entity_type="company", network_url="https://www.linkedin.com/company/acme-corp").get_json()
    assert body["network_id"] == "acme-corp"
    assert body["network_url"] == "https://www.linkedin.com/company/acme-corp"


def test_create_with_id_and_matching_url(alice):
    response = _create(alice, entity_type="contact", network_id="Jane-Doe",
                       network_url="https://linkedin.com/in/jane-doe/")
    assert response.status_code == 201
    assert response.get_json()["network_id"] == "jane-doe"


def test_linkedin_aliases_are_accepted(alice):
    by_id = _create(alice, entity_type="contact", linkedin_id="alias-person").get_json()
    assert by_id["network_id"] == "alias-person"
    by_url = _create(alice, entity_type="company", linkedin_url="https://linkedin.com/company/alias-co").get_json()
    assert by_url["network_id"] == "alias-co"
    assert by_url["network_url"] == COMPANY_URL.format("alias-co")
    assert "linkedin_id" not in by_id and "linkedin_url" not in by_url


def test_alias_and_field_must_agree(alice):
    _assert_validation_error(_create(alice, entity_type="contact", network_id="a1", linkedin_id="b2"),
                             "linkedin_id")
    assert _create(alice, entity_type="contact", network_id="same", linkedin_id="same").status_code == 201


def test_an_alias_naming_the_same_entity_in_another_form_agrees(alice):
    """API walk: `network_id` `AliasA` with `linkedin_id` `aliasa` was refused as two values that differ, where ids
    compare case-insensitively and `network_id` with a `network_url` of another form is accepted."""
    by_id = _create(alice, entity_type="contact", network_id="AliasA", linkedin_id="aliasa")
    assert by_id.status_code == 201 and by_id.get_json()["network_id"] == "aliasa"
    by_url = _create(alice, entity_type="company", network_url="https://www.linkedin.com/company/alias-co",
                     linkedin_url="https://uk.linkedin.com/company/Alias-Co/about/")
    assert by_url.status_code == 201 and by_url.get_json()["network_id"] == "alias-co"
    _assert_validation_error(_create(alice, entity_type="company", network_url="https://www.linkedin.com/company/x1",
                                     linkedin_url="https://www.linkedin.com/company/x2"), "linkedin_url")
    _assert_validation_error(_create(alice, entity_type="robot", network_url="https://www.linkedin.com/company/x1",
                                     linkedin_url="https://linkedin.com/company/x1"), "entity_type")


@pytest.mark.parametrize("entity_type, field, value, alias, says", [
    ("company", "network_url", "https://www.linkedin.com/in/jane", "https://www.linkedin.com/in/jane/",
     "/company/ path"),
    ("contact", "network_id", "jane.doe", "Jane.Doe", "network_id"),
    ("contact", "network_url", "https://www.linkedin.com/in/jane", "https://www.linkedin.com/in/jane/about/../x",
     ". or .. segments"),
])
def test_an_alias_pair_that_cannot_be_read_names_the_reason_not_a_difference(alice, entity_type, field, value, alias,
                                                                             says):
    """Any value of the pair that could not be read was reported as the pair differing (review)."""
    alias_field = field.replace("network", "linkedin")
    response = _create(alice, entity_type=entity_type, **{field: value, alias_field: alias})
    assert response.status_code == 400 and says in response.get_json()["message"]
    assert "they differ" not in response.get_json()["message"]
    assert _count(alice.account_id) == 0


@pytest.mark.parametrize("body, field, says", [
    ({"entity_type": "contact", "linkedin_id": "bad id!"}, "linkedin_id", "linkedin_id may hold only letters"),
    ({"entity_type": "company", "linkedin_url": "https://www.linkedin.com/in/jane"}, "linkedin_url",
     "Invalid linkedin_url: a company URL must use the /company/ path"),
    ({"entity_type": "contact", "linkedin_id": "jane", "linkedin_url": "https://www.linkedin.com/in/john"},
     "linkedin_url", "linkedin_id and linkedin_url name different entities"),
    ({"entity_type": "contact", "network_id": "jane", "linkedin_url": "https://www.linkedin.com/in/john"},
     "linkedin_url", "network_id and linkedin_url name different entities"),
    ({"entity_type": "contact", "linkedin_id": "jane", "network_url": "https://www.linkedin.com/in/john"},
     "network_url", "linkedin_id and network_url name different entities"),
    # the id is read before the URL, whichever names were sent (as without an alias)
    ({"entity_type": "contact", "network_id": "bad id!", "linkedin_url": "nope"}, "network_id",
     "network_id may hold only letters"),
    ({"entity_type": "contact", "network_id": "bad id!", "network_url": "nope", "linkedin_url": "nope2"},
     "network_id", "network_id may hold only letters"),
    ({"entity_type": "contact", "linkedin_id": "bad id!", "network_url": "nope", "linkedin_url": "nope2"},
     "linkedin_id", "linkedin_id may hold only letters"),
])
def test_an_alias_refused_is_named_as_sent(alice, body, field, says):
    """An alias was folded into the field it stands for before its value was read: its errors named network_id or
    network_url, fields the client had not sent."""
    error = _assert_validation_error(_create(alice, **body), field)
    assert says in error["message"] and error["details"]["value"] == body[field]
    assert _count(alice.account_id) == 0


def test_custom_metadata_is_stored_and_returned(alice):
    body = _create(alice, entity_type="contact", network_id="meta-person",
                   custom_metadata={"crm_id": "42", "owner": "sales"}).get_json()
    assert body["custom_metadata"] == {"crm_id": "42", "owner": "sales"}
    assert alice.get(f"/subscriptions/{body['id']}").get_json()["custom_metadata"] == {"crm_id": "42",
                                                                                       "owner": "sales"}


def test_v1_prefix_creates_too(alice):
    alice.prefix = "/v1"
    assert _create(alice, entity_type="contact", network_id="via-v1").status_code == 201


def test_create_schedules_the_first_check(app, alice):
    body = _create(alice, entity_type="contact", network_id="scheduled").get_json()
    got = alice.get(f"/subscriptions/{body['id']}").get_json()
    assert got["last_check_status"] == "pending"
    assert got["next_check_at"] is not None and got["next_check_at"] > body["created_at"]


# --- URL canonicalisation --------------------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "https://www.linkedin.com/in/jane-doe",
    "http://www.linkedin.com/in/jane-doe",
    "https://linkedin.com/in/jane-doe",
    "https://www.linkedin.com/in/jane-doe/",
    "https://www.linkedin.com/in/jane-doe?trk=public_profile",
    "https://www.linkedin.com/in/jane-doe#experience",
    "https://www.linkedin.com/in/jane-doe/?utm=x#y",
    "HTTPS://WWW.LINKEDIN.COM/IN/JANE-DOE",
    "  https://www.linkedin.com/in/jane-doe  ",
    "https://uk.linkedin.com/in/jane-doe",                      # country subdomain
    "https://de.linkedin.com/in/jane-doe/",
    "https://m.linkedin.com/in/jane-doe",                       # mobile
    "https://www.linkedin.com/mwlite/in/jane-doe",
    "https://www.linkedin.com/in/jane-doe/details/experience/",  # a section after the id
    "https://www.linkedin.com/in/jane-doe/recent-activity/all/",
    "https://www.linkedin.com/in/jane-doe/overlay/contact-info/",
    "https://www.linkedin.com/in/jane-doe/en",                   # the profile in one of its languages (walk)
    "https://www.linkedin.com/in/jane-doe/pt-br/",
    "https://www.linkedin.com:443/in/jane-doe",                  # the scheme's own port
    "http://www.linkedin.com:80/in/jane-doe",
])
def test_url_forms_of_one_contact_resolve_to_the_canonical_url(alice, url):
    response = _create(alice, entity_type="contact", network_url=url)
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert body["network_id"] == "jane-doe"
    assert body["network_url"] == "https://www.linkedin.com/in/jane-doe"


@pytest.mark.parametrize("entity_type, url", [
    ("contact", "https://www.linkedin.com/company/acme"),       # company path for a contact
    ("company", "https://www.linkedin.com/in/jane-doe"),        # contact path for a company
    ("contact", "https://www.example.com/in/jane-doe"),         # wrong domain
    ("contact", "https://linkedin.com.evil.com/in/jane-doe"),   # look-alike domain
    ("contact", "https://evil-linkedin.com/in/jane-doe"),
    ("contact", "https://uk.www.linkedin.com/in/jane-doe"),     # one subdomain label only
    ("contact", "https://ukr.linkedin.com/in/jane-doe"),        # not a country or mobile subdomain
    ("contact", "https://evil.linkedin.com/in/jane-doe"),
    ("contact", "jane-doe"),                                    # a bare id is not a URL
    ("contact", "linkedin.com/in/jane-doe"),                    # no protocol
    ("contact", "www.linkedin.com/in/jane-doe"),
    ("contact", "ftp://www.linkedin.com/in/jane-doe"),
    ("contact", "javascript:alert(1)"),
    ("contact", "https://www.linkedin.com/in/"),                # no id
    ("contact", "https://www.linkedin.com/in/jane-doe/whatever"),  # not a profile section
    ("contact", "https://www.linkedin.com/mwlite/jane-doe"),
    ("contact", "https://www.linkedin.com/jane-doe"),
    ("contact", "https://www.linkedin.com:8443/in/jane-doe"),   # a port
    ("contact", "https://www.linkedin.com:80/in/jane-doe"),     # http's port under https
    ("contact", "https://www.linkedin.com/in/jane-doe/english"),  # not a language code
    ("contact", "https://www.linkedin.com/in/jane-doe/e1"),
    ("contact", "https://user@www.linkedin.com/in/jane-doe"),   # credentials
    ("contact", "https://www.linkedin.com/in/jane.doe"),        # a character ids do not hold
    ("contact", ""),
])
def test_invalid_urls_are_rejected_and_create_nothing(alice, entity_type, url):
    body = _assert_validation_error(_create(alice, entity_type=entity_type, network_url=url), "network_url")
    assert body["details"]["value"] == url
    assert _count(alice.account_id) == 0


@pytest.mark.parametrize("url", ["https://www.linkedin.com:8443/in/jane-doe",
                                 "https://user@www.linkedin.com/in/jane-doe", "https://:@www.linkedin.com/in/jane-doe",
                                 "https://@www.linkedin.com/in/jane-doe"])
def test_a_port_or_user_in_a_profile_url_is_named_as_the_problem(alice, url):
    body = _assert_validation_error(_create(alice, entity_type="contact", network_url=url), "network_url")
    assert "must name no user and no port but the scheme's" in body["message"] and "host must be" not in body["message"]
    assert _count(alice.account_id) == 0


@pytest.mark.parametrize("url", ["https://www.linkedin.com/in/u27/about/../../company/acme",
                                 "https://www.linkedin.com/in/u27/details/./x",
                                 "https://www.linkedin.com/in/u27/about/%2E%2e",
                                 "https://www.linkedin.com/in/u27/about/.%2e/x",
                                 "https://www.linkedin.com/in/u27/details/x\\..\\..\\..\\company\\acme"])
def test_a_url_with_dot_segments_is_refused(alice, url):
    """A browser resolves the dots: the first URL opens the company acme, and it was taken as the contact u27 (API
    walk)."""
    body = _assert_validation_error(_create(alice, entity_type="contact", network_url=url), "network_url")
    assert "must not contain . or .. segments" in body["message"]
    assert _count(alice.account_id) == 0


def test_id_and_url_naming_different_entities_are_rejected(alice):
    body = _assert_validation_error(_create(alice, entity_type="contact", network_id="jane-doe",
                                            network_url="https://www.linkedin.com/in/john-doe"), "network_url")
    assert "different" in body["message"]
    assert _count(alice.account_id) == 0


def test_network_domain_is_configuration(app, alice):
    app.config["NETWORK_DOMAIN"] = "network.example"
    body = _create(alice, entity_type="contact", network_url="https://network.example/in/pat").get_json()
    assert body["network_url"] == "https://www.network.example/in/pat"
    _assert_validation_error(_create(alice, entity_type="contact", network_url="https://www.linkedin.com/in/x1"),
                             "network_url")


# --- ids: case, unicode, length, characters --------------------------------------------------------

def test_ids_are_stored_lower_case(alice):
    assert _create(alice, entity_type="contact", network_id="Jane_DOE-42").get_json()["network_id"] == "jane_doe-42"


def test_raw_unicode_id_is_percent_encoded(alice):
    body = _create(alice, entity_type="contact", network_id="josé-garcía").get_json()
    assert body["network_id"] == "jos%c3%a9-garc%c3%ada"
    assert body["network_url"] == "https://www.linkedin.com/in/jos%c3%a9-garc%c3%ada"


def test_percent_encoded_and_raw_unicode_name_the_same_entity(alice):
    first = _create(alice, entity_type="contact", network_id="josé").get_json()
    again = _create(alice, entity_type="contact", network_url="https://www.linkedin.com/in/jos%C3%A9")
    assert again.status_code == 409
    assert again.get_json()["details"]["existing_subscription_id"] == first["id"]


def test_unicode_ids_compare_case_insensitively(alice):
    first = _create(alice, entity_type="contact", network_id="JOSÉ").get_json()
    assert first["network_id"] == "jos%c3%a9"
    again = _create(alice, entity_type="contact", network_id="josé")
    assert again.status_code == 409


def test_unicode_url_path_is_accepted(alice):
    body = _create(alice, entity_type="company", network_url="https://www.linkedin.com/company/café-ünïcode").get_json()
    assert body["network_id"] == "caf%c3%a9-%c3%bcn%c3%afcode"


def test_length_counts_the_encoded_form(alice):
    assert _create(alice, entity_type="contact", network_id="ab").status_code == 201
    assert _create(alice, entity_type="contact", network_id="x" * 100).status_code == 201
    _assert_validation_error(_create(alice, entity_type="contact", network_id="a"), "network_id")
    _assert_validation_error(_create(alice, entity_type="contact", network_id="y" * 101), "network_id")
    refused = _assert_validation_error(_create(alice, entity_type="contact", network_id="é" * 17), "network_id")
    # 17 characters, 102 once encoded: the message says why (contract walk: "must be 2-100 characters long" alone)
    assert "percent-encoded" in refused["message"] and "%c3%a9: 6" in refused["message"]
    assert _count(alice.account_id) == 2


@pytest.mark.parametrize("network_id", ["jane doe", "jane/doe", "jane.doe", "jane%", "jane%zz", "%ff%fe",
                                        "<script>", "jane'; drop table subscriptions;--", "a\u0000b", ""])
def test_invalid_ids_are_rejected(alice, network_id):
    body = _assert_validation_error(_create(alice, entity_type="contact", network_id=network_id), "network_id")
    assert body["details"]["value"] == network_id
    assert _count(alice.account_id) == 0


# --- bad bodies of every kind ----------------------------------------------------------------------

@pytest.mark.parametrize("body, field", [
    ({"network_id": "jane"}, "entity_type"),
    ({"entity_type": "person", "network_id": "jane"}, "entity_type"),
    ({"entity_type": "Contact", "network_id": "jane"}, "entity_type"),
    ({"entity_type": 1, "network_id": "jane"}, "entity_type"),
    ({"entity_type": None, "network_id": "jane"}, "entity_type"),
    ({"entity_type": ["contact"], "network_id": "jane"}, "entity_type"),
    ({"entity_type": "contact"}, "network_id"),
    ({"entity_type": "contact", "network_id": None}, "network_id"),
    ({"entity_type": "contact", "network_id": 12345}, "network_id"),
    ({"entity_type": "contact", "network_id": {"id": "x"}}, "network_id"),
    ({"entity_type": "contact", "network_url": 7}, "network_url"),
    ({"entity_type": "contact", "network_id": "x" * 401}, "network_id"),
    ({"entity_type": "contact", "network_url": "https://www.linkedin.com/in/" + "x" * 2100}, "network_url"),
    ({"entity_type": "contact", "network_id": "jane", "status": "paused"}, "status"),
    ({"entity_type": "contact", "network_id": "jane", "id": "sub_mine"}, "id"),
    ({"entity_type": "contact", "network_id": "jane", "custom_metadata": "x"}, "custom_metadata"),
    ({"entity_type": "contact", "network_id": "jane", "custom_metadata": {"k": 1}}, "custom_metadata.k.value"),
    ({"entity_type": "contact", "network_id": "jane", "custom_metadata": {"k": "v" * 501}},
     "custom_metadata.k.value"),
    ({"entity_type": "contact", "network_id": "jane", "custom_metadata": {"k" * 41: "v"}},
     "custom_metadata." + "k" * 41 + ".key"),
    ({"entity_type": "contact", "network_id": "jane", "custom_metadata": {f"k{n}": "v" for n in range(21)}},
     "custom_metadata"),
])
def test_bad_fields_are_400_and_create_nothing(alice, body, field):
    _assert_validation_error(_create(alice, **body), field)
    assert _count(alice.account_id) == 0


def test_all_problems_are_listed(alice):
    body = alice.post("/subscriptions", json={"entity_type": "robot", "network_id": 5, "extra": True}).get_json()
    fields = {error["field"] for error in body["details"]["errors"]}
    assert fields == {"entity_type", "network_id", "extra"}


@pytest.mark.parametrize("raw", ["", "null", "[]", '[{"entity_type": "contact", "network_id": "jane"}]',
                                 '"contact"', "42", "true", "{not json", '{"entity_type": "contact",}',
                                 b"\xff\xfe\x00"])
def test_bodies_that_are_not_a_json_object_are_400(alice, raw):
    response = alice.post("/subscriptions", data=raw, content_type="application/json")
    _assert_validation_error(response, "body")
    assert _count(alice.account_id) == 0


def test_metadata_limits_at_the_edge_are_accepted(alice):
    metadata = {("k%02d" % n).ljust(40, "k"): "v" * 500 for n in range(20)}
    response = _create(alice, entity_type="contact", network_id="edge", custom_metadata=metadata)
    assert response.status_code == 201
    assert response.get_json()["custom_metadata"] == metadata


# --- duplicates ------------------------------------------------------------------------------------

def test_duplicate_is_409_with_details(alice):
    first = _create(alice, entity_type="contact", network_id="jane-doe").get_json()
    response = _create(alice, entity_type="contact", network_url="https://linkedin.com/in/JANE-DOE/")
    assert response.status_code == 409
    body = response.get_json()
    assert body["error"] == "DUPLICATE_SUBSCRIPTION"
    assert body["details"] == {"existing_subscription_id": first["id"], "network_id": "jane-doe"}
    assert _count(alice.account_id) == 1


def test_paused_subscription_is_also_a_duplicate(alice):
    first = _create(alice, entity_type="contact", network_id="jane-doe").get_json()
    alice.post(f"/subscriptions/{first['id']}/pause")
    response = _create(alice, entity_type="contact", network_id="jane-doe")
    assert response.status_code == 409
    assert response.get_json()["details"]["existing_subscription_id"] == first["id"]


def test_same_id_as_contact_and_company_are_different_entities(alice):
    assert _create(alice, entity_type="contact", network_id="acme").status_code == 201
    assert _create(alice, entity_type="company", network_id="acme").status_code == 201


def test_two_accounts_can_watch_the_same_entity(alice, bob):
    assert _create(alice, entity_type="contact", network_id="jane-doe").status_code == 201
    assert _create(bob, entity_type="contact", network_id="jane-doe").status_code == 201


def test_recreate_after_cancel_gives_a_new_active_subscription(alice):
    first = _create(alice, entity_type="contact", network_id="jane-doe").get_json()
    cancelled = alice.delete(f"/subscriptions/{first['id']}").get_json()
    second = _create(alice, entity_type="contact", network_id="jane-doe")
    assert second.status_code == 201
    assert second.get_json()["id"] != first["id"]
    assert second.get_json()["status"] == "active"
    old = alice.get(f"/subscriptions/{first['id']}").get_json()
    assert old["status"] == "cancelled" and old["cancelled_at"] == cancelled["cancelled_at"]
    assert _count(alice.account_id) == 2


# --- tier cap --------------------------------------------------------------------------------------

@pytest.fixture
def app_config():
    tiers = copy.deepcopy(DEFAULT_TIERS)
    tiers["starter"]["subscription_limit"] = 3
    return {"TIERS": tiers}


def test_tier_cap_refuses_with_details(alice):
    for n in range(3):
        assert _create(alice, entity_type="contact", network_id=f"person-{n}").status_code == 201
    response = _create(alice, entity_type="contact", network_id="one-too-many")
    assert response.status_code == 403
    body = response.get_json()
    assert body["error"] == "TIER_LIMIT_EXCEEDED"
    assert body["details"] == {"current_count": 3, "tier_limit": 3, "tier": "starter"}
    assert _count(alice.account_id) == 3


def test_paused_subscriptions_count_toward_the_cap(alice):
    ids = [_create(alice, entity_type="contact", network_id=f"person-{n}").get_json()["id"] for n in range(3)]
    for subscription_id in ids:
        alice.post(f"/subscriptions/{subscription_id}/pause")
    assert _create(alice, entity_type="contact", network_id="extra").status_code == 403


def test_cancelled_subscriptions_free_their_slot(alice):
    ids = [_create(alice, entity_type="contact", network_id=f"person-{n}").get_json()["id"] for n in range(3)]
    alice.delete(f"/subscriptions/{ids[0]}")
    assert _create(alice, entity_type="contact", network_id="extra").status_code == 201


def test_duplicate_is_reported_before_the_cap(alice):
    for n in range(3):
        _create(alice, entity_type="contact", network_id=f"person-{n}")
    assert _create(alice, entity_type="contact", network_id="person-0").status_code == 409


def test_caps_are_per_account(alice, bob):
    for n in range(3):
        _create(alice, entity_type="contact", network_id=f"person-{n}")
    assert _create(bob, entity_type="contact", network_id="person-0").status_code == 201


@pytest.mark.parametrize("network_id", ["ab%2e", "%2e%2e", "a%7eb", "a%2fb", "ab%00", "a%20b", "ab%c2%a0"])
def test_percent_escapes_of_ascii_punctuation_or_spaces_are_refused(alice, network_id):
    """`%2e` is a '.', refused like a raw one: escapes may stand for non-ASCII UTF-8 letters only."""
    _assert_validation_error(_create(alice, entity_type="contact", network_id=network_id), "network_id")
    assert _count(alice.account_id) == 0


@pytest.mark.parametrize("url", [
    "https://www.linkedin.com/company/acme/about/",
    "https://uk.linkedin.com/company/acme/posts/?feedView=all",
    "https://www.linkedin.com/company/acme/people/",
    "https://m.linkedin.com/company/ACME",
])
def test_company_url_forms_resolve_to_the_canonical_url(alice, url):
    body = _create(alice, entity_type="company", network_url=url).get_json()
    assert (body["network_id"], body["network_url"]) == ("acme", "https://www.linkedin.com/company/acme")


def test_the_url_error_names_only_rules_the_code_enforces(alice):
    host = _create(alice, entity_type="contact", network_url="https://evil.linkedin.com/in/jane").get_json()
    assert "uk.linkedin.com" in host["message"] and "m.linkedin.com" in host["message"]
    path = _create(alice, entity_type="contact", network_url="https://www.linkedin.com/in/jane/x").get_json()
    assert "details" in path["message"] and "recent-activity" in path["message"]
    scheme = _create(alice, entity_type="contact", network_url="uk.linkedin.com/in/jane").get_json()
    assert "https://" in scheme["message"]


@pytest.mark.sqlite_only(reason="reads SQLite's EXPLAIN QUERY PLAN (its partial index needs the statuses in the SQL)")
def test_the_duplicate_check_looks_the_entity_up_in_the_live_unique_index(app, alice):
    """The live statuses are written into the SQL so SQLite can use the partial unique index; with bound values
    it scanned every live subscription of the account on each create (seconds at 1,000,000)."""
    from sqlalchemy import event

    from app.extensions import db
    plans = []

    @event.listens_for(db.engine, "before_cursor_execute")
    def _explain(_connection, cursor, statement, parameters, *_args):
        if ("network_id IN" in statement or "network_id = ?" in statement) and not statement.startswith("EXPLAIN"):
            plans.append(cursor.connection.execute("EXPLAIN QUERY PLAN " + statement, parameters).fetchall())

    assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane-doe"}).status_code == 201
    assert plans and all("USING INDEX uq_subscriptions_live_entity" in str(plan) for plan in plans), plans


def test_an_id_written_composed_or_decomposed_is_one_entity(alice):
    """`renée` with a precomposed é and with e + a combining accent look the same and were two subscriptions,
    both counted against the cap (API walk). Ids are read in Unicode's composed form (NFC), searches too."""
    first = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "ren\u00e9e-x"})
    assert first.status_code == 201 and first.json["network_id"] == "ren%c3%a9e-x"
    second = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "rene\u0301e-x"})
    assert second.status_code == 409 and second.json["error"] == "DUPLICATE_SUBSCRIPTION"
    by_url = alice.post("/subscriptions", json={"entity_type": "contact",
                                                "network_url": "https://www.linkedin.com/in/rene%CC%81e-x"})
    assert by_url.status_code == 409
    found = alice.get("/subscriptions", query_string={"search": "rene\u0301e"}).json
    assert [item["id"] for item in found["data"]] == [first.json["id"]]


@pytest.mark.parametrize("character", ["\u037e", "\u1fef"])
def test_a_character_whose_composed_form_is_ascii_punctuation_is_refused(alice, character):
    """U+037E composes into ';' and U+1FEF into '`': they were stored as %3b and %60, ids the service itself refused
    when sent back (review)."""
    response = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": f"ab{character}"})
    assert response.status_code == 400 and response.json["error"] == "VALIDATION_ERROR"
