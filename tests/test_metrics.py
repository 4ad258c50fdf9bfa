"""GET /metrics (issue 9 point 1): Prometheus text, no key, counters from the work done, gauges from the
database, route templates as labels, the switch, and sums across processes (multiprocess mode)."""
import importlib.util
import logging
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import types

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client
from sqlalchemy import func, select

from app import cli_operations
from app.extensions import db
from app.models import OutboxDelivery
from app.worker import checks as check_worker
from app.worker.deliveries import deliver_due
from tests.webhook_helpers import ROOT, LOCAL_RECEIVER_CONFIG, Receiver, Reply, configure, record_events, subscribe


@pytest.fixture
def app_config():
    return {**LOCAL_RECEIVER_CONFIG}


@pytest.fixture(autouse=True)
def health_readers(monkeypatch):
    """The production-operation branch's `app.services.health` when present; until it is merged, a test
    double answering its documented contract (no scheduler has ticked; the pending outbox)."""
    if importlib.util.find_spec("app.services.health") is not None:
        return
    double = types.ModuleType("app.services.health")
    double.scheduler_heartbeat = lambda: {"last_tick_at": None, "lag_seconds": None}

    def outbox_backlog():
        pending = db.session.scalar(select(func.count()).select_from(OutboxDelivery))
        return {"pending": pending, "oldest_pending_seconds": 12.5 if pending else None}
    double.outbox_backlog = outbox_backlog
    monkeypatch.setitem(sys.modules, "app.services.health", double)


def scrape(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_need_no_key_and_name_every_required_family(anon):
    text = anon.client.get("/metrics").get_data(as_text=True)
    for name in ("entity_monitor_checks_total", "entity_monitor_events_total", "entity_monitor_deliveries_total",
                 "entity_monitor_delivery_duration_seconds", "entity_monitor_detection_to_delivery_seconds",
                 "entity_monitor_outbox_pending", "entity_monitor_outbox_oldest_pending_seconds",
                 "entity_monitor_subscriptions", "entity_monitor_scheduler_last_tick_timestamp_seconds",
                 "entity_monitor_http_requests_total", "entity_monitor_http_request_duration_seconds"):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name


def test_while_the_database_does_not_answer_the_counters_are_still_exported(alice, monkeypatch):
    """A scrape was a 500 while the database was down: every counter disappeared, and the alerts on failing checks
    and 5xx answers could not fire for the outage (fault walk)."""
    from sqlalchemy.exc import OperationalError
    from app.services import health

    alice.get("/account")
    assert value(scrape(alice.client), "entity_monitor_database_up") == 1

    def down():
        raise OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))
    monkeypatch.setattr(health, "outbox_backlog", down)
    samples = scrape(alice.client)
    assert value(samples, "entity_monitor_database_up") == 0
    assert value(samples, "entity_monitor_http_requests_total", route="/api/v1/account", status="200") >= 1
    assert not any(name == "entity_monitor_outbox_pending" for name, _labels in samples)


def test_a_database_that_does_not_answer_in_time_is_down_for_the_scrape_which_answers_in_time(alice, monkeypatch):
    """A scrape waited as long as the connect did (10 s), past Prometheus's default scrape timeout, so the scrape
    failed and `database_up` never reached 0 (review). One read at a time: a database that never answers holds one
    thread, not one a scrape."""
    from app import metrics
    from app.services import health

    reads, answered = [], threading.Event()

    def hanging():
        reads.append(1)
        answered.wait(10)
        return {"pending": 0, "oldest_pending_seconds": None}
    monkeypatch.setattr(metrics, "DATABASE_SCRAPE_SECONDS", 0.3)
    monkeypatch.setattr(health, "outbox_backlog", hanging)
    try:
        started = time.monotonic()
        first, second = scrape(alice.client), scrape(alice.client)
        assert time.monotonic() - started < 5
        assert value(first, "entity_monitor_database_up") == value(second, "entity_monitor_database_up") == 0
        assert len(reads) == 1
    finally:
        answered.set()


