"""A generated corpus of (response, instruction ids, kwargs) for oracle comparison.

Responses are random mixtures of the features the IFEval checks look at
(titles, bullets, highlights, sections, placeholders, postscripts, JSON, two
responses, quotes, case changes, other languages, commas, end phrases), so
that every check both passes and fails often. kwargs are drawn per id so the
thresholds sit near what the responses contain.
"""
from __future__ import annotations

import json
import random

VOCAB = ["apple", "river", "music", "garden", "silver", "window", "planet", "coffee",
         "engine", "forest", "story", "light", "market", "ocean", "paper", "dream",
         "winter", "signal", "bridge", "candle"]
CAPS = ["IMPORTANT", "NOTE", "DON'T", "CANNOT", "USA", "OK", "I", "IT'S", "WELL-KNOWN",
        "A.I.", "HELLO,WORLD", "GONNA"]
FOREIGN = {
    "fr": "Le petit chat dort sur le canapé pendant que la pluie tombe doucement dehors.",
    "es": "El perro corre por el parque mientras los niños juegan con una pelota roja.",
    "de": "Der alte Mann liest jeden Morgen die Zeitung und trinkt dabei einen Kaffee.",
    "ru": "Сегодня утром мы гуляли по городу и пили горячий чай в маленьком кафе.",
    "ja": "今日はとても良い天気なので、公園で散歩をしました。",
    "hi": "आज मौसम बहुत अच्छा है और हम बाजार जा रहे हैं।",
}
# Abbreviations: the English Punkt model does not end sentences at these; the
# untrained Punkt the offline oracle must use does (see the agreement test).
ABBREVIATED = ["Mr. Smith", "Dr. Lee", "e.g. this", "vs. that"]
PROMPT = "Write a short note about the ocean and the river"
END_PHRASES = ["Any other questions?", "Is there anything else I can help with?"]
UNICODE = ["🙂", "naïve café", "—", "…", "日本", "Ünïcödé"]
REL = ["less than", "at least"]


def _words(rng, lo=3, hi=12):
  out = []
  for _ in range(rng.randint(lo, hi)):
    r = rng.random()
    out.append(rng.choice(CAPS) if r < 0.08 else rng.choice(UNICODE) if r < 0.11
               else rng.choice(ABBREVIATED) if r < 0.13
               else rng.choice(VOCAB) + ("," if rng.random() < 0.1 else ""))
  return out


def sentence(rng):
  w = _words(rng)
  w[0] = w[0][:1].upper() + w[0][1:]
  return " ".join(w) + rng.choice([".", ".", "!", "?", ""])


def paragraph(rng):
  return " ".join(sentence(rng) for _ in range(rng.randint(1, 4)))


def component(rng):
  kind = rng.randrange(16)
  if kind == 0:
    return rng.choice(["<<", "<< "]) + " ".join(_words(rng, 1, 3)) + ">>" if rng.random() < 0.9 \
        else "<< >>"
  if kind == 1:
    return "\n".join(rng.choice(["* ", "- ", "** ", "  * ", "*"]) + sentence(rng)
                     for _ in range(rng.randint(1, 5)))
  if kind == 2:
    return " ".join(rng.choice(["*{}*", "**{}**", "* {} *", "*{}"]).format(
        " ".join(_words(rng, 1, 3))) for _ in range(rng.randint(1, 4)))
  if kind == 3:
    spl = rng.choice(["Section", "SECTION", "section"])
    return "\n".join(f"{spl} {i + 1}\n{paragraph(rng)}" for i in range(rng.randint(1, 4)))
  if kind == 4:
    return " ".join(f"[{rng.choice(VOCAB)}]" for _ in range(rng.randint(1, 4)))
  if kind == 5:
    return rng.choice(["P.S.", "p.s.", "P.P.S", "P. S.", "PS:", "P.P.S."]) + " " + sentence(rng)
  if kind == 6:
    return rng.choice(["My answer is yes.", "My answer is no.", "My answer is maybe.",
                       "my answer is yes", "Answer: yes."])
  if kind == 7:
    return rng.choice(list(FOREIGN.values()))
  if kind == 8:
    return rng.choice(END_PHRASES + ["any other questions"])
  if kind == 9:
    return "\n\n".join(paragraph(rng) for _ in range(rng.randint(2, 4)))
  if kind == 10:
    return "\n***\n".join(paragraph(rng) for _ in range(rng.randint(2, 4)))
  return paragraph(rng)


