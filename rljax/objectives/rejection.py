"""Rejection of off-distribution samples (the third mismatch treatment, beside TIS and MIS).

With r = p/q per token (p = π_old(y), the trainer's score of the batch; q the sampler's
recorded probability of the token it emitted) a rejection criterion removes tokens or whole
responses from the loss. Unlike MIS (which zeroes a weight and keeps the token in the
normalizer) a rejected token is out of the loss, out of every normalizer count and, by
default, its response is out of the group baseline (`baseline="kept"`: the group advantage is
recomputed over the kept responses; `"all"`: the rejected responses' rewards stay in it).

Criteria (all on the tokens already in the loss, in log space):
  ratio   token:    keep t   iff  l ≤ r_t ≤ u
          seq_geo:  keep i   iff  l ≤ exp(mean_t log r_t) ≤ u
          seq_prod: keep i   iff  l ≤ exp(Σ_t log r_t) ≤ u             (l = 0 means 1/u)
  veto    seq:      keep i   iff  min_t r_t ≥ floor                      ("catastrophic" tokens)
  k3      token:    keep t   iff  k3_t ≤ κ,  k3_t = r_t − 1 − log r_t    (KL(q‖p) estimate)
          seq_mean: keep i   iff  mean_t k3_t ≤ κ
          seq_sum:  keep i   iff  Σ_t k3_t ≤ κ
log r is clipped to ±20 before exp (overflow guard), as everywhere in the objectives.
A response with no token in the loss contributes nothing and is counted as neither kept
nor rejected. The transforms only choose tokens (`TokenTransform.keep`); their `update` is
the identity, so they compose with any weight transform (e.g. `rej_seq_prod,tis`).
"""
from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from rljax.objectives.common import check_choice, fdtype, length_bin_fracs, masked_mean
from rljax.objectives.common import register_entry
from rljax.objectives.mismatch import mismatch_log_ratio
from rljax.objectives.transforms import EmptyState, KIND, TokenTransform

CRITERIA = {"ratio": ("token", "seq_geo", "seq_prod"), "veto": ("seq",),
            "k3": ("token", "seq_mean", "seq_sum")}
BASELINES = ("kept", "all")
_CLIP = 20.0


@dataclasses.dataclass(frozen=True)
class RejectConfig:
  criterion: str = "ratio"  # ratio | veto | k3
  level: str = "token"  # ratio: token | seq_geo | seq_prod; veto: seq; k3: token | seq_mean | seq_sum
  high: float = 2.0  # ratio: keep r ≤ u
  low: float = 0.0  # ratio: keep r ≥ l (0: l = 1/u)
  floor: float = 1e-4  # veto: reject a response with any token ratio below this
  max_kl: float = 0.5  # k3: keep K3 ≤ κ
  baseline: str = "kept"  # group advantage over the kept responses | all responses

  def check(self):
    check_choice("rejection criterion", self.criterion, tuple(CRITERIA))
    check_choice(f"{self.criterion} rejection level", self.level, CRITERIA[self.criterion])
    check_choice("rejection baseline", self.baseline, BASELINES)
    if self.criterion == "ratio" and not (self.high > 0 and 0 <= self.low < self.high
                                          and (self.low or 1 / self.high) < self.high):
      raise ValueError(f"ratio rejection needs 0 <= low < high and 1/high < high (low = 0: "
                       f"1/high), got low={self.low}, high={self.high}")
    if self.criterion == "veto" and not 0 < self.floor < 1:
      raise ValueError(f"veto floor must be in (0, 1), got {self.floor}")
    if self.criterion == "k3" and self.max_kl <= 0:
      raise ValueError(f"k3 rejection needs max_kl > 0, got {self.max_kl}")

  @property
  def bounds(self) -> tuple[float, float]:
    return (self.low or 1.0 / self.high), self.high


def log_ratio(batch, who: str):
  """(log r clipped to ±20, active mask) on the tokens in the loss, stop-gradient."""
  lr, mask = mismatch_log_ratio(batch, who)
  return jnp.clip(lr, -_CLIP, _CLIP), mask > 0


def k3(log_r):
  """r − 1 − log r ≥ 0 from log r."""
  return jnp.expm1(log_r) - log_r


