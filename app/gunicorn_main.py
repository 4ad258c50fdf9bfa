"""gunicorn as `entity-monitor serve` runs it: `python <this file> …`, as gunicorn's own re-exec (USR2) runs it again.
This package is imported before gunicorn puts the working directory first on the import path (its `chdir` setting),
so a folder named `app` where the command runs is never imported in its place, as it was under `python -m gunicorn`
(`python -P -m` would do on Python 3.11 only)."""
import os
import sys

if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]  # run as a file, Python put this package's folder first: its modules are no top-level ones

import app  # noqa: E402,F401 - this package, bound before gunicorn's chdir puts the working directory first
from gunicorn.app.wsgiapp import run  # noqa: E402

if __name__ == "__main__":
    run(prog="gunicorn")
