"""Text measurements the IFEval verifiers share: words, sentences, tokens, language.

All of it runs offline. IFEval counts sentences with NLTK's Punkt English model
and capital words with `nltk.word_tokenize`; both need data files that NLTK
downloads, so this module carries dependency-free equivalents (rules below).
Language detection uses `langdetect` (its profiles ship inside the wheel) with
a fixed seed, so the same text always gets the same answer.
"""
from __future__ import annotations

import functools
import re
import threading
import unicodedata

# --- words ------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _word_re() -> re.Pattern:
  """`\\w` as Unicode defines it: Python's `\\w` plus combining marks and joiners.

  NLTK's RegexpTokenizer(r"\\w+") (IFEval's word counter) matches with the
  `regex` module, whose `\\w` keeps marks inside words (Devanagari vowel signs),
  so a Hindi sentence has as many words as spaces suggest.
  """
  marks, start, prev = [], None, None
  for cp in range(0x300, 0x20000):
    if unicodedata.category(chr(cp)).startswith("M"):
      if start is None:
        start = cp
      prev = cp
    elif start is not None:
      marks.append(f"\\U{start:08x}-\\U{prev:08x}")
      start = None
  return re.compile(r"(?:\w|[\u200c\u200d" + "".join(marks) + "])+")


def count_words(text: str) -> int:
  """IFEval's word count: maximal runs of word characters (NLTK RegexpTokenizer(r"\\w+"))."""
  return len(_word_re().findall(text))


# --- sentences ----------------------------------------------------------------

# Words that end with a period without ending a sentence.
_ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st vs etc e.g i.e cf al inc ltd co corp jan feb mar apr
jun jul aug sep sept oct nov dec fig approx dept govt mt ave rd u.s u.k
a.m p.m ph.d
""".split())

# A candidate boundary: terminal punctuation, closing quotes/brackets, then
# whitespace or the end of the text.
_BOUNDARY_RE = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")
_LAST_WORD_RE = re.compile(r"(\S+)$")


def split_sentences(text: str) -> list[str]:
  """Splits like Punkt does on ordinary prose: at `.`, `!`, `?` before whitespace.

  A period after a known abbreviation or a single-letter initial ("J.") does not
  end a sentence; newlines alone do not end one (as in Punkt).
  """
  sentences, start = [], 0
  for m in _BOUNDARY_RE.finditer(text):
    punct = m.group(0)
    if punct.startswith(".") and len(punct.rstrip("\"'”’)]")) == 1:
      word = _LAST_WORD_RE.search(text[start:m.start()])
      if word:
        stem = word.group(1).lstrip("\"'“‘([").lower()
        if stem in _ABBREVIATIONS or (len(stem) == 1 and stem.isalpha()):
          continue
    piece = text[start:m.end()].strip()
    if piece:
      sentences.append(piece)
    start = m.end()
  tail = text[start:].strip()
  if tail:
    sentences.append(tail)
  return sentences


def count_sentences(text: str) -> int:
  return len(split_sentences(text))


# --- word tokens (for counting capitalised words) ------------------------------

# The splits of NLTK's word tokenizer that can change which tokens are all-caps.
_TOKEN_RULES = [
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}"), r" \g<0> "),
    (re.compile(r"[;@#$%&?!*\"\[\](){}<>«»“”‘’\u2012-\u2015]"), r" \g<0> "),
    (re.compile(r"--"), r" -- "),
    (re.compile(r"([^' ])('[sSmMdD]|') "), r"\1 \2 "),
    (re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
    (re.compile(r"(?i)\b(can)(not|na)\b"), r"\1 \2"),
    (re.compile(r"(?i)\b(gon|wan)(na)\b"), r"\1 \2"),
    (re.compile(r"(?i)\b(got)(ta)\b"), r"\1 \2"),
    (re.compile(r"(?i)\b(gim|lem)(me)\b"), r"\1 \2"),
]


def word_tokens(text: str) -> list[str]:
  """Whitespace tokens after NLTK-like punctuation and contraction splits."""
  text = " " + re.sub(r"\s+", " ", text) + " "
  for pattern, repl in _TOKEN_RULES:
    text = pattern.sub(repl, text)
  return text.split()


def count_capital_words(text: str) -> int:
  """Tokens that are all upper case (`str.isupper`), as IFEval counts them."""
  return sum(1 for tok in word_tokens(text) if tok.isupper())


# --- language -------------------------------------------------------------------

_FACTORY = None
_FACTORY_LOCK = threading.Lock()
LANGDETECT_SEED = 0


def _factory():
  global _FACTORY
  with _FACTORY_LOCK:
    if _FACTORY is None:
      try:
        from langdetect.detector_factory import DetectorFactory, PROFILES_DIRECTORY
      except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "language verifiers need the 'langdetect' package "
            "(pip install langdetect==1.0.9); it runs offline") from e
      factory = DetectorFactory()
      factory.load_profile(PROFILES_DIRECTORY)
      factory.set_seed(LANGDETECT_SEED)
      _FACTORY = factory
    return _FACTORY


@functools.lru_cache(maxsize=1024)
def detect_language(text: str) -> str | None:
  """ISO 639-1 code langdetect picks for `text` (seeded), or None if it can't tell.

  Deterministic (fixed seed), so results are cached: strict and loose checks
  and the G responses of a group often ask about the same text.
  """
  from langdetect.lang_detect_exception import LangDetectException
  detector = _factory().create()
  detector.append(text)
  try:
    return detector.detect()
  except LangDetectException:
    return None


# langdetect's profiles (what `language` kwargs may name).
LANGDETECT_CODES = (
    "af ar bg bn ca cs cy da de el en es et fa fi fr gu he hi hr hu id it ja kn "
    "ko lt lv mk ml mr ne nl no pa pl pt ro ru sk sl so sq sv sw ta te th tl tr "
    "uk ur vi zh-cn zh-tw").split()

# The languages IFEval samples, with the names its prompts use.
LANGUAGE_NAMES = {
    "en": "English", "es": "Spanish", "pt": "Portuguese", "ar": "Arabic",
    "hi": "Hindi", "fr": "French", "ru": "Russian", "de": "German",
    "ja": "Japanese", "it": "Italian", "bn": "Bengali", "uk": "Ukrainian",
    "th": "Thai", "ur": "Urdu", "ta": "Tamil", "te": "Telugu", "bg": "Bulgarian",
    "ko": "Korean", "pl": "Polish", "he": "Hebrew", "fa": "Persian",
    "vi": "Vietnamese", "ne": "Nepali", "sw": "Swahili", "kn": "Kannada",
    "mr": "Marathi", "gu": "Gujarati", "pa": "Punjabi", "ml": "Malayalam",
    "fi": "Finnish",
}
