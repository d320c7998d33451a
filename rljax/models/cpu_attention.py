"""The sampler's decode-step attention on CPU as a compiled kernel (`csrc/decode_attention.cc`).

XLA:CPU copies a dynamic slice before a matmul reads it, so the rolled layer scan of a decode
step copied layer i's cache window out of the `[L, B, K, S, E]` stack at every step, then ran
the two attention products as batched matmuls of G = 3 query rows. The kernel reads the
window where it lies in the stack (the layer index and the filled length are run-time
operands) and the shared prompt cache in place for every row of its prompt: on SmolLM2's
shapes a step's attention ran 1.05–2.4× faster (`bench/decode_attention.py`, bench/README.md).
As the length is a run-time operand, one decode program serves every step (no attention
buckets).

The kernel is C++ against XLA's FFI headers (shipped in jaxlib), built on first use with the
system's C++ compiler (`$CXX`, else `g++`) into `$RLJAX_CACHE_DIR` (default
`~/.cache/rljax`), keyed by the source, jaxlib's version and this CPU, and loaded with
`jax.ffi`. Where it cannot be built (no compiler), `available()` says why and the sampler
keeps XLA's attention; `RLJAX_CPU_KERNELS=0` turns it off.

Each row's arithmetic depends on nothing but its own keys (not the batch size, the rows next
to it, or how many rows share its prefix), so a compacting sampler draws the same samples as
the plain one. Against XLA's attention it differs in the last bits (another summation order,
libm's exp): `tests/models/test_cpu_attention.py`.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading

import jax
import jax.numpy as jnp

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "decode_attention.cc")
_FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-pthread")
_TARGETS = {"own": "rljax_decode_attention", "prefix": "rljax_decode_attention_prefix"}
_lock = threading.Lock()
_state: dict = {}


def _cpu_id() -> str:
  """The CPU the build targets (-march=native): model and flags from /proc/cpuinfo."""
  try:
    with open("/proc/cpuinfo") as f:
      lines = [ln for ln in f.read().splitlines()
               if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(lines)))
  except OSError:
    return platform.processor() or platform.machine()


def library_path() -> str:
  """Where the built kernel lives for this source, jaxlib and CPU."""
  import jaxlib
  cxx = os.environ.get("CXX", "g++")
  key = hashlib.sha256()
  for part in (open(SOURCE, "rb").read(), jaxlib.__version__.encode(), cxx.encode(),
               " ".join(_FLAGS).encode(), _cpu_id().encode()):
    key.update(part)
  root = os.environ.get("RLJAX_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "rljax")
  return os.path.join(root, "kernels", key.hexdigest()[:16], "decode_attention.so")


def _build(path: str) -> None:
  cxx = os.environ.get("CXX", "g++")
  if shutil.which(cxx) is None:
    raise RuntimeError(f"no C++ compiler: {cxx!r} is not on PATH (set CXX)")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
  os.close(fd)
  cmd = [cxx, *_FLAGS, f"-I{jax.ffi.include_dir()}", SOURCE, "-o", tmp]
  done = subprocess.run(cmd, capture_output=True, text=True)
  if done.returncode:
    os.unlink(tmp)
    raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
  os.replace(tmp, path)  # atomic: concurrent builders (pytest -n) each leave a whole file


def available() -> bool:
  """Whether the kernel is built, loaded and registered (building it on first call)."""
  if os.environ.get("RLJAX_CPU_KERNELS", "1") == "0":
    return False
  with _lock:
    if "ok" not in _state:
      try:
        path = library_path()
        if not os.path.exists(path):
          _build(path)
        lib = ctypes.cdll.LoadLibrary(path)
        jax.ffi.register_ffi_target(_TARGETS["own"], jax.ffi.pycapsule(lib.DecodeAttention),
                                    platform="cpu")
        jax.ffi.register_ffi_target(_TARGETS["prefix"],
                                    jax.ffi.pycapsule(lib.DecodeAttentionPrefix),
                                    platform="cpu")
        _state.update(ok=True, why="")
      except Exception as e:  # noqa: BLE001 - any failure leaves XLA's attention in use
        _state.update(ok=False, why=f"{type(e).__name__}: {e}")
  return _state["ok"]


def why_unavailable() -> str:
  """The reason `available()` is False ("" when it is True or was not asked yet)."""
  return _state.get("why", "")


def decode_attention(q_BxHxE, k_LxBxKxSxE, v_LxBxKxSxE, valid_BxS, layer, length,
                     prefix=None):
  """Attention of one decode step for layer `layer` over the rows' first `length` cache
  slots (where `valid_BxS`), after a shared prompt cache if `prefix` = (pk_LxPxKxSpxE,
  pv_LxPxKxSpxE, pvalid_PxSp) (row b reads prefix b // (B / P)). float32; [B, H, E]."""
  if not available():
    raise RuntimeError(f"decode_attention: the CPU kernel is unavailable: {why_unavailable()}")
  f32 = jnp.float32
  if any(x.dtype != f32 for x in (q_BxHxE, k_LxBxKxSxE, v_LxBxKxSxE)):
    raise TypeError("decode_attention: float32 queries and cache only")
  scalar = lambda x: jnp.asarray(x, jnp.int32).reshape(())
  args = [q_BxHxE, k_LxBxKxSxE, v_LxBxKxSxE, valid_BxS.astype(jnp.uint8), scalar(layer),
          scalar(length)]
  target = _TARGETS["own"]
  if prefix is not None:
    pk, pv, pvalid = prefix
    if pk.dtype != f32 or pv.dtype != f32:
      raise TypeError("decode_attention: float32 prefix cache only")
    args += [pk, pv, pvalid.astype(jnp.uint8)]
    target = _TARGETS["prefix"]
  out = jax.ShapeDtypeStruct(q_BxHxE.shape, f32)
  return jax.ffi.ffi_call(target, out, vmap_method="sequential")(*args)
