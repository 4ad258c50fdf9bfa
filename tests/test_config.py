"""Contract §9: settings come from environment variables, converted to their types."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import POSTGRESQL_CONNECTION, create_app
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
    ("PROVIDER_MAX_RETRY_AFTER_SECONDS", 10 ** 15),
])
def test_a_delay_past_ten_years_is_refused_at_start_up(app, name, value):
    # CHECK_INITIAL_DELAY_SECONDS=10**15 was accepted, then every subscription create answered 500
    with pytest.raises(ConfigError, match=name):
        validate({**app.config, name: value})
    longest = [LONGEST_DELAY_SECONDS] if name == "WEBHOOK_RETRY_SCHEDULE" else LONGEST_DELAY_SECONDS
    validate({**app.config, name: longest})


@pytest.mark.parametrize("lease, timeout", [(20, 10), (12, 10), (1, 0.5)])
def test_a_webhook_lease_not_over_twice_the_try_timeout_is_refused_at_start_up(app, lease, timeout):
    """A sender starts tries until half the lease and records them once back: with a try's timeout of half the lease
    or more, a claim outlived its lease, and another sender sent the delivery again, a delivered one too (webhook
    walk: WEBHOOK_LEASE_SECONDS=12, two senders, an event delivered then put back on the retry schedule)."""
    with pytest.raises(ConfigError, match=f"WEBHOOK_LEASE_SECONDS={lease:g} must be more than twice "
                                          f"WEBHOOK_TIMEOUT_SECONDS={timeout:g}"):
        validate({**app.config, "WEBHOOK_LEASE_SECONDS": lease, "WEBHOOK_TIMEOUT_SECONDS": timeout})
    validate({**app.config, "WEBHOOK_LEASE_SECONDS": 2 * timeout + 1, "WEBHOOK_TIMEOUT_SECONDS": timeout})


@pytest.mark.parametrize("query", ["", "?connect_timeout=3&sslmode=require", "?connect_timeout=",
                                   "?connect_timeout=2.5", "?options=-csearch_path%3Dother&application_name=monitor"])
def test_libpq_settings_in_the_postgresql_urls_query_are_accepted(app, query):
    validate({**app.config, "SQLALCHEMY_DATABASE_URI": f"postgresql://u:pw@db/monitor{query}"})


@pytest.mark.parametrize("query", ["password=s3cret&conect_timeout=3", "sslpassword=s3cret&connect_timeout=abc",
                                   "password=s3cret&sslmode=require&driver=x", "PASSWORD=s3cret&conect_timeout=3"])
def test_a_refused_postgresql_url_never_shows_a_password_given_in_its_query(app, query):
    """libpq takes `?password=` and `?sslpassword=`: the refusal printed them (review)."""
    with pytest.raises(ConfigError) as refused:
        validate({**app.config, "SQLALCHEMY_DATABASE_URI": f"postgresql+nodriver://u@db/monitor?{query}"
                  if "driver=x" in query else f"postgresql://u@db/monitor?{query}"})
    assert "s3cret" not in str(refused.value) and "password=hidden" in str(refused.value).lower(), refused.value


@pytest.mark.parametrize("url", ["postgresql://db:abc/monitor?password=s3cret",
                                 "postgresql://[::1/monitor?password=s3cret"])
def test_a_url_that_does_not_parse_is_refused_without_its_query(app, url):
    """Its query may hold a password too: the refusal printed it whole (review)."""
    with pytest.raises(ConfigError) as refused:
        validate({**app.config, "SQLALCHEMY_DATABASE_URI": url})
    assert "s3cret" not in str(refused.value) and "?…" in str(refused.value), refused.value


def test_the_documented_settings_are_read_from_the_environment_too():
    """SCHEDULER_STANDBY_POLL_SECONDS and the others were read from instance/config.py only: set in the
    environment, they were silently ignored."""
    assert settings_from_environment({
        "SCHEDULER_STANDBY_POLL_SECONDS": "2.5", "SQLITE_BUSY_TIMEOUT_MS": "3000", "RATELIMIT_UNAUTHENTICATED": "20",
        "TRIAL_DAYS": "1", "DEFAULT_TIER": "growth"}) == {
        "SCHEDULER_STANDBY_POLL_SECONDS": 2.5, "SQLITE_BUSY_TIMEOUT_MS": 3000, "RATELIMIT_UNAUTHENTICATED": 20,
        "TRIAL_DAYS": 1, "DEFAULT_TIER": "growth"}


def test_another_network_domain_is_accepted(monkeypatch, tmp_path):
    assert _app_with(monkeypatch, tmp_path, {"NETWORK_DOMAIN": "network.example.co.uk"}).config["NETWORK_DOMAIN"] \
        == "network.example.co.uk"


def _app_with(monkeypatch, tmp_path, environ=None, config_py=None):
    from app import create_app
    monkeypatch.setenv("INSTANCE_PATH", str(tmp_path))
    for name, value in (environ or {}).items():
        monkeypatch.setenv(name, value)
    if config_py is not None:
        (tmp_path / "config.py").write_text(config_py)
    return create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'x.db'}"})


@pytest.mark.parametrize("environ, refusal", [
    ({"DEFAULT_TIER": "gold"}, "DEFAULT_TIER='gold' is not a tier"),
    ({"PROVIDER_RATE_LIMIT": "100/minute", "PROVIDER_RATE_LIMIT_STORAGE_URI": "bogus://"},
     "PROVIDER_RATE_LIMIT_STORAGE_URI='bogus://' is not a limits storage URI"),
    ({"PROVIDER_RATE_LIMIT": "0/minute"}, "PROVIDER_RATE_LIMIT '0/minute' allows no call"),
    ({"SCHEDULER_STANDBY_POLL_SECONDS": "abc"}, "SCHEDULER_STANDBY_POLL_SECONDS='abc' is not a number"),
    *[({"NETWORK_DOMAIN": domain}, f"NETWORK_DOMAIN={domain!r} is not a domain name")  # every URL refused (walk)
      for domain in ("https://linkedin.com", "bad domain", "x.com:8080", "*.com", "LinkedIn.com", "www.linkedin.com",
                     "linkedin", "linkedin.com/")],
])
def test_settings_that_would_fail_later_are_refused_at_start_up(monkeypatch, tmp_path, environ, refusal):
    """A bad provider budget storage failed every check batch with a traceback while /healthz said ok."""
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, environ)
    assert str(refused.value).startswith(refusal)


@pytest.mark.parametrize("uri, refusal", [
    ("redis://host:notaport", "holds no valid port"), ("rediss://host:99999", "holds no valid port"),
    ("memcached://127.0.0.1:11211", "memcached keeps no moving window"),
])
def test_a_provider_budget_storage_that_cannot_serve_is_refused(monkeypatch, tmp_path, uri, refusal):
    with pytest.raises(ConfigError, match=refusal):
        _app_with(monkeypatch, tmp_path, {"PROVIDER_RATE_LIMIT": "100/minute", "PROVIDER_RATE_LIMIT_STORAGE_URI": uri})


def test_a_storage_uri_naming_several_hosts_is_taken(monkeypatch, tmp_path):
    """limits' URI of a sentinel (or cluster) names its hosts `host1:26379,host2:26379`: read as one host, its port
    `26379,host2:26379` was refused ("holds no valid port"), and no sentinel with more than one host could be used."""
    _app_with(monkeypatch, tmp_path, {"RATELIMIT_STORAGE_URI": "redis+sentinel://h1:26379,h2:26379/mymaster"})
    with pytest.raises(ConfigError, match="holds no valid port"):
        _app_with(monkeypatch, tmp_path, {"RATELIMIT_STORAGE_URI": "redis+sentinel://h1:26379,h2:x/mymaster"})


@pytest.mark.parametrize("uri, refusal", [
    ("redis+sentinel://:s3cret@h1:26379,h2:26379", "'service_name' not provided"),
    ("redis+sentinel://:s3cret@sentinel/mymaster", "Missing host or port")])
def test_a_provider_budget_storage_limits_refuses_is_refused_at_start_up(monkeypatch, tmp_path, uri, refusal):
    """The provider's budget storage is built at the first metered call: a URI limits refuses (a sentinel's without
    its service name, a host without its port), taken at start-up once a sentinel's several hosts were, failed every
    round of checks (a ConfigError, the batch deferred) while the service ran on. Refused in one line, as
    RATELIMIT_STORAGE_URI's is, without its password."""
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, {"PROVIDER_RATE_LIMIT": "100/minute", "PROVIDER_RATE_LIMIT_STORAGE_URI": uri})
    assert str(refused.value).startswith("PROVIDER_RATE_LIMIT_STORAGE_URI='redis+sentinel://…' cannot be used")
    assert refusal in str(refused.value) and "s3cret" not in str(refused.value), refused.value
    taken = "redis+sentinel://:s3cret@h1:26379,h2:26379/m"  # a sentinel's URI as limits takes it (not connected)
    _app_with(monkeypatch, tmp_path, {"PROVIDER_RATE_LIMIT": "100/minute", "PROVIDER_RATE_LIMIT_STORAGE_URI": taken})


