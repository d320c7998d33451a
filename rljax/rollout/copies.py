"""Rollout copies of the trainer that differ from it on purpose (the mismatch simulator).

A copy is a (graphdef, state) pair that `generate` samples from:
  none      the trainer's own arrays (no second copy in memory)
  bf16      parameters and matmuls in bfloat16 (logits and softmax stay float32)
  int8/int4 weight-only: each linear weight rounded per output channel (absmax), or per
            group of `group_size` inputs; embeddings, norms and the LM head stay as is
  w8a8      int8 weights as above + every activation × weight product with its
            activation quantized per token to int8 (dynamic, absmax)
  kv8/kv4   keys and values quantized per token and per head before attention
  noise     Gaussian relative weight noise, w · (1 + σ ε), on every parameter
combined as a string: "w8a8+kv4", "bf16+int4+g64", "noise0.01". The quantization is
simulated in floating point (see rljax.rollout.quant); copies are rebuilt from the
trainer at every weight sync (`SamplerSync`, which also simulates staleness).
"""
from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
from flax import nnx

from rljax.models.decoder import Decoder
from rljax.rollout.quant import WEIGHT_INPUT_AXES, QuantNumerics, fake_quant_weight
from rljax.rollout.sampler import as_graph_state

WEIGHT_MODES = ("none", "int8", "int4", "w8a8")
DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "f32": "float32", "float32": "float32"}


@dataclasses.dataclass(frozen=True)
class RolloutCopy:
  """How the sampler's parameters and arithmetic differ from the trainer's."""
  weights: str = "none"          # none | int8 | int4 | w8a8
  dtype: str | None = None       # None (the trainer's) | "bfloat16" | "float32"
  group_size: int = 0            # weight quantization groups along the input (0: per channel)
  kv_bits: int = 0               # 0 (off) | 8 | 4
  noise: float = 0.0             # relative Gaussian weight noise σ
  seed: int = 0                  # noise seed (folded with the sync count by SamplerSync)

  def __post_init__(self):
    if self.weights not in WEIGHT_MODES:
      raise ValueError(f"weights={self.weights!r}; choose one of {WEIGHT_MODES}")
    if self.dtype is not None and self.dtype not in ("bfloat16", "float32"):
      raise ValueError(f"dtype={self.dtype!r}; choose None, 'bfloat16' or 'float32'")
    if self.kv_bits not in (0, 4, 8):
      raise ValueError(f"kv_bits={self.kv_bits}; choose 0 (off), 8 or 4")
    if self.group_size < 0 or (self.group_size and self.weights == "none"):
      raise ValueError(f"group_size={self.group_size} needs int8 / int4 / w8a8 weights "
                       "and must be >= 0")
    if not self.noise >= 0:
      raise ValueError(f"noise={self.noise} must be >= 0")

  @classmethod
  def parse(cls, spec: "str | RolloutCopy") -> "RolloutCopy":
    """'none', 'bf16', 'int8', 'int4+g128', 'w8a8', 'w8a8+kv4', 'bf16+noise0.01', ..."""
    if isinstance(spec, RolloutCopy):
      return spec
    kw: dict = {}
    for part in filter(None, spec.lower().replace(" ", "").split("+")):
      if part in WEIGHT_MODES:
        kw["weights"] = part
      elif part in DTYPES:
        kw["dtype"] = DTYPES[part]
      elif m := re.fullmatch(r"kv(8|4)", part):
        kw["kv_bits"] = int(m.group(1))
      elif m := re.fullmatch(r"g(\d+)", part):
        kw["group_size"] = int(m.group(1))
      elif m := re.fullmatch(r"noise=?([0-9.e-]+)", part):
        kw["noise"] = float(m.group(1))
      else:
        raise ValueError(f"rollout copy {spec!r}: unknown part {part!r}; parts are "
                         f"{'|'.join(WEIGHT_MODES)}, bf16, kv8, kv4, g<N>, noise<σ>")
    return cls(**kw)

  def numerics(self) -> QuantNumerics | None:
    act = 8 if self.weights == "w8a8" else 0
    return QuantNumerics(act, self.kv_bits) if act or self.kv_bits else None

  def changes_params(self, param_dtype: str) -> bool:
    return (self.weights != "none" or self.noise > 0
            or (self.dtype is not None and self.dtype != param_dtype))


def _weight_bits(weights: str) -> int:
  return {"none": 0, "int8": 8, "w8a8": 8, "int4": 4}[weights]


