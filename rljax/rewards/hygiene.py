"""Degenerate answers the IFEval checkers accept: the guard of the rubric rewards.

The instruction checkers test surface properties (a placeholder in brackets, a word count,
a highlighted section, capital words), so a policy can satisfy them with text that is not an
answer. `degenerate(response)` names the kind, or returns None for an ordinary answer:
- **template**: at least 3 bracketed placeholders (`[name]`) making up ≥ 30 % of the words —
  the template repeated instead of filled;
- **repetition**: at least 12 words, of whose word 4-grams fewer than half are distinct — the
  same line or phrase over and over.

`csr` and `aon` (with `guard=True`, the default; `reward.guard` in a run config) give such an
answer 0 and log `degenerate` = 1 for it. There is no check for text that is not language:
word-shape rules flagged correct answers of IFBench's own sample outputs (Japanese without
spaces, CSV, LaTeX, brand names such as `NeonVibe`), so noise that the checkers accept still
earns its reward.
"""
from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\[[^\[\]\n]{1,40}\]")
_STRIP = "\"'`([{<*_#~>}])!?.,;:"


def degenerate(response: str) -> str | None:
  """'template', 'repetition', or None."""
  words = response.split()
  if not words:
    return None
  holders = _PLACEHOLDER.findall(response)
  if len(holders) >= 3 and len(holders) >= 0.3 * len(words):
    return "template"
  if len(words) >= 12:
    grams = [tuple(w.lower().strip(_STRIP) for w in words[i:i + 4])
             for i in range(len(words) - 3)]
    if len(set(grams)) < 0.5 * len(grams):
      return "repetition"
  return None
