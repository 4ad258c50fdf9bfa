"""Webhook configuration (contract §5): one per account, its URL guard and its secrets."""
import ipaddress
import re
import socket
from datetime import timedelta
from typing import Optional

from flask import current_app
from sqlalchemy import bindparam, case, delete, func, select, update

from app.admission import stepped_out
from app.common import HOST_NAME, new_id, random_alphanumeric, utcnow
from app.database import end_read_transaction, in_lock_order, write_transaction
from app.errors import InvalidState, NotFound, ServiceError, ValidationFailed
from app.extensions import db
from app.models import DeliveryAttempt, Event, OutboxDelivery, WebhookConfig
from app.services import events
from app.services.account_lock import lock_account
from app.services.transport import allowed_schemes, is_forbidden_address, parse_endpoint

SECRET_PREFIX = "whsec_"
SECRET_LENGTH = 32
INITIAL_WEBHOOK_CHOICES = ("latest", "all", "none")
EVENT_FAMILIES = sorted({event_type.split(".")[0] for event_type in events.EVENT_TYPES if "." in event_type})
EVENT_PATTERNS = ("*", *events.EVENT_TYPES, *(f"{family}.*" for family in EVENT_FAMILIES))


# The characters a URL may hold (RFC 3986: unreserved, reserved, percent-escapes) beside HOST_NAME; the OpenAPI
# pattern is built from these
PORT = r"(:0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"  # not 0
URL_PATH = r"(/([-A-Za-z0-9._~!$&'()*+,;=:@/?#]|%[0-9A-Fa-f]{2})*)?"
_URL_CHARACTERS = re.compile(r"([-A-Za-z0-9._~!$&'()*+,;=:@/?#\[\]]|%[0-9A-Fa-f]{2})+")


class ConfigurationMissing(NotFound):
    def __init__(self):
        ServiceError.__init__(self, "This account has no webhook configuration; POST /webhooks/configure first.",
                              {"resource": "webhook_configuration", "id": None})


# --- validation -------------------------------------------------------------------------------

NOT_PUBLIC = ("endpoint_url must resolve to a public internet address (loopback, private, link-local and similar "
              "ranges are refused).")


def validate_events(patterns: list) -> list:
    """`*`, a known type, or a family prefix such as `contact.*`; duplicates dropped, order kept."""
    if not patterns:
        raise ValidationFailed("events", "events must list at least one event type, or `*`.", patterns)
    for pattern in patterns:
        if pattern not in EVENT_PATTERNS:
            raise ValidationFailed("events", unknown_event_pattern(pattern), pattern)
    return list(dict.fromkeys(patterns))


def unknown_event_pattern(pattern: str) -> str:
    return (f"Unknown event type '{pattern}'. Use `*`, a family such as `contact.*`, or one of: "
            f"{', '.join(events.EVENT_TYPES)}.")


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolved_addresses(host: str, port: int) -> list:
    """The addresses a host name or IP literal stands for; empty when it does not resolve (yet)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        with stepped_out():  # of the request's turn (app/admission.py): a lookup may wait on a slow resolver
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    return [ipaddress.ip_address(item[4][0].split("%")[0]) for item in found]


def check_endpoint_url(url: str) -> str:
    """The configure-time guard: the URL's form (`endpoint_url_problem`), then the addresses its name stands for
    now. A name that does not resolve now is accepted: the send-time guard, which checks the address actually
    connected to, still refuses it if it later points inward. Call it outside any transaction (a name lookup)."""
    problem = endpoint_url_problem(url)
    if problem:
        raise ValidationFailed("endpoint_url", problem, url)
    config = current_app.config
    if config["WEBHOOK_ALLOW_PRIVATE_ADDRESSES"]:
        return url
    endpoint = parse_endpoint(url)
    allow_loopback = config["WEBHOOK_TEST_ALLOW_LOOPBACK"]
    if any(is_forbidden_address(address, allow_loopback) for address in _resolved_addresses(endpoint.host,
                                                                                            endpoint.port)):
        raise ValidationFailed("endpoint_url", NOT_PUBLIC, url)
    return url


def endpoint_url_problem(url: str):
    """What is wrong with the URL's form, without looking its name up (None: nothing)."""
    config = current_app.config
    try:
        endpoint = parse_endpoint(url)
    except ValueError:
        return "endpoint_url is not a valid URL (host or port)."
    if endpoint.scheme not in allowed_schemes(config["WEBHOOK_ALLOW_HTTP"]):
        return "endpoint_url must be an https:// URL."
    host = endpoint.host
    if not _URL_CHARACTERS.fullmatch(url):
        return "endpoint_url holds characters a URL cannot; percent-encode them."
    if not host:
        return "endpoint_url must name a host."
    if endpoint.has_credentials:  # they would be shown and logged with the URL; deliveries are signed instead
        return "endpoint_url must not hold credentials (user:password@); verify the webhook signature instead."
    if config["WEBHOOK_ALLOW_PRIVATE_ADDRESSES"]:
        return None
    if not (_is_ip_literal(host) or re.fullmatch(HOST_NAME, host)):
        return "endpoint_url must name a public host: a fully qualified name (no trailing dot) or an IP address."
    if host == "localhost" or host.endswith(".localhost"):
        return NOT_PUBLIC
    return None


