"""The crustdata and coresignal adapters against local fakes that answer as the vendors' documentation
shows. Sources (also on the fakes in tests/fake_vendors.py):
- https://docs.crustdata.com/person-docs/enrichment/introduction
- https://docs.crustdata.com/api-reference/person-apis/enrich-person-profiles-from-cached-dataset.md
- https://docs.crustdata.com/company-docs/enrichment/reference
- https://docs.crustdata.com/openapi-specs/2025-11-01/best-practices
- https://docs.crustdata.com/general/rate-limits.md
- https://github.com/crustdata/n8n-nodes-crustdata/blob/main/nodes/Crustdata/filter-fields.generated.ts
  (Crustdata's own field list, generated from its OpenAPI 2025-11-01 spec:
  experience.employment_details.current)
- https://docs.coresignal.com/api-introduction/authorization
- https://docs.coresignal.com/api/clean-employee-api
- https://docs.coresignal.com/employee-api/clean-employee-api/data-dictionary-clean-employee-api
- https://docs.coresignal.com/company-api/clean-company-api/sample-clean-company-api-data.md
- https://docs.coresignal.com/api-introduction/response-codes
- https://docs.coresignal.com/api-introduction/credits
"""
import json
import logging
import math
import time

import pytest
import requests

from app.providers import EntityUnavailable, ProviderError, QuotaExhausted, load_provider
from app.providers.base import MAX_TEXT_LENGTH, AccessRefused, normalize_snapshot
from app.providers.coresignal import CoresignalProvider
from app.providers.crustdata import CrustdataProvider
from app.providers import vendor_http
from app.providers.http import HttpProvider
from app.providers.vendor_http import json_body
from app.worker import checks as worker
from tests.fake_vendors import FakeCoresignal, FakeCrustdata, JsonHandler, LocalServer, NoSuchRoute

JANE = "https://www.linkedin.com/in/jane-doe"
ACME = "https://www.linkedin.com/company/acme"


@pytest.fixture
def crustdata():
    vendor = FakeCrustdata()
    yield vendor
    vendor.close()


@pytest.fixture
def coresignal():
    vendor = FakeCoresignal()
    yield vendor
    vendor.close()


def crust(vendor, key=FakeCrustdata.api_key):
    return CrustdataProvider(key, vendor.url, timeout=2)


def core(vendor, key=FakeCoresignal.api_key):
    return CoresignalProvider(key, vendor.url, timeout=2)


# --- crustdata ----------------------------------------------------------------------------------------

def test_crustdata_person_maps_the_documented_fields_and_leaves_the_rest_unknown(crustdata):
    crustdata.person(JANE)
    assert crust(crustdata).fetch("contact", JANE) == {
        "network_id": "jane-doe", "name": "Jane Doe", "headline": "Engineer at Acme", "company": "Acme",
        "title": "Engineer", "location": "Berlin, Germany"}  # no activities: unknown, never empty
    _, method, path, headers, body = crustdata.calls[0]
    assert (method, path) == ("POST", "/person/enrich")
    assert headers["authorization"] == "Bearer test-key" and headers["x-api-version"] == "2025-11-01"
    assert json.loads(body) == {"professional_network_profile_urls": [JANE],
                                "fields": ["basic_profile", "experience"]}


def test_crustdata_current_employer_is_the_default_current_position_and_unknown_without_one(crustdata):
    crustdata.person(JANE, company=None)
    assert crust(crustdata).fetch("contact", JANE)["company"] is None  # only past positions: unknown
    record = crustdata.records[("person", JANE)]
    record["experience"]["employment_details"]["current"] = [
        {"name": "Side Gig", "title": "Advisor", "is_default": False},
        {"name": "Acme", "title": "Engineer", "is_default": True}]
    assert crust(crustdata).fetch("contact", JANE)["company"] == "Acme"
    del record["experience"]
    assert crust(crustdata).fetch("contact", JANE)["company"] is None  # no experience section: unknown


def test_crustdata_company_maps_headcount_and_description(crustdata):
    crustdata.company(ACME)
    assert crust(crustdata).fetch("company", ACME) == {
        "network_id": "acme", "name": "Acme", "description": "Makes anvils.", "headcount": 120,
        "industry": "Manufacturing", "website": "https://acme.example"}
    assert json.loads(crustdata.calls[0][4])["fields"] == ["basic_info", "headcount"]


