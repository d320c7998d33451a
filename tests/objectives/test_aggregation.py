"""SPEC §2 aggregation modes; micro-batches with the global normalizer sum to the whole batch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import registry
from rljax.objectives import aggregate, make_normalizer
from tests.objectives import policy

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def test_modes_are_registered_exactly():
  assert registry.names("aggregation") == sorted(MODES)


def test_mode_values_by_hand():
  x = jnp.array([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0], [99.0, 99.0, 99.0]])
  mask = jnp.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
  want = {"token-mean": 10 / 4, "seq-mean-token-mean": (2 + 4) / 2,
          "seq-mean-token-sum": 10 / 2, "seq-mean-token-sum-norm": 10 / (2 * 3)}
  for mode, v in want.items():
    assert float(aggregate(x, mask, mode)) == pytest.approx(v)
  norm = make_normalizer(mask, max_len=5)
  assert float(aggregate(x, mask, "seq-mean-token-sum-norm", norm)) == pytest.approx(1.0)
  with pytest.raises(ValueError, match="valid aggregation names"):
    aggregate(x, mask, "sum")


def _split_check(loss_name, mode, splits, full_head=False, **kw):
  prob = policy.make_problem(seed=5, B=8, T=4, full_head=full_head)
  entry = registry.get("loss", loss_name)
  kw = dict(kw, agg=mode) if mode else kw
  cfg = entry.make_config(**kw)
  batch = {k: jnp.asarray(v) for k, v in prob["batch"].items()}
  norm = make_normalizer(batch["mask_BxT"])

  @jax.jit
  @jax.value_and_grad
  def loss(W, X, tokens, head_ids, batch):
    pol = policy.pol_from(W, X, tokens, head_ids)
    return entry(pol, dict(batch, normalizer=norm), cfg)[0]

  def run(lo, hi):
    return loss(jnp.asarray(prob["W"]), prob["X"][lo:hi], prob["tokens"][lo:hi],
                prob["head_ids"][lo:hi], policy.slice_rows(batch, lo, hi))

  whole = run(0, 8)
  parts = [run(lo, hi) for lo, hi in splits]
  np.testing.assert_allclose(sum(p[0] for p in parts), whole[0], atol=1e-6)
  np.testing.assert_allclose(sum(p[1] for p in parts), whole[1], atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_microbatches_sum_to_whole_batch(mode):
  _split_check("grpo", mode, [(0, 2), (2, 4), (4, 6), (6, 8)], beta=0.05, entropy_coef=0.01,
               dual_clip=3.0)


def test_microbatches_sum_for_real_and_topk_sc():
  _split_check("real", None, [(0, 4), (4, 8)], group_size=2, beta=0.05)
  _split_check("topk_sc_tis", "token-mean", [(0, 4), (4, 8)])


def test_local_normalizer_differs_from_global():
  prob = policy.make_problem(seed=5, B=8, T=4)
  x = jnp.asarray(prob["batch"]["adv_BxT"])
  mask = jnp.asarray(prob["batch"]["mask_BxT"])
  whole = aggregate(x, mask, "token-mean")
  local = aggregate(x[:2], mask[:2], "token-mean") + aggregate(x[2:], mask[2:], "token-mean")
  assert abs(float(whole - local)) > 1e-3
