"""TPU attention kernels: Pallas splash attention (training) and paged decode attention.

`splash_attention` is the full-sequence (causal, padded) attention of the training and
scoring forwards: JAX's splash kernel with a causal mask and the token mask as segment
ids (real tokens 1, padding 0), so a real query attends exactly the real keys at or
before it, as in `rljax.models.attention.attention`. Padding queries attend padding keys
(the dense reference averages all values there); their outputs are never read.

`paged_decode_attention` is one decode step's attention over the KV cache with JAX's
paged-attention kernel. The cache is left-padded per row (slot `index` is the newest for
every row); the kernel attends each row's first `length` slots, so each row's filled run
is gathered to the front of its pages first (that gather is a copy of the attended window
per layer and step, like the dense path's cache read).

Both run under `jax.shard_map` over the context mesh (`rljax.sharding.mesh_scope`): batch
over (data, fsdp), heads over tensor; XLA cannot partition a Mosaic kernel. Off TPU they
run interpreted, which is how the tests check their numerics on CPU: splash with its own
`interpret=True` (JAX 0.10's TPU interpret mode fails on the vmapped kernel: "safe_zip()
argument 1 has length 3 but argument 0 has length 4"), paged attention (no interpret
argument) under `jax.experimental.pallas.tpu.force_tpu_interpret_mode()`.

Shapes: B batch, T queries (= keys), H query heads, K kv heads, E head dim, W attended
cache slots.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from rljax import sharding as shd
from rljax.models import backend

_LANES = 128  # splash blocks are multiples of this


def _per_shard(fn, args, logical, out_logical):
  """fn(*args) directly, or under shard_map over the context mesh. Heads are split over
  tensor only when both q and kv heads divide (GQA groups stay whole)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.size == 1:
    return fn(*args)
  specs = [shd.logical_to_spec(lg, a.shape, mesh) for lg, a in zip(logical, args)]
  heads_split = {s[i] for s, lg in zip(specs, logical) for i, n in enumerate(lg)
                 if n in ("heads", "kv_heads")}
  if len(heads_split) > 1:  # q heads split, kv heads not (or vice versa): keep heads whole
    specs = [P(*(None if n in ("heads", "kv_heads") else s[i] for i, n in enumerate(lg)))
             for s, lg in zip(specs, logical)]
  batch_spec = specs[0][0]
  head_spec = next((s[i] for s, lg in zip(specs, logical) for i, n in enumerate(lg)
                    if n == "heads"), None)
  out_spec = P(*(batch_spec if n == "batch" else head_spec if n == "heads" else None
                 for n in out_logical))
  return jax.shard_map(fn, mesh=mesh, in_specs=tuple(specs), out_specs=out_spec,
                       check_vma=False)(*args)


def _block(t: int) -> int:
  return next(b for b in (512, 256, 128) if t % b == 0)


def on_tpu() -> bool:
  """Whether the program being traced targets TPU (`rljax.models.backend.platform`);
  elsewhere the kernels run interpreted (slow, exact)."""
  return backend.platform() == "tpu"


@functools.lru_cache(maxsize=32)
def _splash_kernel(heads: int, t: int, interpret: bool):
  from jax.experimental.pallas.ops.tpu import splash_attention as sa
  b = _block(t)
  sizes = sa.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b,
                        block_kv_dkv=b, block_kv_dkv_compute=b, block_q_dq=b, block_kv_dq=b)
  mask = sa.MultiHeadMask([sa.CausalMask((t, t))] * heads)
  with jax.ensure_compile_time_eval():  # the block-mask tables are constants, not tracers
    return sa.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1,
                              interpret=interpret)


def _splash_local(q_BxHxTxE, k_BxKxTxE, v_BxKxTxE, seg_BxT):
  from jax.experimental.pallas.ops.tpu.splash_attention import SegmentIds
  kernel = _splash_kernel(q_BxHxTxE.shape[1], q_BxHxTxE.shape[2], not on_tpu())
  return jax.vmap(lambda q, k, v, s: kernel(q, k, v, SegmentIds(s, s)))(
      q_BxHxTxE, k_BxKxTxE, v_BxKxTxE, seg_BxT)


