"""LoRA and QLoRA: low-rank adapters on the decoder's projections over a frozen base.

A target projection W (viewed as [in, out], the 2-D form the decoder multiplies with) gets
y = x W + (α / r) · (x A) B, with A [in, r] and B [r, out] stacked over the L layers like W:
`adapters = {"wq": {"a": [L, in, r], "b": [L, r, out]}, ...}`. B starts at 0, so the
adapted model equals the base at initialization; A starts uniform in ±1/√in (PEFT's
`kaiming_uniform_(a=√5)`).

Only the adapters are trained: the train state's params are `adapters`, and the frozen base
travels beside them (the step's `ref_params`), so no gradient is computed for the base and it
has no optimizer state. The base with the adapters off is the initial policy, the KL / CoRT
reference, without a second copy of the weights. The sampler draws from the merged weights
W + (α / r) · A B (`merge`), computed on device at each weight sync.

QLoRA (`base_bits` 8 or 4): the frozen base's projections, embedding and LM head are stored as
integers on the absmax grid of each output channel (an embedding row; int4 packed two per
byte along the last axis) with one float32 scale per channel (`<name>_scale`). The decoder
dequantizes each layer's weight inside its matmul, the embedding rows it looks up, and the
unembedding where the logits are computed. Norms (and biases) stay in float.
"""
from __future__ import annotations

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np

from rljax.models.quant import WEIGHT_INPUT_AXES, pack_int4, quantize, unpack_int4

# The projections a LoRA can target, with the input axes of each stacked weight after L.
PROJECTIONS = WEIGHT_INPUT_AXES
# The QLoRA base's top-level matrices and the axis each channel's absmax runs over:
# embedding rows ([V, D]: over D), LM head columns ([D, V]: over D).
EMBEDDINGS = {"embed": (1,), "lm_head": (0,)}
ALL_TARGETS = "|".join(PROJECTIONS)
@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """Static LoRA settings (hashable: part of the decoder's graph definition).

  rank r, alpha α (the update is scaled by α / r), `targets` a regex fully matched against
  the projection names (wq wk wv wo w_gate w_up w_down), `base_bits` 0 (float base) or 8 / 4
  (QLoRA: an integer base)."""
  rank: int
  alpha: float = 32.0
  targets: str = ALL_TARGETS
  base_bits: int = 0

  def __post_init__(self):
    if not (isinstance(self.rank, int) and self.rank > 0):
      raise ValueError(f"lora rank={self.rank!r} must be an int > 0")
    if not self.alpha > 0:
      raise ValueError(f"lora alpha={self.alpha!r} must be > 0")
    if self.base_bits not in (0, 4, 8):
      raise ValueError(f"lora base_bits={self.base_bits}; choose 0 (float base), 8 or 4")
    try:
      pattern = re.compile(self.targets)
    except re.error as e:
      raise ValueError(f"lora targets={self.targets!r}: not a regex ({e})") from e
    if not any(pattern.fullmatch(n) for n in PROJECTIONS):
      raise ValueError(f"lora targets={self.targets!r} matches no projection; the "
                       f"projections are {', '.join(PROJECTIONS)}")

  @property
  def scale(self) -> float:
    return self.alpha / self.rank

  @property
  def names(self) -> tuple[str, ...]:
    """The targeted projections, in the decoder's order."""
    pattern = re.compile(self.targets)
    return tuple(n for n in PROJECTIONS if pattern.fullmatch(n))


def io_sizes(cfg) -> dict[str, tuple[int, int]]:
  """(in, out) of each projection as the decoder multiplies it (a ModelConfig)."""
  d, f = cfg.hidden_size, cfg.intermediate_size
  q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
  return {"wq": (d, q), "wk": (d, kv), "wv": (d, kv), "wo": (q, d), "w_gate": (d, f),
          "w_up": (d, f), "w_down": (f, d)}


def adapter_shapes(cfg, lora: LoraConfig, dtype=jnp.float32) -> dict:
  """ShapeDtypeStructs of the adapters of `cfg` (a ModelConfig)."""
  sizes, l, r = io_sizes(cfg), cfg.num_layers, lora.rank
  return {n: {"a": jax.ShapeDtypeStruct((l, sizes[n][0], r), dtype),
              "b": jax.ShapeDtypeStruct((l, r, sizes[n][1]), dtype)} for n in lora.names}


def adapter_shardings(shapes: dict, mesh) -> dict:
  """NamedShardings of an adapter tree (`rljax.sharding.PARAM_AXES`: A's input and B's output
  dimension split like the projection's, the rank whole)."""
  from rljax import sharding as shd
  return shd.param_shardings(shapes, mesh)


def init_adapters(cfg, lora: LoraConfig, seed: int = 0, mesh=None, dtype=jnp.float32) -> dict:
  """A ~ U(±1/√in), B = 0 (the adapted model equals the base), placed in their shardings.
  Drawn with NumPy from `seed` (the same values on every process; no program to compile)."""
  shapes = adapter_shapes(cfg, lora, dtype)
  sh = None if mesh is None else adapter_shardings(shapes, mesh)
  rng = np.random.default_rng(seed)
  out = {}
  for n, ab in shapes.items():
    a_shape, b_shape = ab["a"].shape, ab["b"].shape
    bound = 1.0 / math.sqrt(a_shape[1])
    host = {"a": rng.uniform(-bound, bound, a_shape).astype(dtype),
            "b": np.zeros(b_shape, dtype)}
    out[n] = {p: (jnp.asarray(x) if sh is None else jax.make_array_from_callback(
        x.shape, sh[n][p], lambda idx, x=x: x[idx])) for p, x in host.items()}
  return out


