"""Full RL steps of the main job, split per stage: this rljax vs an older rljax.

    python bench/loop.py [--config configs/cort_grpo.py:cpu] [--steps 3] [--baseline main]
                         [--order base,new] [--set train.steps=3 ...] [--set-new k=v ...]

The comparison against 6eb343d (the main job as it was at 6eb343d: configs/cort_grpo.py's
defaults then, 16 prompts x G=4, x+ padded to 160, 48 new tokens, mu = 1, no eval):

    python bench/loop.py --config configs/cort_grpo.py --baseline 6eb343d --steps 3 \
        --set-new data.batch_size=16 rollout.num_generations=4 train.num_minibatches=1 \
                  eval.every=0 eval.at_start=False

Runs `python -m rljax.train` with the main job's config (README: configs/cort_grpo.py:cpu
on SmolLM2) for --steps steps, once on this
checkout and once on the rljax tree of git rev BASE (default: the merge base with
main), one after the other in fresh processes and fresh work dirs, and reads the stage
times the trainer logs to metrics.jsonl: time/rollout_and_reward (sampling + rewards),
time/train (batch assembly + the jitted update), time/eval, time/step. Step 1 includes
compilation and is reported apart; the table shows medians over steps 2..S. Writes
bench/results/loop.json.

`--placements` instead runs this tree's job twice on D host devices (`--devices`, default 2):
colocated on all D (the on-policy loop), and disaggregated (the sampler on D/2 devices, the
trainer on the rest) with `rollout.max_staleness` 0 (the stages in turn) and 1 (batch t + 1
drawn while batch t trains). Its
table: the stage times, the learner's and the sampler's waits and the fraction of the update
during which the sampler was drawing (`rollout/overlap`); bench/results/loop_placements.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import interleave as il  # noqa: E402
from bench.common import report  # noqa: E402

STAGES = ("time/rollout_and_reward", "time/train", "time/eval", "time/step")


def run_trainer(src: str, config: str, steps: int, extra: list[str],
                env_extra: dict | None = None) -> list[dict]:
  """Per-step metrics of one fresh run of rljax.train from the tree `src`."""
  work = tempfile.mkdtemp(prefix="bench_loop_")
  cmd = [sys.executable, "-m", "rljax.train", f"--config={os.path.join(src, config)}",
         f"--workdir={work}", f"--config.train.steps={steps}",
         "--config.log.plot=False", "--config.log.tensorboard=False"] + extra
  env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1", **(env_extra or {})}
  t = time.time()
  # cwd = src: rljax and configs/ both come from the tree being timed.
  subprocess.run(cmd, check=True, env=env, cwd=src)
  print(f"{src}: {steps} steps in {time.time() - t:.0f}s", flush=True)
  with open(os.path.join(work, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  shutil.rmtree(work, ignore_errors=True)
  return rows


PLACEMENT_KEYS = ("time/step", "time/rollout_and_reward", "time/train", "time/learner_wait",
                  "time/sampler_wait", "rollout/overlap", "rollout/staleness",
                  "throughput/tokens_per_s")


def placements(a) -> None:
  """Colocated (lag 0) vs disaggregated (max_staleness 0 and 1) on --devices host devices."""
  env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={a.devices}"}
  extra = [f"--config.{kv}" for kv in a.set]
  dis = ["--config.rollout.placement=disaggregated",
         f"--config.rollout.num_devices={a.devices // 2}"]
  arms = {"colocated": [], "disaggregated k=0": dis + ["--config.rollout.max_staleness=0"],
          "disaggregated k=1": dis + ["--config.rollout.max_staleness=1"]}
  runs, loads, rows = {}, {}, []
  for name, flags in arms.items():
    loads[name] = il.load()
    runs[name] = run_trainer(il.ROOT, a.config, a.steps, extra + flags, env)
    later = runs[name][1:] or runs[name]
    r = {"placement": name}
    for k in PLACEMENT_KEYS:
      vals = [m[k] for m in later if k in m]
      r[k.split("/")[1]] = statistics.median(vals) if vals else None
    rows.append(r)
  report("loop_placements", ["placement"] + [k.split("/")[1] for k in PLACEMENT_KEYS], rows,
         {"config": a.config, "steps": a.steps, "devices": a.devices, "overrides": a.set,
          "loadavg_before": loads, "loadavg_after": il.load(),
          "per_step": {k: [{s: m.get(s) for s in PLACEMENT_KEYS} for m in v]
                       for k, v in runs.items()},
          "note": "medians over steps 2..S; rollout/overlap: fraction of time/train during "
                  "which the sampler was drawing the next batch"})


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--placements", action="store_true",
                  help="colocated vs disaggregated (max_staleness 1) of this tree")
  ap.add_argument("--devices", type=int, default=2)
  ap.add_argument("--config", default="configs/cort_grpo.py:cpu")
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--baseline", default="main")
  ap.add_argument("--order", default="base,new")
  ap.add_argument("--set", nargs="*", default=[], help="extra key=value config overrides")
  ap.add_argument("--set-new", nargs="*", default=[],
                  help="overrides for this tree only: bring a default that changed since BASE "
                       "back to BASE's value, so both trees run the same job")
  a = ap.parse_args()
  if a.placements:
    return placements(a)
  base = il.resolve_rev(subprocess.run(["git", "-C", il.ROOT, "merge-base", "HEAD", a.baseline],
                                       check=True, capture_output=True, text=True).stdout.strip())
  trees = {"new": il.ROOT, "base": il.baseline_tree(base)}
  if trees["base"] != il.ROOT:  # the baseline tree needs configs/ of its own revision too
    subprocess.run(f"git -C {il.ROOT} archive {base} configs | tar -x -C {trees['base']}",
                   shell=True, check=True)
  extra = [f"--config.{kv}" for kv in a.set]
  extra_new = [f"--config.{kv}" for kv in a.set_new]
  runs, loads = {}, {}
  for name in a.order.split(","):
    loads[name] = il.load()
    runs[name] = run_trainer(trees[name], a.config, a.steps,
                             extra + (extra_new if name == "new" else []))
  rows = []
  for name in ("new", "base"):
    steps = runs[name]
    later = steps[1:] or steps
    r = {"impl": "rljax" if name == "new" else f"rljax@{base}"}
    for k in STAGES:
      vals = [s[k] for s in later if k in s]
      r[k.split("/")[1] + "_s"] = statistics.median(vals) if vals else None
    r["first_step_s"] = steps[0].get("time/step")
    rows.append(r)
  new, old = rows
  rows.append({"impl": "speedup (base / new)", **{
      k: (old[k] / new[k] if old.get(k) and new.get(k) else None) for k in new if k != "impl"}})
  report("loop", ["impl", "rollout_and_reward_s", "train_s", "eval_s", "step_s",
                  "first_step_s"], rows,
         {"config": a.config, "steps": a.steps, "overrides": a.set, "overrides_new": a.set_new,
          "baseline_rev": base,
          "loadavg_before": loads, "loadavg_after": il.load(),
          "per_step": {k: [{s: m.get(s) for s in STAGES} for m in v] for k, v in runs.items()},
          "note": "medians over steps 2..S; eval runs only after the last step"})


if __name__ == "__main__":
  main()
