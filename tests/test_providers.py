"""The providers (contract §7): the simulated network, and the http provider against a real local server."""
import json
import logging
import threading
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select, update

from app.common import utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import Event, Subscription
from app.providers import EntityUnavailable, ProviderError, QuotaExhausted, load_provider
from app.providers.base import AccessRefused
from app.providers.http import HttpProvider
from app.providers.simulated import SimulatedProvider
from app.worker import checks as worker
from tests.fake_vendors import JsonHandler, LocalServer

# --- a network the test controls, served over real HTTP on 127.0.0.1 ----------------------------------


class FakeNetwork(LocalServer):
    """Routes `/contacts/<id>` and `/companies/<id>` to answers the test sets: a JSON-able object (200),
    `(status, body)`, or HANG (answers only once the test is over: a timeout)."""
    HANG = object()

    def __init__(self):
        self.answers = {}
        self.requests = []  # (path, headers, client port)
        self.release = threading.Event()
        self._lock = threading.Lock()
        network = self

        class Handler(JsonHandler):
            def do_GET(self):
                with network._lock:
                    network.requests.append((self.path, dict(self.headers), self.client_address[1]))
                answer = network.answers.get(self.path, (404, {"error": "no such entity"}))
                if answer is FakeNetwork.HANG:
                    network.release.wait(10)
                    return
                self.reply(*(answer if isinstance(answer, tuple) else (200, answer)))

        super().__init__(Handler)

    def contact(self, network_id, answer):
        self.answers[f"/contacts/{network_id}"] = answer

    def company(self, network_id, answer):
        self.answers[f"/companies/{network_id}"] = answer

    def paths(self):
        return [path for path, _, _ in self.requests]

    def close(self):
        self.release.set()
        super().close()


@pytest.fixture
def fake_network():
    network = FakeNetwork()
    yield network
    network.close()


@pytest.fixture
def app_config(fake_network):
    return {"PROVIDER": "http", "PROVIDER_HTTP_URL": fake_network.url, "PROVIDER_HTTP_TOKEN": "s3cret-token",
            "PROVIDER_HTTP_TIMEOUT_SECONDS": 2}  # the whole call, answer included, on a loaded machine (0.5: CI)


def person(network_id, **fields):
    return {"network_id": network_id, "name": "Jane Doe", "headline": "Engineer", "company": "Acme",
            "title": "Engineer", "location": "Berlin", "activities": [], **fields}


def subscribe(tenant, network_id, entity_type="contact"):
    response = tenant.post("/subscriptions", json={"entity_type": entity_type, "network_id": network_id})
    assert response.status_code == 201, response.json
    return response.json["id"]


def make_due(*ids):
    with write_transaction():
        db.session.execute(update(Subscription).where(Subscription.id.in_(ids))
                           .values(next_check_at=utcnow() - timedelta(seconds=1)))


def row(subscription_id):
    db.session.rollback()
    return db.session.execute(select(Subscription).where(Subscription.id == subscription_id)
                              .execution_options(populate_existing=True)).scalar_one()


def event_types(tenant, subscription_id):
    data = tenant.get(f"/events?limit=100&subscription_id={subscription_id}").json["data"]
    return [event["type"] for event in reversed(data)]


# --- the http provider on its own ---------------------------------------------------------------------

def test_http_fetch_returns_the_snapshot_from_the_documented_paths(fake_network):
    provider = HttpProvider(fake_network.url + "/", "tok")
    fake_network.contact("jane", person("jane"))
    fake_network.company("acme", {"network_id": "acme", "headcount": 12})
    assert provider.fetch("contact", "jane") == person("jane")
    assert provider.fetch("company", "acme") == {"network_id": "acme", "headcount": 12}
    assert fake_network.paths() == ["/contacts/jane", "/companies/acme"]


def test_http_base_url_may_carry_a_path(fake_network):
    fake_network.answers["/v2/network/contacts/jane"] = person("jane")
    assert HttpProvider(fake_network.url + "/v2/network").fetch("contact", "jane")["network_id"] == "jane"


def test_http_sends_the_bearer_token_and_asks_for_json(fake_network):
    fake_network.contact("jane", person("jane"))
    HttpProvider(fake_network.url, "s3cret").fetch("contact", "jane")
    HttpProvider(fake_network.url).fetch("contact", "jane")
    (_, with_token, _), (_, without_token, _) = fake_network.requests
    assert with_token["Authorization"] == "Bearer s3cret"
    assert with_token["Accept"] == "application/json"
    assert "Authorization" not in without_token


