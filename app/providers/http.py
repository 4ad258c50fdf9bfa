"""Fetches snapshots from `PROVIDER_HTTP_URL` (contract §7): GET /contacts/<id> or /companies/<id>.

404 means not found (an HTML page too, with a warning: it may be a web server's at a wrong PROVIDER_HTTP_URL), 403
and 451 private; 401 a refused token and 402 spent credits (both pause
checking until an operator resumes it); 429 (or a 5xx with `Retry-After`) pauses the provider for the
time asked; other statuses, timeouts and unreadable answers are transient. One pooled session is reused
for every fetch.
"""
from urllib.parse import urlsplit

from app.providers.base import BaseProvider, EntityUnavailable, ProviderError, clean_secret
from app.providers.vendor_http import (OccasionalLog, json_body, pooled_session, raise_for_limits, send,
                                       warn_of_a_page_read_as_not_found)

PATHS = {"contact": "contacts", "company": "companies"}
UNAVAILABLE = {404: "not_found", 403: "private", 451: "private"}


class HttpProvider(BaseProvider):
    name = "http"

    def __init__(self, base_url: str, token=None, timeout=10.0, concurrency=8):
        parts = urlsplit(base_url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"PROVIDER_HTTP_URL={base_url or ''!r} must be an http:// or https:// URL with a host "
                             "(PROVIDER=http needs it)")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.concurrency = concurrency
        headers = {"Accept": "application/json"}
        token = clean_secret("PROVIDER_HTTP_TOKEN", token)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.session = pooled_session(concurrency, headers)
        self.page_404_log = OccasionalLog()

    def fetch(self, entity_type: str, network_id: str) -> dict:
        response = send(self.session, "GET", f"{self.base_url}/{PATHS[entity_type]}/{network_id}", self.timeout)
        if response.status_code == 404:
            warn_of_a_page_read_as_not_found(response, "PROVIDER_HTTP_URL", self.page_404_log)
        if response.status_code in UNAVAILABLE:
            raise EntityUnavailable(UNAVAILABLE[response.status_code])
        raise_for_limits(response)
        if response.status_code != 200:
            raise ProviderError(f"provider answered HTTP {response.status_code}")
        return json_body(response, dict)


def create(config) -> HttpProvider:
    return HttpProvider(config["PROVIDER_HTTP_URL"], config["PROVIDER_HTTP_TOKEN"],
                        config["PROVIDER_HTTP_TIMEOUT_SECONDS"])
