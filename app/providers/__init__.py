"""Providers tell what an entity looks like now. One module per provider; `PROVIDER` names the module,
which exposes `create(config) -> Provider`. Adding a provider is one new module and one setting."""
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Optional

import limits
import requests
from flask import current_app

from app.providers.base import (ANSWER_ERRORS, Answers, BaseProvider, EntityUnavailable, Provider, ProviderError,
                                QuotaExhausted, fetch_each)
from app.providers.vendor_http import size_pool

__all__ = ["Answers", "BaseProvider", "EntityUnavailable", "Provider", "ProviderError", "QuotaExhausted",
           "Traits", "current_provider", "fetch_many", "load_provider", "traits"]


@dataclass(frozen=True)
class Traits:
    """How the engine drives a provider."""
    name: str
    batch_size: int
    concurrency: int
    rate: Optional[limits.RateLimitItem]
    lookup: str
    local: bool


def parse_rate(text) -> Optional[limits.RateLimitItem]:
    """'30/minute', '5 per second', '300 per 1 minute'; None or '' for unmetered."""
    if not text:
        return None
    try:
        rate = limits.parse(text)
    except ValueError as error:
        raise ValueError(f"PROVIDER_RATE_LIMIT {text!r} is not a rate like '30/minute'") from error
    if rate.amount < 1:  # no call would ever be granted: every check deferred, for ever
        raise ValueError(f"PROVIDER_RATE_LIMIT {text!r} allows no call: give at least 1, e.g. '1/minute'")
    return rate


def traits(provider) -> Traits:
    """The provider's declarations, with the defaults of BaseProvider for what it leaves out. A provider
    without its own `fetch_many` makes one call per id, whatever batch size it declares."""
    has_batch_call = callable(getattr(provider, "fetch_many", None))
    return Traits(name=getattr(provider, "name", type(provider).__name__),
                  batch_size=max(1, getattr(provider, "batch_size", 1)) if has_batch_call else 1,
                  concurrency=max(1, getattr(provider, "concurrency", 1)),
                  rate=parse_rate(getattr(provider, "rate_limit", None)),
                  lookup=getattr(provider, "lookup", "id"),
                  local=bool(getattr(provider, "local", False)))


def fetch_many(provider, entity_type: str, keys: list) -> Answers:
    """One upstream call through the provider's `fetch_many` (or `fetch` per key); an answer raised for
    the whole call (401, 402, 429, 5xx…) becomes every key's answer."""
    method = getattr(provider, "fetch_many", None)
    try:
        return method(entity_type, keys) if callable(method) else fetch_each(provider, entity_type, keys)
    except ANSWER_ERRORS as answer:
        return Answers({key: answer for key in keys})


def current_provider() -> Provider:
    """The current app's provider, built once per app."""
    app = current_app._get_current_object()
    if "provider" not in app.extensions:
        app.extensions["provider"] = load_provider(app.config)
    return app.extensions["provider"]


def load_provider(config) -> Provider:
    """Build the configured provider; the operator's PROVIDER_RATE_LIMIT, PROVIDER_CONCURRENCY and
    PROVIDER_BATCH_SIZE (never above what the provider declares) replace its own declarations.
    Raises ValueError (a one-line message naming the setting) for a bad setting, so a misconfiguration
    fails at start-up."""
    name = config["PROVIDER"]
    module = None
    if name.isidentifier():
        try:
            module = importlib.import_module(f"app.providers.{name}")
        except ModuleNotFoundError:
            module = None
    if not hasattr(module, "create"):
        raise ValueError(f"PROVIDER={name!r} is not a provider: use one of {', '.join(available_providers())}")
    provider = module.create(config)
    if config.get("PROVIDER_RATE_LIMIT"):
        provider.rate_limit = config["PROVIDER_RATE_LIMIT"]
    if config.get("PROVIDER_CONCURRENCY"):
        provider.concurrency = int(config["PROVIDER_CONCURRENCY"])
        if isinstance(getattr(provider, "session", None), requests.Session):  # the vendors' pooled session
            size_pool(provider.session, provider.concurrency)
    if config.get("PROVIDER_BATCH_SIZE"):
        provider.batch_size = min(int(config["PROVIDER_BATCH_SIZE"]), getattr(provider, "batch_size", 1))
    _check_timeout_within_lease(traits(provider).name, provider, config)  # traits() validates the rate
    return provider


def _check_timeout_within_lease(name: str, provider, config) -> None:
    """A call starts no later than half a claim's lease (`CHECK_LEASE_SECONDS`), so one that may last the other half
    or longer outlives the claim (at exactly half, a call started at the deadline ends at the lease, and its answers
    are recorded after it): another process claimed the subscriptions and called the vendor for them again (paying
    twice; the first answers thrown away), and the concurrency slot freed mid-call. Refused at start-up."""
    timeout, lease = getattr(provider, "timeout", None), config.get("CHECK_LEASE_SECONDS")
    if timeout is not None and lease is not None and timeout >= lease / 2:
        raise ValueError(f"PROVIDER_{name.upper()}_TIMEOUT_SECONDS={timeout:g} must be less than half of "
                         f"CHECK_LEASE_SECONDS={lease:g}: lower the timeout or lengthen the lease")


def available_providers() -> list:
    """The modules of app/providers that build a provider."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__)
                  if info.name != "base" and hasattr(importlib.import_module(f"{__name__}.{info.name}"), "create"))
