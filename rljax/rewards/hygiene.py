"""Degenerate answers the IFEval checkers accept: the guard of the rubric rewards.

The instruction checkers test surface properties (a placeholder in brackets, a word count,
a highlighted section, capital words), so a policy can satisfy them with text that is not an
answer. `degenerate(response)` names the kind, or returns None for an ordinary answer:
- **template**: at least 3 bracketed placeholders (`[name]`) making up ≥ 30 % of the words —
  the template repeated instead of filled;
- **repetition**: at least 12 words, of whose word 4-grams fewer than half are distinct — the
  same line or phrase over and over;
- **noise**: at least 2 *glitches* making up ≥ 10 % of the words, code in backticks or ```
  fences left out. A glitch is a place where pieces are glued that written text keeps apart:
  a word of ASCII letters that starts with ≥ 2 lowercase letters and goes on with a capital and
  a lowercase letter (`fleasKnowledge`, `{sofIMeaning}`; not `iPhone`, `macOS`, `NeonVibe`,
  `GovCloud`); a closing bracket glued to the word after it (`')BUNYA`; not `(re)write`,
  `[name]s`); a broken character (U+FFFD, except at the very end: an answer cut
  mid-character); a Latin letter next to a Cyrillic one; a `{` closed by `)` or `]`, or a `(`
  or `[` closed by `}` (`[0, 1)` is an interval). This is the subword salad of a collapsed
  small model: `$2.15 ({sofIMeaning}, ')BUNYA KRILES`, 2 glitches in 4 words, earned
  `change_case:capital_word_frequency`'s full reward.

None of IFBench's 294 sample outputs (Japanese without spaces, CSV, LaTeX, code, brand
names), of SmolLM2's 293 greedy answers to IFBench prompts, or of the committed main-job
runs' 68 distinct sampled answers is noise (tests/rewards/test_rewards.py). What is not caught: word salad of
well-formed words. SmolLM2-135M sampled on the main job's prompts at temperature 2 and 3 is
noise in 17 of 64 answers (0 of 32 at 1.5), 16 and 48 tokens drawn uniformly from its
vocabulary in 28 and 45 of 200; the rest, like pronounceable capitals (`BUNYA KRILES TONGO
MBALA`), has too few glitches, and a language detector (langdetect) names a language for it with
high confidence. The cost falls on code written as prose: camelCase identifiers outside
backticks are glitches, so `const userName = getUserName();` alone is noise.

`csr` and `aon` (with `guard=True`, the default; `reward.guard` in a run config) give such an
answer 0 and log `degenerate` = 1 for it (the reward's info names the kind: `degenerate_kind`).
"""
from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\[[^\[\]\n]{1,40}\]")
_STRIP = "\"'`([{<*_#~>}])!?.,;:"
_CODE = re.compile(r"```.*?```|``[^`\n]*``|`[^`\n]*`", re.S)
_CAMEL = re.compile(r"[a-z]{2,}[A-Z]+[a-z]")  # at the start of a word of ASCII letters only
_GLUE = re.compile(r"^[^(\[{]*[)\]}][A-Za-z]{2}|\ufffd"
                   r"|[A-Za-z][\u0400-\u04ff]|[\u0400-\u04ff][A-Za-z]")


def _glitches(text: str) -> tuple[int, int]:
  """(glitches, words) of `text` without its code spans."""
  text = _CODE.sub(" ", text).rstrip("\ufffd")
  words = text.split()
  n = 0
  for w in words:
    core = w.strip(_STRIP + "\u2026")
    n += bool(_GLUE.search(w) or (core.isascii() and core.isalpha() and _CAMEL.match(core)))
  stack = []  # True for {; ( and [ pair with ) and ] freely
  for c in text:
    if c in "([{":
      stack.append(c == "{")
    elif c in ")]}" and stack:
      n += stack.pop() != (c == "}")
  return n, len(words)


def degenerate(response: str) -> str | None:
  """'template', 'repetition', 'noise', or None."""
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
  glitches, n = _glitches(response)
  if glitches >= 2 and glitches >= 0.1 * n:
    return "noise"
  return None
