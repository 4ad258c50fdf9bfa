"""The errors the service layer raises; the HTTP layer renders them in the one error shape (contract §2)."""
import math
import time
import unicodedata

RATE_LIMIT_MESSAGE = "Rate limit exceeded for this API key. Retry after the window resets."
# A string an error response repeats from the request (a value, an id, a field name, the path) is cut to its first
# ECHO_LIMIT characters followed by ECHO_CUT, in `details` and in the message alike (`app.api.errors`): a 100 kB
# value came back whole (API walk)
ECHO_LIMIT = 200
ECHO_CUT = "…"


ZERO_WIDTH_JOINER = "\u200d"


def cut_echo(text: str) -> str:
    """`text` as a message may repeat it: when longer than ECHO_LIMIT characters, its first ones and ECHO_CUT, the cut
    moved back so as not to part a character from the marks or joined characters that complete it (é written as e
    and U+0301, an emoji sequence)."""
    if len(text) <= ECHO_LIMIT:
        return text
    end = ECHO_LIMIT
    while end and _completes_previous(text, end):
        end -= 1
    return text[:end] + ECHO_CUT


def _completes_previous(text: str, index: int) -> bool:
    """Whether text[index] belongs with the character before it: a combining mark (accents, variation selectors), an
    emoji skin tone, either side of a zero-width joiner, an emoji tag (a subdivision flag's letters), a flag's second
    regional indicator, or a Hangul vowel or final consonant jamo."""
    character = text[index]
    return (unicodedata.category(character).startswith("M") or "\U0001f3fb" <= character <= "\U0001f3ff"
            or ZERO_WIDTH_JOINER in (character, text[index - 1]) or "\U000e0020" <= character <= "\U000e007f"
            or "\u1160" <= character <= "\u11ff" or "\ud7b0" <= character <= "\ud7ff"
            or _is_regional_indicator(character) and _regional_indicators_before(text, index) % 2 == 1)


def _is_regional_indicator(character: str) -> bool:
    return "\U0001f1e6" <= character <= "\U0001f1ff"


def _regional_indicators_before(text: str, index: int) -> int:
    """How many regional indicators run up to text[index]: a flag is a pair of them, so an odd count parts one."""
    count = 0
    while count < index and _is_regional_indicator(text[index - 1 - count]):
        count += 1
    return count


class ServiceError(Exception):
    status = 400
    code = "VALIDATION_ERROR"

    def __init__(self, message, details=None):
        super().__init__(message)
        self.message = message
        self.details = details


class ValidationFailed(ServiceError):
    status, code = 400, "VALIDATION_ERROR"

    def __init__(self, field, message, value=None, errors=None):
        errors = errors or [{"field": field, "message": message}]
        super().__init__(message, {"field": field, "value": value, "errors": errors})
        self.field = field


class Unauthorized(ServiceError):
    status, code = 401, "UNAUTHORIZED"


class TierLimitExceeded(ServiceError):
    status, code = 403, "TIER_LIMIT_EXCEEDED"


class TrialExpired(ServiceError):
    status, code = 403, "TRIAL_EXPIRED"


class KeyLimitExceeded(ServiceError):
    status, code = 403, "KEY_LIMIT_EXCEEDED"


class NotFound(ServiceError):
    status, code = 404, "NOT_FOUND"

    def __init__(self, resource, resource_id):
        super().__init__(f"No {resource} with id '{resource_id}' was found.",
                         {"resource": resource, "id": resource_id})


class DuplicateSubscription(ServiceError):
    status, code = 409, "DUPLICATE_SUBSCRIPTION"


class InvalidState(ServiceError):
    status, code = 409, "INVALID_STATE"


class RateLimited(ServiceError):
    """429 in the one error shape; `headers` carries Retry-After."""
    status, code = 429, "RATE_LIMIT_EXCEEDED"

    def __init__(self, limit: int, window_seconds: int, reset_time: float, message=RATE_LIMIT_MESSAGE):
        retry_after = seconds_until(reset_time)
        super().__init__(message, {"limit": limit, "window_seconds": window_seconds,
                                   "retry_after": retry_after})
        self.headers = {"Retry-After": str(retry_after)}


def seconds_until(reset_time: float) -> int:
    """Whole seconds to wait, at least 1 (never more than the window, unlike `reset_at - now`)."""
    return max(1, math.ceil(reset_time - time.time()))