def test_a_storage_whose_client_package_is_missing_is_refused(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "redis" else real(name, *args))
    with pytest.raises(ConfigError, match=r"RATELIMIT_STORAGE_URI='redis://127.0.0.1:6379' needs the redis package"):
        _app_with(monkeypatch, tmp_path, {"RATELIMIT_STORAGE_URI": "redis://127.0.0.1:6379"})


def test_a_storage_limits_refuses_is_shown_without_its_password(monkeypatch, tmp_path):
    """The refusal of a storage URI `limits` cannot use (a sentinel's without its service name) showed the URI whole,
    its password with it, in the service's log; every other refusal of a URL hides it."""
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, {"RATELIMIT_STORAGE_URI": "redis+sentinel://:s3cret@127.0.0.1:26379"})
    assert "s3cret" not in str(refused.value) and "service_name" in str(refused.value), refused.value


@pytest.mark.parametrize("uri, secret", [("redis+sentinel://:p@ss-word@sentinel/mymaster", "ss-word"),
                                         ("redis+sentinel://user:p@ss@sentinel/mymaster", "ss@")])
def test_what_limits_echoes_of_a_storage_uri_is_shown_without_its_password(monkeypatch, tmp_path, uri, secret):
    """limits cuts a URI's user and password off at its first `@`: its refusal of a location without a port echoed
    the rest of a password holding one ("Missing host or port in location ss-word@sentinel")."""
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, {"RATELIMIT_STORAGE_URI": uri})
    assert secret not in str(refused.value) and "Missing host or port" in str(refused.value), refused.value


