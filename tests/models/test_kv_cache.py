"""Prefill + decode through the static KV cache equals the full forward."""
import jax
import jax.numpy as jnp
import numpy as np

from rljax.models import create_model, init_cache, positions_from_mask
from rljax.models.config import ModelConfig

TINY = ModelConfig(model_type="qwen3", vocab_size=67, hidden_size=32, intermediate_size=48,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def test_prefill_then_decode_matches_full_forward():
  model = create_model(TINY, seed=1)
  rng = np.random.RandomState(0)
  prompt_len, n_new, b = 6, 5, 3
  ids = rng.randint(0, TINY.vocab_size, (b, prompt_len + n_new)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, :2] = 0  # left padding in the prompt part
  mask[2, :4] = 0
  full_pos = positions_from_mask(jnp.asarray(mask))
  full, _ = model(jnp.asarray(ids), full_pos, jnp.asarray(mask))
  full_logits = np.asarray(model.logits(full))

  cache = init_cache(TINY, b, prompt_len + n_new + 3)
  h, cache = model(jnp.asarray(ids[:, :prompt_len]), full_pos[:, :prompt_len],
                   jnp.asarray(mask[:, :prompt_len]), cache=cache)
  got = [np.asarray(model.logits(h))]
  step = jax.jit(lambda t, p, m, c: model(t, p, m, cache=c))
  for i in range(prompt_len, prompt_len + n_new):
    h, cache = step(jnp.asarray(ids[:, i:i + 1]), full_pos[:, i:i + 1],
                    jnp.asarray(mask[:, i:i + 1]), cache)
    got.append(np.asarray(model.logits(h)))
  got = np.concatenate(got, axis=1)
  m = mask.astype(bool)
  assert np.abs(got - full_logits)[m].max() <= 1e-5
  assert int(cache.index) == prompt_len + n_new
