"""Operator commands (contract §9): `flask --app wsgi accounts|checks|deliveries|scheduler …`."""
import json

import click
from flask.cli import AppGroup

from app.common import isoformat
from app.errors import ServiceError
from app.services import accounts

accounts_cli = AppGroup("accounts", help="Create and manage accounts.")


def _fail(error: ServiceError):
    raise click.ClickException(f"{error.code}: {error.message}")


@accounts_cli.command("create")
@click.option("--name", required=True, help="Account name.")
@click.option("--tier", default=None, help="Tier (default: starter).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def create_account(name, tier, as_json):
    """Create an account and print its first API key (shown only once)."""
    try:
        account, api_key = accounts.create_account(name, tier)
    except ServiceError as error:
        _fail(error)
    if as_json:
        click.echo(json.dumps({"account_id": account.id, "api_key": api_key, "tier": account.tier}))
    else:
        click.echo(f"account_id: {account.id}\ntier: {account.tier}\n"
                   f"trial_ends_at: {isoformat(account.trial_ends_at)}\napi_key: {api_key}")


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
    click.echo(f"{account.id} is now on {account.tier} (limit {accounts.subscription_limit(account)})")


def register_commands(app):
    app.cli.add_command(accounts_cli)
