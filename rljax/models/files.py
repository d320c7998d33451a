"""Opening model files with errors that name the file (and tensor) when they are bad.

A truncated download or a corrupt file otherwise surfaces as `mmap length is
greater than file size`, `struct.error` or a JSON error with no path in it.
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np


class BadModelFile(ValueError):
  """A model file that cannot be read; the message starts with its path."""


def read_json(path: str) -> dict:
  """A JSON object from `path`; bad bytes or syntax name the file, line and column."""
  try:
    with open(path, encoding="utf-8") as f:
      obj = json.load(f)
  except UnicodeDecodeError as e:
    raise BadModelFile(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from e
  except json.JSONDecodeError as e:
    raise BadModelFile(f"{path}:{e.lineno}:{e.colno}: malformed JSON: {e.msg}") from e
  if not isinstance(obj, dict):
    raise BadModelFile(f"{path}: expected a JSON object, got {type(obj).__name__}")
  return obj


def safetensors_header(path: str, dtype_sizes: dict[str, int]) -> tuple[dict, int]:
  """(tensor infos, data offset) of a .safetensors file, checked against the file size.

  Raises BadModelFile naming the file (and the tensor) for a truncated file, a
  corrupt header, or a tensor whose byte range disagrees with its shape.
  """
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    head = f.read(8)
    if len(head) < 8:
      raise BadModelFile(f"{path}: truncated safetensors file ({size} bytes; the header "
                         "length alone takes 8)")
    (n,) = struct.unpack("<Q", head)
    if n > size - 8:
      raise BadModelFile(f"{path}: corrupt or truncated safetensors file: header length {n} "
                         f"> {size - 8} bytes after it")
    raw = f.read(n)
  try:
    header = json.loads(raw)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise BadModelFile(f"{path}: corrupt safetensors header ({type(e).__name__}: {e})") from e
  if not isinstance(header, dict):
    raise BadModelFile(f"{path}: corrupt safetensors header (not a JSON object)")
  header.pop("__metadata__", None)
  data = size - 8 - n
  for name, info in header.items():
    try:
      start, end = (int(x) for x in info["data_offsets"])
      shape = tuple(int(d) for d in info["shape"])
      dtype = info["dtype"]
    except (KeyError, TypeError, ValueError) as e:
      raise BadModelFile(f"{path}:{name}: corrupt safetensors header entry {info!r}") from e
    if end > data:
      raise BadModelFile(f"{path}:{name}: truncated file: the tensor's bytes end at {end} "
                         f"but the file holds {data} data bytes")
    if dtype in dtype_sizes and end - start != int(np.prod(shape)) * dtype_sizes[dtype]:
      raise BadModelFile(f"{path}:{name}: {end - start} bytes for shape {shape} {dtype}")
  return header, 8 + n

