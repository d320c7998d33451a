"""Corrupt or truncated model files and bad data files: errors name the file (and tensor / line)."""
import json
import os
import re

import pytest

from rljax.models import load_model
from rljax.models.files import BadModelFile
from rljax.models.tokenizer import load_tokenizer
from rljax.rewards import evaluation, jsonl


def make_hf_model(family, d):
  """A tiny random checkpoint written by rljax's exporter (no torch needed)."""
  from rljax.models import create_model, export_model
  from rljax.models.config import ModelConfig
  cfg = ModelConfig(model_type="llama", vocab_size=32, hidden_size=16, intermediate_size=24,
                    num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8, tie_embeddings=True)
  export_model(create_model(cfg), d)


def _st(d):
  return os.path.join(d, "model.safetensors")


def test_truncated_safetensors_names_file_and_tensor(tmp_path):
  d = str(tmp_path)
  make_hf_model("llama_tied", d)
  size = os.path.getsize(_st(d))
  with open(_st(d), "r+b") as f:
    f.truncate(size - 100)
  with pytest.raises(BadModelFile, match=re.escape(_st(d)) + r":model\..*truncated file"):
    load_model(d)


@pytest.mark.parametrize("content", [b"", b"\x01\x02", b"\xff" * 8 + b"junk", b"\x05\0\0\0\0\0\0\0{oops"])
def test_corrupt_safetensors_header(tmp_path, content):
  d = str(tmp_path)
  make_hf_model("llama_tied", d)
  with open(_st(d), "wb") as f:
    f.write(content)
  with pytest.raises(BadModelFile, match=re.escape(_st(d)) + ": (corrupt|truncated)"):
    load_model(d)


def test_malformed_config_json_names_line(tmp_path):
  d = str(tmp_path)
  make_hf_model("llama_tied", d)
  with open(os.path.join(d, "config.json"), "w") as f:
    f.write('{\n  "hidden_size": 64,\n  oops\n}')
  with pytest.raises(BadModelFile, match=re.escape(os.path.join(d, "config.json")) + ":3:"):
    load_model(d)


@pytest.fixture(scope="module")
def gguf_head():
  from rljax.models.bundled import smollm2_path
  with open(smollm2_path(), "rb") as f:
    return f.read(1 << 16)


@pytest.mark.parametrize("kind", ["truncated", "garbage"])
def test_bad_gguf_names_file(tmp_path, gguf_head, kind):
  p = str(tmp_path / "m.gguf")
  with open(p, "wb") as f:
    f.write(gguf_head if kind == "truncated" else b"GGUF" + os.urandom(64))
  for load in (load_model, load_tokenizer):
    with pytest.raises(BadModelFile, match=re.escape(p) + ": not a readable GGUF file"):
      load(p)


RECORD = {"prompt": "Say hi", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}],
          "response": "hi"}


def test_non_utf8_jsonl_names_file_and_line(tmp_path):
  p = tmp_path / "data.jsonl"
  p.write_bytes(json.dumps(RECORD).encode() + b"\n" + b'{"prompt": "caf\xe9"}\n')
  with pytest.raises(jsonl.RecordError, match=re.escape(str(p)) + ":2: not UTF-8"):
    jsonl.read_ifeval_jsonl(str(p))
  records, report = jsonl.read_ifeval_jsonl(str(p), on_invalid="skip")
  assert len(records) == 1 and report.skipped == {"not_utf8": 1}


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_empty_jsonl_names_file(tmp_path, content):
  p = tmp_path / "empty.jsonl"
  p.write_text(content)
  with pytest.raises(ValueError, match=re.escape(str(p)) + ": no records"):
    evaluation.evaluate_jsonl(str(p))
