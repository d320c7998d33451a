"""A small synthetic math task set: integer arithmetic and countdown, with answers.

Arithmetic: evaluate an expression of 2-4 integers with + - * and parentheses;
`answer` is the exact integer. Countdown: combine `numbers` (each exactly once)
with + - * / into an expression equal to `target`; `answer` is one reference
expression (any correct one scores, see rewards.math_reward). Both are scored
by the "math_accuracy" reward.

Examples are deterministic in (seed, split, index). The split of a candidate is
fixed by a hash of its question (one in five is held out), so train and
held-out never share a question, whatever the seed.
"""
from __future__ import annotations

import hashlib
import itertools
import random
from fractions import Fraction
from typing import Any, Iterator

from rljax.rewards.math_reward import eval_expression

TASKS = ("arithmetic", "countdown")
SPLITS = ("train", "heldout")
_BOXED = " Put your final answer in \\boxed{}."


def _split_of(question: str) -> str:
  return "heldout" if int(hashlib.sha256(question.encode()).hexdigest(), 16) % 5 == 0 \
      else "train"


def _arithmetic(rng: random.Random) -> dict[str, Any]:
  n = rng.randint(2, 4)
  expr = str(rng.randint(2, 99))
  for _ in range(n - 1):
    op = rng.choice(["+", "-", "*"])
    operand = str(rng.randint(2, 30 if op == "*" else 99))
    wrap = " " in expr and rng.random() < 0.3
    expr = f"({expr}) {op} {operand}" if wrap else f"{expr} {op} {operand}"
  value, _ = eval_expression(expr)
  return {"task": "arithmetic", "question": f"Compute {expr}." + _BOXED,
          "answer": str(value), "numbers": [], "target": int(value)}


def _combine(rng: random.Random, items: list[tuple[Fraction, str]]) -> tuple[Fraction, str]:
  """Randomly reduces (value, expression) items to one with + - * /."""
  while len(items) > 1:
    i, j = rng.sample(range(len(items)), 2)
    (a, ea), (b, eb) = items[i], items[j]
    options = [(a + b, f"{ea} + {eb}"), (a * b, f"{ea} * {eb}")]
    if a > b:
      options.append((a - b, f"{ea} - {eb}"))
    if b != 0 and (a / b).denominator == 1:
      options.append((a / b, f"{ea} / {eb}"))
    value, expr = rng.choice(options)
    items = [x for k, x in enumerate(items) if k not in (i, j)] + [(value, f"({expr})")]
  return items[0]


def _countdown(rng: random.Random) -> dict[str, Any] | None:
  numbers = [rng.choice([rng.randint(1, 10), rng.randint(2, 25), rng.choice([25, 50, 75, 100])])
             for _ in range(rng.randint(3, 4))]
  value, expr = _combine(rng, [(Fraction(n), str(n)) for n in numbers])
  expr = expr[1:-1]  # outer parentheses
  if value.denominator != 1 or not 1 <= value <= 1000:
    return None
  target = int(value)
  question = (f"Using the numbers {numbers}, each exactly once, and the operations +, -, *, /, "
              f"write an expression that equals {target}. Put the expression in \\boxed{{}}.")
  return {"task": "countdown", "question": question, "answer": expr,
          "numbers": numbers, "target": target}


def make_math_example(seed: int, split: str, index: int) -> dict[str, Any]:
  """Example `index` of the (seed, split) stream (alternating tasks)."""
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
  task = TASKS[index % len(TASKS)]
  rng = random.Random(f"rljax-math:{seed}:{split}:{index}")
  for _ in range(1000):
    ex = _arithmetic(rng) if task == "arithmetic" else _countdown(rng)
    if ex is not None and _split_of(ex["question"]) == split:
      return {"id": f"math-{split}-{seed}-{index:07d}", "split": split, **ex}
  raise RuntimeError("could not draw a math example")  # pragma: no cover


def generate_math(seed: int, split: str, num_examples: int | None = None
                  ) -> Iterator[dict[str, Any]]:
  indices = itertools.count() if num_examples is None else range(num_examples)
  for i in indices:
    yield make_math_example(seed, split, i)
