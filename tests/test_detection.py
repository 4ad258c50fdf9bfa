"""Change detection as pure functions (contract §6): each change type, the unknown-value rule, activities."""
import json

import pytest

from app.providers.base import MAX_TEXT_LENGTH, normalize_snapshot
from app.services.detection import SEEN_ACTIVITIES_KEPT, SEEN_KEY, activity_key, detect, is_unknown


def contact(**fields):
    raw = {"network_id": "jane", "name": "Jane", "headline": "Engineer at Acme", "company": "Acme",
           "title": "Engineer", "location": "Berlin", "activities": []}
    raw.update(fields)
    return normalize_snapshot("contact", raw)


def company(**fields):
    raw = {"network_id": "acme", "name": "Acme", "headcount": 100, "description": "Makes anvils.",
           "industry": "Manufacturing", "website": "https://acme.example", "activities": []}
    raw.update(fields)
    return normalize_snapshot("company", raw)


def post(activity_id, kind="post", **extra):
    return {"id": activity_id, "kind": kind, "url": f"https://www.linkedin.com/feed/update/{activity_id}",
            "text": f"text of {activity_id}", "created_at": "2026-11-20T10:00:00Z", **extra}


def run(entity_type, *snapshots, min_percent=0.0):
    """Detect through a sequence of snapshots; returns the changes of each step after the first."""
    stored = detect(entity_type, None, snapshots[0], min_percent).snapshot
    steps = []
    for current in snapshots[1:]:
        detection = detect(entity_type, stored, current, min_percent)
        stored = detection.snapshot
        steps.append([(change.type, change.data) for change in detection.changes])
    return steps


def types(step):
    return [event_type for event_type, _ in step]


# --- the first check ---------------------------------------------------------------------------------

def test_first_check_is_state_not_change_and_lists_present_activities():
    present = [post("a1"), post("c1", "comment", target_url="t")]
    detection = detect("contact", None, contact(activities=present))
    assert detection.changes == []
    assert [change.type for change in detection.present_activities] == ["contact.post_created",
                                                                        "contact.comment_created"]
    assert detection.snapshot[SEEN_KEY] == activity_key("a1") + activity_key("c1")


def test_the_initial_state_is_the_providers_answer_and_the_stored_snapshot_only_what_detection_needs():
    answer = contact(title="unknown", activities=[post("p1")], followers=10)
    detection = detect("contact", None, answer)
    assert detection.initial_state == {"network_id": "jane", "name": "Jane", "headline": "Engineer at Acme",
                                       "company": "Acme", "title": None, "location": "Berlin",
                                       "activities": [{**post("p1"), "target_url": None, "reaction_type": None}],
                                       "followers": 10}
    assert detection.snapshot == {"network_id": "jane", "name": "Jane", "headline": "Engineer at Acme",
                                  "company": "Acme", "title": None, "location": "Berlin",
                                  SEEN_KEY: activity_key("p1")}


def test_no_activity_text_is_stored():
    detection = detect("contact", None, contact(activities=[post(f"p{number}") for number in range(10)]))
    assert "text of" not in json.dumps(detection.snapshot)
    assert len(detection.snapshot[SEEN_KEY]) == 10 * 8


def test_an_activity_whose_id_changes_type_is_not_new():
    integers, strings = [post(7), post(-8)], [post("7"), post("-8")]
    steps = run("contact", contact(activities=integers), contact(activities=strings),
                contact(activities=integers), contact(activities=[*strings, post("07"), post("9")]))
    assert steps == [[], [], [("contact.post_created", {"activity": post("07")}),
                              ("contact.post_created", {"activity": post("9")})]]


def test_an_activity_keeps_the_key_it_was_stored_under_whatever_its_id_type():
    stored = detect("contact", None, contact(activities=[post(7)])).snapshot
    assert detect("contact", stored, contact(activities=[post("7")])).snapshot[SEEN_KEY] == activity_key(7)


def test_first_check_with_unknown_fields_stores_null_not_the_word_unknown():
    detection = detect("contact", None, contact(title="unknown", headline=None))
    assert detection.snapshot["title"] is None and detection.snapshot["headline"] is None


# --- contact fields ----------------------------------------------------------------------------------

def test_company_change_is_a_position_change_with_all_four_fields():
    [step] = run("contact", contact(), contact(company="Globex"))
    assert step == [("contact.position_changed", {"changes": {
        "previous_company": "Acme", "previous_title": "Engineer",
        "current_company": "Globex", "current_title": "Engineer"}})]


