"""The dashboard's server-side sessions: an API key is exchanged once for a random session token; the browser
keeps only that token (in an HttpOnly cookie), the database only its SHA-256."""
import secrets
import time
from datetime import timedelta
from typing import Optional

from sqlalchemy import delete, select, update

from app.common import utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import DashboardSession
from app.services import keys

LIFETIME = timedelta(hours=12)


def open_session(key: keys.AuthenticatedKey):
    """(token, DashboardSession) for a key `keys.authenticate` found valid."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    with write_transaction() as session:
        session.execute(delete(DashboardSession).where(DashboardSession.expires_at <= now))
        row = DashboardSession(token_hash=keys.hash_key(token), account_id=key.account_id, api_key_id=key.id,
                               csrf_token=secrets.token_urlsafe(32), created_at=now, expires_at=now + LIFETIME)
        session.add(row)
    keys.last_used.record(key)
    return token, row


def find(token):
    """The live session a cookie's token stands for, or None (unknown, expired, or its key revoked)."""
    if not token:
        return None
    row = db.session.scalar(select(DashboardSession).where(DashboardSession.token_hash == keys.hash_key(token),
                                                           DashboardSession.expires_at > utcnow()))
    if row is not None:
        db.session.expunge(row)  # a plain record for the request: later transactions never reload (or lose) it
    return row


def close(token) -> None:
    with write_transaction() as session:
        session.execute(delete(DashboardSession).where(DashboardSession.token_hash == keys.hash_key(token)))


TYPED_KEPT_CHARACTERS = 20_000  # what a refused form had typed is shown again up to this size (a metadata object)


def set_notice(row: DashboardSession, kind: str, message: str, typed: Optional[dict] = None,
               form: Optional[str] = None, path: Optional[str] = None) -> None:
    """A message for the page at `path` (the redirect's), shown there alone (`notice_is_for`), and what a refused form
    had typed, so that page's form shows it again to be corrected rather than retyped; `form`: the form it is shown
    beside (else on top of the page)."""
    notice = {"kind": kind, "message": message, **({"form": form} if form else {}),
              **({"path": path} if path else {}), "at": time.time()}
    if typed and sum(len(value) for value in typed.values()) <= TYPED_KEPT_CHARACTERS:
        notice["typed"] = typed
    _write_notice(row, notice)


NOTICE_KEPT_SECONDS = 600  # a notice whose page was never shown is not shown on a visit much later


def notice_is_for(notice: Optional[dict], path: str) -> bool:
    """Whether the page at `path` shows `notice`: the page it was made for, not long ago."""
    now = time.time()
    return (notice is not None and notice.get("path", path) == path  # (one made before paths were kept: any page)
            and now - notice.get("at", now) <= NOTICE_KEPT_SECONDS)


def pop_notice(row: DashboardSession):
    notice = row.notice
    if notice is not None:
        _write_notice(row, None)
    return notice


def _write_notice(row, notice):
    with write_transaction() as session:
        session.execute(update(DashboardSession).where(DashboardSession.token_hash == row.token_hash)
                        .values(notice=notice))
    row.notice = notice
