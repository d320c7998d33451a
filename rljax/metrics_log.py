"""Run metrics: JSONL (always), TensorBoard event files (tensorboardX), a console line."""
from __future__ import annotations

import json
import math
import os
import sys
import time


class MetricsWriter:
  def __init__(self, workdir: str, tensorboard: bool = True, total_steps: int = 0):
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._f = open(self.path, "a", buffering=1)
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, "tb"))
    self.total_steps = total_steps
    self._t0 = time.time()

  def write(self, step: int, metrics: dict) -> None:
    clean = {k: float(v) for k, v in metrics.items() if _is_number(v)}
    self._f.write(json.dumps({"step": int(step), **clean}) + "\n")
    if self._tb is not None:
      for k, v in clean.items():
        self._tb.add_scalar(k, v, step)
      self._tb.flush()

  def console(self, step: int, metrics: dict) -> None:
    """One progress line: [####....] step/total reward csr aon loss clip skipped time."""
    n = self.total_steps or step
    done = int(20 * step / max(n, 1))
    bar = "#" * done + "." * (20 - done)
    parts = [f"[{bar}] {step}/{n}"]
    for key, label in (("reward/mean", "reward"), ("reward/csr", "csr"), ("reward/aon", "aon"),
                       ("loss", "loss"), ("loss/ppo/clip_frac", "clip"),
                       ("actor/num_skipped", "skipped"), ("time/step", "step_s")):
      if key in metrics and _is_number(metrics[key]):
        parts.append(f"{label} {float(metrics[key]):.4g}")
    parts.append(f"elapsed {time.time() - self._t0:.0f}s")
    print("  ".join(parts), file=sys.stdout, flush=True)

  def close(self) -> None:
    self._f.close()
    if self._tb is not None:
      self._tb.close()


def _is_number(v) -> bool:
  try:
    return math.isfinite(float(v)) or math.isnan(float(v))
  except (TypeError, ValueError):
    return False


def read_metrics(workdir: str) -> list[dict]:
  """The JSONL metrics of a run; a resumed run's repeated steps keep their last record."""
  path = os.path.join(workdir, "metrics.jsonl")
  by_step: dict[int, dict] = {}
  with open(path) as f:
    for line in f:
      if line.strip():
        rec = json.loads(line)
        by_step[rec["step"]] = rec
  return [by_step[s] for s in sorted(by_step)]
