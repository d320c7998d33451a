"""Symmetric absmax quantization, simulated in floating point ("fake quantization").

A value is rounded to the integer grid of its block and scaled back in one step:
`q = clip(round(x / s), -Q, Q)`, `x' = q · s`, `s = max|x| / Q` over the block,
`Q = 127` (int8) or `7` (int4). A matmul of fake-quantized operands equals an
int8 × int8 → int32 kernel followed by the scale products up to float32 rounding
of the sums (~1e-7 relative, against ~1e-2 for the quantization itself), while the
parameters and the KV cache keep their names, dtypes and shardings: one forward
serves the trainer and every rollout copy.

Blocks: weights per output channel (optionally in groups of `group_size` along the
input), activations per token, keys / values per token and per head.
"""
from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from rljax.models.quant import (QMAX, WEIGHT_INPUT_AXES, check_bits, fake_quant,  # noqa: F401
                               pack_int4, quantize, unpack_int4)


def fake_quant_weight(w, input_axes: tuple[int, ...], bits: int, group_size: int = 0):
  """Per-output-channel absmax over the input axes (contiguous), or per group of inputs."""
  first, n_in = input_axes[0], len(input_axes)
  if input_axes != tuple(range(first, first + n_in)):
    raise ValueError(f"input axes {input_axes} must be contiguous")
  shape = w.shape
  c = math.prod(shape[first:first + n_in])
  g = group_size or c
  if c % g:
    raise ValueError(f"group_size={group_size} does not divide the input size {c} "
                     f"of a weight of shape {shape}")
  blocks = w.reshape(*shape[:first], c // g, g, *shape[first + n_in:])
  return fake_quant(blocks, (first + 1,), bits).reshape(shape)


def contracting_axes(spec: str) -> tuple[int, ...]:
  """Axes of the first einsum operand that are summed over ("btd,dhe->bthe" -> (2,))."""
  lhs, rest = spec.replace(" ", "").split(",")
  out = rest.split("->")[1]
  return tuple(i for i, ch in enumerate(lhs) if ch not in out)


@dataclasses.dataclass(frozen=True)
class QuantNumerics:
  """The decoder's `numerics` hook: per-token activation and per-token-per-head KV quant.

  act_bits: 0 (off) or 8: every activation × weight einsum quantizes its activation
  per token (absmax over the contracted axes). kv_bits: 0, 8 or 4: keys and values
  are quantized per token and per head (absmax over the head dim) before attention
  reads them, as a quantized cache stores them.
  """
  act_bits: int = 0
  kv_bits: int = 0

  def __post_init__(self):
    if self.act_bits:
      check_bits(self.act_bits, "activation quantization")
    if self.kv_bits:
      check_bits(self.kv_bits, "KV cache quantization")

  def dot(self, spec: str, x, w):
    if self.act_bits:
      x = fake_quant(x, contracting_axes(spec), self.act_bits)
    return jnp.einsum(spec, x, w)

  def kv(self, x_BxTxKxE):
    return fake_quant(x_BxTxKxE, (-1,), self.kv_bits) if self.kv_bits else x_BxTxKxE

  def kv_store(self, x_BxTxKxE):
    """(q_BxTxKxE int8 — int4 packed to E/2 —, scale_BxTxK float32) as an integer cache
    stores them; `kv_load` of it equals `kv(x)` exactly."""
    q, scale = quantize(x_BxTxKxE, (-1,), self.kv_bits)
    q = pack_int4(q) if self.kv_bits == 4 else q.astype(jnp.int8)
    return q, scale[..., 0]

  def kv_load(self, q_BxSxKxE, scale_BxSxK, dtype):
    q = unpack_int4(q_BxSxKxE) if self.kv_bits == 4 else q_BxSxKxE
    return (q.astype(jnp.float32) * scale_BxSxK[..., None]).astype(dtype)