def test_what_limits_says_of_a_storage_uri_without_a_password_is_shown_whole(monkeypatch, tmp_path):
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, {"RATELIMIT_STORAGE_URI": "redis+sentinel://sentinel/mymaster"})
    assert "in location sentinel" in str(refused.value), refused.value


def test_a_missing_metrics_directory_is_one_line_in_every_process(tmp_path):
    """prometheus-client writes there as app.metrics is imported: every command ended in a FileNotFoundError."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "missing"), "INSTANCE_PATH": str(tmp_path),
           "DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), "accounts", "list"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 4 and done.stderr == (
        f"entity-monitor: configuration refused: PROMETHEUS_MULTIPROC_DIR={str(tmp_path / 'missing')!r} is not a "
        "directory this process can write in: create it (empty) before the service starts\n")


def test_an_instance_path_that_cannot_be_a_folder_is_one_line(tmp_path):
    """A file in its place (or no permission) was os.makedirs' traceback in every command. `db upgrade` makes the
    folder, with the database in it (a command that only reads made it empty)."""
    (tmp_path / "taken").write_text("")
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    done = subprocess.run([str(Path(sys.executable).parent / "entity-monitor"), "db", "upgrade"], capture_output=True,
                          text=True, timeout=120, env={**env, "INSTANCE_PATH": str(tmp_path / "taken" / "instance")})
    assert done.returncode == 4 and done.stderr == (
        f"entity-monitor: configuration refused: INSTANCE_PATH={str(tmp_path / 'taken' / 'instance')!r} cannot be used "
        "as a folder: Not a directory\n")


def test_instance_config_values_of_their_own_type_stand(monkeypatch, tmp_path):
    app = _app_with(monkeypatch, tmp_path, config_py="TRIAL_DAYS = 3\nEMPLOYEE_COUNT_MIN_PERCENT = 5\n"
                                                     "PROVIDER_HTTP_URL = None\nWEBHOOK_RETRY_SCHEDULE = (5, 2.5)\n")
    assert (app.config["TRIAL_DAYS"], app.config["EMPLOYEE_COUNT_MIN_PERCENT"]) == (3, 5)
    assert app.config["PROVIDER_HTTP_URL"] is None and list(app.config["WEBHOOK_RETRY_SCHEDULE"]) == [5, 2.5]


def test_instance_config_values_written_as_text_are_read_as_the_environments(monkeypatch, tmp_path):
    """`SCHEDULER_ENABLED = "0"` in config.py was a true value; `CHECK_INTERVAL_SECONDS = "30"` a string that
    failed later, with a TypeError."""
    config_py = ('SCHEDULER_ENABLED = "0"\nMETRICS_ENABLED = "off"\n'
                 'CHECK_INTERVAL_SECONDS = "30"\nWEBHOOK_RETRY_SCHEDULE = "5,300"\n')
    app = _app_with(monkeypatch, tmp_path, config_py=config_py)
    assert (app.config["SCHEDULER_ENABLED"], app.config["METRICS_ENABLED"]) == (False, False)
    assert (app.config["CHECK_INTERVAL_SECONDS"], app.config["WEBHOOK_RETRY_SCHEDULE"]) == (30, [5.0, 300.0])


@pytest.mark.parametrize("config_py, refusal", [
    ('CHECK_INTERVAL_SECONDS = "30s"\n', "CHECK_INTERVAL_SECONDS='30s' is not a whole number"),
    ("TRIAL_DAYS = 2.9\n", "TRIAL_DAYS=2.9 in config.py is not a whole number"),
    ("CHECK_INTERVAL_SECONDS = True\n", "CHECK_INTERVAL_SECONDS=True in config.py is not a whole number"),
    ("SCHEDULER_ENABLED = 2\n", "SCHEDULER_ENABLED=2 in config.py is not a boolean"),
    ("TRIAL_DAYS = None\n", "TRIAL_DAYS=None in config.py is not a whole number"),
    ("TRIAL_DAYS = [1]\n", "TRIAL_DAYS=[1] in config.py is not a whole number"),
    ("WEBHOOK_RETRY_SCHEDULE = [5, '300']\n", "WEBHOOK_RETRY_SCHEDULE=[5, '300'] in config.py is not a list"),
    # not an environment variable, so not read as one: the lease check raised TypeError on the text (a traceback)
    ('WEBHOOK_TIMEOUT_SECONDS = "15"\n', "WEBHOOK_TIMEOUT_SECONDS='15' in config.py is not a positive number"),
    ("WEBHOOK_TIMEOUT_SECONDS = None\n", "WEBHOOK_TIMEOUT_SECONDS=None in config.py is not a positive number"),
    ("WEBHOOK_TIMEOUT_SECONDS = float('nan')\n", "WEBHOOK_TIMEOUT_SECONDS=nan in config.py is not a positive"),
    ("SCHEDULER_ENABLED = no\n", "config.py cannot be read: NameError: name 'no' is not defined"),
    ("TIERS = {\n", "config.py cannot be read: SyntaxError"),
])
def test_an_unreadable_instance_config_is_one_line(monkeypatch, tmp_path, config_py, refusal):
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, config_py=config_py)
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


TIER = "{'subscription_limit': 5, 'check_interval_seconds': 3600, 'rate_limits': {'read': 9, 'write': 9, 'bulk': 9, " \
       "'default': 9}}"


@pytest.mark.parametrize("config_py, refusal", [
    ("TIERS = 5\n", "TIERS (instance/config.py) must map each tier's name to"),
    ("TIERS = {}\n", "TIERS (instance/config.py) must map each tier's name to"),
    ("TIERS = {'starter': {'subscription_limit': 5}}\n", "the tier 'starter' has check_interval_seconds=None"),
    # left out, it started, and each create, `accounts show` and GET /account/usage of its accounts was a KeyError
    (f"TIERS = {{'starter': {TIER.replace(chr(39) + 'subscription_limit' + chr(39) + ': 5, ', '')}}}\n",
     "the tier 'starter' has no subscription_limit"),
    (f"TIERS = {{'starter': {TIER.replace('5,', '-1,')}}}\n", "the tier 'starter' has subscription_limit=-1"),
    (f"TIERS = {{'starter': {TIER.replace('3600', '0.5')}}}\n", "the tier 'starter' has check_interval_seconds=0.5"),
    (f"TIERS = {{'starter': {TIER.replace(', ' + chr(39) + 'default' + chr(39) + ': 9', '')}}}\n",
     "the tier 'starter' has rate_limits={'read': 9, 'write': 9, 'bulk': 9}, not a whole number >= 1 for each of "
     "read, write, bulk, default"),
    (f"TIERS = {{'starter': {TIER}, 'team': []}}\n", "the tier 'team' is not a name mapped to a dictionary"),
    # accounts.tier holds 40: on PostgreSQL each create or set-tier onto it was a DataError (a traceback)
    (f"TIERS = {{'starter': {TIER}, '{'x' * 41}': {TIER}}}\n", "has a name of 41 characters, more than the 40"),
])
def test_a_malformed_tiers_setting_is_one_line(monkeypatch, tmp_path, config_py, refusal):
    """`TIERS = 5` in instance/config.py was a traceback at start-up; a tier without its rate_limits or interval
    started, and every request or check of its accounts was a KeyError (walk)."""
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, config_py=config_py)
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


def test_tiers_of_the_right_shape_are_taken(monkeypatch, tmp_path):
    app = _app_with(monkeypatch, tmp_path, config_py=f"TIERS = {{'starter': {TIER.replace('5,', 'None,')}, "
                                                     f"'{'x' * 40}': {TIER}}}\n")
    assert app.config["TIERS"]["starter"]["subscription_limit"] is None


@pytest.mark.parametrize("environ, refusal", [
    ({"SIMULATED_FAILURE_PERCENT": "150"}, "SIMULATED_FAILURE_PERCENT=150.0 is too large"),
    ({"SQLITE_BUSY_TIMEOUT_MS": "99999999999999"}, "SQLITE_BUSY_TIMEOUT_MS=99999999999999 is too large"),
    ({"TRIAL_DAYS": "100000000"}, "TRIAL_DAYS=100000000 is too large"),
    ({"TRIAL_DAYS": "0"}, "TRIAL_DAYS=0 is too small"),  # every new account's trial had ended as it began
    ({"PROVIDER_MAX_RETRY_AFTER_SECONDS": "0"}, "PROVIDER_MAX_RETRY_AFTER_SECONDS=0 is too small"),
    # digits of another script: int() read them, and the refusal of others says "digits only" (operability walk)
    ({"CHECK_INTERVAL_SECONDS": "３０"}, "CHECK_INTERVAL_SECONDS='３０' is not a whole number"),
    ({"EMPLOYEE_COUNT_MIN_PERCENT": "٥"}, "EMPLOYEE_COUNT_MIN_PERCENT='٥' is not a number"),
    ({"SCHEDULER_STANDBY_POLL_SECONDS": "1e300"}, "SCHEDULER_STANDBY_POLL_SECONDS=1e+300 is too large"),
    ({"PROVIDER": "crustdata", "PROVIDER_CRUSTDATA_API_KEY": "k", "PROVIDER_CRUSTDATA_TIMEOUT_SECONDS": "abc"},
     "PROVIDER_CRUSTDATA_TIMEOUT_SECONDS='abc' is not a number of seconds"),
    ({"PROVIDER": "crustdata", "PROVIDER_CRUSTDATA_API_KEY": "k", "PROVIDER_CRUSTDATA_TIMEOUT_SECONDS": "nan"},
     "PROVIDER_CRUSTDATA_TIMEOUT_SECONDS=nan is out of range"),
])
def test_refusals_name_the_setting_and_what_it_takes(monkeypatch, tmp_path, environ, refusal):
    """A vendor's timeout of `abc` was refused as "could not convert string to float: 'abc'"."""
    with pytest.raises(ConfigError) as refused:
        _app_with(monkeypatch, tmp_path, environ)
    assert str(refused.value).startswith(refusal)