def test_a_receiver_outage_is_counted_and_the_outbox_gauges_show_it(alice):
    before = scrape(alice.client)
    with Receiver(Reply(status=503)) as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, 3)
        assert deliver_due() == 3
    after = scrape(alice.client)
    failed = value(after, "entity_monitor_deliveries_total", outcome="failed")
    assert failed - value(before, "entity_monitor_deliveries_total", outcome="failed") == 3
    assert (value(after, "entity_monitor_delivery_duration_seconds_count")
            - value(before, "entity_monitor_delivery_duration_seconds_count")) == 3
    assert value(after, "entity_monitor_outbox_pending") == 3
    assert value(after, "entity_monitor_outbox_oldest_pending_seconds") > 0
    assert (value(after, "entity_monitor_events_total", type="contact.position_changed")
            - value(before, "entity_monitor_events_total", type="contact.position_changed")) == 3


def test_a_success_observes_detection_to_delivery(alice):
    before = scrape(alice.client)
    with Receiver() as receiver:
        configure(alice, receiver.url)
        record_events(alice.account_id, 2)
        deliver_due()
    after = scrape(alice.client)
    assert (value(after, "entity_monitor_deliveries_total", outcome="succeeded")
            - value(before, "entity_monitor_deliveries_total", outcome="succeeded")) == 2
    assert (value(after, "entity_monitor_detection_to_delivery_seconds_count")
            - value(before, "entity_monitor_detection_to_delivery_seconds_count")) == 2
    assert value(after, "entity_monitor_outbox_pending") == 0


def test_checks_are_counted_by_outcome_and_subscriptions_by_status(alice):
    before = scrape(alice.client)
    first, second = subscribe(alice.account_id, "jane-doe"), subscribe(alice.account_id, "john-doe")
    alice.post(f"/subscriptions/{second.id}/pause")
    assert check_worker.run_one(first.id).checked == 1
    after = scrape(alice.client)
    assert value(after, "entity_monitor_checks_total", outcome="ok") - value(
        before, "entity_monitor_checks_total", outcome="ok") == 1
    assert value(after, "entity_monitor_events_total", type="subscription.initial_state") - value(
        before, "entity_monitor_events_total", type="subscription.initial_state") == 1
    assert value(after, "entity_monitor_subscriptions", status="active") == 1
    assert value(after, "entity_monitor_subscriptions", status="paused") == 1
    assert value(after, "entity_monitor_subscriptions", status="cancelled") == 0
    assert value(after, "entity_monitor_scheduler_last_tick_timestamp_seconds") == 0  # no scheduler ticked


def test_http_requests_are_labelled_by_route_template(alice):
    created = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane-doe"}).get_json()
    before = scrape(alice.client)
    alice.get(f"/subscriptions/{created['id']}")
    alice.get("/subscriptions/sub_missing")
    alice.client.get("/no/such/page")
    after = scrape(alice.client)
    route = "/api/v1/subscriptions/<subscription_id>"
    assert value(after, "entity_monitor_http_requests_total", route=route, status="200") - value(
        before, "entity_monitor_http_requests_total", route=route, status="200") == 1
    assert value(after, "entity_monitor_http_requests_total", route=route, status="404") - value(
        before, "entity_monitor_http_requests_total", route=route, status="404") == 1
    assert value(after, "entity_monitor_http_requests_total", route="unmatched", status="404") >= 1
    assert not any(created["id"] in str(labels) for _name, labels in after)
    assert value(after, "entity_monitor_http_request_duration_seconds_count", route=route) >= 2


