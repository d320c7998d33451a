"""Policy losses (SPEC §2, §4): PPO-clip / GRPO / DAPO, GSPO, GSPO-token, REAL; KL and entropy.

Every loss is registered under kind "loss" with the signature
  loss_fn(pol, batch, cfg) -> (loss, metrics)
`pol` holds trainer quantities that carry gradient (`logp_BxT`, optionally
`entropy_BxT`, `head_logp_BxTxK`); `batch` holds arrays without gradient
(`mask_BxT`, `adv_B`, `adv_BxT`, `old_logp_BxT`, `sampler_logp_BxT`, optionally
`ref_logp_BxT`, `head_ids_BxTxK`, `head_logq_BxTxK`, and `normalizer`, the
whole-batch `Normalizer`; without it the counts come from this batch alone).
The token advantage is `batch["adv_BxT"]` (after transforms) or else `adv_B`
broadcast. KL (`beta`, estimator `kl`) and the entropy bonus (`entropy_coef`)
are added to any loss with the loss's own aggregation (REAL: token-mean).
Metrics are computed over this (micro-)batch's active tokens.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax import registry
from rljax.objectives import aggregation
from rljax.objectives.advantages import as_groups
from rljax.objectives.common import Metrics, broadcast_advantage, check_choice, fdtype
from rljax.objectives.common import masked_mean, masked_stats, register_entry
from rljax.objectives.common import require, seq_mean, sg
from rljax.objectives.mismatch import WEIGHTS, check_bounds

KIND = "loss"


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Hyper-parameters of every loss; each name overrides some defaults."""
  agg: str = "seq-mean-token-mean"
  eps_low: float = 0.2  # PPO clip 1 − ε_low
  eps_high: float = 0.2  # PPO clip 1 + ε_high (clip-higher: 0.28)
  dual_clip: float = 0.0  # c > 1: for A < 0 the token loss is capped at −c·A; 0 = off
  beta: float = 0.0  # KL coefficient
  kl: str = "k3"  # k1 | k2 | k3
  entropy_coef: float = 0.0  # loss −= coef · agg(entropy)
  real_tau: float = 0.5
  group_size: int = 0  # REAL: num_generations (set by build_objective)
  is_weight: str = "none"  # pg / SC family: f(p/q) in none | is | tis | mis
  is_cap: float = 2.0
  is_low: float = 0.5
  is_high: float = 5.0
  tail_eps: float = 1e-6  # top-k SC: below this tail mass the tail counts as empty
  log_ratio_clip: float = 20.0  # |log ratio| bound before exp (overflow guard)

  def check(self):
    check_choice("aggregation", self.agg, registry.names(aggregation.KIND))
    check_choice("kl estimator", self.kl, registry.names("kl"))
    check_choice("is_weight", self.is_weight, WEIGHTS)
    check_bounds(self.is_cap, self.is_low, self.is_high)
    if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
      raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got "
                       f"{self.eps_low}, {self.eps_high}")
    if self.dual_clip != 0 and self.dual_clip <= 1:
      raise ValueError(f"dual_clip must be 0 (off) or > 1, got {self.dual_clip}")
    if self.beta < 0 or self.real_tau <= 0 or self.tail_eps <= 0:
      raise ValueError("need beta >= 0, real_tau > 0 and tail_eps > 0")
    if self.group_size < 0:
      raise ValueError(f"group_size must be >= 0, got {self.group_size}")


# ---------------------------------------------------------------- KL, entropy


@registry.register("kl", "k1")
def kl_k1(logp, ref_logp):
  return logp - ref_logp


@registry.register("kl", "k2")
def kl_k2(logp, ref_logp):
  return 0.5 * jnp.square(logp - ref_logp)


@registry.register("kl", "k3")
def kl_k3(logp, ref_logp):
  d = jnp.clip(ref_logp - logp, -20.0, 20.0)
  return jnp.exp(d) - d - 1.0


def context(pol, batch, who: str):
  """(logp_BxT float32, mask_BxT, normalizer) for a loss."""
  logp = require(pol, "logp_BxT", who).astype(fdtype())
  mask = require(batch, "mask_BxT", who)
  norm = batch.get("normalizer")
  if norm is None:
    norm = aggregation.make_normalizer(mask)
  return logp, mask, norm


