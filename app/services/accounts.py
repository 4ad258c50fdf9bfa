"""Accounts and tiers: creating accounts, their caps and their trial."""
from datetime import timedelta

from flask import current_app
from sqlalchemy import select

from app.common import NAME_RULE, is_plain_name, new_id, utcnow
from app.database import write_transaction
from app.errors import InvalidState, NotFound, ValidationFailed
from app.extensions import db
from app.models import Account
from app.models.subscription import LIVE_STATUSES
from app.services import account_lock, keys, subscription_counts


def tier_settings(tier: str) -> dict:
    tiers = current_app.config["TIERS"]
    if tier not in tiers:  # TIERS changed in instance/config.py under accounts still on it (a KeyError: walk)
        raise InvalidState(f"The tier '{tier}' is not in TIERS (it has {', '.join(tiers)}): add it back to TIERS in "
                           "instance/config.py, or move its accounts with `entity-monitor accounts set-tier ACCOUNT_ID "
                           "TIER` (`serve` names them).")
    return tiers[tier]


def tiers_gone(session) -> dict:
    """{tier: [account ids]} of the accounts on a tier TIERS does not have."""
    known = list(current_app.config["TIERS"])
    gone = {}
    for account_id, tier in session.execute(select(Account.id, Account.tier).where(Account.tier.not_in(known))
                                            .order_by(Account.tier, Account.id)):
        gone.setdefault(tier, []).append(account_id)
    return gone


def subscription_limit(account: Account):
    """The tier's cap, or None for unlimited."""
    return tier_settings(account.tier)["subscription_limit"]


def require_known_tier(tier: str) -> str:
    tiers = current_app.config["TIERS"]
    if tier not in tiers:
        raise ValidationFailed("tier", f"Unknown tier '{tier}'. Known tiers: {', '.join(tiers)}.", tier)
    return tier


def create_account(name: str, tier: str = None):
    """A new account with its first API key. Returns (account, plaintext key). On DEFAULT_TIER it starts with
    a trial of TRIAL_DAYS (contract §4); another tier the operator names is a plan, without a trial (as
    `set_tier` makes it)."""
    name = (name or "").strip()
    if not name:  # (spaces alone were told "must be 1-200 characters": operator walk)
        raise ValidationFailed("name", "The account name is blank: give it 1-200 characters besides spaces.", name)
    if len(name) > 200:
        raise ValidationFailed("name", "The account name must be 1-200 characters.", name)
    if not is_plain_name(name):
        raise ValidationFailed("name", f"The account name {NAME_RULE}.", name)
    now = utcnow()
    default_tier = current_app.config["DEFAULT_TIER"]
    tier = require_known_tier(tier or default_tier)
    trial_ends_at = now + timedelta(days=current_app.config["TRIAL_DAYS"]) if tier == default_tier else None
    with write_transaction() as session:
        account = Account(id=new_id("acct"), name=name, tier=tier, created_at=now, trial_ends_at=trial_ends_at)
        session.add(account)
        _key, plaintext = keys.add_key(session, account.id, "Default key")
    return account, plaintext


def list_accounts():
    return db.session.scalars(select(Account).order_by(Account.created_at, Account.id)).all()


def get_account(account_id: str) -> Account:
    account = db.session.get(Account, account_id)
    if account is None:
        raise NotFound("account", account_id)
    return account


def set_tier(account_id: str, tier: str) -> Account:
    """Move the account to `tier`; to one that checks more often, its subscriptions' next checks come forward, after
    the move is committed (checks recorded from then on plan with the new tier), a page per transaction."""
    from app.services.scheduling import bring_forward  # (scheduling reads the tiers from here)
    require_known_tier(tier)
    with write_transaction() as session:
        account_lock.lock_account(session, account_id)  # first, as every writer of its subscriptions takes it
        account = session.get(Account, account_id)
        if account is None:
            raise NotFound("account", account_id)
        previous = account.tier
        account.tier = tier
        account.trial_ends_at = None  # an operator-chosen tier is a plan, no longer a trial
    bring_forward(account_id, previous, tier)
    return account


LIVE_TOTAL = subscription_counts.total_statement(statuses=LIVE_STATUSES)


def live_subscription_count(session, account_id: str) -> int:
    """Active and paused subscriptions, from the counters (the tier cap)."""
    return session.connection().execute(LIVE_TOTAL, {"account_id": account_id}).scalar()


def trial_ended(account, now) -> bool:
    """The account's free trial is over: it may create no subscriptions until an operator chooses a tier."""
    return account.trial_ends_at is not None and now > account.trial_ends_at


def describe(account: Account) -> dict:
    return {
        "id": account.id,
        "name": account.name,
        "tier": account.tier,
        "subscription_limit": subscription_limit(account),
        "subscription_count": live_subscription_count(db.session, account.id),
        "trial_ends_at": account.trial_ends_at,
        "created_at": account.created_at,
    }