def test_a_whole_number_that_is_not_seconds_is_not_told_to_be_written_as_seconds():
    from app.serving import check_serve_settings
    with pytest.raises(ConfigError, match=r"GUNICORN_THREADS='x' is not a whole number \(digits only, e.g. 30\)$"):
        check_serve_settings({"GUNICORN_THREADS": "x"})


@pytest.mark.parametrize("url, expected", [
    ("postgresql://monitor@db.internal/monitor", POSTGRESQL_CONNECTION),
    ("postgresql+psycopg://monitor@db.internal/monitor?connect_timeout=3&keepalives_idle=5",
     {name: value for name, value in POSTGRESQL_CONNECTION.items() if name not in ("connect_timeout",
                                                                                   "keepalives_idle")}),
])
def test_postgresql_connections_give_up_on_a_server_that_does_not_answer(tmp_path, monkeypatch, url, expected):
    """Nothing bounded a connect or a wait on a server that vanished: every serving thread, /healthz's too, waited
    for as long as the outage lasted (fault walk). What the URL's own query sets is kept (libpq reads it)."""
    monkeypatch.setenv("INSTANCE_PATH", str(tmp_path))
    app = create_app({"SQLALCHEMY_DATABASE_URI": url})
    assert app.config["SQLALCHEMY_ENGINE_OPTIONS"]["connect_args"] == expected
    assert POSTGRESQL_CONNECTION["connect_timeout"] <= 10 and POSTGRESQL_CONNECTION["keepalives"] == 1


