"""The provider's state for operators and clients: `/healthz`, `GET /account/usage`, `providers status`."""
from app.providers import current_provider, traits
from app.services import provider_limits


def provider_status() -> dict:
    """{provider, state: active|paused, reason, paused_at, paused_until (None: until an operator resumes),
    detail, rate_limit, batch_size, concurrency, credits_remaining (the balance the vendor last reported to any
    process, when it reports one)}."""
    provider = current_provider()
    spec = traits(provider)
    pause, credits = provider_limits.pause_and_credits(spec.name)
    return {"provider": spec.name, "state": "paused" if pause else "active",
            "reason": pause.paused_reason if pause else None,
            "paused_at": pause.paused_at if pause else None,
            "paused_until": pause.paused_until if pause else None,
            "detail": pause.detail if pause else None,
            "rate_limit": str(spec.rate) if spec.rate else None,
            "batch_size": spec.batch_size, "concurrency": spec.concurrency,
            "credits_remaining": credits}


def resume_provider() -> bool:
    """An operator resumes the configured provider now; False when it was not paused."""
    return provider_limits.resume(traits(current_provider()).name)
