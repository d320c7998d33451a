"""What a decode step costs by decode batch size, and what that allows any sampler to gain.

    python bench/decode_rows.py [--rows 32,16,8,4,2] [--new 64] [--rounds 3]
                                [--batch MAXLEN:TOKENS ...]

SmolLM2-135M float32, random 64-token prompts, no stop token, temperature 1 (as
bench/sampler.py). For each decode batch size b (b / 8 prompts × G = 8, or one prompt × b
below 8 rows) it times `rljax.rollout.generate` with max_new_tokens = --new and = 1; the
decode step is their difference / (--new - 1). Sizes alternate call by call, medians of
--rounds after one warm-up call each, all in one process.

It fits step(b) = a + c·b (least squares; a: what a step costs whatever its rows, the
weights; c: a row's share) and bounds the rollout of a batch whose longest answer has
MAXLEN tokens and whose answers have TOKENS tokens in all. Rows are independent, so a
sampler may run any rows in any decode step, but a row's tokens come one step after
another: at least MAXLEN steps run, and the row-steps add up to TOKENS. Under the fitted
cost that is at least MAXLEN·a + c·TOKENS, whatever the schedule (compaction into the exact
running rows, refilling freed rows, or anything else that keeps the samples), against
MAXLEN·(a + c·B) for the plain sampler, which runs all B rows until the longest ends:

    speedup <= MAXLEN·(a + c·B) / (MAXLEN·a + c·TOKENS)

(a model-based bound: it holds as far as the fit does; the table shows its residuals).
The default --batch values are the realistic job's batches measured by bench/rollout.py
(32 rows, up to 512 new tokens). Writes bench/results/decode_rows.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from bench.common import report  # noqa: E402

# (longest answer, real tokens) of the realistic job's rollout batches in bench/README.md.
BATCHES = ("512:10900", "512:10112", "512:5664")


def fit(rows, step_s):
  """Least-squares (a, c) of step = a + c·rows."""
  x = np.stack([np.ones(len(rows)), np.asarray(rows, float)], 1)
  (a, c), *_ = np.linalg.lstsq(x, np.asarray(step_s, float), rcond=None)
  return float(a), float(c)


def speedup_bound(a: float, c: float, rows: int, maxlen: int, tokens: int) -> float:
  """The most any same-samples sampler gains over the plain one under step = a + c·b."""
  return maxlen * (a + c * rows) / (maxlen * a + c * tokens)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", default="32,16,8,4,2")
  ap.add_argument("--new", type=int, default=64)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--batch", nargs="*", default=list(BATCHES),
                  help="MAXLEN:TOKENS of a rollout batch of the largest --rows rows")
  a = ap.parse_args()
  sizes = [int(r) for r in a.rows.split(",")]
  if a.new < 2 or any(b < 1 for b in sizes):
    ap.error("--new must be >= 2 and every --rows size >= 1")

  import jax

  from rljax.models import load_model
  from rljax.models.bundled import smollm2_path
  from rljax.rollout import SamplerConfig, generate

  model = load_model(smollm2_path())
  rng = np.random.RandomState(0)
  runs = {}
  for b in sizes:
    g = min(b, 8)
    if b % g:
      ap.error(f"--rows {b}: not a multiple of 8 (G = 8 samples per prompt)")
    ids = rng.randint(3, model.cfg.vocab_size, (b // g, 64)).astype(np.int32)
    for n in (1, a.new):
      cfg = SamplerConfig(max_new_tokens=n, temperature=1.0, num_generations=g,
                          stop_token_ids=())
      runs[b, n] = (ids, np.ones_like(ids), cfg)
  times = {k: [] for k in runs}
  seed = 0
  for rnd in range(a.rounds + 1):  # round 0 compiles and warms up, untimed
    for k, (ids, mask, cfg) in runs.items():
      seed += 1
      t = time.perf_counter()
      jax.block_until_ready(generate(model, ids, mask, jax.random.key(seed), cfg))
      if rnd:
        times[k].append(time.perf_counter() - t)

  step = {b: (np.median(times[b, a.new]) - np.median(times[b, 1])) / (a.new - 1)
          for b in sizes}
  fa, fc = fit(sizes, [step[b] for b in sizes])
  rows = [{"decode rows": b, "ms / step": 1e3 * step[b], "fit a + c·b ms": 1e3 * (fa + fc * b),
           "ms / row-step": 1e3 * step[b] / b, "prefill ms": 1e3 * np.median(times[b, 1])}
          for b in sizes]
  big = max(sizes)
  bounds = []
  for spec in a.batch:
    maxlen, tokens = (int(v) for v in spec.split(":"))
    if not 0 < maxlen <= tokens <= big * maxlen:
      ap.error(f"--batch {spec}: need 0 < MAXLEN <= TOKENS <= {big} x MAXLEN")
    bounds.append({"max len": maxlen, "tokens": tokens, "mean len": tokens / big,
                   "speedup bound": speedup_bound(fa, fc, big, maxlen, tokens)})
  print(f"fit: step = {1e3 * fa:.1f} ms + {1e3 * fc:.2f} ms x rows; load "
        f"{os.getloadavg()[0]:.2f}")
  for r in bounds:
    print(f"batch of {big} rows, longest {r['max len']}, {r['tokens']} tokens "
          f"(mean {r['mean len']:.0f}): any same-samples sampler <= {r['speedup bound']:.2f}x "
          f"the plain one")
  report("decode_rows", list(rows[0]), rows, meta={
      "args": vars(a), "fit_a_s": fa, "fit_c_s": fc, "bounds": bounds,
      "times_s": {f"{b}x{n}": v for (b, n), v in times.items()}, "loadavg": os.getloadavg()})


if __name__ == "__main__":
  main()
