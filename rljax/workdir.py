"""Run directories that never lose results.

- `check_compatible(cfg, workdir)`: a directory whose saved config.json differs in
  anything that changes shapes, the objective or the data is refused before
  anything is written (the message names the keys and offers a new directory) — unless
  it holds no result yet (no metrics, no checkpoint: a run that failed at start-up).
- `finished_metrics(workdir, steps)`: a finished run's final metrics (a rerun is a no-op).
- `trim_metrics(path, step)`: drops records after the resumed step (no duplicates).
- `read_jsonl_tolerant(path)`: JSON lines, skipping a truncated last line with a warning.
- `check_workdir(workdir)`: a directory (or a path not there yet) this process can write in.
- `StartupRollback(workdir)`: a run that fails before its first result leaves the workdir as
  it found it (what it wrote is removed), so a fixed rerun starts clean.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from typing import Any

# Keys that may change between the runs of one workdir (budget, logging, placement).
MAY_CHANGE = ("workdir", "train.steps", "checkpoint.", "eval.", "log.", "mesh.",
              "data.data_dir", "reward.num_threads", "model.remat", "train.logprob_chunk",
              "train.grad_accum", "rollout.placement", "rollout.num_devices",
              "rollout.mesh_shape", "train.pack", "train.tokens_per_row",
              "rollout.compact_every", "rollout.decode_kernel")
# Keys that define the run: shapes, objective, data. Anything not listed here or in
# MAY_CHANGE (optimizer hyper-parameters, ...) may change too, with a warning.
IDENTITY = ("seed", "model.", "data.", "objective.", "reward.", "rollout.num_generations",
            "rollout.max_new_tokens", "rollout.record_topk", "rollout.copy",
            "rollout.lag", "rollout.max_staleness",  # which policy version each batch is from
            "train.ref_model", "train.inner_epochs", "train.num_minibatches")


# Keys the config no longer has: a saved config.json that still holds them is the same run.
REMOVED = ("objective.teacher",)
# Keys added since: a saved config.json without them ran with these values.
ADDED = {"rollout.lag": 0, "rollout.max_staleness": 0, "model.lora.rank": 0,
         "model.lora.alpha": 32.0, "model.lora.targets": "wq|wk|wv|wo|w_gate|w_up|w_down",
         "model.lora.base_bits": 0, "train.pack": False, "train.tokens_per_row": 0,
         "rollout.compact_every": 0, "rollout.decode_kernel": "auto"}


class WorkdirError(ValueError):
  """A workdir that holds a different run."""


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(d, dict) and d:
    out = {}
    for k, v in d.items():
      out.update(_flat(v, f"{prefix}{k}."))
    return out
  return {prefix[:-1]: d}


def _matches(key: str, patterns) -> bool:
  return any(key == p or (p.endswith(".") and key.startswith(p)) for p in patterns)


def config_dict(cfg) -> dict:
  """The config as saved in config.json (JSON types)."""
  return json.loads(cfg.to_json_best_effort())


def fresh_name(workdir: str) -> str:
  """workdir_2, workdir_3, ...: the first that does not exist."""
  i = 2
  while os.path.exists(f"{workdir.rstrip('/')}_{i}"):
    i += 1
  return f"{workdir.rstrip('/')}_{i}"


def check_compatible(cfg, workdir: str) -> list[str]:
  """Raises WorkdirError if `workdir` holds another run; returns the keys that changed."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path) or not has_results(workdir):
    return []  # nothing to protect: a run that stopped before its first metrics or checkpoint
  try:
    with open(path, encoding="utf-8") as f:
      saved = {**ADDED, **_flat(json.load(f))}
  except (ValueError, UnicodeDecodeError) as e:
    raise WorkdirError(f"{path}: unreadable saved config ({e}); use a new --workdir, e.g. "
                       f"{fresh_name(workdir)}") from e
  new = _flat(config_dict(cfg))
  changed = sorted(k for k in set(saved) | set(new) if saved.get(k, "<absent>")
                   != new.get(k, "<absent>") and not _matches(k, MAY_CHANGE)
                   and not (k in REMOVED and k not in new))
  identity = [k for k in changed if _matches(k, IDENTITY)]
  if identity:
    shown = "; ".join(f"{k}: {saved.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}"
                      for k in identity[:8])
    more = f" (+{len(identity) - 8} more)" if len(identity) > 8 else ""
    raise WorkdirError(
        f"{workdir} holds a different run: its config.json differs in {len(identity)} key(s) "
        f"that change shapes, the objective or the data: {shown}{more}. Nothing was "
        f"changed. Use a new --workdir (e.g. {fresh_name(workdir)}) or the same config.")
  if changed:
    warnings.warn(f"{workdir}: resuming with changed settings {changed}")
  return changed


