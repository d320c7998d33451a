"""bench/decode_rows.py's cost-model fit and its bound on any same-samples sampler."""
import numpy as np
import pytest

from bench.decode_rows import fit, speedup_bound


def test_fit_recovers_an_affine_step_cost():
  rows = [32, 16, 8, 4, 2]
  a, c = fit(rows, [0.0233 + 0.00267 * b for b in rows])
  assert a == pytest.approx(0.0233, rel=1e-9, abs=1e-12)
  assert c == pytest.approx(0.00267, rel=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_bound_is_the_exact_compaction_schedule_and_no_schedule_beats_it(seed):
  rng = np.random.RandomState(seed)
  b, cap, a, c = 32, 512, 0.0233, 0.00267
  lengths = np.minimum(rng.geometric(1 / rng.uniform(50, 400), b), cap)
  maxlen, tokens = int(lengths.max()), int(lengths.sum())
  plain = maxlen * (a + c * b)
  # Brute force: at step t the decode batch holds exactly the rows still running.
  live = [(lengths > t).sum() for t in range(maxlen)]
  exact = sum(a + c * n for n in live)
  assert speedup_bound(a, c, b, maxlen, tokens) == pytest.approx(plain / exact, rel=1e-12)
  # Any other schedule of the same row-steps: random batches, each row's steps in order.
  left, cost, launches = lengths.copy(), 0.0, 0
  while left.any():
    run = (left > 0) & (rng.rand(b) < 0.7)
    if not run.any():
      continue
    left[run] -= 1
    cost += a + c * run.sum()
    launches += 1
  assert launches >= maxlen
  assert plain / cost <= speedup_bound(a, c, b, maxlen, tokens) + 1e-12
  # The halving sampler (checks every 32 steps) gains no more than the bound either.
  size, halving = b, 0.0
  for t in range(maxlen):
    if t and t % 32 == 0:
      while size // 2 >= max(live[t], 2):
        size //= 2
    halving += a + c * size
  assert plain / halving <= speedup_bound(a, c, b, maxlen, tokens) + 1e-12
