"""Checkpoints: HF safetensors directories and GGUF files in, safetensors out.

No torch and no pickle: safetensors files are memory-mapped with numpy (bfloat16
through ml_dtypes) and GGUF tensors are dequantized with the `gguf` package.
Every parameter is assembled on the host one array at a time and placed
directly into its `NamedSharding` with `jax.make_array_from_callback`, so a
device only ever holds its own shard.

HF keys map to rljax parameters through one table (`_LAYER_KEYS`) with a
transform per entry; the same table, inverted, writes the export.
"""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Callable, Mapping

import jax
import ml_dtypes
import numpy as np

from rljax.models.config import ModelConfig, config_from_hf_dict, config_to_hf_dict, load_hf_config
from rljax.models.files import BadModelFile, read_json, safetensors_header
from rljax.models.gguf_file import open_gguf

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "F64": np.float64, "I64": np.int64, "I32": np.int32}
_ST_SIZES = {k: np.dtype(v).itemsize for k, v in _ST_DTYPES.items()}

# rljax layer param -> (HF key template, to_rljax(w, cfg), to_hf(w, cfg)).
_T = lambda w, c: w.T
_I = lambda w, c: w


def _heads_in(n):  # HF [n*E, D] -> [D, n, E]
  return lambda w, c: w.T.reshape(c.hidden_size, getattr(c, n), c.head_dim)


def _heads_in_back(n):
  return lambda w, c: w.reshape(c.hidden_size, getattr(c, n) * c.head_dim).T


def _bias(n):
  return lambda w, c: w.reshape(getattr(c, n), c.head_dim)


_FLAT = lambda w, c: w.reshape(-1)
_LAYER_KEYS: dict[str, tuple[str, Callable, Callable]] = {
    "attn_norm": ("input_layernorm.weight", _I, _I),
    "wq": ("self_attn.q_proj.weight", _heads_in("num_heads"), _heads_in_back("num_heads")),
    "wk": ("self_attn.k_proj.weight", _heads_in("num_kv_heads"), _heads_in_back("num_kv_heads")),
    "wv": ("self_attn.v_proj.weight", _heads_in("num_kv_heads"), _heads_in_back("num_kv_heads")),
    "wo": ("self_attn.o_proj.weight",
           lambda w, c: w.T.reshape(c.num_heads, c.head_dim, c.hidden_size),
           lambda w, c: w.reshape(c.num_heads * c.head_dim, c.hidden_size).T),
    "bq": ("self_attn.q_proj.bias", _bias("num_heads"), _FLAT),
    "bk": ("self_attn.k_proj.bias", _bias("num_kv_heads"), _FLAT),
    "bv": ("self_attn.v_proj.bias", _bias("num_kv_heads"), _FLAT),
    "bo": ("self_attn.o_proj.bias", _I, _I),
    "b_gate": ("mlp.gate_proj.bias", _I, _I),
    "b_up": ("mlp.up_proj.bias", _I, _I),
    "b_down": ("mlp.down_proj.bias", _I, _I),
    "q_norm": ("self_attn.q_norm.weight", _I, _I),
    "k_norm": ("self_attn.k_norm.weight", _I, _I),
    "mlp_norm": ("post_attention_layernorm.weight", _I, _I),
    "w_gate": ("mlp.gate_proj.weight", _T, _T),
    "w_up": ("mlp.up_proj.weight", _T, _T),
    "w_down": ("mlp.down_proj.weight", _T, _T),
}
_TOP_KEYS = {"embed": ("model.embed_tokens.weight", _I, _I),
             "final_norm": ("model.norm.weight", _I, _I),
             "lm_head": ("lm_head.weight", _T, _T)}
