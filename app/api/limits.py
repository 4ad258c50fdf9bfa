"""The four rate-limit classes of contract §8, shared across their endpoints, sized by the caller's tier."""
from flask import current_app, g

from app.extensions import limiter
from app.services.accounts import tier_settings


def _limit_string(scope: str):
    def limit():
        tier = g.get("tier")
        amount = (tier_settings(tier)["rate_limits"][scope] if tier
                  else current_app.config["RATELIMIT_UNAUTHENTICATED"])
        return f"{amount} per {current_app.config['RATELIMIT_WINDOW_SECONDS']} seconds"
    return limit


read_limit = limiter.shared_limit(_limit_string("read"), scope="read")
write_limit = limiter.shared_limit(_limit_string("write"), scope="write")
bulk_limit = limiter.shared_limit(_limit_string("bulk"), scope="bulk")
default_limit = limiter.shared_limit(_limit_string("default"), scope="default")


def add_rate_limit_headers(response):
    """X-RateLimit-* on every keyed response (Retry-After only on 429, set by the error handler)."""
    if not g.get("api_key_id") or not current_app.config.get("RATELIMIT_ENABLED", True):
        return response
    current = limiter.current_limit
    if current is not None:
        response.headers["X-RateLimit-Limit"] = str(current.limit.amount)
        response.headers["X-RateLimit-Remaining"] = str(max(0, current.remaining))
        response.headers["X-RateLimit-Reset"] = str(current.reset_at)
    return response
