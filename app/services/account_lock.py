"""The account row lock: the API's (and the command line's) writers of an account's subscriptions, keys or webhook
configuration take it first; a metadata change (one subscription row, locked, no counters) does without it.

On PostgreSQL it is FOR NO KEY UPDATE, held until commit: an account's writers queue, so what one of them read still
holds when it commits (the tier cap, the key limit, the last key, the one configuration, the secret a rotation keeps
as the previous one), and they never deadlock on the rows their triggers move; foreign-key checks of other writers
(events, keys) go on.
SQLite serialises writers already."""
from sqlalchemy import bindparam, select

from app.models import Account


def locking(*columns):
    """A statement reading `columns` of the account `:account_id` and locking its row."""
    return select(*columns).where(Account.id == bindparam("account_id")).with_for_update(key_share=True)


_ROW = locking(Account.id)


def lock_account(session, account_id: str) -> None:
    session.connection().execute(_ROW, {"account_id": account_id})
