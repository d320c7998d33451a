"""`python -m rljax.sweep --config configs/X.py[:ARG] [--workdir runs/X_sweep] [--print_only]`

Expands the config file's `sweep(add, arg)` into runs (each `add(**overrides)`
call is one run, keys are dotted config paths), runs them one after another in
this process (or, with --print_only, prints one command per run for a cluster:
`python -m rljax.sweep ... --index i` runs run i alone), and writes
`summary.md` / `summary.json`: each run's final metrics, merged with the rows
already there (a rerun or an `--index` run updates its own row, never wipes the
others). `--config.KEY=VALUE` overrides apply to every run.
"""
from __future__ import annotations

import json
import os
import shlex
import sys

from rljax import cli

SUMMARY_KEYS = ("reward/mean", "reward/csr", "reward/aon", "eval/prompt_level_strict",
                "eval/instruction_level_strict", "actor/grad_norm", "actor/entropy",
                "time/step")


load_config_module = cli.load_config_module


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


def command(config: str, workdir: str, index: int, overrides=()) -> str:
  args = ["python", "-m", "rljax.sweep", f"--config={config}", f"--workdir={workdir}",
          f"--index={index}"] + [f"--config.{k}={v}" for k, v in overrides]
  return " ".join(shlex.quote(a) for a in args)


def merge_summary(base_dir: str, rows: list[dict]) -> list[dict]:
  """The rows of `summary.json` with `rows` replacing those of the same run, in order."""
  path = os.path.join(base_dir, "summary.json")
  old = []
  if os.path.exists(path):
    try:
      with open(path) as f:
        old = [r for r in json.load(f) if isinstance(r, dict) and "run" in r]
    except ValueError:
      old = []
  new = {r["run"]: r for r in rows}
  merged = [new.pop(r["run"], r) for r in old]
  return merged + list(new.values())


def write_summary(base_dir: str, rows: list[dict]) -> str:
  os.makedirs(base_dir, exist_ok=True)
  rows = merge_summary(base_dir, rows)
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
  return table


def main(argv=None):
  ap = cli.parser("python -m rljax.sweep", __doc__, config=True)
  ap.add_argument("--workdir", default=None, help="base directory (default runs/<name>_sweep)")
  ap.add_argument("--print_only", action="store_true", help="print one command per run")
  ap.add_argument("--index", type=int, default=None, help="run only this run of the sweep")
  a, _ = cli.parse_with_config(ap, argv)  # checks the overrides; handles --print_config
  cli.set_verbosity(a.verbosity, progress_bars=a.verbosity in ("debug", "info"))
  overrides = cli.split_config_overrides(sys.argv[1:] if argv is None else argv)[1]
  mod = load_config_module(a.config)
  arg = a.config.split(":", 1)[1] if ":" in a.config else None
  from rljax.train import default_workdir
  base_dir = a.workdir or default_workdir(a.config) + "_sweep"
  runs = expand(a.config)
  if a.print_only:
    for i in range(len(runs)):
      print(command(a.config, base_dir, i, overrides))
    return
  if a.index is not None:
    if not 0 <= a.index < len(runs):
      ap.error(f"--index {a.index}: the sweep has {len(runs)} runs")
    runs = [runs[a.index]]
  from rljax.train import train_or_exit
  rows = []
  for i, ov in enumerate(runs):
    wd = os.path.join(base_dir, run_name(ov))
    print(f"=== run {i + 1}/{len(runs)}: {run_name(ov)} -> {wd}", flush=True)
    cfg = apply(cli.apply_overrides(mod.get_config(arg), overrides), ov)
    final = train_or_exit(cfg, wd, ap.prog, a.verbosity)
    rows.append({"run": run_name(ov), "workdir": wd,
                 **{k: final.get(k) for k in SUMMARY_KEYS if k in final}})
    write_summary(base_dir, rows)  # after each run: a crash later keeps the finished rows
  print(write_summary(base_dir, rows))


if __name__ == "__main__":
  main()
