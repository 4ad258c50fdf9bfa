"""Fetches snapshots from `PROVIDER_HTTP_URL` (contract §7): GET /contacts/<id> or /companies/<id>.

404 means not found, 403 and 451 private; 402 quota exhausted; 429 (or any answer with `Retry-After`)
pauses the provider; 5xx, other statuses, timeouts and unreadable answers are transient. One pooled
session is reused for every fetch.
"""
import requests
from requests.adapters import HTTPAdapter

from app.providers.base import EntityUnavailable, ProviderError
from app.providers.vendor_http import raise_for_limits

PATHS = {"contact": "contacts", "company": "companies"}
UNAVAILABLE = {404: "not_found", 403: "private", 451: "private"}


class HttpProvider:
    name = "http"

    def __init__(self, base_url: str, token=None, timeout=10.0, concurrency=8):
        if not base_url:
            raise ValueError("PROVIDER=http needs PROVIDER_HTTP_URL")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.concurrency = concurrency
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=concurrency)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers["Accept"] = "application/json"
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
        raise_for_limits(response)
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
