"""Shared pieces of the objectives library: registry entries and masked stats.

An `Entry` is what the objectives put into `rljax.registry`: a callable with
the config class it takes, per-name defaults (overridable), fixed settings
(not overridable, e.g. an ablation's switch) and tags that the config layer
uses to refuse incompatible combinations, so no validation list of names
exists outside the registry.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from rljax import registry

# Every stop-gradient in the objectives goes through this name, so that tests
# can replay the detached values when checking gradients by finite differences.
sg = jax.lax.stop_gradient

Metrics = dict[str, jax.Array]


def fdtype():
  """Float dtype of the objectives: float32 (float64 when x64 is enabled, for tests)."""
  return jnp.result_type(float)


@dataclasses.dataclass(frozen=True, eq=False)
class Entry:
  """A registered objective piece: `fn` plus how to configure and combine it."""
  fn: Callable[..., Any]
  config_cls: type
  defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  tags: frozenset[str] = frozenset()
  doc: str = ""

  def __call__(self, *args, **kwargs):
    return self.fn(*args, **kwargs)

  def make_config(self, **overrides) -> Any:
    """The config for this name: class defaults < name defaults < overrides."""
    fields = {f.name for f in dataclasses.fields(self.config_cls)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
      raise ValueError(
          f"unknown option(s) {unknown} for {self.config_cls.__name__}; "
          f"valid options: {', '.join(sorted(fields))}")
    clash = {k: v for k, v in overrides.items()
             if k in self.fixed and v != self.fixed[k]}
    if clash:
      raise ValueError(f"options {clash} contradict this name's fixed "
                       f"settings {dict(self.fixed)}; pick another name")
    cfg = self.config_cls(**{**self.defaults, **overrides, **self.fixed})
    check = getattr(cfg, "check", None)
    if check is not None:
      check()
    return cfg


def register_entry(kind: str, name: str, fn: Callable[..., Any],
                   config_cls: type, **kwargs) -> Entry:
  entry = Entry(fn=fn, config_cls=config_cls, **kwargs)
  registry.register(kind, name)(entry)
  return entry


def check_choice(what: str, value: Any, valid) -> None:
  if value not in valid:
    raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(map(str, valid))}")


def require(mapping: Mapping[str, Any], key: str, who: str) -> jax.Array:
  """mapping[key], or a clear error naming who needs it (checked at trace time)."""
  if key not in mapping:
    raise ValueError(f"{who} needs {key!r}; got keys {sorted(mapping)}")
  return mapping[key]


def masked_sum(x: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
  return jnp.sum(jnp.where(mask > 0, x, 0.0), axis=axis)


def masked_mean(x: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
  """Mean over mask > 0 entries; 0 where there are none (never NaN)."""
  m = (mask > 0).astype(fdtype())
  return masked_sum(x, m, axis) / jnp.maximum(jnp.sum(m, axis=axis), 1.0)


def masked_stats(prefix: str, x: jax.Array, mask: jax.Array) -> Metrics:
  """mean/min/max of x over mask > 0 (0 when the mask is empty)."""
  m = mask > 0
  any_m = jnp.any(m)
  x = x.astype(fdtype())
  return {
      f"{prefix}_mean": masked_mean(x, m),
      f"{prefix}_min": jnp.where(any_m, jnp.min(jnp.where(m, x, jnp.inf)), 0.0),
      f"{prefix}_max": jnp.where(any_m, jnp.max(jnp.where(m, x, -jnp.inf)), 0.0),
  }


def broadcast_advantage(adv_B: jax.Array, mask_BxT: jax.Array) -> jax.Array:
  """Response-level advantage on every active token (0 on padding)."""
  return adv_B[:, None].astype(fdtype()) * (mask_BxT > 0)


def seq_mean(x_BxT: jax.Array, mask_BxT: jax.Array) -> jax.Array:
  """Per-response mean over active tokens, shape [B]; 0 for empty responses."""
  return masked_mean(x_BxT, mask_BxT, axis=-1)


LENGTH_BINS = 4


def length_bin_means(prefix: str, x_B: jax.Array, mask_BxT: jax.Array,
                     num_bins: int = LENGTH_BINS) -> Metrics:
  """Mean of x over the responses with tokens in `mask_BxT`, per response-length bin:
  `{prefix}_len{j}` for lengths in (j·T/num_bins, (j+1)·T/num_bins] (T the padded length),
  0 for an empty bin."""
  bin_B, has_B = length_bin(mask_BxT, num_bins)
  x = jnp.where(has_B, x_B.astype(fdtype()), 0.0)
  return {f"{prefix}_len{j}": masked_mean(x, has_B & (bin_B == j)) for j in range(num_bins)}


def length_bin_fracs(prefix: str, flag_B: jax.Array, mask_BxT: jax.Array,
                     num_bins: int = LENGTH_BINS) -> Metrics:
  """Fraction of the responses that are flagged, per response-length bin
  (`length_bin_means` of the flag)."""
  return length_bin_means(prefix, flag_B, mask_BxT, num_bins)


def length_bin(mask_BxT: jax.Array, num_bins: int = LENGTH_BINS):
  """(bin_B, has_B): each response's length bin (see `length_bin_fracs`), and whether it has
  tokens at all."""
  t_B = jnp.sum(mask_BxT > 0, axis=-1)
  width = mask_BxT.shape[-1] / num_bins
  bin_B = jnp.clip(jnp.ceil(t_B / width).astype(jnp.int32) - 1, 0, num_bins - 1)
  return bin_B, t_B > 0
