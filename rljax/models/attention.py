"""Grouped-query attention: the dense reference and a blockwise (flash-style) version.

`blockwise_attention` runs an online softmax over key blocks and has a custom VJP that
recomputes each block's scores in the backward pass, so neither pass keeps the float32
`[B, H, T, S]` scores or probabilities: the residuals are q, k, v, the output and one
log-sum-exp per query and head. Masked scores use the same finite `_NEG` as the dense
version, so a fully masked (padding) query row averages all values in both.

Shapes: B batch, T queries, S keys, H query heads, K kv heads, G = H / K, E head dim,
C key-block size, NB = S / C blocks.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

_NEG = -1e30


def attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, allowed_BxTxS, causal_block: int = 0):
  """Dense grouped-query attention with a boolean mask; softmax in float32.

  `causal_block` = C > 0 (the decoder's cache-less forward, where the mask is causal: no
  query attends a later key, T = S): the queries in blocks of C, each block against the keys
  up to its last query only, so the blocks above the diagonal are never computed (about
  half the scores at T ≫ C). Every query that attends a key gets the same output to float32
  rounding; a fully masked (padding) query averages the values of its block's keys instead
  of all values (its output is never read)."""
  t = q_BxTxHxE.shape[1]
  if causal_block and t == k_BxSxKxE.shape[1] and t > causal_block:
    return jnp.concatenate([
        attention(q_BxTxHxE[:, lo:lo + causal_block], k_BxSxKxE[:, :lo + causal_block],
                  v_BxSxKxE[:, :lo + causal_block],
                  allowed_BxTxS[:, lo:lo + causal_block, :lo + causal_block])
        for lo in range(0, t, causal_block)], axis=1)
  return _dense(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, allowed_BxTxS, head_major=False)


def cache_attention(q_BxTxHxE, k_BxKxSxE, v_BxKxSxE, allowed_BxTxS):
  """`attention` over keys / values stored kv-head-major, as the KV cache keeps them: each
  head's slots contiguous ([B, K, S, E]), the operand layout of both products (batch b, k),
  so a decode step reads the cache in place instead of transposing a copy of it per layer
  (`bench/decode_rows.py`). Equals `attention(q, swapaxes(k, 1, 2), swapaxes(v, 1, 2),
  allowed)` to float32 rounding."""
  return _dense(q_BxTxHxE, k_BxKxSxE, v_BxKxSxE, allowed_BxTxS, head_major=True)


def _dense(q_BxTxHxE, k, v, allowed_BxTxS, head_major: bool):
  """Scores, masked float32 softmax, values; keys / values [B, S, K, E] or, head_major,
  [B, K, S, E]. Head-major, the P·V product is written in its natural output order (a plain
  batched matmul, [B, K, G, T, E]) and the queries' axis moved after it."""
  b, t, h, e = q_BxTxHxE.shape
  kh = k.shape[1 if head_major else 2]
  kv = "bkse" if head_major else "bske"
  q = q_BxTxHxE.reshape(b, t, kh, h // kh, e)
  s = jnp.einsum(f"btkge,{kv}->bkgts", q, k, preferred_element_type=jnp.float32) / math.sqrt(e)
  s = jnp.where(allowed_BxTxS[:, None, None], s, _NEG)
  p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
  if not head_major:
    return jnp.einsum("bkgts,bske->btkge", p, v).reshape(b, t, h, e)
  o = jnp.einsum("bkgts,bkse->bkgte", p, v)
  return jnp.moveaxis(o, 3, 1).reshape(b, t, h, e)


def prefix_attention(q_BxTxHxE, k_BxKxSxE, v_BxKxSxE, allowed_BxTxS, pk_PxKxSpxE,
                     pv_PxKxSpxE, pvalid_PxSp):
  """`cache_attention` over a shared prefix followed by each row's own keys: rows
  `i * R .. (i + 1) * R - 1` (R = B / P) continue prompt i, whose keys / values
  `pk[i]` / `pv[i]` (valid where `pvalid[i]`; every prefix slot precedes every query) are
  stored once rather than once per row. Equals `cache_attention` over the keys
  `concat([repeat(pk, R), k], 2)` (values alike) with the mask `concat([repeat(pvalid, R)`
  broadcast over T`, allowed], -1)`: one softmax over the prefix slots then the row's own,
  in that order. The prefix is stored once per prompt (a sampler's G samples share its
  prefill) and expanded to the rows inside the step: each row's products then have the same
  shapes however the rows are grouped — R rows per prompt, or one row per prefix as in the
  compacting sampler — rather than R rows folded into one matmul, whose last bits differ.
  Keys and values are kv-head-major, as the cache stores them (`cache_attention`)."""
  b, t, h, e = q_BxTxHxE.shape
  p, kh, sp, _ = pk_PxKxSpxE.shape
  r, g = b // p, h // kh
  q = q_BxTxHxE.reshape(b, t, kh, g, e)
  # (the barrier keeps XLA from folding the repeat back into the matmul's rows)
  rows = lambda x: x if r == 1 else jax.lax.optimization_barrier(jnp.repeat(x, r, axis=0))
  s_pre = jnp.einsum("btkge,bkse->bkgts", q, rows(pk_PxKxSpxE),
                     preferred_element_type=jnp.float32)
  s_own = jnp.einsum("btkge,bkse->bkgts", q, k_BxKxSxE, preferred_element_type=jnp.float32)
  s = jnp.concatenate([s_pre, s_own], -1) / math.sqrt(e)
  allowed = jnp.concatenate(
      [jnp.broadcast_to(jnp.repeat(pvalid_PxSp, r, axis=0)[:, None], (b, t, sp)),
       allowed_BxTxS], -1)
  s = jnp.where(allowed[:, None, None], s, _NEG)
  pr = jax.nn.softmax(s, axis=-1).astype(v_BxKxSxE.dtype)
  f32 = jnp.float32  # the two partial products are summed before one rounding to v's dtype
  o = jnp.einsum("bkgts,bkse->bkgte", pr[..., :sp], rows(pv_PxKxSpxE),
                 preferred_element_type=f32)
  o = o + jnp.einsum("bkgts,bkse->bkgte", pr[..., sp:], v_BxKxSxE, preferred_element_type=f32)
  return jnp.moveaxis(o, 3, 1).reshape(b, t, h, e).astype(v_BxKxSxE.dtype)


def _blocks(k, v, allowed, c):
  """Keys / values [NB, B, C, K, E], the mask [NB, B, T, C] and which keys are real
  [NB, C] (padding keys get a score below every masked one: they never count)."""
  s = k.shape[1]
  pad = (-s) % c
  real = jnp.arange(s + pad).reshape(-1, c) < s
  if pad:
    k = jnp.pad(k, ((0, 0), (0, pad), (0, 0), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, pad), (0, 0), (0, 0)))
    allowed = jnp.pad(allowed, ((0, 0), (0, 0), (0, pad)))
  nb = k.shape[1] // c
  split = lambda x: jnp.moveaxis(x.reshape(x.shape[0], nb, c, *x.shape[2:]), 1, 0)
  a = allowed.reshape(allowed.shape[0], allowed.shape[1], nb, c)
  return split(k), split(v), (jnp.moveaxis(a, 2, 0), real)


