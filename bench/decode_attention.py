"""A decode step's attention, all layers: XLA's (as the rolled layer scan runs it) vs the CPU kernel.

    python bench/decode_attention.py [--rows 32,16,8] [--filled 64,256,448] [--prefix 64]
                                     [--rounds 5]

SmolLM2-135M's attention shapes (30 layers, 3 kv heads × 3 query heads, head dim 64) over a
sampler's decode cache: each row's own slots (511, for 512 new tokens) in the `[L, B, K, S, E]`
stack, after its prompt's cache (`--prefix` slots, shared by G = 8 rows: rows / 8 prompts; or
one prefix per row, as after a compaction, with `--per-row-prefix`). One program per path runs
the 30 layers' attention of one step in a `fori_loop` over the layer index, as the decoder's
layer scan does:
  xla     `rljax.models.attention.prefix_attention` on layer i's window (the first
          `filled` slots rounded up to the sampler's 64-slot attention bucket), sliced out of
          the stacks with the traced layer index (what XLA:CPU copies before the matmuls);
  kernel  `rljax.models.cpu_attention.decode_attention` on the whole stacks, the layer index
          and the filled length as run-time operands.
Calls alternate, medians of --rounds after a warm-up call each, one process; the table also
gives the largest difference of the outputs. Writes bench/results/decode_attention.json.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench.common import report  # noqa: E402
from rljax.models import cpu_attention  # noqa: E402
from rljax.models.attention import prefix_attention  # noqa: E402

L, K, G, E, SLOTS, BUCKET = 30, 3, 3, 64, 511, 64


def programs(window: int):
  @jax.jit
  def xla(q, k, v, valid, pk, pv, pvalid, n):
    allowed = (jnp.arange(window) < n)[None, None] & valid[:, None, :window]

    def layer(i, acc):
      o = prefix_attention(q[:, None], k[i, :, :, :window], v[i, :, :, :window], allowed,
                           pk[i], pv[i], pvalid)[:, 0]
      return acc + o

    return jax.lax.fori_loop(0, L, layer, jnp.zeros_like(q))

  @jax.jit
  def kernel(q, k, v, valid, pk, pv, pvalid, n):
    def layer(i, acc):
      return acc + cpu_attention.decode_attention(q, k, v, valid, i, n, (pk, pv, pvalid))

    return jax.lax.fori_loop(0, L, layer, jnp.zeros_like(q))

  return {"xla": xla, "kernel": kernel}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", default="32,16,8")
  ap.add_argument("--filled", default="64,256,448")
  ap.add_argument("--prefix", type=int, default=64)
  ap.add_argument("--per-row-prefix", action="store_true")
  ap.add_argument("--rounds", type=int, default=5)
  a = ap.parse_args()
  if not cpu_attention.available():
    sys.exit(f"the CPU kernel is unavailable: {cpu_attention.why_unavailable()}")
  out = []
  for b in (int(x) for x in a.rows.split(",")):
    p = b if a.per_row_prefix else max(1, b // 8)
    r = np.random.RandomState(b)
    f = lambda *s: jnp.asarray(r.randn(*s), jnp.float32)
    k, v, pk, pv = f(L, b, K, SLOTS, E), f(L, b, K, SLOTS, E), f(L, p, K, a.prefix, E), f(
        L, p, K, a.prefix, E)
    q = f(b, K * G, E)
    pvalid = jnp.ones((p, a.prefix), bool)
    for n in (int(x) for x in a.filled.split(",")):
      valid = jnp.arange(SLOTS)[None].repeat(b, 0) < n
      window = min(SLOTS, -(-n // BUCKET) * BUCKET)
      progs = programs(window)
      args = (q, k, v, valid, pk, pv, pvalid, jnp.int32(n))
      res = {name: fn(*args) for name, fn in progs.items()}  # warm-up (compiles)
      times = {name: [] for name in progs}
      for _ in range(a.rounds):
        for name, fn in progs.items():
          t = time.perf_counter()
          jax.block_until_ready(fn(*args))
          times[name].append(time.perf_counter() - t)
      med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
      out.append({"rows": b, "prefixes": p, "filled": n, "xla window": window,
                  "xla ms": med["xla"], "kernel ms": med["kernel"],
                  "speed": med["xla"] / med["kernel"],
                  "max |diff|": float(jnp.max(jnp.abs(res["xla"] - res["kernel"]))),
                  "xla_s": times["xla"], "kernel_s": times["kernel"]})
      print(f"rows {b} filled {n}: xla {med['xla']:.1f} ms, kernel {med['kernel']:.1f} ms",
            flush=True)
  cols = ["rows", "prefixes", "filled", "xla window", "xla ms", "kernel ms", "speed",
          "max |diff|"]
  report("decode_attention", cols, out, meta={"args": vars(a), "loadavg": os.getloadavg(),
                                              "layers": L, "kv_heads": K, "group": G,
                                              "head_dim": E, "slots": SLOTS})


if __name__ == "__main__":
  main()
