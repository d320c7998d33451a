"""The matmul limit of the SmolLM2 GRPO step: XLA:CPU vs PyTorch on the step's own matmuls.

    python bench/matmul.py [--batch 8] [--prompt 64] [--response 192] [--rounds 5]

Every float32 matmul of one GRPO training step (bench/train_step.py's case: 8 x (64 + 192)
tokens, SmolLM2-135M, logits of the 192 response positions only) is timed alone, in XLA
(a jitted `a @ b`, with the transposed operand the backward needs) and in PyTorch (MKL /
oneDNN), interleaved call by call. Per projection: the forward product [N, in] x [in, out],
the input gradient [N, out] x [out, in]^T and the weight gradient [N, in]^T x [N, out], times
the number of layers. The sums are the time a step would take if it did nothing but its
matmuls at each library's speed: the floor under bench/train_step.py's rows. Writes
bench/results/matmul.json.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from bench.common import report  # noqa: E402

# SmolLM2-135M: hidden 576, 9 query / 3 kv heads of 64, MLP 1536, vocabulary 49,152, 30 layers
D, Q, KV, F, V, L = 576, 576, 192, 1536, 49152, 30


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--response", type=int, default=192)
  ap.add_argument("--rounds", type=int, default=5)
  a = ap.parse_args()
  import jax
  import jax.numpy as jnp
  import numpy as np
  import torch

  n, nr = a.batch * (a.prompt + a.response), a.batch * a.response
  # (name, rows, in, out, count per step)
  projs = [("q / o", n, D, Q, 2 * L), ("k, v", n, D, KV, 2 * L), ("gate, up", n, D, F, 2 * L),
           ("down", n, F, D, L), ("lm head", nr, D, V, 1)]
  xla = {"fwd": jax.jit(lambda x, w: x @ w), "dx": jax.jit(lambda g, w: g @ w.T),
         "dw": jax.jit(lambda x, g: x.T @ g)}
  tch = {"fwd": lambda x, w: x @ w, "dx": lambda g, w: g @ w.T, "dw": lambda x, g: x.T @ g}
  rows, tot = [], {"xla": 0.0, "torch": 0.0}
  for name, m, k, o, count in projs:
    rng = np.random.RandomState(0)
    x, w, g = (rng.randn(*s).astype(np.float32) for s in ((m, k), (k, o), (m, o)))
    args = {"fwd": (x, w), "dx": (g, w), "dw": (x, g)}
    for kind, (p, q) in args.items():
      jp, jq = jnp.asarray(p), jnp.asarray(q)
      tp, tq = torch.from_numpy(p), torch.from_numpy(q)
      calls = {"xla": lambda: xla[kind](jp, jq).block_until_ready(),
               "torch": lambda: tch[kind](tp, tq)}
      times = {k2: [] for k2 in calls}
      for r in range(a.rounds + 1):  # round 0 warms up
        for k2, fn in calls.items():
          t = time.perf_counter()
          fn()
          if r:
            times[k2].append(time.perf_counter() - t)
      med = {k2: statistics.median(v) for k2, v in times.items()}
      flops = 2 * m * k * o
      for k2 in med:
        tot[k2] += count * med[k2]
      rows.append({"matmul": f"{name} {kind}", "shape": f"{m}x{k}x{o}", "count": count,
                   "xla_gflops": flops / med["xla"] / 1e9,
                   "torch_gflops": flops / med["torch"] / 1e9,
                   "xla_vs_torch": med["torch"] / med["xla"]})
  rows.append({"matmul": "step total (s)", "xla_gflops": None, "count": None,
               "shape": f"xla {tot['xla']:.2f} / torch {tot['torch']:.2f}",
               "xla_vs_torch": tot["torch"] / tot["xla"]})
  report("matmul", ["matmul", "shape", "count", "xla_gflops", "torch_gflops", "xla_vs_torch"],
         rows, {"batch": a.batch, "prompt": a.prompt, "response": a.response,
                "rounds": a.rounds, "step_matmul_s": tot, "torch_threads": torch.get_num_threads(),
                "loadavg": [round(x, 2) for x in os.getloadavg()]})


if __name__ == "__main__":
  main()
