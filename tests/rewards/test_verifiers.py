"""Every IFEval verifier: satisfying, violating and edge cases; kwargs validation."""
import pytest

from rljax import rewards
from rljax.rewards import text

IFEVAL_IDS = [
    "keywords:existence", "keywords:frequency", "keywords:forbidden_words",
    "keywords:letter_frequency", "language:response_language",
    "length_constraints:number_sentences", "length_constraints:number_paragraphs",
    "length_constraints:number_words", "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders", "detectable_content:postscript",
    "detectable_format:number_bullet_lists", "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
    "detectable_format:json_format", "detectable_format:title", "combination:two_responses",
    "combination:repeat_prompt", "startend:end_checker", "change_case:capital_word_frequency",
    "change_case:english_capital", "change_case:english_lowercase", "punctuation:no_comma",
    "startend:quotation",
]

LESS, LEAST = "less than", "at least"
EN = "The weather is lovely today and we are going for a long walk in the park."

# (id, kwargs, response, strict, loose)
CASES = [
    # keywords
    ("keywords:existence", {"keywords": ["river", "Moon"]}, "The moon over the RIVER.", 1, 1),
    ("keywords:existence", {"keywords": ["river", "moon"]}, "Only the river.", 0, 0),
    ("keywords:existence", {"keywords": ["c++"]}, "I like C++ a lot.", 1, 1),  # literal match
    ("keywords:existence", {"keywords": ["café"]}, "Un CAFÉ noir.", 1, 1),  # unicode casefold
    ("keywords:frequency", {"keyword": "cat", "frequency": 3, "relation": LEAST},
     "cat cat category", 1, 1),  # substring matches count, as in IFEval
    ("keywords:frequency", {"keyword": "cat", "frequency": 3, "relation": LEAST},
     "cat cat", 0, 0),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": LESS}, "one cat", 1, 1),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": LESS}, "cat Cat", 0, 0),
    ("keywords:forbidden_words", {"forbidden_words": ["very"]}, "Everything is fine.", 1, 1),
    ("keywords:forbidden_words", {"forbidden_words": ["very"]}, "It is VERY fine.", 0, 0),
    ("keywords:forbidden_words", {"forbidden_words": ["very"]}, "Very\nfine answer here", 0, 1),
    ("keywords:letter_frequency", {"letter": "e", "let_frequency": 3, "let_relation": LEAST},
     "EeE", 1, 1),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 1, "let_relation": LESS},
     "A lazy dog.", 0, 0),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 1, "let_relation": LESS},
     "A lucky dog.", 1, 1),
    # language
    ("language:response_language", {"language": "en"}, EN, 1, 1),
    ("language:response_language", {"language": "fr"}, EN, 0, 0),
    ("language:response_language", {"language": "fr"},
     "Le petit chat dort sur le canapé pendant que la pluie tombe dehors.", 1, 1),
    ("language:response_language", {"language": "fr"}, "12345 67", 1, 1),  # undetectable
    # length
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": LEAST},
     "One. Two! Three?", 1, 1),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": LESS},
     "One. Two! Three?", 0, 0),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": LESS},
     "Mr. Smith met Dr. Lee at 3.5 p.m. today.", 1, 1),  # abbreviations, decimals
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\nb", 1, 1),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\n***\nb", 0, 0),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "***\na\n***\nb\n***", 1, 1),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "a\n\nb\n\nc", 0, 0),
    ("length_constraints:number_words", {"num_words": 4, "relation": LEAST},
     "one two, three-four", 1, 1),
    ("length_constraints:number_words", {"num_words": 4, "relation": LESS},
     "one two three four", 0, 0),  # one line: loose has nothing to drop
    ("length_constraints:number_words", {"num_words": 3, "relation": LESS}, "日本 語 テキスト", 0, 0),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Then"},
     "First part.\n\n\"Then,\" she said.", 1, 1),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First part.\n\nAfter that.", 0, 0),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "first"},
     "First part.\n\nSecond.\n\nThird.", 0, 1),  # loose: without the last line
    # content
    ("detectable_content:number_placeholders", {"num_placeholders": 2},
     "Dear [name], see you at [place].", 1, 1),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name].", 0, 0),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\np.s. bye", 1, 1),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi. PS bye", 0, 0),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP. P. S more", 1, 1),
    # format
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n* b", 1, 1),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n- b\n* c", 0, 1),
    ("detectable_format:number_bullet_lists", {"num_bullets": 3}, "* a\n\n  - b", 0, 0),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2},
     "Here:\n* a\n* b\n**Bold line**", 1, 1),  # "**" lines are not bullets
    ("detectable_format:constrained_response", {}, "My answer is yes.", 1, 1),
    ("detectable_format:constrained_response", {}, "Yes.", 0, 0),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "*one* and **two**", 1, 1),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "*one* and * *", 0, 0),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nHello\nSection 2\nBye", 1, 1),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "SECTION 1\nHello\nSECTION 2\nBye", 0, 0),  # case-sensitive
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', 1, 1),
    ("detectable_format:json_format", {}, "{'a': 1}", 0, 0),
    ("detectable_format:json_format", {}, 'Here you go:\n{"a": 1}', 0, 1),  # loose drops line 1
    ("detectable_format:title", {}, "<<Ode to Joy>>\nText", 1, 1),
    ("detectable_format:title", {}, "<<  >>\nText", 0, 0),
    ("detectable_format:title", {}, "<<A\nB>>", 0, 0),
    # combination
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", 1, 1),
    ("combination:two_responses", {}, "Same.\n******\nSame.", 0, 0),
    ("combination:two_responses", {}, "A\n******\n******\nB", 0, 0),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem."},
     "write a poem. Roses are red.", 1, 1),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem."},
     "Sure! Write a poem. Roses.", 0, 0),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem."},
     "Sure!\nWrite a poem. Roses.", 0, 1),
    # startend
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     'Done. any other questions?"', 1, 1),
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     "Any other questions? Bye.", 0, 0),
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     "Text. Any other questions?\n**Note**", 0, 1),
    ("startend:quotation", {}, ' "quoted text" ', 1, 1),
    ("startend:quotation", {}, '"', 0, 0),
    ("startend:quotation", {}, "“curly quotes”", 0, 0),
    # change case
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": LEAST},
     "The USA and NATO met.", 1, 1),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": LEAST},
     "The Usa met.", 0, 0),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": LEAST},
     "DON'T", 1, 1),  # "DO" + "N'T", as NLTK splits
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": LESS},
     "I said OK.", 0, 0),  # "I" counts
    ("change_case:english_capital", {}, EN.upper(), 1, 1),
    ("change_case:english_capital", {}, EN, 0, 0),
    ("change_case:english_lowercase", {}, EN.lower(), 1, 1),
    ("change_case:english_lowercase", {}, "le petit chat dort sur le canapé pendant que la pluie"
     " tombe doucement dehors.", 0, 0),
    ("change_case:english_lowercase", {}, "**Title**\n" + EN.lower(), 0, 1),
    # punctuation
    ("punctuation:no_comma", {}, "No commas here.", 1, 1),
    ("punctuation:no_comma", {}, "One, two.", 0, 0),
    ("punctuation:no_comma", {}, "Fullwidth comma，is not a comma.", 1, 1),
]


