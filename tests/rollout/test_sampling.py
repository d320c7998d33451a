"""The token draw: the blocked inverse CDF and the top-k prefix paths sample exactly the
distribution of `sampling_logits` and record it; ties and wide nuclei fall back to the full
transform; an integer KV cache gives the fake-quantized numerics."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rljax.logprobs import sampling_logits
from rljax.models import init_cache, positions_from_mask
from rljax.rollout import QuantNumerics, SamplerConfig
from rljax.rollout.sampling import _prefix, draw, sample_step
from tests.rollout.helpers import TINY, tiny_model

V = 600  # not a multiple of the 256-token block


def _logits(rows, seed=0, scale=2.0):
  one = scale * jax.random.normal(jax.random.key(seed), (V,))
  return jnp.broadcast_to(one, (rows, V))


def _chi_square(tokens, q):
  observed = np.bincount(tokens, minlength=q.size)
  expected = q * tokens.size
  assert observed[q == 0].sum() == 0  # never outside the support
  big = expected >= 5
  obs = np.append(observed[big], observed[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  keep = exp > 0
  return stats.chisquare(obs[keep], exp[keep] * obs.sum() / exp[keep].sum()).pvalue


def test_blocked_inverse_cdf_draws_exp_logits_and_its_logz():
  rows = 20000
  x = _logits(rows).at[:, 300:520].set(-jnp.inf)  # two whole blocks partly / fully empty
  keys = jax.random.split(jax.random.key(1), rows)
  tok, logz = jax.jit(draw)(keys, x)
  np.testing.assert_allclose(np.asarray(logz), np.asarray(jax.nn.logsumexp(x, -1)), atol=1e-5)
  q = np.asarray(jax.nn.softmax(x[0]), np.float64)
  assert _chi_square(np.asarray(tok), q) > 1e-3


@pytest.mark.parametrize("top_k,top_p,prefix", [(24, 1.0, 256), (40, 0.8, 256), (0, 0.9, 256),
                                                (0, 0.95, 8)])
def test_sample_step_draws_and_records_the_truncated_distribution(top_k, top_p, prefix):
  rows = 12000
  cfg = SamplerConfig(temperature=0.8, top_k=top_k, top_p=top_p, top_p_prefix=prefix)
  x = _logits(rows, seed=2)
  keys = jax.random.split(jax.random.key(3), rows)
  tok, logq, hid, hlq = jax.jit(lambda x, k: sample_step(x, k, 5, cfg, 4))(x, keys)
  ref = np.asarray(jax.nn.log_softmax(sampling_logits(x[:1], 0.8, top_k, top_p))[0])
  tok = np.asarray(tok)
  np.testing.assert_allclose(np.asarray(logq), ref[tok], atol=1e-5)
  order = np.argsort(-ref)[:4]
  np.testing.assert_array_equal(np.asarray(hid[0]), order)
  np.testing.assert_allclose(np.asarray(hlq[0]), ref[order], atol=1e-5)
  assert _chi_square(tok, np.exp(ref.astype(np.float64))) > 1e-3


def test_prefix_is_exact_only_when_it_holds_the_support():
  x = jnp.asarray([[5.0, 4.0, 3.0, 3.0, 3.0, 1.0, 0.0, -1.0]])  # ties at the 3rd value
  keys = jax.random.split(jax.random.key(0), 1)
  _, ok = _prefix(x, keys, SamplerConfig(top_k=3), 0, 3)
  assert not bool(ok)  # top_k=3 keeps all three tied tokens: not inside a 3-prefix
  _, ok = _prefix(x, keys, SamplerConfig(top_k=2), 0, 2)
  assert bool(ok)
  cfg = SamplerConfig(top_p=0.99)
  _, ok = _prefix(x, keys, cfg, 0, 2)  # the nucleus is wider than 2 tokens
  assert not bool(ok)
  # Falling back keeps the recorded q exact: ties kept, nucleus wider than the prefix.
  for c in (SamplerConfig(temperature=1.0, top_k=3), SamplerConfig(top_p=0.99, top_p_prefix=2)):
    rows = jnp.broadcast_to(x, (64, 8))
    tok, logq, _, _ = sample_step(rows, jax.random.split(jax.random.key(1), 64), 0, c, 0)
    ref = np.asarray(jax.nn.log_softmax(sampling_logits(x, 1.0, c.top_k, c.top_p))[0])
    np.testing.assert_allclose(np.asarray(logq), ref[np.asarray(tok)], atol=1e-6)
    assert np.isfinite(np.asarray(logq)).all()


@pytest.mark.numerics  # golden / equivalence: also under another ISA
@pytest.mark.parametrize("bits", [8, 4])
def test_integer_kv_cache_equals_fake_quantized_forward(bits):
  numerics = QuantNumerics(kv_bits=bits)
  model = tiny_model(seed=4)
  model.numerics = numerics
  rng = np.random.RandomState(0)
  p, n, b = 5, 4, 2
  ids = jnp.asarray(rng.randint(2, TINY.vocab_size, (b, p + n)), jnp.int32)
  mask = jnp.ones_like(ids).at[1, :2].set(0)
  pos = positions_from_mask(mask)
  full = model.logits(model(ids, pos, mask)[0])
  cache = init_cache(TINY, b, p + n, kv_bits=bits)
  assert cache.k_LxBxKxSxE.dtype == jnp.int8
  assert cache.k_LxBxKxSxE.shape[-1] == TINY.head_dim // (8 // bits)
  h, cache = model(ids[:, :p], pos[:, :p], mask[:, :p], cache)
  got = [model.logits(h)]
  for i in range(p, p + n):
    h, cache = model(ids[:, i:i + 1], pos[:, i:i + 1], mask[:, i:i + 1], cache,
                     attend_len=i + 1)
    got.append(model.logits(h))
  got = jnp.concatenate(got, 1)
  m = np.asarray(mask).astype(bool)
  assert np.abs(np.asarray(got - full))[m].max() <= 1e-5
  assert cache.k_LxBxKxSxE.dtype == jnp.int8 and int(cache.index) == p + n