@functools.lru_cache(maxsize=32)
def _transform_fn(copy: RolloutCopy, dtype, shardings_def):
  """Jitted pure-dict transform (noise, then weight rounding, then the cast)."""
  bits = _weight_bits(copy.weights)
  treedef, flat_shardings = shardings_def

  def fn(pure, key):
    flat, tdef = jax.tree_util.tree_flatten_with_path(pure)
    out = []
    for i, (path, w) in enumerate(flat):
      name = str(getattr(path[-1], "key", path[-1]))
      x = w.astype(jnp.float32)
      if copy.noise > 0:
        eps = jax.random.normal(jax.random.fold_in(key, i), x.shape, jnp.float32)
        x = x * (1.0 + copy.noise * eps)
      if bits and len(path) == 2 and name in WEIGHT_INPUT_AXES:
        x = fake_quant_weight(x, WEIGHT_INPUT_AXES[name], bits, copy.group_size)
      out.append(x.astype(dtype or w.dtype))
    return jax.tree_util.tree_unflatten(tdef, out)

  out_shardings = None if flat_shardings is None else \
      jax.tree_util.tree_unflatten(treedef, flat_shardings)
  return jax.jit(fn, out_shardings=out_shardings)


def _shardings_def(pure):
  leaves, treedef = jax.tree_util.tree_flatten(pure)
  sh = tuple(getattr(x, "sharding", None) for x in leaves)
  return treedef, (None if any(s is None for s in sh) else sh)


def make_sampler_params(trainer, copy: "RolloutCopy | str" = "none", key=None,
                        force_copy: bool = False):
  """The sampler's (graphdef, state), built from the trainer's Decoder or (graphdef, state).

  Mode none returns the trainer's own arrays (shared memory) unless `force_copy`
  (needed when the sampler must keep a snapshot while the trainer moves on). Other
  modes return new arrays in the same shardings as the trainer's.
  """
  copy = RolloutCopy.parse(copy)
  graphdef, state = as_graph_state(trainer)
  cfg = trainer.cfg if isinstance(trainer, Decoder) else nnx.merge(graphdef, state).cfg
  numerics = copy.numerics()
  new_cfg = cfg.replace(param_dtype=copy.dtype, dtype=copy.dtype) if copy.dtype else cfg
  if numerics is not None or new_cfg != cfg:
    abstract = nnx.eval_shape(lambda: Decoder(new_cfg, nnx.Rngs(0), numerics=numerics))
    graphdef = nnx.split(abstract)[0]
  if not copy.changes_params(cfg.param_dtype) and not force_copy:
    return graphdef, state  # same arrays (a KV-only copy changes arithmetic, not weights)
  pure = nnx.to_pure_dict(state)
  key = jax.random.key(copy.seed) if key is None else key
  new_pure = _transform_fn(copy, new_cfg.param_dtype if copy.dtype else None,
                           _shardings_def(pure))(pure, key)
  new_state = jax.tree.map(lambda x: x, state)
  nnx.replace_by_pure_dict(new_state, new_pure)
  return graphdef, new_state


@dataclasses.dataclass
class SamplerSync:
  """Staleness: the sampler is rebuilt from the trainer every `every` trainer steps.

  Call `params(step, trainer)` at each step before generating: it re-syncs (and
  re-quantizes) when `step - last_sync_step >= every` or nothing is held, so between
  syncs the sampler lags the trainer by 0, 1, ..., every - 1 updates. `state_dict()`
  is the small checkpointable state; after `load_state_dict` the first call re-syncs
  from the restored trainer unless `restore_held` put back the checkpointed snapshot (the
  trainer saves it when every > 1, so a stale sampler resumes bit-exactly).
  """
  copy: RolloutCopy = RolloutCopy()
  every: int = 1
  last_sync_step: int = -1
  num_syncs: int = 0
  _held: tuple | None = dataclasses.field(default=None, repr=False)

  def __post_init__(self):
    self.copy = RolloutCopy.parse(self.copy)
    if not (isinstance(self.every, int) and self.every >= 1):
      raise ValueError(f"sync every={self.every!r} must be an int >= 1")

  def due(self, step: int) -> bool:
    return self._held is None or step - self.last_sync_step >= self.every

  def params(self, step: int, trainer, private: bool = False):
    """(graphdef, state) to sample with at trainer step `step` (syncs if due). `private`:
    `trainer`'s arrays are already a copy of the trainer's own (e.g. on the sampler's
    devices), so none is made to hold them."""
    if self.due(step):
      key = jax.random.fold_in(jax.random.key(self.copy.seed), self.num_syncs)
      # With every == 1 the trainer cannot move on before the next sync: share memory.
      self._held = make_sampler_params(trainer, self.copy, key,
                                       force_copy=self.every > 1 and not private)
      self.last_sync_step, self.num_syncs = int(step), self.num_syncs + 1
    return self._held

  def lag(self, step: int) -> int:
    """Trainer updates the held sampler is behind at `step`."""
    return int(step) - self.last_sync_step

  def state_dict(self) -> dict:
    return {"every": self.every, "last_sync_step": self.last_sync_step,
            "num_syncs": self.num_syncs}

  def held(self):
    """The (graphdef, state) sampled with now, or None before the first sync."""
    return self._held

  def restore_held(self, held) -> None:
    """Puts back a checkpointed sampler snapshot (exact resume of a stale sampler)."""
    self._held = held

  def load_state_dict(self, d: dict) -> None:
    self.every, self.last_sync_step, self.num_syncs = (int(d["every"]), int(d["last_sync_step"]),
                                                       int(d["num_syncs"]))
    self._held = None