def test_http_reuses_its_connection(fake_network):
    fake_network.contact("jane", person("jane"))
    fake_network.contact("gone", (404, {}))
    provider = HttpProvider(fake_network.url)
    for _ in range(10):
        provider.fetch("contact", "jane")
        with pytest.raises(EntityUnavailable):
            provider.fetch("contact", "gone")
    assert len(fake_network.requests) == 20
    assert len({port for _, _, port in fake_network.requests}) == 1


def test_a_concurrency_setting_above_the_providers_own_gets_a_pool_that_size(fake_network, caplog):
    """The session's pool was sized at the provider's own concurrency (8): with PROVIDER_CONCURRENCY=16 a connection
    was thrown away at every call past it, logged at WARNING each ("Connection pool is full")."""
    from concurrent.futures import ThreadPoolExecutor
    fake_network.contact("jane", person("jane"))
    provider = load_provider({"PROVIDER": "http", "PROVIDER_HTTP_URL": fake_network.url, "PROVIDER_HTTP_TOKEN": None,
                              "PROVIDER_HTTP_TIMEOUT_SECONDS": 3, "PROVIDER_CONCURRENCY": 16})
    assert provider.concurrency == 16
    with ThreadPoolExecutor(16) as pool:
        for _ in range(3):
            list(pool.map(lambda _number: provider.fetch("contact", "jane"), range(32)))
    assert not [record for record in caplog.records if "pool is full" in record.getMessage()]


def test_a_concurrency_setting_resizes_a_providers_own_adapters_in_place(monkeypatch):
    """The pool was resized by mounting a new adapter for http:// and https://: a provider's own adapter (its TLS
    settings, its retries) was dropped, and one mounted for the vendor's URL kept its small pool."""
    import sys
    import types

    import requests
    from requests.adapters import HTTPAdapter

    from app.providers.base import BaseProvider

    class TlsAdapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            kwargs["cert_reqs"] = "CERT_REQUIRED"  # as an adapter with an ssl_context of its own does
            super().init_poolmanager(*args, **kwargs)

    class TlsVendor(BaseProvider):
        name = "tlsvendor"
        concurrency = 2

        def __init__(self):
            self.session = requests.Session()
            self.session.mount("https://", TlsAdapter(pool_maxsize=2, max_retries=3))
            self.session.mount("https://vendor.example/", HTTPAdapter(pool_maxsize=2))

    module = types.ModuleType("app.providers.tlsvendor")
    module.create = lambda config: TlsVendor()
    monkeypatch.setitem(sys.modules, "app.providers.tlsvendor", module)
    provider = load_provider({"PROVIDER": "tlsvendor", "PROVIDER_CONCURRENCY": 16})
    adapter = provider.session.get_adapter("https://elsewhere.example/")
    assert isinstance(adapter, TlsAdapter) and adapter.max_retries.total == 3
    assert adapter.poolmanager.connection_pool_kw["cert_reqs"] == "CERT_REQUIRED"
    assert adapter.poolmanager.connection_pool_kw["maxsize"] == 16
    assert provider.session.get_adapter("https://vendor.example/x").poolmanager.connection_pool_kw["maxsize"] == 16


@pytest.mark.parametrize("status, reason", [(404, "not_found"), (403, "private"), (451, "private")])
def test_http_unavailable_statuses(fake_network, status, reason):
    fake_network.contact("someone", (status, {"error": "nope"}))
    with pytest.raises(EntityUnavailable) as raised:
        HttpProvider(fake_network.url).fetch("contact", "someone")
    assert raised.value.reason == reason


def test_http_a_404_page_in_html_is_not_found_as_the_contract_says_with_a_warning_now_and_then(fake_network, caplog):
    """Contract §7: 404 means not_found, whatever the body: a team's own service may answer 404s with a page (Flask's
    abort(404) does). A page is also what a web server answers at a wrong PROVIDER_HTTP_URL, so the operator is told,
    once in OccasionalLog's period however many checks meet one (review: a line a check flooded the log)."""
    fake_network.contact("someone", (404, b"<html>Not Found</html>", {"Content-Type": "text/html"}))
    provider = HttpProvider(fake_network.url.replace("//", "//user:pass@"))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            with pytest.raises(EntityUnavailable) as raised:
                provider.fetch("contact", "someone")
            assert raised.value.reason == "not_found"
    [line] = [record.getMessage() for record in caplog.records if "PROVIDER_HTTP_URL" in record.getMessage()]
    assert line == (f"HTTP 404 from {fake_network.url}/contacts/someone answered as an HTML page, read as not found "
                    "(contract §7); if every check reads not found, is PROVIDER_HTTP_URL right? (said at most every "
                    "600 s)")  # without the URL's user info
    provider.page_404_log.seconds = 0
    with caplog.at_level(logging.WARNING), pytest.raises(EntityUnavailable):
        provider.fetch("contact", "someone")
    assert sum("PROVIDER_HTTP_URL" in record.getMessage() for record in caplog.records) == 2  # again once it is due


