"""What a run keeps between steps and across restarts: checkpoints (train state, a stale
sampler's snapshot, data position), the skipped-update guard, the preemption flag, and the
named PRNG streams."""
from __future__ import annotations

import os
import signal

import jax
import numpy as np
from flax import nnx

from rljax.checkpointing import RunCheckpointer
from rljax.loop import pipeline


class TrainingAborted(RuntimeError):
  """Raised (non-zero exit) after too many consecutive skipped updates; the last good
  state is checkpointed first."""


class Keys:
  """The run's PRNG streams, all derived from `config.seed`."""

  def __init__(self, seed: int):
    self.seed = int(seed)

  def rollout(self, step: int):
    """The sampler's key for the rollout batch of `step` (split per prompt)."""
    return jax.random.fold_in(jax.random.key(self.seed), step)

  def resample(self, step: int, attempt: int):
    """Dynamic sampling's extra rollout number `attempt` (1, 2, ...) at `step`."""
    return jax.random.fold_in(self.rollout(step), 1000 + attempt)

  def update(self, step: int):
    """The mini-batch permutations of the μ > 1 update at `step`."""
    return jax.random.fold_in(jax.random.key(self.seed + 7919), step)

  @staticmethod
  def eval():
    """Held-out eval (greedy: the key is not read, but `generate` takes one)."""
    return jax.random.key(0)

  @staticmethod
  def eval_sampled():
    """Held-out eval with sampling (`eval.sampled`): one fixed key, so every eval of every
    run draws with the same randomness."""
    return jax.random.key(1)


class SkipGuard:
  """Counts updates skipped in a row for a non-finite loss or gradient; `check` says when
  `train.max_consecutive_skips` is reached (0: never)."""

  def __init__(self, limit: int):
    self.limit, self.consecutive = int(limit), 0

  def check(self, metrics: dict) -> bool:
    """Updates the count from a step's metrics (and logs it in them); True: abort."""
    n_upd = metrics.get("actor/num_updates", 1.0)
    skipped = metrics.get("actor/update_skipped", 0.0)
    self.consecutive = (self.consecutive + int(skipped) if skipped >= n_upd
                        else int(skipped))  # a partly skipped batch ends the run of skips
    metrics["actor/consecutive_skips"] = float(self.consecutive)
    return bool(self.limit) and self.consecutive >= self.limit

  def message(self, step: int, lr: float, workdir: str) -> str:
    return (f"aborting at step {step}: {self.consecutive} consecutive updates were skipped "
            f"(non-finite loss or gradient; limit train.max_consecutive_skips={self.limit}). "
            f"Check the rewards for NaN and the learning rate (optim.lr={lr}). "
            f"The last good state is saved in {workdir}/checkpoints")


class CollapseGuard:
  """Counts steps in a row whose gradient was exactly 0 although the batch had signal (a
  non-zero advantage on a row in the loss): a policy that can no longer move, e.g. uniform
  logits after a far too large learning rate. `check` says when `train.max_collapsed_steps`
  is reached (0: never). A batch without signal (every group's rewards equal) is not counted
  and does not end a run of collapsed steps."""

  def __init__(self, limit: int):
    self.limit, self.consecutive, self.first = int(limit), 0, None

  def check(self, step: int, metrics: dict, batch) -> bool:
    rows = np.asarray(batch.mask_BxN).sum(-1) > 0
    signal = bool(np.any(np.asarray(batch.adv_B)[rows] != 0))
    if not signal:
      return False
    dead = metrics.get("actor/grad_norm", 1.0) == 0.0 and not metrics.get(
        "actor/update_skipped", 0.0)
    if dead:
      self.consecutive += 1
      self.first = step if self.first is None else self.first
    else:
      self.consecutive, self.first = 0, None
    metrics["actor/collapsed_steps"] = float(self.consecutive)
    return bool(self.limit) and self.consecutive >= self.limit

  def message(self, step: int, metrics: dict, lr: float, vocab: int, workdir: str) -> str:
    ent = metrics.get("actor/entropy")
    ent = (f"; entropy {ent:.3f} nats, ln(vocab) = {np.log(vocab):.3f}"
           if ent is not None else "")
    return (f"aborting at step {step}: the policy collapsed: the gradient was exactly 0 for "
            f"{self.consecutive} steps in a row (from step {self.first}) although the "
            f"advantages were not{ent} (limit train.max_collapsed_steps={self.limit}). "
            f"Lower the learning rate (optim.lr={lr}); the checkpoints in {workdir}/checkpoints "
            f"from step {self.first} on hold the collapsed policy")


