"""IFEval verifiers, part 1: keywords, language, length and content instructions.

Each `_check` reproduces IFEval's `check_following` (google-research
instruction_following_eval). Deliberate differences, all on inputs IFEval's own
data never contains: keywords and markers are matched literally (IFEval feeds
them to `re` unescaped, so "c++" would crash it), and out-of-range kwargs raise
instead of being replaced by random values.
"""
from __future__ import annotations

import collections
import re

from rljax.rewards import text
from rljax.rewards.verifier import RELATIONS, Arg, Verifier, register_verifier

_REL = dict(kind="str", choices=RELATIONS)


def compare(count: int, relation: str, threshold: int) -> bool:
  """IFEval's two relations: 'less than' is `<`, 'at least' is `>=`."""
  return count < threshold if relation == "less than" else count >= threshold


# --- keywords ----------------------------------------------------------------


@register_verifier
class KeywordExistence(Verifier):
  id = "keywords:existence"
  args = (Arg("keywords", "list[str]"),)

  def _check(self, response, kw):
    return all(re.search(re.escape(k), response, flags=re.IGNORECASE)
               for k in kw["keywords"])


@register_verifier
class KeywordFrequency(Verifier):
  id = "keywords:frequency"
  args = (Arg("keyword", "str"), Arg("frequency", min_value=0), Arg("relation", **_REL))

  def _check(self, response, kw):
    n = len(re.findall(re.escape(kw["keyword"].strip()), response, flags=re.IGNORECASE))
    return compare(n, kw["relation"], kw["frequency"])


@register_verifier
class ForbiddenWords(Verifier):
  id = "keywords:forbidden_words"
  args = (Arg("forbidden_words", "list[str]"),)

  def _check(self, response, kw):
    return not any(re.search(r"\b" + re.escape(w) + r"\b", response, flags=re.IGNORECASE)
                   for w in kw["forbidden_words"])


@register_verifier
class LetterFrequency(Verifier):
  id = "keywords:letter_frequency"
  args = (Arg("letter", "str"), Arg("let_frequency", min_value=0),
          Arg("let_relation", **_REL))

  def _validate_more(self, kw):
    letter = kw["letter"].strip()
    if len(letter) != 1 or not ("a" <= letter.lower() <= "z"):
      raise ValueError(f"{self.id}: kwarg 'letter' must be one ASCII letter, got {kw['letter']!r}")
    kw["letter"] = letter.lower()

  def _check(self, response, kw):
    n = collections.Counter(response.lower())[kw["letter"]]
    return compare(n, kw["let_relation"], kw["let_frequency"])


# --- language ------------------------------------------------------------------


@register_verifier
class ResponseLanguage(Verifier):
  id = "language:response_language"
  args = (Arg("language", "str", choices=tuple(text.LANGDETECT_CODES)),)

  def _check(self, response, kw):
    lang = text.detect_language(response)
    return True if lang is None else lang == kw["language"]  # IFEval: undetectable passes


# --- length ---------------------------------------------------------------------


@register_verifier
class NumberOfSentences(Verifier):
  id = "length_constraints:number_sentences"
  args = (Arg("num_sentences", min_value=0), Arg("relation", **_REL))

  def _check(self, response, kw):
    return compare(text.count_sentences(response), kw["relation"], kw["num_sentences"])


@register_verifier
class NumberOfParagraphs(Verifier):
  """Paragraphs separated by the markdown divider `***`."""
  id = "length_constraints:number_paragraphs"
  args = (Arg("num_paragraphs", min_value=1),)

  def _check(self, response, kw):
    paragraphs = re.split(r"\s?\*\*\*\s?", response)
    count = len(paragraphs)
    for i, p in enumerate(paragraphs):
      if not p.strip():
        if i in (0, len(paragraphs) - 1):
          count -= 1
        else:
          return False  # an empty paragraph between two dividers
    return count == kw["num_paragraphs"]


@register_verifier
class NumberOfWords(Verifier):
  id = "length_constraints:number_words"
  args = (Arg("num_words", min_value=0), Arg("relation", **_REL))

  def _check(self, response, kw):
    return compare(text.count_words(response), kw["relation"], kw["num_words"])


@register_verifier
class NthParagraphFirstWord(Verifier):
  """Exactly `num_paragraphs` paragraphs split by "\\n\\n"; paragraph n starts with a word."""
  id = "length_constraints:nth_paragraph_first_word"
  args = (Arg("num_paragraphs", min_value=1), Arg("nth_paragraph", min_value=1),
          Arg("first_word", "str"))

  def _validate_more(self, kw):
    if kw["nth_paragraph"] > kw["num_paragraphs"]:
      raise ValueError(f"{self.id}: nth_paragraph ({kw['nth_paragraph']}) must be <= "
                       f"num_paragraphs ({kw['num_paragraphs']})")
    kw["first_word"] = kw["first_word"].lower()

  def _check(self, response, kw):
    paragraphs = re.split(r"\n\n", response)
    count = sum(1 for p in paragraphs if p.strip())
    nth = kw["nth_paragraph"]
    if nth > count:
      return False
    paragraph = paragraphs[nth - 1].strip()  # indexes the raw split, as IFEval does
    if not paragraph:
      return False
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    first = ""
    for ch in word:
      if ch in ".,?!'\"":
        break
      first += ch.lower()
    return count == kw["num_paragraphs"] and first == kw["first_word"]


# --- content ----------------------------------------------------------------------


@register_verifier
class Placeholders(Verifier):
  id = "detectable_content:number_placeholders"
  args = (Arg("num_placeholders", min_value=0),)

  def _check(self, response, kw):
    return len(re.findall(r"\[.*?\]", response)) >= kw["num_placeholders"]


@register_verifier
class Postscript(Verifier):
  id = "detectable_content:postscript"
  args = (Arg("postscript_marker", "str"),)

  def _validate_more(self, kw):
    kw["postscript_marker"] = kw["postscript_marker"].strip()

  def _check(self, response, kw):
    marker = kw["postscript_marker"]
    if marker == "P.P.S":
      pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
      pattern = r"\s*p\.\s?s\..*$"
    else:
      pattern = r"\s*" + re.escape(marker.lower()) + r".*$"
    return bool(re.findall(pattern, response.lower(), flags=re.MULTILINE))
