"""The GPU path on CPU: attention="cudnn" (`jax.nn.dot_product_attention`, run here with its
XLA implementation) equals the dense reference in the attention, the decoder's training
forward and gradients, the sampler's prefill and the GRPO step; "auto" resolves per
platform in `rljax.models.backend`."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rljax import sharding as shd
from rljax.models import backend, create_model, positions_from_mask
from rljax.models.attention import attention, sdpa_attention
from rljax.models.config import ModelConfig

TINY = ModelConfig(model_type="qwen3", vocab_size=67, hidden_size=32, intermediate_size=48,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def _inputs(b=3, t=12, h=4, kh=2, e=8, seed=0, dtype=jnp.float32):
  ks = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(ks[0], (b, t, h, e)).astype(dtype)
  k = jax.random.normal(ks[1], (b, t, kh, e)).astype(dtype)
  v = jax.random.normal(ks[2], (b, t, kh, e)).astype(dtype)
  # row 1 left-padded (its first 3 queries see no key at all), row 2 right-padded
  mask = jnp.ones((b, t), bool).at[1, :3].set(False).at[2, -4:].set(False)
  allowed = jnp.tril(jnp.ones((t, t), bool))[None] & mask[:, None, :]
  w = jax.random.normal(ks[3], (b, t, h, e)) * mask[:, :, None, None]
  return q, k, v, allowed, w


@pytest.mark.numerics  # golden / equivalence: also under another ISA
@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_equals_dense_forward_and_gradients(causal):
  """Every query row, fully masked ones included (both average all values), and the
  gradients of a loss on the real rows."""
  q, k, v, allowed, w = _inputs()
  sdpa = functools.partial(sdpa_attention, causal=causal, implementation="xla")
  np.testing.assert_allclose(np.asarray(jax.jit(sdpa)(q, k, v, allowed)),
                             np.asarray(attention(q, k, v, allowed)), atol=1e-6)
  loss = lambda f: (lambda q, k, v: jnp.sum(f(q, k, v, allowed) * w))
  g = jax.jit(jax.grad(loss(sdpa), argnums=(0, 1, 2)))(q, k, v)
  g_ref = jax.grad(loss(attention), argnums=(0, 1, 2))(q, k, v)
  for name, a, b in zip("qkv", g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, err_msg=name)


def test_sdpa_bfloat16_keeps_float32_scores():
  """bfloat16 q / k / v: within bfloat16's rounding of the float32 result (scores and
  softmax are float32 in both), and the output stays bfloat16."""
  q, k, v, allowed, _ = _inputs(dtype=jnp.bfloat16)
  o = sdpa_attention(q, k, v, allowed, causal=True)
  assert o.dtype == jnp.bfloat16
  f32 = lambda x: x.astype(jnp.float32)
  ref = attention(f32(q), f32(k), f32(v), allowed)
  np.testing.assert_allclose(np.asarray(f32(o)), np.asarray(ref), atol=2e-2)


def test_cudnn_falls_back_to_xla_where_cudnn_has_no_kernel():
  """float32 inputs and an odd length never reach cuDNN: the lowered program holds no
  cuDNN custom call (this would fail at compile time on a GPU, not silently)."""
  q, k, v, allowed, _ = _inputs(t=11)
  for dtype in (jnp.float32, jnp.bfloat16):  # float32: no kernel; bfloat16 at T = 11: odd
    args = [x.astype(dtype) for x in (q, k, v)]
    text = jax.jit(functools.partial(sdpa_attention, causal=True, implementation="cudnn")
                   ).lower(*args, allowed).as_text()
    assert "cudnn" not in text.lower()


def test_auto_resolves_per_platform():
  cfg = TINY.replace(attention="auto")
  bf16 = cfg.replace(dtype="bfloat16")
  assert backend.attention_impl(cfg, "tpu") == "splash"
  assert backend.attention_impl(bf16, "gpu") == "cudnn"
  assert backend.attention_impl(cfg, "gpu") == "dense"  # float32: cuDNN has no kernel
  assert backend.attention_impl(bf16, "cpu") == "dense"
  assert backend.attention_impl(TINY.replace(attention="blockwise"), "gpu") == "blockwise"
  assert backend.sdpa_implementation("gpu") == "cudnn"
  assert backend.sdpa_implementation("cpu") == "xla"
  assert backend.platform() == "cpu"
  with shd.mesh_scope(shd.make_mesh((1, 2, 1), devices=jax.devices()[:2])):
    assert backend.platform() == "cpu"
    assert backend.attention_impl(bf16) == "dense"


def test_decoder_with_cudnn_attention_equals_dense_forward_grads_and_prefill():
  """attention="cudnn": the training forward and its parameter gradients on real tokens,
  and a cached prefill + one decode step, equal the dense model's."""
  ids = jax.random.randint(jax.random.key(4), (2, 12), 0, 67)
  mask = jnp.ones((2, 12), jnp.int32).at[1, :5].set(0)
  pos = positions_from_mask(mask)
  real = np.asarray(mask, bool)[:, :, None]

  def run(cfg):
    model = create_model(cfg, seed=0)
    graphdef, state = nnx.split(model)

    @jax.jit
    def f(state):
      def loss(state):
        h, _ = nnx.merge(graphdef, state)(ids, pos, mask)
        return jnp.sum(jnp.where(real, h, 0) ** 2), h
      (_, h), g = jax.value_and_grad(loss, has_aux=True)(state)
      m = nnx.merge(graphdef, state)
      from rljax.models import init_cache
      cache = init_cache(cfg, 2, 16)
      pre, cache = m(ids[:, :8], pos[:, :8], mask[:, :8], cache)
      step, _ = m(ids[:, 8:9], pos[:, 8:9], mask[:, 8:9], cache, attend_len=16)
      return h, g, pre, step
    return f(state)

  out, ref = run(TINY.replace(attention="cudnn")), run(TINY)
  np.testing.assert_allclose(np.where(real, out[0], 0), np.where(real, ref[0], 0), atol=1e-5)
  # The gradients reach ~74; against a float64 run each implementation is off by up to
  # ~5e-5 in any leaf (float32 rounding, ~7e-7 of the largest), so the tolerance is a
  # multiple of that scale.
  scale = max(float(np.abs(np.asarray(b)).max()) for b in jax.tree.leaves(ref[1]))
  for a, b in zip(jax.tree.leaves(out[1]), jax.tree.leaves(ref[1])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=4e-6 * scale)
  np.testing.assert_allclose(np.where(real[:, :8], out[2], 0), np.where(real[:, :8], ref[2], 0),
                             atol=1e-5)
  np.testing.assert_allclose(np.asarray(out[3]), np.asarray(ref[3]), atol=1e-5)


def test_gpu_config_variant():
  """`:gpu`: float32 master weights, bfloat16 compute, attention by platform."""
  from configs.common import base_config
  c = base_config("gpu")
  assert (c.model.param_dtype, c.model.dtype, c.model.attention) == (
      "float32", "bfloat16", "auto")
