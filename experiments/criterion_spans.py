"""Character spans of a response that bear a criterion (what the CoRT study labels).

`bearing_spans(instruction_id, kwargs, response)` returns the [start, end) spans whose text
the verifier of that criterion looks at and finds: keyword hits, the postscript (marker to
the end), the <<title>>, bullet markers, *highlights*, section headers, placeholders, the
required ending, the quotes, the separators, all-caps words, the repeated prompt, ...
Criteria that are a property of the whole response or an absence (forbidden words, no
commas, lowercase / capitals only, language, word / sentence counts, letter frequency)
bear no span: their ids are in `GLOBAL`, and their tokens count as "other".
"""
from __future__ import annotations

import re

from rljax.rewards.ifeval_format import CONSTRAINED_OPTIONS

GLOBAL = ("keywords:forbidden_words", "punctuation:no_comma", "change_case:english_lowercase",
          "change_case:english_capital", "language:response_language",
          "length_constraints:number_words", "length_constraints:number_sentences",
          "keywords:letter_frequency")


def _all(pattern: str, text: str, flags=0, group: int = 0) -> list[tuple[int, int]]:
  return [m.span(group) for m in re.finditer(pattern, text, flags) if m.end(group) > m.start(group)]


def _words(words, text):
  return [s for w in words for s in _all(r"\b" + re.escape(w) + r"\b", text, re.IGNORECASE)]


def bearing_spans(iid: str, kw: dict, text: str) -> list[tuple[int, int]]:
  if iid in GLOBAL:
    return []
  if iid == "keywords:existence":
    return _words(kw["keywords"], text)
  if iid == "keywords:frequency":
    return _words([kw["keyword"]], text)
  if iid == "detectable_content:postscript":
    i = text.find(kw["postscript_marker"])
    return [(i, len(text))] if i >= 0 else []
  if iid == "detectable_content:number_placeholders":
    return _all(r"\[.*?\]", text)
  if iid == "detectable_format:title":
    return _all(r"<<[^\n]+>>", text)
  if iid == "detectable_format:number_bullet_lists":
    return _all(r"^\s*(\*(?!\*)|-)", text, re.MULTILINE, 1)
  if iid == "detectable_format:number_highlighted_sections":
    return _all(r"\*[^\n\*]+\*", text)
  if iid == "detectable_format:multiple_sections":
    return _all(re.escape(kw["section_spliter"]) + r"\s?\d+", text)
  if iid == "detectable_format:json_format":
    spans = _all(r"```(json|JSON|Json)?", text)
    s = text.strip()
    if s[:1] in "{[" and s[-1:] in "}]":
      spans += [(text.find(s[0]), text.find(s[0]) + 1), (text.rfind(s[-1]), text.rfind(s[-1]) + 1)]
    return spans
  if iid == "detectable_format:constrained_response":
    return [s for o in CONSTRAINED_OPTIONS for s in _all(re.escape(o), text)]
  if iid == "combination:two_responses":
    return _all(r"\*{6}", text)
  if iid == "combination:repeat_prompt":
    p = kw["prompt_to_repeat"].strip()
    i = text.lower().find(p.lower())
    return [(i, i + len(p))] if i >= 0 else []
  if iid == "startend:end_checker":
    return _all(re.escape(kw["end_phrase"].strip()), text, re.IGNORECASE)
  if iid == "startend:quotation":
    s = text.strip()
    if len(s) > 1 and s[0] == '"' and s[-1] == '"':
      a, b = text.find('"'), text.rfind('"')
      return [(a, a + 1), (b, b + 1)]
    return []
  if iid == "change_case:capital_word_frequency":
    return _all(r"\b[A-Z]{2,}\b", text)
  if iid == "length_constraints:number_paragraphs":
    return _all(r"\* \* \*", text)
  if iid == "length_constraints:nth_paragraph_first_word":
    return _all(r"(^|\n\n)\s*(" + re.escape(kw["first_word"]) + r")\b", text, re.IGNORECASE, 2)
  raise KeyError(f"criterion_spans: no span rule for {iid!r}; add one or list it in GLOBAL")


def token_char_spans(tokenizer, ids: list[int]) -> list[tuple[int, int]]:
  """[start, end) of each token in decode(ids) (prefix decoding; special tokens skipped)."""
  out, prev = [], 0
  for k in range(len(ids)):
    n = len(tokenizer.decode(ids[:k + 1], skip_special_tokens=True))
    out.append((prev, max(n, prev)))
    prev = max(n, prev)
  return out


def label_tokens(char_spans_tok, spans) -> list[bool]:
  """True for tokens whose characters overlap any span."""
  return [any(a < e and s < b for s, e in spans) for a, b in char_spans_tok]
