"""Run-directory paths, local or in a bucket (`gs://...`), through one code path.

`path(p)` is an `etils.epath.Path`: local paths use the OS, `gs://` ones use fsspec's
GCS filesystem (the `gcsfs` package; no TensorFlow). `check_writable(p)` refuses a
remote path whose filesystem is not installed, before anything runs, with the package
to install. Orbax checkpoints take the same paths (its tensorstore driver writes the
arrays to the bucket itself; orbax also asks google-cloud-storage, a gcsfs dependency,
whether the bucket has a hierarchical namespace). tests/test_paths.py runs both against a
local fake bucket (tests/gcs_fake.py).

Objects in a bucket cannot be appended to; `append_lines` rewrites the whole (small)
file instead, so metrics.jsonl works on both.
"""
from __future__ import annotations

import os
import shutil
from typing import Iterable

from etils import epath

REMOTE_SCHEMES = {"gs": ("gcsfs", "gcsfs==2026.10.1"), "s3": ("s3fs", "s3fs==2026.10.1")}


def is_remote(p) -> bool:
  return "://" in os.fspath(p)


def scheme(p) -> str | None:
  s = os.fspath(p)
  return s.split("://", 1)[0] if "://" in s else None


def check_writable(p) -> None:
  """A clear error when `p` is a bucket path whose fsspec filesystem is not installed."""
  s = scheme(p)
  if s is None:
    return
  if s not in REMOTE_SCHEMES:
    raise ValueError(f"{os.fspath(p)}: unsupported scheme {s}://; use a local path or "
                     f"{', '.join(k + '://' for k in REMOTE_SCHEMES)}")
  import fsspec
  module, pin = REMOTE_SCHEMES[s]
  try:
    fsspec.get_filesystem_class("gcs" if s == "gs" else s)
  except (ImportError, ValueError) as e:
    raise ImportError(f"{os.fspath(p)}: writing to {s}:// needs the `{module}` package "
                      f"(pip install {pin}; it comes with requirements-tpu.txt); "
                      f"fsspec said: {e}") from None


def path(p) -> epath.Path:
  check_writable(p)
  return epath.Path(p)


def makedirs(p) -> epath.Path:
  out = path(p)
  out.mkdir(parents=True, exist_ok=True)
  return out


def write_text(p, text: str) -> None:
  """Replaces the file whole: a reader (another process of the run checking config.json)
  sees the old or the new text, never a truncated one. Local files go through a temp file
  and `os.replace`; a bucket object appears only once written."""
  q = path(p)
  q.parent.mkdir(parents=True, exist_ok=True)
  if is_remote(q):
    q.write_text(text)
    return
  tmp = q.parent / f".{q.name}.{os.getpid()}.tmp"
  tmp.write_text(text)
  os.replace(tmp, q)


def read_text(p) -> str:
  return path(p).read_text()


def exists(p) -> bool:
  return path(p).exists()


def append_lines(p, lines: Iterable[str], cache: list[str] | None = None) -> None:
  """Appends lines to a text file; on a bucket, rewrites it from `cache` (the file's
  lines so far, kept by the caller) since objects cannot be appended to."""
  lines = list(lines)
  if not is_remote(p):
    with open(p, "a") as f:
      f.writelines(line + "\n" for line in lines)
    return
  if cache is None:
    q = path(p)
    cache = q.read_text().splitlines() if q.exists() else []
  cache.extend(lines)
  path(p).write_text("".join(line + "\n" for line in cache))


def upload_dir(local: str, remote) -> None:
  """Copies the files of a local directory (e.g. TensorBoard events) to `remote`."""
  dst = makedirs(remote)
  for root, _, files in os.walk(local):
    rel = os.path.relpath(root, local)
    for name in files:
      target = dst if rel == "." else dst / rel
      target.mkdir(parents=True, exist_ok=True)
      with open(os.path.join(root, name), "rb") as f:
        (target / name).write_bytes(f.read())


def local_cache_dir(*parts: str) -> str:
  """A local directory for files that must be on a local disk (TFDS array_record data of
  a run whose workdir is a bucket): $RLJAX_CACHE or ~/.cache/rljax."""
  base = os.environ.get("RLJAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "rljax")
  out = os.path.join(base, *parts)
  os.makedirs(out, exist_ok=True)
  return out


def remove_tree(p) -> None:
  if is_remote(p):
    path(p).rmtree(missing_ok=True)
  else:
    shutil.rmtree(p, ignore_errors=True)