def test_crustdata_batches_urls_and_matches_each_answer_to_its_url(crustdata):
    urls = [f"https://www.linkedin.com/in/p{number}" for number in range(3)]
    for number, url in enumerate(urls[:2]):
        crustdata.person(url, name=f"P{number}")
    answers = crust(crustdata).fetch_many("contact", list(reversed(urls)))
    assert len(crustdata.calls) == 1
    assert answers[urls[0]]["name"] == "P0" and answers[urls[1]]["name"] == "P1"
    assert isinstance(answers[urls[2]], EntityUnavailable) and answers[urls[2]].reason == "not_found"


def test_crustdata_echoing_a_url_with_a_trailing_slash_still_matches(crustdata):
    crustdata.person(JANE + "/")
    assert crust(crustdata).fetch_many("contact", [JANE + "/"])[JANE + "/"]["name"] == "Jane Doe"


@pytest.mark.parametrize("answer, error, detail", [
    ((401, {"message": "Invalid API key in request"}, {}), AccessRefused, None),
    ((402, {"error": {"type": "insufficient_credits", "message": "x", "metadata": {}}}, {}), QuotaExhausted, None),
    ((429, {}, {"x-ratelimit-reset": "37"}), ProviderError, 37.0),
    ((429, {}, {"x-ratelimit-reset": "soon", "Retry-After": "5"}), ProviderError, 5.0),  # was a minute: walk
    ((500, {"message": "oops"}, {}), ProviderError, None),
    ((502, b"<html>bad gateway</html>", {}), ProviderError, None),
    ((200, b"{not json", {}), ProviderError, None),
    ((200, {"results": "not a list"}, {}), ProviderError, None),
])
def test_crustdata_error_answers(crustdata, answer, error, detail):
    crustdata.forced.append(answer)
    with pytest.raises(error) as raised:
        crust(crustdata).fetch_many("contact", [JANE])
    if error is ProviderError:
        assert raised.value.retry_after == detail


def test_crustdata_wrong_key_is_refused_by_the_fake_as_by_the_vendor(crustdata):
    crustdata.person(JANE)
    with pytest.raises(AccessRefused):
        crust(crustdata, key="wrong").fetch_many("contact", [JANE])


def test_crustdata_a_match_without_data_is_transient_for_that_url(crustdata):
    crustdata.forced.append((200, [{"matched_on": JANE, "match_type": "professional_network_profile_url",
                                    "matches": [{"confidence_score": 1.0}]}], {}))
    assert isinstance(crust(crustdata).fetch_many("contact", [JANE])[JANE], ProviderError)


def test_crustdata_needs_an_api_key_from_its_own_settings(monkeypatch, crustdata):
    with pytest.raises(ValueError, match="PROVIDER_CRUSTDATA_API_KEY"):
        load_provider({"PROVIDER": "crustdata"})
    monkeypatch.setenv("PROVIDER_CRUSTDATA_API_KEY", "from-env")
    monkeypatch.setenv("PROVIDER_CRUSTDATA_URL", crustdata.url)
    provider = load_provider({"PROVIDER": "crustdata"})
    assert (provider.base_url, provider.batch_size, provider.rate_limit, provider.lookup) == (
        crustdata.url, 25, "15/minute", "url")


# --- coresignal ---------------------------------------------------------------------------------------

def test_coresignal_employee_maps_the_current_experience(coresignal):
    coresignal.person("jane-doe")
    assert core(coresignal).fetch("contact", "jane-doe") == {
        "network_id": "jane-doe", "name": "Jane Doe", "headline": "Engineer at Acme", "title": "Engineer",
        "company": "Acme"}
    _, method, path, headers, _ = coresignal.calls[0]
    assert (method, path, headers["apikey"]) == ("GET", "/cdapi/v2/employee_clean/collect/jane-doe", "test-key")


def test_coresignal_company_maps_the_headcount(coresignal):
    coresignal.company("acme")
    assert core(coresignal).fetch("company", "acme") == {
        "network_id": "acme", "name": "Acme", "description": "Makes anvils.", "industry": "Software",
        "headcount": 150, "website": "http://www.acme.example"}


