"""Rollout batches drawn k policy versions behind the learner (bounded, deterministic
staleness), optionally while the learner trains.

Version v is the policy after v updates (v = 0: the initial one). Batch t is drawn from
version max(0, t − k): at the start of step t the pipeline launches batch t + k with the
current params (version t), then hands the learner batch t, drawn earlier.

    step t:   launch collect(t + k) with version t  ─┐  (on the sampler's devices)
              wait for batch t, update on it          ─┘  (on the trainer's: concurrently)

k = 0 is the on-policy loop. `overlap=False` runs the launch at once, in the caller's thread:
the synchronous reference (`rollout.lag = k` on one mesh). `overlap=True` runs it in one
background thread, so a disaggregated sampler draws batch t + k while batch t trains; the
batches, their keys and their versions are the same either way, so the two runs sample the
same tokens. A checkpoint holds the drawn batches not yet trained on (`drain`, `restore`),
so a resumed run continues exactly.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import time
from typing import Any, Callable

import numpy as np

from rljax.loop.collect import Rollouts
from rljax.loop.prompts import Prompts
from rljax.rollout import Rollout


@dataclasses.dataclass
class Drawn:
  """One rollout batch and when / from what it was drawn."""
  batch: int                       # the step it is trained at
  version: int                     # the policy version it was sampled from
  roll: Rollouts | None = None
  start: float | None = None       # the collect's start and end, set where it runs
  end: float | None = None


class RolloutPipeline:
  """`get(step)` returns batch `step` (a `Drawn`) and the seconds the caller waited for it.

  draw(batch, sampler) -> Rollouts draws batch `batch` (its prompts, keys) with `sampler`;
  sampler_for(step) -> (sampler, version) is the sampler to launch with at `step` (called
  once per step, in the caller's thread: weight sync and any transfer happen there).
  `stop`: batches numbered `stop` or more are never launched (a run of `stop` steps does not
  draw the `lag` batches past its end); None launches `lag` ahead to the last step.
  """

  def __init__(self, draw: Callable[[int, Any], Rollouts],
               sampler_for: Callable[[int], tuple[Any, int]], lag: int = 0,
               overlap: bool = False, stop: int | None = None):
    if not (isinstance(lag, int) and lag >= 0):
      raise ValueError(f"lag={lag!r} must be an int >= 0")
    self.draw, self.sampler_for, self.lag, self.overlap = draw, sampler_for, lag, overlap
    self.stop = stop
    self._queue: collections.deque = collections.deque()  # (Drawn, Future | None)
    self._next = 0                   # the next batch to launch
    self._pool = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sampler")
                  if overlap else None)
    self.history: list[Drawn] = []   # every batch handed out (for the timeline)
    self.clock0 = time.time()         # reset by `start`: the timeline's zero

  def start(self, step: int, restored: list[Drawn] = ()) -> None:
    """Begins (or resumes) at `step`, with the batches `drain` returned before a checkpoint."""
    restored = list(restored)
    if [d.batch for d in restored] != list(range(step, step + len(restored))):
      raise ValueError(f"resume at step {step}: the saved rollout batches are "
                       f"{[d.batch for d in restored]}, not {step}, {step + 1}, ...")
    self._queue = collections.deque((d, None) for d in restored)
    self._next = step + len(restored)
    self.clock0 = time.time()

  def _run(self, d: Drawn, sampler) -> Drawn:
    d.start = time.time()
    d.roll = self.draw(d.batch, sampler)
    d.end = time.time()
    return d

  def get(self, step: int) -> tuple[Drawn, float]:
    if self.stop is not None and step >= self.stop:
      raise ValueError(f"step {step}: the pipeline stops at batch {self.stop}")
    last = step + self.lag if self.stop is None else min(step + self.lag, self.stop - 1)
    if self._next <= last:
      sampler, version = self.sampler_for(step)
      while self._next <= last:
        d = Drawn(batch=self._next, version=int(version))
        fut = self._pool.submit(self._run, d, sampler) if self._pool else None
        if fut is None:
          self._run(d, sampler)
        self._queue.append((d, fut))
        self._next += 1
    d, fut = self._queue.popleft()
    if d.batch != step:
      raise RuntimeError(f"rollout pipeline out of order: batch {d.batch} at step {step}")
    t0 = time.time()
    if fut is not None:
      fut.result()  # re-raises the sampler thread's exception here
    self.history.append(d)
    return d, time.time() - t0

  def in_flight(self) -> list[Drawn]:
    return [d for d, _ in self._queue]

  def drain(self) -> list[Drawn]:
    """Waits for every launched batch (before a checkpoint or an eval); they stay queued."""
    for _, fut in self._queue:
      if fut is not None:
        fut.result()
    return self.in_flight()

  def close(self) -> None:
    if self._pool is not None:
      self._pool.shutdown(wait=True, cancel_futures=True)


def sampler_idle(prev: Drawn | None, d: Drawn) -> float:
  """Seconds the sampler sat idle between the collect before `d` and `d`'s."""
  if prev is None or prev.end is None or d.start is None:
    return 0.0
  return max(0.0, d.start - prev.end)


def overlap(interval: tuple[float, float], collects: list[Drawn], now: float) -> float:
  """Seconds of `interval` during which one of `collects` ran (a running one ends at `now`)."""
  a, b = interval
  spans = sorted((d.start, d.end if d.end is not None else now) for d in collects
                 if d.start is not None)
  total, cur = 0.0, a
  for s, e in spans:
    s, e = max(s, cur), min(e, b)
    if e > s:
      total += e - s
      cur = e
  return total


# ------------------------------------------------------------------ checkpointing in-flight


def to_tree(drawn: list[Drawn]) -> tuple[dict, list]:
  """In-flight batches -> (numpy arrays {b<i>: {a<j>: array}} for orbax, a JSON-able spec
  naming each array: Rollout fields `r.*`, prompts `prompts.*`, reward info `info.*`)."""
  tree, spec = {}, []
  for i, d in enumerate(drawn):
    r = d.roll
    fields = {f"r.{k}": v for k, v in r.r._asdict().items() if v is not None}
    fields.update({f"prompts.{k}": v for k, v in r.prompts._asdict().items() if v is not None})
    fields.update({f"info.{k}": v for k, v in r.info.items()})
    fields["rewards"] = r.rewards
    if r.keep_groups is not None:
      fields["keep_groups"] = r.keep_groups
    names = sorted(fields)
    tree[f"b{i}"] = {f"a{j}": np.asarray(fields[k]) for j, k in enumerate(names)}
    spec.append({"batch": d.batch, "version": d.version, "resample_tries": r.resample_tries,
                 "decode_row_steps": int(r.decode_row_steps),
                 "fields": names, "shapes": [[list(np.shape(fields[k])),
                                              str(np.asarray(fields[k]).dtype)] for k in names]})
  return tree, spec


def abstract_tree(spec: list) -> dict:
  """Zero arrays shaped as `to_tree` saved them (the restore target)."""
  return {f"b{i}": {f"a{j}": np.zeros(shape, dtype) for j, (shape, dtype) in
                    enumerate(s["shapes"])} for i, s in enumerate(spec)}


def from_tree(tree: dict, spec: list) -> list[Drawn]:
  out = []
  for i, s in enumerate(spec):
    arrays = {k: np.asarray(tree[f"b{i}"][f"a{j}"]) for j, k in enumerate(s["fields"])}
    part = lambda prefix: {k.split(".", 1)[1]: v for k, v in arrays.items()
                           if k.startswith(prefix + ".")}
    r, prompts = part("r"), part("prompts")
    roll = Rollouts(r=Rollout(**{f: r.get(f) for f in Rollout._fields}),
                    prompts=Prompts(**{f: prompts.get(f) for f in Prompts._fields}),
                    rewards=arrays["rewards"], info=part("info"), examples=None,
                    keep_groups=arrays.get("keep_groups"),
                    resample_tries=int(s["resample_tries"]),
                    decode_row_steps=int(s.get("decode_row_steps", 0)))
    out.append(Drawn(batch=int(s["batch"]), version=int(s["version"]), roll=roll))
  return out


__all__ = ["Drawn", "RolloutPipeline", "sampler_idle", "overlap", "to_tree", "abstract_tree",
           "from_tree"]
