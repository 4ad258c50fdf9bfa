"""The shared rate budget and provider pauses on each database, with threads racing for the budget."""
from datetime import timedelta

import limits

from app.common import utcnow
from app.services import provider_limits
from tests.test_concurrency import race


def test_racing_takers_never_get_more_than_a_slice_allows(app):
    cut = provider_limits.slicing(limits.parse("300/minute"))
    granted = []

    def take_twenty():
        for _ in range(20):
            if provider_limits.try_take_call("pg", cut, 1_000_000.0):
                granted.append(1)

    race(app, 6, take_twenty)
    assert len(granted) == cut.calls


def test_pause_lengthens_lifts_and_resumes(app):
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() + timedelta(minutes=5), "429")
    provider_limits.pause("pg", provider_limits.QUOTA_EXHAUSTED, None, "402")
    assert provider_limits.current_pause("pg").paused_reason == "quota_exhausted"
    assert provider_limits.resume("pg") is True
    assert provider_limits.current_pause("pg") is None
    provider_limits.pause("pg", provider_limits.RATE_LIMITED, utcnow() - timedelta(seconds=1), "429")
    assert provider_limits.current_pause("pg") is None  # its time has come: lifted
