"""Paired comparisons by seed, their power, and the verdict rule every study uses.

A study compares arm B with arm A on the same seeds (same data stream, same sampler keys),
so the unit of evidence is the per-seed difference d_s = B_s - A_s:

- `paired(a, b)`: mean d, its standard deviation, a Student-t 95 % CI, the paired t-test's
  two-sided p and the exact sign-flip permutation p (all 2^n sign patterns for n <= 16).
- `mde(sd, n)`: the smallest true mean difference a paired two-sided t-test at level alpha
  detects with the given power, from the noncentral t distribution (exact for normal d).
- `seeds_for(sd, effect)`: the smallest n whose MDE is at most `effect` — the design step,
  made before a study runs from a pilot's (or an earlier run's) spread.
- `verdict(cmp, claim, design_sd)`: the rule applied to the paper's claimed effect `claim`
  (signed, in the metric's units):
    reproduces                a significant effect (p < alpha) in the claimed direction;
    contradicts               a significant effect in the opposite direction;
    does not reproduce        no significant effect although the design detects an effect
                              of the claimed size with the stated power (MDE <= |claim|);
    not testable at this power  no significant effect and MDE > |claim|.
  The MDE is computed from `design_sd` (the spread the design assumed) when given, else
  from the observed spread.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
from scipy import stats as sps

ALPHA, POWER = 0.05, 0.8


def paired(a: Sequence[float], b: Sequence[float], alpha: float = ALPHA) -> dict:
  """Summary of d = b - a over paired seeds (see the module docstring)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape or a.ndim != 1:
    raise ValueError(f"paired: need two equal-length 1-D arrays, got {a.shape} and {b.shape}")
  d = b - a
  n = d.size
  mean = float(d.mean()) if n else float("nan")
  sd = float(d.std(ddof=1)) if n > 1 else float("nan")
  out = {"n": n, "mean_a": float(a.mean()), "mean_b": float(b.mean()), "diff": mean, "sd": sd,
         "ci95": [float("nan"), float("nan")], "p": float("nan"), "p_signflip": float("nan"),
         "diffs": d.tolist()}
  if n < 2:
    return out
  se = sd / math.sqrt(n)
  tcrit = float(sps.t.ppf(1 - alpha / 2, n - 1))
  out["ci95"] = [mean - tcrit * se, mean + tcrit * se]
  if se > 0:
    out["p"] = float(2 * sps.t.sf(abs(mean / se), n - 1))
  else:
    out["p"] = 0.0 if mean != 0 else 1.0
  out["p_signflip"] = signflip_p(d)
  return out


def signflip_p(d: Sequence[float], max_exact: int = 16, draws: int = 20000,
               seed: int = 0) -> float:
  """Two-sided sign-flip permutation p of mean(d) = 0: the share of sign patterns whose
  |mean| is at least the observed one (exact up to `max_exact` pairs, else sampled)."""
  d = np.asarray(d, np.float64)
  n = d.size
  obs = abs(d.mean())
  if n <= max_exact:
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
  else:
    signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(draws, n))
  means = np.abs(signs @ d) / n
  return float(np.mean(means >= obs - 1e-12 * max(1.0, obs)))


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
  """Minimum detectable mean difference of a paired two-sided t-test with n pairs whose
  differences have standard deviation sd (noncentral t; inf for n < 2)."""
  if n < 2 or not np.isfinite(sd):
    return float("inf")
  if sd == 0:
    return 0.0
  df = n - 1
  tcrit = sps.t.ppf(1 - alpha / 2, df)

  def achieved(delta):  # power at a true standardized effect delta · sqrt(n)
    nc = delta * math.sqrt(n)
    return sps.nct.sf(tcrit, df, nc) + sps.nct.cdf(-tcrit, df, nc)

  lo, hi = 0.0, 1.0
  while achieved(hi) < power:
    hi *= 2
  for _ in range(100):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if achieved(mid) < power else (lo, mid)
  return float(hi * sd)


def seeds_for(sd: float, effect: float, alpha: float = ALPHA, power: float = POWER,
              max_n: int = 1000) -> int:
  """The fewest pairs whose MDE is at most |effect| (max_n + 1 when none up to max_n); the
  MDE falls with n, so a bisection."""
  ok = lambda n: mde(sd, n, alpha, power) <= abs(effect)
  if not ok(max_n):
    return max_n + 1
  lo, hi = 1, max_n  # ok(hi); not ok(lo) (n = 1 has no MDE)
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (lo, mid) if ok(mid) else (mid, hi)
  return hi


REPRODUCES, CONTRADICTS = "reproduces", "contradicts"
NOT_REPRODUCED, NOT_TESTABLE = "does not reproduce", "not testable at this power"


def verdict(cmp: dict, claim: float, design_sd: float | None = None, alpha: float = ALPHA,
            power: float = POWER, sized: bool = True) -> dict:
  """The verdict on a paper's claimed effect `claim` (signed) from a `paired` comparison.
  `sized=False`: the paper states only a direction (the sign of `claim`), so a null result
  is never a powered one: it is *not testable at this power*, with its MDE stated."""
  sd = design_sd if design_sd is not None else cmp["sd"]
  m = mde(sd, cmp["n"], alpha, power)
  p = cmp["p"]
  significant = bool(np.isfinite(p) and p < alpha)
  if significant and np.sign(cmp["diff"]) == np.sign(claim):
    v = REPRODUCES
  elif significant:
    v = CONTRADICTS
  elif sized and m <= abs(claim):
    v = NOT_REPRODUCED
  else:
    v = NOT_TESTABLE
  return {"verdict": v, "mde": m, "claim": float(claim) if sized else None,
          "direction": int(np.sign(claim)), "power": power, "alpha": alpha,
          "sd_for_mde": float(sd)}


def describe(cmp: dict, v: dict, fmt: str = "{:.3g}") -> str:
  """One line for a table: the effect with its CI and p, the MDE and the verdict."""
  f = fmt.format
  lo, hi = cmp["ci95"]
  claim = (f(v["claim"]) if v.get("claim") is not None
           else ("> 0" if v["direction"] > 0 else "< 0") + " (no size stated)")
  return (f"{f(cmp['diff'])} [{f(lo)}, {f(hi)}], p = {cmp['p']:.2g} (n = {cmp['n']}); "
          f"MDE {f(v['mde'])} vs claim {claim}: **{v['verdict']}**")


def verdict_table(rows) -> str:
  """The markdown table of a study's verdict rows (`paired` + `verdict` + claim, base,
  variant, metric), effects in pp."""
  from experiments.common import md_table
  head = ("\nVerdicts (variant − base, pp; paired by seed; `experiments/stats.py`): effect "
          "[95 % CI], p, MDE at the measured spread.\n\n")
  return head + md_table(
      ["claim", "variant − base", "metric", "effect (pp)", "p", "MDE (pp)", "verdict"],
      [[r["claim"], f"{r['variant']} − {r['base']}", r["metric"],
        f"{r['diff']:+.2f} [{r['ci95'][0]:+.2f}, {r['ci95'][1]:+.2f}]", f"{r['p']:.3g}",
        f"{r['mde']:.2f}", r["verdict"]] for r in rows])
