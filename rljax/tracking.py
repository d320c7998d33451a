"""Weights & Biases tracking beside TensorBoard (`log.wandb.*`; `pip install -r
requirements-wandb.txt`).

Process 0 logs every metric record (the same numbers as `metrics.jsonl`, at the same
steps), the resolved config and the held-out samples (a table). `log.wandb.mode="offline"`
(the default) writes the run under `<workdir>/wandb/` for `wandb sync` later, on machines
without network; `"online"` streams it. The run id is kept in `<workdir>/wandb_run_id`, so
a resumed run continues the same W&B run (steps it re-runs after its checkpoint keep the
first record W&B saw: W&B's steps only move forward). `read_history(workdir)` reads an
offline run back without network or the W&B service.
"""
from __future__ import annotations

import glob
import json
import os
import struct
import uuid

from rljax import paths

MODES = ("offline", "online")


class WandbLogger:
  """A W&B run for a workdir: `log(step, metrics)`, `samples(step, rows)`, `close()`."""

  def __init__(self, workdir: str, wcfg, config: dict):
    import wandb
    workdir = os.fspath(workdir)
    local = paths.local_cache_dir("wandb") if paths.is_remote(workdir) else workdir
    id_path = os.path.join(workdir, "wandb_run_id")
    run_id = (paths.read_text(id_path).strip() if paths.exists(id_path)
              else uuid.uuid4().hex[:8])
    self._run = wandb.init(
        project=wcfg.project, entity=wcfg.entity or None, mode=wcfg.mode, dir=local,
        name=wcfg.name or os.path.basename(os.path.normpath(workdir)), id=run_id,
        resume="allow", config=config,
        settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
    paths.write_text(id_path, run_id)
    self._wandb = wandb

  def log(self, step: int, metrics: dict) -> None:
    self._run.log(metrics, step=int(step))

  def samples(self, step: int, rows: list[dict]) -> None:
    if rows:
      cols = ["prompt", "response", "reward"]
      table = self._wandb.Table(columns=cols, data=[[str(r.get(c, "")) for c in cols]
                                                    for r in rows])
      self._run.log({"samples": table}, step=int(step))

  def close(self) -> None:
    self._run.finish()


def read_history(workdir: str) -> list[dict]:
  """The history records ({"_step": s, key: value, ...}) of the newest offline run under
  `<workdir>/wandb/`, read from its `.wandb` file: W&B's record log (a 7-byte header, then
  LevelDB-log framed chunks in 32 KiB blocks, each a `wandb_internal_pb2.Record`)."""
  from wandb.proto import wandb_internal_pb2 as pb
  files = sorted(glob.glob(os.path.join(os.fspath(workdir), "wandb", "offline-run-*",
                                        "run-*.wandb")), key=os.path.getmtime)
  if not files:
    raise FileNotFoundError(f"no offline W&B run under {workdir}/wandb")
  out = []
  for data in _records(open(files[-1], "rb").read()):
    rec = pb.Record()
    rec.ParseFromString(data)
    if rec.WhichOneof("record_type") == "history":
      out.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                  for i in rec.history.item})
  return out


_BLOCK, _HEADER = 32768, 7


def _records(raw: bytes):
  if raw[:4] != b":W&B":
    raise ValueError("not a W&B record log (no ':W&B' header)")
  pos, parts = _HEADER, []
  while pos + _HEADER <= len(raw):
    left = _BLOCK - pos % _BLOCK
    if left < _HEADER:  # the block's tail is padding
      pos += left
      continue
    length, kind = struct.unpack("<HB", raw[pos + 4:pos + 7])
    chunk = raw[pos + 7:pos + 7 + length]
    pos += 7 + length
    if kind == 0 and length == 0:  # zero padding
      pos += _BLOCK - pos % _BLOCK if pos % _BLOCK else 0
      continue
    if kind == 1:  # full
      yield chunk
    elif kind == 2:  # first
      parts = [chunk]
    elif kind == 3:  # middle
      parts.append(chunk)
    elif kind == 4:  # last
      parts.append(chunk)
      yield b"".join(parts)
      parts = []
