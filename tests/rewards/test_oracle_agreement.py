"""Agreement with if-verifiable (Google's IFEval checkers, repackaged) on a fuzz corpus.

The oracle runs offline for 23 of the 25 ids. Two need NLTK's Punkt English
model, a download: `number_sentences` (Punkt sentence count) and
`capital_word_frequency` (`nltk.word_tokenize`, which sentence-splits first).
For those the oracle is run with an *untrained* Punkt (no data needed), which
makes it an approximate oracle; both implementations use langdetect seeded
with 0, so language checks are deterministic on both sides.

Disagreements, and why:
* number_sentences: untrained Punkt ends a sentence after every abbreviation
  ("Mr. Smith", "e.g. this", "vs. that"); ours, like the English Punkt model
  IFEval uses, does not. The corpus contains such abbreviations on purpose and
  the test asserts that every disagreement is in a response that has one.
* None on the other ids in this corpus. Known differences it does not
  exercise: keywords / markers with regex metacharacters (IFEval passes them to
  `re` unescaped, so "c++" raises there; ours matches literally), and word
  counts in scripts with combining marks follow current NLTK (the `regex`
  module's \\w) rather than the `re`-based NLTK of IFEval's 2023 release.
"""
import collections
import logging

import pytest

from rljax import rewards
from tests.rewards.fuzz_corpus import ABBREVIATED, make_corpus

pytest.importorskip("if_verifiable")
pytest.importorskip("nltk")

APPROXIMATE = {"length_constraints:number_sentences", "change_case:capital_word_frequency"}
NUM_RESPONSES = 100


@pytest.fixture
def oracle(monkeypatch):
  """if-verifiable's IFEval evaluator, made offline and deterministic."""
  import nltk.tokenize
  from langdetect import DetectorFactory
  from nltk.tokenize.punkt import PunktSentenceTokenizer

  from if_verifiable.common import evaluate_instructions
  from if_verifiable.ifeval import instructions_util
  from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

  punkt = PunktSentenceTokenizer()  # untrained: no download
  monkeypatch.setattr(instructions_util, "_get_sentence_tokenizer", lambda: punkt)
  monkeypatch.setattr(nltk.tokenize, "_get_punkt_tokenizer", lambda language="english": punkt)
  monkeypatch.setattr(DetectorFactory, "seed", 0)
  logging.getLogger().setLevel(logging.CRITICAL)  # the oracle logs undetectable languages

  def run(response, ids, kwargs):
    results, _ = evaluate_instructions(response, ids, kwargs, "", INSTRUCTION_DICT)
    by_id = {r.instruction_id: (r.strict_pass, r.loose_pass) for r in results}
    return [by_id.get(i, (False, False)) for i in ids]  # empty response -> no results

  run.ids = sorted(INSTRUCTION_DICT)
  return run


def test_oracle_agreement(oracle, capsys):
  assert len(oracle.ids) == 25
  corpus = make_corpus(seed=0, n=NUM_RESPONSES, ids=oracle.ids)
  agree = collections.Counter()
  total = collections.Counter()
  passes = collections.defaultdict(set)
  disagreements = []
  for response, ids, kwargs in corpus:
    theirs = oracle(response, ids, kwargs)
    ours = list(zip(rewards.check_all(response, ids, kwargs, "strict"),
                    rewards.check_all(response, ids, kwargs, "loose")))
    for iid, kw, o, t in zip(ids, kwargs, ours, theirs):
      for mode, a, b in (("strict", o[0], t[0]), ("loose", o[1], t[1])):
        total[iid] += 1
        agree[iid] += a == b
        passes[iid].add(a)
        if a != b:
          disagreements.append((iid, mode, a, b, response, kw))

  rate = sum(agree.values()) / sum(total.values())
  exact = [i for i in oracle.ids if i not in APPROXIMATE]
  exact_rate = sum(agree[i] for i in exact) / sum(total[i] for i in exact)
  with capsys.disabled():
    print(f"\noracle agreement: {rate:.4f} overall on {sum(total.values())} checks; "
          f"{exact_rate:.4f} on the {len(exact)} ids the oracle runs exactly")
    for iid in oracle.ids:
      if agree[iid] != total[iid]:
        print(f"  {iid}: {agree[iid]}/{total[iid]}")

  for iid in oracle.ids:  # the corpus exercises both outcomes of every check
    assert passes[iid] == {True, False}, iid
  assert exact_rate == 1.0, [d for d in disagreements if d[0] in exact][:5]
  assert agree["change_case:capital_word_frequency"] == total[
      "change_case:capital_word_frequency"]
  for iid, mode, a, b, response, kw in disagreements:
    assert iid == "length_constraints:number_sentences"
    assert any(abbr in response for abbr in ABBREVIATED), response
  assert rate > 0.99
