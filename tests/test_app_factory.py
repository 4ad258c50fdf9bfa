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


def test_functions_made_anew_for_each_request_are_not_all_remembered(app, monkeypatch):
    monkeypatch.setattr("app.MAX_REMEMBERED_FUNCTIONS", 3)
    for number in range(10):
        assert app.ensure_sync(lambda: number)() == number
    assert len(app._as_sync) <= 3
