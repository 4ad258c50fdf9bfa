"""Operator commands (contract §9, §10): the `entity-monitor` console script, or `flask --app wsgi …` in a
checkout: accounts|checks|deliveries|scheduler|db …, and `serve`."""
import contextlib
import functools
import json
import os
import signal
import sys
from collections import Counter

import click
from flask import current_app
from flask.cli import AppGroup, FlaskGroup

from app.common import isoformat
from app.database import busy_or_unreachable, cannot_serve, missing_database
from app.errors import ServiceError
from app.exits import stop
from app.extensions import db
from app.services import accounts


class OperatorGroup(AppGroup):
    """A group of operator commands: a database that cannot serve (no schema, another release's, unreachable) is
    one line and exit 1 however the command is run; the console script said so, `flask --app wsgi …` ended in
    SQLAlchemy's traceback (operability walk). So is a SQLite file that is not there (`on_an_existing_database`)."""

    def command(self, *args, existing_database=True, **kwargs):
        """AppGroup's command, `on_an_existing_database` unless told otherwise (a command that checks it itself)."""
        def decorator(callback):
            return super(OperatorGroup, self).command(*args, **kwargs)(
                on_an_existing_database(callback) if existing_database else callback)
        return decorator

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ServiceError as error:  # one a command does not expect (an account on a tier gone from TIERS)
            _fail(error)
        except Exception as error:  # noqa: BLE001 - anything else is raised as it is
            _stop_where_the_database_cannot_serve(error)
            raise


def on_an_existing_database(callback):
    """A command's callback, run only where the database is there: a SQLite file that is not is one line, naming it
    and how to create it, and exit 1, before anything connects (SQLite created it empty: operator walk)."""
    @functools.wraps(callback)
    def run(*args, **kwargs):
        problem = missing_database(current_app.config["SQLALCHEMY_DATABASE_URI"])
        if problem is not None:
            stop(problem, 1)
        return callback(*args, **kwargs)
    return run


def _stop_where_the_database_cannot_serve(error) -> None:
    problem = cannot_serve(error)
    if problem is not None:
        stop(problem, 1)


accounts_cli = OperatorGroup("accounts", help="Create and manage accounts.")


def _fail(error: ServiceError):
    raise click.ClickException(f"{error.code}: {error.message}")


