"""Multi-process (multi-host) glue: start-up, one writer, host-local <-> global arrays.

Every process runs the same program. The global batch is sharded over the mesh's
batch axes; each process reads, tokenizes and scores (rewards) only the rows its
own devices hold (`host_rows`), and `to_global` stitches those host-local rows
into one global `jax.Array` with `jax.make_array_from_process_local_data`.
Device outputs come back per host with `to_local` (this host's rows) or
`gather` (all rows, on every host). On one process all of this is the identity.

Start-up (`initialize`) must run before any other JAX call: `jax.process_count()`
itself starts the backend, after which `jax.distributed.initialize` refuses.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Sharding

from rljax import sharding as shd


def _env_int(name: str) -> int | None:
  v = os.environ.get(name)
  return int(v) if v not in (None, "") else None


def initialize() -> bool:
  """`jax.distributed.initialize` when the environment names a multi-process run.

  JAX_COORDINATOR_ADDRESS (+ JAX_NUM_PROCESSES, JAX_PROCESS_ID) starts an explicit
  cluster (e.g. local CPU processes; JAX_NUM_PROCESSES=1 too: one CPU process then reduces
  through gloo like a multi-process run, bit for bit, where XLA's in-process all-reduce
  sums in another order); TPU_WORKER_HOSTNAMES with more than one host, or
  RLJAX_DISTRIBUTED=1, initializes from the TPU slice's metadata. Returns whether it initialized. Call it
  first: no `jax.devices()` / `jax.process_count()` before it.
  """
  if jax.distributed.is_initialized():
    return False
  coordinator = os.environ.get("JAX_COORDINATOR_ADDRESS")
  if coordinator:
    n, pid = _env_int("JAX_NUM_PROCESSES"), _env_int("JAX_PROCESS_ID")
    if n is None or pid is None:
      raise ValueError("JAX_COORDINATOR_ADDRESS is set: set JAX_NUM_PROCESSES and "
                       "JAX_PROCESS_ID too (0 <= JAX_PROCESS_ID < JAX_NUM_PROCESSES)")
    jax.distributed.initialize(coordinator, n, pid, **_timeouts())
    return True
  hosts = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
  if len(hosts) > 1 or os.environ.get("RLJAX_DISTRIBUTED") == "1":
    # a TPU slice (tpu_scripts/pod.py launch sets RLJAX_DISTRIBUTED): auto-detected
    jax.distributed.initialize(**_timeouts())
    return True
  return False


def _timeouts() -> dict:
  """RLJAX_HEARTBEAT_TIMEOUT_S: seconds after which a silent process counts as dead and the
  others stop with an error (JAX's default, 100 s, when unset). A process that dies in a
  collective stops the others at once (the peer's connection resets); one waiting at a
  coordination barrier learns of it from this timeout."""
  t = _env_int("RLJAX_HEARTBEAT_TIMEOUT_S")
  return {} if t is None else {"heartbeat_timeout_seconds": t}


def is_multiprocess() -> bool:
  """Whether this run has several processes (without starting a backend)."""
  return jax.distributed.is_initialized() and jax.process_count() > 1


def is_writer() -> bool:
  """Process 0 writes run files (config, metrics, TensorBoard, plots, datasets)."""
  return jax.process_index() == 0


_BARRIER_COUNTS: dict[str, int] = {}
BARRIER_TIMEOUT_S = int(os.environ.get("RLJAX_BARRIER_TIMEOUT_S", "1800"))


def barrier(name: str) -> None:
  """All processes wait here (a no-op on one process).

  A coordination-service barrier, not a device collective: a host may wait here for
  minutes while process 0 prepares a dataset or writes a checkpoint (a gloo collective
  gives up after 30 s). Each use of a name gets its own key, so a name can repeat.
  """
  if jax.process_count() == 1:
    return
  from jax._src import distributed as jax_distributed
  n = _BARRIER_COUNTS[name] = _BARRIER_COUNTS.get(name, -1) + 1
  jax_distributed.global_state.client.wait_at_barrier(f"rljax:{name}:{n}",
                                                      BARRIER_TIMEOUT_S * 1000)


def any_process(flag: bool) -> bool:
  """True on every process when it is True on any (e.g. a SIGTERM seen by one host)."""
  if jax.process_count() == 1:
    return bool(flag)
  from jax.experimental import multihost_utils
  return bool(np.asarray(multihost_utils.process_allgather(np.asarray([flag], np.int32))).any())


def max_over_processes(value: int) -> int:
  """The largest of one integer per process, on every process (one process: itself)."""
  if jax.process_count() == 1:
    return int(value)
  from jax.experimental import multihost_utils
  return int(np.asarray(multihost_utils.process_allgather(np.asarray([value], np.int64))).max())


def writer_first(name: str, fn: Callable[[], Any]) -> Any:
  """Process 0 runs `fn`, the others wait, then run it too (then a no-op when `fn` is
  idempotent over a shared directory, e.g. preparing a dataset; on hosts with their own
  disks each builds its own copy)."""
  out = fn() if is_writer() else None
  barrier(f"{name}:writer_done")
  if not is_writer():
    out = fn()
  return out


# --------------------------------------------------------------------------- batches


def host_rows(sharding: Sharding, global_shape: Sequence[int]) -> slice:
  """The contiguous rows (dim 0) of a global array that this process's devices hold."""
  idx = sharding.addressable_devices_indices_map(tuple(global_shape))
  starts, stops = set(), set()
  for index in idx.values():
    s = index[0] if index else slice(None)
    start, stop, _ = s.indices(global_shape[0])
    starts.add(start)
    stops.add(stop)
  lo, hi = min(starts), max(stops)
  covered = sorted(zip(sorted(starts), sorted(stops)))
  pos = lo
  for a, b in covered:  # the union must be one interval
    if a > pos:
      raise ValueError(f"this process's rows of a {tuple(global_shape)} batch are not "
                       f"contiguous ({covered}); use a mesh whose batch axes follow processes")
    pos = max(pos, b)
  return slice(lo, hi)


def local_rows_of(mesh, global_shape: Sequence[int]) -> slice:
  return host_rows(shd.batch_sharding(mesh, global_shape), global_shape)


def to_global(local: Any, mesh, global_rows: int) -> Any:
  """A pytree of host-local numpy arrays (this host's rows) -> global jax.Arrays."""

  def one(x):
    x = np.asarray(x)
    shape = (global_rows,) + x.shape[1:]
    sh = shd.batch_sharding(mesh, shape)
    want = host_rows(sh, shape)
    if x.shape[0] != want.stop - want.start:
      raise ValueError(f"host {jax.process_index()} holds rows {want.start}:{want.stop} of a "
                       f"{shape} batch but got {x.shape[0]} rows")
    return jax.make_array_from_process_local_data(sh, x, shape)

  return jax.tree.map(one, local)


def to_local(x: jax.Array) -> np.ndarray:
  """This host's rows of a batch-sharded global array (all rows on one process)."""
  if x.is_fully_addressable:
    return np.asarray(x)
  rows = host_rows(x.sharding, x.shape)
  out = np.empty((rows.stop - rows.start,) + x.shape[1:], x.dtype)
  for s in x.addressable_shards:
    idx = s.index[0] if s.index else slice(None)
    a, b, _ = idx.indices(x.shape[0])
    rest = tuple(s.index[1:])
    out[(slice(a - rows.start, b - rows.start),) + rest] = np.asarray(s.data)
  return out


def gather(tree: Any) -> Any:
  """Every row of global arrays, on every host (small arrays: rewards, eval tokens)."""
  if jax.process_count() == 1:
    return jax.tree.map(np.asarray, tree)
  from jax.experimental import multihost_utils
  return jax.tree.map(lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True))
                      if not x.is_fully_addressable else np.asarray(x), tree)


