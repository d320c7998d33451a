"""Training–inference mismatch weights (SPEC §5): TIS / MIS / BPO transforms and helpers.

The transforms reweight token advantages by a stop-gradient function of the
trainer/sampler ratio r = p/q with p = π_old(y) (`old_logp_BxT`, the trainer's
score of the batch) and q the sampler's probability of the token that it really
emitted (`sampler_logp_BxT`, after temperature and truncation):
  TIS  w = min(r, C)                         C = 2
  MIS  w = r · 1{l ≤ r ≤ u}                  l, u = 0.5, 5
at the token level, or at the sequence level with r_seq the geometric mean
(exp of the mean log-ratio) or the product (exp of the sum) over the response.
BPO  ω = (1 + ε − q)/(1 + ε − p), ω̄ = M · min(ω, C), M = 0 where the advantage's
sign says the ratio already moved too far (uncapped ω vs 1 ± ε_clip).

The weight functions f are shared with Score Centering, which also needs
`weighted_mass` = q·f(p/q) and `alpha` = ρ·f(1/ρ), written in closed form.
"""
from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from rljax.objectives.common import check_choice, fdtype, length_bin_fracs, masked_mean
from rljax.objectives.common import masked_stats
from rljax.objectives.common import register_entry, require, sg
from rljax.objectives.transforms import KIND, stateless, TokenTransform

WEIGHTS = ("none", "is", "tis", "mis")  # f(r) = 1, r, min(r, C), r·1{l ≤ r ≤ u}
LEVELS = ("token", "seq_geo", "seq_prod")


def _log(x: float) -> float:
  return math.log(x) if x > 0 else -math.inf


def is_weight(log_r, kind: str, cap: float, low: float, high: float):
  """f(r) from log r, overflow-safe."""
  if kind == "none":
    return jnp.ones_like(log_r)
  if kind == "is":
    return jnp.exp(log_r)
  if kind == "tis":
    return jnp.exp(jnp.minimum(log_r, _log(cap)))
  inside = (log_r >= _log(low)) & (log_r <= _log(high))
  return jnp.where(inside, jnp.exp(jnp.clip(log_r, _log(low), _log(high))), 0.0)


def weighted_mass(logp, logq, kind: str, cap: float, low: float, high: float):
  """q·f(p/q) (0 where q = 0, except p for exact IS)."""
  p, q = jnp.exp(logp), jnp.exp(logq)
  if kind == "none":
    return q
  if kind == "is":
    return p
  if kind == "tis":
    return jnp.minimum(p, cap * q)
  log_r = logp - logq
  inside = (log_r >= _log(low)) & (log_r <= _log(high))
  return jnp.where(inside, p, 0.0)


def alpha(rho, kind: str, cap: float, low: float, high: float):
  """α = ρ·f(1/ρ): the weighted mass per unit trainer mass on the filled tail."""
  if kind == "none":
    return rho
  if kind == "is":
    return jnp.ones_like(rho)
  if kind == "tis":
    return jnp.minimum(1.0, cap * rho)
  return ((rho * high >= 1.0) & (rho * low <= 1.0)).astype(rho.dtype)


def check_bounds(cap: float, low: float, high: float):
  if cap <= 0 or not 0 <= low < high:
    raise ValueError(f"need cap > 0 and 0 <= low < high, got {cap}, {low}, {high}")


@dataclasses.dataclass(frozen=True)
class ISConfig:
  weight: str = "tis"  # tis | mis
  level: str = "token"  # token | seq_geo | seq_prod
  cap: float = 2.0  # TIS C
  low: float = 0.5  # MIS l
  high: float = 5.0  # MIS u

  def check(self):
    check_choice("IS weight", self.weight, ("tis", "mis"))
    check_choice("IS level", self.level, LEVELS)
    check_bounds(self.cap, self.low, self.high)


def mismatch_log_ratio(batch, who: str):
  """log p/q per token (0 on padding), stop-gradient."""
  mask = require(batch, "mask_BxT", who)
  log_r = (require(batch, "old_logp_BxT", who).astype(fdtype())
           - require(batch, "sampler_logp_BxT", who).astype(fdtype()))
  return sg(jnp.where(mask > 0, log_r, 0.0)), mask


