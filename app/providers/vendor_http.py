"""What HTTP vendors share: their throttling and quota answers, read from status and headers."""
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Optional

from app.common import utcnow
from app.providers.base import ProviderError, QuotaExhausted

DEFAULT_THROTTLE_SECONDS = 60.0  # a 429 that does not say how long to wait


def retry_after_seconds(value) -> Optional[float]:
    """`Retry-After` as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return max(0.0, (moment - datetime.now(timezone.utc)).total_seconds())


def raise_for_limits(response, resets_at: Optional[datetime] = None) -> None:
    """402 raises QuotaExhausted; 429, or a 5xx carrying `Retry-After`, raises a ProviderError that pauses
    the provider for the time the vendor asked (a minute when it did not say)."""
    status = response.status_code
    if status == 402:
        raise QuotaExhausted(f"provider answered HTTP 402 at {utcnow().isoformat(timespec='seconds')}Z",
                             resets_at=resets_at)
    wait = retry_after_seconds(response.headers.get("Retry-After"))
    if status == 429:
        raise ProviderError("provider answered HTTP 429", retry_after=DEFAULT_THROTTLE_SECONDS if wait is None else wait)
    if status >= 500 and wait is not None:
        raise ProviderError(f"provider answered HTTP {status}", retry_after=wait)
