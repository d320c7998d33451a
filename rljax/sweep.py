"""`python -m rljax.sweep --config configs/X.py[:ARG] [--workdir runs/X_sweep] [--print_only]`

Expands the config file's `sweep(add, arg)` into runs (each `add(**overrides)`
call is one run, keys are dotted config paths), runs them one after another in
this process (or, with --print_only, prints one command per run for a cluster:
`python -m rljax.sweep ... --index i` runs run i alone), and writes
`summary.md` / `summary.json`: each run's final metrics.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import sys

SUMMARY_KEYS = ("reward/mean", "reward/csr", "reward/aon", "eval/prompt_level_strict",
                "eval/instruction_level_strict", "actor/grad_norm", "actor/entropy",
                "time/step")


def load_config_module(path: str):
  file = path.split(":")[0]
  if not os.path.exists(file):
    raise FileNotFoundError(f"{file}: no such config file")
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(file))[0], file)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def expand(path: str) -> list[dict]:
  """The list of override dicts that the file's `sweep()` adds."""
  mod = load_config_module(path)
  if not hasattr(mod, "sweep"):
    raise ValueError(f"{path}: the config file has no sweep(add, arg=None)")
  runs: list[dict] = []
  arg = path.split(":", 1)[1] if ":" in path else None
  mod.sweep(lambda **kw: runs.append(kw), arg)
  if not runs:
    raise ValueError(f"{path}: sweep() added no runs")
  return runs


def run_name(overrides: dict) -> str:
  parts = []
  for k, v in overrides.items():
    short = k.split(".")[-1]
    val = "-".join(map(str, v)) if isinstance(v, (tuple, list)) else (
        "_".join(f"{a}{b}" for a, b in v.items()) if isinstance(v, dict) else str(v))
    parts.append(f"{short}={val}")
  return ",".join(parts).replace("/", "_").replace(" ", "")[:120] or "base"


def apply(cfg, overrides: dict):
  for key, value in overrides.items():
    node, *path = key.split(".")
    target = cfg
    for p in [node] + path[:-1]:
      target = target[p]
    leaf = path[-1] if path else node
    if leaf not in target:
      raise KeyError(f"sweep override {key!r}: no such config field")
    target[leaf] = value
  return cfg


def command(config: str, workdir: str, index: int) -> str:
  args = ["python", "-m", "rljax.sweep", f"--config={config}", f"--workdir={workdir}",
          f"--index={index}"]
  return " ".join(shlex.quote(a) for a in args)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--config", required=True)
  ap.add_argument("--workdir", default=None)
  ap.add_argument("--print_only", action="store_true", help="print one command per run")
  ap.add_argument("--index", type=int, default=None, help="run only this run of the sweep")
  a = ap.parse_args(argv)
  sys.path.insert(0, os.getcwd())
  mod = load_config_module(a.config)
  arg = a.config.split(":", 1)[1] if ":" in a.config else None
  base_dir = a.workdir or os.path.join(
      "runs", os.path.splitext(os.path.basename(a.config.split(":")[0]))[0] + "_sweep")
  runs = expand(a.config)
  if a.print_only:
    for i in range(len(runs)):
      print(command(a.config, base_dir, i))
    return
  if a.index is not None:
    if not 0 <= a.index < len(runs):
      ap.error(f"--index {a.index}: the sweep has {len(runs)} runs")
    runs = [runs[a.index]]
  from rljax.trainer import Trainer
  rows = []
  for i, ov in enumerate(runs):
    wd = os.path.join(base_dir, run_name(ov))
    print(f"=== run {i + 1}/{len(runs)}: {run_name(ov)} -> {wd}", flush=True)
    cfg = apply(mod.get_config(arg), ov)
    final = Trainer(cfg, wd).run()
    rows.append({"run": run_name(ov), "workdir": wd,
                 **{k: final.get(k) for k in SUMMARY_KEYS if k in final}})
  os.makedirs(base_dir, exist_ok=True)
  with open(os.path.join(base_dir, "summary.json"), "w") as f:
    json.dump(rows, f, indent=2)
  cols = ["run"] + [k for k in SUMMARY_KEYS if any(k in r for r in rows)]
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  for r in rows:
    lines.append("| " + " | ".join(
        f"{r[c]:.4g}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols) + " |")
  table = "\n".join(lines)
  with open(os.path.join(base_dir, "summary.md"), "w") as f:
    f.write(table + "\n")
  print(table)


if __name__ == "__main__":
  main()