@accounts_cli.command("create")
@click.option("--name", required=True, help="Account name.")
@click.option("--tier", default=None, help="Tier (default: DEFAULT_TIER, starter; another has no trial).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def create_account(name, tier, as_json):
    """Create an account and print its first API key (shown only once)."""
    try:
        account, api_key = accounts.create_account(name, tier)
    except ServiceError as error:
        _fail(error)
    if as_json:
        click.echo(json.dumps({"account_id": account.id, "api_key": api_key, "tier": account.tier,
                               "trial_ends_at": isoformat(account.trial_ends_at)}))
    else:
        click.echo(f"account_id: {account.id}\ntier: {account.tier}\n"
                   f"trial_ends_at: {isoformat(account.trial_ends_at) or ''}\napi_key: {api_key}")


@accounts_cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def list_accounts(as_json):
    """List accounts with their tier and live subscription count."""
    rows = [accounts.describe(account) for account in accounts.list_accounts()]
    if as_json:
        click.echo(json.dumps([{**row, "trial_ends_at": isoformat(row["trial_ends_at"]),
                                "created_at": isoformat(row["created_at"])} for row in rows]))
        return
    for row in rows:
        limit = "unlimited" if row["subscription_limit"] is None else row["subscription_limit"]
        click.echo(f"{row['id']}\t{row['tier']}\t{row['subscription_count']}/{limit}\t{row['name']}")


@accounts_cli.command("set-tier")
@click.argument("account_id")
@click.argument("tier")
def set_tier(account_id, tier):
    """Move an account to another tier; this ends its trial (the account is now on a plan)."""
    try:
        account = accounts.set_tier(account_id, tier)
    except ServiceError as error:
        _fail(error)
    limit = accounts.subscription_limit(account)
    click.echo(f"{account.id} is now on {account.tier} ({'no limit' if limit is None else f'limit {limit}'})")
    live = accounts.live_subscription_count(db.session, account.id)
    if limit is not None and live > limit:  # a downgrade: said, so that it is not found out from refused creates
        click.echo(f"note: its {live:,} active and paused subscriptions are over the limit of {limit:,}; they are "
                   "kept and checked, and new ones are refused until fewer than the limit are live", err=True)


checks_cli = OperatorGroup("checks", help="Run checks in the foreground.")


@checks_cli.command("run")
@click.argument("subscription_id", required=False)
@click.option("--all", "check_all", is_flag=True, help="Every active subscription, due or not.")
@click.option("--due", is_flag=True, help="The subscriptions that are due (the default).")
def run_checks(subscription_id, check_all, due):
    """Check subscriptions now: the due ones, --all active ones, or one by id."""
    from app.services.checks import Summary, recorded_before
    from app.worker import checks as check_worker
    if sum(bool(choice) for choice in (subscription_id, check_all, due)) > 1:
        raise click.UsageError("Give one of --all, --due or a SUBSCRIPTION_ID.")
    summaries, failure = [], None
    with _stopped_by_signals() as stopped:
        def keep_going():
            return not stopped
        try:
            if subscription_id:
                summary = check_worker.run_one(subscription_id, keep_going)
                if summary is None:
                    raise click.ClickException(f"{subscription_id} is not an active subscription (or is being "
                                               "checked).")
                summaries = [summary]
            elif check_all:
                for summary in check_worker.run_all(keep_going):
                    summaries.append(summary)
            else:
                summaries = check_worker.run_due(keep_going=keep_going, count_left=True)
        except Exception as error:  # noqa: BLE001 - one a batch raised once it had recorded its calls: said below
            if recorded_before(error) is None:
                raise
            if not hasattr(error, "summaries"):  # (run_due notes its own batches)
                check_worker.note_made_before(error, summaries)
            summaries, failure = error.summaries, error
    total = Summary.merged(summaries)
    totals = {name: getattr(total, name) for name in Summary.COUNTS if name != "held" or check_all}
    click.echo(" ".join(f"{name}={count}" for name, count in totals.items()))
    if failure is not None:  # it ended in the error's traceback, what it had made and recorded unsaid
        problem = busy_or_unreachable(failure) or cannot_serve(failure) or f"{type(failure).__name__}: {failure}"
        raise click.ClickException(
            f"the run stopped: taking a call from the provider's budget or slots failed ({problem}); the checks "
            "made were recorded and the rest released with their place kept, for the next run or the scheduler.")
    if stopped:
        raise click.ClickException(f"stopped by {stopped[0]}: the claimed checks not started ({totals['deferred']}) "
                                   "were released for the scheduler with their place kept; the rest of the run was "
                                   "not made.")
    if totals["deferred"]:
        raise click.ClickException(
            f"{totals['deferred']} checks were deferred: the provider is paused or its rate budget is spent "
            "(`providers status` tells); they keep their place and run when it allows.")
    if totals["failed"] and not (totals["checked"] or totals["unavailable"]):  # so cron sees a vendor outage
        raise click.ClickException(
            f"every check failed ({totals['failed']}): the provider answered none of them (the log says why); "
            "they are checked again when due.")


@contextlib.contextmanager
def _stopped_by_signals(work="the checks"):
    """A list that holds the name of the first SIGTERM or SIGINT received meanwhile: the checks then finish the
    calls out, release what they have not started and stop (a SIGTERM killed the command at once, its claims left
    for the lease, and a Ctrl-C was ignored until half the lease ran out: fault walk). A second one ends the
    process at once, the calls out with it (a vendor's timeout may be minutes)."""
    stopped = []

    def stop(number, _frame):
        name = signal.Signals(number).name
        if stopped:  # written straight to the descriptor: a handler must not re-enter a stream the program uses
            os.write(2, f"stopped at once by a second {name}: {work} under way keep their claims until their "
                        "lease ends.\n".encode())
            os._exit(128 + number)
        stopped.append(name)
    handlers = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stopped
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


scheduler_cli = OperatorGroup("scheduler", help="The scheduler as its own process.")


@scheduler_cli.command("run", existing_database=False)  # refused with exit 4, below, as `serve` refuses it
def run_scheduler():
    """Run checks and deliveries until stopped (give web workers SCHEDULER_ENABLED=0)."""
    from app.serving import refuse_a_database_that_cannot_serve
    from app.worker.scheduler import AlreadyRunning, run_forever
    # as `serve` does, so that its unit (RestartPreventExitStatus=4) is not restarted for ever on a missing schema
    refuse_a_database_that_cannot_serve(current_app._get_current_object())
    try:
        run_forever(current_app._get_current_object())
    except AlreadyRunning as error:
        raise click.ClickException(str(error))


providers_cli = OperatorGroup("providers", help="The data provider's pauses.")


@providers_cli.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def provider_status_command(as_json):
    """Show whether the provider is paused, why and until when."""
    from app.services.provider_status import provider_status
    status = {name: isoformat(value) if name.startswith("paused_") else value
              for name, value in _configured(provider_status).items()}
    if as_json:
        click.echo(json.dumps(status))
    else:
        click.echo(" ".join(f"{name}={value}" for name, value in status.items() if value is not None))


@providers_cli.command("resume")
def resume_provider_command():
    """Lift a pause now (after buying credits, say): due checks start again at the next poll."""
    from app.services.provider_status import resume_provider
    click.echo("resumed" if _configured(resume_provider) else "the provider was not paused")


def _configured(action):
    """Run a provider action; a misconfigured provider (no API key, say) is a clear error, not a traceback."""
    try:
        return action()
    except ValueError as error:
        raise click.ClickException(str(error))


def operator_commands() -> list:
    """Every operator command group."""
    from app import cli_operations
    return [accounts_cli, providers_cli, checks_cli, scheduler_cli, deliveries_cli, *cli_operations.COMMAND_GROUPS]


def register_commands(app):
    for group in operator_commands():
        app.cli.add_command(group)


deliveries_cli = OperatorGroup("deliveries", help="Send webhook deliveries in the foreground.")


@deliveries_cli.command("run")
@click.option("--once", is_flag=True, help="Send one batch, then stop.")
def run_deliveries(once):
    """Send the deliveries that are due now (batch after batch until none is due) and say what became of the tries:
    delivered, failed with a next try (retrying), failed with none (failed), claimed but not sent (released)."""
    from app.worker import deliveries
    outcomes = Counter()
    with _stopped_by_signals("the sends") as stopped:  # SIGTERM killed it, its claims (a batch) left for the lease
        def keep_going():
            return not stopped
        if once:
            deliveries.deliver_due(keep_going, outcomes)
        else:
            deliveries.deliver_until_idle(keep_going=keep_going, outcomes=outcomes)
    click.echo(" ".join(f"{name}={outcomes[name]}" for name in DELIVERY_OUTCOMES))
    if stopped:
        raise click.ClickException(f"stopped by {stopped[0]}: the sends under way were recorded and the claimed ones "
                                   "not started released for the scheduler; the rest of the run was not made.")
    tried = outcomes["retrying"] + outcomes["failed"]
    if tried and not outcomes["delivered"]:  # as for checks: so that cron sees an outage (of ours, or an endpoint's)
        raise click.ClickException(
            f"every try failed ({tried}): {outcomes['retrying']} will be tried again when due, {outcomes['failed']} "
            "have no further try (redeliver or recover them); the log says why for each.")


DELIVERY_OUTCOMES = ("delivered", "retrying", "failed", "released")


@click.command("serve", context_settings={"ignore_unknown_options": True})
@click.argument("gunicorn_args", nargs=-1, type=click.UNPROCESSED)
def serve(gunicorn_args):
    """Serve the API with gunicorn and the in-process scheduler (BIND, WEB_CONCURRENCY, GUNICORN_THREADS;
    extra arguments go to gunicorn)."""
    from app.gunicorn_main import stop_cleanly_while_starting
    stop_cleanly_while_starting()
    from app.config import ConfigError
    from app.exits import APP_LOAD_ERROR, stop
    from app.serving import (check_serve_settings, forget_empty_serve_settings, gunicorn_settings, load,
                             refuse_unsafe_process_model)
    arguments = ["-c", "python:app.gunicorn_conf", *gunicorn_args, "app.wsgi:app"]
    forget_empty_serve_settings()  # before gunicorn is imported: it reads WEB_CONCURRENCY as it is
    try:  # a bad setting is refused here, in one line, before gunicorn starts (not by each of its workers)
        check_serve_settings()
        app = load()
        refuse_unsafe_process_model(app.config, gunicorn_settings(["gunicorn", *arguments]))
    except ConfigError as error:
        stop(f"configuration refused: {error}", APP_LOAD_ERROR)
    os.environ["LOG_FORMAT"] = app.config["LOG_FORMAT"]  # for gunicorn's own lines (app/gunicorn_limits.py)
    # by its file, not imported: gunicorn reads WEB_CONCURRENCY as it is imported, before the check above
    os.execv(sys.executable, [sys.executable, os.path.join(os.path.dirname(__file__), "gunicorn_main.py"), *arguments])


def _load_app():
    from app.serving import load
    return load()


class _ConsoleGroup(FlaskGroup):
    """FlaskGroup, but its commands are its own: listing them (`--help`) loads no app, so help is there even
    when a setting is bad or the database is down; running one loads the app, and a bad setting is one line."""

    def list_commands(self, ctx) -> list:
        self._load_plugin_commands()
        return super(FlaskGroup, self).list_commands(ctx)


def main():
    """The `entity-monitor` console script."""
    from app.version import VERSION
    group = _ConsoleGroup(name="entity-monitor", create_app=_load_app, add_version_option=False,
                          help="Entity change monitor: serve the API and run the operator commands.")
    from flask_migrate.cli import db as schema_commands  # what Flask-Migrate adds to an app's own CLI
    for command in (serve, schema_commands, *operator_commands()):
        group.add_command(command)
    group = click.version_option(VERSION, prog_name="entity-monitor")(group)
    try:
        group(prog_name="entity-monitor")
    except Exception as error:  # noqa: BLE001 - a database that cannot serve is one line; anything else is raised
        _stop_where_the_database_cannot_serve(error)
        raise
