"""What HTTP vendors share: a pooled session, and their throttling, quota and key answers read from
status and headers."""
from datetime import datetime
from typing import Optional

import requests
from requests.adapters import HTTPAdapter

from app.common import USER_AGENT, utcnow
from app.providers.base import AccessRefused, ProviderError, QuotaExhausted
from app.retry_after import parse_retry_after

DEFAULT_THROTTLE_SECONDS = 60.0  # a 429 that does not say how long to wait


def pooled_session(pool_size: int, headers: dict) -> requests.Session:
    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=1, pool_maxsize=max(1, pool_size))
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = USER_AGENT
    session.headers.update(headers)
    return session


def send(session, method: str, url: str, timeout: float, **kwargs) -> requests.Response:
    """One request; a network failure is transient. Redirects are not followed (an API never needs one)."""
    try:
        return session.request(method, url, timeout=timeout, allow_redirects=False, **kwargs)
    except requests.RequestException as error:
        raise ProviderError(f"{type(error).__name__}: {error}") from error


def json_body(response, expected_type):
    """The answer's JSON, which must be of `expected_type`; anything else is transient."""
    try:
        body = response.json()
    except ValueError as error:
        raise ProviderError("provider answer is not JSON") from error
    if not isinstance(body, expected_type):
        raise ProviderError(f"provider answer is not a JSON {expected_type.__name__}")
    return body


def raise_for_limits(response, wait_header: str = "Retry-After", resets_at: Optional[datetime] = None) -> None:
    """401 raises AccessRefused, 402 QuotaExhausted; 429, or a 5xx carrying the wait header, raises a
    ProviderError that pauses the provider for the time the vendor asked (a minute when it did not say)."""
    status = response.status_code
    if status == 401:
        raise AccessRefused("provider refused the API key (HTTP 401)")
    if status == 402:
        raise QuotaExhausted(f"provider answered HTTP 402 at {utcnow().isoformat(timespec='seconds')}Z",
                             resets_at=resets_at)
    wait = parse_retry_after(response.headers.get(wait_header) or response.headers.get("Retry-After"))
    if status == 429:
        raise ProviderError("provider answered HTTP 429",
                            retry_after=DEFAULT_THROTTLE_SECONDS if wait is None else wait)
    if status >= 500 and wait is not None:
        raise ProviderError(f"provider answered HTTP {status}", retry_after=wait)
