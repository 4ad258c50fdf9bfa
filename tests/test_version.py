"""One version string (issue 9 point 7): the installed package's, in OpenAPI and every User-Agent."""
from importlib.metadata import version

from app.common import USER_AGENT
from app.providers.http import HttpProvider
from app.version import VERSION
from app.worker.deliveries import deliver_due
from tests.webhook_helpers import LOCAL_RECEIVER_CONFIG, Receiver, configure, record_events

import pytest


@pytest.fixture
def app_config():
    return LOCAL_RECEIVER_CONFIG


def test_the_version_is_the_installed_packages():
    assert VERSION == version("entity-monitor")
    assert USER_AGENT == f"entity-monitor/{VERSION}"


def test_openapi_info_version(anon):
    assert anon.get("/openapi.json").get_json()["info"]["version"] == VERSION


def test_webhook_deliveries_and_provider_requests_carry_the_user_agent(alice):
    with Receiver() as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id)
        deliver_due()
    assert [request.headers["User-Agent"] for request in receiver.requests] == [USER_AGENT]
    assert HttpProvider("https://provider.example").session.headers["User-Agent"] == USER_AGENT
