"""schemathesis over every operation of the served OpenAPI document, `--checks all`, against the service
as `scripts/run` serves it (gunicorn with scripts/gunicorn.conf.py) on a fresh database.

Bounded for CI: FUZZ_EXAMPLES examples per operation (default 25) and a fixed FUZZ_SEED (default 1);
raise both locally for a longer run. Rate limiting is off here (429s would hide the rest); the
document still declares 429 wherever it can happen."""
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
from tests.conftest import BASE_CONFIG

ROOT = Path(__file__).resolve().parent.parent
CONFIG = Path(__file__).resolve().parent / "fuzz" / "schemathesis.toml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served(tmp_path, migrated_template):
    """(base URL, API key) of a gunicorn serving a fresh database; stopped afterwards."""
    database = tmp_path / "fuzz.db"
    shutil.copy(migrated_template, database)
    url = f"sqlite:///{database}"
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        _, key = accounts.create_account("Fuzz Ltd")
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": url, "RATELIMIT_ENABLED": "0", "SCHEDULER_ENABLED": "0",
           "BIND": f"127.0.0.1:{port}"}
    server = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "-c", "scripts/gunicorn.conf.py",
                               "wsgi:app"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(base, server)
        yield base, key
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_until_serving(base, server):
    for _ in range(300):
        if server.poll() is not None:
            raise RuntimeError(server.stderr.read().decode())
        try:
            requests.get(base + "/api/v1/openapi.json", timeout=1)
            return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise RuntimeError("gunicorn did not start")


def test_every_operation_survives_schemathesis_with_all_checks(served):
    base, key = served
    command = [str(Path(sys.executable).parent / "st"), "--config-file", str(CONFIG), "--no-color", "run",
               f"{base}/api/v1/openapi.json", "--checks", "all",
               "--max-examples", os.environ.get("FUZZ_EXAMPLES", "25"), "--seed", os.environ.get("FUZZ_SEED", "1"),
               "--workers", "1", "--header", f"X-API-Key: {key}"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert "28/28" in result.stdout  # every operation was selected and tested
