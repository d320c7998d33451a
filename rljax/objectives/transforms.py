"""Token-advantage transforms, composed like optax transforms; CoRT (SPEC §3).

A `TokenTransform` is a pair of pure functions, plus an optional third:
  init() -> state
  update(adv_BxT, batch, state) -> (adv_BxT, new_state, metrics)
  keep(batch) -> (keep_BxT bool, metrics)   rejection only (else None): the tokens it keeps
                                            in the loss; the step removes the others from
                                            the loss, the normalizer and (by default) the
                                            group baseline before `update` runs
`chain(*ts)` threads a tuple of states and ANDs the keeps. Stateless transforms use `EmptyState()`.
All weights a transform applies are stop-gradient. Transforms are registered
under kind "transform" as factories `make(cfg) -> TokenTransform`.

CoRT's ramp counter k lives in its state (`CortState.step`, the number of
previous updates), like optax's schedule counts: call the transform chain
once per rollout batch, on the whole batch (before splitting it into
micro-batches), and checkpoint its state with the optimizer state.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

from rljax.objectives.common import Metrics, fdtype, masked_mean, masked_stats
from rljax import registry
from rljax.objectives.common import register_entry, require, sg

KIND = "transform"


class TokenTransform(NamedTuple):
  init: Callable[[], Any]
  update: Callable[[jax.Array, Mapping[str, jax.Array], Any],
                   tuple[jax.Array, Any, Metrics]]
  keep: Callable[[Mapping[str, jax.Array]], tuple[jax.Array, Metrics]] | None = None


class EmptyState(NamedTuple):
  """State of a stateless transform."""


def stateless(fn: Callable[[jax.Array, Mapping[str, jax.Array]],
                           tuple[jax.Array, Metrics]]) -> TokenTransform:
  """Wraps `fn(adv_BxT, batch) -> (adv_BxT, metrics)` as a transform."""

  def update(adv_BxT, batch, state):
    adv_BxT, metrics = fn(adv_BxT, batch)
    return adv_BxT, state, metrics

  return TokenTransform(EmptyState, update)


def identity() -> TokenTransform:
  return stateless(lambda adv_BxT, batch: (adv_BxT, {}))


def chain(*transforms: TokenTransform) -> TokenTransform:
  """Applies transforms in order; the state is the tuple of their states."""

  def init():
    return tuple(t.init() for t in transforms)

  def update(adv_BxT, batch, state):
    new_state, metrics = [], {}
    for i, (t, s) in enumerate(zip(transforms, state)):
      adv_BxT, s, m = t.update(adv_BxT, batch, s)
      new_state.append(s)
      for k, v in m.items():
        metrics[k if k not in metrics else f"{k}_{i}"] = v
    return adv_BxT, tuple(new_state), metrics

  keeps = [t.keep for t in transforms if t.keep is not None]

  def keep(batch):
    out, metrics = None, {}
    for fn in keeps:  # every criterion sees the same batch; a token stays if all keep it
      k, m = fn(batch)
      out = k if out is None else out & k
      metrics.update(m)
    return out, metrics

  return TokenTransform(init, update, keep if keeps else None)


# --------------------------------------------------------------------- CoRT


@dataclasses.dataclass(frozen=True)
class CortConfig:
  eta: float = 0.5  # weight strength: w̃ = 1 + η λ s, s ∈ (−½, ½)
  tau: float = 1.0  # s = σ((Δ − b)/τ) − ½
  bias: float = 0.0
  ramp_steps: int = 100  # K
  warmup_steps: int = 0  # k₀
  normalize: bool = True  # per-response mean of w over active tokens = 1
  ramp: bool = True  # SmoothStep λ_k; False: λ = 1
  perturbation_only: bool = False  # token advantage w − 1 instead of w·A

  def check(self):
    if not 0 < self.eta < 2:
      raise ValueError(f"cort eta must be in (0, 2) so that w̃ > 0, got {self.eta}")
    if self.tau <= 0:
      raise ValueError(f"cort tau must be > 0, got {self.tau}")
    if self.ramp_steps < 1 or self.warmup_steps < 0:
      raise ValueError("cort needs ramp_steps >= 1 and warmup_steps >= 0, got "
                       f"{self.ramp_steps}, {self.warmup_steps}")


class CortState(NamedTuple):
  step: jax.Array  # int32: updates so far (k)


def smoothstep(u: jax.Array) -> jax.Array:
  """λ = 3u² − 2u³ on u clipped to [0, 1]."""
  u = jnp.clip(u, 0.0, 1.0)
  return u * u * (3.0 - 2.0 * u)


def cort_lambda(step: jax.Array, cfg: CortConfig) -> jax.Array:
  """λ_k = SmoothStep(clip((k − k₀)/K, 0, 1)), or 1 without the ramp."""
  if not cfg.ramp:
    return jnp.float32(1.0)
  u = (jnp.asarray(step, jnp.float32) - cfg.warmup_steps) / cfg.ramp_steps
  return smoothstep(u)


def cort_weights(delta_BxT: jax.Array, mask_BxT: jax.Array, lam: jax.Array,
                 cfg: CortConfig) -> tuple[jax.Array, Metrics]:
  """Token weights w from Δ (stop-gradient); exactly 1 on padding."""
  active = mask_BxT > 0
  delta = jnp.where(active, sg(delta_BxT).astype(fdtype()), 0.0)
  s = jax.nn.sigmoid((delta - cfg.bias) / cfg.tau) - 0.5
  raw = jnp.where(active, 1.0 + cfg.eta * lam * s, 1.0)
  w = raw
  if cfg.normalize:
    w_bar_B = masked_mean(raw, active, axis=-1)
    w_bar_B = jnp.where(jnp.any(active, axis=-1), w_bar_B, 1.0)
    w = jnp.where(active, raw / w_bar_B[:, None], 1.0)
  metrics = {"cort/lambda": jnp.asarray(lam, jnp.float32),
             "cort/raw_weight_mean": masked_mean(raw, active),
             "cort/delta_std": jnp.sqrt(masked_mean(
                 jnp.square(delta - masked_mean(delta, active)), active)),
             "cort/frac_delta_pos": masked_mean((delta > 0).astype(fdtype()), active)}
  metrics.update(masked_stats("cort/weight", w, active))
  metrics["cort/weight_std"] = jnp.sqrt(masked_mean(
      jnp.square(w - metrics["cort/weight_mean"]), active))
  metrics.update(masked_stats("cort/delta", delta, active))
  return sg(w), metrics


def cort(cfg: CortConfig = CortConfig()) -> TokenTransform:
  """CoRT: Â = sg(w)·A from Δ = logp_plus − logp_minus (scores under θ̄)."""

  def init():
    return CortState(step=jnp.zeros([], jnp.int32))

  def update(adv_BxT, batch, state):
    mask = require(batch, "mask_BxT", "cort")
    delta = (require(batch, "logp_plus_BxT", "cort")
             - require(batch, "logp_minus_BxT", "cort"))
    w, metrics = cort_weights(delta, mask, cort_lambda(state.step, cfg), cfg)
    if cfg.perturbation_only:
      adv_BxT = jnp.where(mask > 0, w - 1.0, 0.0)
    else:
      adv_BxT = adv_BxT * w
    return adv_BxT, CortState(step=state.step + 1), metrics

  return TokenTransform(init, update)


# --------------------------------------------------------------------- oracle credit


@dataclasses.dataclass(frozen=True)
class OracleConfig:
  factor: float = 2.0  # raw weight on a labelled token (1 elsewhere) at λ = 1
  ramp_steps: int = 100  # K, as CoRT's
  warmup_steps: int = 0
  normalize: bool = True  # per-response mean of w over active tokens = 1, as CoRT's
  ramp: bool = True

  def check(self):
    if self.factor <= 0:
      raise ValueError(f"oracle_credit factor must be > 0 so that w > 0, got {self.factor}")
    if self.ramp_steps < 1 or self.warmup_steps < 0:
      raise ValueError("oracle_credit needs ramp_steps >= 1 and warmup_steps >= 0, got "
                       f"{self.ramp_steps}, {self.warmup_steps}")


def oracle_credit(cfg: OracleConfig = OracleConfig()) -> TokenTransform:
  """Token credit from ground-truth labels (`credit_label_BxT`: 1 on the tokens that decide
  a criterion, which only a synthetic task knows): w = 1 + λ_k (factor − 1)·label, normalized
  per response like CoRT's w̃, Â = sg(w)·A. The upper bound any token-credit method (CoRT's Δ)
  can reach on such a task; it uses CoRT's ramp λ_k and state."""

  def init():
    return CortState(step=jnp.zeros([], jnp.int32))

  def update(adv_BxT, batch, state):
    mask = require(batch, "mask_BxT", "oracle_credit")
    label = require(batch, "credit_label_BxT", "oracle_credit")
    active = mask > 0
    lam = cort_lambda(state.step, cfg)
    raw = jnp.where(active, 1.0 + lam * (cfg.factor - 1.0) * sg(label).astype(fdtype()), 1.0)
    w = raw
    if cfg.normalize:
      w_bar_B = masked_mean(raw, active, axis=-1)
      w = jnp.where(active, raw / jnp.where(jnp.any(active, axis=-1), w_bar_B, 1.0)[:, None],
                    1.0)
    metrics = {"oracle/lambda": jnp.asarray(lam, jnp.float32)}
    metrics.update(masked_stats("oracle/weight", w, active))
    return adv_BxT * sg(w), CortState(step=state.step + 1), metrics

  return TokenTransform(init, update)


