"""gunicorn as `entity-monitor serve` runs it: `python <this file> …`, as gunicorn's own re-exec (USR2) runs it again.
This package is imported before gunicorn puts the working directory first on the import path (its `chdir` setting),
so a folder named `app` where the command runs is never imported in its place, as it was under `python -m gunicorn`
(`python -P -m` would do on Python 3.11 only)."""
import os
import signal
import sys


def stop_cleanly_while_starting() -> None:
    """Until gunicorn's master puts its own handlers in place, SIGTERM or SIGINT stops the start-up as gunicorn stops
    once up: one line and exit 0 (it was exit 143 without a word, or a KeyboardInterrupt's traceback: operator walk).
    Installed by `serve` as it starts, and again here, after its exec."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop_while_starting)


def _stop_while_starting(number, _frame):
    # written straight to the descriptor and ended at once: nothing is served yet, and an exception raised here
    # could be caught by whatever start-up code it lands in
    os.write(2, f"entity-monitor: stopped by {signal.Signals(number).name} while starting, before serving\n".encode())
    os._exit(0)


def main() -> None:
    stop_cleanly_while_starting()
    if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]  # run as a file, Python put this package's folder first: its modules are no top-level ones
    import app  # noqa: F401 - this package, bound before gunicorn's chdir puts the working directory first
    # imported here, not at the top: `serve` imports this module for its handler before it checks WEB_CONCURRENCY,
    # which gunicorn reads as it is imported
    from gunicorn.app.wsgiapp import run
    run(prog="gunicorn")


if __name__ == "__main__":
    main()
