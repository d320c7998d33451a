"""Natural-language criteria for the rubric generator, one per verifier id.

A `Criterion` draws kwargs for its verifier (`sample(rng, ctx)`) and phrases
them as a sentence (`phrase(kw, rng)`); it is registered under kind
"criterion" with the verifier's id. Phrasings say exactly what the verifier
checks (e.g. "fewer than" for IFEval's "less than"). `CONFLICTS` lists pairs
that cannot be satisfied together (IFEval's table plus a few more this
generator needs). To add a criterion for a new verifier:

    register_criterion("custom:ends_with_bang", lambda rng, ctx: {},
                       lambda kw, rng: "End your response with an exclamation mark.")
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable

from rljax import registry
from rljax.rewards import text as rtext
from rljax.rewards.ifeval_format import CONSTRAINED_OPTIONS

KIND = "criterion"

KEYWORDS = ["balance", "community", "journey", "detail", "future", "quality", "energy",
            "moment", "challenge", "simple", "history", "nature", "practical", "goal",
            "color", "progress", "reason", "example", "careful", "patience", "surprise",
            "season", "window", "morning", "garden", "bridge", "signal", "silver"]
FORBIDDEN = ["very", "really", "good", "great", "just", "thing", "nice", "also", "however",
             "because", "many", "best", "amazing", "perfect", "easy", "important", "always"]
FIRST_WORDS = ["first", "today", "finally", "imagine", "overall", "meanwhile",
               "next", "still", "together", "sometimes", "remember"]
END_PHRASES = ["Any other questions?", "Is there anything else I can help with?",
               "Let me know if you have questions.", "That is all for now.",
               "Thank you for reading.", "Stay curious."]
SPLITTERS = ["Section", "SECTION", "Part", "PART"]
LANGUAGES = [c for c in rtext.LANGUAGE_NAMES if c != "en"]
RARE_LETTERS, COMMON_LETTERS = "zqxjkv", "eatonsrihl"
_LESS, _LEAST = "less than", "at least"


@dataclasses.dataclass(frozen=True)
class Criterion:
  id: str
  sample: Callable[[random.Random, dict[str, Any]], dict[str, Any]]
  phrase: Callable[[dict[str, Any], random.Random], str]


def register_criterion(instruction_id: str, sample, phrase) -> Criterion:
  crit = Criterion(instruction_id, sample, phrase)
  registry.register(KIND, instruction_id)(crit)
  return crit


def get_criterion(instruction_id: str) -> Criterion:
  return registry.get(KIND, instruction_id)


def _pick(rng, options, **fmt):
  return rng.choice(options).format(**fmt)


def _quote_list(words):
  quoted = [f'"{w}"' for w in words]
  return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _noun(items, noun):
  return noun if len(items) == 1 else noun + "s"


def _n(n, noun):
  return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _times(n):
  return "once" if n == 1 else f"{n} times"


def _rel(rng, less_range, least_range):
  if rng.random() < 0.5:
    return _LESS, rng.choice(less_range)
  return _LEAST, rng.choice(least_range)


# --- samplers and phrasings -----------------------------------------------------

def _existence(rng, ctx):
  return {"keywords": rng.sample(KEYWORDS, rng.randint(1, 3))}


def _frequency(rng, ctx):
  rel, n = _rel(rng, [2, 3], [2, 3, 4])
  return {"keyword": rng.choice(KEYWORDS), "frequency": n, "relation": rel}


def _phrase_frequency(kw, rng):
  k, n = kw["keyword"], kw["frequency"]
  if kw["relation"] == _LESS:
    return _pick(rng, ['Use the word "{k}" fewer than {t}.',
                       'The word "{k}" should appear less than {t} in your response.'],
                 k=k, t=_times(n))
  return _pick(rng, ['Use the word "{k}" at least {t}.',
                     'The word "{k}" should appear at least {t} in your response.'],
               k=k, t=_times(n))


def _letter(rng, ctx):
  if rng.random() < 0.5:
    return {"letter": rng.choice(RARE_LETTERS), "let_frequency": rng.randint(2, 6),
            "let_relation": _LESS}
  return {"letter": rng.choice(COMMON_LETTERS), "let_frequency": rng.choice([10, 20, 30, 40]),
          "let_relation": _LEAST}


def _phrase_letter(kw, rng):
  how = "fewer than" if kw["let_relation"] == _LESS else "at least"
  return _pick(rng, ['The letter "{l}" should appear {h} {n} times in your response.',
                     'In your response, use the letter "{l}" {h} {n} times.'],
               l=kw["letter"], h=how, n=kw["let_frequency"])


def _sentences(rng, ctx):
  rel, n = _rel(rng, [4, 6, 8, 10, 15], [3, 5, 8, 10])
  return {"num_sentences": n, "relation": rel}


def _words(rng, ctx):
  rel, n = _rel(rng, [50, 80, 100, 150, 200], [50, 100, 150, 200, 300])
  return {"num_words": n, "relation": rel}


def _phrase_count(unit, key):
  def phrase(kw, rng):
    n = kw[key]
    if kw["relation"] == _LESS:
      return _pick(rng, ["Your response should contain fewer than {n} {u}.",
                         "Keep your answer under {n} {u}."], n=n, u=unit)
    return _pick(rng, ["Your response should contain at least {n} {u}.",
                       "Answer with at least {n} {u}."], n=n, u=unit)
  return phrase


def _nth_paragraph(rng, ctx):
  n = rng.randint(2, 5)
  return {"num_paragraphs": n, "nth_paragraph": rng.randint(1, n),
          "first_word": rng.choice(FIRST_WORDS)}


def _phrase_nth(kw, rng):
  return _pick(rng, [
      "Write exactly {n} paragraphs, separated from each other by a blank line (two new "
      "lines), and start paragraph {k} with the word \"{w}\".",
      "There should be exactly {n} paragraphs, and only paragraphs are separated by two new "
      "lines. Paragraph {k} must begin with the word \"{w}\"."],
      n=kw["num_paragraphs"], k=kw["nth_paragraph"], w=kw["first_word"].capitalize())


def _capital_freq(rng, ctx):
  rel, n = _rel(rng, [3, 5, 8], [2, 3, 5, 8])
  return {"capital_frequency": n, "capital_relation": rel}


def _phrase_capital_freq(kw, rng):
  how = "fewer than" if kw["capital_relation"] == _LESS else "at least"
  return _pick(rng, ["Words written entirely in capital letters should appear {h} {n} times.",
                     "Use {h} {n} words in all capital letters."],
               h=how, n=kw["capital_frequency"])


_TABLE = {
    "keywords:existence": (_existence, lambda kw, rng: _pick(
        rng, ["Include the {k} {w} in your response.",
              "Make sure the {n} {w} {v} in your answer."], w=_quote_list(kw["keywords"]),
        k=_noun(kw["keywords"], "keyword"), n=_noun(kw["keywords"], "word"),
        v="appears" if len(kw["keywords"]) == 1 else "appear")),
    "keywords:frequency": (_frequency, _phrase_frequency),
    "keywords:forbidden_words": (
        lambda rng, ctx: {"forbidden_words": rng.sample(FORBIDDEN, rng.randint(1, 3))},
        lambda kw, rng: _pick(rng, ["Do not use the {n} {w} anywhere in your response.",
                                    "Avoid the {n} {w} completely."],
                              w=_quote_list(kw["forbidden_words"]),
                              n=_noun(kw["forbidden_words"], "word"))),
    "keywords:letter_frequency": (_letter, _phrase_letter),
    "language:response_language": (
        lambda rng, ctx: {"language": rng.choice(LANGUAGES)},
        lambda kw, rng: _pick(rng, ["Your entire response must be in {l}; no other language "
                                    "is allowed.", "Respond only in {l}."],
                              l=rtext.LANGUAGE_NAMES[kw["language"]])),
    "length_constraints:number_sentences": (_sentences, _phrase_count("sentences",
                                                                      "num_sentences")),
    "length_constraints:number_paragraphs": (
        lambda rng, ctx: {"num_paragraphs": rng.randint(2, 5)},
        lambda kw, rng: _pick(rng, [
            "Write exactly {n} paragraphs, separated from each other by the markdown divider "
            "***.", "There should be {n} paragraphs. Paragraphs are separated with the "
            "markdown divider: ***"], n=kw["num_paragraphs"])),
    "length_constraints:number_words": (_words, _phrase_count("words", "num_words")),
    "length_constraints:nth_paragraph_first_word": (_nth_paragraph, _phrase_nth),
    "detectable_content:number_placeholders": (
        lambda rng, ctx: {"num_placeholders": rng.randint(1, 4)},
        lambda kw, rng: _pick(rng, [
            "Include at least {n} in square brackets, such as [address].",
            "The response must contain at least {n} represented by square "
            "brackets, such as [name]."], n=_n(kw["num_placeholders"], "placeholder"))),
    "detectable_content:postscript": (
        lambda rng, ctx: {"postscript_marker": rng.choice(["P.S.", "P.P.S"])},
        lambda kw, rng: _pick(rng, [
            "At the end of your response, add a postscript starting with {m}",
            "End with a postscript that begins with {m}"], m=kw["postscript_marker"])),
    "detectable_format:number_bullet_lists": (
        lambda rng, ctx: {"num_bullets": rng.randint(2, 6)},
        lambda kw, rng: _pick(rng, [
            "Your answer must contain exactly {n} bullet points, using markdown bullets such "
            "as:\n* This is point 1.\n* This is point 2",
            "Use exactly {n} markdown bullet points (lines starting with \"* \")."],
            n=kw["num_bullets"])),
    "detectable_format:constrained_response": (
        lambda rng, ctx: {},
        lambda kw, rng: "Answer with one of the following options: " +
        ", ".join(f'"{o}"' for o in CONSTRAINED_OPTIONS) + "."),
    "detectable_format:number_highlighted_sections": (
        lambda rng, ctx: {"num_highlights": rng.randint(1, 4)},
        lambda kw, rng: _pick(rng, [
            "Highlight at least {s} of your answer with markdown, i.e. "
            "*highlighted section*.", "Use markdown to highlight at least {p} of your "
            "response, like *this*."], s=_n(kw["num_highlights"], "section"),
            p=_n(kw["num_highlights"], "part"))),
    "detectable_format:multiple_sections": (
        lambda rng, ctx: {"section_spliter": rng.choice(SPLITTERS),
                          "num_sections": rng.randint(2, 5)},
        lambda kw, rng: "Your response must have {n} sections. Mark the beginning of each "
        "section with {s} X, such as:\n{s} 1\n[content of section 1]\n{s} 2\n[content of "
        "section 2]".format(n=kw["num_sections"], s=kw["section_spliter"])),
    "detectable_format:json_format": (
        lambda rng, ctx: {},
        lambda kw, rng: _pick(rng, ["Wrap your entire output in JSON format. You can use "
                                    "markdown ticks such as ```.",
                                    "Your whole response must be valid JSON."])),
    "detectable_format:title": (
        lambda rng, ctx: {},
        lambda kw, rng: _pick(rng, ["Your answer must contain a title, wrapped in double "
                                    "angular brackets, such as <<poem of joy>>.",
                                    "Give your response a title in double angular brackets, "
                                    "like <<my title>>."])),
    "combination:two_responses": (
        lambda rng, ctx: {},
        lambda kw, rng: "Give two different responses. Responses and only responses should "
        "be separated by 6 asterisk symbols: ******."),
    "combination:repeat_prompt": (
        lambda rng, ctx: {"prompt_to_repeat": ctx["base_request"]},
        lambda kw, rng: "First repeat the request above word for word without change (not "
        "these instructions), then give your answer. Do not say anything before repeating "
        "the request."),
    "startend:end_checker": (
        lambda rng, ctx: {"end_phrase": rng.choice(END_PHRASES)},
        lambda kw, rng: _pick(rng, ['Finish your response with the exact phrase "{p}". No '
                                    'other words should follow it.',
                                    'End your response with "{p}" and nothing after it.'],
                              p=kw["end_phrase"])),
    "startend:quotation": (
        lambda rng, ctx: {},
        lambda kw, rng: _pick(rng, ["Wrap your entire response with double quotation marks.",
                                    "Put your whole answer inside double quotes."])),
    "change_case:capital_word_frequency": (_capital_freq, _phrase_capital_freq),
    "change_case:english_capital": (
        lambda rng, ctx: {},
        lambda kw, rng: _pick(rng, ["Your entire response should be in English, and in all "
                                    "capital letters.", "Write your whole answer in English "
                                    "using only capital letters."])),
    "change_case:english_lowercase": (
        lambda rng, ctx: {},
        lambda kw, rng: _pick(rng, ["Your entire response should be in English, and in all "
                                    "lowercase letters. No capital letters are allowed.",
                                    "Write your whole answer in English using only lowercase "
                                    "letters."])),
    "punctuation:no_comma": (
        lambda rng, ctx: {},
        lambda kw, rng: _pick(rng, ["Do not use any commas in your response.",
                                    "In your entire response, refrain from the use of any "
                                    "commas."])),
}

for _id, (_sample, _phrase) in _TABLE.items():
  register_criterion(_id, _sample, _phrase)


# --- what cannot be asked together ----------------------------------------------

_ALL = frozenset(_TABLE)


def _all_but(*keep: str) -> set[str]:
  return set(_ALL) - set(keep)


_CONFLICTS = {  # IFEval's INSTRUCTION_CONFLICTS, plus the entries marked "+"
    "language:response_language": {
        "detectable_format:multiple_sections", "keywords:existence", "keywords:frequency",
        "keywords:forbidden_words", "startend:end_checker", "change_case:english_capital",
        "change_case:english_lowercase",
        "keywords:letter_frequency", "change_case:capital_word_frequency",  # +
        "length_constraints:nth_paragraph_first_word"},  # + English words in other scripts
    "length_constraints:number_paragraphs": {"length_constraints:nth_paragraph_first_word",
                                             "length_constraints:number_sentences"},
    "detectable_format:constrained_response": set(_ALL),
    "detectable_format:json_format": _all_but("keywords:forbidden_words", "keywords:existence"),
    "combination:two_responses": _all_but(
        "keywords:forbidden_words", "keywords:existence", "language:response_language",
        "detectable_format:title", "punctuation:no_comma"),
    "combination:repeat_prompt": _all_but("keywords:existence", "detectable_format:title",
                                          "punctuation:no_comma"),
    "detectable_format:multiple_sections": {
        "detectable_format:number_highlighted_sections",
        "change_case:english_lowercase", "change_case:english_capital",  # + "Section" casing
        "change_case:capital_word_frequency"},  # + "SECTION 1" counts as a capital word
    "change_case:capital_word_frequency": {"change_case:english_lowercase",
                                           "change_case:english_capital"},
    "change_case:english_lowercase": {"change_case:english_capital"},
    "startend:quotation": {"detectable_format:title"},
}


def conflicts(a: str, b: str) -> bool:
  """True if instructions a and b cannot be combined (symmetric; an id conflicts with itself)."""
  return a == b or b in _CONFLICTS.get(a, ()) or a in _CONFLICTS.get(b, ())


def context_conflict(iid: str, ctx: dict[str, Any]) -> bool:
  """Conflicts with the base request itself."""
  if iid == "punctuation:no_comma" and "combination:repeat_prompt" in ctx.get("ids", ()):
    return "," in ctx["base_request"]
  if iid == "combination:repeat_prompt" and "punctuation:no_comma" in ctx.get("ids", ()):
    return "," in ctx["base_request"]
  return False


def required_text(iid: str, kw: dict[str, Any]) -> str:
  """Text a satisfying response must contain because of this criterion."""
  parts = {"keywords:existence": lambda: " ".join(kw["keywords"]),
           "keywords:frequency": lambda: kw["keyword"] if kw["relation"] == _LEAST else "",
           "length_constraints:nth_paragraph_first_word": lambda: kw["first_word"],
           "startend:end_checker": lambda: kw["end_phrase"],
           "detectable_format:multiple_sections": lambda: kw["section_spliter"],
           "detectable_content:postscript": lambda: kw["postscript_marker"]}
  return parts[iid]().lower() if iid in parts else ""


def kwargs_compatible(chosen: list[tuple[str, dict[str, Any]]]) -> bool:
  """Word- and letter-level checks across criteria (forbidden vs required words...)."""
  required = " ".join(required_text(i, kw) for i, kw in chosen)
  req_words = set(required.replace("?", " ").replace(".", " ").split())
  for iid, kw in chosen:
    if iid == "keywords:forbidden_words" and req_words & {w.lower() for w in
                                                         kw["forbidden_words"]}:
      return False
    if iid == "keywords:frequency" and kw["relation"] == _LESS and \
        kw["keyword"].lower() in req_words:
      return False
    if iid == "keywords:letter_frequency" and kw["let_relation"] == _LESS and \
        kw["letter"] in required:
      return False
  return True