def _scores(q_BxTxKxGxE, k_BxCxKxE, mask):
  allowed_BxTxC, real_C = mask
  s = jnp.einsum("btkge,bske->bkgts", q_BxTxKxGxE, k_BxCxKxE, preferred_element_type=jnp.float32)
  return jnp.where(real_C, jnp.where(allowed_BxTxC[:, None, None], s, _NEG), 2 * _NEG)


def _fwd(q, k, v, allowed, c):
  """q is pre-scaled [B,T,K,G,E]; returns (o [B,T,K,G,E], lse [B,K,G,T])."""
  b, t, kh, g, e = q.shape
  kb, vb, ab = _blocks(k, v, allowed, c)

  def body(carry, xs):
    m, l, acc = carry
    kj, vj, aj = xs
    s = _scores(q, kj, aj)
    m_new = jnp.maximum(m, s.max(-1))
    corr = jnp.exp(m - m_new)
    p = jnp.exp(s - m_new[..., None])
    l = l * corr + p.sum(-1)
    pv = jnp.einsum("bkgts,bske->btkge", p.astype(vj.dtype), vj,
                    preferred_element_type=jnp.float32)
    acc = acc * jnp.moveaxis(corr, 3, 1)[..., None] + pv
    return (m_new, l, acc), None

  init = (jnp.full((b, kh, g, t), -jnp.inf, jnp.float32), jnp.zeros((b, kh, g, t), jnp.float32),
          jnp.zeros((b, t, kh, g, e), jnp.float32))
  (m, l, acc), _ = jax.lax.scan(body, init, (kb, vb, ab))
  o = acc / jnp.moveaxis(l, 3, 1)[..., None]
  return o.astype(q.dtype), m + jnp.log(l)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _flash(q, k, v, allowed, c):
  return _fwd(q, k, v, allowed, c)[0]


