"""TRUSTED_HOSTS: the Host names the service answers to. The Host a request carries built the absolute Location of
Werkzeug's redirects (`GET //` → `http://<Host>/`) and was the origin the dashboard's forms were compared with,
so a name of an attacker's pointed at the service (DNS rebinding) was served as the service's own."""
import pytest

from app.config import ConfigError, settings_from_environment
from tests.conftest import make_tenant
from tests.dashboard_helpers import sign_in

TRUSTED = pytest.mark.parametrize("app_config", ["monitor.example.com,.example.org"], indirect=True)


@pytest.fixture
def app_config(request, monkeypatch):
    """TRUSTED_HOSTS as a parameter says, set in the environment (as /etc/entity-monitor/env sets it)."""
    if getattr(request, "param", None):
        monkeypatch.setenv("TRUSTED_HOSTS", request.param)
    return {}


def test_without_the_setting_any_host_is_served_as_before(alice):
    answer = alice.client.get("/api/v1/account", headers={"X-API-Key": alice.key, "Host": "rebound.example.net"})
    assert answer.status_code == 200 and answer.json["id"] == alice.account_id
    signed_in = sign_in(alice.client.application.test_client(), alice.key, base_url="http://rebound.example.net")
    assert signed_in.status_code == 302 and "Set-Cookie" in signed_in.headers


@TRUSTED
def test_a_host_not_listed_is_a_400_that_names_it_whatever_the_path(app):
    alice = make_tenant(app, "Alice Inc")
    for path in ("/api/v1/account", "/healthz", "/login", "//", "/api/v1/no-such-route"):
        answer = alice.client.get(path, headers={"X-API-Key": alice.key, "Host": "rebound.example.net"})
        assert answer.status_code == 400, path
        assert answer.json["message"] == "Host 'rebound.example.net' is not trusted.", path
        assert "Location" not in answer.headers  # `//` redirected to http://rebound.example.net/


@TRUSTED
def test_listed_hosts_are_served_with_any_port_and_a_leading_dot_takes_subdomains(app):
    alice = make_tenant(app, "Alice Inc")
    for host in ("monitor.example.com", "monitor.example.com:8443", "api.example.org", "example.org"):
        answer = alice.client.get("/api/v1/account", headers={"X-API-Key": alice.key, "Host": host})
        assert answer.status_code == 200 and answer.json["id"] == alice.account_id, host
    assert alice.client.get("/api/v1/account", headers={"X-API-Key": alice.key, "Host": "example.com"}
                            ).status_code == 400


@TRUSTED
def test_a_listed_host_is_served_in_any_case(app):
    """A host name is case-insensitive (RFC 9110); Werkzeug compares it as sent, and refused it in capitals."""
    alice = make_tenant(app, "Alice Inc")
    for host in ("Monitor.Example.COM", "MONITOR.EXAMPLE.COM:8443", "API.Example.Org"):
        answer = alice.client.get("/api/v1/account", headers={"X-API-Key": alice.key, "Host": host})
        assert answer.status_code == 200 and answer.json["id"] == alice.account_id, host
    assert alice.client.get("/api/v1/account", headers={"X-API-Key": alice.key, "Host": "Rebound.Example.NET"}
                            ).json["message"] == "Host 'rebound.example.net' is not trusted."


@TRUSTED
def test_the_dashboard_signs_in_only_at_a_listed_host(app):
    """A page of a rebound name is same-origin to itself: its form passed the dashboard's origin check."""
    alice = make_tenant(app, "Alice Inc")
    rebound = app.test_client()
    answer = rebound.post("/login", base_url="http://rebound.example.net", data={"api_key": alice.key},
                          headers={"Sec-Fetch-Site": "same-origin"})
    assert answer.status_code == 400 and "Set-Cookie" not in answer.headers
    signed_in = sign_in(app.test_client(), alice.key, base_url="https://monitor.example.com")
    assert signed_in.status_code == 302 and "Set-Cookie" in signed_in.headers


def test_the_setting_is_read_from_the_environment():
    assert settings_from_environment({"TRUSTED_HOSTS": "monitor.example.com, localhost,.example.org"}) == {
        "TRUSTED_HOSTS": ["monitor.example.com", "localhost", ".example.org"]}


@pytest.mark.parametrize("value", ["https://monitor.example.com", "monitor.example.com:443", "Monitor.example.com",
                                   "[::1]", "monitor.example.com/", "monitor.example.com,,localhost", " , "])
def test_a_value_that_matches_no_host_is_refused_at_start_up(monkeypatch, tmp_path, value):
    from app import create_app
    monkeypatch.setenv("INSTANCE_PATH", str(tmp_path))
    monkeypatch.setenv("TRUSTED_HOSTS", value)
    with pytest.raises(ConfigError, match="TRUSTED_HOSTS="):
        create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'x.db'}"})


def test_an_empty_list_is_refused_rather_than_read_as_any_host(app):
    from app.config import validate
    with pytest.raises(ConfigError, match="TRUSTED_HOSTS=''"):
        validate({**app.config, "TRUSTED_HOSTS": []})
