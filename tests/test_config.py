"""Contract §9: settings come from environment variables, converted to their types."""
from app.config import settings_from_environment


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
