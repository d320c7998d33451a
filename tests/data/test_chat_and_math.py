"""Chat formatting of x+ / x- twins, and the math task set."""
import collections

import numpy as np
import pytest

from rljax import rewards
from rljax.data import math_tasks, rubric

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizer():
  """A small real transformers tokenizer with a Jinja chat template, built offline."""
  tokenizers = pytest.importorskip("tokenizers")
  transformers = pytest.importorskip("transformers")
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(
      {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2}, unk_token="[UNK]"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                                              chat_template=CHATML)


def test_format_chat_twins(tokenizer):
  for ex in rubric.generate_examples(2, "train", 20):
    plus, minus = rubric.format_chat(ex, tokenizer)
    assert plus == f"<|im_start|>user\n{ex['prompt_plus']}<|im_end|>\n<|im_start|>assistant\n"
    # Identical apart from the removed criteria: same template prefix and suffix.
    assert plus.replace(ex["prompt_plus"], ex["prompt_minus"]) == minus
    for c in ex["criteria_text"]:
      assert c not in minus
  ex = rubric.make_example(2, "train", 3, min_criteria=2)
  plus_sys, minus_sys = rubric.format_chat(ex, tokenizer, system="Be brief.")
  assert plus_sys.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
  assert minus_sys.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
  partial, _ = rubric.format_chat(ex, tokenizer, remove=[0])
  assert ex["criteria_text"][0] not in partial and ex["criteria_text"][1] in partial


def test_format_chat_duck_typed():
  class Fake:
    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
      assert tokenize is False and add_generation_prompt is True
      return "|".join(m["content"] for m in messages) + "<gen>"

  ex = rubric.make_example(0, "heldout", 0)
  assert rubric.format_chat(ex, Fake()) == (ex["prompt_plus"] + "<gen>",
                                            ex["prompt_minus"] + "<gen>")


def test_math_tasks():
  train = list(math_tasks.generate_math(0, "train", 200))
  held = list(math_tasks.generate_math(0, "heldout", 60))
  assert train == list(math_tasks.generate_math(0, "train", 200))  # deterministic
  assert math_tasks.make_math_example(0, "train", 11) == train[11]
  assert not {e["question"] for e in train} & {e["question"] for e in held}
  assert collections.Counter(e["task"] for e in train) == {"arithmetic": 100, "countdown": 100}
  reward = rewards.get_reward("math_accuracy")
  for examples in (train, held):
    refs = [f"Answer: \\boxed{{{e['answer']}}}" for e in examples]
    r, _ = reward(refs, examples)
    np.testing.assert_array_equal(r, 1.0)  # the reference answers score 1
    wrong = [f"\\boxed{{{e['target'] + 1}}}" for e in examples]
    r, _ = reward(wrong, examples)
    np.testing.assert_array_equal(r, 0.0)
  for e in train:
    if e["task"] == "countdown":
      assert 3 <= len(e["numbers"]) <= 4 and 1 <= e["target"] <= 1000
  with pytest.raises(ValueError, match="valid splits"):
    math_tasks.make_math_example(0, "dev", 0)