def test_a_streamed_answer_is_timed_to_its_end(alice, app):
    """It was timed when the view returned its generator: a few ms for a minute's download."""
    subscribe(alice.account_id)
    route = "/api/v1/subscriptions/export"

    def seconds_observed():
        samples = scrape(alice.client)
        return (value(samples, "entity_monitor_http_request_duration_seconds_count", route=route),
                value(samples, "entity_monitor_http_request_duration_seconds_sum", route=route))
    count, total = seconds_observed()
    response = app.test_client().get(route, headers={"X-API-Key": alice.key}, buffered=False)
    assert seconds_observed() == (count, total)  # nothing sent yet
    time.sleep(0.3)  # a slow client
    b"".join(response.response)
    response.close()
    after_count, after_total = seconds_observed()
    assert after_count == count + 1 and after_total - total >= 0.3


@pytest.mark.parametrize("app_config", [{"METRICS_ENABLED": False}])
def test_metrics_can_be_switched_off_and_requests_are_still_counted_for_metrics_serve(app, anon):
    """With METRICS_ENABLED=0 (the README's set-up for `metrics serve`) no request was counted at all."""
    from app.api.metrics import metrics_only
    assert anon.client.get("/metrics").status_code == 404
    before = list(text_string_to_metric_families(Client(metrics_only(app)).get("/metrics").get_data(as_text=True)))
    anon.client.get("/healthz")
    after = list(text_string_to_metric_families(Client(metrics_only(app)).get("/metrics").get_data(as_text=True)))
    assert _healthz_count(after) - _healthz_count(before) == 1


def _healthz_count(families) -> float:
    return sum(sample.value for family in families for sample in family.samples
               if sample.name == "entity_monitor_http_requests_total" and sample.labels.get("route") == "/healthz")


WORKER = """
import sys
from app import metrics
metrics.CHECKS.labels("ok").inc(int(sys.argv[1]))
metrics.DELIVERIES.labels("failed").inc(2)
metrics.DELIVERY_DURATION.observe(0.2)
"""
READER = """
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(generate_latest(registry).decode())
"""


def test_counters_add_up_across_processes_in_multiprocess_mode(tmp_path):
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    for checks in ("3", "4"):  # two worker processes, each gone when the scrape happens
        subprocess.run([sys.executable, "-c", WORKER, checks], env=environment, check=True, cwd=ROOT)
    scraped = subprocess.run([sys.executable, "-c", READER], env=environment, check=True, cwd=ROOT,
                             capture_output=True, text=True).stdout
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(scraped) for sample in family.samples}
    assert value(samples, "entity_monitor_checks_total", outcome="ok") == 7
    assert value(samples, "entity_monitor_deliveries_total", outcome="failed") == 4
    assert value(samples, "entity_monitor_delivery_duration_seconds_count") == 2


