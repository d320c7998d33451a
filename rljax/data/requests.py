"""Base requests for rubric prompts, and their train / held-out split.

The requests live in base_requests.json beside this file (written for the
project: several task kinds, a few hundred requests, no formatting
constraints of their own). The split is stratified by kind and fixed by a hash
of the text: within each kind, every fifth request in hash order is held out,
so train and held-out never share a base request and adding a request never
moves another one between splits.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os

SPLITS = ("train", "heldout")
HELDOUT_EVERY = 5
_PATH = os.path.join(os.path.dirname(__file__), "base_requests.json")


def _digest(text: str) -> str:
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1)
def all_requests() -> tuple[tuple[str, str], ...]:
  """(kind, request) pairs of every base request, in file order."""
  with open(_PATH, encoding="utf-8") as f:
    data = json.load(f)
  out = []
  for kind, texts in data["requests"].items():
    out += [(kind, t) for t in texts]
  texts = [t for _, t in out]
  if len(set(texts)) != len(texts):
    raise ValueError(f"{_PATH}: duplicate base requests")
  return tuple(out)


@functools.lru_cache(maxsize=None)
def split_requests(split: str) -> tuple[tuple[str, str], ...]:
  """(kind, request) pairs of one split ("train" or "heldout"), in a fixed order."""
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
  by_kind: dict[str, list[str]] = {}
  for kind, text in all_requests():
    by_kind.setdefault(kind, []).append(text)
  out = []
  for kind, texts in by_kind.items():
    for rank, text in enumerate(sorted(texts, key=_digest)):
      if (rank % HELDOUT_EVERY == 0) == (split == "heldout"):
        out.append((kind, text))
  return tuple(out)


def kinds() -> list[str]:
  return sorted({k for k, _ in all_requests()})