@pytest.mark.parametrize("answer", [(500, {}), (503, {}), (502, b"<html>bad gateway</html>"),
                                    (302, {}), (400, {}), (200, b"not json"), (200, [1, 2]), (200, "text")])
def test_http_other_answers_are_transient(fake_network, answer):
    fake_network.contact("someone", answer)
    with pytest.raises(ProviderError) as raised:
        HttpProvider(fake_network.url).fetch("contact", "someone")
    assert raised.value.retry_after is None  # this subscription backs off; the provider goes on


def test_http_429_pauses_the_provider_for_a_minute_unless_it_says(fake_network):
    fake_network.contact("someone", (429, {}))
    with pytest.raises(ProviderError) as raised:
        HttpProvider(fake_network.url).fetch("contact", "someone")
    assert raised.value.retry_after == 60


@pytest.mark.parametrize("status, error", [(401, AccessRefused), (402, QuotaExhausted)])
def test_http_refused_key_and_spent_credits_stop_the_provider(fake_network, status, error):
    fake_network.contact("someone", (status, {}))
    with pytest.raises(error) as raised:
        HttpProvider(fake_network.url).fetch("contact", "someone")
    assert raised.value.pause_reason == ("unauthorized" if status == 401 else "quota_exhausted")


def test_http_timeout_is_transient(fake_network):
    fake_network.contact("slow", FakeNetwork.HANG)
    with pytest.raises(ProviderError):
        HttpProvider(fake_network.url, timeout=0.2).fetch("contact", "slow")


def test_http_connection_refused_is_transient():
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there now
    with pytest.raises(ProviderError):
        HttpProvider(f"http://127.0.0.1:{port}").fetch("contact", "jane")


def test_http_provider_needs_a_url():
    with pytest.raises(ValueError):
        load_provider({"PROVIDER": "http", "PROVIDER_HTTP_URL": None, "PROVIDER_HTTP_TOKEN": None,
                       "PROVIDER_HTTP_TIMEOUT_SECONDS": 1})


@pytest.mark.parametrize("name", ["nope", "../etc", "app.providers.http"])
def test_unknown_provider_is_refused(name):
    with pytest.raises(ValueError):
        load_provider({"PROVIDER": name})


def test_load_provider_builds_the_configured_module(fake_network):
    provider = load_provider({"PROVIDER": "http", "PROVIDER_HTTP_URL": fake_network.url,
                              "PROVIDER_HTTP_TOKEN": "t", "PROVIDER_HTTP_TIMEOUT_SECONDS": 3})
    assert isinstance(provider, HttpProvider) and provider.timeout == 3
    simulated = load_provider({"PROVIDER": "simulated", "SIMULATED_SEED": 5, "SIMULATED_PACE_SECONDS": 60,
                               "NETWORK_DOMAIN": "linkedin.com"})
    assert isinstance(simulated, SimulatedProvider) and simulated.seed == 5


@pytest.mark.parametrize("lease", [9, 10])
def test_a_provider_timeout_of_half_the_lease_or_more_is_refused(fake_network, lease):
    """A call may start half a lease in: a slower one outlived its claim, and another process claimed the check and
    called the vendor for it again (walk: two calls, the first answer thrown away). One of exactly half ended at the
    lease, its answers recorded after it: it was accepted."""
    config = {"PROVIDER": "http", "PROVIDER_HTTP_URL": fake_network.url, "PROVIDER_HTTP_TOKEN": None,
              "PROVIDER_HTTP_TIMEOUT_SECONDS": 5, "CHECK_LEASE_SECONDS": lease}
    with pytest.raises(ValueError, match="PROVIDER_HTTP_TIMEOUT_SECONDS=5 must be less than half of CHECK_LEASE_SEC"):
        load_provider(config)
    assert load_provider({**config, "CHECK_LEASE_SECONDS": 11}).timeout == 5


# --- the engine with PROVIDER=http --------------------------------------------------------------------