# GGUF tensor names for the same HF keys (llama.cpp naming).
_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.bias": "attn_output.bias", "mlp.gate_proj.bias": "ffn_gate.bias",
    "mlp.up_proj.bias": "ffn_up.bias", "mlp.down_proj.bias": "ffn_down.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def layer_param_names(cfg: ModelConfig) -> list[str]:
  names = ["attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down"]
  if cfg.qkv_bias:
    names += ["bq", "bk", "bv"]
  if cfg.o_bias:
    names += ["bo"]
  if cfg.mlp_bias:
    names += ["b_gate", "b_up", "b_down"]
  if cfg.qk_norm:
    names += ["q_norm", "k_norm"]
  return names


# ----------------------------------------------------------------------------- sources


class SafetensorsSource:
  """Memory-mapped tensors of a HF checkpoint directory (single or sharded)."""

  def __init__(self, path: str):
    self.path = path
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
      weight_map = read_json(index).get("weight_map")
      if not isinstance(weight_map, dict):
        raise BadModelFile(f"{index}: no 'weight_map' object")
      files = sorted(set(weight_map.values()))
      for fn in files:
        if not os.path.exists(os.path.join(path, fn)):
          raise FileNotFoundError(f"{index}: shard {fn!r} is listed but missing from {path}")
    else:
      files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(path, "*.safetensors")))
      if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors files (pickled .bin checkpoints are "
                                "not loaded, by design)")
    self._where: dict[str, tuple[str, dict, int]] = {}
    for fn in files:
      full = os.path.join(path, fn)
      header, offset = safetensors_header(full, _ST_SIZES)
      for name, info in header.items():
        self._where[name] = (full, info, offset)

  def has(self, key: str) -> bool:
    return key in self._where

  def names(self) -> set[str]:
    """Every tensor name in the checkpoint (its own naming)."""
    return set(self._where)

  def native(self, key: str) -> str:
    return key

  def describe(self, key: str) -> str:
    return f"{self._where[key][0]}:{key}" if key in self._where else f"{self.path}:{key}"

  def get(self, key: str) -> np.ndarray:
    if key not in self._where:
      raise KeyError(f"{self.path}: checkpoint has no tensor {key!r}")
    full, info, offset = self._where[key]
    if info["dtype"] not in _ST_DTYPES:
      raise ValueError(f"{full}:{key}: unsupported safetensors dtype {info['dtype']}")
    start, end = info["data_offsets"]
    dt = np.dtype(_ST_DTYPES[info["dtype"]])
    return np.memmap(full, dtype=dt, mode="r", offset=offset + start,
                     shape=tuple(info["shape"]) if info["shape"] else ()) if end > start else \
        np.zeros(info["shape"], dt)


