"""The reward a run's config names: one reward or a weighted sum, built-in or your own.

    reward.name     "csr" | "aon" | "math_accuracy" | any registered name | "pkg.module:fn"
    reward.options  {option: value} for that reward (e.g. {"mode": "loose"})
    reward.mode     "strict" | "loose", passed to rewards that take a `mode` option
    reward.guard    True | False, passed to rewards that take a `guard` option (csr, aon:
                    a degenerate answer earns 0, rljax/rewards/hygiene.py)
    reward.terms    () or several rewards with weights, each a dict
                    {"name": ..., "weight": 1.0, **options}; the run's reward is
                    sum_i weight_i * reward_i (each term logged as reward/<name>)

"pkg.module:fn" imports `pkg.module` and takes `fn`: a `Reward` (e.g. one made
with `@register_reward`) or a plain `fn(response, example, **options) -> float`
(or `(float, info_dict)`). The module must be importable (installed, or on
PYTHONPATH / next to the checkout).
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping, Sequence

import numpy as np

from rljax.rewards.reward_fn import Reward, get_reward


def resolve(name: str) -> Reward:
  """A Reward by registered name or by "module:attribute"."""
  if ":" not in name:
    import rljax.rewards  # noqa: F401  (registers the built-in rewards)
    return get_reward(name)
  module, _, attr = name.partition(":")
  try:
    mod = importlib.import_module(module)
  except ImportError as e:
    raise ValueError(f"reward {name!r}: cannot import module {module!r} ({e})") from e
  if not hasattr(mod, attr):
    public = sorted(a for a in vars(mod) if not a.startswith("_"))
    raise ValueError(f"reward {name!r}: module {module!r} has no {attr!r}; it has {public}")
  obj = getattr(mod, attr)
  if isinstance(obj, Reward):
    return obj
  if callable(obj):
    return Reward(name, obj)
  raise ValueError(f"reward {name!r}: {module}.{attr} is a {type(obj).__name__}, not a "
                   "function or Reward")


def bind(reward: Reward, options: Mapping[str, Any], mode: str | None,
         guard: bool | None = None) -> Reward:
  """`reward` with `options`; `mode` / `guard` only where the reward takes that option."""
  options = dict(options)
  if mode is not None and "mode" in reward.valid_options and "mode" not in options:
    options["mode"] = mode
  if guard is not None and "guard" in reward.valid_options and "guard" not in options:
    options["guard"] = bool(guard)
  return reward.with_options(**options) if options else reward


class WeightedReward:
  """sum_i w_i * r_i over several rewards; info keeps each term (and the first's details)."""

  def __init__(self, terms: Sequence[tuple[str, float, Reward]]):
    if not terms:
      raise ValueError("reward.terms is empty")
    self.terms = list(terms)
    self.name = "+".join(f"{w:g}*{n}" for n, w, _ in self.terms)

  def __call__(self, responses, examples, *, num_threads: int = 0, executor=None):
    total = np.zeros(len(responses), np.float32)
    info: dict[str, Any] = {}
    for name, weight, reward in self.terms:
      r, i = reward(responses, examples, num_threads=num_threads, executor=executor)
      total += np.float32(weight) * r
      for k, v in i.items():
        info.setdefault(k, v)
      info[f"term/{name}"] = r
    return total, info

  def __repr__(self) -> str:
    return f"<weighted reward {self.name}>"


def _plain(d: Any) -> dict:
  return d.to_dict() if hasattr(d, "to_dict") else dict(d or {})


def build_reward(rcfg) -> Reward | WeightedReward:
  """The reward of a config's `reward` section (see the module docstring)."""
  mode, guard = rcfg.get("mode", None), rcfg.get("guard", None)
  terms = list(rcfg.get("terms", ()) or ())
  if not terms:
    return bind(resolve(rcfg.name), _plain(rcfg.get("options", {})), mode, guard)
  built = []
  for i, term in enumerate(terms):
    term = _plain(term)
    if "name" not in term:
      raise ValueError(f"reward.terms[{i}] needs a 'name' (got {term!r})")
    name, weight = term.pop("name"), float(term.pop("weight", 1.0))
    built.append((name, weight, bind(resolve(name), term, mode, guard)))
  return WeightedReward(built)
