"""Run metrics: JSONL (always), TensorBoard event files (tensorboardX), Weights & Biases
(optional, `rljax.tracking`), a console line.

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

# what jax.monitoring reports for a program it traces, lowers and compiles (or reads back from
# the persistent compilation cache): the time a step spends before it runs anything
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration",
                  "/jax/compilation_cache/cache_retrieval_time_sec")
_COMPILE_SECONDS = [0.0]


def _on_event(event: str, seconds: float, **_) -> None:
  if event in COMPILE_EVENTS:
    _COMPILE_SECONDS[0] += seconds


class CompileClock:
  """Seconds JAX spent compiling (tracing, lowering, XLA compile, cache reads), measured from
  `jax.monitoring` events: `lap()` returns those since the previous lap. Compiles in another
  thread (the disaggregated sampler's) count too."""

  _registered = False

  def __init__(self):
    if not CompileClock._registered:
      import jax
      jax.monitoring.register_event_duration_secs_listener(_on_event)
      CompileClock._registered = True
    self._last = _COMPILE_SECONDS[0]

  def lap(self) -> float:
    now = _COMPILE_SECONDS[0]
    out, self._last = now - self._last, now
    return out


class MetricsWriter:
  def __init__(self, workdir: str, tensorboard: bool = True, total_steps: int = 0,
               active: bool = True, wandb=None):
    """`wandb`: a `rljax.tracking.WandbLogger` that gets every record and sample too."""
    self.active, self.total_steps, self._t0 = active, total_steps, time.time()
    self._wandb = wandb if active else None
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
    if self._wandb is not None:
      self._wandb.log(step, clean)

  def console(self, step: int, metrics: dict) -> None:
    """One progress line: [####....] step/total reward csr aon loss tok/s step_s compile ETA
    skipped elapsed.

    `time/compile` (measured, `CompileClock`) is shown where a step compiled for a second or
    more (the first step; a new prompt bucket later); the ETA leaves it out of every step.
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
    compile_s = float(metrics["time/compile"]) if _is_number(metrics.get("time/compile")) else 0.
    if compile_s >= 1:
      parts.append(f"compile {compile_s:.0f}s")
    if _is_number(metrics.get("time/step")):
      self._step_times.append(max(float(metrics["time/step"]) - compile_s, 0.0))
    if self._step_times and self.total_steps and step < self.total_steps:
      eta = sum(self._step_times) / len(self._step_times) * (self.total_steps - step)
      parts.append(f"ETA {_hms(eta)}")
    if _is_number(metrics.get("actor/num_skipped")):
      parts.append(f"skipped {int(float(metrics['actor/num_skipped']))}")
    parts.append(f"elapsed {_hms(time.time() - self._t0)}")
    print("  ".join(parts), file=sys.stdout, flush=True)

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
    if self._wandb is not None:
      self._wandb.samples(step, rows)

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
    if self._wandb is not None:
      self._wandb.close()
      self._wandb = None
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
