"""SPEC §1: GRPO / Dr.GRPO / RLOO advantages, DAPO reward-side helpers."""
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import registry
from rljax.objectives import informative_groups, overlong_penalty

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics

R = np.array([1.0, 0.0, 0.5, 0.5,   0.3, 0.3, 0.3, 0.3,   2.0, -1.0, 0.0, 1.0], np.float32)
G = 4


def _adv(name, rewards=R, group_size=G, **kw):
  entry = registry.get("advantage", name)
  return entry(jnp.asarray(rewards), group_size, entry.make_config(**kw))


def _groups(x):
  return np.asarray(x, np.float64).reshape(-1, G)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_matches_numpy(scale):
  adv, metrics = _adv("grpo", scale_rewards=scale)
  r = _groups(R)
  centered = r - r.mean(1, keepdims=True)
  std = {"group": r.std(1, ddof=1, keepdims=True), "batch": R.astype(np.float64).std(ddof=1),
         "none": None}[scale]
  want = centered if std is None else centered / (std + 1e-4)
  want[1] = 0.0
  np.testing.assert_allclose(adv, want.reshape(-1), rtol=1e-5, atol=1e-6)
  assert float(metrics["adv/frac_equal_groups"]) == pytest.approx(1 / 3)


def test_dr_grpo_and_rloo_match_numpy():
  r = _groups(R)
  adv, _ = _adv("dr_grpo")
  np.testing.assert_allclose(adv, (r - r.mean(1, keepdims=True)).reshape(-1), atol=1e-6)
  adv, _ = _adv("rloo")
  loo = (r.sum(1, keepdims=True) - r) / (G - 1)
  np.testing.assert_allclose(adv, (r - loo).reshape(-1), atol=1e-6)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_equal_reward_groups_give_exact_zeros(name):
  rewards = np.array([0.1, 0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 1.0], np.float32)
  adv, _ = _adv(name, rewards)
  assert np.all(np.asarray(adv) == 0.0) and np.all(np.isfinite(adv))


def test_whole_groups_required():
  with pytest.raises(ValueError, match="not divisible by group_size"):
    _adv("grpo", R[:10])
  with pytest.raises(ValueError, match="rloo needs group_size >= 2"):
    _adv("rloo", R, 1)
  with pytest.raises(ValueError, match="fixed"):
    registry.get("advantage", "dr_grpo").make_config(scale_rewards="group")
  with pytest.raises(ValueError, match="valid: group, batch, none"):
    registry.get("advantage", "grpo").make_config(scale_rewards="std")


def test_group_size_one_gives_zeros_not_nan():
  adv, _ = _adv("grpo", R, 1)
  assert np.all(np.asarray(adv) == 0.0)


def test_dapo_helpers():
  np.testing.assert_array_equal(informative_groups(jnp.asarray(R), G), [True, False, True])
  pen = overlong_penalty(jnp.array([10, 80, 90, 100, 120]), max_len=100, cache_len=20)
  np.testing.assert_allclose(pen, [0.0, 0.0, -0.5, -1.0, -1.0], atol=1e-6)  # float32
