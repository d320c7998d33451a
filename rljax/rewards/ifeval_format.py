"""IFEval verifiers, part 2: format, combination, start/end, case and punctuation.

Each `_check` reproduces IFEval's `check_following`; see ifeval_content.py for
the few deliberate differences (literal matching of user-given markers).
"""
from __future__ import annotations

import json
import re

from rljax.rewards import text
from rljax.rewards.ifeval_content import compare
from rljax.rewards.verifier import RELATIONS, Arg, Verifier, register_verifier

CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")

# --- detectable_format ---------------------------------------------------------


@register_verifier
class BulletLists(Verifier):
  """Exactly n markdown bullets: lines starting with `* ` (not `**`) or `-`."""
  id = "detectable_format:number_bullet_lists"
  args = (Arg("num_bullets", min_value=0),)

  def _check(self, response, kw):
    stars = re.findall(r"^\s*\*[^\*].*$", response, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", response, flags=re.MULTILINE)
    return len(stars) + len(dashes) == kw["num_bullets"]


@register_verifier
class ConstrainedResponse(Verifier):
  id = "detectable_format:constrained_response"

  def _check(self, response, kw):
    value = response.strip()
    return any(option in value for option in CONSTRAINED_OPTIONS)


@register_verifier
class HighlightedSections(Verifier):
  """At least n non-empty `*highlighted*` spans (a `**bold**` span counts twice, as in IFEval)."""
  id = "detectable_format:number_highlighted_sections"
  args = (Arg("num_highlights", min_value=0),)

  def _check(self, response, kw):
    count = sum(1 for h in re.findall(r"\*[^\n\*]*\*", response) if h.strip("*").strip())
    count += sum(1 for h in re.findall(r"\*\*[^\n\*]*\*\*", response)
                 if h.removeprefix("**").removesuffix("**").strip())
    return count >= kw["num_highlights"]


@register_verifier
class MultipleSections(Verifier):
  """At least n sections, each starting with "<splitter> <number>"."""
  id = "detectable_format:multiple_sections"
  args = (Arg("section_spliter", "str"), Arg("num_sections", min_value=0))

  def _validate_more(self, kw):
    kw["section_spliter"] = kw["section_spliter"].strip()

  def _check(self, response, kw):
    pattern = r"\s?" + re.escape(kw["section_spliter"]) + r"\s?\d+\s?"
    return len(re.split(pattern, response)) - 1 >= kw["num_sections"]


@register_verifier
class JsonFormat(Verifier):
  id = "detectable_format:json_format"

  def _check(self, response, kw):
    value = (response.strip().removeprefix("```json").removeprefix("```Json")
             .removeprefix("```JSON").removeprefix("```").removesuffix("```").strip())
    try:
      json.loads(value)
    except ValueError:
      return False
    return True


@register_verifier
class Title(Verifier):
  """A non-empty title in double angular brackets: <<title>>."""
  id = "detectable_format:title"

  def _check(self, response, kw):
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", response))


# --- combination ------------------------------------------------------------------


@register_verifier
class TwoResponses(Verifier):
  """Two different non-empty responses separated by `******`."""
  id = "combination:two_responses"

  def _check(self, response, kw):
    parts = response.split("******")
    valid = []
    for i, part in enumerate(parts):
      if part.strip():
        valid.append(part)
      elif i not in (0, len(parts) - 1):
        return False
    return len(valid) == 2 and valid[0].strip() != valid[1].strip()


@register_verifier
class RepeatPrompt(Verifier):
  id = "combination:repeat_prompt"
  args = (Arg("prompt_to_repeat", "str"),)

  def _check(self, response, kw):
    return response.strip().lower().startswith(kw["prompt_to_repeat"].strip().lower())


# --- startend -------------------------------------------------------------------------


@register_verifier
class EndPhrase(Verifier):
  id = "startend:end_checker"
  args = (Arg("end_phrase", "str"),)

  def _check(self, response, kw):
    return response.strip().strip('"').lower().endswith(kw["end_phrase"].strip().lower())


@register_verifier
class Quotation(Verifier):
  id = "startend:quotation"

  def _check(self, response, kw):
    value = response.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'


# --- change_case ----------------------------------------------------------------------


@register_verifier
class CapitalWordFrequency(Verifier):
  id = "change_case:capital_word_frequency"
  args = (Arg("capital_frequency", min_value=0),
          Arg("capital_relation", "str", choices=RELATIONS))

  def _check(self, response, kw):
    return compare(text.count_capital_words(response), kw["capital_relation"],
                   kw["capital_frequency"])


def _english_in_case(response: str, in_case: bool) -> bool:
  """IFEval's change_case checks: the case test first, then English (or undetectable)."""
  if not in_case:
    return False
  lang = text.detect_language(response)
  return lang is None or lang == "en"


@register_verifier
class EnglishCapital(Verifier):
  id = "change_case:english_capital"

  def _check(self, response, kw):
    return _english_in_case(response, response.isupper())


@register_verifier
class EnglishLowercase(Verifier):
  id = "change_case:english_lowercase"

  def _check(self, response, kw):
    return _english_in_case(response, response.islower())


# --- punctuation ------------------------------------------------------------------------


@register_verifier
class NoComma(Verifier):
  id = "punctuation:no_comma"

  def _check(self, response, kw):
    return "," not in response
