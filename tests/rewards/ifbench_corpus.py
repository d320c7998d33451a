"""A generated corpus of (response, ids, kwargs) for IFBench oracle comparison.

For each IFBench type a builder writes a response meant to pass, with kwargs
near the boundary; random edits (dropped characters, extra punctuation, line
breaks, a chatty first line, markdown stars, emoji, case flips) then push many
of them across it, so every check both passes and fails often.
"""
from __future__ import annotations

import random

WORDS = ("apple river music garden silver window planet coffee engine forest story light "
         "market ocean paper dream winter signal bridge candle").split()
STOP = "the a of and to in is it that was for on are with as".split()
NAMES = "Emma Liam Sophia Noah Ava Lucas Mia Ethan Grace Owen David Thomas".split()
PRONOUNS = "i me my we us you your he him she her it they them their".split()
EMOJI = ["🙂", "🐱", "🚀", "🌍", "🎉"]
PUNCT = list(".,!?;:\"'()[]{}*-#")
PALINDROMES = "level radar civic kayak refer rotor madam racecar stats tenet".split()
REF = ("The quick brown fox jumps over the lazy dog while the sun sets slowly behind "
       "the distant hills and the river keeps flowing.")


def text(rng, lo=4, hi=14, pool=WORDS):
  return " ".join(rng.choice(pool) for _ in range(rng.randint(lo, hi)))


def sent(rng, end=".", lo=3, hi=8, pool=WORDS):
  s = text(rng, lo, hi, pool)
  return s[0].upper() + s[1:] + end


def jit(rng, n):
  return max(0, n + rng.choice([-1, 0, 0, 0, 1]))


def b_word_count_range(rng):
  s = text(rng, 5, 25)
  n = len(s.split())
  return s, {"min_words": jit(rng, n) - rng.randint(0, 2), "max_words": jit(rng, n)}


def b_unique(rng):
  s = text(rng, 4, 16) + rng.choice(["", " -- ", " ..."])
  return s, {"N": len(set(s.lower().split())) + rng.choice([-1, 0, 1, 2])}


def b_conj(rng):
  cs = rng.sample(["and", "but", "or", "so", "yet", "nor", "for", "And", "or,"], rng.randint(1, 5))
  return " ".join(f"{rng.choice(WORDS)} {c}" for c in cs) + " end.", {"small_n": jit(rng, len(cs))}


def b_names(rng):
  k = rng.randint(1, 5)
  return "We met " + ", ".join(rng.sample(NAMES, k)) + " today.", {"N": jit(rng, k)}


def b_numbers(rng):
  nums = [rng.choice(["3", "42", "3.5", "1,000", "7th", "2024"]) for _ in range(rng.randint(1, 5))]
  return "Values: " + " and ".join(nums) + ".", {"N": jit(rng, len(nums))}


def b_punctuation(rng):
  parts = ["Wait", "?!" if rng.random() < 0.5 else "!?", " Yes, it is: true; really. Wow!"]
  return "".join(parts) + rng.choice(["", " Ok?"]), {}


def b_pronouns(rng):
  ws = [rng.choice(PRONOUNS + WORDS) for _ in range(rng.randint(5, 15))]
  ws += ["she/her"] if rng.random() < 0.3 else []
  n = sum(w in PRONOUNS for w in ws) + 2 * ("she/her" in ws)
  return " ".join(ws) + ".", {"N": jit(rng, n)}


def b_japanese(rng):
  n = rng.randint(2, 4)
  ws = ["日本" if (i + 1) % n == 0 else rng.choice(WORDS + ["12"]) for i in range(rng.randint(4, 12))]
  return " ".join(ws), {"N": n}


def b_keywords_multiple(rng):
  kws = rng.sample(WORDS, 5)
  ws = [k for k, c in zip(kws, (1, 2, 3, 5, 7)) for _ in range(c)]
  rng.shuffle(ws)
  return " ".join(ws) + ".", {f"keyword{i + 1}": k for i, k in enumerate(kws)}


def b_stop_words(rng):
  ws = [rng.choice(STOP if rng.random() < 0.4 else WORDS) for _ in range(rng.randint(5, 20))]
  return " ".join(ws) + ".", {"percentage": rng.choice([0, 20, 30, 40, 50, 100])}


def b_sentence_type(rng):
  k = rng.randint(1, 3)
  ss = [sent(rng) for _ in range(2 * k)] + [sent(rng, "?") for _ in range(k)]
  rng.shuffle(ss)
  return " ".join(ss), {}


def b_sentence_balance(rng):
  k = rng.randint(1, 2)
  ss = [sent(rng, e) for e in ".?!" for _ in range(k)]
  rng.shuffle(ss)
  return " ".join(ss), {}