def gather_local(x: np.ndarray, full: bool = False) -> np.ndarray:
  """This host's rows (its contiguous block, as `host_rows` gives) -> all rows, in process
  order, on every host. `full`: every host already holds all rows (a replicated batch)."""
  if full or jax.process_count() == 1:
    return np.asarray(x)
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(np.asarray(x), tiled=True))


def put_global(batch: Mapping[str, np.ndarray], shardings: Mapping[str, Sharding]) -> dict:
  """A batch every host holds whole (numpy) -> global arrays in `shardings`, each host
  contributing its own rows."""
  out = {}
  for k, v in batch.items():
    v = np.asarray(v)
    rows = host_rows(shardings[k], v.shape)
    out[k] = jax.make_array_from_process_local_data(shardings[k], v[rows], v.shape)
  return out


def check_batch(global_rows: int, mesh, what: str = "data.batch_size") -> None:
  """Refuses (before anything compiles) a global batch that does not split evenly over
  the processes and the mesh's batch axes."""
  n_proc = jax.process_count()
  n_batch = int(np.prod([mesh.shape[a] for a in shd.BATCH]))
  if global_rows % n_proc:
    raise ValueError(f"{what}={global_rows} rows do not divide over {n_proc} processes; "
                     f"use a multiple of {n_proc}")
  if global_rows % n_batch:
    raise ValueError(f"{what}={global_rows} rows do not divide over the mesh's batch axes "
                     f"{shd.BATCH} = {n_batch} devices (mesh {dict(mesh.shape)}); use a "
                     f"multiple of {n_batch}")


def key_data_rows(key: jax.Array, rows: int, block: slice) -> np.ndarray:
  """uint32 key data of `split(key, rows)[block]` (the same keys as on one process)."""
  return np.asarray(jax.random.key_data(jax.random.split(key, rows)))[block]


def tree_local(tree: Mapping) -> dict:
  return {k: to_local(v) if isinstance(v, jax.Array) else v for k, v in tree.items()}
