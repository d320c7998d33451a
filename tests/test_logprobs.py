"""Chunked logprobs / entropy equal the naive [B, T, V] computation, values and gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.logprobs import naive_token_logprobs, sampling_logits, token_logprobs

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics


def _inputs(b=3, t=7, d=16, v=50, seed=0):
  k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
  h = jax.random.normal(k1, (b, t, d))
  w = jax.random.normal(k2, (d, v)) * 0.5
  y = jax.random.randint(k3, (b, t), 0, v)
  return h, w, y


@pytest.mark.parametrize("temperature,top_k,top_p,chunk", [
    (1.0, 0, 1.0, 4), (0.7, 0, 1.0, 5), (1.3, 10, 1.0, 8), (1.0, 0, 0.8, 6), (0.9, 12, 0.9, 21)])
def test_chunked_equals_naive_values_and_grads(temperature, top_k, top_p, chunk):
  h, w, y = _inputs()
  # targets inside the truncated support, so log q is finite everywhere
  support = sampling_logits(jnp.einsum("btd,dv->btv", h, w), temperature, top_k, top_p)
  y = jnp.argmax(support + jax.random.gumbel(jax.random.key(5), support.shape), axis=-1)
  kw = dict(temperature=temperature, top_k=top_k, top_p=top_p)
  a = token_logprobs(h, w, y, chunk_size=chunk, **kw)
  b = naive_token_logprobs(h, w, y, **kw)
  for key in ("logp_BxT", "entropy_BxT"):
    np.testing.assert_allclose(a[key], b[key], atol=1e-5, rtol=1e-5)

  def loss(fn, h, w, **extra):
    o = fn(h, w, y, **kw, **extra)
    return jnp.sum(o["logp_BxT"] * 0.3) + jnp.sum(o["entropy_BxT"] * 0.1)

  ga = jax.grad(lambda h, w: loss(token_logprobs, h, w, chunk_size=chunk), (0, 1))(h, w)
  gb = jax.grad(lambda h, w: loss(naive_token_logprobs, h, w), (0, 1))(h, w)
  for x, z in zip(ga, gb):
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(x, z, atol=1e-5, rtol=1e-5)


def test_head_logprobs_gather_and_full_support():
  h, w, y = _inputs()
  ids = jnp.broadcast_to(jnp.arange(w.shape[1]), y.shape + (w.shape[1],))
  out = token_logprobs(h, w, y, ids, chunk_size=5)
  full = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", h, w), axis=-1)
  np.testing.assert_allclose(out["head_logp_BxTxK"], full, atol=1e-5)
  np.testing.assert_allclose(jnp.exp(out["head_logp_BxTxK"]).sum(-1), 1.0, atol=1e-5)


def test_truncation_semantics():
  logits = jnp.log(jnp.array([[0.5, 0.25, 0.15, 0.1]]))
  x = sampling_logits(logits, 1.0, top_k=2)
  np.testing.assert_allclose(jax.nn.softmax(x), [[2 / 3, 1 / 3, 0, 0]], atol=1e-6)
  x = sampling_logits(logits, 1.0, top_p=0.7)  # 0.5 < 0.7 -> keep 0.25 too; stop there
  np.testing.assert_allclose(jax.nn.softmax(x), [[2 / 3, 1 / 3, 0, 0]], atol=1e-6)
  x = sampling_logits(logits, 1.0, top_p=0.5)  # the first token alone reaches 0.5
  np.testing.assert_allclose(jax.nn.softmax(x), [[1, 0, 0, 0]], atol=1e-6)
  for bad in (0.0, -1.0):
    with pytest.raises(ValueError, match="temperature"):
      sampling_logits(logits, bad)


def test_never_materializes_full_logits():
  """The compiled chunked function holds no [B*T, V] float32 buffer."""
  h, w, y = _inputs(b=4, t=64, d=16, v=2048)
  g = jax.jit(jax.grad(lambda h, w: token_logprobs(h, w, y, chunk_size=32)["logp_BxT"].sum(),
                       (0, 1)))
  hlo = g.lower(h, w).compile().as_text()
  assert "f32[256,2048]" not in hlo and "f32[4,64,2048]" not in hlo
  assert "f32[32,2048]" in hlo


def test_vd_layout_equals_dv_and_keeps_the_gradient_in_its_layout():
  """layout="vd" takes the unembedding as [V, D] (a tied embedding as stored): the same
  logprobs and gradients as [D, V], and the weight gradient is never a [D, V] array."""
  h, w, y = _inputs(b=4, t=64, d=16, v=2048)
  f = lambda h, w, layout: token_logprobs(h, w, y, chunk_size=32, layout=layout)["logp_BxT"]
  np.testing.assert_allclose(f(h, w.T, "vd"), f(h, w, "dv"), rtol=1e-6, atol=1e-6)
  grad = lambda layout, w: jax.jit(jax.grad(lambda h, w: f(h, w, layout).sum(), (0, 1)))
  gh_dv, gw_dv = grad("dv", w)(h, w)
  gh_vd, gw_vd = grad("vd", w.T)(h, w.T)
  np.testing.assert_allclose(gh_vd, gh_dv, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gw_vd, gw_dv.T, rtol=1e-5, atol=1e-6)
  hlo = grad("vd", w.T).lower(h, w.T).compile().as_text()
  assert "f32[16,2048]" not in hlo
  with pytest.raises(ValueError, match="layout"):
    token_logprobs(h, w, y, layout="vdx")