def test_a_number_pasted_with_a_no_break_space_around_it_is_read(monkeypatch, tmp_path):
    """White space around a value is stripped, a no-break space too (the ASCII check came first: review)."""
    app = _app_with(monkeypatch, tmp_path, {"CHECK_INTERVAL_SECONDS": "30\u00a0",
                                            "EMPLOYEE_COUNT_MIN_PERCENT": "\u00a05"})
    assert (app.config["CHECK_INTERVAL_SECONDS"], app.config["EMPLOYEE_COUNT_MIN_PERCENT"]) == (30, 5.0)


def test_a_gunicorn_argument_it_does_not_know_is_left_to_gunicorn_to_report(capsys):
    """`serve --bogus` printed gunicorn's 45-line usage and its error twice: once from the check of the process
    model, which reads the command line first, and again from gunicorn itself."""
    from app.serving import gunicorn_settings
    assert gunicorn_settings(["gunicorn", "--bogus", "app.wsgi:app"]) is None
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("bind", ["::1:8000", "[::1:8000", "a:b:8000"])
def test_a_bind_gunicorn_cannot_read_is_refused_at_start_up(bind):
    """An IPv6 address without its brackets passed the check, then gunicorn stopped with exit 1 (restarted)."""
    from app.serving import check_serve_settings
    with pytest.raises(ConfigError, match=r"is not HOST:PORT \(e.g. 127.0.0.1:8000\), \[IPv6\]:PORT or unix:PATH$"):
        check_serve_settings({"BIND": bind})