def credit_metrics(adv_in_BxT: jax.Array, adv_out_BxT: jax.Array,
                   batch: Mapping[str, jax.Array]) -> Metrics:
  """Where the transforms put the credit, when the batch carries ground-truth labels
  (`credit_label_BxT`, synthetic tasks only; else {}): the labelled share of the loss tokens,
  the labelled share of Σ|Â| (= the token share for uniform weights), and the mean effective
  weight |Â|/|A| on labelled and on other tokens."""
  if "credit_label_BxT" not in batch:
    return {}
  active = batch["mask_BxT"] > 0
  lab = active & (batch["credit_label_BxT"] > 0)
  rest = active & ~lab
  a_in, a_out = jnp.abs(sg(adv_in_BxT)), jnp.abs(sg(adv_out_BxT))
  tot = jnp.maximum(jnp.where(active, a_out, 0.0).sum(), 1e-30)
  ratio = lambda m: jnp.where(m, a_out, 0.0).sum() / jnp.maximum(jnp.where(m, a_in, 0.0).sum(),
                                                                 1e-30)
  return {"credit/label_token_frac": lab.sum() / jnp.maximum(active.sum(), 1),
          "credit/label_adv_share": jnp.where(lab, a_out, 0.0).sum() / tot,
          "credit/label_weight": ratio(lab), "credit/other_weight": ratio(rest)}


