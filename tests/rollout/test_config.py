"""Bad sampler input fails early with a clear message."""
import jax
import numpy as np
import pytest

from rljax.rollout import SamplerConfig, generate
from tests.rollout.helpers import TINY, ragged_prompts, tiny_model


@pytest.mark.parametrize("kw, msg", [
    (dict(temperature=-0.5), "temperature must be a finite number >= 0"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(top_k=-1), "top_k must be an int >= 0"),
    (dict(num_generations=0), "group size G"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(record_topk=-2), "record_topk"),
    (dict(record_topk="all"), "record_topk"),
    (dict(cache_length=0), "cache_length"),
])
def test_config_errors(kw, msg):
  with pytest.raises(ValueError, match=msg):
    SamplerConfig(**kw)


def test_config_normalizes():
  cfg = SamplerConfig(stop_token_ids=[2, 3], record_topk="full")
  assert cfg.stop_token_ids == (2, 3) and cfg.record_topk == -1
  assert SamplerConfig(stop_token_ids=5).stop_token_ids == (5,)
  assert SamplerConfig(temperature=0).greedy and hash(cfg)


@pytest.fixture(scope="module")
def model():
  return tiny_model(seed=0)


@pytest.mark.parametrize("kw, msg", [
    (dict(top_k=TINY.vocab_size + 1), r"top_k=65 is larger than the vocabulary \(64\)"),
    (dict(record_topk=100), "record_topk=100 is larger than the vocabulary"),
    (dict(cache_length=4), "prompt length 6 is longer than the KV cache"),
    (dict(cache_length=8, max_new_tokens=4), r"6 \+ max_new_tokens 4 - 1 = 9 slots do not fit"),
])
def test_generate_errors(model, kw, msg):
  ids, mask = ragged_prompts([6, 3])
  with pytest.raises(ValueError, match=msg):
    generate(model, ids, mask, jax.random.key(0), SamplerConfig(**kw))


def test_generate_input_errors(model):
  ids, mask = ragged_prompts([6, 3])
  cfg = SamplerConfig(max_new_tokens=2)
  with pytest.raises(ValueError, match="left-padded"):
    generate(model, ids, mask[:, ::-1], jax.random.key(0), cfg)
  empty = mask.copy()
  empty[1] = 0
  with pytest.raises(ValueError, match=r"prompt rows \[1\] are empty"):
    generate(model, ids, empty, jax.random.key(0), cfg)
  with pytest.raises(ValueError, match="equal"):
    generate(model, ids, mask[:, 1:], jax.random.key(0), cfg)
  with pytest.raises(ValueError, match=r"one per prompt \(2\)"):
    generate(model, ids, mask, jax.random.split(jax.random.key(0), 3), cfg)
  with pytest.raises(TypeError, match="Decoder"):
    generate(np.zeros(3), ids, mask, jax.random.key(0), cfg)
