"""The shared rate budget and provider pauses on each database, with threads racing for the budget."""
import threading
from datetime import timedelta

import limits

from app.common import utcnow
from app.extensions import db
from app.services import provider_limits


def test_racing_takers_never_get_more_than_a_slice_allows(app):
    cut = provider_limits.slicing(limits.parse("300/minute"))
    granted, barrier = [], threading.Barrier(6)

    def taker():
        with app.app_context():
            barrier.wait()
            for _ in range(20):
                if provider_limits.try_take_call("pg", cut, 1_000_000.0):
                    granted.append(1)
            db.session.remove()

    threads = [threading.Thread(target=taker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(granted) == cut.calls


def test_pause_lengthens_lifts_and_resumes(app):
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")
    provider_limits.pause("pg", provider_limits.QUOTA_EXHAUSTED, None, "402")
    assert provider_limits.current_pause("pg").paused_reason == "quota_exhausted"
    assert provider_limits.resume("pg") is True
    assert provider_limits.current_pause("pg") is None
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() - timedelta(seconds=1), "429")
    assert provider_limits.current_pause("pg") is None  # its time has come: lifted
