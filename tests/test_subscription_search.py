"""`search=` (contract: any part of the network id or URL, case-insensitively), answered by a trigram index of
the ids and, for texts shorter than a trigram, counters of the ids' 1- and 2-character grams (issue 12): the
same rows and totals as a plain substring test of the id and the URL."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from app.extensions import db
from app.models import SubscriptionGramCount
from app.services import accounts, subscription_search, subscriptions
from app.services.entities import search_form
from app.services.subscription_search import SearchPlan, plan


def _create(tenant, network_id, entity_type="contact"):
    response = tenant.post("/subscriptions", json={"entity_type": entity_type, "network_id": network_id})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def _search(tenant, search, **params):
    response = tenant.get("/subscriptions", query_string={"search": search, "limit": 100, **params})
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    return sorted(item["network_id"] for item in body["data"]), body["pagination"]["total"]


@pytest.fixture
def people(alice):
    for network_id in ("jane-doe", "john-smith", "janet_o-neil", "anna-company-fan", "jos%C3%A9-garc%C3%ADa"):
        _create(alice, network_id)
    for network_id in ("acme", "janeway-labs", "100-percent"):
        _create(alice, network_id, "company")
    return alice


@pytest.mark.parametrize("search, expected", [
    ("ane-d", ["jane-doe"]),                                   # the middle of an id
    ("JANE", ["jane-doe", "janet_o-neil", "janeway-labs"]),    # case-insensitive
    ("in/jane", ["jane-doe", "janet_o-neil"]),                 # runs from the URL into the id
    ("company/jane", ["janeway-labs"]),
    ("/in/", ["anna-company-fan", "jane-doe", "janet_o-neil", "john-smith", "jos%c3%a9-garc%c3%ada"]),
    ("company", ["100-percent", "acme", "anna-company-fan", "janeway-labs"]),  # URL of companies, one contact's id
    ("linkedin.com", None),                                   # in every URL
    ("josé", ["jos%c3%a9-garc%c3%ada"]),                       # unicode, in its stored percent-encoded form
    ("%C3%A9-GARC", ["jos%c3%a9-garc%c3%ada"]),
    ("é", ["jos%c3%a9-garc%c3%ada"]),
    ("a", ["100-percent", "acme", "anna-company-fan", "jane-doe", "janet_o-neil", "janeway-labs",
           "jos%c3%a9-garc%c3%ada"]),                             # shorter than a trigram: LIKE, still literal
    ("w.", None), ("me", ["acme"]), ("_o", ["janet_o-neil"]),
    ("%", ["jos%c3%a9-garc%c3%ada"]), ("_", ["janet_o-neil"]), ("t_o", ["janet_o-neil"]), ("t%o", []),
    ("\\", []), ('"', []), ('jane"', []), ('"jane"', []), ("jane OR acme", []), ("jane*", []), ("NEAR(jane", []),
    ("network_id:jane", []), ("-doe", ["jane-doe"]), ("^jane", []), ("smith AND", []),
    ("in/j", ["jane-doe", "janet_o-neil", "john-smith", "jos%c3%a9-garc%c3%ada"]),  # starts the id: 1 character
    ("y/j", ["janeway-labs"]), ("^j", []), ("^", []), ("zz", []),
    # the text of a percent-escape is the stored id's text, matched on both databases alike (README: Search)
    ("c3", ["jos%c3%a9-garc%c3%ada"]), ("%c3", ["jos%c3%a9-garc%c3%ada"]), ("3%a", ["jos%c3%a9-garc%c3%ada"]),
    ("a9-g", ["jos%c3%a9-garc%c3%ada"]), ("in/c3", []),
])
def test_search_matches_literally_anywhere_in_the_id_or_url(people, search, expected):
    everyone = sorted(item["network_id"] for item in people.get("/subscriptions?limit=100").get_json()["data"])
    found, total = _search(people, search)
    assert found == (everyone if expected is None else expected)
    assert total == len(found)


@pytest.mark.parametrize("search, expected", [
    ("https://de.linkedin.com/in/jane-doe/", ["jane-doe"]),
    ("  https://www.linkedin.com/in/Jane-Doe/?originalSubdomain=de ", ["jane-doe"]),
    ("http://linkedin.com/in/jane-doe/details/experience/", ["jane-doe"]),
    ("www.linkedin.com/company/acme/about/", ["acme"]),
    ("uk.linkedin.com/in/jane/", ["jane-doe", "janet_o-neil"]),          # as the URL's stored start, a prefix
    ("https://es.linkedin.com/in/jos%C3%A9-garc%C3%ADa/", ["jos%c3%a9-garc%c3%ada"]),
    ("https://www.linkedin.com/in/josé-garcía/", ["jos%c3%a9-garc%c3%ada"]),
    ("https://www.linkedin.com/company/jane-doe/", []),                 # a company's URL: no contact
    ("https://www.example.com/in/jane-doe/", []),                       # not the network's: matched as written
])
def test_a_pasted_profile_url_finds_what_its_id_finds(people, search, expected):
    """A URL copied from the browser (a country subdomain, a trailing slash, a section, a query) found nothing:
    the stored URL is https://www.linkedin.com/in/<id> only (walk). It is searched as its profile's stored URL."""
    everyone = sorted(item["network_id"] for item in people.get("/subscriptions?limit=100").get_json()["data"])
    found, total = _search(people, search)
    assert found == (everyone if expected is None else expected)
    assert total == len(found)


