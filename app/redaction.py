"""Secrets out of the request line before anything logs it.

A client may put an API key where it does not belong (`?api_key=lwa.sk_…`, a secret pasted into a
path). The access log of gunicorn (and of most servers) writes the request line as the WSGI environ
holds it once the app has answered, so the app rewrites those environ entries on the way in."""
import re
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
# Our own secret formats, wherever they appear (API keys, webhook secrets), in any case; an API key without its
# `lwa.` (the rest is the secret) only whole, with its 32 characters, so that words such as "Risk_Test_Co" in a
# search are left alone (this also rewrites the query string the app reads)
SECRET_VALUE = re.compile(r"lwa\.sk_[A-Za-z0-9_]+|(?<![A-Za-z0-9])sk_(?:live|test)_[A-Za-z0-9]{32}(?![A-Za-z0-9])"
                          r"|whsec_[A-Za-z0-9]+", re.IGNORECASE)
# Query parameters that carry credentials by name, whatever their value looks like
SECRET_NAME = re.compile(r"key|secret|token|passw|signature|auth", re.IGNORECASE)
_LOGGED_URI_KEYS = ("RAW_URI", "REQUEST_URI")
# A key encoded twice (`%252E` for its dot) is one decoding from a server's or a proxy's reading of it; the bound
# keeps a request line of nested escapes from costing a decoding per escape
_MOST_DECODINGS = 4
# Written decoded, a `%0A` (or `%250A`) became a line break, and the rest of the client's line a log line of its own
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def redact_query(query: str, every_value: bool = False) -> str:
    """The query string with every credential-like value (or every value) replaced; the rest kept byte for byte."""
    pairs = []
    for pair in query.split("&"):
        name, separator, value = pair.partition("=")
        if value and (every_value or SECRET_NAME.search(_decoded(name))):
            value = REDACTED
        pairs.append(name + separator + value)
    return redact_text("&".join(pairs))


def redact_text(text: str) -> str:
    """Any of our secret formats in free text (a path, a log message), percent-encoded or not, once or more: the
    text is then written decoded."""
    if "%" in text:
        decoded = _decoded(text)
        if SECRET_VALUE.search(decoded):  # its control characters encoded again once the keys are found
            return _CONTROL.sub(lambda control: f"%{ord(control.group()):02X}", SECRET_VALUE.sub(REDACTED, decoded))
    return SECRET_VALUE.sub(REDACTED, text)


def _decoded(text: str) -> str:
    """`text` percent-decoded until that changes nothing (at most _MOST_DECODINGS times)."""
    for _ in range(_MOST_DECODINGS):
        decoded = unquote_plus(text)
        if decoded == text:
            break
        text = decoded
    return text


def redact_uri(uri: str, every_value: bool = False) -> str:
    path, separator, query = uri.partition("?")
    return redact_text(path) + separator + (redact_query(query, every_value) if separator else "")


def redact_environ(environ) -> None:
    """The environ entries a server logs (not PATH_INFO, which routes: a path holding a key matches no
    route anyway), rewritten in place."""
    for key in _LOGGED_URI_KEYS:
        if key in environ:
            environ[key] = redact_uri(environ[key])
    if environ.get("QUERY_STRING"):
        environ["QUERY_STRING"] = redact_query(environ["QUERY_STRING"])


class RedactSecretsFromRequestLine:
    """WSGI middleware: what the server logs once the app has answered holds no secret."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        redact_environ(environ)
        return self.wsgi_app(environ, start_response)