def test_the_dashboard_and_alert_rules_use_only_metrics_the_service_exposes(anon):
    import json
    import re
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    families = text_string_to_metric_families(anon.client.get("/metrics").get_data(as_text=True))
    exposed = {family.name + suffix for family in families for suffix in suffixes[family.type]}
    dashboard = json.loads((ROOT / "scripts/deploy/grafana-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    rules = (ROOT / "scripts/deploy/prometheus-alerts.yml").read_text()
    used = set(re.findall(r"entity_monitor_[a-z_]+", " ".join(expressions) + rules))
    assert used and used <= exposed, used - exposed
    for alert in ("EntityMonitorSchedulerStalled", "EntityMonitorOutboxOld", "EntityMonitorEndpointsFailing"):
        assert f"alert: {alert}" in rules


def test_metrics_only_app_answers_metrics_and_nothing_else(app):

    from app.api.metrics import metrics_only
    client = Client(metrics_only(app))
    response = client.get("/metrics")
    assert response.status_code == 200
    assert "entity_monitor_outbox_pending" in response.get_data(as_text=True)
    assert client.get("/api/v1/account").status_code == 404
    assert client.post("/metrics").status_code == 404


def test_metrics_serve_refuses_without_a_shared_multiprocess_directory(runner, monkeypatch):
    """As a setting refused: exit 4, as `serve` and a PROMETHEUS_MULTIPROC_DIR that is no directory stop (it was 1)."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    result = runner.invoke(args=["metrics", "serve", "--bind", "127.0.0.1:0"])
    assert result.exit_code == 4
    assert result.output.startswith("entity-monitor: configuration refused: PROMETHEUS_MULTIPROC_DIR is not set")


@pytest.mark.parametrize("bind", ["127.0.0.1:99999", "no-such-host.invalid:9464", "203.0.113.9:9464", "BUSY"])
def test_metrics_serve_says_in_one_line_why_it_cannot_listen(runner, monkeypatch, tmp_path, bind):
    """A busy port, an address of another host, an unknown name, a port beyond 65535: one line, no traceback."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        bind = bind.replace("BUSY", f"127.0.0.1:{busy.getsockname()[1]}")
        result = runner.invoke(args=["metrics", "serve", "--bind", bind])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot listen on {bind}: ") and "Traceback" not in result.output


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_metrics_serve_listens_on_an_ipv6_address_in_brackets(runner, monkeypatch, tmp_path):
    """`--bind [::1]:9464` was looked up as the host name "[::1]" and refused."""
    from wsgiref.simple_server import WSGIServer
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    listening = []
    monkeypatch.setattr(WSGIServer, "serve_forever", lambda server: listening.append(server.server_address))
    result = runner.invoke(args=["metrics", "serve", "--bind", "[::1]:0"])
    assert result.exit_code == 0, result.output
    assert [address[0] for address in listening] == ["::1"] and "metrics on http://[::1]:0/metrics" in result.output


def test_metrics_serve_answers_a_scrape_while_another_client_sends_nothing(runner, monkeypatch, tmp_path, capfd):
    """One server thread: a connection that sent half a request held every scrape until it closed, and the
    EntityMonitorDown alert fired (operability walk); closed at its timeout, it is no traceback on stderr (review)."""
    from wsgiref.simple_server import WSGIServer
    monkeypatch.setattr(cli_operations.MetricsRequestHandler, "timeout", 0.5)
    (tmp_path / "metrics").mkdir()  # of its own: the collector reads every *.db file there, the test database too
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    servers = []
    monkeypatch.setattr(WSGIServer, "serve_forever", lambda server: servers.append(server))
    assert runner.invoke(args=["metrics", "serve", "--bind", "127.0.0.1:0"]).exit_code == 0
    [server] = servers
    serving = threading.Thread(target=lambda: socketserver.BaseServer.serve_forever(server), daemon=True)
    serving.start()
    port = server.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port)) as silent:
            silent.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and nothing more
            time.sleep(0.2)
            scrape = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            time.sleep(1)  # past its timeout
        assert scrape.status_code == 200, scrape.text
        assert "Traceback" not in capfd.readouterr().err
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_serve_logs_its_requests_through_the_apps_logging(caplog, capsys):
    """http.server printed its own line for every scrape on stderr: plain text under LOG_FORMAT=json."""
    handler = cli_operations.MetricsRequestHandler.__new__(cli_operations.MetricsRequestHandler)
    handler.client_address = ("127.0.0.1", 40000)
    with caplog.at_level(logging.INFO, logger="app.access"):
        handler.log_message('"%s" %s %s', "GET /metrics HTTP/1.1", "200", "3215")
    assert [record.getMessage() for record in caplog.records] == ['127.0.0.1 "GET /metrics HTTP/1.1" 200 3215']
    assert capsys.readouterr().err == ""


