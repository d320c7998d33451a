"""Loss aggregation over tokens and responses with an explicit global normalizer.

Every mode is a sum over the (micro-)batch divided by counts taken from the
*whole* batch (`Normalizer`), so the losses (and gradients) of micro-batches
add up to the whole batch's. Build the normalizer once from the whole batch's
mask with `make_normalizer` and pass the same one to every micro-batch.

Modes (registered under kind "aggregation"):
  token-mean               Σ_{i,t} m x / N_tokens                        (DAPO)
  seq-mean-token-mean      Σ_i (Σ_t m x / T_i) / N_seqs                  (GRPO)
  seq-mean-token-sum       Σ_{i,t} m x / N_seqs
  seq-mean-token-sum-norm  Σ_{i,t} m x / (N_seqs · max_len)              (Dr.GRPO)
N_seqs counts responses with at least one active token (all-padding rows are
filler and count for nothing); max_len is the whole batch's padded length
unless a fixed generation budget is given.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rljax import registry
from rljax.objectives.common import fdtype

KIND = "aggregation"


class Normalizer(NamedTuple):
  """Whole-batch counts (float32 scalars); a pytree, so it can cross jit."""
  num_tokens: jax.Array  # Σ m over the whole batch
  num_seqs: jax.Array  # responses with T_i > 0
  num_rows: jax.Array  # all rows B (REAL divides by num_rows / group_size)
  max_len: jax.Array  # padded length T, or the generation budget


def make_normalizer(mask_BxT: jax.Array, max_len: int | None = None) -> Normalizer:
  """Counts from the whole batch's mask. `max_len` overrides the padded T."""
  m = (mask_BxT > 0).astype(fdtype())
  t_B = jnp.sum(m, axis=-1)
  f32 = lambda v: jnp.asarray(v, jnp.float32)
  return Normalizer(
      num_tokens=jnp.sum(t_B),
      num_seqs=jnp.sum((t_B > 0).astype(fdtype())),
      num_rows=f32(mask_BxT.shape[0]),
      max_len=f32(mask_BxT.shape[-1] if max_len is None else max_len))


def _masked(x_BxT, mask_BxT):
  return jnp.where(mask_BxT > 0, x_BxT, 0.0)


@registry.register(KIND, "token-mean")
def token_mean(x_BxT, mask_BxT, norm: Normalizer):
  return jnp.sum(_masked(x_BxT, mask_BxT)) / jnp.maximum(norm.num_tokens, 1.0)


@registry.register(KIND, "seq-mean-token-mean")
def seq_mean_token_mean(x_BxT, mask_BxT, norm: Normalizer):
  t_B = jnp.sum((mask_BxT > 0).astype(fdtype()), axis=-1)
  per_seq_B = jnp.sum(_masked(x_BxT, mask_BxT), axis=-1) / jnp.maximum(t_B, 1.0)
  return jnp.sum(per_seq_B) / jnp.maximum(norm.num_seqs, 1.0)


@registry.register(KIND, "seq-mean-token-sum")
def seq_mean_token_sum(x_BxT, mask_BxT, norm: Normalizer):
  return jnp.sum(_masked(x_BxT, mask_BxT)) / jnp.maximum(norm.num_seqs, 1.0)


@registry.register(KIND, "seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(x_BxT, mask_BxT, norm: Normalizer):
  denom = jnp.maximum(norm.num_seqs * norm.max_len, 1.0)
  return jnp.sum(_masked(x_BxT, mask_BxT)) / denom


def aggregate(x_BxT: jax.Array, mask_BxT: jax.Array, mode: str,
              norm: Normalizer | None = None) -> jax.Array:
  """Reduces per-token values to a scalar. `mode` is static.

  Without `norm` the counts come from this batch alone (correct only when it
  is the whole batch).
  """
  fn = registry.get(KIND, mode)
  if norm is None:
    norm = make_normalizer(mask_BxT)
  return fn(x_BxT, mask_BxT, norm)
