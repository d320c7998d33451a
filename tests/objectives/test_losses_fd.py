"""Every registered loss: autodiff gradient == central finite differences (float64).

The policy is a tiny linear softmax. Stop-gradient quantities (ratios' anchors,
IS weights, top-k tail fill ρ, GSPO-token's sg(log s_i), ...) are frozen at the
base point by replaying them, so the finite differences of the loss value
measure the surrogate gradient that the loss defines.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax import registry
from tests.objectives import policy

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics

KLS = ("k1", "k2", "k3")
EXTRA = [("grpo", {"dual_clip": 2.0, "eps_low": 0.1, "eps_high": 0.1}),
         ("gspo", {"eps_low": 0.2, "eps_high": 0.2}),
         ("gspo_token", {"eps_low": 0.2, "eps_high": 0.2, "agg": "token-mean"}),
         ("pg", {"is_weight": "tis", "agg": "seq-mean-token-sum-norm"}),
         ("topk_sc", {"is_weight": "is", "agg": "seq-mean-token-sum"})]
CASES = [(n, {}) for n in registry.names("loss")] + EXTRA


def _directional_check(name, kw, seed):
  entry = registry.get("loss", name)
  full = "needs_full_head" in entry.tags
  with jax.enable_x64(True):
    prob = policy.make_problem(seed=seed, V=5, full_head=full, dtype=np.float64)
    cfg = entry.make_config(group_size=2, beta=0.07, kl=KLS[seed % 3], entropy_coef=0.03, **kw)
    batch = {k: jnp.asarray(v) for k, v in prob["batch"].items()}

    def loss(W):
      pol = policy.pol_from(W, prob["X"], prob["tokens"], prob["head_ids"])
      return entry(pol, batch, cfg)[0]

    W0 = jnp.asarray(prob["W"])
    grad = jax.jit(jax.grad(loss))(W0)
    assert grad.dtype == jnp.float64 and bool(jnp.all(jnp.isfinite(grad)))
    replay = policy.SgReplay()
    with replay.active():
      base = loss(W0)
      n_sg = len(replay.values)
      d = jnp.asarray(np.random.default_rng(seed).normal(size=W0.shape))
      h = 1e-5
      replay.start_replay()
      up = loss(W0 + h * d)
      replay.start_replay()
      down = loss(W0 - h * d)
      assert replay.i == n_sg  # the same stop-gradients, replayed in order
      np.testing.assert_allclose((up - down) / (2 * h), jnp.vdot(grad, d), rtol=1e-6, atol=1e-9)
    # float64, the same function twice in one process: a determinism check
    np.testing.assert_allclose(base, loss(W0), rtol=1e-12)
    return grad


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}{'+' if kw else ''}" for n, kw in CASES])
def test_gradient_matches_finite_differences(name, kw):
  grad = _directional_check(name, kw, seed=len(name))
  assert np.max(np.abs(np.asarray(grad))) > 1e-4


def test_every_loss_is_covered():
  assert {n for n, _ in CASES} == set(registry.names("loss"))
