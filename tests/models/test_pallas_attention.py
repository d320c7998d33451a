"""The Pallas TPU kernels (splash attention, paged decode attention) equal the dense
reference attention, run on CPU in Pallas interpret mode: forward and gradients with left
and right padding and GQA, per shard under a mesh, and inside the decoder."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from rljax import sharding as shd
from rljax.models import Decoder, create_model, init_cache, positions_from_mask
from rljax.models.attention import attention
from rljax.models.config import ModelConfig
from rljax.models.decoder import attention_impl
from rljax.models.pallas_attention import paged_decode_attention, splash_attention


def _qkv(b, t, h, kh, e, seed=0):
  ks = jax.random.split(jax.random.key(seed), 3)
  return (jax.random.normal(ks[0], (b, t, h, e)), jax.random.normal(ks[1], (b, t, kh, e)),
          jax.random.normal(ks[2], (b, t, kh, e)))


def _mask(t, left, right):
  """Rows with `left` leading and `right` trailing padding tokens."""
  pos = jnp.arange(t)[None]
  return (pos >= jnp.asarray(left)[:, None]) & (pos < t - jnp.asarray(right)[:, None])


def test_splash_equals_dense_forward_and_gradients():
  # T = 100 is padded to one 128-block; row 1 is left-padded, row 2 right-padded too
  b, t, h, kh, e = 3, 100, 4, 2, 32
  q, k, v = _qkv(b, t, h, kh, e)
  mask = _mask(t, [0, 37, 5], [0, 0, 20])
  allowed = jnp.tril(jnp.ones((t, t), bool))[None] & mask[:, None, :]
  w = jax.random.normal(jax.random.key(1), (b, t, h, e)) * mask[:, :, None, None]
  o, vjp = jax.jit(lambda q, k, v: jax.vjp(lambda *a: splash_attention(*a, mask), q, k, v))(
      q, k, v)
  o_ref, vjp_ref = jax.vjp(lambda *a: attention(*a, allowed), q, k, v)
  real = np.asarray(mask)[:, :, None, None]
  err = np.abs(np.where(real, np.asarray(o) - np.asarray(o_ref), 0)).max()
  assert err <= 1e-5, err
  assert np.isfinite(np.asarray(o)).all()  # padding queries too
  for name, g, g_ref in zip("qkv", jax.jit(vjp)(w), vjp_ref(w)):
    gerr = np.abs(np.asarray(g) - np.asarray(g_ref)).max()
    assert gerr <= 1e-5, (name, gerr)


def test_splash_per_shard_on_a_mesh():
  """Under a (data 1, fsdp 2, tensor 2) mesh the kernel runs per batch and head shard."""
  mesh = shd.make_mesh((1, 2, 2), devices=jax.devices()[:4])
  b, t, h, kh, e = 2, 128, 4, 2, 16
  q, k, v = _qkv(b, t, h, kh, e, seed=2)
  mask = _mask(t, [3, 50], [0, 0])
  allowed = jnp.tril(jnp.ones((t, t), bool))[None] & mask[:, None, :]

  def f(q, k, v, mask):
    with shd.mesh_scope(mesh):
      return splash_attention(q, k, v, mask)

  put = lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec))
  qs = put(q, P(("data", "fsdp"), None, "tensor"))
  ks, vs = (put(x, P(("data", "fsdp"), None, "tensor")) for x in (k, v))
  o = jax.jit(f)(qs, ks, vs, put(mask, P(("data", "fsdp"))))
  text = jax.jit(f).lower(qs, ks, vs, put(mask, P(("data", "fsdp")))).as_text()
  assert "shard_map" in text or "manual" in text
  err = np.abs(np.where(np.asarray(mask)[:, :, None, None],
                        np.asarray(o) - np.asarray(attention(q, k, v, allowed)), 0)).max()
  assert err <= 1e-5, err


def test_paged_decode_equals_dense_on_a_bfloat16_cache():
  """The kernel loads K / V as bfloat16, so the cache is bfloat16 (what a bf16 model
  stores); the query and the arithmetic are float32. Rows attend one filled run each:
  left padding of 0 / 9 / 40 slots, window 70 (two pages), newest slot 60."""
  b, s, h, kh, e = 3, 70, 8, 2, 32
  q, k, v = _qkv(b, s, h, kh, e, seed=3)
  k, v = k.astype(jnp.bfloat16), v.astype(jnp.bfloat16)
  valid = _mask(s, [0, 9, 40], [9, 9, 9])
  o = jax.jit(paged_decode_attention)(q[:, 0], k, v, valid)
  ref = attention(q[:, :1], k.astype(jnp.float32), v.astype(jnp.float32), valid[:, None])[:, 0]
  err = np.abs(np.asarray(o) - np.asarray(ref)).max()
  assert err <= 1e-5, err


def test_decoder_with_splash_matches_dense_in_training_and_decode():
  """attention="splash": the full forward (splash) and a cached decode step on a bfloat16
  cache (paged kernel) give the dense model's hidden states on real tokens. One layer:
  each kernel instance costs seconds to compile in interpret mode."""
  cfg = ModelConfig(model_type="qwen3", vocab_size=67, hidden_size=32, intermediate_size=48,
                    num_layers=1, num_heads=4, num_kv_heads=2, head_dim=128, qk_norm=True)
  ids = jax.random.randint(jax.random.key(4), (2, 12), 0, 67)
  mask = _mask(12, [0, 4], [0, 0]).astype(jnp.int32)
  pos = positions_from_mask(mask)

  @functools.partial(jax.jit, static_argnums=0)
  def run(graphdef, state):
    model = nnx.merge(graphdef, state)
    full, _ = model(ids, pos, mask)
    cache = init_cache(cfg, 2, 16, dtype=jnp.bfloat16)
    _, cache = model(ids[:, :8], pos[:, :8], mask[:, :8], cache)
    step, _ = model(ids[:, 8:9], pos[:, 8:9], mask[:, 8:9], cache, attend_len=16)
    return full, step

  graphdef, state = nnx.split(create_model(cfg, seed=0))
  full_ref, steps_ref = run(graphdef, state)
  splash = nnx.graphdef(nnx.eval_shape(lambda: Decoder(cfg.replace(attention="splash"),
                                                      nnx.Rngs(0))))
  traced = run.trace(splash, state)  # the same parameters, the splash config
  kernels = str(traced.jaxpr)
  assert "splash_mha_fwd" in kernels and "paged_attention" in kernels  # not a dense fallback
  full, steps = traced.lower().compile()(state)
  real = np.asarray(mask, bool)[:, :, None]
  assert np.abs(np.where(real, np.asarray(full) - np.asarray(full_ref), 0)).max() <= 1e-5
  err = np.abs(np.asarray(steps) - np.asarray(steps_ref)).max()
  assert err <= 1e-5, err


def test_auto_attention_is_dense_off_tpu():
  cfg = ModelConfig(model_type="qwen3", vocab_size=8, hidden_size=8, intermediate_size=8,
                    num_layers=1, num_heads=2, num_kv_heads=1, head_dim=4, attention="auto")
  assert attention_impl(cfg) == "dense"  # CPU: the Pallas kernels would run interpreted
  with shd.mesh_scope(shd.make_mesh((1, 2, 1), devices=jax.devices()[:2])):
    assert attention_impl(cfg) == "dense"
  assert attention_impl(cfg.replace(attention="splash")) == "splash"
