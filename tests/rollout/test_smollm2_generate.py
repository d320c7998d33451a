"""The bundled SmolLM2 answers a chat prompt through the sampler; greedy tokens equal
transformers' greedy `generate` on the same GGUF, and sampled logq equal the trainer's."""
import os

import jax
import numpy as np
import pytest

from rljax.models import load_model
from rljax.models.bundled import smollm2_path
from rljax.models.tokenizer import load_tokenizer
from rljax.rollout import SamplerConfig, generate, score_rollout

pytestmark = pytest.mark.slow


def test_smollm2_chat_greedy_matches_transformers_and_sampled_logq():
  transformers = pytest.importorskip("transformers")
  import torch
  path = smollm2_path()
  model, tok = load_model(path), load_tokenizer(path)
  chats = [[{"role": "user", "content": "What is the capital of France?"}],
           [{"role": "user", "content": "Name three primary colors."}]]
  texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
  enc = tok(texts, padding=True, return_tensors="np")
  ids, mask = enc["input_ids"], enc["attention_mask"]
  cfg = SamplerConfig(max_new_tokens=24, temperature=0.0)  # stops at eos <|im_end|>
  r = generate(model, ids, mask, jax.random.key(0), cfg)
  n0 = int(r.mask_BxN[0].sum())
  answer = tok.decode(np.asarray(r.tokens_BxN[0, :n0]), skip_special_tokens=True)
  assert "Paris" in answer and not bool(r.truncated_B[0])

  d, f = os.path.split(path)
  hf = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype="float32").eval()
  with torch.no_grad():
    out = hf.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                      do_sample=False, max_new_tokens=24, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id or 0, top_k=None, top_p=None,
                      temperature=None).numpy()[:, ids.shape[1]:]
  for b in range(2):
    n = int(r.mask_BxN[b].sum())
    np.testing.assert_array_equal(np.asarray(r.tokens_BxN[b, :n]), out[b, :n])

  cfg = SamplerConfig(max_new_tokens=16, temperature=0.8, top_p=0.9, num_generations=2)
  r = generate(model, ids, mask, jax.random.key(1), cfg)
  logp = score_rollout(model, r, cfg)["logp_BxN"]
  m = np.asarray(r.mask_BxN).astype(bool)
  assert np.abs(np.asarray(r.logq_BxN) - np.asarray(logp))[m].max() <= 1e-3
