"""Property-based tests (hypothesis) of the pure rules: identity canonicalisation, change detection,
webhook signatures and retry delays. Each property holds for every input, not only the examples we thought of."""
import re
import unicodedata
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app import create_app
from app.errors import ValidationFailed
from app.providers.base import normalize_snapshot
from app.services.detection import detect, is_unknown
from app.services.entities import canonical_url, network_id_from_url, normalize_network_id
from app.services.outbox import retry_delay
from app.services.transport import Outcome, Outgoing, sign, signed_headers
from tests.conftest import BASE_CONFIG
from tests.webhook_helpers import load_script

DOMAIN = "linkedin.com"
CANONICAL = re.compile(r"^(?:[a-z0-9_-]|%[0-9a-f]{2})+$")
PLAIN_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
PLAIN = st.sampled_from(PLAIN_CHARACTERS)
NON_ASCII_LETTER = st.characters(min_codepoint=0xC0, max_codepoint=0x24F)
ID_CHARACTERS = st.one_of(PLAIN, NON_ASCII_LETTER)
anything = st.text(max_size=60)
plain_ids = st.text(PLAIN, min_size=2, max_size=100)
mixed_ids = st.text(ID_CHARACTERS, min_size=2, max_size=12)


def canonical_or_none(raw, normalize=normalize_network_id):
    try:
        return normalize(raw)
    except ValidationFailed:
        return None


# --- ids and URLs ---------------------------------------------------------------------------------

@given(st.one_of(anything, mixed_ids, plain_ids))
def test_canonical_ids_are_idempotent_lower_case_and_percent_encoded(raw):
    canonical = canonical_or_none(raw)
    assume(canonical is not None)
    assert CANONICAL.match(canonical) and 2 <= len(canonical) <= 100
    assert normalize_network_id(canonical) == canonical


@given(mixed_ids)
def test_case_never_makes_two_entities(raw):
    # letters whose case round trip leaves them (the long s: upper() is an ASCII "S") are other letters
    assume(raw.upper().lower() == raw.lower() == raw.swapcase().lower())
    assert canonical_or_none(raw.upper()) == canonical_or_none(raw.lower()) == canonical_or_none(raw.swapcase())


@given(mixed_ids)
def test_raw_and_percent_encoded_forms_of_an_id_are_one_entity(raw):
    encoded = quote(raw, safe="")
    expected = canonical_or_none(raw)
    assert canonical_or_none(encoded) == expected
    assert canonical_or_none(re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded)) == expected


@given(st.characters(max_codepoint=0x7F), plain_ids)
def test_an_escaped_ascii_character_is_read_as_the_character_itself(character, rest):
    """`%2e` is a '.', refused like a raw one; `%61` is an 'a'; never a way round the allowed set."""
    escaped = f"{rest}%{ord(character):02X}"
    if character in PLAIN_CHARACTERS:
        assert canonical_or_none(escaped) == canonical_or_none(rest + character)
    else:
        assert canonical_or_none(escaped) is None


@given(st.sampled_from(["contact", "company"]), mixed_ids)
def test_the_canonical_url_names_the_same_id(entity_type, raw):
    canonical = canonical_or_none(raw)
    assume(canonical is not None)
    url = canonical_url(DOMAIN, entity_type, canonical)
    assert network_id_from_url(url, entity_type, DOMAIN) == canonical


HOSTS = st.one_of(
    st.from_regex(r"\A[a-z0-9.-]{1,30}\Z"),
    st.sampled_from([f"{DOMAIN}.evil.com", f"evil-{DOMAIN}", f"{DOMAIN}@evil.com", f"www.{DOMAIN}\\@evil.com",
                     f"evil.com#@{DOMAIN}", f"evil.com?@www.{DOMAIN}", f"{DOMAIN}:x@evil.com", "127.0.0.1",
                     f"www.{DOMAIN}.", f"evil.com\\{DOMAIN}", f"www.{DOMAIN}:443@evil.com"]))


