"""IFBench verifiers, part 2: format:*, custom:* and repeat:* (offline).

Same conventions as ifbench_words.py: each rule reproduces IFBench's published
check, quirks included; where IFBench's checker raises, the instruction fails.
"""
from __future__ import annotations

import csv
import io
import re
import string
import unicodedata

from rljax.rewards import ifbench_text as t
from rljax.rewards.ifbench_words import _int, ifbench
from rljax.rewards.verifier import Arg

# --- format:* ----------------------------------------------------------------------


@ifbench("format:parentheses")
def parentheses(r, kw):
  """Brackets ( [ { nested at least 5 deep and closed; a mismatch starts over."""
  stack, deepest = [], 0
  pairs = {")": "(", "]": "[", "}": "{"}
  for ch in r:
    if ch in "([{":
      stack.append(ch)
      deepest = max(deepest, len(stack))
    elif ch in pairs:
      if stack and stack[-1] == pairs[ch]:
        stack.pop()
        if deepest >= 5 and len(stack) < deepest:
          return True
      else:
        stack, deepest = [], 0
  return False


@ifbench("format:quotes")
def quotes(r, kw):
  """Quotes (" and ') nested at least 3 deep, closed from the inside out."""
  stack, reached = [], 0
  for ch in r:
    if stack and ch == stack[-1]:
      stack.pop()
      if reached - len(stack) >= 3:
        return True
    elif ch in "\"'":
      stack.append(ch)
      reached = max(reached, len(stack))
  return False


def parse_options(options: str) -> tuple[list[str], bool]:
  """IFBench's option list ('/' or 'or' or ',' separated) and whether it is a/b/c letters."""
  letters = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", options) is not None
  sep = "/" if "/" in options else "or" if "or" in options else ","
  return [o.strip() for o in options.split(sep)], letters


@ifbench("format:options", Arg("options", "str"))
def options(r, kw):
  """The whole response is one of the options (letters exactly; words ignoring case and
  surrounding punctuation)."""
  opts, letters = parse_options(kw["options"])
  if letters:
    return r in opts
  value = t.trim(r).lower()
  return any(t.trim(o).lower() == value for o in opts)


@ifbench("format:newline")
def newline(r, kw):
  """One word per line (punctuation deleted, blank lines ignored)."""
  value = t.strip_punct(r)
  lines = [line for line in value.strip().split("\n") if line != ""]
  return len(lines) == len(value.strip().split())


def _no_punct_strip(s: str) -> str:
  return t.strip_punct(s).strip()


@ifbench("format:emoji")
def emoji_sentences(r, kw):
  """Each sentence ends with an emoji (or the next sentence starts with one)."""
  sentences = t.split_into_sentences(r)
  for i, sentence in enumerate(sentences):
    s = _no_punct_strip(sentence)
    if not s:
      return False
    if not t.is_emoji(s[-1]) and not t.is_emoji(s[-2] if len(s) > 1 else s[-1]):
      if i == len(sentences) - 1:
        return False
      nxt = _no_punct_strip(sentences[i + 1])
      if not nxt or not t.is_emoji(nxt[0]):
        return False
  return True


@ifbench("format:line_indent")
def line_indent(r, kw):
  """Each line is indented by more spaces than the previous one (a staircase)."""
  lines = r.split("\n")
  for line in lines:  # removing while iterating skips the line after a blank one, as IFBench
    if not line.strip():
      lines.remove(line)
  indents = [len(line) - len(line.lstrip(" ")) for line in lines]
  return all(b > a for a, b in zip(indents, indents[1:]))


@ifbench("format:quote_unquote")
def quote_unquote(r, kw):
  """Quotes are never directly adjacent ("" after whitespace removal) and the text
  doesn't end with a quote."""
  value = r.replace("“", '"').replace("”", '"').replace("'\"'", "")
  value = "".join(value.split())
  if '""' in value:
    return False
  return value.strip(string.digits + t.PUNCT.replace('"', ""))[-1] != '"'


@ifbench("format:list", Arg("sep", "str"))
def special_list(r, kw):
  """The bullet marker `sep` occurs at least twice."""
  return r.count(kw["sep"]) >= 2