def whole_response(rng):
  """Special whole-response shapes that a mixture would rarely hit."""
  kind = rng.randrange(10)
  if kind == 9:
    kind = 1
  if kind == 0:
    obj = {rng.choice(VOCAB): rng.choice([1, "x", [1, 2], None]) for _ in range(2)}
    body = json.dumps(obj)
    return rng.choice(["{}", "```json\n{}\n```", "```\n{}\n```", "{} trailing"]).format(body)
  if kind == 1:
    a, b = paragraph(rng), paragraph(rng) if rng.random() < 0.8 else None
    return a + "\n******\n" + (b or a) + rng.choice(["", "", "\n******", "\n******\n******\nx"])
  if kind == 2:
    return '"' + paragraph(rng) + '"'
  if kind == 3:
    return PROMPT + rng.choice([". ", "\n", " "]) + paragraph(rng)
  if kind == 4:
    return rng.choice(list(FOREIGN.values())) + rng.choice(["", " " + sentence(rng)])
  if kind == 5:
    return rng.choice(["", "   ", "\n\n", "*", "***", "123 456", "🙂🙂"])
  if kind == 6:
    return paragraph(rng).upper()
  if kind == 7:
    return paragraph(rng).lower()
  return rng.choice(END_PHRASES)


def response(rng):
  if rng.random() < 0.3:
    text = whole_response(rng)
  else:
    parts = [component(rng) for _ in range(rng.randint(1, 5))]
    text = "".join(p + rng.choice(["\n", "\n\n", " ", "\n"]) for p in parts).strip()
    r = rng.random()
    text = text.upper() if r < 0.1 else text.lower() if r < 0.2 else text
  if rng.random() < 0.2:
    text = rng.choice(["Sure! Here is my answer:\n", "**Answer**\n", '"', "```\n"]) + text
  if rng.random() < 0.2:
    text += rng.choice(["\n**End**", "\nHope this helps!", '"', "\n```", "\n" + END_PHRASES[0]])
  return text


def kwargs_for(iid, rng):
  v = lambda: rng.choice(VOCAB)  # noqa: E731
  table = {
      "keywords:existence": lambda: {"keywords": rng.sample(VOCAB, rng.randint(1, 2))},
      "keywords:frequency": lambda: {"keyword": v(), "frequency": rng.randint(1, 4),
                                     "relation": rng.choice(REL)},
      "keywords:forbidden_words": lambda: {"forbidden_words": rng.sample(VOCAB, 2)},
      "keywords:letter_frequency": lambda: {"letter": rng.choice("aeiostnrlq"),
                                            "let_frequency": rng.randint(1, 30),
                                            "let_relation": rng.choice(REL)},
      "language:response_language": lambda: {
          "language": rng.choice(["en", "en", "fr", "es", "de", "ru", "ja", "hi"])},
      "length_constraints:number_sentences": lambda: {"num_sentences": rng.randint(1, 10),
                                                      "relation": rng.choice(REL)},
      "length_constraints:number_paragraphs": lambda: {"num_paragraphs": rng.randint(1, 4)},
      "length_constraints:number_words": lambda: {"num_words": rng.randint(5, 80),
                                                  "relation": rng.choice(REL)},
      "detectable_content:number_placeholders": lambda: {"num_placeholders": rng.randint(0, 3)},
      "detectable_content:postscript": lambda: {"postscript_marker": rng.choice(["P.S.",
                                                                                 "P.P.S"])},
      "detectable_format:number_bullet_lists": lambda: {"num_bullets": rng.randint(0, 4)},
      "detectable_format:number_highlighted_sections": lambda: {
          "num_highlights": rng.randint(0, 3)},
      "detectable_format:multiple_sections": lambda: {
          "section_spliter": rng.choice(["Section", "SECTION"]),
          "num_sections": rng.randint(1, 4)},
      "combination:repeat_prompt": lambda: {"prompt_to_repeat": PROMPT},
      "startend:end_checker": lambda: {"end_phrase": rng.choice(END_PHRASES)},
      "change_case:capital_word_frequency": lambda: {"capital_frequency": rng.randint(1, 6),
                                                     "capital_relation": rng.choice(REL)},
  }
  if iid == "length_constraints:nth_paragraph_first_word":
    n = rng.randint(1, 4)
    return {"num_paragraphs": n, "nth_paragraph": rng.randint(1, n), "first_word": v()}
  return table[iid]() if iid in table else {}


def nth_paragraph_from(text, rng):
  """kwargs read off the response itself, so the check can pass."""
  paragraphs = [p for p in text.split("\n\n") if p.strip()]
  if not paragraphs:
    return None
  nth = rng.randint(1, len(paragraphs))
  first = paragraphs[nth - 1].split()[0].strip("'\".,?!").lower() or "x"
  return {"num_paragraphs": len(paragraphs) + rng.choice([0, 0, 0, 1]), "nth_paragraph": nth,
          "first_word": first}


def make_corpus(seed: int, n: int, ids: list[str]):
  """n responses, each with every id in `ids` and freshly drawn kwargs."""
  rng = random.Random(seed)
  out = []
  for _ in range(n):
    text = response(rng)
    kwargs = [kwargs_for(i, rng) for i in ids]
    for j, iid in enumerate(ids):
      if iid == "length_constraints:nth_paragraph_first_word" and rng.random() < 0.5:
        kwargs[j] = nth_paragraph_from(text, rng) or kwargs[j]
    out.append((text, list(ids), kwargs))
  return out