@given(st.sampled_from(["https", "http", "HTTPS"]), HOSTS, st.sampled_from(["in", "company"]), plain_ids)
def test_a_url_is_accepted_only_on_the_network_host(scheme, host, kind, raw):
    url = f"{scheme}://{host}/{kind}/{raw}"
    entity_type = "contact" if kind == "in" else "company"
    accepted = canonical_or_none(url, lambda value: network_id_from_url(value, entity_type, DOMAIN))
    if accepted is not None:
        parts = urlsplit(url)
        assert parts.hostname in (DOMAIN, f"www.{DOMAIN}") and not parts.username and "\\" not in parts.netloc


# --- change detection -----------------------------------------------------------------------------

UNKNOWN = st.sampled_from([None, "unknown", "Unknown", " UNKNOWN "])
KNOWN_TEXT = st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=20).filter(
    lambda value: value.strip().lower() != "unknown").map(  # as answers are read (`clean_text`): composed
    lambda value: unicodedata.normalize("NFC", value))
CONTACT_FIELDS = ("company", "title", "headline")


@given(st.fixed_dictionaries({name: KNOWN_TEXT for name in CONTACT_FIELDS}),
       st.fixed_dictionaries({name: UNKNOWN for name in CONTACT_FIELDS}))
def test_an_unknown_value_never_fires(known, unknown):
    first = detect("contact", None, known)
    assert detect("contact", first.snapshot, unknown).changes == []


@given(KNOWN_TEXT, KNOWN_TEXT, UNKNOWN, st.sampled_from(CONTACT_FIELDS))
def test_known_then_unknown_then_other_fires_once_as_known_to_other(before, after, unknown, name):
    assume(before != after)
    others = {field: "same" for field in CONTACT_FIELDS if field != name}
    first = detect("contact", None, {**others, name: before})
    hidden = detect("contact", first.snapshot, {**others, name: unknown})
    shown = detect("contact", hidden.snapshot, {**others, name: after})
    again = detect("contact", shown.snapshot, {**others, name: after})
    assert hidden.changes == [] and again.changes == []
    assert len(shown.changes) == 1
    changes = shown.changes[0].data["changes"]
    assert changes[f"previous_{name}"] == before and changes[f"current_{name}"] == after


@given(st.integers(0, 10**7), UNKNOWN, st.integers(0, 10**7))
def test_headcount_unknown_in_between_reports_the_known_difference_once(before, unknown, after):
    first = detect("company", None, {"headcount": before})
    hidden = detect("company", first.snapshot, {"headcount": unknown})
    shown = detect("company", hidden.snapshot, {"headcount": after})
    assert hidden.changes == []
    assert [change.data["changes"]["delta"] for change in shown.changes] == ([after - before] if after != before
                                                                             else [])


NOT_TEXT = st.one_of(st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), max_size=3),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
NOT_A_COUNT = st.one_of(st.floats().filter(lambda value: not value.is_integer()), st.text(max_size=8),
                        st.booleans(), st.lists(st.integers(), max_size=3),
                        # below zero or past 2**53, whole numbers too (a 400-digit one failed every check: walk)
                        st.integers(max_value=-1), st.integers(min_value=2 ** 53 + 1),
                        st.just(10 ** 400), st.just(-1.0), st.just(2.0 ** 60))


@given(KNOWN_TEXT, KNOWN_TEXT, NOT_TEXT, st.sampled_from(CONTACT_FIELDS))
def test_a_provider_value_of_another_type_is_unknown(before, after, unreadable, name):
    """Through the provider boundary (`normalize_snapshot`), a field of the wrong type is as unknown as null: it
    never fires, never goes out, and the next real value is compared with the last known one."""
    assume(before != after)
    answer = {"network_id": "jane", **{field: "same" for field in CONTACT_FIELDS}}
    first = detect("contact", None, normalize_snapshot("contact", {**answer, name: before}))
    hidden = detect("contact", first.snapshot, normalize_snapshot("contact", {**answer, name: unreadable}))
    shown = detect("contact", hidden.snapshot, normalize_snapshot("contact", {**answer, name: after}))
    assert hidden.changes == [] and len(shown.changes) == 1
    assert shown.changes[0].data["changes"][f"previous_{name}"] == before