@pytest.mark.parametrize("iid,kwargs,response,strict,loose", CASES)
def test_case(iid, kwargs, response, strict, loose):
  v = rewards.get_verifier(iid)
  assert v.check(response, kwargs, mode="strict") is bool(strict)
  assert v.check(response, kwargs, mode="loose") is bool(loose)


def test_all_ifeval_ids_registered_and_covered():
  assert set(IFEVAL_IDS) <= set(rewards.verifier_ids())
  assert len(IFEVAL_IDS) == 25
  covered = {c[0] for c in CASES}
  assert covered == set(IFEVAL_IDS)
  for iid in IFEVAL_IDS:  # each id has a passing and a failing case
    assert {bool(c[3]) for c in CASES if c[0] == iid} == {True, False}, iid


@pytest.mark.parametrize("iid", IFEVAL_IDS)
def test_empty_response_fails_everything(iid):
  kwargs = next(c[1] for c in CASES if c[0] == iid)
  v = rewards.get_verifier(iid)
  for empty in ("", "   \n\t"):
    assert not v.check(empty, kwargs, "strict")
    assert not v.check(empty, kwargs, "loose")


def test_markdown_loose_mode():
  v = rewards.get_verifier("startend:quotation")
  assert not v.check('**"bold quote"**', {}, "strict")
  assert v.check('**"bold quote"**', {}, "loose")  # '*' removed


