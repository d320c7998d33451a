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
    self._tb, self._f, self._lines, self._tb_remote = None, None, None, None
    self._step_times: list[float] = []
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
    self._samples_path = os.path.join(workdir, "samples.jsonl")

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
    """One progress line: [####....] step/total reward csr aon loss tok/s step_s ETA skipped.

    The first step of a process includes compilation: its time is left out of the ETA
    and, at the second step, the compile time (first minus second step) is printed once.
    """
    if not self.active:
      return
    n = self.total_steps or step
    done = int(20 * step / max(n, 1))
    bar = "#" * done + "." * (20 - done)
    parts = [f"[{bar}] {step}/{n}"]
    for key, label, fmt in (("reward/mean", "reward", ".3g"), ("reward/csr", "csr", ".3g"),
                            ("reward/aon", "aon", ".3g"), ("eval/prompt_level_strict",
                                                           "heldout_P", ".3g"),
                            ("loss", "loss", ".3g"), ("loss/ppo/clip_frac", "clip", ".3g"),
                            ("throughput/tokens_per_s", "tok/s", ".0f"),
                            ("time/step", "step_s", ".1f")):
      if key in metrics and _is_number(metrics[key]):
        parts.append(f"{label} {float(metrics[key]):{fmt}}")
    if _is_number(metrics.get("time/step")):
      self._step_times.append(float(metrics["time/step"]))
    later = self._step_times[1:]
    if later and self.total_steps:
      eta = sum(later) / len(later) * max(self.total_steps - step, 0)
      parts.append(f"ETA {_hms(eta)}")
    if _is_number(metrics.get("actor/num_skipped")):
      parts.append(f"skipped {int(float(metrics['actor/num_skipped']))}")
    parts.append(f"elapsed {_hms(time.time() - self._t0)}")
    print("  ".join(parts), file=sys.stdout, flush=True)
    if len(self._step_times) == 2:
      first, second = self._step_times
      print(f"(compile: ~{max(first - second, 0):.0f}s, included in the first step's "
            f"{first:.0f}s)", file=sys.stdout, flush=True)

  def samples(self, step: int, rows: list[dict]) -> None:
    """A few generated samples per eval: samples.jsonl and TensorBoard text."""
    if not self.active:
      return
    lines = [json.dumps({"step": int(step), **r}) for r in rows]
    if self.remote:
      paths.append_lines(self._samples_path, lines)
    else:
      with open(self._samples_path, "a", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))
    if self._tb is not None and rows:
      md = "\n\n".join(f"**prompt** {r.get('prompt', '')}\n\n**response** {r.get('response', '')}"
                        f"\n\n**reward** {r.get('reward', '')}" for r in rows)
      self._tb.add_text("samples", md, step)

  def truncate_after(self, step: int) -> int:
    """Drops records after `step` (a resumed run rewrites them); returns how many."""
    from rljax.workdir import trim_metrics
    if not self.active:
      return 0
    if self._f is not None:
      self._f.close()
    dropped = trim_metrics(self.path, step)
    if self.remote:
      self._lines[:] = paths.read_text(self.path).splitlines() if paths.exists(self.path) else []
    else:
      self._f = open(self.path, "a", buffering=1)
    return dropped

  def close(self) -> None:
    if self._f is not None:
      self._f.close()
    if self._tb is not None:
      self._tb.close()
      if self._tb_remote:
        paths.upload_dir(self._tb_dir, self._tb_remote)


def _hms(seconds: float) -> str:
  s = int(round(seconds))
  return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (
      f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def _is_number(v) -> bool:
  try:
    return math.isfinite(float(v)) or math.isnan(float(v))
  except (TypeError, ValueError):
    return False


def read_metrics(workdir: str) -> list[dict]:
  """The JSONL metrics of a run; a resumed run's repeated steps keep their last record."""
  from rljax.workdir import read_jsonl_tolerant  # a truncated last line is skipped
  by_step: dict[int, dict] = {}
  for rec in read_jsonl_tolerant(os.path.join(os.fspath(workdir), "metrics.jsonl")):
    if "step" in rec:
      by_step[rec["step"]] = rec
  return [by_step[s] for s in sorted(by_step)]
