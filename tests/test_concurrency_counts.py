"""Subscription counters and search on PostgreSQL (issue 12): racing writers leave the counters equal to count(*),
the tier cap holds under concurrent creators, and the pg_trgm search answers like a substring test."""
import json
import random
import threading

import pytest

from sqlalchemy import func, select

from app.common import isoformat
from app.errors import ServiceError
from app.extensions import db
from app.models import Subscription, SubscriptionCount
from app.schemas.subscriptions import SubscriptionCreateSchema
from app.services import accounts, subscriptions

pytestmark = pytest.mark.postgresql_only(reason="racing writers on PostgreSQL's row locks and its pg_trgm index")


def _item(network_id, entity_type="contact"):
    return {"entity_type": entity_type, "network_id": network_id, "network_url": None, "custom_metadata": {}}


def _race(app, workers):
    """Run each worker(number) in its own thread and app context at once; their unexpected errors."""
    errors, barrier = [], threading.Barrier(len(workers))

    def run(number, worker):
        with app.app_context():
            barrier.wait()
            try:
                worker(number)
            except Exception as error:  # a deadlock or a lost update would surface here
                errors.append(repr(error))
            finally:
                db.session.remove()

    threads = [threading.Thread(target=run, args=(number, worker)) for number, worker in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def _by_key(query):
    db.session.rollback()
    return {(kind, status): n for kind, status, n in db.session.execute(query) if n}


def test_racing_creators_and_cancellers_leave_exact_counters(app):
    account_id = accounts.create_account("Race", "enterprise")[0].id  # a plain value: the threads share it
    seed = [subscriptions.create(account_id, _item(f"seed-{n}", ("contact", "company")[n % 2])).id for n in range(40)]
    load = SubscriptionCreateSchema().load

    def creator(number):
        for n in range(15):
            subscriptions.create(account_id, _item(f"c{number}-{n}", ("contact", "company")[n % 2]))
            kinds = ("company", "contact") if n % 2 else ("contact", "company")  # both lock orders
            subscriptions.bulk_create(account_id, [{"entity_type": kind, "network_id": f"b{number}-{n}-{kind}"}
                                                   for kind in kinds], load)

    def mover(number):
        chooser = random.Random(number)
        for _ in range(20):
            picked = chooser.sample(seed, 4)
            try:
                subscriptions.bulk_set_status(account_id, picked, chooser.choice(["active", "paused"]))
                subscriptions.set_status(account_id, picked[0], chooser.choice(["active", "paused"]))
                if chooser.random() < 0.3:
                    subscriptions.bulk_cancel(account_id, picked[2:])
                    subscriptions.cancel(account_id, picked[1])
            except ServiceError:
                pass  # a cancelled one cannot be paused: refused, nothing written

    assert _race(app, [creator, creator, mover, mover, mover]) == []
    counters = _by_key(select(SubscriptionCount.entity_type, SubscriptionCount.status, SubscriptionCount.count)
                       .where(SubscriptionCount.account_id == account_id))
    rows = _by_key(select(Subscription.entity_type, Subscription.status, func.count())
                   .where(Subscription.account_id == account_id)
                   .group_by(Subscription.entity_type, Subscription.status))
    assert counters == rows
    assert sum(rows.values()) == 40 + 2 * 15 * 3


def test_the_tier_cap_holds_against_concurrent_creators(app):
    account_id = accounts.create_account("Capped", "starter")[0].id  # 100 live subscriptions
    created = []

    def creator(number):
        for n in range(40):
            try:
                created.append(subscriptions.create(account_id, _item(f"p{number}-{n}")).id)
            except ServiceError:
                pass

    assert _race(app, [creator] * 4) == []
    assert len(created) == 100
    assert accounts.live_subscription_count(db.session, account_id) == 100


def test_search_on_postgres_answers_like_a_substring_test(app):
    account, _key = accounts.create_account("Search", "enterprise")
    ids = ["jane-doe", "janet_o-neil", "jos%C3%A9-garc%C3%ADa", "acme", "100-percent", "anna-company-fan"]
    stored = [subscriptions.create(account.id, _item(network_id, "company" if n % 3 == 0 else "contact"))
              for n, network_id in enumerate(ids)]
    for needle in ["jane", "ANE-D", "in/jan", "company", "linkedin", "josé", "%c3", "_o", "a", "t%o", '"', "y/a"]:
        form = needle.lower().replace("é", "%c3%a9")
        expected = sorted(s.id for s in stored if form in s.network_id or form in s.network_url)
        rows, total = subscriptions.list_page(account.id, 100, 0, search=needle)
        assert (sorted(row.id for row in rows), total) == (expected, len(expected)), needle


def test_export_walks_every_chunk_on_postgres(app, monkeypatch):
    from app.services import export
    monkeypatch.setattr(export, "CHUNK_ROWS", 3)
    account, _key = accounts.create_account("Export", "enterprise")
    items = [{"entity_type": "contact", "network_id": f"person-{n}", "custom_metadata": {"n": str(n), "who": "Zoë"}}
             for n in range(8)]
    created = subscriptions.bulk_create(account.id, items, SubscriptionCreateSchema().load).created
    chunks, _media_type = export.export(account.id, "all", "json")
    body = json.loads("".join(chunks))
    assert body["total"] == 8
    assert [item["subscription_id"] for item in body["data"]] == sorted(s.id for s in created)  # one created_at
    assert body["data"][0]["custom_metadata"]["who"] == "Zoë"
    assert body["data"][0]["created_at"] == isoformat(created[0].created_at)
    lines = "".join(export.export(account.id, "all", "csv")[0]).splitlines()
    assert len(lines) == 9 and '"{""n"": ""0"", ""who"": ""Zoë""}"' in "\n".join(lines)
