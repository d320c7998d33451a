"""SPEC §4: REAL against an independent NumPy implementation; bounded, monotone weights."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import registry
from rljax.objectives import real_from_scores

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics

TAU = 0.5


def real_numpy(s, adv, G, tau):
  """log(1 + Σ_neg e^{s/τ}) + log(1 + Σ_pos e^{−s/τ}) per valid group, / all groups."""
  n = len(s) // G
  total = 0.0
  for g in range(n):
    sg, a = s[g * G:(g + 1) * G], adv[g * G:(g + 1) * G]
    pos, neg = a > 0, a <= 0
    if pos.any() and neg.any():
      total += np.log1p(np.exp(sg[neg] / tau).sum()) + np.log1p(np.exp(-sg[pos] / tau).sum())
  return total / n


def _inputs(seed, B=12, T=5):
  rng = np.random.default_rng(seed)
  logp = rng.normal(-1.0, 0.5, size=(B, T)).astype(np.float32)
  old = (logp + rng.normal(0, 0.3, size=(B, T))).astype(np.float32)
  mask = (rng.uniform(size=(B, T)) < 0.8).astype(np.float32)
  mask[:, 0] = 1
  adv = rng.normal(size=B).astype(np.float32)
  adv[4:8] = np.abs(adv[4:8]) + 0.1  # group 1 (G = 4): all positive -> invalid
  adv[8:12] = [0.0, -1.0, 0.0, -2.0]  # group 2: A <= 0 only -> invalid
  adv[0:4] = [1.0, -0.5, 0.0, 2.0]  # group 0: valid
  return logp, old, mask, adv


@pytest.mark.parametrize("seed", [0, 1])
def test_real_matches_numpy_reference(seed):
  logp, old, mask, adv = _inputs(seed)
  entry = registry.get("loss", "real")
  cfg = entry.make_config(group_size=4)
  batch = {"mask_BxT": mask, "adv_B": adv, "old_logp_BxT": old}
  loss, metrics = entry({"logp_BxT": jnp.asarray(logp)}, batch, cfg)
  s = ((logp - old) * mask).sum(-1) / mask.sum(-1)
  np.testing.assert_allclose(loss, real_numpy(s, adv, 4, TAU), rtol=1e-5)
  assert float(metrics["real/frac_valid_groups"]) == pytest.approx(1 / 3)
  # With KL: + beta · token-mean(k3).
  cfg_kl = entry.make_config(group_size=4, beta=0.1, kl="k3")
  ref = old + 0.2
  loss_kl, _ = entry({"logp_BxT": jnp.asarray(logp)}, dict(batch, ref_logp_BxT=ref), cfg_kl)
  k3 = np.exp(ref - logp) - (ref - logp) - 1
  np.testing.assert_allclose(loss_kl, loss + 0.1 * (k3 * mask).sum() / mask.sum(), rtol=1e-5)


def test_all_invalid_groups_give_zero_finite_loss_and_gradient():
  logp, old, mask, _ = _inputs(0)
  entry = registry.get("loss", "real")
  cfg = entry.make_config(group_size=4)
  for adv in (np.ones(12, np.float32), np.zeros(12, np.float32)):
    batch = {"mask_BxT": mask, "adv_B": adv, "old_logp_BxT": old}
    loss, g = jax.jit(jax.value_and_grad(lambda lp: entry({"logp_BxT": lp}, batch, cfg)[0]))(
        jnp.asarray(logp))
    assert float(loss) == 0.0
    assert bool(jnp.all(g == 0.0))


@jax.jit
def _grad(s, adv):
  return jax.grad(lambda s: real_from_scores(s, adv, 5, TAU, 1)[0])(s)


def _weights(s, adv):
  """|dL_group/ds̄_k| (the per-sample gradient weight), one group of 5."""
  return np.abs(np.asarray(_grad(jnp.asarray(s, jnp.float32), jnp.asarray(adv))))


ADV = np.array([1.0, 1.0, 1.0, -1.0, 0.0], np.float32)  # 3 positive, 2 negative


def test_weight_at_zero_logit():
  w = _weights(np.zeros(5), ADV)
  np.testing.assert_allclose(w[:3], (1 / TAU) / (1 + 3), rtol=1e-6)
  np.testing.assert_allclose(w[3:], (1 / TAU) / (1 + 2), rtol=1e-6)


def test_weight_is_bounded_and_monotone_and_finite():
  rng = np.random.default_rng(0)
  for scale in (0.1, 3.0, 300.0):
    s = rng.normal(size=5) * scale
    w = _weights(s, ADV)
    assert np.all(np.isfinite(w)) and np.all(w <= 1 / TAU + 1e-6)
    # Within a class: positives with lower s̄ and negatives with higher s̄ weigh more.
    pos, neg = s[:3], s[3:]
    assert np.all(np.diff(w[:3][np.argsort(pos)]) <= 1e-7)
    assert np.all(np.diff(w[3:][np.argsort(neg)]) >= -1e-7)
  grid = np.linspace(-6, 6, 13)
  w_pos = [_weights(np.array([x, 0.3, -0.2, 0.1, 0.4]), ADV)[0] for x in grid]
  w_neg = [_weights(np.array([0.2, 0.3, -0.2, x, 0.4]), ADV)[3] for x in grid]
  assert np.all(np.diff(w_pos) < 0) and np.all(np.diff(w_neg) > 0)
  assert max(w_pos + w_neg) <= 1 / TAU


def test_real_needs_whole_groups_and_group_size():
  entry = registry.get("loss", "real")
  logp, old, mask, adv = _inputs(0)
  batch = {"mask_BxT": mask, "adv_B": adv, "old_logp_BxT": old}
  with pytest.raises(ValueError, match="divisible"):
    entry({"logp_BxT": logp}, batch, entry.make_config(group_size=5))
  with pytest.raises(ValueError, match="group_size"):
    entry({"logp_BxT": logp}, batch, entry.make_config())
