"""The accelerator a traced program targets, and the attention it uses there: the one place
where rljax chooses per backend.

| platform | `attention="auto"` (training, scoring, sampler prefill) | sampler decode |
|---|---|---|
| TPU | "splash": Pallas splash attention (`rljax.models.pallas_attention`) | the paged Pallas kernel for bfloat16 caches, else dense |
| GPU | "cudnn": `jax.nn.dot_product_attention`, cuDNN's fused kernel, for bfloat16 / float16 compute; "dense" for float32 (cuDNN's fused attention has no float32 kernel) | dense (XLA) |
| CPU | "dense" | the compiled decode kernel (`rljax.models.cpu_attention`) for a float32 cache on one device, else dense |

"cudnn" set explicitly off GPU runs the same `jax.nn.dot_product_attention` with its XLA
implementation, which is how the CPU tests check its masks and gradients. Everything else
(float32 softmax, norms and log-probs; donation; mesh sharding) is the same on every
platform.
"""
from __future__ import annotations

import jax

PLATFORMS = ("cpu", "gpu", "tpu")


def platform() -> str:
  """"tpu", "gpu" or "cpu": the context mesh's devices (an AOT compile for a TPU slice from
  a CPU host says "tpu"), else JAX's default backend. CUDA and ROCm both read "gpu"."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh.empty else mesh.abstract_device
  name = getattr(device, "platform", None) or jax.default_backend()
  return "gpu" if name in ("gpu", "cuda", "rocm") else name


def attention_impl(cfg, on: str | None = None) -> str:
  """`cfg.attention` (a `ModelConfig`) with "auto" resolved for platform `on` (default: the
  program being traced)."""
  if cfg.attention != "auto":
    return cfg.attention
  on = on or platform()
  if on == "tpu":
    return "splash"
  if on == "gpu" and cfg.dtype != "float32":
    return "cudnn"
  return "dense"


def sdpa_implementation(on: str | None = None) -> str:
  """The `implementation=` of `jax.nn.dot_product_attention` for attention="cudnn": cuDNN's
  kernel on GPU, XLA's elsewhere."""
  return "cudnn" if (on or platform()) == "gpu" else "xla"