def test_coresignal_shorthand_names_are_sent_percent_encoded(coresignal):
    coresignal.person("jérôme/x")
    assert core(coresignal).fetch("contact", "jérôme/x")["name"] == "Jane Doe"
    assert coresignal.calls[0][2] == "/cdapi/v2/employee_clean/collect/j%C3%A9r%C3%B4me%2Fx"


def test_coresignal_missing_and_deleted_profiles_are_unavailable(coresignal):
    coresignal.person("gone", deleted=1)
    provider = core(coresignal)
    for key, reason in (("nobody", "not_found"), ("gone", "private")):
        with pytest.raises(EntityUnavailable) as raised:
            provider.fetch("contact", key)
        assert raised.value.reason == reason


def test_coresignal_records_credits_per_successful_collect_and_the_balance(coresignal):
    coresignal.credits = 10
    coresignal.person("jane-doe")
    provider = core(coresignal)
    answers = provider.fetch_many("contact", ["jane-doe"])
    assert answers.credits == 1.0 and provider.credits_remaining == 9
    assert provider.fetch_many("contact", ["nobody"]).credits == 0  # a 404 is not charged


def test_coresignal_402_when_credits_are_spent(coresignal):
    coresignal.credits = 0
    coresignal.person("jane-doe")
    with pytest.raises(QuotaExhausted):
        core(coresignal).fetch("contact", "jane-doe")


@pytest.mark.parametrize("answer, error, retry_after", [
    ((401, {"detail": "No valid API key"}, {}), AccessRefused, None),
    ((429, {"detail": "Rate limit exceeded"}, {"Retry-After": "2"}), ProviderError, 2.0),
    ((429, {"detail": "Rate limit exceeded"}, {}), ProviderError, 60.0),
    # an unreadable Retry-After (RFC 9110: ASCII digits or an HTTP-date) is no Retry-After: a minute
    ((429, {"detail": "Rate limit exceeded"}, {"Retry-After": "nan"}), ProviderError, 60.0),
    ((429, {"detail": "Rate limit exceeded"}, {"Retry-After": "-5"}), ProviderError, 60.0),
    ((429, {"detail": "Rate limit exceeded"}, {"Retry-After": "1_000"}), ProviderError, 60.0),
    ((429, {"detail": "Rate limit exceeded"}, {"Retry-After": "9" * 400}), ProviderError, math.inf),
    # its documented 503 "too many requests" pauses as a 429 does (it failed each check instead: walk)
    ((503, {"detail": "Too many requests"}, {"Retry-After": "1e3"}), ProviderError, 60.0),
    ((503, {"detail": "Too many requests"}, {}), ProviderError, 60.0),
    ((503, {"detail": "Too many requests"}, {"Retry-After": "7"}), ProviderError, 7.0),
    ((500, {"detail": "Oops"}, {}), ProviderError, None),
    ((200, b"[1, 2", {}), ProviderError, None),
    ((200, [1, 2], {}), ProviderError, None),
])
def test_coresignal_error_answers(coresignal, answer, error, retry_after):
    coresignal.forced.append(answer)
    with pytest.raises(error) as raised:
        core(coresignal).fetch("contact", "jane-doe")
    if error is ProviderError:
        assert raised.value.retry_after == retry_after


@pytest.fixture
def no_such_route():
    server = NoSuchRoute()
    yield server
    server.close()


@pytest.mark.parametrize("vendor, setting, key, path", [
    (CoresignalProvider, "PROVIDER_CORESIGNAL_URL", "jane-doe", "/cdapi/v2/employee_clean/collect/jane-doe"),
    (CrustdataProvider, "PROVIDER_CRUSTDATA_URL", JANE, "/person/enrich")], ids=["coresignal", "crustdata"])
def test_a_404_from_a_server_without_the_vendors_routes_is_a_failed_call_not_not_found(
        no_such_route, vendor, setting, key, path, caplog):
    """A wrong base URL reaches a web server whose 404 page says nothing of the profile: it was read as "no such
    record", and every subscription would have been marked not found. The operator is told once in OccasionalLog's
    period, however many checks fail so (review: a line a call flooded the log at the vendor's call rate)."""
    provider = vendor("k", base_url=no_such_route.url)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            with pytest.raises(ProviderError, match=f"check {setting}") as raised:
                provider.fetch("contact", key)
            assert raised.value.retry_after is None  # this check fails; the provider is not paused
    assert [record.getMessage() for record in caplog.records if setting in record.getMessage()] == [
        f"HTTP 404 (text/html;charset=utf-8) from {no_such_route.url}{path} is not the vendor's answer for a missing "
        f"profile but a web server's for an unknown route: is {setting} right? (said at most every 600 s)"]


