"""Operator commands for keys, accounts, subscriptions and events (contract §10), registered by
`app.cli.operator_commands`, which the `entity-monitor` console script and the app's `flask` CLI both list."""
import json
import logging
import os
import re
import socket
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import click
from flask import current_app
from flask.cli import with_appcontext

from app.api.http import load
from app.cli import OperatorGroup, _fail as fail, accounts_cli, on_an_existing_database
from app.common import isoformat
from app.errors import ServiceError
from app.exits import APP_LOAD_ERROR, stop
from app.redaction import redact_uri
from app.schemas.account import ApiKeyCreateSchema
from app.schemas.subscriptions import STATUSES, SubscriptionCreateSchema
from app.services import accounts, export, importer, keys, retention, webhooks

keys_cli = OperatorGroup("keys", help="API keys of any account (the way back from a lost key).")
subscriptions_cli = OperatorGroup("subscriptions", help="Import and export subscriptions.")
events_cli = OperatorGroup("events", help="The event log.")
metrics_cli = OperatorGroup("metrics", help="Prometheus metrics.")
key_create_schema = ApiKeyCreateSchema()
create_item_schema = SubscriptionCreateSchema()


def _existing_account(account_id):
    try:
        return accounts.get_account(account_id)
    except ServiceError as error:
        fail(error)


def _emit(record: dict, as_json: bool, absent=None):
    """One JSON object, or a `name: value` line a field: a flag as yes or no (Python's True and False were printed),
    an absent value as empty, or as `absent` names it for that field."""
    if as_json:
        click.echo(json.dumps(record))
    else:
        click.echo("\n".join(f"{name}: {_text(value, (absent or {}).get(name, ''))}" for name, value in record.items()))


def _text(value, absent: str) -> str:
    if value is None:
        return absent
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


# --- keys ---------------------------------------------------------------------------------------

