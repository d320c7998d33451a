"""Run metrics: JSONL (always), TensorBoard event files (tensorboardX), a console line.

The run directory may be a bucket (`gs://...`, through rljax.paths): TensorBoard events
are then written to a local directory and copied up at every flush. Only the writer
process (`active=True`, process 0) writes anything.
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time

from rljax import paths


class MetricsWriter:
  def __init__(self, workdir: str, tensorboard: bool = True, total_steps: int = 0,
               active: bool = True):
    self.active, self.total_steps, self._t0 = active, total_steps, time.time()
    self._tb, self._f, self._lines = None, None, None
    if not active:
      return
    workdir = os.fspath(workdir)
    paths.makedirs(workdir)
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.remote = paths.is_remote(workdir)
    if self.remote:  # objects cannot be appended to: keep the lines, rewrite the file
      self._lines = (paths.read_text(self.path).splitlines() if paths.exists(self.path)
                     else [])
    else:
      self._f = open(self.path, "a", buffering=1)
    if tensorboard:
      from tensorboardX import SummaryWriter
      self._tb_remote = os.path.join(workdir, "tb") if self.remote else None
      self._tb_dir = (tempfile.mkdtemp(prefix="rljax_tb_") if self.remote
                      else os.path.join(workdir, "tb"))
      self._tb = SummaryWriter(self._tb_dir)

  def write(self, step: int, metrics: dict) -> None:
    if not self.active:
      return
    clean = {k: float(v) for k, v in metrics.items() if _is_number(v)}
    line = json.dumps({"step": int(step), **clean})
    if self._f is not None:
      self._f.write(line + "\n")
    else:
      paths.append_lines(self.path, [line], cache=self._lines)
    if self._tb is not None:
      for k, v in clean.items():
        self._tb.add_scalar(k, v, step)
      self._tb.flush()
      if self._tb_remote:
        paths.upload_dir(self._tb_dir, self._tb_remote)

  def console(self, step: int, metrics: dict) -> None:
    """One progress line: [####....] step/total reward csr aon loss clip skipped time."""
    if not self.active:
      return
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
    if self._f is not None:
      self._f.close()
    if self._tb is not None:
      self._tb.close()
      if self._tb_remote:
        paths.upload_dir(self._tb_dir, self._tb_remote)


def _is_number(v) -> bool:
  try:
    return math.isfinite(float(v)) or math.isnan(float(v))
  except (TypeError, ValueError):
    return False


def read_metrics(workdir: str) -> list[dict]:
  """The JSONL metrics of a run; a resumed run's repeated steps keep their last record."""
  path = os.path.join(os.fspath(workdir), "metrics.jsonl")
  by_step: dict[int, dict] = {}
  for line in paths.read_text(path).splitlines():
    if line.strip():
      rec = json.loads(line)
      by_step[rec["step"]] = rec
  return [by_step[s] for s in sorted(by_step)]