@given(st.integers(0, 10**7), NOT_A_COUNT, st.integers(0, 10**7))
def test_a_headcount_that_is_not_a_whole_number_is_unknown(before, unreadable, after):
    first = detect("company", None, normalize_snapshot("company", {"headcount": before}))
    hidden = detect("company", first.snapshot, normalize_snapshot("company", {"headcount": unreadable}))
    shown = detect("company", hidden.snapshot, normalize_snapshot("company", {"headcount": after}))
    assert hidden.changes == []
    assert [change.data["changes"]["delta"] for change in shown.changes] == ([after - before] if after != before
                                                                             else [])


# Slim snapshots against full ones: a sequence of provider answers, each showing some of the most recent
# activities (as providers do), yields the same events whether the stored snapshot is the slim one (fields
# detection compares, bounded hashes of activity ids) or a full one that remembers every field and every id.
RECENT = 15  # activities a provider answer may show: the simulated network shows 5 of each of 3 kinds
SOME_TEXT = st.one_of(UNKNOWN, st.sampled_from(["Acme", "Globex", "CTO", "Engineer", "Makes anvils."]))
answer_steps = st.lists(st.tuples(
    st.integers(0, 6),  # new activities since the previous answer
    st.none() | st.lists(st.booleans(), min_size=RECENT, max_size=RECENT),  # which recent ones it shows
    st.fixed_dictionaries({"company": SOME_TEXT, "title": SOME_TEXT, "headline": SOME_TEXT,
                           "description": SOME_TEXT, "headcount": st.one_of(UNKNOWN, st.integers(0, 20))}),
), min_size=1, max_size=40)


def _activity(number):
    activity_id = number if number % 5 == 0 else f"act-{number}"
    kind = ("post", "comment", "reaction")[number % 3]
    return {"id": activity_id, "kind": kind, "url": f"https://www.linkedin.com/feed/update/{number}",
            "text": f"text {number}", "created_at": "2026-11-20T10:00:00Z"}


def _answers(entity_type, steps):
    published, answers = 0, []
    for new, shown, fields in steps:
        published += new
        recent = list(range(max(0, published - RECENT), published))
        activities = None if shown is None else [_activity(number) for number, show in zip(recent, shown) if show]
        answers.append(normalize_snapshot(entity_type, {"network_id": "x", "activities": activities, **fields}))
    return answers


def _full_snapshot(previous, answer, seen_ids, activities_known=True):
    """The reference: every field's last known value, the current activities, every id ever seen (while no answer
    has shown the activities, the mark that none is known)."""
    fields = {name: value for name, value in answer.items() if name != "activities" and not is_unknown(value)}
    seen = {"seen_activity_ids": list(seen_ids)} if activities_known else {"seen_activities": None}
    return {**(previous or {}), **fields, "activities": answer["activities"], **seen}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["contact", "company"]), answer_steps)