def test_metrics_serve_redacts_credentials_in_its_request_lines(caplog):
    """A scrape's query (`params:` in a Prometheus job) was logged as sent, `?token=s3cr3t` and all, where the app's
    access line redacts the values of key-, secret- or token-like parameters (walk)."""
    handler = cli_operations.MetricsRequestHandler.__new__(cli_operations.MetricsRequestHandler)
    handler.client_address = ("127.0.0.1", 40000)
    with caplog.at_level(logging.INFO, logger="app.access"):
        handler.log_message('"%s" %s %s', "GET /metrics?token=s3cr3t&password=hunter2&x=1 HTTP/1.1", "200", "3215")
        handler.log_message('"%s" %s %s', "GET /metrics?apikey=s3cr3t", "200", "3215")  # HTTP/0.9: no version
        handler.log_message("code %d, message %s", 400, "Bad request version ('x')")
        # http.server serves a line of two spaces, and refuses one of four words quoting it: both were logged as sent
        handler.log_message('"%s" %s %s', "GET  /metrics?token=s3cr3t  HTTP/1.1", "200", "3215")
        handler.log_message("code %d, message %s", 400, "Bad request syntax ('GET /metrics?token=s3 cr3t HTTP/1.1')")
        handler.log_message('"%s" %s %s', "GET /metrics?token=s3 cr3t HTTP/1.1", "400", "-")
        handler.log_message('"%s" %s %s', "GET /metrics?token=s3cr3t HTTP/1.1 x", "400", "-")
        handler.log_message('"%s" %s %s', "/metrics?token=s3cr3t", "400", "-")
    messages = [record.getMessage() for record in caplog.records]
    assert messages[:3] == [
        '127.0.0.1 "GET /metrics?token=[redacted]&password=[redacted]&x=1 HTTP/1.1" 200 3215',
        '127.0.0.1 "GET /metrics?apikey=[redacted]" 200 3215',
        "127.0.0.1 code 400, message Bad request version ('x')"]
    assert messages[3] == '127.0.0.1 "GET  /metrics?token=[redacted]  HTTP/1.1" 200 3215'
    assert all("s3" not in message and "cr3t" not in message and "[redacted]" in message for message in messages[4:])


@pytest.mark.parametrize("name", ["PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"])
def test_an_empty_multiprocess_directory_is_unset(tmp_path, name):
    """`PROMETHEUS_MULTIPROC_DIR=` (set empty in the env file) was taken by prometheus-client for the working
    directory: every process wrote its counter files wherever it was started, and /metrics showed none (walk)."""
    import os
    import subprocess
    import sys
    probe = "import app.metrics as m; m.CHECKS.labels('ok').inc(); m.HTTP_DURATION.labels('/x').observe(1); " \
            "print(m.multiprocess_directory())"
    env = {key: value for key, value in os.environ.items() if key.lower() != "prometheus_multiproc_dir"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={**env, name: ""}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None"] and list(tmp_path.iterdir()) == []


def gunicorn_with_four_workers():
    from app.serving import gunicorn_settings
    return gunicorn_settings(["gunicorn", "-w", "4", "app.wsgi:app"])


SCALED_OUT = {"SQLALCHEMY_DATABASE_URI": "postgresql://monitor@db.internal/monitor", "RATELIMIT_ENABLED": True,
              "RATELIMIT_STORAGE_URI": "redis://127.0.0.1:6379", "METRICS_ENABLED": True}


def test_several_workers_without_a_shared_metrics_directory_are_refused(monkeypatch):
    """Each worker answered /metrics with its own counters: three workers after 300 requests said 63, 110 and 127 in
    turn, every counter seeming to go back and forth (scale-out walk)."""
    from app.config import ConfigError
    from app.serving import refuse_unsafe_process_model
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(ConfigError, match="^4 worker processes without PROMETHEUS_MULTIPROC_DIR would each answer "
                                          "/metrics with their own counts only: set it to an empty directory"):
        refuse_unsafe_process_model(SCALED_OUT, gunicorn_with_four_workers())


def test_several_workers_are_served_with_a_shared_metrics_directory_or_without_metrics(monkeypatch, tmp_path):
    from app.serving import refuse_unsafe_process_model
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    refuse_unsafe_process_model(SCALED_OUT, gunicorn_with_four_workers())
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    refuse_unsafe_process_model({**SCALED_OUT, "METRICS_ENABLED": False}, gunicorn_with_four_workers())