def test_engine_over_http_reports_changes(alice, fake_network):
    fake_network.contact("jane", person("jane"))
    subscription_id = subscribe(alice, "jane")
    assert worker.run_one(subscription_id).checked == 1
    fake_network.contact("jane", person("jane", company="Globex"))
    assert worker.run_one(subscription_id).changes == 1
    assert event_types(alice, subscription_id) == ["subscription.initial_state", "contact.position_changed"]
    assert all(headers["Authorization"] == "Bearer s3cret-token" for _, headers, _ in fake_network.requests)


@pytest.mark.parametrize("status, reason", [(404, "not_found"), (403, "private"), (451, "private")])
def test_engine_over_http_unavailable_is_an_event_and_network_error(alice, fake_network, status, reason):
    fake_network.contact("jane", (status, {}))
    subscription_id = subscribe(alice, "jane")
    summary = worker.run_one(subscription_id)
    assert (summary.checked, summary.unavailable) == (1, 1)
    assert event_types(alice, subscription_id) == ["entity.unavailable"]
    event = alice.get(f"/events?subscription_id={subscription_id}").json["data"][0]
    assert event["data"]["reason"] == reason
    got = alice.get(f"/subscriptions/{subscription_id}").json
    assert got["last_check_status"] == "NETWORK_ERROR"
    assert got["metadata"]["check_count"] == 1


@pytest.mark.parametrize("answer", [(500, {}), (503, {}), FakeNetwork.HANG])
def test_engine_over_http_transient_failures_back_off_and_the_loop_goes_on(alice, fake_network, answer):
    fake_network.contact("down", answer)
    for name in ("ann", "ben"):
        fake_network.contact(name, person(name))
    down, ann, ben = subscribe(alice, "down"), subscribe(alice, "ann"), subscribe(alice, "ben")
    make_due(down, ann, ben)
    started = utcnow()
    summaries = worker.run_due()
    assert sum(summary.checked for summary in summaries) == 2
    assert sum(summary.failed for summary in summaries) == 1
    failed = row(down)
    assert failed.check_count == 0 and failed.consecutive_failures == 1
    assert failed.last_check_status == "pending" and failed.snapshot is None
    assert failed.next_check_at >= started + timedelta(seconds=50)
    assert event_types(alice, down) == []
    assert row(ann).check_count == 1 and row(ben).check_count == 1
    # Recovery: the next successful check resets the backoff and reports the initial state.
    fake_network.contact("down", person("down"))
    assert worker.run_one(down).checked == 1
    assert row(down).consecutive_failures == 0
    assert event_types(alice, down) == ["subscription.initial_state"]


def test_engine_over_http_an_answer_about_another_entity_is_a_failed_check_not_a_change(alice, fake_network):
    fake_network.contact("jane", person("jane"))
    subscription_id = subscribe(alice, "jane")
    assert worker.run_one(subscription_id).checked == 1
    fake_network.contact("jane", person("bob", name="Bob", company="Globex", title="CEO"))
    assert worker.run_one(subscription_id).failed == 1
    assert event_types(alice, subscription_id) == ["subscription.initial_state"]
    assert row(subscription_id).snapshot["network_id"] == "jane"
    assert row(subscription_id).consecutive_failures == 1
    # The id in another form (percent-encoding, case, no id at all) is still the entity asked about.
    for answered in ("JANE", None, "", "  "):
        fake_network.contact("jane", person(answered, company="Globex"))
        make_due(subscription_id)
        assert sum(summary.checked for summary in worker.run_due()) == 1
    assert event_types(alice, subscription_id) == ["subscription.initial_state", "contact.position_changed"]
    # An id stored by an earlier release in a form no longer canonical (upper case) is the same entity too.
    with write_transaction():
        db.session.execute(update(Subscription).where(Subscription.id == subscription_id).values(network_id="JANE"))
    fake_network.contact("JANE", person("jane", company="Initech"))
    assert worker.run_one(subscription_id).checked == 1


def test_engine_over_http_fetches_a_batch_concurrently_with_reused_connections(alice, fake_network):
    ids = []
    for number in range(40):
        fake_network.contact(f"p{number}", person(f"p{number}"))
        ids.append(subscribe(alice, f"p{number}"))
    make_due(*ids)
    assert sum(summary.checked for summary in worker.run_due()) == 40
    ports = Counter(port for _, _, port in fake_network.requests)
    assert sum(ports.values()) == 40
    assert len(ports) <= 8  # at most the pool size, however many fetches


