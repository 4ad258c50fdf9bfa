"""Providers tell what an entity looks like now. One module per provider; `PROVIDER` names the module,
which exposes `create(config) -> Provider`. Adding a provider is one new module and one setting."""
import importlib
import pkgutil

from app.providers.base import EntityUnavailable, Provider, ProviderError

__all__ = ["EntityUnavailable", "Provider", "ProviderError", "load_provider"]


def load_provider(config) -> Provider:
    """The configured provider; ValueError (a one-line message naming the setting) when it cannot be built."""
    name = config["PROVIDER"]
    module = None
    if name.isidentifier():
        try:
            module = importlib.import_module(f"app.providers.{name}")
        except ModuleNotFoundError:
            module = None
    if not hasattr(module, "create"):
        raise ValueError(f"PROVIDER={name!r} is not a provider: use one of {', '.join(available_providers())}")
    return module.create(config)


def available_providers() -> list:
    """The modules of app/providers that build a provider."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__)
                  if info.name != "base" and hasattr(importlib.import_module(f"{__name__}.{info.name}"), "create"))
