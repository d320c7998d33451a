"""Math rewards: final-answer accuracy and countdown expression checking.

`math_accuracy` takes the last `\\boxed{...}` (balanced braces) in the response,
or, when there is none, the last number; normalizes both it and
`example["answer"]` (LaTeX fractions, thousands separators, `$`, `\\text{}`,
trailing period, "x = ") and compares them as exact rationals when both parse
as numbers, else as normalized strings. For `example["task"] == "countdown"` it
instead checks the answer expression: only + - * / and parentheses, each of
`example["numbers"]` used exactly once, value equal to `example["target"]`.
"""
from __future__ import annotations

import ast
import collections
import re
from fractions import Fraction
from typing import Any

from rljax.rewards.reward_fn import register_reward

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def last_boxed(text: str) -> str | None:
  """Content of the last \\boxed{...} or \\fbox{...}, braces balanced; None if absent."""
  start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
  if start < 0:
    return None
  i = text.index("{", start) + 1
  depth, j = 1, i
  while j < len(text) and depth:
    depth += {"{": 1, "}": -1}.get(text[j], 0)
    j += 1
  return text[i:j - 1] if depth == 0 else None


def extract_answer(response: str) -> str | None:
  """The boxed answer, else the last number in the response, else None."""
  boxed = last_boxed(response)
  if boxed is not None:
    return boxed
  numbers = _NUMBER_RE.findall(response)
  return numbers[-1] if numbers else None


def _unwrap(s: str, command: str) -> str:
  """Replaces \\command{x} by x (non-nested)."""
  return re.sub(r"\\" + command + r"\{([^{}]*)\}", r"\1", s)


def normalize_answer(s: str) -> str:
  s = str(s).strip()
  for cmd in ("text", "textbf", "mathrm", "mbox", "boxed"):
    s = _unwrap(s, cmd)
  s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
  s = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", s)
  s = re.sub(r"\\frac(\d)(\d)", r"\1/\2", s)
  for junk in ("\\left", "\\right", "\\!", "\\,", "\\;", "$", "^\\circ", "^{\\circ}", "\\%", "%"):
    s = s.replace(junk, "")
  s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s.strip())  # "x = 5"
  s = s.strip().rstrip(".").strip()
  if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
    s = s.replace(",", "")
  return re.sub(r"\s+", "", s).lower()


def to_number(s: str) -> Fraction | None:
  """Exact value of "3", "-0.75", "3/4", "(3)/(4)"; None if not a plain number."""
  m = re.fullmatch(r"\(?(-?\d+(?:\.\d+)?)\)?(?:/\(?(-?\d+(?:\.\d+)?)\)?)?", s)
  if not m:
    return None
  num = Fraction(m.group(1))
  if m.group(2) is None:
    return num
  den = Fraction(m.group(2))
  return None if den == 0 else num / den


def answers_match(predicted: str | None, reference: Any) -> bool:
  if predicted is None:
    return False
  a, b = normalize_answer(predicted), normalize_answer(str(reference))
  x, y = to_number(a), to_number(b)
  if x is not None and y is not None:
    return x == y
  return a == b and a != ""


_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def eval_expression(expr: str) -> tuple[Fraction, list[int]]:
  """Exact value of an arithmetic expression and the integer literals it uses.

  Raises ValueError for anything but integers, + - * / and parentheses.
  """
  try:
    tree = ast.parse(expr.replace("×", "*").replace("÷", "/").replace("−", "-"), mode="eval")
  except SyntaxError as e:
    raise ValueError(f"not an arithmetic expression: {expr!r}") from e
  used: list[int] = []

  def walk(node):
    if isinstance(node, ast.Expression):
      return walk(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
      used.append(node.value)
      return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
      left, right = walk(node.left), walk(node.right)
      if isinstance(node.op, ast.Div) and right == 0:
        raise ValueError("division by zero")
      return _OPS[type(node.op)](left, right)
    raise ValueError(f"unsupported syntax in {expr!r}")

  return walk(tree), used


def countdown_correct(response: str, numbers: list[int], target: int) -> bool:
  """True iff the final expression uses each number exactly once and equals target."""
  candidate = last_boxed(response)
  if candidate is None:
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    if not lines:
      return False
    candidate = lines[-1]
  candidate = candidate.replace("\\times", "*").replace("\\div", "/").strip().rstrip(".")
  want = collections.Counter(int(n) for n in numbers)
  for side in candidate.split("="):  # "(3+5)*2 = 16" or "16 = (3+5)*2"
    try:
      value, used = eval_expression(side.strip())
    except ValueError:
      continue
    if collections.Counter(used) == want and value == target:
      return True
  return False


@register_reward("math_accuracy")
def math_accuracy(response, example, require_boxed=False):
  """1.0 if the final answer matches example["answer"] (or solves a countdown)."""
  if example.get("task") == "countdown":
    if "numbers" not in example or "target" not in example:
      raise ValueError("reward 'math_accuracy': a countdown example needs 'numbers' and "
                       f"'target'; it has keys {sorted(example)}")
    ok = countdown_correct(response, list(example["numbers"]), int(example["target"]))
    return float(ok), {"answer": last_boxed(response) or ""}
  if "answer" not in example:
    raise ValueError(f"reward 'math_accuracy' needs example['answer']; the example has keys "
                     f"{sorted(example)}")
  predicted = last_boxed(response) if require_boxed else extract_answer(response)
  return float(answers_match(predicted, example["answer"])), {"answer": predicted or ""}
