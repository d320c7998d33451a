"""What a decode step costs by decode batch size and cache fill, and what that allows any sampler.

    python bench/decode_rows.py [--rows 32,16,8,4,2] [--new 64,512] [--rounds 2]
                                [--lengths bench/results/rollout.json]

SmolLM2-135M float32, random 64-token prompts, no stop token, temperature 1 (as
bench/sampler.py). For each decode batch size b (b / 8 prompts × G = 8, or one prompt × b
below 8 rows) and each n in --new it times `rljax.rollout.generate` with max_new_tokens = n
and = 1 (the prefill and the first token). Calls alternate, medians of --rounds after one
warm-up call each, all in one process.

Model: decode step t (t tokens already generated in each row) on b rows costs
a + b·(c + d·t): a whatever the rows (the weights), c + d·t a row's share, growing with what
its attention reads. Fitted by least squares to every (b, n): time(n) − time(1) =
(n − 1)·a + b·c·(n − 1) + b·d·n·(n − 1) / 2.

The bound: rows are independent, so a sampler may decode any rows in any step, but a row's
tokens come one step after another. A batch whose answers have lengths ℓ_r therefore takes at
least max ℓ steps, and row r's k-th token costs c + d·k whenever it is drawn: no schedule that
keeps the samples (compaction into exactly the running rows, refilling freed rows, anything
else) costs less than

    max ℓ · a + Σ_r Σ_{k < ℓ_r} (c + d·k),

against Σ_{t < max ℓ} (a + B·(c + d·t)) for the plain sampler, which runs all B rows until the
longest ends. Their ratio bounds the speedup — as far as the fit holds (the table shows its
residuals). --lengths: a JSON file with the lengths of a rollout batch (bench/rollout.py's
`meta.lengths`; the batch the realistic job drew). Writes bench/results/decode_rows.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from bench.common import report  # noqa: E402


def fit(samples):
  """Least-squares (a, c, d) from [(rows b, new tokens n, decode seconds time(n) - time(1))]."""
  x = np.array([[n - 1, b * (n - 1), b * n * (n - 1) / 2] for b, n, _ in samples], float)
  y = np.array([s for _, _, s in samples], float)
  (a, c, d), *_ = np.linalg.lstsq(x, y, rcond=None)
  return float(a), float(c), float(d)


def step_cost(a: float, c: float, d: float, rows: int, t: int) -> float:
  """A decode step at t tokens generated, on `rows` rows."""
  return a + rows * (c + d * t)


def plain_cost(a: float, c: float, d: float, rows: int, lengths) -> float:
  """The plain sampler: every row decodes until the longest answer ends (its first token
  comes from the prefill, so max ℓ − 1 decode steps)."""
  return sum(step_cost(a, c, d, rows, t) for t in range(1, max(lengths)))


def least_cost(a: float, c: float, d: float, lengths) -> float:
  """The least any schedule that draws the same tokens can cost (see the module doc)."""
  rows_steps = sum(c * (l - 1) + d * (l - 1) * l / 2 for l in lengths)  # k = 1 .. ℓ-1
  return (max(lengths) - 1) * a + rows_steps


def speedup_bound(a: float, c: float, d: float, rows: int, lengths) -> float:
  return plain_cost(a, c, d, rows, lengths) / least_cost(a, c, d, lengths)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", default="32,16,8,4,2")
  ap.add_argument("--new", default="64,512")
  ap.add_argument("--rounds", type=int, default=2)
  ap.add_argument("--lengths", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "results", "rollout.json"),
                  help="JSON with meta.lengths of a rollout batch (bench/rollout.py's output)")
  a = ap.parse_args()
  sizes = [int(r) for r in a.rows.split(",")]
  news = [int(n) for n in a.new.split(",")]
  if min(news) < 2 or min(sizes) < 1:
    ap.error("every --new must be >= 2 and every --rows size >= 1")
  lengths = None
  if os.path.exists(a.lengths):
    lengths = json.load(open(a.lengths))["meta"]["lengths"]
    if len(lengths) != max(sizes) or max(lengths) > max(news):
      ap.error(f"{a.lengths}: {len(lengths)} lengths up to {max(lengths)}; the bound needs "
               f"{max(sizes)} rows (the largest --rows) and --new up to the longest")

  from bench.profile_step import decode_run
  from rljax.models import load_model
  from rljax.models.bundled import smollm2_path

  model = load_model(smollm2_path())
  if any(b % min(b, 8) for b in sizes):
    ap.error("--rows: each size below 8 or a multiple of 8 (G = 8 samples per prompt)")
  runs = {(b, n): decode_run(model, b, n)[0] for b in sizes for n in [1] + news}
  times = {k: [] for k in runs}
  for rnd in range(a.rounds + 1):  # round 0 compiles and warms up, untimed
    for k, run in runs.items():
      t = time.perf_counter()
      run()
      if rnd:
        times[k].append(time.perf_counter() - t)

  med = {k: float(np.median(v)) for k, v in times.items()}
  samples = [(b, n, med[b, n] - med[b, 1]) for b in sizes for n in news]
  fa, fc, fd = fit(samples)
  rows = []
  for b, n, s in samples:
    model_s = (n - 1) * fa + b * fc * (n - 1) + b * fd * n * (n - 1) / 2
    rows.append({"decode rows": b, "new tokens": n, "ms / step": 1e3 * s / (n - 1),
                 "fit ms / step": 1e3 * model_s / (n - 1),
                 "ms / row-step": 1e3 * s / (n - 1) / b})
  print(f"fit: step at t tokens = {1e3 * fa:.1f} ms + rows x ({1e3 * fc:.2f} + "
        f"{1e3 * fd:.4f} t) ms; load {os.getloadavg()[0]:.2f}")
  bound = None
  if lengths is not None:
    bound = {"lengths_from": a.lengths, "rows": len(lengths), "tokens": int(sum(lengths)),
             "longest": int(max(lengths)), "at_longest": int(sum(l == max(lengths) for l in lengths)),
             "plain_s": plain_cost(fa, fc, fd, len(lengths), lengths),
             "least_s": least_cost(fa, fc, fd, lengths),
             "speedup_bound": speedup_bound(fa, fc, fd, len(lengths), lengths)}
    print(f"{a.lengths}: {bound['rows']} rows, {bound['tokens']} tokens, {bound['at_longest']} "
          f"at {bound['longest']}: plain {bound['plain_s']:.1f} s by the fit, any same-samples "
          f"sampler >= {bound['least_s']:.1f} s: speedup <= {bound['speedup_bound']:.2f}x")
  report("decode_rows", list(rows[0]), rows, meta={
      "args": vars(a), "fit_a_s": fa, "fit_c_s": fc, "fit_d_s": fd, "bound": bound,
      "times_s": {f"{b}x{n}": v for (b, n), v in times.items()}, "loadavg": os.getloadavg()})


if __name__ == "__main__":
  main()
