"""Operator commands (contract §9, issue 2 point 3): accounts create / list / set-tier."""
import json
import re

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.models import Account, ApiKey
from app.services import keys
from conftest import Tenant


def _accounts():
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(Account))


def _invoke(runner, *args):
    return runner.invoke(args=["accounts", *args])


def test_create_prints_account_and_a_working_key(app, runner):
    result = _invoke(runner, "create", "--name", "Acme")
    assert result.exit_code == 0, result.output
    fields = dict(line.split(": ", 1) for line in result.output.strip().splitlines())
    assert fields["account_id"].startswith("acct_")
    assert fields["tier"] == "starter"
    assert re.match(r"^lwa\.sk_live_[A-Za-z0-9]{32}$", fields["api_key"])
    assert fields["trial_ends_at"].endswith("Z")
    tenant = Tenant(app.test_client(), fields["account_id"], fields["api_key"])
    assert tenant.get("/account").get_json()["name"] == "Acme"


def test_an_account_created_on_a_named_tier_is_a_plan_without_a_trial(app, runner):
    result = _invoke(runner, "create", "--name", "Grow", "--tier", "growth", "--json")
    assert result.exit_code == 0, result.output
    created = json.loads(result.output)
    account = Tenant(app.test_client(), created["account_id"], created["api_key"]).get("/account").get_json()
    assert account["tier"] == "growth" and account["trial_ends_at"] is None
    started = json.loads(_invoke(runner, "create", "--name", "Start", "--tier", "starter", "--json").output)
    account = Tenant(app.test_client(), started["account_id"], started["api_key"]).get("/account").get_json()
    assert account["tier"] == "starter" and account["trial_ends_at"]  # the default tier named: still a trial


def test_an_account_without_a_trial_is_printed_as_accounts_show_prints_it_not_as_none(runner):
    """Its text said Python's None, "trial_ends_at: None", where `accounts show` leaves the value empty (walk)."""
    result = _invoke(runner, "create", "--name", "Grow", "--tier", "growth")
    assert result.exit_code == 0 and "None" not in result.output
    assert "\ntrial_ends_at: \n" in result.output


def test_create_json_prints_one_object(app, runner):
    result = _invoke(runner, "create", "--name", "Acme", "--json")
    assert result.exit_code == 0
    body = json.loads(result.output)
    assert set(body) == {"account_id", "api_key", "tier", "trial_ends_at"}  # the text output's fields
    assert body["tier"] == "starter" and body["trial_ends_at"].endswith("Z")
    db.session.rollback()
    stored = db.session.scalars(select(ApiKey).where(ApiKey.account_id == body["account_id"])).one()
    assert stored.key_hash == keys.hash_key(body["api_key"])


def test_create_with_a_tier(app, runner):
    body = json.loads(_invoke(runner, "create", "--name", "Big", "--tier", "enterprise", "--json").output)
    assert body["tier"] == "enterprise"
    account = Tenant(app.test_client(), body["account_id"], body["api_key"]).get("/account").get_json()
    assert account["subscription_limit"] is None


@pytest.mark.parametrize("args", [
    ["create", "--name", "Acme", "--tier", "platinum"],
    ["create", "--name", ""],
    ["create", "--name", "   "],
    ["create", "--name", "x" * 201],
    ["create", "--name", "Acme\nacct_forged\tenterprise"],
    ["create", "--name", "Acme\tCo"],
    ["create"],
])
def test_create_errors_exit_non_zero_and_create_nothing(runner, args):
    result = _invoke(runner, *args)
    assert result.exit_code != 0
    assert _accounts() == 0


@pytest.mark.parametrize("name, told", [("   ", "is blank"), ("x" * 201, "must be 1-200 characters")])
def test_a_blank_or_long_name_is_told_as_such(runner, name, told):
    """Spaces alone were told "must be 1-200 characters", which they are (operator walk)."""
    result = _invoke(runner, "create", "--name", name)
    assert result.exit_code != 0 and told in result.output and _accounts() == 0


def test_unknown_tier_names_the_known_ones(runner):
    result = _invoke(runner, "create", "--name", "Acme", "--tier", "platinum")
    assert "VALIDATION_ERROR" in result.output
    for tier in ("starter", "growth", "scale", "enterprise"):
        assert tier in result.output


def test_list_shows_tier_and_live_count(app, runner, alice):
    alice.post("/subscriptions", json={"entity_type": "contact", "network_id": "jane"})
    result = _invoke(runner, "list")
    assert result.exit_code == 0
    assert result.output.strip() == f"{alice.account_id}\tstarter\t1/100\tAlice Inc"


def test_list_json(runner, alice, bob):
    result = _invoke(runner, "list", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [row["id"] for row in rows] == [alice.account_id, bob.account_id]
    assert set(rows[0]) == {"id", "name", "tier", "subscription_limit", "subscription_count",
                            "trial_ends_at", "created_at"}


def test_list_of_no_accounts_is_empty(runner):
    assert _invoke(runner, "list").output == ""
    assert json.loads(_invoke(runner, "list", "--json").output) == []


def test_set_tier_changes_the_cap_and_ends_the_trial(runner, alice):
    result = _invoke(runner, "set-tier", alice.account_id, "scale")
    assert result.exit_code == 0
    assert "scale" in result.output and "10000" in result.output
    account = alice.get("/account").get_json()
    assert account["tier"] == "scale" and account["trial_ends_at"] is None


def test_set_tier_to_an_unlimited_tier_says_so_not_none(runner, alice):
    """It printed Python's None: "now on enterprise (limit None)" (operator walk)."""
    result = _invoke(runner, "set-tier", alice.account_id, "enterprise")
    assert result.exit_code == 0 and result.output == f"{alice.account_id} is now on enterprise (no limit)\n"


def test_a_downgrade_below_the_live_subscriptions_says_so(runner, alice):
    """It was silent: the team found out from refused creates (walk)."""
    assert _invoke(runner, "set-tier", alice.account_id, "growth").exit_code == 0
    for number in range(101):
        assert alice.post("/subscriptions", json={"entity_type": "contact", "network_id": f"p-{number}"}) \
            .status_code == 201
    result = _invoke(runner, "set-tier", alice.account_id, "starter")
    assert result.exit_code == 0 and "now on starter (limit 100)" in result.output
    assert "its 101 active and paused subscriptions are over the limit of 100" in result.output
    assert "over the limit" not in _invoke(runner, "set-tier", alice.account_id, "growth").output


@pytest.mark.parametrize("args", [["set-tier", "acct_nope", "growth"], ["set-tier", "ACCOUNT", "platinum"],
                                  ["set-tier", "ACCOUNT"]])
def test_set_tier_errors_exit_non_zero_and_change_nothing(runner, alice, args):
    args = [alice.account_id if arg == "ACCOUNT" else arg for arg in args]
    result = _invoke(runner, *args)
    assert result.exit_code != 0
    db.session.rollback()
    assert db.session.get(Account, alice.account_id).tier == "starter"


def test_the_help_of_create_names_the_setting_that_picks_the_default_tier(runner):
    """It said `default: starter` whatever DEFAULT_TIER chose."""
    output = runner.invoke(args=["accounts", "create", "--help"]).output
    assert "DEFAULT_TIER" in " ".join(output.split())
