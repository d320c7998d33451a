"""IFBench verifiers by hand: golden cases, kwargs errors, strict vs loose, the verb test."""
import pytest

from rljax import rewards
from rljax.rewards import evaluation

IFBENCH_PREFIXES = ("count", "ratio", "words", "sentence", "format", "custom", "repeat")


def check(iid, response, mode="strict", **kw):
  return rewards.get_verifier(iid).check(response, kw, mode)


def test_58_types():
  ids = [i for i in rewards.verifier_ids() if evaluation.benchmark_of(i) == "ifbench"]
  assert len(ids) == 58 and all(i.split(":")[0] in IFBENCH_PREFIXES for i in ids)
  assert evaluation.benchmark_of("keywords:existence") == "ifeval"


@pytest.mark.parametrize("iid,response,kw,want", [
    ("count:word_count_range", "one two three", dict(min_words=2, max_words=3), True),
    ("count:word_count_range", "one two three four", dict(min_words=2, max_words=3), False),
    ("count:conjunctions", "and And but", dict(small_n=3), True),  # surface forms count
    ("count:numbers", "It costs 3.50 or 1,000.", dict(N=2), True),
    ("count:keywords_multiple", "a b b c c c d d d d d e e e e e e e",
     dict(keyword1="a", keyword2="b", keyword3="c", keyword4="d", keyword5="e"), True),
    ("ratio:sentence_type", "Cats purr. Dogs bark. Why?", {}, True),
    ("ratio:sentence_type", "Cats purr. Dogs bark? Why?", {}, False),
    ("ratio:stop_words", "!!!", dict(percentage=50), False),  # no words: IFBench raises
    ("words:alphabet", "Yak zebra apple", {}, True),
    ("words:palindrome", " ".join(["level"] * 10), {}, True),
    ("format:parentheses", "(a [b {c (d [e] f) g} h] i)", {}, True),
    ("format:parentheses", "(((())", {}, False),
    ("format:options", "b)", dict(options="a), b), c), d)"), True),
    ("format:options", "B", dict(options="a), b), c), d)"), False),
    ("format:options", "Maybe.", dict(options="yes/no/maybe"), True),
    ("custom:multiples", "14, 21, 28, 35, 42, 49", {}, True),
    ("custom:date_format_list", "1800-02-29, 1821-12-31", {}, True),
    ("custom:date_format_list", "1800-04-31", {}, False),
    ("repeat:repeat_span", "b c", dict(prompt_to_repeat="a b c d", n_start=1, n_end=3), True),
    ("repeat:repeat_change", "Make it so", dict(prompt_to_repeat="Do it so"), True),
    ("repeat:repeat_change", "Do it so", dict(prompt_to_repeat="Do it so"), False),
    ("format:line_indent", "a\n b\n\n  c", {}, True),
])
def test_golden(iid, response, kw, want):
  assert check(iid, response, **kw) is want


def test_loose_drops_a_chatty_first_line():
  r = "Sure, here it is:\nHelloWorld"
  assert not check("format:no_whitespace", r)
  assert check("format:no_whitespace", r, mode="loose")


@pytest.mark.parametrize("response,want", [
    ("Write a poem about the sea.", True), ("Understand the theory first.", True),
    ("Prove that x is prime.", True), ("Exploring the city was fun.", True),
    ("Consider the following.", True), ("Builds bridges daily.", True),
    ("The cat sat.", False), ("Galois theory is deep.", False), ("In 2020, we met.", False),
    ("Something happened.", False), ("42 is the answer.", False),
])
def test_start_verb_hand_labels(response, want):
  assert check("words:start_verb", response) is want


def test_kwargs_errors_name_the_id():
  with pytest.raises(ValueError, match=r"count:numbers: missing kwarg 'N'"):
    check("count:numbers", "1 2")
  with pytest.raises(ValueError, match=r"sentence:keyword: kwarg 'N' must be int >= 1"):
    check("sentence:keyword", "a.", word="a", N=0)
  with pytest.raises(ValueError, match="unexpected kwargs"):
    check("format:title_case", "A B", bogus=1)
