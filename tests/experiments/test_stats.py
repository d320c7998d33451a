"""The verdict statistics (experiments/stats.py) against scipy and brute-force simulation."""
import numpy as np
import pytest
from scipy import stats as sps

from experiments import stats


def test_paired_matches_scipy_ttest_and_the_t_interval():
  rng = np.random.default_rng(0)
  a = rng.normal(0.5, 0.1, 7)
  b = a + rng.normal(0.03, 0.02, 7)
  c = stats.paired(a, b)
  ref = sps.ttest_rel(b, a)
  assert c["p"] == pytest.approx(ref.pvalue, rel=1e-9)
  ci = ref.confidence_interval(0.95)
  np.testing.assert_allclose(c["ci95"], [ci.low, ci.high], rtol=1e-9)
  assert c["diff"] == pytest.approx(np.mean(b - a))
  assert c["sd"] == pytest.approx(np.std(b - a, ddof=1))


def test_signflip_p_is_the_share_of_sign_patterns():
  # d = (1, 2, 3): of the 8 patterns, |mean| >= 2 only for all-plus and all-minus
  assert stats.signflip_p([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)
  # n = 3 all positive is the smallest possible exact p: 0.25 (never significant)
  assert stats.paired([0, 0, 0], [1, 1.1, 1.2])["p_signflip"] == pytest.approx(0.25)


@pytest.mark.parametrize("n", [3, 8, 20])
def test_mde_has_the_stated_power_by_simulation(n):
  """A true difference of MDE is detected by the paired t-test in ≈ 80 % of simulated
  studies (20,000 draws: the binomial standard error of 0.8 is 0.003)."""
  sd = 1.7
  m = stats.mde(sd, n)
  rng = np.random.default_rng(n)
  d = rng.normal(m, sd, (20000, n))
  t = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(n))
  power = np.mean(np.abs(t) > sps.t.ppf(0.975, n - 1))
  assert power == pytest.approx(0.8, abs=0.012)
  assert stats.mde(sd, n + 1) < m  # more seeds, smaller MDE


def test_seeds_for_is_the_smallest_n_reaching_the_effect():
  n = stats.seeds_for(0.02, 0.015)
  assert stats.mde(0.02, n) <= 0.015 < stats.mde(0.02, n - 1)
  assert stats.mde(1.0, 1) == float("inf")


def test_verdict_rule():
  up = stats.paired([0.0] * 6, [1.0, 1.1, 0.9, 1.2, 1.0, 0.8])
  assert stats.verdict(up, claim=0.5)["verdict"] == stats.REPRODUCES
  assert stats.verdict(up, claim=-0.5)["verdict"] == stats.CONTRADICTS
  null = stats.paired([0.0] * 6, [0.1, -0.1, 0.05, -0.05, 0.02, -0.02])
  assert stats.verdict(null, claim=1.0)["verdict"] == stats.NOT_REPRODUCED  # powered null
  v = stats.verdict(null, claim=0.01)
  assert v["verdict"] == stats.NOT_TESTABLE and v["mde"] > 0.01
  # the design's spread, when given, sets the MDE
  assert stats.verdict(null, claim=0.05, design_sd=0.001)["verdict"] == stats.NOT_REPRODUCED
  assert "not testable" in stats.describe(null, v)
  # a direction-only claim: a null is never a powered one
  d = stats.verdict(null, claim=1.0, sized=False)
  assert d["verdict"] == stats.NOT_TESTABLE and "no size stated" in stats.describe(null, d)
  assert stats.verdict(up, claim=1.0, sized=False)["verdict"] == stats.REPRODUCES