@keys_cli.command("create")
@click.option("--account", "account_id", required=True, help="Account id (acct_…).")
@click.option("--name", required=True, help="Key name, 1-100 characters.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def create_key(account_id, name, as_json):
    """Create a key and print it (shown only this once)."""
    _existing_account(account_id)
    try:
        key, plaintext = keys.create_key(account_id, load(key_create_schema, {"name": name})["name"])
    except ServiceError as error:
        fail(error)
    _emit({"key_id": key.id, "account_id": account_id, "name": key.name, "api_key": plaintext}, as_json)


def _key_record(key) -> dict:
    return {"id": key.id, "name": key.name, "key_hint": key.key_hint, "created_at": isoformat(key.created_at),
            "last_used_at": isoformat(key.last_used_at)}


@keys_cli.command("list")
@click.option("--account", "account_id", required=True, help="Account id (acct_…).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def list_keys(account_id, as_json):
    """List an account's keys (never their values)."""
    _existing_account(account_id)
    records = [_key_record(key) for key in keys.list_keys(account_id)]
    if as_json:
        click.echo(json.dumps(records))
        return
    for record in records:
        click.echo(f"{record['id']}\t…{record['key_hint']}\t{record['created_at']}\t"
                   f"{record['last_used_at'] or 'never used'}\t{record['name']}")


@keys_cli.command("revoke")
@click.argument("key_id")
def revoke_key(key_id):
    """Delete a key: it fails from its next request on (an account keeps at least one)."""
    try:
        key = keys.revoke_key(key_id)
    except ServiceError as error:
        fail(error)
    click.echo(f"revoked {key.id} of {key.account_id}")


# --- accounts show ------------------------------------------------------------------------------

@click.command("show")
@click.argument("account_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@with_appcontext  # added to `accounts` from here: its own commands get theirs from AppGroup (and OperatorGroup)
@on_an_existing_database
def show_account(account_id, as_json):
    """An account: tier, subscriptions against the cap, trial, keys and webhook endpoint."""
    described = accounts.describe(_existing_account(account_id))
    try:
        config = webhooks.get(account_id)
        webhook = {"webhook_endpoint": config.endpoint_url, "webhook_active": config.is_active,
                   "webhook_failing_since": isoformat(config.failing_since)}
    except ServiceError:
        webhook = {"webhook_endpoint": None}
    _emit({**described, "trial_ends_at": isoformat(described["trial_ends_at"]),
           "created_at": isoformat(described["created_at"]), "api_keys": len(keys.list_keys(account_id)),
           **webhook}, as_json, absent={"subscription_limit": "unlimited"})


# --- subscriptions import / export ----------------------------------------------------------------

def _load_item(raw):
    return load(create_item_schema, raw)


def on_terminal() -> bool:
    return sys.stdout.isatty()


class Progress:
    """A progress bar on a terminal; a plain `imported N/M rows` line per chunk when piped."""

    def __init__(self, total: int, interactive: bool):
        self.total, self.done = total, 0
        self.bar = click.progressbar(length=total, label="importing", file=sys.stdout) if interactive else None

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def update(self, report):
        if self.bar:
            self.bar.update(report.rows - self.done)
        else:
            click.echo(f"imported {report.rows}/{self.total} rows")
        self.done = report.rows


def _check_writable(path: str) -> None:
    """A --rejected path is refused before importing: the report of the rows imported must have somewhere to go (a
    path that could not be written failed after the import, its rejected rows lost: walk). Opened without blocking
    (a named pipe without a reader is refused, not waited on); a file it had to create is removed again."""
    existed = os.path.lexists(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644))
    except OSError as error:
        raise click.BadParameter(f"{path} cannot be written ({error.strerror})", param_hint="--rejected") from None
    if not existed:
        os.remove(path)


def _default_rejected_path(file: str, dry_run: bool) -> str:
    """Beside the file: crm.csv -> crm.rejected.csv; a dry run's its own, crm.dry-run.rejected.csv (it wrote over the
    real run's, whose rows were still to fix: operator walk)."""
    return f"{os.path.splitext(file)[0]}{'.dry-run' if dry_run else ''}.rejected.csv"


@subscriptions_cli.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--account", "account_id", required=True, help="Account id (acct_…).")
@click.option("--column", help="The column of profile URLs or ids (default: found by its header).")
@click.option("--type-column", help="The column of entity types (default: `entity_type` or `type` if present; "
                                    "else the type is read from each URL).")
@click.option("--metadata", default="", help="Columns kept as custom_metadata, comma-separated.")
@click.option("--rejected", "rejected_path", type=click.Path(dir_okay=False),
              help="Where rejected rows go, with the reason (default: beside FILE, crm.csv -> crm.rejected.csv; "
                   "a dry run's -> crm.dry-run.rejected.csv).")
@click.option("--dry-run", is_flag=True, help="Apply every rule, create nothing; the rows it would reject go to "
                                              "crm.dry-run.rejected.csv, never over the real run's crm.rejected.csv.")
def import_subscriptions(file, account_id, column, type_column, metadata, rejected_path, dry_run):
    """Subscribe to every profile of a CSV exported from a CRM; safe to re-run."""
    _existing_account(account_id)
    if rejected_path:
        if os.path.abspath(rejected_path) == os.path.abspath(file):
            raise click.BadParameter("the rejected rows would be written over the file imported",
                                     param_hint="--rejected")
        _check_writable(rejected_path)
    try:
        header, rows, form = importer.read_rows(file)
        plan = importer.Plan.for_header(header, column, type_column,
                                        [name.strip() for name in metadata.split(",") if name.strip()])
        with Progress(len(rows), on_terminal()) as progress:
            report = importer.import_rows(account_id, rows, plan, _load_item, dry_run, progress.update)
    except importer.NoIdColumn:
        fail(importer.NoIdColumn(", or choose it with --column NAME"))
    except ServiceError as error:
        fail(error)
    verb = "would be created" if dry_run else "created"
    click.echo(f"rows={report.rows} {verb}={report.created} already_present={report.present} "
               f"rejected={len(report.refused)}")
    rejected_path = rejected_path or _default_rejected_path(file, dry_run)
    if report.refused:
        try:
            # in the file's own form (delimiter, BOM, sep= line): Excel opened a `;` file's rows in one column, and
            # without the BOM read its UTF-8 as the system's code page (José as JosÃ©), saved so when fixed (walk)
            with open(rejected_path, "w", newline="", encoding="utf-8-sig" if form.bom else "utf-8") as rejected_file:
                importer.write_outcomes(rejected_file, header, report.refused, ("reason",), delimiter=form.delimiter,
                                        sep_line=form.sep_line)
        except OSError as error:  # beside a file in a folder this user cannot write (a --rejected was checked)
            raise click.ClickException(f"the rejected rows could not be written to {rejected_path} "
                                       f"({error.strerror}): import again with --rejected PATH; a second run is "
                                       "safe (what is created counts as already present)") from None
        click.echo(f"rejected rows and their reasons: {rejected_path}")
    elif not dry_run and os.path.isfile(rejected_path):  # an earlier run's: its rows would read as rejected now
        try:
            os.remove(rejected_path)
        except OSError as error:
            click.echo(f"no row rejected; the earlier {rejected_path} could not be removed ({error.strerror}) and "
                       "is out of date")
        else:
            click.echo(f"no row rejected: removed the earlier {rejected_path}")


@subscriptions_cli.command("export")
@click.option("--account", "account_id", required=True, help="Account id (acct_…).")
@click.option("--format", "export_format", type=click.Choice(("csv", "json")), default="csv", show_default=True)
@click.option("--status", type=click.Choice(STATUSES + ("all",)), default="all", show_default=True)
def export_subscriptions(account_id, export_format, status):
    """Write the account's subscriptions to standard output, as GET /subscriptions/export does."""
    _existing_account(account_id)
    chunks, _media_type = export.export(account_id, status, export_format)
    for chunk in chunks:
        click.echo(chunk, nl=False)


# --- events prune -------------------------------------------------------------------------------

@events_cli.command("prune")
@click.option("--days", type=click.IntRange(min=1), help="Keep this many days (default: EVENT_RETENTION_DAYS; at "
              "least 1, as for the setting).")
def prune_events(days):
    """Delete events older than the retention, with their delivery attempts (never one still being delivered)."""
    pruned = retention.prune(days)
    click.echo(f"events={pruned.events} attempts={pruned.attempts}")


# --- metrics serve ------------------------------------------------------------------------------

class MetricsServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread a connection: one client that connects and sends nothing held every scrape (operability walk)."""
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (TimeoutError, ConnectionError)):  # a client's, not ours: no traceback
            super().handle_error(request, client_address)


class MetricsRequestHandler(WSGIRequestHandler):
    timeout = 10  # seconds a connection may wait for its request

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        """Through the app's logging, as every other line (one JSON object with LOG_FORMAT=json): http.server wrote
        its own `127.0.0.1 - - [date] "GET /metrics …"` line on stderr for every scrape. The request line's target is
        redacted as the app's access line's is (`?token=[redacted]`): it was logged as sent (operator walk)."""
        args = tuple(_request_line_redacted(arg) if isinstance(arg, str) else arg for arg in args)
        logging.getLogger("app.access").info("%s %s", self.address_string(), format % args)


_METHOD = re.compile(r"\S+\s+")


def _request_line_redacted(text: str) -> str:
    """A method, the target, a version (HTTP/0.9 names none). The target runs to the version, spaces and all: a line
    of two spaces (served) or of four words (refused, its error message quoting it) was logged as sent, token and
    all. No backtracking pattern: a client's 64 kB line of spaces would cost seconds of CPU."""
    method = _METHOD.match(text)
    start = method.end() if method else 0
    target, version = text[start:], ""
    words = target.rsplit(None, 1)
    if len(words) == 2 and words[1].startswith("HTTP/") and target.endswith(words[1]):
        target, version = words[0], target[len(words[0]):]
    return text[:start] + redact_uri(target) + version


@metrics_cli.command("serve", existing_database=False)  # refused with exit 4, below, as `serve` refuses it
@click.option("--bind", default="127.0.0.1:9464", show_default=True, help="HOST:PORT to answer GET /metrics on.")
def serve_metrics(bind):
    """Answer GET /metrics on an address of its own (serve the API with METRICS_ENABLED=0). Needs
    PROMETHEUS_MULTIPROC_DIR shared with the web workers and the scheduler: it adds up their counters."""
    from wsgiref.simple_server import make_server

    from app.api.metrics import metrics_only
    from app.metrics import multiprocess_directory
    from app.serving import refuse_a_missing_database
    refuse_a_missing_database(current_app._get_current_object())
    if not multiprocess_directory():
        stop("configuration refused: PROMETHEUS_MULTIPROC_DIR is not set: a separate process would see no counters "
             "of the web workers and the scheduler", APP_LOAD_ERROR)
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{bind!r} is not HOST:PORT ([IPv6]:PORT for an IPv6 address)", param_hint="--bind")
    server_class = MetricsServer
    if host.startswith("[") and host.endswith("]"):
        host, server_class = host[1:-1], type("IPv6MetricsServer", (server_class,), {"address_family": socket.AF_INET6})
    try:
        server = make_server(host, int(port), metrics_only(current_app._get_current_object()), server_class,
                             MetricsRequestHandler)
    except (OSError, OverflowError) as error:  # busy, not this host's address, no such host, port > 65535
        raise click.ClickException(f"cannot listen on {bind}: {error}") from None
    click.echo(f"metrics on http://{bind}/metrics")
    server.serve_forever()


accounts_cli.add_command(show_account)
COMMAND_GROUPS = (keys_cli, subscriptions_cli, events_cli, metrics_cli)
