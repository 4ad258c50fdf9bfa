"""The application class: what it changes of Flask's behaviour."""
from flask import Flask


def test_whether_a_hook_or_view_is_async_is_decided_once_per_function(alice, monkeypatch):
    decided = []
    flasks_own = Flask.ensure_sync
    monkeypatch.setattr(Flask, "ensure_sync", lambda app, func: decided.append(func) or flasks_own(app, func))
    assert alice.get("/subscriptions").status_code == 200
    first_request = list(decided)
    assert alice.get("/subscriptions").status_code == 200
    assert len(first_request) > 5 and decided == first_request  # the hooks and the view, then nothing more
