"""Device mesh and sharding rules.

Axes: `data` (pure data parallelism), `fsdp` (data parallelism whose params are
sharded), `tensor` (model parallelism over heads / MLP / vocabulary).

Parameters get *logical* axis names from one regex table (`PARAM_AXES`); one
rules table (`LOGICAL_RULES`) maps logical names to mesh axes. A mesh axis is
dropped from a dimension it does not divide (e.g. 3 kv heads over tensor=4),
which replicates that dimension instead of failing.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")
BATCH = ("data", "fsdp")  # mesh axes a batch dimension is split over

LOGICAL_RULES: dict[str, Any] = {
    "batch": BATCH,
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "layers": None,
    "head_dim": None,
    "norm": None,
}

# (regex on the '/'-joined param path, logical axes per dimension)
PARAM_AXES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"^embed(_scale)?$", ("vocab", "embed")),
    (r"^lm_head(_scale)?$", ("embed", "vocab")),
    (r"^final_norm$", ("norm",)),
    (r"^layers/wq(_scale)?$", ("layers", "embed", "heads", "head_dim")),
    (r"^layers/w[kv](_scale)?$", ("layers", "embed", "kv_heads", "head_dim")),
    (r"^layers/wo(_scale)?$", ("layers", "heads", "head_dim", "embed")),
    (r"^layers/bq$", ("layers", "heads", "head_dim")),
    (r"^layers/b[kv]$", ("layers", "kv_heads", "head_dim")),
    (r"^layers/(bo|b_down)$", ("layers", "norm")),
    (r"^layers/b_(gate|up)$", ("layers", "mlp")),
    (r"^layers/(attn_norm|mlp_norm|q_norm|k_norm)$", ("layers", "norm")),
    (r"^layers/w_(gate|up)(_scale)?$", ("layers", "embed", "mlp")),
    (r"^layers/w_down(_scale)?$", ("layers", "mlp", "embed")),
    # LoRA adapters (rljax.models.lora), <projection>/a [L, in, r] and <projection>/b
    # [L, r, out]: A's input and B's output split like the projection's, the rank whole
    (r"^(wq|w[kv]|w_gate|w_up)/a$", ("layers", "embed", None)),
    (r"^wo/a$", ("layers", "heads", None)),
    (r"^w_down/a$", ("layers", "mlp", None)),
    (r"^wq/b$", ("layers", None, "heads")),
    (r"^w[kv]/b$", ("layers", None, "kv_heads")),
    (r"^(wo|w_down)/b$", ("layers", None, "embed")),
    (r"^w_(gate|up)/b$", ("layers", None, "mlp")),
)

log = logging.getLogger(__name__)


def make_mesh(shape: Sequence[int] | None = None, axes: Sequence[str] = MESH_AXES,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A mesh over all (global) devices. `shape` may use -1 once; default: all on fsdp.

  A 2-D shape like (2, 4) is read as (data, fsdp) with tensor = 1.
  """
  devices = list(devices if devices is not None else jax.devices())
  n = len(devices)
  shape = list(shape) if shape is not None else [1, -1, 1]
  if len(shape) == 2 and len(axes) == 3:
    shape = shape + [1]
  if len(shape) != len(axes):
    raise ValueError(f"mesh shape {tuple(shape)} does not match axes {tuple(axes)}")
  if shape.count(-1) > 1:
    raise ValueError(f"mesh shape {tuple(shape)}: at most one -1")
  if -1 in shape:
    known = int(np.prod([s for s in shape if s != -1]))
    if n % known:
      raise ValueError(f"mesh shape {tuple(shape)} does not divide {n} devices")
    shape[shape.index(-1)] = n // known
  if int(np.prod(shape)) != n:
    raise ValueError(f"mesh shape {tuple(shape)} needs {int(np.prod(shape))} devices, "
                     f"but {n} are available")
  try:
    from jax.experimental import mesh_utils
    grid = mesh_utils.create_device_mesh(shape, devices=devices)
  except Exception:  # CPU / odd topologies: plain order
    grid = np.asarray(devices).reshape(shape)
  return Mesh(grid, tuple(axes))