def keep_mask(batch, cfg: RejectConfig, who: str = "rejection"):
  """(keep_BxT bool, statistic, per_token): which active tokens the criterion keeps, the
  statistic it thresholds ([B, T] per token or [B] per response)."""
  lr, active = log_ratio(batch, who)
  n_B = jnp.maximum(jnp.sum(active, axis=-1), 1)
  if cfg.criterion == "veto":
    low_B = jnp.min(jnp.where(active, lr, jnp.inf), axis=-1)
    stat, ok = low_B, low_B >= math.log(cfg.floor)
  elif cfg.criterion == "ratio":
    lo, hi = (math.log(b) for b in cfg.bounds)
    if cfg.level == "token":
      stat = lr
    else:
      stat = jnp.sum(lr, axis=-1)
      if cfg.level == "seq_geo":
        stat = stat / n_B
    ok = (stat >= lo) & (stat <= hi)
  else:
    kt = jnp.where(active, k3(lr), 0.0)
    stat = kt if cfg.level == "token" else jnp.sum(kt, axis=-1)
    if cfg.level == "seq_mean":
      stat = stat / n_B
    ok = stat <= cfg.max_kl
  per_token = ok.ndim == 2
  keep = active & (ok if per_token else ok[:, None])
  return keep, stat, per_token


def registered_name(criterion: str, level: str) -> str:
  """rej[_k3][_level] (token level: no suffix), or rej_veto."""
  if criterion == "veto":
    return "rej_veto"
  return ("rej" + ("" if criterion == "ratio" else "_k3")
          + ("" if level == "token" else f"_{level}"))


def rejection(cfg: RejectConfig = RejectConfig()) -> TokenTransform:
  """A rejection criterion as a transform: `keep` chooses the tokens, `update` is identity."""
  name = registered_name(cfg.criterion, cfg.level)

  def keep(batch):
    keep_BxT, stat, per_token = keep_mask(batch, cfg, name)
    active = batch["mask_BxT"] > 0
    has_B = jnp.any(active, axis=-1)
    rejected_B = has_B & ~jnp.all(keep_BxT | ~active, axis=-1)  # lost at least one token
    dropped_B = has_B & ~jnp.any(keep_BxT, axis=-1)  # lost all of them
    f = lambda x: x.astype(fdtype())
    metrics = {f"{name}/frac_tokens_rejected": masked_mean(f(active & ~keep_BxT), active),
               f"{name}/frac_seqs_rejected": masked_mean(f(dropped_B), has_B),
               f"{name}/frac_seqs_touched": masked_mean(f(rejected_B), has_B),
               f"{name}/num_seqs_rejected": jnp.sum(f(dropped_B))}
    stat_mask = active if per_token else has_B
    metrics[f"{name}/stat_mean"] = masked_mean(jnp.where(stat_mask, stat, 0.0), stat_mask)
    metrics.update(length_bin_fracs(f"{name}/frac_seqs_rejected", dropped_B, active))
    return keep_BxT, metrics

  return TokenTransform(EmptyState, lambda adv, batch, state: (adv, state, {}), keep)


_TAGS = frozenset({"rejection"})
_DOC = {"rej": "reject tokens with r = π_old/q outside [l, u] (default [1/2, 2])",
        "rej_seq_geo": "reject responses whose geometric-mean ratio is outside [1/1.001, 1.001]",
        "rej_seq_prod": "reject responses whose ratio product is outside [1/2, 2]",
        "rej_veto": "reject responses with any token ratio below 1e-4",
        "rej_k3": "reject tokens with k3 = r − 1 − log r above 0.5",
        "rej_k3_seq_mean": "reject responses whose mean k3 is above 0.01",
        "rej_k3_seq_sum": "reject responses whose summed k3 (sequence KL(q‖p)) is above 0.5"}
_DEFAULTS = {"rej_seq_geo": {"high": 1.001}, "rej_k3_seq_mean": {"max_kl": 0.01}}
for _crit, _levels in CRITERIA.items():
  for _level in _levels:
    _name = registered_name(_crit, _level)
    register_entry(KIND, _name, rejection, RejectConfig, tags=_TAGS,
                   defaults=_DEFAULTS.get(_name, {}),
                   fixed={"criterion": _crit, "level": _level}, doc=_DOC[_name])
