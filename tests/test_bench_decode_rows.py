"""bench/decode_rows.py's cost-model fit and its bound on any same-samples sampler."""
import numpy as np
import pytest

from bench.decode_rows import fit, least_cost, plain_cost, speedup_bound, step_cost

A, C, D = 0.026, 0.0028, 0.0000084


def test_fit_recovers_the_cost_model():
  samples = [(b, n, sum(step_cost(A, C, D, b, t) for t in range(1, n)))
             for b in (32, 16, 8, 4, 2) for n in (64, 512)]
  a, c, d = fit(samples)
  assert (a, c, d) == pytest.approx((A, C, D), rel=1e-6)


def _lengths(rng, rows=32, cap=512):
  return [int(x) for x in np.minimum(rng.geometric(1 / rng.uniform(50, 400), rows) + 1, cap)]


@pytest.mark.parametrize("seed", range(5))
def test_costs_are_the_plain_and_the_exact_compaction_schedules(seed):
  lengths = _lengths(np.random.RandomState(seed))
  longest = max(lengths)
  # Brute force: step t runs every row (plain), or exactly the rows still drawing (least).
  plain = sum(step_cost(A, C, D, 32, t) for t in range(1, longest))
  exact = sum(step_cost(A, C, D, sum(l > t for l in lengths), t) for t in range(1, longest))
  assert plain_cost(A, C, D, 32, lengths) == pytest.approx(plain, rel=1e-12)
  assert least_cost(A, C, D, lengths) == pytest.approx(exact, rel=1e-12)
  assert speedup_bound(A, C, D, 32, lengths) == pytest.approx(plain / exact, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_no_schedule_beats_the_bound(seed):
  rng = np.random.RandomState(seed)
  lengths = _lengths(rng)
  bound = speedup_bound(A, C, D, 32, lengths)
  plain = plain_cost(A, C, D, 32, lengths)
  # Random batches of rows, each row's tokens in order; a row's k-th token costs c + d·k.
  done, cost, launches = np.ones(32, int), 0.0, 0  # token 0 comes from the prefill
  want = np.asarray(lengths)
  while (done < want).any():
    run = (done < want) & (rng.rand(32) < 0.6)
    if not run.any():
      continue
    cost += A + sum(C + D * k for k in done[run])
    done[run] += 1
    launches += 1
  assert launches >= max(lengths) - 1
  assert plain / cost <= bound + 1e-12
  # The halving sampler (checks every 32 steps, never below 2 rows) gains no more either.
  size, halving = 32, 0.0
  for t in range(1, max(lengths)):
    if t % 32 == 1 and t > 1:
      while size // 2 >= max(sum(l > t for l in lengths), 2):
        size //= 2
    halving += step_cost(A, C, D, size, t)
  assert plain / halving <= bound + 1e-12
