"""Sharded iterator save/restore, group batching, and the TFDS -> batches path."""
import collections
import json

import numpy as np
import pytest

from rljax.data import pipeline
from rljax.data.pipeline import GroupBatcher, ShardedIterator


def _take(it, n):
  return [next(it) for _ in range(n)]


def test_epochs_cover_every_record_and_shards_are_balanced():
  src = list(range(10))
  hosts = [ShardedIterator(src, seed=1, shard_index=h, num_shards=3) for h in range(3)]
  assert all(h.per_shard == 4 for h in hosts)
  for _ in range(3):  # three epochs
    seen = [_take(h, 4) for h in hosts]
    flat = [x for s in seen for x in s]
    assert set(flat) == set(src)  # nothing dropped
    assert len(flat) == 12  # 2 records padded (seen twice) so hosts stay in lockstep
  orders = [ShardedIterator(src, seed=s, num_shards=1) for s in (1, 2)]
  assert _take(orders[0], 10) != _take(orders[1], 10)
  assert sorted(_take(ShardedIterator(src, seed=5), 10)) == src


def test_restore_mid_epoch_continues_with_same_examples():
  src = [f"ex{i}" for i in range(23)]
  it = ShardedIterator(src, seed=7, shard_index=1, num_shards=2)
  _take(it, 30)  # past the first epoch boundary (12 per shard), mid second epoch
  state = json.loads(json.dumps(it.get_state()))  # goes through a checkpoint as JSON
  assert all(isinstance(v, int) for v in state.values())
  expected = _take(it, 40)  # crosses another epoch boundary
  fresh = ShardedIterator(src, seed=7, shard_index=1, num_shards=2)
  fresh.set_state(state)
  assert _take(fresh, 40) == expected


def test_set_state_rejects_other_data_or_sharding():
  it = ShardedIterator(list(range(10)), seed=0)
  state = it.get_state()
  for key, value in (("seed", 1), ("num_records", 11), ("num_shards", 2)):
    with pytest.raises(ValueError, match=f"saved with {key}="):
      ShardedIterator(list(range(10)), seed=0).set_state({**state, key: value})
  with pytest.raises(ValueError, match="lacks"):
    it.set_state({"epoch": 0})
  with pytest.raises(ValueError, match="bad iterator position"):
    it.set_state({**state, "index": 99})
  with pytest.raises(ValueError, match="shard_index < num_shards"):
    ShardedIterator([1], shard_index=2, num_shards=2)
  with pytest.raises(ValueError, match="empty source"):
    ShardedIterator([])


def test_num_epochs_and_no_shuffle():
  it = ShardedIterator(list(range(5)), shuffle=False, num_epochs=2)
  assert list(it) == [0, 1, 2, 3, 4] * 2


def test_group_batches():
  src = [{"id": i} for i in range(10)]
  batches = GroupBatcher(ShardedIterator(src, seed=0), batch_size=8, group_size=4)
  b = next(batches)
  assert b["group_size"] == 4 and len(b["prompts"]) == 2
  assert len({p["id"] for p in b["prompts"]}) == 2
  rows = pipeline.repeat_groups(b)
  assert len(rows) == 8
  assert rows[:4] == [b["prompts"][0]] * 4 and rows[4:] == [b["prompts"][1]] * 4
  np.testing.assert_array_equal(pipeline.group_ids(2, 4), [0, 0, 0, 0, 1, 1, 1, 1])


@pytest.mark.parametrize("batch,group", [(6, 4), (8, 0), (3, 5)])
def test_group_size_must_divide_batch(batch, group):
  with pytest.raises(ValueError, match="does not divide batch size|must be >= 1"):
    GroupBatcher(ShardedIterator([1, 2]), batch_size=batch, group_size=group)


def test_group_batcher_restore_and_tail():
  src = list(range(17))
  a = GroupBatcher(ShardedIterator(src, seed=3), batch_size=6, group_size=2)
  _take(a, 4)
  state = a.get_state()
  expected = _take(a, 5)
  b = GroupBatcher(ShardedIterator(src, seed=3), batch_size=6, group_size=2)
  b.set_state(state)
  assert _take(b, 5) == expected
  bounded = GroupBatcher(ShardedIterator(src, seed=3, num_epochs=1), batch_size=6,
                         group_size=2)
  got = list(bounded)
  assert len(got) == 5 and bounded.unbatched_tail == 2  # 17 = 5 * 3 + 2, counted
  assert bounded.get_state()["index"] == 15


def test_tfds_source_to_group_batches(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  tfds.disable_progress_bar()
  from rljax.data import tfds_builders as B
  from rljax import rewards
  builder = B.build_rubric(str(tmp_path), seed=2, num_train=24, num_heldout=4)
  source = B.data_source(builder.data_dir, "train")

  def batches():
    it = ShardedIterator(source, seed=11, shard_index=0, num_shards=2, decode=B.decode_record)
    return GroupBatcher(it, batch_size=8, group_size=4)

  run = batches()
  _take(run, 3)
  state = run.get_state()
  expected = [[p["id"] for p in b["prompts"]] for b in _take(run, 6)]
  resumed = batches()
  resumed.set_state(state)
  assert [[p["id"] for p in b["prompts"]] for b in _take(resumed, 6)] == expected
  batch = next(resumed)
  rows = pipeline.repeat_groups(batch)
  r, info = rewards.get_reward("csr")(["A short reply."] * len(rows), rows)
  assert r.shape == (8,) and collections.Counter(map(len, info["criteria"]))
