"""Per-token log-probabilities and entropies without the full [B, T, V] logits.

One function serves the trainer, the scorer, the replay pass and the tests:
`token_logprobs` chunks the flattened tokens, computes each chunk's float32
logits from the final hidden states and the unembedding matrix inside a
`jax.checkpoint`ed scan body (so the backward pass recomputes them per chunk),
and applies `sampling_logits` — the exact temperature / top-k / top-p transform
the sampler draws from — before the log-softmax.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

_NEG_INF = -jnp.inf


def sampling_logits(logits_NxV, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
  """Logits of the distribution the sampler draws from (float32, -inf outside the support).

  temperature > 0 divides; top_k > 0 keeps the k largest (ties at the k-th value kept);
  top_p < 1 keeps the smallest prefix of the sorted distribution whose mass reaches top_p.
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0 for a distribution, got {temperature}")
  x = logits_NxV.astype(jnp.float32) / temperature
  if top_k and top_k < x.shape[-1]:
    kth = jax.lax.top_k(x, top_k)[0][..., -1:]
    x = jnp.where(x < kth, _NEG_INF, x)
  if top_p < 1.0:
    sorted_x = jnp.sort(x, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(sorted_x, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep = mass_before < top_p  # always keeps the first
    thresh = jnp.min(jnp.where(keep, sorted_x, jnp.inf), axis=-1, keepdims=True)
    x = jnp.where(x < thresh, _NEG_INF, x)
  return x


def _chunk_stats(h_CxD, w, tgt_C, head_CxK, temperature, top_k, top_p, layout):
  logits = jnp.einsum(f"cd,{layout}->cv", h_CxD, w.astype(h_CxD.dtype),
                      preferred_element_type=jnp.float32)
  x = sampling_logits(logits, temperature, top_k, top_p)
  logz = jax.nn.logsumexp(x, axis=-1, keepdims=True)
  logp_all = x - logz
  logp = jnp.take_along_axis(logp_all, tgt_C[:, None], axis=-1)[:, 0]
  p = jnp.exp(logp_all)
  ent = -jnp.sum(p * jnp.where(p > 0, logp_all, 0.0), axis=-1)
  head = None if head_CxK is None else jnp.take_along_axis(logp_all, head_CxK, axis=-1)
  return logp, ent, head


@functools.partial(jax.jit, static_argnames=("temperature", "top_k", "top_p", "chunk_size",
                                             "layout"))
def token_logprobs(hidden_BxTxD, unembed, targets_BxT, head_ids_BxTxK=None, *,
                   temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                   chunk_size: int = 512, layout: str = "dv"):
  """Returns dict(logp_BxT, entropy_BxT[, head_logp_BxTxK]) in float32; differentiable.

  `hidden_BxTxD[:, t]` predicts `targets_BxT[:, t]`. `unembed` is [D, V] (layout "dv") or
  [V, D] (layout "vd": a tied embedding as stored, see `Decoder.unembedding`, so its
  gradient accumulates in the embedding's own layout). Peak extra memory is one
  [chunk_size, V] float32 block instead of [B*T, V].
  """
  if layout not in ("dv", "vd"):
    raise ValueError(f"token_logprobs: layout={layout!r}; 'dv' for [D, V], 'vd' for [V, D]")
  b, t, d = hidden_BxTxD.shape
  n = b * t
  c = min(chunk_size, n)
  pad = (-n) % c
  h = jnp.pad(hidden_BxTxD.reshape(n, d), ((0, pad), (0, 0))).reshape(-1, c, d)
  tgt = jnp.pad(targets_BxT.reshape(n).astype(jnp.int32), (0, pad)).reshape(-1, c)
  xs = (h, tgt)
  if head_ids_BxTxK is not None:
    k = head_ids_BxTxK.shape[-1]
    xs = xs + (jnp.pad(head_ids_BxTxK.reshape(n, k).astype(jnp.int32),
                       ((0, pad), (0, 0))).reshape(-1, c, k),)

  @jax.checkpoint
  def chunk(w, x):
    head = x[2] if len(x) == 3 else None
    return _chunk_stats(x[0], w, x[1], head, temperature, top_k, top_p, layout)

  # The unembedding is a scan constant (closed over), not a carry: a carry would be
  # saved once per chunk for the backward pass.
  _, (logp, ent, head) = jax.lax.scan(lambda c, x: (c, chunk(unembed, x)), None, xs)
  out = {"logp_BxT": logp.reshape(-1)[:n].reshape(b, t),
         "entropy_BxT": ent.reshape(-1)[:n].reshape(b, t)}
  if head is not None:
    out["head_logp_BxTxK"] = head.reshape(-1, head.shape[-1])[:n].reshape(b, t, -1)
  return out


def naive_token_logprobs(hidden_BxTxD, unembed_DxV, targets_BxT, *, temperature=1.0,
                         top_k=0, top_p=1.0):
  """Reference: materializes [B, T, V]. For tests and the memory benchmark only."""
  logits = jnp.einsum("btd,dv->btv", hidden_BxTxD, unembed_DxV.astype(hidden_BxTxD.dtype),
                      preferred_element_type=jnp.float32)
  x = sampling_logits(logits, temperature, top_k, top_p)
  logp_all = jax.nn.log_softmax(x, axis=-1)
  logp = jnp.take_along_axis(logp_all, targets_BxT[..., None], axis=-1)[..., 0]
  p = jnp.exp(logp_all)
  ent = -jnp.sum(p * jnp.where(p > 0, logp_all, 0.0), axis=-1)
  return {"logp_BxT": logp, "entropy_BxT": ent}