@ifbench("format:thesis")
def thesis(r, kw):
  """An <i>/<em> italic thesis with text, followed by more text."""
  index = r.find("<i>")
  if index == -1:
    index = r.find("<em>")
    if index == -1:
      return False
  value = r[index:]
  end = value.find("</i>")
  if end == -1:
    end = value.find("</em>")
    if end == -1:
      return False
  return value[3:end].strip() != "" and value[end + 4:].strip() != ""


@ifbench("format:sub-bullets")
def sub_bullets(r, kw):
  """Every `*` bullet is followed by some `-` before the next `*`."""
  return all("-" in piece for piece in r.split("*")[1:])


@ifbench("format:no_bullets_bullets")
def no_bullets_bullets(r, kw):
  """At least two sentences of prose, then at least two `*` lines and nothing else."""
  prose, n_sentences, n_bullets = True, 0, 0
  for line in r.split("\n"):
    if line.strip().startswith("*"):
      prose = False
      if n_sentences < 2:
        return False
      n_bullets += 1
    elif prose:
      n_sentences += len(t.split_into_sentences(line.strip()))
    else:
      return False
  return n_bullets >= 2


@ifbench("format:title_case")
def title_case(r, kw):
  """No token is all lower case or lower-then-upper (NLTK tokens)."""
  for w in t.word_tokenize(r):
    if w[0].isupper() and w[1:].islower():
      continue
    if w[0].islower() and (w[1:].isupper() or w[1:].islower()):
      return False
  return True


@ifbench("format:output_template")
def output_template(r, kw):
  """Contains 'My Answer:', 'My Conclusion:' and 'Future Outlook:'."""
  return all(s in r for s in ("My Answer:", "My Conclusion:", "Future Outlook:"))


@ifbench("format:no_whitespace")
def no_whitespace(r, kw):
  return not any(ch.isspace() for ch in r)


# --- custom:* ----------------------------------------------------------------------


@ifbench("custom:multiples")
def multiples(r, kw):
  """The numbers are exactly 14, 21, ..., 49 (multiples of 7 in [11, 50]), in order."""
  return re.findall(r"\d+", r.replace(",", ", ")) == [str(i) for i in range(14, 51, 7)]


@ifbench("custom:mcq_count_length")
def mcq_count_length(r, kw):
  """Four 'Question N' blocks, five A-E options each, question texts getting longer."""
  if not r.startswith("Question"):
    return False
  blocks = re.split(r"\n*(?:Question \d+[\.|\):;]?\s*)", r)
  blocks = [b.strip() for b in blocks if b.strip()]
  if len(blocks) != 4:
    return False
  lengths = []
  for block in blocks:
    question, n_options, in_options = "", 0, False
    for line in block.split("\n"):
      if re.match(r"^[A-Ea-e][\.|\)]\s*\w+", line.strip()):
        n_options += 1
        in_options = True
      elif not in_options:
        question += " " + line.strip()
    if n_options != 5:
      return False
    lengths.append(len(question.strip()))
  return all(a < b for a, b in zip(lengths, lengths[1:]))


def ascii_fold(s: str) -> str:
  """'São Tomé' -> 'Sao Tome' (NFKD, non-ASCII dropped)."""
  return unicodedata.normalize("NFKD", s).encode("ASCII", "ignore").decode("ASCII")


@ifbench("custom:reverse_newline")
def reverse_newline(r, kw):
  """From the first line naming Zimbabwe: 52+ lines in reverse alphabetical order."""
  lines = [t.trim(line) for line in r.split("\n") if t.trim(line)]
  start = next((i for i, line in enumerate(lines) if "Zimbabwe" in line), None)
  if start is None or len(lines) - start < 52:
    return False
  folded = [ascii_fold(line) for line in lines[start:]]
  return folded == sorted(folded, reverse=True)


@ifbench("custom:word_reverse")
def word_reverse(r, kw):
  """The words in reverse order read as one sentence containing 'bald eagle'."""
  value = " ".join(t.strip_punct(r.lower().strip()).split()[::-1])
  return "bald eagle" in value and value in t.split_into_sentences(value)


@ifbench("custom:character_reverse")
def character_reverse(r, kw):
  return "elgae dlab" in r.lower()


@ifbench("custom:sentence_alphabet")
def sentence_alphabet(r, kw):
  """26 sentences whose first words start with a, b, ..., z."""
  sentences = t.split_into_sentences(r)
  return len(sentences) == 26 and all(
      s.lstrip().split()[0].lower()[0] == chr(97 + i) for i, s in enumerate(sentences))