class GGUFSource:
  """Dequantized tensors of a GGUF file, addressed by HF key."""

  def __init__(self, path: str, cfg: ModelConfig):
    self.path, self.cfg = path, cfg
    self._tensors = {t.name: t for t in open_gguf(path).tensors}

  def _gguf_name(self, key: str) -> str:
    if key.startswith("model.layers."):
      _, _, i, rest = key.split(".", 3)
      return f"blk.{i}.{_GGUF_NAMES[rest]}"
    return _GGUF_NAMES[key]

  def has(self, key: str) -> bool:
    return self._gguf_name(key) in self._tensors

  def names(self) -> set[str]:
    return set(self._tensors)

  def native(self, key: str) -> str:
    return self._gguf_name(key)

  def describe(self, key: str) -> str:
    return f"{self.path}:{self._gguf_name(key)}"

  def get(self, key: str) -> np.ndarray:
    import gguf
    name = self._gguf_name(key)
    if name not in self._tensors:
      raise KeyError(f"{self.path}: GGUF file has no tensor {name!r}")
    t = self._tensors[name]
    try:
      w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
    except NotImplementedError as e:
      raise ValueError(f"{self.path}:{name}: unsupported GGUF quantization type "
                       f"{t.tensor_type.name} (the gguf package cannot dequantize it)") from e
    w = w.reshape(tuple(int(d) for d in reversed(t.shape)))
    if self.cfg.model_type == "llama" and (".attn_q." in name or ".attn_k." in name):
      # llama.cpp interleaves the rotary halves of q/k rows; undo it (HF layout).
      n = self.cfg.num_heads if ".attn_q." in name else self.cfg.num_kv_heads
      w = w.reshape(n, w.shape[0] // n // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    return w


def gguf_config(path: str, **overrides) -> ModelConfig:
  """ModelConfig from GGUF metadata (llama / qwen2 / qwen3 architectures)."""
  r = open_gguf(path)
  meta = r.fields
  arch = meta.get("general.architecture")
  names = {t.name for t in r.tensors}
  if "rope_freqs.weight" in names:
    raise ValueError(f"{path}: GGUF rope_freqs (llama3 rope scaling) is not supported; "
                     "load the HF safetensors checkpoint instead")

  def m(key, default=None):
    full = f"{arch}.{key}"
    if full not in meta and default is None:
      raise KeyError(f"{path}: GGUF metadata is missing {full!r}")
    return meta.get(full, default)

  heads = int(m("attention.head_count"))
  hidden = int(m("embedding_length"))
  d = {"model_type": arch, "vocab_size": int(m("vocab_size", 0)) or
       len(meta["tokenizer.ggml.tokens"]),
       "hidden_size": hidden, "intermediate_size": int(m("feed_forward_length")),
       "num_hidden_layers": int(m("block_count")), "num_attention_heads": heads,
       "num_key_value_heads": int(m("attention.head_count_kv", heads)),
       "head_dim": int(m("attention.key_length", hidden // heads)),
       "rms_norm_eps": float(m("attention.layer_norm_rms_epsilon")),
       "rope_theta": float(m("rope.freq_base", 10000.0)),
       "max_position_embeddings": int(m("context_length", 8192)),
       "tie_word_embeddings": "output.weight" not in names,
       "attention_bias": "blk.0.attn_q.bias" in names,
       "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
       "eos_token_id": meta.get("tokenizer.ggml.eos_token_id")}
  return config_from_hf_dict(d, where=path, **overrides)


# ----------------------------------------------------------------------------- loading


def _expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
  D, H, K, E, F, V = (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                      cfg.intermediate_size, cfg.vocab_size)
  hf = {"input_layernorm.weight": (D,), "self_attn.q_proj.weight": (H * E, D),
        "self_attn.k_proj.weight": (K * E, D), "self_attn.v_proj.weight": (K * E, D),
        "self_attn.o_proj.weight": (D, H * E), "self_attn.q_proj.bias": (H * E,),
        "self_attn.k_proj.bias": (K * E,), "self_attn.v_proj.bias": (K * E,),
        "self_attn.o_proj.bias": (D,), "mlp.gate_proj.bias": (F,), "mlp.up_proj.bias": (F,),
        "mlp.down_proj.bias": (D,),
        "self_attn.q_norm.weight": (E,), "self_attn.k_norm.weight": (E,),
        "post_attention_layernorm.weight": (D,), "mlp.gate_proj.weight": (F, D),
        "mlp.up_proj.weight": (F, D), "mlp.down_proj.weight": (D, F),
        "model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
  return hf


def _read(source, key: str, shapes, cfg, where_key: str) -> np.ndarray:
  if not source.has(key):
    raise KeyError(f"{source.describe(key)}: tensor missing from checkpoint "
                   f"(needed for {cfg.model_type} with this config)")
  w = source.get(key)
  want = shapes[where_key]
  if tuple(w.shape) != want:
    raise ValueError(f"{source.describe(key)}: shape {tuple(w.shape)} disagrees with the config "
                     f"(expected {want})")
  return w


def load_params(source, cfg: ModelConfig, shardings: Mapping | None = None) -> dict:
  """Reads every parameter into a pure dict `{embed, final_norm, [lm_head], layers: {...}}`.

  With `shardings` (same structure, NamedShardings) each array is placed shard by shard.
  """
  shapes = _expected_shapes(cfg)
  pd = np.dtype(cfg.jnp_param_dtype)

  def place(arr: np.ndarray, sharding):
    if sharding is None:
      return jax.numpy.asarray(arr, dtype=pd)
    return jax.make_array_from_callback(arr.shape, sharding,
                                        lambda idx: np.asarray(arr[idx], dtype=pd))

  def sh(*path):
    node = shardings
    for p in path:
      node = None if node is None else node[p]
    return node

  check_all_mapped(source, cfg)
  out: dict = {"layers": {}}
  for name, (key, to_ours, _) in _TOP_KEYS.items():
    if name == "lm_head" and cfg.tie_embeddings:
      continue
    out[name] = place(np.asarray(to_ours(_read(source, key, shapes, cfg, key), cfg)), sh(name))
  for name in layer_param_names(cfg):
    suffix, to_ours, _ = _LAYER_KEYS[name]
    per_layer = [to_ours(_read(source, f"model.layers.{i}.{suffix}", shapes, cfg, suffix), cfg)
                 for i in range(cfg.num_layers)]
    out["layers"][name] = place(np.stack([np.asarray(w) for w in per_layer]), sh("layers", name))
  return out


# Tensors a checkpoint may hold that carry no parameter of the model (recomputed buffers).
_IGNORABLE = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


def mapped_keys(cfg: ModelConfig) -> set[str]:
  """The HF keys this config reads."""
  keys = {key for name, (key, _, _) in _TOP_KEYS.items()
          if not (name == "lm_head" and cfg.tie_embeddings)}
  for name in layer_param_names(cfg):
    keys |= {f"model.layers.{i}.{_LAYER_KEYS[name][0]}" for i in range(cfg.num_layers)}
  return keys


def check_all_mapped(source, cfg: ModelConfig) -> None:
  """Every tensor of the checkpoint is read, or loading stops naming the ones that are not
  (a tensor the config does not describe, e.g. a bias, would otherwise be dropped silently)."""
  used = {source.native(k) for k in mapped_keys(cfg)}
  if cfg.tie_embeddings:  # some tied checkpoints also store the (identical) output matrix
    used |= {source.native("lm_head.weight")}
  extra = sorted(n for n in source.names() - used if not _IGNORABLE.search(n))
  if extra:
    more = f" (and {len(extra) - 8} more)" if len(extra) > 8 else ""
    raise ValueError(f"{source.path}: {len(extra)} checkpoint tensor(s) are not mapped to any "
                     f"parameter of this {cfg.model_type} config: {', '.join(extra[:8])}{more}. "
                     "Check config.json (attention_bias, mlp_bias, tie_word_embeddings, "
                     "num_hidden_layers) against the checkpoint")


def export_safetensors(params: Mapping, cfg: ModelConfig, out_dir: str) -> str:
  """Writes `config.json` + `model.safetensors` (float32) that transformers loads."""
  from safetensors.numpy import save_file
  os.makedirs(out_dir, exist_ok=True)
  tensors: dict[str, np.ndarray] = {}
  for name, (key, _, to_hf) in _TOP_KEYS.items():
    if name in params:
      tensors[key] = np.ascontiguousarray(to_hf(np.asarray(params[name], np.float32), cfg))
  for name in layer_param_names(cfg):
    suffix, _, to_hf = _LAYER_KEYS[name]
    stacked = np.asarray(params["layers"][name], np.float32)
    for i in range(cfg.num_layers):
      tensors[f"model.layers.{i}.{suffix}"] = np.ascontiguousarray(to_hf(stacked[i], cfg))
  path = os.path.join(out_dir, "model.safetensors")
  save_file(tensors, path, metadata={"format": "pt"})
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(path, 0o666 & ~umask)  # save_file leaves its temp file's 0600: readable like the rest
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config_to_hf_dict(cfg), f, indent=2)
  return out_dir


def open_checkpoint(path: str, **overrides):
  """(config, tensor source) for a HF directory or a `.gguf` file."""
  if path.endswith(".gguf"):
    cfg = gguf_config(path, **overrides)
    return cfg, GGUFSource(path, cfg)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"{path}: not a checkpoint directory or .gguf file")
  return load_hf_config(path, **overrides), SafetensorsSource(path)
