"""Fetches snapshots from `PROVIDER_HTTP_URL` (contract §7): GET /contacts/<id> or /companies/<id>.

404 means not found, 403 and 451 private; 5xx, other statuses, timeouts and unreadable answers are
transient. One pooled session is reused for every fetch.
"""
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from app.common import USER_AGENT
from app.providers.base import EntityUnavailable, ProviderError

PATHS = {"contact": "contacts", "company": "companies"}
UNAVAILABLE = {404: "not_found", 403: "private", 451: "private"}


class HttpProvider:
    def __init__(self, base_url: str, token=None, timeout=10.0, concurrency=8):
        parts = urlsplit(base_url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"PROVIDER_HTTP_URL={base_url or ''!r} must be an http:// or https:// URL with a host "
                             "(PROVIDER=http needs it)")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.concurrency = concurrency
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=concurrency)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers["Accept"] = "application/json"
        self.session.headers["User-Agent"] = USER_AGENT
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def fetch(self, entity_type: str, network_id: str) -> dict:
        url = f"{self.base_url}/{PATHS[entity_type]}/{network_id}"
        try:
            response = self.session.get(url, timeout=self.timeout, allow_redirects=False)
        except requests.RequestException as error:
            raise ProviderError(f"{type(error).__name__}: {error}") from error
        if response.status_code in UNAVAILABLE:
            raise EntityUnavailable(UNAVAILABLE[response.status_code])
        if response.status_code != 200:
            raise ProviderError(f"provider answered HTTP {response.status_code}")
        try:
            snapshot = response.json()
        except ValueError as error:
            raise ProviderError("provider answer is not JSON") from error
        if not isinstance(snapshot, dict):
            raise ProviderError("provider answer is not a JSON object")
        return snapshot


def create(config) -> HttpProvider:
    return HttpProvider(config["PROVIDER_HTTP_URL"], config["PROVIDER_HTTP_TOKEN"],
                        config["PROVIDER_HTTP_TIMEOUT_SECONDS"])
