"""Tokenizers, offline, with the chat template.

A HF directory goes through `transformers.AutoTokenizer` (local files only, no
remote code). A GGUF file is rebuilt from its metadata with `tokenizers` alone
(transformers' own GGUF path imports torch): byte-level BPE from the stored
tokens and merges, control tokens as special tokens, the chat template and the
bos / eos / pad ids. For SmolLM2 (`tokenizer.ggml.pre == "smollm"`) digits are
split one by one before byte-level splitting, as SmolLM2's own tokenizer.json
and llama.cpp do.
"""
from __future__ import annotations

import os

_CONTROL = 3
_USER_DEFINED = 4


def _byte_alphabet() -> dict[int, str]:
  bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
      list(range(ord("®"), ord("ÿ") + 1))
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


def gguf_tokenizer(path: str):
  """A `transformers.PreTrainedTokenizerFast` built from GGUF metadata (byte-level BPE)."""
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
  from transformers import PreTrainedTokenizerFast

  from rljax.models.gguf_file import open_gguf
  f = open_gguf(path).fields

  def val(key, default=None):
    return f.get(key, default)

  kind = val("tokenizer.ggml.model")
  if kind != "gpt2":
    raise ValueError(f"{path}: tokenizer.ggml.model={kind!r} is not supported (only byte-level "
                     "BPE 'gpt2'); use the model's HF directory instead")
  tokens = val("tokenizer.ggml.tokens")
  merges = [tuple(m.split(" ", 1)) for m in val("tokenizer.ggml.merges")]
  types = val("tokenizer.ggml.token_type") or [1] * len(tokens)
  vocab = {t: i for i, t in enumerate(tokens)}
  tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  if val("tokenizer.ggml.pre") == "smollm":
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), byte_level])
  else:
    tok.pre_tokenizer = byte_level
  tok.decoder = decoders.ByteLevel()
  alphabet = set(_byte_alphabet().values())
  special = [AddedToken(t, special=True, normalized=False)
             for t, ty in zip(tokens, types) if ty == _CONTROL and set(t) <= alphabet]
  tok.add_special_tokens(special)
  tok.add_tokens([AddedToken(t, normalized=False)
                  for t, ty in zip(tokens, types) if ty == _USER_DEFINED])

  def name(key):
    i = val(f"tokenizer.ggml.{key}")
    return None if i is None else tokens[int(i)]

  return PreTrainedTokenizerFast(
      tokenizer_object=tok, bos_token=name("bos_token_id"), eos_token=name("eos_token_id"),
      unk_token=name("unknown_token_id"), pad_token=name("padding_token_id"),
      chat_template=val("tokenizer.chat_template"), padding_side="left",
      add_bos_token=bool(val("tokenizer.ggml.add_bos_token", False)))


def load_tokenizer(path: str):
  """Tokenizer for a HF checkpoint directory or a `.gguf` file; pads on the left."""
  if path.endswith(".gguf"):
    return gguf_tokenizer(path)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"{path}: not a checkpoint directory or .gguf file")
  from transformers import AutoTokenizer
  tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
  tok.padding_side = "left"
  if tok.pad_token is None:
    tok.pad_token = tok.eos_token
  return tok