def importance_weights(cfg: ISConfig = ISConfig()) -> TokenTransform:
  """TIS / MIS: Â = sg(f(r))·A at the token or sequence level."""
  name = cfg.weight if cfg.level == "token" else f"{cfg.weight}_{cfg.level}"

  def fn(adv_BxT, batch):
    log_r, mask = mismatch_log_ratio(batch, name)
    active = mask > 0
    if cfg.level == "token":
      lr = log_r
    else:
      seq = jnp.sum(log_r, axis=-1)
      if cfg.level == "seq_geo":
        seq = seq / jnp.maximum(jnp.sum(active, axis=-1), 1)
      lr = jnp.broadcast_to(seq[:, None], log_r.shape)
    w = sg(jnp.where(active, is_weight(lr, cfg.weight, cfg.cap, cfg.low, cfg.high), 1.0))
    if cfg.weight == "tis":
      changed = lr > _log(cfg.cap)
    else:
      changed = (lr < _log(cfg.low)) | (lr > _log(cfg.high))
    what = "truncated" if cfg.weight == "tis" else "masked"
    metrics = {f"{name}/frac_{what}": masked_mean(changed.astype(fdtype()), active),
               f"{name}/log_ratio_abs_max": jnp.max(jnp.abs(jnp.where(active, lr, 0.0)))}
    metrics.update(masked_stats(f"{name}/weight", w, active))
    metrics.update(length_bin_fracs(f"{name}/frac_seqs_{what}",
                                    jnp.any(changed & active, axis=-1), mask))
    return adv_BxT * w, metrics

  return stateless(fn)


_IS_TAGS = frozenset({"token_reweight", "mismatch_weight"})
for _w in ("tis", "mis"):
  for _level in LEVELS:
    _name = _w if _level == "token" else f"{_w}_{_level}"
    _tags = _IS_TAGS | ({"seq_level"} if _level != "token" else set())
    register_entry(KIND, _name, importance_weights, ISConfig, tags=frozenset(_tags),
                   fixed={"weight": _w, "level": _level},
                   doc=f"{_w.upper()} weight on the {_level} ratio π_old/q")


@dataclasses.dataclass(frozen=True)
class BPOConfig:
  smooth: float = 0.1  # ε in ω = (1 + ε − q)/(1 + ε − p)
  cap: float = 3.0  # C
  eps_low: float | None = None  # None: the loss's PPO clip eps_low (else 0.2)
  eps_high: float | None = None

  def check(self):
    if self.smooth < 0 or self.cap <= 0:
      raise ValueError(f"bpo needs smooth >= 0 and cap > 0, got {self.smooth}, {self.cap}")


def bpo_weight(logp_a, logq_a, adv, cfg: BPOConfig):
  """ω̄ = M·min(ω, C) with the sign mask on the uncapped ω; returns (ω̄, ω)."""
  eps_low = 0.2 if cfg.eps_low is None else cfg.eps_low
  eps_high = 0.2 if cfg.eps_high is None else cfg.eps_high
  p, q = jnp.exp(logp_a), jnp.exp(logq_a)
  omega = (1.0 + cfg.smooth - q) / (1.0 + cfg.smooth - p)
  drop = ((adv > 0) & (omega > 1.0 + eps_high)) | ((adv < 0) & (omega < 1.0 - eps_low))
  return jnp.where(drop, 0.0, jnp.minimum(omega, cfg.cap)), omega


def bpo(cfg: BPOConfig = BPOConfig()) -> TokenTransform:
  """Practical BPO: Â = sg(ω̄)·A, p from π_old, q from the sampler."""

  def fn(adv_BxT, batch):
    mask = require(batch, "mask_BxT", "bpo")
    active = mask > 0
    logp = sg(require(batch, "old_logp_BxT", "bpo").astype(fdtype()))
    logq = sg(require(batch, "sampler_logp_BxT", "bpo").astype(fdtype()))
    w, omega = bpo_weight(logp, logq, adv_BxT, cfg)
    w = sg(jnp.where(active, w, 1.0))
    metrics = {"bpo/frac_masked": masked_mean((w == 0).astype(fdtype()), active),
               "bpo/frac_capped": masked_mean((omega > cfg.cap).astype(fdtype()), active)}
    metrics.update(masked_stats("bpo/weight", w, active))
    metrics.update(length_bin_fracs("bpo/frac_seqs_masked", jnp.any((w == 0) & active, -1),
                                    mask))
    return adv_BxT * w, metrics

  return stateless(fn)


register_entry(KIND, "bpo", bpo, BPOConfig, tags=_IS_TAGS,
               doc="Â = sg(M·min((1+ε−q)/(1+ε−p), C))·A")


def binary_kl(logq_a, logp_a):
  """K_bin(a) = q log(q/p) + (1−q) log((1−q)/(1−p)) (q fixed, p the trainer's)."""
  q = jnp.exp(logq_a)
  log1m = lambda lx: jnp.log1p(-jnp.exp(lx))
  return q * (logq_a - logp_a) + (1.0 - q) * (log1m(logq_a) - log1m(logp_a))
