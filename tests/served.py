"""The service as `scripts/run` serves it (gunicorn with app/gunicorn_conf.py) on a fresh database,
for the tests that need a real server: fuzzing, gunicorn's limits, its access log."""
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from app import create_app
from app.services import accounts
from tests.conftest import BASE_CONFIG

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Served:
    base: str
    key: str
    log_path: Path
    database_url: str

    def log(self) -> str:
        return self.log_path.read_text()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served(tmp_path, migrated_template):
    """A gunicorn serving a fresh database with one account; stopped afterwards. Its output goes to `log`."""
    database = tmp_path / "fuzz.db"
    shutil.copy(migrated_template, database)
    url = f"sqlite:///{database}"
    app = create_app({**BASE_CONFIG, "SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        _, key = accounts.create_account("Fuzz Ltd")
    port = _free_port()
    log_path = tmp_path / "gunicorn.log"
    log = open(log_path, "w")
    # WORKER_CPU=off: the test processes' servers would otherwise all keep to the same CPU
    env = {**os.environ, "DATABASE_URL": url, "RATELIMIT_ENABLED": "0", "SCHEDULER_ENABLED": "0", "WORKER_CPU": "off",
           "BIND": f"127.0.0.1:{port}"}
    server = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "-c", "python:app.gunicorn_conf",
                               "wsgi:app"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(base, server)
        yield Served(base, key, log_path, url)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _wait_until_serving(base, server):
    deadline = time.monotonic() + 120  # a loaded CI machine can take a while to boot a worker
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("gunicorn exited at start-up")
        try:
            requests.get(base + "/api/v1/openapi.json", timeout=10)
            return
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not start")
