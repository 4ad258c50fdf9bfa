"""Entity identity: network ids, network URLs and their canonical forms (contract §3)."""
import re
import string
from urllib.parse import quote, unquote, urlsplit

from app.errors import ValidationFailed

ENTITY_TYPES = ("contact", "company")
PATH_KIND = {"contact": "in", "company": "company"}
ENTITY_FOR_KIND = {kind: entity for entity, kind in PATH_KIND.items()}
_ID_PATTERN = re.compile(r"^(?:[A-Za-z0-9_-]|%[0-9A-Fa-f]{2})+$")
_PLAIN = frozenset(string.ascii_letters + string.digits + "-_")
MIN_ID, MAX_ID = 2, 100
ALLOWED_CHARACTERS = "network_id may hold only letters, digits, '-', '_' and percent-encoded UTF-8."


def _percent_encode(text: str) -> str:
    """Non-ASCII characters percent-encoded as UTF-8 (ASCII left as it is)."""
    return "".join(ch if ch.isascii() else quote(ch, safe="") for ch in text)


def normalize_network_id(raw: str, field="network_id") -> str:
    """The canonical id: percent-escapes decoded, lower-cased (Unicode-aware, so `JOSÉ` and `josé` are one
    entity), then every non-ASCII character percent-encoded again as UTF-8 with lower-case hex.
    Anything that is not letters, digits, '-', '_' or (percent-encoded) UTF-8 is refused."""
    encoded = _percent_encode(raw)
    if not _ID_PATTERN.match(encoded):
        raise ValidationFailed(field, ALLOWED_CHARACTERS, raw)
    try:
        decoded = unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise ValidationFailed(field, "network_id holds a percent-escape that is not UTF-8.", raw)
    if not all(ch in _PLAIN or (not ch.isascii() and ch.isprintable() and not ch.isspace()) for ch in decoded):
        # a percent-escape may stand for a non-ASCII character only: `%2e` is a '.', refused like a raw one
        raise ValidationFailed(field, ALLOWED_CHARACTERS, raw)
    canonical = "".join(ch if ch in _PLAIN else quote(ch, safe="") for ch in decoded.lower()).lower()
    if not MIN_ID <= len(canonical) <= MAX_ID:
        raise ValidationFailed(field, f"network_id must be {MIN_ID}-{MAX_ID} characters long.", raw)
    return canonical


def search_form(text: str) -> str:
    """A search needle in the stored form: lower-case, non-ASCII percent-encoded (lower-case hex)."""
    return _percent_encode(text.lower()).lower()


def canonical_url(domain: str, entity_type: str, network_id: str) -> str:
    return f"https://www.{domain}/{PATH_KIND[entity_type]}/{network_id}"


def network_id_from_url(url: str, entity_type: str, domain: str, field="network_url") -> str:
    """The id a profile URL names. The URL needs a scheme, the network's host and /in/<id> or /company/<id>."""
    def invalid(reason):
        return ValidationFailed(field, f"Invalid network_url: {reason} Expected "
                                       f"https://www.{domain}/{PATH_KIND[entity_type]}/<id>.", url)

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # an unclosed IPv6 bracket, a port that is no number
        raise invalid("it is not a valid URL.") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise invalid("it must start with https://.")
    host = (parts.hostname or "").lower()
    if host not in (domain, f"www.{domain}") or port is not None or parts.username:
        raise invalid(f"the host must be {domain} or www.{domain}.")
    segments = [segment for segment in parts.path.split("/") if segment]
    if len(segments) != 2 or segments[0].lower() not in ENTITY_FOR_KIND:
        raise invalid("the path must be /in/<id> for a contact or /company/<id> for a company.")
    if ENTITY_FOR_KIND[segments[0].lower()] != entity_type:
        raise invalid(f"a {entity_type} URL must use the /{PATH_KIND[entity_type]}/ path.")
    try:
        return normalize_network_id(segments[1], field)
    except ValidationFailed as error:  # report the URL the client sent, not the segment
        raise ValidationFailed(field, f"Invalid network_url: {error.message}", url) from None


def resolve_entity(entity_type: str, network_id, network_url, domain: str):
    """(network_id, canonical network_url) from an id, a URL, or both naming the same entity."""
    if network_id is None and network_url is None:
        raise ValidationFailed("network_id", "Give network_id or network_url (or both).")
    from_id = normalize_network_id(network_id) if network_id is not None else None
    from_url = network_id_from_url(network_url, entity_type, domain) if network_url is not None else None
    if from_id and from_url and from_id != from_url:
        raise ValidationFailed("network_url", "network_id and network_url name different entities.", network_url)
    resolved = from_id or from_url
    return resolved, canonical_url(domain, entity_type, resolved)
