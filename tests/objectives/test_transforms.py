"""SPEC §3 (CoRT) golden checks, TIS / MIS weights, and optax-like composition."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import registry
from rljax.objectives import broadcast_advantage, chain, cort_lambda, criterion_deltas
from rljax.objectives import CortConfig, EmptyState, identity, smoothstep

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics

B, T = 4, 6


def _batch(seed=0, delta_scale=3.0):
  rng = np.random.default_rng(seed)
  mask = np.ones((B, T), np.float32)
  mask[1, 4:] = 0
  mask[2, 1:] = 0
  mask[3, :] = 0  # an all-padding row
  minus = rng.normal(-2, 1, size=(B, T)).astype(np.float32)
  delta = np.clip(rng.normal(0, delta_scale, size=(B, T)), -10, 10).astype(np.float32)
  adv_B = np.array([1.5, -0.7, 0.3, 0.0], np.float32)
  return {"mask_BxT": jnp.asarray(mask), "logp_plus_BxT": jnp.asarray(minus + delta),
          "logp_minus_BxT": jnp.asarray(minus), "adv_B": adv_B}


def _run(name, batch, step=0, **kw):
  t = registry.get("transform", name)(registry.get("transform", name).make_config(**kw))
  state = t.init()
  if step:
    state = state._replace(step=jnp.int32(step))
  adv = broadcast_advantage(jnp.asarray(batch["adv_B"]), batch["mask_BxT"])
  out, new_state, metrics = t.update(adv, batch, state)
  return out, new_state, metrics


def _weights(name, batch, **kw):
  ones = dict(batch, adv_B=np.ones(B, np.float32))
  out, _, _ = _run(name, ones, **kw)
  return np.where(np.asarray(batch["mask_BxT"]) > 0, np.asarray(out), 1.0)


def test_zero_delta_gives_unit_weights():
  batch = _batch()
  batch["logp_plus_BxT"] = batch["logp_minus_BxT"]
  for name in ("cort", "cort_no_norm", "cort_no_ramp", "cort_no_norm_no_ramp"):
    np.testing.assert_array_equal(_weights(name, batch, step=50), 1.0)


def test_raw_weights_lie_in_the_eta_band():
  w = _weights("cort_no_norm_no_ramp", _batch(delta_scale=5.0))
  mask = np.asarray(_batch()["mask_BxT"]) > 0
  assert np.all(w[mask] > 0.75) and np.all(w[mask] < 1.25)
  assert w[mask].max() > 1.2 and w[mask].min() < 0.8  # the band is reached
  extreme = _batch()
  extreme["logp_plus_BxT"] = extreme["logp_minus_BxT"] + 1e4 * jnp.sign(
      jnp.arange(B * T).reshape(B, T) % 2 - 0.5)
  w = _weights("cort_no_norm_no_ramp", extreme)
  assert np.all(w >= 0.75) and np.all(w <= 1.25)


def test_normalized_weights_have_unit_mean_per_response():
  batch = _batch()
  mask = np.asarray(batch["mask_BxT"])
  for name in ("cort", "cort_no_ramp"):
    w = _weights(name, batch, step=70)
    means = (w * mask).sum(-1)[:3] / mask.sum(-1)[:3]
    np.testing.assert_allclose(means, 1.0, atol=1e-6)
    np.testing.assert_array_equal(w[3], 1.0)  # the all-padding row
  w = _weights("cort_no_norm", batch, step=70)
  assert not np.allclose((w * mask).sum(-1)[:2] / mask.sum(-1)[:2], 1.0, atol=1e-4)


def test_smoothstep_ramp():
  assert float(smoothstep(jnp.float32(0.5))) == 0.5
  for u in (0.0, 1.0):
    assert float(jax.grad(lambda u: smoothstep(u))(jnp.float32(u))) == 0.0
  cfg = CortConfig(ramp_steps=100, warmup_steps=10)
  assert float(cort_lambda(60, cfg)) == 0.5
  assert float(cort_lambda(5, cfg)) == 0.0 and float(cort_lambda(500, cfg)) == 1.0
  assert float(cort_lambda(0, CortConfig(ramp=False))) == 1.0


def test_lambda_zero_gives_unit_weights_and_state_counts_steps():
  batch = _batch()
  np.testing.assert_array_equal(_weights("cort", batch), 1.0)  # k = 0 -> λ = 0
  np.testing.assert_array_equal(_weights("cort", batch, step=7, warmup_steps=8), 1.0)
  t = registry.get("transform", "cort")(CortConfig(ramp_steps=4))
  state, adv = t.init(), broadcast_advantage(jnp.asarray(batch["adv_B"]), batch["mask_BxT"])
  lams = []
  for _ in range(6):
    _, state, m = t.update(adv, batch, state)
    lams.append(float(m["cort/lambda"]))
  assert int(state.step) == 6
  # float32 λ against the float64 formula: a few ulp
  np.testing.assert_allclose(lams, [smoothstep(u) for u in np.minimum(np.arange(6) / 4, 1)],
                             rtol=1e-6, atol=1e-7)


def test_padding_never_changes_a_weight():
  batch = _batch()
  mask = np.asarray(batch["mask_BxT"]) > 0
  noisy = dict(batch, logp_plus_BxT=jnp.where(mask, batch["logp_plus_BxT"], jnp.nan),
               logp_minus_BxT=jnp.where(mask, batch["logp_minus_BxT"], 1e9))
  for name in ("cort", "cort_no_norm"):
    w0, w1 = _weights(name, batch, step=99), _weights(name, noisy, step=99)
    np.testing.assert_array_equal(w0, w1)
    np.testing.assert_array_equal(w1[~mask], 1.0)


def test_cort_scales_advantage_and_stops_gradient():
  batch = _batch()
  out, _, metrics = _run("cort_no_ramp", batch)
  w = _weights("cort_no_ramp", batch)
  np.testing.assert_allclose(out, batch["adv_B"][:, None] * w * np.asarray(batch["mask_BxT"]),
                             rtol=1e-6)
  for k in ("cort/weight_mean", "cort/weight_min", "cort/weight_max", "cort/delta_mean"):
    assert np.isfinite(float(metrics[k]))
  g = jax.grad(lambda lp: jnp.sum(_run("cort_no_ramp", dict(batch, logp_plus_BxT=lp))[0]))(
      batch["logp_plus_BxT"])
  np.testing.assert_array_equal(g, 0.0)


def test_perturbation_only_drops_the_advantage():
  batch = _batch()
  out, _, _ = _run("cort_perturb_only", batch, step=200)
  w = _weights("cort", batch, step=200)
  mask = np.asarray(batch["mask_BxT"])
  # float32 weights near 1: one ulp there is 1.2e-7, so a few ulp
  np.testing.assert_allclose(out, (w - 1) * mask, atol=1e-6)
  np.testing.assert_allclose((np.asarray(out) * mask).sum(-1), 0.0, atol=1e-6)


def test_criterion_deltas():
  plus = jnp.zeros((2, 3))
  minus = jnp.stack([jnp.full((2, 3), -1.0), jnp.zeros((2, 3))])
  mask = jnp.array([[1, 1, 0], [1, 0, 0]])
  np.testing.assert_allclose(criterion_deltas(plus, minus, mask), [1.0, 0.0], atol=1e-6)  # f32


# ------------------------------------------------------------ TIS / MIS


def _is_batch():
  rng = np.random.default_rng(2)
  mask = np.ones((3, 4), np.float32)
  mask[2, 2:] = 0
  sampler = rng.normal(-1.5, 0.5, size=(3, 4)).astype(np.float32)
  log_r = np.array([[2.0, -1.0, 0.1, 0.0], [0.5, 0.4, 0.6, 0.7], [-0.1, -0.2, 9.0, 9.0]],
                   np.float32)
  return {"mask_BxT": mask, "sampler_logp_BxT": sampler, "old_logp_BxT": sampler + log_r,
          "adv_BxT": jnp.asarray(mask)}, log_r, mask


@pytest.mark.parametrize("name", ["tis", "tis_seq_geo", "tis_seq_prod",
                                  "mis", "mis_seq_geo", "mis_seq_prod"])
def test_importance_weights_match_numpy(name):
  batch, log_r, mask = _is_batch()
  log_r = np.where(mask > 0, log_r, 0.0)
  if name.endswith("seq_geo"):
    log_r = np.broadcast_to((log_r.sum(-1) / mask.sum(-1))[:, None], log_r.shape)
  elif name.endswith("seq_prod"):
    log_r = np.broadcast_to(log_r.sum(-1)[:, None], log_r.shape)
  r = np.exp(log_r.astype(np.float64))
  w = np.minimum(r, 2.0) if name.startswith("tis") else r * ((r >= 0.5) & (r <= 5.0))
  t = registry.get("transform", name)(registry.get("transform", name).make_config())
  out, state, metrics = t.update(batch["adv_BxT"], batch, t.init())
  assert state == EmptyState()
  np.testing.assert_allclose(out, w * mask, rtol=1e-5)
  assert all(np.isfinite(float(v)) for v in metrics.values())


def test_chain_threads_states_and_matches_sequential_application():
  batch = dict(_batch(), **{k: v for k, v in zip(
      ("sampler_logp_BxT", "old_logp_BxT"),
      (jnp.full((B, T), -1.0), jnp.full((B, T), -0.2)))})
  cort_t = registry.get("transform", "cort_no_ramp")(CortConfig(ramp=False))
  tis_t = registry.get("transform", "tis")(registry.get("transform", "tis").make_config())
  both = chain(identity(), cort_t, tis_t)
  state = both.init()
  assert isinstance(state, tuple) and len(state) == 3
  adv = broadcast_advantage(jnp.asarray(batch["adv_B"]), batch["mask_BxT"])
  out, new_state, metrics = both.update(adv, batch, state)
  a1, _, _ = cort_t.update(adv, batch, cort_t.init())
  a2, _, _ = tis_t.update(a1, batch, tis_t.init())
  np.testing.assert_allclose(out, a2, rtol=1e-6, atol=1e-7)  # float32, fused vs. sequential
  assert int(new_state[1].step) == 1
  assert "cort/weight_mean" in metrics and "tis/weight_mean" in metrics


# --------------------------------------------------------------------- oracle credit


def _labelled(seed=0):
  b = _batch(seed)
  rng = np.random.default_rng(seed + 10)
  label = (rng.random((B, T)) < 0.3).astype(np.float32)
  label[0, :2] = 1.0  # row 0 has labelled tokens for sure
  return dict(b, credit_label_BxT=jnp.asarray(label)), label


@pytest.mark.parametrize("step,factor", [(0, 2.0), (20, 2.0), (100, 4.0), (250, 0.5)])
def test_oracle_credit_matches_numpy(step, factor):
  """w = 1 + λ_k (factor − 1)·label, divided by its mean over each response's active tokens;
  exactly 1 on padding; Â = w·A; the state counts updates as CoRT's does."""
  batch, label = _labelled()
  out, state, m = _run("oracle_credit", batch, step=step, factor=factor, ramp_steps=100)
  mask = np.asarray(batch["mask_BxT"]) > 0
  u = min(max(step / 100, 0.0), 1.0)
  lam = 3 * u * u - 2 * u ** 3
  raw = np.where(mask, 1.0 + lam * (factor - 1.0) * label, 1.0)
  w = np.ones_like(raw)
  for i in range(B):
    if mask[i].any():
      w[i] = np.where(mask[i], raw[i] / raw[i][mask[i]].mean(), 1.0)
  want = batch["adv_B"][:, None] * mask * w
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-7)
  assert int(state.step) == step + 1
  np.testing.assert_allclose(float(m["oracle/lambda"]), lam, rtol=1e-5)
  np.testing.assert_allclose(float(m["oracle/weight_max"]), w[mask].max(), rtol=1e-5)


