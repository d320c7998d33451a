"""Shared test helpers: a tiny linear-softmax policy and stop-gradient replay."""
from __future__ import annotations

import contextlib
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np

from rljax.objectives import common, losses, mismatch, score_centering, transforms

SG_MODULES = (common, transforms, mismatch, losses, score_centering)


def log_softmax_logits(W_VxD, X_BxTxD):
  return jax.nn.log_softmax(jnp.einsum("btd,vd->btv", X_BxTxD, W_VxD), axis=-1)


def gather(logp_BxTxV, ids_BxT):
  return jnp.take_along_axis(logp_BxTxV, ids_BxT[..., None], axis=-1)[..., 0]


def pol_from(W, X, tokens_BxT, head_ids_BxTxK=None):
  """Trainer quantities that carry gradient, from parameters W."""
  logp_V = log_softmax_logits(W, X)
  pol = {"logp_BxT": gather(logp_V, tokens_BxT),
         "entropy_BxT": -jnp.sum(jnp.exp(logp_V) * logp_V, axis=-1)}
  if head_ids_BxTxK is not None:
    pol["head_logp_BxTxK"] = jnp.take_along_axis(logp_V, head_ids_BxTxK, axis=-1)
  return pol


def make_problem(seed=0, B=4, T=3, V=5, D=3, K=3, full_head=False, dtype=np.float32):
  """Random policy W, frozen copies (old, sampler, ref) and a batch of arrays."""
  rng = np.random.default_rng(seed)
  W = rng.normal(size=(V, D)).astype(dtype)
  X = rng.normal(size=(B, T, D)).astype(dtype)
  tokens = rng.integers(0, V, size=(B, T))
  mask = np.ones((B, T), dtype)
  mask[0, T - 1] = 0  # some padding
  if B > 2:
    mask[2, 1:] = 0
  adv_B = rng.normal(size=(B,)).astype(dtype)
  adv_B[::2] = np.abs(adv_B[::2])  # every group of 2 has a positive ...
  adv_B[1::2] = -np.abs(adv_B[1::2])  # ... and a negative sample
  tok_w = rng.uniform(0.5, 1.5, size=(B, T)).astype(dtype)
  logp_V = lambda W_: np.asarray(log_softmax_logits(jnp.asarray(W_), jnp.asarray(X)))
  W_old = W + 0.3 * rng.normal(size=W.shape).astype(dtype)
  W_q = W + 0.5 * rng.normal(size=W.shape).astype(dtype)
  W_ref = W + 0.3 * rng.normal(size=W.shape).astype(dtype)
  logq_V = logp_V(W_q)
  if full_head:
    head_ids = np.broadcast_to(np.arange(V), (B, T, V)).copy()
  else:
    head_ids = np.argsort(-logq_V, axis=-1)[..., :K]
  batch = {
      "mask_BxT": mask,
      "adv_B": adv_B,
      "adv_BxT": adv_B[:, None] * tok_w * mask,
      "old_logp_BxT": np.take_along_axis(logp_V(W_old), tokens[..., None], -1)[..., 0],
      "sampler_logp_BxT": np.take_along_axis(logq_V, tokens[..., None], -1)[..., 0],
      "ref_logp_BxT": np.take_along_axis(logp_V(W_ref), tokens[..., None], -1)[..., 0],
      "head_ids_BxTxK": head_ids,
      "head_logq_BxTxK": np.take_along_axis(logq_V, head_ids, -1),
  }
  return {"W": W, "X": X, "tokens": tokens, "head_ids": head_ids, "batch": batch}


def slice_rows(batch, lo, hi):
  return {k: (v[lo:hi] if hasattr(v, "shape") and v.ndim else v) for k, v in batch.items()}


class SgReplay:
  """Stand-in for `sg`: records detached values once, then replays them in order.

  Replaying freezes every stop-gradient quantity at the base point, so the
  finite differences of the loss value measure the surrogate's gradient.
  """

  def __init__(self):
    self.values, self.i, self.recording = [], 0, True

  def __call__(self, x):
    if self.recording:
      v = jax.lax.stop_gradient(x)
      self.values.append(v)
      return v
    v = self.values[self.i]
    self.i += 1
    return v

  @contextlib.contextmanager
  def active(self):
    with contextlib.ExitStack() as stack:
      for mod in SG_MODULES:
        if hasattr(mod, "sg"):
          stack.enter_context(mock.patch.object(mod, "sg", self))
      yield self

  def start_replay(self):
    self.recording, self.i = False, 0