def test_search_with_filters_and_pages(people):
    assert _search(people, "jane", entity_type="company") == (["janeway-labs"], 1)
    assert _search(people, "company", entity_type="contact") == (["anna-company-fan"], 1)
    assert _search(people, "company", entity_type="company") == (["100-percent", "acme", "janeway-labs"], 3)
    page = people.get("/subscriptions", query_string={"search": "jane", "limit": 2}).get_json()
    assert len(page["data"]) == 2 and page["pagination"] == {"total": 3, "limit": 2, "offset": 0, "has_more": True}
    assert [item["network_id"] for item in page["data"]] == ["janeway-labs", "janet_o-neil"]  # newest first
    people.delete(f"/subscriptions/{page['data'][0]['id']}")
    assert _search(people, "jane", status="cancelled") == (["janeway-labs"], 1)
    assert _search(people, "linkedin", status="active")[1] == 7
    assert _search(people, "jane", status="active") == (["jane-doe", "janet_o-neil"], 2)


def test_search_sees_only_the_callers_rows(people, bob):
    _create(bob, "jane-doe-2")
    assert _search(bob, "jane") == (["jane-doe-2"], 1)
    assert _search(people, "doe-2") == ([], 0)


def test_a_search_too_short_for_a_trigram_takes_its_total_from_the_gram_counters(people):
    assert _search(people, "-d") == (["jane-doe"], 1)
    counter = SubscriptionGramCount
    db.session.execute(update(counter).where(counter.account_id == people.account_id, counter.gram == "-d")
                       .values(count=counter.count + 5))
    db.session.commit()
    assert _search(people, "-d") == (["jane-doe"], 6)  # the rows were not counted


def test_an_account_alone_in_the_table_is_counted_by_the_trigram_index_alone(people, bob, monkeypatch):
    counted_in_index = []
    index_count = subscription_search.index_count
    monkeypatch.setattr(subscription_search, "index_count", lambda needle: counted_in_index.append(needle)
                        or index_count(needle))
    janes = ["jane-doe", "janet_o-neil", "janeway-labs"]
    assert _search(people, "jane") == (janes, 3)
    assert counted_in_index == (["jane"] if db.engine.dialect.name == "sqlite" else [])
    assert _search(people, "jane", status="active") == (janes, 3)  # filtered: each match's row is read
    _create(bob, "jane-bob")
    assert _search(people, "jane") == (janes, 3) and _search(bob, "jane") == (["jane-bob"], 1)
    assert len(counted_in_index) <= 1


@pytest.fixture
def neighbour_route(monkeypatch):
    """What each search's neighbour-trigram page answered (None: it left the page to the walk)."""
    answers = []
    route = subscriptions._page_from_neighbour_trigrams

    def recorded(*args):
        answers.append(route(*args))
        return answers[-1]
    monkeypatch.setattr(subscriptions, "_page_from_neighbour_trigrams", recorded)
    return answers