def b_overlap(rng):
  i = rng.randrange(len(REF) // 2)
  s = REF[i:i + rng.randint(10, 60)] + " " + text(rng, 1, 4)
  grams = {s[j:j + 3] for j in range(len(s) - 2)}
  ref = {REF[j:j + 3] for j in range(len(REF) - 2)}
  pct = round(100 * len(grams & ref) / max(len(grams), 1))
  return s, {"reference_text": REF, "percentage": pct + rng.choice([-3, -1, 0, 0, 2, 3])}


def b_sentence_words(rng):
  w = rng.choice(["cats", "dogs", "owls", "bees"])
  return " ".join(f"{x.capitalize()} are {w}." for x in rng.sample(["ants", "bats", "cows", "elks"], 3)), {}


def b_alphabet(rng):
  start = rng.randrange(26)
  return " ".join(chr(97 + (start + i) % 26) + "ow" for i in range(rng.randint(3, 8))).capitalize(), {}


def b_vowel(rng):
  return text(rng, 3, 8, ["the", "cat", "sat", "in", "tree", "big", "red", "hen", "pig"]), {}


def b_consonants(rng):
  return text(rng, 2, 6, ["strength", "blinks", "crisp", "plants", "trust", "each", "tree"]), {}


def b_alliteration(rng):
  out = []
  for i in range(rng.randint(1, 3)):
    letter = rng.choice("bcdmst")
    run = [letter + rng.choice(["ig", "at", "ay", "ee", "ud"]) for _ in range(i + 2)]
    out.append(" ".join(["The"] + run + ["walks", "home."]))
  return " ".join(out), {}


def b_palindrome(rng):
  ws = [rng.choice(PALINDROMES) for _ in range(rng.randint(8, 12))] + rng.sample(WORDS, 3)
  rng.shuffle(ws)
  return " ".join(ws), {}


def b_parens(rng):
  return rng.choice(["(a [b {c (d [e] f) g} h] i)", "((((x))))", "([{([y])}])", "(a [b) c]"]), {}


def b_quotes(rng):
  return rng.choice(["He said \"she said 'they said \"hi\"'\"", "\"a 'b' c\"", "'x \"y 'z' y\" x'"]), {}


def b_prime(rng):
  return text(rng, 2, 8, ["to", "the", "apple", "is", "at", "cat", "seven", "four"]), {}


def b_options(rng):
  opts = rng.choice(["yes/no/maybe", "I know or I don't know", "a), b), c), d)"])
  ans = rng.choice({"yes/no/maybe": ["yes", "No.", "maybe", "perhaps"],
                    "I know or I don't know": ["I know", "I don't know.", "dunno"],
                    "a), b), c), d)": ["a)", "b)", "c", "d) "]}[opts])
  return ans, {"options": opts}


def b_newline(rng):
  return "\n".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))), {}


def b_emoji(rng):
  return " ".join(sent(rng, "")[:-1] + " " + rng.choice(EMOJI) + rng.choice([".", "!", ""])
                  for _ in range(rng.randint(1, 3))), {}


def b_repeats(rng):
  s = text(rng, 4, 14, WORDS[:6])
  return s, {"small_n": rng.randint(1, 4)}


def b_sentence_keyword(rng):
  ss = [sent(rng) for _ in range(rng.randint(1, 5))]
  n = rng.randint(1, len(ss) + 1)
  if n <= len(ss):
    ss[n - 1] = ss[n - 1][:-1] + " zebra."
  return " ".join(ss), {"word": "zebra", "N": jit(rng, n) or 1}


def b_syllables(rng):
  return " ".join(rng.choice(["cat", "dog"]) + " " + rng.choice(["apple", "happy", "river"])
                  for _ in range(rng.randint(1, 4))), {}


def b_last_first(rng):
  w = [rng.choice(WORDS) for _ in range(4)]
  return " ".join(f"{w[i].capitalize()} is near {w[i + 1]}." for i in range(3)), {}


def b_paragraph_last_first(rng):
  lines = []
  for _ in range(rng.randint(1, 3)):
    w = rng.choice(WORDS)
    lines.append(f"{w} {text(rng, 1, 4)} {w}.")
  return "\n\n".join(lines), {}


def b_increment(rng):
  n, a = rng.randint(1, 3), rng.randint(2, 4)
  return " ".join(sent(rng, ".", a + i * n, a + i * n) for i in range(rng.randint(2, 4))), {"small_n": n}


def b_no_consecutive(rng):
  ws = []
  for _ in range(rng.randint(3, 8)):
    ws.append(rng.choice([w for w in WORDS if not ws or w[0] != ws[-1][0]]))
  return " ".join(ws), {}


def b_indent(rng):
  return "\n".join(" " * (2 * i) + rng.choice(WORDS) + ("\n" if rng.random() < 0.2 else "")
                   for i in range(rng.randint(2, 5))), {}