def test_oracle_credit_needs_labels_and_a_positive_factor():
  with pytest.raises(ValueError, match="credit_label_BxT"):
    _run("oracle_credit", _batch())
  with pytest.raises(ValueError, match="factor"):
    registry.get("transform", "oracle_credit").make_config(factor=0.0).check()


def test_credit_metrics_match_numpy():
  """Labelled share of the loss tokens and of Σ|Â|, and the mean weight |Â|/|A| on labelled
  and on other tokens; uniform weights give a share of Σ|Â| equal to the |A|-weighted token
  share and weights of exactly 1."""
  from rljax.objectives.transforms import credit_metrics
  batch, label = _labelled(1)
  mask = np.asarray(batch["mask_BxT"]) > 0
  adv = broadcast_advantage(jnp.asarray(batch["adv_B"]), batch["mask_BxT"])
  out, _, _ = _run("oracle_credit", batch, step=100, factor=3.0, ramp_steps=100)
  m = credit_metrics(adv, out, batch)
  a, o = np.abs(np.asarray(adv)), np.abs(np.asarray(out))
  lab, rest = mask & (label > 0), mask & ~(label > 0)
  np.testing.assert_allclose(float(m["credit/label_token_frac"]), lab.sum() / mask.sum(),
                             rtol=1e-5)
  np.testing.assert_allclose(float(m["credit/label_adv_share"]), o[lab].sum() / o[mask].sum(),
                             rtol=1e-5)
  np.testing.assert_allclose(float(m["credit/label_weight"]), o[lab].sum() / a[lab].sum(),
                             rtol=1e-5)
  np.testing.assert_allclose(float(m["credit/other_weight"]), o[rest].sum() / a[rest].sum(),
                             rtol=1e-5)
  assert float(m["credit/label_weight"]) > 1.0 > float(m["credit/other_weight"])
  u = credit_metrics(adv, adv, batch)
  np.testing.assert_allclose(float(u["credit/label_adv_share"]), a[lab].sum() / a[mask].sum(),
                             rtol=1e-5)
  assert float(u["credit/label_weight"]) == pytest.approx(1.0, abs=1e-6)
  assert credit_metrics(adv, out, _batch(1)) == {}  # no labels, no metrics
