"""Contract §9: settings come from environment variables, converted to their types."""
import pytest

from app.config import LONGEST_DELAY_SECONDS, ConfigError, settings_from_environment, validate


def test_environment_variables_are_converted_to_their_types():
    found = settings_from_environment({
        "DATABASE_URL": "postgresql://db/monitor", "RATELIMIT_ENABLED": "0", "SCHEDULER_ENABLED": "true",
        "CHECK_INITIAL_DELAY_SECONDS": "5", "EMPLOYEE_COUNT_MIN_PERCENT": "2.5", "PROVIDER": "http",
        "WEBHOOK_RETRY_SCHEDULE": "1, 2.5,10", "TRUSTED_PROXY_HOPS": "1", "UNRELATED": "x"})
    assert found == {
        "SQLALCHEMY_DATABASE_URI": "postgresql://db/monitor", "RATELIMIT_ENABLED": False,
        "SCHEDULER_ENABLED": True, "CHECK_INITIAL_DELAY_SECONDS": 5, "EMPLOYEE_COUNT_MIN_PERCENT": 2.5,
        "PROVIDER": "http", "WEBHOOK_RETRY_SCHEDULE": [1.0, 2.5, 10.0], "TRUSTED_PROXY_HOPS": 1}


def test_nothing_set_means_the_defaults_stand():
    assert settings_from_environment({}) == {}


@pytest.mark.parametrize("name, value", [
    ("CHECK_INITIAL_DELAY_SECONDS", 10 ** 15), ("CHECK_INTERVAL_SECONDS", 10 ** 15), ("CHECK_LEASE_SECONDS", 10 ** 15),
    ("WEBHOOK_LEASE_SECONDS", 10 ** 15), ("WEBHOOK_RETRY_SCHEDULE", [5, 1e15]),
])
def test_a_delay_past_ten_years_is_refused_at_start_up(app, name, value):
    # CHECK_INITIAL_DELAY_SECONDS=10**15 was accepted, then every subscription create answered 500
    with pytest.raises(ConfigError, match=name):
        validate({**app.config, name: value})
    longest = [LONGEST_DELAY_SECONDS] if name == "WEBHOOK_RETRY_SCHEDULE" else LONGEST_DELAY_SECONDS
    validate({**app.config, name: longest})
