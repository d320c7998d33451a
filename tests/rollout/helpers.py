"""Tiny models with spread-out logits, and ragged left-padded prompts, for the rollout tests."""
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rljax.models import create_model
from rljax.models.config import ModelConfig

TINY = ModelConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True,
                   eos_token_id=1)


def tiny_model(seed: int = 0, layer_std: float = 0.25, head_std: float = 0.35, cfg=TINY):
  """Random tiny decoder whose next-token distributions are far from uniform."""
  model = create_model(cfg, seed=seed)
  state = nnx.state(model, nnx.Param)
  pure = nnx.to_pure_dict(state)
  key = jax.random.key(seed + 1000)

  def redraw(path, x):
    name = str(path[-1].key)
    if "norm" in name:
      return x
    std = head_std if name in ("lm_head", "embed") else layer_std
    k = jax.random.fold_in(key, zlib.crc32(name.encode()))
    return std * jax.random.normal(k, x.shape, x.dtype)

  nnx.replace_by_pure_dict(state, jax.tree_util.tree_map_with_path(redraw, pure))
  nnx.update(model, state)
  return model


def ragged_prompts(lengths, vocab: int = TINY.vocab_size, seed: int = 0):
  """Left-padded (ids_BxP, mask_BxP) numpy arrays; ids avoid 0 and 1 (pad / eos)."""
  rng = np.random.RandomState(seed)
  p = max(lengths)
  ids = rng.randint(2, vocab, (len(lengths), p)).astype(np.int32)
  mask = np.zeros_like(ids)
  for i, n in enumerate(lengths):
    mask[i, p - n:] = 1
  ids[mask == 0] = 0
  return ids, mask


def full_logits(model, ids_BxT, mask_BxT):
  from rljax.models import positions_from_mask
  mask = jnp.asarray(mask_BxT)
  h, _ = model(jnp.asarray(ids_BxT), positions_from_mask(mask), mask)
  return model.logits(h)
