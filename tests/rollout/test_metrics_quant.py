"""Mismatch metrics against hand-computed values; the quantizers' grids and error bounds."""
import math

import jax
import jax.numpy as jnp
import numpy as np

from rljax.rollout import QuantNumerics, fake_quant, fake_quant_weight, mismatch_metrics
from rljax.rollout.quant import contracting_axes


def test_mismatch_metrics_golden():
  q = np.array([[0.5, 0.5, 0.2, 0.3]])
  p = np.array([[0.5, 0.3, 0.5, 0.0]])  # last token masked out (p = 0 there)
  mask = np.array([[1, 1, 1, 0]])
  with np.errstate(divide="ignore"):
    out = mismatch_metrics(jnp.log(q), jnp.log(p), mask)
  r = np.array([1.0, 0.6, 2.5])
  lr = np.log(r)
  np.testing.assert_allclose(float(out["abs_log_ratio_mean"]), np.abs(lr).mean(), rtol=1e-6)
  np.testing.assert_allclose(float(out["abs_log_ratio_max"]), math.log(2.5), rtol=1e-6)
  np.testing.assert_allclose(float(out["kl_q_p"]), (r - 1 - lr).mean(), rtol=1e-5)
  np.testing.assert_allclose(float(out["kl_q_p_k1"]), -lr.mean(), rtol=1e-5)
  assert float(out["frac_ratio_outside_0.9_1.1"]) == np.float32(2 / 3)
  assert float(out["frac_ratio_outside_0.5_2"]) == np.float32(1 / 3)
  qm, pm = q[0, :3], p[0, :3]
  np.testing.assert_allclose(float(out["prob_corr"]), np.corrcoef(qm, pm)[0, 1], rtol=1e-5)
  assert float(out["num_tokens"]) == 3
  np.testing.assert_allclose(float(out["chi2"]), (r ** 2).mean() - 1, rtol=1e-5)
  np.testing.assert_allclose(float(out["ppl_ratio"]), np.exp(-lr.mean()), rtol=1e-5)
  same = mismatch_metrics(jnp.log(q), jnp.log(q), mask)
  assert float(same["kl_q_p"]) == 0 and float(same["prob_corr"]) > 0.99999
  none = mismatch_metrics(jnp.log(q), jnp.log(q), 0 * mask)
  assert all(np.isfinite(float(v)) for v in none.values())
  # A support mismatch (p = 0 on a sampled token) is large and finite, not inf / nan.
  with np.errstate(divide="ignore"):
    bad = mismatch_metrics(jnp.log(q), jnp.log(p), np.ones_like(mask))
  assert all(np.isfinite(float(v)) for v in bad.values()) and float(bad["kl_q_p"]) > 1


def test_mismatch_metrics_by_response_length():
  """K3 per response-length quarter: the mean over the responses of that length of their
  mean k3, and the fraction of them with mean |log r| > 0.1."""
  rng = np.random.RandomState(0)
  b, t = 12, 8
  lengths = np.array([1, 2, 2, 3, 4, 5, 6, 7, 8, 8, 0, 6])
  mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float32)
  logq = np.log(rng.uniform(0.1, 1, (b, t)))
  logp = logq + rng.randn(b, t) * rng.choice([0.01, 0.5], (b, 1))
  out = mismatch_metrics(jnp.asarray(logq), jnp.asarray(logp), jnp.asarray(mask), by_length=True)
  lr = logp - logq
  k3 = np.exp(lr) - 1 - lr
  for j in range(4):
    rows = [i for i in range(b) if lengths[i] and min(3, int(np.ceil(lengths[i] / 2)) - 1) == j]
    want = np.mean([k3[i, :lengths[i]].mean() for i in rows])
    far = np.mean([np.abs(lr[i, :lengths[i]]).mean() > 0.1 for i in rows])
    np.testing.assert_allclose(float(out[f"kl_q_p_len{j}"]), want, rtol=1e-5)
    np.testing.assert_allclose(float(out[f"frac_seqs_abs_log_ratio_gt_0.1_len{j}"]), far,
                               atol=1e-6)


def test_weight_quantization_per_channel_and_groups():
  w = jax.random.normal(jax.random.key(0), (2, 16, 3, 4))  # [L, D, H, E]: input axis 1
  for bits, qmax in ((8, 127), (4, 7)):
    fq = np.asarray(fake_quant_weight(w, (1,), bits))
    scale = np.abs(np.asarray(w)).max(axis=1, keepdims=True) / qmax
    grid = fq / scale
    np.testing.assert_allclose(grid, np.round(grid), atol=1e-4)  # on the integer grid
    assert np.abs(grid).max() <= qmax + 1e-4
    assert (np.abs(fq - np.asarray(w)) <= scale / 2 + 1e-6).all()
    np.testing.assert_allclose(np.abs(fq).max(1), np.abs(np.asarray(w)).max(1), rtol=1e-6)
  g = np.asarray(fake_quant_weight(w, (1,), 4, group_size=4)).reshape(2, 4, 4, 3, 4)
  wg = np.asarray(w).reshape(2, 4, 4, 3, 4)
  scale = np.abs(wg).max(axis=2, keepdims=True) / 7
  np.testing.assert_allclose(g / scale, np.round(g / scale), atol=1e-4)
  assert np.abs(g - wg).max() < np.abs(np.asarray(fake_quant_weight(w, (1,), 4)) -
                                       np.asarray(w)).max()
  wo = jax.random.normal(jax.random.key(1), (2, 3, 4, 8))  # [L, H, E, D]: inputs (1, 2)
  fo = np.asarray(fake_quant_weight(wo, (1, 2), 8)).reshape(2, 12, 8)
  so = np.abs(np.asarray(wo)).reshape(2, 12, 8).max(1, keepdims=True) / 127
  np.testing.assert_allclose(fo / so, np.round(fo / so), atol=1e-4)


def test_activation_and_kv_numerics():
  assert contracting_axes("btd,dhe->bthe") == (2,)
  assert contracting_axes("bthe,hed->btd") == (2, 3)
  x = jax.random.normal(jax.random.key(2), (2, 3, 8))
  w = jax.random.normal(jax.random.key(3), (8, 5))
  want = jnp.einsum("btd,df->btf", fake_quant(x, (2,), 8), w)
  np.testing.assert_array_equal(np.asarray(QuantNumerics(act_bits=8).dot("btd,df->btf", x, w)),
                                np.asarray(want))
  np.testing.assert_array_equal(np.asarray(QuantNumerics(kv_bits=4).dot("btd,df->btf", x, w)),
                                np.asarray(jnp.einsum("btd,df->btf", x, w)))
  kv = jax.random.normal(jax.random.key(4), (2, 3, 2, 8))  # [B, T, K, E]
  got = np.asarray(QuantNumerics(kv_bits=4).kv(kv))
  scale = np.abs(np.asarray(kv)).max(-1, keepdims=True) / 7  # per token, per head
  np.testing.assert_allclose(got / scale, np.round(got / scale), atol=1e-4)
  assert len(np.unique(np.round(got / scale))) <= 15
  assert QuantNumerics().kv(kv) is kv
