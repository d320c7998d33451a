"""Shared bench helpers: timing (best of N after warm-up), a printed table, a JSON file."""
from __future__ import annotations

import json
import os
import platform
import time
from typing import Callable, Sequence

RESULTS_DIR = os.path.join(os.path.dirname(__file__), "results")


def best_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
  """Best wall time of `fn()` (which must block until done) over `repeats` runs."""
  for _ in range(warmup):
    fn()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t)
  return best


def report(name: str, columns: Sequence[str], rows: Sequence[dict], meta: dict | None = None) -> str:
  """Prints a table and writes bench/results/<name>.json; returns the JSON path."""
  widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
  line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
  print(line)
  print("-" * len(line))
  for r in rows:
    print("  ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths)))
  os.makedirs(RESULTS_DIR, exist_ok=True)
  path = os.path.join(RESULTS_DIR, f"{name}.json")
  info = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
  try:
    import jax
    info["jax_backend"] = jax.default_backend()
    info["devices"] = [str(d) for d in jax.devices()]
  except Exception:
    pass
  with open(path, "w") as f:
    json.dump({"bench": name, "rows": list(rows), "meta": {**info, **(meta or {})}}, f, indent=2)
  print(f"\nwrote {path}")
  return path


def _fmt(v) -> str:
  if isinstance(v, float):
    return f"{v:.4g}"
  return "" if v is None else str(v)