def token_advantage(batch, mask_BxT) -> jax.Array:
  if "adv_BxT" in batch:
    return sg(batch["adv_BxT"]).astype(fdtype())
  return broadcast_advantage(sg(require(batch, "adv_B", "loss")), mask_BxT)


def finish(main, pol, batch, cfg: LossConfig, mask, norm, metrics: Metrics,
           agg: str | None = None):
  """main + β·agg(KL) − c·agg(entropy); agg defaults to cfg.agg."""
  agg = cfg.agg if agg is None else agg
  logp = pol["logp_BxT"].astype(fdtype())
  loss = main
  metrics = dict(metrics, **{"loss/policy": main})
  if cfg.beta > 0:
    ref = sg(require(batch, "ref_logp_BxT", f"beta={cfg.beta} (KL)"))
    kl = aggregation.aggregate(registry.get("kl", cfg.kl)(logp, ref), mask, agg, norm)
    loss = loss + cfg.beta * kl
    metrics["loss/kl"] = kl
  if cfg.entropy_coef != 0:
    ent = require(pol, "entropy_BxT", f"entropy_coef={cfg.entropy_coef}")
    ent = aggregation.aggregate(ent.astype(fdtype()), mask, agg, norm)
    loss = loss - cfg.entropy_coef * ent
    metrics["loss/entropy"] = ent
  metrics["loss/total"] = loss
  return loss, metrics


# ------------------------------------------------------------- PPO-clip family


