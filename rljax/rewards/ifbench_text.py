"""Text measurements the IFBench verifiers share (offline, no downloaded data).

IFBench (Pyatkin et al. 2025, allenai/IFBench) splits sentences with a
rule-based splitter (`split_into_sentences` below: the same rules, written
here), counts words as runs of `\\w`, tokenizes with NLTK's `word_tokenize`
and counts stop words with NLTK's English list. `word_tokenize` needs the
Punkt model (a download); here sentences come from `text.split_sentences`
(Punkt-like rules) and each is tokenized with NLTK's `NLTKWordTokenizer`, a
pure-regex tokenizer that needs no data. Syllables use `syllapy` (its
dictionary ships in the wheel), emoji use the `emoji` package, as IFBench.
"""
from __future__ import annotations

import functools
import re
import string

from rljax.rewards import text

PUNCT = string.punctuation
_NO_PUNCT = str.maketrans("", "", PUNCT)


def strip_punct(s: str) -> str:
  """Deletes every ASCII punctuation character."""
  return s.translate(_NO_PUNCT)


def trim(word: str) -> str:
  """Strips ASCII punctuation and spaces from both ends."""
  return word.strip(PUNCT + " ")


# --- sentences (IFBench's rule-based splitter) ---------------------------------

_A = "([A-Za-z])"
_STARTERS = (r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|"
             r"But\s|However\s|That\s|This\s|Wherever)")
_SUFFIXES = "(Inc|Ltd|Jr|Sr|Co)"
_RULES = [  # (pattern, replacement) applied in order; <prd> protects a period, <stop> ends
    (re.compile("(Mr|St|Mrs|Ms|Dr)[.]"), r"\1<prd>"),
    (re.compile("[.](com|net|org|io|gov|edu|me)"), r"<prd>\1"),
    (re.compile("([0-9])[.]([0-9])"), r"\1<prd>\2"),
    (re.compile(r"\.{2,}"), lambda m: "<prd>" * len(m.group(0)) + "<stop>"),
]
_RULES_AFTER_PHD = [
    (re.compile(r"\s" + _A + "[.] "), r" \1<prd> "),
    (re.compile("([A-Z][.][A-Z][.](?:[A-Z][.])?) " + _STARTERS), r"\1<stop> \2"),
    (re.compile(_A + "[.]" + _A + "[.]" + _A + "[.]"), r"\1<prd>\2<prd>\3<prd>"),
    (re.compile(_A + "[.]" + _A + "[.]"), r"\1<prd>\2<prd>"),
    (re.compile(" " + _SUFFIXES + "[.] " + _STARTERS), r" \1<stop> \2"),
    (re.compile(" " + _SUFFIXES + "[.]"), r" \1<prd>"),
    (re.compile(" " + _A + "[.]"), r" \1<prd>"),
]


def split_into_sentences(s: str) -> list[str]:
  """IFBench's sentence splitter: ends at `.`, `?`, `!` unless a rule protects the period.

  Protected: titles (Mr. Dr. ...), web suffixes (.com), decimals, ellipses
  (which end a sentence themselves), Ph.D., initials and acronyms, company
  suffixes; a closing quote moves before the punctuation. Newlines are spaces.
  """
  s = (" " + s + "  ").replace("\n", " ")
  for pattern, repl in _RULES:
    s = pattern.sub(repl, s)
  if "Ph.D" in s:
    s = s.replace("Ph.D.", "Ph<prd>D<prd>")
  for pattern, repl in _RULES_AFTER_PHD:
    s = pattern.sub(repl, s)
  for a, b in ((".”", "”."), ('."', '".'), ('!"', '"!'), ('?"', '"?')):
    s = s.replace(a, b)
  for p in ".?!":
    s = s.replace(p, p + "<stop>")
  pieces = [p.strip() for p in s.replace("<prd>", ".").split("<stop>")]
  if pieces and not pieces[-1]:
    pieces = pieces[:-1]
  return pieces


# --- words -----------------------------------------------------------------------