def test_title_change_is_a_position_change():
    [step] = run("contact", contact(), contact(title="CTO"))
    assert step == [("contact.position_changed", {"changes": {
        "previous_company": "Acme", "previous_title": "Engineer",
        "current_company": "Acme", "current_title": "CTO"}})]


def test_company_and_title_changing_together_is_one_event():
    [step] = run("contact", contact(), contact(company="Globex", title="CTO"))
    assert types(step) == ["contact.position_changed"]
    assert step[0][1]["changes"]["current_company"] == "Globex"
    assert step[0][1]["changes"]["current_title"] == "CTO"


def test_headline_change():
    [step] = run("contact", contact(), contact(headline="CTO at Globex"))
    assert step == [("contact.headline_changed", {"changes": {
        "previous_headline": "Engineer at Acme", "current_headline": "CTO at Globex"}})]


def test_unchanged_contact_emits_nothing():
    assert run("contact", contact(), contact(), contact()) == [[], []]


def test_fields_without_an_event_type_never_emit():
    assert run("contact", contact(), contact(name="Jane Doe", location="Paris")) == [[]]


# --- the unknown-value rule --------------------------------------------------------------------------

@pytest.mark.parametrize("unknown", [None, "unknown", "Unknown", " UNKNOWN "])
def test_known_to_unknown_emits_nothing(unknown):
    assert run("contact", contact(), contact(company=unknown, title=unknown, headline=unknown)) == [[]]
    assert run("company", company(), company(headcount=unknown, description=unknown)) == [[]]


def test_known_then_unknown_then_other_value_reports_old_to_other():
    steps = run("contact", contact(), contact(title=None), contact(title="unknown"), contact(title="CTO"))
    assert steps[:2] == [[], []]
    assert steps[2] == [("contact.position_changed", {"changes": {
        "previous_company": "Acme", "previous_title": "Engineer",
        "current_company": "Acme", "current_title": "CTO"}})]


def test_known_then_unknown_then_same_value_emits_nothing():
    assert run("contact", contact(), contact(headline=None), contact()) == [[], []]


def test_unknown_to_known_emits_nothing():
    steps = run("contact", contact(title=None, headline="unknown"), contact(title="CTO", headline="CTO"))
    assert steps == [[]]
    # ...and the now known value is the baseline for the next change.
    steps = run("contact", contact(title=None), contact(title="CTO"), contact(title="VP"))
    assert steps[1][0][1]["changes"]["previous_title"] == "CTO"


def test_position_change_while_the_company_is_unknown_reports_the_last_known_company():
    [step] = run("contact", contact(), contact(company=None, title="CTO"))
    assert step[0][1]["changes"] == {"previous_company": "Acme", "previous_title": "Engineer",
                                     "current_company": "Acme", "current_title": "CTO"}


def test_position_change_of_a_contact_whose_company_was_never_known_carries_null_companies():
    """As the README's Events section says (a strict CRM parser read these as strings: CRM walk)."""
    [step] = run("contact", contact(company=None), contact(company=None, title="CTO"))
    assert step[0][1]["changes"] == {"previous_company": None, "previous_title": "Engineer",
                                     "current_company": None, "current_title": "CTO"}


def test_unknown_extra_fields_are_kept_in_the_initial_state_but_ignored_and_not_stored():
    first = normalize_snapshot("contact", {**contact(), "followers": 10, "skills": ["x"]})
    second = normalize_snapshot("contact", {**contact(), "followers": 99, "skills": ["y"], "new": 1})
    assert first["followers"] == 10 and first["skills"] == ["x"]
    assert run("contact", first, second) == [[]]
    initial = detect("contact", None, first)
    assert initial.initial_state["followers"] == 10 and initial.initial_state["skills"] == ["x"]
    detection = detect("contact", initial.snapshot, second)
    assert "followers" not in detection.snapshot and "new" not in detection.snapshot


def test_unknown_activity_fields_are_kept_in_the_state_but_not_in_events():
    raw = {**contact(), "activities": [post("p1", likes=3)]}
    snapshot = normalize_snapshot("contact", raw)
    assert snapshot["activities"][0]["likes"] == 3
    [step] = run("contact", contact(), snapshot)
    assert "likes" not in step[0][1]["activity"]


def test_a_provider_field_named_like_the_bookkeeping_is_not_kept():
    raw = {**contact(activities=[post("p1")]), "seen_activity_ids": ["zzz"]}
    snapshot = normalize_snapshot("contact", raw)
    assert "seen_activity_ids" not in snapshot