def delta(ab: dict, scale: float, shape) -> jax.Array:
  """(α / r) · A B of one projection, in float32, reshaped to the stacked weight's `shape`."""
  ab_f = jnp.einsum("lir,lro->lio", ab["a"].astype(jnp.float32), ab["b"].astype(jnp.float32))
  return (scale * ab_f).reshape(shape)


# ------------------------------------------------------------------------------ QLoRA base


def _to_int(w, axes, bits):
  q, scale = quantize(w, axes, bits)
  return (pack_int4(q) if bits == 4 else q.astype(jnp.int8)), scale


def quantize_base(pure: dict, bits: int) -> dict:
  """A float param tree -> the QLoRA base: each projection, the embedding and the LM head as
  int8 values on the absmax grid of its output channels / rows (int4: packed two per byte
  along the last axis) and a float32 `<name>_scale`; norms and biases unchanged. Jit-able."""
  layers = dict(pure["layers"])
  for n, axes in PROJECTIONS.items():
    layers[n], layers[f"{n}_scale"] = _to_int(layers[n], axes, bits)
  out = dict(pure, layers=layers)
  for n, axes in EMBEDDINGS.items():
    if n in pure:
      out[n], out[f"{n}_scale"] = _to_int(pure[n], axes, bits)
  return out


def dequantize(q, scale, bits: int, dtype=jnp.float32) -> jax.Array:
  """Inverse of `quantize_base` for one weight (up to the rounding): float `dtype`."""
  v = unpack_int4(q) if bits == 4 else q
  return (v.astype(jnp.float32) * scale).astype(dtype)


def quantized_names(layers: dict) -> tuple[str, ...]:
  return tuple(n for n in PROJECTIONS if f"{n}_scale" in layers)


def merge(base: dict, adapters: dict | None, lora: LoraConfig, dtype=None) -> dict:
  """The plain decoder's params: W + (α / r) · A B for each target (a QLoRA base dequantized
  first), in the base's float dtype (or `dtype`), every other parameter as is. Jit-able; the
  sampler, the eval and the export read these."""
  float_dtype = dtype or (base["final_norm"].dtype)
  layers = dict(base["layers"])
  for n in quantized_names(layers):
    layers[n] = dequantize(layers[n], layers.pop(f"{n}_scale"), lora.base_bits, jnp.float32)
  for n in PROJECTIONS:
    w = layers[n].astype(jnp.float32)
    if adapters is not None and n in adapters:
      w = w + delta(adapters[n], lora.scale, w.shape)
    layers[n] = w.astype(float_dtype)
  out = {k: v for k, v in base.items() if not k.endswith("_scale")}
  for n in EMBEDDINGS:
    if f"{n}_scale" in base:
      out[n] = dequantize(base[n], base[f"{n}_scale"], lora.base_bits, float_dtype)
  return dict(out, layers=layers)


# Hugging Face module of each projection (PEFT's target_modules).
HF_MODULES = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
              "wo": "self_attn.o_proj", "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj",
              "w_down": "mlp.down_proj"}


def export_peft(adapters: dict, lora: LoraConfig, out_dir: str, base_model: str = "") -> str:
  """A PEFT LoRA adapter directory (`adapter_config.json` + `adapter_model.safetensors`) that
  `peft.PeftModel.from_pretrained(<the transformers base model>, out_dir)` loads: per layer
  i, lora_A.weight = A[i]ᵀ [r, in] and lora_B.weight = B[i]ᵀ [out, r] (PEFT computes
  x Aᵀ Bᵀ · α / r; the projections' flattened (head, dim) order is the HF weights' row
  order). A QLoRA run's adapters were trained over the integer base; on the float base
  they give its policy up to the base's rounding."""
  import json
  import os

  from safetensors.numpy import save_file
  tensors = {}
  for n, ab in adapters.items():
    a, b = np.asarray(ab["a"], np.float32), np.asarray(ab["b"], np.float32)
    for i in range(a.shape[0]):
      key = f"base_model.model.model.layers.{i}.{HF_MODULES[n]}"
      tensors[f"{key}.lora_A.weight"] = np.ascontiguousarray(a[i].T)
      tensors[f"{key}.lora_B.weight"] = np.ascontiguousarray(b[i].T)
  os.makedirs(out_dir, exist_ok=True)
  save_file(tensors, os.path.join(out_dir, "adapter_model.safetensors"))
  config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank,
            "lora_alpha": lora.alpha, "target_modules": sorted(HF_MODULES[n].split(".")[-1]
                                                               for n in adapters),
            "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
            "use_rslora": False, "use_dora": False, "init_lora_weights": True,
            "inference_mode": True, "modules_to_save": None,
            "base_model_name_or_path": base_model}
  with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
    json.dump(config, f, indent=2)
  return out_dir


def nbytes(tree) -> int:
  """Bytes of the arrays in a tree (what it occupies at rest)."""
  return int(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


__all__ = ["LoraConfig", "PROJECTIONS", "ALL_TARGETS", "io_sizes", "adapter_shapes",
           "adapter_shardings", "init_adapters", "delta", "quantize_base", "dequantize",
           "merge", "export_peft", "HF_MODULES", "nbytes"]
