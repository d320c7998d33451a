"""Where the sampler and the trainer run: one mesh for both (`colocated`), or the sampler on
its own devices (`disaggregated`, `rollout.num_devices` of them) and the trainer on the rest.

Every process gives the same share of its own devices to the sampler (the first
`num_devices / process_count` of `jax.local_devices()`), so each process holds sampler and
trainer devices and runs both stages. The sampler's mesh (`rollout.mesh_shape`, default
(processes, -1, 1): data parallel over processes, params sharded over each process's sampler
devices) keeps its parameters replicated across processes; `to_sampler` moves new params
there device to device after each update (`jax.device_put` on one process; with several,
first an all-gather over the trainer's devices to one copy per process, then each process
copies its own shards to its sampler devices: XLA moves arrays between two device sets only
within a process).
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from rljax import sharding as shd

PLACEMENTS = ("colocated", "disaggregated")


@dataclasses.dataclass(frozen=True)
class Placement:
  trainer_mesh: Mesh
  sampler_mesh: Mesh          # the trainer's mesh when colocated

  @property
  def disaggregated(self) -> bool:
    return self.sampler_mesh is not self.trainer_mesh


def split_devices(num_sampler: int, devices=None):
  """(sampler devices, trainer devices): each process's first num_sampler / P local devices
  go to the sampler, in process order."""
  devices = list(jax.devices() if devices is None else devices)
  procs = sorted({d.process_index for d in devices})
  if num_sampler % len(procs):
    raise ValueError(f"rollout.num_devices={num_sampler} does not split over "
                     f"{len(procs)} processes; use a multiple of {len(procs)}")
  per = num_sampler // len(procs)
  sampler, trainer = [], []
  for p in procs:
    local = sorted((d for d in devices if d.process_index == p), key=lambda d: d.id)
    if per >= len(local):
      raise ValueError(f"rollout.num_devices={num_sampler} leaves process {p} no trainer "
                       f"device ({len(local)} local devices)")
    sampler += local[:per]
    trainer += local[per:]
  return sampler, trainer


def make_placement(cfg, devices=None) -> Placement:
  """The meshes of `cfg.rollout.placement` over `devices` (default: all)."""
  r = cfg.rollout
  if r.placement == "colocated":
    mesh = shd.make_mesh(tuple(cfg.mesh.shape), devices=devices)
    return Placement(mesh, mesh)
  sampler, trainer = split_devices(int(r.num_devices), devices)
  n_proc = len({d.process_index for d in sampler})
  shape = tuple(r.mesh_shape) or (n_proc, -1, 1)  # default: a params copy per process
  s_mesh = shd.make_mesh(shape, devices=sampler)
  if s_mesh.shape["data"] % n_proc:
    raise ValueError(f"rollout.mesh_shape={tuple(s_mesh.devices.shape)}: its data axis must "
                     f"be a multiple of the {n_proc} processes (the sampler keeps a full "
                     "copy of the params on each process's devices)")
  return Placement(shd.make_mesh(tuple(cfg.mesh.shape), devices=trainer), s_mesh)


def _local_mesh(mesh: Mesh) -> Mesh:
  """This process's block of `mesh` (its rows of the data axis), as a mesh of its own."""
  grid = mesh.devices
  pid = jax.process_index()
  rows = [i for i in range(grid.shape[0]) if all(d.process_index == pid
                                                  for d in grid[i].flat)]
  if not rows or any(d.process_index == pid for i in range(grid.shape[0]) if i not in rows
                     for d in grid[i].flat):
    raise ValueError(f"mesh {dict(mesh.shape)}: process {pid}'s devices are not whole rows "
                     "of the data axis")
  return Mesh(grid[rows], mesh.axis_names)


def _per_process_mesh(devices, like: Mesh) -> Mesh:
  """`devices` (ordered by process) as (processes, n / processes, 1) with `like`'s axes."""
  n_proc = len({d.process_index for d in devices})
  return Mesh(np.asarray(devices).reshape(n_proc, -1, 1), like.axis_names)


def to_sampler(pure: dict, placement: Placement) -> dict:
  """A pure-dict param tree on the trainer's devices -> the same values in the sampler mesh's
  param shardings, device to device (colocated: the arrays themselves)."""
  if not placement.disaggregated:
    return pure
  s_mesh = placement.sampler_mesh
  target = shd.param_shardings(pure, s_mesh)
  if jax.process_count() == 1:
    return jax.device_put(pure, target)
  # 1) one full copy per process on its trainer devices (a reshard within the trainer's set)
  t_devices = list(placement.trainer_mesh.devices.flat)
  t_mesh = _per_process_mesh(sorted(t_devices, key=lambda d: (d.process_index, d.id)),
                             placement.trainer_mesh)
  per_proc = jax.device_put(pure, shd.param_shardings(pure, t_mesh))
  t_local, s_local = _local_mesh(t_mesh), _local_mesh(s_mesh)
  t_local_sh = shd.param_shardings(pure, t_local)
  s_local_sh = shd.param_shardings(pure, s_local)

  def move(x, t_sh, s_sh, g_sh):
    local = jax.make_array_from_single_device_arrays(
        x.shape, t_sh, [s.data for s in x.addressable_shards])
    moved = jax.device_put(local, s_sh)  # 2) within this process: trainer -> sampler devices
    return jax.make_array_from_single_device_arrays(
        x.shape, g_sh, [s.data for s in moved.addressable_shards])

  return jax.tree.map(move, per_proc, t_local_sh, s_local_sh, target)


def sampler_model(graphdef, pure: dict, placement: Placement):
  """The trainer's params (pure dict) as a Decoder placed for the sampler."""
  return nnx.merge(graphdef, to_sampler(pure, placement))


def describe(placement: Placement) -> str:
  if not placement.disaggregated:
    return f"colocated on mesh {dict(placement.trainer_mesh.shape)}"
  return (f"sampler on {placement.sampler_mesh.size} devices {dict(placement.sampler_mesh.shape)}, "
          f"trainer on {placement.trainer_mesh.size} {dict(placement.trainer_mesh.shape)}")


__all__ = ["PLACEMENTS", "Placement", "split_devices", "make_placement",
           "to_sampler", "sampler_model", "describe"]
