"""API keys: issuing, authenticating (hash lookup, constant-time compare) and revoking."""
import hashlib
import hmac
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from flask import current_app
from sqlalchemy import bindparam, func, select, update

from app.common import new_id, random_alphanumeric, utcnow
from app.database import PreparedSelect, write_transaction
from app.errors import InvalidState, KeyLimitExceeded, NotFound, Unauthorized
from app.extensions import db
from app.models import Account, ApiKey
from app.services.account_lock import lock_account

KEY_PATTERN = re.compile(r"^lwa\.sk_(live|test)_[A-Za-z0-9]{32}$")
MISSING_MESSAGE = "API key is missing. Send your key in the X-API-Key header."
INVALID_MESSAGE = "API key is invalid. Check that it is correct and active."
FORMAT_MESSAGE = ("API key format is invalid. Keys must start with the 'lwa.' prefix: lwa.sk_live_ (lwa.sk_test_ on "
                  "a test server) and 32 letters or digits.")


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def add_key(session, account_id: str, name: str):
    """Create a key inside the caller's transaction. Returns (ApiKey, plaintext)."""
    mode = current_app.config["API_KEY_MODE"]
    plaintext = f"lwa.sk_{mode}_{random_alphanumeric(32)}"
    key = ApiKey(id=new_id("key"), account_id=account_id, name=name, key_hash=hash_key(plaintext),
                 key_hint=plaintext[-4:], created_at=utcnow(), last_used_at=None)
    session.add(key)
    return key, plaintext


def create_key(account_id: str, name: str):
    limit = current_app.config["MAX_API_KEYS"]
    with write_transaction() as session:
        lock_account(session, account_id)
        count = _key_count(session, account_id)
        if count >= limit:
            raise KeyLimitExceeded(f"An account can hold at most {limit} API keys. Delete one first.",
                                   {"current_count": count, "limit": limit})
        return add_key(session, account_id, name)


def list_keys(account_id: str):
    return db.session.scalars(select(ApiKey).where(ApiKey.account_id == account_id)
                              .order_by(ApiKey.created_at, ApiKey.id)).all()


def _owned_key(session, account_id: str, key_id: str) -> ApiKey:
    """The account's key of that id; NotFound for an unknown id or another account's."""
    key = session.scalar(select(ApiKey).where(ApiKey.id == key_id, ApiKey.account_id == account_id))
    if key is None:
        raise NotFound("api_key", key_id)
    return key


def get_key(account_id: str, key_id: str) -> ApiKey:
    return _owned_key(db.session, account_id, key_id)


def delete_key(account_id: str, key_id: str) -> None:
    with write_transaction() as session:
        lock_account(session, account_id)
        key = _owned_key(session, account_id, key_id)
        if _key_count(session, account_id) <= 1:
            raise InvalidState("The last API key of an account cannot be deleted; create another first.")
        session.delete(key)


def revoke_key(key_id: str) -> ApiKey:
    """The operator's delete: any account's key by its id, under the same rules as `delete_key`."""
    key = db.session.get(ApiKey, key_id)
    if key is None:
        raise NotFound("api_key", key_id)
    delete_key(key.account_id, key_id)
    return key


def _key_count(session, account_id):
    return session.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.account_id == account_id))


# Prepared once: every request runs it (one lookup in the unique index of key hashes).
_BY_HASH = PreparedSelect(select(ApiKey.id, ApiKey.account_id, ApiKey.last_used_at, ApiKey.key_hash, Account.tier)
                          .join(Account, Account.id == ApiKey.account_id).where(ApiKey.key_hash == bindparam("digest")))


@dataclass
class AuthenticatedKey:
    """What a request needs of its key: plain values read in one query, nothing lazy-loaded later."""
    id: str
    account_id: str
    last_used_at: Optional[datetime]


def authenticate(header_value):
    """(AuthenticatedKey, account tier) for a header value, or Unauthorized with one of the spec's three
    messages."""
    if not header_value:
        raise Unauthorized(MISSING_MESSAGE)
    match = KEY_PATTERN.match(header_value)
    if not match:
        raise Unauthorized(FORMAT_MESSAGE)
    if match.group(1) != current_app.config["API_KEY_MODE"]:
        raise Unauthorized(INVALID_MESSAGE)
    digest = hash_key(header_value)
    row = _BY_HASH.first({"digest": digest})
    # The lookup is by hash, so timing reveals nothing of the key; compare anyway, in constant time.
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        raise Unauthorized(INVALID_MESSAGE)
    return AuthenticatedKey(row.id, row.account_id, row.last_used_at), row.tier


class LastUsedRecorder:
    """Writes `last_used_at` on a key's first use, then at most once per resolution window per process."""

    def __init__(self):
        self._written = {}
        self._lock = threading.Lock()

    def due(self, key: AuthenticatedKey, resolution: float) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._written.get(key.id)
            if key.last_used_at is not None and last is not None and now - last < resolution:
                return False
            if key.last_used_at is not None and last is None:
                age = (utcnow() - key.last_used_at).total_seconds()
                if age < resolution:
                    self._written[key.id] = now - age
                    return False
            self._written[key.id] = now
            return True

    def record(self, key: AuthenticatedKey) -> None:
        if not self.due(key, current_app.config["KEY_LAST_USED_RESOLUTION_SECONDS"]):
            return
        moment = utcnow()
        with write_transaction() as session:
            session.execute(update(ApiKey).where(ApiKey.id == key.id).values(last_used_at=moment))
        key.last_used_at = moment


last_used = LastUsedRecorder()
