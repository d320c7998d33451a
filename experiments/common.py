"""Shared plumbing for the studies: output folders, JSON / markdown writers, bootstrap CIs,
figure styling (labelled axes, no offset notation) and the bundled SmolLM2 loader.

Every study is `run(out_dir, quick, seed) -> dict` and writes into `out_dir`:
`results.json` (every number, the config, seeds, runtime), `table.md` and `*.png`.
"""
from __future__ import annotations

import json
import os
import platform
import time
from typing import Any, Sequence

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def out_dir_for(study: str, root: str | None = None) -> str:
  d = os.path.join(root or RESULTS, study)
  os.makedirs(d, exist_ok=True)
  return d


def _jsonable(x):
  if isinstance(x, dict):
    return {str(k): _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, (np.floating, float)):
    v = float(x)
    return v if np.isfinite(v) else str(v)
  if isinstance(x, (np.integer,)):
    return int(x)
  if isinstance(x, np.ndarray):
    return _jsonable(x.tolist())
  if isinstance(x, (np.bool_,)):
    return bool(x)
  return x


def write_json(path: str, obj: dict) -> None:
  with open(path, "w") as f:
    json.dump(_jsonable(obj), f, indent=1, sort_keys=False)
    f.write("\n")


def environment() -> dict:
  import jax
  return {"python": platform.python_version(), "jax": jax.__version__,
          "backend": jax.default_backend(), "cpu_count": os.cpu_count(),
          "machine": platform.machine()}


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  fmt = lambda v: (f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v))
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
  return "\n".join(lines) + "\n"


def bootstrap_ci(values, stat=np.mean, n_boot: int = 2000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
  """Percentile bootstrap CI of `stat` over the first axis of `values`."""
  v = np.asarray(values)
  if len(v) < 2:
    return (float("nan"), float("nan"))
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, len(v), size=(n_boot, len(v)))
  stats = np.array([stat(v[i]) for i in idx])
  a = (1 - level) / 2
  return float(np.quantile(stats, a)), float(np.quantile(stats, 1 - a))


def mean_ci(values, seed: int = 0) -> dict:
  v = np.asarray(values, np.float64)
  lo, hi = bootstrap_ci(v, seed=seed)
  return {"mean": float(v.mean()) if len(v) else float("nan"),
          "std": float(v.std(ddof=1)) if len(v) > 1 else float("nan"),
          "n": int(len(v)), "ci95": [lo, hi]}


def pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  plt.rcParams.update({"axes.formatter.useoffset": False, "figure.dpi": 110,
                       "axes.grid": True, "grid.alpha": 0.3})
  return plt


def finish_axes(ax, xlabel: str, ylabel: str, title: str | None = None, legend: bool = True):
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title)
  if ax.get_xscale() == "linear":
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
  if ax.get_yscale() == "linear":
    ax.ticklabel_format(axis="y", useOffset=False)
  if legend and ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=8)


class Timer:
  def __init__(self):
    self.t0 = time.time()

  def __call__(self) -> float:
    return round(time.time() - self.t0, 2)


def load_smollm2():
  """(model, tokenizer) of the bundled SmolLM2-135M-Instruct, float32."""
  from rljax.models import load_model
  from rljax.models.bundled import smollm2_path
  from rljax.models.tokenizer import load_tokenizer
  path = smollm2_path()
  return load_model(path), load_tokenizer(path)


def left_pad(rows: list[list[int]], pad_id: int, length: int | None = None):
  """[B, L] int32 ids and 0/1 mask, left-padded to the longest row (or `length`)."""
  length = length or max(len(r) for r in rows)
  ids = np.full((len(rows), length), pad_id, np.int32)
  mask = np.zeros((len(rows), length), np.int32)
  for i, r in enumerate(rows):
    ids[i, length - len(r):], mask[i, length - len(r):] = r, 1
  return ids, mask


def study_main(study: str, run, doc: str, argv=None) -> dict:
  """The CLI of a study: `[--quick] [--out DIR] [--seed S]` -> run(out, quick, seed)."""
  import argparse
  ap = argparse.ArgumentParser(description=doc.splitlines()[0])
  ap.add_argument("--quick", action="store_true")
  ap.add_argument("--out", default=None)
  ap.add_argument("--seed", type=int, default=0)
  a = ap.parse_args(argv)
  out = out_dir_for(study, a.out)
  res = run(out, a.quick, a.seed)
  print(open(f"{out}/table.md").read())
  print(f"runtime {res['runtime_s']} s -> {out}")
  return res


def sweep_main(study: str, run, doc: str, argv=None) -> None:
  """The CLI of a study whose runs K processes can share: `[--quick] [--out DIR] [--seed S]
  [--workers K --worker I]` -> run(out, quick, seed, workers, worker). A worker runs its
  share of the (seed, arm) runs; the single-process call (K = 1) runs what is left and
  writes the tables."""
  import argparse
  ap = argparse.ArgumentParser(description=doc.splitlines()[0])
  ap.add_argument("--quick", action="store_true")
  ap.add_argument("--out", default=None)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--workers", type=int, default=1, help="processes sharing the sweep")
  ap.add_argument("--worker", type=int, default=0, help="this process's index (0..K-1)")
  a = ap.parse_args(argv)
  out = out_dir_for(study, a.out)
  res = run(out, a.quick, a.seed, a.workers, a.worker)
  if a.workers == 1:
    print(open(f"{out}/table.md").read())
  print(f"runtime {res['runtime_s']} s -> {out}")