def test_a_rare_2_character_needle_is_paged_from_its_neighbour_trigrams(people, bob, neighbour_route, monkeypatch):
    for network_id in ("bob-0a", "bob-0b", "bob-0c"):  # other accounts' candidates come first in the index
        _create(bob, network_id)
    _create(people, "x-0y")
    monkeypatch.setattr(subscriptions, "CANDIDATE_COST", 0.001)
    assert _search(people, "-0") == (["x-0y"], 1)
    if db.engine.dialect.name != "sqlite":  # PostgreSQL's trigram index serves the LIKE itself
        assert neighbour_route == []
        return
    assert neighbour_route[-1] is not None
    monkeypatch.setattr(subscriptions, "CANDIDATE_COST", 9 / 2)  # 2 candidates: bob's, so not all matches
    assert _search(people, "-0") == (["x-0y"], 1)
    assert neighbour_route[-1] is None
    monkeypatch.setattr(subscriptions, "CANDIDATE_COST", 0.001)
    _create(people, "-0")  # an id of exactly the needle holds no trigram: walked
    assert _search(people, "-0") == (["-0", "x-0y"], 2)
    assert neighbour_route[-1] is None


def test_the_plan_splits_a_needle_over_the_url_and_the_id():
    assert plan("ww.link", "linkedin.com").whole_types == ("contact", "company")
    assert ("contact", "ja") in plan("/in/ja", "linkedin.com").id_starts
    assert plan("/in/ja", "linkedin.com").whole_types == ()
    assert plan("n/x", "linkedin.com").id_starts == (("contact", "x"),)
    assert plan("jane", "linkedin.com") == SearchPlan("jane", (), ("contact", "company"), ())
    assert plan("y/", "linkedin.com").whole_types == ("company",)
    assert plan("n/x.y", "linkedin.com") == SearchPlan("n/x.y", (), (), ())  # '/' and '.' are in no id
    assert plan("/x", "linkedin.com").counted_grams == (("contact", "^x"), ("company", "^x"))
    assert plan("x-", "linkedin.com").counted_grams == (("contact", "x-"), ("company", "x-"))
    assert not plan("x-", "linkedin.com").indexed and plan("/xyz", "linkedin.com").indexed


# --- a property: the index answers like a plain substring test ----------------------------------

ID_TEXT = st.lists(st.sampled_from(["a", "b", "c", "i", "n", "-", "_", "0", "y", "W", "é", "%C3%A9"]),
                   min_size=2, max_size=10).map("".join)
NEEDLES = st.one_of(st.text(st.sampled_from("abcin-_%0/.:ywmopst\"*\\ "), min_size=1, max_size=8),
                    st.sampled_from(["https://www.linkedin.com/in/", "m/company/a", "com/c", "n/a", "in/"]))


@pytest.mark.parametrize("candidate_cost", [subscriptions.CANDIDATE_COST, 0.001])  # 0.001: neighbour trigrams
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(ID_TEXT, st.sampled_from(["contact", "company"])), max_size=12), NEEDLES,
       st.sampled_from([None, "contact", "company"]))
def test_search_equals_a_substring_test_of_id_and_url(module_app, monkeypatch, candidate_cost, entities, needle,
                                                      entity_type):
    monkeypatch.setattr(subscriptions, "CANDIDATE_COST", candidate_cost)
    account, _key = accounts.create_account("Property", "enterprise")
    stored = []
    for raw_id, kind in entities:
        try:
            created = subscriptions.create(account.id, {"entity_type": kind, "network_id": raw_id,
                                                        "network_url": None, "custom_metadata": {}})
        except Exception:  # an invalid or duplicate id: not stored
            db.session.rollback()
            continue
        stored.append(created)
    form = search_form(needle)
    expected = sorted(s.id for s in stored if (entity_type is None or s.entity_type == entity_type)
                      and (form in s.network_id or form in s.network_url.lower()))
    rows, total = subscriptions.list_page(account.id, 100, 0, entity_type=entity_type, search=needle)
    assert sorted(row.id for row in rows) == expected
    assert total == len(expected)