def test_percent_encoded_ids_are_fetched_as_sent(alice, fake_network):
    fake_network.contact("j%C3%A9r%C3%B4me", person("j%C3%A9r%C3%B4me"))
    subscription_id = subscribe(alice, "j%C3%A9r%C3%B4me")
    assert worker.run_one(subscription_id).checked == 1
    assert fake_network.paths() == ["/contacts/j%C3%A9r%C3%B4me"]


# --- the simulated provider ---------------------------------------------------------------------------

IDS = [f"person-{number}" for number in range(20)]


def test_simulated_same_seed_same_history():
    for moment in (0, 3600 * 7, 3600 * 1000):
        first = SimulatedProvider(7, 3600, "linkedin.com", clock=lambda: moment)
        second = SimulatedProvider(7, 3600, "linkedin.com", clock=lambda: moment)
        for network_id in IDS:
            assert first.fetch("contact", network_id) == second.fetch("contact", network_id)
            assert first.fetch("company", network_id) == second.fetch("company", network_id)


def test_simulated_different_seed_different_history():
    first = SimulatedProvider(1, 3600, "linkedin.com", clock=lambda: 0)
    second = SimulatedProvider(2, 3600, "linkedin.com", clock=lambda: 0)
    assert [first.fetch("contact", network_id) for network_id in IDS] != \
        [second.fetch("contact", network_id) for network_id in IDS]
    assert [first.fetch("company", network_id) for network_id in IDS] != \
        [second.fetch("company", network_id) for network_id in IDS]


def test_simulated_every_id_exists_except_private_and_missing():
    provider = SimulatedProvider(1, 3600, "linkedin.com", clock=lambda: 0)
    snapshot = provider.fetch("contact", "anyone-at-all")
    assert snapshot["network_id"] == "anyone-at-all" and snapshot["company"]
    assert set(snapshot) == {"network_id", "name", "headline", "company", "title", "location", "activities"}
    assert set(provider.fetch("company", "any-co")) == {"network_id", "name", "headcount", "description",
                                                        "industry", "website", "activities"}
    for entity_type in ("contact", "company"):
        with pytest.raises(EntityUnavailable) as private:
            provider.fetch(entity_type, "private-jane")
        with pytest.raises(EntityUnavailable) as missing:
            provider.fetch(entity_type, "missing-jane")
        assert (private.value.reason, missing.value.reason) == ("private", "not_found")


def test_simulated_state_is_stable_within_an_epoch_and_moves_over_time():
    moment = [3600 * 100]
    provider = SimulatedProvider(1, 3600, "linkedin.com", clock=lambda: moment[0])
    before = [provider.fetch("contact", network_id) for network_id in IDS]
    moment[0] += 1800
    assert [provider.fetch("contact", network_id) for network_id in IDS] == before
    moment[0] += 3600 * 48
    assert [provider.fetch("contact", network_id) for network_id in IDS] != before


def test_simulated_activities_have_the_documented_shape():
    provider = SimulatedProvider(1, 3600, "linkedin.com", clock=lambda: 3600 * 500)
    kinds = Counter()
    for network_id in IDS:
        for item in provider.fetch("contact", network_id)["activities"]:
            kinds[item["kind"]] += 1
            assert item["id"] and item["url"].startswith("https://www.linkedin.com/")
            assert item["created_at"].endswith("Z")
            if item["kind"] in ("comment", "reaction"):
                assert item["target_url"].startswith("https://www.linkedin.com/")
            if item["kind"] == "reaction":
                assert item["reaction_type"] in ("like", "celebrate", "support", "insightful", "love")
    assert set(kinds) == {"post", "comment", "reaction"}


@pytest.fixture
def simulated_clock(app):
    """PROVIDER=simulated with a clock the test moves."""
    moment = [3600 * 24 * 365 * 56]
    app.extensions["provider"] = SimulatedProvider(3, 3600, "linkedin.com", clock=lambda: moment[0])
    return moment


def test_simulated_network_produces_every_event_type_over_time(alice, simulated_clock):
    for number in range(6):
        subscribe(alice, f"person-{number}")
        subscribe(alice, f"company-{number}", "company")
    subscribe(alice, "private-person")
    subscribe(alice, "missing-company", "company")
    for _ in range(70):
        simulated_clock[0] += 3600
        list(worker.run_all())
    seen = Counter(db.session.scalars(select(Event.type)).all())
    assert set(seen) == {"subscription.initial_state", "contact.position_changed", "contact.headline_changed",
                         "contact.post_created", "contact.comment_created", "contact.reaction_added",
                         "company.employee_count_changed", "company.description_changed",
                         "company.post_created", "entity.unavailable"}
    assert seen["subscription.initial_state"] == 12 and seen["entity.unavailable"] == 2
    changes = sum(row.change_count for row in db.session.scalars(select(Subscription)))
    assert changes == sum(seen.values()) - seen["subscription.initial_state"]


