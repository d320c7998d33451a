"""Peak memory and time of logprob + gradient: chunked vs naive [B, T, V], Qwen vocabulary.

    python bench/logprobs_memory.py [--batch 4] [--seq 512] [--hidden 1024] [--chunk 512]

Peak memory is XLA's compiled temporary allocation (memory_analysis), which is
exact and repeatable; time is the best of N runs. Targets: peak <= 25 % of the
naive version at <= 1.1x its time. Writes bench/results/logprobs_memory.json.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from bench.common import best_time, report  # noqa: E402
from rljax.logprobs import naive_token_logprobs, token_logprobs  # noqa: E402


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=4)
  ap.add_argument("--seq", type=int, default=512)
  ap.add_argument("--hidden", type=int, default=1024)
  ap.add_argument("--vocab", type=int, default=151936)
  ap.add_argument("--chunk", type=int, default=512)
  ap.add_argument("--repeats", type=int, default=3)
  a = ap.parse_args()
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  h = jax.random.normal(k1, (a.batch, a.seq, a.hidden), jnp.float32)
  w = jax.random.normal(k2, (a.hidden, a.vocab), jnp.float32) * 0.02
  y = jax.random.randint(k3, (a.batch, a.seq), 0, a.vocab)

  def make(fn, **kw):
    def loss(h, w):
      o = fn(h, w, y, **kw)
      return jnp.mean(o["logp_BxT"]) + 0.01 * jnp.mean(o["entropy_BxT"])
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))

  rows = []
  for name, f in [("naive [B,T,V]", make(naive_token_logprobs)),
                  (f"chunked (C={a.chunk})", make(token_logprobs, chunk_size=a.chunk))]:
    compiled = f.lower(h, w).compile()
    mem = compiled.memory_analysis()
    temp = mem.temp_size_in_bytes
    t = best_time(lambda: jax.block_until_ready(compiled(h, w)), a.repeats)
    rows.append({"impl": name, "temp_MiB": temp / 2**20, "time_s": t})
  naive, chunked = rows
  chunked["mem_vs_naive"] = chunked["temp_MiB"] / naive["temp_MiB"]
  chunked["time_vs_naive"] = chunked["time_s"] / naive["time_s"]
  report("logprobs_memory", ["impl", "temp_MiB", "time_s", "mem_vs_naive", "time_vs_naive"], rows,
         {"shape": vars(a), "targets": {"mem_vs_naive": 0.25, "time_vs_naive": 1.1}})


if __name__ == "__main__":
  main()
