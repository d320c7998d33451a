"""rljax decoder vs transformers (PyTorch) on the same weights."""
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.models import export_model, load_model, positions_from_mask
from tests.models.hf_fixtures import FAMILIES, hf_logits, left_padded_batch, make_hf_model

# golden / equivalence tests on float results: also run under another XLA:CPU ISA
# (tests/test_portability.py)
pytestmark = pytest.mark.numerics


def _rljax_logits(model, ids, mask):
  pos = positions_from_mask(jnp.asarray(mask))
  hidden, _ = model(jnp.asarray(ids), pos, jnp.asarray(mask))
  return np.asarray(model.logits(hidden)), pos


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_match_transformers(family, tmp_path):
  hf = make_hf_model(family, str(tmp_path))
  model = load_model(str(tmp_path))
  ids, mask = left_padded_batch(model.cfg.vocab_size)
  ours, pos = _rljax_logits(model, ids, mask)
  ref = hf_logits(hf, ids, mask, pos)
  err = np.abs(ours - ref)[mask.astype(bool)].max()
  assert err <= 1e-4, f"{family}: max |Δ logits| = {err}"


@pytest.mark.parametrize("family", ["llama_rope_scaling", "qwen2_bias", "qwen3_qk_norm"])
def test_export_roundtrip_loads_in_transformers(family, tmp_path):
  import transformers
  make_hf_model(family, str(tmp_path / "src"))
  model = load_model(str(tmp_path / "src"))
  export_model(model, str(tmp_path / "out"))
  hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
  ids, mask = left_padded_batch(model.cfg.vocab_size, seed=3)
  ours, pos = _rljax_logits(model, ids, mask)
  err = np.abs(ours - hf_logits(hf, ids, mask, pos))[mask.astype(bool)].max()
  assert err <= 1e-4


def test_bfloat16_params_and_compute(tmp_path):
  make_hf_model("qwen3_qk_norm", str(tmp_path))
  f32 = load_model(str(tmp_path))
  bf16 = load_model(str(tmp_path), param_dtype="bfloat16", dtype="bfloat16")
  assert bf16.layers.wq[...].dtype == jnp.bfloat16
  ids, mask = left_padded_batch(f32.cfg.vocab_size)
  a, _ = _rljax_logits(f32, ids, mask)
  b, _ = _rljax_logits(bf16, ids, mask)
  assert b.dtype == np.float32  # logits for logprobs stay float32
  m = mask.astype(bool)
  assert np.abs(a - b)[m].max() < 0.15 and (a.argmax(-1) == b.argmax(-1))[m].mean() > 0.8
