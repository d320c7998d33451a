"""Rubric examples: checkable criteria, x- = x+ without criteria, determinism, splits."""
import collections
import itertools

import pytest

from rljax import rewards
from rljax.data import criteria, requests, rubric
from rljax.rewards import text as rtext
from tests.data.witness import witness

N_TRAIN, N_HELDOUT = 500, 150


@pytest.fixture(scope="module")
def examples():
  return (list(rubric.generate_examples(0, "train", N_TRAIN)) +
          list(rubric.generate_examples(0, "heldout", N_HELDOUT)) +
          list(rubric.generate_examples(7, "train", 100)))


def test_base_requests():
  allr = requests.all_requests()
  assert len(allr) >= 300
  assert len(requests.kinds()) >= 8
  texts = [t for _, t in allr]
  assert len(set(texts)) == len(texts)
  train = {t for _, t in requests.split_requests("train")}
  held = {t for _, t in requests.split_requests("heldout")}
  assert not train & held and train | held == set(texts)
  held_kinds = collections.Counter(k for k, _ in requests.split_requests("heldout"))
  assert set(held_kinds) == set(requests.kinds())  # stratified by kind
  with pytest.raises(ValueError, match="valid splits: train, heldout"):
    requests.split_requests("test")


def test_criteria_cover_all_verifiers():
  assert len(rubric.criteria_ids()) == 25


def test_every_criterion_is_checkable(examples):
  for ex in examples:
    ids, kwargs = ex["instruction_id_list"], ex["kwargs"]
    assert 1 <= len(ids) <= 4 and len(set(ids)) == len(ids)
    assert rewards.validate_instructions(ids, kwargs) == kwargs
    for iid, kw in zip(ids, kwargs):
      assert rewards.get_verifier(iid).check(witness(iid, kw), kw), (iid, kw)
    for a, b in itertools.combinations(ids, 2):
      assert not criteria.conflicts(a, b), (a, b)
    assert criteria.kwargs_compatible(list(zip(ids, kwargs)))
    # The reward runs on any response and gives per-criterion booleans.
    r, info = rewards.get_reward("csr")(["Some response."], [ex])
    assert 0.0 <= r[0] <= 1.0 and len(info["criteria"][0]) == len(ids)


def _mentions(text, key, value):
  t = text.lower()
  if key in ("relation", "let_relation", "capital_relation"):
    return ("fewer than" in t or "under" in t or "less than" in t) if value == "less than" \
        else "at least" in t
  if key == "prompt_to_repeat":
    return "repeat the request" in t
  if key == "language":
    return rtext.LANGUAGE_NAMES[value].lower() in t
  if isinstance(value, list):
    return all(f'"{v.lower()}"' in t for v in value)
  return str(value).lower() in t


def test_criteria_text_is_phrased_from_kwargs(examples):
  for ex in examples:
    for text, kw in zip(ex["criteria_text"], ex["kwargs"]):
      for key, value in kw.items():
        assert _mentions(text, key, value), (text, key, value)


def test_twins_and_spans(examples):
  for ex in examples:
    plus, minus = ex["prompt_plus"], ex["prompt_minus"]
    assert minus == ex["base_request"]
    assert plus == minus + "".join("\n" + c for c in ex["criteria_text"])
    for c in ex["criteria_text"]:
      assert c not in minus
    n = len(ex["criteria_text"])
    for (start, end), c in zip(ex["criteria_spans"], ex["criteria_text"]):
      assert plus[start:end] == "\n" + c
    assert rubric.remove_criteria(ex, range(n)) == minus
    assert rubric.remove_criteria(ex, []) == plus
    for j, ablated in enumerate(rubric.ablations(ex)):
      others = [c for k, c in enumerate(ex["criteria_text"]) if k != j]
      assert ablated == minus + "".join("\n" + c for c in others)
    if n >= 3:  # order and repeats of indices do not matter
      assert rubric.remove_criteria(ex, [2, 0, 2]) == rubric.remove_criteria(ex, [0, 2])
  with pytest.raises(IndexError, match="out of range"):
    rubric.remove_criteria(examples[0], [99])


def test_determinism_and_random_access():
  a = list(rubric.generate_examples(3, "train", 40))
  b = list(rubric.generate_examples(3, "train", 40))
  assert a == b
  assert rubric.make_example(3, "train", 17) == a[17]
  c = list(rubric.generate_examples(4, "train", 40))
  assert [x["prompt_plus"] for x in a] != [x["prompt_plus"] for x in c]
  assert len({x["id"] for x in a}) == 40


def test_splits_disjoint_and_coverage(examples):
  train = {e["base_request"] for e in examples if e["split"] == "train"}
  held = {e["base_request"] for e in examples if e["split"] == "heldout"}
  assert train and held and not train & held
  # A pass over the split visits every base request once before repeating.
  n_train = len(requests.split_requests("train"))
  first = [e["base_request"] for e in examples[:n_train]]
  assert len(set(first)) == n_train
  used = collections.Counter(i for e in examples for i in e["instruction_id_list"])
  assert set(used) == set(rubric.criteria_ids())
  sizes = collections.Counter(len(e["instruction_id_list"]) for e in examples)
  assert set(sizes) == {1, 2, 3, 4}


def test_generator_options_and_errors():
  ex = rubric.make_example(0, "train", 0, min_criteria=2, max_criteria=2,
                           ids=["punctuation:no_comma", "detectable_format:title",
                                "startend:quotation"])
  assert len(ex["instruction_id_list"]) == 2
  assert set(ex["instruction_id_list"]) <= {"punctuation:no_comma", "detectable_format:title",
                                            "startend:quotation"}
  with pytest.raises(ValueError, match="min_criteria <= max_criteria"):
    rubric.make_example(0, "train", 0, min_criteria=3, max_criteria=2)
  with pytest.raises(ValueError, match=r"no criterion for \['nope:x'\]"):
    rubric.make_example(0, "train", 0, ids=["nope:x"])
  with pytest.raises(ValueError, match="valid splits"):
    rubric.make_example(0, "dev", 0)


def test_register_new_criterion(isolated_registry):
  @rewards.register_verifier
  class Bang(rewards.Verifier):
    id = "test_rubric:bang"

    def _check(self, response, kw):
      return response.rstrip().endswith("!")

  criteria.register_criterion("test_rubric:bang", lambda rng, ctx: {},
                              lambda kw, rng: "End your response with an exclamation mark.")
  ex = rubric.make_example(0, "train", 5, ids=["test_rubric:bang"])
  assert ex["instruction_id_list"] == ["test_rubric:bang"]
  assert ex["prompt_plus"].endswith("\nEnd your response with an exclamation mark.")