def needs_replay(names) -> bool:
  """Whether any of the named transforms reads the CoRT replay (its registry tag)."""
  return any("replay" in (getattr(registry.get(KIND, n), "tags", ()) or ()) for n in names)


def criterion_deltas(logp_plus_BxT: jax.Array, logp_minus_CxBxT: jax.Array,
                     mask_BxT: jax.Array) -> jax.Array:
  """Per-criterion replay: mean Δ over active tokens when criterion c is removed, [C]."""
  delta = sg(logp_plus_BxT)[None] - sg(logp_minus_CxBxT)
  mask = jnp.broadcast_to(mask_BxT[None], delta.shape)
  return masked_mean(delta.reshape(delta.shape[0], -1),
                     mask.reshape(delta.shape[0], -1), axis=-1)


# "replay": the transform reads the CoRT replay scores (ℓ⁻ of the rubric-free rows)
_CORT_TAGS = frozenset({"token_reweight", "response_normalized", "replay"})
register_entry(KIND, "cort", cort, CortConfig, tags=_CORT_TAGS,
               doc="Â = sg(w)·A, w = normalize(1 + η λ_k (σ((Δ−b)/τ) − ½))")
register_entry(KIND, "cort_no_norm", cort, CortConfig, tags=frozenset({"token_reweight", "replay"}),
               fixed={"normalize": False}, doc="CoRT without response normalization")
register_entry(KIND, "cort_no_ramp", cort, CortConfig, tags=_CORT_TAGS,
               fixed={"ramp": False}, doc="CoRT with λ = 1 from the first step")
register_entry(KIND, "cort_no_norm_no_ramp", cort, CortConfig,
               tags=frozenset({"token_reweight", "replay"}),
               fixed={"normalize": False, "ramp": False}, doc="CoRT without either")
register_entry(KIND, "cort_perturb_only", cort, CortConfig,
               tags=_CORT_TAGS | {"replaces_advantage"},
               fixed={"perturbation_only": True},
               doc="CoRT-only perturbation: Â = sg(w) − 1 (drops A; unstable)")
register_entry(KIND, "oracle_credit", oracle_credit, OracleConfig,
               tags=frozenset({"token_reweight", "response_normalized", "credit_labels"}),
               doc="Â = sg(w)·A, w = normalize(1 + λ_k (factor − 1)·label): ground-truth "
                   "token credit (synthetic tasks)")