def _flash_fwd(q, k, v, allowed, c):
  o, lse = _fwd(q, k, v, allowed, c)
  return o, (q, k, v, allowed, o, lse)


def _flash_bwd(c, res, do):
  q, k, v, allowed, o, lse = res
  s_len = k.shape[1]
  kb, vb, ab = _blocks(k, v, allowed, c)
  dof = do.astype(jnp.float32)
  delta = jnp.moveaxis(jnp.sum(dof * o.astype(jnp.float32), -1), 1, 3)  # [B,K,G,T]

  def body(dq, xs):
    kj, vj, aj = xs
    p = jnp.exp(_scores(q, kj, aj) - lse[..., None])  # [B,K,G,T,C]
    dv = jnp.einsum("bkgts,btkge->bske", p, dof)
    dp = jnp.einsum("btkge,bske->bkgts", dof, vj.astype(jnp.float32))
    ds = p * (dp - delta[..., None])
    dq = dq + jnp.einsum("bkgts,bske->btkge", ds, kj.astype(jnp.float32))
    dk = jnp.einsum("bkgts,btkge->bske", ds, q.astype(jnp.float32))
    return dq, (dk, dv)

  dq, (dk, dv) = jax.lax.scan(body, jnp.zeros(q.shape, jnp.float32), (kb, vb, ab))
  merge = lambda x: jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:])[:, :s_len]
  return dq.astype(q.dtype), merge(dk).astype(k.dtype), merge(dv).astype(v.dtype), None


_flash.defvjp(_flash_fwd, _flash_bwd)


def blockwise_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, allowed_BxTxS, block: int = 128):
  """Same result as `attention` (to float32 rounding) without keeping [B,H,T,S] scores."""
  b, t, h, e = q_BxTxHxE.shape
  kh = k_BxSxKxE.shape[2]
  q = (q_BxTxHxE / math.sqrt(e)).astype(q_BxTxHxE.dtype).reshape(b, t, kh, h // kh, e)
  o = _flash(q, k_BxSxKxE, v_BxSxKxE, allowed_BxTxS, min(block, k_BxSxKxE.shape[1]))
  return o.reshape(b, t, h, e)


def sdpa_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, allowed_BxTxS, causal: bool = False,
                   implementation: str = "xla"):
  """`attention` through `jax.nn.dot_product_attention` (attention="cudnn"): on GPU with
  implementation "cudnn" its fused cuDNN kernel, which skips the blocks above the diagonal
  when `causal` (the mask must then already be causal; it is applied as well, as an
  additive bias). Where cuDNN cannot take the shape (float32, a head dim over 256 or not a
  multiple of 8, an odd length with a mask), XLA's implementation runs instead. Scores and
  softmax are float32 in both; a fully masked query row averages all values, as in
  `attention`."""
  t, s, e = q_BxTxHxE.shape[1], k_BxSxKxE.shape[1], q_BxTxHxE.shape[-1]
  if implementation == "cudnn" and (
      q_BxTxHxE.dtype not in (jnp.bfloat16, jnp.float16) or e > 256 or e % 8 or t % 2
      or s % 2):
    implementation = "xla"
  return jax.nn.dot_product_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE,
                                      mask=allowed_BxTxS[:, None], is_causal=causal,
                                      implementation=implementation)
