"""Blockwise (flash-style) attention equals the dense reference, forward and gradients;
the decoder's remat policies and attention choice leave its outputs and gradients alone."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.models import create_model, positions_from_mask
from rljax.models.attention import (attention, blockwise_attention, cache_attention,
                                    prefix_attention)
from rljax.models.config import ModelConfig

TINY = ModelConfig(model_type="qwen3", vocab_size=67, hidden_size=32, intermediate_size=48,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def _inputs(b=2, t=11, h=4, kh=2, e=8, seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(ks[0], (b, t, h, e))
  k = jax.random.normal(ks[1], (b, t, kh, e))
  v = jax.random.normal(ks[2], (b, t, kh, e))
  mask = jnp.ones((b, t), bool).at[1, :3].set(False)  # left padding in row 1
  allowed = jnp.tril(jnp.ones((t, t), bool))[None] & mask[:, None, :]
  w = jax.random.normal(ks[3], (b, t, h, e)) * mask[:, :, None, None]  # real rows only
  return q, k, v, allowed, w


@pytest.mark.numerics  # golden / equivalence: also under another ISA
@pytest.mark.parametrize("block", [4, 5, 11, 64])  # ragged last block, one block
def test_blockwise_equals_dense_forward_and_gradients(block):
  q, k, v, allowed, w = _inputs()
  dense = lambda q, k, v: jnp.sum(attention(q, k, v, allowed) * w)
  flash = lambda q, k, v: jnp.sum(blockwise_attention(q, k, v, allowed, block) * w)
  o_ref, o = attention(q, k, v, allowed), blockwise_attention(q, k, v, allowed, block)
  np.testing.assert_allclose(np.asarray(o), np.asarray(o_ref), atol=1e-5)
  g_ref = jax.grad(dense, argnums=(0, 1, 2))(q, k, v)
  g = jax.jit(jax.grad(flash, argnums=(0, 1, 2)))(q, k, v)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


@pytest.mark.numerics  # golden / equivalence: also under another ISA
@pytest.mark.parametrize("block", [1, 4, 5, 10, 11])  # ragged last block; 11 = T: one block
def test_causal_blocks_equal_one_block_on_every_real_query(block):
  """Queries in blocks against the keys up to their block's last query: the real queries'
  outputs and every gradient equal the one-block attention's (left padding in row 1, and
  two packed segments in row 0)."""
  q, k, v, allowed, w = _inputs()
  seg = jnp.asarray([[1] * 6 + [2] * 5, [1] * 11])
  allowed = allowed & (seg[:, :, None] == seg[:, None, :])
  real = np.asarray(jnp.any(allowed, -1))  # queries that attend a key
  one = lambda q, k, v: jnp.sum(attention(q, k, v, allowed) * w)
  blocks = lambda q, k, v: jnp.sum(attention(q, k, v, allowed, causal_block=block) * w)
  o_ref = np.asarray(attention(q, k, v, allowed))
  o = np.asarray(jax.jit(attention, static_argnums=4)(q, k, v, allowed, block))
  np.testing.assert_allclose(o[real], o_ref[real], atol=1e-5)
  g_ref = jax.grad(one, argnums=(0, 1, 2))(q, k, v)
  g = jax.jit(jax.grad(blocks, argnums=(0, 1, 2)))(q, k, v)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


@pytest.mark.numerics  # golden / equivalence: also under another ISA
@pytest.mark.parametrize("t", [1, 4])  # a decode step; a chunk of queries
def test_prefix_attention_equals_dense_over_the_prefix_copied_to_each_row(t):
  """2 prompts (one left-padded) x 3 rows each: the shared prefix, then each row's own
  causal keys (one row with a masked own slot)."""
  p, r, sp, so, h, kh, e = 2, 3, 5, 6, 4, 2, 8
  ks = jax.random.split(jax.random.key(7), 5)
  q = jax.random.normal(ks[0], (p * r, t, h, e))
  pk, pv = (jax.random.normal(k, (p, sp, kh, e)) for k in ks[1:3])
  k, v = (jax.random.normal(x, (p * r, so, kh, e)) for x in ks[3:5])
  pvalid = jnp.ones((p, sp), bool).at[1, :2].set(False)
  own = (jnp.arange(so)[None, :] <= jnp.arange(so - t, so)[:, None])[None]
  allowed = jnp.broadcast_to(own, (p * r, t, so)).at[4, :, 1].set(False)
  head_major = lambda x: jnp.swapaxes(x, 1, 2)  # as the KV cache stores them
  o = jax.jit(prefix_attention)(q, head_major(k), head_major(v), allowed, head_major(pk),
                                head_major(pv), pvalid)
  rows = lambda x: jnp.repeat(x, r, axis=0)
  ref = attention(q, jnp.concatenate([rows(pk), k], 1), jnp.concatenate([rows(pv), v], 1),
                  jnp.concatenate([jnp.broadcast_to(rows(pvalid)[:, None], (p * r, t, sp)),
                                   allowed], -1))
  np.testing.assert_allclose(np.asarray(o), np.asarray(ref), atol=1e-6)


@pytest.mark.numerics  # golden / equivalence: also under another ISA
@pytest.mark.parametrize("t", [1, 4])
def test_cache_attention_equals_dense_over_kv_head_major_keys(t):
  """The KV cache's layout ([B, K, S, E]) read in place gives `attention`'s output."""
  q, k, v, allowed, _ = _inputs(b=3, t=11, h=6, kh=3, e=8)
  q, allowed = q[:, -t:], allowed[:, -t:]  # the last t queries against all 11 keys
  o = jax.jit(cache_attention)(q, jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2), allowed)
  np.testing.assert_allclose(np.asarray(o), np.asarray(attention(q, k, v, allowed)),
                             atol=1e-6)


def test_blockwise_backward_keeps_no_score_matrix():
  b, t, h, e = 1, 256, 4, 8
  q, k, v, allowed, w = _inputs(b=b, t=t, h=h, kh=2, e=e)
  for fn, has_scores in ((attention, True), (lambda *a: blockwise_attention(*a, block=32), False)):
    _, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, allowed), q, k, v)
    sizes = [x.size for x in jax.tree.leaves(vjp)]
    assert (max(sizes) >= h * t * t) == has_scores, sizes  # residuals of the backward


@pytest.mark.parametrize("remat,impl", [("dots", "blockwise"), ("full", "dense"),
                                        ("none", "blockwise"), ("dots", "dense")])
def test_decoder_remat_and_attention_do_not_change_outputs_or_grads(remat, impl):
  ids = jnp.asarray(np.random.RandomState(0).randint(0, 67, (2, 9)), jnp.int32)
  mask = jnp.ones_like(ids).at[0, :3].set(0)
  pos = positions_from_mask(mask)

  def loss(model):
    h, _ = model(ids, pos, mask)
    return jnp.sum(model.logits(h) * mask[..., None])

  from flax import nnx
  ref = create_model(TINY.replace(causal_block=0), seed=1)  # one [T, T] block, no remat
  other = create_model(TINY.replace(attention=impl, causal_block=4), seed=1, remat=remat)
  l_ref, g_ref = nnx.value_and_grad(loss)(ref)
  l, g = nnx.value_and_grad(loss)(other)
  np.testing.assert_allclose(float(l), float(l_ref), rtol=1e-5)
  for a, b in zip(jax.tree.leaves(nnx.to_pure_dict(g)), jax.tree.leaves(nnx.to_pure_dict(g_ref))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4)


def test_bad_remat_and_attention_names():
  with pytest.raises(ValueError, match="remat"):
    create_model(TINY, remat="sometimes")
  with pytest.raises(ValueError, match="attention"):
    TINY.replace(attention="flash3")


@pytest.mark.numerics  # golden / equivalence: also under another ISA
def test_swiglu_backward_equals_autodiff():
  """The decoder's hand-written silu(g) * u backward equals JAX's autodiff of it."""
  from rljax.models.decoder import swiglu
  ks = jax.random.split(jax.random.key(3), 3)
  g, u, w = (4 * jax.random.normal(k, (5, 7)) for k in ks)  # large |g|: both sigmoid tails
  plain = lambda g, u: jnp.sum(jax.nn.silu(g) * u * w)
  mine = lambda g, u: jnp.sum(swiglu(g, u) * w)
  np.testing.assert_allclose(mine(g, u), plain(g, u), rtol=1e-6)
  for a, b in zip(jax.grad(mine, (0, 1))(g, u), jax.grad(plain, (0, 1))(g, u)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_layer_unroll_policy():
  """Shallow models unroll; deep ones loop unless asked (the trainer asks on CPU), and the
  cached or rematerialized forward loops even then."""
  from rljax.models.decoder import layer_unroll
  deep = TINY.replace(num_layers=30)
  assert layer_unroll(TINY) == 2 and layer_unroll(TINY, cached=True) == 2
  assert layer_unroll(deep) == 1 and layer_unroll(deep, override=30) == 30
  assert layer_unroll(deep, override=30, cached=True) == 1
  assert layer_unroll(deep, override=30, remat=True) == 1
