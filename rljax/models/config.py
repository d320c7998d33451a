"""Decoder config: one frozen dataclass for Llama / Qwen2 / Qwen3, read from HF or GGUF."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import jax.numpy as jnp

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
ATTENTION_IMPLS = ("dense", "blockwise", "splash", "cudnn", "auto")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Static description of a decoder; hashable so it can be a jit static arg."""
  model_type: str
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  # Llama-3 style scaling: (factor, low_freq_factor, high_freq_factor, original_max_pos).
  rope_llama3: tuple[float, float, float, int] | None = None
  qkv_bias: bool = False
  o_bias: bool = False  # Llama attention_bias: o_proj has a bias too
  mlp_bias: bool = False  # Llama mlp_bias: gate / up / down biases
  qk_norm: bool = False
  tie_embeddings: bool = False
  max_position_embeddings: int = 8192
  bos_token_id: int | None = None
  eos_token_id: int | tuple[int, ...] | None = None
  param_dtype: str = "float32"
  dtype: str = "float32"  # compute dtype of matmuls; logits for logprobs are float32.
  # Full-sequence (training) attention: "dense" keeps the float32 [B,H,T,T] scores for the
  # backward; "blockwise" (flash-style, rljax.models.attention) recomputes them per block;
  # "splash" is the Pallas TPU kernels (rljax.models.pallas_attention): splash attention
  # there and paged attention for bfloat16 decode steps (interpret mode off TPU: slow);
  # "cudnn" is jax.nn.dot_product_attention (cuDNN's fused kernel on GPU, XLA's elsewhere)
  # for training, scoring and prefill; "auto" is "splash" on TPU, "cudnn" on GPU with
  # bfloat16 compute, "dense" elsewhere (rljax.models.backend).
  attention: str = "dense"
  # "dense" only: the cache-less forward's queries in blocks of this many, each against the
  # keys up to its last query (rljax.models.attention.attention; 0: one [T, T] block). On
  # XLA:CPU 64 made the SmolLM2 train step 1.04x (T = 256) to 1.20x (T = 592) faster than
  # one block (bench/README.md, "Where the train step's time goes").
  causal_block: int = 64

  def __post_init__(self):
    if self.model_type not in SUPPORTED_ARCHITECTURES:
      raise ValueError(f"unsupported architecture {self.model_type!r}; "
                       f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    for name in ("param_dtype", "dtype"):
      if getattr(self, name) not in _DTYPES:
        raise ValueError(f"{name}={getattr(self, name)!r}; choose one of {sorted(_DTYPES)}")
    if self.attention not in ATTENTION_IMPLS:
      raise ValueError(f"attention={self.attention!r}; choose one of {ATTENTION_IMPLS}")
    if self.causal_block < 0:
      raise ValueError(f"causal_block={self.causal_block}; 0 (off) or a block of queries")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                       f"num_kv_heads={self.num_kv_heads}")

  @property
  def jnp_param_dtype(self):
    return _DTYPES[self.param_dtype]

  @property
  def jnp_dtype(self):
    return _DTYPES[self.dtype]

  def replace(self, **kw) -> "ModelConfig":
    return dataclasses.replace(self, **kw)


def _require(d: Mapping[str, Any], key: str, where: str):
  if key not in d:
    raise KeyError(f"{where}: missing required key {key!r}")
  return d[key]


def _rope_from_hf(d: Mapping[str, Any], where: str):
  """Returns (theta, llama3 tuple or None) from either the v4 or v5 HF layout."""
  params = dict(d.get("rope_parameters") or {})
  scaling = dict(d.get("rope_scaling") or {})
  theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
  merged = {**scaling, **params}
  rope_type = merged.get("rope_type", merged.get("type", "default"))
  if rope_type in (None, "default"):
    return float(theta), None
  if rope_type != "llama3":
    raise ValueError(f"{where}: unsupported rope type {rope_type!r} (supported: default, llama3)")
  keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
  missing = [k for k in keys if k not in merged]
  if missing:
    raise KeyError(f"{where}: llama3 rope scaling is missing {missing}")
  return float(theta), (float(merged["factor"]), float(merged["low_freq_factor"]),
                        float(merged["high_freq_factor"]),
                        int(merged["original_max_position_embeddings"]))


def config_from_hf_dict(d: Mapping[str, Any], where: str = "config.json",
                        **overrides) -> ModelConfig:
  """Builds a ModelConfig from a Hugging Face `config.json` dict."""
  model_type = _require(d, "model_type", where)
  if model_type not in SUPPORTED_ARCHITECTURES:
    raise ValueError(f"{where}: unsupported architecture {model_type!r}; "
                     f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
  hidden = int(_require(d, "hidden_size", where))
  heads = int(_require(d, "num_attention_heads", where))
  theta, llama3 = _rope_from_hf(d, where)
  eos = d.get("eos_token_id")
  kw = dict(
      model_type=model_type,
      vocab_size=int(_require(d, "vocab_size", where)),
      hidden_size=hidden,
      intermediate_size=int(_require(d, "intermediate_size", where)),
      num_layers=int(_require(d, "num_hidden_layers", where)),
      num_heads=heads,
      num_kv_heads=int(d.get("num_key_value_heads") or heads),
      head_dim=int(d.get("head_dim") or hidden // heads),
      rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
      rope_theta=theta,
      rope_llama3=llama3,
      qkv_bias=model_type == "qwen2" or bool(d.get("attention_bias", False)),
      o_bias=model_type == "llama" and bool(d.get("attention_bias", False)),
      mlp_bias=bool(d.get("mlp_bias", False)),
      qk_norm=model_type == "qwen3",
      tie_embeddings=bool(d.get("tie_word_embeddings", False)),
      max_position_embeddings=int(d.get("max_position_embeddings", 8192)),
      bos_token_id=d.get("bos_token_id"),
      eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
  )
  kw.update(overrides)
  return ModelConfig(**kw)


def load_hf_config(path: str, **overrides) -> ModelConfig:
  """Reads `<dir>/config.json`."""
  fname = os.path.join(path, "config.json")
  if not os.path.exists(fname):
    raise FileNotFoundError(f"{fname}: no config.json in checkpoint directory {path}")
  from rljax.models.files import read_json
  return config_from_hf_dict(read_json(fname), where=fname, **overrides)


def config_to_hf_dict(cfg: ModelConfig) -> dict[str, Any]:
  """The HF `config.json` dict that transformers reads back as the same model."""
  rope: dict[str, Any] = {"rope_theta": cfg.rope_theta, "rope_type": "default"}
  if cfg.rope_llama3:
    f, lo, hi, orig = cfg.rope_llama3
    rope = {"rope_theta": cfg.rope_theta, "rope_type": "llama3", "factor": f,
            "low_freq_factor": lo, "high_freq_factor": hi,
            "original_max_position_embeddings": orig}
  arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
          "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[cfg.model_type]
  d = dict(architectures=[arch], model_type=cfg.model_type, vocab_size=cfg.vocab_size,
           hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
           num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
           num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
           rms_norm_eps=cfg.rms_norm_eps, rope_parameters=rope, hidden_act="silu",
           tie_word_embeddings=cfg.tie_embeddings,
           max_position_embeddings=cfg.max_position_embeddings,
           bos_token_id=cfg.bos_token_id, torch_dtype="float32")
  d["eos_token_id"] = list(cfg.eos_token_id) if isinstance(cfg.eos_token_id, tuple) \
      else cfg.eos_token_id
  if cfg.model_type in ("llama", "mistral"):
    d["attention_bias"] = cfg.qkv_bias
  if cfg.mlp_bias:
    d["mlp_bias"] = True
  return d
