"""How a process stops on a problem an operator must fix: one line on stderr, then the exit code gunicorn and
systemd act on. A leaf module, so that modules loaded before the app (app.metrics) stop the same way."""
import sys

# gunicorn halts (instead of respawning workers forever) when a worker exits with its "app failed to load" or
# "worker failed to boot"; the units' RestartPreventExitStatus=4 keeps systemd from restarting the first only.
APP_LOAD_ERROR = 4
WORKER_BOOT_ERROR = 3


def stop(line: str, code: int):
    """The one line an operator reads on stderr, then the exit code gunicorn and systemd act on."""
    sys.stderr.write(f"entity-monitor: {line}\n")
    raise SystemExit(code) from None
