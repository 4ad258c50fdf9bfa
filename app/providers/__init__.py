"""Providers tell what an entity looks like now. One module per provider; `PROVIDER` names the module,
which exposes `create(config) -> Provider`. Adding a provider is one new module and one setting."""
import importlib

from app.providers.base import EntityUnavailable, Provider, ProviderError

__all__ = ["EntityUnavailable", "Provider", "ProviderError", "load_provider"]


def load_provider(config) -> Provider:
    name = config["PROVIDER"]
    if not name.isidentifier():
        raise ValueError(f"PROVIDER must be a module name in app/providers, not {name!r}")
    try:
        module = importlib.import_module(f"app.providers.{name}")
    except ModuleNotFoundError as error:
        raise ValueError(f"Unknown PROVIDER {name!r}: no module app/providers/{name}.py") from error
    return module.create(config)
