"""The synthetic rubric language of studies 4 and 5: criteria, rewards, replay prompts."""
import numpy as np
import pytest

from experiments import rubric_toy as toy

C = toy.CONTENT0  # content index i is token C + i


def test_each_criterion_by_hand():
  resp = [3, 5, 3, 9]
  assert toy.satisfied(("start", 3), resp) and not toy.satisfied(("start", 5), resp)
  assert toy.satisfied(("end", 9), resp) and not toy.satisfied(("end", 3), resp)
  assert toy.satisfied(("contain", 5), resp) and not toy.satisfied(("contain", 7), resp)
  assert toy.satisfied(("exclude", 7), resp) and not toy.satisfied(("exclude", 5), resp)
  for kind in ("start", "end", "contain"):  # an empty answer satisfies none of them
    assert not toy.satisfied((kind, 3), [])
  assert toy.satisfied(("exclude", 3), [])
  with pytest.raises(ValueError, match="unknown criterion"):
    toy.satisfied(("title", 3), resp)


def test_response_parsing_stops_at_eos_and_marks_non_content():
  ids = [C + 2, toy.REQ0, C + 4, toy.EOS, C + 9, toy.PAD]
  assert toy.response_content(ids) == [2, -1, 4]
  # the token after eos does not count: 'end 9' fails, 'end 4' holds
  p = toy.Prompt(0, (("end", 4), ("contain", 9), ("start", 2)))
  np.testing.assert_array_equal(toy.score(p, ids), [1.0, 0.0, 1.0])


def test_csr_and_aon():
  p = toy.Prompt(1, (("start", 0), ("exclude", 5), ("contain", 7)))
  responses = [[C + 0, C + 7, toy.EOS],          # all three
               [C + 0, C + 5, toy.EOS],          # start only (5 present, 7 absent)
               [C + 1, C + 5, C + 2, toy.EOS]]   # none
  r = toy.rewards([p] * 3, responses)
  np.testing.assert_allclose(r["csr_B"], [1.0, 1 / 3, 0.0], rtol=1e-6)
  np.testing.assert_array_equal(r["aon_B"], [1.0, 0.0, 0.0])
  m = toy.eval_metrics([p, toy.Prompt(0, (("end", 3),))],
                       [responses[1], [C + 3, toy.EOS]])
  assert m["csr"] == pytest.approx((1 / 3 + 1) / 2)          # mean over prompts
  assert m["instruction_acc"] == pytest.approx(2 / 4)        # pooled over criteria
  assert m["aon"] == pytest.approx(0.5)
  assert m["acc/end"] == 1.0 and m["acc/exclude"] == 0.0


def test_replay_prompts_drop_the_criteria():
  p = toy.Prompt(2, (("start", 1), ("end", 2), ("exclude", 3)))
  plus = toy.plus_tokens(p)
  crit = [t for t in plus if toy.CRIT0 <= t < toy.CONTENT0]
  assert len(plus) == toy.MAX_PROMPT and len(crit) == 3
  assert toy.minus_tokens(p) == [toy.BOS, toy.REQ0 + 2, toy.ANS]
  abl = toy.ablation_tokens(p)
  assert len(abl) == 3
  for j, a in enumerate(abl):
    assert [t for t in a if t not in plus] == [] and len(a) == len(plus) - 1
    assert crit[j] not in a


def test_prompts_are_satisfiable_and_splits_disjoint():
  rng = np.random.default_rng(0)
  train = toy.prompts(rng, 300, heldout=False)
  held = toy.prompts(rng, 100, heldout=True)
  assert not set(train) & set(held)
  for p in train + held:
    kinds = [k for k, _ in p.criteria]
    toks = [t for _, t in p.criteria]
    assert 1 <= len(p.criteria) <= toy.MAX_CRITERIA
    assert len(set(kinds)) == len(kinds) and len(set(toks)) == len(toks)


def test_sft_answers_follow_the_rubric_when_told_to():
  rng = np.random.default_rng(1)
  for _ in range(300):
    p = toy.random_prompt(rng)
    full = toy.sft_response(p, rng, p_follow=1.0)
    assert toy.score(p, full).all(), (p, full)
    assert full[-1] == toy.EOS and 2 <= len(full) - 1 <= toy.MAX_LEN
    free = toy.sft_response(p, rng, p_follow=0.0)  # the topic's unconstrained answer
    assert set(toy.response_content(free)) <= set(toy.topic(p.request))


def test_credit_labels_mark_the_deciding_tokens():
  """start: the first token; end: the last content token and the eos after it; contain /
  exclude k: every occurrence of k; nothing after eos, nothing for an empty answer."""
  ids = [C + 3, C + 5, C + 7, C + 5, C + 9, toy.EOS, C + 5, toy.PAD]
  lab = lambda *crit: toy.credit_labels(toy.Prompt(0, tuple(crit)), ids).tolist()
  assert lab(("start", 4)) == [1, 0, 0, 0, 0, 0, 0, 0]
  assert lab(("end", 9)) == [0, 0, 0, 0, 1, 1, 0, 0]
  assert lab(("contain", 5)) == [0, 1, 0, 1, 0, 0, 0, 0]      # satisfied: both 5s
  assert lab(("exclude", 5)) == [0, 1, 0, 1, 0, 0, 0, 0]      # violated by both 5s
  assert lab(("exclude", 8)) == [0] * 8                       # satisfied by absence
  assert lab(("start", 3), ("end", 1), ("exclude", 7)) == [1, 0, 1, 0, 1, 1, 0, 0]
  cut = [C + 3, C + 9]  # no eos: the length cap; 'end' marks the last token only
  assert toy.credit_labels(toy.Prompt(0, (("end", 9),)), cut).tolist() == [0, 1]
  assert toy.credit_labels(toy.Prompt(0, (("start", 3),)), [toy.EOS, C + 3]).tolist() == [0, 0]


def test_long_answers_put_a_few_per_cent_of_the_tokens_on_the_criteria():
  """The long-answer warm start's data (40–56 content tokens): the deciding tokens are a
  few per cent of an answer (the LLM regime), against about a quarter in the short toy."""
  rng = np.random.default_rng(0)

  def share(min_len, max_len):
    n = lab = 0
    for _ in range(400):
      p = toy.random_prompt(rng)
      r = toy.sft_response(p, rng, 1.0, min_len, max_len)
      lab += toy.credit_labels(p, r).sum()
      n += len(r)
    return lab / n

  assert 0.03 < share(40, 56) < 0.09
  assert share(4, toy.MAX_LEN) > 0.2
