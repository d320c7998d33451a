"""Batched, jitted generation that records the distribution each token was drawn from.

Two jitted functions per (model, config, mesh): `prefill` runs each prompt once, keeps
its KV cache as the `SharedPrefix` its G rows attend (read once per prompt and decode
step, not copied per row; `shares_prefix` says where the cache is copied instead) and
samples the first token; `decode` runs `lax.while_loop`s over the remaining tokens (one
cached forward each; attention reads only the filled part of the rows' cache, grown in
buckets of `_ATTEND_BUCKET` slots) and stops when every row has emitted a stop token. On
CPU (one device, float32) attention runs in a compiled kernel instead
(`rljax.models.cpu_attention`, `uses_decode_kernel`): it reads the stacked cache and each
row's prompt cache in place and the filled length at run time, so one loop serves every
step; the prompt cache is padded to a multiple of `_PREFIX_BUCKET` slots, so the decode
programs serve every prompt length in a bucket. A quantized-KV copy (kv8 / kv4) keeps an
integer cache. The decode state, KV cache included, is donated, so the loop updates the
cache in place. Every row has its own PRNG key (split from its prompt's key, then folded
with the step), so a row's output does not depend on
the rest of the batch or on its left padding — which lets `compact_every` move the running
rows into smaller decode batches as others finish (`_decode_compacting`) without changing
any sample.

Shapes: B rows (prompts × G), P prompt length, N = max_new_tokens, S cache slots,
V vocabulary, K recorded head size.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding

from rljax import sharding as shd
from rljax.models import backend, pallas_attention
from rljax.models.decoder import (Decoder, KVCache, SharedPrefix, attention_impl, init_cache,
                                   kernel_decodes, positions_from_mask)
from rljax.rollout.config import SamplerConfig, cache_slots, check_inputs, resolve_stop_ids
from rljax.rollout.sampling import sample_step

_NEG_INF = -jnp.inf
_ATTEND_BUCKET = 64  # decode attention window grows by this many slots per while loop
# With the CPU decode kernel, the shared prompt cache is padded with empty slots to a multiple
# of this many (the kernel skips them: same bits), so the decode and compaction programs of
# every prompt length in a bucket are one: a new prompt length compiles only its prefill.
_PREFIX_BUCKET = 128


class Rollout(NamedTuple):
  """What `generate` returns; B = prompts × G rows, row `i * G + g` is sample g of prompt i.

  logq_BxN is the log-probability of each sampled token under the distribution it was
  drawn from (after temperature, top-k / top-p truncation and renormalization; 0 for
  greedy). The head (if recorded) holds that distribution's top-k ids and logprobs,
  sorted by logprob (-inf outside a truncated support and at masked positions).
  """
  tokens_BxN: jax.Array
  mask_BxN: jax.Array          # 1 on generated tokens up to and including the stop token
  truncated_B: jax.Array       # True where no stop token came within max_new_tokens
  logq_BxN: jax.Array          # float32; 0 where mask is 0
  topk_ids_BxNxK: jax.Array | None
  topk_logq_BxNxK: jax.Array | None
  prompt_ids_BxP: jax.Array    # the prompts, repeated G times (what the responses follow)
  prompt_mask_BxP: jax.Array


def sequences(r: Rollout):
  """(ids_BxT, mask_BxT) of prompt + response, T = P + N, for scoring with the trainer."""
  ids = jnp.concatenate([r.prompt_ids_BxP, r.tokens_BxN.astype(r.prompt_ids_BxP.dtype)], 1)
  mask = jnp.concatenate([r.prompt_mask_BxP.astype(jnp.int32), r.mask_BxN.astype(jnp.int32)], 1)
  return ids, mask


class DecodeState(NamedTuple):
  cache: KVCache
  tokens_BxN: jax.Array
  mask_BxN: jax.Array
  logq_BxN: jax.Array
  head_ids_BxNxK: jax.Array | None
  head_logq_BxNxK: jax.Array | None
  done_B: jax.Array            # emitted a stop token
  keys_B: jax.Array            # typed PRNG keys, one per row
  prompt_len_B: jax.Array
  step: jax.Array              # tokens generated so far (int32 scalar)


def _head_size(cfg: SamplerConfig, vocab: int) -> int:
  return vocab if cfg.record_topk == -1 else cfg.record_topk


def _write(ds: DecodeState, col, tok, logq, hid, hlq, stop_ids, pad_id: int):
  """Stores column `col`: the sample for live rows, pad / 0 / -inf for finished ones."""
  live = ~ds.done_B
  z = jnp.zeros((), jnp.int32)

  def upd(buf, val):
    return jax.lax.dynamic_update_slice(buf, val[:, None].astype(buf.dtype),
                                        (z, col) + (z,) * (buf.ndim - 2))

  out = ds._replace(
      tokens_BxN=upd(ds.tokens_BxN, jnp.where(live, tok, pad_id)),
      mask_BxN=upd(ds.mask_BxN, live),
      logq_BxN=upd(ds.logq_BxN, jnp.where(live, logq, 0.0)),
      done_B=ds.done_B | (live & jnp.isin(tok, jnp.asarray(stop_ids, jnp.int32))),
      step=jnp.asarray(col, jnp.int32) + 1)
  if hid is not None:
    out = out._replace(
        head_ids_BxNxK=upd(ds.head_ids_BxNxK, jnp.where(live[:, None], hid, 0)),
        head_logq_BxNxK=upd(ds.head_logq_BxNxK, jnp.where(live[:, None], hlq, _NEG_INF)))
  return out


def _constrain(ds: DecodeState, mesh) -> DecodeState:
  """Batch over (data, fsdp), kv heads over tensor; the scalars replicated."""
  if mesh is None:
    return ds

  def put(x, logical):
    spec = shd.logical_to_spec(logical, x.shape, mesh)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

  def batch(x):
    return None if x is None else put(x, ("batch",) + (None,) * (x.ndim - 1))

  c = ds.cache
  kv = ("layers", "batch", "kv_heads", None, "head_dim")
  scale = lambda x: None if x is None else put(x, kv[:-1])
  pre = c.prefix
  if pre is not None:  # each prompt's keys next to its rows
    pre = SharedPrefix(put(pre.k_LxPxKxSxE, kv), put(pre.v_LxPxKxSxE, kv), batch(pre.valid_PxS),
                       scale(pre.k_scale_LxPxKxS), scale(pre.v_scale_LxPxKxS))
  cache = KVCache(put(c.k_LxBxKxSxE, kv), put(c.v_LxBxKxSxE, kv), batch(c.valid_BxS),
                  put(c.index, ()), scale(c.k_scale_LxBxKxS), scale(c.v_scale_LxBxKxS), pre)
  return DecodeState(cache, *(batch(x) for x in ds[1:-1]), put(ds.step, ()))


def _kv_bits(model: Decoder) -> int:
  return int(getattr(model.numerics, "kv_bits", 0) or 0)


def shares_prefix(model_cfg, kv_bits: int, mesh) -> bool:
  """Whether decode reads each prompt's prefilled cache once for its G rows (a
  `SharedPrefix`) rather than a copy per row. Everywhere but where the paged-attention
  kernel runs the decode step (splash attention on TPU — `mesh`'s platform — with a
  bfloat16 float cache): the kernel reads one cache per row."""
  with shd.mesh_scope(mesh):
    paged = (not kv_bits and attention_impl(model_cfg) == "splash"
             and pallas_attention.paged_decode_supported(model_cfg.head_dim,
                                                         model_cfg.jnp_dtype))
  return not paged


def uses_decode_kernel(model: Decoder, cfg: SamplerConfig, mesh) -> bool:
  """Whether decode steps run attention in the CPU kernel (`rljax.models.cpu_attention`):
  `cfg.decode_kernel` "auto", a CPU program on one device (the kernel has no sharding rule),
  and a float32 model without quantized KV or a numerics hook (`kernel_decodes`)."""
  if cfg.decode_kernel != "auto" or (mesh is not None and mesh.size > 1):
    return False
  with shd.mesh_scope(mesh):
    on_cpu = backend.platform() == "cpu"
  return on_cpu and kernel_decodes(model.cfg, 1, bool(_kv_bits(model)), model.numerics)


def _pad_slots(x, axis: int, slots: int):
  """x with empty (zero / invalid) slots appended along `axis` up to `slots`; None stays."""
  if x is None:
    return None
  width = [(0, 0)] * x.ndim
  width[axis] = (0, slots - x.shape[axis])
  return jnp.pad(x, width)


def _row_cache(model: Decoder, cache: KVCache, g: int, slots: int, prompt_len: int,
               share: bool, prefix_len: int) -> KVCache:
  """The decode cache after prefill. Shared: the prompts' caches, padded to `prefix_len`
  slots (`prefix_slots`), become the read-only `SharedPrefix` and the rows' own cache holds
  the generated tokens (slots - prompt_len of them). Otherwise each prompt's cache
  [L, B, P, ...] is copied to its G rows, in `slots` slots."""
  if share:
    pad = lambda x, axis=3: _pad_slots(x, axis, prefix_len)
    prefix = SharedPrefix(pad(cache.k_LxBxKxSxE), pad(cache.v_LxBxKxSxE),
                          pad(cache.valid_BxS, 1), pad(cache.k_scale_LxBxKxS),
                          pad(cache.v_scale_LxBxKxS))
    rows = init_cache(model.cfg, cache.valid_BxS.shape[0] * g, max(1, slots - prompt_len),
                      kv_bits=_kv_bits(model))
    return rows._replace(prefix=prefix)

  def grow(x, batch_axis, slot_axis):
    return None if x is None else _pad_slots(jnp.repeat(x, g, axis=batch_axis), slot_axis,
                                             slots)

  return KVCache(grow(cache.k_LxBxKxSxE, 1, 3), grow(cache.v_LxBxKxSxE, 1, 3),
                 grow(cache.valid_BxS, 0, 1), cache.index, grow(cache.k_scale_LxBxKxS, 1, 3),
                 grow(cache.v_scale_LxBxKxS, 1, 3))


def prefix_slots(prompt_len: int, kernel: bool) -> int:
  """Slots of the shared prompt cache the decode program reads: the prompt length, rounded
  up to a multiple of `_PREFIX_BUCKET` where the CPU kernel decodes (it skips empty slots)."""
  return -(-prompt_len // _PREFIX_BUCKET) * _PREFIX_BUCKET if kernel else prompt_len


def _prefill(graphdef, cfg: SamplerConfig, slots: int, stop_ids, mesh, share: bool,
             kernel: bool, state, ids_BxP, mask_BxP, keys_B):
  model: Decoder = nnx.merge(graphdef, state)
  g, n = cfg.num_generations, cfg.max_new_tokens
  ids, mask = ids_BxP.astype(jnp.int32), mask_BxP.astype(jnp.int32)
  keys = jax.vmap(lambda k: jax.random.split(k, g))(keys_B).reshape(-1)
  p = ids.shape[1]
  # One forward per prompt (not per sample): its cache and last logits serve its G rows.
  h, cache = model(ids, positions_from_mask(mask), mask,
                   init_cache(model.cfg, ids.shape[0], p, kv_bits=_kv_bits(model)))
  logits = jnp.repeat(model.logits(h[:, -1:])[:, 0], g, axis=0)
  ids, mask = jnp.repeat(ids, g, axis=0), jnp.repeat(mask, g, axis=0)
  b = ids.shape[0]
  k_head = _head_size(cfg, model.cfg.vocab_size)
  ds = _constrain(DecodeState(
      cache=_row_cache(model, cache, g, slots, p, share, prefix_slots(p, kernel)),
      tokens_BxN=jnp.full((b, n), cfg.pad_token_id, jnp.int32),
      mask_BxN=jnp.zeros((b, n), jnp.int32),
      logq_BxN=jnp.zeros((b, n), jnp.float32),
      head_ids_BxNxK=jnp.zeros((b, n, k_head), jnp.int32) if k_head else None,
      head_logq_BxNxK=jnp.full((b, n, k_head), _NEG_INF, jnp.float32) if k_head else None,
      done_B=jnp.zeros((b,), bool), keys_B=keys, prompt_len_B=mask.sum(1),
      step=jnp.zeros((), jnp.int32)), mesh)
  tok, logq, hid, hlq = sample_step(logits, ds.keys_B, 0, cfg, k_head)
  ds = _write(ds, 0, tok, logq, hid, hlq, stop_ids, cfg.pad_token_id)
  return _constrain(ds, mesh), ids, mask


def decode_buckets(prompt_len: int, cfg: SamplerConfig, slots: int,
                   share: bool, kernel: bool = False) -> list[tuple[int, int]]:
  """[(end_step, attend_len)]: decode steps < end_step read the first attend_len slots.

  Step t feeds token t - 1 into slot prompt_len + t - 1 (slot t - 1 of the rows' own cache
  when the prompt is a `SharedPrefix`), so steps < e need prompt_len + e - 1 slots (e - 1).
  With the CPU decode kernel the filled length is a run-time operand: one loop, every slot.
  """
  out, n = [], cfg.max_new_tokens
  if kernel:
    return [(n, max(1, slots - prompt_len) if share else slots)]
  for e in range(_ATTEND_BUCKET, n + _ATTEND_BUCKET, _ATTEND_BUCKET):
    e = min(e, n)
    if share:
      out.append((e, max(1, min(slots - prompt_len, e - 1))))
    else:
      out.append((e, min(slots, prompt_len + e - 1)))
  return out


def _decode(graphdef, cfg: SamplerConfig, stop_ids, mesh, buckets, kernel: bool, state,
            ds: DecodeState, until):
  """Decode steps until `until` tokens per row (a traced int32: one program for every
  segment of a compacting sampler), or until every row has stopped."""
  model: Decoder = nnx.merge(graphdef, state)
  k_head = _head_size(cfg, model.cfg.vocab_size)

  def body(ds, attend_len):
    prev = jax.lax.dynamic_slice_in_dim(ds.tokens_BxN, ds.step - 1, 1, axis=1)
    pos = (ds.prompt_len_B + ds.step - 1)[:, None]
    h, cache = model(prev, pos, jnp.ones_like(prev), ds.cache, attend_len=attend_len,
                     decode_kernel=kernel)
    tok, logq, hid, hlq = sample_step(model.logits(h)[:, 0], ds.keys_B, ds.step, cfg, k_head)
    ds = _write(ds._replace(cache=cache), ds.step, tok, logq, hid, hlq, stop_ids,
                cfg.pad_token_id)
    return _constrain(ds, mesh)

  for end, attend_len in buckets:  # each loop exits early once every row has stopped
    ds = jax.lax.while_loop(lambda ds, e=end: (ds.step < jnp.minimum(e, until))
                            & jnp.any(~ds.done_B),
                            functools.partial(body, attend_len=attend_len), ds)
  return ds


def _compact(mesh, size: int, ds: DecodeState, rows_B):
  """The `size` rows that continue: every running row (in order), then finished rows as
  filler (they stay finished). `rows_B`: each row's index in the full batch, carried along.
  A shared prompt cache becomes one prefix per kept row (rows of different prompts mix)."""
  keep = jnp.argsort(ds.done_B, stable=True)[:size]
  take = lambda x, axis=0: None if x is None else jnp.take(x, keep, axis=axis)
  c, pre = ds.cache, ds.cache.prefix
  if pre is not None:
    src = keep // (ds.done_B.shape[0] // pre.valid_PxS.shape[0])
    pick = lambda x, axis=1: None if x is None else jnp.take(x, src, axis=axis)
    pre = SharedPrefix(pick(pre.k_LxPxKxSxE), pick(pre.v_LxPxKxSxE), pick(pre.valid_PxS, 0),
                       pick(pre.k_scale_LxPxKxS), pick(pre.v_scale_LxPxKxS))
  cache = KVCache(take(c.k_LxBxKxSxE, 1), take(c.v_LxBxKxSxE, 1), take(c.valid_BxS), c.index,
                  take(c.k_scale_LxBxKxS, 1), take(c.v_scale_LxBxKxS, 1), pre)
  out = DecodeState(cache, *(take(x) for x in ds[1:7]), ds.keys_B[keep], take(ds.prompt_len_B),
                    ds.step)
  return _constrain(out, mesh), rows_B[keep]


def _outputs(ds: DecodeState) -> tuple:
  return (ds.tokens_BxN, ds.mask_BxN, ds.logq_BxN, ds.head_ids_BxNxK, ds.head_logq_BxNxK,
          ds.done_B)


def _scatter(full: tuple, part: tuple, rows_B) -> tuple:
  """Writes the decode batch's rows into the full batch's outputs at their rows."""
  return tuple(None if f is None else f.at[rows_B].set(p) for f, p in zip(full, part))


_compact_jit = jax.jit(_compact, static_argnums=(0, 1))
_scatter_jit = jax.jit(_scatter, donate_argnums=0)
_live_rows = jax.jit(lambda done_B: jnp.sum(~done_B))


def _batch_unit(mesh) -> int:
  """Rows per shard step of the batch axes: a compacted batch stays a multiple of it."""
  return 1 if mesh is None else int(np.prod([mesh.shape[a] for a in shd.BATCH]))


def compact_size(live: int, rows: int, floor: int) -> int:
  """The decode batch for `live` running rows in a batch of `rows`: the smallest size
  `floor` × m with m on the ladder 1, 2, .., 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ..
  (m < 8 or m's binary form has at most 3 significant bits: four sizes per doubling, so a
  batch compiles few decode programs) that holds the live rows; `rows` if none is smaller."""
  m = max(1, -(-live // floor))
  while m >= 8 and m % (1 << (m.bit_length() - 3)):
    m += 1
  return min(rows, floor * m)


def _decode_compacting(decode, state, ds: DecodeState, cfg: SamplerConfig, mesh,
                       stats: dict) -> tuple:
  """Decode in segments of `cfg.compact_every` steps; after a segment, move the running
  rows into the smallest decode batch of `compact_size`'s ladder that holds them, carrying
  each row's cache, key and outputs. Returns the full batch's outputs (`_outputs` order)."""
  # At least 2 rows per batch shard: XLA:CPU computes a one-row matmul by another kernel (a
  # matrix-vector product) whose last bits differ; from 2 rows up its GEMM gave each row the
  # same bits at every batch size tried (SmolLM2's rollout was bitwise the plain one's).
  n, unit = cfg.max_new_tokens, _batch_unit(mesh)
  floor = 2 * unit
  b = ds.done_B.shape[0]
  rows = jnp.arange(b, dtype=jnp.int32)
  if mesh is not None:
    rows = jax.device_put(rows, shd.batch_sharding(mesh, rows.shape))
  full, done_steps = None, 1  # the prefill drew token 0
  while True:
    ds = decode(state, ds, jnp.asarray(min(done_steps + cfg.compact_every, n), jnp.int32))
    step, live = int(ds.step), int(_live_rows(ds.done_B))
    stats["row_steps"] += b * (step - done_steps)
    done_steps = step
    if step >= n or not live:
      break
    size = compact_size(live, b, floor)
    if size < b:
      full = _outputs(ds) if full is None else _scatter_jit(full, _outputs(ds), rows)
      ds, rows = _compact_jit(mesh, size, ds, rows)
      b = size
      stats["batch_sizes"].append((step, size))
  return _outputs(ds) if full is None else _scatter_jit(full, _outputs(ds), rows)


def _in_mesh(fn, mesh):
  """fn traced with `mesh` as the context mesh (the Pallas kernels shard_map over it)."""

  def scoped(*args):
    with shd.mesh_scope(mesh):
      return fn(*args)

  return scoped


@functools.lru_cache(maxsize=64)
def _build_decode(graphdef, cfg: SamplerConfig, stop_ids: tuple, mesh, buckets: tuple,
                  kernel: bool):
  return jax.jit(_in_mesh(functools.partial(_decode, graphdef, cfg, stop_ids, mesh, buckets,
                                            kernel), mesh), donate_argnums=1)


@functools.lru_cache(maxsize=64)
def _build(graphdef, cfg: SamplerConfig, slots: int, prompt_len: int, stop_ids: tuple, mesh,
           share: bool, kernel: bool = False):
  """(prefill, decode) for one prompt length. The decode function is shared by the prompt
  lengths whose decode buckets are equal (every length, with the CPU kernel and a shared
  prefix: then jit's cache keys its programs by the padded prefix's shape alone)."""
  prefill = jax.jit(_in_mesh(functools.partial(_prefill, graphdef, cfg, slots, stop_ids, mesh,
                                               share, kernel), mesh))
  buckets = tuple(decode_buckets(prompt_len, cfg, slots, share, kernel))
  return prefill, _build_decode(graphdef, cfg, stop_ids, mesh, buckets, kernel)


def as_graph_state(model):
  """(graphdef, state) of a Decoder, or the pair itself."""
  if isinstance(model, nnx.Module):
    return nnx.split(model)
  if isinstance(model, tuple) and len(model) == 2:
    return model
  raise TypeError(f"expected a Decoder or a (graphdef, state) pair, got {type(model).__name__}")


def prompt_keys(key, num_prompts: int) -> jax.Array:
  """Typed PRNG keys [num_prompts]: a single key (or int seed) is split; a batch is kept."""
  if isinstance(key, (int, np.integer)):
    key = jax.random.key(int(key))
  key = key if isinstance(key, jax.Array) else jnp.asarray(key)
  if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.wrap_key_data(key.astype(jnp.uint32))
  if key.ndim == 0:
    return jax.random.split(key, num_prompts)
  if key.shape != (num_prompts,):
    raise ValueError(f"key must be one PRNG key or one per prompt ({num_prompts}), "
                     f"got key shape {key.shape}")
  return key


def _place(state, mesh):
  """Puts parameters not already on the mesh into their rule shardings."""
  leaves = jax.tree.leaves(state)
  if all(isinstance(x, jax.Array) and isinstance(x.sharding, NamedSharding)
         and x.sharding.mesh == mesh for x in leaves):
    return state
  pure = nnx.to_pure_dict(state)
  placed = jax.device_put(pure, shd.param_shardings(pure, mesh))
  new = jax.tree.map(lambda x: x, state)
  nnx.replace_by_pure_dict(new, placed)
  return new


def generate(model, prompt_ids_BxP, prompt_mask_BxP, key, cfg: SamplerConfig,
             mesh=None, stats: dict | None = None) -> Rollout:
  """Samples `cfg.num_generations` responses per left-padded prompt; see `Rollout`.

  model: a Decoder or (graphdef, state) (e.g. a rollout copy from make_sampler_params).
  key: one PRNG key or int seed (split into one key per prompt), or one key per prompt;
  sample g of a prompt uses split(prompt_key, G)[g], folded with the step index.
  mesh: run under this mesh: parameters in their rule shardings, batch and cache split
  over (data, fsdp), kv heads over tensor.
  stats: a dict to fill with what decoding cost: `row_steps` (decode steps × rows run,
  the prefill's token excluded), `batch_sizes` ([(step, rows)] where `cfg.compact_every`
  shrank the decode batch).
  """
  graphdef, state = as_graph_state(model)
  merged = model if isinstance(model, Decoder) else nnx.merge(graphdef, state)
  mcfg = merged.cfg
  check_inputs(cfg, prompt_ids_BxP, prompt_mask_BxP, mcfg.vocab_size)
  b, p = prompt_ids_BxP.shape
  slots = cache_slots(cfg, p)
  stop_ids = resolve_stop_ids(cfg, mcfg.eos_token_id)
  keys = prompt_keys(key, b)
  ids, mask = jnp.asarray(prompt_ids_BxP, jnp.int32), jnp.asarray(prompt_mask_BxP, jnp.int32)
  if mesh is not None:
    state = _place(state, mesh)
    put = lambda x: jax.device_put(x, NamedSharding(
        mesh, shd.logical_to_spec(("batch",) + (None,) * (x.ndim - 1), x.shape, mesh)))
    ids, mask, keys = put(ids), put(mask), put(keys)
  share = shares_prefix(mcfg, _kv_bits(merged), mesh)
  prefill, decode = _build(graphdef, cfg, slots, p, stop_ids, mesh, share,
                           uses_decode_kernel(merged, cfg, mesh))
  ds, ids_rep, mask_rep = prefill(state, ids, mask, keys)
  want_stats, stats = stats is not None, {} if stats is None else stats
  stats.update(row_steps=0, batch_sizes=[])
  if cfg.compact_every:
    out = _decode_compacting(decode, state, ds, cfg, mesh, stats)
  else:
    ds = decode(state, ds, jnp.asarray(cfg.max_new_tokens, jnp.int32))
    if want_stats:  # (a host sync; the plain path otherwise returns without one)
      stats["row_steps"] = ds.done_B.shape[0] * (int(ds.step) - 1)
    out = _outputs(ds)
  tokens, mask_n, logq, head_ids, head_logq, done = out
  return Rollout(tokens, mask_n, ~done, logq, head_ids, head_logq, ids_rep, mask_rep)
