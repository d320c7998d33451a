"""Shuffled, per-host sharded iteration with checkpointable position, and group batching.

`ShardedIterator(source, seed, shard_index, num_shards)` walks any random-access
source (a TFDS data source, a list): epoch e visits a permutation of all
records drawn from (seed, e); host h takes positions h, h + H, h + 2H, ... of
it. When the record count is not a multiple of H, the permutation is padded
with its own first records so every host gets the same number per epoch (hosts
stay in lockstep; those few records are seen twice that epoch, none are
dropped). `get_state()` is a small JSON-serializable dict of ints;
`set_state(state)` on a fresh iterator over the same source resumes with
exactly the records the original would have produced next.

`GroupBatcher(iterator, batch_size, group_size)` yields prompt batches for
GRPO-style sampling. Convention: a batch holds B / G *distinct* prompts and
`group_size` G; the sampler draws G responses per prompt, and
`repeat_groups(batch)` gives the B rows, prompt-major (rows g*G .. g*G+G-1 are
group g), the layout `reshape(B // G, G)` expects. B must be divisible by G.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

_STATE_KEYS = ("seed", "epoch", "index", "shard_index", "num_shards", "num_records", "shuffle")


class ShardedIterator:
  """Endless (or `num_epochs`-bounded) shuffled iterator over one host's shard."""

  def __init__(self, source: Any, *, seed: int = 0, shard_index: int = 0, num_shards: int = 1,
               shuffle: bool = True, num_epochs: int | None = None,
               decode: Callable[[Any], Any] | None = None):
    if num_shards < 1 or not 0 <= shard_index < num_shards:
      raise ValueError(f"need 0 <= shard_index < num_shards, got {shard_index}, {num_shards}")
    if len(source) == 0:
      raise ValueError("cannot iterate over an empty source")
    self.source, self.decode = source, decode
    self.seed, self.shard_index, self.num_shards = int(seed), shard_index, num_shards
    self.shuffle, self.num_epochs = shuffle, num_epochs
    self.num_records = len(source)
    self.per_shard = -(-self.num_records // num_shards)  # ceil
    self.epoch, self.index = 0, 0
    self._order_epoch, self._order = -1, np.zeros(0, np.int64)

  def _epoch_order(self) -> np.ndarray:
    """This shard's record indices for the current epoch."""
    if self._order_epoch != self.epoch:
      n = self.num_records
      if self.shuffle:
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(n)
      else:
        perm = np.arange(n)
      padded = np.resize(perm, self.per_shard * self.num_shards)  # wraps around
      self._order, self._order_epoch = padded[self.shard_index::self.num_shards], self.epoch
    return self._order

  def __iter__(self) -> Iterator[Any]:
    return self

  def __next__(self) -> Any:
    if self.index >= self.per_shard:
      self.epoch, self.index = self.epoch + 1, 0
    if self.num_epochs is not None and self.epoch >= self.num_epochs:
      raise StopIteration
    record = self.source[int(self._epoch_order()[self.index])]
    self.index += 1
    return self.decode(record) if self.decode else record

  def get_state(self) -> dict[str, int]:
    return {"seed": self.seed, "epoch": self.epoch, "index": self.index,
            "shard_index": self.shard_index, "num_shards": self.num_shards,
            "num_records": self.num_records, "shuffle": int(self.shuffle)}

  def set_state(self, state: dict[str, int]) -> None:
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
      raise ValueError(f"iterator state lacks {missing}")
    mine = self.get_state()
    for k in ("seed", "shard_index", "num_shards", "num_records", "shuffle"):
      if int(state[k]) != mine[k]:
        raise ValueError(f"iterator state was saved with {k}={state[k]} but this iterator "
                         f"has {k}={mine[k]}; restore it over the same data and sharding")
    if not 0 <= int(state["index"]) <= self.per_shard or int(state["epoch"]) < 0:
      raise ValueError(f"bad iterator position epoch={state['epoch']} index={state['index']}")
    self.epoch, self.index = int(state["epoch"]), int(state["index"])


def check_group_size(batch_size: int, group_size: int) -> int:
  """Prompts per batch (B // G); a clear error unless G >= 1 divides B."""
  if group_size < 1 or batch_size < 1:
    raise ValueError(f"batch_size and group_size must be >= 1, got {batch_size}, {group_size}")
  if batch_size % group_size:
    raise ValueError(f"group size (num_generations) {group_size} does not divide batch size "
                     f"{batch_size}; a batch must hold whole groups")
  return batch_size // group_size


class GroupBatcher:
  """Batches of B // G prompts (each sampled G times), with the iterator's state."""

  def __init__(self, iterator: ShardedIterator, batch_size: int, group_size: int):
    self.num_prompts = check_group_size(batch_size, group_size)
    self.iterator, self.batch_size, self.group_size = iterator, batch_size, group_size
    self.unbatched_tail = 0

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return self

  def __next__(self) -> dict[str, Any]:
    prompts = []
    state = self.iterator.get_state()
    for _ in range(self.num_prompts):
      try:
        prompts.append(next(self.iterator))
      except StopIteration:
        # No partial batch: the position goes back to the batch edge and the
        # leftover count is kept (only possible with num_epochs set).
        self.iterator.set_state(state)
        self.unbatched_tail = len(prompts)
        raise
    return {"prompts": prompts, "group_size": self.group_size}

  def get_state(self) -> dict[str, int]:
    return self.iterator.get_state()

  def set_state(self, state: dict[str, int]) -> None:
    self.iterator.set_state(state)


def repeat_groups(batch: dict[str, Any]) -> list[Any]:
  """The B rows of a group batch: each prompt repeated G times, prompt-major."""
  g = batch["group_size"]
  return [p for p in batch["prompts"] for _ in range(g)]


def group_ids(num_prompts: int, group_size: int) -> np.ndarray:
  """int32 [B]: the group each row of `repeat_groups` belongs to."""
  return np.repeat(np.arange(num_prompts, dtype=np.int32), group_size)