def test_coresignal_a_404_that_is_not_its_json_error_is_not_taken_for_a_missing_record(coresignal):
    coresignal.forced.extend([(404, b"", {}), (404, b"Not Found", {"Content-Type": "text/plain"})])
    for _ in range(2):
        with pytest.raises(ProviderError, match="check PROVIDER_CORESIGNAL_URL"):
            core(coresignal).fetch("contact", "nobody")
    with pytest.raises(EntityUnavailable):  # its documented answer: {"detail": "Not found"}
        core(coresignal).fetch("contact", "nobody")


@pytest.mark.parametrize("content_type", ["text/plain", "text/html; charset=utf-8", "application/octet-stream"])
def test_coresignal_its_error_object_is_a_missing_record_whatever_type_it_names(coresignal, content_type):
    """Review: its answers are read as JSON whatever type they name (a 200 labelled text/html included), but its 404
    was its error object only when labelled JSON: a missing record labelled otherwise was taken for a wrong
    PROVIDER_CORESIGNAL_URL, its check failed at every interval for good, and no entity.unavailable was ever sent."""
    coresignal.forced.append((404, b'{"detail": "Not found"}', {"Content-Type": content_type}))
    with pytest.raises(EntityUnavailable) as raised:
        core(coresignal).fetch("contact", "nobody")
    assert raised.value.reason == "not_found"


def test_coresignal_needs_an_api_key(coresignal):
    with pytest.raises(ValueError, match="PROVIDER_CORESIGNAL_API_KEY"):
        load_provider({"PROVIDER": "coresignal"})
    provider = load_provider({"PROVIDER": "coresignal", "PROVIDER_CORESIGNAL_API_KEY": "k",
                              "PROVIDER_CORESIGNAL_URL": coresignal.url, "PROVIDER_RATE_LIMIT": "5/second"})
    assert provider.rate_limit == "5/second" and provider.base_url == coresignal.url


# --- through the engine -------------------------------------------------------------------------------

def test_crustdata_through_the_engine_looks_up_by_url_and_pauses_on_402(app, alice, crustdata):
    app.extensions["provider"] = crust(crustdata)
    crustdata.person(JANE)
    response = alice.post("/subscriptions", json={"entity_type": "contact", "network_url": JANE})
    assert response.status_code == 201, response.json
    assert worker.run_one(response.json["id"]).checked == 1
    assert json.loads(crustdata.calls[0][4])["professional_network_profile_urls"] == [JANE]
    crustdata.credits = 0
    assert worker.run_one(response.json["id"]).deferred == 1
    status = alice.get("/account/usage").json["provider_status"]
    assert (status["provider"], status["state"], status["reason"]) == ("crustdata", "paused", "quota_exhausted")


def test_coresignal_through_the_engine_counts_credits_in_usage(app, alice, coresignal):
    app.extensions["provider"] = core(coresignal)
    coresignal.credits = 100
    coresignal.company("acme")
    response = alice.post("/subscriptions", json={"entity_type": "company", "network_id": "acme"})
    assert worker.run_one(response.json["id"]).checked == 1
    usage = alice.get("/account/usage").json
    assert (usage["day"]["provider_calls"], usage["day"]["provider_credits"]) == (1, 1.0)
    assert usage["provider_status"]["credits_remaining"] == 99
    # another process (a web worker while `scheduler run` checks) shows the balance too: it lived in the memory of
    # the process that made the calls (vendor walk)
    app.extensions["provider"] = core(coresignal)
    assert alice.get("/account/usage").json["provider_status"]["credits_remaining"] == 99
    assert app.test_client().get("/healthz").json["provider"]["credits_remaining"] == 99


# --- what a vendor's JSON may hold -----------------------------------------------------------------------

def _answer(text):
    response = requests.Response()
    response.status_code, response._content, response.encoding = 200, text.encode("utf-8"), "utf-8"
    return response