def test_simulated_history_replays_identically(app, alice, simulated_clock):
    def history():
        ids = [subscribe(alice, f"c-{number}", "company") for number in range(3)]
        for _ in range(30):
            simulated_clock[0] += 3600
            list(worker.run_all())
        rows = db.session.scalars(select(Event).where(Event.subscription_id.in_(ids))).all()
        for subscription_id in ids:
            alice.delete(f"/subscriptions/{subscription_id}")
        return sorted((row.type, json.dumps(json.loads(row.body)["data"].get("changes"))) for row in rows)

    start = simulated_clock[0]
    first = history()
    simulated_clock[0] = start
    assert history() == first


# --- realistic rates and a misbehaving simulated vendor -----------------------------------------------

def simulated_from(**settings):
    return load_provider({"PROVIDER": "simulated", "SIMULATED_SEED": 1, "SIMULATED_PACE_SECONDS": 86400,
                          "NETWORK_DOMAIN": "linkedin.com", **settings})


def test_simulated_realistic_rates_are_the_default_and_plan_like_real_people():
    """Over a simulated year: jobs change every 2-5 years, posts come weekly at most."""
    provider = simulated_from()
    day = [86400 * 20000]
    provider.clock = lambda: day[0]
    people = [f"person-{number}" for number in range(40)]
    companies, posts, job_moves = {}, Counter(), 0
    previous = {network_id: provider.fetch("contact", network_id) for network_id in people}
    for _ in range(365):
        day[0] += 86400
        for network_id in people:
            now = provider.fetch("contact", network_id)
            job_moves += now["company"] != previous[network_id]["company"]
            posts[network_id] += len({item["id"] for item in now["activities"] if item["kind"] == "post"}
                                     - {item["id"] for item in previous[network_id]["activities"]})
            previous[network_id] = now
        companies[day[0]] = provider.fetch("company", "acme")["headcount"]
    assert job_moves <= len(people) // 2  # a move every 2-5 years: well under one a person a year
    assert max(posts.values()) <= 53 and min(posts.values()) >= 6
    assert 1 < len(set(companies.values())) <= 53  # the headcount drifts, at most weekly


def test_simulated_demo_rates_change_within_days():
    provider = simulated_from(SIMULATED_RATES="demo")
    moments = [86400 * 20000 + 86400 * step for step in range(30)]
    seen = {network_id: set() for network_id in IDS}
    for moment in moments:
        provider.clock = lambda moment=moment: moment
        for network_id in IDS:
            seen[network_id].add(provider.fetch("contact", network_id)["company"])
    assert sum(len(companies) > 1 for companies in seen.values()) > len(IDS) // 2


def test_simulated_unknown_rates_are_refused():
    with pytest.raises(ValueError, match="SIMULATED_RATES"):
        simulated_from(SIMULATED_RATES="fast")


def test_simulated_failures_and_throttling_on_demand():
    with pytest.raises(ProviderError) as failed:
        simulated_from(SIMULATED_FAILURE_PERCENT=100).fetch("contact", "jane")
    assert failed.value.retry_after is None
    with pytest.raises(ProviderError) as throttled:
        simulated_from(SIMULATED_THROTTLE_PERCENT=100, SIMULATED_RETRY_AFTER_SECONDS=12).fetch("contact", "jane")
    assert throttled.value.retry_after == 12
    with pytest.raises(ProviderError):
        simulated_from().fetch("contact", "flaky-jane")
    assert simulated_from(SIMULATED_LATENCY_MS=1).fetch("contact", "jane")["network_id"] == "jane"


def test_a_throttling_simulated_network_pauses_checking_without_failures(app, alice):
    app.extensions["provider"] = simulated_from(SIMULATED_THROTTLE_PERCENT=100)
    subscription_id = subscribe(alice, "jane")
    make_due(subscription_id)
    summary = worker.run_due_batch()
    assert (summary.failed, summary.deferred) == (0, 1)
    assert alice.get("/account/usage").json["provider_status"]["reason"] == "rate_limited"
    assert row(subscription_id).consecutive_failures == 0
