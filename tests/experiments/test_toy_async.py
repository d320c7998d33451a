"""The toy loop through the asynchronous rollout pipeline (`RunSpec.async_lag`): batch t is
drawn from policy version max(0, t - k) in the sampler thread, the same every time."""
import dataclasses

import numpy as np
import pytest

from experiments import toy_grid, toy_rl


@pytest.fixture(scope="module")
def warm():
  graphdef, params, _ = toy_grid.warm_start(quick=True)
  return graphdef, params, toy_grid.heldout(4)


def _run(warm, **kw):
  graphdef, params, held = warm
  spec = toy_rl.RunSpec(advantage="dr_grpo", loss="pg", steps=4, prompts_per_step=2,
                        num_generations=4, eval_every=100, **kw)
  return toy_rl.train(spec, graphdef, params, held)["history"]


def test_async_lag_draws_from_the_version_k_behind_and_repeats(warm):
  a = _run(warm, async_lag=2)
  assert [h["rollout/lag"] for h in a] == [0, 1, 2, 2]
  kl = [h["mismatch/kl_q_p"] for h in a]
  assert abs(kl[0]) < 1e-6 and min(kl[1:]) > 1e-6, kl  # the sampler is behind after step 0
  b = _run(warm, async_lag=2)  # the sampler thread's schedule is deterministic
  for x, y in zip(a, b):
    assert x["reward/csr"] == y["reward/csr"]
    np.testing.assert_allclose(x["loss"], y["loss"], rtol=1e-6)
  # lag 0 through the synchronous loop: on-policy, and the first batch is the same draw
  c = _run(warm)
  assert [h["rollout/lag"] for h in c] == [0, 0, 0, 0]
  assert max(abs(h["mismatch/kl_q_p"]) for h in c) < 1e-6
  assert a[0]["reward/csr"] == c[0]["reward/csr"]


def test_async_lag_refuses_a_periodic_sync(warm):
  graphdef, params, held = warm
  spec = dataclasses.replace(toy_rl.RunSpec(steps=2), async_lag=2, sync_every=4)
  with pytest.raises(ValueError, match="sync_every=4"):
    toy_rl.train(spec, graphdef, params, held)