@pytest.mark.parametrize("bind", ["localhost", "[::1]"])
def test_a_bind_without_its_port_is_refused_at_start_up(bind):
    """gunicorn took its default port, 8000, without a word: an operator who wrote BIND=somehost did not know which."""
    from app.serving import check_serve_settings
    with pytest.raises(ConfigError, match=rf"^BIND='{re.escape(bind)}' has no port: write HOST:PORT "
                                          rf"\(e.g. {re.escape(bind)}:8000\) or \[IPv6\]:PORT$"):
        check_serve_settings({"BIND": bind})


@pytest.mark.parametrize("bind", ["127.0.0.1:8000", "[::1]:8000", "localhost:8000", "unix:/run/x.sock", ":8000"])
def test_a_bind_gunicorn_reads_is_accepted(bind):
    from app.serving import check_serve_settings
    check_serve_settings({"BIND": bind})


def test_a_provider_budget_storage_limits_refuses_is_shown_without_its_password(app):
    """Built at the first check, not at start-up: limits' refusal went to the scheduler's log with what it echoes of the
    URI, the rest of a password holding an `@` ("Missing host or port in location ss-word@sentinel")."""
    from app.services.provider_limits import MovingWindowBudget
    with pytest.raises(ConfigError) as refused:
        MovingWindowBudget("redis+sentinel://:p@ss-word@sentinel/mymaster")
    assert "ss-word" not in str(refused.value) and "Missing host or port" in str(refused.value), refused.value
