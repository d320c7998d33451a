"""Integer grids of the decoder's quantized storage: symmetric absmax quantization.

A value is rounded to the integer grid of its block: `q = clip(round(x / s), -Q, Q)`,
`s = max|x| / Q` over the block, `Q = 127` (int8) or `7` (int4); int4 values are stored
packed two per byte. The quantized KV cache (`rljax.models.decoder`), the QLoRA base
(`rljax.models.lora`) and the rollout copies' fake quantization (`rljax.rollout.quant`)
share these functions.
"""
from __future__ import annotations

import jax.numpy as jnp

QMAX = {8: 127.0, 4: 7.0}

# Contracting (input) axes of each stacked layer weight, after the leading L axis.
WEIGHT_INPUT_AXES = {"wq": (1,), "wk": (1,), "wv": (1,), "wo": (1, 2),
                     "w_gate": (1,), "w_up": (1,), "w_down": (1,)}


def check_bits(bits: int, what: str) -> None:
  if bits not in QMAX:
    raise ValueError(f"{what}: {bits} bits is not supported; choose one of {sorted(QMAX)}")


def quantize(x, reduce_axes: tuple[int, ...], bits: int):
  """(q, scale): float32 integers on the absmax grid of each block and the block scales."""
  qmax = QMAX[bits]
  xf = x.astype(jnp.float32)
  scale = jnp.max(jnp.abs(xf), axis=reduce_axes, keepdims=True) / qmax
  scale = jnp.where(scale > 0, scale, 1.0)
  return jnp.clip(jnp.round(xf / scale), -qmax, qmax), scale


def fake_quant(x, reduce_axes: tuple[int, ...], bits: int):
  """Round to the absmax grid of each block (a block spans `reduce_axes`); same dtype."""
  q, scale = quantize(x, reduce_axes, bits)
  return (q * scale).astype(x.dtype)


def pack_int4(q_NxE):
  """int8 [..., E/2]: pairs of int4 values (in [-8, 7]) along the last axis, low nibble first."""
  q = q_NxE.astype(jnp.int8)
  lo, hi = q[..., 0::2], q[..., 1::2]
  return (lo & 0xF) | (hi << 4)


def unpack_int4(b_NxE2):
  """Inverse of `pack_int4`: int8 [..., E] (sign-extended nibbles)."""
  lo = (b_NxE2 << 4) >> 4
  hi = b_NxE2 >> 4
  return jnp.stack([lo, hi], axis=-1).reshape(*b_NxE2.shape[:-1], -1)
