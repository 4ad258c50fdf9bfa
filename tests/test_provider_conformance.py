"""The conformance kit: every provider — simulated, http, crustdata, coresignal and a third-party one
written with only `fetch` — must pass these, through the interface the engine uses (`fetch_many`)."""
import pytest

from app.providers import EntityUnavailable, ProviderError, fetch_many
from app.providers.base import CONTACT_FIELDS, normalize_snapshot
from app.providers.coresignal import CoresignalProvider
from app.providers.crustdata import CrustdataProvider
from app.providers.http import HttpProvider
from app.providers.simulated import SimulatedProvider
from tests.fake_vendors import FakeCoresignal, FakeCrustdata
from tests.test_providers import FakeNetwork, person
from tests.third_party_provider import DirectoryProvider


class Harness:
    """A provider with two known people, one missing, and a way to make the vendor fail for one of them
    (`fail_next`) or answer garbage (`garble_next`)."""
    provider = None
    known = ()
    missing = None
    activities = False  # whether the provider reports activities at all

    def fail_next(self, key):
        raise NotImplementedError

    def garble_next(self):
        raise NotImplementedError

    def close(self):
        pass


class Simulated(Harness):
    activities = True

    def __init__(self):
        self.provider = SimulatedProvider(1, 3600, "linkedin.com", clock=lambda: 3600 * 500)
        self.known, self.missing = ("jane-doe", "john-roe"), "missing-someone"

    def fail_next(self, key):
        return "flaky-" + key

    def garble_next(self):
        return False  # it has no wire to garble


class Http(Harness):
    activities = True

    def __init__(self):
        self.network = FakeNetwork()
        self.provider = HttpProvider(self.network.url, timeout=2)
        self.known, self.missing = ("jane-doe", "john-roe"), "nobody"
        for key in self.known:
            self.network.contact(key, person(key, name=key, activities=[{"id": f"a-{key}", "kind": "post"}]))

    def fail_next(self, key):
        self.network.contact(key, (503, {}))
        return key

    def garble_next(self):
        for key in self.known:
            self.network.contact(key, (200, b"<html>"))
        return True

    def close(self):
        self.network.close()


class Crustdata(Harness):
    def __init__(self):
        self.vendor = FakeCrustdata()
        self.provider = CrustdataProvider(FakeCrustdata.api_key, self.vendor.url, timeout=2)
        self.known = ("https://www.linkedin.com/in/jane-doe", "https://www.linkedin.com/in/john-roe")
        self.missing = "https://www.linkedin.com/in/nobody"
        for key in self.known:
            self.vendor.person(key, name=key)

    def fail_next(self, key):
        self.vendor.forced.append((500, {"message": "internal error"}, {}))
        return key

    def garble_next(self):
        self.vendor.forced.append((200, {"unexpected": True}, {}))
        return True

    def close(self):
        self.vendor.close()


class Coresignal(Harness):
    def __init__(self):
        self.vendor = FakeCoresignal()
        self.provider = CoresignalProvider(FakeCoresignal.api_key, self.vendor.url, timeout=2)
        self.known, self.missing = ("jane-doe", "john-roe"), "nobody"
        for key in self.known:
            self.vendor.person(key, name=key)

    def fail_next(self, key):
        self.vendor.forced.append((503, {"detail": "Too many requests"}, {}))
        return key

    def garble_next(self):
        self.vendor.forced.extend([(200, b"[", {}), (200, b"[", {})])
        return True

    def close(self):
        self.vendor.close()


class ThirdParty(Harness):
    activities = True

    def __init__(self):
        self.known, self.missing = ("jane-doe", "john-roe"), "nobody"
        self.provider = DirectoryProvider({key: {"name": key, "company": "Acme", "title": "CTO", "headline": None,
                                                 "activities": [{"id": 7, "kind": "post"}]} for key in self.known})

    def fail_next(self, key):
        self.provider.down.add(key)
        return key

    def garble_next(self):
        return False


@pytest.fixture(params=[Simulated, Http, Crustdata, Coresignal, ThirdParty], ids=lambda harness: harness.__name__)
def harness(request):
    built = request.param()
    yield built
    built.close()


def ask(harness, keys):
    answers = fetch_many(harness.provider, "contact", keys)
    assert isinstance(answers, dict) and set(answers) == set(keys)
    return answers


def test_batch_answers_are_matched_to_the_right_ids(harness):
    first, second = harness.known
    answers = ask(harness, [second, harness.missing, first])
    for key in (first, second):
        assert isinstance(answers[key], dict)
        assert answers[key]["name"] in (key, key.replace("-", " ").title())
    assert isinstance(answers[harness.missing], EntityUnavailable)


def test_unknown_is_none_never_empty(harness):
    snapshot = normalize_snapshot("contact", ask(harness, [harness.known[0]])[harness.known[0]])
    for name in CONTACT_FIELDS:
        assert snapshot[name] is None or snapshot[name] not in ("", [], {})
    assert snapshot["activities"] is None or (harness.activities and snapshot["activities"])


def test_activity_ids_are_stable_from_one_fetch_to_the_next(harness):
    if not harness.activities:
        assert ask(harness, [harness.known[0]])[harness.known[0]].get("activities") is None
        return
    ids = [[item["id"] for item in ask(harness, [key])[key]["activities"]] for key in (harness.known[0],) * 2]
    assert ids[0] == ids[1] and ids[0]


def test_unavailable_and_transient_are_told_apart(harness):
    key = harness.fail_next(harness.known[1])
    transient = ask(harness, [key])[key]
    assert isinstance(transient, ProviderError) and not isinstance(transient, EntityUnavailable)
    missing = ask(harness, [harness.missing])[harness.missing]
    assert isinstance(missing, EntityUnavailable) and missing.reason in ("private", "not_found")


def test_no_exception_escapes_a_garbled_answer_is_transient(harness):
    if not harness.garble_next():
        pytest.skip("no wire to garble")
    answers = ask(harness, list(harness.known))
    assert all(isinstance(answer, ProviderError) for answer in answers.values())
