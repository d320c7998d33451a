"""rljax.distributed on one process (8 fake CPU devices): host rows, global arrays, the
batch refusal, start-up from the environment. The 2-process run is
tests/trainer/test_multiprocess.py."""
import jax
import numpy as np
import pytest

from rljax import distributed as dist
from rljax import sharding as shd


def test_one_process_holds_every_row_and_round_trips():
  mesh = shd.make_mesh((2, 4, 1))
  x = np.arange(16 * 3, dtype=np.int32).reshape(16, 3)
  assert dist.local_rows_of(mesh, x.shape) == slice(0, 16)
  (g,) = dist.to_global((x,), mesh, 16)
  assert g.sharding.spec[0] == ("data", "fsdp") and len(g.addressable_shards) == 8
  np.testing.assert_array_equal(dist.to_local(g), x)
  np.testing.assert_array_equal(dist.gather(g), x)
  np.testing.assert_array_equal(dist.gather_local(x), x)
  b = dist.put_global({"a_BxT": x}, {"a_BxT": shd.batch_sharding(mesh, x.shape)})
  np.testing.assert_array_equal(np.asarray(b["a_BxT"]), x)
  # rows that do not divide the batch axes are replicated: every device holds all of them
  (r,) = dist.to_global((x[:3],), mesh, 3)
  assert r.sharding.is_fully_replicated
  with pytest.raises(ValueError, match="holds rows 0:16 of a .16, 3. batch but got 15"):
    dist.to_global((x[:15],), mesh, 16)


def test_host_rows_of_each_device_block():
  mesh = shd.make_mesh((1, 8, 1))
  sh = shd.batch_sharding(mesh, (16, 2))
  blocks = sorted((i[0].start, i[0].stop) for i in
                  sh.addressable_devices_indices_map((16, 2)).values())
  assert blocks == [(2 * k, 2 * k + 2) for k in range(8)]
  assert dist.host_rows(sh, (16, 2)) == slice(0, 16)


def test_key_rows_equal_one_process_split():
  key = jax.random.key(3)
  want = np.asarray(jax.random.key_data(jax.random.split(key, 6)))
  np.testing.assert_array_equal(dist.key_data_rows(key, 6, slice(2, 4)), want[2:4])


def test_batch_that_does_not_divide_is_refused(monkeypatch):
  mesh = shd.make_mesh((2, 4, 1))
  dist.check_batch(16, mesh)
  with pytest.raises(ValueError, match=r"data.batch_size=12 rows do not divide over the "
                                       r"mesh's batch axes .* = 8 devices"):
    dist.check_batch(12, mesh)
  monkeypatch.setattr(jax, "process_count", lambda: 3)
  with pytest.raises(ValueError, match="16 rows do not divide over 3 processes"):
    dist.check_batch(16, mesh)


def test_initialize_reads_the_environment(monkeypatch):
  for k in ("JAX_COORDINATOR_ADDRESS", "TPU_WORKER_HOSTNAMES", "RLJAX_DISTRIBUTED"):
    monkeypatch.delenv(k, raising=False)
  assert dist.initialize() is False  # one process: nothing to do
  monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "localhost")
  assert dist.initialize() is False  # a single-host slice
  monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1")
  monkeypatch.delenv("JAX_NUM_PROCESSES", raising=False)
  with pytest.raises(ValueError, match="set JAX_NUM_PROCESSES and JAX_PROCESS_ID"):
    dist.initialize()
  assert dist.is_writer()
  dist.barrier("noop")  # one process: returns at once
  assert dist.writer_first("x", lambda: 7) == 7
  assert dist.any_process(True) and not dist.any_process(False)