count_words = text.count_words  # runs of \w (NLTK RegexpTokenizer(r"\w+"))


def word_runs(s: str) -> list[str]:
  """The \\w runs `count_words` counts."""
  return text._word_re().findall(s)


@functools.lru_cache(maxsize=1)
def _treebank():
  from nltk.tokenize.destructive import NLTKWordTokenizer
  return NLTKWordTokenizer()


def word_tokenize(s: str) -> list[str]:
  """NLTK `word_tokenize` without Punkt data: our sentence split, then NLTK's regex tokenizer."""
  tok = _treebank()
  return [t for sent in text.split_sentences(s) for t in tok.tokenize(sent)]


# NLTK's English stop words (the 179-word list; its newer entries are contractions
# with an apostrophe, which `\w+` tokens never match).
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their
theirs themselves what which who whom this that that'll these those am is are was were be been
being have has had having do does did doing a an the and but if or because as until while of
at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any
both each few more most other some such no nor not only own same so than too very s t can will
just don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn
didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn
mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn
wouldn't
""".split())


def count_stopwords(s: str) -> int:
  return sum(1 for t in word_runs(s) if t.lower() in STOPWORDS)


def syllables(word: str) -> int:
  import syllapy
  return syllapy.count(word)


def is_emoji(ch: str) -> bool:
  import emoji
  return emoji.is_emoji(ch)


# --- a verb-first test without a POS tagger ----------------------------------------

# IFBench asks NLTK's perceptron tagger (a download) whether the first token is a
# verb (any VB* tag). Offline, a word list plus inflection rules stands in for it.
_VERBS = frozenset("""
add address allow analyze answer apply argue arrange ask assess assume avoid be become begin
believe break bring build buy calculate call can carry change check choose clarify clean
close collect combine come compare compile complete compose consider construct continue
convert count cover create cut decide define delete demonstrate describe design determine
develop discover discuss do draft draw drink drive eat edit elaborate embrace enable encourage
ensure enter envision estimate evaluate examine explain explore express extract fill find
finish fix focus follow forget form format gather generate get give go grab graph guess have
help highlight identify ignore illustrate imagine implement improve include increase indicate
inform insert investigate join keep know learn leave let list listen live look make map mark
measure meet mention move name navigate need note notice observe obtain offer open order
organize outline paint pay pick picture place plan play point practice prepare present
pretend print produce prove provide put read recall recommend reduce reflect remember remove
repeat rephrase replace report research respond rest return review revise rewrite run save
say search see select sell send set share show simplify sing sit sleep solve sort speak spend
start stay step stop study suggest summarize support suppose take talk teach tell test think
translate travel try turn understand use visit wait walk want watch wear welcome work write
""".split())
_IRREGULAR = frozenset("""
is are was were been am being had has did does done made took taken gave given went gone came
saw seen said told thought knew known found felt kept left brought built bought caught taught
wrote written began begun ran spoke spoken chose chosen drew drawn drove driven ate eaten
""".split())
_NOT_VERBS = frozenset("""
thing nothing something anything everything morning evening king ring spring string wing
during sibling ceiling building feeling meaning beginning wedding pudding darling bed red
hundred seed need speed indeed sacred kindred shed
""".split())


def starts_with_verb(s: str) -> bool:
  """True iff the first token looks like a verb form (base, -s, -ed, -ing, irregular)."""
  tokens = word_tokenize(s)
  if not tokens:
    return False
  w = tokens[0].lower()
  if not w.isalpha() or w in _NOT_VERBS:
    return False
  if w in _VERBS or w in _IRREGULAR:
    return True
  for suffix, stems in (("ing", (w[:-3], w[:-3] + "e", w[:-4])), ("ed", (w[:-2], w[:-1], w[:-3])),
                        ("es", (w[:-2],)), ("s", (w[:-1],))):
    if w.endswith(suffix) and any(st in _VERBS for st in stems):
      return True
  return len(w) > 5 and w.endswith("ing")