def splash_attention(q_BxTxHxE, k_BxTxKxE, v_BxTxKxE, mask_BxT):
  """Causal grouped-query self-attention over a padded batch with the splash kernel;
  equals `attention(q, k, v, causal & mask[:, None, :])` on every real query. `mask_BxT`
  is the kernel's segment ids: 1 / 0 (real / padding), or packed rows' segment ids
  (`rljax.packing`: a query attends only its own segment)."""
  b, t, h, e = q_BxTxHxE.shape
  tp = -(-t // _LANES) * _LANES
  pad = lambda x: jnp.pad(x, ((0, 0), (0, tp - t)) + ((0, 0),) * (x.ndim - 2))
  to_heads = lambda x: jnp.swapaxes(pad(x), 1, 2)  # [B, N, T, E]
  q = to_heads((q_BxTxHxE / math.sqrt(e)).astype(q_BxTxHxE.dtype))
  seg = pad(mask_BxT.astype(jnp.int32))
  o = _per_shard(_splash_local, (q, to_heads(k_BxTxKxE), to_heads(v_BxTxKxE), seg),
                 (("batch", "heads", None, None), ("batch", "kv_heads", None, None),
                  ("batch", "kv_heads", None, None), ("batch", None)),
                 ("batch", "heads", None, None))
  return jnp.swapaxes(o, 1, 2)[:, :t].astype(q_BxTxHxE.dtype)


PAGE = 64  # decode page size (slots)


def _paged_local(q_BxHxE, k_BxWxKxE, v_BxWxKxE, lengths_B):
  from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention
  b, w, kh, e = k_BxWxKxE.shape
  pages = w // PAGE
  per_block = max(d for d in range(1, min(pages, 8) + 1) if pages % d == 0)
  to_pages = lambda x: jnp.moveaxis(x, 2, 0).reshape(kh, b * pages, PAGE, e)
  table = jnp.arange(b * pages, dtype=jnp.int32).reshape(b, pages)
  call = lambda: paged_attention(q_BxHxE, to_pages(k_BxWxKxE), to_pages(v_BxWxKxE),
                                 lengths_B, table, pages_per_compute_block=per_block)
  if on_tpu():
    return call()
  from jax.experimental.pallas import tpu as pltpu
  with pltpu.force_tpu_interpret_mode():
    return call()


def paged_decode_supported(head_dim: int, cache_dtype) -> bool:
  """Where the paged kernel keeps the dense numerics and lowers for TPU: it loads K / V as
  bfloat16 (a float32 cache would lose precision) and its blocks need a head dim that is a
  multiple of 128 (SmolLM2's 64 does not lower)."""
  return head_dim % 128 == 0 and jnp.dtype(cache_dtype) == jnp.bfloat16


def paged_decode_attention(q_BxHxE, k_BxWxKxE, v_BxWxKxE, valid_BxW):
  """One decode step: query b attends its filled slots, which must be one contiguous run
  (a left-padded prompt, then every generated token). Equals
  `attention(q[:, None], k, v, valid[:, None])[:, 0]`."""
  w = k_BxWxKxE.shape[1]
  wp = -(-w // PAGE) * PAGE
  length = valid_BxW.astype(jnp.int32).sum(1)
  start = jnp.argmax(valid_BxW, axis=1).astype(jnp.int32)
  # gather each row's run [start, start + length) to the front of its pages
  src = start[:, None] + jnp.arange(wp)
  front = lambda x: jnp.take_along_axis(x, jnp.minimum(src, w - 1)[:, :, None, None], axis=1)
  q = (q_BxHxE / math.sqrt(q_BxHxE.shape[-1])).astype(q_BxHxE.dtype)
  return _per_shard(_paged_local, (q, front(k_BxWxKxE), front(v_BxWxKxE), length),
                    (("batch", "heads", None), ("batch", None, "kv_heads", None),
                     ("batch", None, "kv_heads", None), ("batch",)),
                    ("batch", "heads", None))

