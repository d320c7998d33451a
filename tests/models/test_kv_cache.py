"""Prefill + decode through the static KV cache equals the full forward."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.models import create_model, init_cache, positions_from_mask
from rljax.models.decoder import SharedPrefix
from rljax.models.config import ModelConfig

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics

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


def test_a_shared_prefix_equals_the_prompt_cache_copied_to_each_row():
  """Prefill 2 prompts (one left-padded) once, decode 3 rows per prompt with the prompts'
  cache as a SharedPrefix: the logits equal decoding with the prompt cache copied to each
  row (what the sampler did before) and the full forward of each row."""
  model = create_model(TINY, seed=2)
  rng = np.random.RandomState(1)
  p, r, plen, n = 2, 3, 5, 4
  prompt = rng.randint(0, TINY.vocab_size, (p, plen)).astype(np.int32)
  pmask = np.ones_like(prompt)
  pmask[1, :2] = 0
  new = rng.randint(0, TINY.vocab_size, (p * r, n)).astype(np.int32)
  ids = np.concatenate([np.repeat(prompt, r, 0), new], 1)
  mask = np.concatenate([np.repeat(pmask, r, 0), np.ones_like(new)], 1)
  pos = positions_from_mask(jnp.asarray(mask))
  full = np.asarray(model.logits(model(jnp.asarray(ids), pos, jnp.asarray(mask))[0]))

  _, pc = model(jnp.asarray(prompt), pos[::r, :plen], jnp.asarray(pmask),
                init_cache(TINY, p, plen))
  shared = init_cache(TINY, p * r, n)._replace(
      prefix=SharedPrefix(pc.k_LxBxKxSxE, pc.v_LxBxKxSxE, pc.valid_BxS))
  copied = init_cache(TINY, p * r, plen + n)
  _, copied = model(jnp.asarray(ids[:, :plen]), pos[:, :plen], jnp.asarray(mask[:, :plen]),
                    copied)
  step = jax.jit(lambda t, q, c, w: model(t, q, jnp.ones_like(t), cache=c, attend_len=w),
                 static_argnums=3)
  for i in range(n):
    tok, at = jnp.asarray(new[:, i:i + 1]), pos[:, plen + i:plen + i + 1]
    h_s, shared = step(tok, at, shared, i + 1)
    h_c, copied = step(tok, at, copied, plen + i + 1)
    got_s, got_c = np.asarray(model.logits(h_s)), np.asarray(model.logits(h_c))
    np.testing.assert_allclose(got_s, got_c, atol=1e-5)
    np.testing.assert_allclose(got_s[:, 0], full[:, plen + i], atol=1e-4)
  assert shared.k_LxBxKxSxE.shape[3] == n  # the rows store only their own tokens
