"""Registrations made by a test are undone after it (other tests see the stock registry)."""
import pytest

from rljax import registry


@pytest.fixture
def isolated_registry(monkeypatch):
  monkeypatch.setattr(registry, "_REGISTRY", {k: dict(v) for k, v in registry._REGISTRY.items()})
