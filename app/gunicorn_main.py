"""gunicorn as `entity-monitor serve` runs it (`python -P -m app.gunicorn_main …`). This package is imported before
gunicorn puts the working directory first on the import path (its `chdir` setting), so a folder named `app` where the
command runs is never imported in its place, as it was under `python -m gunicorn`."""
from gunicorn.app.wsgiapp import run

import app  # noqa: F401 - imported already under -m; run as a file (gunicorn's re-exec on USR2) it must be too

if __name__ == "__main__":
    run(prog="gunicorn")