def logical_to_spec(logical: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules: Mapping[str, Any] = LOGICAL_RULES) -> P:
  """PartitionSpec for one array; mesh axes that don't divide the dim are dropped."""
  used: set[str] = set()
  spec = []
  for name, dim in zip(logical, shape):
    target = rules.get(name) if name else None
    axes = [target] if isinstance(target, str) else list(target or [])
    keep = []
    for a in axes:
      size = mesh.shape.get(a, 1)
      if a in used or size == 1:
        continue
      if dim % (size * int(np.prod([mesh.shape[k] for k in keep] or [1]))) == 0:
        keep.append(a)
    used.update(keep)
    spec.append(tuple(keep) if len(keep) > 1 else (keep[0] if keep else None))
  return P(*spec)


def param_logical_axes(path: str, ndim: int) -> tuple[str | None, ...]:
  for pattern, axes in PARAM_AXES:
    if re.search(pattern, path):
      if len(axes) != ndim:
        raise ValueError(f"param {path}: rule {pattern} has {len(axes)} axes for a {ndim}-D array")
      return axes
  raise ValueError(f"param {path}: no sharding rule in PARAM_AXES matches")


def param_shardings(shapes_tree: Mapping, mesh: Mesh) -> dict:
  """NamedShardings for a pure-dict param tree of arrays / ShapeDtypeStructs."""

  def go(node, prefix):
    if isinstance(node, Mapping):
      return {k: go(v, f"{prefix}/{k}" if prefix else str(k)) for k, v in node.items()}
    axes = param_logical_axes(prefix, len(node.shape))
    return NamedSharding(mesh, logical_to_spec(axes, node.shape, mesh))

  return go(shapes_tree, "")


def batch_sharding(mesh: Mesh, shape: Sequence[int]) -> NamedSharding:
  """The one rule for batch-leading arrays (train batches, prompts, rollouts): dim 0 over the
  batch axes (data, fsdp) that divide it, every other dim replicated."""
  return NamedSharding(mesh, logical_to_spec(("batch",) + (None,) * (len(shape) - 1), shape,
                                             mesh))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def _path_names(path) -> tuple[str, ...]:
  out = []
  for k in path:
    for attr in ("key", "name", "idx"):
      if hasattr(k, attr):
        out.append(str(getattr(k, attr)))
        break
  return tuple(out)


def state_shardings(init_fn, params, mesh: Mesh):
  """Shardings of `init_fn(params)` (e.g. a train state): every leaf whose trailing path and
  shape are a parameter's (the params themselves, optimizer moments) takes that parameter's
  sharding; everything else (counts, scalars) is replicated. Left to XLA, the moments of
  `zeros_like(params)` come out replicated."""
  by_path = {_path_names(p): (x.shape, x.sharding)
             for p, x in jax.tree_util.tree_leaves_with_path(params)}
  depth = max(len(k) for k in by_path)

  def pick(path, leaf):
    names = _path_names(path)
    for k in range(min(depth, len(names)), 0, -1):
      hit = by_path.get(names[-k:])
      if hit is not None and tuple(hit[0]) == tuple(leaf.shape):
        return hit[1]
    return NamedSharding(mesh, P())

  abstract = jax.eval_shape(init_fn, params)
  return jax.tree_util.tree_map_with_path(pick, abstract)


def init_sharded(init_fn, params, mesh: Mesh):
  """`init_fn(params)` created directly in `state_shardings` (no replicated moments)."""
  return jax.jit(init_fn, out_shardings=state_shardings(init_fn, params, mesh))(params)


def mesh_scope(mesh_or_shardings):
  """Inside a jitted function whose arguments are laid out on `mesh`: makes it the
  context mesh, so Pallas kernels (rljax.models.pallas_attention) run per shard under
  `shard_map` (XLA cannot partition a Mosaic kernel). Takes a Mesh, a pytree of
  NamedShardings (the first one's mesh) or None (no-op)."""
  import contextlib
  mesh = mesh_or_shardings
  if mesh is not None and not isinstance(mesh, Mesh):
    mesh = next((s.mesh for s in jax.tree.leaves(mesh) if isinstance(s, NamedSharding)), None)
  if mesh is None:
    return contextlib.nullcontext()
  return jax.sharding.use_abstract_mesh(mesh.abstract_mesh)
