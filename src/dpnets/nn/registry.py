"""Registry of dpnets encoder classes that can be rebuilt from their ``config`` on load.

A registered module stores its constructor arguments in ``self.config`` (JSON-serialisable);
:func:`dpnets.load` rebuilds it by name without executing any stored code.
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["register", "build", "describe"]

_REGISTRY: dict[str, type[nn.Module]] = {}


def register(cls: type[nn.Module]) -> type[nn.Module]:
    """Class decorator: make ``cls`` rebuildable from ``{"name": ..., "config": ...}``."""
    _REGISTRY[cls.__name__] = cls
    return cls


def describe(module: nn.Module) -> dict[str, Any] | None:
    """``{"name", "config"}`` for a registered module, else None."""
    name = type(module).__name__
    if _REGISTRY.get(name) is type(module) and isinstance(getattr(module, "config", None), dict):
        return {"name": name, "config": module.config}
    return None


def build(spec: dict[str, Any]) -> nn.Module:
    """Rebuild a registered module from :func:`describe`'s output."""
    try:
        cls = _REGISTRY[spec["name"]]
    except KeyError:
        raise ValueError(f"unknown encoder class {spec.get('name')!r} in saved file") from None
    return cls(**spec["config"])