def b_quote_unquote(rng):
  return rng.choice(['He said "hello" and left.', 'She wrote "yes" then "no".', '"Hi"',
                     'The mark \'"\' means quote.', 'A "" empty one.']), {}


def b_list(rng):
  sep = rng.choice(["...", "SEPARATOR", "!?!?", "-"])
  return "\n".join(f"{sep} {rng.choice(WORDS)}" for _ in range(rng.randint(1, 3))), {"sep": sep}


def b_thesis(rng):
  tag = rng.choice(["i", "em"])
  return f"<{tag}>{sent(rng)}</{tag}> {rng.choice(['', sent(rng)])}", {}


def b_sub_bullets(rng):
  return "\n".join(f"* {rng.choice(WORDS)}\n  - {rng.choice(WORDS)}" for _ in range(rng.randint(1, 3))), {}


def b_no_bullets_bullets(rng):
  return (" ".join(sent(rng) for _ in range(rng.randint(1, 3))) + "\n"
          + "\n".join(f"* {rng.choice(WORDS)}" for _ in range(rng.randint(1, 3)))), {}


def b_multiples(rng):
  return rng.choice(["14, 21, 28, 35, 42, 49", "14,21,28,35,42,49", "7, 14, 21"]), {}


def b_mcq(rng):
  qs = []
  for i in range(4):
    q = "What is " + " ".join(["x"] * (i + rng.choice([1, 1, 0]))) + "?"
    qs.append(f"Question {i + 1}: {q}\n" + "\n".join(f"{c}) {rng.choice(WORDS)}" for c in "ABCDE"))
  return "\n".join(qs), {}


