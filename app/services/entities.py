"""Entity identity: network ids, network URLs and their canonical forms (contract §3)."""
import re
import string
from urllib.parse import quote, unquote, urlsplit

from app.common import composed
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
    entity) in Unicode's composed form (NFC: `josé` written with a combining accent is the same entity, not a
    second subscription), then every non-ASCII character percent-encoded again as UTF-8 with lower-case hex.
    Anything that is not letters, digits, '-', '_' or (percent-encoded) UTF-8 is refused."""
    encoded = _percent_encode(raw)
    if not _ID_PATTERN.match(encoded):
        raise ValidationFailed(field, ALLOWED_CHARACTERS, raw)
    try:
        decoded = composed(unquote(encoded, errors="strict").lower())  # checked composed: U+037E is a ';'
    except UnicodeDecodeError:
        raise ValidationFailed(field, "network_id holds a percent-escape that is not UTF-8.", raw)
    if not all(ch in _PLAIN or (not ch.isascii() and ch.isprintable() and not ch.isspace()) for ch in decoded):
        # a percent-escape may stand for a non-ASCII character only: `%2e` is a '.', refused like a raw one
        raise ValidationFailed(field, ALLOWED_CHARACTERS, raw)
    canonical = "".join(ch if ch in _PLAIN else quote(ch, safe="") for ch in decoded).lower()
    if not MIN_ID <= len(canonical) <= MAX_ID:
        raise ValidationFailed(field, f"network_id must be {MIN_ID}-{MAX_ID} characters long, each character beyond "
                                      "ASCII counted as its percent-encoded UTF-8 (é as %c3%a9: 6).", raw)
    return canonical


def search_form(text: str) -> str:
    """A search needle in the stored form: lower-case, composed, non-ASCII percent-encoded (lower-case hex)."""
    return _percent_encode(composed(text.lower())).lower()


def search_needle(text: str, domain: str) -> str:
    """What a search looks for: a pasted profile URL (with or without its scheme, on a country or mobile subdomain,
    with a trailing slash, a section or a query) as that profile's URL is stored, so that it finds what its id finds
    (it found nothing: the stored URL is `https://www.<domain>/in/<id>` and nothing else); any other text in the
    stored form (search_form), matched as written."""
    candidate = text.strip()
    if "/" in candidate and not candidate.startswith("/"):
        try:
            entity_type, network_id = read_network_url(
                candidate if "://" in candidate else "https://" + candidate, domain)
        except ValidationFailed:
            pass
        else:
            return canonical_url(domain, entity_type, network_id).lower()
    return search_form(text)


def canonical_url(domain: str, entity_type: str, network_id: str) -> str:
    return f"https://www.{domain}/{PATH_KIND[entity_type]}/{network_id}"


# Country and mobile subdomains (`uk.`, `de.`, `m.`) besides the bare and `www.` hosts.
_SUBDOMAIN = re.compile(r"^(?:www|m|[a-z]{2})$")
# Sections a profile page adds after the id or slug (`/in/jane/details/experience/`, `/company/acme/about/`).
PROFILE_SECTIONS = frozenset(("details", "about", "posts", "recent-activity", "overlay", "people", "jobs",
                              "life", "insights", "videos", "events"))
MOBILE_PREFIX = "mwlite"
# A profile shown in one of its languages (`/in/jane/en`, `/in/jane/pt-br`)
_PROFILE_LANGUAGE = re.compile(r"^[a-z]{2}(?:[-_][a-z]{2})?$")
_DEFAULT_PORTS = {"https": 443, "http": 80}


def _network_host(host: str, domain: str) -> bool:
    if host == domain:
        return True
    label, dot, rest = host.partition(".")
    return bool(dot) and rest == domain and bool(_SUBDOMAIN.match(label))


def _invalid_url(url, field, expected, reason):
    return ValidationFailed(field, f"Invalid network_url: {reason} Expected {expected}.", url)


def parse_network_url(url: str, domain: str, field="network_url"):
    """(entity_type, id segment as written) of a profile URL: a scheme, the network's host (or a country or
    mobile subdomain of it; the scheme's own port may be written), an optional /mwlite prefix, /in/<id> or
    /company/<id>, then optionally a language (`/en`) or one of PROFILE_SECTIONS and anything below it."""
    def invalid(reason):
        return _invalid_url(url, field, f"https://www.{domain}/in/<id> or /company/<id>", reason)

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # an unclosed IPv6 bracket, a port that is no number
        raise invalid("it is not a valid URL.") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise invalid("it must start with https://.")
    host = (parts.hostname or "").lower()
    if not _network_host(host, domain):
        raise invalid(f"the host must be {domain}, www.{domain} or a country or mobile subdomain "
                      f"such as uk.{domain} or m.{domain}.")
    if port not in (None, _DEFAULT_PORTS[parts.scheme.lower()]) or parts.username is not None:
        raise invalid(f"it must name no user and no port but the scheme's (https://www.{domain}/in/<id>).")
    # read as a browser reads an http(s) path: a backslash is a slash, `%2e` a dot
    segments = [segment for segment in parts.path.replace("\\", "/").split("/") if segment]
    if any(segment.lower().replace("%2e", ".") in (".", "..") for segment in segments):
        raise invalid("its path must not contain . or .. segments (a browser would open another page).")
    if segments and segments[0].lower() == MOBILE_PREFIX:
        segments = segments[1:]
    if (len(segments) < 2 or segments[0].lower() not in ENTITY_FOR_KIND
            or (len(segments) > 2 and not _profile_section(segments[2].lower()))):
        raise invalid("the path must be /in/<id> for a contact or /company/<id> for a company, optionally "
                      f"followed by a language (/en) or a profile section ({', '.join(sorted(PROFILE_SECTIONS))}).")
    return ENTITY_FOR_KIND[segments[0].lower()], segments[1]


def _profile_section(segment: str) -> bool:
    return segment in PROFILE_SECTIONS or bool(_PROFILE_LANGUAGE.match(segment))


def network_id_from_url(url: str, entity_type: str, domain: str, field="network_url") -> str:
    """The id a profile URL names; its path kind must match `entity_type`."""
    return read_network_url(url, domain, field, entity_type)[1]


def read_network_url(url: str, domain: str, field="network_url", entity_type=None):
    """(entity_type, canonical id) a profile URL names: the API's reading (`network_id_from_url`) and the importer's
    (is a first line a URL?) are this one. With `entity_type`, the path kind must be that type's, checked before
    the id is read."""
    found_type, segment = parse_network_url(url, domain, field)
    if entity_type is not None and found_type != entity_type:
        raise _invalid_url(url, field, canonical_url(domain, entity_type, "<id>"),
                           f"a {entity_type} URL must use the /{PATH_KIND[entity_type]}/ path.")
    try:
        return found_type, normalize_network_id(segment, field)
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
