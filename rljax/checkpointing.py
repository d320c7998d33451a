"""Orbax checkpoints of a run: the train state (+ a stale sampler's params), a JSON record
(step, PRNG key, data-iterator position, sampler sync state, last metrics) and, when the
sampler runs ahead of the learner, the rollout batches drawn but not yet trained on.

`last/` keeps the newest `keep` steps; `best/` keeps the single best by an eval metric.
Restoring reads straight into the shardings of an abstract target.

Multi-host: every process calls save / restore (orbax coordinates them; the JSON record
is written by the primary). Saves are asynchronous by default: `save` returns once the
arrays are copied off the devices, the next save (and `close`) waits for the previous
one to be committed. `directory` may be a bucket path (`gs://...`).
"""
from __future__ import annotations

import os
import re
import warnings

from etils import epath
from typing import Any

import jax
import orbax.checkpoint as ocp


ITEMS = ("state", "meta", "inflight")


class RunCheckpointer:
  """Thin wrapper over two `ocp.CheckpointManager`s with a fixed item layout."""

  def __init__(self, directory: str, keep: int = 3, best_metric: str | None = None,
               async_save: bool = True):
    from rljax import paths
    paths.check_writable(directory)
    directory = epath.Path(directory if paths.is_remote(directory)
                           else os.path.abspath(directory))
    self.best_metric, self.async_save = best_metric, async_save
    # each manager its own barrier names: `last` and `best` save the same step concurrently,
    # and with a shared prefix their `_async_write_complete.<step>` barriers collide on
    # several processes ("Barrier ... is already ongoing"; one process dies, the other hangs)
    mp = lambda name: ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=name)
    opts = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                        enable_async_checkpointing=async_save,
                                        multiprocessing_options=mp("last"))
    self.last = ocp.CheckpointManager(directory / "last", options=opts,
                                      item_names=ITEMS)
    self.best = None
    if best_metric:
      best_opts = ocp.CheckpointManagerOptions(
          max_to_keep=1, create=True, enable_async_checkpointing=async_save,
          best_fn=lambda m: float(m.get(best_metric, float("-inf"))), best_mode="max",
          keep_checkpoints_without_metrics=False, multiprocessing_options=mp("best"))
      self.best = ocp.CheckpointManager(directory / "best", options=best_opts,
                                        item_names=ITEMS)

  def latest_step(self) -> int | None:
    return self.last.latest_step()

  def save(self, step: int, state: Any, meta: dict, eval_metrics: dict | None = None,
           inflight: dict | None = None) -> None:
    """`inflight`: host numpy arrays (identical on every process), saved beside the state."""
    items = dict(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
    if inflight:
      items["inflight"] = ocp.args.StandardSave(inflight)
    args = ocp.args.Composite(**items)
    self.last.save(step, args=args, force=True)  # waits for the previous save first
    if self.best is not None and eval_metrics and self.best_metric in eval_metrics:
      if step in self.best.all_steps():  # from a timeline abandoned at a corrupt checkpoint
        self.best.delete(step)
      self.best.save(step, args=args, metrics={k: float(v) for k, v in eval_metrics.items()},
                     force=True)

  def wait(self) -> None:
    """Blocks until every started save is committed."""
    self.last.wait_until_finished()
    if self.best is not None:
      self.best.wait_until_finished()

  def restore(self, abstract_state: Any, step: int | None = None, inflight=None):
    """(state, meta) of `step`, read into `abstract_state`'s shardings; with
    `inflight(meta) -> numpy target or None`, (state, meta, inflight arrays).

    Without a step: the newest readable one. A step that fails to read (a corrupt or
    half-written checkpoint) is moved aside to `checkpoints/corrupt-<step>` with a warning
    and the next older kept step is tried.
    """
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                          abstract_state)

    def read(s):
      items = dict(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
      extra = None
      if inflight is not None:
        meta = self.last.restore(s, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        extra = inflight(meta)
        if extra:
          items["inflight"] = ocp.args.StandardRestore(extra)
      out = self.last.restore(s, args=ocp.args.Composite(**items))
      if inflight is None:
        return out.state, out.meta
      return out.state, out.meta, (out.inflight if extra else None)

    if step is not None:
      return read(step)
    for s in sorted(self.last.all_steps(), reverse=True):
      try:
        return read(s)
      except Exception as e:  # noqa: BLE001 - orbax raises many kinds for bad bytes
        self._quarantine(s, e)
    raise FileNotFoundError(f"{self.last.directory}: no readable checkpoint")

  def _quarantine(self, step: int, error: Exception) -> None:
    src = os.path.join(str(self.last.directory), str(step))
    dst = os.path.join(os.path.dirname(str(self.last.directory)), f"corrupt-{step}")
    warnings.warn(f"checkpoint {src} is unreadable ({_reason(error)}); moved to {dst}, "
                  "trying the previous step")
    if jax.process_index() == 0:  # local paths and gs:// alike
      if epath.Path(dst).exists():
        epath.Path(dst).rmtree()
      epath.Path(src).rename(dst)
    from jax.experimental import multihost_utils
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"quarantine checkpoint {step}")
    self.last.reload()

  def close(self) -> None:
    self.wait()
    self.last.close()
    if self.best is not None:
      self.best.close()


_NOISE = re.compile(r"<bound method [^<>]*(<[^<>]*>[^<>]*)*>|<[^<>]* at 0x[0-9a-fA-F]+>"
                    r"|\[source locations='[^\]]*'\]|\[tensorstore_spec='[^\]]*'\]")


def _reason(error: BaseException, limit: int = 300) -> str:
  """An orbax / tensorstore error as one readable line: the type and message, without
  object reprs (`<bound method ...>`, `<... at 0x...>`) or source-location blocks."""
  msg = " ".join(_NOISE.sub("", str(error)).split()).rstrip(":; ")
  msg = f"{type(error).__name__}: {msg}" if msg else type(error).__name__
  return msg if len(msg) <= limit else msg[:limit - 1] + "…"