def test_slim_snapshots_yield_the_same_events_as_full_ones(entity_type, steps):
    answers = _answers(entity_type, steps)
    slim = detect(entity_type, None, answers[0]).snapshot
    seen_ids = [item["id"] for item in answers[0]["activities"] or []]
    known = answers[0]["activities"] is not None
    full = _full_snapshot(None, answers[0], seen_ids, known)
    for answer in answers[1:]:
        from_slim, from_full = detect(entity_type, slim, answer), detect(entity_type, full, answer)
        assert from_slim.changes == from_full.changes
        new_ids = [item["id"] for item in answer["activities"] or [] if item["id"] not in seen_ids]
        reported = [change.data["activity"]["id"] for change in from_slim.changes if "activity" in change.data]
        expected = [activity_id for activity_id in dict.fromkeys(new_ids)
                    if entity_type == "contact" or _activity(int(str(activity_id).split("-")[-1]))["kind"] == "post"]
        # each activity once, the first time a provider shows it, but those of the first answer that shows any
        assert reported == (expected if known else [])
        seen_ids += [activity_id for activity_id in dict.fromkeys(new_ids)]
        known |= answer["activities"] is not None
        slim = from_slim.snapshot
        full = _full_snapshot({name: value for name, value in full.items()
                               if name not in ("activities", "seen_activity_ids", "seen_activities")}, answer,
                              seen_ids, known)
        assert "activities" not in slim and all("text" not in str(value) for value in slim.values())


# --- signatures -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def receiver():
    return load_script("receiver")


SECRETS = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789"), min_size=32, max_size=32).map(
    lambda text: "whsec_" + text)


@settings(deadline=None)
@given(SECRETS, st.binary(max_size=2000), st.integers(10**12, 10**13), st.integers(1, 8), st.none() | SECRETS)
def test_every_signed_delivery_verifies_and_any_changed_byte_does_not(receiver, secret, body, timestamp, attempt,
                                                                      previous):
    outgoing = Outgoing("evt_1", "https://example.com", body, attempt, secret, previous)
    headers = signed_headers(outgoing, timestamp)
    assert headers["X-Webhook-Signature"] == sign(secret, timestamp, body)
    verified = _verifies(receiver, headers, body, [secret], timestamp)
    assert verified
    if previous:  # during a rotation a receiver that knows only the old secret still verifies
        assert _verifies(receiver, headers, body, [previous], timestamp)
    assert not _verifies(receiver, headers, body + b" ", [secret], timestamp)
    assert not _verifies(receiver, {**headers, "X-Webhook-Timestamp": str(timestamp + 1)}, body, [secret],
                         timestamp)


def _verifies(receiver, headers, body, secrets, now_ms) -> bool:
    try:
        receiver.verify(headers, body, secrets, now_ms=now_ms)
    except receiver.Rejected as rejected:
        return rejected.status == 400  # a valid signature over a body that is not JSON
    return True


# --- retry delays ---------------------------------------------------------------------------------

SCHEDULE = [5, 300, 1800, 7200, 18000, 36000, 36000]


@pytest.fixture(scope="module")
def retry_app():
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": "sqlite://", "WEBHOOK_RETRY_SCHEDULE": SCHEDULE,
                      "WEBHOOK_RETRY_JITTER_FRACTION": 0.2, "WEBHOOK_THROTTLED_MIN_DELAY_SECONDS": 60})
    with app.app_context():
        yield app


outcomes = st.builds(Outcome, succeeded=st.just(False), status_code=st.none() | st.integers(400, 599),
                     duration_ms=st.just(1), throttled=st.booleans(),
                     retry_after=st.none() | st.floats(0, 10**6, allow_nan=False), gone=st.just(False))


@given(st.integers(1, len(SCHEDULE)), outcomes)
def test_retry_delays_stay_within_their_jitter_bounds(retry_app, tries, outcome):
    delay = retry_delay(tries, outcome)
    scheduled = SCHEDULE[tries - 1]
    low = scheduled * 0.8
    if outcome.throttled:
        low = max(low, 60)
    high = max(scheduled * 1.2, 60 if outcome.throttled else 0)
    assert low <= delay <= 2 * high  # a Retry-After lengthens it, at most to twice the delay we chose
    if outcome.retry_after is None:
        assert delay <= high


@given(st.integers(len(SCHEDULE) + 1, 100), outcomes)
def test_no_retry_once_the_schedule_is_spent_or_the_endpoint_is_gone(retry_app, tries, outcome):
    assert retry_delay(tries, outcome) is None
    assert retry_delay(1, Outcome(False, 410, 1, gone=True)) is None
