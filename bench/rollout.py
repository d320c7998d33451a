"""Rollout throughput at real response lengths: the sampler with and without compaction.

    python bench/rollout.py [--prompts 4] [--groups 8] [--new 512] [--rounds 2]
                            [--compact-every 32]

The realistic job: SmolLM2 (float32) on the main job's rubric prompts, `--prompts` × G =
`--groups` rows, up to `--new` new tokens, temperature 1, stop at EOS
(`configs/cort_grpo.py:cpu` otherwise). Two worker processes each build the trainer once
and time `Trainer.collect(0)` (sampling, decoding the texts, rewards), alternating call by
call (bench/interleave.py, medians of --rounds after one untimed warm-up call):
  plain     rollout.compact_every = 0: the decode batch keeps every row until the last ends;
  compact   rollout.compact_every = --compact-every: the running rows move into halved
            decode batches (`rljax.rollout.SamplerConfig.compact_every`).
Both draw the same batch (same step, same keys): the bench checks that their tokens are
equal. "Useful tokens/s" = the responses' real tokens / the call's seconds. Also reported:
the decode row-steps each ran (`rollout/decode_row_steps`) and the length distribution.
Writes bench/results/rollout.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from bench.common import report  # noqa: E402


def config(a, compact_every: int):
  from configs.common import base_config
  cfg = base_config("cpu")
  cfg.data.batch_size = a.prompts * a.groups
  cfg.rollout.num_generations = a.groups
  cfg.rollout.max_new_tokens = a.new
  cfg.rollout.compact_every = compact_every
  cfg.eval.num_prompts, cfg.eval.at_start = 0, False
  cfg.log.tensorboard = cfg.log.plot = False
  return cfg


def worker(a, kind: str):
  from bench.interleave import serve
  from rljax.trainer import Trainer
  trainer = Trainer(config(a, a.compact_every if kind == "compact" else 0),
                    tempfile.mkdtemp(prefix=f"rljax_bench_rollout_{kind}_"))
  last = {}

  def run():
    roll = trainer.collect(0)
    last["roll"] = roll

  def info():
    r = last["roll"].r
    tokens, mask = np.asarray(r.tokens_BxN), np.asarray(r.mask_BxN)
    return {"tokens_sha1": hashlib.sha1(np.where(mask > 0, tokens, -1).tobytes()).hexdigest(),
            "lengths": mask.sum(1).tolist(), "truncated": np.asarray(r.truncated_B).tolist(),
            "decode_row_steps": int(last["roll"].decode_row_steps)}

  serve(run, info)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--prompts", type=int, default=4)
  ap.add_argument("--groups", type=int, default=8)
  ap.add_argument("--new", type=int, default=512)
  ap.add_argument("--rounds", type=int, default=2)
  ap.add_argument("--compact-every", type=int, default=32)
  ap.add_argument("--worker", default="")
  a = ap.parse_args()
  if a.worker:
    return worker(a, a.worker)
  from bench.interleave import Worker, interleaved, load, median
  argv = [os.path.abspath(__file__), "--prompts", str(a.prompts), "--groups", str(a.groups),
          "--new", str(a.new), "--compact-every", str(a.compact_every)]
  kinds = ("plain", "compact")
  workers = [Worker(k, argv + ["--worker", k]) for k in kinds]
  load0 = load()
  times = interleaved(workers, a.rounds)
  infos = {w.name: json.loads(w.ask("info")) for w in workers}
  for w in workers:
    w.close()
  same = infos["plain"]["tokens_sha1"] == infos["compact"]["tokens_sha1"]
  lengths = np.asarray(infos["plain"]["lengths"])
  real = int(lengths.sum())
  med = {k: median(v) for k, v in times.items()}
  rows = [{"sampler": k, "s": med[k], "useful tokens/s": real / med[k],
           "speed vs plain": med["plain"] / med[k],
           "decode row-steps": infos[k]["decode_row_steps"],
           "real / row-steps": (real - lengths.size) / infos[k]["decode_row_steps"]}
          for k in kinds]
  meta = {"rows": int(lengths.size), "max_new_tokens": a.new, "compact_every": a.compact_every,
          "same_tokens": same, "response_len_mean": float(lengths.mean()),
          "response_len_p50_p90_max": [float(np.percentile(lengths, 50)),
                                       float(np.percentile(lengths, 90)), int(lengths.max())],
          "length_clip_ratio": float(np.mean(infos["plain"]["truncated"])),
          "real_tokens": real, "load": [load0, load()], "rounds": a.rounds, "times": times,
          "lengths": lengths.tolist()}
  report("rollout", ["sampler", "s", "useful tokens/s", "speed vs plain", "decode row-steps",
                     "real / row-steps"], rows, meta)
  print({k: v for k, v in meta.items() if k not in ("times", "lengths")})
  if not same:
    raise SystemExit("the compacting sampler drew other tokens than the plain one")


if __name__ == "__main__":
  main()
