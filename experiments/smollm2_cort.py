"""Study 7: CoRT-GRPO against GRPO on SmolLM2-135M-Instruct, the real trainer on real
language: `python -m rljax.train` with `configs/grpo.py:cpu` and `configs/cort_grpo.py:cpu`
and the same overrides (`OVERRIDES`), paired seeds (seed s fixes the training prompt stream,
the sampler keys and the mini-batch order in both arms), one held-out set shared by every run.

The held-out set is `N_HELD` rubric prompts of the held-out split (base requests never
trained on; seed `HELD_SEED`, the `:cpu` criteria) written once to `heldout.jsonl` in IFEval
format and read through `eval.path`; each run evaluates its final policy greedily and with
one sample per prompt from a fixed key (`eval.sampled`), so the two arms of a seed answer
the same prompts with the same randomness. The initial policy is the same for every run: its
evaluation is made once (`baseline.json`).

Each run is a subprocess with its own workdir under `runs/smollm2_cort/` (checkpointed every
step: a stopped sweep resumes where it stopped). When a run ends, its metrics, samples, final
evaluation and CoRT heat-map are copied to `results/smollm2_cort/runs/<arm>_s<seed>/` and its
checkpoints are deleted. Runs go seed-major, so a sweep stopped early stays paired. The
summary pass (`--summary`) writes results.json, table.md and the figures from the runs that
have finished.

    python -m experiments.smollm2_cort [--workers K --worker I]   # the sweep (hours)
    python -m experiments.smollm2_cort --summary                  # tables from finished runs
    python -m experiments.smollm2_cort --quick                    # smoke: :tiny, 1 seed
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from experiments import common, stats

STUDY = "smollm2_cort"
ARMS = {"GRPO": "configs/grpo.py", "CoRT-GRPO": "configs/cort_grpo.py"}
SEEDS = (0, 1, 2, 3)
STEPS, N_HELD, HELD_SEED = 8, 128, 0
# on top of `:cpu` (4 prompts x 4 samples, 48 new tokens, lr 5e-5, 1 epoch x 2 mini-batches)
OVERRIDES = {
    "data.batch_size": 32, "rollout.num_generations": 8,  # 4 prompts x G = 8 per step
    "rollout.max_new_tokens": 384, "rollout.temperature": 0.7,
    "rollout.compact_every": 32, "train.pack": True, "model.remat": "dots",
    "train.steps": STEPS, "eval.every": 0, "eval.at_start": False, "eval.sampled": 1,
    "eval.num_prompts": N_HELD, "eval.num_samples": 16, "checkpoint.keep": 1,
}
QUICK = {"data.batch_size": 8, "rollout.num_generations": 4, "rollout.max_new_tokens": 8,
         "train.steps": 2, "eval.every": 0, "eval.at_start": False, "eval.sampled": 1,
         "eval.num_prompts": 4, "checkpoint.keep": 1, "train.num_minibatches": 1,
         "data.max_prompt_len": 160}
# (metric, what it is, the paper's claim of CoRT-GRPO - GRPO in pp: Qwen3-4B, IFEval)
METRICS = [("eval/prompt_level_strict", "prompt-level strict, greedy (IFEval-P)", 1.77),
           ("eval/instruction_level_strict", "instruction-level strict, greedy (IFEval-I)", 1.27),
           ("eval/reward_mean", "CSR (guarded), greedy", 1.27),
           ("eval/sampled/prompt_level_strict", "prompt-level strict, sampled", 1.77),
           ("eval/sampled/instruction_level_strict", "instruction-level strict, sampled", 1.27),
           ("eval/sampled/reward_mean", "CSR (guarded), sampled", 1.27)]
# The spread of d = CoRT - GRPO the design assumes (pp), before any run: the eval alone
# (128 prompts, proportion ~0.3, two policies' answers correlated ~0.5) gives sd ~4 pp;
# seed-to-seed training noise adds to it: 5 pp.
DESIGN_SD = 5.0
KEEP = ("metrics.jsonl", "final_metrics.json", "samples.jsonl", "cort_weights.json",
        "config.json", "plots")


def write_heldout(path: str, n: int, seed: int) -> list[dict]:
  """The shared held-out prompts (x+ as written, IFEval format) -> `path`."""
  from configs.common import CPU_CRITERIA
  from rljax.data import rubric
  exs = list(rubric.generate_examples(seed, "heldout", n, ids=CPU_CRITERIA, max_criteria=2))
  recs = [{"key": i, "id": e["id"], "prompt": e["prompt_plus"],
           "instruction_id_list": e["instruction_id_list"], "kwargs": e["kwargs"]}
          for i, e in enumerate(exs)]
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in recs)
  return recs


def overrides(out: str, quick: bool) -> dict:
  o = dict(QUICK if quick else OVERRIDES)
  o["eval.path"] = os.path.relpath(os.path.join(out, "heldout.jsonl"))  # runs from the repo root
  return o


def config_arg(arm: str, quick: bool) -> str:
  return f"{ARMS[arm]}:{'tiny' if quick else 'cpu'}"


def baseline(out: str, quick: bool, workdir: str) -> dict:
  """The initial policy's held-out evaluation (the same for every run: greedy, and the fixed
  sampling key), made once."""
  path = os.path.join(out, "baseline.json")
  if os.path.exists(path):
    return json.load(open(path))
  import importlib
  from rljax.trainer import Trainer
  t0 = time.time()
  mod = importlib.import_module(ARMS["GRPO"][:-3].replace("/", "."))
  cfg = mod.get_config("tiny" if quick else "cpu")
  _apply(cfg, overrides(out, quick))
  t = Trainer(cfg, workdir)
  ev = dict(t.evaluate(t.policy()), runtime_s=time.time() - t0)
  common.write_json(path, ev)
  return ev


def _apply(cfg, over: dict) -> None:
  for k, v in over.items():
    node = cfg
    *path, leaf = k.split(".")
    for p in path:
      node = node[p]
    node[leaf] = v


def run_one(out: str, arm: str, seed: int, quick: bool, runs_root: str) -> dict:
  """One training run (resumed from its checkpoint when one exists); its kept files copied to
  results/<study>/runs/<arm>_s<seed>/, its checkpoints deleted."""
  name = f"{arm}_s{seed}"
  dest = os.path.join(out, "runs", name)
  if os.path.exists(os.path.join(dest, "final_metrics.json")):
    return _load_run(dest)
  wd = os.path.join(runs_root, name)
  cmd = [sys.executable, "-m", "rljax.train", "--config", config_arg(arm, quick),
         "--workdir", wd, f"--config.seed={seed}"]
  cmd += [f"--config.{k}={v}" for k, v in overrides(out, quick).items()]
  t0 = time.time()
  print(f"[{STUDY}] {name}: {' '.join(cmd[1:])}", flush=True)
  with open(os.path.join(runs_root, f"{name}.log"), "a") as log:
    rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
  if rc:
    raise RuntimeError(f"{name}: rljax.train exited with {rc}; see "
                       f"{os.path.join(runs_root, name + '.log')}")
  os.makedirs(dest, exist_ok=True)
  for k in KEEP:
    src = os.path.join(wd, k)
    if os.path.isdir(src):
      shutil.copytree(src, os.path.join(dest, k), dirs_exist_ok=True)
    elif os.path.exists(src):
      shutil.copy(src, dest)
  with open(os.path.join(dest, "runtime.json"), "w") as f:
    json.dump({"this_call_s": time.time() - t0}, f)
  for ck in glob.glob(os.path.join(wd, "checkpoints*")):
    shutil.rmtree(ck, ignore_errors=True)
  print(f"[{STUDY}] {name}: done in {time.time() - t0:.0f} s", flush=True)
  return _load_run(dest)


def _load_run(dest: str) -> dict:
  from rljax.metrics_log import read_metrics
  recs = read_metrics(dest)
  return {"final": json.load(open(os.path.join(dest, "final_metrics.json"))),
          "curve": recs, "train_s": float(sum(r.get("time/step", 0.0) for r in recs))}


def finished(out: str) -> dict:
  """{arm: {seed: run}} of the runs whose results are in `out`."""
  runs: dict = {}
  for arm in ARMS:
    for d in sorted(glob.glob(os.path.join(out, "runs", f"{arm}_s*"))):
      if os.path.exists(os.path.join(d, "final_metrics.json")):
        runs.setdefault(arm, {})[int(d.rsplit("_s", 1)[1])] = _load_run(d)
  return runs


# other rows of the table (no claim): (metric, what it is, scale, format)
EXTRA = [("eval/length_clip_ratio", "length-clip ratio, greedy", 1, "{:.2f}"),
         ("eval/sampled/length_clip_ratio", "length-clip ratio, sampled", 1, "{:.2f}"),
         ("eval/length_mean", "answer length (tokens), greedy", 1, "{:.0f}"),
         ("eval/sampled/length_mean", "answer length (tokens), sampled", 1, "{:.0f}")]


def summarize(out: str, quick: bool, runtime_s: float, seed: int = 0) -> dict:
  runs = finished(out)
  base = json.load(open(os.path.join(out, "baseline.json")))
  n_held = 4 if quick else N_HELD
  seeds = sorted(set.intersection(*[set(v) for v in runs.values()])) if len(runs) == 2 else []
  rows, verdicts, final = [], [], {}
  for key, what, scale, fmt in [(k, w, 100, "{:.1f}") for k, w, _ in METRICS] + EXTRA:
    for arm in ARMS:  # raw values, in the layout experiments/verdicts.py reads
      final.setdefault(arm, {})[key.removeprefix("eval/")] = {
          "values": [runs[arm][s]["final"][key] for s in seeds], "seeds": seeds}
    a, b = ([scale * runs[arm][s]["final"][key] for s in seeds] for arm in ARMS)
    rows.append([what, fmt.format(scale * base[key]), _pm(a, fmt), _pm(b, fmt),
                 f"{len(seeds)}"])
  for key, what, claim in METRICS:
    if len(seeds) >= 2:
      a, b = ([100 * runs[arm][s]["final"][key] for s in seeds] for arm in ARMS)
      cmp = stats.paired(a, b)
      v = stats.verdict(cmp, claim)
      verdicts.append({"claim": f"CoRT-GRPO beats GRPO ({what}; paper +{claim})",
                       "metric": key, "a": a, "b": b, "paired": cmp, "verdict": v})
  figures = _figures(out, runs, seeds, base)
  res = {"study": STUDY,
         "config": {"seed": seed, "quick": quick, "arms": dict(ARMS),
                    "seeds_planned": [seed + k for k in SEEDS],
                    "steps": overrides(out, quick)["train.steps"],
                    "heldout_prompts": n_held, "heldout_seed": HELD_SEED,
                    "overrides": overrides(out, quick), "design_sd_pp": DESIGN_SD,
                    "mde_pp_at_planned_n": stats.mde(DESIGN_SD, len(SEEDS))},
         "seeds_paired": seeds,
         "baseline": base, "final": final,
         "per_seed": {arm: {s: r["final"] for s, r in v.items()} for arm, v in runs.items()},
         "train_s": {arm: {s: r["train_s"] for s, r in v.items()} for arm, v in runs.items()},
         "verdicts": verdicts, "figures": figures, "environment": common.environment(),
         "runtime_s": runtime_s}
  table = (f"Held-out: {n_held} rubric prompts shared by every run, greedy and one sample "
           f"per prompt from a fixed key; % unless stated (mean ± std over paired seeds, "
           f"ddof = 1). Step 0 = the initial policy.\n\n"
           + common.md_table(["metric", "step 0", "GRPO", "CoRT-GRPO", "paired seeds"], rows))
  if verdicts:
    table += "\n" + stats.verdict_table([{**v["paired"], **v["verdict"], "claim": v["claim"],
                                          "metric": v["metric"], "base": "GRPO",
                                          "variant": "CoRT-GRPO"} for v in verdicts])
  with open(os.path.join(out, "table.md"), "w") as f:
    f.write(table)
  common.write_json(os.path.join(out, "results.json"), res)
  return res


def _figures(out: str, runs: dict, seeds: list, base: dict) -> list[str]:
  """train_curves.png (training reward and length-clip ratio per step: mean ± std, ddof = 1,
  over the paired seeds, thin lines per seed), heldout_paired.png (each seed's final held-out
  scores, GRPO to CoRT-GRPO), and the CoRT heat-map of the lowest finished seed."""
  plt = common.pyplot()
  figs = []
  colors = {"GRPO": "tab:blue", "CoRT-GRPO": "tab:red"}
  fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
  for ax, key, label in zip(axes, ("reward/csr", "reward/aon", "response/length_clip_ratio"),
                            ("train CSR", "train all-of-n (prompt-level)",
                             "train length-clip ratio")):
    for arm in ARMS:
      curves = [[r.get(key, np.nan) for r in runs[arm][s]["curve"]] for s in seeds]
      if not curves:
        continue
      n = min(len(c) for c in curves)
      y = np.asarray([c[:n] for c in curves], np.float64)
      x = np.arange(1, n + 1)
      for row in y:
        ax.plot(x, row, color=colors[arm], lw=0.6, alpha=0.35)
      m = y.mean(0)
      ax.plot(x, m, color=colors[arm], lw=2, label=f"{arm} (n = {len(y)})")
      if len(y) > 1:
        sd = y.std(0, ddof=1)
        ax.fill_between(x, m - sd, m + sd, color=colors[arm], alpha=0.15)
    common.finish_axes(ax, "step", label)
  fig.tight_layout()
  fig.savefig(os.path.join(out, "train_curves.png"))
  plt.close(fig)
  figs.append("train_curves.png")
  fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
  for ax, (key, what, _) in zip(axes, [METRICS[0], METRICS[2], METRICS[3], METRICS[5]]):
    for s in seeds:
      ax.plot([0, 1], [100 * runs[a][s]["final"][key] for a in ARMS], "o-", color="0.4",
              lw=1, ms=4)
      ax.annotate(f"s{s}", (1.03, 100 * runs["CoRT-GRPO"][s]["final"][key]), fontsize=7)
    ax.axhline(100 * base[key], color="k", ls=":", lw=1, label="step 0")
    ax.set_xlim(-0.3, 1.3)
    common.finish_axes(ax, "", "%", title=what.replace(" (IFEval-P)", ""))
    ax.set_xticks([0, 1], list(ARMS))
    ax.title.set_fontsize(9)
  fig.tight_layout()
  fig.savefig(os.path.join(out, "heldout_paired.png"))
  plt.close(fig)
  figs.append("heldout_paired.png")
  for s in sorted(runs.get("CoRT-GRPO", {})):
    src = os.path.join(out, "runs", f"CoRT-GRPO_s{s}", "plots", "cort_weights.png")
    if os.path.exists(src):
      shutil.copy(src, os.path.join(out, "cort_weights.png"))
      figs.append("cort_weights.png")
      break
  return figs


def _pm(v, fmt: str = "{:.1f}") -> str:
  if not v:
    return "-"
  f = fmt.format
  return f"{f(np.mean(v))} ± {f(np.std(v, ddof=1))}" if len(v) > 1 else f(v[0])


def run(out: str, quick: bool = False, seed: int = 0, workers: int = 1, worker: int = 0,
        summary_only: bool = False) -> dict:
  timer = common.Timer()
  runs_root = os.path.join(out, "_runs") if quick else os.path.join("runs", STUDY)
  os.makedirs(runs_root, exist_ok=True)
  if not os.path.exists(os.path.join(out, "heldout.jsonl")):
    write_heldout(os.path.join(out, "heldout.jsonl"), 4 if quick else N_HELD, HELD_SEED)
  if not summary_only:
    if worker == 0:
      baseline(out, quick, os.path.join(runs_root, "baseline"))
    seeds = [seed] if quick else [seed + s for s in SEEDS]
    jobs = [(arm, s) for s in seeds for arm in ARMS]  # seed-major: a stopped sweep stays paired
    for arm, s in jobs[worker::workers]:
      run_one(out, arm, s, quick, runs_root)
  if workers > 1:
    return {"runtime_s": timer()}
  return summarize(out, quick, timer(), seed)


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true")
  ap.add_argument("--out", default=None)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--workers", type=int, default=1)
  ap.add_argument("--worker", type=int, default=0)
  ap.add_argument("--summary", action="store_true", help="tables from the finished runs only")
  a = ap.parse_args(argv)
  out = common.out_dir_for(STUDY, a.out)
  res = run(out, a.quick, a.seed, a.workers, a.worker, a.summary)
  if a.workers == 1:
    print(open(os.path.join(out, "table.md")).read())
  print(f"runtime {res['runtime_s']} s -> {out}")


if __name__ == "__main__":
  main()
