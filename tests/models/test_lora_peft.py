"""PEFT round trip: rljax's adapters exported as a PEFT directory, loaded by `peft` onto the
transformers model, give rljax's adapted logits."""
import numpy as np
import pytest
import torch

from rljax.models import load_model, params_dict, positions_from_mask
from rljax.models.lora import LoraConfig, export_peft, init_adapters
from tests.models.hf_fixtures import hf_logits, left_padded_batch, make_hf_model


@pytest.mark.parametrize("family,targets", [("qwen3_qk_norm", "wq|wk|wv|wo|w_gate|w_up|w_down"),
                                            ("llama_bias", "wq|wo|w_down")])
def test_peft_loads_the_exported_adapter(tmp_path, family, targets):
  import jax
  from flax import nnx
  from peft import PeftModel
  from rljax.models.decoder import Decoder
  hf = make_hf_model(family, str(tmp_path / "base"))
  model = load_model(str(tmp_path / "base"))
  lora = LoraConfig(rank=4, alpha=8.0, targets=targets)
  ad = init_adapters(model.cfg, lora, seed=1)
  rng = np.random.default_rng(2)
  ad = {n: {"a": ab["a"], "b": 0.2 * rng.standard_normal(ab["b"].shape).astype(np.float32)}
        for n, ab in ad.items()}
  export_peft(ad, lora, str(tmp_path / "adapter"), base_model=str(tmp_path / "base"))
  peft_model = PeftModel.from_pretrained(hf, str(tmp_path / "adapter")).eval()
  ids, mask = left_padded_batch(model.cfg.vocab_size)
  pos = positions_from_mask(mask)
  graphdef = nnx.split(nnx.eval_shape(lambda: Decoder(model.cfg, nnx.Rngs(0), lora=lora)))[0]
  m = nnx.merge(graphdef, params_dict(model))
  h, _ = m(ids, pos, mask, adapters=jax.tree.map(np.asarray, ad))
  ours = np.asarray(m.logits(h))
  theirs = hf_logits(peft_model, ids, mask, pos)
  real = mask.astype(bool)
  np.testing.assert_allclose(ours[real], theirs[real], rtol=1e-4, atol=1e-4)
  with peft_model.disable_adapter(), torch.no_grad():
    base = hf_logits(peft_model, ids, mask, pos)
  assert np.abs(base[real] - theirs[real]).max() > 1e-2  # the adapter changes the logits