class Preemption:
  """SIGTERM (TPU preemption) sets `requested`; the loop saves at the end of the step."""

  def __init__(self):
    self.requested, self._prev = False, None

  def __enter__(self):
    self._prev = signal.signal(signal.SIGTERM, lambda *_: setattr(self, "requested", True))
    return self

  def __exit__(self, *exc):
    signal.signal(signal.SIGTERM, self._prev)


class RunCheckpoints:
  """Checkpoints of a run in `<workdir>/checkpoints` (`last`, keep-last-N, and `best`): the
  train state, the data iterator's position, the sampler's sync state, for a stale
  sampler (`rollout.sync_every` > 1) its snapshot (it differs from the trainer's params
  between syncs, so resuming without it would not be exact), and the rollout batches drawn
  ahead of the learner (`rollout.lag` / `rollout.max_staleness` > 0)."""

  def __init__(self, workdir: str, ckpt_cfg, seed: int, batches, sync):
    self.workdir, self.seed, self.batches, self.sync = workdir, seed, batches, sync
    self.ckpt = RunCheckpointer(os.path.join(workdir, "checkpoints"), keep=ckpt_cfg.keep,
                                best_metric=ckpt_cfg.best_metric or None,
                                async_save=ckpt_cfg.async_save)

  def _tree(self, state, sampler_state=None) -> dict:
    tree = {"train": state}
    if sampler_state is not None:
      tree["sampler"] = nnx.to_pure_dict(sampler_state)
    return tree

  def save(self, step: int, state, metrics: dict, eval_metrics=None, inflight=()) -> None:
    """`inflight`: the drawn batches not yet trained on (`RolloutPipeline.drain()`); the data
    position saved is the one after them."""
    held = self.sync.held() if self.sync.every > 1 else None
    tree, spec = pipeline.to_tree(list(inflight))
    meta = {"step": step, "seed": self.seed, "data": self.batches.get_state(),
            "sampler_sync": self.sync.state_dict(), "inflight": spec,
            "metrics": {k: float(v) for k, v in metrics.items() if np.isscalar(v)
                        or getattr(v, "ndim", 1) == 0}}
    self.ckpt.save(step, self._tree(state, None if held is None else held[1]), meta,
                   eval_metrics, inflight=tree)

  def restore(self, state, policy, place=None):
    """(state, step, in-flight batches) of the newest readable checkpoint, the data position
    and sampler put back; (state, 0, []) when there is none. `policy(state)` is the state's
    policy as a Decoder (the structure of a sampler snapshot); `place(pure) -> pure` moves a
    restored sampler snapshot onto the sampler's devices."""
    if self.ckpt.latest_step() is None:
      return state, 0, []
    held = None
    if self.sync.every > 1:  # the snapshot's structure: a fresh copy of the trainer
      from rljax.rollout import make_sampler_params
      held = make_sampler_params(policy(state), self.sync.copy, force_copy=True)
    target = lambda meta: pipeline.abstract_tree(meta.get("inflight", []))
    tree, meta, inflight = self.ckpt.restore(
        self._tree(state, None if held is None else held[1]), inflight=target)
    self.batches.set_state(meta["data"])
    self.sync.load_state_dict(meta["sampler_sync"])
    if held is not None:
      nnx.replace_by_pure_dict(held[1], tree["sampler"] if place is None
                               else place(tree["sampler"]))
      self.sync.restore_held(held)
    step = int(meta["step"])
    print(f"resumed from {self.workdir} at step {step}", flush=True)
    drawn = pipeline.from_tree(inflight, meta["inflight"]) if inflight else []
    return tree["train"], step, drawn

  def latest_step(self) -> int | None:
    return self.ckpt.latest_step()

  def close(self) -> None:
    self.ckpt.close()
