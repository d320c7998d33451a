"""Bad checkpoints fail with errors that name the file and the tensor."""
import json
import os

import numpy as np
import pytest

from rljax.models import load_model
from tests.models.hf_fixtures import make_hf_model


def _edit_config(d, **kv):
  p = os.path.join(d, "config.json")
  cfg = json.load(open(p))
  for k, v in kv.items():
    if v is None:
      cfg.pop(k)
    else:
      cfg[k] = v
  json.dump(cfg, open(p, "w"))
  return p


def test_missing_config_key(tmp_path):
  make_hf_model("llama_tied", str(tmp_path))
  p = _edit_config(str(tmp_path), hidden_size=None)
  with pytest.raises(KeyError, match=f"{p}.*hidden_size"):
    load_model(str(tmp_path))


def test_missing_config_json(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    load_model(str(tmp_path))


def test_unsupported_architecture(tmp_path):
  make_hf_model("llama_tied", str(tmp_path))
  _edit_config(str(tmp_path), model_type="gpt_neox")
  with pytest.raises(ValueError, match="unsupported architecture 'gpt_neox'.*llama"):
    load_model(str(tmp_path))


def test_tensor_shape_disagrees_with_config(tmp_path):
  make_hf_model("qwen3_qk_norm", str(tmp_path))
  _edit_config(str(tmp_path), intermediate_size=80)
  with pytest.raises(ValueError, match=r"model\.safetensors:model\.layers\.0\.mlp\.gate_proj\.weight"
                     r": shape \(96, 64\) disagrees .*\(80, 64\)"):
    load_model(str(tmp_path))


def test_missing_tensor(tmp_path):
  from safetensors.numpy import load_file, save_file
  make_hf_model("qwen3_qk_norm", str(tmp_path))
  f = os.path.join(str(tmp_path), "model.safetensors")
  tensors = load_file(f)
  del tensors["model.layers.1.self_attn.k_norm.weight"]
  save_file(tensors, f)
  with pytest.raises(KeyError, match=r"model\.layers\.1\.self_attn\.k_norm\.weight"):
    load_model(str(tmp_path))


def test_sharded_checkpoint_and_missing_shard(tmp_path):
  from safetensors.numpy import load_file, save_file
  make_hf_model("llama_tied", str(tmp_path))
  whole = load_model(str(tmp_path))
  f = os.path.join(str(tmp_path), "model.safetensors")
  tensors = load_file(f)
  os.remove(f)
  names = sorted(tensors)
  parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
           "model-00002-of-00002.safetensors": names[len(names) // 2:]}
  weight_map = {}
  for fn, keys in parts.items():
    save_file({k: tensors[k] for k in keys}, os.path.join(str(tmp_path), fn))
    weight_map.update({k: fn for k in keys})
  json.dump({"metadata": {}, "weight_map": weight_map},
            open(os.path.join(str(tmp_path), "model.safetensors.index.json"), "w"))
  sharded = load_model(str(tmp_path))
  np.testing.assert_array_equal(np.asarray(sharded.layers.wq[...]), np.asarray(whole.layers.wq[...]))
  os.remove(os.path.join(str(tmp_path), "model-00002-of-00002.safetensors"))
  with pytest.raises(FileNotFoundError, match="model-00002-of-00002.safetensors"):
    load_model(str(tmp_path))


def test_gguf_unsupported_quantization(tmp_path):
  import gguf
  path = str(tmp_path / "bad.gguf")
  w = gguf.GGUFWriter(path, "llama")
  w.add_block_count(1)
  w.add_context_length(64)
  w.add_embedding_length(32)
  w.add_feed_forward_length(64)
  w.add_head_count(4)
  w.add_head_count_kv(2)
  w.add_layer_norm_rms_eps(1e-5)
  w.add_vocab_size(64)
  # Q8_1 (32 values per 40-byte block) is a type the gguf package cannot dequantize.
  w.add_tensor("token_embd.weight", np.zeros((64, 40), np.uint8),
               raw_dtype=gguf.GGMLQuantizationType.Q8_1)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  with pytest.raises(ValueError, match=r"bad\.gguf:token_embd\.weight: unsupported GGUF "
                     r"quantization type Q8_1"):
    load_model(path)


@pytest.mark.parametrize("extra", ["model.layers.0.self_attn.o_proj.bias",
                                   "model.layers.1.mlp.experts.0.weight"])
def test_unmapped_checkpoint_tensor_is_refused_by_name(tmp_path, extra):
  """A tensor the config does not describe (e.g. o_proj.bias with attention_bias unset) is an
  error naming it, never silently dropped."""
  from safetensors.numpy import load_file, save_file
  make_hf_model("llama_tied", str(tmp_path))
  path = os.path.join(str(tmp_path), "model.safetensors")
  tensors = load_file(path)
  tensors[extra] = np.zeros((64,), np.float32)
  save_file(tensors, path, metadata={"format": "pt"})
  with pytest.raises(ValueError, match=f"not mapped.*{extra.replace('.', '[.]')}"):
    load_model(str(tmp_path))
