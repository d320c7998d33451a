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
    self._step_times: list[float] = []
    self._samples_path = os.path.join(workdir, "samples.jsonl")

  def write(self, step: int, metrics: dict) -> None:
    clean = {k: float(v) for k, v in metrics.items() if _is_number(v)}
    self._f.write(json.dumps({"step": int(step), **clean}) + "\n")
    if self._tb is not None:
      for k, v in clean.items():
        self._tb.add_scalar(k, v, step)
      self._tb.flush()

  def console(self, step: int, metrics: dict) -> None:
    """One progress line: [####....] step/total reward csr aon loss tok/s step_s ETA skipped.

    The first step of a process includes compilation: its time is left out of the ETA
    and, at the second step, the compile time (first minus second step) is printed once.
    """
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
    with open(self._samples_path, "a", encoding="utf-8") as f:
      for r in rows:
        f.write(json.dumps({"step": int(step), **r}) + "\n")
    if self._tb is not None and rows:
      md = "\n\n".join(f"**prompt** {r.get('prompt', '')}\n\n**response** {r.get('response', '')}"
                        f"\n\n**reward** {r.get('reward', '')}" for r in rows)
      self._tb.add_text("samples", md, step)

  def truncate_after(self, step: int) -> int:
    """Drops records after `step` (a resumed run rewrites them); returns how many."""
    from rljax.workdir import trim_metrics
    self._f.close()
    dropped = trim_metrics(self.path, step)
    self._f = open(self.path, "a", buffering=1)
    return dropped

  def close(self) -> None:
    self._f.close()
    if self._tb is not None:
      self._tb.close()


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
  for rec in read_jsonl_tolerant(os.path.join(workdir, "metrics.jsonl")):
    if "step" in rec:
      by_step[rec["step"]] = rec
  return [by_step[s] for s in sorted(by_step)]