def has_results(workdir: str) -> bool:
  """Whether `workdir` holds a result of a run: a checkpoint step or a metrics record."""
  metrics = os.path.join(workdir, "metrics.jsonl")
  return bool(latest_saved_step(workdir)) or (os.path.exists(metrics)
                                              and os.path.getsize(metrics) > 0)


def latest_saved_step(workdir: str) -> int:
  """The newest step directory under checkpoints/last (0 if none), without opening it."""
  d = os.path.join(workdir, "checkpoints", "last")
  steps = [int(n) for n in os.listdir(d) if n.isdigit()] if os.path.isdir(d) else []
  return max(steps, default=0)


def finished_metrics(workdir: str, steps: int, resumed_step: int) -> dict | None:
  """The saved final metrics when the run already reached `steps`, else None."""
  path = os.path.join(workdir, "final_metrics.json")
  if resumed_step < steps or not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      out = json.load(f)
  except ValueError:
    return None
  return out if out else None


def read_jsonl_tolerant(path: str) -> list[dict]:
  """Records of a JSONL file; a line that does not parse (a run killed mid-write) is
  skipped with a warning naming the file and line."""
  from rljax import paths  # local files and gs:// alike
  out = []
  raw = paths.path(path).read_bytes().decode("utf-8", errors="replace")
  for lineno, line in enumerate(raw.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      rec = json.loads(line)
    except ValueError:
      warnings.warn(f"{path}:{lineno}: skipping an unreadable line (truncated write?)")
      continue
    if isinstance(rec, dict):
      out.append(rec)
  return out


def trim_metrics(path: str, step: int) -> int:
  """Keeps the records with step <= `step` (the last one per step); returns how many were
  dropped. A resumed run rewrites the steps after its checkpoint, so they are not doubled."""
  from rljax import paths
  if not paths.exists(path):
    return 0
  recs = read_jsonl_tolerant(path)
  by_step: dict[int, dict] = {}
  for r in recs:
    if isinstance(r.get("step"), int) and r["step"] <= step:
      by_step[r["step"]] = r
  dropped = len(recs) - len(by_step)
  text = "".join(json.dumps(by_step[s]) + "\n" for s in sorted(by_step))
  if paths.is_remote(path):
    paths.write_text(path, text)
  else:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
      f.write(text)
    os.replace(path + ".tmp", path)
  return dropped


def check_workdir(workdir: str) -> None:
  """Raises WorkdirError unless `workdir` is a directory, or a path not there yet, that this
  process can write in (tried with a probe file by process 0; permission bits do not bind
  root). Leaves nothing behind: a directory made for the probe is removed again. Local
  paths only."""
  from rljax import distributed as dist
  from rljax import paths
  if paths.is_remote(workdir):
    return
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirError(f"{workdir}: exists and is not a directory; use another --workdir")
  if not dist.is_writer():  # one prober: another's rmdir would race this one's probe
    return
  made, parent = [], os.path.abspath(workdir)
  while not os.path.exists(parent):
    made.append(parent)
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise WorkdirError(f"{workdir}: {parent} is a file, not a directory; use another --workdir")
  try:
    os.makedirs(workdir, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=workdir, prefix=".rljax_probe_")
    os.close(fd)
    os.remove(probe)
  except OSError as e:
    raise WorkdirError(f"{workdir}: cannot write there ({e.strerror}); use another --workdir "
                       "or fix its permissions") from None
  finally:
    for d in made:  # deepest first
      try:
        os.rmdir(d)
      except OSError:
        break


class StartupRollback:
  """Removes what a run wrote to its workdir when it fails before any result exists.

  Records the workdir's entries at start; `rollback()` (after a failure) deletes the entries
  added since — config.json, the prepared dataset, empty checkpoint folders — and the workdir
  itself if the run created it, but only while the workdir holds no result (`has_results`:
  a checkpoint or a metrics record). A resumed run or one that reached a step keeps all.
  Process 0 only; local paths only.
  """

  def __init__(self, workdir: str):
    from rljax import paths
    self.workdir = workdir
    self.local = not paths.is_remote(workdir)
    self.existed = self.local and os.path.isdir(workdir)
    self.before = set(os.listdir(workdir)) if self.existed else set()

  def rollback(self) -> bool:
    """Whether it removed anything."""
    if not self.local or not os.path.isdir(self.workdir) or has_results(self.workdir):
      return False
    added = sorted(set(os.listdir(self.workdir)) - self.before)
    for name in added:
      p = os.path.join(self.workdir, name)
      if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p, ignore_errors=True)
      else:
        os.remove(p)
    if not self.existed:
      shutil.rmtree(self.workdir, ignore_errors=True)
    return bool(added) or not self.existed
