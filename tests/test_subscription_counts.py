"""Subscription counters (issue 12): kept by triggers in the same transaction as the rows, so list totals and
the tier cap are exact without counting rows, whatever writes the rows. The same for the counters of the ids'
1- and 2-character grams, which give the totals of searches too short for a trigram."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, event, func, insert, select, update

from app.common import new_id, utcnow
from app.errors import ServiceError
from app.extensions import db
from app.models import Subscription, SubscriptionCount, SubscriptionGramCount
from app.schemas.subscriptions import SubscriptionCreateSchema
from app.services import accounts, subscriptions


def counted(account_id=None) -> dict:
    """{(entity_type, status): n} from the counters, zero rows left out."""
    db.session.rollback()
    query = select(SubscriptionCount.entity_type, SubscriptionCount.status, SubscriptionCount.count)
    if account_id is not None:
        query = query.where(SubscriptionCount.account_id == account_id)
    return {(entity_type, status): n for entity_type, status, n in db.session.execute(query) if n}


def recounted(account_id=None) -> dict:
    """The same from the rows themselves."""
    db.session.rollback()
    query = select(Subscription.entity_type, Subscription.status, func.count()).group_by(
        Subscription.entity_type, Subscription.status)
    if account_id is not None:
        query = query.where(Subscription.account_id == account_id)
    return {(entity_type, status): n for entity_type, status, n in db.session.execute(query)}


def grams(network_id) -> set:
    """What subscription_gram_counts counts for an id: its 1- and 2-character substrings and starts."""
    return ({network_id[n:n + size] for size in (1, 2) for n in range(len(network_id) - size + 1)}
            | {"^" + network_id[:1], "^" + network_id[:2]})


def gram_counted(account_id) -> dict:
    """{(entity_type, status, gram): n} from the gram counters, zero rows left out."""
    db.session.rollback()
    counter = SubscriptionGramCount
    query = select(counter.entity_type, counter.status, counter.gram, counter.count).where(
        counter.account_id == account_id)
    return {(entity_type, status, gram): n for entity_type, status, gram, n in db.session.execute(query) if n}


def gram_recounted(account_id) -> dict:
    """The same from the rows themselves."""
    db.session.rollback()
    found = {}
    for entity_type, status, network_id in db.session.execute(select(
            Subscription.entity_type, Subscription.status, Subscription.network_id).where(
            Subscription.account_id == account_id)):
        for gram in grams(network_id):
            found[entity_type, status, gram] = found.get((entity_type, status, gram), 0) + 1
    return found


def item(network_id, entity_type="contact"):
    return {"entity_type": entity_type, "network_id": network_id, "network_url": None, "custom_metadata": {}}


def test_every_api_write_keeps_the_counters_equal_to_the_rows(alice, bob):
    ids = [alice.post("/subscriptions", json={"entity_type": kind, "network_id": f"{kind}-{n}"}).get_json()["id"]
           for n in range(4) for kind in ("contact", "company")]
    bob.post("/subscriptions", json={"entity_type": "contact", "network_id": "bobs-one"})
    alice.post("/subscriptions/bulk", json={"subscriptions": [{"entity_type": "company", "network_id": f"b-{n}"}
                                                              for n in range(3)]})
    alice.delete(f"/subscriptions/{ids[0]}")
    alice.delete(f"/subscriptions/{ids[0]}")  # idempotent: counted once
    alice.post(f"/subscriptions/{ids[1]}/pause")
    alice.post(f"/subscriptions/{ids[2]}/pause")
    alice.post(f"/subscriptions/{ids[2]}/resume")
    alice.request("DELETE", "/subscriptions/bulk", json={"subscription_ids": [ids[3], ids[3], ids[4]]})
    alice.patch("/subscriptions/bulk", json={"subscription_ids": ids[5:], "status": "paused"})
    assert counted(alice.account_id) == recounted(alice.account_id) == {
        ("contact", "active"): 1, ("contact", "paused"): 1, ("contact", "cancelled"): 2,
        ("company", "active"): 3, ("company", "paused"): 3, ("company", "cancelled"): 1}
    assert counted(bob.account_id) == {("contact", "active"): 1}


def test_list_totals_come_from_the_counters_for_every_filter(alice):
    for n in range(5):
        alice.post("/subscriptions", json={"entity_type": "contact" if n % 2 else "company", "network_id": f"e-{n}"})
    first = alice.get("/subscriptions", query_string={"limit": 1}).get_json()
    alice.delete(f"/subscriptions/{first['data'][0]['id']}")
    totals = {params: alice.get("/subscriptions", query_string=dict(params)).get_json()["pagination"]["total"]
              for params in [(), (("status", "active"),), (("status", "cancelled"),), (("entity_type", "company"),),
                             (("entity_type", "contact"), ("status", "active")), (("offset", 100),)]}
    assert list(totals.values()) == [5, 4, 1, 3, 2, 5]
    # the rows were not counted: a counter changed behind the rows' back shows in the total
    db.session.execute(update(SubscriptionCount).where(SubscriptionCount.account_id == alice.account_id,
                                                       SubscriptionCount.status == "active")
                       .values(count=SubscriptionCount.count + 10))
    db.session.commit()
    assert alice.get("/subscriptions").get_json()["pagination"]["total"] == 25


def core_rows(account_id, network_ids) -> list:
    """Active contact subscriptions as Core inserts them, bypassing the services."""
    now = utcnow()
    return [{"id": new_id("sub"), "account_id": account_id, "entity_type": "contact", "network_id": network_id,
             "network_url": f"https://www.linkedin.com/in/{network_id}", "status": "active", "custom_metadata": {},
             "created_at": now, "updated_at": now} for network_id in network_ids]


def test_core_inserts_updates_and_deletes_are_counted_too(app, alice):
    db.session.execute(insert(Subscription), core_rows(alice.account_id, [f"p-{n}" for n in range(6)]))
    db.session.execute(update(Subscription).where(Subscription.network_id.in_(["p-0", "p-1"])).values(status="paused"))
    db.session.execute(update(Subscription).where(Subscription.network_id == "p-2").values(entity_type="company"))
    db.session.execute(delete(Subscription).where(Subscription.network_id == "p-3"))
    db.session.execute(update(Subscription).where(Subscription.network_id == "p-4").values(network_id="q-4"))
    db.session.commit()
    assert counted(alice.account_id) == recounted(alice.account_id) == {
        ("contact", "active"): 2, ("contact", "paused"): 2, ("company", "active"): 1}
    assert gram_counted(alice.account_id) == gram_recounted(alice.account_id)
    assert gram_counted(alice.account_id)["contact", "active", "q"] == 1


def test_statements_of_many_rows_sharing_grams_count_every_row(app, alice):
    """One INSERT of many rows and one DELETE of several, their ids sharing grams: PostgreSQL's statement-level
    triggers add up the statement's rows per key (migration d7e3a9c1f5b2); SQLite's count row by row."""
    db.session.execute(insert(Subscription), core_rows(alice.account_id, [f"aa{n}" for n in range(30)]))
    db.session.execute(delete(Subscription).where(Subscription.network_id.in_([f"aa{n}" for n in range(10)])))
    db.session.commit()
    assert counted(alice.account_id) == recounted(alice.account_id) == {("contact", "active"): 20}
    assert gram_counted(alice.account_id) == gram_recounted(alice.account_id)
    assert gram_counted(alice.account_id)["contact", "active", "^aa"] == 20


@pytest.mark.postgresql_only(reason="psycopg 3 runs an executemany as one statement per row unless told")
def test_a_bulk_create_reaches_postgresql_as_one_insert_of_all_its_rows(app, alice):
    inserts = []

    def record(_connection, _cursor, statement, _parameters, _context, _many):
        if statement.startswith("INSERT INTO subscriptions "):
            inserts.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        response = alice.post("/subscriptions/bulk", json={"subscriptions": [
            {"entity_type": "contact", "network_id": f"bulk-{n}"} for n in range(100)]})
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    assert response.get_json()["created"] == 100
    assert len(inserts) == 1 and inserts[0].count("%(id__") == 100
    assert gram_counted(alice.account_id) == gram_recounted(alice.account_id)


def test_the_tier_cap_reads_the_counters(alice):
    accounts.set_tier(alice.account_id, "starter")
    db.session.execute(insert(SubscriptionCount).values(account_id=alice.account_id, entity_type="company",
                                                        status="paused", count=100))
    db.session.commit()
    response = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "one-more"})
    assert response.status_code == 403
    assert response.get_json()["details"]["current_count"] == 100


def test_deleting_an_account_takes_its_counters_and_leaves_the_others(alice, bob):
    alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
    bob.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
    db.session.execute(delete(accounts.Account).where(accounts.Account.id == alice.account_id))
    db.session.commit()
    assert counted(alice.account_id) == {}
    assert counted() == recounted() == {("contact", "active"): 1}


# --- a property: any sequence of writes leaves counters equal to count(*) -------------------------

NAMES = st.sampled_from([f"n{n}" for n in range(6)])
KINDS = st.sampled_from(["contact", "company"])
SLOTS = st.integers(0, 30)
operations = st.lists(st.one_of(
    st.tuples(st.just("create"), NAMES, KINDS),
    st.tuples(st.just("bulk_create"), st.lists(st.tuples(NAMES, KINDS), max_size=6)),
    st.tuples(st.just("cancel"), SLOTS),
    st.tuples(st.just("bulk_cancel"), st.lists(SLOTS, max_size=5)),
    st.tuples(st.just("set_status"), SLOTS, st.sampled_from(["active", "paused"])),
    st.tuples(st.just("bulk_set_status"), st.lists(SLOTS, max_size=5), st.sampled_from(["active", "paused"])),
    st.tuples(st.just("delete_row"), SLOTS),
), max_size=25)


def _apply(account_id, made, operation):
    name, *args = operation
    pick = (lambda slot: made[slot % len(made)]) if made else (lambda slot: "sub_missing")
    load = SubscriptionCreateSchema().load
    if name == "create":
        made.append(subscriptions.create(account_id, item(*args)).id)
    elif name == "bulk_create":
        result = subscriptions.bulk_create(account_id, [{"entity_type": kind, "network_id": network_id}
                                                        for network_id, kind in args[0]], load)
        made.extend(subscription.id for subscription in result.created)
    elif name == "cancel":
        subscriptions.cancel(account_id, pick(args[0]))
    elif name == "bulk_cancel":
        subscriptions.bulk_cancel(account_id, [pick(slot) for slot in args[0]])
    elif name == "set_status":
        subscriptions.set_status(account_id, pick(args[0]), args[1])
    elif name == "bulk_set_status":
        subscriptions.bulk_set_status(account_id, [pick(slot) for slot in args[0]], args[1])
    elif name == "delete_row":
        db.session.execute(delete(Subscription).where(Subscription.id == pick(args[0])))
        db.session.commit()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
def test_any_sequence_of_writes_leaves_the_counters_equal_to_the_rows(module_app, sequence):
    account, _key = accounts.create_account("Property", "enterprise")
    made = []
    for operation in sequence:
        try:
            _apply(account.id, made, operation)
        except ServiceError:
            pass  # a duplicate, a cancelled one paused, an unknown id: refused, nothing written
    assert counted(account.id) == recounted(account.id)
    assert gram_counted(account.id) == gram_recounted(account.id)
    page_total = subscriptions.list_page(account.id, 1, 0)[1]
    assert page_total == sum(recounted(account.id).values())
    assert accounts.live_subscription_count(db.session, account.id) == sum(
        n for (_kind, status), n in recounted(account.id).items() if status != "cancelled")


def test_the_migration_counts_and_indexes_the_rows_already_there(app, alice):
    from flask_migrate import downgrade, upgrade
    for n in range(3):
        alice.post("/subscriptions", json={"entity_type": "company", "network_id": f"older-{n}"})
    alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "older-jane"})
    db.session.remove()
    downgrade(revision="4d7e2b9c1a55")  # the revision before the counters
    db.session.execute(update(Subscription).where(Subscription.network_id == "older-0").values(status="paused"))
    db.session.commit()
    db.session.remove()
    upgrade()
    assert counted(alice.account_id) == recounted(alice.account_id) == {
        ("company", "active"): 2, ("company", "paused"): 1, ("contact", "active"): 1}
    assert alice.get("/subscriptions", query_string={"search": "der-j"}).get_json()["pagination"]["total"] == 1
    assert gram_counted(alice.account_id) == gram_recounted(alice.account_id)
    assert alice.get("/subscriptions", query_string={"search": "-j"}).get_json()["pagination"]["total"] == 1