def test_check_all_per_criterion():
  got = rewards.check_all("Hello, world", ["punctuation:no_comma", "keywords:existence"],
                          [{}, {"keywords": ["world"]}])
  assert got == [False, True]


# --- kwargs validation -------------------------------------------------------------


def test_unknown_id_lists_known():
  with pytest.raises(ValueError, match=r"unknown verifier 'nope:x'.*keywords:existence"):
    rewards.get_verifier("nope:x")


@pytest.mark.parametrize("iid,kwargs,match", [
    ("length_constraints:number_words", {"num_words": 5}, r"missing kwarg 'relation'"),
    ("length_constraints:number_words", {"num_words": "5", "relation": LEAST},
     r"'num_words' must be int >= 0, got str '5'"),
    ("length_constraints:number_words", {"num_words": True, "relation": LEAST},
     r"'num_words' must be int"),
    ("length_constraints:number_words", {"num_words": 5, "relation": "at most"},
     r"'relation' must be one of 'less than', 'at least'"),
    ("length_constraints:number_words", {"num_words": -1, "relation": LEAST}, r"int >= 0"),
    ("keywords:existence", {"keywords": "river"}, r"'keywords' must be list\[str\]"),
    ("keywords:existence", {"keywords": []}, r"'keywords' must be list\[str\]"),
    ("keywords:existence", {"keywords": ["a"], "num": 3}, r"unexpected kwargs \['num'\]"),
    ("punctuation:no_comma", {"x": 1}, r"unexpected kwargs \['x'\]; accepted: none"),
    ("keywords:letter_frequency", {"letter": "ab", "let_frequency": 1, "let_relation": LESS},
     r"one ASCII letter"),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}, r"nth_paragraph \(3\)"),
    ("language:response_language", {"language": "xx"}, r"'language' must be one of"),
    ("detectable_content:postscript", [], r"kwargs must be a dict"),
])
def test_bad_kwargs(iid, kwargs, match):
  with pytest.raises(ValueError, match=match):
    rewards.get_verifier(iid).check("text", kwargs)


def test_none_values_ignored_and_integral_floats_accepted():
  v = rewards.get_verifier("length_constraints:number_words")
  hf_style = {"num_words": 2.0, "relation": LEAST, "keywords": None, "language": None}
  assert v.check("two words", hf_style)


def test_bad_mode_and_lengths():
  v = rewards.get_verifier("punctuation:no_comma")
  with pytest.raises(ValueError, match="mode must be one of"):
    v.check("x", {}, mode="lenient")
  with pytest.raises(ValueError, match="2 instruction ids but 1 kwargs"):
    rewards.check_all("x", ["punctuation:no_comma", "startend:quotation"], [{}])


def test_register_custom_verifier(isolated_registry):
  @rewards.register_verifier
  class EndsWithBang(rewards.Verifier):
    id = "test_custom:ends_with_bang"

    def _check(self, response, kw):
      return response.rstrip().endswith("!")

  assert rewards.get_verifier("test_custom:ends_with_bang").check("Yes!", {})
  assert "test_custom:ends_with_bang" in rewards.verifier_ids()


# --- text helpers ----------------------------------------------------------------


def test_text_helpers():
  assert text.count_words("don't stop-me now") == 5
  assert text.count_words("आज मौसम बहुत अच्छा है") == 5  # marks stay inside words
  assert text.split_sentences("Hi there. How are you?\nFine!") == [
      "Hi there.", "How are you?", "Fine!"]
  assert text.count_sentences("") == 0
  assert text.count_capital_words("I CANNOT go, OK? it's fine") == 4  # I, CAN, NOT, OK
  assert text.detect_language(EN) == "en"
  assert text.detect_language("1234") is None
