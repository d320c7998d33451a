"""Score Centering (SPEC §5): naive PG, exact SC, top-k SC, and SC with TIS / MIS.

All are REINFORCE-style surrogates (one update per rollout batch, as in the SC
paper) whose gradient is −A·(w_a z_a − m̂_w), z = ∇log p (p = trainer, q = sampler):
  pg      L = −sg(A)·sg(w_a)·log p_a                              (no centering)
  sc      L = −sg(A)·(sg(w_a) log p_a − Σ_{v∈H} sg(q_v f(p_v/q_v)) log p_v)
          with H the whole vocabulary (K = V, full recorded q)
  topk_sc L = −sg(A)·(sg(w_a) log p_a − Σ_{v∈H} sg(q_v f(p_v/q_v) − α p_v) log p_v)
          H = the sampler's recorded top-k, ρ = (1 − Σ_H q)/(1 − Σ_H p), α = ρ f(1/ρ)
w = f(p/q) with f = 1 (plain), r (exact IS), min(r, C) (TIS) or r·1{l ≤ r ≤ u} (MIS);
w_a uses the true recorded q_a (`sampler_logp_BxT`) and the trainer's sg(p_a).
The centering is applied to the weighted score (w z − m_w), never w (z − m_q).
Inputs: pol["logp_BxT"], pol["head_logp_BxTxK"] (trainer log p at the head ids);
batch["head_logq_BxTxK"] (sampler log q there; −inf marks an empty slot) and
optionally batch["head_ids_BxTxK"] (id < 0 marks an empty slot).
When the tail mass of p or q is below `tail_eps` the tail counts as empty
(ρ = α = 0): a clamp that makes K = V reduce to exact SC and keeps ρ finite.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.objectives import aggregation
from rljax.objectives.common import Metrics, fdtype, masked_mean, masked_stats
from rljax.objectives.common import register_entry, require, sg
from rljax.objectives.losses import KIND, LossConfig, context, finish, token_advantage
from rljax.objectives.mismatch import alpha, is_weight, weighted_mass


def _f_args(cfg: LossConfig):
  return dict(kind=cfg.is_weight, cap=cfg.is_cap, low=cfg.is_low, high=cfg.is_high)


def sampled_weight(logp_a_BxT, logq_a_BxT, cfg: LossConfig):
  """w_a = f(p_a/q_a), stop-gradient."""
  return sg(is_weight(sg(logp_a_BxT) - sg(logq_a_BxT), **_f_args(cfg)))


def head_valid(batch) -> jax.Array:
  logq = batch["head_logq_BxTxK"]
  valid = jnp.isfinite(logq)
  if "head_ids_BxTxK" in batch:
    valid = valid & (batch["head_ids_BxTxK"] >= 0)
  return valid


def centering_coefficients(head_logp_BxTxK, head_logq_BxTxK, valid_BxTxK,
                           cfg: LossConfig, tail_fill: bool):
  """Detached c_v with m̂_w = Σ_H c_v z_v, plus (ρ, α) per token and metrics."""
  logp = sg(jnp.where(valid_BxTxK, head_logp_BxTxK, 0.0)).astype(fdtype())
  logq = sg(jnp.where(valid_BxTxK, head_logq_BxTxK, 0.0)).astype(fdtype())
  mass = jnp.where(valid_BxTxK, weighted_mass(logp, logq, **_f_args(cfg)), 0.0)
  p = jnp.where(valid_BxTxK, jnp.exp(logp), 0.0)
  q = jnp.where(valid_BxTxK, jnp.exp(logq), 0.0)
  tail_q = jnp.clip(1.0 - jnp.sum(q, axis=-1), 0.0, 1.0)
  tail_p = jnp.clip(1.0 - jnp.sum(p, axis=-1), 0.0, 1.0)
  if tail_fill:
    has_tail = (tail_p > cfg.tail_eps) & (tail_q > cfg.tail_eps)
    rho = jnp.where(has_tail, tail_q / jnp.where(has_tail, tail_p, 1.0), 0.0)
    a = jnp.where(has_tail, alpha(rho, **_f_args(cfg)), 0.0)
  else:
    has_tail = jnp.zeros(tail_p.shape, bool)
    rho = a = jnp.zeros_like(tail_p)
  coef = sg(mass - a[..., None] * p)
  total = jnp.sum(coef, axis=-1, keepdims=True)
  drift = jnp.sqrt(jnp.sum(jnp.square(jnp.where(valid_BxTxK, coef - total * p, 0.0)), -1))
  aux = {"rho": rho, "alpha": a, "tail_q": tail_q, "tail_p": tail_p,
         "has_tail": has_tail, "drift": drift}
  return coef, aux


def centered_pg(pol, batch, cfg: LossConfig, center: bool, tail_fill: bool):
  """The shared surrogate; `center` off gives naive (weighted) PG."""
  who = "topk_sc" if tail_fill else ("sc" if center else "pg")
  logp, mask, norm = context(pol, batch, who)
  active = mask > 0
  adv = token_advantage(batch, mask)
  metrics: Metrics = {}
  if cfg.is_weight == "none":
    w_a = jnp.ones_like(logp)
  else:
    w_a = sampled_weight(logp, require(batch, "sampler_logp_BxT", who), cfg)
    metrics.update(masked_stats(f"{who}/weight", w_a, active))
  score = w_a * logp
  if center:
    head_logp = require(pol, "head_logp_BxTxK", who).astype(fdtype())
    require(batch, "head_logq_BxTxK", who)
    valid = head_valid(batch)
    coef, aux = centering_coefficients(head_logp, batch["head_logq_BxTxK"], valid,
                                       cfg, tail_fill)
    score = score - jnp.sum(coef * jnp.where(valid, head_logp, 0.0), axis=-1)
    metrics[f"{who}/drift_norm"] = masked_mean(aux["drift"], active)
    metrics[f"{who}/center_mass"] = masked_mean(jnp.sum(coef, -1), active)
    if tail_fill:
      for k in ("rho", "alpha", "tail_q", "tail_p"):
        metrics[f"{who}/{k}"] = masked_mean(aux[k], active)
      metrics[f"{who}/frac_no_tail"] = masked_mean(
          (~aux["has_tail"]).astype(fdtype()), active)
  main = aggregation.aggregate(-adv * score, mask, cfg.agg, norm)
  return finish(main, pol, batch, cfg, mask, norm, metrics)


def pg(pol, batch, cfg: LossConfig):
  return centered_pg(pol, batch, cfg, center=False, tail_fill=False)


def sc(pol, batch, cfg: LossConfig):
  return centered_pg(pol, batch, cfg, center=True, tail_fill=False)


def topk_sc(pol, batch, cfg: LossConfig):
  return centered_pg(pol, batch, cfg, center=True, tail_fill=True)


_PG = frozenset({"uses_is_weight"})
_SC = frozenset({"uses_is_weight", "score_centering", "needs_head"})
register_entry(KIND, "pg", pg, LossConfig, tags=_PG,
               doc="naive (optionally IS-weighted) policy gradient −A sg(w_a) log p_a")
register_entry(KIND, "sc", sc, LossConfig, tags=_SC | {"needs_full_head"},
               doc="exact Score Centering over the full recorded q")
register_entry(KIND, "topk_sc", topk_sc, LossConfig, tags=_SC,
               doc="top-k Score Centering, tail filled with ρ·p")
for _w in ("tis", "mis"):
  register_entry(KIND, f"sc_{_w}", sc, LossConfig, tags=_SC | {"needs_full_head"},
                 fixed={"is_weight": _w}, doc=f"exact SC on the {_w.upper()}-weighted score")
  register_entry(KIND, f"topk_sc_{_w}", topk_sc, LossConfig, tags=_SC,
                 fixed={"is_weight": _w}, doc=f"top-k SC on the {_w.upper()}-weighted score")