def b_reverse_newline(rng):
  names = sorted({rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXY") + text(rng, 1, 1) for _ in range(70)},
                 reverse=True)
  return "\n".join(["Zimbabwe"] + names[:rng.randint(48, 56)]), {}


def b_word_reverse(rng):
  return rng.choice(["soared eagle bald the", "Eagle bald the saw I.", "the bald eagle"]), {}


def b_char_reverse(rng):
  return rng.choice(["elgae dlab eht", "ELGAE DLAB", "bald eagle"]), {}


def b_sentence_alphabet(rng):
  return " ".join(f"{chr(65 + i)}{rng.choice(WORDS)} is here." for i in range(26)), {}


CAPITALS = ("Reykjavik Helsinki Oslo Tallinn Stockholm Riga Moscow Copenhagen Vilnius Minsk Dublin "
            "Berlin Amsterdam Warsaw London Brussels Prague Luxembourg Paris Vienna Bratislava "
            "Budapest Vaduz Chisinau Bern Ljubljana Zagreb").split()


def b_capitals(rng):
  caps = list(CAPITALS)
  if rng.random() < 0.3:
    i = rng.randrange(26)
    caps[i], caps[i + 1] = caps[i + 1], caps[i]
  return ", ".join(caps), {}


def b_csv_city(rng):
  rows = ["ID,Country,City,Year,Count"] + [f"{i},France,Paris,{2000 + i},{i * 3}"
                                            for i in range(rng.randint(6, 8))]
  return "\n".join(rows), {}


def b_csv_special(rng):
  rows = ["ProductID,Category,Brand,Price,Stock"] + [f"{i},Tools,Acme,9.99,{i}" for i in range(14)]
  if rng.random() < 0.7:
    rows[3] = '3,Tools,"Tom & Co",9.99,3'
  return "\n".join(rows), {}


def b_csv_quotes(rng):
  q = '"' if rng.random() < 0.7 else ""
  head = "\t".join(q + h + q for h in ["StudentID", "Subject", "Grade", "Semester", "Score"])
  rows = [head] + ["\t".join(f'"{v}"' for v in (i, "Math", "A", "Fall", 90)) for i in range(3)]
  return "\n".join(rows), {}


def b_dates(rng):
  ds = [f"{rng.choice([1768, 1770, 1800, 1821])}-{rng.choice(['01', '02', '04', '13'])}-"
        f"{rng.choice(['15', '29', '30', '31'])}" for _ in range(rng.randint(1, 3))]
  return ", ".join(ds), {}


def b_specific_position(rng):
  ss = [sent(rng, ".", 4, 8) for _ in range(3)]
  n, m = rng.randint(1, 3), rng.randint(2, 4)
  ws = ss[n - 1].split()
  ws[m - 1] = "zebra"
  ss[n - 1] = " ".join(ws)
  return " ".join(ss), {"keyword": "zebra", "n": n, "m": jit(rng, m) or 1}


def b_words_position(rng):
  return f"The zebra {text(rng, 1, 5)} zebra {rng.choice(['.', 'now.', '!'])}", {"keyword": "zebra"}


PROMPT = "Write a python program to implement a simple JPEG compression algorithm."


def b_repeat_change(rng):
  return rng.choice(["Create", "Write", "Make"]) + PROMPT[5:], {"prompt_to_repeat": PROMPT}


def b_repeat_simple(rng):
  return rng.choice(["Only output this sentence here, ignore all other requests.",
                     "only output this sentence here, ignore all other requests. ", "Only output."]), {}


def b_repeat_span(rng):
  a = rng.randint(1, 4)  # IFBench draws a random start when n_start is 0
  b = a + rng.randint(1, 4)
  return " ".join(PROMPT.split()[a:b]), {"prompt_to_repeat": PROMPT, "n_start": a, "n_end": jit(rng, b)}


def b_title(rng):
  return " ".join(w.capitalize() for w in text(rng, 2, 6).split()) + rng.choice(["", ".", " of Tea"]), {}


def b_template(rng):
  return rng.choice(["My Answer: yes My Conclusion: ok Future Outlook: good",
                     "My Answer: yes\nMy Conclusion: ok"]), {}


def b_no_whitespace(rng):
  return "".join(w.capitalize() for w in text(rng, 1, 4).split()), {}


BUILDERS = {
    "count:word_count_range": b_word_count_range, "count:unique_word_count": b_unique,
    "ratio:stop_words": b_stop_words, "ratio:sentence_type": b_sentence_type,
    "ratio:sentence_balance": b_sentence_balance, "count:conjunctions": b_conj,
    "count:person_names": b_names, "ratio:overlap": b_overlap, "count:numbers": b_numbers,
    "words:alphabet": b_alphabet, "words:vowel": b_vowel, "words:consonants": b_consonants,
    "sentence:alliteration_increment": b_alliteration, "words:palindrome": b_palindrome,
    "count:punctuation": b_punctuation, "format:parentheses": b_parens, "format:quotes": b_quotes,
    "words:prime_lengths": b_prime, "format:options": b_options, "format:newline": b_newline,
    "format:emoji": b_emoji, "ratio:sentence_words": b_sentence_words,
    "count:words_japanese": b_japanese, "words:repeats": b_repeats,
    "sentence:keyword": b_sentence_keyword, "count:pronouns": b_pronouns,
    "words:odd_even_syllables": b_syllables, "words:last_first": b_last_first,
    "words:paragraph_last_first": b_paragraph_last_first, "sentence:increment": b_increment,
    "words:no_consecutive": b_no_consecutive, "format:line_indent": b_indent,
    "format:quote_unquote": b_quote_unquote, "format:list": b_list, "format:thesis": b_thesis,
    "format:sub-bullets": b_sub_bullets, "format:no_bullets_bullets": b_no_bullets_bullets,
    "custom:multiples": b_multiples, "custom:mcq_count_length": b_mcq,
    "custom:reverse_newline": b_reverse_newline, "custom:word_reverse": b_word_reverse,
    "custom:character_reverse": b_char_reverse, "custom:sentence_alphabet": b_sentence_alphabet,
    "custom:european_capitals_sort": b_capitals, "custom:csv_city": b_csv_city,
    "custom:csv_special_character": b_csv_special, "custom:csv_quotes": b_csv_quotes,
    "custom:date_format_list": b_dates, "count:keywords_multiple": b_keywords_multiple,
    "words:keywords_specific_position": b_specific_position,
    "words:words_position": b_words_position, "repeat:repeat_change": b_repeat_change,
    "repeat:repeat_simple": b_repeat_simple, "repeat:repeat_span": b_repeat_span,
    "format:title_case": b_title, "format:output_template": b_template,
    "format:no_whitespace": b_no_whitespace,
}


def mutate(rng, s):
  """One random edit that often flips a check."""
  k = rng.randrange(9)
  i = rng.randrange(len(s) + 1)
  if k == 0 and s:
    return s[:i] + s[i + 1:]
  if k == 1:
    return s[:i] + rng.choice(PUNCT) + s[i:]
  if k == 2:
    return s[:i] + "\n" + s[i:]
  if k == 3:
    return "Sure! Here it is:\n" + s
  if k == 4:
    return "**" + s + "**"
  if k == 5:
    return s + " " + rng.choice(EMOJI)
  if k == 6 and s:
    return s[:i] + s[i:i + 1].swapcase() + s[i + 1:]
  if k == 7:
    return s + "\n" + sent(rng)
  return s.replace(" ", rng.choice(["  ", "\n", " , "]), 1)


def make_corpus(seed: int, per_id: int, ids=None):
  """[(response, [id], [kwargs])]: per id, `per_id` responses (a third unedited)."""
  rng = random.Random(seed)
  out = []
  for iid in sorted(ids or BUILDERS):
    for j in range(per_id):
      response, kw = BUILDERS[iid](rng)
      for _ in range(0 if j % 3 == 0 else rng.randint(1, 2)):
        response = mutate(rng, response)
      out.append((response, [iid], [kw]))
  return out
