"""One Flax NNX decoder for the Llama family, Qwen2 and Qwen3.

Layers are stacked along a leading `L` axis and run with `lax.scan`, so compile
time does not grow with depth. The KV cache is an explicit pytree (`KVCache`)
threaded through the call, so prefill and decode are pure functions that the
sampler can jit, loop and donate.

Shapes: B batch, T query length, S cache length, D hidden, H query heads,
K kv heads, G = H / K, E head dim, F MLP width, V vocabulary, L layers.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rljax.models import backend, cpu_attention, pallas_attention
from rljax.models.attention import (attention, blockwise_attention, cache_attention,
                                    prefix_attention, sdpa_attention)
from rljax.models.config import ModelConfig
from rljax.models.lora import LoraConfig, dequantize
from rljax.models.quant import WEIGHT_INPUT_AXES

# Remat policies of the layer scan (Decoder(remat=...)): what each layer keeps for the
# backward pass. "dots": matmul outputs without batch dimensions (the projections), so the
# backward recomputes norms, rope, activations and attention, not the matmuls.
REMAT_POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


class KVCache(NamedTuple):
  """Static-shape cache. `valid_BxS` marks slots holding real (non-pad) keys. Keys and
  values are kv-head-major ([L, B, K, S, E]: a head's slots contiguous), the layout
  attention's products read (`rljax.models.attention.cache_attention`).

  A quantized cache (`init_cache(..., kv_bits=8|4)`) stores keys and values as integers
  (int8; int4 packed two per byte, so the last axis is E/2) with one float32 scale per
  token and head in `k_scale_LxBxKxS` / `v_scale_LxBxKxS`; the model's `numerics` hook
  (`kv_store` / `kv_load`) converts, with the same arithmetic as its fake-quantized `kv`.
  """
  k_LxBxKxSxE: jax.Array
  v_LxBxKxSxE: jax.Array
  valid_BxS: jax.Array
  index: jax.Array  # int32 scalar: next slot to write (same for every row)
  k_scale_LxBxKxS: jax.Array | None = None
  v_scale_LxBxKxS: jax.Array | None = None
  prefix: SharedPrefix | None = None  # keys every row of a group attends first


class SharedPrefix(NamedTuple):
  """Read-only keys / values of P prompts, shared by the B = P * R rows of a `KVCache`
  (rows i * R .. (i + 1) * R - 1 continue prompt i; `rljax.models.attention.
  prefix_attention`): the sampler prefills each prompt once and keeps its cache here
  instead of copying it to each of its G samples, so a decode step reads it once per
  prompt. Same layout (and integer storage, with scales) as `KVCache`; the row cache then
  holds only the generated tokens, and positions continue the prompt's."""
  k_LxPxKxSxE: jax.Array
  v_LxPxKxSxE: jax.Array
  valid_PxS: jax.Array
  k_scale_LxPxKxS: jax.Array | None = None
  v_scale_LxPxKxS: jax.Array | None = None


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=None,
               kv_bits: int = 0) -> KVCache:
  """Empty cache; kv_bits 8 / 4 stores integers (needs a model whose numerics quantize KV)."""
  if kv_bits not in (0, 4, 8):
    raise ValueError(f"init_cache: kv_bits={kv_bits}; choose 0 (float), 8 or 4")
  l, k, e = cfg.num_layers, cfg.num_kv_heads, cfg.head_dim
  valid, index = jnp.zeros((batch, max_len), bool), jnp.zeros((), jnp.int32)
  if not kv_bits:
    shape = (l, batch, k, max_len, e)
    dtype = dtype or cfg.jnp_dtype
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), valid, index)
  if kv_bits == 4 and e % 2:
    raise ValueError(f"init_cache: int4 KV packs two values per byte; head_dim {e} is odd")
  shape = (l, batch, k, max_len, e if kv_bits == 8 else e // 2)
  scale = jnp.ones((l, batch, k, max_len), jnp.float32)
  return KVCache(jnp.zeros(shape, jnp.int8), jnp.zeros(shape, jnp.int8), valid, index,
                 scale, scale)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
  """Inverse frequencies [E/2], with Llama-3 scaling when configured (as HF computes it)."""
  e = cfg.head_dim
  inv = 1.0 / (cfg.rope_theta ** (np.arange(0, e, 2, dtype=np.int64).astype(np.float32) / e))
  if cfg.rope_llama3 is None:
    return inv.astype(np.float32)
  factor, lo, hi, orig = cfg.rope_llama3
  lo_wl, hi_wl = orig / lo, orig / hi
  wavelen = 2 * math.pi / inv
  scaled = np.where(wavelen > lo_wl, inv / factor, inv)
  smooth = (orig / wavelen - lo) / (hi - lo)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  medium = (wavelen >= hi_wl) & (wavelen <= lo_wl)
  return np.where(medium, smoothed, scaled).astype(np.float32)


def apply_rope(x_BxTxNxE, positions_BxT, inv_freq_E2):
  """HF-style (rotate-half) rotary embedding, computed in float32."""
  ang = positions_BxT.astype(jnp.float32)[..., None] * inv_freq_E2  # [B,T,E/2]
  ang = jnp.concatenate([ang, ang], axis=-1)[:, :, None, :]
  cos, sin = jnp.cos(ang), jnp.sin(ang)
  x = x_BxTxNxE.astype(jnp.float32)
  half = x.shape[-1] // 2
  rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return (x * cos + rot * sin).astype(x_BxTxNxE.dtype)


def rms_norm(x, w, eps, row_stable: bool = False):
  """x / rms(x) · w over the last axis, in float32. row_stable: the sum of squares in a fixed
  order (`row_sum_squares`), so a row's bits do not depend on how many rows the batch has."""
  dtype = x.dtype
  x = x.astype(jnp.float32)
  if row_stable:
    ms = row_sum_squares(x)[..., None] / x.shape[-1]
  else:
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
  x = x * jax.lax.rsqrt(ms + eps)
  return (w.astype(jnp.float32) * x).astype(dtype)


def row_sum_squares(x):
  """Σ x² over the last axis in an order fixed by the expression: 8 (or fewer) lanes summed
  chunk after chunk by elementwise adds, then the lanes pairwise. XLA:CPU vectorizes a row
  reduction differently by the number of rows (on SmolLM2's 576 features, 3 to 7 rows gave
  other bits than 8 or 32), which would make a compacting sampler's samples depend on its
  batch size; it does not reassociate elementwise adds."""
  d = x.shape[-1]
  lanes = next(k for k in (8, 4, 2, 1) if d % k == 0)
  xx = (x * x).reshape(x.shape[:-1] + (d // lanes, lanes))
  acc = xx[..., 0, :]
  for i in range(1, d // lanes):
    acc = acc + xx[..., i, :]
  while acc.shape[-1] > 1:
    acc = acc[..., 0::2] + acc[..., 1::2]
  return acc[..., 0]


def _param(rngs, shape, dtype, kind="normal"):
  if kind == "ones":
    return nnx.Param(jnp.ones(shape, dtype))
  if kind == "zeros":
    return nnx.Param(jnp.zeros(shape, dtype))
  return nnx.Param(0.02 * jax.random.normal(rngs.params(), shape, dtype))


class Layers(nnx.Module):
  """All transformer blocks, parameters stacked on a leading L axis. With `base_bits` 8 / 4
  (a QLoRA base, `rljax.models.lora`) the projections are stored as integers (int4 packed
  two per byte along the last axis) with a float32 `<name>_scale` per output channel."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, base_bits: int = 0):
    L, D, H, K, E, F = (cfg.num_layers, cfg.hidden_size, cfg.num_heads,
                        cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size)
    pd = cfg.jnp_param_dtype
    self.attn_norm = _param(rngs, (L, D), pd, "ones")
    self.wq = _param(rngs, (L, D, H, E), pd)
    self.wk = _param(rngs, (L, D, K, E), pd)
    self.wv = _param(rngs, (L, D, K, E), pd)
    self.wo = _param(rngs, (L, H, E, D), pd)
    if cfg.qkv_bias:
      self.bq = _param(rngs, (L, H, E), pd, "zeros")
      self.bk = _param(rngs, (L, K, E), pd, "zeros")
      self.bv = _param(rngs, (L, K, E), pd, "zeros")
    if cfg.qk_norm:
      self.q_norm = _param(rngs, (L, E), pd, "ones")
      self.k_norm = _param(rngs, (L, E), pd, "ones")
    self.mlp_norm = _param(rngs, (L, D), pd, "ones")
    self.w_gate = _param(rngs, (L, D, F), pd)
    self.w_up = _param(rngs, (L, D, F), pd)
    self.w_down = _param(rngs, (L, F, D), pd)
    if cfg.o_bias:
      self.bo = _param(rngs, (L, D), pd, "zeros")
    if cfg.mlp_bias:
      self.b_gate = _param(rngs, (L, F), pd, "zeros")
      self.b_up = _param(rngs, (L, F), pd, "zeros")
      self.b_down = _param(rngs, (L, D), pd, "zeros")
    for name, axes in WEIGHT_INPUT_AXES.items() if base_bits else ():
      shape = getattr(self, name).shape
      if base_bits == 4 and shape[-1] % 2:
        raise ValueError(f"int4 base: {name} packs two values per byte along its last axis, "
                         f"of odd size {shape[-1]}")
      stored = shape[:-1] + (shape[-1] // 2,) if base_bits == 4 else shape
      setattr(self, name, nnx.Param(jnp.zeros(stored, jnp.int8)))
      setattr(self, f"{name}_scale", nnx.Param(jnp.ones(
          tuple(1 if i in axes else n for i, n in enumerate(shape)), jnp.float32)))


@jax.custom_vjp
def swiglu(g, u):
  """silu(g) * u with a hand-written backward that keeps only g and u (autodiff of
  jax.nn.silu saves four [N, F] arrays per layer and fuses them into slow transposes)."""
  return jax.nn.silu(g) * u


def _swiglu_fwd(g, u):
  return swiglu(g, u), (g, u)


def _swiglu_bwd(res, dy):
  g, u = res
  s = jax.nn.sigmoid(g)
  return dy * u * (s * (1 + g * (1 - s))), dy * (g * s)


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


def _block(cfg: ModelConfig, p: dict, x_BxTxD, positions_BxT, inv_freq, kv_fn,
           dot=jnp.einsum, attn=attention, lora: LoraConfig | None = None,
           row_stable: bool = False):
  """One pre-norm block. `kv_fn(k, v) -> (keys, values, allowed, aux)` attaches the cache;
  `dot(spec, x, w)` is every activation x weight product; returns (x, aux). With `lora`, a
  projection whose adapters are in `p["lora"]` adds (α / r) · (x A) B, and a QLoRA base
  projection (`<name>_scale` in `p`) is dequantized first. row_stable: the norms' sums in a
  fixed order (`rms_norm`; the cached path, so a sampler's rows keep their bits whatever the
  batch size).

  Every projection is a plain 2-D matmul over the flattened tokens (N = B*T) with the
  weights viewed as [in, out] (a free reshape of the stacked [D, H, E] / [H, E, D] layout):
  XLA:CPU's backward of a 3-D "btd,dhe->bthe" contraction transposes each activation
  gradient through a slow fused copy; the 2-D form runs the step's matmuls at the
  forward's rate."""
  dt = cfg.jnp_dtype
  c = lambda a: a.astype(dt)
  b, t, d = x_BxTxD.shape
  n = b * t
  adapters = p.get("lora", {})

  def proj(spec, x, name):
    """x @ W ([D, H, E] viewed as [D, H*E], [H, E, D] as [H*E, D]) (+ the LoRA update)."""
    w = p[name]
    if f"{name}_scale" in p:
      w = dequantize(w, p[f"{name}_scale"], lora.base_bits)
    y = dot(spec, x, c(w).reshape(x.shape[1], -1))
    if name in adapters:
      ab = adapters[name]
      y = y + jnp.dot(jnp.dot(x, c(ab["a"])) * lora.scale, c(ab["b"]))
    return y

  norm = functools.partial(rms_norm, eps=cfg.rms_norm_eps, row_stable=row_stable)
  h = norm(x_BxTxD, p["attn_norm"]).reshape(n, d)
  q = proj("nd,dk->nk", h, "wq").reshape(b, t, cfg.num_heads, cfg.head_dim)
  k = proj("nd,dk->nk", h, "wk").reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
  v = proj("nd,dk->nk", h, "wv").reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
  if cfg.qkv_bias:
    q, k, v = q + c(p["bq"]), k + c(p["bk"]), v + c(p["bv"])
  if cfg.qk_norm:
    q = norm(q, p["q_norm"])
    k = norm(k, p["k_norm"])
  q = apply_rope(q, positions_BxT, inv_freq)
  k = apply_rope(k, positions_BxT, inv_freq)
  keys, values, allowed, aux = kv_fn(k, v)
  o = attn(q, keys, values, allowed).reshape(n, -1)
  o_proj = proj("nk,kd->nd", o, "wo").reshape(b, t, d)
  x = x_BxTxD + (o_proj + c(p["bo"]) if cfg.o_bias else o_proj)
  h = norm(x, p["mlp_norm"]).reshape(n, d)
  g = proj("nd,df->nf", h, "w_gate")
  u = proj("nd,df->nf", h, "w_up")
  if cfg.mlp_bias:
    g, u = g + c(p["b_gate"]), u + c(p["b_up"])
  down = proj("nf,fd->nd", swiglu(g, u), "w_down").reshape(b, t, d)
  return x + (down + c(p["b_down"]) if cfg.mlp_bias else down), aux


class Decoder(nnx.Module):
  """Causal LM trunk: `__call__` returns final-normed hidden states (and the cache)."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, remat: bool | str = False,
               numerics=None, lora: LoraConfig | None = None):
    self.cfg = cfg
    # LoRA (rljax.models.lora): the adapters are an argument of `__call__`, not parameters;
    # a QLoRA config (base_bits 8 / 4) stores the projections as integers.
    self.lora = lora
    # False / "none": keep every residual; True / "full": keep only each layer's input;
    # "dots": keep the projections' outputs (REMAT_POLICIES).
    remat = {False: "none", True: "full"}.get(remat, remat)
    if remat != "none" and remat not in REMAT_POLICIES:
      raise ValueError(f"remat={remat!r}; choose False / 'none', True / 'full' or one of "
                       f"{sorted(REMAT_POLICIES)}")
    self.remat = remat
    # Optional static hook that changes the arithmetic, not the parameters: an object with
    # `dot(spec, x, w)` (every activation x weight einsum) and `kv(x_BxTxKxE)` (keys and
    # values as attention reads them). rljax.rollout uses it for W8A8 and quantized KV.
    self.numerics = numerics
    # Layers per scan iteration of the cache-less forward of a deep model (None: 1; see
    # `layer_unroll`); the trainer sets it to num_layers on CPU.
    self.scan_unroll = None
    pd = cfg.jnp_param_dtype
    self.embed = _param(rngs, (cfg.vocab_size, cfg.hidden_size), pd)
    self.layers = Layers(cfg, rngs, lora.base_bits if lora is not None else 0)
    self.final_norm = _param(rngs, (cfg.hidden_size,), pd, "ones")
    if not cfg.tie_embeddings:
      self.lm_head = _param(rngs, (cfg.hidden_size, cfg.vocab_size), pd)
    bits = lora.base_bits if lora is not None else 0
    for name in (("embed",) if cfg.tie_embeddings else ("embed", "lm_head")) if bits else ():
      shape = getattr(self, name).shape  # QLoRA: integers + a scale per row / column
      stored = shape[:-1] + (shape[-1] // 2,) if bits == 4 else shape
      setattr(self, name, nnx.Param(jnp.zeros(stored, jnp.int8)))
      setattr(self, f"{name}_scale", nnx.Param(jnp.ones(
          (shape[0], 1) if name == "embed" else (1, shape[1]), jnp.float32)))

  def _matrix(self, name: str) -> jax.Array:
    """The embedding or LM head in float (a QLoRA base dequantized)."""
    w = getattr(self, name)[...]
    scale = getattr(self, f"{name}_scale", None)
    if scale is None:
      return w
    return dequantize(w, scale[...], self.lora.base_bits, self.cfg.jnp_param_dtype)

  def unembed_DxV(self) -> jax.Array:
    """The unembedding matrix as [D, V] (a transpose of the embedding when tied)."""
    return self._matrix("embed").T if self.cfg.tie_embeddings else self._matrix("lm_head")

  def unembedding(self) -> tuple[jax.Array, str]:
    """The unembedding as stored and its layout for `rljax.logprobs.token_logprobs`:
    (embed [V, D], "vd") when tied, else (lm_head [D, V], "dv"). Contracting the stored
    layout keeps a tied model's gradient in one [V, D] buffer: through `unembed_DxV()` the
    LM head's gradient accumulated as a separate [D, V] array (113 MB on SmolLM2) that
    lived through the whole backward pass before being transposed and added."""
    if self.cfg.tie_embeddings:
      return self._matrix("embed"), "vd"
    return self._matrix("lm_head"), "dv"

  def logits(self, hidden_BxTxD) -> jax.Array:
    """Full float32 logits; for tests and sampling, never for training losses."""
    w, layout = self.unembedding()
    return jnp.einsum(f"btd,{layout}->btv", hidden_BxTxD, w.astype(hidden_BxTxD.dtype),
                      preferred_element_type=jnp.float32)

  def __call__(self, tokens_BxT, positions_BxT, mask_BxT, cache: KVCache | None = None,
               attend_len: int | None = None, adapters: dict | None = None,
               segment_ids_BxT=None, decode_kernel: bool = False):
    """Hidden states [B,T,D] and the updated cache (None without one). attend_len (static,
    cache path): attention reads only the first attend_len cache slots, which must hold
    every filled slot (index + T <= attend_len); the sampler grows it in buckets.
    adapters: LoRA adapters of the model's `lora` config (`rljax.models.lora`), None: the
    base alone. segment_ids_BxT (cache-less forward only): packed rows (`rljax.packing`), a
    token attends the tokens at or before it with its own segment id (0: padding).
    decode_kernel (cache path, one new token, float32 cache; see `kernel_decodes`): attention
    runs `rljax.models.cpu_attention`'s kernel, which reads the stacked cache and the shared
    prefix in place and the filled slots (index + 1) at run time; attend_len is then unused."""
    cfg = self.cfg
    if getattr(self, "embed_scale", None) is None:
      x = jnp.take(self.embed[...], tokens_BxT, axis=0).astype(cfg.jnp_dtype)
    else:  # QLoRA: dequantize the rows looked up
      x = dequantize(jnp.take(self.embed[...], tokens_BxT, axis=0),
                     jnp.take(self.embed_scale[...], tokens_BxT, axis=0), self.lora.base_bits,
                     cfg.jnp_dtype)
    inv_freq = jnp.asarray(rope_inv_freq(cfg))
    params = {k: v[...] for k, v in vars(self.layers).items() if isinstance(v, nnx.Param)}
    if adapters is not None:
      if self.lora is None:
        raise ValueError("Decoder: adapters given to a model built without a LoRA config")
      params["lora"] = adapters
    t = tokens_BxT.shape[1]
    mask_BxT = mask_BxT.astype(bool)
    dot = self.numerics.dot if self.numerics is not None else jnp.einsum
    kvq = self.numerics.kv if self.numerics is not None else (lambda a: a)

    if cache is None:
      causal = jnp.tril(jnp.ones((t, t), bool))
      allowed = causal[None] & mask_BxT[:, None, :]
      seg_BxT = mask_BxT.astype(jnp.int32)  # splash's segment ids: real 1, padding 0
      if segment_ids_BxT is not None:
        seg_BxT = segment_ids_BxT.astype(jnp.int32)
        allowed = allowed & (seg_BxT[:, :, None] == seg_BxT[:, None, :])

      impl = attention_impl(cfg)
      sdpa = functools.partial(sdpa_attention, causal=True,
                               implementation=backend.sdpa_implementation())
      dense = functools.partial(attention, causal_block=cfg.causal_block)  # the mask is causal
      attn = {"blockwise": blockwise_attention, "dense": dense, "cudnn": sdpa}.get(
          impl, lambda q, k, v, _: pallas_attention.splash_attention(q, k, v, seg_BxT))

      def layer(x, p):
        return _block(cfg, p, x, positions_BxT, inv_freq,
                      lambda k, v: (kvq(k), kvq(v), allowed, None), dot, attn, self.lora)

      if self.remat != "none":
        layer = jax.checkpoint(layer, policy=REMAT_POLICIES[self.remat])
      x, _ = jax.lax.scan(layer, x, params, unroll=layer_unroll(
          cfg, self.scan_unroll, remat=self.remat != "none"))
      return rms_norm(x, self.final_norm[...], cfg.rms_norm_eps), None

    if segment_ids_BxT is not None:
      raise ValueError("Decoder: segment ids (packed rows) are for the cache-less forward")
    s = cache.valid_BxS.shape[1]
    w = s if attend_len is None else min(int(attend_len), s)
    if t > w:
      raise ValueError(f"Decoder: {t} new tokens do not fit in attend_len={w} cache slots")
    idx = cache.index
    valid = jax.lax.dynamic_update_slice(cache.valid_BxS, mask_BxT, (0, idx))
    q_slot = idx + jnp.arange(t)
    allowed = (jnp.arange(w)[None, :] <= q_slot[:, None])[None] & valid[:, None, :w]
    quantized = cache.k_scale_LxBxKxS is not None
    if quantized and not hasattr(self.numerics, "kv_store"):
      raise ValueError("Decoder: an integer KV cache needs a `numerics` hook with "
                       "kv_store / kv_load (rljax.rollout.QuantNumerics with kv_bits)")
    zero = jnp.zeros((), jnp.int32)
    attn = cache_attention
    prefix = cache.prefix
    if prefix is not None:
      if cache.valid_BxS.shape[0] % prefix.valid_PxS.shape[0]:
        raise ValueError(f"Decoder: {cache.valid_BxS.shape[0]} cache rows are not a multiple "
                         f"of the {prefix.valid_PxS.shape[0]} shared prefixes")
      pnames = ("k_LxPxKxSxE", "v_LxPxKxSxE") + (("k_scale_LxPxKxS", "v_scale_LxPxKxS")
                                                  if quantized else ())
      pre_xs = tuple(getattr(prefix, n) for n in pnames)
    else:
      pre_xs = ()
    if (t == 1 and not quantized and prefix is None and attention_impl(cfg) == "splash"
        and pallas_attention.paged_decode_supported(cfg.head_dim, cache.k_LxBxKxSxE.dtype)):
      attn = lambda q, k, v, _: pallas_attention.paged_decode_attention(
          q[:, 0], _slot_major(k), _slot_major(v), valid[:, :w])[:, None]
    elif t > 1 and attention_impl(cfg) == "cudnn":  # a prefill (decode steps stay dense)
      sdpa = functools.partial(sdpa_attention, implementation=backend.sdpa_implementation())
      attn = lambda q, k, v, a: sdpa(q, _slot_major(k), _slot_major(v), a)
    kernel = decode_kernel and kernel_decodes(cfg, t, quantized, self.numerics)
    if decode_kernel and not kernel:
      raise ValueError("Decoder: decode_kernel needs one new token, a float32 cache and "
                       "compute, no numerics hook and the built kernel (`kernel_decodes`)")
    if kernel:  # the kernel reads the whole stacks with the layer index: nothing sliced
      valid_u8 = valid.astype(jnp.uint8)  # once per step, not once per layer
      pre_all = None if prefix is None else (prefix.k_LxPxKxSxE, prefix.v_LxPxKxSxE,
                                              prefix.valid_PxS.astype(jnp.uint8))
      pre_xs = ()
    store = self.numerics.kv_store if quantized else (lambda a: (kvq(a), None))
    names = ("k_LxBxKxSxE", "v_LxBxKxSxE") + (("k_scale_LxBxKxS", "v_scale_LxBxKxS")
                                              if quantized else ())

    def layer(carry, p_i):
      # The stacked cache is a carry updated in place: write layer i's new slots, then read
      # layer i's first w slots for attention.
      x, bufs = carry
      p, i, pre = p_i
      load = lambda q, sc, dtype: (self.numerics.kv_load(q, sc, dtype) if quantized
                                   else q.astype(dtype))
      if kernel:
        attn_l = lambda q, k_st, v_st, _: cpu_attention.decode_attention(
            q[:, 0], k_st, v_st, valid_u8, i, idx + 1, pre_all)[:, None]
      elif pre:
        pk = load(pre[0], pre[2] if quantized else None, cfg.jnp_dtype)
        pv = load(pre[1], pre[3] if quantized else None, cfg.jnp_dtype)
        attn_l = lambda q, k, v, a: prefix_attention(q, k, v, a, pk, pv, prefix.valid_PxS)
      else:
        attn_l = attn

      def kv_fn(k, v):
        (kq, ks), (vq, vs) = store(k), store(v)
        # [B, T, K, ...] -> the cache's kv-head-major [B, K, T, ...]
        new = tuple(jnp.swapaxes(x, 1, 2) for x in (kq, vq) + ((ks, vs) if quantized else ()))
        bufs2 = tuple(jax.lax.dynamic_update_slice(
            c, n.astype(c.dtype)[None], (i, zero, zero, idx) + (zero,) * (c.ndim - 4))
                      for c, n in zip(bufs, new))
        if kernel:
          return bufs2[0], bufs2[1], None, bufs2
        read = [c[i, :, :, :w] for c in bufs2]
        keys = load(read[0], read[2] if quantized else None, k.dtype)
        values = load(read[1], read[3] if quantized else None, v.dtype)
        return keys, values, allowed, bufs2

      x, bufs = _block(cfg, p, x, positions_BxT, inv_freq, kv_fn, dot, attn_l, self.lora,
                       row_stable=True)
      return (x, bufs), None

    (x, bufs), _ = jax.lax.scan(layer, (x, tuple(getattr(cache, n) for n in names)),
                                (params, jnp.arange(cfg.num_layers), pre_xs),
                                unroll=layer_unroll(cfg, self.scan_unroll, cached=True))
    new_cache = cache._replace(valid_BxS=valid, index=idx + t, **dict(zip(names, bufs)))
    return rms_norm(x, self.final_norm[...], cfg.rms_norm_eps, row_stable=True), new_cache


def kernel_decodes(cfg: ModelConfig, new_tokens: int = 1, quantized: bool = False,
                   numerics=None) -> bool:
  """Whether a cached forward can run its attention in the CPU decode kernel
  (`rljax.models.cpu_attention`): one new token, float32 compute and cache, no integer KV and
  no numerics hook (which changes how keys are read), and the kernel built. The caller
  decides the platform (the sampler: CPU, one device)."""
  return (new_tokens == 1 and not quantized and numerics is None
          and cfg.jnp_dtype == jnp.float32 and cpu_attention.available())


def _slot_major(x_BxKxSxE):
  """A cache read as [B, S, K, E] (the kernels that take keys slot-major)."""
  return jnp.swapaxes(x_BxKxSxE, 1, 2)


def layer_unroll(cfg: ModelConfig, override: int | None = None, cached: bool = False,
                 remat: bool = False) -> int:
  """How many layers one scan iteration runs. Shallow models (<= 8 layers) are unrolled.
  Deep ones keep a loop (compile time does not grow with depth) unless `override`
  (`Decoder.scan_unroll`) asks otherwise for the cache-less forward without remat. The
  trainer sets it to the depth on CPU: there a rolled scan zero-fills and slices [L, ...]
  stacks of residuals and gradients every step (SmolLM2's 30-layer GRPO step 16.6 s
  rolled, 15.0 s unrolled; compile 12 s instead of about 3 s, which is why it is not the
  default: many short programs, e.g. the tests, pay more in compiling than they gain).
  - The cached (sampler) path stays rolled: unrolled, XLA:CPU copies each layer's weights
    out of the stack, and a 32-row decode step took 259 ms instead of 110 ms.
  - A rematerialized stack stays rolled: unrolled, XLA schedules every layer's recompute
    ahead of the backward and the saving is lost (remat=dots: 4.5 GB of temporaries
    instead of 2.5 GB)."""
  l = cfg.num_layers
  if l <= 8:
    return l
  if cached or remat or not override:
    return 1
  return int(override)


def attention_impl(cfg: ModelConfig) -> str:
  """cfg.attention with "auto" resolved for the program being traced (`rljax.models.backend`:
  splash on TPU, cudnn on GPU for bfloat16 compute, dense elsewhere)."""
  return backend.attention_impl(cfg)


def positions_from_mask(mask_BxT) -> jax.Array:
  """Position ids for a left-padded batch: 0 at each row's first real token."""
  m = mask_BxT.astype(jnp.int32)
  return jnp.maximum(jnp.cumsum(m, axis=-1) - 1, 0)
