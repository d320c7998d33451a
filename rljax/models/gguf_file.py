"""GGUF files in one pass: the metadata as Python values, each tensor as a view of the file.

The `gguf` package's `GGUFReader` makes a numpy view of every part of every metadata
value; a tokenizer's 49k tokens and 49k merges take it 3.8 s on a 2-core machine
(SmolLM2-135M). This reads the same little-endian GGUF (versions 2 and 3) with `struct`
over a memory map, in about 0.1 s, and `open_gguf` keeps the last files read, so the
config, the weights and the tokenizer of one load read the file once. Tensors are
dequantized by the `gguf` package (`GGUFTensor.data` is the view its `dequantize` takes).
A truncated or corrupt file raises `BadModelFile` naming it.
"""
from __future__ import annotations

import functools
import mmap
import os
import struct
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from rljax.models.files import BadModelFile

# GGUF value types -> struct formats (8 = string, 9 = array)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}
_STRING, _ARRAY = 8, 9
# ggml tensor types stored as plain numpy items (F32, F16, I8, I16, I32, I64, F64); the others
# are quantized blocks, read as bytes
_PLAIN_TYPES = {0: np.float32, 1: np.float16, 24: np.int8, 25: np.int16, 26: np.int32,
                27: np.int64, 28: np.float64}


class GGUFTensor(NamedTuple):
  name: str
  tensor_type: Any   # gguf.GGMLQuantizationType
  shape: tuple       # GGUF order: the fastest-varying dimension first (numpy's reversed)
  data: np.ndarray   # plain types: numpy-shaped items; quantized: uint8 rows of blocks


class GGUFFile(NamedTuple):
  path: str
  fields: MappingProxyType  # metadata key -> str | int | float | bool | list
  tensors: tuple            # GGUFTensor, in file order


class _Cursor:
  def __init__(self, buf, path: str):
    self.buf, self.path, self.pos, self.size = buf, path, 0, len(buf)

  def need(self, n: int) -> None:
    if n < 0 or self.pos + n > self.size:
      raise BadModelFile(f"{self.path}: not a readable GGUF file (corrupt or truncated? "
                         f"{n} bytes wanted at offset {self.pos} of {self.size})")

  def scalar(self, fmt: str):
    n = struct.calcsize(fmt)
    self.need(n)
    (v,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
    self.pos += n
    return v

  def string(self) -> str:
    n = self.scalar("Q")
    self.need(n)
    s = self.buf[self.pos:self.pos + n]
    self.pos += n
    try:
      return s.decode("utf-8")
    except UnicodeDecodeError as e:
      raise BadModelFile(f"{self.path}: not a readable GGUF file (a string at offset "
                         f"{self.pos - n} is not UTF-8: {e.reason})") from e

  def value(self, vtype: int):
    if vtype in _SCALAR:
      return self.scalar(_SCALAR[vtype])
    if vtype == _STRING:
      return self.string()
    if vtype == _ARRAY:
      etype, n = self.scalar("I"), self.scalar("Q")
      if etype in _SCALAR:
        dt = np.dtype("<" + _SCALAR[etype])
        self.need(n * dt.itemsize)
        out = np.frombuffer(self.buf, dt, n, self.pos).tolist()
        self.pos += n * dt.itemsize
        return out
      self.need(8 * n)  # every string or array element takes at least 8 bytes
      return [self.value(etype) for _ in range(n)]
    raise BadModelFile(f"{self.path}: not a readable GGUF file (unknown value type {vtype} "
                       f"at offset {self.pos - 4})")


def read_gguf(path: str) -> GGUFFile:
  """Parses `path` (little-endian GGUF v2 / v3); BadModelFile names it if it is bad."""
  from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
  from gguf.quants import quant_shape_to_byte_shape
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no such GGUF file")
  with open(path, "rb") as f:
    try:
      buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError as e:  # an empty file
      raise BadModelFile(f"{path}: not a readable GGUF file (empty)") from e
  c = _Cursor(buf, path)
  c.need(24)
  magic, version = bytes(buf[:4]), struct.unpack_from("<I", buf, 4)[0]
  if magic != b"GGUF" or version not in (2, 3):
    raise BadModelFile(f"{path}: not a readable GGUF file (magic {magic!r}, version "
                       f"{version}; little-endian GGUF v2 / v3 expected)")
  c.pos = 8
  n_tensors, n_kv = c.scalar("Q"), c.scalar("Q")
  c.need(12 * n_kv + 24 * n_tensors)  # the least each entry takes
  fields = {}
  for _ in range(n_kv):
    key = c.string()
    fields[key] = c.value(c.scalar("I"))
  infos = []
  for _ in range(n_tensors):
    name = c.string()
    n_dims = c.scalar("I")
    c.need(8 * n_dims)
    dims = tuple(np.frombuffer(buf, "<u8", n_dims, c.pos).tolist())
    c.pos += 8 * n_dims
    infos.append((name, dims, c.scalar("I"), c.scalar("Q")))
  align = int(fields.get("general.alignment", 32))
  start = -(-c.pos // align) * align
  tensors, seen = [], set()
  for name, dims, raw_type, offset in infos:
    if name in seen:
      raise BadModelFile(f"{path}: not a readable GGUF file (tensor {name!r} twice)")
    seen.add(name)
    try:
      qtype = GGMLQuantizationType(raw_type)
    except ValueError as e:
      raise BadModelFile(f"{path}:{name}: unknown GGUF tensor type {raw_type}") from e
    block, type_size = GGML_QUANT_SIZES[qtype]
    n_elems = int(np.prod(dims, dtype=np.int64))
    n_bytes = n_elems * type_size // block
    at = start + offset
    if at + n_bytes > len(buf):
      raise BadModelFile(f"{path}:{name}: truncated file: the tensor's bytes end at "
                         f"{at + n_bytes} but the file holds {len(buf)}")
    np_dims = tuple(reversed(dims))
    if raw_type in _PLAIN_TYPES:
      data = np.frombuffer(buf, _PLAIN_TYPES[raw_type], n_elems, at).reshape(np_dims)
    else:
      data = np.frombuffer(buf, np.uint8, n_bytes, at).reshape(
          quant_shape_to_byte_shape(np_dims, qtype))
    tensors.append(GGUFTensor(name, qtype, dims, data))
  return GGUFFile(path, MappingProxyType(fields), tuple(tensors))


@functools.lru_cache(maxsize=4)
def _cached(path: str, size: int, mtime_ns: int) -> GGUFFile:
  del size, mtime_ns  # the key: a rewritten file is read again
  return read_gguf(path)


def open_gguf(path: str) -> GGUFFile:
  """`read_gguf(path)`, kept for the next call while the file is unchanged (same size and
  modification time): one model load reads its config, tensors and tokenizer from it."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no such GGUF file")
  st = os.stat(path)
  return _cached(os.path.abspath(path), st.st_size, st.st_mtime_ns)
