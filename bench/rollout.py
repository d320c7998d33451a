"""Rollout throughput at real response lengths: the sampler with and without compaction.

    python bench/rollout.py [--prompts 4] [--groups 8] [--new 512] [--rounds 2]
                            [--compact-every 32] [--baseline REV]

The realistic job: SmolLM2 (float32) on the main job's rubric prompts, `--prompts` × G =
`--groups` rows, up to `--new` new tokens, temperature 1, stop at EOS
(`configs/cort_grpo.py:cpu` otherwise). Two worker processes (three with --baseline) each
build the trainer once
and time `Trainer.collect(0)` (sampling, decoding the texts, rewards), alternating call by
call (bench/interleave.py; --rounds timed calls after one untimed warm-up call):
  plain     rollout.compact_every = 0: the decode batch keeps every row until the last ends;
  compact   rollout.compact_every = --compact-every: the running rows move into smaller
            decode batches (`rljax.rollout.SamplerConfig.compact_every`).
  plain@REV with --baseline: the plain sampler of git REV's rljax/ and configs/ (unpacked
            with `git archive`, its own worker): the sampler as it was.
Each timed call draws the next batch; plain and compact draw the same batches (same steps,
same keys): the bench checks that their tokens are equal. "Useful tokens/s" = the responses'
real tokens / the call's seconds, per batch. The baseline draws the same batches too, and
`base_same_tokens` says whether it drew the same tokens: where its decode logits differ in
the last bits, a token drawn at temperature 1 can differ, and so can the lengths; then
compare it by useful tokens/s and, against this tree's plain sampler, by ms per decode step
(seconds / (row-steps / rows)), not by seconds.
"Compile s": the seconds the call spent tracing, lowering and compiling programs (JAX's
`/jax/core/compile/*` duration events; a compacting sampler compiles a decode program for each
batch size the first time it meets it, which a training run pays once); "steady" rates leave
them out: the real tokens / (s − compile s).
Also reported: the decode row-steps each ran (`rollout/decode_row_steps`), the answers at the
length cap and the length distribution.
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
  if compact_every or "compact_every" in cfg.rollout:  # a baseline from before compaction lacks it
    cfg.rollout.compact_every = compact_every
  cfg.eval.num_prompts, cfg.eval.at_start = 0, False
  cfg.log.tensorboard = cfg.log.plot = False
  return cfg


def worker(a, kind: str):
  if a.src:
    sys.path.insert(0, a.src)  # the baseline's rljax/ and configs/ before this tree's
  import jax

  from bench.interleave import serve
  from rljax.trainer import Trainer
  compiling = [0.0]  # seconds spent tracing, lowering and compiling programs (all threads)

  def on_duration(event, duration_secs, **_):
    if event.startswith("/jax/core/compile/"):  # trace, to-MLIR, backend compile
      compiling[0] += duration_secs

  jax.monitoring.register_event_duration_secs_listener(on_duration)
  trainer = Trainer(config(a, a.compact_every if kind == "compact" else 0),
                    tempfile.mkdtemp(prefix=f"rljax_bench_rollout_{kind}_"))
  calls = []  # one entry per call, the warm-up first

  def run():
    compiling[0] = 0.0
    roll = trainer.collect(0)
    r = roll.r
    tokens, mask = np.asarray(r.tokens_BxN), np.asarray(r.mask_BxN)
    calls.append({"tokens_sha1": hashlib.sha1(np.where(mask > 0, tokens, -1).tobytes()).hexdigest(),
                  "lengths": mask.sum(1).tolist(), "truncated": np.asarray(r.truncated_B).tolist(),
                  # a plain sampler decodes every row until the longest ends (the count, for a
                  # baseline from before it was logged)
                  "decode_row_steps": int(getattr(roll, "decode_row_steps", 0)
                                          or mask.shape[0] * (int(mask.sum(1).max()) - 1)),
                  "compile_s": compiling[0]})

  def info():
    return {"calls": calls}

  serve(run, info)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--prompts", type=int, default=4)
  ap.add_argument("--groups", type=int, default=8)
  ap.add_argument("--new", type=int, default=512)
  ap.add_argument("--rounds", type=int, default=2)
  ap.add_argument("--compact-every", type=int, default=32)
  ap.add_argument("--baseline", default="", help="git rev: also time its plain sampler")
  ap.add_argument("--worker", default="")
  ap.add_argument("--src", default="")
  a = ap.parse_args()
  if a.worker:
    return worker(a, a.worker)
  from bench.interleave import Worker, baseline_tree, interleaved, load, median, resolve_rev
  argv = [os.path.abspath(__file__), "--prompts", str(a.prompts), "--groups", str(a.groups),
          "--new", str(a.new), "--compact-every", str(a.compact_every)]
  kinds = ("plain", "compact")
  workers = [Worker(k, argv + ["--worker", k]) for k in kinds]
  base = resolve_rev(a.baseline) if a.baseline else ""
  if base:
    workers.append(Worker(f"plain@{base}", argv + ["--worker", "plain", "--src",
                                                   baseline_tree(base, ("rljax", "configs"))]))
  load0 = load()
  times = interleaved(workers, a.rounds)
  calls = {w.name: json.loads(w.ask("info"))["calls"][1:] for w in workers}  # the timed ones
  for w in workers:
    w.close()
  rows, per_round = [], []
  for i in range(a.rounds):
    c = {k: v[i] for k, v in calls.items()}
    real = {k: sum(v["lengths"]) for k, v in c.items()}
    rate = {k: real[k] / times[k][i] for k in c}
    comp = {k: v["compile_s"] for k, v in c.items()}  # every worker runs this file
    steady = {k: real[k] / (times[k][i] - comp[k]) for k in c}  # as once every size compiled
    per_round.append({"same_tokens": c["plain"]["tokens_sha1"] == c["compact"]["tokens_sha1"],
                      "base_same_tokens": (c["plain"]["tokens_sha1"]
                                           == c[f"plain@{base}"]["tokens_sha1"]) if base else None,
                      "rate": rate, "steady": steady})
    for k, v in c.items():
      n = len(v["lengths"])
      rows.append({"batch": i + 1, "sampler": k, "s": times[k][i], "tokens": real[k],
                   "at the cap": sum(v["truncated"]), "useful tokens/s": rate[k],
                   "vs plain": rate[k] / rate["plain"],
                   "vs base": rate[k] / rate[f"plain@{base}"] if base else None,
                   "compile s": comp[k],
                   "steady vs plain": steady[k] / steady["plain"],
                   "steady vs base": steady[k] / steady[f"plain@{base}"] if base else None,
                   "decode row-steps": v["decode_row_steps"],
                   "ms / decode step": (None if k == "compact" else  # its batch shrinks
                                        1e3 * times[k][i] / (v["decode_row_steps"] / n))})
  lengths = np.asarray([x for c in calls["plain"] for x in c["lengths"]])
  meta = {"rows": a.prompts * a.groups, "max_new_tokens": a.new, "compact_every": a.compact_every,
          "baseline_rev": base or None, "same_tokens": all(r["same_tokens"] for r in per_round),
          "base_same_tokens": [r["base_same_tokens"] for r in per_round],
          "median_useful_tokens_s": {k: median([r["rate"][k] for r in per_round]) for k in times},
          "median_steady_tokens_s": {k: median([r["steady"][k] for r in per_round]) for k in times},
          "response_len_mean": float(lengths.mean()),
          "response_len_p50_p90_max": [float(np.percentile(lengths, 50)),
                                       float(np.percentile(lengths, 90)), int(lengths.max())],
          "length_clip_ratio": float(np.mean([x for k in calls["plain"] for x in k["truncated"]])),
          "load": [load0, load()], "rounds": a.rounds, "times": times, "calls": calls,
          "lengths": calls["plain"][-1]["lengths"]}  # the last batch's (bench/decode_rows.py)
  cols = ["batch", "sampler", "s", "tokens", "at the cap", "useful tokens/s", "vs plain"]
  cols += ["vs base"] if base else []
  cols += ["compile s", "steady vs plain"] + (["steady vs base"] if base else [])
  report("rollout", cols + ["decode row-steps", "ms / decode step"], rows, meta)
  print({k: v for k, v in meta.items() if k not in ("times", "calls")})
  if not meta["same_tokens"]:
    raise SystemExit("the compacting sampler drew other tokens than the plain one")


if __name__ == "__main__":
  main()
