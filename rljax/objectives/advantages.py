"""Response-level advantages from group rewards (SPEC §1), plus DAPO's reward-side helpers.

Every estimator is registered under kind "advantage" with the signature
`fn(rewards_B, group_size, cfg) -> (adv_B, metrics)`. The batch holds whole
consecutive groups: rows [g*G, (g+1)*G) are the G responses to prompt g.
A group whose rewards are all equal gets exact zeros (never NaN).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax.objectives.common import Metrics, check_choice, fdtype, register_entry

KIND = "advantage"
SCALES = ("group", "batch", "none")


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
  scale_rewards: str = "group"  # GRPO's std: group | batch | none
  eps: float = 1e-4  # added to the (unbiased) std

  def check(self):
    check_choice("scale_rewards", self.scale_rewards, SCALES)
    if self.eps < 0:
      raise ValueError(f"eps must be >= 0, got {self.eps}")


def as_groups(x_B: jax.Array, group_size: int) -> jax.Array:
  """[B] -> [B/G, G]; a clear error when B is not a multiple of G."""
  batch = x_B.shape[0]
  if group_size < 1 or batch % group_size:
    raise ValueError(
        f"the batch must hold whole groups: batch size {batch} is not divisible "
        f"by group_size (num_generations) {group_size}")
  return x_B.reshape(batch // group_size, group_size)


def _unbiased_std(x, axis=None):
  n = x.size if axis is None else x.shape[axis]
  var = jnp.sum(jnp.square(x - jnp.mean(x, axis=axis, keepdims=True)), axis=axis)
  return jnp.sqrt(var / max(n - 1, 1))


def _centered(r_GxN):
  """r − mean_g r, and an exact 0 where G·r = Σ_g r (a reward equal to its group mean).
  Under jit XLA turns the mean into Σr · (1/G) and may contract it with the subtraction into
  one FMA, so r − mean alone left −2⁻²⁷ for the 0.5 of [1, .5, 0, 1, 0]."""
  total = jnp.sum(r_GxN, axis=1, keepdims=True)
  centered = r_GxN - jnp.mean(r_GxN, axis=1, keepdims=True)
  return jnp.where(r_GxN * r_GxN.shape[1] == total, 0.0, centered)


def _finish(adv_GxN, r_GxN) -> tuple[jax.Array, Metrics]:
  equal_G = jnp.max(r_GxN, axis=1) == jnp.min(r_GxN, axis=1)
  adv_GxN = jnp.where(equal_G[:, None], 0.0, adv_GxN)
  adv_B = adv_GxN.reshape(-1)
  metrics = {
      "adv/reward_mean": jnp.mean(r_GxN),
      "adv/reward_std": _unbiased_std(r_GxN),
      "adv/frac_equal_groups": jnp.mean(equal_G.astype(fdtype())),
      "adv/mean": jnp.mean(adv_B),
      "adv/min": jnp.min(adv_B),
      "adv/max": jnp.max(adv_B),
  }
  return adv_B, metrics


def grpo(rewards_B, group_size: int, cfg: AdvantageConfig):
  """A = (r − mean_g r) / (std + eps); std per group, over the batch, or 1."""
  r = as_groups(rewards_B.astype(fdtype()), group_size)
  centered = _centered(r)
  if cfg.scale_rewards == "group":
    std = _unbiased_std(r, axis=1)[:, None]
  elif cfg.scale_rewards == "batch":
    std = _unbiased_std(r)
  else:
    std = None
  adv = centered if std is None else centered / (std + cfg.eps)
  return _finish(adv, r)


def dr_grpo(rewards_B, group_size: int, cfg: AdvantageConfig):
  """A = r − mean_g r (no std)."""
  del cfg
  r = as_groups(rewards_B.astype(fdtype()), group_size)
  return _finish(_centered(r), r)


def rloo(rewards_B, group_size: int, cfg: AdvantageConfig):
  """A_i = r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − mean_g r)."""
  del cfg
  if group_size < 2:
    raise ValueError(f"rloo needs group_size >= 2, got {group_size}")
  r = as_groups(rewards_B.astype(fdtype()), group_size)
  # The centred form, not r − (Σr − r)/(G−1): a reward equal to the group mean gets an
  # exact 0 (the subtraction form leaves ±1 ulp of the wrong sign, e.g. [1, .5, .5, 0]).
  scale = group_size / (group_size - 1)
  return _finish(scale * _centered(r), r)


def kept_advantages(rewards_B, keep_B, group_size: int, estimator: str, cfg: AdvantageConfig):
  """The group advantage over the kept responses only: every mean / std / leave-one-out
  count of `estimator` (grpo | dr_grpo | rloo) is taken over the rows with `keep_B`, and the
  other rows get 0. A group with fewer than two kept responses, or whose kept rewards are all
  equal, gets 0. With `keep_B` all True it equals the estimator itself.
  Returns (adv_B, metrics)."""
  r = as_groups(rewards_B.astype(fdtype()), group_size)
  k = as_groups(keep_B, group_size).astype(bool)
  kf = k.astype(fdtype())
  n_G = jnp.sum(kf, axis=1, keepdims=True)
  total = jnp.sum(jnp.where(k, r, 0.0), axis=1, keepdims=True)
  mean = total / jnp.maximum(n_G, 1.0)
  centered = jnp.where(k & (r * n_G != total), r - mean, 0.0)  # exact 0 at the mean
  if estimator == "rloo":
    adv = centered * n_G / jnp.maximum(n_G - 1.0, 1.0)
  elif estimator == "dr_grpo" or cfg.scale_rewards == "none":
    adv = centered
  elif cfg.scale_rewards == "group":
    var = jnp.sum(jnp.square(jnp.where(k, r - mean, 0.0)), axis=1, keepdims=True)
    adv = centered / (jnp.sqrt(var / jnp.maximum(n_G - 1.0, 1.0)) + cfg.eps)
  else:  # batch: the std of every kept reward in the batch
    n = jnp.sum(kf)
    mu = jnp.sum(jnp.where(k, r, 0.0)) / jnp.maximum(n, 1.0)
    var = jnp.sum(jnp.square(jnp.where(k, r - mu, 0.0)))
    adv = centered / (jnp.sqrt(var / jnp.maximum(n - 1.0, 1.0)) + cfg.eps)
  hi = jnp.max(jnp.where(k, r, -jnp.inf), axis=1)
  lo = jnp.min(jnp.where(k, r, jnp.inf), axis=1)
  signal_G = (n_G[:, 0] >= 2) & (hi != lo)
  adv = jnp.where(signal_G[:, None] & k, adv, 0.0)
  metrics = {"adv/num_in_baseline": jnp.sum(kf),
             "adv/frac_groups_without_baseline": jnp.mean((n_G[:, 0] < 2).astype(fdtype()))}
  return adv.reshape(-1), metrics


register_entry(KIND, "grpo", grpo, AdvantageConfig,
               doc="(r − mean_g) / (std_{group|batch|none} + 1e-4), unbiased std")
register_entry(KIND, "dr_grpo", dr_grpo, AdvantageConfig,
               fixed={"scale_rewards": "none"}, doc="r − mean_g")
register_entry(KIND, "rloo", rloo, AdvantageConfig,
               fixed={"scale_rewards": "none"}, doc="r_i − mean_{j≠i} r_j")


def informative_groups(rewards_B: jax.Array, group_size: int) -> jax.Array:
  """DAPO dynamic sampling: bool [B/G], False for groups of equal rewards."""
  r = as_groups(rewards_B, group_size)
  return jnp.max(r, axis=1) != jnp.min(r, axis=1)


def overlong_penalty(length_B: jax.Array, max_len: int, cache_len: int) -> jax.Array:
  """DAPO soft overlong punishment in tokens: 0 up to L_max − L_cache, linear to −1 at L_max."""
  if not 0 < cache_len <= max_len:
    raise ValueError(f"need 0 < cache_len <= max_len, got {cache_len}, {max_len}")
  excess = length_B.astype(fdtype()) - (max_len - cache_len)
  return -jnp.clip(excess / cache_len, 0.0, 1.0)
