"""The eight mismatch estimators of the SC paper's table, built from the library's registry
entries (the losses and transforms the trainer uses), plus their expected update over the
next token in closed form (Rao-Blackwellized: exact over the token, Monte Carlo over the
prefix), written with the library's own weight / centering primitives.

One update per rollout batch (the SC paper's setting): π_old = π_θ, so the PPO ratio is 1
and GRPO's loss has PG's gradient; TIS / MIS / BPO are the library's token transforms
(the trainer's `tis` / `mis` / `bpo` configs) in front of the `pg` loss.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rljax import registry
from rljax.objectives import BPOConfig, LossConfig, Normalizer, bpo_weight
from rljax.objectives.mismatch import weighted_mass
from rljax.objectives.score_centering import centering_coefficients

# name: (loss, transform, IS weight f used by the loss / transform, head: full | topk | None)
ESTIMATORS = {
    "PG": ("pg", None, "none", None),
    "TIS": ("pg", "tis", "tis", None),
    "MIS": ("pg", "mis", "mis", None),
    "SC": ("sc", None, "none", "full"),
    "top-k SC": ("topk_sc", None, "none", "topk"),
    "TIS+SC": ("sc_tis", None, "tis", "full"),
    "MIS+SC": ("sc_mis", None, "mis", "full"),
    "BPO": ("pg", "bpo", "bpo", None),
}
SC_FAMILY = ("SC", "top-k SC", "TIS+SC", "MIS+SC")


def surrogate(name: str, pol: dict, batch: dict, agg: str = "token-mean"):
  """The library loss of estimator `name` (after its token transform), a scalar."""
  loss, transform, _, _ = ESTIMATORS[name]
  if transform is not None:
    entry = registry.get("transform", transform)
    t = entry(entry.make_config())
    adv, _, _ = t.update(batch["adv_BxT"], batch, t.init())
    batch = dict(batch, adv_BxT=jax.lax.stop_gradient(adv))
  entry = registry.get("loss", loss)
  return entry(pol, batch, entry.make_config(agg=agg))[0]


def head_ids(name: str, logq_NxV, k: int):
  """The recorded head for `name`: the whole vocabulary, or the sampler's top-k."""
  head = ESTIMATORS[name][3]
  if head == "full":
    return jnp.broadcast_to(jnp.arange(logq_NxV.shape[-1], dtype=jnp.int32), logq_NxV.shape)
  if head == "topk":
    return jax.lax.top_k(logq_NxV, k)[1].astype(jnp.int32)
  return None


def expected_ascent_logits(name: str, logp_NxV, logq_NxV, adv_N, k: int = 32):
  """E_{a~q}[−∂L(a)/∂logits] per position [N, V] with logits as the parameters.

  −∇L(a) = A (w_a z_a − Σ_H c_v z_v) with z_v = e_v − p, so the expectation is
  A [(M − ΣM·p) − (C − ΣC·p)] with M_v = q_v·w_v (the library's `weighted_mass`, or q·ω̄
  for BPO) and C the library's centering coefficients on the head H (SC family only).
  """
  _, _, kind, head = ESTIMATORS[name]
  p = jnp.exp(logp_NxV)
  if kind == "bpo":
    omega_bar, _ = bpo_weight(logp_NxV, logq_NxV, adv_N[:, None], BPOConfig())
    mass = jnp.exp(logq_NxV) * omega_bar
  else:
    c = LossConfig()
    mass = weighted_mass(logp_NxV, logq_NxV, kind, c.is_cap, c.is_low, c.is_high)
  e = mass - jnp.sum(mass, -1, keepdims=True) * p
  if head is not None:
    ids = head_ids(name, logq_NxV, k)
    hp = jnp.take_along_axis(logp_NxV, ids, -1)
    hq = jnp.take_along_axis(logq_NxV, ids, -1)
    coef, _ = centering_coefficients(hp, hq, jnp.isfinite(hq), LossConfig(is_weight=kind),
                                     tail_fill=head == "topk")
    c_full = jnp.zeros_like(p).at[jnp.arange(p.shape[0])[:, None], ids].add(coef)
    e = e - (c_full - jnp.sum(coef, -1, keepdims=True) * p)
  return adv_N[:, None] * e


def brute_force_ascent_logits(name: str, logits_V, logq_V, adv: float, k: int = 32,
                              ids_K=None):
  """Σ_a q_a · (−∂L(a)/∂logits) by enumerating every action a through the library loss
  (one row per action, advantage q_a·A, summed): the reference for the closed form.
  `ids_K` overrides the recorded head (default: as `head_ids`)."""
  logq_V = jnp.asarray(logq_V, jnp.float32)
  if ids_K is None:
    ids = head_ids(name, logq_V[None], k)
    ids_K = None if ids is None else ids[0]
  return _brute_force(name, jnp.asarray(logits_V, jnp.float32), logq_V, jnp.float32(adv), ids_K)


@functools.partial(jax.jit, static_argnums=0)
def _brute_force(name, logits_V, logq_V, adv, ids_K):
  v = logits_V.shape[0]

  def total(logits):
    logp = jax.nn.log_softmax(logits)
    pol = {"logp_BxT": logp[:, None]}
    batch = {"mask_BxT": jnp.ones((v, 1)), "adv_BxT": (jnp.exp(logq_V) * adv)[:, None],
             "old_logp_BxT": jax.lax.stop_gradient(logp)[:, None],
             "sampler_logp_BxT": logq_V[:, None],
             "normalizer": Normalizer(jnp.float32(1), jnp.float32(1), jnp.float32(v),
                                      jnp.float32(1))}
    if ids_K is not None:
      kk = ids_K.shape[-1]
      pol["head_logp_BxTxK"] = jnp.broadcast_to(logp[ids_K], (v, 1, kk))
      batch["head_logq_BxTxK"] = jnp.broadcast_to(logq_V[ids_K], (v, 1, kk))
      batch["head_ids_BxTxK"] = jnp.broadcast_to(ids_K, (v, 1, kk))
    return surrogate(name, pol, batch, agg="token-mean")  # num_tokens = 1: a plain sum

  return -jax.grad(total)(logits_V)