# --- configuration ------------------------------------------------------------------------------

def new_secret() -> str:
    return SECRET_PREFIX + random_alphanumeric(SECRET_LENGTH)


def get(account_id: str, session=None, keep=False) -> WebhookConfig:
    config = events.webhook_config_for(session or db.session, account_id, keep)
    if config is None:
        raise ConfigurationMissing()
    return config


def _locked_config(session, account_id: str) -> WebhookConfig:
    """The configuration to change, the account's row locked first: its writers (a rotation read the secret it
    keeps as the previous one) go one at a time."""
    lock_account(session, account_id)
    return get(account_id, session)


def get_or_none(account_id: str):
    return events.webhook_config_for(db.session, account_id)


def configure(account_id: str, body: dict):
    """Create the configuration or replace it (new secret, active, healthy). Returns (config, created)."""
    end_read_transaction()  # the URL's name is looked up next: no transaction stays open across it
    url = check_endpoint_url(body["endpoint_url"])
    patterns = validate_events(body["events"])
    with write_transaction() as session:
        lock_account(session, account_id)  # two first configures: one creates, the other replaces
        now = utcnow()
        config = events.webhook_config_for(session, account_id)
        created = config is None
        if created:
            config = WebhookConfig(id=new_id("whc"), account_id=account_id, created_at=now)
            session.add(config)
        config.endpoint_url, config.events = url, patterns
        config.initial_webhook = body["initial_webhook"]
        config.secret, config.previous_secret, config.rotated_at = new_secret(), None, None
        config.is_active, config.failing_since, config.updated_at = True, None, now
    return config, created


def update_config(account_id: str, changes: dict) -> WebhookConfig:
    """Change any of endpoint_url, events, is_active, initial_webhook; the secret stays."""
    if "endpoint_url" in changes:
        end_read_transaction()  # as in `configure`
        check_endpoint_url(changes["endpoint_url"])
    if "events" in changes:
        changes["events"] = validate_events(changes["events"])
    with write_transaction() as session:
        config = _locked_config(session, account_id)
        reactivated = changes.get("is_active") and not config.is_active
        moved = changes.get("endpoint_url", config.endpoint_url) != config.endpoint_url
        if reactivated or moved:
            config.failing_since = None  # a reactivated or new endpoint starts with a clean record
        for name, value in changes.items():
            setattr(config, name, value)
        config.updated_at = utcnow()
    return config