CAPITALS_BY_LATITUDE = (
    "Reykjavik Helsinki Oslo Tallinn Stockholm Riga Moscow Copenhagen Vilnius Minsk Dublin "
    "Berlin Amsterdam Warsaw London Brussels Prague Luxembourg Paris Vienna Bratislava "
    "Budapest Vaduz Chisinau Bern Ljubljana Zagreb").split()


@ifbench("custom:european_capitals_sort")
def european_capitals_sort(r, kw):
  """Exactly IFBench's 27 capitals, comma separated, north to south."""
  caps = [c.strip() for c in ascii_fold(r).split(",") if c.strip()]
  return caps == CAPITALS_BY_LATITUDE


def _csv(value: str, **fmt) -> list[list[str]]:
  return list(csv.reader(io.StringIO(value), **fmt))


@ifbench("custom:csv_city")
def csv_city(r, kw):
  """A CSV with header ID,Country,City,Year,Count and 7 rows of 5 fields."""
  rows = _csv(r)
  return (len(rows) == 8 and rows[0] == ["ID", "Country", "City", "Year", "Count"]
          and all(len(row) == 5 for row in rows[1:]))


def _header(r: str, names: list[str], sep: str) -> bool:
  pattern = sep.join(f'({n}|"{n}")' for n in names)
  return re.match("^" + pattern + "$", r.split("\n")[0].strip()) is not None


@ifbench("custom:csv_special_character")
def csv_special_character(r, kw):
  """Product CSV (5 columns, 14 rows); some field quotes a special character."""
  if not _header(r, ["ProductID", "Category", "Brand", "Price", "Stock"], r",[ \t]*"):
    return False
  rows = _csv(r.replace('"', '"""'))
  if len(rows) != 15:
    return False
  for row in rows[1:]:
    if len(row) != 5:
      return False
    if any(re.match(r'".*[^\d\w\s].*"', field) for field in row):
      return True
  return False


@ifbench("custom:csv_quotes")
def csv_quotes(r, kw):
  """Tab-separated, header + 3 rows of 5 fields, every field in double quotes."""
  if not _header(r, ["StudentID", "Subject", "Grade", "Semester", "Score"], r"\t *"):
    return False
  rows = _csv(r.replace('"', '"""'), delimiter="\t")
  return len(rows) == 4 and all(
      len(row) == 5 and all(f.strip()[0] == '"' and f.strip()[-1] == '"' for f in row)
      for row in rows)


_MONTH_DAYS = {**dict.fromkeys((1, 3, 5, 7, 8, 10, 12), 31), **dict.fromkeys((4, 6, 9, 11), 30),
               2: 29}


@ifbench("custom:date_format_list")
def date_format_list(r, kw):
  """Comma-separated YYYY-MM-DD dates with years 1769..1821 and valid day counts."""
  for date in r.strip().split(","):
    date = date.strip()
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", date):
      return False
    y, m, d = (int(x) for x in date.split("-"))
    if not 1769 <= y <= 1821 or m > 12 or d > _MONTH_DAYS.get(m, d):
      return False
  return True


# --- repeat:* ----------------------------------------------------------------------

REPEAT_SIMPLE = "Only output this sentence here, ignore all other requests."


@ifbench("repeat:repeat_change", Arg("prompt_to_repeat", "str"))
def repeat_change(r, kw):
  """The request repeated with its first word changed (compared word by word)."""
  prompt = kw["prompt_to_repeat"]
  return prompt != r and prompt.split()[1:] == r.split()[1:]


@ifbench("repeat:repeat_simple")
def repeat_simple(r, kw):
  return r.strip().lower() == REPEAT_SIMPLE.lower()


@ifbench("repeat:repeat_span", Arg("prompt_to_repeat", "str"), _int("n_start"), _int("n_end"))
def repeat_span(r, kw):
  """The prompt's words [n_start, n_end) (word indices, as IFBench checks; IFBench replaces
  n_start = 0 by a random start, here 0 is the first word)."""
  return r.strip().lower().split() == kw["prompt_to_repeat"].strip().lower().split()[
      kw["n_start"]:kw["n_end"]]
