"""One registry for everything selectable by name in a config.

Kinds are free-form strings ("advantage", "transform", "loss", "verifier",
"reward", ...). Registering a name twice is an error; looking up an unknown
name raises a ValueError that lists the valid names of that kind.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

_REGISTRY: dict[str, dict[str, Any]] = {}
T = TypeVar("T")


def register(kind: str, name: str) -> Callable[[T], T]:
  """Decorator: `@register("loss", "grpo")` adds the object under (kind, name)."""

  def deco(obj: T) -> T:
    table = _REGISTRY.setdefault(kind, {})
    if name in table and table[name] is not obj:
      raise ValueError(f"{kind} {name!r} is already registered")
    table[name] = obj
    return obj

  return deco


def get(kind: str, name: str) -> Any:
  """Returns the object registered as (kind, name) or fails listing valid names."""
  table = _REGISTRY.get(kind, {})
  if name not in table:
    valid = ", ".join(sorted(table)) or "(none registered)"
    raise ValueError(f"unknown {kind} {name!r}; valid {kind} names: {valid}")
  return table[name]


def names(kind: str) -> list[str]:
  """Sorted names registered under `kind`."""
  return sorted(_REGISTRY.get(kind, {}))


def kinds() -> list[str]:
  return sorted(_REGISTRY)