def test_missing_optional_fields_are_null():
    snapshot = normalize_snapshot("company", {"network_id": "acme"})
    assert snapshot == {"network_id": "acme", "name": None, "headcount": None, "description": None,
                        "industry": None, "website": None, "activities": None}


# --- company fields ----------------------------------------------------------------------------------

def test_employee_count_change_reports_delta_and_percent():
    [step] = run("company", company(headcount=200), company(headcount=230))
    assert step == [("company.employee_count_changed", {"changes": {
        "previous_employee_count": 200, "current_employee_count": 230, "delta": 30, "delta_percent": 15.0}})]


def test_employee_count_decrease_has_negative_delta_rounded_to_two_places():
    [step] = run("company", company(headcount=300), company(headcount=299))
    assert step[0][1]["changes"] == {"previous_employee_count": 300, "current_employee_count": 299,
                                     "delta": -1, "delta_percent": -0.33}


def test_employee_count_below_the_minimum_percentage_is_not_reported():
    assert run("company", company(headcount=100), company(headcount=104), min_percent=5) == [[]]
    [step] = run("company", company(headcount=100), company(headcount=95), min_percent=5)
    assert step[0][1]["changes"]["delta_percent"] == -5.0


def test_slow_drift_is_reported_once_it_adds_up_to_the_minimum_percentage():
    steps = run("company", company(headcount=100), company(headcount=103), company(headcount=106),
                company(headcount=107), min_percent=5)
    assert steps[0] == []
    assert steps[1][0][1]["changes"] == {"previous_employee_count": 100, "current_employee_count": 106,
                                         "delta": 6, "delta_percent": 6.0}
    assert steps[2] == []  # 106 → 107 is under 5 % of the new baseline


def test_employee_count_from_zero_has_null_percent():
    [step] = run("company", company(headcount=0), company(headcount=3), min_percent=50)
    assert step[0][1]["changes"] == {"previous_employee_count": 0, "current_employee_count": 3,
                                     "delta": 3, "delta_percent": None}


def test_non_numeric_headcount_is_unknown():
    steps = run("company", company(headcount=100), company(headcount="about 120"), company(headcount=True))
    assert steps == [[], []]


@pytest.mark.parametrize("unreadable", [1.5, "N/A", "1,200", "200", True, [200], {"total": 200}, float("nan")])
def test_an_unreadable_headcount_does_not_hide_the_next_change(unreadable):
    """It replaced the stored count without an event, so the next real change was measured from it (walk:
    100 → 1.5 → 200 reported nothing)."""
    steps = run("company", company(headcount=100), company(headcount=unreadable), company(headcount=200))
    assert steps[0] == [] and [data["changes"]["previous_employee_count"] for _, data in steps[1]] == [100]


def test_a_whole_headcount_sent_as_a_float_is_a_count():
    steps = run("company", company(headcount=100), company(headcount=120.0))
    assert steps[0][0][1]["changes"]["current_employee_count"] == 120
    assert type(steps[0][0][1]["changes"]["current_employee_count"]) is int


@pytest.mark.parametrize("unreadable", [123, 1.5, True, ["CTO"], {"name": "CTO"}])
def test_a_text_field_of_another_type_is_unknown_and_never_sent(unreadable):
    """A title of 123 went out as `current_title: 123` (the interface types it as a string), and hid the next
    change as a headcount did."""
    steps = run("contact", contact(title="Engineer"), contact(title=unreadable, headline=unreadable),
                contact(title="CTO"))
    assert steps[0] == [] and steps[1] == [("contact.position_changed", {"changes": {
        "previous_company": "Acme", "previous_title": "Engineer", "current_company": "Acme", "current_title": "CTO"}})]
    assert normalize_snapshot("contact", {"name": unreadable})["name"] is None


def test_white_space_around_a_value_is_no_change():
    """"Lead" → "Lead " was a position change (walk): scraped text gains and loses spaces."""
    assert run("contact", contact(title="Lead"), contact(title="Lead "), contact(title=" Lead\n")) == [[], []]
    assert contact(title=" Lead ")["title"] == "Lead"


def test_a_snapshot_stored_with_white_space_reports_no_change_for_it():
    stored = detect("contact", None, contact()).snapshot
    stored["title"] = "Engineer "  # as stored before answers were trimmed
    assert detect("contact", stored, contact(title="Engineer")).changes == []
    [change] = detect("contact", stored, contact(title="CTO")).changes
    assert change.data["changes"]["previous_title"] == "Engineer"  # not sent with the stored space


