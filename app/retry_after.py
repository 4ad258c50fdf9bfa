"""The one reader of an HTTP `Retry-After` value, for webhook receivers' and vendors' answers alike.

RFC 9110 §10.2.3: delay-seconds (1*DIGIT, ASCII) or an HTTP-date. Python's float() and int() take far more
("nan", "-5", "1_000", "1e3", "²"): none of it is a delay, so it is unreadable here. What to do with the
seconds (caps, pauses) is each caller's policy.
"""
import re
import time
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Optional

_DELAY_SECONDS = re.compile(r"[0-9]+")
_OPTIONAL_WHITESPACE = " \t"  # OWS around a field value (RFC 9110 §5.5); nothing else is stripped


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds to wait: delay-seconds as given (math.inf past what a float holds), an HTTP-date as the time
    left until it (0 once past); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip(_OPTIONAL_WHITESPACE)
    if _DELAY_SECONDS.fullmatch(value):
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if moment.tzinfo is None:  # asctime-date and "-0000" carry no zone; HTTP-dates are always GMT
        moment = moment.replace(tzinfo=timezone.utc)
    return max(0.0, moment.timestamp() - time.time())
