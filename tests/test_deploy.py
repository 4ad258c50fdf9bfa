"""The deployment examples in scripts/deploy work as shipped: the systemd units pass `systemd-analyze verify`
(with the install prefix pointed at this environment), the nginx site passes `nginx -t` (with a
generated certificate in place of the marked placeholders), and its proxying keeps slow clients off gunicorn's
threads."""
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from app import create_app
from app.services import accounts
from scripts.bench_api import fill_subscriptions
from tests.conftest import BASE_CONFIG
from tests.served import served  # noqa: F401 - a fixture

DEPLOY = Path(__file__).resolve().parent.parent / "scripts" / "deploy"
BIN = Path(sys.executable).parent
ROWS = 60_000


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", ["entity-monitor.service", "entity-monitor-scheduler.service"])
def test_the_systemd_units_verify(tmp_path, unit):
    text = (DEPLOY / unit).read_text()
    assert "/opt/entity-monitor/bin/entity-monitor" in text and "EnvironmentFile=-/etc/entity-monitor/env" in text
    assert "DynamicUser=yes" in text and "StateDirectory=entity-monitor" in text
    (tmp_path / unit).write_text(text.replace("/opt/entity-monitor/bin", str(BIN)))
    done = subprocess.run(["systemd-analyze", "verify", str(tmp_path / unit)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Unknown" not in done.stderr and "ignoring" not in done.stderr, done.stderr


def test_the_units_run_commands_the_console_script_has(tmp_path):
    from app.cli import main  # noqa: F401 - the entry point the units call
    for unit in ("entity-monitor.service", "entity-monitor-scheduler.service"):
        for line in (DEPLOY / unit).read_text().splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=")) and "/entity-monitor/bin/" in line:
                args = line.split("=", 1)[1].split()[1:]
                done = subprocess.run([str(BIN / "entity-monitor"), *args, "--help"], capture_output=True,
                                      text=True, timeout=60)
                assert done.returncode == 0, (line, done.stderr)


@pytest.mark.parametrize("unit", ["entity-monitor.service", "entity-monitor-scheduler.service"])
def test_a_refused_configuration_is_not_restarted_forever(unit):
    # Every command exits 4 on a bad setting (README, Configuration); with Restart=always alone systemd
    # restarted the service every 2 s, printing the same refusal line forever instead of staying failed.
    lines = (DEPLOY / unit).read_text().splitlines()
    assert "Restart=always" in lines and "RestartPreventExitStatus=4" in lines
    # ...nor when the ExecStartPre migration is what refuses it: the start limit ends the loop, after a database
    # that is still starting (exit 3, restarted) had three minutes: 30 starts 5 s apart within ten minutes.
    unit_section = lines[lines.index("[Unit]"):lines.index("[Service]")]
    assert "StartLimitIntervalSec=600" in unit_section and "StartLimitBurst=30" in unit_section
    assert "RestartSec=5" in lines and "postgresql.service" in unit_section[2]


def test_the_web_unit_makes_the_metrics_folder_and_the_cli_leaves_it_alone():
    web = (DEPLOY / "entity-monitor.service").read_text().splitlines()
    assert "RuntimeDirectory=entity-monitor" in web and "RuntimeDirectoryPreserve=yes" in web
    assert "ReadWritePaths=-/run/entity-monitor" in (DEPLOY / "entity-monitor-scheduler.service").read_text()
    assert "--property=UnsetEnvironment=PROMETHEUS_MULTIPROC_DIR" in (DEPLOY / "entity-monitor-cli").read_text()


def test_the_web_unit_starting_keeps_the_metrics_of_processes_still_running(tmp_path):
    """It emptied the folder: a scheduler unit running on, on the same host, wrote its counters to files no longer
    there, and its checks and deliveries vanished from /metrics until it restarted (scale-out walk)."""
    [line] = [line for line in (DEPLOY / "entity-monitor.service").read_text().splitlines()
              if line.startswith("ExecStartPre=/bin/sh -c ") and "/run/entity-monitor/metrics" in line]
    script = line.split(" -c ", 1)[1].strip("'").replace("$$", "$").replace("%%", "%")  # systemd's escapes
    folder = tmp_path / "metrics"
    folder.mkdir()
    ended = subprocess.Popen(["true"])
    ended.wait()
    running = {f"counter_{os.getpid()}.db", f"histogram_{os.getpid()}.db"}
    for name in running | {f"counter_{ended.pid}.db", f"histogram_{ended.pid}.db"}:
        (folder / name).write_bytes(b"")
    for place in (folder, tmp_path / "new"):
        subprocess.run(["/bin/sh", "-c", script.replace("/run/entity-monitor/metrics", str(place))], check=True,
                       timeout=60)
    assert {path.name for path in folder.iterdir()} == running
    assert list((tmp_path / "new").iterdir()) == []  # made when missing


CERTIFICATE_PLACEHOLDERS = ("/etc/ssl/entity-monitor/REPLACE-WITH-fullchain.pem",
                            "/etc/ssl/entity-monitor/REPLACE-WITH-privkey.pem")


def _site_with_a_certificate(folder: Path) -> str:
    """The shipped site, its certificate placeholders replaced by a self-signed certificate made in `folder`."""
    site = (DEPLOY / "nginx.conf").read_text()
    assert all(placeholder in site for placeholder in CERTIFICATE_PLACEHOLDERS)
    certificate, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=monitor.example.com", "-keyout", str(key), "-out", str(certificate)],
                   check=True, capture_output=True, timeout=60)
    return site.replace(CERTIFICATE_PLACEHOLDERS[0], str(certificate)).replace(CERTIFICATE_PLACEHOLDERS[1], str(key))


def _nginx_conf(folder: Path, site: str) -> Path:
    (folder / "site.conf").write_text(site)
    (folder / "nginx.conf").write_text(
        f"pid {folder}/nginx.pid;\nerror_log {folder}/error.log;\nevents {{}}\n"
        f"http {{\n  access_log off;\n  client_body_temp_path {folder}/body;\n  proxy_temp_path {folder}/proxy;\n"
        f"  include {folder}/site.conf;\n}}\n")
    return folder / "nginx.conf"


@pytest.mark.skipif(shutil.which("nginx") is None or shutil.which("openssl") is None,
                    reason="nginx or openssl is not installed")
def test_the_nginx_site_passes_nginx_t_once_its_certificate_placeholders_are_filled(tmp_path):
    site = (DEPLOY / "nginx.conf").read_text()
    metrics = site.split("location = /metrics {")[1].split("}")[0]  # not public: the README's advice, shipped
    assert "deny all;" in metrics and "allow 10.0.0.0/8;" in metrics
    done = subprocess.run(["nginx", "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"),
                           "-c", str(_nginx_conf(tmp_path, _site_with_a_certificate(tmp_path)))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "syntax is ok" in done.stderr and "test is successful" in done.stderr


@pytest.mark.skipif(shutil.which("nginx") is None or shutil.which("openssl") is None,
                    reason="nginx or openssl is not installed")
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_the_nginx_site_tells_browsers_to_come_back_over_https_only(tmp_path):
    """Without Strict-Transport-Security a browser sent to http:// again (a typed address, an old bookmark) met the
    redirect unprotected: an attacker on its network could keep it on http and serve a sign-in page that took the
    API key pasted into it (security walk). Every answer over TLS carries it, an error included."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    site = _site_with_a_certificate(tmp_path).replace("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
    site = site.replace("listen [::]:443 ssl;", "").split("server {\n    listen 80;")[0]  # the port 80 redirect
    nginx = subprocess.Popen(["nginx", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c",
                              str(_nginx_conf(tmp_path, site)), "-g", "daemon off;"])
    try:
        answer = _answer_over_tls(f"https://127.0.0.1:{port}/login")  # no app behind it: nginx's 502
        assert answer.status_code == 502
        assert answer.headers["Strict-Transport-Security"] == "max-age=31536000"
    finally:
        nginx.terminate()
        nginx.wait(timeout=30)


def _answer_over_tls(url):
    deadline = time.monotonic() + 30
    while True:
        try:
            return requests.get(url, timeout=5, verify=False)  # the certificate is the test's own
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.skipif(shutil.which("nginx") is None or shutil.which("curl") is None,
                    reason="nginx or curl is not installed")
def test_behind_the_nginx_site_slow_downloads_of_exports_hold_no_gunicorn_thread(tmp_path, served):  # noqa: F811
    """The site turned nginx's buffering off: each export streamed to a slow client held one of gunicorn's 8
    threads for the whole download, and 8 of them stopped every request, /healthz included (PostgreSQL walk)."""
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": served.database_url})
    with app.app_context():
        account, key = accounts.create_account("Exports Ltd", "enterprise")
    fill_subscriptions(served.database_url, account.id, "sub_export_", ROWS)  # 8 MB of CSV: past socket buffers
    location = (DEPLOY / "nginx.conf").read_text().split("    location / {")[1].split("    }")[0]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n"
        f"  client_body_temp_path {tmp_path}/body;\n  proxy_temp_path {tmp_path}/proxy;\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{"
        f"{location.replace('http://127.0.0.1:8000', served.base)}    }}\n  }}\n}}\n")
    nginx = subprocess.Popen(["nginx", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c",
                              str(tmp_path / "nginx.conf"), "-g", "daemon off;"])
    downloads = []
    try:
        base = f"http://127.0.0.1:{port}"
        assert _wait_for_answer(base + "/api/v1/openapi.json")
        downloads = [subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--limit-rate", "1k", "-H",
                                       f"X-API-Key: {key}", base + "/api/v1/subscriptions/export"])
                     for _ in range(9)]
        time.sleep(3)
        # answered (503 here: no scheduler runs), not held up behind the downloads
        assert requests.get(base + "/healthz", timeout=10).json()["database"] == "ok"
        assert requests.get(base + "/api/v1/subscriptions?limit=1", headers={"X-API-Key": key},
                            timeout=10).json()["pagination"]["total"] == ROWS
        assert all(download.poll() is None for download in downloads)  # still downloading
    finally:
        for download in downloads:
            download.kill()
        nginx.terminate()
        nginx.wait(timeout=30)


def _wait_for_answer(url) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            return requests.get(url, timeout=5).status_code == 200
        except requests.RequestException:
            time.sleep(0.2)
    return False
