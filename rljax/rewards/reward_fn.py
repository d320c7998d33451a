"""Batched reward functions on decoded text, registered under kind "reward".

Interface the trainer calls (every registered reward):

    rewards_N, info = reward(responses, examples, num_threads=0)

`responses` is a list of N decoded strings, `examples` the N prompt dicts they
answer (a group's G rows repeat the same dict). `rewards_N` is float32 [N];
`info` maps names to per-response values (lists of length N; numbers become
arrays) for logging. `num_threads > 0` (or `executor=`) scores in a thread pool.

Adding a reward takes a few lines: a per-response function returning a float
(or `(float, info_dict)`), decorated with `register_reward`:

    @register_reward("short")
    def short(response, example, limit=200):
      return float(len(response) <= limit)

    get_reward("short", limit=100)(responses, examples)

Keyword arguments of the function after (response, example) are its options;
`get_reward(name, **options)` binds them (unknown options raise, listing valid).
"""
from __future__ import annotations

import concurrent.futures
import inspect
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rljax import registry
from rljax.rewards import verifier
from rljax.rewards.hygiene import degenerate

KIND = "reward"


class RewardError(ValueError):
  """A reward function that raised or returned something other than a number."""


class Reward:
  """A named per-response scoring function lifted to batches."""

  def __init__(self, name: str, fn: Callable[..., Any], options: Mapping[str, Any] | None = None):
    self.name = name
    self.fn = fn
    params = list(inspect.signature(fn).parameters.values())
    if len(params) < 2:
      raise TypeError(f"reward {name!r}: fn must take (response, example, **options)")
    self.valid_options = {p.name: p.default for p in params[2:]}
    self.options = dict(options or {})
    bad = sorted(set(self.options) - set(self.valid_options))
    if bad:
      valid = ", ".join(sorted(self.valid_options)) or "none"
      raise ValueError(f"reward {name!r} has no options {bad}; valid options: {valid}")

  def with_options(self, **options: Any) -> "Reward":
    return Reward(self.name, self.fn, {**self.options, **options})

  def score(self, response: str, example: Mapping[str, Any]) -> tuple[float, dict[str, Any]]:
    try:
      out = self.fn(response, example, **self.options)
    except Exception as e:  # noqa: BLE001 - re-raised naming the reward and the example
      raise RewardError(f"reward {self.name!r} raised {type(e).__name__}: {e} (example "
                        f"{_example_id(example)}, response {response[:40]!r}); a reward is "
                        "fn(response, example, **options) -> float") from e
    value, info = out if isinstance(out, tuple) else (out, {})
    try:
      return float(value), dict(info)
    except (TypeError, ValueError) as e:
      raise RewardError(f"reward {self.name!r} returned {out!r} (example "
                        f"{_example_id(example)}); expected a float or (float, dict)") from e

  def __call__(self, responses: Sequence[str], examples: Sequence[Mapping[str, Any]], *,
               num_threads: int = 0,
               executor: concurrent.futures.Executor | None = None
               ) -> tuple[np.ndarray, dict[str, Any]]:
    if isinstance(responses, str):
      raise TypeError(f"reward {self.name!r}: responses must be a list of str, not a str")
    responses, examples = list(responses), list(examples)
    if len(responses) != len(examples):
      raise ValueError(f"reward {self.name!r}: {len(responses)} responses but "
                       f"{len(examples)} examples")
    if executor is not None:
      results = list(executor.map(self.score, responses, examples))
    elif num_threads > 0 and len(responses) > 1:
      with concurrent.futures.ThreadPoolExecutor(num_threads) as pool:
        results = list(pool.map(self.score, responses, examples))
    else:
      results = [self.score(r, e) for r, e in zip(responses, examples)]
    rewards = np.asarray([v for v, _ in results], dtype=np.float32).reshape(len(results))
    return rewards, _collate([i for _, i in results])

  def __repr__(self) -> str:
    return f"<reward {self.name} {self.options}>"


def _example_id(example: Mapping[str, Any]) -> str:
  for k in ("id", "key"):
    if k in example:
      return repr(example[k])
  return repr(str(example.get("prompt", ""))[:40])


def _collate(infos: list[dict[str, Any]]) -> dict[str, Any]:
  """Per-key lists over the batch; all-numeric keys become numpy arrays."""
  keys = []
  for info in infos:
    keys += [k for k in info if k not in keys]
  out = {}
  for k in keys:
    vals = [info.get(k) for info in infos]
    numeric = all(isinstance(v, (bool, int, float, np.number)) for v in vals)
    out[k] = np.asarray(vals) if numeric else vals
  return out


def register_reward(name: str, **default_options: Any) -> Callable[[Callable[..., Any]], Reward]:
  """Decorator: registers `fn(response, example, **options)` as reward `name`."""

  def deco(fn: Callable[..., Any]) -> Reward:
    reward = Reward(name, fn, default_options)
    registry.register(KIND, name)(reward)
    return reward

  return deco


def get_reward(name: str, **options: Any) -> Reward:
  """The registered reward, with `options` bound; unknown names list valid ones."""
  reward = registry.get(KIND, name)
  return reward.with_options(**options) if options else reward


def reward_names() -> list[str]:
  return registry.names(KIND)


# --- instruction-following rewards -------------------------------------------------


def _field(example: Mapping[str, Any], key: str, reward: str) -> Any:
  if key not in example:
    raise ValueError(f"reward {reward!r} needs example[{key!r}]; the example has keys "
                     f"{sorted(example)}")
  return example[key]


def criteria_results(response: str, example: Mapping[str, Any], mode: str = "strict",
                     reward: str = "csr") -> list[bool]:
  """Per-criterion booleans for an example with `instruction_id_list` and `kwargs`."""
  ids = _field(example, "instruction_id_list", reward)
  if not ids:
    raise ValueError(f"reward {reward!r}: example {example.get('id', '')!r} has no criteria")
  return verifier.check_all(response, ids, _field(example, "kwargs", reward), mode)


def _if_info(passed: list[bool], example: Mapping[str, Any]) -> tuple[float, dict[str, Any]]:
  """(aon, info) with the per-criterion booleans and their ids for logging."""
  aon = float(all(passed))
  return aon, {"criteria": passed, "instruction_ids": list(example["instruction_id_list"]),
               "csr": sum(passed) / len(passed), "aon": aon}


def _guarded(info: dict[str, Any], response: str, guard: bool) -> dict[str, Any]:
  """With `guard`, a degenerate answer (`rljax.rewards.hygiene`) earns 0 (csr and aon)."""
  kind = degenerate(response) if guard else None
  info.update(degenerate=float(kind is not None), degenerate_kind=kind or "")
  if kind is not None:
    info.update(csr=0.0, aon=0.0)
  return info


@register_reward("csr")
def csr(response, example, mode="strict", guard=True):
  """Constraint satisfaction rate: fraction of criteria the response satisfies (0 for a
  degenerate answer with `guard`)."""
  _, info = _if_info(criteria_results(response, example, mode, "csr"), example)
  info = _guarded(info, response, guard)
  return info["csr"], info


@register_reward("aon")
def aon(response, example, mode="strict", guard=True):
  """All-or-nothing: 1 iff every criterion is satisfied (0 for a degenerate answer with
  `guard`)."""
  _, info = _if_info(criteria_results(response, example, mode, "aon"), example)
  info = _guarded(info, response, guard)
  return info["aon"], info
