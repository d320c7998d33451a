"""One token per row from the sampler's distribution, with its exact log q (and head).

The distribution is always `rljax.logprobs.sampling_logits` (temperature, then top-k,
then top-p, renormalized), the one the trainer scores. What changes is the work:

- no truncation: a two-level inverse CDF over the tempered logits (block sums, then one
  block) — one uniform per row, no [B, V] cumulative sum and no V Gumbels (on CPU the
  threefry bits of V Gumbels cost 6x the whole full-vocabulary inverse CDF);
- top-k and / or top-p: the same transform over a sorted `lax.top_k` prefix (top_k, or
  `top_p_prefix` candidates for top-p alone) instead of a full-vocabulary sort. The
  prefix is used only where it provably holds the whole support (no ties at the cut
  outside it; top-p mass reached inside it); otherwise the step falls back to the full
  transform (`lax.cond`), so the recorded log q is always the distribution drawn from.

Shapes: B rows, V vocabulary, C candidates in the prefix, K recorded head size.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax.logprobs import sampling_logits
from rljax.rollout.config import SamplerConfig

_NEG_INF = -jnp.inf
_BLOCK = 256  # inverse-CDF block: ~sqrt(V) keeps both searches short


def _last_positive(x_BxN):
  return x_BxN.shape[-1] - 1 - jnp.argmax(x_BxN[:, ::-1] > 0, axis=-1)


def draw(keys_B, logits_BxV):
  """(token_B, logz_B): one draw per row from softmax(logits) (-inf: outside the support).

  Inverse CDF in two levels: find the block of `_BLOCK` tokens where a uniform falls in
  the cumulative block sums, then the token inside that block. Tokens with q = 0 are
  never drawn; each token's probability is exact up to float32 rounding of the sums.
  logz_B = logsumexp(logits) from the same sums, so log q(token) = logits[token] - logz.
  """
  b, v = logits_BxV.shape
  c = min(_BLOCK, v)
  nb = -(-v // c)
  x = logits_BxV.astype(jnp.float32)
  m = jnp.max(x, axis=-1, keepdims=True)
  q = jnp.pad(jnp.exp(x - m), ((0, 0), (0, nb * c - v)))
  q_BxNbxC = q.reshape(b, nb, c)
  block_B_Nb = q_BxNbxC.sum(-1)
  cum = jnp.cumsum(block_B_Nb, axis=-1)
  total = cum[:, -1]
  u = jax.vmap(jax.random.uniform)(keys_B) * total
  blk = jnp.minimum(jnp.sum(cum <= u[:, None], axis=-1), _last_positive(block_B_Nb))
  inner_BxC = jnp.take_along_axis(q_BxNbxC, blk[:, None, None], axis=1)[:, 0]
  before = jnp.where(blk > 0, jnp.take_along_axis(cum, jnp.maximum(blk - 1, 0)[:, None],
                                                  axis=-1)[:, 0], 0.0)
  icum = jnp.cumsum(inner_BxC, axis=-1)
  j = jnp.minimum(jnp.sum(icum <= (u - before)[:, None], axis=-1), _last_positive(inner_BxC))
  return (blk * c + j).astype(jnp.int32), m[:, 0] + jnp.log(total)


def _pick(x_BxV, tok_B):
  return jnp.take_along_axis(x_BxV, tok_B[:, None], axis=-1)[:, 0]


def _full(logits_BxV, keys_B, cfg: SamplerConfig, k_head: int):
  """The reference: the whole-vocabulary transform, then the draw."""
  b, v = logits_BxV.shape
  x = sampling_logits(logits_BxV, cfg.temperature, cfg.top_k, cfg.top_p)
  tok, logz = draw(keys_B, x)
  logq_all = x - logz[:, None]
  logq = _pick(logq_all, tok)
  if not k_head:
    return tok, logq, None, None
  if k_head == v:
    return tok, logq, jnp.broadcast_to(jnp.arange(v, dtype=jnp.int32), (b, v)), logq_all
  head_logq, ids = jax.lax.top_k(logq_all, k_head)
  return tok, logq, ids.astype(jnp.int32), head_logq


def prefix_size(cfg: SamplerConfig, vocab: int) -> int:
  """Candidates of the top-k prefix path (0: no truncation, so no prefix)."""
  if cfg.top_k and cfg.top_k < vocab:
    return cfg.top_k
  return min(cfg.top_p_prefix, vocab) if cfg.top_p < 1.0 else 0


def _prefix(x_BxV, keys_B, cfg: SamplerConfig, k_head: int, c: int):
  """The truncated distribution over the sorted top-c prefix, and whether it is exact."""
  vals, ids = jax.lax.top_k(x_BxV, c)
  count_ge = lambda a, t: jnp.sum(a >= t, axis=-1)
  k_on = bool(cfg.top_k and cfg.top_k < x_BxV.shape[-1])
  thr = vals[:, -1:]
  ok = jnp.ones(vals.shape[:1], bool)
  if k_on:  # top-k keeps ties at the k-th value: exact if none lies outside the prefix
    ok = count_ge(x_BxV, thr) == c
  if cfg.top_p < 1.0:
    if k_on:
      probs = jax.nn.softmax(vals, axis=-1)
    else:
      probs = jnp.exp(vals - jax.nn.logsumexp(x_BxV, axis=-1, keepdims=True))
    cum = jnp.cumsum(probs, axis=-1)
    keep = cum - probs < cfg.top_p  # always keeps the first
    thr = jnp.min(jnp.where(keep, vals, jnp.inf), axis=-1, keepdims=True)
    if not k_on:  # the nucleus ends inside the prefix
      ok &= cum[:, -1] >= cfg.top_p
    ok &= count_ge(x_BxV, thr) == count_ge(vals, thr)
  xs = jnp.where(vals >= thr, vals, _NEG_INF)
  j, logz = draw(keys_B, xs)
  logq_BxC = xs - logz[:, None]
  tok = _pick(ids, j).astype(jnp.int32)
  out = (tok, _pick(logq_BxC, j), ids[:, :k_head].astype(jnp.int32) if k_head else None,
         logq_BxC[:, :k_head] if k_head else None)
  return out, jnp.all(ok)


def sample_step(logits_BxV, keys_B, step, cfg: SamplerConfig, k_head: int):
  """(token_B, logq_B, head_ids_BxK | None, head_logq_BxK | None) for one position."""
  b, v = logits_BxV.shape
  if cfg.greedy:
    if k_head:
      _, ids = jax.lax.top_k(logits_BxV, k_head)
      first = jnp.arange(k_head) == 0
      head_logq = jnp.broadcast_to(jnp.where(first, 0.0, _NEG_INF), (b, k_head))
      return ids[:, 0], jnp.zeros((b,), jnp.float32), ids, head_logq
    return jnp.argmax(logits_BxV, -1).astype(jnp.int32), jnp.zeros((b,), jnp.float32), None, None
  keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys_B, step)
  c = prefix_size(cfg, v)
  if c == 0:  # no truncation: tempered logits, blocked inverse CDF
    x = logits_BxV.astype(jnp.float32) / cfg.temperature
    tok, logz = draw(keys, x)
    logq = _pick(x, tok) - logz
    if not k_head:
      return tok, logq, None, None
    if k_head == v:
      return tok, logq, jnp.broadcast_to(jnp.arange(v, dtype=jnp.int32), (b, v)), x - logz[:, None]
    head, ids = jax.lax.top_k(x, k_head)
    return tok, logq, ids.astype(jnp.int32), head - logz[:, None]
  if k_head > c or k_head == v:  # the head reaches past the prefix
    return _full(logits_BxV, keys, cfg, k_head)
  x = logits_BxV.astype(jnp.float32) / cfg.temperature
  out, ok = _prefix(x, keys, cfg, k_head, c)
  return jax.lax.cond(ok, lambda: out, lambda: _full(logits_BxV, keys, cfg, k_head))
