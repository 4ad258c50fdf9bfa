"""The migration a3c9e5f7b1d8: subscriptions cancelled while paused, before the cancel cleared `paused_at`,
no longer show it (contract: `paused_at` when paused); paused ones keep theirs."""
from flask_migrate import downgrade, upgrade
from sqlalchemy import text

from app.extensions import db

BEFORE = "f1b7c3e9a2d4"


def test_cancelled_subscriptions_lose_paused_at_and_paused_ones_keep_it(alice):
    cancelled, paused = [alice.post("/subscriptions", json={"entity_type": "contact", "network_id": name})
                         .get_json()["id"] for name in ("was-paused", "still-paused")]
    for subscription_id in (cancelled, paused):
        alice.post(f"/subscriptions/{subscription_id}/pause")
    alice.delete(f"/subscriptions/{cancelled}")
    db.session.remove()
    downgrade(revision=BEFORE)
    with db.engine.begin() as connection:  # as the cancel left it before: paused_at beside cancelled_at
        connection.execute(text("UPDATE subscriptions SET paused_at = cancelled_at WHERE id = :id"), {"id": cancelled})
    upgrade()
    assert alice.get(f"/subscriptions/{cancelled}").get_json()["paused_at"] is None
    assert alice.get(f"/subscriptions/{paused}").get_json()["paused_at"] is not None