def clipped_surrogate(log_ratio_BxT, adv_BxT, mask_BxT, cfg: LossConfig):
  """Per-token −min(ρA, clip(ρ)A) (+ dual clip) and clip metrics."""
  log_ratio = jnp.clip(log_ratio_BxT, -cfg.log_ratio_clip, cfg.log_ratio_clip)
  ratio = jnp.exp(log_ratio)
  surr1 = ratio * adv_BxT
  surr2 = jnp.clip(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * adv_BxT
  loss = -jnp.minimum(surr1, surr2)
  active = mask_BxT > 0
  frac = lambda c: masked_mean(c.astype(fdtype()), active)
  metrics = {
      "ppo/clip_frac": frac(surr2 < surr1),
      "ppo/clip_frac_low": frac((ratio < 1.0 - cfg.eps_low) & (adv_BxT < 0)),
      "ppo/clip_frac_high": frac((ratio > 1.0 + cfg.eps_high) & (adv_BxT > 0)),
  }
  if cfg.dual_clip:
    cap = -cfg.dual_clip * adv_BxT
    dual = (adv_BxT < 0) & (loss > cap)
    loss = jnp.where(dual, cap, loss)
    metrics["ppo/dual_clip_frac"] = frac(dual)
  metrics.update(masked_stats("ppo/ratio", sg(ratio), active))
  return loss, metrics


def ppo_clip(pol, batch, cfg: LossConfig):
  """GRPO / PPO-clip: −agg(min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â)), ρ = π_θ/π_old."""
  logp, mask, norm = context(pol, batch, "ppo_clip")
  old = sg(require(batch, "old_logp_BxT", "ppo_clip")).astype(fdtype())
  loss_tok, metrics = clipped_surrogate(logp - old, token_advantage(batch, mask), mask, cfg)
  metrics["ppo/approx_kl"] = masked_mean(sg(kl_k3(logp, old)), mask)
  main = aggregation.aggregate(loss_tok, mask, cfg.agg, norm)
  return finish(main, pol, batch, cfg, mask, norm, metrics)


def gspo(pol, batch, cfg: LossConfig, token_level: bool = False):
  """GSPO: the clip acts on s_i = exp(mean_t(logπ_θ − logπ_old)).

  GSPO-token: log s_{i,t} = logπ_θ − sg(logπ_θ) + sg(log s_i) (same value,
  per-token gradient s_i ∇logπ_θ(t)).
  """
  logp, mask, norm = context(pol, batch, "gspo")
  old = sg(require(batch, "old_logp_BxT", "gspo")).astype(fdtype())
  log_s_B = seq_mean(logp - old, mask)
  if token_level:
    log_ratio = logp - sg(logp) + sg(log_s_B)[:, None]
  else:
    log_ratio = jnp.broadcast_to(log_s_B[:, None], logp.shape)
  loss_tok, metrics = clipped_surrogate(log_ratio, token_advantage(batch, mask), mask, cfg)
  has = jnp.sum(mask > 0, axis=-1) > 0
  metrics.update(masked_stats("gspo/log_seq_ratio", sg(log_s_B), has))
  main = aggregation.aggregate(loss_tok, mask, cfg.agg, norm)
  return finish(main, pol, batch, cfg, mask, norm, metrics)


def gspo_token(pol, batch, cfg: LossConfig):
  return gspo(pol, batch, cfg, token_level=True)


# ----------------------------------------------------------------------- REAL


def real_from_scores(s_B, adv_B, group_size: int, tau: float, num_groups):
  """REAL group classification loss on sequence logits s̄ (SPEC §4).

  Σ_valid [log(1 + Σ_neg e^{s̄/τ}) + log(1 + Σ_pos e^{−s̄/τ})] / num_groups; a
  group needs both a positive (A > 0) and a negative (A ≤ 0) sample to count.
  """
  s = as_groups(s_B.astype(fdtype()), group_size) / tau
  pos = as_groups(sg(adv_B), group_size) > 0
  neg = ~pos
  valid = jnp.any(pos, axis=1) & jnp.any(neg, axis=1)
  zeros = jnp.zeros((s.shape[0], 1), s.dtype)
  neg_in = jnp.concatenate([jnp.where(neg, s, -jnp.inf), zeros], axis=1)
  pos_in = jnp.concatenate([jnp.where(pos, -s, -jnp.inf), zeros], axis=1)
  neg_lse = jax.nn.logsumexp(neg_in, axis=1)
  pos_lse = jax.nn.logsumexp(pos_in, axis=1)
  loss = jnp.sum(jnp.where(valid, neg_lse + pos_lse, 0.0)) / num_groups
  # |dL/ds̄_k| = (1/τ) softmax weight of sample k in its class row (≤ 1/τ).
  weight = jnp.where(neg, jnp.exp(neg_in[:, :-1] - neg_lse[:, None]),
                     jnp.exp(pos_in[:, :-1] - pos_lse[:, None])) / tau
  weight = sg(jnp.where(valid[:, None], weight, 0.0))
  metrics = {"real/frac_valid_groups": jnp.mean(valid.astype(fdtype())),
             "real/weight_max": jnp.max(weight),
             "real/frac_pos": jnp.mean(pos.astype(fdtype()))}
  return loss, metrics


def real(pol, batch, cfg: LossConfig):
  """REAL: rewards as labels; KL and entropy are token-mean, no clip metrics."""
  if cfg.group_size < 1:
    raise ValueError("real needs group_size (num_generations) >= 1 in its LossConfig")
  logp, mask, norm = context(pol, batch, "real")
  old = sg(require(batch, "old_logp_BxT", "real")).astype(fdtype())
  if "adv_B" in batch:
    adv_B = batch["adv_B"]
  else:
    adv_B = seq_mean(require(batch, "adv_BxT", "real"), mask)
  s_B = seq_mean(logp - old, mask)
  main, metrics = real_from_scores(s_B, adv_B, cfg.group_size, cfg.real_tau,
                                   norm.num_rows / cfg.group_size)
  metrics.update(masked_stats("real/seq_logit", sg(s_B), jnp.ones_like(s_B)))
  return finish(main, pol, batch, cfg, mask, norm, metrics, agg="token-mean")


register_entry(KIND, "grpo", ppo_clip, LossConfig,
               doc="−agg(min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â)), optional dual clip")
register_entry(KIND, "dapo", ppo_clip, LossConfig,
               defaults={"eps_high": 0.28, "agg": "token-mean"},
               doc="PPO-clip with clip-higher ε_high = 0.28, token-mean")
register_entry(KIND, "gspo", gspo, LossConfig,
               defaults={"eps_low": 3e-4, "eps_high": 4e-4}, tags=frozenset({"sequence_ratio"}),
               doc="PPO-clip on s_i = exp(mean_t log ρ_t), ε = 3e-4 / 4e-4")
register_entry(KIND, "gspo_token", gspo_token, LossConfig,
               defaults={"eps_low": 3e-4, "eps_high": 4e-4}, tags=frozenset({"gspo_token"}),
               doc="log s_it = logπ − sg(logπ) + sg(log s_i), clipped like GSPO")
register_entry(KIND, "real", real, LossConfig, tags=frozenset({"sequence_classification"}),
               doc="Σ_valid lse([s̄_neg/τ, 0]) + lse([−s̄_pos/τ, 0]) / n_groups, τ = 0.5")