def test_a_vendor_answer_is_read_into_values_json_can_carry_on():
    body = json_body(_answer('{"headline": "Founder \\ud83d", "pair": "\\ud83d\\ude00 \\u00e9", "n": NaN, '
                             '"big": -1e999, "fine": 1.5, "list": [{"\\udc00k": "x"}]}'), dict)
    assert body == {"headline": "Founder \ufffd", "pair": "\U0001f600 \u00e9", "n": None, "big": None, "fine": 1.5,
                    "list": [{"\ufffdk": "x"}]}
    json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")


def test_json_nested_past_the_parsers_depth_is_a_transient_failure():
    """RecursionError escaped the reader: the check failed with an ERROR and a traceback in the log, not the one-line
    failure of any other unreadable answer (walk)."""
    with pytest.raises(ProviderError, match="not JSON"):
        json_body(_answer("[" * 100_000 + "]" * 100_000), list)


def test_an_emoji_cut_in_half_by_the_vendor_is_checked_and_recorded(app, alice, crustdata):
    """A lone surrogate escape in the vendor's JSON failed the encoding of the event body, and with it every check
    batch holding the subscription, every 2 minutes."""
    app.extensions["provider"] = crust(crustdata)
    crustdata.person(JANE, headline="Founder \ud83d")
    response = alice.post("/subscriptions", json={"entity_type": "contact", "network_url": JANE})
    assert worker.run_one(response.json["id"]).checked == 1
    [event] = alice.get("/events").json["data"]
    assert "Founder \ufffd" in json.dumps(event, ensure_ascii=False)


# --- vendors that misbehave (vendor walk) -------------------------------------------------------------------

class Dripper(LocalServer):
    """Answers 200 with a long body, then a byte every half second: each read within any timeout, the whole never.
    Without `length` the body runs to the connection's close, as an HTTP/1.0 answer's."""

    def __init__(self, length=True):
        class Handler(JsonHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if length:
                    self.send_header("Content-Length", "100000")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b"{}")
                try:
                    for _ in range(40):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.5)
                except OSError:  # the client hung up: what it should do
                    pass

            do_POST = do_GET

        super().__init__(Handler)


@pytest.mark.parametrize("provider_for", [lambda url: CoresignalProvider("k", url, timeout=1.5),
                                          lambda url: CrustdataProvider("k", url, timeout=1.5),
                                          lambda url: HttpProvider(url, None, timeout=1.5)])
def test_an_answer_dripping_past_the_timeout_is_a_transient_failure_at_the_timeout(provider_for):
    """Each read came within the timeout, so the call never ended: checking stopped, its claims and concurrency
    slot held past their lease, /healthz 503, until the vendor was killed (walk)."""
    dripper = Dripper()
    try:
        started = time.monotonic()
        with pytest.raises(ProviderError, match="no complete answer within 1.5 s"):
            provider_for(dripper.url).fetch("contact", "jane-doe")
        assert time.monotonic() - started < 10  # the drip would last 20 s
    finally:
        dripper.close()


