from flask import Blueprint

from app.api.auth import require_api_key
from app.api.http import account_id, spec
from app.api.limits import default_limit
from app.schemas.account import AccountSchema, UsageSchema
from app.services import accounts, usage

bp = Blueprint("account", __name__)
bp.before_request(require_api_key)
account_schema = AccountSchema()
usage_schema = UsageSchema()


@bp.get("/account")
@default_limit
@spec("The calling account: tier, cap and trial", response=AccountSchema, tag="account")
def get_account():
    return account_schema.dump(accounts.describe(accounts.get_account(account_id())))


@bp.get("/account/usage")
@default_limit
@spec("Usage counts for the current UTC day and month", response=UsageSchema, tag="account")
def get_usage():
    return usage_schema.dump(usage.report(accounts.get_account(account_id())))