def test_the_same_text_composed_or_decomposed_is_no_change():
    """A scraped "Café" comes decomposed (NFD) as often as composed: an event whose two values look the same
    (vendor walk). Read and compared in the composed form, stored snapshots too."""
    composed, decomposed = "Caf\u00e9 owner", "Cafe\u0301 owner"
    assert run("contact", contact(headline=composed), contact(headline=decomposed)) == [[]]
    assert contact(headline=decomposed)["headline"] == composed
    stored = detect("contact", None, contact()).snapshot
    stored["headline"] = decomposed  # as stored before
    assert detect("contact", stored, contact(headline=composed)).changes == []


def test_a_snapshot_stored_with_a_text_longer_than_is_now_read_reports_no_change_for_it():
    stored = detect("company", None, company()).snapshot
    stored["description"] = "x" * (MAX_TEXT_LENGTH + 500)  # as stored before answers were cut
    assert detect("company", stored, company(description="x" * (MAX_TEXT_LENGTH + 900))).changes == []


def test_activity_fields_of_another_type_are_null():
    [activity] = contact(activities=[{"id": 7, "kind": "post", "url": ["x"], "text": 5, "created_at": 1700000000,
                                      "reaction_type": {}}])["activities"]
    assert activity["id"] == 7 and activity["kind"] == "post"
    assert [activity[name] for name in ("url", "text", "created_at", "target_url", "reaction_type")] == [None] * 5


def test_description_change():
    [step] = run("company", company(), company(description="Makes rockets."))
    assert step == [("company.description_changed", {"changes": {
        "previous_description": "Makes anvils.", "current_description": "Makes rockets."}})]


def test_headcount_and_description_changing_together_are_two_events():
    [step] = run("company", company(), company(headcount=101, description="New."))
    assert types(step) == ["company.employee_count_changed", "company.description_changed"]


# --- activities --------------------------------------------------------------------------------------

def test_new_contact_post_comment_and_reaction():
    comment = post("c2", "comment", target_url="https://www.linkedin.com/feed/update/x")
    reaction = post("r2", "reaction", target_url="https://www.linkedin.com/feed/update/y",
                    reaction_type="celebrate", text=None)
    [step] = run("contact", contact(activities=[post("p1")]),
                 contact(activities=[post("p1"), post("p2"), comment, reaction]))
    assert step == [
        ("contact.post_created", {"activity": {"id": "p2", "kind": "post", "url": post("p2")["url"],
                                               "text": "text of p2", "created_at": "2026-11-20T10:00:00Z"}}),
        ("contact.comment_created", {"activity": {"id": "c2", "kind": "comment", "url": comment["url"],
                                                  "text": "text of c2", "created_at": "2026-11-20T10:00:00Z",
                                                  "target_url": "https://www.linkedin.com/feed/update/x"}}),
        ("contact.reaction_added", {"activity": {"id": "r2", "kind": "reaction", "url": reaction["url"],
                                                 "text": None, "created_at": "2026-11-20T10:00:00Z",
                                                 "target_url": "https://www.linkedin.com/feed/update/y",
                                                 "reaction_type": "celebrate"}}),
    ]


def test_company_post_and_kinds_a_company_does_not_report():
    [step] = run("company", company(activities=[]),
                 company(activities=[post("p1"), post("c1", "comment"), post("x1", "video")]))
    assert types(step) == ["company.post_created"]


def test_activities_are_tracked_by_id_not_position_or_content():
    steps = run("contact", contact(activities=[post("p1"), post("p2")]),
                contact(activities=[post("p2"), post("p1", text="edited")]),
                contact(activities=[post("p2")]),
                contact(activities=[post("p1"), post("p2"), post("p3")]))
    assert steps[0] == [] and steps[1] == []
    assert [data["activity"]["id"] for _, data in steps[2]] == ["p3"]


def test_missing_activities_list_emits_nothing_and_keeps_what_was_seen():
    steps = run("contact", contact(activities=[post("p1")]), contact(activities=None),
                normalize_snapshot("contact", {k: v for k, v in contact().items() if k != "activities"}),
                contact(activities=[post("p1"), post("p2")]))
    assert steps[0] == [] and steps[1] == []
    assert [data["activity"]["id"] for _, data in steps[2]] == ["p2"]