class Flood(LocalServer):
    """Answers 200 with a body of `size` bytes, to its connection's close (no length given)."""

    def __init__(self, size):
        class Handler(JsonHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self.wfile.write(b'{"name": "' + b"x" * size + b'"}')
                except OSError:  # the client hung up: what it should do
                    pass

        super().__init__(Handler)


def test_an_answer_over_the_size_cap_is_a_transient_failure(monkeypatch):
    """It was read whole into memory, however large: an endless answer grew the scheduler until it was killed."""
    monkeypatch.setattr(vendor_http, "MAX_ANSWER_BYTES", 100_000)
    for size, fits in ((99_000, True), (150_000, False)):
        flood = Flood(size)
        try:
            if fits:
                assert len(HttpProvider(flood.url, None, timeout=5).fetch("contact", "jane-doe")["name"]) == size
            else:
                with pytest.raises(ProviderError, match="provider answer is over 100,000 bytes"):
                    HttpProvider(flood.url, None, timeout=5).fetch("contact", "jane-doe")
        finally:
            flood.close()


def test_an_answer_read_to_its_close_and_cut_at_the_deadline_is_not_taken_for_complete():
    """It came back as an ordinary answer, its body cut short (review)."""
    dripper = Dripper(length=False)
    try:
        with pytest.raises(ProviderError, match="no complete answer within 1.5 s"):
            HttpProvider(dripper.url, None, timeout=1.5).fetch("contact", "jane-doe")
    finally:
        dripper.close()


def test_the_deadline_holds_through_a_proxy_from_the_environment(monkeypatch):
    """Through an HTTP proxy requests made its connections in pools the watcher did not know (review)."""
    dripper = Dripper()
    monkeypatch.setenv("HTTP_PROXY", dripper.url)  # the dripper answers as the proxy would relay a dripping vendor
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        started = time.monotonic()
        with pytest.raises(ProviderError, match="no complete answer within 1.5 s"):
            HttpProvider("http://vendor.example", None, timeout=1.5).fetch("contact", "jane-doe")
        assert time.monotonic() - started < 10
    finally:
        dripper.close()


def test_coresignal_sends_a_stored_percent_encoded_id_as_it_is(coresignal):
    """Stored ids are percent-encoded (`jos%c3%a9`): encoding their % again asked for another name, and the vendor's
    404 became a false `entity.unavailable` (walk)."""
    coresignal.person("josé")
    assert core(coresignal).fetch("contact", "jos%c3%a9")["name"] == "Jane Doe"
    assert coresignal.calls[0][2].lower() == "/cdapi/v2/employee_clean/collect/jos%c3%a9"


@pytest.mark.parametrize("content_type", ["text/plain", "text/html", "application/json; charset=iso-8859-1",
                                          "application/octet-stream"])
def test_a_vendors_json_is_read_as_utf8_whatever_charset_it_names(coresignal, content_type):
    """requests read a text/* answer as Latin-1: "Café" became "CafÃ©", a false change and another back (walk)."""
    coresignal.person("jane-doe", headline="Café owner")
    body = json.dumps(coresignal.records[("person", "jane-doe")], ensure_ascii=False).encode()
    coresignal.forced.extend([(200, body, {"Content-Type": content_type}),
                              (200, b"\xef\xbb\xbf" + body, {"Content-Type": content_type})])  # with a BOM
    provider = core(coresignal)
    assert [provider.fetch("contact", "jane-doe")["headline"] for _ in range(2)] == ["Café owner"] * 2
    coresignal.forced.append((200, "{\"full_name\": \"Caf\xe9\"}".encode("latin-1"), {}))  # not UTF-8: not JSON
    with pytest.raises(ProviderError, match="not JSON"):
        provider.fetch("contact", "jane-doe")


def test_the_current_employer_does_not_depend_on_the_order_of_the_positions(coresignal, crustdata):
    """Two current positions swapped places between answers: a position change each time (walk)."""
    coresignal.person("jane-doe")
    experience = [{"company_name": "Acme", "date_from": "2021-03", "date_to": None},
                  {"company_name": "Side Project LLC", "date_from": "2021-03", "date_to": None},
                  {"company_name": "Older Co", "date_from": "2018-01", "date_to": None}]
    companies = []
    for order in (experience, experience[::-1], experience[1:] + experience[:1]):
        coresignal.records[("person", "jane-doe")]["experience"] = order
        companies.append(core(coresignal).fetch("contact", "jane-doe")["company"])
    assert companies == ["Acme"] * 3  # the latest started; of two the same month, the first by name
    crustdata.person(JANE)
    current = [{"name": "Side Gig", "start_date": "2022-01-01"}, {"name": "Acme", "start_date": "2022-01-01"},
               {"name": "Newest", "start_date": "2024-05-01"}]
    employers = []
    for order in (current, current[::-1]):
        crustdata.records[("person", JANE)]["experience"]["employment_details"]["current"] = order
        employers.append(crust(crustdata).fetch("contact", JANE)["company"])
    assert employers == ["Newest", "Newest"]


@pytest.mark.parametrize("credits, shown", [("nan", 7.0), ("inf", 7.0), ("1e999", 7.0), ("-inf", 7.0), ("6", 6.0)])
def test_a_credit_balance_that_is_no_number_is_not_taken(coresignal, credits, shown):
    """`nan` made /healthz and /account/usage answer invalid JSON (NaN) (walk)."""
    coresignal.person("jane-doe")
    provider = core(coresignal)
    coresignal.forced.append((200, coresignal.records[("person", "jane-doe")], {"x-credits-remaining": "7"}))
    provider.fetch("contact", "jane-doe")
    coresignal.forced.append((200, coresignal.records[("person", "jane-doe")], {"x-credits-remaining": credits}))
    provider.fetch("contact", "jane-doe")
    assert provider.credits_remaining == shown


@pytest.mark.parametrize("value", ["k\r", "k\nk", "k k", "k\x00", "\tk\x1b"])
def test_a_vendor_key_with_white_space_or_control_characters_inside_is_refused_at_start_up(value):
    """A CR in the key made requests refuse the header with the key in its message, logged at every check (walk)."""
    for settings in ({"PROVIDER": "coresignal", "PROVIDER_CORESIGNAL_API_KEY": f"SECRET{value}SECRET"},
                     {"PROVIDER": "http", "PROVIDER_HTTP_URL": "https://people.example", "PROVIDER_HTTP_TOKEN":
                      f"SECRET{value}SECRET", "PROVIDER_HTTP_TIMEOUT_SECONDS": 5}):
        with pytest.raises(ValueError, match="white space or control characters") as refused:
            load_provider(settings)
        assert "SECRET" not in str(refused.value).replace("PROVIDER", "")


def test_a_vendor_key_read_from_a_file_with_its_line_end_is_taken_without_it(coresignal):
    coresignal.person("jane-doe")
    provider = load_provider({"PROVIDER": "coresignal", "PROVIDER_CORESIGNAL_API_KEY": coresignal.api_key + "\r\n",
                              "PROVIDER_CORESIGNAL_URL": coresignal.url})
    assert provider.fetch("contact", "jane-doe")["name"] == "Jane Doe"


def test_odd_crustdata_entries_are_not_taken_for_not_found(crustdata):
    """`matches` of another shape, or a second, empty entry after the real one, were a false `not_found`; an
    echo of the profile decoded (`/in/josé` for the stored `/in/jos%c3%a9`) never matched (walk)."""
    for matches in ({"confidence_score": 1}, {}, "", [None], ["Jane Doe"]):
        crustdata.forced.append((200, [{"matched_on": JANE, "matches": matches}], {}))
        assert isinstance(crust(crustdata).fetch_many("contact", [JANE])[JANE], ProviderError), matches
    crustdata.person(JANE)
    [entry] = crustdata.serve("POST", "/person/enrich",
                              json.dumps({"professional_network_profile_urls": [JANE]}).encode())[1]
    for answer in ([entry, {**entry, "matches": []}], [{**entry, "matches": []}, entry]):
        crustdata.forced.append((200, answer, {}))
        assert crust(crustdata).fetch_many("contact", [JANE])[JANE]["name"] == "Jane Doe"
    stored = "https://www.linkedin.com/in/jos%c3%a9"
    crustdata.forced.append((200, [{**entry, "matched_on": "https://www.linkedin.com/in/josé"}], {}))
    assert crust(crustdata).fetch_many("contact", [stored])[stored]["name"] == "Jane Doe"


def test_vendor_text_is_cut_to_the_longest_the_network_holds(coresignal):
    """A 2 MB headline went out in events receivers refused as too large, retried until failed (walk)."""
    coresignal.person("jane-doe", headline="x" * 2_000_000 + " end")
    snapshot = normalize_snapshot("contact", core(coresignal).fetch("contact", "jane-doe"))
    assert snapshot["headline"] == "x" * MAX_TEXT_LENGTH


def test_one_crustdata_entry_of_the_wrong_shape_fails_its_profile_alone(crustdata):
    """An entry whose section was not an object (a list, a text), or whose matches scored a number as text beside
    another, failed the whole call: 25 profiles' checks failed for one odd entry (walk)."""
    urls = [f"https://www.linkedin.com/in/p{number}" for number in range(4)]
    for url in urls:
        crustdata.person(url)
    entries = crustdata.serve("POST", "/person/enrich",
                              json.dumps({"professional_network_profile_urls": urls}).encode())[1]
    entries[0]["matches"][0]["person_data"]["basic_profile"] = ["Jane Doe"]
    entries[1]["matches"][0]["person_data"]["basic_profile"] = "Jane Doe"
    entries[2]["matches"] = [{**entries[2]["matches"][0], "confidence_score": "0.9"}, *entries[2]["matches"]]
    crustdata.forced.append((200, entries, {}))
    answers = crust(crustdata).fetch_many("contact", urls)
    assert all(isinstance(answers[url], ProviderError) for url in urls[:2]), answers
    assert answers[urls[2]]["name"] == answers[urls[3]]["name"] == "Jane Doe"