def remove(account_id: str) -> dict:
    """Delete the configuration; its queued deliveries are dropped (their events become skipped or failed)."""
    with write_transaction() as session:
        config = _locked_config(session, account_id)
        # Deleted first (the lock order: `write_transaction`): the delete waits for the writers that queue deliveries
        # by it (they keep it locked: `events.webhook_configs_for`), and those that come after find none, so the
        # outbox rows read next are all it will ever have.
        session.delete(config)
        session.flush()
        # Then the outbox rows, then the events of those rows.
        owed = in_lock_order(OutboxDelivery.event_id, OutboxDelivery.account_id == account_id)
        dropped = sorted(session.execute(delete(OutboxDelivery).where(owed).returning(
            OutboxDelivery.event_id, OutboxDelivery.claim_token, OutboxDelivery.next_attempt_at)).all())
        if dropped:
            table = Event.__table__
            session.execute(update(table).where(table.c.id == bindparam("dropped"))
                            .values(delivery_status=case((table.c.attempt_count > 0, "failed"), else_="skipped")),
                            [{"dropped": row.event_id} for row in dropped])
            now = utcnow()
            unannounce_next_tries(session, [row.event_id for row in dropped if not _on_the_wire(row, now)])
        return {"id": config.id, "deleted": True}


def _on_the_wire(outbox_row, now) -> bool:
    """Whether a sender holds the outbox row and will record its try: claimed, its lease not over (a sender starts
    its tries within half the lease; one it gives back unsent, `outbox.release` unannounces). The claim moved
    `next_attempt_at` to the lease's end, and a redelivery meanwhile leaves it there (`outbox._restarted`). Read in
    Python: SQLite 3.40 answers `claim_token IS NOT NULL` true for a null in a DELETE's RETURNING."""
    return outbox_row.claim_token is not None and outbox_row.next_attempt_at > now


def unannounce_next_tries(session, event_ids):
    """The next try the last recorded try of each event announced will not be made (contract §5: null when no other
    try is scheduled). An earlier try's was made and keeps saying when, and so does the last one's while its next try
    is on the wire: that try is recorded after it, with none announced."""
    if not event_ids:
        return
    attempts = DeliveryAttempt.__table__
    session.execute(update(attempts).where(attempts.c.event_id == bindparam("dropped"),
                                           attempts.c.attempt == _last_attempt_of_the_dropped(),
                                           attempts.c.next_attempt_at.is_not(None))
                    .values(next_attempt_at=None), [{"dropped": event_id} for event_id in event_ids])


def _last_attempt_of_the_dropped():
    """The number of the last recorded try of the event bound as `dropped`."""
    attempts = DeliveryAttempt.__table__.alias("recorded")
    return (select(func.max(attempts.c.attempt)).where(attempts.c.event_id == bindparam("dropped"))
            .scalar_subquery())


def rotation_mark(config: WebhookConfig) -> str:
    """The last rotation's moment as a rotate form shows it ('' for never): the form sends it back, so the same form
    sent again (a refresh of its result, a double click) is told from a request for another secret."""
    return config.rotated_at.isoformat() if config.rotated_at else ""


def rotate_secret(account_id: str, shown_mark: Optional[str] = None) -> Optional[dict]:
    """A new secret; the old one keeps signing `X-Webhook-Signature-Previous` during the overlap. With the
    `rotation_mark` a form showed, None and nothing changed when a rotation happened since: a second one would end
    that overlap for the secret receivers still hold."""
    with write_transaction() as session:
        config = _locked_config(session, account_id)
        if shown_mark is not None and shown_mark != rotation_mark(config):
            return None
        now = utcnow()
        config.previous_secret, config.secret, config.rotated_at = config.secret, new_secret(), now
        config.updated_at = now
    return {"id": config.id, "secret": config.secret, "rotated_at": config.rotated_at}


def previous_secret_in_overlap(config: WebhookConfig, now):
    """The replaced secret while the rotation overlap lasts, else None."""
    overlap = timedelta(seconds=current_app.config["WEBHOOK_SECRET_OVERLAP_SECONDS"])
    if config.previous_secret and config.rotated_at and now - config.rotated_at < overlap:
        return config.previous_secret
    return None


def active_config(session, account_id) -> WebhookConfig:
    """The configuration that explicit (re)deliveries go to: 404 when none, 409 while inactive. Kept locked until
    the caller commits the deliveries it queues (`events.webhook_configs_for`)."""
    config = get(account_id, session, keep=True)
    if not config.is_active:
        raise InvalidState("The webhook configuration is inactive; PUT /webhooks/configure with "
                           "is_active true first.", {"is_active": False})
    return config