def test_activities_unknown_at_the_first_check_are_state_when_they_are_first_shown():
    """A first answer without its activities (a partial answer, a vendor that began sending them later) stored no
    activity seen, and every recent activity of the next answer was reported as new: a post_created per old post."""
    first = detect("contact", None, contact(activities=None))
    assert first.snapshot[SEEN_KEY] is None
    unknown_again = detect("contact", first.snapshot, contact(activities=None))
    assert unknown_again.changes == [] and unknown_again.snapshot[SEEN_KEY] is None
    shown = detect("contact", unknown_again.snapshot, contact(activities=[post("p1"), post("p2")]))
    assert shown.changes == []
    assert [change.data["activity"]["id"] for change in shown.present_activities] == ["p1", "p2"]
    assert [types(step) for step in run("contact", contact(activities=None), contact(activities=[post("p1")]),
                                        contact(activities=None), contact(activities=[post("p1"), post("p2")]))] \
        == [[], [], ["contact.post_created"]]
    assert run("contact", contact(activities=None), contact(activities=[]), contact(activities=[post("p1")])) \
        == [[], [("contact.post_created", {"activity": post("p1")})]]  # an empty list is known: p1 is new


def test_activities_without_a_usable_id_are_ignored():
    odd = [{"kind": "post"}, {"id": None, "kind": "post"}, {"id": {"x": 1}, "kind": "post"}, "not an object",
           {"id": "ok", "kind": ["odd"]}, {"id": 7, "kind": "post"}]
    [step] = run("contact", contact(activities=[]), contact(activities=odd))
    reported = [(event_type, data["activity"]["id"]) for event_type, data in step]
    assert reported == [("contact.post_created", 7)]


def test_the_seen_activities_are_bounded_but_keep_every_activity_of_the_last_answer():
    stored = detect("contact", None, contact(activities=[post("p0")])).snapshot
    for number in range(1, SEEN_ACTIVITIES_KEPT + 50):  # one new activity per check, the answer holds 3
        answer = contact(activities=[post(f"p{old}") for old in range(max(0, number - 2), number + 1)])
        stored = detect("contact", stored, answer).snapshot
    assert len(stored[SEEN_KEY]) == SEEN_ACTIVITIES_KEPT * 8
    assert stored[SEEN_KEY].endswith(activity_key(f"p{SEEN_ACTIVITIES_KEPT + 49}"))
    many = [post(f"p{number}") for number in range(SEEN_ACTIVITIES_KEPT + 50)]
    stored = detect("contact", None, contact(activities=many)).snapshot
    assert len(stored[SEEN_KEY]) == (SEEN_ACTIVITIES_KEPT + 50) * 8  # a long answer is kept whole
    assert detect("contact", stored, contact(activities=many)).changes == []


# --- snapshots stored before the slim form -----------------------------------------------------------

def legacy_snapshot(**fields):
    """What a check stored before: every field, the activities with their text, the ids seen."""
    state = {**contact(activities=[post("p1"), post("p2")]), "followers": 10, **fields}
    return {**state, "seen_activity_ids": ["p0", "p1", "p2"]}


def test_a_legacy_snapshot_is_compared_like_a_slim_one_and_replaced_by_the_slim_form():
    answer = contact(headline="CTO at Acme", activities=[post("p1"), post("p2"), post("p3")])
    detection = detect("contact", legacy_snapshot(), answer)
    assert [(change.type, change.data.get("activity", {}).get("id")) for change in detection.changes] == [
        ("contact.headline_changed", None), ("contact.post_created", "p3")]
    assert detection.changes[0].data["changes"]["previous_headline"] == "Engineer at Acme"
    assert set(detection.snapshot) == {"network_id", "name", "headline", "company", "title", "location", SEEN_KEY}
    assert detection.snapshot[SEEN_KEY] == "".join(activity_key(f"p{number}") for number in range(4))


def test_a_legacy_snapshot_without_its_activities_still_knows_what_it_has_seen():
    """The migration strips the activities (and their text) from stored snapshots and keeps the ids."""
    stored = {name: value for name, value in legacy_snapshot().items() if name != "activities"}
    assert detect("contact", stored, contact(activities=[post("p0"), post("p2")])).changes == []
    assert detect("contact", stored, contact(activities=None)).snapshot[SEEN_KEY] == "".join(
        activity_key(f"p{number}") for number in range(3))


def test_is_unknown():
    assert is_unknown(None) and is_unknown("unknown") and is_unknown(" Unknown ")
    assert not is_unknown("") and not is_unknown(0) and not is_unknown("known")
